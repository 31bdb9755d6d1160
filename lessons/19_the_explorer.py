# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 19 — The graph explorer
#
# Lesson 11 drew the block's graph; here the same graph is a page you can click through: the **explorer**. This
# lesson is a guided tour of that page. We open the tiny block's page, then walk through what you see and what each
# click does: the module tree and its totals, a box opened down to its primitives, the card an op shows when
# you hover over it, the backward ops that light up when you click a forward op, the backward pass followed
# step by step with the → key, the places where gradients add up, and the compiled pane of lesson 18. The
# page is one HTML file, and everything it shows is data that Python put into it: `page.data`. So each claim
# below is read off `page.data`, and then checked against something that never saw the page: a second
# recording of the same call (`record_graph`), the FLOP counter (`count_flops`) and the modules' own
# parameter counts.
#
# **What you will learn**
# - how to open the page (any browser, nothing fetched; inline in a notebook) and what `page.data` holds;
# - the module tree: each box's parameters and FLOPs, forward and backward, summed over what it holds;
# - opening a box, and how the page decides what to draw: a node sits in the outermost closed box on its path;
# - an op's card: its input and output shapes, its FLOPs, the bytes it reads and writes;
# - clicking a forward op lights up the backward ops that differentiate it, and why a matmul has two matmuls
#   among them;
# - following the gradient backward with →, in autograd's own order, which is the order the calls ran;
# - where gradients add up: one "paths meet" node for each tensor read more than once;
# - the compiled pane: kernels, a fused chain and the primitives it runs, and FLOPs that add up.
#
# Run it as a script, `python -m tinygrad_block lesson 19`, or as a notebook,
# `python -m tinygrad_block lesson 19 --notebook --execute` (it lands beside this file).

# %%
import math
import re

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.counting import count_flops
from tinygrad_block.graph import record_graph

from course import out_dir, show

OUT = out_dir(19)         # lessons/out/19/: this lesson's pages
CFG = nn.preset("tiny")   # d_model 64, 4 query heads sharing 2 key/value heads, d_ff 172
B, L = 1, 8
g = tb.Generator(0)
block = nn.TransformerBlock(CFG, generator=g)
x = tb.randn(B, L, CFG.d_model, generator=g, requires_grad=True)      # (B, L, d_model)

# %% [markdown]
# ## 1. Opening the page
#
# `tb.explore(block, x)` runs `block(x)` and its backward under the graph recorder of lesson 11, and returns
# an `Explorer`. Its `.save(path)` writes the page; `show` prints where it went (the line starting with
# `explorer:`) and, in a notebook, shows the page itself inline, below the cell. Outside a notebook, open the
# file in any browser (double-click it, or drag it onto a browser window). The page is **one self-contained
# file**: the data, the script that draws it, and graphviz itself, compiled to run in the browser, are all
# inside. It fetches nothing, so it works offline, and you can mail it to someone.
#
# The backward pass starts from a gradient of ones (`out.backward(ones_like(out))`, the gradient of
# `out.sum()`). Since `x` holds real values, each node also carries a histogram of its values and gradients.
#
# What the script shows is `page.data`: a list of `nodes` (each primitive call and each tensor that no op
# made, forward and backward, each with an `id` such as `fn15`), the `edges` between them per phase, and the
# `modules` tree. The tiny block makes 118 forward and 164 backward primitive calls, the counts lesson 11
# found; a second recording of the same call agrees.

# %%
page = tb.explore(block, x)                                # records block(x) and its backward
show(page.save(OUT / "block.html"))                        # in a notebook: the explorer itself, inline
data = page.data
nodes = data["nodes"]
by_id = {n["id"]: n for n in nodes}
ops = {p: [n for n in nodes if n["phase"] == p and n["data_kind"] == "op"] for p in ("forward", "backward")}
with record_graph(block, x) as graph, count_flops() as fc:   # the checks: the same call, recorded and counted
    out = block(x)
    out.backward(tb.ones_like(out))
print(f"phases {data['phases']}, shown side by side at first: {data['show']}; opened at depth {data['depth']}")
print(f"{len(nodes)} nodes: {len(ops['forward'])} forward and {len(ops['backward'])} backward ops; "
      f"{len(data['modules'])} modules; {len(page.html) / 2**20:.1f} MiB")
