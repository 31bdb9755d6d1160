"""Lesson 08 exercises. Fill in each function, then run:  python -m tinygrad_block check 08"""
import math

import tinygrad_block as tb
from tinygrad_block import nn


def swiglu(x: tb.Tensor, w_gate: tb.Tensor, w_up: tb.Tensor, w_down: tb.Tensor) -> tb.Tensor:
    """The SwiGLU FFN, W_down (SiLU(W_gate x) * W_up x), from Tensor ops. x: (B, L, d_model). The weights are
    stored (out, in) as the library stores them: w_gate and w_up are (d_ff, d_model), w_down is (d_model, d_ff),
    so a projection is x @ w.mT. Returns (B, L, d_model)."""
    raise NotImplementedError


def swiglu_width(d_model: int, multiple_of: int, multiplier: float | None = None) -> int:
    """Llama's FFN hidden width: floor(2/3 * 4 d_model); if a multiplier is given, times the multiplier and floored
    again; then rounded UP to a multiple of `multiple_of`. Llama-2-7B: swiglu_width(4096, 256) = 11008."""
    raise NotImplementedError


def ffn_share(cfg: nn.BlockConfig) -> float:
    """The fraction of ALL parameters of nn.LM(cfg) (embedding, every block, final norm and LM head) that sit in
    the blocks' FFNs, worked out from the config's numbers. SwiGLU (cfg.ffn == 'swiglu') has three matrices
    d_model x d_ff; the classic FFN ('gelu', 'gelu_tanh', 'relu') has two, plus a bias per output when cfg.bias.
    Attention has W_Q and W_O, d_model x (n_heads * d_head), and W_K and W_V, d_model x (n_kv_heads * d_head),
    each with a bias per output when cfg.bias. A norm has a gain of d_model (and a shift of d_model for LayerNorm
    with cfg.bias); with cfg.tie_embeddings the LM head is the embedding itself; without RoPE (cfg.rope False) the
    model also has learned positions, max_seq_len x d_model. Llama-2-7B: more than 0.6."""
    raise NotImplementedError
