"""Lesson 15 exercises. Fill in each function, then run:  python -m tinygrad_block check 15"""
import tinygrad_block as tb
from tinygrad_block import nn


def lora_forward(x: tb.Tensor, W: tb.Tensor, A: tb.Tensor, B: tb.Tensor, alpha: float) -> tb.Tensor:
    """A linear layer with a LoRA adapter:  y = x W^T + (alpha / r) (x A^T) B^T,  r the adapter's rank.
    x: (N, d_in); W: (d_out, d_in), frozen; A: (r, d_in); B: (d_out, r). Returns (N, d_out)."""
    raise NotImplementedError


def lora_saving(d: int, k: int, r: int) -> float:
    """How many times fewer parameters a rank-r adapter (B: d x r and A: r x k) has than the d x k weight it
    adapts, as a float. Count both from the shapes; the lesson's section on LoRA gives one case to compare with."""
    raise NotImplementedError


def deepnorm_alpha_beta(n_layers: int) -> tuple:
    """DeepNorm's constants for a decoder of N = n_layers blocks, (alpha, beta) as floats: alpha weights the
    residual in each add, beta scales the initial FFN, W_V and W_O weights. The lesson's section 2 says how each
    grows or shrinks with N; at N = 8 both come out round."""
    raise NotImplementedError


def moe_params(cfg: nn.BlockConfig) -> tuple:
    """(total, active) parameters of nn.LM(cfg) for a config with a mixture of experts, cfg.n_experts experts of
    which cfg.experts_top_k run for each token (lesson 15, section 8). Total: every parameter the model holds.
    Active: those one token's forward pass uses. Work both out from the config's numbers (not
    tinygrad_block.accounting)."""
    raise NotImplementedError
