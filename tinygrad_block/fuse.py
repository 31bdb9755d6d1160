"""From a verified capture's instructions to the kernels a replay runs, and the program as text and as a drawing
(whose DOT text graph_dot.program writes).

This file is the plan; the backend does the work: every array function a replay calls, the backend hands over by
name (`backend.ufunc`: numpy's or CuPy's, or its own, as the GPU's cuBLAS matmul and MATH's exp), and the
generated kernels are the backend's to make (`backend.generated`: C on the CPU, CUDA C on a GPU). Each rewrite is
exact (a replay stays bit-identical to eager on the same device):
- **Broadcasts elided.** An `expand` whose every reader is an elementwise op that also reads an operand of the
  full shape is dropped: the array library broadcasts on the fly, as the expand's view would have.
- **Groups generated.** Where the backend generates kernels, each elementwise instruction the kernel language computes
  joins the kernel of its one reader (`_groups`): a tree of primitives computed in one loop, its intermediates
  never written to memory (kernels.py is the language).
- **Chains fused.** Elsewhere, elementwise ops of one shape and dtype, each read only by the next, become one
  kernel: the first op allocates the result and every later op writes into it in place (`out=`).
- **Lowered.** Every other elementwise op and a sum calls its array function directly, a slice indexes with a
  key made once, a reshape, permute or broadcast of an array from outside the program (a weight) is made again
  only when that array is a new one: no Function, Tensor or backend call in between.

docs/compiled.md measures them each way: numpy op at a time, in place, and generated C.
"""
from __future__ import annotations


from .dtypes import nbytes
from . import graph_dot
from .kernels import EXPR, build, op_name, reduces_last_axis
from .function import (Add, Cast, Compare, Concat, Cos, Div, Erf, Exp, Expand, Gather, Log, Matmul, Max, Maximum,
                       Mul, Neg, Pad, Permute, Pow, Reciprocal, Reshape, Sin, Slice, Sqrt, Sub, Sum, Where)

UFUNCS = {Add: "add", Sub: "subtract", Mul: "multiply", Div: "divide", Maximum: "maximum", Neg: "negative",
          Exp: "exp", Log: "log", Sqrt: "sqrt", Reciprocal: "reciprocal", Sin: "sin", Cos: "cos"}
BROADCASTING = {Add, Sub, Mul, Div, Maximum, Compare, Where}   # elementwise ops whose array functions broadcast
# the primitives whose forward is one backend call on the inputs' arrays and these params, in this order
BACKEND_CALLS = {Reshape: ("reshape", ("shape",)), Permute: ("permute", ("order",)), Expand: ("expand", ("shape",)),
                 Pad: ("pad", ("widths",)), Matmul: ("matmul", ()), Where: ("where", ()), Cast: ("cast", ("dtype",)),
                 Pow: ("pow", ("exponent",)), Compare: ("compare", ("op",)), Sum: ("sum", ("axes", "keepdims")),
                 Max: ("max", ("axes", "keepdims")), Erf: ("erf", ())}


class Direct:
    """A primitive calling its array function straight: out = f(*ins, *extra). With `reuse` (an array function
    that writes into `out=`, and a result nobody keeps after the call) the array made by the first replay is
    written again by every later one: no allocation."""
    __slots__ = ("f", "ins", "extra", "out", "instructions", "reuse", "buffer")

    def __init__(self, f, ins, out, instructions, extra: tuple = (), reuse: bool = False):
        self.f, self.ins, self.out, self.instructions, self.extra = f, ins, out, instructions, extra
        self.reuse, self.buffer = reuse, None

    def run(self):
        self.out.data = self.compute()

    def compute(self):
        if self.buffer is not None:
            return self.f(*[t.data for t in self.ins], *self.extra, out=self.buffer)
        r = self.f(*[t.data for t in self.ins], *self.extra)
        if self.reuse:
            self.buffer = r
        return r


