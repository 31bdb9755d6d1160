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
# 3. **Depth 2, forward**: attention opens into its own primitives, while the projections stay boxes.
# 4. **Depth 1, backward**: the gradient splits at each residual and the paths meet again: the
#    **gradient highway**.
# 5. **Depth 2, backward**: grouped-query attention shows up as a sum over each group of query heads.
# 6. **FLOPs on the nodes**: the boxes add up to the block's count, and the FFN is the biggest.
# 7. **Rendering** to SVG with graphviz.
#
# Nothing here is drawn by hand: the recorder hangs on the same choke point as the FLOP counter (lesson 03),
# and the DOT text it emits is parsed below with a few small regular expressions, the way `tests/test_graph.py`
# reads it.
#
# Run it: `python lessons/04_graphs.py`. Every number stated below is asserted in `main()`.

# %%
import re
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.counting import count_flops
from tinygrad_block.graph import record_graph

CFG = nn.preset("tiny")
B, L = 1, 8


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
# ### Reading DOT text
#
# `graph.to_dot(...)` returns plain text. Each drawn node is one line `n3 [label="...", shape=...]` (op and
# source nodes are `n*`, collapsed module boxes `b*`, gradient sinks `g*`), each edge one line `n1 -> b0 [...]`.
# Lines inside a label are separated by a literal `\n`; the first line says what the node is.


# %%
NODE = re.compile(r'^\s+([nbg]\d+) \[label="([^"]*)"', re.M)
EDGE = re.compile(r"^\s+([nbg]\d+) -> ([nbg]\d+)(?: \[(.*)\])?;$", re.M)
OP = re.compile(r'^\s+n\d+ \[label="([^"]*)", shape=box, style="rounded', re.M)     # op nodes: rounded boxes


def nodes(dot: str) -> dict[str, str]:
    """{DOT name: label} of every node the text declares, in order."""
    return dict(NODE.findall(dot))


def edges(dot: str) -> list[tuple[str, str, str]]:
    """(source, destination, attributes) of every edge, in order."""
    return EDGE.findall(dot)


def lines(label: str) -> list[str]:
    return label.split("\\n")


def head(label: str) -> str:
    return lines(label)[0]


def short_names(dot: str) -> dict[str, str]:
    """A readable name for each node: its label's first line, with the '+' circles numbered in order
    (residual1, residual2 forward; meet1, meet2 backward)."""
    names, seen = {}, Counter()
    for name, label in nodes(dot).items():
        tag = head(label)
        if tag == "+":
            tag = "residual" if "residual" in label else "meet"
            seen[tag] += 1
            tag += str(seen[tag])
        names[name] = tag
    return names


def readable_edges(dot: str) -> list[tuple[str, str]]:
    names = short_names(dot)
    return [(names[src], names[dst]) for src, dst, _ in edges(dot)]


# %% [markdown]
# ## 1. Recording: one node per primitive call
#
# `record_graph(block, x)` is an observer, like `count_flops`: every primitive call that passes the choke point
# appends one **op node** holding the op's name, output shape, dtype, module scope (`block.attn.q_proj`), phase
# and FLOPs, with edges to the nodes that made its inputs. Tensors no recorded op made become **source nodes**:
# the input, the 9 weight tensors (named from the module: `block.attn.q_proj.weight`), 14 constants in the
# forward (among them the two RoPE tables and scalars such as the norms' $\varepsilon$), and in the backward the
# gradient `backward()` starts from, `∂ output`, and 4 more constants.
#
# One forward and one backward of the tiny block make **113 forward** and **158 backward** primitive calls, 271
# op nodes in all, and `count_flops().calls` counts exactly the same (so does the DOT drawn at full depth: one
# op node per call). Of the 113 forward calls, 59 move data and compute nothing (reshape, expand, permute, slice,
# concat). Backward has more calls than forward, for three reasons:
#
# - each forward op's backward is written in the same primitives, and many need more than one: the 9 forward
#   matmuls become 18 (a gradient for each input);
# - a tensor used more than once receives one gradient per use, and they are summed: 17 of the backward calls
#   are those sums, the adds **where paths meet** (section 4);
# - some forward calls have no backward at all: the causal mask is built from constants, so nothing flows back
#   into it.


