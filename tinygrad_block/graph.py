"""Computation graphs drawn from the real computation: every primitive call, forward and backward, recorded at
the choke point with its module scope and step, viewed at any depth (graph_view.py), emitted as DOT text
(graph_dot.py) and rendered with graphviz.

    with record_graph(block, x) as g:
        block(x).backward(dout)
    g.view(depth=1).nodes              # norm1, attn, norm2, ffn boxes; the two residual adds; the input
    g.to_dot(depth=1)                  # norm1 -> attn -> (+) -> norm2 -> ffn -> (+), the residual highway straight
    g.render("block.svg", depth=2)     # attention and FFN opened into their projections
    g.render("grads.png", backward=True, dpi=200)
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .function import Movement, primitive
from .graph_view import GraphView, build
from .files import check_target, write_atomic
from .trace import observe


@dataclass
class Node:
    """A primitive call ('op') or a tensor that no recorded op made ('param', 'input', 'const')."""
    kind: str
    label: str                      # op name, parameter name, or 'input' / 'const'
    shape: tuple
    dtype: str
    scope: tuple = ()
    phase: str = "forward"
    origin: str = ""                # backward ops: the forward op they differentiate
    step: str = ""                  # the named step of its module ('rope', 'scores', 'residual', ...)
    flops: int = 0
    inputs: list = field(default_factory=list)    # node indices
    tensor: object = None           # the output, for value summaries (kept alive while recording)
    source: int | None = None       # backward: the node of the forward op differentiated, or (a sum) whose gradient
    call: int | None = None         # recorded during a jit capture: the index of its instruction in the program


class Graph:
    """The recorded computation. Observer of every primitive call while `record_graph` is active."""

    def __init__(self, names: dict | None = None, retain_grads: bool = False, inputs: tuple = ()):
        self.retain_grads = retain_grads
        self.nodes: list[Node] = []
        self._made_by: dict = {}                  # id(array) -> node index
        self._names = names or {}                 # id(array) -> (kind, name, scope): params, buffers, inputs
        self._ids = [t for t in inputs if str(t.dtype).startswith(("int", "uint"))]   # integer inputs: indices
        self._alive: list = []                    # arrays (and forward Functions) whose ids are keys here
        self._op_node: dict = {}                  # id(forward Function) -> its node index

    def _node_of(self, t, phase: str, op_scope: tuple, step: str = "", name: str = "const") -> int:
        """The node of an op's input; a tensor no recorded op made becomes a source node: a named parameter,
        buffer or input; the gradient backward() starts from; an input that requires grad; or a constant
        made inside the module that uses it (a mask, an index), which belongs to that module's scope and step."""
        key = id(t.data)
        if key not in self._made_by:
            kind, label, scope = self._names.get(key, (None, None, ()))
            if kind is None and phase == "backward" and t.ndim:
                kind, label = "input", "∂ output"
            elif kind is None:
                kind, label, scope = ("input", "input", ()) if t.requires_grad else ("const", name, op_scope)
            self.nodes.append(Node(kind, label, t.shape, str(t.dtype), scope, phase, step=step if kind == "const"
                                   else "", tensor=t))
            self._made_by[key] = len(self.nodes) - 1
            self._alive.append(t.data)
        return self._made_by[key]

    def _index_of(self, op, scope: tuple, step: str) -> list[int]:
        """A forward gather's integer index as a source node: the integer input given to record_graph that has
        its shape (token ids entering an embedding), else a constant 'index' (positions, a stepped slice's)."""
        idx = getattr(op, "idx", None)
        if idx is None:
            return []
        given = next((t for t in self._ids if tuple(t.shape) == tuple(idx.shape)), None)
        if given is not None:
            return [self._node_of(given, "forward", ())]
        from .tensor import Tensor
        return [self._node_of(Tensor._make(idx, op.backend), "forward", scope, step, "index")]

    def __call__(self, event):
        out, phase = event.output, event.phase
        ins = [self._node_of(t, phase, event.scope, event.step) for t in event.inputs]
        if phase == "forward":
            ins += self._index_of(event.op, event.scope, event.step)
        self.nodes.append(Node("op", event.op.name, out.shape, str(out.dtype), event.scope, phase, event.origin,
                               event.step, event.flops, ins, out, self._source(event), event.call))
        self._made_by[id(out.data)] = len(self.nodes) - 1
        self._alive.append(out.data)
        if phase == "forward":
            self._op_node[id(event.op)] = len(self.nodes) - 1
            self._alive.append(event.op)
        if self.retain_grads and phase == "forward" and out.requires_grad:
            out.retain_grad()

    def _source(self, event) -> int | None:
        """Backward: the node of the forward op this call differentiates; for a sum of gradients, the node whose
        gradient it is (the op that made the tensor, or the parameter or input itself)."""
        src = event.source
        if src is None:
            return None
        if hasattr(src, "data") and id(src.data) in self._made_by:          # a leaf tensor
            return self._made_by[id(src.data)]
        return self._op_node.get(id(src))

    def ops(self, phase: str | None = None) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.kind == "op" and (phase is None or n.phase == phase)]

    def grad_of(self, t) -> int | None:
        """The node that made a tensor (e.g. a parameter's .grad), if it was recorded."""
        return self._made_by.get(id(t.data)) if t is not None else None

    def view(self, depth: int | None = None, *, backward: bool = False, values: bool = False,
             fold: bool = True) -> GraphView:
        """What a drawing shows (a GraphView): the forward graph, or with `backward=True` the gradient flow.
        Scopes deeper than `depth` below the root collapse into one box each (None: every primitive); with
        `fold`, a run of identical layers (layers.0 .. layers.79) is drawn once, marked x 80."""
        return build(self, depth, "backward" if backward else "forward", values, fold)

    def to_dot(self, depth: int | None = None, *, backward: bool = False, values: bool = False,
               title: str | None = None, fold: bool = True) -> str:
        """DOT text of `view(depth, backward=..., values=..., fold=...)`. Deterministic."""
        return self.view(depth, backward=backward, values=values, fold=fold).to_dot(title)

    def render(self, path, depth: int | None = None, *, backward: bool = False, values: bool = False,
               title: str | None = None, fold: bool = True, dpi: int | None = None) -> Path:
        """Write the graph as svg, png or pdf (from the path's extension) with graphviz's `dot`."""
        return render(self.to_dot(depth, backward=backward, values=values, title=title, fold=fold), path, dpi=dpi)


