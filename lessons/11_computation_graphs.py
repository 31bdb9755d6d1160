# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 11 — Computation graphs
#
# Lesson 01 recorded a graph for a few operations on numbers and let `backward()` walk it in reverse. This lesson
# reads the graph of a whole transformer block and asks what the picture tells you. Each node is one primitive
# call, each edge one tensor handed from the call that made it to a call that reads it. Nothing is drawn by hand:
# every primitive call, forward and backward, passes through one function, `Function.apply` (the engine's choke
# point), and a recorder watching it writes down each call, as the FLOP counter of lesson 03 does. So each
# drawing is the computation that really ran.
#
# **What you will learn**
# - what depends on what: a path of edges from a tensor to a result, checked by changing the tensor;
# - the block drawn at depth 1, where it reads like its equation and the residual stream is one straight path,
#   and at depth 2, where attention and the FFN open into their steps;
# - the backward graph as the forward graph read in reverse: one backward per forward call, two matmuls for a
#   matmul, visited in reverse topological order;
# - where paths meet: a tensor read twice gets two gradients, added; the residual adds and the GQA group sum;
# - FLOPs on the boxes, adding up to the counted total;
# - a 70B model whose 80 identical layers are drawn once, and what each depth of drawing is for.
#
# Run it as a script, `python -m tinygrad_block lesson 11`, or as a notebook,
# `python -m tinygrad_block lesson 11 --notebook --execute` (it lands beside this file).

# %%
import contextlib
import importlib.util
import io
import json
import shutil
from collections import Counter

import numpy as np

import tinygrad_block as tb
from tinygrad_block import accounting, nn
from tinygrad_block.cli import main as command
from tinygrad_block.counting import count_flops
from tinygrad_block.graph import record_graph
from tinygrad_block.graph_dot import label

from course import out_dir, show

OUT = out_dir(11)          # lessons/out/11/: this lesson's drawings
HAVE_GRAPHVIZ = shutil.which("dot") is not None and importlib.util.find_spec("graphviz") is not None
print("drawings go to lessons/out/11/; " + ("graphviz found" if HAVE_GRAPHVIZ else
      "graphviz is missing, so the graphs are checked but not drawn. The course's setup installs it: "
      "apt-get install graphviz, and pip install -e '.[viz]'"))
assert OUT.is_dir() and OUT.name == "11"


def draw(graph, name: str, **options) -> None:
    """Render a recorded graph to lessons/out/11/`name` (options: depth, backward, title) and show it. Without
    graphviz, say so: the graphs are checked below either way, only the picture is missing."""
    if not HAVE_GRAPHVIZ:
        print(f"rendering skipped: {name} (no graphviz)")
        return
    try:
        show(graph.render(OUT / name, **options))
    except RuntimeError as err:                  # the graphviz package or its `dot` program is missing
        print(f"rendering skipped: {err}")


# %% [markdown]
# ## 1. Nodes and edges: what depends on what
#
# Start small, with the block's first RMSNorm, $y = x / \sqrt{\mathrm{mean}(x^2) + \varepsilon} \odot g$,
# recorded on its own by `record_graph(module, x)` on one sequence of 8 tokens, x of shape (1, 8, 64). Its graph
# has two kinds of node:
#
# - an **op node** is one primitive call: the drawing labels it with the primitive's name, the shape and dtype of
#   the tensor it made, and its FLOPs. The norm makes 10 of them: square (`mul`), `sum`, divide by $d$, add
#   $\varepsilon$, `sqrt`, `reciprocal`, then an `expand` and a `mul` by $x$, and an `expand` of the gain and a
#   last `mul` by it;
# - a **source node** is a tensor that no recorded call made: here the input $x$ and the gain $g$,
#   `norm1.weight`. Scalars such as $d = 64$ and $\varepsilon$ are written into the label of the call that uses
#   them ("with a scalar") rather than drawn as nodes of their own.
#
# An edge runs from the node that made a tensor to each call that reads it: the edge *is* that tensor. The
# norm's graph has 12 nodes and 12 edges.
#
# The graph answers one question at a glance: **what depends on what**. A result depends on a tensor exactly when
# a path of edges leads from the tensor to the result. Here $y$ depends on $x$ along two paths, one through the
# mean square and one straight into the product $x \cdot \mathrm{rstd}$, and on $g$ along one. $x$ has two
# arrows leaving it but is read three times: $x \cdot x$ reads it twice, and a drawing shows one arrow for both.
# Section 5 shows why that difference matters.

# %%
CFG = nn.preset("tiny")                       # d_model 64, 4 query heads sharing 2 KV heads, d_ff 172
B, L = 1, 8
twin = nn.TransformerBlock(CFG, generator=tb.Generator(0))          # for modules recorded on their own
x_norm = tb.randn(B, L, CFG.d_model, generator=tb.Generator(5), requires_grad=True)   # (B, L, d_model)
with record_graph(twin.norm1, x_norm) as norm_graph:
    twin.norm1(x_norm).backward(tb.ones(B, L, CFG.d_model))       # the backward is read in section 4
norm_view = norm_graph.view()                                       # every primitive call, forward
norm_ops = [n.label for n in norm_view.nodes if n.kind == "op"]
x_node = norm_view.find(kind="input")[0]
x_index = next(i for i, n in enumerate(norm_graph.nodes) if n.kind == "input")
reads = sum(norm_graph.nodes[i].inputs.count(x_index) for i in norm_graph.ops("forward"))
print(f"{len(norm_ops)} op nodes: {' '.join(norm_ops)}")
print(f"source nodes: {[n.label for n in norm_view.nodes if n.kind != 'op']}; {len(norm_view.nodes)} nodes, "
      f"{len(norm_view.edges)} edges")
print(f"x: {len(norm_view.successors(x_node.name))} arrows leave it, {reads} reads")
assert norm_ops == ["mul", "sum", "div", "add", "sqrt", "reciprocal", "expand", "mul", "expand", "mul"]
assert [n.label for n in norm_view.nodes if n.kind != "op"] == ["input", "norm1.weight"]
assert (len(norm_view.nodes), len(norm_view.edges)) == (12, 12)
assert [n.label for n in norm_view.successors(x_node.name)] == ["mul", "mul"] and reads == 3
draw(norm_graph, "rmsnorm_forward.png", title="RMSNorm, forward, every primitive")

