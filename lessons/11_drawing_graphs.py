# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 11 — Drawing the graphs
#
# Lesson 01 showed that running a forward pass records a graph and that `backward()` walks it in reverse. This
# lesson draws that graph for a whole transformer block and reads it. Nothing is drawn by hand. Every primitive
# call, forward and backward, passes through one function, `Function.apply`: the engine's **choke point**. The
# recorder watches it, as the FLOP counter of lesson 03 does, so each drawing is the computation that really ran.
# Zoomed out, it reads like the block's equation. Zoomed in, it shows every primitive. Drawn backward, it
# shows where the gradient splits and where the paths meet again.
#
# **What you will learn**
# - recording: one node per primitive call, forward and backward, and why the backward pass makes more calls
#   than the forward;
# - reading a drawing at depth 1 (the block's equation, with the residual stream drawn as one straight
#   highway) and at depth 2 (attention and the FFN opened, their steps grouped);
# - the backward drawing: the gradient splits at each residual add and the paths meet again in an addition,
#   which is the gradient accumulation of lesson 02; grouped-query attention shows up as a sum over each group;
# - FLOPs on the boxes, and a whole 70B model whose 80 identical layers are drawn once, marked × 80;
# - rendering to SVG and PNG, what the dpi changes, and the `graph` command;
# - the explorer: the same graph in a browser, opened and closed with a click, forward beside backward.
#
# Run it as a script, `python -m tinygrad_block lesson 11`, or as a notebook,
# `python -m tinygrad_block lesson 11 --notebook --execute` (it lands in `lessons/out/11/`).

# %%
import contextlib
import importlib.util
import io
import json
import shutil
import struct
from collections import Counter

import numpy as np

import tinygrad_block as tb
from tinygrad_block import accounting, nn
from tinygrad_block.cli import main as command
from tinygrad_block.counting import count_flops
from tinygrad_block.course import out_dir, show
from tinygrad_block.graph import record_graph, render
from tinygrad_block.graph_dot import label

OUT = out_dir(11)          # lessons/out/11/: this lesson's drawings
HAVE_GRAPHVIZ = shutil.which("dot") is not None and importlib.util.find_spec("graphviz") is not None
print("drawings go to lessons/out/11/; " + ("graphviz found" if HAVE_GRAPHVIZ else
      "graphviz is missing, so the views are checked but not drawn. The course's setup installs it: "
      "apt-get install graphviz, and pip install -e '.[viz]'"))
assert OUT.is_dir() and OUT.name == "11"


def draw(source, path, **options):
    """Render a recorded graph (options: depth, backward, title, dpi) or DOT text to `path` with graphviz. Without
    graphviz, say so and return None: the views are checked below either way, only the picture is missing."""
    if not HAVE_GRAPHVIZ:
        print(f"rendering skipped: {path.name} (no graphviz)")
        return None
    try:
        return source.render(path, **options) if hasattr(source, "render") else render(source, path, **options)
    except RuntimeError as err:                  # the graphviz package or its `dot` program is missing
        print(f"rendering skipped: {err}")
        return None


# %% [markdown]
# ## 1. Recording: one node per primitive call
#
# `record_graph(block, x)` is an observer (code that the choke point calls after every primitive, as
# `tb.observe` of lesson 01 arranges), like `count_flops`. Every primitive call that passes the choke point
# appends one **op node**. The node holds the op's name, its output's shape and dtype, the module scope it ran
# in (`block.attn.q_proj`), the step it belongs to (modules name their steps, such as 'rope' or 'softmax';
# section 3), the phase (forward or backward) and its FLOPs, plus edges to the nodes that made its
# inputs. A tensor that no recorded op made becomes a **source node**. In the forward pass these are the
# input, the 9 weight tensors (named after their module: `block.attn.q_proj.weight`) and 11 constants: the two
# RoPE tables, the (8, 8) causal mask and 8 scalars. In the backward pass they are the gradient that
# `backward()` starts from, drawn as `∂ output`, and 4 more scalar constants.
#
# We record the `tiny` block (d_model 64, 4 query heads sharing 2 key/value heads, d_ff 172) in float32 on
# one sequence of 8 tokens, x of shape (1, 8, 64), forward and then backward from a random upstream gradient.
# That makes **118 forward** and **164 backward** primitive calls. `count_flops().calls`, which watched the
# same run, counts exactly the same. So does the view at full depth, `graph.view()`, which draws one op node
# per call.

# %%
CFG = nn.preset("tiny")
B, L = 1, 8
g = tb.Generator(0)
block = nn.TransformerBlock(CFG, generator=g)
x = tb.randn(B, L, CFG.d_model, generator=g, requires_grad=True)      # (B, L, d_model)
dout = tb.randn(B, L, CFG.d_model, generator=tb.Generator(1))         # the upstream gradient
with record_graph(block, x) as graph, count_flops() as fc:
    block(x).backward(dout)

CALLS = ("op", "residual", "accumulate")             # a view's kinds for one primitive call
counts = {phase: (len(graph.ops(phase)),
                  sum(n for (ph, *_), n in fc.calls.items() if ph == phase),
                  sum(n.kind in CALLS for n in graph.view(backward=phase == "backward").nodes))
          for phase in ("forward", "backward")}
sources = Counter((n.kind, n.phase) for n in graph.nodes if n.kind != "op")
consts = [n for n in graph.nodes if n.kind == "const"]
scalars = {phase: sorted(float(n.tensor.numpy()) for n in consts if n.phase == phase and n.shape == ())
           for phase in ("forward", "backward")}
for phase, (recorded, counted, drawn) in counts.items():
    print(f"{phase:8}: {recorded} recorded, {counted} counted by count_flops, {drawn} op nodes at full depth")
print(f"source nodes: {dict(sources)}")
print(f"named constants: {[n.label for n in consts if n.label != 'const']}; the mask "
      f"{[n.shape for n in consts if n.shape == (L, L)]}; scalars forward "
      f"{[f'{v:g}' for v in scalars['forward']]}, backward {[f'{v:g}' for v in scalars['backward']]}")
assert counts == {"forward": (118, 118, 118), "backward": (164, 164, 164)}
assert sources == {("input", "forward"): 1, ("param", "forward"): 9, ("const", "forward"): 11,
                   ("input", "backward"): 1, ("const", "backward"): 4}
assert len(block.parameters()) == 9 and [n.label for n in graph.nodes if n.kind == "input"] == ["input", "∂ output"]
assert [n.label for n in consts if n.label != "const"] == ["block.attn.rope_cos", "block.attn.rope_sin"]
assert [n.shape for n in consts if n.phase == "forward" and n.shape not in ((), (128, 16))] == [(8, 8)]
assert len(scalars["forward"]) == 8 and len(scalars["backward"]) == 4

