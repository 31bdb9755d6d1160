"""The whole transformer block, forward and backward, from the pairs in this package.

    pre-norm  (Llama, GPT-2):  h = x + attn(norm1(x));     out = h + ffn(norm2(h))
    post-norm (2017, BERT):    h = norm1(x + attn(x));     out = norm2(h + ffn(h))
    parallel  (GPT-NeoX, GPT-J style, two norms):          out = x + attn(norm1(x)) + ffn(norm2(x))

params are keyed as the autograd block's named_parameters ('norm1.weight', 'attn.q_proj.weight',
'ffn.down_proj.bias', 'attn.v_proj.lora_A', ...): the block's weight struct. block_weights unpacks it once into
each layer's own arrays, and every layer is called with those. cfg is any object with the block config's
attributes; cfg.layout picks the layout, as in nn.make_block. Backward follows the forward in reverse;
wherever a value fed two places, its two gradients add.
"""
from __future__ import annotations

from typing import NamedTuple

from ..nn.config import FFNS
from .attention import attention_backward, attention_forward
from .common import flatten
from .ffn import ffn_backward, ffn_forward, swiglu_backward, swiglu_forward
from .linear import Adapter, Linear
from .norms import layernorm_backward, layernorm_forward, rmsnorm_backward, rmsnorm_forward


def block_forward(x, params: dict, cfg, offset: int = 0):
    """out = block(x) for x: (B, L, d_model), laid out as cfg.layout says ('pre', 'post' or 'parallel'; see
    the module docstring). offset: the position of token 0, for RoPE. Returns (out, cache)."""
    check_config(cfg)
    w = block_weights(params, cfg)                           # each layer's own arrays, looked up once
    if cfg.layout == "pre":
        return pre_norm_forward(x, w, cfg, offset)
    if cfg.layout == "post":
        return post_norm_forward(x, w, cfg, offset)
    return parallel_forward(x, w, cfg, offset)


def block_backward(dout, cache):
    """(dx, grads): grads keyed like params. With LoRA (cfg.lora_rank > 0) every base parameter, projections
    and norms alike, is frozen: grads holds only the adapters' lora_A and lora_B."""
    cfg = cache["cfg"]
    if cfg.layout == "pre":
        dx, grads = pre_norm_backward(dout, cache)
    elif cfg.layout == "post":
        dx, grads = post_norm_backward(dout, cache)
    else:
        dx, grads = parallel_backward(dout, cache)
    grads = flatten(grads)                                   # named as params: 'attn.q_proj.weight', ...
    if cfg.lora_rank:
        grads = {k: g for k, g in grads.items() if k.endswith(("lora_A", "lora_B"))}
    return dx, grads


LAYOUTS = ("pre", "post", "parallel")


def check_config(cfg) -> None:
    """Refuse a config this block does not know: layouts other than 'pre', 'post', 'parallel' (DeepNorm is the
    autograd block's), norms other than those of NORMS, and QK-norm or RoPE scaling (the autograd block has
    those)."""
    if cfg.layout not in LAYOUTS or cfg.norm not in NORMS:
        raise ValueError(f"block: norm={cfg.norm!r}, layout={cfg.layout!r}; "
                         f"expected norm {' or '.join(map(repr, NORMS))} and layout 'pre', 'post' or 'parallel'")
    if getattr(cfg, "qk_norm", False) or getattr(cfg, "rope_scaling", ()):
        raise ValueError(f"block: the hand-derived block has neither QK-norm nor RoPE scaling; got qk_norm="
                         f"{getattr(cfg, 'qk_norm', False)}, rope_scaling={getattr(cfg, 'rope_scaling', ())!r}")


# ---- the weight struct, unpacked ----
class BlockWeights(NamedTuple):
    """Each layer's own arrays. norm1, norm2: (weight, bias or None); attn: the Linear q_proj, k_proj, v_proj,
    o_proj; ffn: the Linear gate_proj (SwiGLU only), up_proj, down_proj."""
    norm1: tuple
    attn: tuple
    norm2: tuple
    ffn: tuple


