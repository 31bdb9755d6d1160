"""The two things every manual pair needs from an array library: its module, and erf.

Everything else in `manual/` is written with array methods and operators, so the same code runs on numpy
arrays (CPU) and cupy arrays (GPU). This is the only file in `manual/` that imports numpy.
"""
from __future__ import annotations

import math

import numpy as np

_erf_float = np.frompyfunc(math.erf, 1, 1)


def xp_of(x):
    """The array module that `x` belongs to (numpy for a numpy array, cupy for a cupy array)."""
    return x.__array_namespace__()


def erf(x):
    """erf(x) elementwise, same array module and dtype as `x`: math.erf on numpy (which has no erf ufunc;
    correctly rounded in float64), cupyx.scipy.special.erf on cupy (imported only when a cupy array comes)."""
    if isinstance(x, np.ndarray | np.generic):
        return np.asarray(_erf_float(x), dtype=x.dtype)
    from cupyx.scipy.special import erf as cupy_erf
    return cupy_erf(x)


def sum_to_last(t):
    """Sum over every axis but the last: (..., n) -> (n,). The gradient of a weight or bias that was
    broadcast over the batch and sequence axes."""
    return t.reshape(-1, t.shape[-1]).sum(axis=0)


def with_prefix(prefix: str, grads: dict) -> dict:
    """{'weight': dw} -> {'<prefix>.weight': dw}: name gradients as the module names its parameters."""
    return {f"{prefix}.{name}": g for name, g in grads.items()}


def under(prefix: str, params: dict) -> dict:
    """The parameters of one submodule, prefix stripped: under('attn', p)['q_proj.weight'] is
    p['attn.q_proj.weight']."""
    head = prefix + "."
    return {name[len(head):]: p for name, p in params.items() if name.startswith(head)}
