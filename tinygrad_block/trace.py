"""What the explicit context managers switch, in one small record: gradient recording, the observers, and where
an op runs (phase, module scope, named step). Every observer receives one `Event` per primitive call.

    with tb.observe(lambda e: print(e.phase, e.scope, e.step, e.op.name, e.output.shape)):
        block(x).backward(dout)

Nothing here knows about Tensors or Functions: the choke point (`Function.apply`) and the backward sweep
(`autograd.backward`) call `emit` and the switches below.
"""
from __future__ import annotations

from dataclasses import dataclass


class Trace:
    """The switches' current values. One instance, `TRACE`, changed only by the context managers below."""
    grad_enabled = True
    observers: tuple = ()
    phase = "forward"
    scope: tuple = ()   # the module path, e.g. ('model', 'layers.0', 'attn', 'q_proj')
    step = ""           # the named step inside that module: 'rope', 'scores', 'softmax', 'residual', ...
    origin = ""         # in backward: the forward op being differentiated ('accumulate' where gradients sum)
    source = None       # in backward: that forward Function; for a sum, the Function or leaf whose gradient it is


TRACE = Trace()


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

    @property
    def flops(self) -> int:
        """This call's FLOPs by its primitive's rule (function.py)."""
        return self.op.flops(self.output.shape, *[t.shape for t in self.inputs])


def emit(op, inputs: tuple, output) -> None:
    """Tell every observer that `op` ran (called by Function.apply when there are observers)."""
    event = Event(op, inputs, output, TRACE.phase, TRACE.scope, TRACE.step, TRACE.origin, TRACE.source)
    for observer in TRACE.observers:
        observer(event)


class _Set:
    """Set some fields of TRACE inside a `with` block, and restore them after it."""
    __slots__ = ("values", "saved", "result")

    def __init__(self, result=None, **values):
        self.values, self.result = values, result

    def __enter__(self):
        self.saved = {key: getattr(TRACE, key) for key in self.values}
        for key, value in self.values.items():
            setattr(TRACE, key, value)
        return self.result

    def __exit__(self, *exc):
        for key, value in self.saved.items():
            setattr(TRACE, key, value)


class _Nothing:
    """A `with` block that changes nothing (the backward sweep's switches when nobody observes)."""
    def __enter__(self): return None
    def __exit__(self, *exc): return None


NOTHING = _Nothing()


def no_grad() -> _Set:
    """Run ops without recording the graph (outputs never require grad)."""
    return _Set(grad_enabled=False)


def enable_grad() -> _Set:
    """Re-enable graph recording inside a `no_grad` block."""
    return _Set(grad_enabled=True)


def observe(callback) -> _Set:
    """Call `callback(event)` after every primitive runs, forward and backward; `with` gives back the callback."""
    return _Set(callback, observers=TRACE.observers + (callback,))


def scope(name: str) -> _Set:
    """Attribute the ops run inside to module `name`, nested in the current scope (Module.__call__ uses it)."""
    return _Set(scope=TRACE.scope + (name,), step="")


def step(name: str) -> _Set:
    """Name the step the ops inside belong to ('rope', 'scores', 'mask', ...), within the current module.
    The walk, the graphs and the FLOP tables group by these names."""
    return _Set(step=name)


def differentiating(fn) -> _Set | _Nothing:
    """The ops of `fn`'s backward belong to the module, the step and the op whose forward they differentiate.
    Observers are the only readers, so with none this changes nothing."""
    if not TRACE.observers:
        return NOTHING
    return _Set(phase="backward", scope=fn.scope, step=fn.step, origin=fn.name, source=fn)


def accumulating(scope: tuple, target=None) -> _Set | _Nothing:
    """Gradients of a tensor used several times add up: that sum is counted and drawn in module `scope`;
    `target` is whose gradient it is (the Function that made the tensor, or the leaf tensor itself)."""
    if not TRACE.observers:
        return NOTHING
    return _Set(phase="backward", scope=scope, step="", origin="accumulate", source=target)
