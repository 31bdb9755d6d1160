"""Lesson 05 exercises: reference solutions."""
import numpy as np

import tinygrad_block as tb


def masked_batchnorm(x: tb.Tensor, mask: tb.Tensor, eps: float = 1e-5) -> tb.Tensor:
    """Sums over the real tokens only (x * mask), divided by their count; the output times the mask zeroes the
    padding. The statistics stay in the graph, so the gradient flows through them too."""
    m = mask.unsqueeze(-1)                                            # (B, L, 1)
    count = m.sum()
    mean = (x * m).sum(axis=(0, 1), keepdims=True) / count            # (1, 1, d)
    xc = (x - mean) * m                                               # 0 at padding
    var = (xc * xc).sum(axis=(0, 1), keepdims=True) / count           # (1, 1, d)
    return xc * (var + eps).rsqrt()


def layernorm_backward(dout: np.ndarray, x: np.ndarray, weight: np.ndarray, eps: float):
    """n = (x - mean) * rstd; dn = dout * weight; dx = rstd * (dn - mean(dn) - n * mean(dn * n)): RMSNorm's
    formula on the centred x, plus the projection that removes dn's mean, as the forward removed x's."""
    xc = x - x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps)   # (..., 1)
    n, dn = xc * rstd, dout * weight
    dx = rstd * (dn - dn.mean(-1, keepdims=True) - n * (dn * n).mean(-1, keepdims=True))
    rows = tuple(range(x.ndim - 1))                                   # every axis but the last
    return dx, (dout * n).sum(axis=rows), dout.sum(axis=rows)


def fused_add_rmsnorm(x: np.ndarray, residual: np.ndarray, weight: np.ndarray, eps: float):
    """One pass: h = x + residual, then h * rstd * weight; both h and the normalised h come out."""
    h = x + residual
    rstd = 1.0 / np.sqrt((h * h).mean(-1, keepdims=True) + eps)     # (..., 1)
    return h * rstd * weight, h


def fused_add_rmsnorm_backward(d_normed: np.ndarray, d_new_residual: np.ndarray, x: np.ndarray,
                               residual: np.ndarray, weight: np.ndarray, eps: float):
    """dh = (through the norm) + d_new_residual: h is read by the norm and also goes on along the stream.
    x and residual enter only through their sum, so each gets dh."""
    h = x + residual
    rstd = 1.0 / np.sqrt((h * h).mean(-1, keepdims=True) + eps)
    n, dn = h * rstd, d_normed * weight
    dh = rstd * (dn - n * (dn * n).mean(-1, keepdims=True)) + d_new_residual
    return dh, dh.copy(), (d_normed * n).sum(axis=tuple(range(h.ndim - 1)))
