"""Compiled execution: capture a function's primitives once, then replay them straight on the backend's arrays.

    step = tb.jit(train_step)      # train_step(x, y) runs forward, backward and the optimizer's update
    step(x, y); step(x, y)         # captured: run eagerly while the trace records every primitive
    step(x, y)                     # replayed: no Tensor, Function or graph objects; just the kernels
    print(step.program)            # the kernels, as a learner reads them

A capture records each primitive call as an instruction: which arrays it read and wrote. A program is the list of
instructions; a kernel runs one instruction, or (fused) a chain of several. An array an op produced is a slot of
the program; any other array is read from where it came: an argument of `fn`, a tensor that outlives the call
(a parameter, a RoPE table, an optimizer's state: read afresh at every replay), or a constant (a Python number
turned into a tensor, a causal mask). When the call ends, a tensor whose `.data` or `.grad` the call set (the
optimizer's update, a KV cache's new entries, backward's gradients; an argument or a live tensor) is written back
from its slot at every replay.

Replaying is only right if the next call would have run the same primitives on the same constants. So the first
calls run eagerly and are captured until two captures in a row agree (same ops, same shapes, same constants); a
value read inside `fn` (`.item()`, `.numpy()`, `bool(t)`) is refused while capturing, since Python may branch on
it; and every replay first checks that the arguments' shapes, dtypes and devices are those of a capture (other
shapes capture again, a few kept), that the parameters of the modules `fn` uses are the same tensors, and that
the gradients it would set start empty. Never a stale replay that gives a wrong answer.

Any number of threads may call a compiled function at once: each replay runs a program copy of its own (Replays),
and captures are taken one at a time.

On a GPU a replay is one launch: the backend captures the kernels as a CUDA graph at the second replay
(cuda_kernels.ReplayGraph: the inputs copied in, the results copied out, bit for bit the kernels' own results).

Fusion (fuse.py) then turns each chain of elementwise primitives whose intermediate results nothing else reads
into one kernel. Under an observer (a FLOP count, a graph) a replay runs the unfused kernels and tells the
observer of each primitive, so a count of a replay equals eager's.
"""
from __future__ import annotations

import dataclasses
import threading
import weakref
from dataclasses import dataclass, field

from . import trace
from .function import SetRows, is_tensor
from .fuse import describe, fuse_program, layout, to_dot
from .fuse import kernel_instructions
from .tensor import Tensor, ones_like

MAX_SHAPES = 8            # captures kept per compiled function, one per set of argument shapes
MAX_CAPTURES = 3          # eager captures tried before two in a row must agree
MAX_GRAPHS = 8            # graphs captured for one program before it runs kernel by kernel for good


class JitError(RuntimeError):
    """A function cannot be compiled as it is written: the message says why, and what to change."""


# ---------------------------------------------------------------- what one capture records
@dataclass
class Source:
    """An array the captured ops read but did not produce: an argument, a live tensor's `.data`, or a constant."""
    array: object
    owner: object = None          # weakref to the Tensor that carried it
    arg: int | None = None        # position among fn's tensor arguments
    grad_was_none: bool = True    # the owner's .grad when it was first read

    def live(self):
        """The tensor it is read from at each replay, if that tensor outlived the capture."""
        return self.owner() if self.owner is not None and self.arg is None else None


@dataclass
class Instruction:
    """One primitive call of a program: op(*ins, **params) -> out. `ins` and array-valued params name slots
    ('s', k) or sources ('x', j). phase, scope, step and origin are what an observer of a replay is told."""
    op: type
    ins: tuple
    params: dict
    array_params: tuple
    out: int
    shape: tuple
    dtype: object
    phase: str
    scope: tuple
    step: str
    origin: str
    flops: int = 0
    strides: tuple | None = None    # the output's memory layout: a later matmul rounds by it, so replays keep it


