"""The transformer block in plain PyTorch eager, written from its equations: the reference the tests check our
blocks against (forward, and backward by torch's autograd) and the speed of a mature engine in the benchmarks.

Parameters are a dict keyed like our blocks' named_parameters ('attn.q_proj.weight', 'norm1.bias', ...), so
all implementations compute the same function. `cfg` is anything with BlockConfig's attributes; every variant
is covered: MHA/GQA/MQA, pre/post/parallel layouts, RMS/Layer norm, the four FFNs, biases, LoRA, causal or
not, RoPE on or off at a position offset. Parameters are read by indexing only, so a test can watch which
ones the equations use.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def rope_cos_sin(L: int, d_head: int, theta: float, dtype=torch.float64, device="cpu", offset: int = 0):
    """Hugging Face Llama's half-split tables for positions offset .. offset + L - 1:
    angle[p, i] = p theta^(-2i / d_head), i < d_head / 2, repeated twice; computed in float64."""
    inv_freq = theta ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)       # (d_head/2,)
    positions = torch.arange(offset, offset + L, dtype=torch.float64)
    angles = positions[:, None] * inv_freq[None, :]                                         # (L, d_head/2)
    angles = torch.cat([angles, angles], dim=-1)                                            # (L, d_head)
    return angles.cos().to(device, dtype), angles.sin().to(device, dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def linear(p, cfg, name: str, x):
    """x W^T + b + (alpha / r) (x A^T) B^T; the bias and the adapter only where cfg configures them."""
    y = F.linear(x, p[f"{name}.weight"], p[f"{name}.bias"] if cfg.bias else None)
    if cfg.lora_rank and name.split(".")[-1] in cfg.lora_targets:
        y = y + (cfg.lora_alpha / cfg.lora_rank) * F.linear(F.linear(x, p[f"{name}.lora_A"]), p[f"{name}.lora_B"])
    return y


def norm(p, cfg, name: str, x):
    """RMSNorm x / sqrt(mean(x^2) + eps) * g, or LayerNorm (with a shift when cfg.bias)."""
    if cfg.norm == "rms":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.norm_eps) * p[f"{name}.weight"]
    return F.layer_norm(x, (cfg.d_model,), p[f"{name}.weight"], p[f"{name}.bias"] if cfg.bias else None,
                        cfg.norm_eps)


def attention(p, cfg, x, cos=None, sin=None, offset: int = 0, prefix: str = "attn.", probe: list | None = None):
    """Causal (or not) multi-head attention with n_kv_heads K/V heads, query head h reading KV head h // G;
    RoPE by (cos, sin), or tables for positions offset.. when not given. probe collects the rotated q and k."""
    if getattr(cfg, "qk_norm", False) or getattr(cfg, "rope_scaling", ()):
        raise ValueError("torch_block.attention: no QK-norm or RoPE scaling here; tests check those against "
                         "transformers' Qwen3 and Llama layers (tests/nn/test_rope_scaling_qk_norm.py)")
    B, L, _ = x.shape
    H, H_kv = cfg.n_heads, cfg.n_kv_heads
    d_head = cfg.d_model // H
    q = linear(p, cfg, f"{prefix}q_proj", x).view(B, L, H, d_head).transpose(1, 2)        # (B, H, L, d_head)
    k = linear(p, cfg, f"{prefix}k_proj", x).view(B, L, H_kv, d_head).transpose(1, 2)     # (B, H_kv, L, d_head)
    v = linear(p, cfg, f"{prefix}v_proj", x).view(B, L, H_kv, d_head).transpose(1, 2)
    if cfg.rope:
        if cos is None:
            cos, sin = rope_cos_sin(L, d_head, cfg.rope_theta, x.dtype, x.device, offset)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if probe is not None:
            probe += [q.detach().cpu().numpy(), k.detach().cpu().numpy()]
    k, v = k.repeat_interleave(H // H_kv, dim=1), v.repeat_interleave(H // H_kv, dim=1)   # (B, H, L, d_head)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)                                  # (B, H, L, L)
    if cfg.causal:
        future = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    out = scores.softmax(-1) @ v                                                          # (B, H, L, d_head)
    return linear(p, cfg, f"{prefix}o_proj", out.transpose(1, 2).reshape(B, L, H * d_head))


def ffn(p, cfg, x, prefix: str = "ffn."):
    """SwiGLU down(silu(gate(x)) * up(x)), or down(act(up(x))) with GELU (erf or tanh) or ReLU."""
    if cfg.ffn == "swiglu":
        hidden = F.silu(linear(p, cfg, f"{prefix}gate_proj", x)) * linear(p, cfg, f"{prefix}up_proj", x)
    else:
        act = {"gelu": F.gelu, "gelu_tanh": lambda h: F.gelu(h, approximate="tanh"), "relu": F.relu}[cfg.ffn]
        hidden = act(linear(p, cfg, f"{prefix}up_proj", x))
    return linear(p, cfg, f"{prefix}down_proj", hidden)


def block_forward(x, p, cfg, cos=None, sin=None, offset: int = 0, probe: list | None = None):
    """Pre-norm: h = x + attn(norm1(x)); out = h + ffn(norm2(h)). Post-norm: h = norm1(x + attn(x));
    out = norm2(h + ffn(h)). Parallel: out = x + attn(norm1(x)) + ffn(norm2(x))."""
    def attn(z):
        return attention(p, cfg, z, cos, sin, offset, probe=probe)

    if cfg.layout == "parallel":
        return x + attn(norm(p, cfg, "norm1", x)) + ffn(p, cfg, norm(p, cfg, "norm2", x))
    if cfg.layout == "post":
        h = norm(p, cfg, "norm1", x + attn(x))
        return norm(p, cfg, "norm2", h + ffn(p, cfg, h))
    h = x + attn(norm(p, cfg, "norm1", x))
    return h + ffn(p, cfg, norm(p, cfg, "norm2", h))
