"""Lesson 08 exercises: reference solutions."""
import tinygrad_block as tb
from tinygrad_block import nn


def swiglu(x: tb.Tensor, w_gate: tb.Tensor, w_up: tb.Tensor, w_down: tb.Tensor) -> tb.Tensor:
    """W_down (SiLU(W_gate x) * W_up x); weights stored (out, in), so each projection is x @ w.mT."""
    hidden = (x @ w_gate.mT).silu() * (x @ w_up.mT)                      # (B, L, d_ff)
    return hidden @ w_down.mT                                             # (B, L, d_model)


def swiglu_width(d_model: int, multiple_of: int, multiplier: float | None = None) -> int:
    """floor(8d/3), times the multiplier (floored), rounded up to a multiple: Meta's Llama code."""
    hidden = 2 * 4 * d_model // 3
    if multiplier is not None:
        hidden = int(multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)     # ceil(hidden / multiple_of) multiples


def ffn_share(cfg: nn.BlockConfig) -> float:
    """FFN parameters of all blocks over every parameter of nn.LM(cfg)."""
    d, d_ff = cfg.d_model, cfg.d_ff
    ffn = (3 if cfg.ffn == "swiglu" else 2) * d * d_ff + cfg.bias * (d_ff + d)
    attn = 2 * d * d + 2 * d * cfg.n_kv_heads * cfg.d_head + cfg.bias * (2 * d + 2 * cfg.n_kv_heads * cfg.d_head)
    norm = d * (1 + (cfg.norm == "layer" and cfg.bias))                  # gain, and a shift for LayerNorm + bias
    embeddings = cfg.vocab_size * d * (1 if cfg.tie_embeddings else 2) + (0 if cfg.rope else cfg.max_seq_len * d)
    total = cfg.n_layers * (ffn + attn + 2 * norm) + norm + embeddings
    return cfg.n_layers * ffn / total
