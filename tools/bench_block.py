"""The pre-norm Llama block, forward and forward+backward, at four sizes, in float32 and float64: autograd
vs the hand-derived manual pairs vs PyTorch eager (when installed), timed in the same run.

Prints milliseconds, achieved GFLOP/s (FLOPs counted by the engine's own rules, all ops, forward and
backward), the ratios autograd/manual and autograd/PyTorch, and peak live memory (tracemalloc, in a separate
untimed run) of autograd vs manual.

    python tools/bench_block.py [--sizes tiny small medium large] [--dtypes float32 float64] [--repeat 5]
"""
from __future__ import annotations

import argparse
import gc
from functools import partial
import statistics
import time
import tracemalloc

import numpy as np

import tinygrad_block as tb
from tinygrad_block import manual, nn

SIZES = {
    "tiny": dict(B=2, L=16, d_model=64, n_heads=4, n_kv_heads=2, d_ff=172),
    "small": dict(B=4, L=128, d_model=256, n_heads=8, n_kv_heads=4, d_ff=688),
    "medium": dict(B=2, L=256, d_model=512, n_heads=8, n_kv_heads=2, d_ff=1376),
    "large": dict(B=1, L=512, d_model=1024, n_heads=16, n_kv_heads=4, d_ff=2752),
}


def timed(fn, repeat: int) -> float:
    """Median seconds of `repeat` calls after one warm-up."""
    fn()
    times = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peak_bytes(fn) -> int:
    """Peak traced memory above the starting point while fn runs (numpy buffers are traced)."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak - base


class Case:
    """One size and dtype: the block, its input and upstream gradient, as tensors and as arrays."""

    def __init__(self, size: str, dtype: str):
        s = SIZES[size]
        self.cfg = nn.BlockConfig(s["d_model"], s["n_heads"], s["n_kv_heads"], s["d_ff"], max_seq_len=s["L"])
        g = tb.Generator(0)
        self.block = nn.TransformerBlock(self.cfg, generator=g, dtype=dtype)
        self.x = tb.randn(s["B"], s["L"], s["d_model"], generator=g, dtype=dtype)
        self.dout = tb.randn(s["B"], s["L"], s["d_model"], generator=g, dtype=dtype)
        self.params = {name: np.array(p.numpy()) for name, p in self.block.named_parameters()}
        self.x_np, self.dout_np = np.array(self.x.numpy()), np.array(self.dout.numpy())

    def autograd(self, backward: bool):
        x = self.x.detach().requires_grad_()
        out = self.block(x)
        if backward:
            out.backward(self.dout)
            self.block.zero_grad()

    def manual(self, backward: bool):
        out, cache = manual.block_forward(self.x_np, self.params, self.cfg)
        if backward:
            manual.block_backward(self.dout_np, cache)

    def flops(self) -> tuple[int, int]:
        """(forward, forward+backward) FLOPs of the autograd run, by the engine's FLOP rules."""
        total = {"forward": 0, "backward": 0}

        def count(fn, inputs, out, phase):
            total[phase] += fn.flops(out.shape, *[t.shape for t in inputs])
        with tb.observe(count):
            self.autograd(backward=True)
        return total["forward"], total["forward"] + total["backward"]


def torch_runner(case: Case):
    """A PyTorch eager run of the same block, or None without torch."""
    try:
        import torch

        import torch_block
    except ImportError:
        return None
    torch.set_num_threads(torch.get_num_threads())
    dtype = {"float32": torch.float32, "float64": torch.float64}[str(case.x.dtype)]
    params = {k: torch.tensor(v, requires_grad=True) for k, v in case.params.items()}
    x, dout = torch.tensor(case.x_np), torch.tensor(case.dout_np)
    cos, sin = torch_block.rope_cos_sin(x.shape[1], case.cfg.d_head, case.cfg.rope_theta, dtype)

    def run(backward: bool):
        xt = x.clone().requires_grad_()
        out = torch_block.block_forward(xt, params, case.cfg, cos, sin)
        if backward:
            out.backward(dout)
            for p in params.values():
                p.grad = None
    return run


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    p.add_argument("--dtypes", nargs="+", default=["float32", "float64"], choices=["float32", "float64"])
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    print(f"{'size':<7}{'dtype':<8}{'engine':<10}{'fwd ms':>9}{'fwd+bwd ms':>12}{'GFLOP/s':>9}"
          f"{'vs manual':>11}{'vs torch':>10}{'peak MB':>9}")
    for size in args.sizes:
        for dtype in args.dtypes:
            case = Case(size, dtype)
            fwd_flops, all_flops = case.flops()
            runners = {"autograd": case.autograd, "manual": case.manual}
            torch_run = torch_runner(case)
            if torch_run:
                runners["pytorch"] = torch_run
            rows = {name: (timed(partial(run, False), args.repeat), timed(partial(run, True), args.repeat))
                    for name, run in runners.items()}
            peaks = {name: peak_bytes(partial(runners[name], True)) for name in ("autograd", "manual")}
            for name, (fwd, both) in rows.items():
                vs_manual = both / rows["manual"][1]
                vs_torch = f"{both / rows['pytorch'][1]:.2f}x" if "pytorch" in rows else "-"
                peak = f"{peaks[name] / 2**20:.1f}" if name in peaks else "-"
                print(f"{size:<7}{dtype:<8}{name:<10}{fwd * 1e3:>9.2f}{both * 1e3:>12.2f}"
                      f"{all_flops / both / 1e9:>9.2f}{vs_manual:>10.2f}x{vs_torch:>10}{peak:>9}")
            print(f"{'':<15}FLOPs: forward {fwd_flops:,}, forward+backward {all_flops:,}; "
                  f"peak memory autograd/manual {peaks['autograd'] / peaks['manual']:.2f}x")


if __name__ == "__main__":
    main()
