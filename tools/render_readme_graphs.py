"""Regenerate the README's graph images, as DOT sources and SVG drawings in docs/images/: the tiny block's
forward graph at depth 2 and its backward graph (the gradient flow) at depth 1, and Llama-2-70B's whole model at
depth 2 (80 identical layers drawn once), on the shape-only device.

    python tools/render_readme_graphs.py          # tests/docs/test_readme_graphs.py checks the output is current
"""
from __future__ import annotations

from pathlib import Path

from tinygrad_block import nn
from tinygrad_block.recordings import record
from tinygrad_block.graph import render

IMAGES = Path(__file__).resolve().parent.parent / "docs" / "images"
RUNS = {"block": dict(cfg="tiny", whole_model=False, L=8), "model": dict(cfg="llama2-70b", whole_model=True, L=16)}
VIEWS = {"tiny_block_forward_depth2": ("block", dict(depth=2, title="tiny block, forward, depth 2")),
         "tiny_block_backward": ("block", dict(depth=1, backward=True,
                                               title="tiny block, backward (the gradient flow), depth 1")),
         "llama2_70b_model_depth2": ("model", dict(depth=2, title="llama2-70b model, forward, depth 2"))}


def dot_sources() -> dict[str, str]:
    """DOT text of each README view, from one forward and backward of the tiny block (B=1, L=8) and of the
    Llama-2-70B model (B=1, L=16)."""
    graphs = {run: record(nn.preset(a["cfg"]), whole_model=a["whole_model"], B=1, L=a["L"], backward=True,
                          values=False) for run, a in RUNS.items()}
    return {name: graphs[run].to_dot(**view) for name, (run, view) in VIEWS.items()}


def main() -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    for name, dot in dot_sources().items():
        (IMAGES / f"{name}.dot").write_text(dot)
        print("wrote", render(dot, IMAGES / f"{name}.svg"))


if __name__ == "__main__":
    main()
