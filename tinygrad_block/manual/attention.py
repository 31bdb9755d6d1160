"""Multi-head attention with grouped KV heads (MHA, GQA, MQA), causal or not, RoPE optional; named as
nn/attention.py names its pieces (causal_mask, sdpa, repeat_kv).

Query head h reads KV head h // G, G = n_heads // n_kv_heads (Hugging Face's repeat_kv), so backward sums
dK and dV over each group of G query heads. The four projections q_proj, k_proj, v_proj, o_proj are each their
own argument, a `Linear(weight, bias, adapter)`.
"""
from __future__ import annotations

import math

from .activations import softmax_backward, softmax_forward
from .common import xp_of
from .linear import Linear, linear_backward, linear_forward
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


def causal_mask(L: int, like):
    """(L, L) additive mask in `like`'s dtype and array module: 0 where key j <= query i, -inf where j > i (the
    future). Added to the scores, it zeroes those softmax weights."""
    xp = xp_of(like)
    return xp.triu(xp.full((L, L), -xp.inf, dtype=like.dtype), k=1)   # (L, L): -inf above the diagonal


def sdpa_forward(q, k, v, mask=None):
    """out = softmax(q k^T / sqrt(d_head) + mask) v      q, k, v: (B, H, L, d_head), one KV head per query head
    (repeat_kv first); mask: (L, L) additive, or None -> scores, p: (B, H, L, L) -> out: (B, H, L, d_head)"""
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = (q @ k.swapaxes(-1, -2)) * scale                               # (B, H, L, L)
    if mask is not None:
        s = s + mask                                                   # -inf where a key is in the future
    p, c_soft = softmax_forward(s)
    return p @ v, (q, k, v, p, c_soft, scale)


def sdpa_backward(dout, cache):
    """dv = p^T dout;  dp = dout v^T;  ds = softmax'(dp);  dq = ds k * scale;  dk = ds^T q * scale
    (masked entries have p = 0, so their ds is 0: nothing flows through a masked key). Returns (dq, dk, dv)."""
    q, k, v, p, c_soft, scale = cache
    dv = p.swapaxes(-1, -2) @ dout                                     # (B, H, L, d_head)
    ds = softmax_backward(dout @ v.swapaxes(-1, -2), c_soft) * scale   # (B, H, L, L)
    return ds @ k, ds.swapaxes(-1, -2) @ q, dv


def attention_forward(x, q_proj: Linear, k_proj: Linear, v_proj: Linear, o_proj: Linear, n_heads: int,
                      n_kv_heads: int, causal: bool = True, rope_theta: float | None = 10000.0, offset: int = 0,
                      frozen: bool = False):
    """out = o_proj(merge(sdpa(rope(q), rope(k), v, mask)))  with q = split(x Wq^T), k = split(x Wk^T),
    v = split(x Wv^T);  x: (B, L, d_model); Wq: (n_heads d_head, d_model), Wk, Wv: (n_kv_heads d_head, d_model),
    Wo: (d_model, n_heads d_head), d_head read from their shapes (d_model / n_heads unless head_dim differs);
    mask: causal_mask if causal; rope_theta None: no rotary embedding (GPT-2, BERT); offset: position of token 0;
    frozen: as in linear_forward, for each projection."""
    check_heads(x, n_heads, n_kv_heads, q_proj, k_proj)
    G = n_heads // n_kv_heads
    q, c_q = linear_forward(x, *q_proj, frozen=frozen)                 # (B, L, n_heads * d_head)
    k, c_k = linear_forward(x, *k_proj, frozen=frozen)                 # (B, L, n_kv_heads * d_head)
    v, c_v = linear_forward(x, *v_proj, frozen=frozen)
    q, k, v = split_heads(q, n_heads), split_heads(k, n_kv_heads), split_heads(v, n_kv_heads)   # (B, n, L, d_head)
    c_rope = None
    if rope_theta is not None:
        (q, c_rope), (k, _) = rope_forward(q, rope_theta, offset), rope_forward(k, rope_theta, offset)
    mask = causal_mask(x.shape[1], q) if causal else None
    o, c_sdpa = sdpa_forward(q, repeat_kv(k, G), repeat_kv(v, G), mask)          # (B, n_heads, L, d_head)
    out, c_o = linear_forward(merge_heads(o), *o_proj, frozen=frozen)            # (B, L, d_model)
    return out, {"q_proj": c_q, "k_proj": c_k, "v_proj": c_v, "rope": c_rope, "n_heads": n_heads, "G": G,
                 "sdpa": c_sdpa, "o_proj": c_o}


def attention_backward(dout, cache):
    """d_o = dout Wo, split into heads -> sdpa backward -> dK, dV summed over each group of G query heads
    -> RoPE backward on dq, dk -> merge heads -> q/k/v projection backward; dx = dq Wq + dk Wk + dv Wv.
    Returns (dx, {'q_proj': ..., 'k_proj': ..., 'v_proj': ..., 'o_proj': ...}), each as linear_backward's."""
    c = cache
    d_o, g_o = linear_backward(dout, c["o_proj"])                             # (B, L, n_heads * d_head)
    dq, dk, dv = sdpa_backward(split_heads(d_o, c["n_heads"]), c["sdpa"])     # (B, n_heads, L, d_head)
    dk, dv = repeat_kv_backward(dk, c["G"]), repeat_kv_backward(dv, c["G"])   # (B, n_kv_heads, L, d_head)
    dx, grads = qkv_backward(dq, dk, dv, c)
    return dx, {**grads, "o_proj": g_o}


def qkv_backward(dq, dk, dv, cache):
    """From per-head dq (B, n_heads, L, d_head) and dk, dv (B, n_kv_heads, L, d_head) back to dx: undo
    RoPE (same angles for q and k), merge heads, and add the three projections' dx."""
    if cache["rope"] is not None:
        dq, dk = rope_backward(dq, cache["rope"]), rope_backward(dk, cache["rope"])
    dx, grads = 0.0, {}
    for name, d in (("q_proj", dq), ("k_proj", dk), ("v_proj", dv)):
        dx_i, grads[name] = linear_backward(merge_heads(d), cache[name])   # (B, L, n * d_head)
        dx = dx + dx_i
    return dx, grads


def check_heads(x, n_heads: int, n_kv_heads: int, q_proj: Linear | None = None, k_proj: Linear | None = None):
    """Raise ValueError unless x is (B, L, d_model), n_kv_heads | n_heads, and the heads have one width d_head:
    q_proj's n_heads d_head rows and k_proj's n_kv_heads d_head (d_head may differ from d_model / n_heads, as a
    config's head_dim says); without the projections, d_head = d_model / n_heads."""
    d_model = x.shape[-1]
    q_rows = d_model if q_proj is None else q_proj.weight.shape[0]
    kv_rows = q_rows // n_heads * n_kv_heads if k_proj is None else k_proj.weight.shape[0]
    if x.ndim != 3 or q_rows % n_heads or n_heads % n_kv_heads or kv_rows * n_heads != q_rows * n_kv_heads:
        raise ValueError(f"attention: x of shape {x.shape} with n_heads={n_heads}, n_kv_heads={n_kv_heads}, "
                         f"q_proj of {q_rows} rows, k_proj of {kv_rows}; expected x: (B, L, d_model), n_heads dividing "
                         "q_proj's rows (n_heads d_head), n_kv_heads dividing n_heads, and k_proj's rows n_kv_heads "
                         "d_head")
