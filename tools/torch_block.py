"""The pre-norm Llama block in plain PyTorch eager, for benchmarks: the reference speed of a mature engine.

Weights come from a tinygrad_block block's parameters (same names), so all three implementations compute
the same function.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def rms_norm(x, g, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def rope_cos_sin(L, d_head, theta, dtype, device="cpu"):
    inv_freq = theta ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    angles = torch.arange(L, dtype=torch.float64)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)                      # (L, d_head)
    return angles.cos().to(device, dtype), angles.sin().to(device, dtype)


def block_forward(x, p, cfg, cos, sin):
    """h = x + attn(rmsnorm(x)); out = h + swiglu(rmsnorm(h)) with causal GQA and RoPE."""
    B, L, d = x.shape
    H, H_kv, d_head = cfg.n_heads, cfg.n_kv_heads, cfg.d_head
    n = rms_norm(x, p["norm1.weight"], cfg.norm_eps)
    q = F.linear(n, p["attn.q_proj.weight"]).view(B, L, H, d_head).transpose(1, 2)
    k = F.linear(n, p["attn.k_proj.weight"]).view(B, L, H_kv, d_head).transpose(1, 2)
    v = F.linear(n, p["attn.v_proj.weight"]).view(B, L, H_kv, d_head).transpose(1, 2)
    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    k, v = k.repeat_interleave(H // H_kv, dim=1), v.repeat_interleave(H // H_kv, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)
    mask = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1)
    attn = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
    h = x + F.linear(attn.transpose(1, 2).reshape(B, L, d), p["attn.o_proj.weight"])
    n2 = rms_norm(h, p["norm2.weight"], cfg.norm_eps)
    ffn = F.linear(F.silu(F.linear(n2, p["ffn.gate_proj.weight"])) * F.linear(n2, p["ffn.up_proj.weight"]),
                   p["ffn.down_proj.weight"])
    return h + ffn
