"""Linear layer, optionally with a LoRA adapter: the one place a weight matrix meets an activation.

Weights are stored (out, in) as in PyTorch and Hugging Face, so y = x W^T + b.
"""
from __future__ import annotations

from .common import sum_to_last


def linear_forward(x, w, b=None, lora_A=None, lora_B=None, lora_scale: float = 1.0, frozen: bool = False):
    """y = x W^T + b + s (x A^T) B^T      x: (..., in), W: (out, in), A: (r, in), B: (out, r), s = lora_scale

    The adapter term only when A and B are given. frozen: W and b get no gradient (the model is being
    LoRA-tuned, so only adapters train)."""
    y = x @ w.T                                              # (..., out)
    if b is not None:
        y = y + b
    xa = None
    if lora_A is not None:
        xa = x @ lora_A.T                                    # (..., r)
        y = y + lora_scale * (xa @ lora_B.T)
    return y, (x, w, b, lora_A, lora_B, lora_scale, frozen, xa)


def linear_backward(dout, cache):
    """dx = dout W + s (dout B) A;   dW = dout^T x;   db = sum(dout);   dB = s dout^T (x A^T);   dA = s (dout B)^T x
    (every ^T x sums over all leading axes). Returns (dx, grads) with grads keyed 'weight', 'bias', 'lora_A',
    'lora_B'; a frozen W and b get no entry."""
    x, w, b, lora_A, lora_B, s, frozen, xa = cache
    dx = dout @ w
    grads = {}
    if not frozen:
        grads["weight"] = _outer_sum(dout, x)
        if b is not None:
            grads["bias"] = sum_to_last(dout)
    if lora_A is not None:
        d_xa = s * (dout @ lora_B)                           # (..., r)
        dx = dx + d_xa @ lora_A
        grads["lora_A"] = _outer_sum(d_xa, x)
        grads["lora_B"] = s * _outer_sum(dout, xa)
    return dx, grads


def _outer_sum(dout, x):
    """sum over all leading axes of dout^T x: (..., out), (..., in) -> (out, in)."""
    return dout.reshape(-1, dout.shape[-1]).T @ x.reshape(-1, x.shape[-1])


def proj_forward(x, params: dict, name: str, lora_scale: float = 1.0, frozen: bool = False):
    """linear_forward with the layer's arrays looked up by name: params['<name>.weight'], and '<name>.bias',
    '<name>.lora_A', '<name>.lora_B' where present."""
    get = params.get
    return linear_forward(x, params[f"{name}.weight"], get(f"{name}.bias"), get(f"{name}.lora_A"),
                          get(f"{name}.lora_B"), lora_scale, frozen)