class Unary:
    """out = f(a, *extra), one array in (a reshape, a transpose, a unary ufunc); with `reuse`, a ufunc writing
    every replay after the first into the array the first made (as Direct)."""
    __slots__ = ("f", "a", "extra", "out", "instructions", "reuse", "buffer")

    def __init__(self, f, a, out, instructions, extra: tuple = (), reuse: bool = False):
        self.f, self.a, self.out, self.instructions, self.extra = f, a, out, instructions, extra
        self.reuse, self.buffer = reuse, None

    def run(self):
        if self.buffer is not None:
            self.out.data = self.f(self.a.data, *self.extra, out=self.buffer)
        else:
            r = self.out.data = self.f(self.a.data, *self.extra)
            if self.reuse:
                self.buffer = r


class Binary:
    """out = f(a, b), two arrays in (an add, a product, a matmul), with `reuse` as Unary's."""
    __slots__ = ("f", "a", "b", "out", "instructions", "reuse", "buffer")

    def __init__(self, f, a, b, out, instructions, reuse: bool = False):
        self.f, self.a, self.b, self.out, self.instructions = f, a, b, out, instructions
        self.reuse, self.buffer = reuse, None

    def run(self):
        if self.buffer is not None:
            self.out.data = self.f(self.a.data, self.b.data, out=self.buffer)
        else:
            r = self.out.data = self.f(self.a.data, self.b.data)
            if self.reuse:
                self.buffer = r


def direct(f, ins: list, out, instructions: list, extra: tuple = (), reuse: bool = False):
    """The kernel that calls f on the arrays of `ins`: a Unary or a Binary where they fit, else a Direct. Per
    call, a Unary or Binary takes about 0.3 µs of Python, a Direct (any number of arrays) about 0.8 µs."""
    if len(ins) == 1:
        return Unary(f, ins[0], out, instructions, extra, reuse)
    if len(ins) == 2 and not extra:
        return Binary(f, *ins, out, instructions, reuse)
    return Direct(f, ins, out, instructions, extra, reuse)


class Chain:
    """Elementwise ops of one shape and dtype, each reading the one before: the first allocates the result, the
    others write into it in place. links: (f, the other operand or None for a unary op, whether the result so
    far comes first)."""
    __slots__ = ("first", "links", "out", "instructions")

    def __init__(self, first: Direct, links: list, out, instructions):
        self.first, self.links, self.out, self.instructions = first, links, out, instructions

    def run(self):
        r = self.first.compute()
        for f, other, first in self.links:
            if other is None:
                f(r, out=r)
            elif first:
                f(r, other.data, out=r)
            else:
                f(other.data, r, out=r)
        self.out.data = r


class Group:
    """Elementwise instructions that one generated kernel computes (the plan: see _groups), until the backend makes
    it; and its fallback, each instruction's own primitive in turn, for an input laid out otherwise at a later call."""
    __slots__ = ("instructions", "plain", "out", "reuse")

    def __init__(self, instructions: list, plain: list, out, reuse: bool):
        self.instructions, self.plain, self.out, self.reuse = instructions, plain, out, reuse

    def run(self):
        for kernel in self.plain:
            kernel.run()


class Indexed:
    """A slice with its key made once: out = a[key], a view, made again only when `a` is another array than at the
    last replay (so a generated kernel reading it finds the array it saw, and its address, again)."""
    __slots__ = ("a", "key", "out", "instructions", "seen", "view")

    def __init__(self, a, bounds, out, instructions):
        self.a, self.key, self.out, self.instructions = a, tuple(slice(lo, hi) for lo, hi in bounds), out, instructions
        self.seen = self.view = None

    def run(self):
        a = self.a.data
        if a is not self.seen:
            self.seen, self.view = a, a[self.key]
        self.out.data = self.view


class Viewed:
    """A view (reshape, permute, broadcast) of an array from outside the program, such as a weight: made again
    only when that array is another object than at the last replay (an optimizer rebinds a weight to a new
    array), else the same view of the same memory. Only for a result that is a view: a copy would go stale if
    somebody wrote into the array."""
    __slots__ = ("f", "a", "arg", "out", "instructions", "seen", "view")

    def __init__(self, f, a, arg, out, instructions):
        self.f, self.a, self.arg, self.out, self.instructions = f, a, arg, out, instructions
        self.seen = self.view = None

    def run(self):
        a = self.a.data
        if a is not self.seen:
            view = self.f(a, self.arg)
            self.seen, self.view = (a, view) if _shares(view, a) else (None, None)
            self.out.data = view
        else:
            self.out.data = self.view


