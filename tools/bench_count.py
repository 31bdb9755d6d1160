"""Forward+backward of a whole model on the shape-only device: wall time and peak memory of counting.

Default: Llama-2-70B (80 layers) at batch 1, L = 4096 — the model a learner cannot run, counted on a laptop.
Prints the wall time of building the model and of the counted forward+backward, the process's peak resident
memory, and the FLOPs counted.

    python tools/bench_count.py [--preset llama2-70b] [--seq-len 4096] [--batch 1]
"""
from __future__ import annotations

import argparse
import resource
import time

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.counting import count_flops


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="llama2-70b", choices=list(nn.PRESETS))
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--batch", type=int, default=1)
    args = p.parse_args(argv)
    cfg = nn.preset(args.preset)
    t0 = time.perf_counter()
    model = nn.LM(cfg, generator=tb.Generator(0), device="meta")
    t1 = time.perf_counter()
    ids = tb.zeros(args.batch, args.seq_len, dtype=tb.int64, device="meta")
    with count_flops() as fc:
        logits = model(ids)
        logits.backward(tb.zeros(*logits.shape, device="meta"))
    t2 = time.perf_counter()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    calls = sum(fc.calls.values())
    print(f"{args.preset}: {model.num_parameters():,} parameters, batch {args.batch}, L = {args.seq_len}, shape-only")
    print(f"  build the model          {t1 - t0:8.3f} s")
    print(f"  forward + backward       {t2 - t1:8.3f} s   ({calls:,} primitive calls)")
    print(f"  total                    {t2 - t0:8.3f} s   (aim: under 5 s)")
    print(f"  peak resident memory     {rss / 2**20:8.1f} MiB (aim: under 300 MB; the whole process)")
    print(f"  FLOPs forward            {fc.total('forward'):,} ({fc.total('forward', matmul_only=True):,} in matmuls)")
    bwd, bwd_mm = fc.total("backward"), fc.total("backward", matmul_only=True)
    print(f"  FLOPs backward           {bwd:,} ({bwd_mm:,} in matmuls)")


if __name__ == "__main__":
    main()