# %%
def call_counts(graph, fc) -> dict[str, dict[str, int]]:
    """For each phase: op nodes recorded, calls the FLOP counter saw, and op nodes in the full-depth DOT."""
    out = {}
    for phase in ("forward", "backward"):
        dot = graph.to_dot(backward=phase == "backward")
        drawn = re.findall(r'^\s+n\d+ \[label="[^"]*", shape=(?:box, style="rounded|circle)', dot, re.M)
        out[phase] = {"recorded": len(graph.ops(phase)), "counted": sum(n for (ph, _, _), n in fc.calls.items()
                                                                        if ph == phase), "drawn": len(drawn)}
    return out


def census(graph) -> dict:
    """Source nodes by (kind, phase); forward calls with no FLOPs; matmuls per phase; gradient sums."""
    ops = {phase: [graph.nodes[i] for i in graph.ops(phase)] for phase in ("forward", "backward")}
    return {"sources": Counter((n.kind, n.phase) for n in graph.nodes if n.kind != "op"),
            "free": Counter(n.label for n in ops["forward"] if n.flops == 0),
            "matmuls": [sum(n.label == "matmul" for n in ops[phase]) for phase in ("forward", "backward")],
            "meets": sum(n.origin == "accumulate" for n in ops["backward"])}


# %% [markdown]
# ## 2. Depth 1: the block's equation
#
# A full-depth drawing has 113 forward nodes, too many to read. `to_dot(depth=1)` collapses every module scope
# deeper than one level below the block into one **box**, so the block shows only its four sublayers and its own
# two ops, the residual adds:
#
# $$h = x + \mathrm{attn}(\mathrm{norm}_1(x)), \qquad \mathrm{out} = h + \mathrm{ffn}(\mathrm{norm}_2(h)).$$
#
# The DOT has 7 nodes (the input, 4 boxes, 2 green "+ residual" circles) and 8 edges, each labelled with the
# shape it carries, (1, 8, 64) everywhere: every sublayer reads and writes the stream's shape. The two edges
# `input -> residual1` and `residual1 -> residual2` are drawn thick and green with a high weight, so graphviz
# lays them out as one straight line: **the residual stream**, which the sublayers only branch off and add to.


# %%
def depth1_forward(graph) -> dict:
    dot = graph.to_dot(depth=1)
    names = short_names(dot)
    boxes = [names[n] for n in nodes(dot) if n.startswith("b")]
    highway = [(names[s], names[d]) for s, d, attrs in edges(dot) if attrs.startswith("penwidth=3")]
    shapes = {attrs.split("label=")[1] for _, _, attrs in edges(dot)}
    return {"dot": dot, "nodes": list(names.values()), "boxes": boxes, "edges": readable_edges(dot),
            "highway": highway, "shapes": shapes}


# %% [markdown]
# ## 3. Depth 2: attention opened up
#
# At `depth=2` the block's sublayers open and their own sub-modules (the seven projections, `nn.Linear`
# layers) become the boxes: `attn.q_proj`, `attn.k_proj`, `attn.v_proj`, `attn.o_proj`, `ffn.gate_proj`,
# `ffn.up_proj`, `ffn.down_proj`. The norms have no sub-modules, so they open entirely.
#
# Attention's own code runs 54 primitive calls. There is no `softmax` node, since softmax is a composite written
# from primitives, and you can read the whole of attention off the nodes:
#
# | what | primitives |
# |---|---|
# | split into heads | reshape and permute (transpose) of q, k and v: 3 + 3 |
# | RoPE | 2 slices of the (128, 16) cos/sin tables to 8 rows, then 9 calls each for q and k (below) |
# | GQA | reshape, expand to (1, 2, 2, 8, 16), reshape to 4 heads, for k and for v |
# | scores | div by $\sqrt{d_{head}} = 4$, permute ($k^\top$), **matmul** (1, 4, 8, 8): 8,192 FLOPs |
# | causal mask | reshape, reshape, expand, expand, compare, where (rebuilt from constants every call), expand, add |
# | softmax | max, expand, neg, add (subtract the row max), **exp**, **sum**, expand, **div** |
# | weights @ V | **matmul** (1, 4, 8, 16): 8,192 FLOPs |
# | merge heads | permute, reshape |
#
# RoPE's **halves**: $\mathrm{rot}(x) = (-x_2, x_1)$ is slice, neg, slice, concat (q's halves are (1, 4, 8, 8),
# k's (1, 2, 8, 8)), and $x \cos + \mathrm{rot}(x) \sin$ is expand, mul, expand, mul, add.
#
# In all: 11 expand, 10 reshape, 6 slice, 5 permute, 4 mul, 4 add, 3 neg, 2 concat, 2 div, 2 matmul, and one
# each of compare, where, max, exp and sum. Each matmul costs $2 \cdot H \cdot L \cdot L \cdot d_{head} =
# 2 \cdot 4 \cdot 8 \cdot 8 \cdot 16$. The FFN opens into 9 calls around its three projection boxes: SiLU's
# overflow-safe sigmoid (compare, neg, where, exp, where, add, div), the mul of SiLU, and the gate times up.


