"""Lesson 15 exercises: reference solutions."""
import tinygrad_block as tb
from tinygrad_block import nn


def lora_forward(x: tb.Tensor, W: tb.Tensor, A: tb.Tensor, B: tb.Tensor, alpha: float) -> tb.Tensor:
    """The frozen layer plus the low-rank update, scaled by alpha / r."""
    r = A.shape[0]
    return x @ W.T + (x @ A.T) @ B.T * (alpha / r)                    # (N, d_out)


def lora_saving(d: int, k: int, r: int) -> float:
    """d k weights against r (d + k) adapter parameters (B: d x r, A: r x k)."""
    return d * k / (r * (d + k))


def deepnorm_alpha_beta(n_layers: int) -> tuple:
    """DeepNet's decoder-only constants."""
    return (2 * n_layers) ** 0.25, (8 * n_layers) ** -0.25


def moe_params(cfg: nn.BlockConfig) -> tuple:
    """Every block holds attention, two norms, a router and n_experts experts; a token uses top_k experts."""
    d, d_kv, d_ff, E = cfg.d_model, cfg.n_kv_heads * cfg.d_head, cfg.d_ff, cfg.n_experts
    expert = 3 * d * d_ff
    block = 2 * d * d + 2 * d * d_kv + 2 * d + E * d + E * expert
    outside = cfg.vocab_size * d * (1 if cfg.tie_embeddings else 2) + d
    total = outside + cfg.n_layers * block
    return total, total - cfg.n_layers * (E - cfg.experts_top_k) * expert
