"""The graph explorer: a recorded Graph as one self-contained HTML page a learner clicks through. Python decides
what the page holds — every primitive of the forward and backward views (identical layers stored once), the module
tree with what each module sums up (parameters, FLOPs, bytes), each op's shapes, dtypes, FLOPs and bytes, which
backward ops differentiate which forward op, autograd's order, and the DOT text of every label, box, frame and
arrow (graph_dot.py writes it) — and explorer/explorer.js only shows and hides it, joining those into statements
laid out by graphviz (compiled to WebAssembly, inside the page). With a compiled program (tb.jit's, of the same
forward and backward) the page has a third pane: its kernels, each listing the primitives it runs, linked both ways
to those primitives in the forward and backward panes; a generated kernel's card shows its source (C and CUDA C),
any other kernel's says in a line why it runs the array library's functions. Each op and module names the lesson
section that teaches it (OP_LESSONS, MODULE_LESSONS); with `check`, each backward op carries the gradient check of
the module around it: autograd against manual/'s hand-derived pair of that module (gradient_check).

    page = tb.explore(block, x)                 # forward and backward of block(x), recorded
    page = tb.explore(block, x, compiled=True)  # and the kernels tb.jit replays them with
    page = tb.explore(block, x, check=True)     # and "colour by: gradient check"
    page.save("block.html")                      # open it in a browser; in Jupyter, `page` shows itself
    python -m tinygrad_block graph --preset llama2-70b --model --out model.html
    python -m tinygrad_block graph --preset tiny --compiled --out compiled.html
"""
from __future__ import annotations

import html
import json
import math
import re
from collections import Counter
from pathlib import Path

from . import cpu_kernels, cuda_kernels
from .dtypes import nbytes
from .fuse import fused_chains, kernel_bytes, kernel_flops, kernel_instructions
from .compiled import program_of, recapture
from .graph import Graph, is_movement, record_graph
from .graph_dot import PAGE, STYLE, page_box, page_edge, page_frame, page_node
from .graph_view import GraphView, finite, folded_layers, moments
from .kernels import EXPR, TYPES, op_name

ASSETS = Path(__file__).parent / "explorer"
PLACEHOLDER = re.compile(r"/\*(TITLE|STYLE|VIZ|SCRIPT|DATA)\*/")     # in template.html
BINS = 24                                   # histogram bars of a tensor's values
SAMPLE = 200_000                            # values a histogram or statistic looks at, at most (evenly spaced)
KINDS = {"op": "op", "residual": "op", "accumulate": "op", "box": "module",      # data-kind; the rest are tensors
         "kernel": "op", "fused": "op", "check": "op"}
# Where the course teaches each op and module: primitive (or node kind) / module class -> (lesson, section heading).
# A card links to the lesson's file; tests/graph/test_explorer_page.py checks that every heading is in its lesson.
LESSON_FILES = {1: "01_tensors_and_the_graph", 2: "02_backpropagation", 3: "03_broadcasting_and_matmul",
                4: "04_from_text_to_probabilities", 5: "05_normalisation", 6: "06_attention",
                7: "07_positions_and_sharing", 8: "08_feed_forward", 9: "09_the_prenorm_block", 15: "15_variants",
                16: "16_inference", 18: "18_from_eager_to_compiled"}
ELEMENTWISE = (1, "2. Primitives: forward, backward and FLOPs in one place")
HEADS = (6, "6. Heads, and attention shape by shape")
ROPE = (7, "1. RoPE turns pairs of dimensions")
EMBEDDING = (4, "2. Ids to vectors: the embedding")
OP_LESSONS = {
    **dict.fromkeys(("neg", "exp", "log", "sqrt", "reciprocal", "sin", "cos", "erf", "pow", "add", "sub", "mul",
                     "div", "maximum", "compare", "where", "cast", "transfer"), ELEMENTWISE),
    "expand": (3, "1. Broadcasting is an `expand`, and its backward sums"),
    **dict.fromkeys(("sum", "max", "kthlargest"), (3, "2. Reductions: sum, mean and max")),
    "matmul": (3, "3. A matmul costs $2MNK$ FLOPs"),
    "reshape": HEADS, "permute": HEADS, "slice": ROPE, "pad": ROPE, "concat": ROPE,
    "gather": EMBEDDING, "scatteradd": EMBEDDING, "setrows": (16, "1. Prefill and decode, with a KV cache"),
    "tiledattention": (16, "6. Tiled attention: $O(L)$ kept for backward, and its FLOPs"),
    "residual": (9, "2. The residual stream is a bus"),                          # node kinds, before labels
    "accumulate": (2, "3. Gradients add up where a tensor is reused"),
    **dict.fromkeys(("kernel", "fused", "check"), (18, "4. Which ops share a kernel, and why")),
}
MODULE_LESSONS = {
    "Linear": (3, "5. `nn.Linear`: a matmul and a bias"), "Embedding": EMBEDDING,
    "RMSNorm": (5, "1. Two norms, one token at a time"), "LayerNorm": (5, "1. Two norms, one token at a time"),
    "Attention": HEADS, "MLP": (8, "2. The classic FFN: expand, activate, contract"),
    "SwiGLU": (8, "3. GLU and SwiGLU: an FFN with a gate"), "PreNormBlock": (9, "1. The block in two lines"),
    "PostNormBlock": (9, "7. Pre-norm against post-norm"), "ParallelBlock": (15, "5. The parallel block"),
    "DeepNormBlock": (15, "2. DeepNorm"), "LM": (4, "3. The residual stream through the blocks"),
    "MoE": (15, "8. Mixture of experts: total against active parameters"),
}


