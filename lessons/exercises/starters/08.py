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
    """The fraction of all the parameters of nn.LM(cfg) that sit in the blocks' FFNs, worked out from the config's
    numbers (lesson 08, section 5), not by building the model. All means every parameter the model holds, for
    Llama's SwiGLU models and GPT-2's classic FFN alike. Llama-2-7B: more than 0.6."""
    raise NotImplementedError
