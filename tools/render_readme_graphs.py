"""Regenerate the README's graph images: the tiny block's forward graph at depth 2 and its backward graph
(the gradient flow) at depth 1, as DOT sources and SVG drawings in docs/images/.

    python tools/render_readme_graphs.py          # tests/test_readme_graphs.py checks the output is current
"""
from __future__ import annotations

from pathlib import Path

from tinygrad_block import nn
from tinygrad_block.cli import record
from tinygrad_block.graph import render

IMAGES = Path(__file__).resolve().parent.parent / "docs" / "images"
VIEWS = {"tiny_block_forward_depth2": dict(depth=2, title="tiny block, forward, depth 2"),
         "tiny_block_backward": dict(depth=1, backward=True, title="tiny block, backward (the gradient flow), depth 1")}


def dot_sources() -> dict[str, str]:
    """DOT text of each README view, from one forward and backward of the tiny block (B=1, L=8)."""
    graph = record(nn.preset("tiny"), whole_model=False, B=1, L=8, backward=True, values=False)
    return {name: graph.to_dot(**view) for name, view in VIEWS.items()}


def main() -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    for name, dot in dot_sources().items():
        (IMAGES / f"{name}.dot").write_text(dot)
        print("wrote", render(dot, IMAGES / f"{name}.svg"))


if __name__ == "__main__":
    main()
