"""Lesson 06 exercises: reference solutions."""
import math

import numpy as np

import tinygrad_block as tb


def attention(q: tb.Tensor, k: tb.Tensor, v: tb.Tensor, causal: bool) -> tb.Tensor:
    """softmax(q k^T / sqrt(d_head) + mask) v. The mask is a constant: -inf strictly above the diagonal."""
    L, d_head = q.shape[-2], q.shape[-1]
    scores = (q @ k.mT) / math.sqrt(d_head)                               # (B, H, L, L)
    if causal:
        scores = scores + tb.tensor(np.triu(np.full((L, L), -np.inf), k=1), dtype=q.dtype)
    return scores.softmax(axis=-1) @ v                                    # (B, H, L, d_head)


def stable_softmax(x: tb.Tensor, axis: int = -1) -> tb.Tensor:
    """e^(x - m) / sum e^(x - m) with m each row's maximum, held constant (the result does not depend on it):
    the largest exponent is e^0 = 1, so the sum lies between 1 and the row length."""
    e = (x - x.max(axis=axis, keepdims=True).detach()).exp()
    return e / e.sum(axis=axis, keepdims=True)


def head_contributions(weighted: tb.Tensor, o_weight: tb.Tensor) -> tb.Tensor:
    """Head h's output times the columns of W_O that read it: o_h W_O[:, h d_head : (h + 1) d_head]^T."""
    H, d_head = weighted.shape[1], weighted.shape[-1]
    return tb.stack([weighted[:, h] @ o_weight[:, h * d_head:(h + 1) * d_head].mT for h in range(H)], axis=0)
