"""Where a block's time goes on a GPU: GPU milliseconds per primitive, forward and backward.

An observer on the choke point records a CUDA event after every primitive call; the time between two events
is the GPU time of the call between them (the stream runs them one after another). Then, beside it, PyTorch's
profiler on the same block (when installed): its kernels by GPU time.

    python tools/profile_block.py [--size xl] [--dtype float16] [--top 20]
"""
from __future__ import annotations

import argparse
from collections import Counter

import tinygrad_block as tb
from bench_block import SIZES, Case, torch_runner


def primitive_times(case: Case) -> tuple[Counter, Counter]:
    """(GPU ms, calls) per (phase, primitive) over one forward+backward."""
    import cupy
    case.autograd(True)                                     # warm-up: kernels compiled, memory pooled
    cupy.cuda.Device().synchronize()
    events = []

    def record(e):
        event = cupy.cuda.Event()
        event.record()
        events.append(((e.phase, e.op.name), event))
    start = cupy.cuda.Event()
    start.record()
    with tb.observe(record):
        case.autograd(True)
    cupy.cuda.Device().synchronize()
    ms, calls, previous = Counter(), Counter(), start
    for key, event in events:
        ms[key] += cupy.cuda.get_elapsed_time(previous, event)
        calls[key] += 1
        previous = event
    return ms, calls


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="xl", choices=list(SIZES))
    p.add_argument("--dtype", default="float16", choices=["float16", "float32", "float64"])
    p.add_argument("--top", type=int, default=20)
    args = p.parse_args(argv)
    case = Case(args.size, args.dtype, "cuda")
    ms, calls = primitive_times(case)
    print(f"{args.size} {args.dtype} block, forward+backward: {sum(ms.values()):.1f} ms of GPU time in "
          f"{sum(calls.values())} primitive calls")
    for (phase, name), t in ms.most_common(args.top):
        print(f"  {phase:<9}{name:<12}{t:>9.2f} ms  x{calls[phase, name]}")
    run = torch_runner(case)
    if run is None:
        return
    import torch
    from torch.profiler import ProfilerActivity, profile
    run(True)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run(True)
        torch.cuda.synchronize()
    print("PyTorch eager, the same block:")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=args.top, max_name_column_width=60))


if __name__ == "__main__":
    main()
