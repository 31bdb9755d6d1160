"""Lesson 13 exercises. Fill in each function, then run:  python -m tinygrad_block check 13"""
from tinygrad_block import nn


def forward_flops_per_token(cfg: nn.BlockConfig, seq_len: int) -> int:
    """Forward matmul FLOPs per token of the whole Llama-style model cfg (SwiGLU FFN, no biases) reading one
    sequence of seq_len tokens, as this engine computes it (lesson 13, sections 1 and 3): every matmul of the
    forward pass, attention's over the whole seq_len x seq_len square included (no saving from the causal mask),
    per token. Fields: cfg.d_model, n_heads, n_kv_heads, d_head, d_ff, n_layers, vocab_size."""
    raise NotImplementedError


def mfu_needed(n_params: float, n_tokens: float, n_gpus: int, peak_flops_per_gpu: float, days: float) -> float:
    """The model FLOPs utilisation (a fraction, 0.35 for 35 %) at which training n_params parameters on n_tokens
    tokens takes `days` days on n_gpus GPUs of peak_flops_per_gpu FLOP/s each, with the 6 N D rule for the
    training FLOPs."""
    raise NotImplementedError