def _shares(view, a) -> bool:
    return getattr(view, "base", None) is not None and (view.base is a or view.base is a.base)


class Reduced:
    """A sum or a max through the ufunc's reduce: out = add.reduce(a, axes, keepdims) (maximum.reduce)."""
    __slots__ = ("reduce", "a", "axes", "keepdims", "out", "instructions")

    def __init__(self, reduce, a, axes, keepdims, out, instructions):
        self.reduce, self.a, self.axes, self.keepdims = reduce, a, axes, keepdims
        self.out, self.instructions = out, instructions

    def run(self):
        self.out.data = self.reduce(self.a.data, axis=self.axes, keepdims=self.keepdims)


def fuse_program(program) -> list:
    """The kernels for `program` (compiled.Program): its plain kernels rewritten as the module docstring says."""
    backend = program.backend
    if not backend.lowers:
        return program.plain                       # the strict and shape-only devices replay primitive by primitive
    instructions, slots = program.instructions, program.all
    escapes = program.escaping()
    kept = _kept(instructions, escapes)
    readers = {}
    for i, s in enumerate(instructions):
        for k in set(s.ins + tuple(k for _, k in s.array_params)):
            readers.setdefault(k, []).append(i)
    alias = program.alias = _elided_expands(instructions, readers, escapes)
    name = lambda k: slots[alias.get(k, k)]  # noqa: E731
    shape = lambda k: program.spec(k)[0]  # noqa: E731
    groups = _groups(program, readers, escapes) if backend.generates() else {}
    inside = {j for members in groups.values() for j in members[:-1]}
    kernels, chain = [], None
    for i, (s, plain) in enumerate(zip(instructions, program.plain)):
        if i in alias or i in inside:
            continue
        if i in groups:
            chain = _close(chain, kernels, kept)
            members = [instructions[j] for j in groups[i]]
            kernels.append(Group(members, [program.plain[j] for j in groups[i]], name(s.out),
                                 i not in kept and s.shape != ()))
            continue
        ufunc = backend.ufunc(UFUNCS[s.op]) if s.op in UFUNCS and s.params == {} else None
        if ufunc is None:
            chain = _close(chain, kernels, kept)
            if s.op is Matmul and str(s.dtype) != "float16":
                reuse = i not in kept and s.shape != ()
                kernels.append(direct(backend.ufunc("matmul"), [name(k) for k in s.ins], name(s.out), [s],
                                      reuse=reuse))
            else:
                kernels.append(_lowered(s, plain, backend, name, shape, instructions, i not in kept and s.shape != ()))
            continue
        ins = [name(k) for k in s.ins]
        if chain is not None and _extends(chain, s, i, readers, escapes):
            prev = chain.instructions[-1].out
            others = [name(k) for k in s.ins if k != prev]
            chain.links.append((ufunc, others[0] if others else None, s.ins[0] == prev))
            chain.instructions.append(s)
            chain.out = name(s.out)
        else:
            chain = _close(chain, kernels, kept)
            chain = Chain(Direct(ufunc, ins, None, [s]), [], name(s.out), [s])
    _close(chain, kernels, kept)
    return _generated(program, kernels, kept, alias)