@dataclass
class Capture:
    """One eager call, recorded."""
    backend: object = None
    instructions: list = field(default_factory=list)
    sources: list = field(default_factory=list)
    produced: dict = field(default_factory=dict)       # id(array) -> slot
    known: dict = field(default_factory=dict)          # id(array) -> source index
    arrays: list = field(default_factory=list)         # every array seen, held so that no id is reused
    writes: list = field(default_factory=list)         # (source index, 'data' | 'grad', slot, starts empty)
    outputs: object = None
    read: str = ""

    def __len__(self) -> int:
        """The instructions recorded so far: the next one's index (trace.Event.call)."""
        return len(self.instructions)

    def ref(self, array, owner=None) -> tuple:
        """('s', slot) for an array an op produced, else ('x', j) for source j (found or added)."""
        key = id(array)
        if key in self.produced:
            return ("s", self.produced[key])
        if key not in self.known:
            self.arrays.append(array)
            self.known[key] = len(self.sources)
            self.sources.append(Source(array, None if owner is None else weakref.ref(owner),
                                       grad_was_none=owner is None or owner.grad is None))
        return ("x", self.known[key])

    def observe(self, event) -> None:
        if self.backend is None:
            self.backend = event.op.backend
        ins = tuple(self.ref(t.data, t) for t in event.inputs)
        params, array_params = {}, []
        for name, value in event.params.items():
            if is_tensor(value) or _is_array(value):
                array_params.append((name, self.ref(value.data if is_tensor(value) else value)))
            else:
                params[name] = value
        out = event.output.data
        self.arrays.append(out)
        self.produced[id(out)] = slot = len(self.instructions)
        self.instructions.append(Instruction(type(event.op), ins, params, tuple(array_params), slot, out.shape,
                                             out.dtype, event.phase, event.scope, event.step, event.origin,
                                             event.flops, getattr(out, "strides", None)))

    def derive(self, fn, arrays: tuple, params: dict, out) -> None:
        """An array computed outside the primitives (trace.derive): an instruction of its own, redone at each replay."""
        ins = tuple(self.ref(a.data, a) if is_tensor(a) else self.ref(a) for a in arrays)
        self.arrays.append(out)
        self.produced[id(out)] = slot = len(self.instructions)
        self.instructions.append(Instruction(Derived, ins, {"fn": fn, **params}, (), slot, out.shape, out.dtype, "",
                                             (), "", "", 0, getattr(out, "strides", None)))

    def read_value(self, tensor) -> None:
        raise JitError(f"jit: the function reads a tensor's values (.item(), .numpy(), .tolist() or bool(), of a "
                       f"{tensor.dtype} {tensor.shape} tensor) while it is captured, after {len(self.instructions)} "
                       "primitives: Python code that reads values may take another path on the next call, so a "
                       "replay could be wrong. Read the values outside the compiled function (return the tensor "
                       "instead), or run it uncompiled")


def _is_array(value) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, (type, str))


def _flatten(value, tensors: list):
    """The structure of `value` with each Tensor replaced by its index in `tensors` (appended)."""
    if is_tensor(value):
        tensors.append(value)
        return ("T", len(tensors) - 1)
    if isinstance(value, (list, tuple)):
        return (type(value), tuple(_flatten(v, tensors) for v in value))
    if isinstance(value, dict):
        return (dict, tuple((k, _flatten(v, tensors)) for k, v in value.items()))
    return ("V", value)


def _unflatten(spec, tensors: list):
    kind, body = spec
    if kind == "T":
        return tensors[body]
    if kind == "V":
        return body
    if kind is dict:
        return {k: _unflatten(v, tensors) for k, v in body}
    return kind(_unflatten(v, tensors) for v in body)


def capture(fn, args: tuple, kwargs: dict, owners: list = ()) -> tuple[Capture, object]:
    """Run fn(*args, **kwargs) eagerly, recording every primitive. Returns (the capture, fn's result).
    owners: the modules and optimizers fn uses, whose gradients are looked at before the call."""
    rec, arg_tensors = Capture(), []
    _flatten((args, kwargs), arg_tensors)
    empty = {id(t): t.grad is None for t in _tensors(owners) + arg_tensors}     # gradients when the call begins
    for i, t in enumerate(arg_tensors):
        _, j = rec.ref(t.data, t)
        if rec.sources[j].arg is None:
            rec.sources[j].arg = i
    with trace.capturing(rec):
        result = fn(*args, **kwargs)
    outs = []
    spec = _flatten(result, outs)
    rec.outputs = (spec, tuple(rec.ref(t.data) for t in outs))
    for j, src in enumerate(rec.sources):
        owner = src.owner() if src.owner is not None else None
        if owner is None:
            continue
        if owner.data is not src.array:         # fn rebound .data: an optimizer's update, a KV cache's new entries
            rec.writes.append((j, "data", _produced(rec, owner.data, "a tensor's .data"), False))
        if owner.grad is not None and id(owner.grad.data) in rec.produced:
            if not src.grad_was_none:
                raise JitError("jit: the function adds to a gradient that was already there (a leaf's .grad was "
                               "not None when the call began); zero the gradients (opt.zero_grad()) before each "
                               "call, or inside the function before backward()")
            # a gradient empty when the call began must be empty at each replay (eager would add to it);
            # one that fn emptied itself (zero_grad inside) may be anything
            rec.writes.append((j, "grad", rec.produced[id(owner.grad.data)], empty.get(id(owner), True)))
    return rec, result


