"""The two things every manual pair needs from an array library, its module and erf; and
two helpers for gradients: sum_to_last (a broadcast weight's) and flatten (naming them as the module does).

Everything else in `manual/` is written with array methods and operators, so the same code runs on numpy
arrays (CPU), cupy arrays (GPU) and the strict arrays of device 'strict'. Both come from the engine's backend
for that kind of array, so erf is written once per device.
"""
from __future__ import annotations

from ..device import array_backend


def xp_of(x):
    """The array module that `x` belongs to: numpy, cupy, or tinygrad_block.strict."""
    return array_backend(x).xp


def erf(x):
    """erf(x) elementwise, same array module and dtype as `x` (the backend's erf: correctly rounded on numpy,
    cupyx.scipy.special.erf on cupy)."""
    return array_backend(x).erf(x)


def sum_to_last(t):
    """Sum over every axis but the last: (..., n) -> (n,). The gradient of a weight or bias that was
    broadcast over the batch and sequence axes."""
    return t.reshape(-1, t.shape[-1]).sum(axis=0)


def flatten(grads: dict, prefix: str = "") -> dict:
    """{'attn': {'q_proj': {'weight': dw}}} -> {'attn.q_proj.weight': dw}: nested gradient dicts, one per layer,
    named as the module names its parameters."""
    flat = {}
    for name, g in grads.items():
        if isinstance(g, dict):
            flat.update(flatten(g, f"{prefix}{name}."))
        else:
            flat[f"{prefix}{name}"] = g
    return flat