# %% [markdown]
# Now the whole block, recorded the same way, forward and then backward from a random upstream gradient. Its
# forward pass makes **118** primitive calls, and `count_flops`, which watched the same run from the same choke
# point, counts exactly as many. Its source nodes are the input, the 9 weights and constants: the two RoPE tables,
# the (8, 8) causal mask, and scalars such as the norms' $\varepsilon$.
#
# Follow the edges back from the matmul of attention's scores, $QK^\top$, and you meet the input, `norm1.weight`,
# `q_proj.weight` and `k_proj.weight`: nothing else. The graph says the scores do not depend on `v_proj` or on
# anything in the FFN. The block's output, by contrast, depends on all 9 weights and on the input. That claim can
# be checked without the graph: build the block again with one weight shifted by 0.5 and run it. Shifting
# `k_proj.weight` or `norm1.weight` moves the scores; shifting `v_proj.weight` or `ffn.up_proj.weight` leaves them
# equal bit for bit.

# %%
g = tb.Generator(0)
block = nn.TransformerBlock(CFG, generator=g)
x = tb.randn(B, L, CFG.d_model, generator=g, requires_grad=True)      # (B, L, d_model)
dout = tb.randn(B, L, CFG.d_model, generator=tb.Generator(1))         # the upstream gradient
with record_graph(block, x) as graph, count_flops() as fc:
    block(x).backward(dout)


def ancestors(graph, i: int) -> set[int]:
    """Every node from which a path of edges leads into node i."""
    seen, stack = set(), [i]
    while stack:
        for j in graph.nodes[stack.pop()].inputs:
            if j not in seen:
                seen.add(j)
                stack.append(j)
    return seen


def scores_node(graph) -> int:
    """The forward matmul of attention's 'scores' step: Q K^T, (B, H, L, L)."""
    return next(i for i in graph.ops("forward") if graph.nodes[i].step == "scores"
                and graph.nodes[i].label == "matmul")


def leaves(graph, i: int) -> list[str]:
    return sorted(graph.nodes[j].label for j in ancestors(graph, i) if graph.nodes[j].kind in ("param", "input"))


def scores_with(shifted: str) -> np.ndarray:
    """The scores of a copy of the block whose weight `shifted` is moved by 0.5 (every entry)."""
    state = {k: v + 0.5 if k == shifted else v for k, v in block.state_dict().items()}
    other = nn.TransformerBlock(CFG, generator=tb.Generator(0))
    other.load_state_dict(state)
    with record_graph(other, x) as g_other:
        other(x)
    return g_other.nodes[scores_node(g_other)].tensor.numpy()


calls = len(graph.ops("forward"))
sources = [n for n in graph.nodes if n.kind != "op" and n.phase == "forward"]
counted = sum(n for (phase, *_), n in fc.calls.items() if phase == "forward")
scores = graph.nodes[scores_node(graph)]
moved = {w: float(np.abs(scores_with(w) - scores.tensor.numpy()).max())
         for w in ("attn.k_proj.weight", "norm1.weight", "attn.v_proj.weight", "ffn.up_proj.weight")}
print(f"forward: {calls} primitive calls recorded, {counted} counted by count_flops")
print(f"source nodes: {dict(Counter(n.kind for n in sources))}; constants other than scalars: "
      f"{[(n.label, n.shape) for n in sources if n.kind == 'const' and n.shape]}")
print(f"the scores {scores.shape} depend on {leaves(graph, scores_node(graph))}")
print(f"the output depends on {len(leaves(graph, graph.ops('forward')[-1]))} sources")
print("largest change of the scores when a weight moves by 0.5: " + ", ".join(f"{w} {v:.3g}" for w, v in moved.items()))
assert calls == counted == 118
assert Counter(n.kind for n in sources) == {"input": 1, "param": 9, "const": 11}
assert [(n.label, n.shape) for n in sources if n.kind == "const" and n.shape] == [
    ("block.attn.rope_cos", (128, CFG.d_head)), ("block.attn.rope_sin", (128, CFG.d_head)), ("const", (L, L))]
assert leaves(graph, scores_node(graph)) == ["block.attn.k_proj.weight", "block.attn.q_proj.weight",
                                             "block.norm1.weight", "input"]
assert leaves(graph, graph.ops("forward")[-1]) == sorted([f"block.{k}" for k in block.state_dict()] + ["input"])
assert len(block.parameters()) == 9 and scores.shape == (B, CFG.n_heads, L, L)
assert moved["attn.k_proj.weight"] > 0.1 and moved["norm1.weight"] > 0.1
assert moved["attn.v_proj.weight"] == 0.0 and moved["ffn.up_proj.weight"] == 0.0


# %% [markdown]
# ## 2. Depth 1: the block's equation and the highway
#
# 118 nodes are too many to read at once. Between the recording and the picture sits a **view**,
# `graph.view(depth, backward=...)`: the nodes and edges a drawing shows. `view(depth=1)` collapses every module
# one level below the block into a box, whose FLOPs are the sum of the calls inside it. What remains are the four
# sublayers and the block's own two calls, the residual adds:
#
# $$h = x + \mathrm{attn}(\mathrm{norm}_1(x)), \qquad \mathrm{out} = h + \mathrm{ffn}(\mathrm{norm}_2(h)).$$
#
# The view has 7 nodes (the input, 4 boxes, 2 residual circles) and 8 edges, and every edge carries the shape
# (1, 8, 64): each sublayer reads and writes the stream's shape. The picture is the equation. (Nodes and edges are
# data: `view.find(kind=..., label=..., step=...)` picks nodes, `view.successors(name)` and
# `view.predecessors(name)` follow edges; everything below is read off views, never parsed from the drawing.)
#
# Two edges, `input -> residual1` and `residual1 -> residual2`, carry the stream from one residual add to the next
# and pass through no box. The drawing makes them thick and green, and graphviz lays them out as one straight line
# from the input through both green "+ residual" circles: that line is the residual stream, the **highway** of
# the block. Each sublayer is a detour, a norm box and then an attn or ffn box, that leaves the stream, computes,
# and comes back to add its result into a circle. Nothing on the highway itself changes $x$: a block only adds.

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
print(f"{len(d1.nodes)} nodes: " + ", ".join(f"{short(d1, n)} ({n.kind})" for n in d1.nodes))
print("edges: " + ", ".join(f"{s} -> {d}" for s, d in arrows(d1)))
print(f"highway: {arrows(d1, highway_only=True)}")
assert [short(d1, n) for n in d1.nodes] == ["norm1", "input", "attn", "residual1", "norm2", "ffn", "residual2"]
assert [n.label for n in d1.find(kind="box")] == ["norm1", "attn", "norm2", "ffn"]
assert arrows(d1) == [("input", "norm1"), ("norm1", "attn"), ("input", "residual1"), ("attn", "residual1"),
                      ("residual1", "norm2"), ("norm2", "ffn"), ("residual1", "residual2"), ("ffn", "residual2")]
