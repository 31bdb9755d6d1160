"""Finite differences in float64: the independent oracle every backward pass is checked against, and the
relative error every comparison (tests, the tour) reports.

A test tool, not an op: it perturbs input values on the host with numpy, then calls your function again.
"""
from __future__ import annotations

import numpy as np

from .dtypes import float64
from .trace import no_grad
from .tensor import Tensor


class GradcheckError(AssertionError):
    """Autograd and finite differences disagree; the message names the worst element."""


def _scalar_loss(fn, args, seed: int):
    """fn(*args) if it is 0-d, else reduced to a scalar by a fixed random projection: sum(out * v), which
    checks every output element at once."""
    out = fn(*args)
    if not isinstance(out, Tensor) or out.dtype != float64:
        raise TypeError(f"gradcheck: fn must return a float64 Tensor, got {getattr(out, 'dtype', type(out))}")
    if out.ndim == 0:
        return out
    v = np.random.default_rng(seed).standard_normal(out.shape)
    return (out * Tensor(v, dtype=float64, device=out.backend)).sum()


def rel_err(a, b, floor: float = 1e-300, ord: float | None = None) -> float:
    """||a - b|| / max(||a||, ||b||, floor) over all elements: the relative error every check here reports.
    ord None: the 2-norm; ord=np.inf: the largest |a - b| against the largest |a| or |b|."""
    a, b = np.ravel(np.asarray(a, dtype=np.float64)), np.ravel(np.asarray(b, dtype=np.float64))
    norm = np.linalg.norm
    return float(norm(a - b, ord) / max(norm(a, ord), norm(b, ord), floor))


def central_difference(f, x: np.ndarray, eps: float = 1e-3, elements=None) -> np.ndarray:
    """d f(x) / dx for a scalar function f of a float64 array, at every element (or the given indices) by the
    4th-order central difference f'(x) ~ [8 (f(x+h) - f(x-h)) - (f(x+2h) - f(x-2h))] / 12h, error O(h^4)."""
    grad = np.zeros_like(x, dtype=np.float64)
    for idx in np.ndindex(x.shape) if elements is None else elements:
        fx = {}
        for k in (-2, -1, 1, 2):
            xk = x.copy()
            xk[idx] += k * eps
            fx[k] = f(xk)
        grad[idx] = (8 * (fx[1] - fx[-1]) - (fx[2] - fx[-2])) / (12 * eps)
    return grad


def numerical_grad(fn, inputs, index: int, eps: float = 1e-3, seed: int = 0, elements=None) -> np.ndarray:
    """d fn(*inputs) / d inputs[index] (projected on a fixed random v if not 0-d) by `central_difference`
    (about 1e-12 at h = 1e-3)."""
    t = inputs[index]

    def f(values):
        args = list(inputs)
        args[index] = Tensor(values, dtype=float64, device=t.backend)
        with no_grad():
            return _scalar_loss(fn, args, seed).item()

    return central_difference(f, t.numpy().astype(np.float64), eps, elements)


def gradcheck(fn, *inputs, eps: float = 1e-3, atol: float = 1e-10, rtol: float = 1e-8, seed: int = 0) -> bool:
    """Check autograd's gradient of `fn(*inputs)` for every float64 input with requires_grad against finite
    differences: |autograd - numeric| <= atol + rtol * |numeric| elementwise. Returns True, or raises
    GradcheckError naming the input, the worst element's index and both values. Inputs are copied, so
    their `.grad` is left alone."""
    checked = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if not checked:
        raise ValueError("gradcheck: no input has requires_grad=True; nothing to check")
    for i in checked:
        if inputs[i].dtype != float64:
            raise TypeError(f"gradcheck: input {i} is {inputs[i].dtype}; finite differences need float64 "
                            "(use .double())")
    leaves = [t.detach().requires_grad_() if i in checked else t for i, t in enumerate(inputs)]
    _scalar_loss(fn, leaves, seed).backward()
    for i in checked:
        g = leaves[i].grad
        analytic = np.zeros(inputs[i].shape) if g is None else g.numpy()
        numeric = numerical_grad(fn, leaves, i, eps, seed)
        excess = np.abs(analytic - numeric) - (atol + rtol * np.abs(numeric))
        if excess.size and excess.max() > 0:
            idx = np.unravel_index(np.argmax(excess), excess.shape)
            a, n = float(analytic[idx]), float(numeric[idx])
            raise GradcheckError(f"gradcheck: input {i} (shape {inputs[i].shape}), element {tuple(map(int, idx))}: "
                                 f"autograd {a!r} vs finite differences {n!r} (|diff| {abs(a - n):.3g} > "
                                 f"allowed {atol + rtol * abs(n):.3g})")
    return True
