"""Multi-head attention with grouped KV heads (MHA, GQA, MQA), causal or not, RoPE optional.

Query head h reads KV head h // G, G = n_heads // n_kv_heads (Hugging Face's repeat_kv), so backward sums
dK and dV over each group of G query heads. params: 'q_proj.weight', 'k_proj.weight', 'v_proj.weight',
'o_proj.weight' (each optionally with '.bias', '.lora_A', '.lora_B').
"""
from __future__ import annotations

import math

from .activations import softmax_backward, softmax_forward
from .common import with_prefix, xp_of
from .linear import linear_backward, proj_forward
from .rope import rope_backward, rope_forward


def split_heads(t, n: int):
    """(B, L, n * d_head) -> (B, n, L, d_head)"""
    B, L, width = t.shape
    return t.reshape(B, L, n, width // n).transpose(0, 2, 1, 3)       # (B, n, L, d_head)


def merge_heads(t):
    """(B, n, L, d_head) -> (B, L, n * d_head)"""
    B, n, L, d_head = t.shape
    return t.transpose(0, 2, 1, 3).reshape(B, L, n * d_head)           # (B, L, n * d_head)


def repeat_kv(t, G: int):
    """(B, n_kv_heads, L, d_head) -> (B, n_kv_heads * G, L, d_head): each KV head repeated for its G query heads."""
    return xp_of(t).repeat(t, G, axis=1)


def repeat_kv_backward(dout, G: int):
    """(B, n_kv_heads * G, L, d_head) -> (B, n_kv_heads, L, d_head): sum the gradient over each group."""
    B, n_heads, L, d_head = dout.shape
    return dout.reshape(B, n_heads // G, G, L, d_head).sum(axis=2)     # (B, n_kv_heads, L, d_head)


def sdpa_forward(q, k, v, causal: bool = True):
    """out = softmax(q k^T / sqrt(d_head) + mask) v,  mask = -inf where key j > query i (if causal)
    q, k, v: (B, H, L, d_head) -> scores, p: (B, H, L, L) -> out: (B, H, L, d_head)"""
    xp = xp_of(q)
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = (q @ k.swapaxes(-1, -2)) * scale                               # (B, H, L, L)
    if causal:
        L = q.shape[-2]
        s = s + xp.triu(xp.full((L, L), -xp.inf, dtype=s.dtype), k=1)    # (L, L): -inf above the diagonal
    p, c_soft = softmax_forward(s)
    return p @ v, (q, k, v, p, c_soft, scale)


def sdpa_backward(dout, cache):
    """dv = p^T dout;  dp = dout v^T;  ds = softmax'(dp);  dq = ds k * scale;  dk = ds^T q * scale
    (masked entries have p = 0, so their ds is 0: nothing flows through a masked key)."""
    q, k, v, p, c_soft, scale = cache
    dv = p.swapaxes(-1, -2) @ dout                                     # (B, H, L, d_head)
    ds = softmax_backward(dout @ v.swapaxes(-1, -2), c_soft) * scale   # (B, H, L, L)
    return ds @ k, ds.swapaxes(-1, -2) @ q, dv


def attention_forward(x, params: dict, n_heads: int, n_kv_heads: int, causal: bool = True,
                      rope_theta: float | None = 10000.0, offset: int = 0, lora_scale: float = 1.0,
                      frozen: bool = False):
    """out = o_proj(merge(sdpa(rope(q), rope(k), v)))  with q = split(x Wq^T), k = split(x Wk^T), v = split(x Wv^T)
    x: (B, L, d_model); rope_theta None: no rotary embedding (GPT-2, BERT); offset: position of token 0;
    lora_scale, frozen: as in linear_forward, for each projection."""
    check_heads(x, n_heads, n_kv_heads)
    G = n_heads // n_kv_heads
    q, k, v, c_qkv = _qkv_forward(x, params, n_heads, n_kv_heads, rope_theta, offset, lora_scale, frozen)
    o, c_sdpa = sdpa_forward(q, repeat_kv(k, G), repeat_kv(v, G), causal)   # (B, n_heads, L, d_head)
    out, c_o = proj_forward(merge_heads(o), params, "o_proj", lora_scale, frozen)   # (B, L, d_model)
    return out, {**c_qkv, "G": G, "sdpa": c_sdpa, "o_proj": c_o}


def attention_backward(dout, cache):
    """d_o = dout Wo, split into heads -> sdpa backward -> dK, dV summed over each group of G query heads
    -> RoPE backward on dq, dk -> merge heads -> q/k/v projection backward; dx = dq Wq + dk Wk + dv Wv."""
    c = cache
    d_o, g_o = linear_backward(dout, c["o_proj"])                             # (B, L, n_heads * d_head)
    dq, dk, dv = sdpa_backward(split_heads(d_o, c["n_heads"]), c["sdpa"])     # (B, n_heads, L, d_head)
    dk, dv = repeat_kv_backward(dk, c["G"]), repeat_kv_backward(dv, c["G"])   # (B, n_kv_heads, L, d_head)
    dx, grads = qkv_backward(dq, dk, dv, c)
    return dx, {**grads, **with_prefix("o_proj", g_o)}


def _qkv_forward(x, params, n_heads, n_kv_heads, rope_theta, offset, lora_scale, frozen):
    """Project x to q, k, v, split heads, rotate q and k. Returns q: (B, n_heads, L, d_head),
    k, v: (B, n_kv_heads, L, d_head) and their cache."""
    q, c_q = proj_forward(x, params, "q_proj", lora_scale, frozen)
    k, c_k = proj_forward(x, params, "k_proj", lora_scale, frozen)
    v, c_v = proj_forward(x, params, "v_proj", lora_scale, frozen)
    q, k, v = split_heads(q, n_heads), split_heads(k, n_kv_heads), split_heads(v, n_kv_heads)
    c_rope = None
    if rope_theta is not None:
        (q, c_rope), (k, _) = rope_forward(q, rope_theta, offset), rope_forward(k, rope_theta, offset)
    return q, k, v, {"q_proj": c_q, "k_proj": c_k, "v_proj": c_v, "rope": c_rope, "n_heads": n_heads}


def qkv_backward(dq, dk, dv, cache):
    """From per-head dq (B, n_heads, L, d_head) and dk, dv (B, n_kv_heads, L, d_head) back to dx: undo
    RoPE (same angles for q and k), merge heads, and add the three projections' dx."""
    if cache["rope"] is not None:
        dq, dk = rope_backward(dq, cache["rope"]), rope_backward(dk, cache["rope"])
    dx, grads = 0.0, {}
    for name, d in (("q_proj", dq), ("k_proj", dk), ("v_proj", dv)):
        dx_i, g = linear_backward(merge_heads(d), cache[name])             # (B, L, n * d_head)
        dx, grads = dx + dx_i, {**grads, **with_prefix(name, g)}
    return dx, grads


def check_heads(x, n_heads: int, n_kv_heads: int):
    """Raise ValueError unless x is (B, L, d_model) with n_heads | d_model and n_kv_heads | n_heads."""
    d_model = x.shape[-1]
    if x.ndim != 3 or d_model % n_heads or n_heads % n_kv_heads:
        raise ValueError(f"attention: x of shape {x.shape} with n_heads={n_heads}, n_kv_heads={n_kv_heads}; "
                         "expected x: (B, L, d_model) with d_model divisible by n_heads and n_heads by n_kv_heads")
