"""Lesson 06 exercises. Fill in each function, then run:  python -m tinygrad_block check 06"""
import math

import numpy as np

import tinygrad_block as tb


def attention(q: tb.Tensor, k: tb.Tensor, v: tb.Tensor, causal: bool) -> tb.Tensor:
    """Scaled dot-product attention, softmax(q k^T / sqrt(d_head) + mask) v, for q, k, v of shape
    (B, H, L, d_head) (one key/value head per query head). With causal=True, query i may read keys j <= i only:
    add -inf to the scores where j > i, before the softmax (an (L, L) table made with numpy's np.triu and
    tb.tensor(..., dtype=q.dtype) will do). Use Tensor ops so that autograd differentiates it: k.mT swaps the last
    two axes, scores.softmax(axis=-1) is the library's softmax. Returns (B, H, L, d_head)."""
    raise NotImplementedError


def stable_softmax(x: tb.Tensor, axis: int = -1) -> tb.Tensor:
    """e^x / sum e^x along `axis`, from Tensor ops (without x.softmax): finite for entries of +-1000, exactly 0
    where x is -inf (a masked key), right along any axis, and differentiable."""
    raise NotImplementedError


def head_contributions(weighted: tb.Tensor, o_weight: tb.Tensor) -> tb.Tensor:
    """What each head adds to attention's output. weighted: (B, H, L, d_head), the heads' outputs before the
    merge; o_weight: o_proj.weight, shape (d_model, H * d_head), stored (out, in), so that o_proj(m) is
    m @ o_weight.mT. Return one Tensor of shape (H, B, L, d_model) whose slice h is head h's contribution
    (tb.stack makes one Tensor of a list); summed over h, it must equal o_proj of the merged heads,
    weighted.transpose(1, 2).reshape(B, L, H * d_head) @ o_weight.mT."""
    raise NotImplementedError
