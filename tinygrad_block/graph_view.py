"""What a drawing of a recorded Graph shows, before it becomes DOT text: the nodes left after module scopes deeper
than a depth collapse into boxes and runs of identical layers fold into one, the edges between them, and which
edges carry the residual stream (the highway). Lessons and tests query a view; graph_dot.py writes it out.

    view = graph.view(depth=1)
    [n.label for n in view.find(kind="box")]          # ['norm1', 'attn', 'norm2', 'ffn']
    [(e.src, e.dst) for e in view.edges if e.highway]  # input -> (+) -> (+)
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from .graph_dot import emit

LARGE = 2_000       # nodes: a drawing with more is too big to read (the view warns)
NUMBERED = re.compile(r"(.+)\.(\d+)$")      # a module in a list: 'layers.7'


@dataclass
class ViewNode:
    """One drawn node. kind: 'op' (a primitive call), 'residual' (a residual add), 'accumulate' (gradients of
    one tensor summed where paths meet), 'box' (a collapsed module), 'param', 'input', 'const', or 'grad' (the
    gradient backward() starts from, and where each parameter's gradient comes out)."""
    name: str                   # DOT name: n3 (op or tensor), b0 (box), g5 (gradient out)
    kind: str
    label: str                  # op name; module name (boxes); tensor name
    shape: tuple
    dtype: str = ""
    scope: tuple = ()           # the module it ran in; for a box, the module it stands for
    step: str = ""              # the named step of its module ('rope', 'scores', 'residual', ...)
    flops: int = 0              # op, box or merged sum: its members' total (for a fold, one layer's)
    members: list = field(default_factory=list)    # Graph node indices drawn as this node
    origin: str = ""            # backward: the forward op this call differentiates
    scalar: bool = False        # one input is a scalar constant, shown in the label instead of as a node
    note: str = ""              # 'residual', 'paths meet', 'backward of matmul', 'backward of expand: copies add up'
    repeat: int = 1             # a box standing for this many identical layers
    summary: str = ""           # values mode: mean and std of the value (and of its gradient)


@dataclass
class ViewEdge:
    """An edge: the tensor of shape `shape` made by `src` is read by `dst` (DOT names)."""
    src: str
    dst: str
    shape: tuple
    highway: bool = False       # carries the residual stream (its gradient, backward) between stages


@dataclass
class GraphView:
    """A graph as drawn: nodes and edges after collapsing and folding, in a deterministic order."""
    phase: str
    depth: int | None
    nodes: list[ViewNode]
    edges: list[ViewEdge]
    folds: dict                 # first layer's scope -> (first, last) index of the run it stands for
    warnings: list[str]

    def node(self, name: str) -> ViewNode:
        """The node whose DOT name is `name` (like 'n3'); a KeyError naming the view's names if there is none."""
        for n in self.nodes:
            if n.name == name:
                return n
        kind = f"a {type(name).__name__}" if not isinstance(name, str) else repr(name)
        raise KeyError(f"GraphView.node: no node named {kind} in this {self.phase} view; a name is a node's "
                       f".name, one of {', '.join(n.name for n in self.nodes[:8])}"
                       + (", ..." if len(self.nodes) > 8 else ""))

    def find(self, kind: str | None = None, label: str | None = None, step: str | None = None) -> list[ViewNode]:
        """The nodes of a kind, a label and a step (each when given), in order."""
        return [n for n in self.nodes if kind in (None, n.kind) and label in (None, n.label) and step in (None, n.step)]

    def successors(self, name: str) -> list[ViewNode]:
        """The nodes (not their names) that an edge from the node named `name` enters."""
        return [self.node(e.dst) for e in self.edges if e.src == name]

    def predecessors(self, name: str) -> list[ViewNode]:
        """The nodes (not their names) whose edges enter the node named `name`."""
        return [self.node(e.src) for e in self.edges if e.dst == name]

    def runs(self, node: ViewNode) -> int:
        """How many layers a drawn node stands for: the size of the fold it lies in (or is), else 1."""
        return next((last - first + 1 for scope, (first, last) in self.folds.items()
                     if node.scope[:len(scope)] == scope), 1)

    def module_name(self, scope: tuple) -> str:
        """A module's name as drawn: its last part, or for a fold the range of layers it stands for ('layers.0–79')."""
        if scope in self.folds:
            first, last = self.folds[scope]
            return f"{NUMBERED.match(scope[-1]).group(1)}.{first}–{last}"
        return scope[-1]

    def to_dot(self, title: str | None = None) -> str:
        """DOT text for graphviz (graph_dot.py)."""
        return emit(self, title)


def build(graph, depth: int | None, phase: str, values: bool, fold: bool) -> GraphView:
    """The view of `graph` for one phase at `depth`; values mode never folds (each layer has its own values)."""
    b = _Builder(graph, depth, phase, values, fold and not values)
    b.collect()
    nodes = [b.view_node(key) for key in b.names] + (b.grad_sinks() if phase == "backward" else [])
    view = GraphView(phase, depth, nodes, b.edges + b.sink_edges, b.folds, [])
    if len(nodes) > LARGE:
        smaller = [f"{len(build(graph, d, phase, values, fold).nodes):,} at depth {d}" for d in (2, 1)
                   if depth is None or d < depth]
        view.warnings.append(f"{len(nodes):,} nodes and {len(view.edges):,} edges, too many to read in one drawing"
                             + (f"; the same graph has {' and '.join(smaller)}" if smaller else ""))
    return view


def folded_layers(graph, phase: str) -> tuple[dict, dict, dict]:
    """Runs of identical numbered sibling modules (layers.0, layers.1, ...: same ops, shapes, steps and FLOPs,
    wired the same way). Returns node -> its counterpart in the run's first module; node -> (the run's first
    module, its own index) for every node in a run; the first module's scope -> (first, last) index."""
    layers: dict = {}
    for i, n in enumerate(graph.nodes):
        if n.phase == phase and _layer(n.scope):
            layers.setdefault(_layer(n.scope), []).append(i)
    siblings: dict = {}
    for scope in layers:
        name, index = NUMBERED.match(scope[-1]).groups()
        siblings.setdefault((scope[:-1], name), []).append((int(index), scope))
    rep, where, folds = {}, {}, {}
    for group in siblings.values():
        for run in _runs(sorted(group), {s: _signature(graph, s, layers[s]) for _, s in group}):
            first = run[0][1]
            folds[first] = (run[0][0], run[-1][0])
            for index, scope in run:
                where.update({i: (first, index) for i in layers[scope]})
                if scope != first:
                    rep.update(zip(layers[scope], layers[first]))
    return rep, where, folds


def _layer(scope: tuple) -> tuple:
    """The outermost numbered module a scope lies in: (model, layers.3) for (model, layers.3, attn); else ()."""
    at = next((k for k, part in enumerate(scope) if NUMBERED.match(part)), None)
    return scope[:at + 1] if at is not None else ()


def _runs(group: list, signatures: dict) -> list[list]:
    """Maximal runs (two or more) of consecutively numbered modules with equal signatures."""
    runs, run = [], [group[0]]
    for prev, cur in zip(group, group[1:]):
        if cur[0] == prev[0] + 1 and signatures[cur[1]] == signatures[prev[1]]:
            run.append(cur)
        else:
            runs, run = runs + [run], [cur]
    return [r for r in runs + [run] if len(r) > 1]


def _signature(graph, scope: tuple, members: list) -> tuple:
    """A module's recorded nodes with names and node numbers made relative to it: equal for identical layers."""
    at = {i: k for k, i in enumerate(members)}
    prefix = ".".join(scope)

    def ref(j):
        n = graph.nodes[j]
        return ("in", at[j]) if j in at else ("out", n.kind, n.label if n.kind != "op" else "", n.shape, n.dtype)
    return tuple((n.kind, n.label.removeprefix(prefix), n.shape, n.dtype, n.scope[len(scope):], n.step, n.origin,
                  n.flops, tuple(map(ref, n.inputs))) for n in map(graph.nodes.__getitem__, members))


def finite(v):
    """The finite values of a float64 array, flattened (masked attention scores hold -inf)."""
    v = v.ravel()
    return v[(v == v) & (abs(v) != float("inf"))]


def moments(v) -> tuple[float, float]:
    """mean and std of a non-empty float64 array of finite values, taken of v / max|v| and scaled back, so values
    near 1e300 square to no inf (both are at most max|v|)."""
    scale = float(abs(v).max()) or 1.0
    u = v / scale
    return float(u.mean()) * scale, float(u.std()) * scale


def _summary(t) -> str:
    """mean and std of a tensor's finite values (and of its .grad's), if it has values."""
    if t is None or t.device == "meta":
        return ""
    text = []
    for what, a in (("value", t), ("grad", t.grad)):
        v = finite(a.numpy().astype("float64")) if a is not None and a.device != "meta" else []
        if len(v):
            mean, std = moments(v)
            text.append(f"{what} mean {mean:.3g} std {std:.3g}")
    return "\n".join(text)


class _Builder:
    """Walks one phase's recorded ops: which drawn node each is (itself, a box, a merged sum, hidden), the
    edges between drawn nodes, and which of them carry the residual stream."""

    def __init__(self, graph, depth, phase, values, fold):
        self.g, self.depth, self.phase, self.values = graph, depth, phase, values
        self.rep, self.where, self.folds = folded_layers(graph, phase) if fold else ({}, {}, {})
        self.away = {_layer(graph.nodes[i].scope) for i in self.rep}     # layers drawn as their run's first
        self.names: dict = {}         # drawn key -> DOT name, in order of appearance
        self.members: dict = {}       # box key, or a merged "paths meet" node -> the node indices inside
        self.edges: list[ViewEdge] = []
        self.highway: dict = {}       # (src key, dst key) -> carries the stream
        self.sink_edges: list[ViewEdge] = []
        self.uses = Counter(j for i in graph.ops(phase) for j in graph.nodes[i].inputs)
        forward = [graph.nodes[i] for i in graph.ops("forward")]
        self.blocks = {n.scope for n in forward if n.step == "residual"}
        self.stream = {n.shape for n in forward if n.step == "residual" and n.label == "add"}
        ends = [self.ends(j, i) for i in graph.ops(phase) for j in graph.nodes[i].inputs]
        self.last_use = {(j, graph.nodes[i].scope): i for j, i in filter(None, ends)}   # tensor, module -> reader

    def collapsed(self, scope) -> bool:
        return self.depth is not None and len(scope) - 1 >= self.depth and len(scope) > 0

    def key(self, i):
        """What node i is drawn as: itself, the box of its collapsed scope, or None (hidden)."""
        n = self.g.nodes[i]
        if n.phase != self.phase:
            return None               # the backward view does not redraw forward tensors
        if self.collapsed(n.scope):
            return ("box", n.scope[:self.depth + 1]) if n.kind == "op" else None
        if self.depth is not None and n.origin == "accumulate":
            first = self.g.nodes[n.inputs[0]]
            if first.origin == "accumulate" and first.scope == n.scope and self.uses[n.inputs[0]] == 1:
                return self.key(n.inputs[0])    # a partial sum: one node where all the paths into a tensor meet
        if n.kind == "const" and not n.shape:
            return None               # scalars appear in their op's label
        return ("node", i)

    def name(self, key) -> str:
        if key not in self.names:
            self.names[key] = f"{'b' if key[0] == 'box' else 'n'}{len(self.names)}"
        return self.names[key]

    def ends(self, j: int, i: int) -> tuple[int, int] | None:
        """An edge j -> i with folded layers drawn as their run's first: None between two layers of one run."""
        wj, wi = self.where.get(j), self.where.get(i)
        if wj and wi and wj[0] == wi[0] and wj[1] != wi[1]:
            return None
        return self.rep.get(j, j), self.rep.get(i, i)

    def main_line(self, n) -> bool:
        """Not inside a block's sublayer: a residual add, where gradients meet at a block, an embedding, the
        final norm, the head; or an input (the block's input, the gradient backward() starts from)."""
        if n.kind != "op":
            return n.kind == "input"
        return not any(n.scope[:k] in self.blocks for k in range(1, len(n.scope)))

    def on_highway(self, j: int, i: int) -> bool:
        """The edge j -> i carries the residual stream (forward) or its gradient (backward) from one stage of
        the main line to the next: a tensor of the stream's shape, between main-line nodes at a block's own level
        (residual adds, gradient sums), or into another module, once (its last use there)."""
        src, dst = self.g.nodes[j], self.g.nodes[i]
        if src.shape not in self.stream or not (self.main_line(src) and self.main_line(dst)):
            return False
        return dst.scope in self.blocks or src.scope != dst.scope and self.last_use[(j, dst.scope)] == i

    def collect(self):
        for i in self.g.ops(self.phase):
            dst = self.key(self.rep.get(i, i))
            drawn = i not in self.rep or dst[0] == "box" and len(dst[1]) < len(_layer(self.g.nodes[i].scope))
            if drawn and (dst[0] == "box" or dst[1] != i):   # inside a box (one around a fold holds every layer),
                self.members.setdefault(dst, [dst[1]] if dst[0] == "node" else []).append(i)   # or a merged sum
            self.name(dst)
            for j in self.g.nodes[i].inputs:
                ends = self.ends(j, i)
                src = self.key(ends[0]) if ends else None
                if src is None or src == dst:
                    continue
                if (src, dst) not in self.highway:
                    self.name(src)
                    self.highway[(src, dst)] = False
                    self.edges.append(ViewEdge(self.names[src], self.names[dst], self.g.nodes[ends[0]].shape))
                self.highway[(src, dst)] |= self.on_highway(*ends)
        for edge, (src, dst) in zip(self.edges, self.highway):
            edge.highway = self.highway[(src, dst)]

    def view_node(self, key) -> ViewNode:
        name = self.names[key]
        if key[0] == "box":
            members = self.members[key]
            last = self.g.nodes[members[-1]]
            return ViewNode(name, "box", key[1][-1], last.shape, last.dtype, key[1], members=members,
                            flops=sum(self.g.nodes[i].flops for i in members),
                            repeat=self.folds[key[1]][1] - self.folds[key[1]][0] + 1 if key[1] in self.folds else 1)
        i = key[1]
        n = self.g.nodes[i]
        members = self.members.get(key, [i])
        node = ViewNode(name, n.kind, n.label, n.shape, n.dtype, n.scope, n.step, members=members, origin=n.origin,
                        flops=sum(self.g.nodes[j].flops for j in members))
        if n.kind == "op":
            node.kind, node.note = self.op_kind(n)
            node.scalar = any(self.g.nodes[j].kind == "const" and not self.g.nodes[j].shape for j in n.inputs)
            node.summary = _summary(n.tensor) if self.values else ""
        elif n.kind == "input" and n.phase == "backward":
            node.kind = "grad"                          # the gradient backward() starts from
        return node

    def op_kind(self, n) -> tuple[str, str]:
        """(kind, note) of a primitive call."""
        if n.phase == "backward" and n.origin == "accumulate":
            return "accumulate", "paths meet"
        if n.phase == "forward" and n.label == "add" and n.step == "residual":
            return "residual", "residual"
        if n.phase == "backward":
            return "op", f"backward of {n.origin}" + (": copies add up" if n.origin == "expand" and n.label == "sum"
                                                      else "")
        return "op", ""

    def grad_sinks(self) -> list[ViewNode]:
        """Backward view: where each parameter's (and input's) gradient comes out."""
        out = []
        for i, n in enumerate(self.g.nodes):
            if n.kind not in ("param", "input") or n.phase != "forward" or n.tensor.grad is None \
                    or self.collapsed(n.scope) or _layer(n.scope) in self.away:
                continue
            made = self.g.grad_of(n.tensor.grad)
            key = self.key(self.rep.get(made, made)) if made is not None else None
            if key is not None:
                out.append(ViewNode(f"g{i}", "grad", f"∂ {n.label}", n.shape, n.dtype, n.scope, members=[made]))
                self.sink_edges.append(ViewEdge(self.names[key], f"g{i}", n.shape))
        return out
