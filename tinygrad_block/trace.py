"""What the explicit context managers switch, in one small record: gradient recording, the observers, and where
an op runs (phase, module scope, named step). Every observer receives one `Event` per primitive call.

    with tb.observe(lambda e: print(e.phase, e.scope, e.step, e.op.name, e.output.shape)):
        block(x).backward(dout)

The record belongs to the thread, and to the asyncio task, that sets it (a `contextvars` variable, as PyTorch keeps
grad mode per thread): `no_grad()` in one thread leaves another recording, and a FLOP count or a graph sees only the
ops of the code inside its own `with`. A switch also decorates a function, as in PyTorch: `@tb.no_grad()` (or
`@tb.no_grad`) runs every call of it inside the switch. Nothing here knows about Tensors or Functions: the choke point
(`Function.apply`) and the backward sweep (`autograd.backward`) call `emit` and the switches below.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
from contextvars import ContextVar
from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class State:
    """The switches' values in one thread or task. Never changed in place: a switch sets a changed copy."""
    grad_enabled: bool = True
    observers: tuple = ()
    phase: str = "forward"
    scope: tuple = ()       # the module path, e.g. ('model', 'layers.0', 'attn', 'q_proj')
    step: str = ""          # the named step inside that module: 'rope', 'scores', 'softmax', 'residual', ...
    origin: str = ""        # in backward: the forward op being differentiated ('accumulate' where gradients sum)
    source: object = None   # in backward: that forward Function; for a sum, the Function or leaf whose gradient it is
    capture: object = None  # a jit capture in progress (compiled.py): told when a tensor's values are read


STATE: ContextVar[State] = ContextVar("tinygrad_block.trace", default=State())   # noqa: B039 (frozen)


@dataclass(frozen=True, slots=True)
class Event:
    """One primitive call, as an observer sees it."""
    op: object          # the Function instance: op.name, op.flops(...)
    inputs: tuple       # the input Tensors
    output: object      # the output Tensor
    phase: str          # 'forward' or 'backward'
    scope: tuple        # module path; in backward, the module whose forward op is differentiated
    step: str           # named step in that module ('' where the module names none)
    origin: str         # backward: the forward op differentiated, or 'accumulate'; '' in forward
    source: object = None   # backward: the Function differentiated; for 'accumulate', whose gradient is summed
    params: dict = None     # the primitive's keyword arguments (shape=, axes=, exponent=, ...)
    call: int | None = None  # in a jit capture: the number of the instruction it becomes (compiled.Instruction's
    #                          index in the program), so a graph recorded alongside names the same calls

    @property
    def flops(self) -> int:
        """This call's FLOPs by its primitive's rule (function.py)."""
        return self.op.flops(self.output.shape, *[t.shape for t in self.inputs])


def emit(op, inputs: tuple, output, state: State | None = None, params: dict | None = None) -> None:
    """Tell every observer that `op` ran (called by Function.apply when there are observers)."""
    s = state or STATE.get()
    call = None if s.capture is None else len(s.capture)
    event = Event(op, inputs, output, s.phase, s.scope, s.step, s.origin, s.source, params or {}, call)
    for observer in s.observers:
        observer(event)


class _Set:
    """Set some fields of this thread's (task's) switches inside a `with` block, and restore them after it."""
    __slots__ = ("values", "token", "result")

    def __init__(self, result=None, **values):
        self.values, self.result = values, result

    def __enter__(self):
        self.token = STATE.set(replace(STATE.get(), **self.values))
        return self.result

    def __exit__(self, *exc):
        STATE.reset(self.token)

    def __call__(self, fn):
        """As a decorator: each call of `fn` runs inside these switches (a fresh `with` per call, so calls in
        several threads, or nested ones, keep their own). A generator or async function runs its body a piece at a
        time, between its caller's statements, where a switch set around the call would not follow it: refused."""
        if not callable(fn) or inspect.isgeneratorfunction(fn) or inspect.iscoroutinefunction(fn) or \
                inspect.isasyncgenfunction(fn):
            raise TypeError(f"a switch such as no_grad decorates a plain function, got {fn!r}; in a generator or "
                            "async function, put `with tb.no_grad():` around the code inside it")

        @functools.wraps(fn)
        def inside(*args, **kwargs):
            with _Set(self.result, **self.values):
                return fn(*args, **kwargs)
        return inside


NOTHING = contextlib.nullcontext()     # a `with` block that changes nothing (backward's switches, unobserved)


def no_grad(fn=None):
    """Run ops without recording the graph (outputs never require grad): `with tb.no_grad():`, or a decorator,
    `@tb.no_grad()` or `@tb.no_grad`."""
    return _Set(grad_enabled=False) if fn is None else _Set(grad_enabled=False)(fn)


def constant() -> _Set:
    """Ops that build a constant (a causal mask, an index table): no graph is recorded and no observer sees them,
    so they are neither counted nor drawn."""
    return _Set(grad_enabled=False, observers=())


def enable_grad(fn=None):
    """Re-enable graph recording inside a `no_grad` block: `with tb.enable_grad():`, `@tb.enable_grad()` or
    `@tb.enable_grad`."""
    return _Set(grad_enabled=True) if fn is None else _Set(grad_enabled=True)(fn)


def observe(callback) -> _Set:
    """Call `callback(event)` after every primitive runs, forward and backward; `with` gives back the callback."""
    return _Set(callback, observers=STATE.get().observers + (callback,))


def scope(name: str) -> _Set:
    """Attribute the ops run inside to module `name`, nested in the current scope (Module.__call__ uses it)."""
    return _Set(scope=STATE.get().scope + (name,), step="")


def step(name: str) -> _Set:
    """Name the step the ops inside belong to ('rope', 'scores', 'mask', ...), within the current module.
    The walk, the graphs and the FLOP tables group by these names."""
    return _Set(step=name)


def capturing(capture) -> _Set:
    """Record every primitive for `capture` (compiled.py): it observes them, and hears of every value read."""
    return _Set(capture, observers=STATE.get().observers + (capture.observe,), capture=capture)


def read_value(tensor) -> None:
    """A tensor's values are about to leave the graph (.numpy(), .item(), bool()): a capture in progress must
    know, since Python code that reads values can take another path on the next call."""
    capture = STATE.get().capture
    if capture is not None:
        capture.read_value(tensor)


def derive(fn, *inputs, **params):
    """fn(*arrays, **params): an array computed from arrays outside the primitives (an index bounds-checked and
    wrapped). Each input is an array, or the tensor holding it (so that a capture knows where to read it again).
    A capture in progress records the computation, so that a replay computes it again from that call's arrays."""
    arrays = [x.data if hasattr(x, "_ctx") else x for x in inputs]       # a Tensor, known by its autograd slot
    out = fn(*arrays, **params)
    capture = STATE.get().capture
    if capture is not None:
        capture.derive(fn, inputs, params, out)
    return out


def differentiating(fn) -> _Set | contextlib.nullcontext:
    """The ops of `fn`'s backward belong to the module, the step and the op whose forward they differentiate.
    Observers are the only readers, so with none this changes nothing."""
    if not STATE.get().observers:
        return NOTHING
    return _Set(phase="backward", scope=fn.scope, step=fn.step, origin=fn.name, source=fn)


def accumulating(scope: tuple, target=None) -> _Set | contextlib.nullcontext:
    """Gradients of a tensor used several times add up: that sum is counted and drawn in module `scope`;
    `target` is whose gradient it is (the Function that made the tensor, or the leaf tensor itself)."""
    if not STATE.get().observers:
        return NOTHING
    return _Set(phase="backward", scope=scope, step="", origin="accumulate", source=target)