def _produced(rec: Capture, array, what: str) -> int:
    if id(array) not in rec.produced:
        raise JitError(f"jit: the function sets {what} to an array made outside the recorded ops "
                       "(a tensor built from Python data or numpy inside the function); build it from the "
                       "arguments with tensor ops, or pass it in as an argument")
    return rec.produced[id(array)]


# ---------------------------------------------------------------- two captures must agree
def difference(a: Capture, b: Capture) -> str:
    """'' if replaying capture `a` would do what capture `b` did; else what differs, in words."""
    if len(a.instructions) != len(b.instructions):
        return f"the first call ran {len(a.instructions)} primitives and the next {len(b.instructions)}"
    for i, (s, t) in enumerate(zip(a.instructions, b.instructions)):
        if (s.op, s.ins, s.params, s.array_params, s.shape, s.dtype) != \
                (t.op, t.ins, t.params, t.array_params, t.shape, t.dtype):
            return f"primitive {i} was {s.op.name} {s.shape} and then {t.op.name} {t.shape}"
    if len(a.sources) != len(b.sources):
        return "the calls read different numbers of tensors from outside"
    for j, (x, y) in enumerate(zip(a.sources, b.sources)):
        if x.arg != y.arg or x.array.shape != y.array.shape or x.array.dtype != y.array.dtype:
            return f"input {j} changed from {x.array.dtype} {x.array.shape} to {y.array.dtype} {y.array.shape}"
        if x.arg is None and (x.live() is None or x.live() is not y.live()) and not _equal(a.backend, x, y):
            user = next((f"{s.op.name} (primitive {i}, in {'.'.join(s.scope) or 'the function'})"
                         for i, s in enumerate(b.instructions)
                         if ("x", j) in s.ins + tuple(r for _, r in s.array_params)),
                        "an op")
            return (f"a constant read by {user} changed between calls ({x.array.dtype} {x.array.shape}): a value "
                    "that changes from call to call (a learning rate, a position, a random draw) must reach the "
                    "function as a tensor argument or a tensor that lives across calls, not as a Python number")
    if a.writes != b.writes or a.outputs != b.outputs:
        return "the calls set different tensors' .data or .grad, or returned different things"
    return ""


def _equal(backend, x: Source, y: Source) -> bool:
    return bool((backend.to_numpy(x.array) == backend.to_numpy(y.array)).all()) if x.array.size else True


# ---------------------------------------------------------------- the program a capture becomes
class Derived:
    """A replay's stand-in for trace.derive: fn(*arrays, **params), no primitive and no FLOPs."""
    name = "derived"

    def forward(self, *ins, fn, **params):
        return fn(*(t.data for t in ins), **params)

    def flops(self, out_shape, *in_shapes) -> int:
        return 0


class Kernel:
    """One instruction of a program run as its primitive's forward: `run()` computes its output array from the
    program's current arrays."""
    __slots__ = ("fn", "ins", "params", "array_params", "out", "instruction")

    def __init__(self, instruction: Instruction, slots: list, backend):
        fn = instruction.op()
        fn.backend, fn.needs_grad = backend, (False,) * len(instruction.ins)
        self.fn, self.instruction, self.out = fn, instruction, slots[instruction.out]
        self.ins = tuple(slots[k] for k in instruction.ins)
        self.params = dict(instruction.params)
        self.array_params = tuple((n, slots[k]) for n, k in instruction.array_params)

    def run(self):
        for name, slot in self.array_params:
            self.params[name] = slot.data
        self.out.data = self.fn.forward(*self.ins, **self.params)