assert arrows(d1, highway_only=True) == [("input", "residual1"), ("residual1", "residual2")]
assert [(n.step, n.label) for n in d1.find(kind="residual")] == [("residual", "add")] * 2
assert {e.shape for e in d1.edges} == {(B, L, CFG.d_model)} and len(d1.edges) == 8
draw(graph, "block_forward_depth1.png", depth=1, title="tiny block, forward, depth 1")

# %% [markdown]
# ## 3. Depth 2: inside attention and the FFN
#
# At `depth=2` the sublayers open. Their own sub-modules, the seven projections `q_proj`, `k_proj`, `v_proj`,
# `o_proj` and `gate_proj`, `up_proj`, `down_proj`, become the boxes, and everything else is drawn call by call.
# There is no `softmax` node, because softmax is a composite written from primitives (lesson 01). But attention
# names its steps in its code (`with step("rope"):` and so on); every node carries its step, and the drawing frames
# each step's nodes with a dotted line labelled with its name. Attention's own 59 calls, step by step:
#
# | step | what the calls do | calls | FLOPs |
# |---|---|---|---|
# | (none) | split q, k and v into heads, and merge the heads at the end | 8 | 0 |
# | rope | rotate q and k (lesson 07): slices, products, a sum and a difference, a concat | 32 | 2,304 |
# | repeat kv | copy each of the 2 key/value heads to its 2 query heads | 6 | 0 |
# | scores | $q k^\top / \sqrt{d_{head}}$, a matmul of shape (1, 4, 8, 8) | 3 | 8,704 |
# | mask | add the causal mask | 2 | 256 |
# | softmax | subtract the row max, exp, sum, divide | 7 | 1,216 |
# | weighted sum | the weights times v, a matmul of shape (1, 4, 8, 16) | 1 | 8,192 |
#
# The FLOPs follow from the shapes: the scores' matmul costs $2 \cdot H \cdot L \cdot L \cdot d_{head}$
# $= 2 \cdot 4 \cdot 8 \cdot 8 \cdot 16$ = 8,192, plus 512 for dividing the 512 entries of q by 4; the mask adds one
# per score, $4 \cdot 8 \cdot 8$ = 256. The FFN opens into 9 calls between its projection boxes: SiLU written as 8
# primitives (the 'activation' step) and the gate's product (the 'gate' step).
#
# What each depth is for:
#
# | view | forward nodes | backward nodes | read it for |
# |---|---|---|---|
# | depth 1 | 7 | 8 | the equation, the highway, which sublayer costs what |
# | depth 2 | 103 | 120 | the projections, attention's steps, where the $L \times L$ work sits |
# | every primitive (`view()`) | 131 | 175 | one call's shape or FLOPs, when something is wrong |
#
# Below, attention is recorded on its own: depth counts from the module you record, so attention's depth 1 is the
# block's depth 2, the same 59 calls in the same order. (The block's own depth-2 drawing, with norm1, attention,
# norm2 and the FFN opened and the highway down its right side, is written to `block_forward_depth2.svg`.) Open
# `attention_forward.svg` in a browser to zoom: the wide `rope` frame rotates the halves of q and k side by side,
# the narrow `repeat kv` column copies the key/value heads, and `scores`, `mask`, `softmax` and `weighted sum` run
# down to `o_proj`.

# %%
d2 = graph.view(depth=2)
attn_ops = [n for n in d2.nodes if n.scope == ("block", "attn") and n.kind == "op"]
steps = {}
for n in attn_ops:
    steps.setdefault(n.step, []).append(n)
table = {step: (len(nodes), sum(n.flops for n in nodes)) for step, nodes in steps.items()}
ffn_ops = [(n.step, n.label) for n in d2.nodes if n.scope == ("block", "ffn") and n.kind == "op"]
sizes = {(depth, backward): len(graph.view(depth, backward=backward).nodes)
         for depth in (1, 2, None) for backward in (False, True)}
print(f"boxes at depth 2: {[n.label for n in d2.find(kind='box')]}")
print(f"attention's {len(attn_ops)} calls by step (calls, FLOPs): {table}")
print(f"the FFN's {len(ffn_ops)} calls: {ffn_ops}")
print(f"nodes (depth, backward): {sizes}")
assert [n.label for n in d2.find(kind="box")] == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                  "down_proj"]
assert "softmax" not in [n.label for n in d2.nodes] and len(attn_ops) == 59
assert table == {"": (8, 0), "rope": (32, 2_304), "repeat kv": (6, 0), "scores": (3, 8_704), "mask": (2, 256),
                 "softmax": (7, 1_216), "weighted sum": (1, 8_192)}
