"""The feed-forward networks and the transformer block:  h = x + attn(norm1(x));  out = h + ffn(norm2(h))."""
from __future__ import annotations

from ..backend import float32
from ..tensor import Tensor
from .attention import Attention
from .config import BlockConfig
from .layers import norm, projection
from .module import Module


class SwiGLU(Module):
    """down( silu(gate(x)) * up(x) ): the gate decides, per hidden unit, how much of up(x) passes."""

    def __init__(self, cfg: BlockConfig, *, generator, dtype=float32, device="cpu"):
        d, d_ff, make = cfg.d_model, cfg.d_ff, dict(generator=generator, dtype=dtype, device=device)
        self.gate_proj = projection(cfg, "gate_proj", d, d_ff, **make)
        self.up_proj = projection(cfg, "up_proj", d, d_ff, **make)
        self.down_proj = projection(cfg, "down_proj", d_ff, d, **make)

    def forward(self, x: Tensor) -> Tensor:                          # x: (B, L, d_model)
        return self.down_proj(self.gate_proj(x).silu() * self.up_proj(x))   # hidden: (B, L, d_ff)


class MLP(Module):
    """down( act(up(x)) ): the classic expand-and-contract FFN, act = GELU (erf or tanh form) or ReLU."""

    def __init__(self, cfg: BlockConfig, *, generator, dtype=float32, device="cpu"):
        self.activation, make = cfg.ffn, dict(generator=generator, dtype=dtype, device=device)
        self.up_proj = projection(cfg, "up_proj", cfg.d_model, cfg.d_ff, **make)
        self.down_proj = projection(cfg, "down_proj", cfg.d_ff, cfg.d_model, **make)

    def forward(self, x: Tensor) -> Tensor:                          # x: (B, L, d_model)
        h = self.up_proj(x)                                          # (B, L, d_ff)
        if self.activation == "relu":
            h = h.relu()
        else:
            h = h.gelu(approximate="tanh" if self.activation == "gelu_tanh" else "none")
        return self.down_proj(h)


class TransformerBlock(Module):
    """One block. Pre-norm (Llama, GPT-2):   h = x + attn(norm1(x));   out = h + ffn(norm2(h)).
    Post-norm (BERT, the 2017 original):     h = norm1(x + attn(x));   out = norm2(h + ffn(h)).
    Parallel (GPT-NeoX style):               out = x + attn(norm1(x)) + ffn(norm2(x)).
    With LoRA (cfg.lora_rank > 0) every base parameter is frozen: only the adapters' A and B train."""

    scope_name = "block"

    def __init__(self, cfg: BlockConfig, *, generator, dtype=float32, device="cpu"):
        self.cfg = cfg
        self.norm1 = norm(cfg, dtype=dtype, device=device)
        self.attn = Attention(cfg, generator=generator, dtype=dtype, device=device)
        self.norm2 = norm(cfg, dtype=dtype, device=device)
        ffn = SwiGLU if cfg.ffn == "swiglu" else MLP
        self.ffn = ffn(cfg, generator=generator, dtype=dtype, device=device)
        if cfg.lora_rank:
            for name, p in self.named_parameters():
                p.requires_grad = name.endswith(("lora_A", "lora_B"))

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:         # x: (B, L, d_model)
        if x.ndim != 3 or x.shape[-1] != self.cfg.d_model:
            raise ValueError(f"TransformerBlock: expected input (B, L, d_model={self.cfg.d_model}), got {x.shape}")
        attn = lambda t: self.attn(t, offset)  # noqa: E731
        if self.cfg.parallel:
            return x + attn(self.norm1(x)) + self.ffn(self.norm2(x))
        if self.cfg.norm_position == "post":
            h = self.norm1(x + attn(x))
            return self.norm2(h + self.ffn(h))
        h = x + attn(self.norm1(x))                                  # residual 1
        return h + self.ffn(self.norm2(h))                           # residual 2