class MissingAsset(RuntimeError):
    """A file of the page (explorer/: template, script, style, Viz.js) that the installed package lacks."""


def asset(name: str) -> str:
    """The text of explorer/`name`, shipped with the package; a MissingAsset naming it where the install lacks it."""
    path = ASSETS / name
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise MissingAsset(f"explore: the package file tinygrad_block/explorer/{name} cannot be read ({e.strerror}: "
                           f"{path}); this install of tinygrad_block is incomplete: reinstall it (from a clone of "
                           "the repository, pip install -e . at its root)") from None


class Explorer:
    """The page: `.html` (the text), `.save(path)`, and inline display in Jupyter (`_repr_html_`)."""

    def __init__(self, html_text: str, title: str, data: dict):
        self.html, self.title, self.data = html_text, title, data

    def save(self, path) -> Path:
        """Write the page (one file, nothing fetched when it opens). Returns the path."""
        from .files import write_text
        path = Path(path)
        if path.suffix.lower() != ".html":
            raise ValueError(f"Explorer.save: {path} must end in .html")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, self.at(path))
        return path

    def at(self, path: Path) -> str:
        """The page as saved at `path`: its links to the lessons lead from that folder to the course's lessons/
        (in a clone of the repository; elsewhere they stay relative, lessons/NN_name.py)."""
        from .clone import LESSONS
        from .files import relative_path
        if not self.data.get("lessons") or not LESSONS.is_dir():
            return self.html
        root = relative_path(LESSONS, Path(path).resolve().parent)
        return page_html(self.title, self.data | {"lesson_root": root + "/"})

    def _repr_html_(self) -> str:
        """The page in an inline frame, sandboxed: its script runs, in an origin of its own, away from the notebook."""
        return (f'<iframe sandbox="allow-scripts" srcdoc="{html.escape(self.html)}" '
                'style="width:100%;height:720px;border:1px solid #ccc" '
                f'title="{html.escape(self.title)}"></iframe>')

    def __repr__(self) -> str:
        return f"<Explorer {self.title!r}: {len(self.html):,} bytes; .save('graph.html') or display it in Jupyter>"


def explore(module, *inputs, backward: bool = True, depth: int = 1, fold: bool = True, values: bool | None = None,
            title: str | None = None, compiled: bool = False, check: bool = False) -> Explorer:
    """Run `module(*inputs)` (and, with `backward`, the backward of sum(out * ones)) under record_graph and return
    its explorer page, opened at `depth`. `values` (default: the inputs hold values, not the shape-only device)
    adds each tensor's statistics and histogram, and gradients. `compiled` adds the program tb.jit makes of the
    same call (compiled.program_of): its kernels in a pane of their own. `check` (a transformer block and its input)
    adds the gradient check (gradient_check): each backward op coloured by how far autograd is from manual/'s
    hand-derived backward of the module around it. The gradients the module's parameters and the inputs held
    before are put back afterwards, untouched."""
    from .tensor import ones_like
    values = all(getattr(t, "device", "meta") != "meta" for t in inputs) if values is None else values
    name = module.scope_name or type(module).__name__.lower()
    title = title or f"{name}: {type(module).__name__}, inputs {', '.join(str(tuple(t.shape)) for t in inputs)}"
    leaves = [*module.parameters(), *(t for t in inputs if t.requires_grad)]
    kept = [t.grad for t in leaves]             # the caller's gradients: set aside, so this backward adds to none
    if check and len(inputs) != 1:
        raise ValueError(f"explore: check=True runs a block on one input (B, L, d_model), got {len(inputs)} inputs")
    checks = gradient_check(module, inputs[0]) if check else None
    try:
        program = program_of(module, *inputs, backward=backward) if compiled else None
        for t in leaves:
            t.grad = None
        with record_graph(module, *inputs, retain_grads=values and backward) as graph:
            if program is not None:                 # captured again: each op node names its instruction
                recapture(program, module, *inputs, backward=backward)
            else:
                out = module(*inputs)
                if backward:
                    out.backward(ones_like(out))
        classes = {path: type(m).__name__ for path, m in module.named_modules(name)}
        return page_of(graph, title=title, depth=depth, fold=fold, values=values, program=program, classes=classes,
                        checks=checks)
    finally:
        for t, grad in zip(leaves, kept):
            t.grad = grad