def _names(module, root: str, inputs) -> dict:
    """id(array) -> (kind, dotted name, scope) for a module's parameters and tensor buffers (e.g. RoPE tables),
    and for the given inputs (integer ones are 'input ids'). Scopes are the module paths ops run in."""
    from .nn.module import Module, Parameter
    from .tensor import Tensor
    names, stack = {}, [(module, (root,))]
    while stack:
        m, scope = stack.pop()
        for attr, value in vars(m).items():
            if isinstance(value, Tensor) and not isinstance(value, Module):
                kind = "param" if isinstance(value, Parameter) else "const"
                names[id(value.data)] = (kind, ".".join((*scope, attr)), scope)
        stack += [(child, (*scope, name)) for name, child in reversed(list(m.named_children()))]
    for i, t in enumerate(inputs):
        name = "input ids" if str(t.dtype).startswith(("int", "uint")) else "input"
        names[id(t.data)] = ("input", name if len(inputs) == 1 else f"{name} {i}", ())
    return names


@contextmanager
def record_graph(module=None, *inputs, retain_grads: bool = False):
    """Record every primitive call run inside (forward and backward) into a Graph; parameters and buffers of
    `module` are named (block.attn.q_proj.weight), and so are the `inputs` given. With `retain_grads`, every
    intermediate keeps its gradient, for `to_dot(values=True)` summaries after backward."""
    root = (module.scope_name or type(module).__name__.lower()) if module is not None else ""
    graph = Graph(_names(module, root, inputs) if module is not None else None, retain_grads, inputs)
    with observe(graph):
        yield graph


FORMATS = ("svg", "png", "pdf")
PNG_DPI = 200       # pixels per inch of a PNG: sharp on a slide (graphviz's own default is 96)


def render(source: str | GraphView, path, format: str | None = None, *, dpi: int | None = None) -> Path:
    """Render DOT text (or a GraphView) to `path`: svg, png or pdf, from the extension unless `format` is
    given. A PNG gets `dpi` pixels per inch (default PNG_DPI); svg and pdf are vector drawings. Written as a
    checkpoint is (files.write_atomic); a folder or a FIFO at `path` is refused before graphviz runs."""
    path = Path(path)
    check_target(path)                                               # before graphviz runs: a FIFO, a folder
    fmt = format or path.suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise ValueError(f"render: unsupported format {fmt!r} for {path}; expected one of {', '.join(FORMATS)}")
    if dpi is not None and (isinstance(dpi, bool) or not isinstance(dpi, int) or dpi <= 0):
        raise ValueError(f"render: dpi must be a positive int, got {dpi!r}")
    dot = source if isinstance(source, str) else source.to_dot()
    if fmt == "png":
        dot = dot.replace("{\n", f"{{\n  dpi={dpi or PNG_DPI};\n", 1)
    try:
        import graphviz
    except ImportError:
        raise RuntimeError("render: the graphviz Python package is missing; install the 'viz' extra: "
                           "pip install -e '.[viz]' from the repository's root") from None
    try:
        data = graphviz.Source(dot).pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        raise RuntimeError("render: graphviz's `dot` program was not found on PATH; install it "
                           "(Debian/Ubuntu: apt-get install graphviz)") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda f: f.write(data))                      # a temporary renamed into place, as a checkpoint
    return path


def is_movement(name: str, *, aliasing: bool = False) -> bool:
    """Whether the op called `name` (a node's label, an event's op.name) is a movement primitive (Movement); with
    `aliasing`, one whose output is a view of its input's memory on every device (Movement.aliases)."""
    op = primitive(name)
    return op is not None and issubclass(op, Movement) and (op.aliases or not aliasing)