def _generated(program, kernels: list, kept: set, alias: dict) -> list:
    """`kernels` with each fused chain of float32 or float64 ops replaced by one generated kernel (kernels.py),
    where the backend generates them (the CPU's, as C); the chain stays as its fallback."""
    instructions, slots = program.instructions, program.all

    def operand(k):
        k = alias.get(k, k)
        shape, dtype = program.spec(k)
        strides = instructions[k].strides if k < len(instructions) else slots[k].data.strides
        return shape, dtype, strides, dtype.itemsize
    held = {id(slot) for _, slot in program.args} | {id(slot) for _, slot, *_ in program.live}

    def constant(k):
        """The number a 0-d constant of the program holds (never an argument or a live tensor), else None."""
        k = alias.get(k, k)
        if k < len(instructions) or id(slots[k]) in held or program.spec(k)[0] != ():
            return None
        return slots[k].item()
    plans, runs, where = [], [], []
    for i, chain in enumerate(kernels):
        if not isinstance(chain, (Chain, Group)) or chain.instructions[-1].strides is None:
            continue
        last = chain.instructions[-1]
        plan = build(f"k{i}", chain.instructions, operand, last.strides, constant)
        if plan is None:
            continue
        ins = [slots[alias.get(k, k)] for k in plan.reads]
        plans.append(plan)
        reuse = chain.reuse if isinstance(chain, Group) else chain.first.reuse
        runs.append((ins, chain.out, chain.instructions, [operand(k)[2] for k in plan.reads], last.strides, chain,
                     reuse))
        where.append(i)
    program.plans = plans
    made = program.backend.generated(plans, runs) if plans else None
    for i, runner in zip(where, made or []):
        kernels[i] = runner
    return kernels


def _groups(program, readers: dict, escapes: set) -> dict:
    """{the last instruction of a group: the group's instructions in program order}: each elementwise instruction the
    kernel language computes (kernels.op_name) joins the group of its one reader when that reader is such an
    instruction too, of the same shape, layout and module (a kernel is one module's, as the explorer draws it), and
    nothing outside the program keeps the instruction's result: a tree of primitives whose intermediate values never
    reach memory. A sum or a max over the last axis may end a group (float32, float64; its input laid out in rows):
    each row reduced as numpy does. Groups of one instruction stay the array library's."""
    instructions, into = program.instructions, {}
    for i in range(len(instructions) - 1, -1, -1):
        s = instructions[i]
        if i in escapes or s.array_params or op_name(s) not in EXPR or s.strides is None:
            continue
        (r, *others) = set(readers.get(i, [])) or {None}
        if r is None or others or instructions[r].array_params or instructions[r].scope != s.scope:
            continue
        if op_name(instructions[r]) in EXPR and instructions[r].shape == s.shape and \
                layout(s.shape, instructions[r].strides) == layout(s.shape, s.strides):
            into[i] = r
        elif reduces_last_axis(instructions[r]) and str(s.dtype) in ("float32", "float64") and _rows(s):
            into[i] = r             # a row sum's (max's) input: reduced as numpy reduces rows in memory
    groups = {}
    for i in sorted(into):
        root = i
        while root in into:
            root = into[root]
        groups.setdefault(root, []).append(i)
    return {root: members + [root] for root, members in groups.items()}


def _rows(s) -> bool:
    """Whether instruction s's result, as eager lays it out, is rows in memory (C order): then numpy sums each row along
    its last axis pairwise, as a generated row sum does."""
    expected, stride = [], s.dtype.itemsize
    for n in reversed(s.shape):
        expected.insert(0, stride)
        stride *= n
    return s.strides is not None and layout(s.shape, s.strides) == layout(s.shape, tuple(expected))


def _kept(instructions, escapes: set) -> set:
    """The instructions whose arrays outlive a replay: those returned or written back, and any that one of them views
    (a reshape, permute, expand or slice of a kept array keeps its input's buffer too)."""
    kept = set(escapes)
    for i in range(len(instructions) - 1, -1, -1):
        if i in kept and getattr(instructions[i].op, "may_alias", False):
            kept.update(k for k in instructions[i].ins if k < len(instructions))
    return kept


def layout(shape: tuple, strides: tuple | None) -> tuple | None:
    """An array's memory layout: its strides along the axes longer than 1 (an axis of one element can have any
    stride without changing where anything is)."""
    return None if strides is None else tuple(st for n, st in zip(shape, strides) if n > 1)


def _close(chain, kernels: list, kept: set):
    """Finish a chain: one kernel (a lone op stays a Direct); its buffer is reused unless its result is kept."""
    if chain is not None:
        reuse = chain.instructions[-1].out not in kept and chain.instructions[-1].shape != ()
        if chain.links:
            chain.first.reuse = reuse
            kernels.append(chain)
        else:
            kernels.append(direct(chain.first.f, chain.first.ins, chain.out, chain.instructions, reuse=reuse))
    return None