def page_of(graph: Graph, *, title: str = "graph", depth: int = 1, fold: bool = True, values: bool = False,
             show: list | None = None, program=None, classes: dict | None = None,
             checks: dict | None = None) -> Explorer:
    """The page of a recorded graph (both phases when it holds a backward), opened at `depth` showing the phases
    in `show` (default: all it holds, side by side). `program`: tb.jit's compiled program of the same call (the
    graph recorded while compiled.recapture ran it, so each op names its instruction), shown as a third phase,
    'compiled', beside the two it runs. `classes` ({module path: class name}) links each module
    to the lesson that teaches it, as every op is linked to its own. `checks`: gradient_check's, for the colouring
    "gradient check"."""
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 0:
        raise ValueError(f"explore: depth must be an int >= 0, got {depth!r}")
    if not isinstance(title, str):
        raise TypeError(f"explore: title must be a str, got {type(title).__name__} {title!r}")
    data = payload(graph, title=title, depth=depth, fold=fold, values=values, program=program)
    teach(data, classes or {})
    if checks is not None:
        _mark_checks(data, checks)
    if show is not None and not isinstance(show, (list, tuple)):
        raise TypeError(f"explore: show must be a list of phases, got {type(show).__name__} {show!r}")
    unknown = [p for p in show or () if p not in data["phases"]]
    if unknown:
        raise ValueError(f"explore: show={show!r} names {', '.join(map(repr, unknown))}, not a phase of this page; "
                         f"expected some of {', '.join(map(repr, data['phases']))}")
    data["show"] = list(show or data["phases"])
    return Explorer(page_html(title, data), title, data)


def page_html(title: str, data: dict) -> str:
    """The template with its placeholders filled in one pass, so nothing filled in (a title that reads /*DATA*/)
    is read as a placeholder again. The data is JSON with `<`, `>` and `&` written as \\u escapes, so no name in it
    can end its <script> element (`</script>`) or open a comment there (`<!--`); a number that is not finite
    is an error here, not JSON that no browser parses."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    template = asset("template.html")
    parts = {"TITLE": html.escape(title), "STYLE": asset("explorer.css"), "VIZ": asset("viz-global.js"),
             "SCRIPT": asset("explorer.js"),
             "DATA": text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")}
    return PLACEHOLDER.sub(lambda m: parts[m[1]], template)


# ---------------------------------------------------------------- what the page holds
def teach(data: dict, classes: dict) -> None:
    """Each op and module names what teaches it (`teach`: a key of OP_LESSONS or MODULE_LESSONS; a node kind
    before its label, so a residual add is the residual's), and the page holds those entries once (`lessons`:
    key -> [file, lesson number, section]), with the folder the files are in (`lesson_root`)."""
    used = {}
    for n in data["nodes"]:
        key = n["kind"] if n["kind"] in OP_LESSONS else n["label"] if n["data_kind"] == "op" else None
        if key in OP_LESSONS:
            n["teach"], used[key] = key, OP_LESSONS[key]
    for path, m in data["modules"].items():
        key = classes.get(path)
        if key in MODULE_LESSONS:
            m["teach"], used[key] = key, MODULE_LESSONS[key]
    data["lessons"] = {key: [f"{LESSON_FILES[k]}.py", k, section] for key, (k, section) in used.items()}
    data["lesson_root"] = "lessons/"



def payload(graph: Graph, *, title: str, depth: int, fold: bool, values: bool, program=None) -> dict:
    """Everything the script shows, as JSON-ready data: nodes and edges of each phase, the module tree; with a
    compiled program, its kernels as the phase 'compiled'."""
    phases = ["forward"] + (["backward"] if graph.ops("backward") else [])
    views = {p: graph.view(None, backward=p == "backward", values=False, fold=fold) for p in phases}
    ids = {p: {} for p in phases}                     # graph node index -> page id of the node drawing it
    nodes = []
    for p, view in views.items():
        for n in view.nodes:
            if not n.name.startswith("g"):          # a gradient's sink names the op that made it: not that op
                ids[p].update({i: f"{p[0]}{n.name}" for i in n.members})
    for p, view in views.items():
        nodes += [_node(graph, view, n, p, ids, values) for n in view.nodes]
    _merge_partial_sums(graph, nodes, ids)
    _link(nodes)
    edges = {p: [[f"{p[0]}{e.src}", f"{p[0]}{e.dst}", list(e.shape), e.highway] for e in v.edges]
             for p, v in views.items()}
    if program is not None:
        kernels, edges["compiled"] = _kernels(graph, program, ids, nodes, fold)
        nodes += kernels
        phases.append("compiled")
    data = {"title": title, "depth": depth, "phases": phases, "style": STYLE, "dot": PAGE, "nodes": nodes,
            "edges": edges, "modules": _modules(views, nodes, phases), "values": values}
    _labels(data)
    if program is not None:                  # the whole program's size (a fold draws one layer's kernels)
        data["program"] = {"kernels": len(program.kernels), "primitives": len(program.plain),
                           "fused": fused_chains(program)}
    return data


def _labels(data: dict) -> None:
    """What the script draws, as graph_dot writes it: each node's label (`dot`), each module's as a closed box per
    phase (`dot`) and as an open frame (`frame`), and each edge's (its fifth item), so the script only joins them."""
    for n in data["nodes"]:
        n["dot"] = page_node(n)
    for m in data["modules"].values():
        m["dot"], m["frame"] = {p: page_box(m, p) for p in data["phases"]}, page_frame(m)
    for edges in data["edges"].values():
        for e in edges:
            e.append(page_edge(e[2]))