# %% [markdown]
# The scalars are the numbers the code writes as constants. Forward: each norm's divisor $d = 64$ for the
# mean of squares and its $\varepsilon = 10^{-5}$ (two norms), the scores' $\sqrt{d_{head}} = 4$, and SiLU's
# 0 (the sign test) and two 1s (in $1 + e^{-x}$ and a `where`). Backward: a 2 in each norm, for
# $\frac{d}{du}\sqrt u = 1/(2\sqrt u)$, and two 0s for the backward of SiLU's `where`s: the gradient of the
# branch not taken.
#
# **Why backward makes more calls than forward.** Of the 118 forward calls, 63 move data and compute nothing
# (reshape, expand, permute, slice, concat). The backward pass makes 164 calls. Two things add calls, and one
# takes some away:
#
# - each forward op's backward is written in the same primitives, and many need more than one: the 9 forward
#   matmuls become 18, one gradient for each input (lesson 03);
# - a tensor used more than once receives one gradient per use, and they are summed: 19 of the backward calls
#   are those sums, the additions **where paths meet** (section 4);
# - 18 forward calls have no backward at all, because nothing that needs a gradient flows through them: the
#   RoPE tables' slices and expands (14), the mask's expand, softmax's row max and its expand (the max is
#   subtracted for safety only: $\mathrm{softmax}(s - c) = \mathrm{softmax}(s)$ for any $c$), and SiLU's sign
#   test.

# %%
forward_ops = [graph.nodes[i] for i in graph.ops("forward")]
backward_ops = [graph.nodes[i] for i in graph.ops("backward")]
free = Counter(n.label for n in forward_ops if n.flops == 0)
matmuls = [sum(n.label == "matmul" for n in ops) for ops in (forward_ops, backward_ops)]
meets = sum(n.origin == "accumulate" for n in backward_ops)
no_grad = Counter((n.step, n.label) for n in forward_ops if not n.tensor.requires_grad)
print(f"forward calls that move data only: {sum(free.values())} {dict(free)}")
print(f"matmuls: {matmuls[0]} forward -> {matmuls[1]} backward; sums where paths meet: {meets}")
print(f"forward calls without a backward: {sum(no_grad.values())} {dict(no_grad)}")
assert sum(free.values()) == 63 and set(free) == {"reshape", "expand", "permute", "slice", "concat"}
assert matmuls == [9, 18] and meets == 19
assert no_grad == {("rope", "slice"): 6, ("rope", "expand"): 8, ("mask", "expand"): 1, ("softmax", "max"): 1,
                   ("softmax", "expand"): 1, ("activation", "compare"): 1}
assert no_grad[("rope", "slice")] + no_grad[("rope", "expand")] == 14 and sum(no_grad.values()) == 18
expected = [CFG.d_model, CFG.norm_eps] * 2 + [CFG.d_head ** 0.5, 0.0, 1.0, 1.0]    # stored in float32
assert scalars["forward"] == sorted(float(np.float32(v)) for v in expected)
assert scalars["backward"] == [0.0, 0.0, 2.0, 2.0]


# %% [markdown]
# ## 2. Depth 1: the block's equation
#
# A drawing of all 118 forward nodes is too much to read at once. Between the recording and the picture sits
# a **view**, `graph.view(depth, backward=...)`: the nodes, boxes and edges a drawing shows. Each node has a
# `name` for graphviz (`n3`), a `kind` ('op' for a primitive call, 'residual' for a residual add, 'accumulate'
# where gradients meet, 'box' for a collapsed module, 'param', 'input', 'const', 'grad'), a `label`, a
# `shape`, a `scope`, a `step` and its `flops`. Each edge has a source, a destination, the shape it carries,
# and a `highway` flag. `view.find(kind=..., label=..., step=...)` picks nodes, and `view.successors(name)`
# and `view.predecessors(name)` follow edges. Everything below is read off views. Nothing parses the
# drawing's text.
#
# `view(depth=1)` collapses every module one level below the block into a **box**. What remains are the four
# sublayers and the block's own two ops, the residual adds:
#
# $$h = x + \mathrm{attn}(\mathrm{norm}_1(x)), \qquad \mathrm{out} = h + \mathrm{ffn}(\mathrm{norm}_2(h)).$$
#
# The view has 7 nodes (the input, 4 boxes, 2 residual circles) and 8 edges, and every edge carries the
# shape (1, 8, 64): each sublayer reads and writes the stream's shape. A residual circle is not guessed from
# where an add sits. The block runs its adds inside `with step("residual"):`, and the view draws the adds of
# that step as circles. Two edges, `input -> residual1` and `residual1 -> residual2`, carry the stream from
# one residual add to the next, so the view flags them `highway`.
#
# In the drawing, the highway is the pair of **thick green edges**. Graphviz lays them out as one straight
# line from the input through both green "+ residual" circles: that line is **the residual stream**. Each
# sublayer is a detour, a norm box and then an attn or ffn box, that leaves the stream and comes back into a
# circle. The third line of each box is its FLOPs (section 6).

# %%
def short(view, node) -> str:
    """A readable name: the label, with the '+' circles numbered in order (residual1, residual2; meet1, meet2)."""
    if node.kind in ("residual", "accumulate"):
        circles = view.find(kind=node.kind)
        return ("residual" if node.kind == "residual" else "meet") + str(circles.index(node) + 1)
    return node.label


def arrows(view, highway_only: bool = False) -> list[tuple[str, str]]:
    return [(short(view, view.node(e.src)), short(view, view.node(e.dst))) for e in view.edges
            if e.highway or not highway_only]


d1 = graph.view(depth=1)
for n in d1.nodes:
    print(f"  {n.name:3} {n.kind:8} {short(d1, n):9} scope {'.'.join(n.scope) or '-':11} step {n.step or '-':8} "
          f"{n.flops:>7,} FLOPs")
print("edges: " + ", ".join(f"{s} -> {d}" for s, d in arrows(d1)))
print(f"highway: {arrows(d1, highway_only=True)}")
assert [short(d1, n) for n in d1.nodes] == ["norm1", "input", "attn", "residual1", "norm2", "ffn", "residual2"]
assert [n.label for n in d1.find(kind="box")] == ["norm1", "attn", "norm2", "ffn"]
assert arrows(d1) == [("input", "norm1"), ("norm1", "attn"), ("input", "residual1"), ("attn", "residual1"),
                      ("residual1", "norm2"), ("norm2", "ffn"), ("residual1", "residual2"), ("ffn", "residual2")]
assert arrows(d1, highway_only=True) == [("input", "residual1"), ("residual1", "residual2")]
assert [(n.step, n.label) for n in d1.find(kind="residual")] == [("residual", "add")] * 2
assert {e.shape for e in d1.edges} == {(B, L, CFG.d_model)}

picture = draw(graph, OUT / "block_forward_depth1.svg", depth=1, title="tiny block, forward, depth 1")
if picture:
    show(picture)

