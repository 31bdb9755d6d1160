# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 04 — Reading the computation graph
#
# Lesson 01 said that running the forward pass records a graph and `backward()` walks it in reverse. This lesson
# draws that graph for the `tiny` block (float32, one sequence: x of shape (1, 8, 64), requiring grad) and
# reads it, zoomed out and zoomed in:
#
# 1. **Recording**: every primitive call, forward and backward, becomes a node, and the recorder sees exactly
#    the calls the FLOP counter sees.
# 2. **Depth 1, forward**: the block reads norm1 -> attn -> (+) -> norm2 -> ffn -> (+), with the residual
#    stream drawn as a straight highway.
# 3. **Depth 2, forward**: attention opens into its own primitives, grouped by the steps the module names.
# 4. **Depth 1, backward**: the gradient splits at each residual and the paths meet again: the
#    **gradient highway**.
# 5. **Depth 2, backward**: grouped-query attention shows up as a sum over each group of query heads.
# 6. **FLOPs on the nodes**: the boxes add up to the block's count, and the FFN is the biggest.
# 7. **A whole model**: Llama-2-70B's 80 identical layers drawn once.
# 8. **Rendering** to SVG and PNG with graphviz.
#
# Nothing here is drawn by hand: the recorder hangs on the same choke point as the FLOP counter (lesson 03).
# Between the recording and the DOT text graphviz reads sits a **view**, `graph.view(depth, backward=...)`:
# the nodes, boxes and edges a drawing shows. Everything below is read off views, the way `tests/test_graph.py`
# reads them.
#
# Run it: `python lessons/04_graphs.py`. Every number stated below is asserted in `main()`; the drawings go
# to `lessons/out/04/`.

# %%
import struct
from collections import Counter
from pathlib import Path

import numpy as np

import tinygrad_block as tb
from tinygrad_block import accounting, nn
from tinygrad_block.counting import count_flops
from tinygrad_block.graph import record_graph, render

CFG = nn.preset("tiny")
B, L = 1, 8
OUT = (Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()) / "out" / "04"
CALLS = ("op", "residual", "accumulate")      # the view's kinds for one primitive call


def record():
    """The tiny block run forward and backward once, with the graph recorder and the FLOP counter both on.
    `retain_grads` keeps the gradient of every intermediate tensor, for section 4."""
    g = tb.Generator(0)
    block = nn.TransformerBlock(CFG, generator=g)
    x = tb.randn(B, L, CFG.d_model, generator=g, requires_grad=True)       # (B, L, d_model)
    dout = tb.randn(B, L, CFG.d_model, generator=tb.Generator(1))          # the upstream gradient
    with record_graph(block, x, retain_grads=True) as graph, count_flops() as fc:
        block(x).backward(dout)
    return block, x, dout, graph, fc


# %% [markdown]
# ### Reading a view
#
# `graph.view(...)` returns a `GraphView`. Its `nodes` are what the drawing shows, in order; each has a DOT
# `name` (`n3`), a `kind` ('op' for a primitive call, 'residual' for a residual add, 'accumulate' where gradients
# meet, 'box' for a collapsed module, 'param', 'input', 'const', 'grad'), a `label` (the op, the module, the
# tensor), its `shape`, the module `scope` it ran in, the named `step` of that module, its `flops`, and the
# recorded calls it stands for (`members`). Its `edges` have a source, a destination, the shape they carry and a
# `highway` flag. `view.find(kind=..., label=..., step=...)` picks nodes; `view.successors(name)` follows edges.
# `view.to_dot()` writes the DOT text for graphviz; nothing below parses it.


# %%
def short(view, node) -> str:
    """A readable name: the label, the '+' circles numbered in order (residual1, residual2; meet1, meet2)."""
    if node.kind in ("residual", "accumulate"):
        circles = view.find(kind=node.kind)
        return ("residual" if node.kind == "residual" else "meet") + str(circles.index(node) + 1)
    return node.label


def readable_edges(view) -> list[tuple[str, str]]:
    return [(short(view, view.node(e.src)), short(view, view.node(e.dst))) for e in view.edges]