def _node(graph: Graph, view: GraphView, n, phase: str, ids: dict, values: bool) -> dict:
    """One drawn node: what the hover card shows."""
    g = graph.nodes[n.members[0]] if n.members else None
    ins = [graph.nodes[j] for j in g.inputs] if g is not None and n.kind != "grad" else []
    out = {"id": f"{phase[0]}{n.name}", "phase": phase, "kind": n.kind, "data_kind": KINDS.get(n.kind, "tensor"),
           "label": n.label, "path": ".".join(n.scope), "scope": list(n.scope), "step": n.step, "note": n.note,
           "origin": n.origin,
           "shape": list(n.shape), "dtype": n.dtype, "scalar": n.scalar,
           "inputs": [[list(i.shape), i.dtype] for i in ins], "flops": n.flops,
           "matmul_flops": n.flops if n.label == "matmul" else 0}
    if n.kind in KINDS:
        view = is_movement(n.label, aliasing=True)              # a view of its input: no bytes moved
        written = 0 if view else nbytes(n.shape, n.dtype)
        out |= {"bytes_read": 0 if view else sum(nbytes(i.shape, i.dtype) for i in ins),
                "bytes_written": written}
    if phase == "backward" and n.kind != "grad" and g is not None and g.source is not None:
        out["source"] = ids["forward"].get(g.source)      # the forward op differentiated (a sum: whose gradient)
    if values and g is not None:
        out |= _stats(g.tensor, "value") | (_stats(g.tensor.grad, "grad") if getattr(g.tensor, "grad", None)
                                            is not None else {})
    return out


def _merge_partial_sums(graph: Graph, nodes: list, ids: dict) -> None:
    """Where three or more gradients meet, autograd adds them two at a time; like graph_view at any depth, the
    page draws the chain as one "paths meet" node: each partial sum names the chain's first (`merge`)."""
    if "backward" not in ids:
        return
    uses = Counter(j for i in graph.ops("backward") for j in graph.nodes[i].inputs)
    first = {}
    for i in graph.ops("backward"):
        n = graph.nodes[i]
        j = n.inputs[0] if n.origin == "accumulate" else None
        if j is not None and graph.nodes[j].origin == "accumulate" and graph.nodes[j].scope == n.scope \
                and uses[j] == 1:
            first[i] = first.get(j, j)
    by_id = {n["id"]: n for n in nodes}
    for i, j in first.items():
        mine, root = ids["backward"].get(i), ids["backward"].get(j)
        if mine in by_id and root and root != mine:
            by_id[mine]["merge"] = root