# %% [markdown]
# ## 3. Depth 2: attention opened up
#
# At `depth=2` the sublayers open, and their own sub-modules become the boxes: the seven projections
# (`nn.Linear` layers) `q_proj`, `k_proj`, `v_proj`, `o_proj` inside attention and `gate_proj`, `up_proj`,
# `down_proj` inside the FFN. The norms have no sub-modules, so they open completely.
#
# Attention's own code runs 59 primitive calls. There is no `softmax` node, because softmax is a composite
# written from primitives (lesson 01). But attention names its steps (`with step("rope"):` and so on), every
# node carries its step, and the drawing groups each step's nodes in a small dotted frame labelled with the
# step's name:
#
# | step | primitives | calls | FLOPs |
# |---|---|---|---|
# | (none) | split into heads: reshape, permute for q, k and v; merge: permute, reshape | 8 | 0 |
# | rope | 2 slices of the (128, 16) cos/sin tables to 8 rows, then 15 calls each for q and k (below) | 32 | 2,304 |
# | repeat kv | reshape, expand to (1, 2, 2, 8, 16), reshape to 4 heads, for k and for v | 6 | 0 |
# | scores | div by $\sqrt{d_{head}} = 4$, permute ($k^\top$), **matmul** (1, 4, 8, 8) | 3 | 8,704 |
# | mask | expand the (8, 8) constant mask to (1, 4, 8, 8), add | 2 | 256 |
# | softmax | max, expand, sub (subtract the row max), **exp**, **sum**, expand, **div** | 7 | 1,216 |
# | weighted sum | **matmul** (1, 4, 8, 16) | 1 | 8,192 |
#
# RoPE on q slices $x$ into halves $x_1, x_2$ of shape (1, 4, 8, 8) and the tables into their halves (8, 8).
# Then $x_1 \cos - x_2 \sin$ is expand, mul, expand, mul, sub; $x_2 \cos + x_1 \sin$ is expand, mul, expand,
# mul, add; and a concat joins the two. The same goes for k, with halves of shape (1, 2, 8, 8). RoPE costs 3
# FLOPs per element of q and k: $3 (4 + 2) \cdot 8 \cdot 16$ = 2,304. The scores' div costs one per element of
# q (512), and the matmul costs $2 \cdot H \cdot L \cdot L \cdot d_{head} = 2 \cdot 4 \cdot 8 \cdot 8 \cdot 16$
# = 8,192. The mask adds one per score ($4 \cdot 8 \cdot 8$ = 256), and softmax costs $5T - 2R$ for $T$ = 256
# scores in $R$ = 32 rows.
#
# In all, attention's calls are 13 expand, 10 slice, 8 reshape, 8 mul, 5 permute, 3 sub, 3 add, 2 concat,
# 2 div, 2 matmul, and one each of max, exp and sum. The FFN opens into 9 calls around its three projection
# boxes. Its 'activation' step is SiLU, an overflow-safe sigmoid (compare, neg, where, exp, where, add, div)
# times its input (mul). Its 'gate' step multiplies the gate by the up projection, one mul.

# %%
d2 = graph.view(depth=2)
attn_ops = [n for n in d2.nodes if n.scope == ("block", "attn") and n.kind == "op"]
steps = {}
for n in attn_ops:
    steps.setdefault(n.step, []).append(n)
for step, nodes in steps.items():
    print(f"  step {step or '(none)':12} {len(nodes):>2} calls {sum(n.flops for n in nodes):>6,} FLOPs: "
          + " ".join(n.label for n in nodes))
kinds = Counter(n.label for n in attn_ops)
ffn_ops = [(n.step, n.label) for n in d2.nodes if n.scope == ("block", "ffn") and n.kind == "op"]
print(f"boxes: {['.'.join(n.scope[1:]) for n in d2.find(kind='box')]}")
print(f"attention's own {len(attn_ops)} calls: " + ", ".join(f"{k} {v}" for k, v in kinds.most_common()))
print(f"FFN's own {len(ffn_ops)} calls: {ffn_ops}")
assert [n.scope for n in d2.find(kind="box")] == [("block", "attn", p) for p in ("q_proj", "k_proj", "v_proj",
                                                                                   "o_proj")] + \
    [("block", "ffn", p) for p in ("gate_proj", "up_proj", "down_proj")]
assert "softmax" not in [n.label for n in d2.nodes] and len(attn_ops) == 59
assert {k: (len(v), sum(n.flops for n in v)) for k, v in steps.items()} == {
    "": (8, 0), "rope": (32, 2_304), "repeat kv": (6, 0), "scores": (3, 8_704), "mask": (2, 256),
    "softmax": (7, 1_216), "weighted sum": (1, 8_192)}
assert {k: sum(n.flops for n in v) for k, v in steps.items()} == fc.by_step("forward", scope="block.attn")
H, H_KV, D_HEAD = CFG.n_heads, CFG.n_kv_heads, CFG.d_head
assert 3 * (H + H_KV) * L * D_HEAD == 2_304 and H * L * D_HEAD + 2 * H * L * L * D_HEAD == 512 + 8_192 == 8_704
assert H * L * L == 256 and 5 * 256 - 2 * 32 == 1_216 and 2 * H * L * L * D_HEAD == 8_192 and D_HEAD ** 0.5 == 4
assert kinds == {"expand": 13, "slice": 10, "reshape": 8, "mul": 8, "permute": 5, "sub": 3, "add": 3, "concat": 2,
                 "div": 2, "matmul": 2, "max": 1, "exp": 1, "sum": 1}
rope = [(n.label, n.shape) for n in steps["rope"]]
half_rope = ["slice"] * 4 + ["expand", "mul", "expand", "mul", "sub", "expand", "mul", "expand", "mul", "add",
                              "concat"]
assert rope[:2] == [("slice", (L, D_HEAD))] * 2 and [op for op, _ in rope[2:17]] == half_rope == \
    [op for op, _ in rope[17:]] and len(half_rope) == 15
