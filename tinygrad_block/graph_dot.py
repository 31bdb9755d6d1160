"""DOT text for a recorded Graph: op nodes, module boxes (scopes collapsed below a depth), clusters per scope,
the residual stream drawn as a straight highway; in the backward view, where gradients split and sum.

Depth counts below the root module: at depth 1 a block shows norm1, attn, norm2 and ffn as boxes and its
own ops (the residual adds) one by one; depth 2 opens attn and ffn; depth None shows every primitive.
"""
from __future__ import annotations

from collections import Counter

STYLE = {
    "op": 'shape=box, style="rounded,filled", fillcolor="#e8eef7", color="#5b7db1"',
    "box": 'shape=box, style="filled,bold", fillcolor="#dfeedd", color="#4c8a46", penwidth=2',
    "residual": 'shape=circle, style="filled,bold", fillcolor="#c9e7c4", color="#2e7d32", penwidth=2, fixedsize=false',
    "accumulate": 'shape=circle, style="filled,bold", fillcolor="#ffe0b2", color="#e65100", penwidth=2',
    "param": 'shape=ellipse, style=filled, fillcolor="#fff6d5", color="#b59f3b"',
    "input": 'shape=invhouse, style=filled, fillcolor="#f3e5f5", color="#7b1fa2"',
    "const": 'shape=plaintext, fontcolor="#777777"',
    "grad": 'shape=ellipse, style="filled,dashed", fillcolor="#ffe0b2", color="#e65100"',
}
HIGHWAY = 'penwidth=3, color="#2e7d32", weight=50'


def _human(n: int) -> str:
    for unit, size in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= size:
            return f"{n / size:.2f} {unit}FLOPs"
    return f"{n} FLOPs"