# %%
def cluster(dot: str, scope: str) -> str:
    """The text of one module's cluster (at depth 2 the sublayers' clusters hold no nested ones)."""
    return re.search(rf'subgraph "cluster_{re.escape(scope)}" {{(.*?)\n  }}', dot, re.S).group(1)


def op_calls(text: str) -> list[tuple[str, str]]:
    """(op, output shape) of the op nodes (the rounded boxes) in a piece of DOT text, in order."""
    return [(head(label).removesuffix(" (with a scalar)"), lines(label)[1].rsplit(" ", 1)[0])   # drop the dtype
            for label in OP.findall(text)]


def depth2_forward(graph) -> dict:
    dot = graph.to_dot(depth=2)
    boxes = [head(label) for name, label in nodes(dot).items() if name.startswith("b")]
    matmuls = [lines(label)[1:] for label in OP.findall(cluster(dot, "attn")) if label.startswith("matmul")]
    return {"boxes": boxes, "attn": op_calls(cluster(dot, "attn")), "ffn": op_calls(cluster(dot, "ffn")),
            "labels": [head(label) for label in nodes(dot).values()], "matmuls": matmuls}


# %% [markdown]
# ## 4. Depth 1, backward: the gradient splits and meets
#
# `to_dot(depth=1, backward=True)` draws the gradient's journey, top to bottom: from `∂ output` through `ffn′`,
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
# **Why it is a highway.** Follow the edges `∂ output -> meet1 -> meet2 -> ∂ input`: they pass through no box. The
# upstream gradient reaches the block's input untouched, and the sublayers only *add* their corrections to it.
# In a stack of blocks the same straight path runs from the loss to the first layer, however small each
# sublayer's own gradient is; lesson 02 zeroed every sublayer weight and found $\partial x = g$ exactly. Below we
# check the two routes with numbers: the gradient at $h$ (kept by `retain_grads`) equals $g$ plus what the FFN
# route alone sends back (run separately, from a detached copy of $h$), and $\partial x$ equals $\partial h$ plus
# what attention sends back; both agree to within $10^{-5}$ (float32 rounding; the sums are added in a different
# order).
#
# **What a circle stands for.** Inside `norm2`, $h$ is used three more times ($h \cdot h$ twice for the mean
# square, $h \cdot \mathrm{rstd}$ once), so four gradients arrive at $h$ and need three adds. Each "paths meet"
# circle at depth 1 is those three adds (the block's own scope holds 6 such calls, 512 FLOPs each), merged into
# one node where the two routes join, labelled with their 1,536 FLOPs together. The same goes for $x$ and
# `norm1`.


# %%
def depth1_backward(graph) -> dict:
    dot = graph.to_dot(depth=1, backward=True)
    names = short_names(dot)
    own = [graph.nodes[i] for i in graph.ops("backward") if graph.nodes[i].scope == ("block",)]
    return {"dot": dot, "nodes": list(names.values()), "edges": readable_edges(dot),
            "meets": sum(label.startswith("+\\npaths meet") for label in nodes(dot).values()),
            "own": [(n.origin, n.flops) for n in own]}          # the block's own backward calls


def highway_path(edge_list: list[tuple[str, str]], start: str = "∂ output", end: str = "∂ input") -> list[str]:
    """The route from start to end that visits only '+' circles (no sublayer box)."""
    path = [start]
    while path[-1] != end:
        path.append(next(d for s, d in edge_list if s == path[-1] and (d.startswith("meet") or d == end)))
    return path