assert table == {k: (len(steps[k]), v) for k, v in fc.by_step("forward", scope="block.attn").items()}
H, H_KV, D_HEAD = CFG.n_heads, CFG.n_kv_heads, CFG.d_head
assert 2 * H * L * L * D_HEAD == 8_192 and H * L * D_HEAD == 512 and D_HEAD ** 0.5 == 4 and H * L * L == 256
assert [n.label for n in steps["softmax"]] == ["max", "expand", "sub", "exp", "sum", "expand", "div"]
assert ffn_ops == [("activation", op) for op in ("compare", "neg", "where", "exp", "where", "add", "div",
                                                 "mul")] + [("gate", "mul")]
assert sizes == {(1, False): 7, (1, True): 8, (2, False): 103, (2, True): 120, (None, False): 131,
                 (None, True): 175}

x_attn = twin.norm1(x).detach().requires_grad_()                      # (B, L, d_model): what attention reads
with record_graph(twin.attn, x_attn) as attn_graph:
    twin.attn(x_attn).backward(dout)                                  # the backward is read in section 5
zoom = attn_graph.view(depth=1)
same = [n.label for n in zoom.nodes if n.kind == "op"] == [n.label for n in attn_ops]
print(f"attention recorded alone, depth 1: its calls are the block's depth-2 attention calls, in order: {same}")
assert same and [n.label for n in zoom.find(kind="box")] == ["q_proj", "k_proj", "v_proj", "o_proj"]
if HAVE_GRAPHVIZ:
    graph.render(OUT / "block_forward_depth2.svg", depth=2, title="tiny block, forward, depth 2")
draw(attn_graph, "attention_forward.svg", depth=1, title="tiny attention, forward, depth 1")

# %% [markdown]
# ## 4. The backward graph: the forward read in reverse
#
# `backward()` makes primitive calls too, and the recorder sees them: they form the **backward graph**, whose
# edges carry gradients from the output back towards the inputs. Its shape is fixed by the forward graph. Each
# forward call that needs a gradient has exactly one backward, written in the same primitives (lesson 02), and the
# drawing labels each of its calls "backward of" the forward call it differentiates (`node.source` holds that
# call). Back to the RMSNorm of section 1, drawn backward below from `∂ output` at the top to `∂ input` and
# `∂ norm1.weight` at the bottom:
#
# - its 10 forward calls become 18 backward calls: 16 inside the backwards of 9 forward calls, and 2 additions
#   (section 5). The add of $\varepsilon$ has no call of its own: the backward of an add hands the gradient on
#   unchanged;
# - each backward takes as many calls as its derivative needs: 2 `mul`s for a product (one gradient for each
#   input), 3 for `reciprocal` ($-g / r^2$), one `sum` for an `expand` (copies add up, lesson 03).

# %%
def backward_of(graph) -> dict[int, list[int]]:
    """Forward call -> the backward calls that differentiate it (additions where paths meet left out)."""
    found = {}
    for i in graph.ops("backward"):
        node = graph.nodes[i]
        if node.origin != "accumulate" and node.source is not None:
            found.setdefault(node.source, []).append(i)
    return found


norm_back = backward_of(norm_graph)
norm_fwd = norm_graph.ops("forward")
per_call = [(norm_graph.nodes[i].label, [norm_graph.nodes[j].label for j in norm_back.get(i, [])])
            for i in norm_fwd]
norm_sums = sum(norm_graph.nodes[i].origin == "accumulate" for i in norm_graph.ops("backward"))
print(f"RMSNorm: {len(norm_fwd)} forward calls, {len(norm_graph.ops('backward'))} backward calls: "
      f"{sum(len(v) for v in norm_back.values())} in backwards, {norm_sums} additions")
print("forward call -> its backward calls: " + "; ".join(f"{f}: {' '.join(b) or '(none)'}" for f, b in per_call))
assert len(norm_fwd) == 10 and len(norm_graph.ops("backward")) == 18 and norm_sums == 2
assert sum(len(v) for v in norm_back.values()) == 16 and len(norm_back) == 9
assert per_call[3] == ("add", []) and per_call[0] == ("mul", ["mul", "mul"]) and per_call[5][1] == ["mul", "mul", "neg"]
assert [b for f, b in per_call if f == "expand"] == [["sum"], ["sum", "reshape"]]
draw(norm_graph, "rmsnorm_backward.png", backward=True, title="RMSNorm, backward, every primitive")

# %% [markdown]
# In the whole block, `backward()` makes 164 primitive calls for the 118 forward ones. 100 of the forward calls
# need a gradient; the other 18 only touch constants (slices of the RoPE tables and their expands, the mask's
# expand, softmax's row max and its expand, SiLU's sign test). 91 of the 100 have backward calls, and 9 adds and
# subtractions hand their gradient on unchanged. Every one of the 9 forward matmuls, $C = AB$, has exactly
# **two** matmuls in its backward, one for each input:
#
# $$\frac{\partial \mathcal L}{\partial A} = G B^\top, \qquad \frac{\partial \mathcal L}{\partial B} = A^\top G,
# \qquad G = \frac{\partial \mathcal L}{\partial C},$$
#
# which is why the backward costs about twice the forward (section 6).
#
# **The order.** The backward graph is the forward read in reverse, so `backward()` must reach a call only after
# every call that read its output: a reverse topological order (lesson 02). In the recording, the first backward
# call differentiates the FFN's `down_proj`, the last forward call before the residual add, and the last one
# differentiates norm1's first `mul`. Over all 94 forward edges between two calls that have a backward, the
# reader's backward runs before the writer's, every time. It is not simply the forward order turned round: any
# order that respects the edges is correct, and the engine picks one.

# %%
nodes = graph.nodes
fwd_calls = graph.ops("forward")
back = backward_of(graph)
needs_grad = [i for i in fwd_calls if nodes[i].tensor.requires_grad]
no_grad = Counter((nodes[i].step, nodes[i].label) for i in fwd_calls if i not in needs_grad)
handed_on = sorted({nodes[i].label for i in needs_grad if i not in back})
matmuls = [i for i in fwd_calls if nodes[i].label == "matmul"]
two_each = [sum(nodes[j].label == "matmul" for j in back[i]) for i in matmuls]
first = {i: min(calls) for i, calls in back.items()}              # when each forward call's backward starts
pairs = [(a, b) for b in fwd_calls for a in set(nodes[b].inputs) if a in first and b in first]
in_order = sum(first[b] < first[a] for a, b in pairs)
runs = sorted(first, key=first.get)
print(f"{len(graph.ops('backward'))} backward calls for {len(fwd_calls)} forward ones")
print(f"forward calls that need a gradient: {len(needs_grad)}; with backward calls: {len(back)}; "
      f"handing it on unchanged: {len(needs_grad) - len(back)} ({', '.join(handed_on)})")
