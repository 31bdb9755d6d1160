"""Lesson 13 exercises: reference solutions."""
from tinygrad_block import nn


def forward_flops_per_token(cfg: nn.BlockConfig, seq_len: int) -> int:
    """2 FLOPs per matmul weight of each block, 4 seq_len n_heads d_head for q k^T and weights @ V, and the head."""
    d, d_kv = cfg.d_model, cfg.n_kv_heads * cfg.d_head
    weights = 2 * d * d + 2 * d * d_kv + 3 * d * cfg.d_ff             # W_Q, W_O; W_K, W_V; gate, up, down
    attention = 4 * seq_len * cfg.n_heads * cfg.d_head                 # 2 seq_len d_head per head, twice
    return cfg.n_layers * (2 * weights + attention) + 2 * d * cfg.vocab_size


def mfu_needed(n_params: float, n_tokens: float, n_gpus: int, peak_flops_per_gpu: float, days: float) -> float:
    """6 N D FLOPs over what the GPUs deliver at full peak in that many days."""
    return 6 * n_params * n_tokens / (n_gpus * peak_flops_per_gpu * days * 86400)