def two_routes(block, x, dout, graph) -> tuple[float, float]:
    """Largest |∂h - (g + FFN route)| and |∂x - (∂h + attention route)|, each route run on its own."""
    h = next(graph.nodes[i].tensor for i in graph.ops("forward")
             if graph.nodes[i].scope == ("block",))          # the block's first own op: the first residual add
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
# shape before the expand, at 256 FLOPs each (one add for each of the $2 \cdot 8 \cdot 16$ = 256 entries). The
# K sum leads down to `attn.k_proj′`, the V sum to `attn.v_proj′`.
#
# The same label appears 5 more times at depth 2, wherever something else was broadcast: each norm's gain
# (64,) over all 8 tokens (a sum to (1, 1, 64), then a reshape to (64,)), each norm's $1/\mathrm{rms}$
# (1, 8, 1) over the 64 features, and the softmax denominator (1, 4, 8, 1) over the 8 keys. With one KV head
# per query head (MHA, `n_kv_heads=4`) there is no expand for K and V, so no group sum: only those 5 remain.


# %%
def group_sums(graph) -> dict:
    dot = graph.to_dot(depth=2, backward=True)
    labels, names = nodes(dot), short_names(dot)
    copies = [n for n, label in labels.items() if "backward of expand: copies add up" in label]
    groups = [n for n in copies if "\\n(1, 2, 1, 8, 16) " in labels[n]]
    shapes = Counter(lines(labels[n])[2].rsplit(" ", 1)[0] for n in copies)
    incoming = {attrs.split("label=")[1] for _, d, attrs in edges(dot) if d in groups}
    flops = {labels[n].split("\\n")[-1] for n in groups}
    return {"copies": shapes, "groups": len(groups), "incoming": incoming, "flops": flops,
            "reaches": sorted(first_box(dot, n, names) for n in groups)}


def mha_copies() -> int:
    """'copies add up' nodes at depth 2, backward, for the same block with one KV head per query head."""
    block = nn.TransformerBlock(CFG.with_(n_kv_heads=CFG.n_heads), generator=tb.Generator(0))
    x = tb.randn(B, L, CFG.d_model, generator=tb.Generator(0), requires_grad=True)
    with record_graph(block, x) as graph:
        block(x).backward(tb.ones(B, L, CFG.d_model))
    return sum("copies add up" in label for label in nodes(graph.to_dot(depth=2, backward=True)).values())


def first_box(dot: str, start: str, names: dict[str, str]) -> str:
    """Follow the gradient from a node down its first outgoing edges until it reaches a module box."""
    out = {}
    for s, d, _ in edges(dot):
        out.setdefault(s, d)
    node = start
    while not node.startswith("b"):
        node = out[node]
    return names[node]


# %% [markdown]
# ## 6. FLOPs on the nodes
#
# Op nodes carry their FLOPs, and each box carries the sum over the ops inside it, so at depth 1 the drawing is
# also a FLOP budget. The box labels are rounded (kFLOPs with two decimals); the exact figures come from the
# same recorded nodes:
#
# | box | forward FLOPs | label |
# |---|---|---|
# | norm1 | 2,072 | 2.07 kFLOPs |
# | attn | 218,048 | 218.05 kFLOPs |
# | norm2 | 2,072 | 2.07 kFLOPs |
# | ffn | 540,768 | 540.77 kFLOPs |
#
# Add the two residual adds (the green circles, 512 FLOPs each) and you get 763,984, exactly
# `count_flops().total("forward")`. The biggest box is the FFN: **70.8 %** of the block, against 28.5 % for
# attention. Its three $64 \times 172$ matmuls cost $2 \cdot 8 \cdot 64 \cdot 172$ = 176,128 each, 528,384 of
# its 540,768. Attention's four projections cost 196,608 (65,536 each for q and o, 32,768 each for the narrower
# k and v), scores and weights @ V 16,384; at $L = 8$ the $L \times L$ part is small (lesson 03 shows it
# growing with $L$).
#
# The backward boxes cost just under twice their forward ones: `ffn′` 1,080,672 and `attn′` 433,504. Their
# matmuls are exactly twice (lesson 03), the elementwise work a little less.