def block_weights(params: dict, cfg) -> BlockWeights:
    """Unpack params, keyed as nn's named_parameters, into each layer's arrays: the one place that reads names.
    A projection with '<name>.lora_A' and '.lora_B' gets an Adapter of scale lora_alpha / lora_rank."""
    def linear(name: str) -> Linear:
        adapter = None
        if f"{name}.lora_A" in params:
            if not cfg.lora_rank:
                raise ValueError(f"block: params hold {name}.lora_A but the config has lora_rank=0; set lora_rank "
                                 "(and lora_alpha) to the adapters' rank, or leave the adapters out")
            adapter = Adapter(params[f"{name}.lora_A"], params[f"{name}.lora_B"], cfg.lora_alpha / cfg.lora_rank)
        return Linear(params[f"{name}.weight"], params.get(f"{name}.bias"), adapter)

    ffn = ("gate_proj", "up_proj", "down_proj") if FFNS[cfg.ffn][1] else ("up_proj", "down_proj")
    return BlockWeights(norm1=(params["norm1.weight"], params.get("norm1.bias")),
                        attn=tuple(linear(f"attn.{name}") for name in ("q_proj", "k_proj", "v_proj", "o_proj")),
                        norm2=(params["norm2.weight"], params.get("norm2.bias")),
                        ffn=tuple(linear(f"ffn.{name}") for name in ffn))


# ---- pre-norm ----
def pre_norm_forward(x, w: BlockWeights, cfg, offset: int = 0):
    """h = x + attn(norm1(x));   out = h + ffn(norm2(h))"""
    a, c_norm1 = norm_forward(x, w.norm1, cfg)
    attn, c_attn = attn_forward(a, w.attn, cfg, offset)
    h = x + attn                                             # residual 1
    f, c_norm2 = norm_forward(h, w.norm2, cfg)
    ffn, c_ffn = ffn_sublayer_forward(f, w.ffn, cfg)
    return h + ffn, {"norm1": c_norm1, "attn": c_attn, "norm2": c_norm2, "ffn": c_ffn, "cfg": cfg}   # residual 2


def pre_norm_backward(dout, cache):
    """dh = dout + norm2'(ffn'(dout));   dx = dh + norm1'(attn'(dh))   (identity path + sublayer path)"""
    c, cfg = cache, cache["cfg"]
    d_f, g_ffn = ffn_sublayer_backward(dout, c["ffn"], cfg)
    dh_ffn, g_norm2 = norm_backward(d_f, c["norm2"], cfg)
    dh = dout + dh_ffn                                       # residual 2: both paths reach h
    d_a, g_attn = attention_backward(dh, c["attn"])
    dx_attn, g_norm1 = norm_backward(d_a, c["norm1"], cfg)
    return dh + dx_attn, {"norm1": g_norm1, "attn": g_attn, "norm2": g_norm2, "ffn": g_ffn}   # residual 1


# ---- post-norm ----
def post_norm_forward(x, w: BlockWeights, cfg, offset: int = 0):
    """h = norm1(x + attn(x));   out = norm2(h + ffn(h))"""
    attn, c_attn = attn_forward(x, w.attn, cfg, offset)
    h, c_norm1 = norm_forward(x + attn, w.norm1, cfg)
    ffn, c_ffn = ffn_sublayer_forward(h, w.ffn, cfg)
    out, c_norm2 = norm_forward(h + ffn, w.norm2, cfg)
    return out, {"norm1": c_norm1, "attn": c_attn, "norm2": c_norm2, "ffn": c_ffn, "cfg": cfg}


def post_norm_backward(dout, cache):
    """d_r2 = norm2'(dout);  dh = d_r2 + ffn'(d_r2);  d_r1 = norm1'(dh);  dx = d_r1 + attn'(d_r1)
    (the residual gradient now passes through each norm's backward: no clean highway)."""
    c, cfg = cache, cache["cfg"]
    d_r2, g_norm2 = norm_backward(dout, c["norm2"], cfg)     # gradient of h + ffn(h)
    dh_ffn, g_ffn = ffn_sublayer_backward(d_r2, c["ffn"], cfg)
    d_r1, g_norm1 = norm_backward(d_r2 + dh_ffn, c["norm1"], cfg)   # gradient of x + attn(x)
    dx_attn, g_attn = attention_backward(d_r1, c["attn"])
    return d_r1 + dx_attn, {"norm1": g_norm1, "attn": g_attn, "norm2": g_norm2, "ffn": g_ffn}


