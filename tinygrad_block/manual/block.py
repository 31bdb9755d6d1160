"""The whole transformer block, forward and backward, from the pairs in this package.

    pre-norm  (Llama, GPT-2):  h = x + attn(norm1(x));     out = h + ffn(norm2(h))
    post-norm (2017, BERT):    h = norm1(x + attn(x));     out = norm2(h + ffn(h))
    parallel  (GPT-NeoX, GPT-J style, two norms):          out = x + attn(norm1(x)) + ffn(norm2(x))

params are keyed as the autograd block's named_parameters ('norm1.weight', 'attn.q_proj.weight',
'ffn.down_proj.bias', 'attn.v_proj.lora_A', ...); cfg is any object with the block config's attributes.
Backward follows the forward in reverse; wherever a value fed two places, its two gradients add.
"""
from __future__ import annotations

from .attention import attention_backward, attention_forward
from .common import under, with_prefix
from .ffn import ffn_backward, ffn_forward, swiglu_backward, swiglu_forward
from .norms import layernorm_backward, layernorm_forward, rmsnorm_backward, rmsnorm_forward


def block_forward(x, params: dict, cfg, offset: int = 0):
    """out = block(x) for x: (B, L, d_model), laid out as cfg says (pre, post or parallel; see the module
    docstring). offset: the position of token 0, for RoPE. Returns (out, cache)."""
    layout = block_layout(cfg)
    out, cache = LAYOUTS[layout][0](x, params, cfg, offset)
    return out, {**cache, "layout": layout, "lora": bool(cfg.lora_rank)}


def block_backward(dout, cache):
    """(dx, grads): grads keyed like params. With LoRA (cfg.lora_rank > 0) every base parameter, projections
    and norms alike, is frozen: grads holds only the adapters' lora_A and lora_B."""
    dx, grads = LAYOUTS[cache["layout"]][1](dout, cache)
    if cache["lora"]:
        grads = {k: g for k, g in grads.items() if k.endswith(("lora_A", "lora_B"))}
    return dx, grads


def block_layout(cfg) -> str:
    """'pre', 'post' or 'parallel', after checking the config names things this block knows (no QK-norm, no
    RoPE scaling: the autograd block has those)."""
    if cfg.layout not in ("pre", "post", "parallel") or cfg.norm not in ("rms", "layer"):
        raise ValueError(f"block: norm={cfg.norm!r}, layout={cfg.layout!r}; "
                         "expected norm 'rms' or 'layer' and layout 'pre', 'post' or 'parallel'")
    if getattr(cfg, "qk_norm", False) or getattr(cfg, "rope_scaling", ()):
        raise ValueError(f"block: the hand-derived block has neither QK-norm nor RoPE scaling; got qk_norm="
                         f"{getattr(cfg, 'qk_norm', False)}, rope_scaling={getattr(cfg, 'rope_scaling', ())!r}")
    return cfg.layout


# ---- pre-norm ----
def pre_norm_forward(x, params, cfg, offset=0):
    """h = x + attn(norm1(x));   out = h + ffn(norm2(h))"""
    a, c_norm1 = norm_forward(x, params, "norm1", cfg)
    attn, c_attn = attn_forward(a, params, cfg, offset)
    h = x + attn                                             # residual 1
    f, c_norm2 = norm_forward(h, params, "norm2", cfg)
    ffn, c_ffn = ffn_sublayer_forward(f, params, cfg)
    return h + ffn, {"norm1": c_norm1, "attn": c_attn, "norm2": c_norm2, "ffn": c_ffn}   # residual 2


def pre_norm_backward(dout, cache):
    """dh = dout + norm2'(ffn'(dout));   dx = dh + norm1'(attn'(dh))   (identity path + sublayer path)"""
    c = cache
    d_f, g_ffn = ffn_sublayer_backward(dout, c["ffn"])
    dh_ffn, g_norm2 = norm_backward(d_f, c["norm2"])
    dh = dout + dh_ffn                                       # residual 2: both paths reach h
    d_a, g_attn = attn_backward(dh, c["attn"])
    dx_attn, g_norm1 = norm_backward(d_a, c["norm1"])
    return dh + dx_attn, {**g_norm1, **g_attn, **g_norm2, **g_ffn}   # residual 1


# ---- post-norm ----
def post_norm_forward(x, params, cfg, offset=0):
    """h = norm1(x + attn(x));   out = norm2(h + ffn(h))"""
    attn, c_attn = attn_forward(x, params, cfg, offset)
    h, c_norm1 = norm_forward(x + attn, params, "norm1", cfg)
    ffn, c_ffn = ffn_sublayer_forward(h, params, cfg)
    out, c_norm2 = norm_forward(h + ffn, params, "norm2", cfg)
    return out, {"norm1": c_norm1, "attn": c_attn, "norm2": c_norm2, "ffn": c_ffn}


