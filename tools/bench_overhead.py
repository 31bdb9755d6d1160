"""Per-op overhead of the engine: a chain of small elementwise ops, forward + backward.

Times, in one run, the same 1,000-op chain with tinygrad_block, with hand-written numpy (forward and the
hand-derived backward, no graph: the floor any Python engine sits on), and with PyTorch eager with autograd
recording (when installed), and prints microseconds per op and the ratios.

    python tools/bench_overhead.py [--ops 1000] [--size 16] [--repeat 7]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import tinygrad_block as tb


def chain_tb(x, n):
    """y <- y * 1.0001 and y <- y + 0.001, alternating (n ops), then a sum."""
    y = x
    for i in range(n):
        y = y * 1.0001 if i % 2 == 0 else y + 0.001
    return y.sum()


def chain_numpy(x, n):
    """The same chain in numpy, with its backward written out: d sum / dx = 1.0001 ** (n/2)."""
    y = x
    for i in range(n):
        y = y * np.float32(1.0001) if i % 2 == 0 else y + np.float32(0.001)
    g = np.ones_like(y)
    for i in reversed(range(n)):
        g = g * np.float32(1.0001) if i % 2 == 0 else g
    return y.sum(), g


def best_of(fn, repeat):
    """Median of `repeat` timings (seconds) after one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", type=int, default=1000)
    p.add_argument("--size", type=int, default=16, help="elements per tensor")
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args(argv)
    n = args.ops
    x0 = np.random.default_rng(0).standard_normal(args.size).astype(np.float32)

    def run_tb():
        x = tb.tensor(x0, requires_grad=True)
        chain_tb(x, n).backward()
        return x.grad

    rows = {"tinygrad_block": best_of(run_tb, args.repeat),
            "numpy, hand-written": best_of(lambda: chain_numpy(x0, n), args.repeat)}
    try:
        import torch
        torch.set_num_threads(1)

        def run_torch():
            x = torch.tensor(x0, requires_grad=True)
            chain_tb(x, n).backward()
            return x.grad
        rows["pytorch eager"] = best_of(run_torch, args.repeat)
        ours = run_tb().numpy()
        assert np.allclose(ours, run_torch().numpy(), rtol=1e-5), "engine and PyTorch gradients differ"
    except ImportError:
        print("(PyTorch not installed: install the 'ref' extra to compare against it)")
    print(f"chain of {n} elementwise ops on {args.size} float32 elements, forward + backward, median of {args.repeat}")
    print(f"{'engine':<22}{'us/op':>8}{'vs pytorch':>12}")
    ref = rows.get("pytorch eager")
    for name, t in rows.items():
        ratio = f"{t / ref:.2f}x" if ref else "-"
        print(f"{name:<22}{t / n * 1e6:>8.2f}{ratio:>12}")


if __name__ == "__main__":
    main()
