"""The small layers: Linear (with optional bias and LoRA), Embedding, RMSNorm, LayerNorm."""
from __future__ import annotations

from ..dtypes import float32
from ..tensor import Tensor, ones, zeros
from .module import Module, Parameter, init_weight


class Linear(Module):
    """y = x W^T + b, W stored (out, in) as in PyTorch and Hugging Face checkpoints.

    With LoRA (rank r > 0): y = x W^T + b + (alpha / r) (x A^T) B^T, A (r, in) random, B (out, r) zero,
    so the adapter starts as the identity change; train A and B with W frozen."""

    def __init__(self, d_in: int, d_out: int, bias: bool = False, *, generator, dtype=float32, device="cpu",
                 lora_rank: int = 0, lora_alpha: float = 16.0):
        self.d_in, self.d_out = d_in, d_out
        self.weight = init_weight((d_out, d_in), generator, dtype, device)
        self.bias = Parameter(zeros(d_out, dtype=dtype, device=device)) if bias else None
        if lora_rank:
            self.lora_A = init_weight((lora_rank, d_in), generator, dtype, device)
            self.lora_B = Parameter(zeros(d_out, lora_rank, dtype=dtype, device=device))
            self.lora_scale = lora_alpha / lora_rank

    def forward(self, x: Tensor) -> Tensor:                          # x: (..., d_in)
        if x.ndim < 1 or x.shape[-1] != self.d_in:
            raise ValueError(f"Linear: expected input (..., {self.d_in}), got shape {x.shape}")
        y = x @ self.weight.T                                        # (..., d_out)
        if self.bias is not None:
            y = y + self.bias
        if hasattr(self, "lora_A"):
            y = y + (x @ self.lora_A.T) @ self.lora_B.T * self.lora_scale
        return y


def projection(cfg, name: str, d_in: int, d_out: int, *, generator, dtype, device) -> Linear:
    """A block's Linear `name` (q_proj, ..., down_proj): biases (all, or q/k/v only) and LoRA as the config says."""
    rank = cfg.lora_rank if name in cfg.lora_targets else 0
    bias = cfg.bias or (cfg.qkv_bias and name in ("q_proj", "k_proj", "v_proj"))
    return Linear(d_in, d_out, bias, generator=generator, dtype=dtype, device=device, lora_rank=rank,
                  lora_alpha=cfg.lora_alpha)


class Embedding(Module):
    """Row lookup: token ids (...) -> vectors (..., d); its backward scatter-adds into the used rows."""

    def __init__(self, vocab_size: int, d: int, *, generator, dtype=float32, device="cpu"):
        self.vocab_size, self.d = vocab_size, d
        self.weight = init_weight((vocab_size, d), generator, dtype, device)

    def forward(self, ids) -> Tensor:
        return self.weight[ids]


class RMSNorm(Module):
    """y = x / sqrt(mean(x^2) + eps) * g over the last axis (Zhang & Sennrich 2019)."""

    def __init__(self, d: int, eps: float = 1e-5, *, dtype=float32, device="cpu"):
        self.d, self.eps = d, eps
        self.weight = Parameter(ones(d, dtype=dtype, device=device))

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 1 or x.shape[-1] != self.d:
            raise ValueError(f"RMSNorm: expected input (..., {self.d}), got shape {x.shape}")
        xw = x.wide()                                                      # float16's statistics in float32
        rstd = ((xw * xw).mean(axis=-1, keepdims=True) + self.eps).rsqrt()  # (..., 1)
        return x * rstd.to(x.dtype) * self.weight


class LayerNorm(Module):
    """y = (x - mean) / sqrt(var + eps) * g + b over the last axis (Ba et al. 2016); b is optional."""

    def __init__(self, d: int, eps: float = 1e-5, bias: bool = True, *, dtype=float32, device="cpu"):
        self.d, self.eps = d, eps
        self.weight = Parameter(ones(d, dtype=dtype, device=device))
        self.bias = Parameter(zeros(d, dtype=dtype, device=device)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 1 or x.shape[-1] != self.d:
            raise ValueError(f"LayerNorm: expected input (..., {self.d}), got shape {x.shape}")
        xw = x.wide()                                                      # float16's statistics in float32
        centered = xw - xw.mean(axis=-1, keepdims=True)
        rstd = ((centered * centered).mean(axis=-1, keepdims=True) + self.eps).rsqrt()   # (..., 1)
        y = (centered * rstd).to(x.dtype) * self.weight
        return y + self.bias if self.bias is not None else y


def norm(cfg, *, dtype=float32, device="cpu") -> RMSNorm | LayerNorm:
    """The norm a config asks for: RMSNorm, or LayerNorm (with a shift when the config has biases)."""
    if cfg.norm == "rms":
        return RMSNorm(cfg.d_model, cfg.norm_eps, dtype=dtype, device=device)
    return LayerNorm(cfg.d_model, cfg.norm_eps, bias=cfg.bias, dtype=dtype, device=device)
