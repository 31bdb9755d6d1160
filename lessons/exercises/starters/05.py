"""Lesson 05 exercises. Fill in each function, then run:  python -m tinygrad_block check 05"""
import numpy as np

import tinygrad_block as tb


def masked_batchnorm(x: tb.Tensor, mask: tb.Tensor, eps: float = 1e-5) -> tb.Tensor:
    """BatchNorm over the real tokens only. x: (B, L, d); mask: (B, L), 1.0 at real tokens and 0.0 at padding.
    Each feature j is normalised by the mean and the biased variance (divide by the count) of x[..., j] over
    the real tokens, (x - mean) / sqrt(var + eps); padding positions come out as 0. No gain or shift. Use
    Tensor ops (sum, *, /, rsqrt, ...) so that autograd differentiates it. Returns (B, L, d)."""
    raise NotImplementedError


def layernorm_backward(dout: np.ndarray, x: np.ndarray, weight: np.ndarray, eps: float):
    """The gradients of y = weight * (x - mean) / sqrt(var + eps) + bias over the last axis (var biased), for
    x of shape (..., d) and weight of shape (d,), given dout = dL/dy (x's shape). Plain numpy, by hand.
    Returns (dx, dweight, dbias): dx of x's shape, dweight and dbias of shape (d,)."""
    raise NotImplementedError


def fused_add_rmsnorm(x: np.ndarray, residual: np.ndarray, weight: np.ndarray, eps: float):
    """h = x + residual (the residual stream after a sublayer's output x is added), and RMSNorm(h) with gain
    weight: h / sqrt(mean(h^2) + eps) * weight over the last axis. x, residual: (..., d); weight: (d,).
    Returns (normed, new_residual) = (RMSNorm(h), h), numpy arrays of x's shape."""
    raise NotImplementedError


def fused_add_rmsnorm_backward(d_normed: np.ndarray, d_new_residual: np.ndarray, x: np.ndarray,
                               residual: np.ndarray, weight: np.ndarray, eps: float):
    """The backward of fused_add_rmsnorm, by hand in numpy: d_normed and d_new_residual are the gradients of
    the loss with respect to its two outputs. Returns (dx, dresidual, dweight): dx and dresidual of x's shape,
    dweight of shape (d,)."""
    raise NotImplementedError