assert data["phases"] == data["show"] == ["forward", "backward"] and data["depth"] == 1
assert [len(ops[p]) for p in ("forward", "backward")] == [len(graph.ops(p)) for p in ("forward", "backward")] \
    == [118, 164]
assert not re.search(r"<script[^>]+src=|<link[^>]+href=|@import", page.html)      # nothing to fetch

# %% [markdown]
# At the top of the page: the phase buttons (*forward*, *backward*, *both*), *expand all* and *collapse all*,
# a search box, a *colour by* menu (kind, FLOPs or bytes: the costliest box turns reddest), the zoom buttons
# (− and +, or Ctrl and the mouse wheel over a pane; *fit* shows each graph whole), and the stepper of section 6.
# Under them a legend says what each colour means, for the colouring chosen. Below, the panes: forward on the
# left, and beside it backward, "the gradient flow". On the right, docked beside the panes so that it never
# hides a node, the card: what the node or box under the mouse is, or the op clicked last. Each op's and each
# module's card ends with a link to the lesson and section that teach it (a matmul: lesson 03, "A matmul costs
# $2MNK$ FLOPs"), the lesson's file beside the page's folder.
#
# ## 2. The module tree and its totals
#
# The page opens at depth 1, like lesson 11's drawing of the block: the block's four sublayers as green boxes, the
# two residual adds as circles, and the input. Hover over a box and a card shows what the module sums up
# over everything it holds: its parameters, its FLOPs forward and backward (with the share done by matmuls),
# the bytes its forward ops write (its activations) and the bytes it moves. These numbers are in
# `data["modules"][path]["total"]`, and they sum the primitive calls inside. Below, every module of the tree
# is checked against the module's own `num_parameters()` and against the FLOP counter (`count_flops`, which
# watched the recording of section 1). The
# backward costs about twice the forward, as lesson 13 counted, and the FFN is the heaviest sublayer.

# %%
modules = data["modules"]
print(f"{'module':22} {'parameters':>10} {'FLOPs forward':>14} {'backward':>10}")
for path, m in modules.items():
    t = m["total"]
    print(f"{'  ' * m['depth'] + m['label']:22} {t['parameters']:>10,} {t['flops']['forward']:>14,} "
          f"{t['flops']['backward']:>10,}")
    module = block
    for name in path.split(".")[1:]:
        module = getattr(module, name)
    assert t["parameters"] == module.num_parameters()
    for phase in ("forward", "backward"):
        assert t["flops"][phase] == fc.total(phase, scope=path, matmul_only=False)
        assert t["matmul_flops"][phase] == fc.total(phase, scope=path, matmul_only=True)
whole = modules["block"]["total"]
assert whole["parameters"] == block.num_parameters() == 45_440
assert (whole["flops"]["forward"], whole["flops"]["backward"]) == (763_216, 1_525_392)
assert 1.9 < whole["flops"]["backward"] / whole["flops"]["forward"] < 2.0
assert max((p for p in modules if modules[p]["depth"] == 1), key=lambda p: modules[p]["total"]["flops"]["forward"]) \
    == "block.ffn"


# %% [markdown]
# ## 3. Opening a box, down to its primitives
#
# Click a green box and it opens in place: the module becomes a dashed frame with its contents inside. Click
# the frame's name (it ends in `[−]`) and it closes again. Which boxes are open is all the page remembers;
# everything else follows from one rule: **a node is drawn as the outermost closed module on its path**, or
# as itself if every module on its path is open. The function below is that rule, written in Python from the
# script's own (`closedAncestor`); partial sums are drawn as one node, which section 7 explains.
#
# Opened at depth 1 (only the block itself open), the forward pane draws 7 things and the backward pane 8,
# exactly the nodes of lesson 11's depth-1 views. Click `attn` and it opens into its four projection boxes
# and its own primitives (RoPE, the scores, the softmax, ...): 72 things drawn. Click `q_proj` inside it and
# that box gives way to its 4 primitives and its weight: 76. Opening every sublayer gives lesson 11's depth-2
# view (103 forward nodes), and *expand all* draws every primitive: 131 forward nodes (118 calls and 13
# tensors no op made: the input, 9 weights and 3 constants), and 169 backward nodes.