# ---------------------------------------------------------------- the gradient check: autograd against manual/
ROUND_OFF = 1e-10           # a difference at most this (float64, values near 1) is round-off, not a bug
PAIRS = {"RMSNorm": "rmsnorm", "LayerNorm": "layernorm", "Linear": "linear", "Attention": "attention",
         "SwiGLU": "swiglu", "MLP": "ffn"}           # module class -> the manual/ pair that differentiates it


def gradient_check(block, x) -> dict:
    """For each module of `block` that a hand-derived pair of manual/ differentiates (PAIRS): the largest
    |autograd - by hand| of the gradients flowing out of its backward (its input's, `dx`, and its parameters'),
    the pair run on the very input and output gradient autograd's backward gave that module, so a wrong pair
    shows where it lives and nowhere else. Run in float64 on a copy of the block: {path: {"pair", "max",
    "parts": {gradient: difference}}}, and under "" the whole block's (block_forward / block_backward)."""
    from .dtypes import float64
    from .generator import Generator
    from .tensor import Tensor
    from .manual import block as mb
    from .nn.block import Block
    if not isinstance(block, Block) or block.cfg.lora_rank or block.cfg.n_experts > 1:
        raise ValueError(f"explore: check=True compares a transformer block's backward with manual/'s hand-derived "
                         f"one; got {type(block).__name__}" + (" with LoRA or experts, which manual/ lacks"
                                                               if isinstance(block, Block) else ""))
    cfg = block.cfg
    mb.check_config(cfg)
    twin = type(block)(cfg, generator=Generator(0), dtype=float64)
    twin.load_state_dict({k: v.to(float64) for k, v in block.state_dict().items()})
    twin.scope_name, name = block.scope_name, block.scope_name or type(block).__name__.lower()
    seen = _watch(twin, name)
    x64 = Tensor(x.numpy().astype("float64"), requires_grad=True)
    out = twin(x64)
    out.backward(out.ones_like())
    checks = {path: _check(module, *seen[path], cfg) for path, module in twin.named_modules(name) if path in seen}
    params = {k: p.numpy() for k, p in twin.named_parameters()}
    ones = out.ones_like().numpy()
    dx, grads = mb.block_backward(ones, mb.block_forward(x64.numpy(), params, cfg)[1])
    parts = {"dx": _diff(x64.grad, dx)} | {k: _diff(p.grad, grads[k]) for k, p in twin.named_parameters()}
    return checks | {"": {"pair": "block", "max": max(parts.values()), "parts": parts}}


def _watch(block, name: str) -> dict:
    """Have each module that a pair differentiates keep its input (a copy of its own, `x * 1.0`, so its gradient
    is this module's alone) and its output, with their gradients: {path: (input, output)}."""
    seen = {}
    for path, module in block.named_modules(name):
        if type(module).__name__ in PAIRS:
            def forward(x, *args, _run=module.forward, _path=path, **kwargs):
                mine = (x * 1.0).retain_grad()
                out = _run(mine, *args, **kwargs).retain_grad()
                seen[_path] = (mine, out)
                return out
            object.__setattr__(module, "forward", forward)
    return seen


def _check(module, x, out, cfg) -> dict:
    """The pair of manual/ for this module, run on autograd's input and output gradient, against autograd."""
    from .manual import attention, block as mb, linear
    kind, arr = type(module).__name__, lambda t: None if t is None else t.numpy()
    lin = lambda m: linear.Linear(m.weight.numpy(), arr(m.bias), None)        # noqa: E731
    dout, x_ = out.grad.numpy(), x.numpy()
    if kind == "Linear":
        dx, grads = linear.linear_backward(dout, linear.linear_forward(x_, *lin(module))[1])
    elif kind in ("RMSNorm", "LayerNorm"):
        dx, grads = mb.norm_backward(dout, mb.norm_forward(x_, (arr(module.weight), arr(getattr(
            module, "bias", None))), cfg)[1], cfg)
    elif kind == "Attention":
        projections = tuple(lin(getattr(module, p)) for p in ("q_proj", "k_proj", "v_proj", "o_proj"))
        dx, grads = attention.attention_backward(dout, mb.attn_forward(x_, projections, cfg, 0)[1])
    else:
        names = ("gate_proj", "up_proj", "down_proj") if kind == "SwiGLU" else ("up_proj", "down_proj")
        cache = mb.ffn_sublayer_forward(x_, tuple(lin(getattr(module, p)) for p in names), cfg)[1]
        dx, grads = mb.ffn_sublayer_backward(dout, cache, cfg)
    grads = mb.flatten(grads)
    parts = {"dx": _diff(x.grad, dx)} | {k: _diff(p.grad, grads[k]) for k, p in module.named_parameters()}
    return {"pair": PAIRS[kind], "max": max(parts.values()), "parts": parts}