class Program:
    """A verified capture as a list of kernels over slots: each slot a Tensor object made once, whose `.data` is
    the array of the current replay (sources are slots too, filled from their tensors at the start)."""

    def __init__(self, rec: Capture, fuse: bool):
        backend = self.backend = rec.backend
        self.capture = rec               # what it was made of: another capture must agree with it (recapture)
        self.slots = [Tensor._make(None, backend) for _ in rec.instructions]     # slot k: made by instruction k
        self.source_slots = [Tensor._make(src.array, backend) for src in rec.sources]
        self.all = self.slots + self.source_slots                               # what an instruction's index names
        named = lambda ref: self.all[_index(ref, rec)]  # noqa: E731
        self.instructions = [dataclasses.replace(s, ins=tuple(_index(r, rec) for r in s.ins),
                                          array_params=tuple((n, _index(r, rec)) for n, r in s.array_params))
                      for s in rec.instructions]
        self.plain = [Kernel(s, self.all, backend) for s in self.instructions]
        self.args = [(src.arg, self.source_slots[j]) for j, src in enumerate(rec.sources) if src.arg is not None]
        self.live = [(src.owner, self.source_slots[j], src.array.shape, src.array.dtype)
                     for j, src in enumerate(rec.sources) if src.arg is None and src.live() is not None]
        self.writes = [(rec.sources[j].owner, rec.sources[j].arg, attr, self.slots[k], starts_empty)
                       for j, attr, k, starts_empty in rec.writes]
        spec, refs = rec.outputs
        self.outputs = (spec, tuple(named(r) for r in refs))
        self.alias = {}                  # expand's instruction -> its input's, for the broadcasts fusion elides
        self.plans = []                  # the generated kernels' plans (kernels.Kernel), fusion's
        self.kernels = fuse_program(self) if fuse else self.plain
        self.runs = [kernel.run for kernel in self.kernels]
        self.checked = self.kernels is self.plain
        self.graph, self.why = None, None      # the replay as one launch (a CUDA graph), or why there is none
        self.graphs = 0                        # graphs captured so far

    def run(self, arg_tensors: list):
        for i, slot in self.args:
            slot.data = arg_tensors[i].data
        for owner, slot, shape, dtype in self.live:
            t = owner()
            if t is None:                    # gone since: nothing can change it now, so its last value holds
                continue
            if t.data.shape != shape or t.data.dtype != dtype:
                raise _Stale("a tensor the capture read has changed shape or dtype")
            slot.data = t.data
        if trace.STATE.get().observers:
            self._run_observed()
        elif not self._launched():
            for run in self.runs:
                run()
            if not self.checked:
                self._check_layouts()
        for owner, arg, attr, slot, _ in self.writes:
            t = owner() if arg is None else arg_tensors[arg]
            if attr == "data":
                t.data = slot.data
            else:
                t.grad = Tensor._make(slot.data, self.backend)
        spec, slots = self.outputs
        return _unflatten(spec, [Tensor._make(s.data, self.backend) for s in slots])

    def _launched(self) -> bool:
        """Whether this replay ran as one launch of the backend's graph of the kernels (a CUDA graph, captured
        at the first replay whose layouts are checked), rather than kernel by kernel."""
        if self.graph is None and self.why is None and self.checked and self.backend.lowers:
            self.graph, self.why = self.backend.graph(self)
            self.graphs += 1
        if self.graph is None or self.graph.run():
            return self.graph is not None
        self.graph = None             # an array written in place is another one now (a new KV cache): capture again,
        if self.graphs >= MAX_GRAPHS:  # unless that happens at every call
            self.why = f"the arrays it writes in place changed {MAX_GRAPHS} times"
        return False

    def _check_layouts(self):
        """After the first fused replay: every kernel's array has the layout (strides) eager gave it. Values equal
        eager's either way, but a matmul reading an array rounds by its layout, so a layout that differs would
        let later results drift: then this program replays unfused, and this replay runs again that way."""
        self.checked = True
        if all(k.out.data is None or last.strides is None
               or layout(k.out.data.shape, k.out.data.strides) == layout(last.shape, last.strides)
               for k in self.kernels for last in [kernel_instructions(k)[-1]]):
            return
        self.kernels, self.runs = self.plain, [kernel.run for kernel in self.plain]
        for run in self.runs:
            run()

    def _run_observed(self):
        """Every primitive, unfused, each told to the observers as eager would have told it."""
        state = trace.STATE.get()
        for kernel in self.plain:
            kernel.run()
            s = kernel.instruction
            if s.op is not Derived:
                trace.emit(kernel.fn, kernel.ins, kernel.out,
                           dataclasses.replace(state, phase=s.phase, scope=s.scope, step=s.step, origin=s.origin),
                           kernel.params)

    def varying(self) -> list:
        """The source slots each replay fills afresh: the arguments' and the live tensors' arrays."""
        return [slot for _, slot in self.args] + [slot for _, slot, *_ in self.live]

    def written_in_place(self) -> list:
        """The source slots an instruction writes into (setrows: a static KV cache's buffers)."""
        return [self.all[s.ins[0]] for s in self.instructions if s.op is SetRows]

    @staticmethod
    def reads_back(kernel) -> bool:
        """Whether `kernel` may read values back to the host: a derived instruction (an index's bounds check)."""
        return any(s.op is Derived for s in kernel_instructions(kernel))

    def spec(self, k: int) -> tuple:
        """(shape, dtype) of what index k names: instruction k's result as captured, or a source array as it is now."""
        made = self.instructions[k] if k < len(self.instructions) else self.all[k].data
        return made.shape, made.dtype

    def escaping(self) -> set:
        """The instructions whose arrays outlive a replay: returned, or written back into a tensor."""
        kept = {slot for *_, slot, _ in self.writes} | set(self.outputs[1])
        return {k for k, slot in enumerate(self.slots) if slot in kept}

    def __str__(self):
        return describe(self)

    def source(self, language: str = "c") -> str:
        """The generated kernels of this program as one file, one function per kernel, named as `print(program)`
        lists them (k12: the kernel numbered 12): "c", what the CPU compiles and runs, or "cuda", what a GPU
        would (the same bodies, one thread an element)."""
        from . import cpu_kernels, cuda_kernels
        languages = {"c": cpu_kernels.source, "cuda": cuda_kernels.source}
        if language not in languages:
            raise ValueError(f"Program.source: language must be 'c' or 'cuda', got {language!r}")
        return languages[language](self.plans)

    def to_dot(self, title: str = "compiled program") -> str:
        """The kernels as a DOT graph (graphviz draws it): a fused chain is one box listing its primitives."""
        return to_dot(self, title)