# %%
def drawn(node: dict, opened: set) -> str:
    """What the page draws for a node: the outermost closed module on its path ('box ...'), or the node."""
    for k in range(2, len(node["scope"]) + 1):                 # the root (scope[:1]) is always open
        path = ".".join(node["scope"][:k])
        if path not in opened:
            return "box " + path
    return node.get("merge", node["id"])                       # a partial sum: drawn as its chain's first


def count_drawn(phase: str, opened: set) -> int:
    return len({drawn(n, opened) for n in nodes if n["phase"] == phase})


top = {"block"}
sublayers = top | {p for p in modules if modules[p]["depth"] == 1}
counts = {"depth 1": [count_drawn(p, top) for p in ("forward", "backward")],
          "attn opened": [count_drawn("forward", top | {"block.attn"})],
          "and q_proj": [count_drawn("forward", top | {"block.attn", "block.attn.q_proj"})],
          "every sublayer": [count_drawn(p, sublayers) for p in ("forward", "backward")],
          "expand all": [count_drawn(p, set(modules)) for p in ("forward", "backward")]}
q_proj = [n for n in nodes if n["phase"] == "forward" and n["path"] == "block.attn.q_proj"]
print(f"things drawn (forward, backward): {counts}")
print(f"q_proj opened: {[(n['label'], tuple(n['shape'])) for n in q_proj]}")
assert counts["depth 1"] == [len(graph.view(depth=1).nodes), len(graph.view(depth=1, backward=True).nodes)] == [7, 8]
assert counts["every sublayer"] == [len(graph.view(depth=2).nodes), len(graph.view(depth=2, backward=True).nodes)]
assert counts["attn opened"] == [72] and counts["and q_proj"] == [76] and counts["every sublayer"][0] == 103
assert counts["expand all"][0] == len(graph.view().nodes) == 131 == 118 + 13
assert sorted(n["kind"] for n in nodes if n["phase"] == "forward" and n["data_kind"] != "op") == \
    ["const"] * 3 + ["input"] + ["param"] * 9
merged = sum("merge" in n for n in nodes)
assert counts["expand all"][1] == len(graph.view(backward=True).nodes) - merged == 175 - 6 == 169
assert [n["label"] for n in q_proj] == ["permute", "block.attn.q_proj.weight", "reshape", "matmul", "reshape"]

# %% [markdown]
# ## 4. Hovering over an op
#
# With `q_proj` open, hover over its `matmul`. The card says which module and step it ran in, the shapes of
# its inputs and of its output, its FLOPs and the bytes it reads and writes. The layer computes $x W^\top$
# on the tokens flattened to rows: the reshape turns $x$ of shape (1, 8, 64) into (8, 64) rows, the permute
# turns the weight $W$ into $W^\top$, and the matmul multiplies (8, 64) by (64, 64). Its FLOPs are
# $2 \cdot 8 \cdot 64 \cdot 64$ = 65,536 (a multiply and an add for each term, lesson 03). It reads both
# float32 inputs, $4 (8 \cdot 64 + 64 \cdot 64)$ = 18,432 bytes, and writes its output, $4 \cdot 8 \cdot 64$ =
# 2,048 bytes. The permute reads and writes nothing: it is a view of the weight, the same numbers read in
# another order, so its card says 0 bytes.

# %%
matmul = next(n for n in q_proj if n["label"] == "matmul")
permute = next(n for n in q_proj if n["label"] == "permute")
recorded = next(graph.nodes[i] for i in graph.ops("forward")
                if graph.nodes[i].label == "matmul" and graph.nodes[i].scope == ("block", "attn", "q_proj"))
print(f"{matmul['label']} in {matmul['path']}: inputs {[tuple(s) for s, _ in matmul['inputs']]} -> "
      f"{tuple(matmul['shape'])} {matmul['dtype']}, {matmul['flops']:,} FLOPs, reads {matmul['bytes_read']:,} "
      f"bytes, writes {matmul['bytes_written']:,}")