def _diff(autograd, by_hand) -> float:
    """max |autograd - by hand|; inf where the hand-derived gradient has another shape."""
    a = autograd.numpy()
    if getattr(by_hand, "shape", None) != a.shape:
        return math.inf
    d = float(abs(a - by_hand).max()) if a.size else 0.0
    return d if math.isfinite(d) else math.inf


def _mark_checks(data: dict, checks: dict) -> None:
    """Each backward op names the innermost module around it that a pair checks (`check`); the page holds the
    checks, with an infinite difference (a pair gone wrong) written as a very large one JSON can carry."""
    for n in data["nodes"]:
        if n["phase"] == "backward" and n["data_kind"] == "op":
            paths = [".".join(n["scope"][:k]) for k in range(len(n["scope"]), 0, -1)]
            n["check"] = next((p for p in paths if p in checks), None)
    big = lambda d: min(d, 1e300)                                                # noqa: E731
    data["check"] = {p: c | {"max": big(c["max"]), "parts": {k: big(v) for k, v in c["parts"].items()}}
                     for p, c in checks.items()}
    data["round_off"] = ROUND_OFF


# ---------------------------------------------------------------- the compiled program's kernels
def _kernels(graph: Graph, program, ids: dict, nodes: list, fold: bool) -> tuple[list, list]:
    """The program's kernels as the page's nodes of phase 'compiled', and the arrows between them. A kernel runs
    primitives of the forward and backward panes: its `runs` lists them, and each of them names its `kernel`. The
    graph was recorded alongside a capture that agrees with the program (compiled.recapture), so each op node names
    its instruction (`call`); an index check (a derived instruction) has none. With `fold`, a kernel of a layer the
    fold stands for (layers.1 .. of an identical run) is drawn as the first layer's kernel that runs its
    counterpart, as the other panes draw that layer's ops."""
    instructions = program.instructions
    node_of = {graph.nodes[g].call: g for g in graph.ops()}                    # instruction -> graph node
    if None in node_of:
        raise ValueError("explore: the graph was not recorded alongside a capture of the compiled program "
                         "(compiled.recapture, as explore does), so its ops do not name the kernels that run them")
    rep = {}
    if fold:
        for phase in ("forward", "backward"):
            rep.update(folded_layers(graph, phase)[0])
    kernels = [[s.out for s in kernel_instructions(k)] for k in program.kernels]   # instruction k makes slot k
    kernel_of = {k: i for i, ks in enumerate(kernels) for k in ks}             # instruction -> its kernel
    alias = program.alias                                                      # broadcasts elided by fusion
    kernel_of.update({k: kernel_of[j] for k, j in alias.items() if j in kernel_of})
    by_node = {node_of[k]: i for k, i in kernel_of.items() if k in node_of}    # graph node -> kernel

    def drawn(i: int) -> int | None:
        """The kernel drawn for kernel i: itself, or (a folded layer's) the first layer's counterpart."""
        gs = [node_of[k] for k in kernels[i] if k in node_of]
        if not gs or not all(g in rep for g in gs):
            return i
        return by_node.get(rep[gs[-1]])

    draw = [drawn(i) for i in range(len(kernels))]
    plans = _plans(program)
    by_id = {n["id"]: n for n in nodes}
    out = []
    for i, ks in enumerate(kernels):
        if draw[i] != i:
            continue
        runs = []
        for k in ks:
            g = node_of.get(k)
            if g is None:
                continue
            phase = graph.nodes[g].phase
            target = ids.get(phase, {}).get(rep.get(g, g))
            if target in by_id:
                runs.append(target)
                by_id[target].setdefault("kernel", f"c{i}")
        out.append(_kernel_node(program, i, ks, runs) | _code(program, i, plans.get(i)))
    edges, seen = [], set()
    for i, ks in enumerate(kernels):
        dst = draw[i]
        for k in ks:
            for j in (alias.get(j, j) for j in instructions[k].ins):
                src = draw[kernel_of[j]] if j in kernel_of else None
                if src is None or dst is None or src == dst or (src, dst) in seen:
                    continue
                seen.add((src, dst))
                edges.append([f"c{src}", f"c{dst}", list(instructions[j].shape), False])
    return out, edges