# %% [markdown]
# ## 1. Recording: one node per primitive call
#
# `record_graph(block, x)` is an observer, like `count_flops`: every primitive call that passes the choke point
# appends one **op node** holding the op's name, output shape, dtype, module scope (`block.attn.q_proj`), named
# step, phase and FLOPs, with edges to the nodes that made its inputs. Tensors no recorded op made become
# **source nodes**: the input, the 9 weight tensors (named from the module: `block.attn.q_proj.weight`), 11
# constants in the forward (the two RoPE tables, the (8, 8) causal mask and 8 scalars such as the norms'
# $\varepsilon$), and in the backward the gradient `backward()` starts from, `∂ output`, and 4 more constants.
#
# One forward and one backward of the tiny block make **118 forward** and **164 backward** primitive calls, 282
# op nodes in all, and `count_flops().calls` counts exactly the same (so does the view at full depth: one op
# node per call). Of the 118 forward calls, 63 move data and compute nothing (reshape, expand, permute, slice,
# concat). Backward has more calls than forward, for three reasons:
#
# - each forward op's backward is written in the same primitives, and many need more than one: the 9 forward
#   matmuls become 18 (a gradient for each input);
# - a tensor used more than once receives one gradient per use, and they are summed: 19 of the backward calls
#   are those sums, the adds **where paths meet** (section 4);
# - 18 forward calls have no backward at all, because nothing that needs a gradient flows through them: the
#   RoPE tables' slices and expands (14), the mask's expand, softmax's row max and its expand (the max is
#   subtracted for safety only: softmax(s - c) = softmax(s) for any c), and SiLU's sign test.


# %%
def call_counts(graph, fc) -> dict[str, dict[str, int]]:
    """For each phase: op nodes recorded, calls the FLOP counter saw, and op nodes in the full-depth view."""
    return {phase: {"recorded": len(graph.ops(phase)),
                    "counted": sum(n for (ph, _, _, _), n in fc.calls.items() if ph == phase),
                    "drawn": sum(n.kind in CALLS for n in graph.view(backward=phase == "backward").nodes)}
            for phase in ("forward", "backward")}


def census(graph) -> dict:
    """Source nodes by (kind, phase); forward calls with no FLOPs or no gradient; matmuls per phase; sums."""
    ops = {phase: [graph.nodes[i] for i in graph.ops(phase)] for phase in ("forward", "backward")}
    return {"sources": Counter((n.kind, n.phase) for n in graph.nodes if n.kind != "op"),
            "consts": [(n.label, n.shape) for n in graph.nodes if n.kind == "const" and n.phase == "forward"],
            "free": Counter(n.label for n in ops["forward"] if n.flops == 0),
            "no_grad": Counter((n.step, n.label) for n in ops["forward"] if not n.tensor.requires_grad),
            "matmuls": [sum(n.label == "matmul" for n in ops[phase]) for phase in ("forward", "backward")],
            "meets": sum(n.origin == "accumulate" for n in ops["backward"])}


# %% [markdown]
# ## 2. Depth 1: the block's equation
#
# A full-depth drawing has 118 forward nodes, too many to read. `view(depth=1)` collapses every module scope
# deeper than one level below the block into one **box**, so the block shows only its four sublayers and its own
# two ops, the residual adds:
#
# $$h = x + \mathrm{attn}(\mathrm{norm}_1(x)), \qquad \mathrm{out} = h + \mathrm{ffn}(\mathrm{norm}_2(h)).$$
#
# The view has 7 nodes (the input, 4 boxes, 2 green "+ residual" circles) and 8 edges, each carrying the shape
# (1, 8, 64): every sublayer reads and writes the stream's shape. A residual circle is not guessed from where an
# add sits: the block runs its adds inside `with step("residual"):`, and the view draws the adds of that step as
# circles. The two edges `input -> residual1` and `residual1 -> residual2` carry the stream from one residual add
# to the next, so the view flags them `highway`: the DOT draws them thick and green with a high weight, and
# graphviz lays them out as one straight line, **the residual stream**, which the sublayers only branch off and
# add to.


# %%
def depth1_forward(graph) -> dict:
    view = graph.view(depth=1)
    return {"view": view, "nodes": [short(view, n) for n in view.nodes], "edges": readable_edges(view),
            "boxes": [n.label for n in view.find(kind="box")],
            "highway": [(short(view, view.node(e.src)), short(view, view.node(e.dst))) for e in view.edges
                        if e.highway],
            "residual": [(n.step, n.label) for n in view.find(kind="residual")],
            "shapes": {e.shape for e in view.edges}}


