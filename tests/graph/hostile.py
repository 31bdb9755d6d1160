"""A model whose names are hostile to an HTML page, a script and a DOT file, run on float64 values at the edges of
the float64 range: the DOT text (test_graph.py), the explorer's data (test_explorer_page.py) and the page in a browser
(test_explorer_browser.py) must hold and draw every name as written, and its statistics honestly. With Affine
layers its compiled program generates kernels whose source names every module (the explorer shows it as text)."""
import numpy as np

import tinygrad_block as tb
from tinygrad_block.nn.module import Module, Parameter

NAMES = ("a:b:c", 'say "hi"', "<b>bold</b> & more", "<!--<script", "</script><script>alert('name')</script>",
         "<img src=x onerror=alert('name')>", "two\nlines", "ünïcode ☃ 漢字 🙂", "back\\slash \\N \\G \\l \\",
         "{brace} | <port> [x]", "&amp; &lt;b&gt;", "constructor", "bell\x07 tab\t end")
ROOT = "__proto__:<img src=x onerror=alert('root')>"          # the root module's name starts every path
TITLE = ("/*TITLE*/ /*STYLE*/ /*VIZ*/ /*SCRIPT*/ /*DATA*/ <img src=x onerror=alert('title')> "
         "</title><script>alert('title')</script> &amp;")
VALUES = [[1e300, -1e300, float("inf"), float("nan")], [1.0, 2.0, 3.0, 4.0]]      # x: (2, 4) float64
FINITE = [1e300, -1e300, 1.0, 2.0, 3.0, 4.0]                   # its finite values


class Scale(Module):
    """out = x * weight   (weight: ones, so each output holds the input's values)"""

    def __init__(self, d: int):
        self.weight = Parameter(tb.ones(d, dtype=tb.float64))

    def forward(self, x):
        return x * self.weight


class Affine(Module):
    """out = x * 2 + 1   (two elementwise ops in a row: compiled, one fused chain that a kernel is generated for)"""

    def __init__(self, d: int):
        self.d = d

    def forward(self, x):
        return x * 2.0 + 1.0


class Hostile(Module):
    """One `layer` (Scale or Affine) per hostile name, in a chain."""

    def __init__(self, d: int, layer: type = Scale):
        for name in NAMES:
            setattr(self, name, layer(d))

    def forward(self, x):
        for _, child in self.named_children():
            x = child(x)
        return x


def hostile(layer: type = Scale):
    """(the model of `layer`s, named ROOT; its input holding VALUES)."""
    model = Hostile(4, layer)
    model.scope_name = ROOT
    return model, tb.tensor(np.array(VALUES), requires_grad=True)
