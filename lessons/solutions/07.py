"""Lesson 07 exercises: reference solutions."""
import numpy as np

import tinygrad_block as tb
from tinygrad_block import nn


def rope(x: tb.Tensor, positions: list[int], theta: float) -> tb.Tensor:
    """Pair i = (x_i, x_{i + d/2}) turned by p theta^(-2i/d): the angles are constants (numpy), the rotation is
    Tensor ops on x."""
    d = x.shape[-1]
    angle = np.asarray(positions, dtype=np.float64)[:, None] * theta ** (-2 * np.arange(d // 2) / d)   # (L, d/2)
    c, s = tb.tensor(np.cos(angle), dtype=x.dtype), tb.tensor(np.sin(angle), dtype=x.dtype)
    x1, x2 = x[..., :d // 2], x[..., d // 2:]                             # (B, H, L, d/2) each
    return tb.concat([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)         # (B, H, L, d)


def repeat_kv(x: tb.Tensor, n_rep: int) -> tb.Tensor:
    """A new axis after the KV heads, expanded to n_rep: KV head j fills query heads j n_rep .. j n_rep + n_rep - 1.
    The expand's backward sums over the group."""
    B, H_kv, L, d = x.shape
    x = x.reshape(B, H_kv, 1, L, d).expand(B, H_kv, n_rep, L, d)          # (B, H_kv, n_rep, L, d)
    return x.reshape(B, H_kv * n_rep, L, d)                               # (B, H, L, d)


def kv_cache_bytes(cfg: nn.BlockConfig, batch: int, seq_len: int, bytes_per_element: int) -> int:
    """K and V (2) in every layer, for every token of every sequence: n_kv_heads heads of d_head numbers each."""
    return 2 * cfg.n_layers * batch * seq_len * cfg.n_kv_heads * cfg.d_head * bytes_per_element
