"""Lesson 12 exercises: reference solutions."""
from tinygrad_block import nn


def llama_params(cfg: nn.BlockConfig) -> int:
    """Embedding, n_layers blocks of 2d^2 + 2 d d_kv + 3 d d_ff + 2d, the final norm, and the head unless tied."""
    d, d_kv = cfg.d_model, cfg.n_kv_heads * cfg.d_head
    block = 2 * d * d + 2 * d * d_kv + 3 * d * cfg.d_ff + 2 * d      # W_Q, W_O; W_K, W_V; FFN; two norms
    head = 0 if cfg.tie_embeddings else cfg.vocab_size * d
    return cfg.vocab_size * d + cfg.n_layers * block + d + head


def tied_saving(cfg: nn.BlockConfig) -> tuple[int, float]:
    """Tying drops the head's own vocab_size x d_model matrix: that, and its share of the untied model."""
    saved = cfg.vocab_size * cfg.d_model
    return saved, saved / llama_params(cfg.with_(tie_embeddings=False))