def post_norm_backward(dout, cache):
    """d_r2 = norm2'(dout);  dh = d_r2 + ffn'(d_r2);  d_r1 = norm1'(dh);  dx = d_r1 + attn'(d_r1)
    (the residual gradient now passes through each norm's backward: no clean highway)."""
    c = cache
    d_r2, g_norm2 = norm_backward(dout, c["norm2"])          # gradient of h + ffn(h)
    dh_ffn, g_ffn = ffn_sublayer_backward(d_r2, c["ffn"])
    d_r1, g_norm1 = norm_backward(d_r2 + dh_ffn, c["norm1"])  # gradient of x + attn(x)
    dx_attn, g_attn = attn_backward(d_r1, c["attn"])
    return d_r1 + dx_attn, {**g_norm1, **g_attn, **g_norm2, **g_ffn}


# ---- parallel ----
def parallel_forward(x, params, cfg, offset=0):
    """out = x + attn(norm1(x)) + ffn(norm2(x))"""
    a, c_norm1 = norm_forward(x, params, "norm1", cfg)
    f, c_norm2 = norm_forward(x, params, "norm2", cfg)
    attn, c_attn = attn_forward(a, params, cfg, offset)
    ffn, c_ffn = ffn_sublayer_forward(f, params, cfg)
    return x + attn + ffn, {"norm1": c_norm1, "attn": c_attn, "norm2": c_norm2, "ffn": c_ffn}


def parallel_backward(dout, cache):
    """dx = dout + norm1'(attn'(dout)) + norm2'(ffn'(dout))   (x feeds three paths)"""
    c = cache
    d_a, g_attn = attn_backward(dout, c["attn"])
    d_f, g_ffn = ffn_sublayer_backward(dout, c["ffn"])
    dx_attn, g_norm1 = norm_backward(d_a, c["norm1"])
    dx_ffn, g_norm2 = norm_backward(d_f, c["norm2"])
    return dout + dx_attn + dx_ffn, {**g_norm1, **g_attn, **g_norm2, **g_ffn}


# layout -> (forward, backward)
LAYOUTS = {
    "pre": (pre_norm_forward, pre_norm_backward),
    "post": (post_norm_forward, post_norm_backward),
    "parallel": (parallel_forward, parallel_backward),
}


# ---- the three sublayers, looked up in params by name and configured from cfg ----
def lora(cfg) -> tuple[float, bool]:
    """(lora_scale, frozen) for every projection: alpha / r, and whether the block is LoRA-tuned
    (lora_rank > 0), which freezes the base weights."""
    return (cfg.lora_alpha / cfg.lora_rank if cfg.lora_rank else 1.0), bool(cfg.lora_rank)


def norm_forward(x, params, name, cfg):
    """RMSNorm or LayerNorm (cfg.norm) with params['<name>.weight'] (and '<name>.bias' if present)."""
    p = under(name, params)
    if cfg.norm == "rms":
        out, c = rmsnorm_forward(x, p["weight"], cfg.norm_eps)
    else:
        out, c = layernorm_forward(x, p["weight"], p.get("bias"), cfg.norm_eps)
    return out, (name, cfg.norm, c)


def norm_backward(dout, cache):
    """(dx, grads named '<name>.weight', '<name>.bias') through the norm norm_forward ran."""
    name, kind, c = cache
    dx, g = (rmsnorm_backward if kind == "rms" else layernorm_backward)(dout, c)
    return dx, with_prefix(name, g)


def attn_forward(x, params, cfg, offset):
    """attention_forward on params under 'attn.', heads, mask and RoPE from cfg."""
    rope_theta = cfg.rope_theta if cfg.rope else None
    return attention_forward(x, under("attn", params), cfg.n_heads, cfg.n_kv_heads, cfg.causal, rope_theta,
                             offset, *lora(cfg))


def attn_backward(dout, cache):
    """(dx, grads named 'attn.*')"""
    dx, g = attention_backward(dout, cache)
    return dx, with_prefix("attn", g)


def ffn_sublayer_forward(x, params, cfg):
    """SwiGLU (cfg.ffn == 'swiglu') or the classic FFN with activation cfg.ffn, on params under 'ffn.'."""
    p, (s, frozen) = under("ffn", params), lora(cfg)
    out, c = swiglu_forward(x, p, s, frozen) if cfg.ffn == "swiglu" else ffn_forward(x, p, cfg.ffn, s, frozen)
    return out, (cfg.ffn, c)


def ffn_sublayer_backward(dout, cache):
    """(dx, grads named 'ffn.*')"""
    kind, c = cache
    dx, g = (swiglu_backward if kind == "swiglu" else ffn_backward)(dout, c)
    return dx, with_prefix("ffn", g)
