"""Every DOT text the project writes, in one place: a GraphView's (op nodes, module boxes, a dashed cluster per module
scope, a fold of identical layers labelled × n, a dotted cluster per named step where a module's own ops are drawn,
the residual stream as a straight highway; in the backward view, where gradients split and sum), a compiled
program's kernels (`program`, called by fuse.to_dot), and the labels, styles and frames of the explorer page's
drawing (`page_node`, `page_box`, `page_frame`, PAGE), which Python puts in the page's data so that its script
only joins them into statements as modules open and close.

Depth counts below the root module: at depth 1 a block shows norm1, attn, norm2 and ffn as boxes and its own
ops (the residual adds) one by one; depth 2 opens attn and ffn; depth None shows every primitive. The view's
classes live in graph_view.py, which imports this module for `GraphView.to_dot`.
"""
from __future__ import annotations

import re

from .units import human_flops

STYLE = {
    "op": 'shape=box, style="rounded,filled", fillcolor="#e8eef7", color="#5b7db1"',
    "box": 'shape=box, style="filled,bold", fillcolor="#dfeedd", color="#4c8a46", penwidth=2',
    "residual": 'shape=circle, style="filled,bold", fillcolor="#c9e7c4", color="#2e7d32", penwidth=2, fixedsize=false',
    "accumulate": 'shape=circle, style="filled,bold", fillcolor="#ffe0b2", color="#e65100", penwidth=2',
    "param": 'shape=ellipse, style=filled, fillcolor="#fff6d5", color="#b59f3b"',
    "input": 'shape=invhouse, style=filled, fillcolor="#f3e5f5", color="#7b1fa2"',
    "const": 'shape=plaintext, fontcolor="#777777"',
    "grad": 'shape=ellipse, style="filled,dashed", fillcolor="#ffe0b2", color="#e65100"',
    "fold": 'shape=note, style=filled, fillcolor="#f1f8e9", color="#4c8a46", fontsize=11',
    # the explorer's compiled pane: a kernel, a fused chain, an index's bounds check
    "kernel": 'shape=box, style="rounded,filled", fillcolor="#eeeeee", color="#757575"',
    "fused": 'shape=box, style="rounded,filled,bold", fillcolor="#f6d8ae", color="#e65100", penwidth=2',
    "check": 'shape=box, style="rounded,filled,dashed", fillcolor="#ffffff", color="#9e9e9e"',
}
HIGHWAY = 'penwidth=3, color="#2e7d32", weight=50'
GRAPH_HEAD = ['  rankdir=TB; newrank=true; fontname="Helvetica";',
              '  node [fontname="Helvetica", fontsize=10]; edge [fontname="Helvetica", fontsize=9, color="#555555"];']
PROGRAM_HEAD = ['  rankdir=TB;', '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];']
PROGRAM_FILL = {"fused": 'fillcolor="#f6d8ae"', "elementwise": 'fillcolor="#dde8f4"', "kernel": 'fillcolor="#eeeeee"'}
# the explorer page's drawing: its header, and an open module's frame (a closed one is a node styled STYLE["box"])
PAGE = {"head": '  rankdir=TB; newrank=true; node [fontname="Helvetica", fontsize=10];\n'
                '  edge [fontname="Helvetica", fontsize=8, color="#777777"];',
        "frame": 'style="rounded,dashed"; color="#9e9e9e"; fontsize=10; fontcolor="#4c8a46";', "highway": HIGHWAY}
SCOPE_CLUSTER = 'style="rounded,dashed"; color="#9e9e9e";'
FOLD_CLUSTER = 'style="rounded,bold"; color="#4c8a46"; penwidth=2;'
STEP_CLUSTER = 'style="rounded,dotted"; color="#7986cb"; fontcolor="#3949ab"; fontsize=9;'
UNCLUSTERED_STEPS = {"", "residual"}     # the residual adds sit on the highway, far apart
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")      # not allowed in the SVG graphviz writes: shown as \xNN
SPECIAL = {"\\": "\\\\", '"': '\\"', "&": "&amp;", "\n": "\\n"}


def text(line: str) -> str:
    """`line` inside a DOT string, drawn as written whatever it holds: graphviz reads `\\` (\\N, \\l), `"` and HTML
    entities (`&lt;`) inside a label, so they are escaped; a line break becomes DOT's \\n; a control character
    (which an SVG may not hold) is shown as its code, `\\x1b`."""
    line = CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", line)
    return re.sub(r'[\\"&\n]', lambda m: SPECIAL[m[0]], line)


