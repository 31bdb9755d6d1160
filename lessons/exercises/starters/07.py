"""Lesson 07 exercises. Fill in each function, then run:  python -m tinygrad_block check 07"""
import math

import numpy as np

import tinygrad_block as tb
from tinygrad_block import nn


def rope(x: tb.Tensor, positions: list[int], theta: float) -> tb.Tensor:
    """Rotary position embedding of queries or keys x, shape (B, H, L, d_head), whose L tokens stand at
    `positions` (L ints, not necessarily 0, 1, 2, ...). Pair i (i < d_head/2) is dimension i with dimension
    i + d_head/2 (the half-split layout of this library and Hugging Face's Llama), turned by the angle
    p * theta^(-2i/d_head) at position p: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin).
    Use Tensor ops on x (the angles may be computed with numpy and made tensors in x's dtype, tb.tensor(...,
    dtype=x.dtype)), so that autograd differentiates it."""
    raise NotImplementedError


def repeat_kv(x: tb.Tensor, n_rep: int) -> tb.Tensor:
    """(B, H_kv, L, d_head) -> (B, H_kv * n_rep, L, d_head): query head h reads KV head h // n_rep, so KV head j
    serves query heads j * n_rep .. j * n_rep + n_rep - 1. From Tensor ops (reshape, expand), so that the
    gradient of each KV head is the sum over its group."""
    raise NotImplementedError


def kv_cache_bytes(cfg: nn.BlockConfig, batch: int, seq_len: int, bytes_per_element: int) -> int:
    """Bytes of the KV cache of the whole model cfg (cfg.n_layers blocks) for `batch` sequences of seq_len
    tokens, bytes_per_element bytes a number (2 for bf16). The fields you need are on cfg: n_layers, n_heads,
    n_kv_heads, d_head, d_model."""
    raise NotImplementedError