print(f"{permute['label']}: {tuple(permute['inputs'][0][0])} -> {tuple(permute['shape'])}, reads "
      f"{permute['bytes_read']} bytes, writes {permute['bytes_written']}")
assert [tuple(s) for s, _ in matmul["inputs"]] == [graph.nodes[j].shape for j in recorded.inputs] == \
    [(B * L, CFG.d_model), (CFG.d_model, CFG.d_model)]
assert matmul["flops"] == recorded.flops == 2 * B * L * CFG.d_model * CFG.d_model == 65_536
assert matmul["bytes_read"] == 4 * (8 * 64 + 64 * 64) == 18_432 and matmul["bytes_written"] == 4 * 8 * 64 == 2_048
assert permute["bytes_read"] == permute["bytes_written"] == 0

# %% [markdown]
# ## 5. Clicking a forward op: the backward ops that differentiate it
#
# Click the matmul, and in the backward pane the ops that differentiate it light up (the page scrolls to
# them). In the data, each backward op names the forward op it differentiates (`source`), and each forward op
# lists those backward ops (`grads`). The query projection's matmul has four: two permutes and **two
# matmuls**. A matmul $Y = A B$ has two inputs, and each needs its own gradient (lesson 03):
# $\partial A = \partial Y\, B^\top$, of shape (8, 64), and $\partial B = A^\top \partial Y$, of shape (64, 64).
# Each is a permute (the transpose, a view) and a matmul with as many FLOPs as the forward one. That is
# where "backward costs twice the forward" comes from: every forward matmul becomes two.
#
# The recorder saw the same thing: the recorded backward calls whose source is this matmul are the same four,
# with the same labels and shapes.

# %%
grads = [by_id[i] for i in matmul["grads"]]
from_graph = [graph.nodes[i] for i in graph.ops("backward") if graph.nodes[i].source == graph.nodes.index(recorded)]
for n in grads:
    print(f"  {n['id']:6} {n['label']:8} {str(tuple(n['inputs'][0][0])):9} -> {str(tuple(n['shape'])):8} "
          f"{n['flops']:>7,} FLOPs   ({n['note']})")
assert [(n["label"], tuple(n["shape"])) for n in grads] == [(r.label, r.shape) for r in from_graph] == \
    [("permute", (64, 64)), ("matmul", (8, 64)), ("permute", (64, 8)), ("matmul", (64, 64))]
assert all(n["source"] == matmul["id"] and n["origin"] == "matmul" for n in grads)
assert [n["flops"] for n in grads if n["label"] == "matmul"] == [matmul["flops"]] * 2

# %% [markdown]
# ## 6. Following the gradient backward, step by step
#
# Press → (or the "→ step backward" button) and the page walks the backward pass one op at a time, in the
# order autograd ran them: each op's `order`. At each step it opens the boxes it needs, marks the op (orange) and
# the forward op it differentiates (a dashed purple frame, scrolled into view in the forward pane), and says which
# it is: "op 1 of 164: reshape (backward of reshape) in block.ffn.down_proj". ← goes back a step.
#
# Backward starts at the end of the forward pass, with the last forward op. That is the second residual add,
# but an add's backward passes the gradient on unchanged to both of its inputs and makes no call. So the
# first step is the last call before it, the down projection's final reshape, undone. Then come the down
# projection's matmul (two permutes and two matmuls, as in section 5), the backward of its weight's
# transpose, and the reshape back to (1, 8, 172). Step 8 reaches the FFN's gate, $\mathrm{SiLU}(a) \cdot b$:
# a mul, so two muls, one gradient for each factor. The query projection, which ran early in the forward
# pass, is differentiated late: its matmul's backward ops are steps 139 to 142 of 164.
#
# The order the stepper follows is exactly the order in which the recorder saw the backward calls happen,
# and each step differentiates the same forward op as the call the recorder saw at that place.

# %%
steps = sorted(ops["backward"], key=lambda n: n["order"])


