"""Four deliberately wrong variants, from the curriculum's "Common Pitfalls". Each has the signature of
the correct function it spoils and runs without complaint; only a check against the right answer (tests) or
finite differences catches it. The wrong line is marked `# PITFALL`.
"""
from __future__ import annotations

from dataclasses import replace

from .attention import (attention_backward, causal_mask, check_heads, merge_heads, qkv_backward, repeat_kv,
                        sdpa_backward, sdpa_forward, split_heads)
from .block import block_weights, ffn_sublayer_backward, norm_backward, post_norm_forward
from .common import flatten
from .linear import Linear, linear_backward, linear_forward
from .rope import rope_forward


def post_norm_instead_of_pre_norm(x, params: dict, cfg, offset: int = 0):
    """Pitfall 1, spoiling block_forward for a pre-norm config: normalise after the residual add,
    h = norm1(x + attn(x)), so the residual stream itself is renormalised and the highway is gone.
    Returns (out, cache); block_backward differentiates it (correctly, for the wrong block)."""
    out, cache = post_norm_forward(x, block_weights(params, cfg), cfg, offset)   # PITFALL: pre_norm_forward was meant
    return out, {**cache, "cfg": replace(cfg, layout="post")}   # the block that ran, for block_backward


def rope_before_head_split(x, q_proj: Linear, k_proj: Linear, v_proj: Linear, o_proj: Linear, n_heads: int,
                           n_kv_heads: int, causal: bool = True, rope_theta: float | None = 10000.0, offset: int = 0,
                           frozen: bool = False):
    """Pitfall 2, spoiling attention_forward: RoPE on the flat (B, L, n * d_head) projection, so dimension i
    pairs with i + n*d_head/2 (in another head) at frequencies for a head n times wider; then the split.
    Returns (out, None): a wrong forward gets no backward."""
    check_heads(x, n_heads, n_kv_heads)
    G = n_heads // n_kv_heads
    q, _ = linear_forward(x, *q_proj, frozen=frozen)                     # (B, L, n_heads * d_head)
    k, _ = linear_forward(x, *k_proj, frozen=frozen)                     # (B, L, n_kv_heads * d_head)
    v, _ = linear_forward(x, *v_proj, frozen=frozen)
    if rope_theta is not None:                                            # PITFALL: before the head split
        q, k = rope_forward(q, rope_theta, offset)[0], rope_forward(k, rope_theta, offset)[0]
    q, k, v = split_heads(q, n_heads), split_heads(k, n_kv_heads), split_heads(v, n_kv_heads)
    mask = causal_mask(x.shape[1], q) if causal else None
    o, _ = sdpa_forward(q, repeat_kv(k, G), repeat_kv(v, G), mask)        # (B, n_heads, L, d_head)
    return linear_forward(merge_heads(o), *o_proj, frozen=frozen)[0], None


def drop_residual_grad(dout, cache):
    """Pitfall 3, spoiling block_backward (pre-norm): at out = h + ffn(norm2(h)) only the FFN path's gradient
    reaches h; the identity path's `dout` is dropped. Every gradient upstream of h (dx, norm1, attention) is
    wrong; the FFN's and norm2's are still right."""
    c, cfg = cache, cache["cfg"]
    d_f, g_ffn = ffn_sublayer_backward(dout, c["ffn"], cfg)
    dh_ffn, g_norm2 = norm_backward(d_f, c["norm2"], cfg)
    dh = dh_ffn                                              # PITFALL: should be dout + dh_ffn
    d_a, g_attn = attention_backward(dh, c["attn"])
    dx_attn, g_norm1 = norm_backward(d_a, c["norm1"], cfg)
    return dh + dx_attn, flatten({"norm1": g_norm1, "attn": g_attn, "norm2": g_norm2, "ffn": g_ffn})


def kv_grad_reshaped_with_d_model(dout, cache):
    """Pitfall 4, spoiling attention_backward: MHA code reused under GQA. dK, dV come back per query head
    (B, n_heads, L, d_head), are never summed over the group, and are flattened with d_model = n_heads * d_head;
    to fit Wk, Wv of n_kv_heads * d_head rows, the first n_kv_heads * d_head columns are kept. So KV head j gets
    query head j's gradient alone. Harmless under MHA (G = 1), wrong under GQA and MQA."""
    c = cache
    d_o, g_o = linear_backward(dout, c["o_proj"])                         # (B, L, n_heads * d_head)
    dq, dk, dv = sdpa_backward(split_heads(d_o, c["n_heads"]), c["sdpa"])  # (B, n_heads, L, d_head)
    n_kv_heads = c["n_heads"] // c["G"]
    kv_width = n_kv_heads * dk.shape[-1]
    dk = split_heads(merge_heads(dk)[..., :kv_width], n_kv_heads)        # PITFALL: no sum over the group
    dv = split_heads(merge_heads(dv)[..., :kv_width], n_kv_heads)        # (B, n_kv_heads, L, d_head)
    dx, grads = qkv_backward(dq, dk, dv, c)
    return dx, {**grads, "o_proj": g_o}

