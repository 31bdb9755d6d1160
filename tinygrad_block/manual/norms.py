"""RMSNorm and LayerNorm over the last axis (d_model), with their hand-derived backward passes.

Both normalise each token's vector on its own; LayerNorm also removes the mean. `n` is the normalised
vector before the gain, recomputed in backward from x and rstd rather than stored.
"""
from __future__ import annotations

from .common import sum_to_last, xp_of


def rmsnorm_forward(x, w, eps: float):
    """y = n * g,  n = x * rstd,  rstd = 1 / sqrt(mean(x^2) + eps)      x: (..., d), g: (d,)"""
    rstd = 1.0 / xp_of(x).sqrt((x * x).mean(axis=-1, keepdims=True) + eps)   # (..., 1)
    return x * rstd * w, (x, w, rstd)


def rmsnorm_backward(dout, cache):
    """dg = sum(dout * n);   dn = dout * g;   dx = rstd * (dn - n * mean(dn * n))
    (d rstd/dx = -rstd^3 x / d, so the second term removes dn's component along n)."""
    x, w, rstd = cache
    n = x * rstd
    dn = dout * w
    dx = rstd * (dn - n * (dn * n).mean(axis=-1, keepdims=True))
    return dx, {"weight": sum_to_last(dout * n)}


def layernorm_forward(x, w, b=None, eps: float = 1e-5):
    """y = n * g + b,  n = (x - mean(x)) * rstd,  rstd = 1 / sqrt(var(x) + eps), var biased (divide by d)"""
    xc = x - x.mean(axis=-1, keepdims=True)                                    # (..., d)
    rstd = 1.0 / xp_of(x).sqrt((xc * xc).mean(axis=-1, keepdims=True) + eps)  # (..., 1)
    y = xc * rstd * w
    return (y if b is None else y + b), (xc, w, b, rstd)


def layernorm_backward(dout, cache):
    """dg = sum(dout * n);   db = sum(dout);   dn = dout * g;   dx = rstd * (dn - mean(dn) - n * mean(dn * n))
    (the RMSNorm formula plus one more projection: the gradient loses its mean, as the forward did)."""
    xc, w, b, rstd = cache
    n = xc * rstd
    dn = dout * w
    dx = rstd * (dn - dn.mean(axis=-1, keepdims=True) - n * (dn * n).mean(axis=-1, keepdims=True))
    grads = {"weight": sum_to_last(dout * n)}
    if b is not None:
        grads["bias"] = sum_to_last(dout)
    return dx, grads