def step_text(k: int) -> str:
    """What the page says at step k (1-based), as the script writes it."""
    n = steps[k - 1]
    what = "(gradients add up)" if n["origin"] == "accumulate" else f"(backward of {n['origin']})"
    return f"op {k} of {len(steps)}: {n['label']} {what} in {n['path']}"


for k in range(1, 10):
    n, src = steps[k - 1], by_id[steps[k - 1]["source"]]
    print(f"  {step_text(k):62} <- {src['label']} {tuple(src['shape'])} in {src['path']} {src['step']}")
recorded_bwd = [graph.nodes[i] for i in graph.ops("backward")]
assert [(n["label"], n["origin"], tuple(n["shape"]), tuple(n["scope"])) for n in steps] == \
    [(r.label, r.origin, r.shape, r.scope) for r in recorded_bwd]
page_src = [(by_id[n["source"]]["label"], tuple(by_id[n["source"]]["shape"])) for n in steps]
graph_src = [(graph.nodes[r.source].label, graph.nodes[r.source].shape) for r in recorded_bwd]
assert page_src == graph_src
assert [n["order"] for n in steps] == list(range(164))
assert step_text(1) == "op 1 of 164: reshape (backward of reshape) in block.ffn.down_proj"
last_forward = graph.nodes[graph.ops("forward")[-1]]
residual2 = [n for n in ops["forward"] if n["kind"] == "residual"][-1]
assert (last_forward.label, last_forward.step) == ("add", "residual") and "grads" not in residual2
assert [n["label"] for n in steps[:9]] == ["reshape", "permute", "matmul", "permute", "matmul", "permute",
                                          "reshape", "mul", "mul"]
assert all(by_id[n["source"]]["step"] == "gate" for n in steps[7:9])
assert [n["order"] + 1 for n in grads] == [139, 140, 141, 142]

# %% [markdown]
# ## 7. Where paths meet
#
# When a tensor is read more than once, one gradient comes back for each read, and autograd adds them
# (lesson 02): $k$ reads give $k$ gradients and $k - 1$ additions, made two at a time as the gradients
# arrive. The page draws such a chain as one "+" node, **paths meet**: each later sum names the chain's
# first in `merge`, and the `drawn` rule above draws it there. A forward node lists its sums in `sums`.
# Click the input `x` and they light up.
#
# The input is read four times: twice by RMSNorm's $x \cdot x$, once by $x \cdot \mathrm{rstd}$ (lesson 05's
# $1 / \sqrt{\mathrm{mean}(x^2) + \varepsilon}$), and once by the first residual add. So four gradients arrive
# and three sums add them. They run at steps 152, 163 and 164: the residual's gradient is there from the start
# (passed on by the adds, without a call), the one through $x \cdot \mathrm{rstd}$ is added when it arrives, and
# the two from $x \cdot x$ come last, since the mean of squares is the first thing the norm computed. In the
# whole backward pass, 19 sums are drawn as 13 meeting nodes.

# %%
x_node = next(n for n in nodes if n["phase"] == "forward" and n["kind"] == "input")
x_index = next(i for i, r in enumerate(graph.nodes) if r.kind == "input" and r.phase == "forward")
reads = sum(graph.nodes[i].inputs.count(x_index) for i in graph.ops("forward"))
readers = [(graph.nodes[i].label, ".".join(graph.nodes[i].scope), graph.nodes[i].inputs.count(x_index))
           for i in graph.ops("forward") if x_index in graph.nodes[i].inputs]      # (op, module, reads of x)
sums = [by_id[i] for i in x_node["sums"]]
all_sums = [n for n in steps if n["origin"] == "accumulate"]
print(f"x is read {reads} times: {readers}")
print(f"its gradient adds up in {len(sums)} sums, at steps {[n['order'] + 1 for n in sums]}, drawn as one node "
      f"({sums[0]['id']}: {[n.get('merge', n['id']) for n in sums]})")