def lines(*parts: str) -> str:
    """A label of several lines (empty ones left out), each drawn as written, joined by DOT's \\n."""
    return "\\n".join(text(part) for part in parts if part)


def node(name: str, label: str, style: str) -> str:
    """One node's statement: `label` is DOT text already (from `lines`), `style` its attributes."""
    return f'  {name} [label="{label}", {style}];'


def digraph(title: str, head: list[str], body: list[str], name: str | None = None) -> str:
    """A whole DOT document: its label `title` (drawn as written; its name too, unless `name`, an identifier, is
    given), the default attributes `head`, then the statements of `body`."""
    title = text(title)
    first = f"digraph {name} {{" if name else f'digraph "{title}" {{'
    return "\n".join([first, *head, f'  labelloc=t; label="{title}";', *body, "}"]) + "\n"


def _flops(n: int) -> str:
    return "1 FLOP" if n == 1 else f"{n:,} FLOPs"


def _shape(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def label(view, n) -> str:
    """The node's text, lines joined by DOT's \\n: what it is, its shape, its FLOPs; names drawn as written."""
    if n.kind == "box":
        head = view.module_name(n.scope) + ("′ (backward)" if view.phase == "backward" else "")
        each, total = human_flops(n.flops), human_flops(n.flops * n.repeat)
        flops = [f"{each} each", f"× {n.repeat} = {total}"] if n.repeat > 1 else [each]
        return lines(head + (f"  × {n.repeat}" if n.repeat > 1 else ""), _shape(n.shape), *flops)
    if n.kind in ("residual", "accumulate"):
        parts = ["+", n.note, _shape(n.shape)]
    elif n.kind == "op":
        parts = [n.label + (" (with a scalar)" if n.scalar else ""), n.note, f"{_shape(n.shape)} {n.dtype}"]
    elif n.kind == "param" or n.name.startswith("g"):
        return lines(n.label, _shape(n.shape))
    else:
        return lines(n.label, f"{_shape(n.shape)} {n.dtype}")
    return lines(*parts, _flops(n.flops) if n.flops else "", *n.summary.split("\n"))


def cluster_of(n) -> tuple:
    """The clusters a node sits in, outermost first: module scopes below the root, then its named step (only
    where a module's own ops are drawn). Gradient sinks sit outside."""
    if n.name.startswith("g"):
        return ()
    scope = n.scope[:-1] if n.kind == "box" else n.scope
    path = tuple(scope[:k] for k in range(2, len(scope) + 1))
    return path + (((*scope, "step", n.step),) if n.step not in UNCLUSTERED_STEPS else ())


def cluster_head(view, key: tuple) -> str:
    """`subgraph "cluster_..." {` with the label and style of a module, a fold of layers, or a step."""
    if key[-2:-1] == ("step",):
        name, shown, style = ".".join(key[1:-2]) + ":" + key[-1], key[-1], STEP_CLUSTER
    else:
        name, shown = ".".join(key[1:]), view.module_name(key)
        style = FOLD_CLUSTER if key in view.folds else SCOPE_CLUSTER
    return f'  subgraph "cluster_{text(name)}" {{ label="{text(shown)}"; {style}'


def fold_note(view, key: tuple, first: str) -> list[str]:
    """A note beside a fold's first node (edges go around nodes, not labels): how many layers, their FLOPs."""
    first_layer, last_layer = view.folds[key]
    n = last_layer - first_layer + 1
    flops = sum(m.flops for m in view.nodes if m.scope[:len(key)] == key)
    note = f"fold_{text('.'.join(key[1:]))}"
    return [f'  "{note}" [label="× {n}\\lidentical layers,\\ldrawn once\\l{human_flops(flops)} each\\l'
            f'{human_flops(flops * n)} in all\\l", {STYLE["fold"]}];', f'  {{ rank=same; "{note}"; {first}; }}']


def clusters(view) -> list[str]:
    """Node lines nested in `subgraph cluster_*` blocks, each cluster's nodes together, in order of appearance."""
    tree: dict = {}
    for n in view.nodes:
        if not n.name.startswith("g"):
            tree.setdefault(cluster_of(n), []).append(n)
    out, opened = [], []
    for path, nodes in tree.items():
        while opened and opened[-1] not in path:
            opened.pop()
            out.append("  }")
        for key in path[len(opened):]:
            opened.append(key)
            out.append(cluster_head(view, key))
            out += fold_note(view, key, nodes[0].name) if key in view.folds else []
        out += [node(n.name, label(view, n), STYLE[n.kind]) for n in nodes]
    return out + ["  }"] * len(opened)


def emit(view, title: str | None) -> str:
    """The DOT text of a GraphView: the header, the nodes in their nested clusters, the edges, then where each
    gradient comes out. Deterministic: the same view gives the same bytes."""
    sinks = {n.name: n for n in view.nodes if n.name.startswith("g")}
    edges, tail = [], []
    for e in view.edges:
        if e.dst in sinks:
            tail += [node(e.dst, label(view, sinks[e.dst]), STYLE["grad"]), edge(e.src, e.dst)]
            continue
        attrs = [HIGHWAY] if e.highway else []
        if view.depth is not None:
            attrs.append(f'label=" {_shape(e.shape)}"')
        edges.append(edge(e.src, e.dst, attrs))
    return digraph(title or view.phase, GRAPH_HEAD, clusters(view) + edges + tail)


def edge(src: str, dst: str, attrs: list[str] = ()) -> str:
    """One edge's statement, with its attributes (DOT text already) when it has any."""
    return f"  {src} -> {dst}" + (f" [{', '.join(attrs)}]" if attrs else "") + ";"


# ---------------------------------------------------------------- a compiled program's kernels
def program(title: str, kernels: list[tuple], arrows: list[tuple]) -> str:
    """The DOT text of a compiled program: kernels as (name, the ops it runs, shape, dtype, FLOPs, bytes written,
    kind: 'fused', 'elementwise' or 'kernel'), one box each listing its ops; arrows as (src, dst) names."""
    nodes = [node(name, lines(*ops, f"{_shape(shape)} {dtype}", f"{_flops(flops)}, {written:,} B"), PROGRAM_FILL[kind])
             for name, ops, shape, dtype, flops, written, kind in kernels]
    return digraph(title, PROGRAM_HEAD, nodes + [edge(a, b) for a, b in arrows], name="program")


# ---------------------------------------------------------------- the explorer page's labels
def _joined(*parts: str) -> str:
    """A label of these lines, empty ones kept (the page draws them so), each drawn as written."""
    return "\\n".join(text(part) for part in parts)


def page_node(n: dict) -> str:
    """A node of the explorer page (explorer_page._node, _kernel_node) as DOT label text: what it is, its shape and
    dtype, its FLOPs; a kernel lists what it runs."""
    shape, flops = _shape(n["shape"]), [_flops(n["flops"])] if n["flops"] else []
    if n["kind"] in ("residual", "accumulate"):
        return _joined("+", n["note"], shape)
    if n["phase"] == "compiled":
        return _joined("fused: " + "\n".join(n["ops"]) if n["kind"] == "fused" else n["label"],
                       f"{shape} {n['dtype']}", *flops)
    if n["kind"] == "op":
        head = n["label"] + (" (with a scalar)" if n["scalar"] else "")
        return _joined(head, *([n["note"]] if n["note"] else []), f"{shape} {n['dtype']}", *flops)
    return _joined(n["label"], shape)


def page_box(m: dict, phase: str) -> str:
    """A closed module of the explorer page (explorer_page._modules) as DOT label text, in one phase: its name, its
    kernels (compiled), its output's shape, its FLOPs (a fold's: each layer's, and all of them)."""
    total, repeat = m["total"], m["repeat"]
    head = m["label"] + ("′" if phase == "backward" else "") + (f"  × {repeat}" if repeat > 1 else "")
    kernels = [f"{total['ops'][phase] // repeat:,} kernels" + (" each" if repeat > 1 else "")] \
        if phase == "compiled" else []
    shape = [_shape(m["shape"][phase])] if phase in m["shape"] else []
    flops = total["flops"][phase]
    each = [f"{human_flops(flops // repeat)} each", f"× {repeat} = {human_flops(flops)}"] if repeat > 1 \
        else [human_flops(flops)]
    return _joined(head, *kernels, *shape, *each)


def page_frame(m: dict) -> str:
    """An open module of the explorer page as its frame's DOT label text: its name, a fold's count, and [−]."""
    return text(m["label"] + (f"  × {m['repeat']}" if m["repeat"] > 1 else "") + "  [−]")


def page_edge(shape) -> str:
    """An arrow of the explorer page as DOT label text: the shape it carries."""
    return text(_shape(shape))
