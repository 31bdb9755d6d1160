"""Lesson 06 exercises. Fill in each function, then run:  python -m tinygrad_block check 06"""
import math

import numpy as np

import tinygrad_block as tb


def attention(q: tb.Tensor, k: tb.Tensor, v: tb.Tensor, causal: bool) -> tb.Tensor:
    """Scaled dot-product attention (lesson 06, sections 2 to 6) for q, k, v of shape (B, H, L, d_head), one
    key/value head per query head. In every head, each query scores each key by their dot product over the d_head
    axis, scaled so that the scores keep a spread of about 1 whatever d_head is; the softmax of a query's scores
    over the keys gives weights that sum to 1, and its output is the weighted sum of the value vectors. With
    causal=True query i may read keys j <= i only: a later key must get weight exactly 0, and each row of weights
    must still sum to 1. Build it from Tensor ops, so that autograd differentiates it. Returns (B, H, L, d_head)."""
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
