"""Count what a computation costs by running it: FLOPs per primitive, module scope and phase, and the bytes
of activations kept for backward. Both hang on the one choke point every primitive passes (forward and
backward), through `observe`; on the shape-only device nothing is computed, so a 70B model counts on a laptop.

    with count_flops() as fc:
        model(ids).backward(grad)
    fc.total("forward", matmul_only=True)      # PyTorch FlopCounterMode's convention
    fc.by_scope("backward")                    # {'model.layers.0.attn.q_proj': ..., ...}
    fc.by_step("forward", scope="model.layers.0.attn")   # {'rope': ..., 'scores': ..., 'softmax': ...}
"""
from __future__ import annotations

from collections import Counter
from contextlib import contextmanager

from .function import Movement
from .trace import observe


def _inside(name: str, prefix: str) -> bool:
    return not prefix or name == prefix or name.startswith(prefix + ".")


class FlopCounter:
    """FLOPs by (phase, scope, step, op); each primitive's own rule (see function.py) gives the number."""

    def __init__(self):
        self.flops: Counter = Counter()   # (phase, scope, step, op) -> FLOPs
        self.calls: Counter = Counter()   # (phase, scope, step, op) -> number of calls

    def __call__(self, event):
        key = (event.phase, ".".join(event.scope), event.step, event.op.name)
        self.flops[key] += event.flops
        self.calls[key] += 1

    def _select(self, phase=None, scope="", matmul_only=False, own=False, step=None):
        for (ph, sc, st, op), n in self.flops.items():
            if (phase is None or ph == phase) and (sc == scope if own else _inside(sc, scope)) \
                    and (op == "matmul" or not matmul_only) and (step is None or st == step):
                yield (ph, sc, st, op), n

    def total(self, phase: str | None = None, *, scope: str = "", matmul_only: bool = False, own: bool = False,
              step: str | None = None) -> int:
        """All FLOPs (or matmul FLOPs only) of one phase or both, inside a module scope or everywhere; with
        `own`, only the ops of that scope itself (not its submodules); with `step`, only that named step."""
        return sum(n for _, n in self._select(phase, scope, matmul_only, own, step))

    def by_op(self, phase: str | None = None, *, scope: str = "") -> dict[str, int]:
        out = Counter()
        for (_, _, _, op), n in self._select(phase, scope):
            out[op] += n
        return dict(out.most_common())

    def by_scope(self, phase: str | None = None, *, matmul_only: bool = False, depth: int | None = None) -> dict:
        """FLOPs per module scope, each scope's own ops only; with `depth`, scopes are cut to that many
        levels and their subtrees summed into them."""
        out = Counter()
        for (_, sc, _, _), n in self._select(phase, "", matmul_only):
            out[".".join(sc.split(".")[:depth]) if depth else sc] += n
        return dict(sorted(out.items()))

    def by_step(self, phase: str | None = None, *, scope: str = "") -> dict[str, int]:
        """FLOPs of a module's own ops per named step ('rope', 'scores', 'mask', 'softmax', ...; '' for
        ops in no step), in the order they first ran."""
        out: dict = {}
        for (_, _, st, _), n in self._select(phase, scope, own=True):
            out[st] = out.get(st, 0) + n
        return out


@contextmanager
def count_flops():
    """Count the FLOPs of every primitive run inside, forward and backward (see FlopCounter)."""
    counter = FlopCounter()
    with observe(counter):
        yield counter


class SavedBytes:
    """Bytes of activations kept for backward, per module scope. Saved tensors are traced back through the
    ops that may return a view (Movement.may_alias: reshape, permute, expand, slice) to the buffer they alias;
    each buffer counts once, at its own size, for the first scope that saves it. Buffers of leaves (parameters,
    inputs) and of constants are not activations and do not count (see Function.saved_activations)."""

    def __init__(self):
        self.bytes: Counter = Counter()
        self._root: dict = {}       # id(view data) -> (id(buffer data), buffer bytes, buffer is a leaf)
        self._seen: set = set()
        self._alive: list = []      # arrays whose ids are keys above: kept alive so no new array reuses an id

    def _buffer(self, t):
        return self._root.get(id(t.data), (id(t.data), t.nbytes, t._ctx is None))

    def __call__(self, event):
        fn, inputs, out = event.op, event.inputs, event.output
        if event.phase != "forward":
            return
        if isinstance(fn, Movement) and fn.may_alias:
            self._root[id(out.data)] = self._buffer(inputs[0])
            self._alive += [out.data, inputs[0].data]
        if out._ctx is not fn:
            return
        for t in fn.saved_activations():
            key, nbytes, leaf = self._buffer(t)
            if key not in self._seen and not (leaf and t._ctx is not None):
                self._seen.add(key)
                self._alive.append(t.data)
                self.bytes[".".join(event.scope)] += nbytes

    def total(self, scope: str = "") -> int:
        return sum(n for sc, n in self.bytes.items() if _inside(sc, scope))


@contextmanager
def count_saved_bytes():
    """Measure the activation bytes the graph keeps for backward while the forward runs inside."""
    counter = SavedBytes()
    with observe(counter):
        yield counter
