"""How long tb.jit's first compiled training step takes: the text demo's training step (tools/bench_train.py),
each of its first calls timed, in a fresh process with a cold kernel cache (an empty folder: every library built
by the C compiler) and again in a fresh process with that folder warm (every library read from disk).

    python tools/bench_compile.py [--rounds 3] [--model text]

The first two calls run eagerly while tb.jit captures (the first also builds kernels.MATH's exp and log when the
cache is cold); the third builds the program, compiles its generated kernels and replays it: that is the compiled
step's cost. One thread each (OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1); medians over the rounds, with min-max.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CALLS = 5


def child(model: str) -> None:
    """In the fresh process: the demo's compiled step, the seconds of each of its first CALLS calls, as JSON."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tools")]
    import tinygrad_block as tb
    from bench_train import demo_data, ours
    from tinygrad_block import cpu_kernels
    from tinygrad_block.nn import LM
    cfg, batches = demo_data(model, 16, 64, tb.Generator(0))
    step = ours(LM(cfg, generator=tb.Generator(1), dtype="float32"), jit=True, fuse=True)
    seconds = []
    for i in range(CALLS):
        t0 = time.perf_counter()
        step(*batches[i % len(batches)])
        seconds.append(time.perf_counter() - t0)
    comp = cpu_kernels.compiler()
    print(json.dumps({"seconds": seconds, "built": comp.built if comp else None}))


def run(home: str, model: str) -> dict:
    """One fresh process whose kernel cache lies under `home`."""
    env = os.environ | {"HOME": home, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, __file__, "--child", model], env=env, capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", choices=("text", "induction"), default="text")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    cold, warm = [], []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as home:
            cold.append(run(home, args.model))
            warm.append(run(home, args.model))
        print(f"  round {r + 1}/{args.rounds}: third call cold {cold[-1]['seconds'][2]:.3f} s "
              f"({cold[-1]['built']} libraries built), warm {warm[-1]['seconds'][2]:.3f} s "
              f"({warm[-1]['built']} built)", flush=True)
    print(f"\n{args.model} demo's training step, tb.jit; seconds of each of the first {CALLS} calls, medians "
          f"(min-max) over {args.rounds} rounds, one thread")
    print(f"{'call':<8}{'cold cache':>26}{'warm cache':>26}")
    for i in range(CALLS):
        what = {0: "1 eager", 1: "2 eager", 2: "3 built"}.get(i, f"{i + 1} replay")
        print(f"{what:<8}{spread([c['seconds'][i] for c in cold]):>26}{spread([w['seconds'][i] for w in warm]):>26}")


if __name__ == "__main__":
    main()
