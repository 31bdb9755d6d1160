"""Linear layer, optionally with a LoRA adapter: the one place a weight matrix meets an activation, and the only
one that knows what an adapter is. Weights are stored (out, in) as in PyTorch and Hugging Face, so y = x W^T + b.

The layers built from it (ffn, attention) take each projection as one `Linear(weight, bias, adapter)`.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from .common import sum_to_last


class Adapter(NamedTuple):
    """A LoRA adapter on one linear layer, adding s (x A^T) B^T:  A: (r, in), B: (out, r), scale s = alpha / r."""
    A: Any
    B: Any
    scale: float


class Linear(NamedTuple):
    """One projection's arrays, in linear_forward's order, so `linear_forward(x, *proj)` runs it:
    weight (out, in), bias (out,) or None, adapter (an Adapter) or None."""
    weight: Any
    bias: Any = None
    adapter: Adapter | None = None


def linear_forward(x, w, b=None, adapter: Adapter | None = None, frozen: bool = False):
    """y = x W^T + b + s (x A^T) B^T      x: (..., in), W: (out, in); with adapter = Adapter(A, B, s)

    The adapter term only with an adapter. frozen: W and b get no gradient (the model is being LoRA-tuned, so
    only adapters train)."""
    y = x @ w.T                                              # (..., out)
    if b is not None:
        y = y + b
    xa = None
    if adapter is not None:
        xa = x @ adapter.A.T                                 # (..., r)
        y = y + adapter.scale * (xa @ adapter.B.T)
    return y, (x, w, b, adapter, frozen, xa)


def linear_backward(dout, cache):
    """dx = dout W + s (dout B) A;   dW = dout^T x;   db = sum(dout);   dB = s dout^T (x A^T);   dA = s (dout B)^T x
    (every ^T x sums over all leading axes). Returns (dx, grads) with grads keyed 'weight', 'bias', 'lora_A',
    'lora_B' (the module's parameter names); a frozen W and b get no entry."""
    x, w, b, adapter, frozen, xa = cache
    dx = dout @ w
    grads = {}
    if not frozen:
        grads["weight"] = _outer_sum(dout, x)
        if b is not None:
            grads["bias"] = sum_to_last(dout)
    if adapter is not None:
        A, B, s = adapter
        d_xa = s * (dout @ B)                                # (..., r)
        dx = dx + d_xa @ A
        grads["lora_A"] = _outer_sum(d_xa, x)
        grads["lora_B"] = s * _outer_sum(dout, xa)
    return dx, grads


def _outer_sum(dout, x):
    """sum over all leading axes of dout^T x: (..., out), (..., in) -> (out, in)."""
    return dout.reshape(-1, dout.shape[-1]).T @ x.reshape(-1, x.shape[-1])