def _kernel_node(program, i: int, ks: list, runs: list) -> dict:
    """The page's node for kernel i, which runs the instructions `ks` (the primitives `runs` of the other panes): what
    it reads from outside itself, writes, costs, and the bytes of intermediates a fused chain never writes."""
    instructions, alias = program.instructions, program.alias
    last, inside, reads = instructions[ks[-1]], set(ks), []
    for j in (alias.get(j, j) for k in ks for j in instructions[k].ins):
        if j not in inside and j not in reads:
            reads.append(j)
    moved = kernel_bytes(program, program.kernels[i])                           # a kernel of views: none
    kind = "check" if last.op.name == "derived" else ("fused" if len(ks) > 1 else "kernel")
    flops = kernel_flops(program.kernels[i])
    inputs = [(tuple(shape), str(dtype)) for shape, dtype in map(program.spec, reads)]
    return {"id": f"c{i}", "phase": "compiled", "kind": kind, "data_kind": "op",
            "label": "index check" if kind == "check" else " > ".join(instructions[k].op.name for k in ks),
            "path": ".".join(last.scope), "scope": list(last.scope), "step": last.step,
            "note": f"{len(ks)} primitives, one kernel" if kind == "fused" else "", "origin": "",
            "shape": list(last.shape), "dtype": str(last.dtype), "scalar": False,
            "inputs": [[list(shape), dtype] for shape, dtype in inputs], "flops": flops,
            "matmul_flops": flops if last.op.name == "matmul" else 0,
            "bytes_read": moved[0], "bytes_written": moved[1],
            "bytes_saved": sum(nbytes(instructions[k].shape, instructions[k].dtype) for k in ks[:-1]),
            "runs": runs, "ops": [instructions[k].op.name for k in ks]}


def _plans(program) -> dict:
    """kernel index -> the generated plan (kernels.Kernel) of that kernel, matched by the instructions both run: a
    program switched back to its unfused kernels runs none of its plans."""
    by_instructions = {tuple(map(id, plan.instructions)): plan for plan in program.plans}
    return {i: by_instructions[key] for i, k in enumerate(program.kernels)
            if (key := tuple(map(id, kernel_instructions(k)))) in by_instructions}


def _code(program, i: int, plan) -> dict:
    """What runs kernel i, in a line (`code`), and with a generated plan its `source`: the C function and the CUDA
    C function rendered from it (only these kernels carry source, so the page stays small)."""
    gpu = program.backend.name.startswith("cuda")
    lib = "CuPy" if gpu else "numpy"
    if plan is None:
        return {"code": _why_not(kernel_instructions(program.kernels[i]), lib)}
    source = {"c": cpu_kernels.function(plan), "cuda": cuda_kernels.function(plan)}
    if getattr(program.kernels[i], "kernel", None) is plan:       # the replay's kernel runs the compiled function
        return {"code": f"generated {'CUDA C' if gpu else 'C'}, compiled once, run at every replay", "source": source}
    if not gpu and cpu_kernels.numpy_way(plan) is None:
        return {"code": "generated, but numpy's functions run it: which of two equal values numpy keeps on this "
                        "machine (the sign of a zero) was not found, and a replay computes what eager does",
                "source": source}
    if plan.reduce and gpu:
        return {"code": "generated, but CuPy's functions run it: CuPy sums a row in another order than the "
                        "generated kernel would, and a replay computes what eager does", "source": source}
    return {"code": f"generated, but {lib}'s functions run it: the compiler was missing or refused this program",
            "source": source}


def _why_not(instructions: list, lib: str) -> str:
    """Why a kernel has no generated source, in a line: an index check, a lone primitive, or a chain holding an op
    (or a dtype) the kernel language leaves to the array library."""
    names = [s.op.name for s in instructions]
    if names == ["derived"]:
        return f"{lib}'s: an index's bounds check, a Python function on the arrays"
    if len(instructions) == 1:
        return f"runs {lib}'s function ({names[0]}): source is generated for fused chains only"
    odd = next((s.op.name for s in instructions if op_name(s) not in EXPR), None)
    if odd is not None:
        return (f"a chain with {odd} stays {lib}'s: the kernel language has no {odd} (a generated kernel computes "
                f"what eager does, bit for bit)")
    dtype = str(instructions[-1].dtype)
    if dtype not in TYPES:
        return f"a chain of {dtype} stays {lib}'s: kernels are generated for {', '.join(TYPES)}"
    return f"a chain that stays {lib}'s functions: no kernel was planned for its operands' layouts or dtypes"


