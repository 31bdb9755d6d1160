"""Lesson 15 exercises. Fill in each function, then run:  python -m tinygrad_block check 15"""
import tinygrad_block as tb
from tinygrad_block import nn


def lora_forward(x: tb.Tensor, W: tb.Tensor, A: tb.Tensor, B: tb.Tensor, alpha: float) -> tb.Tensor:
    """A linear layer with a LoRA adapter:  y = x W^T + (alpha / r) (x A^T) B^T,  r = the rank = A.shape[0].
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
    """(total, active) parameters of nn.LM(cfg) for a config with a mixture of experts (cfg.n_experts SwiGLU
    experts, cfg.experts_top_k of them used per token), from the config's numbers (not tinygrad_block.accounting).
    Each block: attention W_Q, W_O (d_model x d_model) and W_K, W_V (d_model x n_kv_heads * d_head); two RMSNorm
    gains of d_model; a router of n_experts x d_model; n_experts experts of 3 d_model x d_ff matrices. Around the
    blocks: the embedding (vocab_size x d_model), a final norm (d_model) and the head (vocab_size x d_model, none
    when cfg.tie_embeddings). Active: what one token uses, every block's idle experts left out."""
    raise NotImplementedError