print(f"all sums: {len(all_sums)}, drawn as {len({n.get('merge', n['id']) for n in all_sums})} meeting nodes")
assert reads == 4 and len(sums) == reads - 1
assert readers == [("mul", "block.norm1", 2), ("mul", "block.norm1", 1), ("add", "block", 1)]
assert [n["order"] + 1 for n in sums] == [152, 163, 164]
reads_of_x = [graph.nodes[recorded_bwd[k - 1].source].inputs.count(x_index) for k in (151, 161, 162)]
assert reads_of_x == [1, 2, 2]                 # step 151 differentiates x * rstd; steps 161, 162 x * x
assert {drawn(n, set(modules)) for n in sums} == {sums[0]["id"]}
assert len(all_sums) == sum(r.origin == "accumulate" for r in recorded_bwd) == 19
assert len({n.get("merge", n["id"]) for n in all_sums}) == 13

# %% [markdown]
# ## 8. The compiled pane
#
# `tb.explore(block, x, compiled=True)` adds lesson 18's compiled program of the same forward and backward
# (`tb.jit`'s) as a third pane, and the page opens with all three side by side: the kernels beside the forward and
# backward ops they run. Two more buttons appear, *compiled* (its pane alone) and *all*. The pane draws the program's
# **kernels** inside the same module frames: each kernel runs one primitive, or a **fused** group of
# elementwise ones in one pass over the data. Click a kernel and the primitives it runs light up in the
# forward and backward panes; click a primitive and the kernel that runs it lights up. A kernel's card also says
# what runs it: a group that lesson 18 generates code for shows that code, its C function (a button away, the
# CUDA C one), as `program.source()` prints it; any other kernel says in a line why it runs numpy's function
# (a lone matmul, say: code is generated for fused groups only). In the data, a kernel
# lists its primitives' ids in `runs`, its `code` line and, when generated, its `source`; each primitive names
# its `kernel`.
#
# Here the program is 206 kernels for 282 primitives, 25 of them fused groups. The first is RMSNorm's
# `mul > sum`: each token's 64 numbers squared, x·x, and added up, a row sum that lesson 18 generates as one loop
# adding each row in numpy's order. Its `mul` makes a (1, 8, 64) tensor and its `sum` one of (1, 8, 1). Fused, it
# writes only the 8 sums, so the 512 float32 squares, 2,048 bytes, are never written. Every primitive is run by
# exactly one kernel, except 15 expands, which the program broadcasts on the fly. So the compiled pane's FLOPs are
# the forward's plus the backward's: 2,288,608.
#
# The same pages come from the command line, without writing any code: `python -m tinygrad_block graph --preset
# tiny --out block.html` (add `--compiled` for the third pane, or use `--preset llama2-70b --model` for a whole
# model, its 80 identical layers stored once and drawn as one box marked × 80). One more colouring waits in
# `tb.explore(block, x, check=True)`: the gradient check of lesson 10, each backward op coloured by how far
# autograd is from the hand-derived backward of its module. This lesson's two pages are
# `lessons/out/19/block.html` and `lessons/out/19/block_compiled.html`: each cell that writes one prints its
# path on an `explorer:` line.

# %%
cpage = tb.explore(block, x, compiled=True)
cdata = cpage.data
cby_id = {n["id"]: n for n in cdata["nodes"]}
kernels = [n for n in cdata["nodes"] if n["phase"] == "compiled"]
fused = [k for k in kernels if k["kind"] == "fused"]
chain = fused[0]
ran = [cby_id[i] for i in chain["runs"]]
calls = [n for n in cdata["nodes"] if n["phase"] != "compiled" and n["data_kind"] == "op"]
unrun = [n for n in calls if "kernel" not in n]
ctotal = cdata["modules"]["block"]["total"]["flops"]
print(f"program: {cdata['program']}; phases {cdata['phases']}")
print(f"first fused kernel {chain['id']}: {chain['label']} in {chain['path']}, runs "
      f"{[(n['id'], n['label'], tuple(n['shape'])) for n in ran]}; {chain['flops']} FLOPs, "
      f"{chain['bytes_saved']} bytes never written")
print(f"primitives without a kernel: {len(unrun)} ({ {n['label'] for n in unrun} }); FLOPs per pane {ctotal}")
assert cdata["program"] == {"kernels": 206, "primitives": 282, "fused": 25} == \
    {"kernels": len(kernels), "primitives": len(graph.ops()), "fused": len(fused)}