# %% [markdown]
# ## 3. Depth 2: attention opened up
#
# At `depth=2` the block's sublayers open and their own sub-modules (the seven projections, `nn.Linear`
# layers) become the boxes: `q_proj`, `k_proj`, `v_proj`, `o_proj` inside attention, `gate_proj`, `up_proj`,
# `down_proj` inside the FFN. The norms have no sub-modules, so they open entirely.
#
# Attention's own code runs 59 primitive calls. There is no `softmax` node, since softmax is a composite written
# from primitives, but attention names its steps (`with step("rope"):` ...), every node carries its step, and
# the drawing groups each step's nodes in a small dotted box:
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
# RoPE on q: slice $x$ into halves $x_1, x_2$ (1, 4, 8, 8), slice the tables into their halves (8, 8), then
# $x_1 \cos - x_2 \sin$ is expand, mul, expand, mul, sub, $x_2 \cos + x_1 \sin$ is expand, mul, expand, mul, add,
# and a concat joins them; the same for k, of shape (1, 2, 8, 8) per half. Its FLOPs are 3 per element of q and
# k: $3 (4 + 2) \cdot 8 \cdot 16$ = 2,304. The scores' div costs one per element of q (512) and the matmul
# $2 \cdot H \cdot L \cdot L \cdot d_{head} = 2 \cdot 4 \cdot 8 \cdot 8 \cdot 16$ = 8,192; the mask adds one per
# score ($4 \cdot 8 \cdot 8$ = 256); softmax costs $5T - 2R$ for $T$ = 256 scores in $R$ = 32 rows.
#
# In all: 13 expand, 10 slice, 8 reshape, 8 mul, 5 permute, 3 sub, 3 add, 2 concat, 2 div, 2 matmul, and one
# each of max, exp and sum. The FFN opens into 9 calls around its three projection boxes: its 'activation'
# step is SiLU, an overflow-safe sigmoid (compare, neg, where, exp, where, add, div) and a mul, and its 'gate'
# step the gate times up, one mul.


# %%
def depth2_forward(graph) -> dict:
    view = graph.view(depth=2)
    own = {module: [n for n in view.nodes if n.scope == ("block", module) and n.kind == "op"]
           for module in ("attn", "ffn")}
    steps = {}
    for n in own["attn"]:
        steps.setdefault(n.step, []).append(n)
    return {"view": view, "boxes": [n.scope for n in view.find(kind="box")], "attn": own["attn"],
            "steps": {step: (len(nodes), sum(n.flops for n in nodes)) for step, nodes in steps.items()},
            "ffn": [(n.step, n.label) for n in own["ffn"]], "labels": [n.label for n in view.nodes]}


# %% [markdown]
# ## 4. Depth 1, backward: the gradient splits and meets
#
# `view(depth=1, backward=True)` draws the gradient's journey, top to bottom: from `∂ output` through `ffn′`,
# `norm2′`, `attn′`, `norm1′` (the boxes of each sublayer's backward ops) to `∂ input`. It has exactly two
# orange "+ paths meet" circles, one per residual:
#
# ```
# ∂ output ─┬─> ffn′ ─> norm2′ ─┐
#           └───────────────────+ meet1 ─┬─> attn′ ─> norm1′ ─┐
#                                        └────────────────────+ meet2 ─> ∂ input
# ```
#
# **Why two routes.** The residual add $\mathrm{out} = h + f(h)$, with $f = \mathrm{ffn} \circ \mathrm{norm}_2$,
# uses $h$ twice. So by the chain rule
#
# $$\frac{\partial \mathcal L}{\partial h} = g + \Big(\frac{\partial f}{\partial h}\Big)^{\!\top} g,
# \qquad g = \frac{\partial \mathcal L}{\partial \mathrm{out}}:$$
#
# one term per use, added where the paths meet. The backward of an add copies $g$ to both of its inputs
# unchanged, which costs nothing and is no primitive at all, so the split has no node: it is just `∂ output`'s
# two outgoing edges. The same happens again at $x$ with attention.
#
# **Why it is a highway.** Follow the edges the view flags `highway`, `∂ output -> meet1 -> meet2`, then on to
# `∂ input`: they pass through no box. The upstream gradient reaches the block's input untouched, and the
# sublayers only *add* their corrections to it. In a stack of blocks the same straight path runs from the loss
# to the first layer, however small each sublayer's own gradient is; lesson 02 zeroed every sublayer weight
# and found $\partial x = g$ exactly. Below we check the two routes with numbers: the gradient at $h$ (kept by
# `retain_grads`) equals $g$ plus what the FFN route alone sends back (run separately, from a detached copy of
# $h$), and $\partial x$ equals $\partial h$ plus what attention sends back; both agree to within $10^{-5}$
# (float32 rounding; the sums are added in a different order).
#
# **What a circle stands for.** Inside `norm2`, $h$ is used three more times ($h \cdot h$ twice for the mean
# square, $h \cdot \mathrm{rstd}$ once), so four gradients arrive at $h$ and need three adds. Each "paths meet"
# circle at depth 1 is those three adds (the block's own scope holds 6 such calls, 512 FLOPs each), merged into
# one node where the two routes join: its `members` are the three calls, its FLOPs their 1,536 together. The
# same goes for $x$ and `norm1`.


# %%
def depth1_backward(graph) -> dict:
    view = graph.view(depth=1, backward=True)
    own = [graph.nodes[i] for i in graph.ops("backward") if graph.nodes[i].scope == ("block",)]
    return {"view": view, "nodes": [short(view, n) for n in view.nodes], "edges": readable_edges(view),
            "meets": [(len(n.members), n.flops) for n in view.find(kind="accumulate")],
            "own": [(n.origin, n.flops) for n in own]}          # the block's own backward calls