def _extends(chain: Chain, s, i: int, readers: dict, escapes: set) -> bool:
    """Whether instruction `s` (number i) continues the chain in place: it reads the chain's result once, nothing else
    reads that result or keeps it, and it has the chain's shape and dtype."""
    last, first = chain.instructions[-1], chain.instructions[0]
    return (s.ins.count(last.out) == 1 and readers.get(last.out) == [i] and last.out not in escapes
            and (s.shape, s.dtype, layout(s.shape, s.strides)) == (first.shape, first.dtype,
                                                                   layout(first.shape, first.strides))
            and s.shape != ())              # in place keeps the first op's layout; 0-d: numpy gives scalars there


def _joiner(concatenate, axis: int):
    """concatenate along `axis` as a function of the arrays (and `out`, a buffer to write into)."""
    def join(*arrays, out=None):
        return concatenate(arrays, axis=axis, out=out)
    return join


def _lowered(s, plain, backend, name, shape, program_steps, reuse: bool):
    """A direct kernel: a slice by its key, a sum by add.reduce (not float16's, which sums in float32), a view
    of an array from outside the program kept while that array is, a concatenation or a gather by its array
    function, a primitive that is one backend call by that call; else the primitive's own forward. `reuse`: the
    result outlives no replay, so a kernel that can write into a buffer may keep one."""
    f = backend.ufunc
    if s.op is Slice:
        return Indexed(name(s.ins[0]), s.params["bounds"], name(s.out), [s])
    reduce = backend.reducer({Sum: "add", Max: "maximum"}[s.op]) if s.op in (Sum, Max) else None
    if reduce is not None and str(s.dtype) != "float16":
        return Reduced(reduce, name(s.ins[0]), s.params["axes"], s.params["keepdims"], name(s.out), [s])
    if s.op in (Reshape, Permute, Expand) and shape(s.ins[0]) != ():   # (a 0-d result would be a scalar)
        f = {Reshape: f("reshape"), Permute: f("transpose"), Expand: f("broadcast_to")}[s.op]
        arg = s.params["order" if s.op is Permute else "shape"]
        return Viewed(f, name(s.ins[0]), arg, name(s.out), [s])   # made again only for another array
    if s.op is Concat:
        return direct(_joiner(backend.ufunc("concatenate"), s.params["axis"]), [name(k) for k in s.ins],
                      name(s.out), [s], reuse=reuse)
    if s.op is Gather:
        [(_, idx)] = s.array_params
        return direct(backend.ufunc("take"), [name(s.ins[0]), name(idx)], name(s.out), [s], (s.params["axis"],))
    if s.op in BACKEND_CALLS and not s.array_params:
        method, params = BACKEND_CALLS[s.op]
        return direct(getattr(backend, method), [name(k) for k in s.ins], name(s.out), [s],
                      tuple(s.params[p] for p in params))
    return plain


def _elided_expands(instructions, readers: dict, escapes: set) -> dict:
    """{expand's slot: its input's slot} for each expand that every reader can broadcast without: the reader is
    an elementwise op that broadcasts, and another of its operands has the full shape and is not itself an
    expand dropped (two operands both dropped would broadcast to less than the full shape)."""
    alias = {i: s.ins[0] for i, s in enumerate(instructions)
             if s.op is Expand and i not in escapes and i in readers
             and all(instructions[r].op in BROADCASTING and not instructions[r].array_params for r in readers[i])}
    changed = True
    while changed:                                   # drop an expand only while a full operand stays beside it
        changed = False
        for i in list(alias):
            if not all(any(k != i and k not in alias and _shape(k, instructions) == instructions[r].shape
                           for k in instructions[r].ins)
                       for r in readers[i]):
                del alias[i]
                changed = True
    return alias


def _shape(k: int, instructions) -> tuple | None:
    return instructions[k].shape if k < len(instructions) else None


