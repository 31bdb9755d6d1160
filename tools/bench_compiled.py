"""What compiling costs and what fusing buys: tb.jit's capture cost, and the fused chains of a block's program
run three ways (numpy one op at a time, numpy in place as fuse.py runs them, and numexpr when installed).

Dispatch: what a call of a compiled function costs around its replay (the arguments' key, the modules'
fingerprint, the gradient guards, and taking a program copy of its own, so that threads can replay at once), on
the smallest replay there is (the tiny block's forward on one token): the compiled call against `Program.run`
alone, interleaved, median ratio and spread.

Fusion: every group of the compiled block's program that runs as generated C (cpu_kernels.py) is timed on its
real arrays: its primitives one call at a time (its fallback), and the generated loop (where groups fall back to
numpy's in-place chains, also numpy in place and numexpr).

Capture: the first two calls of a compiled forward+backward run eagerly while recorded (the second also builds
the program); their times are set against one eager call, medians over fresh compilations. Fusion: every chain
of the compiled block's program is timed on its real arrays, interleaved round by round, and the table gives the
summed time of all chains per engine with the median ratio to numpy's op-at-a-time and its spread.

    python tools/bench_compiled.py [--sizes tiny small medium] [--rounds 9] [--only dispatch|capture|fusion]

Pin threads for a fair comparison on a small machine:
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 NUMEXPR_NUM_THREADS=1 python tools/bench_compiled.py
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import tinygrad_block as tb
from tinygrad_block import cpu_kernels, nn
from tinygrad_block.fuse import Chain

SIZES = {"tiny": (2, 16, 64, 4, 2, 172), "small": (4, 128, 256, 8, 4, 688), "medium": (2, 256, 512, 8, 2, 1376)}
NUMEXPR = {"add": "({} + {})", "subtract": "({} - {})", "multiply": "({} * {})", "divide": "({} / {})",
           "negative": "(-{})", "exp": "exp({})", "log": "log({})", "sqrt": "sqrt({})", "sin": "sin({})",
           "cos": "cos({})", "reciprocal": "(1 / {})", "maximum": "where({0} > {1}, {0}, {1})"}


def block_case(size: str):
    B, L, d, H, H_kv, d_ff = SIZES[size]
    cfg = nn.BlockConfig(d, H, H_kv, d_ff, max_seq_len=L)
    block = nn.TransformerBlock(cfg, generator=tb.Generator(0))
    x = tb.randn(B, L, d, generator=tb.Generator(1))
    dout = tb.randn(B, L, d, generator=tb.Generator(2))

    def step(x):
        out = block(x)
        out.backward(dout)
        return out
    return block, x, step


def capture_cost(size: str, rounds: int) -> tuple[float, float, float]:
    """Medians of (one eager call, the first compiled call, the second compiled call), in seconds."""
    eager, first, second = [], [], []
    for _ in range(rounds):
        block, x, step = block_case(size)
        compiled = tb.jit(step)
        for times, run in ((eager, step), (first, compiled), (second, compiled)):
            block.zero_grad()
            t0 = time.perf_counter()
            run(x.detach().requires_grad_())
            times.append(time.perf_counter() - t0)
    return statistics.median(eager), statistics.median(first), statistics.median(second)


def chain_runners(chain: Chain) -> dict:
    """The chain as numpy op at a time, as fuse.py runs it (in place), and as one numexpr expression."""
    first = chain.first
    args = [t.data for t in first.ins]
    # each link's operands, None standing for the result so far: (f, [None]) or (f, [None, b]) or (f, [b, None])
    links = [(f, [None] if other is None else [None, other.data] if leads else [other.data, None])
             for f, other, leads in chain.links]

    def separate():
        r = first.f(*args)
        for f, ops in links:
            r = f(*[r if a is None else a for a in ops])
        return r

    def in_place():
        r = first.f(*args)
        for f, ops in links:
            f(*[r if a is None else a for a in ops], out=r)
        return r
    runners = {"numpy, op at a time": separate, "numpy in place (fuse.py)": in_place}
    try:
        import numexpr
    except ImportError:
        return runners
    names, env = {}, {}

    def var(a):
        key = id(a)
        if key not in names:
            names[key] = f"v{len(names)}"
            env[names[key]] = a
        return names[key]
    expr = NUMEXPR[first.f.__name__].format(*[var(a) for a in args])
    for f, ops in links:
        expr = NUMEXPR[f.__name__].format(*[expr if a is None else var(a) for a in ops])
    compiled = numexpr.NumExpr(expr, signature=[(n, float if a.dtype == np.float32 else np.float64)
                                                for n, a in env.items()])
    values = list(env.values())
    runners["numexpr"] = lambda: compiled(*values)
    return runners


def fusion(size: str, rounds: int) -> dict:
    """Summed seconds per engine over every group of the block's compiled program that runs as generated C, per
    round: its primitives one call at a time (the group's fallback, each instruction's own kernel, as an unfused replay
    runs them) against the generated loop. A group whose fallback is a numpy chain (fuse.py's in-place rule, no
    C compiler's groups) is timed as chain_runners does, with the generated C beside it."""
    block, x, step = block_case(size)
    compiled = tb.jit(step)
    for _ in range(3):
        block.zero_grad()
        compiled(x.detach().requires_grad_())
    program = compiled.program
    for kernel in program.plain:               # fill every slot with this replay's arrays, unfused
        kernel.run()
    runners = []
    for k in program.kernels:
        if not isinstance(k, cpu_kernels.Generated):
            continue
        if isinstance(k.fallback, Chain):
            runners.append(chain_runners(k.fallback) | {"generated C (cpu_kernels.py)": k.run})
        else:
            runners.append({"numpy, op at a time": k.fallback.run, "generated C (cpu_kernels.py)": k.run})
    engines = [e for e in runners[0] if all(e in r for r in runners)] if runners else []
    times = {e: [] for e in engines}
    for r in range(rounds):
        for e in engines[r % len(engines):] + engines[:r % len(engines)]:
            t0 = time.perf_counter()
            for run in runners:
                for _ in range(20):
                    run[e]()
            times[e].append((time.perf_counter() - t0) / 20)
    return {"chains": len(runners), "times": times}


def dispatch(rounds: int, calls: int = 300) -> dict:
    """Seconds per call of the compiled one-token forward, of its Program.run alone, and of the thread safety in
    the call (taking and giving back a program copy, the lock around the replay count), per round."""
    block = nn.TransformerBlock(nn.BlockConfig(*SIZES["tiny"][2:], max_seq_len=16), generator=tb.Generator(0))
    x = tb.randn(1, 1, block.cfg.d_model, generator=tb.Generator(1))
    compiled = tb.jit(lambda x: block(x))
    with tb.no_grad():
        for _ in range(3):
            compiled(x)
        program, args = compiled.program, [x]
        entry = next(iter(compiled.cache.values()))

        def copy_and_lock():                      # what lets threads replay at once: a program copy, the lock
            mine = entry.take()
            entry.give(mine)
            with compiled.lock:
                pass
        runs = {"compiled call": lambda: compiled(x), "Program.run alone": lambda: program.run(args),
                "copy + lock alone": copy_and_lock}
        times = {name: [] for name in runs}
        for r in range(rounds):
            for name in list(runs)[r % 3:] + list(runs)[:r % 3]:
                t0 = time.perf_counter()
                for _ in range(calls):
                    runs[name]()
                times[name].append((time.perf_counter() - t0) / calls)
    return times


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", choices=list(SIZES), default=list(SIZES))
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--only", choices=("dispatch", "capture", "fusion"), help="one part alone")
    args = p.parse_args(argv)
    if args.only in (None, "dispatch"):
        times = dispatch(args.rounds)
        ratios = [c / r for c, r in zip(times["compiled call"], times["Program.run alone"])]
        print("dispatch: the tiny block's forward on one token, per call (median over rounds)")
        for name, ts in times.items():
            print(f"  {name:<20} {statistics.median(ts) * 1e6:8.1f} us")
        share = [t / c for t, c in zip(times["copy + lock alone"], times["compiled call"])]
        print(f"  compiled call / Program.run: {statistics.median(ratios):.3f}x "
              f"({min(ratios):.3f}-{max(ratios):.3f}); copy + lock / compiled call: {statistics.median(share):.2%} "
              f"({min(share):.2%}-{max(share):.2%})")
    if args.only not in (None, "capture", "fusion"):
        return
    if args.only != "fusion":
        print("capture cost: one eager forward+backward, then the first two calls of tb.jit (recorded; the second "
              "builds the program)")
    for size in args.sizes if args.only != "fusion" else []:
        eager, first, second = capture_cost(size, args.rounds)
        print(f"  {size:<7} eager {eager * 1e3:8.2f} ms   first {first * 1e3:8.2f} ms ({first / eager:.2f}x)   "
              f"second {second * 1e3:8.2f} ms ({second / eager:.2f}x)")
    if args.only == "capture":
        return
    print("fused groups of the block's forward+backward that run as generated C, per engine (median, ratio to op "
          "at a time)")
    for size in args.sizes:
        result = fusion(size, args.rounds)
        times = result["times"]
        base = times["numpy, op at a time"]
        for engine, ts in times.items():
            ratios = [t / b for t, b in zip(ts, base)]
            print(f"  {size:<7} {result['chains']:3d} groups  {engine:<30} {statistics.median(ts) * 1e6:9.1f} us  "
                  f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
