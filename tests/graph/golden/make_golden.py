"""Regenerate tests/graph/golden/tiny_computation.dot (only when a change to the DOT output is intended)."""
from pathlib import Path

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.graph import record_graph

x = tb.tensor([[1.0, -2.0], [0.5, 3.0]], requires_grad=True)
w = nn.Linear(2, 3, generator=tb.Generator(0))
with record_graph(w, x) as graph:
    w(x).relu().sum().backward()
out = graph.to_dot(title="tiny") + graph.to_dot(backward=True, title="tiny backward")
Path(__file__).with_name("tiny_computation.dot").write_text(out)