print(f"matmuls in each forward matmul's backward: {two_each}")
print(f"forward edges between calls with a backward: {len(pairs)}; the reader's backward first: {in_order}")
print(f"backward starts with {'.'.join(nodes[runs[0]].scope)}'s {nodes[runs[0]].label} and ends with "
      f"{'.'.join(nodes[runs[-1]].scope)}'s {nodes[runs[-1]].label}; forward order reversed: "
      f"{runs == sorted(runs, reverse=True)}")
assert (len(graph.ops("backward")), len(fwd_calls)) == (164, 118)
assert (len(needs_grad), len(back), len(fwd_calls) - len(needs_grad)) == (100, 91, 18) and handed_on == ["add", "sub"]
assert no_grad == {("rope", "slice"): 6, ("rope", "expand"): 8, ("mask", "expand"): 1, ("softmax", "max"): 1,
                   ("softmax", "expand"): 1, ("activation", "compare"): 1}
assert two_each == [2] * 9 and len(matmuls) == 9
assert len(pairs) == in_order == 94
assert nodes[runs[0]].scope == ("block", "ffn", "down_proj") and runs[0] == max(first)
assert nodes[runs[-1]].scope == ("block", "norm1") and nodes[runs[-1]].label == "mul" and runs[-1] == min(first)
assert runs != sorted(runs, reverse=True)

# %% [markdown]
# ## 5. Where paths meet: the residual and the group sum
#
# A tensor read by several calls sends a gradient back along each read, and `backward()` adds them up: the
# gradient accumulation of lesson 02. The number of reads is the tensor's **fan-out**; a tensor with fan-out $k$
# gets $k$ gradients and sums them with $k - 1$ additions, drawn as orange "+ paths meet" circles. In the RMSNorm
# above, $x$ is read 3 times, so 2 circles sit just above `∂ input`.
#
# `view(depth=1, backward=True)` draws the block's gradient from top to bottom. It starts at `∂ output`, runs
# through `ffn′`, `norm2′`, `attn′` and `norm1′` (boxes holding each sublayer's backward calls) and ends at
# `∂ input`, with exactly two circles where paths meet, one per residual:
#
# ```
# ∂ output ─┬─> ffn′ ─> norm2′ ─┐
#           └───────────────────+ meet1 ─┬─> attn′ ─> norm1′ ─┐
#                                        └────────────────────+ meet2 ─> ∂ input
# ```
#
# The residual add $\mathrm{out} = h + f(h)$, with $f = \mathrm{ffn} \circ \mathrm{norm}_2$, uses $h$ twice, so
#
# $$\frac{\partial \mathcal L}{\partial h} = g + \Big(\frac{\partial f}{\partial h}\Big)^{\!\top} g,
# \qquad g = \frac{\partial \mathcal L}{\partial \mathrm{out}}:$$
#
# one term per path, added where the paths meet. The split has no node: the add's backward hands $g$ to both of
# its inputs unchanged, so it is just `∂ output`'s two outgoing edges. Lesson 10 wrote these two routes by hand;
# here they are read off what autograd did. At depth 1 one circle stands for all the additions into $h$: norm2
# reads $h$ three more times (twice in $h \cdot h$, once in $h \cdot \mathrm{rstd}$), so its fan-out is 4 and the
# circle holds 3 additions, 512 FLOPs each (one per number of the (1, 8, 64) stream), 1,536 in all.
#
# The straight path `∂ output -> meet1 -> meet2 -> ∂ input` passes through no box: it is the highway again,
# backward. The upstream gradient reaches the block's input untouched, and each sublayer only *adds* its
# correction. In a stack of blocks the same straight path runs from the loss to the first layer, however small each
# sublayer's own gradient is.

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
norm_back_view = norm_graph.view(backward=True)
norm_circles = norm_back_view.find(kind="accumulate")
print(f"RMSNorm: x read {reads} times, {len(norm_circles)} 'paths meet' circles above ∂ input")
print("edges: " + ", ".join(f"{s} -> {d}" for s, d in arrows(db)))
print(f"highway: {' -> '.join(along_highway(db))}; 'paths meet' circles (additions, FLOPs): {circles}")
assert [short(db, n) for n in db.nodes] == ["ffn", "∂ output", "norm2", "meet1", "attn", "norm1", "meet2", "∂ input"]
assert arrows(db) == [("∂ output", "ffn"), ("ffn", "norm2"), ("∂ output", "meet1"), ("norm2", "meet1"),
                      ("meet1", "attn"), ("attn", "norm1"), ("meet1", "meet2"), ("norm1", "meet2"),
                      ("meet2", "∂ input")]
assert along_highway(db) == ["∂ output", "meet1", "meet2", "∂ input"]
above_input = norm_back_view.predecessors(norm_back_view.find(label="∂ input")[0].name)
assert len(norm_circles) == reads - 1 == 2 and [n.kind for n in above_input] == ["accumulate"]
assert not any(n.kind == "box" for n in db.nodes if short(db, n) in along_highway(db))
assert circles == [(4 - 1, 3 * 512), (4 - 1, 3 * 512)] and B * L * CFG.d_model == 512
draw(graph, "block_backward_depth1.png", depth=1, backward=True, title="tiny block, backward, depth 1")

# %% [markdown]
# The two paths can be checked with numbers. Record the same block in float64, keeping every intermediate
# gradient (`retain_grads=True`). $h$ is the output of the first residual add. Its gradient must equal $g$ plus
# what the FFN path alone sends back, which we get by running $\mathrm{ffn}(\mathrm{norm}_2(h))$ on its own from a
# detached copy of $h$. Likewise $\partial x$ must equal $\partial h$ plus what the attention path alone sends back.
# Both agree to within a relative $10^{-12}$; only the order of the additions differs.

