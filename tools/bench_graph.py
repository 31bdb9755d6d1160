"""How long drawing takes: the full op-level graph of one block, forward and backward, and a whole model at
depth 1, recorded on the shape-only device and rendered to SVG by graphviz's `dot`.

    python tools/bench_graph.py [--preset llama2-7b]      # aim: the full block under 10 s
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tinygrad_block import nn
from tinygrad_block.recordings import record


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="llama2-7b", choices=list(nn.PRESETS))
    args = p.parse_args(argv)
    cfg = nn.preset(args.preset)
    with tempfile.TemporaryDirectory() as tmp:
        for what, whole, depth, backward in [("one block, forward, every primitive", False, None, False),
                                             ("one block, backward, every primitive", False, None, True),
                                             (f"the model ({cfg.n_layers} layers), forward, depth 1", True, 1, False)]:
            t0 = time.perf_counter()
            graph = record(cfg, whole_model=whole, B=1, L=16, backward=backward, values=False)
            t1 = time.perf_counter()
            path = graph.render(Path(tmp) / "g.svg", depth, backward=backward)
            t2 = time.perf_counter()
            print(f"{args.preset}, {what}: record {t1 - t0:.3f} s, emit and render {t2 - t1:.3f} s "
                  f"({path.stat().st_size:,} bytes of SVG)")


if __name__ == "__main__":
    main()
