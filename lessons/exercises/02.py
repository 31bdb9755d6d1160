"""Lesson 02's exercises: the four-point central difference; the primitive calls of a graph in topological order;
the backward pass run by hand, summing gradients where a tensor is reused. Each check compares with an
independent oracle (the exact derivative, the calls `tb.observe` saw while the graph was built, derivatives by
hand and by finite differences in numpy) and says what is wrong, with the numbers."""
from __future__ import annotations

import math

import numpy as np

import tinygrad_block as tb
from tinygrad_block.gradcheck import central_difference

from .common import CheckFailed

# ---------------------------------------------------------------- central_difference
def check_central_difference(solution) -> None:
    """sin at 1 (exact: cos 1) and x^4 at 2 (exact: 32, which a four-point difference gets up to rounding)."""
    for name, f, x, exact, bound in (("sin", math.sin, 1.0, math.cos(1.0), 1e-11),
                                     ("x**4", lambda t: t ** 4, 2.0, 32.0, 1e-8)):
        got = solution.central_difference(f, x, 1e-3)
        if not isinstance(got, (int, float, np.floating)):
            raise CheckFailed(f"central_difference({name}, {x}, h=1e-3) must return a float; got "
                              f"{type(got).__name__}")
        err = abs(got - exact)
        if not err <= bound:
            hint = (" (that is the size of a two-point difference's error, of order h^2: use four points)"
                    if 1e-8 < err < 1e-4 else "")
            ratio = next((r for r in (2, 0.5, -1, 6, 1 / 6) if abs(got - r * exact) < 1e-6 * abs(exact)), None)
            if ratio is not None:
                hint = f" (that is {ratio:.3g} times the derivative: check the signs and the divisor)"
            raise CheckFailed(f"central_difference({name}, {x}, h=1e-3) = {got!r}, exact {exact!r}: error {err:.2e}, "
                              f"expected at most {bound:.0e}{hint}")


# ---------------------------------------------------------------- graphs shared by the next two checks
def _deep(x):
    for _ in range(3000):
        x = x * 1.0001
    return x


def _graphs():
    """(what, builder, numpy function, hand derivative or None): each builder makes a one-element y from
    tensors that require grad; the numpy function computes the same y from numpy arrays."""
    return [
        ("y = x * x + x * 3 at x = 2", lambda x: x * x + x * 3.0, lambda x: x * x + 3 * x,
         lambda x: 2 * x + 3),
        ("h = sin x; y = h + exp(h * h) at x = 0.7", lambda x: (lambda h: h + (h * h).exp())(x.sin()),
         lambda x: np.sin(x) + np.exp(np.sin(x) ** 2),
         lambda x: (1 + 2 * np.sin(x) * np.exp(np.sin(x) ** 2)) * np.cos(x)),
        ("h = sin x; y = sum(h + exp(h)) for x of shape (2, 3)", lambda x: (lambda h: h + h.exp())(x.sin()).sum(),
         lambda x: (np.sin(x) + np.exp(np.sin(x))).sum(), lambda x: (1 + np.exp(np.sin(x))) * np.cos(x)),
        ("z = x @ w + b; y = sum(z * exp(z)) with b broadcast",
         lambda x, w, b: (lambda z: z * z.exp())(x @ w + b).sum(),
         lambda x, w, b: ((x @ w + b) * np.exp(x @ w + b)).sum(), None),
        ("3000 multiplications in a row", _deep, lambda x: x * 1.0001 ** 3000, lambda x: 1.0001 ** 3000),
    ]


def _values(what: str) -> list[np.ndarray]:
    r = np.random.default_rng(0)
    if what.startswith("y = x * x"):
        return [np.array(2.0)]
    if "x = 0.7" in what:
        return [np.array(0.7)]
    if "(2, 3)" in what:
        return [np.linspace(-1.0, 1.5, 6).reshape(2, 3)]
    if "x @ w" in what:
        return [0.5 * r.standard_normal((2, 3)), 0.5 * r.standard_normal((3, 4)), 0.5 * r.standard_normal(4)]
    return [np.array(0.5)]


def _build(what: str, build):
    """Fresh leaves (float64, requiring grad), the graph built from them, and the calls tb.observe saw."""
    leaves = [tb.tensor(v, dtype=tb.float64, requires_grad=True) for v in _values(what)]
    events = []
    with tb.observe(events.append):
        y = build(*leaves)
    return leaves, y, [e.op for e in events if e.output.requires_grad]


def _is_call(value) -> bool:
    return isinstance(value, tb.Function)


def _described(got) -> str:
    """The type of what the learner returned, with its shape when it has one."""
    return f"{type(got).__name__} {getattr(got, 'shape', '')}".strip()