def _index(ref: tuple, rec: Capture) -> int:
    """A ref as an index into Program.all: slots first, then sources."""
    return ref[1] if ref[0] == "s" else len(rec.instructions) + ref[1]


class _Stale(Exception):
    """A guard failed: capture again."""


# ---------------------------------------------------------------- the compiled function
def _modules_of(fn) -> list:
    """The modules (and optimizers) a function reaches: itself, its bound object, its closure and the globals
    its code names. Their parameters are checked before every replay."""
    found = []
    candidates = [fn, getattr(fn, "__self__", None)]
    code = getattr(fn, "__code__", None)
    candidates += [c.cell_contents for c in (getattr(fn, "__closure__", None) or ()) if _filled(c)]
    if code is not None:
        candidates += [getattr(fn, "__globals__", {}).get(name) for name in code.co_names]
    for c in candidates:
        if (_is_module(c) or _is_optimizer(c)) and all(c is not f for f in found):
            found.append(c)
    return found


def _is_module(value) -> bool:
    """An nn.Module, known by what it does (nn builds on this file, so this file never imports nn)."""
    return hasattr(value, "named_modules") and hasattr(value, "named_parameters") and not isinstance(value, type)


def _is_optimizer(value) -> bool:
    """An optim.Optimizer, known by its parameter list and its step (optim builds on nn)."""
    return isinstance(getattr(value, "params", None), list) and callable(getattr(value, "step", None)) \
        and not isinstance(value, type)


def _filled(cell) -> bool:
    """Whether a closure cell holds a value yet (a name the function assigns later does not)."""
    try:
        return cell.cell_contents is not None
    except ValueError:
        return False