# ---------------------------------------------------------------- the program, for people
def kernel_instructions(kernel) -> list:
    """The instructions (recorded primitive calls) a kernel runs: one, or a fused chain's."""
    return getattr(kernel, "instructions", None) or [kernel.instruction]


def fused_chains(program) -> int:
    """How many of the program's kernels run a fused chain (more than one instruction): the count `print(program)`,
    the explorer's compiled pane and the graph command report."""
    return sum(len(kernel_instructions(k)) > 1 for k in program.kernels)


def kernel_flops(kernel) -> int:
    return sum(s.flops for s in kernel_instructions(kernel))


def kernel_bytes(program, kernel) -> tuple[int, int]:
    """(bytes read, bytes written) by a kernel: each array it reads from outside itself once, its result once; a
    kernel of views alone (permute, expand, slice: the input's own memory) moves none."""
    instructions = kernel_instructions(kernel)
    if all(getattr(s.op, "aliases", False) for s in instructions):
        return 0, 0
    inside, alias = {s.out for s in instructions}, program.alias
    reads = {alias.get(j, j) for s in instructions for j in s.ins} - inside
    last = instructions[-1]
    return sum(nbytes(*program.spec(j)) for j in reads), nbytes(last.shape, last.dtype)


def describe(program) -> str:
    """One line per kernel: what it runs (a fused group lists its primitives), its output, FLOPs, bytes moved
    (read and written), arithmetic intensity (FLOPs per byte) and module."""
    kernels = program.kernels
    moved = [sum(kernel_bytes(program, k)) for k in kernels]
    flops = [kernel_flops(k) for k in kernels]
    lines = [f"program: {len(kernels)} kernels for {len(program.plain)} primitives "
             f"({fused_chains(program)} fused chains, "
             f"{len(program.plain) - len(kernels)} primitives saved); {sum(flops):,} FLOPs, {sum(moved):,} bytes moved"
             + ("; replayed as one CUDA graph" if program.graph else ""),
             f"  {'#':>4}  {'kernel':<34} {'':<6} {'shape':<16} {'dtype':<8} {'FLOPs':>10} {'bytes':>10} "
             f"{'FLOP/B':>6}  module"]
    for i, k in enumerate(kernels):
        instructions = kernel_instructions(k)
        s = instructions[-1]
        what = " > ".join(t.op.name for t in instructions) if len(instructions) > 1 else s.op.name
        kind = "fused" if len(instructions) > 1 else ("" if hasattr(k, "fn") else "direct")
        intensity = f"{flops[i] / moved[i]:6.2f}" if moved[i] else f"{'-':>6}"
        lines.append(f"  {i:4d}  {what:<34} {kind:<6} {str(s.shape):<16} {str(s.dtype):<8} "
                     f"{flops[i]:>10,} {moved[i]:>10,} {intensity}  {'.'.join(s.scope)} {s.step}".rstrip())
    return "\n".join(lines)


def to_dot(program, title: str = "compiled program") -> str:
    """The kernels as a graph (graph_dot.program writes it): one box per kernel (a fused chain lists its primitives,
    with FLOPs and bytes written), arrows from the kernel that wrote an array to each kernel that reads it."""
    index_of, kernels, arrows = {}, [], []
    for i, k in enumerate(program.kernels):
        instructions = kernel_instructions(k)
        index_of.update({s.out: i for s in instructions})
        last = instructions[-1]
        kind = "fused" if len(instructions) > 1 else ("elementwise" if instructions[0].op in UFUNCS else "kernel")
        kernels.append((f"k{i}", [s.op.name for s in instructions], last.shape, last.dtype, kernel_flops(k),
                        nbytes(last.shape, last.dtype), kind))
    alias = program.alias
    for i, k in enumerate(program.kernels):
        instructions = kernel_instructions(k)
        inside = {s.out for s in instructions}
        sources = {index_of[alias.get(j, j)] for s in instructions for j in s.ins
                   if alias.get(j, j) in index_of and j not in inside}
        arrows += [(f"k{j}", f"k{i}") for j in sorted(sources) if j != i]
    return graph_dot.program(title, kernels, arrows)
