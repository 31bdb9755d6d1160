"""Rotary position embedding (RoPE) as in Hugging Face Llama: dimension i turns with i + d_head/2.

Applied per head, after the head split, to q and k only. Backward rotates the gradient back by the same
angle, because a rotation's transpose is its inverse.
"""
from __future__ import annotations

from .common import xp_of


def rope_cos_sin(x, theta: float = 10000.0, offset: int = 0):
    """cos, sin of angle[p, i] = (offset + p) * theta^(-2i / d_head), i < d_head/2, each as cat(a, a):
    shape (L, d_head) for x of shape (..., L, d_head)."""
    xp = xp_of(x)
    L, d_head = x.shape[-2], x.shape[-1]
    if d_head % 2:
        raise ValueError(f"rope: d_head must be even to pair dimension i with i + d_head/2, got shape {x.shape}")
    inv_freq = theta ** -(xp.arange(0, d_head, 2, dtype=x.dtype) / d_head)        # (d_head/2,)
    angle = xp.arange(offset, offset + L, dtype=x.dtype)[:, None] * inv_freq       # (L, d_head/2)
    angle = xp.concatenate([angle, angle], axis=-1)                                # (L, d_head)
    return xp.cos(angle), xp.sin(angle)


def rotate_half(x):
    """(x1, x2) -> (-x2, x1) on the two halves of the last axis: a quarter turn of every pair (i, i + d/2)."""
    half = x.shape[-1] // 2
    return xp_of(x).concatenate([-x[..., half:], x[..., :half]], axis=-1)


def rope_forward(x, theta: float = 10000.0, offset: int = 0):
    """out = x * cos + rotate_half(x) * sin      x: (B, H, L, d_head), positions offset + 0..L-1"""
    cos, sin = rope_cos_sin(x, theta, offset)
    return x * cos + rotate_half(x) * sin, (cos, sin)


def rope_backward(dout, cache):
    """dx = R(-angle) dout = dout * cos - rotate_half(dout) * sin
    (rotate_half^T = -rotate_half, and sin is the same on both halves of a pair)."""
    cos, sin = cache
    return dout * cos - rotate_half(dout) * sin