def fingerprint(owners) -> tuple:
    """What the program's validity rests on in the modules and optimizers fn uses: each module's attributes (a
    tensor or submodule by identity, with requires_grad; a list of modules by its items; a number, flag or name by
    value) and each optimizer's parameters. A parameter replaced, added or frozen, a layer appended, a flag
    flipped: the fingerprint changes, and the next call captures again."""
    return marks(watched(owners))


def watched(owners) -> list:
    """The attribute dicts of every module the owners hold, and the optimizers' parameter lists: walked once per
    capture. A module swapped in later changes its parent's dict, so the walk never goes stale unnoticed."""
    found = []
    for owner in owners:
        found += [m.__dict__ for _, m in owner.named_modules()] if _is_module(owner) else [owner.params]
    return found


def marks(dicts: list) -> tuple:
    """The fingerprint of watched() dicts and lists, cheap enough to take at every call."""
    return tuple(tuple(map(_mark, d.values())) if isinstance(d, dict) else tuple(map(id, d)) for d in dicts)


def _mark(v):
    """A module attribute as the fingerprint sees it (a memo such as a cached mask is left out: None)."""
    kind = type(v)
    if kind is bool or kind is int or kind is float or kind is str:
        return v
    if isinstance(v, Tensor):
        return id(v), v._requires_grad
    if kind is list or kind is tuple:
        return tuple(map(id, v)) if v and all(map(_is_module, v)) else None
    return id(v) if _is_module(v) else None


def _tensors(owners) -> list:
    """Every tensor attribute of the modules (parameters and buffers) and the parameters of the optimizers."""
    return [v for d in watched(owners) for v in (d.values() if isinstance(d, dict) else d) if isinstance(v, Tensor)]


class Replays:
    """The programs of one verified capture: as many copies as threads replay it at once. A program's slots hold
    the arrays of the replay in progress, and its fused kernels write in place, so two threads never run one
    copy together: each call takes a free copy (a new one when every copy is busy) and gives it back after."""

    def __init__(self, rec: Capture, fuse: bool, ids: tuple):
        self.rec, self.fuse, self.ids = rec, fuse, ids
        self.program = Program(rec, fuse)
        self.free = [self.program]            # list.pop and list.append are atomic: no lock on the way

    def take(self) -> Program:
        try:
            return self.free.pop()
        except IndexError:
            return Program(self.rec, self.fuse)

    def give(self, program: Program) -> None:
        self.free.append(program)


class Compiled:
    """`tb.jit(fn)`: call it as fn, from any number of threads. `program` is the last replayed (or ready) program;
    `captures` counts the eager captures so far; `replays` the replays."""

    def __init__(self, fn, fuse: bool = True, modules=None):
        if not callable(fn):
            raise TypeError(f"jit: expected a function (or a module) to compile, got {type(fn).__name__}")
        self.fn, self.fuse = fn, fuse
        self.owners = list(modules) if modules is not None else _modules_of(fn)
        self.watch = []                  # watched(owners), walked again at each new program
        self.cache: dict = {}            # argument key -> Replays
        self.pending: dict = {}          # argument key -> the last capture, not yet confirmed
        self.tries: dict = {}
        self.lock = threading.RLock()    # one capture at a time, and the tables above changed by one thread
        self.captures = self.replays = 0
        self.program = None
        self.__doc__ = getattr(fn, "__doc__", None)

    def __call__(self, *args, **kwargs):
        arg_tensors = []
        spec = _flatten((args, kwargs), arg_tensors)
        key = (_key(spec), tuple((t.shape, t.dtype, t.device) for t in arg_tensors))
        done, out = self._replay(key, arg_tensors)
        if done:
            return out
        with self.lock:                                  # another thread may have just made the program
            done, out = self._replay(key, arg_tensors)
            return out if done else self._capture(key, args, kwargs)

    def _replay(self, key, arg_tensors: list) -> tuple[bool, object]:
        """(True, fn's result) from a replay of the program for `key`, or (False, None) when there is none, or
        when the model changed under it (then it is dropped, to be captured again)."""
        entry = self.cache.get(key)
        if entry is None:
            return False, None
        if entry.ids == marks(self.watch) and self._grads_empty(entry.program, arg_tensors):
            program = entry.take()
            try:
                out = program.run(arg_tensors)
            except _Stale:
                pass
            else:
                with self.lock:
                    self.replays += 1
                    self.program = program
                return True, out
            finally:
                entry.give(program)
        with self.lock:
            if self.cache.get(key) is entry:
                del self.cache[key]
                self.tries.pop(key, None)
        return False, None

    @staticmethod
    def _grads_empty(program: Program, arg_tensors: list) -> bool:
        """Every gradient the program sets, and that was empty when captured, is empty (eager would add to it)."""
        for owner, arg, _, _, starts_empty in program.writes:
            t = owner() if arg is None else arg_tensors[arg]
            if starts_empty and t is not None and t.grad is not None:
                return False
        return True

    def _capture(self, key, args, kwargs):
        """Run fn eagerly, recorded (the caller holds the lock); the second of two captures that agree becomes
        the program for `key`."""
        rec, result = capture(self.fn, args, kwargs, self.owners)
        self.captures += 1
        last = self.pending.get(key)
        self.pending[key] = rec
        self.tries[key] = self.tries.get(key, 0) + 1
        if last is not None:
            why = difference(last, rec)
            if not why:
                if len(self.cache) >= MAX_SHAPES:
                    self.cache.pop(next(iter(self.cache)))
                if rec.backend is not None:
                    self.watch = watched(self.owners)
                    self.cache[key] = entry = Replays(rec, self.fuse, marks(self.watch))
                    self.program = entry.program
                else:
                    self.program = None
                del self.pending[key]
            elif self.tries[key] >= MAX_CAPTURES:
                raise JitError(f"jit: {getattr(self.fn, '__name__', 'the function')} does not repeat itself, so it "
                               f"cannot be replayed: {why}")
        return result


