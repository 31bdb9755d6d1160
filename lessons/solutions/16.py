"""Lesson 16 exercises: reference solutions."""
import tinygrad_block as tb
from tinygrad_block import nn


def merge_softmax_states(m1: tb.Tensor, l1: tb.Tensor, acc1: tb.Tensor, m2: tb.Tensor, l2: tb.Tensor,
                         acc2: tb.Tensor) -> tuple:
    """m = max(m1, m2); each part's sums restated against m by exp(m_i - m) <= 1, then added."""
    m = tb.maximum(m1, m2)                                              # (R, 1)
    e1, e2 = (m1 - m).exp(), (m2 - m).exp()                             # (R, 1): at most 1, no overflow
    return m, e1 * l1 + e2 * l2, e1 * acc1 + e2 * acc2                  # (R, 1), (R, 1), (R, d)


def _flops_and_numbers(cfg: nn.BlockConfig, context_len: int, batch: int) -> tuple[int, int]:
    """(matmul FLOPs of the step, numbers it reads: matmul weights once + the batch's KV cache)."""
    d, d_kv = cfg.d_model, cfg.n_kv_heads * cfg.d_head
    per_layer = 2 * d * cfg.n_heads * cfg.d_head + 2 * d * d_kv + 3 * d * cfg.d_ff   # W_Q, W_O; W_K, W_V; FFN
    weights = cfg.n_layers * per_layer + d * cfg.vocab_size                           # + the LM head
    attention = cfg.n_layers * 4 * context_len * cfg.n_heads * cfg.d_head             # per sequence
    cache = 2 * cfg.n_layers * batch * context_len * d_kv                             # K and V
    return batch * (2 * weights + attention), weights + cache


def decode_intensity(cfg: nn.BlockConfig, context_len: int, batch: int, bytes_per_element: int) -> float:
    """matmul FLOPs / (bytes of the matmul weights + bytes of the KV cache)."""
    flops, numbers = _flops_and_numbers(cfg, context_len, batch)
    return flops / (numbers * bytes_per_element)


def decode_tokens_per_second(cfg: nn.BlockConfig, context_len: int, batch: int, peak_flops: float,
                             bandwidth: float, bytes_per_element: int) -> float:
    """batch tokens per step; a step takes max(FLOPs / peak, bytes / bandwidth)."""
    flops, numbers = _flops_and_numbers(cfg, context_len, batch)
    return batch / max(flops / peak_flops, numbers * bytes_per_element / bandwidth)