# %%
def box_flops(graph, phase: str = "forward") -> dict[str, int]:
    """Exact FLOPs of each depth-1 box: the sum over the recorded ops under block.<sublayer>."""
    out = Counter()
    for i in graph.ops(phase):
        n = graph.nodes[i]
        if len(n.scope) > 1:
            out[n.scope[1]] += n.flops
    return dict(out)


def box_labels(dot: str) -> dict[str, str]:
    """{box: the FLOPs line of its label} in a depth-1 DOT."""
    return {head(label): label.split("\\n")[2] for name, label in nodes(dot).items() if name.startswith("b")}


def residual_flops(graph) -> list[int]:
    return [graph.nodes[i].flops for i in graph.ops("forward") if graph.nodes[i].scope == ("block",)]


# %% [markdown]
# ## 7. Rendering
#
# `graph.render(path, depth=..., backward=...)` pipes the DOT text through graphviz's `dot` program and writes
# svg, png or pdf, chosen by the file's extension. Below, the depth-1 forward and backward graphs go to SVG files
# in a temporary directory (open them in a browser to see the highway). An SVG file is XML text and starts with
# `<?xml`. Without the `dot` program (or the `graphviz` Python package) `render` raises a `RuntimeError` that
# says how to install it; the lesson then says so and carries on.