def highway_path(view) -> list[str]:
    """From ∂ output along the highway edges, then on to the input's gradient."""
    path = [view.find(label="∂ output")[0]]
    while True:
        nxt = [view.node(e.dst) for e in view.edges if e.src == path[-1].name and e.highway]
        nxt = nxt or [n for n in view.successors(path[-1].name) if n.label == "∂ input"]
        if not nxt:
            return [short(view, n) for n in path]
        path.append(nxt[0])


def two_routes(block, x, dout, graph) -> tuple[float, float]:
    """Largest |∂h - (g + FFN route)| and |∂x - (∂h + attention route)|, each route run on its own."""
    h = graph.nodes[graph.view(depth=1).find(kind="residual")[0].members[0]].tensor   # the first residual add
    h0, x0 = h.detach(), x.detach()
    h0.requires_grad = x0.requires_grad = True
    block.ffn(block.norm2(h0)).backward(dout)                  # the FFN route alone, into h
    block.attn(block.norm1(x0)).backward(h.grad)               # the attention route alone, into x
    dh, dx = h.grad.numpy(), x.grad.numpy()
    return (float(np.abs(dh - (dout.numpy() + h0.grad.numpy())).max()),
            float(np.abs(dx - (dh + x0.grad.numpy())).max()))


# %% [markdown]
# ## 5. Depth 2, backward: the GQA group sum
#
# The tiny block has 4 query heads but only 2 key/value heads: each KV head serves a group of 2 query heads.
# `repeat_kv` makes that happen with an **expand** (lesson 01: broadcasting is an explicit op): k of shape
# (1, 2, 8, 16) is reshaped to (1, 2, 1, 8, 16), expanded to (1, 2, 2, 8, 16), so each head is copied once per
# query head of its group, and reshaped to the 4 heads (1, 4, 8, 16) the scores need.
#
# Backward, each copy received its own query head's gradient. A value copied twice influences the loss along
# both copies, so its gradient is the **sum** of the two. That is the backward of expand, and at depth 2 the
# drawing labels it "sum — backward of expand: copies add up". Exactly two such nodes sum over a group of heads,
# one for K and one for V: each reads an edge of shape (1, 2, 2, 8, 16) and writes (1, 2, 1, 8, 16), the
# shape before the expand, at 256 FLOPs each (one add for each of the $2 \cdot 8 \cdot 16$ = 256 entries). A
# backward op carries the step of the forward op it differentiates, so both sit in the 'repeat kv' step. The
# K sum leads down to `k_proj′`, the V sum to `v_proj′`.
#
# The same label appears 5 more times at depth 2, wherever something else was broadcast: each norm's gain
# (64,) over all 8 tokens (a sum to (1, 1, 64), then a reshape to (64,)), each norm's $1/\mathrm{rms}$
# (1, 8, 1) over the 64 features, and the softmax denominator (1, 4, 8, 1) over the 8 keys. With one KV head
# per query head (MHA, `n_kv_heads=4`) there is no expand for K and V, so no group sum: only those 5 remain.


# %%
COPIES = "backward of expand: copies add up"


def group_sums(graph) -> dict:
    view = graph.view(depth=2, backward=True)
    copies = [n for n in view.nodes if n.note == COPIES]
    groups = [n for n in copies if n.shape == (1, 2, 1, 8, 16)]
    return {"copies": Counter(n.shape for n in copies), "groups": len(groups),
            "incoming": {e.shape for g in groups for e in view.edges if e.dst == g.name},
            "flops": {n.flops for n in groups}, "steps": {n.step for n in groups},
            "reaches": sorted(first_box(view, n) for n in groups)}


def mha_copies() -> int:
    """'copies add up' nodes at depth 2, backward, for the same block with one KV head per query head."""
    block = nn.TransformerBlock(CFG.with_(n_kv_heads=CFG.n_heads), generator=tb.Generator(0))
    x = tb.randn(B, L, CFG.d_model, generator=tb.Generator(0), requires_grad=True)
    with record_graph(block, x) as graph:
        block(x).backward(tb.ones(B, L, CFG.d_model))
    return sum(n.note == COPIES for n in graph.view(depth=2, backward=True).nodes)


def first_box(view, node) -> str:
    """Follow the gradient from a node down its first outgoing edges until it reaches a module box."""
    while node.kind != "box":
        node = view.successors(node.name)[0]
    return node.label + "′"