# %%
block64 = nn.TransformerBlock(CFG, generator=tb.Generator(0), dtype=tb.float64)
x64 = tb.randn(B, L, CFG.d_model, generator=tb.Generator(0), dtype=tb.float64, requires_grad=True)
g64 = tb.randn(B, L, CFG.d_model, generator=tb.Generator(1), dtype=tb.float64)
with record_graph(block64, x64, retain_grads=True) as graph64:
    block64(x64).backward(g64)
first_circle = graph64.view(depth=1).find(kind="residual")[0]
h = graph64.nodes[first_circle.members[0]].tensor                    # h = x + attn(norm1(x))
h_alone, x_alone = h.detach().requires_grad_(), x64.detach().requires_grad_()
block64.ffn(block64.norm2(h_alone)).backward(g64)                    # the FFN path alone, into h
block64.attn(block64.norm1(x_alone)).backward(h.grad)                # the attention path alone, into x


def rel(a, b) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


err_h = rel(g64.numpy() + h_alone.grad.numpy(), h.grad.numpy())
err_x = rel(h.grad.numpy() + x_alone.grad.numpy(), x64.grad.numpy())
print(f"dh = g + FFN path: relative difference {err_h:.1e}; dx = dh + attention path: {err_x:.1e}")
assert err_h < 1e-12 and err_x < 1e-12
assert first_circle.kind == "residual" and h.shape == (B, L, CFG.d_model)

# %% [markdown]
# Paths also meet where a tensor is *copied*. Under grouped-query attention (lesson 07) the 2 key/value heads
# serve 4 query heads, and the `repeat kv` step copies each KV head to its group of 2 with an `expand`: k of shape
# (1, 2, 8, 16) becomes (1, 2, 2, 8, 16). Each copy then receives its own query head's gradient, and the backward
# of the expand adds the copies back up (lesson 03): a **sum** over the group, labelled "backward of expand: copies
# add up". There are two, one for K and one for V, each reading (1, 2, 2, 8, 16) and writing (1, 2, 1, 8, 16) at
# 256 FLOPs (one addition for each of the $2 \cdot 8 \cdot 16$ entries). Lesson 10 derived this group sum by hand.
#
# Below is attention's backward, recorded alone in section 3. Inside the dotted `repeat kv` frame the higher sum
# takes V's gradient from the weighted sum and leads down to `v_proj′`; the lower one takes K's gradient from the
# scores and, through RoPE's backward, leads to `k_proj′`. The last circle, just above `∂ input`, is where
# `q_proj′`, `k_proj′` and `v_proj′` meet: the normalised input fed all three projections, fan-out 3, so 2
# additions of 512 FLOPs.

# %%
COPIES = "backward of expand: copies add up"


def first_box(view, node) -> str:
    """Follow the gradient from a node down its first outgoing edges until it reaches a module box."""
    while node.kind != "box":
        node = view.successors(node.name)[0]
    return node.label + "′"


zoom_back = attn_graph.view(depth=1, backward=True)
groups = [n for n in zoom_back.nodes if n.note == COPIES and n.step == "repeat kv"]
last = zoom_back.predecessors(zoom_back.find(label="∂ input")[0].name)[0]
feeding = sorted(p.label for p in zoom_back.predecessors(last.name))
for n in groups:
    incoming = [e.shape for e in zoom_back.edges if e.dst == n.name]
    print(f"group sum {incoming} -> {n.shape}, {n.flops} FLOPs, leads to {first_box(zoom_back, n)}")