# ---------------------------------------------------------------- topological_order
def check_topological_order(solution) -> None:
    """Every call of the graph exactly once, y's call first, and each call before every call that made one of its
    inputs; the calls themselves are those tb.observe saw while the graph was built."""
    for what, build, _, _ in _graphs():
        _, y, calls = _build(what, build)
        order = solution.topological_order(y)
        if not isinstance(order, (list, tuple)) or not all(_is_call(c) for c in order):
            holding = (f" holding {type(next(c for c in order if not _is_call(c))).__name__}"
                       if isinstance(order, (list, tuple)) else "")
            raise CheckFailed(f"topological_order for {what}: return a list of the calls (tb.Function objects, "
                              f"y._ctx and those found along .edges); got {type(order).__name__}{holding}")
        position = {}
        for i, call in enumerate(order):
            if call in position:
                raise CheckFailed(f"topological_order for {what}: the call {call.name} is listed twice (positions "
                                  f"{position[call]} and {i}); each call goes in once, however many paths reach it")
            position[call] = i
        missing = [c.name for c in calls if c not in position]
        extra = [c.name for c in order if c not in set(calls)]
        if missing or extra or len(order) != len(calls):
            raise CheckFailed(f"topological_order for {what}: the graph holds {len(calls)} calls, the list has "
                              f"{len(order)}" + (f"; missing: {', '.join(missing[:5])}" if missing else "")
                              + (f"; not in this graph: {', '.join(extra[:5])}" if extra else ""))
        if order[0] is not y._ctx:
            reversed_hint = " (the list is reversed: the leaves' calls come last, not first)"
            raise CheckFailed(f"topological_order for {what}: the first call must be y._ctx ({y._ctx.name}), whose "
                              f"output is y; got {order[0].name}" + (reversed_hint if order[-1] is y._ctx else ""))
        for i, call in enumerate(order):
            for maker in (e for e in call.edges if _is_call(e)):
                if position[maker] < i:
                    raise CheckFailed(f"topological_order for {what}: {maker.name} (position {position[maker]}) comes "
                                      f"before {call.name} (position {i}), which reads its output; {maker.name}'s "
                                      f"gradient is not complete until {call.name} has sent its share. A call "
                                      "reached along several paths must wait for all of them: the reverse of a "
                                      "depth-first post-order does that")


# ---------------------------------------------------------------- backprop
def _numeric(f, values: list[np.ndarray], i: int) -> np.ndarray:
    """d f / d values[i] by four-point central differences (tinygrad_block.gradcheck), the other values fixed."""
    return central_difference(lambda v: f(*values[:i], v, *values[i + 1:]), values[i], eps=1e-4)


REUSE = (" Where a tensor feeds several ops (or one op twice), the gradients arriving at it add up (+=, not =); "
         "and a call may run only once every call that read its output has sent its share (topological order).")


def check_backprop(solution) -> None:
    """Each leaf's gradient against the derivative by hand (or four-point differences in numpy), and y.backward()
    must not have been called."""
    for what, build, f, exact in _graphs():
        leaves, y, _ = _build(what, build)
        grads = solution.backprop(y, leaves)
        if not isinstance(grads, (list, tuple)) or len(grads) != len(leaves):
            raise CheckFailed(f"backprop for {what}: return a list with one gradient per leaf ({len(leaves)}); got "
                              f"{type(grads).__name__}" + (f" of {len(grads)}" if isinstance(grads, (list, tuple))
                                                           else ""))
        if any(t.grad is not None for t in leaves):
            raise CheckFailed(f"backprop for {what}: a leaf's .grad was set, so y.backward() ran; run the backward "
                              "pass yourself, call by call, with call.backward(g)")
        values = _values(what)
        for k, (leaf, got) in enumerate(zip(leaves, grads)):
            name = "xwb"[k] if len(leaves) == 3 else "x"
            if not isinstance(got, tb.Tensor) or got.shape != leaf.shape:
                raise CheckFailed(f"backprop for {what}: the gradient of {name} must be a Tensor of its shape "
                                  f"{leaf.shape}; got {_described(got)}")
            want = exact(values[0]) if exact else _numeric(f, values, k)
            err = float(np.max(np.abs(got.numpy() - want) / np.maximum(1.0, np.abs(want))))
            if not err <= (1e-12 if exact else 1e-8):
                i = np.unravel_index(int(np.argmax(np.abs(got.numpy() - want))), np.shape(want))
                where = f" at {tuple(int(j) for j in i)}" if np.ndim(want) else ""
                source = "by hand" if exact else "by finite differences"
                raise CheckFailed(f"backprop for {what}: d y / d {name}{where} is {float(got.numpy()[i])!r}, "
                                  f"{source} {float(np.asarray(want)[i])!r}." + REUSE)


CHECKS = [("central_difference", check_central_difference), ("topological_order", check_topological_order),
          ("backprop", check_backprop)]