# %% [markdown]
# ## 6. FLOPs on the nodes
#
# Op nodes carry their FLOPs, and each box carries the sum over the ops inside it, so at depth 1 the drawing is
# also a FLOP budget. The box labels are rounded (kFLOPs with two decimals); the view holds the exact figures:
#
# | box | forward FLOPs | label |
# |---|---|---|
# | norm1 | 2,072 | 2.07 kFLOPs |
# | attn | 217,280 | 217.28 kFLOPs |
# | norm2 | 2,072 | 2.07 kFLOPs |
# | ffn | 540,768 | 540.77 kFLOPs |
#
# Add the two residual adds (the green circles, 512 FLOPs each) and you get 763,216, exactly
# `count_flops().total("forward")`. The biggest box is the FFN: **70.9 %** of the block, against 28.5 % for
# attention. Its three $64 \times 172$ matmuls cost $2 \cdot 8 \cdot 64 \cdot 172$ = 176,128 each, 528,384 of
# its 540,768. Attention's four projections cost 196,608 (65,536 each for q and o, 32,768 each for the narrower
# k and v), scores and weights @ V 16,384; at $L = 8$ the $L \times L$ part is small (lesson 03 shows it
# growing with $L$).
#
# The backward boxes cost just under twice their forward ones: `ffn′` 1,080,672 and `attn′` 433,504. Their
# matmuls are exactly twice (lesson 03), the elementwise work a little less.


# %%
def box_flops(graph, backward: bool = False) -> dict[str, int]:
    """Exact FLOPs of each depth-1 box, from the view."""
    return {n.label: n.flops for n in graph.view(depth=1, backward=backward).find(kind="box")}


# %% [markdown]
# ## 7. A whole model: identical layers drawn once
#
# The same recorder runs on a whole model on the shape-only device (lesson 03), so Llama-2-70B draws without
# allocating anything. At depth 1 its 80 layers would be 80 boxes in a column, all alike. The view **folds** a
# run of numbered sibling modules that recorded the same ops, shapes, steps and FLOPs, wired the same way,
# into one box marked × 80. For token ids of shape (1, 16) the model reads, top to bottom, in 5 nodes:
#
# ```
# input ids (1, 16) int64 -> embed -> layers.0–79 × 80 -> norm -> lm_head
# ```
#
# The ids enter the embedding's gather as an input node; the stream, (1, 16, 8192), runs along the highway from
# the embedding through the layers to the final norm and the head. One layer costs 27,394,914,400 FLOPs (the
# closed form `accounting.block_forward_flops`), 80 of them 2,191,593,152,000; add the final norm (524,336) and
# the head's $2 \cdot 16 \cdot 8192 \cdot 32000$ = 8,388,608,000 and you have the model's 2,199,982,284,336,
# `accounting.model_forward_flops`. Unfolded (`fold=False`) the same view has 84 nodes.


# %%
def whole_model() -> dict:
    cfg = nn.preset("llama2-70b")
    model = nn.LM(cfg, generator=tb.Generator(0), device="meta")
    ids = tb.zeros(1, 16, dtype=tb.int64, device="meta")                  # (B, L) token ids
    with record_graph(model, ids) as graph:
        model(ids)
    view = graph.view(depth=1)
    return {"graph": graph, "view": view, "cfg": cfg,
            "nodes": [(n.label, n.repeat) for n in view.nodes], "edges": readable_edges(view),
            "highway": [e.highway for e in view.edges], "ids": (view.nodes[1].shape, view.nodes[1].dtype),
            "flops": {n.label: n.flops for n in view.nodes}, "unfolded": len(graph.view(depth=1, fold=False).nodes)}


# %% [markdown]
# ## 8. Rendering
#
# `graph.render(path, depth=..., backward=...)` (or `render(view, path)`) pipes the DOT text through graphviz's
# `dot` program and writes svg, png or pdf, chosen by the file's extension. Below, the depth-1 forward and
# backward graphs of the block, its depth-2 forward graph and the whole model at depth 2 go to SVG files in
# `lessons/out/04/` (open them in a browser to see the highway), and the model at depth 1 to a PNG at 200 dots
# per inch, sharp enough for a slide: its width in pixels is 200/72 of the SVG's width in points. Without the
# `dot` program (or the `graphviz` Python package) `render` raises a `RuntimeError` that says how to install it;
# the lesson then says so and carries on.


# %%
def render_all(graph, model_graph) -> dict[str, Path] | str:
    """The drawings, or why they could not be made."""
    model = model_graph.view(depth=1).to_dot("llama2-70b, forward, depth 1")
    try:
        return {"block forward": graph.render(OUT / "block_forward_depth1.svg", depth=1,
                                              title="tiny block, forward, depth 1"),
                "block backward": graph.render(OUT / "block_backward_depth1.svg", depth=1, backward=True,
                                               title="tiny block, backward, depth 1"),
                "block depth 2": graph.render(OUT / "block_forward_depth2.svg", depth=2,
                                              title="tiny block, forward, depth 2"),
                "model depth 2": model_graph.render(OUT / "llama2_70b_depth2.svg", depth=2,
                                                    title="llama2-70b, forward, depth 2"),
                "model svg": render(model, OUT / "llama2_70b_depth1.svg"),
                "model png": render(model, OUT / "llama2_70b_depth1.png", dpi=200)}
    except RuntimeError as err:
        return str(err)