assert cdata["phases"] == cdata["show"] == ["forward", "backward", "compiled"]      # all three open side by side
assert chain["ops"] == [n["label"] for n in ran] == ["mul", "sum"] and chain["path"] == "block.norm1"
assert all(n["phase"] == "forward" and n["kernel"] == chain["id"] for n in ran)
assert [n["shape"] for n in ran] == [[B, L, CFG.d_model], [B, L, 1]]
assert chain["bytes_saved"] == math.prod(ran[0]["shape"]) * 4 == B * L * CFG.d_model * 4 == 2048
runs = [i for k in kernels for i in k["runs"]]
assert len(runs) == len(set(runs)) == len(calls) - len(unrun) == 282 - 15
assert {n["label"] for n in unrun} == {"expand"}
assert ctotal["compiled"] == ctotal["forward"] + ctotal["backward"] == sum(k["flops"] for k in kernels)
assert ctotal["compiled"] == fc.total("forward", matmul_only=False) + fc.total("backward", matmul_only=False) \
    == 2_288_608
show(cpage.save(OUT / "block_compiled.html"))              # press "compiled" for the kernels' pane alone

# %% [markdown]
# ## Check yourself
#
# 1. What does every number the explorer page shows come from, and how does the lesson check them?
#
#    <details><summary>Answer</summary>
#
#    From `page.data`, the data Python put into the page. Each claim is read off it and checked against something
#    that never saw the page: a second recording of the same call, the FLOP counter and the modules' own parameter
#    counts.
#
#    </details>
#
# 2. Hovering over `q_proj`'s matmul on an (8, 64) input, what FLOPs and bytes does its card show?
#
#    <details><summary>Answer</summary>
#
#    $2 \cdot 8 \cdot 64 \cdot 64$ = 65,536 FLOPs; it reads $4 (8 \cdot 64 + 64 \cdot 64)$ = 18,432 bytes of float32
#    inputs and writes 2,048. The permute before it reads and writes 0 bytes, since it is a view of the weight.
#
#    </details>
#
# 3. Clicking that matmul lights up four backward ops. Which, and what does that say about the backward's cost?
#
#    <details><summary>Answer</summary>
#
#    Two permutes (transposes, views) and two matmuls, one for each input's gradient, each with as many FLOPs as the
#    forward matmul: every forward matmul becomes two, which is where "backward costs twice the forward" comes from.
#
#    </details>
#
# 4. The input $x$ is read four times. How many additions sum its gradients, and where does the page show them?
#
#    <details><summary>Answer</summary>
#
#    Four reads give four gradients and three additions, made as the gradients arrive. The page draws the chain as
#    one "+" node where paths meet; clicking `x` lights its sums up.
#
#    </details>

# %% [markdown]
# ## Words from this lesson
#
# - **self-contained file**: a page that holds its data, its script and everything it needs to draw, so that it
#   opens offline in any browser (§1)
# - **stepper**: the explorer's → and ← keys, which walk the backward pass one op at a time in the order autograd
#   ran them (§1)
# - **module tree**: the nesting of a model's modules, each box on the page summing the parameters, FLOPs and bytes
#   of everything inside it (§2)

# %% [markdown]
# ## Exercises
#
# 1. `differentiating_ops`, of a page's `data` and a forward op's id: the ids of the backward ops that
#    differentiate that op, in the order the stepper reaches them. That is what clicking the op lights up in
#    the backward pane, rebuilt from the backward side. The checker hands you pages without the `grads` and
#    `sums` lists, with the nodes in a shuffled order, and compares with the recorded graph's own links. Mind
#    the sums: they gather a gradient, they do not differentiate anything.
# 2. `heaviest_module`, of `data`, a phase and a depth: the module at that depth of the tree (0 is the root,
#    1 the boxes the page opens with) that costs the most FLOPs in that phase, and its FLOPs, as its box's
#    card shows them. The checker compares with `count_flops` run on the same call, on blocks and on a small
#    two-layer model whose identical layers the page folds into one box.
#
# `python -m tinygrad_block exercise 19` writes `exercise_19.py` with the two functions to fill in;
# `python -m tinygrad_block check 19` checks them and says what is wrong.