def _stats(t, what: str) -> dict:
    """mean, std, min, max and a histogram of a tensor's finite values (at most SAMPLE of them, evenly spaced), and
    how many of those looked at were left out as not finite (`not_finite`, of `count`). Values are binned divided
    by the largest magnitude, where max - min would overflow."""
    if t is None or t.device == "meta" or not t.size:
        return {}
    v = t.numpy().astype("float64").ravel()
    v = v[::max(1, v.size // SAMPLE)]
    count, v = v.size, finite(v)
    if not v.size:
        return {what: {"count": count, "not_finite": count}}
    (mean, std), lo, hi = moments(v), float(v.min()), float(v.max())
    scale = max(abs(lo), abs(hi)) or 1.0
    u, lo_u = v / scale, lo / scale                         # in [-1, 1]
    width = hi / scale - lo_u                               # at most 2
    k = ((u - lo_u) * (BINS / width)).astype("int64").clip(0, BINS - 1) if width > 0 else u.astype("int64") * 0
    return {what: {"mean": _finite(mean), "std": _finite(std), "min": lo, "max": hi,
                   "hist": [int((k == b).sum()) for b in range(BINS)] if width > 0 else [int(v.size)],
                   "count": count, "not_finite": count - int(v.size)}}


def _finite(x) -> float | None:
    """A float for the page's JSON: None (null) where it is not finite, which JSON cannot hold."""
    x = float(x)
    return x if math.isfinite(x) else None


def _link(nodes: list) -> None:
    """Forward ops list the backward ops that differentiate them (`grads`) and the sums that gather their gradient
    from several uses (`sums`); backward ops get their place in autograd's order (`order`), as the sweep ran them."""
    by_id = {n["id"]: n for n in nodes}
    order = 0
    for n in nodes:
        if n["phase"] == "backward" and n["data_kind"] == "op":
            n["order"], order = order, order + 1
            if n.get("source") in by_id:                        # differentiates it, or sums its gradient
                key = "sums" if n["origin"] == "accumulate" else "grads"
                by_id[n["source"]].setdefault(key, []).append(n["id"])


def _modules(views: dict, nodes: list, phases: list) -> dict:
    """The module tree: {path: label, parent, depth, repeat (a fold of identical layers), parameters, FLOPs,
    matmul FLOPs and bytes moved per phase, bytes written by its forward ops (its activations), its output shape
    per phase}; each sums what it holds. A fold's total counts every layer it stands for (one layer: total /
    repeat); the modules inside it are one layer's."""
    folds = views["forward"].folds
    tree: dict = {}
    for n in nodes:
        scope = tuple(n["scope"])
        for k in range(1, len(scope) + 1):
            path = ".".join(scope[:k])
            if path not in tree:
                repeat = folds[scope[:k]][1] - folds[scope[:k]][0] + 1 if scope[:k] in folds else 1
                tree[path] = {"label": views["forward"].module_name(scope[:k]), "parent": ".".join(scope[:k - 1]),
                              "depth": k - 1, "repeat": repeat, "own": _zero(phases), "shape": {}}
        if scope:
            own = tree[".".join(scope)]["own"]
            own["flops"][n["phase"]] += n["flops"]
            own["ops"][n["phase"]] += n["data_kind"] == "op"
            own["matmul_flops"][n["phase"]] += n["matmul_flops"]
            own["parameters"] += math.prod(n["shape"]) if n["kind"] == "param" else 0
            own["activation_bytes"] += n.get("bytes_written", 0) if n["phase"] == "forward" else 0
            own["bytes"][n["phase"]] += n.get("bytes_read", 0) + n.get("bytes_written", 0)
            for k in range(1, len(scope) + 1):                  # a module's output: the last op inside it
                if n["data_kind"] == "op":
                    tree[".".join(scope[:k])]["shape"][n["phase"]] = n["shape"]
    for path in sorted(tree, key=lambda p: -tree[p]["depth"]):   # children before parents
        m = tree[path]
        total = m.setdefault("total", _zero(phases))
        _add(total, m.pop("own"))
        if m["repeat"] > 1:                                     # a fold: one layer recorded, every layer counted
            m["total"] = total = _add(_zero(phases), total, m["repeat"])
        if m["parent"]:
            _add(tree[m["parent"]].setdefault("total", _zero(phases)), total)
    return tree


def _zero(phases: list) -> dict:
    zero = {p: 0 for p in ("forward", "backward", *phases)}
    return {"parameters": 0, "activation_bytes": 0, "flops": dict(zero), "matmul_flops": dict(zero),
            "bytes": dict(zero), "ops": dict(zero)}


def _add(into: dict, what: dict, times: int = 1) -> dict:
    for key, value in what.items():
        if isinstance(value, dict):
            for phase in value:
                into[key][phase] += value[phase] * times
        else:
            into[key] += value * times
    return into