def _shape(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _summary(t) -> str:
    """mean and std of a tensor's values (and of its .grad), if it has values."""
    if t is None or t.device == "meta":
        return ""
    v = t.numpy().astype("float64")
    text = f"\\nvalue mean {_finite(v).mean():.3g} std {_finite(v).std():.3g}" if v.size else ""
    if t.grad is not None and t.grad.device != "meta":
        gv = t.grad.numpy()
        text += f"\\ngrad mean {gv.mean():.3g} std {gv.std():.3g}"
    return text


def _finite(v):
    """The finite entries (masked attention scores hold -inf)."""
    return v[(v == v) & (abs(v) != float("inf"))]


class _Emitter:
    def __init__(self, graph, depth, phase, values):
        self.g, self.depth, self.phase, self.values = graph, depth, phase, values
        self.keys: dict = {}          # shown key -> DOT name, in order of appearance
        self.members: dict = {}       # box key, or a merged "paths meet" node -> the node indices inside
        self.edges = []
        self.uses = Counter(j for i in graph.ops(phase) for j in graph.nodes[i].inputs)

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
        if key not in self.keys:
            self.keys[key] = f"{'b' if key[0] == 'box' else 'n'}{len(self.keys)}"
        return self.keys[key]

    def op_label(self, i) -> tuple[str, str]:
        n = self.g.nodes[i]
        summary = _summary(n.tensor) if self.values else ""
        flops = sum(self.g.nodes[j].flops for j in self.members.get(("node", i), [i]))   # merged sums add up
        flops = f"\\n{flops:,} FLOPs" if flops else ""
        if n.phase == "backward" and n.origin == "accumulate":
            return f"+\\npaths meet\\n{_shape(n.shape)}{flops}" + summary, "accumulate"
        if n.phase == "forward" and n.label == "add" and len(n.scope) == 1:
            return f"+\\nresidual\\n{_shape(n.shape)}{flops}" + summary, "residual"
        scalars = [j for j in n.inputs if self.g.nodes[j].kind == "const" and not self.g.nodes[j].shape]
        extra = " (with a scalar)" if scalars else ""
        if n.phase == "backward":
            adds_copies = n.origin == "expand" and n.label == "sum"
            extra += f"\\nbackward of {n.origin}" + (": copies add up" if adds_copies else "")
        return f"{n.label}{extra}\\n{_shape(n.shape)} {n.dtype}{flops}" + summary, "op"

    def node_line(self, key) -> str:
        name = self.name(key)
        if key[0] == "box":
            members = self.members[key]
            last = self.g.nodes[members[-1]]
            flops = sum(self.g.nodes[i].flops for i in members)
            title = ".".join(key[1][1:]) or key[1][0]
            title += "′ (backward)" if self.phase == "backward" else ""
            return f'  {name} [label="{title}\\n{_shape(last.shape)}\\n{_human(flops)}", {STYLE["box"]}];'
        n = self.g.nodes[key[1]]
        if n.kind == "op":
            label, style = self.op_label(key[1])
        elif n.kind == "param":
            label, style = f"{n.label}\\n{_shape(n.shape)}", "param"
        else:
            style = "grad" if n.phase == "backward" else n.kind      # the gradient backward() starts from
            label = f"{n.label}\\n{_shape(n.shape)} {n.dtype}"
        return f'  {name} [label="{label}", {STYLE[style]}];'

    def highway(self, src, dst) -> bool:
        """Residual stream: an edge between the root's own nodes (the input and the residual adds; backward: the
        gradient backward() starts from, and the sums where the paths meet)."""
        ends = [self.g.nodes[k[1]] for k in (src, dst) if k[0] == "node"]
        return len(ends) == 2 and all(len(n.scope) <= 1 and (n.kind == "input" or n.label == "add" or
                                                             n.origin == "accumulate") for n in ends)

    def collect(self):
        for i in self.g.ops(self.phase):
            dst = self.key(i)
            if dst[0] == "box" or dst[1] != i:           # inside a box, or a partial sum merged into a node
                self.members.setdefault(dst, [dst[1]] if dst[0] == "node" else []).append(i)
            self.name(dst)
            for j in self.g.nodes[i].inputs:
                src = self.key(j)
                if src is not None and src != dst and (src, dst) not in self.edges:
                    self.name(src)
                    self.edges.append((src, dst))

    def clusters(self) -> list[str]:
        """Nodes nested in `subgraph cluster_*` blocks, one per module scope below the root."""
        tree: dict = {}
        for key in self.keys:
            scope = key[1][:-1] if key[0] == "box" else self.g.nodes[key[1]].scope
            tree.setdefault(tuple(scope[1:]), []).append(key)
        out, opened = [], []
        for scope in sorted(tree, key=lambda s: min(int(self.keys[k][1:]) for k in tree[s])):
            while opened and opened[-1] != scope[:len(opened[-1])]:
                opened.pop()
                out.append("  }")
            for level in range(len(opened[-1]) + 1 if opened else 1, len(scope) + 1):
                opened.append(scope[:level])
                out.append(f'  subgraph "cluster_{".".join(scope[:level])}" {{ label="{scope[level - 1]}"; '
                           'style="rounded,dashed"; color="#9e9e9e";')
            out += [self.node_line(k) for k in tree[scope]]
        out += ["  }"] * len(opened)
        return out

    def grad_sinks(self) -> list[str]:
        """Backward view: where each parameter's gradient comes out."""
        out = []
        for i, n in enumerate(self.g.nodes):
            if n.kind not in ("param", "input") or n.phase != "forward" or n.tensor.grad is None \
                    or self.collapsed(n.scope):
                continue
            made = self.g.grad_of(n.tensor.grad)
            if made is not None and self.key(made) is not None:
                sink = f"g{i}"
                out.append(f'  {sink} [label="∂ {n.label}\\n{_shape(n.shape)}", {STYLE["grad"]}];')
                out.append(f"  {self.name(self.key(made))} -> {sink};")
        return out


def emit(graph, depth, phase, values, title) -> str:
    e = _Emitter(graph, depth, phase, values)
    e.collect()
    head = [f'digraph "{title or phase}" {{', '  rankdir=TB; newrank=true; node [fontname="Helvetica", fontsize=10];',
            '  edge [fontname="Helvetica", fontsize=9, color="#555555"];',
            f'  labelloc=t; label="{title or phase}";']
    edges = []
    for src, dst in e.edges:
        attrs = [HIGHWAY] if e.highway(src, dst) else []
        if depth is not None:
            shape = (e.g.nodes[e.members[src][-1]] if src[0] == "box" else e.g.nodes[src[1]]).shape
            attrs.append(f'label=" {_shape(shape)}"')
        edges.append(f"  {e.keys[src]} -> {e.keys[dst]}" + (f" [{', '.join(attrs)}]" if attrs else "") + ";")
    sinks = e.grad_sinks() if phase == "backward" else []
    return "\n".join(head + e.clusters() + edges + sinks + ["}"]) + "\n"