# ---- parallel ----
def parallel_forward(x, w: BlockWeights, cfg, offset: int = 0):
    """out = x + attn(norm1(x)) + ffn(norm2(x))"""
    a, c_norm1 = norm_forward(x, w.norm1, cfg)
    f, c_norm2 = norm_forward(x, w.norm2, cfg)
    attn, c_attn = attn_forward(a, w.attn, cfg, offset)
    ffn, c_ffn = ffn_sublayer_forward(f, w.ffn, cfg)
    return x + attn + ffn, {"norm1": c_norm1, "attn": c_attn, "norm2": c_norm2, "ffn": c_ffn, "cfg": cfg}


def parallel_backward(dout, cache):
    """dx = dout + norm1'(attn'(dout)) + norm2'(ffn'(dout))   (x feeds three paths)"""
    c, cfg = cache, cache["cfg"]
    d_a, g_attn = attention_backward(dout, c["attn"])
    d_f, g_ffn = ffn_sublayer_backward(dout, c["ffn"], cfg)
    dx_attn, g_norm1 = norm_backward(d_a, c["norm1"], cfg)
    dx_ffn, g_norm2 = norm_backward(d_f, c["norm2"], cfg)
    return dout + dx_attn + dx_ffn, {"norm1": g_norm1, "attn": g_attn, "norm2": g_norm2, "ffn": g_ffn}


# ---- the three sublayers, as cfg configures them ----
NORMS = {  # cfg.norm -> (forward(x, weight, bias, eps), backward(dout, cache), the gain's offset)
    "rms": (lambda x, w, b, eps: rmsnorm_forward(x, w, eps), rmsnorm_backward, 0.0),
    "rms1p": (lambda x, w, b, eps: rmsnorm_forward(x, 1.0 + w, eps), rmsnorm_backward, 1.0),   # d(1 + w) = dw
    "layer": (layernorm_forward, layernorm_backward, 0.0)}


def norm_forward(x, weights: tuple, cfg):
    """The norm cfg.norm names (NORMS) with weights = (weight, bias or None): RMSNorm (its gain w, or 1 + w) or
    LayerNorm; RMSNorm has no bias."""
    weight, bias = weights
    return NORMS[cfg.norm][0](x, weight, bias, cfg.norm_eps)


def norm_backward(dout, cache, cfg):
    """(dx, {'weight': .., 'bias': ..}) through the norm norm_forward ran."""
    return NORMS[cfg.norm][1](dout, cache)


def attn_forward(x, projections: tuple, cfg, offset: int):
    """attention_forward with projections = (q_proj, k_proj, v_proj, o_proj), heads, mask and RoPE from cfg;
    with LoRA (cfg.lora_rank > 0) the base weights are frozen."""
    rope_theta = cfg.rope_theta if cfg.rope else None
    return attention_forward(x, *projections, cfg.n_heads, cfg.n_kv_heads, cfg.causal, rope_theta, offset,
                             frozen=bool(cfg.lora_rank))


def ffn_sublayer_forward(x, projections: tuple, cfg):
    """Gated (SwiGLU, GeGLU: projections = (gate_proj, up_proj, down_proj)) or the classic FFN (projections =
    (up_proj, down_proj)), as config.FFNS says of cfg.ffn; with LoRA the base weights are frozen."""
    act, gated = FFNS[cfg.ffn]
    if gated:
        return swiglu_forward(x, *projections, frozen=bool(cfg.lora_rank), act=act)
    return ffn_forward(x, *projections, act, frozen=bool(cfg.lora_rank))


def ffn_sublayer_backward(dout, cache, cfg):
    """(dx, one gradient dict per projection) through the FFN ffn_sublayer_forward ran."""
    if FFNS[cfg.ffn][1]:
        return swiglu_backward(dout, cache)
    return ffn_backward(dout, cache)
