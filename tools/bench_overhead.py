"""Per-op overhead of the engine: a chain of small elementwise ops, forward + backward.

Times, in one run, the same 1,000-op chain with tinygrad_block, with hand-written array code (forward and the
hand-derived backward, no graph: the floor any Python engine sits on; numpy on the CPU, CuPy on a GPU), and
with PyTorch eager with autograd recording on the same device (when installed). Each round times every engine
once, in a rotating order; it prints microseconds per op (medians) and the median of the per-round ratios to
PyTorch with their spread (min-max).

    python tools/bench_overhead.py [--device cpu|cuda] [--ops 1000] [--size 16] [--rounds 7]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import tinygrad_block as tb


def chain(x, n):
    """y <- y * 1.0001 and y <- y + 0.001, alternating (n ops), then a sum (any engine's tensors)."""
    y = x
    for i in range(n):
        y = y * 1.0001 if i % 2 == 0 else y + 0.001
    return y.sum()


def chain_by_hand(x, n):
    """The same chain on plain arrays (numpy or cupy), with its backward written out: d sum / dx = 1.0001^(n/2)."""
    mul, add = x.dtype.type(1.0001), x.dtype.type(0.001)
    y = x
    for i in range(n):
        y = y * mul if i % 2 == 0 else y + add
    g = y * 0 + 1
    for i in reversed(range(n)):
        g = g * mul if i % 2 == 0 else g
    return y.sum(), g


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--ops", type=int, default=1000)
    p.add_argument("--size", type=int, default=16, help="elements per tensor")
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    n, be = args.ops, tb.get_backend(args.device)
    gpu = be.name.startswith("cuda")
    x0 = np.random.default_rng(0).standard_normal(args.size).astype(np.float32)
    x_dev = be.from_host(x0, tb.float32)
    sync = lambda: None  # noqa: E731

    def run_tb():
        x = tb.tensor(x0, requires_grad=True, device=args.device)
        chain(x, n).backward()
        return x.grad.numpy()

    runners = {"tinygrad_block": run_tb, "by hand, " + ("cupy" if gpu else "numpy"): lambda: chain_by_hand(x_dev, n)}
    try:
        import torch
        torch.set_num_threads(1)
        dev = "cuda" if gpu else "cpu"

        def run_torch():
            x = torch.tensor(x0, requires_grad=True, device=dev)
            chain(x, n).backward()
            return x.grad.cpu().numpy()
        runners["pytorch eager"] = run_torch
        assert np.allclose(run_tb(), run_torch(), rtol=1e-5), "engine and PyTorch gradients differ"
        if gpu:
            import cupy

            def sync():
                cupy.cuda.Device().synchronize()
                torch.cuda.synchronize()
    except ImportError:
        print("(PyTorch not installed: install the 'ref' extra to compare against it)")
    names, times = list(runners), {name: [] for name in runners}
    for name in names:
        runners[name]()
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            sync()
            t0 = time.perf_counter()
            runners[name]()
            sync()
            times[name].append(time.perf_counter() - t0)
    print(f"chain of {n} elementwise ops on {args.size} float32 elements on {be.name}, forward + backward, "
          f"{args.rounds} rounds in rotating order")
    print(f"{'engine':<22}{'us/op':>8}{'vs pytorch':>24}")
    ref = times.get("pytorch eager")
    for name, ts in times.items():
        rs = [t / r for t, r in zip(ts, ref)] if ref else []
        spread = f"{statistics.median(rs):.2f}x ({min(rs):.2f}-{max(rs):.2f})" if rs else "-"
        print(f"{name:<22}{statistics.median(ts) / n * 1e6:>8.2f}{spread:>24}")


if __name__ == "__main__":
    main()