assert rope[2:4] == [("slice", (B, H, L, D_HEAD // 2))] * 2
assert rope[17:19] == [("slice", (B, H_KV, L, D_HEAD // 2))] * 2
assert tuple(block.attn.rope_cos.shape) == (128, D_HEAD)
assert [n.label for n in steps["softmax"]] == ["max", "expand", "sub", "exp", "sum", "expand", "div"]
assert [(n.label, n.shape) for n in d2.find(step="mask")] == [("expand", (1, 4, 8, 8)), ("const", (8, 8)),
                                                              ("add", (1, 4, 8, 8))]
assert ffn_ops == [("activation", op) for op in ("compare", "neg", "where", "exp", "where", "add", "div",
                                                 "mul")] + [("gate", "mul")]

# %% [markdown]
# The drawing of the whole block at depth 2 is tall. Under the input, norm1's dashed frame holds its 10
# primitive calls: square, sum, divide by $d$, add $\varepsilon$, square root, reciprocal, then the product with
# $x$ and the product with the gain, each after an expand. Attention's wide frame comes next, then the first
# green circle, norm2 and the FFN's frame, and the second circle at the bottom. The thick green highway still
# runs straight from the input to the two green circles, and everything else hangs off it.

# %%
picture = draw(graph, OUT / "block_forward_depth2.svg", depth=2, title="tiny block, forward, depth 2")
print(f"depth 2, forward: {len(d2.nodes)} nodes, {len(d2.edges)} edges, {sum(e.highway for e in d2.edges)} "
      "of them on the highway")
norm1_ops = [n.label for n in d2.nodes if n.scope == ("block", "norm1") and n.kind == "op"]
print(f"norm1's {len(norm1_ops)} calls: {' '.join(norm1_ops)}")
assert [short(d2, d2.node(e.dst)) for e in d2.edges if e.highway] == ["residual1", "residual2"]
assert norm1_ops == ["mul", "sum", "div", "add", "sqrt", "reciprocal", "expand", "mul", "expand", "mul"]
if picture:
    show(picture)

# %% [markdown]
# To read attention itself, zoom in: record the attention module on its own. Depth counts from the module you
# record, so attention's depth 1 is the block's depth 2, with the same calls in the same order. Its input is
# what norm1 hands it, detached so that the recording starts there. We record a twin of the block, built from
# the same seed: the block's own parameters already hold gradients, a second backward would add to them, and
# those additions would be drawn too. We record the backward pass as well, for section 5.
#
# In this drawing (a wide one: open `lessons/out/11/attention_forward.svg` in a browser to zoom) the dotted
# frames name the steps of the table above. `rope` is the wide frame of slices and products, where the halves
# of q and k are rotated side by side. `repeat kv` is the narrow column that copies each key/value head to its
# two query heads. Below them come `scores`, `mask`, `softmax` and `weighted sum`, down to `o_proj`.

# %%
twin = nn.TransformerBlock(CFG, generator=tb.Generator(0))             # the same weights, no gradients yet
assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(twin.parameters(), block.parameters()))
x_attn = twin.norm1(x).detach().requires_grad_()                      # (B, L, d_model): what attention reads
with record_graph(twin.attn, x_attn) as attn_graph:
    twin.attn(x_attn).backward(dout)
zoom = attn_graph.view(depth=1)
same = [n.label for n in zoom.nodes if n.kind == "op"] == [n.label for n in attn_ops]
print(f"attention recorded alone, depth 1: {len(zoom.nodes)} nodes; its ops are the block's depth-2 attention "
      f"ops, in order: {same}; boxes {[n.label for n in zoom.find(kind='box')]}")
assert same and [n.label for n in zoom.find(kind="box")] == ["q_proj", "k_proj", "v_proj", "o_proj"]
picture = draw(attn_graph, OUT / "attention_forward.svg", depth=1, title="tiny attention, forward, depth 1")
if picture:
    show(picture)

# %% [markdown]
# ## 4. Backward at depth 1: the gradient splits and meets
#
# `view(depth=1, backward=True)` draws the gradient's journey from top to bottom. It starts at `∂ output`,
# runs through `ffn′`, `norm2′`, `attn′` and `norm1′` (boxes holding each sublayer's backward ops), and ends
# at `∂ input`. It has exactly two orange "+ paths meet" circles, one per residual:
#
# ```
# ∂ output ─┬─> ffn′ ─> norm2′ ─┐
#           └───────────────────+ meet1 ─┬─> attn′ ─> norm1′ ─┐
#                                        └────────────────────+ meet2 ─> ∂ input
# ```
#
# **Why two routes.** The residual add $\mathrm{out} = h + f(h)$, with $f = \mathrm{ffn} \circ \mathrm{norm}_2$,
# uses $h$ twice. By the chain rule
#
# $$\frac{\partial \mathcal L}{\partial h} = g + \Big(\frac{\partial f}{\partial h}\Big)^{\!\top} g,
# \qquad g = \frac{\partial \mathcal L}{\partial \mathrm{out}}:$$
#
# there is one term per use, and the terms are added where the paths meet. That addition is exactly the
# **gradient accumulation** of lesson 02: a tensor read twice gets two gradients, summed. The backward of an
# add copies $g$ to both of its inputs unchanged. That costs nothing and is no primitive at all, so the
# **split** has no node: it is just `∂ output`'s two outgoing edges. The same happens again at $x$, with
# attention. Lesson 10 writes these two routes by hand; here they are drawn from what autograd did.
#
# **Why it is a highway.** The edges flagged `highway` run `∂ output -> meet1 -> meet2`, then on to
# `∂ input`, and they pass through no box. The upstream gradient reaches the block's input untouched, and the
# sublayers only *add* their corrections to it. In a stack of blocks the same straight path runs from the
# loss to the first layer, however small each sublayer's own gradient is (lesson 09 zeroed the sublayers'
# output weights and found $\partial x = g$ exactly). In the drawing it is again the thick green line, from
# the dashed `∂ output` oval at the top down through both orange circles.
#
# **What a circle stands for.** Inside `norm2`, $h$ is used three more times ($h \cdot h$, which reads $h$
# twice, for the mean square, and $h \cdot \mathrm{rstd}$ once). So four gradients arrive at $h$, and they
# need three additions. At depth 1 the view merges those three additions into one circle, where the two
# routes join. Its `members` are the three calls, and its FLOPs are their 1,536 together, 512 each (one per
# number of the (1, 8, 64) stream). The same goes for $x$ and `norm1`. The block's own scope therefore holds
# 6 backward calls, all of them sums.

# %%
def along_highway(view) -> list[str]:
    """From ∂ output along the highway edges, then on to the input's gradient."""
    path = [view.find(label="∂ output")[0]]
    while True:
        nxt = [view.node(e.dst) for e in view.edges if e.src == path[-1].name and e.highway]
        nxt = nxt or [n for n in view.successors(path[-1].name) if n.label == "∂ input"]
        if not nxt:
            return [short(view, n) for n in path]
        path.append(nxt[0])


db = graph.view(depth=1, backward=True)
circles = [(len(n.members), n.flops) for n in db.find(kind="accumulate")]
own = [(n.origin, n.flops) for n in backward_ops if n.scope == ("block",)]
print("edges: " + ", ".join(f"{s} -> {d}" for s, d in arrows(db)))
print(f"highway: {' -> '.join(along_highway(db))}; 'paths meet' circles (calls, FLOPs): {circles}")
print(f"the block's own backward calls: {len(own)}, {Counter(own)}")
assert [short(db, n) for n in db.nodes] == ["ffn", "∂ output", "norm2", "meet1", "attn", "norm1", "meet2", "∂ input"]
assert arrows(db) == [("∂ output", "ffn"), ("ffn", "norm2"), ("∂ output", "meet1"), ("norm2", "meet1"),
                      ("meet1", "attn"), ("attn", "norm1"), ("meet1", "meet2"), ("norm1", "meet2"),
                      ("meet2", "∂ input")]
assert along_highway(db) == ["∂ output", "meet1", "meet2", "∂ input"]
assert not any(n.kind == "box" for n in db.nodes if short(db, n) in along_highway(db))
assert circles == [(3, 1_536), (3, 1_536)] and 3 * B * L * CFG.d_model == 1_536
assert own == [("accumulate", B * L * CFG.d_model)] * 6

picture = draw(graph, OUT / "block_backward_depth1.svg", depth=1, backward=True, title="tiny block, backward, depth 1")
if picture:
    show(picture)

# %% [markdown]
# The two routes can be checked with numbers. Record the same block in float64 and keep every intermediate
# gradient (`retain_grads=True`). $h$ is the output of the first residual add, the view's first green circle.
# Its gradient must equal $g$ plus what the FFN route alone sends back, which we get by running
# $\mathrm{ffn}(\mathrm{norm}_2(h))$ on its own from a detached copy of $h$. Likewise, $\partial x$ must equal
# $\partial h$ plus what the attention route alone sends back. Both agree to within a relative $10^{-12}$;
# only the order of the additions differs.

# %%
block64 = nn.TransformerBlock(CFG, generator=tb.Generator(0), dtype=tb.float64)
x64 = tb.randn(B, L, CFG.d_model, generator=tb.Generator(0), dtype=tb.float64, requires_grad=True)
g64 = tb.randn(B, L, CFG.d_model, generator=tb.Generator(1), dtype=tb.float64)
with record_graph(block64, x64, retain_grads=True) as graph64:
    block64(x64).backward(g64)
first_circle = graph64.view(depth=1).find(kind="residual")[0]
h = graph64.nodes[first_circle.members[0]].tensor                    # h = x + attn(norm1(x))
h_alone, x_alone = h.detach().requires_grad_(), x64.detach().requires_grad_()
block64.ffn(block64.norm2(h_alone)).backward(g64)                    # the FFN route alone, into h
block64.attn(block64.norm1(x_alone)).backward(h.grad)                # the attention route alone, into x


def rel(a, b) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


err_h = rel(g64.numpy() + h_alone.grad.numpy(), h.grad.numpy())
err_x = rel(h.grad.numpy() + x_alone.grad.numpy(), x64.grad.numpy())
print(f"dh = g + FFN route: relative difference {err_h:.1e}; dx = dh + attention route: {err_x:.1e}")
assert err_h < 1e-12 and err_x < 1e-12
assert first_circle.kind == "residual" and h.shape == (B, L, CFG.d_model)

# %% [markdown]
# ## 5. Depth 2, backward: the GQA group sum
#
# The tiny block has 4 query heads but only 2 key/value heads, so each KV head serves a group of 2 query heads
# (lesson 07). `repeat_kv` does that with an **expand**: k of shape (1, 2, 8, 16) is reshaped to
# (1, 2, 1, 8, 16), expanded to (1, 2, 2, 8, 16), which copies each head once per query head of its group,
# and reshaped to the 4 heads (1, 4, 8, 16) that the scores need.
#
# Backward, each copy receives its own query head's gradient. A value copied twice influences the loss along
# both copies, so its gradient is the **sum** of the two (lesson 03: the backward of expand is a sum). At
# depth 2 the drawing labels such a node "sum" with the note "backward of expand: copies add up". Exactly two
# of them sum over a group of heads, one for K and one for V. Each reads an edge of shape (1, 2, 2, 8, 16) and
# writes (1, 2, 1, 8, 16), the shape before the expand, at 256 FLOPs (one addition for each of the
# $2 \cdot 8 \cdot 16$ = 256 entries). A backward op carries the step of the forward op it differentiates, so
# both sit in the 'repeat kv' step. The K sum leads down to `k_proj′`, and the V sum to `v_proj′`.
#
# The same note appears on 5 more nodes at depth 2, wherever something else was broadcast: each norm's gain
# (64,) over all 8 tokens (a sum to (1, 1, 64), then a reshape to (64,)), each norm's $1/\mathrm{rms}$ of
# shape (1, 8, 1) over the 64 features, and the softmax denominator (1, 4, 8, 1) over the 8 keys. So not
# every "copies add up" is a group sum. With one KV head per query head (MHA, `n_kv_heads=4`) nothing expands
# K and V, so there is no group sum, and only those 5 remain.

# %%
COPIES = "backward of expand: copies add up"


def first_box(view, node) -> str:
    """Follow the gradient from a node down its first outgoing edges until it reaches a module box."""
    while node.kind != "box":
        node = view.successors(node.name)[0]
    return node.label + "′"


def copies_add_up(cfg) -> int:
    """'copies add up' nodes at depth 2, backward, for a tiny block built from `cfg`."""
    blk = nn.TransformerBlock(cfg, generator=tb.Generator(0))
    xc = tb.randn(B, L, cfg.d_model, generator=tb.Generator(0), requires_grad=True)
    with record_graph(blk, xc) as recorded:
        blk(xc).backward(tb.ones(B, L, cfg.d_model))
    return sum(n.note == COPIES for n in recorded.view(depth=2, backward=True).nodes)


db2 = graph.view(depth=2, backward=True)
copies = [n for n in db2.nodes if n.note == COPIES]
groups = [n for n in copies if n.step == "repeat kv"]
print(f"'copies add up' nodes by shape: {dict(Counter(n.shape for n in copies))}")
for n in groups:
    incoming = [e.shape for e in db2.edges if e.dst == n.name]
    print(f"  group sum {incoming} -> {n.shape}, {n.flops} FLOPs, step {n.step!r}, leads to {first_box(db2, n)}")
mha = copies_add_up(CFG.with_(n_kv_heads=CFG.n_heads))
print(f"with n_kv_heads = n_heads = {CFG.n_heads} (MHA): {mha} 'copies add up' nodes")
assert Counter(n.shape for n in copies) == {(1, 1, 64): 2, (1, 8, 1): 2, (1, 2, 1, 8, 16): 2, (1, 4, 8, 1): 1}
assert len(groups) == 2 and [n.shape for n in groups] == [(B, H_KV, 1, L, D_HEAD)] * 2
assert {e.shape for n in groups for e in db2.edges if e.dst == n.name} == {(B, H_KV, H // H_KV, L, D_HEAD)}
assert [n.flops for n in groups] == [H_KV * L * D_HEAD] * 2 == [256] * 2
assert sorted(first_box(db2, n) for n in groups) == ["k_proj′", "v_proj′"]
assert (H, H_KV) == (4, 2) and mha == len(copies) - len(groups) == 5
forward_repeat = [(n.label, n.shape) for n in steps["repeat kv"]]
assert forward_repeat == [("reshape", (1, 2, 1, 8, 16)), ("expand", (1, 2, 2, 8, 16)), ("reshape", (1, 4, 8, 16))] * 2
assert [e.shape for e in d2.edges if d2.node(e.dst) is steps["repeat kv"][0]] == [(1, 2, 8, 16)]

# %% [markdown]
# The backward of attention recorded alone (section 3) shows the same thing larger. Inside the dotted
# `repeat kv` frame are the two "sum, backward of expand: copies add up" nodes. The one higher up
# gets V's gradient from the weighted sum and leads down to `v_proj′`. The lower one gets K's gradient from
# the scores and, after RoPE's backward, leads to `k_proj′`. Orange circles mark every place where paths meet.
# The last one, just above `∂ input`, is where the gradients from `q_proj′`, `k_proj′` and `v_proj′` meet: the
# normalised input fed all three projections, so its gradient is the sum of three, 2 additions of 512 FLOPs
# each. In the block's own depth-2 drawing the same circle sits at the bottom of attention, where the
# gradient enters norm1's backward.

# %%
zoom_back = attn_graph.view(depth=1, backward=True)
zoom_groups = [n for n in zoom_back.nodes if n.note == COPIES and n.step == "repeat kv"]
last = zoom_back.predecessors(zoom_back.find(label="∂ input")[0].name)[0]
feeding = sorted(p.label for p in zoom_back.predecessors(last.name))
print(f"attention alone, backward: group sums {[(n.shape, n.flops) for n in zoom_groups]}; the last circle sums "
      f"{feeding}: {len(last.members)} additions, {last.flops:,} FLOPs")
assert [(n.shape, n.flops) for n in zoom_groups] == [(n.shape, n.flops) for n in groups]
assert [first_box(zoom_back, n) for n in zoom_groups] == ["v_proj′", "k_proj′"]          # V's first, higher up
assert last.kind == "accumulate" and feeding == ["k_proj", "q_proj", "v_proj"]
assert len(last.members) == 2 and last.flops == 2 * B * L * CFG.d_model == 1_024
in_block = [n for n in db2.find(kind="accumulate") if n.scope == ("block", "attn") and n.flops == 1_024]
assert [sorted(p.label for p in db2.predecessors(n.name)) for n in in_block] == [feeding]
assert {m.scope for n in in_block for m in db2.successors(n.name)} == {("block", "norm1")}
picture = draw(attn_graph, OUT / "attention_backward.svg", depth=1, backward=True,
               title="tiny attention, backward, depth 1")
if picture:
    show(picture)

# %% [markdown]
# ## 6. FLOPs on the nodes
#
# Op nodes carry their FLOPs, and a box carries the sum over the ops inside it, so at depth 1 the drawing is
# also a FLOP budget. Labels are rounded to two decimals in kFLOPs (thousands of FLOPs; MFLOPs, GFLOPs and
# TFLOPs are $10^6$, $10^9$ and $10^{12}$); the view holds the exact figures:
#
# | box | forward FLOPs | label |
# |---|---|---|
# | norm1 | 2,072 | 2.07 kFLOPs |
# | attn | 217,280 | 217.28 kFLOPs |
# | norm2 | 2,072 | 2.07 kFLOPs |
# | ffn | 540,768 | 540.77 kFLOPs |
#
# Add the two residual adds (the green circles, 512 FLOPs each) and you get 763,216, exactly
# `count_flops().total("forward")`. The biggest box is the FFN, with **70.9 %** of the block, against 28.5 %
# for attention. Its three $64 \times 172$ matmuls cost $2 \cdot 8 \cdot 64 \cdot 172$ = 176,128 each, 528,384
# of its 540,768. Attention's four projections cost 196,608 (65,536 each for q and o, 32,768 each for the
# narrower k and v), and the scores and the weighted sum 16,384. At $L = 8$ the $L \times L$ part is small
# (lesson 13 shows it growing with $L$).
#
# The backward boxes cost just under twice their forward ones: `ffn′` 1,080,672 and `attn′` 433,504. Their
# matmuls cost exactly twice the forward ones (lesson 03), and the elementwise work a little less than twice.

# %%
fwd = {n.label: n.flops for n in d1.find(kind="box")}
bwd = {n.label: n.flops for n in db.find(kind="box")}
drawn = {n.label: label(d1, n).split("\\n")[-1] for n in d1.find(kind="box")}   # the box's last line, as drawn
residual = [n.flops for n in d1.find(kind="residual")]
total = fc.total("forward")
mm = fc.by_scope("forward", matmul_only=True, depth=2)
mm_bwd = fc.by_scope("backward", matmul_only=True, depth=2)
mm_fine = fc.by_scope("forward", matmul_only=True, depth=3)
print(f"forward boxes {fwd}, drawn as {drawn}")
print(f"boxes + residual adds {residual} = {sum(fwd.values()) + sum(residual):,}; count_flops: {total:,}; "
      f"FFN {fwd['ffn'] / total:.1%}, attention {fwd['attn'] / total:.1%}")
print(f"matmuls: ffn {mm['block.ffn']:,}, attn {mm['block.attn']:,}; backward boxes ffn′ {bwd['ffn']:,} "
      f"({bwd['ffn'] / fwd['ffn']:.3f} x), attn′ {bwd['attn']:,} ({bwd['attn'] / fwd['attn']:.3f} x)")
assert fwd == {"norm1": 2_072, "attn": 217_280, "norm2": 2_072, "ffn": 540_768}
assert drawn == {k: f"{v / 1000:.2f} kFLOPs" for k, v in fwd.items()}
assert drawn == {"norm1": "2.07 kFLOPs", "attn": "217.28 kFLOPs", "norm2": "2.07 kFLOPs", "ffn": "540.77 kFLOPs"}
assert residual == [512, 512] and sum(fwd.values()) + sum(residual) == total == 763_216
assert max(fwd, key=fwd.get) == "ffn"
assert round(100 * fwd["ffn"] / total, 1) == 70.9 and round(100 * fwd["attn"] / total, 1) == 28.5
assert mm["block.ffn"] == 3 * 2 * L * CFG.d_model * CFG.d_ff == 3 * 176_128 == 528_384
projections = {p: mm_fine[f"block.attn.{p}"] for p in ("q_proj", "k_proj", "v_proj", "o_proj")}
assert projections == {"q_proj": 65_536, "k_proj": 32_768, "v_proj": 32_768, "o_proj": 65_536}
assert sum(projections.values()) == 196_608 and mm["block.attn"] - 196_608 == 2 * 8_192 == 16_384
assert bwd["ffn"] == 1_080_672 and bwd["attn"] == 433_504
for name in ("ffn", "attn"):
    assert mm_bwd[f"block.{name}"] == 2 * mm[f"block.{name}"] and 1.9 < bwd[name] / fwd[name] < 2

# %% [markdown]
# ## 7. A whole model: identical layers drawn once
#
# The same recorder runs on a whole model on the shape-only device (`device="meta"`, lesson 01), so
# Llama-2-70B can be drawn without allocating anything. At depth 1 its 80 layers would be 80 boxes in a
# column, all alike. Instead the view **folds** a run of numbered sibling modules that recorded the same ops,
# shapes, steps and FLOPs, wired the same way, into one box marked × 80 (`view.folds` says which run it
# stands for: layers 0 to 79). For token ids of shape (1, 16) the model reads, top to bottom, in 5 nodes:
#
# ```
# input ids (1, 16) int64 -> embed -> layers.0–79 × 80 -> norm -> lm_head
# ```
#
# The ids enter the embedding's gather (the row lookup `weight[ids]` of lesson 04) as an input node. The stream, of
# shape (1, 16, 8192), runs along the highway from the embedding through the layers to the final norm and the head.
# One layer costs 27,394,914,400 FLOPs (the closed form `accounting.block_forward_flops`), and 80 of them cost
# 2,191,593,152,000. Add the final norm (524,336) and the head's $2 \cdot 16 \cdot 8192 \cdot 32000$ =
# 8,388,608,000, and you have the model's 2,199,982,284,336 FLOPs, exactly `accounting.model_forward_flops`.
# Unfolded (`fold=False`) the same view has 84 nodes.
#
# At full depth a folded drawing shows one layer's every primitive: 149 nodes. Unfolded, it would show all 80
# layers, 10,419 nodes, and a view that large carries a **warning** that names the smaller views of the same
# graph.
#
# At depth 2 (the drawing below) the one layer opens into its norms, attn and ffn boxes and its two residual
# circles, inside a bold frame labelled `layers.0–79`. The note beside it says "× 80 identical layers, drawn
# once", with the FLOPs of one and of all. The embedding, final norm and head open into their primitives: the
# gather, RMSNorm's primitives, and the head's matmul with its $8.388608 \times 10^{9}$ FLOPs.

# %%
cfg70 = nn.preset("llama2-70b")
model = nn.LM(cfg70, generator=tb.Generator(0), device="meta")
ids = tb.zeros(1, 16, dtype=tb.int64, device="meta")                  # (B, L) token ids
with record_graph(model, ids) as model_graph:
    model(ids)
m1 = model_graph.view(depth=1)
per_layer = accounting.block_forward_flops(cfg70, 16, 1, matmul_only=False)
flops = {n.label: n.flops for n in m1.nodes}
whole = sum(n.flops * n.repeat for n in m1.nodes)
sizes = {"full, folded": len(model_graph.view().nodes), "full, unfolded": len(model_graph.view(fold=False).nodes),
         "depth 2, unfolded": len(model_graph.view(depth=2, fold=False).nodes),
         "depth 1, unfolded": len(model_graph.view(depth=1, fold=False).nodes)}
warning = model_graph.view(fold=False).warnings
print(f"depth 1: {[(n.label, n.repeat) for n in m1.nodes]}; folds {m1.folds}")
print("edges: " + ", ".join(f"{s} -> {d}" + (" (highway)" if e.highway else "")
                            for (s, d), e in zip(arrows(m1), m1.edges)))
print(f"one layer {per_layer:,} FLOPs, x 80 = {80 * per_layer:,}; the whole model {whole:,}")
print(f"nodes per view: {sizes}; warning: {warning}")
assert [(n.label, n.repeat) for n in m1.nodes] == [("embed", 1), ("input ids", 1), ("layers.0", 80), ("norm", 1),
                                                   ("lm_head", 1)]
assert m1.folds == {("model", "layers.0"): (0, 79)} and cfg70.n_layers == 80
assert arrows(m1) == [("input ids", "embed"), ("embed", "layers.0"), ("layers.0", "norm"), ("norm", "lm_head")]
assert [e.highway for e in m1.edges] == [False, True, True, True]
assert {e.shape for e in m1.edges if e.highway} == {(1, 16, cfg70.d_model)} and cfg70.d_model == 8192
assert (m1.nodes[1].shape, m1.nodes[1].dtype) == ((1, 16), "int64")
assert flops["layers.0"] == per_layer == 27_394_914_400 and 80 * per_layer == 2_191_593_152_000
assert flops["norm"] == 524_336 and flops["lm_head"] == 2 * 16 * 8192 * cfg70.vocab_size == 8_388_608_000
assert whole == 2_199_982_284_336 == accounting.model_forward_flops(cfg70, 16, 1, matmul_only=False)
assert sizes == {"full, folded": 149, "full, unfolded": 10_419, "depth 2, unfolded": 499, "depth 1, unfolded": 84}
assert m1.warnings == [] and len(warning) == 1 and f"{sizes['full, unfolded']:,} nodes" in warning[0]
assert f"{sizes['depth 2, unfolded']:,} at depth 2 and {sizes['depth 1, unfolded']:,} at depth 1" in warning[0]

m2 = model_graph.view(depth=2)
frame = m2.find(kind="residual")
print(f"depth 2: {len(m2.nodes)} nodes; the layers' frame holds boxes {[n.label for n in m2.find(kind='box')]} and "
      f"{len(frame)} residual circles, each standing for {m2.runs(frame[0])} layers")
assert [n.label for n in m2.find(kind="box")] == ["norm1", "attn", "norm2", "ffn"]
assert len(frame) == 2 and all(m2.runs(n) == 80 for n in frame)
assert [n.flops for n in m2.find(label="matmul") if n.scope == ("model", "lm_head")] == [8_388_608_000]
picture = draw(model_graph, OUT / "llama2_70b_depth2.svg", depth=2, title="llama2-70b, forward, depth 2")
if picture:
    show(picture)

# %% [markdown]
# ## 8. Rendering: SVG, PNG and the dpi
#
# `graph.render(path, depth=..., backward=..., title=...)`, or `render(dot_text_or_view, path)`, passes the
# view's DOT text (`view.to_dot(title)`: DOT is graphviz's plain-text language for a graph, one line per node
# and per edge) through graphviz's `dot` program, which lays the graph out. It writes SVG, PNG or PDF, chosen
# by the file's extension. SVG and PDF are vector drawings: they stay sharp at any zoom, which is what you
# want for the tall depth-2 drawings (open them in a browser). A PNG is pixels. Graphviz measures a drawing
# in points, 72 to the inch, and a PNG gets `dpi` pixels per inch. So its width in pixels is $\mathrm{dpi}/72$
# times the SVG's width in points. The default here is 200 dpi, sharp on a slide (graphviz's own default is
# 96). Below, the model at depth 1 is drawn as an SVG and as PNGs at 200 and 72 dpi, and the 200 dpi PNG is
# shown: the token ids enter the embedding, and the highway runs from there through the one box that stands
# for 80 layers ("27.39 GFLOPs each, × 80 = 2.19 TFLOPs") to the final norm and the head.
#
# Without graphviz, `render` raises a `RuntimeError` that says what to install, and this lesson prints
# "rendering skipped" and checks the views anyway. The course's install (the `viz` extra and the `graphviz`
# system package, both in the README's main command) includes it, and the pictures are the point of this
# lesson.

# %%
def png_width(png: bytes) -> int:
    return struct.unpack(">I", png[16:20])[0]                           # the PNG header's width field


def svg_width_pt(path) -> float:
    return float(path.read_text()[:2000].split('<svg width="')[1].split("pt")[0])


dot = m1.to_dot("llama2-70b, forward, depth 1")
svg = draw(dot, OUT / "llama2_70b_depth1.svg")
png = draw(dot, OUT / "llama2_70b_depth1.png")
small = draw(dot, OUT / "llama2_70b_depth1_72dpi.png", dpi=72)
assert isinstance(dot, str) and dot.startswith("digraph")
if svg and png and small:
    import graphviz
    plain = graphviz.Source(dot).pipe(format="png")                    # graphviz left to its own default
    widths = (svg_width_pt(svg), png_width(png.read_bytes()), png_width(small.read_bytes()), png_width(plain))
    print(f"SVG {widths[0]:.0f} points wide; PNG at 200 dpi {widths[1]} pixels ({widths[1] / widths[0]:.3f} per "
          f"point, 200/72 = {200 / 72:.3f}); at 72 dpi {widths[2]} pixels; graphviz's default "
          f"{widths[3]} pixels ({widths[3] / widths[0]:.3f} per point, 96/72 = {96 / 72:.3f})")
    assert svg.read_bytes()[:5] == b"<?xml" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert abs(widths[1] / widths[0] - 200 / 72) < 0.02 and abs(widths[2] - widths[0]) <= 2
    assert abs(widths[3] / widths[0] - 96 / 72) < 0.02
    show(png)

# %% [markdown]
# The same drawings come from the command line, without writing any code: `python -m tinygrad_block graph`
# records a preset's block (or, with `--model`, the whole model) on the shape-only device and writes svg, png,
# pdf, or the DOT text itself (`.dot`, which needs no graphviz). Its options are `--depth N`, `--backward`,
# `--model` (`--all-layers` to unfold the layers), `--seq-len`, `--batch`, `--values` (value and gradient
# summaries on each node, from a real run in float32), and `--dpi` for a PNG. `docs/cli.md` documents every
# one. For example, `python -m tinygrad_block graph --preset llama2-70b --backward --out block.svg` draws every
# primitive of a full-size block's backward pass. Below, Llama-2-70B's block at depth 1, backward, has the same
# 8 nodes and 9 edges as the tiny block's in section 4: at depth 1 the size of the model changes the shapes
# and the FLOPs, not the drawing.

# %%
cli_out = OUT / "llama2_70b_block_backward_depth1.dot"
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    status = command(["graph", "--preset", "llama2-70b", "--depth", "1", "--backward", "--out", str(cli_out),
                      "--json"])
result = json.loads(printed.getvalue())
print(f"graph --preset llama2-70b --depth 1 --backward: exit status {status}, {result['nodes']} nodes, "
      f"{result['edges']} edges, wrote {cli_out.name} ({cli_out.stat().st_size:,} bytes of DOT text)")
assert status == 0 and (result["nodes"], result["edges"]) == (len(db.nodes), len(db.edges)) == (8, 9)
assert cli_out.read_text().startswith("digraph")

# %% [markdown]
# ## 9. Exploring the graph in a browser
#
# A drawing answers the questions it was drawn for. The questions a learner asks next — what shape goes into this
# op, what does it cost, which backward ops belong to it, in what order does `backward()` run them — want a drawing
# that answers when asked. `tb.explore(block, x)` records the same forward and backward pass and returns the
# **explorer**: one HTML file, with everything it needs inside (graphviz itself, compiled for the browser, lays it
# out), that you open in any browser, or that shows itself inline in a notebook. In it you click a module's box to
# open it in place (depth 1 to depth 2 to every primitive, and back by clicking the dashed frame's name); hover over
# anything for its shapes, dtypes, FLOPs and bytes (a module: its parameters, FLOPs and activations, the tensors its
# forward keeps for the backward (lesson 13 counts them), summed over what it holds); see forward and backward side
# by side, where clicking a forward op lights up the backward ops that differentiate it; step through the backward
# pass in autograd's own order with the ← and → keys; search; and colour by FLOPs or bytes to see where the work
# goes.
#
# The page is built from the same recording as the drawings above, so its numbers are the ones this lesson
# checked: 118 forward and 164 backward primitive calls; attention's parameters and FLOPs; the first
# projection's 2 × 8 × 64 × 64 = 65,536 FLOPs. `python -m tinygrad_block graph --preset llama2-70b --model
# --out model.html` writes the same page for a whole model, its 80 identical layers stored once. The cell below
# writes this lesson's page to `lessons/out/11/tiny_block_explorer.html` and prints that path on its `explorer:`
# line: open the file in a browser, where each op's and each module's card also links to the lesson that teaches it.

# %%
page = tb.explore(block, x, depth=1)                      # records block(x) and its backward once more
path = page.save(OUT / "tiny_block_explorer.html")
nodes = page.data["nodes"]
fwd_ops = [n for n in nodes if n["phase"] == "forward" and n["data_kind"] == "op"]
bwd_ops = sorted((n for n in nodes if "order" in n), key=lambda n: n["order"])
attn = page.data["modules"]["block.attn"]["total"]
first = next(n for n in fwd_ops if n["label"] == "matmul")
print(f"{path.name}: {path.stat().st_size / 2**20:.1f} MiB; {len(fwd_ops)} forward and {len(bwd_ops)} backward "
      f"ops; block.attn: {attn['parameters']:,} parameters, {attn['flops']['forward']:,} forward FLOPs")
print(f"first matmul, in {first['path']}: {[tuple(s) for s, _ in first['inputs']]} -> {tuple(first['shape'])}, "
      f"{first['flops']:,} FLOPs, differentiated by {len(first['grads'])} backward ops; the backward starts with "
      f"{bwd_ops[0]['label']} in {bwd_ops[0]['path']}")
assert (len(fwd_ops), len(bwd_ops)) == (118, 164) == (len(graph.ops("forward")), len(graph.ops("backward")))
assert attn["parameters"] == block.attn.num_parameters()
assert attn["flops"]["forward"] == fc.total("forward", scope="block.attn", matmul_only=False)
assert first["path"] == "block.attn.q_proj" and first["flops"] == 2 * B * L * CFG.d_model * CFG.d_model == 65_536
show(path)                                                 # in a notebook: the explorer itself, inline

# %% [markdown]
# ## Exercises
#
# 1. `predict_meetings`: given the graph of a **forward** pass only, predict how many additions `backward()`
#    will make where gradients meet. The backward pass's shape is fixed by the forward's: wherever a tensor
#    is read $k$ times, $k$ gradients come back (section 4). So you can count the meetings before anything
#    runs. The checker then runs the backward pass and counts the additions it really makes. Mind which
#    reads send a gradient back at all, and that `x * x` reads `x` twice although a drawing shows one arrow.
#    One of the graphs is a model whose head reuses the embedding matrix (tied weights): see where its paths
#    meet.
# 2. `box_free_path`: in a depth-1 view of a block, forward or backward, find a path from the start (the
#    input, or `∂ output`) to the end (the block's output, or `∂ input`) that passes through no box, or
#    return None if there is none. This is the highway made precise, found by a search rather than read off
#    the `highway` flags. It exists for the pre-norm block and for the parallel block (lesson 15: attention and
#    the FFN both read the block's input, and both add to it). For the post-norm block
#    (lesson 09) it does not: every path runs through a norm, so the gradient has no untouched route.
# 3. `kv_group_sums`: from a recorded forward and backward pass of a block, find the nodes that sum a K or V
#    gradient over its group of query heads, and return each one's shape and FLOPs. The checker tries
#    grouped-query attention (2 and 4 query heads per KV head), multi-query attention (all heads share one)
#    and multi-head attention, and compares with the closed form. Keep the group sums apart from the other
#    sums that undo a broadcast.
#
# `python -m tinygrad_block exercise 11` writes `exercise_11.py` with the three functions to fill in;
# `python -m tinygrad_block check 11` checks them and says what is wrong.
