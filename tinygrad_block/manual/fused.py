"""The residual add and the RMSNorm after it as one fused op, with its hand-derived backward, and a count of
the memory traffic that fusing saves. Lesson 05's Hard exercise (fused_add_rmsnorm) is the same math.

In a pre-norm block every sublayer ends with `h = x + residual` and the next one starts with `RMSNorm(h)`:
two kernels, so h is written to memory by the first and read straight back by the second. Fused, one kernel
reads x and residual once and writes both outputs: h (the stream goes on) and the normalised h.
"""
from __future__ import annotations

from .common import sum_to_last, xp_of


def fused_add_rmsnorm_forward(x, residual, w, eps: float):
    """h = x + residual;  normed = h * rstd * w,  rstd = 1 / sqrt(mean(h^2) + eps)    x, residual: (..., d); w: (d,)
    Returns ((normed, h), cache): both outputs have x's shape; h is the new residual stream."""
    if x.shape != residual.shape or w.shape != x.shape[-1:]:
        raise ValueError(f"fused_add_rmsnorm_forward: x {x.shape} and residual {residual.shape} must have the same "
                         f"shape (..., d), and the gain w {w.shape} shape (d,) = {x.shape[-1:]}")
    h = x + residual                                                              # (..., d)
    rstd = 1.0 / xp_of(h).sqrt((h * h).mean(axis=-1, keepdims=True) + eps)      # (..., 1)
    return (h * rstd * w, h), (h, w, rstd)


def fused_add_rmsnorm_backward(d_normed, d_new_residual, cache):
    """dh = rstd * (dn - n * mean(dn * n)) + d_new_residual,  dn = d_normed * w,  n = h * rstd;
    dx = dresidual = dh (h = x + residual passes its gradient to both);  dw = sum(d_normed * n).
    h feeds the norm and also goes on along the stream, so its gradient is the sum of both paths (RMSNorm's
    backward, see norms.py, plus d_new_residual). Returns (dx, dresidual, {'weight': dw}); dx is dresidual."""
    h, w, rstd = cache
    n = h * rstd                                                                  # recomputed, not stored
    dn = d_normed * w
    dh = rstd * (dn - n * (dn * n).mean(axis=-1, keepdims=True)) + d_new_residual
    return dh, dh, {"weight": sum_to_last(d_normed * n)}


# Each kernel as (name, d-wide rows it reads, d-wide rows it writes), per token. A row stays on chip inside a
# kernel (RMSNorm's two passes over h, for mean(h^2) and then h * rstd, read it once), the gain w is one row
# shared by every token (cached, not counted), and rstd is one number per token (not a row).
KERNELS = {
    "unfused": {
        "forward": [("add", ("x", "residual"), ("h",)),
                    ("rmsnorm", ("h",), ("normed",))],
        "backward": [("rmsnorm backward", ("d_normed", "h"), ("dh_norm",)),
                     ("add the stream's gradient", ("dh_norm", "d_new_residual"), ("dh",))],
    },
    "fused": {
        "forward": [("add + rmsnorm", ("x", "residual"), ("h", "normed"))],
        "backward": [("add + rmsnorm backward", ("d_normed", "d_new_residual", "h"), ("dh",))],
    },
}


def add_rmsnorm_traffic(fused: bool, n_tokens: int = 1, d_model: int = 1, itemsize: int = 1) -> dict:
    """Memory traffic of residual add + RMSNorm: {'forward': (reads, writes), 'backward': (reads, writes)} in
    d-wide rows per token times n_tokens * d_model * itemsize (the defaults count rows of one token).
    The add's backward writes nothing: dx and dresidual are both dh, so neither version copies it."""
    out = {}
    for phase, kernels in KERNELS["fused" if fused else "unfused"].items():
        reads, writes = (sum(len(k[i]) for k in kernels) for i in (1, 2))
        out[phase] = (reads * n_tokens * d_model * itemsize, writes * n_tokens * d_model * itemsize)
    return out
