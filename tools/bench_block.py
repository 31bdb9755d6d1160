"""The pre-norm Llama block, forward and forward+backward: autograd vs the hand-derived manual pairs vs PyTorch
eager (when installed) on the same device, timed in the same run.

Each round times every engine once, in a rotating order, so a slow spell of this machine (or PyTorch's threads
spinning against numpy's) hits all of them alike; the ratios are taken within a round, and the table gives
each engine's median time and the median ratio with its spread over the rounds (min-max). On 'cuda' every
timing ends with a device synchronize, and the achieved TFLOP/s (matmul FLOPs, counted by the engine) is set
against the card's matmul peak measured in the same run.

    python tools/bench_block.py [--device cpu|cuda] [--sizes tiny small medium large xl]
                                [--dtypes float32 float64 float16] [--phases forward both] [--rounds 7]

Defaults: on cpu the four small sizes in float32 and float64; on cuda all five sizes in float32 and float16.
"""
from __future__ import annotations

import argparse
import gc
import statistics
import time
from functools import partial
import tracemalloc


import tinygrad_block as tb
from tinygrad_block import manual, nn
from tinygrad_block.counting import count_flops

SIZES = {
    "tiny": dict(B=2, L=16, d_model=64, n_heads=4, n_kv_heads=2, d_ff=172),
    "small": dict(B=4, L=128, d_model=256, n_heads=8, n_kv_heads=4, d_ff=688),
    "medium": dict(B=2, L=256, d_model=512, n_heads=8, n_kv_heads=2, d_ff=1376),
    "large": dict(B=1, L=512, d_model=1024, n_heads=16, n_kv_heads=4, d_ff=2752),
    "xl": dict(B=8, L=2048, d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336),   # a Llama-3-8B block
}


class Case:
    """One size, dtype and device: the block, its input and upstream gradient, as tensors and as arrays."""

    def __init__(self, size: str, dtype: str, device: str):
        s = SIZES[size]
        self.device, self.dtype = device, dtype
        self.cfg = nn.BlockConfig(s["d_model"], s["n_heads"], s["n_kv_heads"], s["d_ff"], max_seq_len=s["L"])
        g = tb.Generator(0)
        self.block = nn.TransformerBlock(self.cfg, generator=g, dtype=dtype, device=device)
        self.x = tb.randn(s["B"], s["L"], s["d_model"], generator=g, dtype=dtype, device=device)
        self.dout = tb.randn(s["B"], s["L"], s["d_model"], generator=g, dtype=dtype, device=device)
        self.params = {name: p.data for name, p in self.block.named_parameters()}   # the device's own arrays
        self.parameters = self.block.parameters()         # their gradients cleared after each backward, as PyTorch's
        self.programs = {}                                              # (phase, graph) -> tb.jit

    def autograd(self, backward: bool):
        x = self.x.detach().requires_grad_()
        out = self.block(x)
        if backward:
            out.backward(self.dout)
            self.zero_grad()

    def compiled(self, backward: bool, graph: bool = True):
        """The autograd run through tb.jit: captured on the first calls, replayed after (one program per phase);
        on a GPU each replay is one CUDA graph, unless `graph` is False (then its kernels launch one by one)."""
        if (backward, graph) not in self.programs:
            def run(x):
                out = self.block(x)
                if backward:
                    out.backward(self.dout)
                return out
            self.programs[backward, graph] = tb.jit(run)
        f = self.programs[backward, graph]
        if not graph and f.program is not None and f.program.graph is None:
            f.program.why = "held to its kernels one by one"
        f(self.x.detach().requires_grad_())
        if backward:
            self.zero_grad()

    def kernels(self, backward: bool):
        """tb.jit with its kernels launched one by one on a GPU (no CUDA graph): what the graph saves."""
        self.compiled(backward, graph=False)

    def zero_grad(self):
        """Every gradient back to None from the list made once (as the PyTorch run does from its dict), not by
        walking the modules at each call, which would time the walk."""
        for p in self.parameters:
            p.grad = None

    def manual(self, backward: bool):
        out, cache = manual.block_forward(self.x.data, self.params, self.cfg)
        if backward:
            manual.block_backward(self.dout.data, cache)

    def flops(self) -> dict:
        """FLOPs of forward and of forward+backward, all ops and matmuls only, counted on the shape-only device."""
        meta = nn.TransformerBlock(self.cfg, generator=tb.Generator(0), dtype=self.dtype, device="meta")
        x = tb.zeros(*self.x.shape, dtype=self.dtype, device="meta", requires_grad=True)
        with count_flops() as fc:
            meta(x).backward(tb.zeros(*self.x.shape, dtype=self.dtype, device="meta"))
        return {(phase, mm): fc.total("forward", matmul_only=mm) + (phase == "both") * fc.total("backward",
                                                                                                 matmul_only=mm)
                for phase in ("forward", "both") for mm in (False, True)}


def torch_runner(case: Case):
    """A PyTorch eager run of the same block on the same device, or None without torch."""
    try:
        import torch

        import torch_block
    except ImportError:
        return None
    dtype = getattr(torch, case.dtype)
    dev = "cuda" if case.device.startswith("cuda") else "cpu"
    params = {k: torch.tensor(p.numpy(), device=dev, requires_grad=True) for k, p in case.block.named_parameters()}
    x, dout = torch.tensor(case.x.numpy(), device=dev), torch.tensor(case.dout.numpy(), device=dev)
    cos, sin = torch_block.rope_cos_sin(x.shape[1], case.cfg.d_head, case.cfg.rope_theta, dtype, dev)

    def run(backward: bool):
        xt = x.clone().requires_grad_()
        out = torch_block.block_forward(xt, params, case.cfg, cos, sin)
        if backward:
            out.backward(dout)
            for p in params.values():
                p.grad = None
    return run


