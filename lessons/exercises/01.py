"""Lesson 01's exercises: softplus from Tensor ops, stable and differentiable; counting the primitive calls of a
recorded graph. Each check compares with an independent oracle (numpy's logaddexp, the sigmoid, the calls
`tb.observe` saw while the graph was built) and says what is wrong, with the numbers."""
from __future__ import annotations

import numpy as np

import tinygrad_block as tb

from .common import CheckFailed

KINK = (" (at the kink x = 0, pieces like max(x, 0) and |x| each pick a one-sided gradient: make them pick "
        "the same side, e.g. both from the branch x >= 0)")
XS = np.array([-1000.0, -30.0, -1.0, -1e-3, 0.0, 1e-3, 1.0, 30.0, 1000.0])


def check_softplus(solution) -> None:
    """Values against numpy's logaddexp(0, x); the gradient against the sigmoid, its derivative by hand."""
    x = tb.tensor(XS, dtype=tb.float64, requires_grad=True)
    y = solution.softplus(x)
    if not isinstance(y, tb.Tensor) or y.shape != x.shape:
        raise CheckFailed(f"softplus must return a Tensor of x's shape {x.shape}; got {type(y).__name__} "
                          f"{getattr(y, 'shape', '')}")
    got, want = y.numpy(), np.logaddexp(0.0, XS)
    bad = ~np.isfinite(got)
    if bad.any():
        raise CheckFailed(f"softplus is not finite at x = {XS[bad][0]:g} (got {float(got[bad][0])}); e^x "
                          "overflows there: write it as max(x, 0) + log(1 + e^-|x|)")
    err = np.abs(got - want) / np.maximum(1.0, np.abs(want))
    if err.max() > 1e-12:
        i = int(err.argmax())
        raise CheckFailed(f"softplus({XS[i]:g}) = {float(got[i])!r}, expected {float(want[i])!r} (log(1 + e^x))")
    if not y.requires_grad:
        raise CheckFailed("no gradient reached x: build softplus from Tensor ops, not from numpy arrays")
    y.sum().backward()
    if x.grad is None:
        raise CheckFailed("no gradient reached x: build softplus from Tensor ops, not from numpy arrays")
    sigmoid = np.exp(-np.logaddexp(0.0, -XS))                        # 1 / (1 + e^-x), stable
    gerr = np.abs(x.grad.numpy() - sigmoid)
    if not np.all(np.isfinite(x.grad.numpy())) or gerr.max() > 1e-12:
        i = int(np.nanargmax(np.where(np.isfinite(gerr), gerr, np.inf)))
        raise CheckFailed(f"d softplus/dx at x = {XS[i]:g} is {float(x.grad.numpy()[i])!r}; it should be the "
                          f"sigmoid 1 / (1 + e^-x) = {float(sigmoid[i])!r}" + (KINK if XS[i] == 0 else ""))


def _graphs():
    """(what, builder) pairs: each builder makes a graph from a fresh x that requires grad."""
    def deep(x):
        for _ in range(3000):
            x = x * 1.0001
        return x

    def squares(x):
        for _ in range(3):
            x = x * x
        return x
    return [("y = x * x + x * 3", lambda x: x * x + x * 3.0),
            ("z = x * x; y = z + z", lambda x: (lambda z: z + z)(x * x)),
            ("three squarings, y = ((x^2)^2)^2", squares),
            ("softmax(x).sum() of a (2, 5) x", lambda x: x.softmax().sum()),
            ("3000 multiplications in a row", deep)]


def check_count_ops(solution) -> None:
    """Each graph's count against the number of primitive calls tb.observe saw while it was built."""
    for what, build in _graphs():
        x = tb.tensor(np.linspace(0.5, 1.5, 10).reshape(2, 5), dtype=tb.float64, requires_grad=True)
        events = []
        with tb.observe(events.append):
            y = build(x)
        seen = [e for e in events if e.output.requires_grad]
        got = solution.count_ops(y)
        if got != len(seen):
            hint = (" (a call reached along several paths counts once: remember which calls you have visited)"
                    if isinstance(got, int) and got > len(seen) else "")
            raise CheckFailed(f"count_ops for {what}: got {got!r}, the graph holds {len(seen)} primitive calls{hint}")


CHECKS = [("softplus", check_softplus), ("count_ops", check_count_ops)]