# %%
def render_svgs(graph) -> dict[str, bytes] | str:
    """The first bytes of the depth-1 forward and backward SVGs, or why they could not be made."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            paths = {"forward": graph.render(Path(tmp) / "block_forward.svg", depth=1),
                     "backward": graph.render(Path(tmp) / "block_backward.svg", depth=1, backward=True)}
        except RuntimeError as err:
            return str(err)
        return {name: path.read_bytes()[:200] for name, path in paths.items()}


# %%
ATTENTION_OPS = (["reshape", "permute"] * 3                                        # split into heads: q, k, v
                 + ["slice", "slice"]                                              # RoPE tables, to 8 rows
                 + ["slice", "neg", "slice", "concat", "expand", "mul", "expand", "mul", "add"] * 2   # RoPE: q, k
                 + ["reshape", "expand", "reshape"] * 2                            # GQA: k, v to 4 heads
                 + ["div", "permute", "matmul"]                                    # scores
                 + ["reshape", "reshape", "expand", "expand", "compare", "where", "expand", "add"]   # causal mask
                 + ["max", "expand", "neg", "add", "exp", "sum", "expand", "div"]  # softmax
                 + ["matmul"]                                                      # weights @ V
                 + ["permute", "reshape"])                                         # merge heads


def main():
    block, x, dout, graph, fc = record()

    # 1. recording
    counts = call_counts(graph, fc)
    assert counts == {"forward": {"recorded": 113, "counted": 113, "drawn": 113},
                      "backward": {"recorded": 158, "counted": 158, "drawn": 158}}
    c = census(graph)
    assert c["sources"] == {("input", "forward"): 1, ("param", "forward"): 9, ("const", "forward"): 14,
                            ("input", "backward"): 1, ("const", "backward"): 4}
    assert {n.label for n in graph.nodes if n.kind == "const" and n.label != "const"} == {
        "block.attn.rope_cos", "block.attn.rope_sin"}
    assert sum(c["free"].values()) == 59 and set(c["free"]) == {"reshape", "expand", "permute", "slice", "concat"}
    assert c["matmuls"] == [9, 18] and c["meets"] == 17
    print(f"recorded primitive calls: {counts['forward']['recorded']} forward, {counts['backward']['recorded']} "
          f"backward; count_flops().calls: {counts['forward']['counted']} and {counts['backward']['counted']}; "
          f"op nodes drawn at full depth: {counts['forward']['drawn']} and {counts['backward']['drawn']}")
    print(f"  source nodes: {dict(c['sources'])}; {sum(c['free'].values())} forward calls move data only; "
          f"matmuls {c['matmuls'][0]} -> {c['matmuls'][1]}; {c['meets']} backward adds where paths meet")

    # 2. depth 1, forward
    d1 = depth1_forward(graph)
    assert d1["nodes"] == ["norm1", "input", "attn", "residual1", "norm2", "ffn", "residual2"]
    assert d1["boxes"] == ["norm1", "attn", "norm2", "ffn"]
    assert d1["edges"] == [("input", "norm1"), ("norm1", "attn"), ("input", "residual1"), ("attn", "residual1"),
                           ("residual1", "norm2"), ("norm2", "ffn"), ("residual1", "residual2"), ("ffn", "residual2")]
    assert d1["highway"] == [("input", "residual1"), ("residual1", "residual2")]
    assert d1["shapes"] == {'" (1, 8, 64)"'}
    print(f"depth 1, forward: {len(d1['nodes'])} nodes, {len(d1['edges'])} edges, all carrying (1, 8, 64)")
    for name, label in nodes(d1["dot"]).items():
        print(f"  {name:4} " + " | ".join(lines(label)))
    print("  " + ", ".join(f"{s} -> {d}" + (" (highway)" if (s, d) in d1["highway"] else "") for s, d in d1["edges"]))

    # 3. depth 2, forward
    d2 = depth2_forward(graph)
    assert d2["boxes"] == ["attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.o_proj", "ffn.gate_proj",
                           "ffn.up_proj", "ffn.down_proj"]
    ops = [op for op, _ in d2["attn"]]
    assert ops == ATTENTION_OPS and "softmax" not in d2["labels"]
    assert len(ops) == 54 == sum(graph.nodes[i].scope == ("block", "attn") for i in graph.ops("forward"))
    kinds = Counter(ops)
    assert kinds == {"expand": 11, "reshape": 10, "slice": 6, "permute": 5, "mul": 4, "add": 4, "neg": 3,
                     "concat": 2, "div": 2, "matmul": 2, "compare": 1, "where": 1, "max": 1, "exp": 1, "sum": 1}
    assert d2["matmuls"] == [["(1, 4, 8, 8) float32", "8,192 FLOPs"], ["(1, 4, 8, 16) float32", "8,192 FLOPs"]]
    assert 2 * 4 * 8 * 8 * 16 == 8_192 and CFG.d_head**0.5 == 4
    assert [shape for op, shape in d2["attn"][6:8]] == ["(8, 16)"] * 2                     # the RoPE tables
    assert tuple(block.attn.rope_cos.shape) == tuple(block.attn.rope_sin.shape) == (128, 16)
    halves = [shape for op, shape in d2["attn"][8:26] if op in ("slice", "neg")]             # RoPE on q and k
    assert halves == ["(1, 4, 8, 8)"] * 3 + ["(1, 2, 8, 8)"] * 3            # slice, neg, slice: q's, then k's
    assert d2["attn"][27] == ("expand", "(1, 2, 2, 8, 16)")
    assert [op for op, _ in d2["ffn"]] == ["compare", "neg", "where", "exp", "where", "add", "div", "mul", "mul"]
    print(f"depth 2, forward: boxes {d2['boxes']}")
    print(f"  attention's own {len(ops)} primitive calls: " + ", ".join(f"{k} {v}" for k, v in kinds.most_common()))
    print(f"  in order: {' '.join(ops)}")
    print(f"  the two matmuls: {[' '.join(m) for m in d2['matmuls']]}; RoPE halves (slice, neg, slice): {halves}")

    # 4. depth 1, backward
    db = depth1_backward(graph)
    assert db["meets"] == 2
    assert db["nodes"] == ["ffn′ (backward)", "∂ output", "norm2′ (backward)", "meet1", "attn′ (backward)",
                           "norm1′ (backward)", "meet2", "∂ input"]
    assert db["edges"] == [("∂ output", "ffn′ (backward)"), ("ffn′ (backward)", "norm2′ (backward)"),
                           ("∂ output", "meet1"), ("norm2′ (backward)", "meet1"), ("meet1", "attn′ (backward)"),
                           ("attn′ (backward)", "norm1′ (backward)"), ("meet1", "meet2"),
                           ("norm1′ (backward)", "meet2"), ("meet2", "∂ input")]
    assert highway_path(db["edges"]) == ["∂ output", "meet1", "meet2", "∂ input"]
    assert db["own"] == [("accumulate", 512)] * 6              # the residual adds' backward: no call at all
    err_h, err_x = two_routes(block, x, dout, graph)
    assert err_h < 1e-5 and err_x < 1e-5
    print(f"depth 1, backward: {db['meets']} 'paths meet' nodes; highway {' -> '.join(highway_path(db['edges']))}")
    print("  " + ", ".join(f"{s} -> {d}" for s, d in db["edges"]))
    print(f"  dh = g + FFN route (max diff {err_h:.1e}); dx = dh + attention route (max diff {err_x:.1e}); "
          f"the block's own backward calls: {len(db['own'])} sums of {db['own'][0][1]} FLOPs, 3 per circle")

    # 5. depth 2, backward: the GQA group sum
    gs = group_sums(graph)
    assert gs["groups"] == 2 and gs["incoming"] == {'" (1, 2, 2, 8, 16)"'} and gs["flops"] == {"256 FLOPs"}
    assert 2 * 8 * 16 == 256 and sum(gs["copies"].values()) == 2 + 5
    assert gs["copies"] == {"(1, 2, 1, 8, 16)": 2, "(1, 1, 64)": 2, "(1, 8, 1)": 2, "(1, 4, 8, 1)": 1}
    assert gs["reaches"] == ["attn.k_proj′ (backward)", "attn.v_proj′ (backward)"]
    assert d2["attn"][3] == ("permute", "(1, 2, 8, 16)") and d2["attn"][26:29] == [
        ("reshape", "(1, 2, 1, 8, 16)"), ("expand", "(1, 2, 2, 8, 16)"), ("reshape", "(1, 4, 8, 16)")]
    assert (CFG.n_heads, CFG.n_kv_heads) == (4, 2) and mha_copies() == 5
    print(f"depth 2, backward: {gs['groups']} group sums (1, 2, 2, 8, 16) -> (1, 2, 1, 8, 16), 256 FLOPs each, "
          f"leading to {gs['reaches']}; 'copies add up' nodes by shape: {dict(gs['copies'])}")

    # 6. FLOPs on the nodes
    fwd, bwd = box_flops(graph), box_flops(graph, "backward")
    assert fwd == {"norm1": 2_072, "attn": 218_048, "norm2": 2_072, "ffn": 540_768}
    assert box_labels(d1["dot"]) == {"norm1": "2.07 kFLOPs", "attn": "218.05 kFLOPs", "norm2": "2.07 kFLOPs",
                                     "ffn": "540.77 kFLOPs"}
    assert residual_flops(graph) == [512, 512]
    total = fc.total("forward")
    assert sum(fwd.values()) + sum(residual_flops(graph)) == total == 763_984
    assert max(fwd, key=fwd.get) == "ffn"
    assert round(100 * fwd["ffn"] / total, 1) == 70.8 and round(100 * fwd["attn"] / total, 1) == 28.5
    mm = fc.by_scope("forward", matmul_only=True, depth=2)
    mm_bwd = fc.by_scope("backward", matmul_only=True, depth=2)
    assert mm["block.ffn"] == 3 * 176_128 == 528_384 == 3 * 2 * 8 * 64 * 172
    assert mm["block.attn"] == 196_608 + 16_384 == 2 * 65_536 + 2 * 32_768 + 2 * 8_192
    assert bwd["ffn"] == 1_080_672 and bwd["attn"] == 433_504
    for name in ("ffn", "attn"):
        assert mm_bwd[f"block.{name}"] == 2 * mm[f"block.{name}"] and 1.9 < bwd[name] / fwd[name] < 2
    print(f"FLOPs of the depth-1 boxes: {fwd} + residual adds {residual_flops(graph)} = {total:,} "
          f"= count_flops().total('forward'); FFN {fwd['ffn'] / total:.1%}, attention {fwd['attn'] / total:.1%}")
    print(f"  backward boxes: ffn′ {bwd['ffn']:,} ({bwd['ffn'] / fwd['ffn']:.3f} x forward), attn′ {bwd['attn']:,} "
          f"({bwd['attn'] / fwd['attn']:.3f} x)")

    # 7. rendering
    svgs = render_svgs(graph)
    if isinstance(svgs, str):
        print(f"rendering skipped: {svgs}")
    else:
        assert all(data.startswith(b"<?xml") for data in svgs.values())
        print(f"rendered {', '.join(svgs)} SVGs with graphviz; each starts with {svgs['forward'][:5].decode()!r}")


if __name__ == "__main__":
    main()