def synchronizer(device: str):
    """A function that waits for everything queued on the device (nothing to wait for on the CPU)."""
    if not device.startswith("cuda"):
        return lambda: None
    import cupy
    import torch

    def sync():
        cupy.cuda.Device().synchronize()
        torch.cuda.synchronize()
    return sync


def rounds(runners: dict, backward: bool, n: int, sync) -> dict[str, list[float]]:
    """Seconds per call of each runner, n rounds after three warm-up calls each (the compiled engine captures on
    its first calls), the order rotating per round."""
    names, times = list(runners), {name: [] for name in runners}
    for name in names:
        for _ in range(3):
            runners[name](backward)
    for r in range(n):
        for name in names[r % len(names):] + names[:r % len(names)]:
            gc.collect()
            sync()
            t0 = time.perf_counter()
            runners[name](backward)
            sync()
            times[name].append(time.perf_counter() - t0)
    return times


def ratio(times: dict, a: str, b: str) -> str:
    """Median of the per-round ratios a/b, with their min-max spread."""
    if a not in times or b not in times:
        return "-"
    rs = [x / y for x, y in zip(times[a], times[b])]
    return f"{statistics.median(rs):.2f}x ({min(rs):.2f}-{max(rs):.2f})"


def peak_bytes(fn) -> int:
    """Peak traced memory above the starting point while fn runs (numpy buffers are traced)."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak - base


def matmul_peak(dtype: str) -> float:
    """The card's matmul FLOP/s in `dtype`, measured: an 8192^3 GEMM through the engine's own cuBLAS path."""
    be = tb.get_backend("cuda")
    a = tb.randn(8192, 8192, generator=tb.Generator(0), dtype=dtype, device="cuda").data
    sync = synchronizer("cuda")
    be.matmul(a, a)
    best = float("inf")
    for _ in range(5):
        sync()
        t0 = time.perf_counter()
        for _ in range(3):
            be.matmul(a, a)
        sync()
        best = min(best, (time.perf_counter() - t0) / 3)
    return 2 * 8192 ** 3 / best


def free_device_memory(device: str):
    gc.collect()
    if device.startswith("cuda"):
        import cupy
        import torch
        cupy.get_default_memory_pool().free_all_blocks()
        torch.cuda.empty_cache()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--sizes", nargs="+", choices=list(SIZES))
    p.add_argument("--dtypes", nargs="+", choices=["float32", "float64", "float16"])
    p.add_argument("--phases", nargs="+", default=["forward", "both"], choices=["forward", "both"])
    p.add_argument("--engines", nargs="+", choices=["autograd", "compiled", "kernels", "manual", "pytorch"],
                   help="default: all but kernels (compiled without a CUDA graph), which only a GPU tells apart")
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    gpu = args.device.startswith("cuda")
    sizes = args.sizes or (list(SIZES) if gpu else ["tiny", "small", "medium", "large"])
    dtypes = args.dtypes or (["float32", "float16"] if gpu else ["float32", "float64"])
    engines = args.engines or ["autograd", "compiled", "manual", "pytorch"]
    sync = synchronizer(args.device)
    peaks = {dt: matmul_peak(dt) for dt in dtypes} if gpu else {}
    print(f"device {tb.get_backend(args.device).name}; {args.rounds} rounds, engines in rotating order; "
          "ratios: median of the per-round ratios (min-max)")
    for dt, peak in peaks.items():
        print(f"measured matmul peak, {dt}: {peak / 1e12:.0f} TFLOP/s (8192^3 GEMM, cuBLAS)")
    print(f"{'size':<7}{'dtype':<8}{'phase':<9}{'engine':<10}{'ms':>9}{'TFLOP/s':>9}{'of peak':>8}"
          f"{'vs pytorch':>20}{'vs manual':>20}")
    for size in sizes:
        for dtype in dtypes:
            case = Case(size, dtype, args.device)
            flops = case.flops()
            runners = {"autograd": case.autograd, "compiled": case.compiled, "kernels": case.kernels,
                       "manual": case.manual}
            if (run := torch_runner(case)) is not None:
                runners["pytorch"] = run
            runners = {k: v for k, v in runners.items() if k in engines}
            for phase in args.phases:
                times = rounds(runners, phase == "both", args.rounds, sync)
                for name, ts in times.items():
                    t = statistics.median(ts)
                    tflops = flops[phase, True] / t / 1e12
                    of_peak = f"{tflops * 1e12 / peaks[dtype]:.0%}" if gpu else "-"
                    print(f"{size:<7}{dtype:<8}{phase:<9}{name:<10}{t * 1e3:>9.2f}{tflops:>9.3g}{of_peak:>8}"
                          f"{ratio(times, name, 'pytorch'):>20}{ratio(times, name, 'manual'):>20}")
            note = f"{'':<15}FLOPs: forward {flops['forward', False]:,} (matmul {flops['forward', True]:,}), " \
                   f"forward+backward {flops['both', False]:,} (matmul {flops['both', True]:,})"
            if not gpu and {"autograd", "manual"} <= set(runners):
                peak = {name: peak_bytes(partial(runners[name], True)) for name in ("autograd", "manual")}
                note += f"; peak memory autograd/manual {peak['autograd'] / peak['manual']:.2f}x"
            print(note)
            case = runners = run = None  # free the device's memory before the next case
            free_device_memory(args.device)


if __name__ == "__main__":
    main()