def png_width(path: Path) -> int:
    return struct.unpack(">I", path.read_bytes()[16:20])[0]               # the IHDR chunk's width


def svg_width_pt(path: Path) -> float:
    head = path.read_text()[:2000]
    return float(head.split('<svg width="')[1].split("pt")[0])


# %%
ATTENTION_STEPS = {"": (8, 0), "rope": (32, 2_304), "repeat kv": (6, 0), "scores": (3, 8_704), "mask": (2, 256),
                   "softmax": (7, 1_216), "weighted sum": (1, 8_192)}


def main():
    block, x, dout, graph, fc = record()

    # 1. recording
    counts = call_counts(graph, fc)
    assert counts == {"forward": {"recorded": 118, "counted": 118, "drawn": 118},
                      "backward": {"recorded": 164, "counted": 164, "drawn": 164}}
    c = census(graph)
    assert c["sources"] == {("input", "forward"): 1, ("param", "forward"): 9, ("const", "forward"): 11,
                            ("input", "backward"): 1, ("const", "backward"): 4}
    named = [label for label, shape in c["consts"] if label != "const"]
    assert named == ["block.attn.rope_cos", "block.attn.rope_sin"] and ("const", (8, 8)) in c["consts"]
    assert sum(shape == () for _, shape in c["consts"]) == 8
    assert sum(c["free"].values()) == 63 and set(c["free"]) == {"reshape", "expand", "permute", "slice", "concat"}
    assert c["matmuls"] == [9, 18] and c["meets"] == 19
    assert c["no_grad"] == {("rope", "slice"): 6, ("rope", "expand"): 8, ("mask", "expand"): 1,
                            ("softmax", "max"): 1, ("softmax", "expand"): 1, ("activation", "compare"): 1}
    assert sum(c["no_grad"].values()) == 18
    print(f"recorded primitive calls: {counts['forward']['recorded']} forward, {counts['backward']['recorded']} "
          f"backward; count_flops().calls: {counts['forward']['counted']} and {counts['backward']['counted']}; "
          f"op nodes in the full-depth view: {counts['forward']['drawn']} and {counts['backward']['drawn']}")
    print(f"  source nodes: {dict(c['sources'])}; {sum(c['free'].values())} forward calls move data only; "
          f"matmuls {c['matmuls'][0]} -> {c['matmuls'][1]}; {c['meets']} backward adds where paths meet; "
          f"{sum(c['no_grad'].values())} forward calls without a backward: {dict(c['no_grad'])}")

    # 2. depth 1, forward
    d1 = depth1_forward(graph)
    assert d1["nodes"] == ["norm1", "input", "attn", "residual1", "norm2", "ffn", "residual2"]
    assert d1["boxes"] == ["norm1", "attn", "norm2", "ffn"]
    assert d1["edges"] == [("input", "norm1"), ("norm1", "attn"), ("input", "residual1"), ("attn", "residual1"),
                           ("residual1", "norm2"), ("norm2", "ffn"), ("residual1", "residual2"), ("ffn", "residual2")]
    assert d1["highway"] == [("input", "residual1"), ("residual1", "residual2")]
    assert d1["residual"] == [("residual", "add")] * 2 and d1["shapes"] == {(1, 8, 64)}
    print(f"depth 1, forward: {len(d1['nodes'])} nodes, {len(d1['edges'])} edges, all carrying (1, 8, 64)")
    for n in d1["view"].nodes:
        print(f"  {n.name:4} {n.kind:9} {short(d1['view'], n):10} scope {'.'.join(n.scope) or '-':11} "
              f"step {n.step or '-':9} {n.flops:>8,} FLOPs")
    print("  " + ", ".join(f"{s} -> {d}" + (" (highway)" if (s, d) in d1["highway"] else "") for s, d in d1["edges"]))

    # 3. depth 2, forward
    d2 = depth2_forward(graph)
    assert d2["boxes"] == [("block", "attn", p) for p in ("q_proj", "k_proj", "v_proj", "o_proj")] + \
        [("block", "ffn", p) for p in ("gate_proj", "up_proj", "down_proj")]
    assert "softmax" not in d2["labels"] and len(d2["attn"]) == 59
    assert d2["steps"] == ATTENTION_STEPS and d2["steps"] == {k: (sum(1 for n in d2["attn"] if n.step == k), v)
                                                              for k, v in fc.by_step("forward", scope="block.attn")
                                                              .items()}
    assert 3 * (4 + 2) * 8 * 16 == 2_304 and 512 + 2 * 4 * 8 * 8 * 16 == 8_704 and 4 * 8 * 8 == 256
    assert 5 * 256 - 2 * 32 == 1_216 and CFG.d_head ** 0.5 == 4
    kinds = Counter(n.label for n in d2["attn"])
    assert kinds == {"expand": 13, "slice": 10, "reshape": 8, "mul": 8, "permute": 5, "sub": 3, "add": 3,
                     "concat": 2, "div": 2, "matmul": 2, "max": 1, "exp": 1, "sum": 1}
    rope = [(n.label, n.shape) for n in d2["attn"] if n.step == "rope"]
    assert rope[:2] == [("slice", (8, 16))] * 2 and [op for op, _ in rope[2:17]] == [
        "slice", "slice", "slice", "slice", "expand", "mul", "expand", "mul", "sub", "expand", "mul", "expand", "mul",
        "add", "concat"] == [op for op, _ in rope[17:]]
    assert rope[2:4] == [("slice", (1, 4, 8, 8))] * 2 and rope[17:19] == [("slice", (1, 2, 8, 8))] * 2
    assert tuple(block.attn.rope_cos.shape) == tuple(block.attn.rope_sin.shape) == (128, 16)
    softmax = [n.label for n in d2["attn"] if n.step == "softmax"]
    assert softmax == ["max", "expand", "sub", "exp", "sum", "expand", "div"]
    assert [(n.label, n.shape) for n in d2["view"].find(step="mask")] == [
        ("expand", (1, 4, 8, 8)), ("const", (8, 8)), ("add", (1, 4, 8, 8))]
    assert d2["ffn"] == [("activation", op) for op in ("compare", "neg", "where", "exp", "where", "add", "div",
                                                       "mul")] + [("gate", "mul")]
    print(f"depth 2, forward: boxes {['.'.join(s[1:]) for s in d2['boxes']]}")
    print(f"  attention's own {len(d2['attn'])} primitive calls: " + ", ".join(f"{k} {v}" for k, v in
                                                                             kinds.most_common()))
    for step, (n, flops) in d2["steps"].items():
        ops = " ".join(m.label for m in d2["attn"] if m.step == step)
        print(f"  step {step or '(none)':13} {n:>2} calls {flops:>6,} FLOPs: {ops}")
    print(f"  FFN: {d2['ffn']}")

    # 4. depth 1, backward
    db = depth1_backward(graph)
    assert db["nodes"] == ["ffn", "∂ output", "norm2", "meet1", "attn", "norm1", "meet2", "∂ input"]
    assert db["edges"] == [("∂ output", "ffn"), ("ffn", "norm2"), ("∂ output", "meet1"), ("norm2", "meet1"),
                           ("meet1", "attn"), ("attn", "norm1"), ("meet1", "meet2"), ("norm1", "meet2"),
                           ("meet2", "∂ input")]
    assert highway_path(db["view"]) == ["∂ output", "meet1", "meet2", "∂ input"]
    assert db["meets"] == [(3, 1_536), (3, 1_536)] and 3 * 8 * 64 == 1_536
    assert db["own"] == [("accumulate", 512)] * 6              # the residual adds' backward: no call at all
    err_h, err_x = two_routes(block, x, dout, graph)
    assert err_h < 1e-5 and err_x < 1e-5
    print(f"depth 1, backward: {len(db['meets'])} 'paths meet' nodes; highway {' -> '.join(highway_path(db['view']))}")
    print("  " + ", ".join(f"{s} -> {d}" for s, d in db["edges"]))
    print(f"  dh = g + FFN route (max diff {err_h:.1e}); dx = dh + attention route (max diff {err_x:.1e}); "
          f"the block's own backward calls: {len(db['own'])} sums of {db['own'][0][1]} FLOPs, 3 per circle")

    # 5. depth 2, backward: the GQA group sum
    gs = group_sums(graph)
    assert gs["groups"] == 2 and gs["incoming"] == {(1, 2, 2, 8, 16)} and gs["flops"] == {256}
    assert 2 * 8 * 16 == 256 and sum(gs["copies"].values()) == 2 + 5 and gs["steps"] == {"repeat kv"}
    assert gs["copies"] == {(1, 2, 1, 8, 16): 2, (1, 1, 64): 2, (1, 8, 1): 2, (1, 4, 8, 1): 1}
    assert gs["reaches"] == ["k_proj′", "v_proj′"]
    assert (CFG.n_heads, CFG.n_kv_heads) == (4, 2) and mha_copies() == 5
    print(f"depth 2, backward: {gs['groups']} group sums (1, 2, 2, 8, 16) -> (1, 2, 1, 8, 16), 256 FLOPs each, "
          f"in step 'repeat kv', leading to {gs['reaches']}; 'copies add up' nodes by shape: {dict(gs['copies'])}")

    # 6. FLOPs on the nodes
    fwd, bwd = box_flops(graph), box_flops(graph, backward=True)
    assert fwd == {"norm1": 2_072, "attn": 217_280, "norm2": 2_072, "ffn": 540_768}
    dot = d1["view"].to_dot()                                # the labels as drawn
    for name, text in {"norm1": "2.07", "attn": "217.28", "norm2": "2.07", "ffn": "540.77"}.items():
        assert f'label="{name}\\n(1, 8, 64)\\n{text} kFLOPs"' in dot
    residual = [n.flops for n in d1["view"].find(kind="residual")]
    total = fc.total("forward")
    assert residual == [512, 512] and sum(fwd.values()) + sum(residual) == total == 763_216
    assert max(fwd, key=fwd.get) == "ffn"
    assert round(100 * fwd["ffn"] / total, 1) == 70.9 and round(100 * fwd["attn"] / total, 1) == 28.5
    mm = fc.by_scope("forward", matmul_only=True, depth=2)
    mm_bwd = fc.by_scope("backward", matmul_only=True, depth=2)
    assert mm["block.ffn"] == 3 * 176_128 == 528_384 == 3 * 2 * 8 * 64 * 172
    assert mm["block.attn"] == 196_608 + 16_384 == 2 * 65_536 + 2 * 32_768 + 2 * 8_192
    assert bwd["ffn"] == 1_080_672 and bwd["attn"] == 433_504
    for name in ("ffn", "attn"):
        assert mm_bwd[f"block.{name}"] == 2 * mm[f"block.{name}"] and 1.9 < bwd[name] / fwd[name] < 2
    print(f"FLOPs of the depth-1 boxes: {fwd} + residual adds {residual} = {total:,} "
          f"= count_flops().total('forward'); FFN {fwd['ffn'] / total:.1%}, attention {fwd['attn'] / total:.1%}")
    print(f"  backward boxes: ffn′ {bwd['ffn']:,} ({bwd['ffn'] / fwd['ffn']:.3f} x forward), attn′ {bwd['attn']:,} "
          f"({bwd['attn'] / fwd['attn']:.3f} x)")

    # 7. a whole model
    m = whole_model()
    assert m["nodes"] == [("embed", 1), ("input ids", 1), ("layers.0", 80), ("norm", 1), ("lm_head", 1)]
    assert m["edges"] == [("input ids", "embed"), ("embed", "layers.0"), ("layers.0", "norm"), ("norm", "lm_head")]
    assert m["highway"] == [False, True, True, True] and m["ids"] == ((1, 16), "int64")
    assert {e.shape for e in m["view"].edges if e.highway} == {(1, 16, 8192)}
    per_layer = accounting.block_forward_flops(m["cfg"], 16, 1, matmul_only=False)
    assert m["flops"]["layers.0"] == per_layer == 27_394_914_400 and 80 * per_layer == 2_191_593_152_000
    assert m["flops"]["norm"] == 524_336 and m["flops"]["lm_head"] == 2 * 16 * 8192 * 32000 == 8_388_608_000
    assert sum(n.flops * n.repeat for n in m["view"].nodes) == 2_199_982_284_336 == \
        accounting.model_forward_flops(m["cfg"], 16, 1, matmul_only=False)
    assert m["unfolded"] == 84 and m["view"].warnings == []
    print(f"llama2-70b at depth 1: {len(m['nodes'])} nodes ({m['unfolded']} unfolded): "
          + ", ".join(f"{s} -> {d}" for s, d in m["edges"]) + "; the layers' box stands for 80")
    print(f"  one layer {per_layer:,} FLOPs, x 80 = {80 * per_layer:,}; the model "
          f"{sum(n.flops * n.repeat for n in m['view'].nodes):,}")

    # 8. rendering
    paths = render_all(graph, m["graph"])
    if isinstance(paths, str):
        print(f"rendering skipped: {paths}")
    else:
        assert all(p.read_bytes()[:5] == b"<?xml" for name, p in paths.items() if p.suffix == ".svg")
        assert paths["model png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        ratio = png_width(paths["model png"]) / svg_width_pt(paths["model svg"])
        assert abs(ratio - 200 / 72) < 0.02
        for name, path in paths.items():
            print(f"  {name:15} {path}")
        print(f"  the PNG is {png_width(paths['model png'])} pixels wide, {ratio:.3f} per point of the SVG "
              f"(200 dpi / 72 points per inch = {200 / 72:.3f})")


if __name__ == "__main__":
    main()
