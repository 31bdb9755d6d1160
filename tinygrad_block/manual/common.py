"""The two things every manual pair needs from an array library: its module, and erf.

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


def with_prefix(prefix: str, grads: dict) -> dict:
    """{'weight': dw} -> {'<prefix>.weight': dw}: name gradients as the module names its parameters."""
    return {f"{prefix}.{name}": g for name, g in grads.items()}


def under(prefix: str, params: dict) -> dict:
    """The parameters of one submodule, prefix stripped: under('attn', p)['q_proj.weight'] is
    p['attn.q_proj.weight']."""
    head = prefix + "."
    return {name[len(head):]: p for name, p in params.items() if name.startswith(head)}