def _key(spec):
    """A hashable key for the non-tensor parts of the arguments (their values matter to the trace)."""
    try:
        hash(spec)
    except TypeError:
        raise JitError("jit: the function's arguments must be tensors, or hashable Python values (numbers, "
                       "strings, tuples) that select what it computes; got an unhashable one") from None
    return spec


def jit(fn=None, *, fuse: bool = True, modules=None):
    """Compile `fn` (a function of tensors, or a module): its calls capture, verify, then replay its primitives.
    fuse: merge chains of elementwise primitives into one kernel each. modules: the modules and optimizers whose
    parameters it uses (found from `fn` itself, its closure and its globals when not given)."""
    if fn is None:
        return lambda f: Compiled(f, fuse, modules)
    return Compiled(fn, fuse, modules)


def _module_call(module, backward: bool):
    """The call program_of compiles: module(*xs) and, with `backward`, the backward of sum(out * ones)."""
    def run(*xs):
        out = module(*xs)
        if backward:
            out.backward(ones_like(out))
        return out
    return run


def program_of(module, *inputs: Tensor, backward: bool = True):
    """The program tb.jit makes of module(*inputs) and, with `backward`, the backward of sum(out * ones): captured
    until two calls agree, then replayed once (a replay may still switch a program back to its unfused kernels).
    The inputs and the module's gradients are left as they were."""
    f = jit(_module_call(module, backward), modules=[module])
    xs = [t.detach().requires_grad_() if t.requires_grad else t.detach() for t in inputs]
    leaves = module.parameters()
    kept = [t.grad for t in leaves]
    try:
        while f.replays == 0:
            for t in leaves + xs:
                t.grad = None
            f(*xs)
            if f.captures > 4:
                raise RuntimeError(f"program_of: {type(module).__name__}'s call does not repeat itself, so tb.jit "
                                   "cannot compile it")
    finally:
        for t, grad in zip(leaves, kept):
            t.grad = grad
    return f.program


def recapture(program: Program, module, *inputs: Tensor, backward: bool = True) -> Capture:
    """Run module(*inputs) (and its backward, as program_of did) eagerly once more, captured: an observer alongside
    (a graph being recorded) hears each primitive with the index of its instruction (trace.Event.call), which names
    the same instruction of `program`, since the two captures agree as tb.jit's replays require (else an error
    says what differs). Gradients are set as eager sets them."""
    rec, _ = capture(_module_call(module, backward), inputs, {}, [module])
    why = difference(program.capture, rec)
    if why:
        raise RuntimeError(f"recapture: {type(module).__name__}'s call ran other primitives than its compiled "
                           f"program: {why}")
    return rec