print(f"the last circle sums {feeding}: {len(last.members)} additions, {last.flops:,} FLOPs")
assert [n.shape for n in groups] == [(B, H_KV, 1, L, D_HEAD)] * 2 and H // H_KV == 2
assert {e.shape for n in groups for e in zoom_back.edges if e.dst == n.name} == {(B, H_KV, H // H_KV, L, D_HEAD)}
assert [n.flops for n in groups] == [(H // H_KV - 1) * H_KV * L * D_HEAD] * 2 == [256] * 2
assert [first_box(zoom_back, n) for n in groups] == ["v_proj′", "k_proj′"]          # V's first, higher up
assert last.kind == "accumulate" and feeding == ["k_proj", "q_proj", "v_proj"]
assert len(last.members) == 3 - 1 and last.flops == 2 * B * L * CFG.d_model == 1_024
draw(attn_graph, "attention_backward.svg", depth=1, backward=True, title="tiny attention, backward, depth 1")

# %% [markdown]
# ## 6. FLOPs on the boxes
#
# Op nodes carry their FLOPs and a box carries the sum of the calls inside it, so the depth-1 drawing is also a
# FLOP budget. Labels round to two decimals in kFLOPs (thousands of FLOPs); the view holds the exact figures:
#
# | box | forward FLOPs | label |
# |---|---|---|
# | norm1 | 2,072 | 2.07 kFLOPs |
# | attn | 217,280 | 217.28 kFLOPs |
# | norm2 | 2,072 | 2.07 kFLOPs |
# | ffn | 540,768 | 540.77 kFLOPs |
#
# Add the two residual adds (512 FLOPs each) and you get 763,216, exactly what `count_flops` counted for the
# forward pass: nothing is left out of the picture and nothing is counted twice. The FFN is the biggest box, with
# **70.9 %** of the block against 28.5 % for attention; its three $64 \times 172$ matmuls cost
# $3 \cdot 2 \cdot 8 \cdot 64 \cdot 172$ = 528,384 of its 540,768. At $L = 8$ attention's $L \times L$ part is
# small (lesson 13 shows it growing with $L$).
#
# Backward, the boxes `ffn′` (1,080,672) and `attn′` (433,504) cost just under twice their forward boxes: their
# matmuls exactly twice (two matmuls for one, section 4), the elementwise work a little less.

# %%
fwd = {n.label: n.flops for n in d1.find(kind="box")}
bwd = {n.label: n.flops for n in db.find(kind="box")}
drawn = {n.label: label(d1, n).split("\\n")[-1] for n in d1.find(kind="box")}   # the box's last line, as drawn
residual = [n.flops for n in d1.find(kind="residual")]
total = fc.total("forward")
mm = fc.by_scope("forward", matmul_only=True, depth=2)
mm_bwd = fc.by_scope("backward", matmul_only=True, depth=2)
print(f"forward boxes {fwd}, drawn as {drawn}")
print(f"boxes + residual adds {residual} = {sum(fwd.values()) + sum(residual):,}; count_flops: {total:,}; "
      f"FFN {fwd['ffn'] / total:.1%}, attention {fwd['attn'] / total:.1%}")
print(f"backward boxes: ffn′ {bwd['ffn']:,} ({bwd['ffn'] / fwd['ffn']:.3f} x), attn′ {bwd['attn']:,} "
      f"({bwd['attn'] / fwd['attn']:.3f} x); matmuls backward / forward: "
      f"{mm_bwd['block.ffn'] / mm['block.ffn']:g}, {mm_bwd['block.attn'] / mm['block.attn']:g}")
assert fwd == {"norm1": 2_072, "attn": 217_280, "norm2": 2_072, "ffn": 540_768}
assert drawn == {k: f"{v / 1000:.2f} kFLOPs" for k, v in fwd.items()}
assert drawn == {"norm1": "2.07 kFLOPs", "attn": "217.28 kFLOPs", "norm2": "2.07 kFLOPs", "ffn": "540.77 kFLOPs"}
assert residual == [512, 512] and sum(fwd.values()) + sum(residual) == total == 763_216
assert max(fwd, key=fwd.get) == "ffn"
assert round(100 * fwd["ffn"] / total, 1) == 70.9 and round(100 * fwd["attn"] / total, 1) == 28.5
assert mm["block.ffn"] == 3 * 2 * L * CFG.d_model * CFG.d_ff == 528_384
assert bwd["ffn"] == 1_080_672 and bwd["attn"] == 433_504
for name in ("ffn", "attn"):
    assert mm_bwd[f"block.{name}"] == 2 * mm[f"block.{name}"] and 1.9 < bwd[name] / fwd[name] < 2

# %% [markdown]
# ## 7. A 70B model drawn once
#
# The same recorder runs on a whole model on the shape-only device (`device="meta"`, lesson 01), so Llama-2-70B
# is recorded without allocating anything. At depth 1 its 80 layers would be 80 boxes in a column, all alike.
# Instead the view folds a run of numbered sibling modules that recorded the same calls, shapes, steps and FLOPs,
# wired the same way, into one box marked × 80: **folded layers** (`view.folds` says which run it stands for:
# layers 0 to 79). For token ids of shape (1, 16) the model reads, top to bottom, in 5 nodes:
#
# ```
# input ids (1, 16) int64 -> embed -> layers.0–79 × 80 -> norm -> lm_head
# ```
#
# The stream, of shape (1, 16, 8192), runs along the highway from the embedding through the layers to the final
# norm and the head. One layer costs 27,394,914,400 FLOPs (the closed form `accounting.block_forward_flops`), 80
# of them 2,191,593,152,000; add the final norm (524,336) and the head's $2 \cdot 16 \cdot 8192 \cdot 32000$ =
# 8,388,608,000 and you have the model's 2,199,982,284,336 FLOPs, exactly `accounting.model_forward_flops`.
#
# What the depths tell you here:
#
# - at depth 1, the model's whole architecture in 5 nodes: what feeds what, and where the FLOPs go (99.6 % in the
#   layers);
# - at depth 2 (the drawing below, 25 nodes), one layer opened into its norms, attn and ffn boxes and its two
#   residual circles, inside a bold frame with the note "× 80 identical layers, drawn once";
# - at every primitive, folded, one layer's every call: 149 nodes. Unfolded it would be 10,419, and a view that
#   large carries a warning naming the smaller views of the same graph.
#
# And the size of the model changes the shapes and the FLOPs, not the drawing: the `graph` command
# (`python -m tinygrad_block graph`, every option in `docs/cli.md`) draws Llama-2-70B's block at depth 1, backward,
# with the same 8 nodes and 9 edges as the tiny block's in section 5. Lesson 19 opens these same graphs in a
# browser page, where a click opens a box and a hover shows a node's numbers.

# %%
cfg70 = nn.preset("llama2-70b")
model = nn.LM(cfg70, generator=tb.Generator(0), device="meta")
ids = tb.zeros(1, 16, dtype=tb.int64, device="meta")                  # (B, L) token ids
with record_graph(model, ids) as model_graph:
    model(ids)
m1 = model_graph.view(depth=1)
m2 = model_graph.view(depth=2)
per_layer = accounting.block_forward_flops(cfg70, 16, 1, matmul_only=False)
flops = {n.label: n.flops for n in m1.nodes}
whole = sum(n.flops * n.repeat for n in m1.nodes)
sizes70 = {"depth 2": len(m2.nodes), "every primitive": len(model_graph.view().nodes),
           "unfolded": len(model_graph.view(fold=False).nodes)}
warning = model_graph.view(fold=False).warnings
print(f"depth 1: {[(n.label, n.repeat) for n in m1.nodes]}; folds {m1.folds}")
print(f"one layer {per_layer:,} FLOPs, x 80 = {80 * per_layer:,}; the whole model {whole:,}")
print(f"nodes: {sizes70}; warning: {warning}")
assert [(n.label, n.repeat) for n in m1.nodes] == [("embed", 1), ("input ids", 1), ("layers.0", 80), ("norm", 1),
                                                   ("lm_head", 1)]
assert m1.folds == {("model", "layers.0"): (0, 79)} and cfg70.n_layers == 80
assert arrows(m1) == [("input ids", "embed"), ("embed", "layers.0"), ("layers.0", "norm"), ("norm", "lm_head")]
assert [e.highway for e in m1.edges] == [False, True, True, True]
assert {e.shape for e in m1.edges if e.highway} == {(1, 16, cfg70.d_model)} and cfg70.d_model == 8192
assert flops["layers.0"] == per_layer == 27_394_914_400 and 80 * per_layer == 2_191_593_152_000
assert flops["norm"] == 524_336 and flops["lm_head"] == 2 * 16 * 8192 * cfg70.vocab_size == 8_388_608_000
assert whole == 2_199_982_284_336 == accounting.model_forward_flops(cfg70, 16, 1, matmul_only=False)
assert round(100 * 80 * per_layer / whole, 1) == 99.6
assert "× 80\\lidentical layers,\\ldrawn once" in m2.to_dot()
assert sizes70 == {"depth 2": 25, "every primitive": 149, "unfolded": 10_419}
assert m1.warnings == [] and len(warning) == 1 and "10,419 nodes" in warning[0]
assert [n.label for n in m2.find(kind="box")] == ["norm1", "attn", "norm2", "ffn"]
assert len(m2.find(kind="residual")) == 2 and all(m2.runs(n) == 80 for n in m2.find(kind="residual"))
draw(model_graph, "llama2_70b_depth2.svg", depth=2, title="llama2-70b, forward, depth 2")

cli_out = OUT / "llama2_70b_block_backward_depth1.dot"
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    status = command(["graph", "--preset", "llama2-70b", "--depth", "1", "--backward", "--out", str(cli_out),
                      "--json"])
result = json.loads(printed.getvalue())
print(f"graph --preset llama2-70b --depth 1 --backward: exit status {status}, {result['nodes']} nodes, "
      f"{result['edges']} edges (the tiny block: {len(db.nodes)} and {len(db.edges)})")
assert status == 0 and (result["nodes"], result["edges"]) == (len(db.nodes), len(db.edges)) == (8, 9)
assert cli_out.read_text().startswith("digraph")

# %% [markdown]
# ## Check yourself
#
# 1. The scores $QK^\top$ of the tiny block do not change when `v_proj.weight` changes. How does the forward graph
#    show that before anything is run?
#
#    <details><summary>Answer</summary>
#
#    No path of edges leads from `v_proj.weight` to the scores' matmul: the scores' only sources are the input,
#    `norm1.weight`, `q_proj.weight` and `k_proj.weight`. A result depends on a tensor exactly when such a path
#    exists.
#
#    </details>
#
# 2. Why does the backward of every forward matmul contain two matmuls?
#
#    <details><summary>Answer</summary>
#
#    $C = AB$ has two inputs that need a gradient, and each gradient is one matmul: $G B^\top$ for $A$ and
#    $A^\top G$ for $B$. That is also why a matmul's backward costs twice its forward.
#
#    </details>
#
# 3. A tensor is read by three calls in the forward graph. What does the backward graph do there, and what does
#    that look like in the drawing?
#
#    <details><summary>Answer</summary>
#
#    Three gradients come back to it, one per read, and they are added with two additions: the orange "paths
#    meet" circles. The residual adds and the group sum over copied KV heads are both cases of this.
#
#    </details>
#
# 4. Llama-2-70B and the tiny block give the same 8-node drawing at depth 1, backward. What does that drawing
#    tell you, and what does it not?
#
#    <details><summary>Answer</summary>
#
#    It shows how the sublayers are wired (the equation, the two paths meeting at each residual, the highway
#    through no box) and what each box costs. It does not show the primitives inside a box; for those you open a
#    deeper view. The model's size changes the shapes and FLOPs on the boxes, not the picture.
#
#    </details>

# %% [markdown]
# ## Words from this lesson
#
# - **op node**: a node of a computation graph that stands for one primitive call, labelled with its name, the
#   shape it made and its FLOPs (§1)
# - **source node**: a node for a tensor that no recorded call made, such as the input, a weight or a constant
#   table (§1)
# - **view**: what a drawing shows of a recorded graph, with every module deeper than a chosen depth collapsed
#   into one box (§2)
# - **highway**: the path of the residual stream through a block's drawing that passes through no sublayer, from
#   the input to the output, and backward from the output's gradient to the input's (§2)
# - **backward graph**: the graph of the calls `backward()` makes, the forward graph read in reverse, whose edges
#   carry gradients from the output towards the inputs (§4)
# - **fan-out**: the number of times a tensor is read in the forward graph; a tensor with fan-out k receives k
#   gradients and adds them with k − 1 additions (§5)
# - **folded layers**: a run of identical layers drawn once, as one box marked with how many it stands for (§7)

# %% [markdown]
# ## Exercises
#
# 1. `predict_meetings`: given the graph of a **forward** pass only, predict how many additions `backward()`
#    will make where gradients meet. The backward graph's shape is fixed by the forward's: wherever a tensor is
#    read $k$ times, $k$ gradients come back (section 5). So you can count the meetings before anything runs. The
#    checker then runs the backward pass and counts the additions it really makes. Mind which reads send a
#    gradient back at all, and that `x * x` reads `x` twice although a drawing shows one arrow. One of the graphs
#    is a model whose head reuses the embedding matrix (tied weights, lesson 12): see where its paths meet.
# 2. `box_free_path`: in a depth-1 view of a block, forward or backward, find a path from the start (the input,
#    or `∂ output`) to the end (the block's output, or `∂ input`) that passes through no box, or return None if
#    there is none. This is the highway made precise, found by a search rather than read off the `highway` flags.
#    It exists for the pre-norm block and for the parallel block (lesson 15: attention and the FFN both read the
#    block's input, and both add to it). For the post-norm block (lesson 09) it does not: every path runs through
#    a norm, so the gradient has no untouched route.
# 3. `kv_group_sums`: from a recorded forward and backward pass of a block, find the nodes that sum a K or V
#    gradient over its group of query heads, and return each one's shape and FLOPs. The checker tries
#    grouped-query attention (2 and 4 query heads per KV head), multi-query attention (all heads share one) and
#    multi-head attention, and compares with the closed form. Keep the group sums apart from the other sums that
#    undo a broadcast (a norm's gain, softmax's denominator).
#
# `python -m tinygrad_block exercise 11` writes `exercise_11.py` with the three functions to fill in;
# `python -m tinygrad_block check 11` checks them and says what is wrong.
