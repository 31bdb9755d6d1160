"""tinygrad_block.manual: every hand-derived backward against finite differences, every forward (and the
whole block's backward) against the PyTorch reference (tools/torch_block.py), RoPE against Hugging Face's,
a small worked SwiGLU example by hand, and the four pitfalls (manual/pitfalls.py) shown to be wrong.

Finite differences: 4th-order central differences of sum(out * dout) for a fixed random dout, over every
element of every input and parameter, in float64; the norm-wise relative error must be <= 1e-8. Sizes are
tiny (B=2, L=4, d_model=8 or 16, d_ff=12) so the whole file runs in seconds.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import rel_err

import tinygrad_block.manual as M
from tinygrad_block.gradcheck import central_difference
from tinygrad_block.manual import pitfalls
from tinygrad_block.manual.common import flatten
from tools import torch_block

TOL = 1e-8          # finite differences vs the hand-derived backward
TORCH_TOL = 1e-12   # our forward (and backward) vs PyTorch's, both float64
B, L = 2, 4


# ------------------------------------------------------------------ oracles and helpers
GRAD_FLOOR = 1e-2   # a gradient that is zero in theory (k_proj's bias without RoPE: softmax ignores a shift
                    # shared by every key) is compared absolutely, against rounding, below this norm

def finite_diff(forward, inputs: dict, names, dout, h: float = 5e-4) -> dict:
    """d sum(forward(inputs)[0] * dout) / d inputs[name] for each name, by `central_difference`. At h = 5e-4 the
    worst block case agrees to 7e-10, at h = 1e-3 only to 5e-9 (LoRA's scale alpha / r = 8 makes higher
    derivatives large)."""
    def loss(name):
        return lambda values: float((forward({**inputs, name: values})[0] * dout).sum())
    return {name: central_difference(loss(name), inputs[name], h) for name in names}

def check_grads(forward, backward, inputs: dict, rng, expect=None) -> dict:
    """Run forward and backward on `inputs` and compare every gradient backward returns (a dict keyed like
    `inputs`) with finite differences. `expect`: the keys backward must return (default: all of inputs)."""
    out, cache = forward(inputs)
    dout = rng.standard_normal(out.shape)
    analytic = backward(dout, cache)
    assert set(analytic) == set(inputs if expect is None else expect)
    numeric = finite_diff(forward, inputs, analytic, dout)
    for name, g in analytic.items():
        assert g.shape == inputs[name].shape, name
        assert rel_err(g, numeric[name], GRAD_FLOOR) <= TOL, (name, rel_err(g, numeric[name], GRAD_FLOOR))
    return analytic


def t(a) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float64, requires_grad=True)


def normal(rng, *shape, scale: float = 1.0):
    return rng.standard_normal(shape) * scale


def away_from_zero(rng, *shape):
    """Mixed signs, |z| >= 0.2: finite differences never cross relu's kink."""
    return rng.choice([-1.0, 1.0], shape) * rng.uniform(0.2, 2.0, shape)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# ------------------------------------------------------------------ linear
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("lora", [False, True])
def test_linear(rng, bias, lora):
    d_in, d_out, r, scale = 5, 3, 2, 0.75
    inputs = {"x": normal(rng, B, L, d_in), "weight": normal(rng, d_out, d_in)}
    if bias:
        inputs["bias"] = normal(rng, d_out)
    if lora:
        inputs |= {"lora_A": normal(rng, r, d_in), "lora_B": normal(rng, d_out, r)}   # B nonzero

    def forward(p):
        adapter = M.Adapter(p["lora_A"], p["lora_B"], scale) if lora else None
        return M.linear_forward(p["x"], p["weight"], p.get("bias"), adapter, frozen=lora)

    def backward(dout, cache):
        dx, grads = M.linear_backward(dout, cache)
        return {"x": dx, **grads}

    frozen = {"weight", "bias"} if lora else set()          # LoRA: the base layer trains no more
    check_grads(forward, backward, inputs, rng, expect=set(inputs) - frozen)
    cfg = replace(LLAMA, bias=bias, lora_rank=r if lora else 0, lora_alpha=scale * r, lora_targets=("proj",))
    ref = torch_block.linear({f"proj.{k}": t(v) for k, v in inputs.items()}, cfg, "proj", t(inputs["x"]))
    assert rel_err(forward(inputs)[0], ref.detach()) <= TORCH_TOL


# ------------------------------------------------------------------ norms
def test_rmsnorm(rng):
    d, eps = 6, 1e-5
    inputs = {"x": normal(rng, B, L, d), "weight": 1 + normal(rng, d, scale=0.1)}

    def forward(p):
        return M.rmsnorm_forward(p["x"], p["weight"], eps)

    def backward(dout, cache):
        dx, grads = M.rmsnorm_backward(dout, cache)
        return {"x": dx, **grads}

    check_grads(forward, backward, inputs, rng)
    ref = F.rms_norm(t(inputs["x"]), (d,), t(inputs["weight"]), eps)
    assert rel_err(forward(inputs)[0], ref.detach()) <= TORCH_TOL


@pytest.mark.parametrize("bias", [False, True])
def test_layernorm(rng, bias):
    d, eps = 6, 1e-5
    inputs = {"x": normal(rng, B, L, d, scale=2.0) + 1.0, "weight": 1 + normal(rng, d, scale=0.1)}
    if bias:
        inputs["bias"] = normal(rng, d, scale=0.1)

    def forward(p):
        return M.layernorm_forward(p["x"], p["weight"], p.get("bias"), eps)

    def backward(dout, cache):
        dx, grads = M.layernorm_backward(dout, cache)
        return {"x": dx, **grads}

    check_grads(forward, backward, inputs, rng)
    b = t(inputs["bias"]) if bias else None
    ref = F.layer_norm(t(inputs["x"]), (d,), t(inputs["weight"]), b, eps)
    assert rel_err(forward(inputs)[0], ref.detach()) <= TORCH_TOL


# ------------------------------------------------------------------ activations
ACTIVATION_CASES = {
    "softmax": (M.softmax_forward, M.softmax_backward, lambda z: torch.softmax(z, dim=-1)),
    "silu": (M.silu_forward, M.silu_backward, F.silu),
    "gelu": (M.gelu_forward, M.gelu_backward, F.gelu),
    "gelu_tanh": (M.gelu_tanh_forward, M.gelu_tanh_backward, lambda z: F.gelu(z, approximate="tanh")),
    "relu": (M.relu_forward, M.relu_backward, F.relu),
}


@pytest.mark.parametrize("name", ACTIVATION_CASES)
def test_activation(rng, name):
    forward, backward, ref = ACTIVATION_CASES[name]
    z = away_from_zero(rng, B, L, 5) * 2.0
    check_grads(lambda p: forward(p["z"]), lambda dout, cache: {"z": backward(dout, cache)}, {"z": z}, rng)
    assert rel_err(forward(z)[0], ref(t(z)).detach()) <= TORCH_TOL


def test_softmax_ignores_masked_entries_and_large_logits():
    s = np.array([[1000.0, 1001.0, -np.inf], [0.0, -np.inf, -np.inf]])
    p, cache = M.softmax_forward(s)
    np.testing.assert_allclose(p, [[1 / (1 + math.e), math.e / (1 + math.e), 0.0], [1.0, 0.0, 0.0]], rtol=1e-15)
    assert np.all(M.softmax_backward(np.ones_like(s), cache)[:, 2] == 0.0)


def test_sigmoid_does_not_overflow():
    np.testing.assert_allclose(M.sigmoid(np.array([-800.0, 0.0, 800.0])), [0.0, 0.5, 1.0], atol=1e-300)


# ------------------------------------------------------------------ FFNs
SWIGLU, CLASSIC = ("gate_proj", "up_proj", "down_proj"), ("up_proj", "down_proj")


def proj_params(rng, shapes: dict, bias=False, lora=(), r: int = 2) -> dict:
    """Random weights (and biases, LoRA adapters) for projections {name: (d_out, d_in)}."""
    p = {}
    for name, (d_out, d_in) in shapes.items():
        p[f"{name}.weight"] = normal(rng, d_out, d_in, scale=d_in ** -0.5)
        if bias:
            p[f"{name}.bias"] = normal(rng, d_out, scale=0.1)
        if name in lora:
            p[f"{name}.lora_A"] = normal(rng, r, d_in, scale=d_in ** -0.5)
            p[f"{name}.lora_B"] = normal(rng, d_out, r, scale=0.5)
    return p


def ffn_params(rng, d_model: int, d_ff: int, names=SWIGLU, bias=False, lora=(), r: int = 2) -> dict:
    shapes = {"gate_proj": (d_ff, d_model), "up_proj": (d_ff, d_model), "down_proj": (d_model, d_ff)}
    return proj_params(rng, {name: shapes[name] for name in names}, bias, lora, r)


def linears(p: dict, names, scale: float = 1.0) -> list:
    """Each projection in `names` as the Linear a layer takes, from the arrays proj_params keys by name."""
    def adapter(n):
        return M.Adapter(p[f"{n}.lora_A"], p[f"{n}.lora_B"], scale) if f"{n}.lora_A" in p else None
    return [M.Linear(p[f"{n}.weight"], p.get(f"{n}.bias"), adapter(n)) for n in names]


def with_x(backward):
    """(dx, one gradient dict per projection) -> one dict keyed like proj_params, with dx under 'x', as
    check_grads wants."""
    def wrapped(dout, cache):
        dx, grads = backward(dout, cache)
        return {"x": dx, **flatten(grads)}
    return wrapped


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("lora", [(), ("gate_proj", "down_proj")])
def test_swiglu(rng, bias, lora):
    d_model, d_ff = 6, 10
    params = ffn_params(rng, d_model, d_ff, bias=bias, lora=lora)
    inputs = {"x": normal(rng, B, L, d_model), **params}
    scale = 1.5
    frozen = {k for k in params if lora and (k.endswith(".weight") or k.endswith(".bias"))}
    def forward(p):
        return M.swiglu_forward(p["x"], *linears(p, SWIGLU, scale), frozen=bool(lora))

    check_grads(forward, with_x(M.swiglu_backward), inputs, rng, expect=set(inputs) - frozen)
    cfg = replace(LLAMA, d_model=d_model, bias=bias, lora_rank=2 if lora else 0, lora_alpha=2 * scale,
                  lora_targets=lora)
    ref = torch_block.ffn({k: t(v) for k, v in params.items()}, cfg, t(inputs["x"]), prefix="")
    assert rel_err(forward(inputs)[0], ref.detach()) <= TORCH_TOL


@pytest.mark.parametrize("act", ["gelu", "gelu_tanh", "relu"])
@pytest.mark.parametrize("bias", [False, True])
def test_classic_ffn(rng, act, bias):
    d_model, d_ff = 6, 10
    params = ffn_params(rng, d_model, d_ff, names=CLASSIC, bias=bias)
    inputs = {"x": normal(rng, B, L, d_model), **params}

    def forward(p):
        return M.ffn_forward(p["x"], *linears(p, CLASSIC), act)

    check_grads(forward, with_x(M.ffn_backward), inputs, rng)
    cfg = replace(LLAMA, d_model=d_model, ffn=act, bias=bias)
    ref = torch_block.ffn({k: t(v) for k, v in params.items()}, cfg, t(inputs["x"]), prefix="")
    assert rel_err(forward(inputs)[0], ref.detach()) <= TORCH_TOL


def test_ffn_rejects_an_unknown_activation(rng):
    with pytest.raises(ValueError, match="ffn_forward: unknown activation 'swish'"):
        M.ffn_forward(normal(rng, 1, 1, 4), *linears(ffn_params(rng, 4, 6, names=CLASSIC), CLASSIC), "swish")


# ------------------------------------------------------------------ a SwiGLU example worked by hand
def test_swiglu_on_four_numbers_gives_the_hand_worked_values():
    """A SwiGLU example worked by hand: x = [1, -0.5, 0.2, 0.8], d_model = 4, d_ff = 3, written as x @ W with
    W (d_model, d_ff); our weights are stored (out, in), so its matrices go in transposed. It has no W_down, so
    the values up to the hidden layer (gate .. hidden) are checked."""
    x = np.array([[[1.0, -0.5, 0.2, 0.8]]])
    w_gate = np.array([[0.5, -0.3, 0.1], [0.2, 0.4, -0.2], [-0.1, 0.3, 0.5], [0.3, -0.1, 0.2]])
    w_up = np.array([[0.4, 0.2, -0.1], [-0.3, 0.5, 0.3], [0.1, -0.2, 0.4], [0.2, 0.1, -0.3]])
    _, cache = M.swiglu_forward(x, M.Linear(w_gate.T), M.Linear(w_up.T), M.Linear(np.eye(4, 3)))
    gate, sig = cache["silu"]
    np.testing.assert_allclose(gate[0, 0], [0.62, -0.52, 0.46], atol=1e-12)           # step 1
    np.testing.assert_allclose(cache["up"][0, 0], [0.73, -0.01, -0.41], atol=1e-12)   # step 2
    # Steps 3-4. The document prints sigma(0.62) = 0.6504; it is 0.650219 (1 / (1 + e^-0.62) = 1 / 1.537944).
    # The slip carries on: it prints SiLU(0.62) = 0.4033 (0.62 * 0.650219 = 0.403136, and 0.62 * 0.6504 itself
    # would give 0.4032) and hidden[0] = 0.2944 (0.403136 * 0.73 = 0.294289). We pin the exact values.
    np.testing.assert_allclose(sig[0, 0], [0.6502, 0.3729, 0.6130], atol=5e-5)        # doc: 0.6504, ...
    np.testing.assert_allclose(cache["act"][0, 0], [0.4031, -0.1939, 0.2820], atol=5e-5)   # doc: 0.4033, ...
    hidden = cache["down_proj"][0]                                                     # the input of W_down
    np.testing.assert_allclose(hidden[0, 0], [0.2943, 0.0019, -0.1156], atol=5e-5)    # doc: 0.2944, ...
    assert abs(sig[0, 0, 0] - 0.6504) > 1e-4 and abs(hidden[0, 0, 0] - 0.2944) > 5e-5  # the document's slip




# ------------------------------------------------------------------ RoPE
@pytest.mark.parametrize("offset", [0, 3])
def test_rope(rng, offset):
    x = normal(rng, B, 3, L, 6)                                      # (B, H, L, d_head)
    check_grads(lambda p: M.rope_forward(p["x"], 500.0, offset), lambda dout, c: {"x": M.rope_backward(dout, c)},
                {"x": x}, rng)


def test_rope_matches_hugging_face_llama():
    """cos/sin vs LlamaRotaryEmbedding (which computes angles in float32, hence 1e-6), and the rotation vs its
    apply_rotary_pos_emb in float64, positions with an offset."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    d_head, theta, offset = 8, 10000.0, 5
    cfg = LlamaConfig(hidden_size=16, num_attention_heads=2, rope_parameters={"rope_type": "default",
                                                                               "rope_theta": theta})
    q = np.random.default_rng(1).standard_normal((1, 2, L, d_head))
    cos, sin = M.rope_cos_sin(q, theta, offset)
    hf_cos, hf_sin = LlamaRotaryEmbedding(cfg)(torch.tensor(q), torch.arange(offset, offset + L)[None])
    assert rel_err(cos, hf_cos[0].double()) < 1e-6 and rel_err(sin, hf_sin[0].double()) < 1e-6
    hf_q, _ = apply_rotary_pos_emb(torch.tensor(q), torch.tensor(q), torch.tensor(cos)[None], torch.tensor(sin)[None])
    assert rel_err(M.rope_forward(q, theta, offset)[0], hf_q) <= TORCH_TOL


def test_rope_offset_is_a_shift(rng):
    """Rotating positions 3..6 with offset 3 equals the tail of rotating 0..6."""
    x = normal(rng, 1, 1, 7, 4)
    np.testing.assert_allclose(M.rope_forward(x[:, :, 3:], offset=3)[0], M.rope_forward(x)[0][:, :, 3:], rtol=1e-13)

# ------------------------------------------------------------------ attention
def attn_params(rng, d_model, n_heads, n_kv_heads, bias=False, lora=(), r=2) -> dict:
    d_head = d_model // n_heads
    shapes = {"q_proj": (n_heads * d_head, d_model), "k_proj": (n_kv_heads * d_head, d_model),
              "v_proj": (n_kv_heads * d_head, d_model), "o_proj": (d_model, n_heads * d_head)}
    return proj_params(rng, shapes, bias, lora, r)


ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
ATTENTION_CASES = {   # name: (d_model, n_heads, n_kv_heads, causal, rope_theta, bias)
    "mha": (8, 2, 2, True, 10000.0, False),
    "gqa2": (8, 4, 2, True, 10000.0, True),
    "gqa4": (16, 8, 2, True, 100.0, False),
    "mqa": (8, 4, 1, True, 10000.0, False),
    "mha_bidirectional_no_rope": (8, 2, 2, False, None, True),
    "gqa2_bidirectional": (8, 4, 2, False, 10000.0, False),
}


@pytest.mark.parametrize("case", ATTENTION_CASES)
def test_attention(rng, case):
    d_model, n_heads, n_kv_heads, causal, rope_theta, bias = ATTENTION_CASES[case]
    inputs = {"x": normal(rng, B, L, d_model), **attn_params(rng, d_model, n_heads, n_kv_heads, bias)}

    def forward(p):
        return M.attention_forward(p["x"], *linears(p, ATTENTION), n_heads, n_kv_heads, causal, rope_theta, offset=2)

    check_grads(forward, with_x(M.attention_backward), inputs, rng)
    cfg = replace(LLAMA, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads, causal=causal,
                  rope=rope_theta is not None, rope_theta=rope_theta or 1.0, bias=bias)
    p = {k: t(v) for k, v in inputs.items()}
    ref = torch_block.attention(p, cfg, p["x"], offset=2, prefix="")
    assert rel_err(forward(inputs)[0], ref.detach()) <= TORCH_TOL


@pytest.mark.parametrize("rope_theta", [None, 10000.0])
def test_key_bias_gets_no_gradient_without_rope(rng, rope_theta):
    """q . (k_j + b) = q . k_j + q . b: the same shift for every key j, and softmax ignores it. RoPE rotates b
    by each key's own angle, so with RoPE the shift differs per key and b gets a gradient."""
    params, x = attn_params(rng, 8, 2, 2, bias=True), normal(rng, B, L, 8)
    out, cache = M.attention_forward(x, *linears(params, ATTENTION), 2, 2, rope_theta=rope_theta)
    db = M.attention_backward(rng.standard_normal(out.shape), cache)[1]["k_proj"]["bias"]
    assert (np.abs(db).max() < 1e-14) == (rope_theta is None)


def test_attention_names_bad_head_counts(rng):
    with pytest.raises(ValueError, match=r"attention: x of shape \(1, 2, 8\) with n_heads=4, n_kv_heads=3"):
        M.attention_forward(normal(rng, 1, 2, 8), *linears(attn_params(rng, 8, 4, 2), ATTENTION), 4, 3)




# ------------------------------------------------------------------ whole blocks
@dataclass(frozen=True)
class BlockCfg:
    """A stand-in for the block config: only the attributes block_forward reads."""
    d_model: int = 8
    n_heads: int = 2
    n_kv_heads: int = 2
    d_ff: int = 12
    norm: str = "rms"
    layout: str = "pre"
    ffn: str = "swiglu"
    bias: bool = False
    norm_eps: float = 1e-5
    rope: bool = True
    rope_theta: float = 10000.0
    causal: bool = True
    lora_rank: int = 0
    lora_alpha: float = 16.0
    lora_targets: tuple = ("q_proj", "v_proj")


def block_params(cfg: BlockCfg, rng) -> dict:
    """Random parameters keyed as the autograd block's named_parameters. LayerNorm has a bias when cfg.bias."""
    lora = cfg.lora_targets if cfg.lora_rank else ()
    names = SWIGLU if cfg.ffn == "swiglu" else CLASSIC
    params = {}
    for norm in ("norm1", "norm2"):
        params[f"{norm}.weight"] = 1 + normal(rng, cfg.d_model, scale=0.2)
        if cfg.norm == "layer" and cfg.bias:
            params[f"{norm}.bias"] = normal(rng, cfg.d_model, scale=0.2)
    attn = attn_params(rng, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.bias, lora, cfg.lora_rank)
    ffn = ffn_params(rng, cfg.d_model, cfg.d_ff, names, cfg.bias, lora, cfg.lora_rank)
    return params | {f"attn.{k}": v for k, v in attn.items()} | {f"ffn.{k}": v for k, v in ffn.items()}


LLAMA = BlockCfg()
GPT2 = BlockCfg(norm="layer", ffn="gelu_tanh", bias=True, rope=False)
BERT = BlockCfg(norm="layer", layout="post", ffn="gelu", bias=True, rope=False, causal=False)
BLOCK_CASES = {   # name: (cfg, offset)
    "llama_mha": (LLAMA, 0),
    "llama_gqa2_offset": (replace(LLAMA, n_heads=4, n_kv_heads=2), 3),
    "llama_gqa4": (replace(LLAMA, d_model=16, n_heads=8, n_kv_heads=2), 0),
    "llama_mqa": (replace(LLAMA, n_heads=4, n_kv_heads=1), 1),
    "llama_bias_non_causal": (replace(LLAMA, bias=True, causal=False), 0),
    "gpt2": (GPT2, 0),
    "bert": (BERT, 0),
    "post_rms_swiglu_gqa": (replace(LLAMA, layout="post", n_heads=4, n_kv_heads=2), 2),
    "pre_layer_nobias_relu": (replace(LLAMA, norm="layer", ffn="relu"), 0),
    "post_layer_relu_bias_mqa": (replace(BERT, ffn="relu", n_heads=4, n_kv_heads=1, causal=True), 0),
    "parallel_neox": (replace(GPT2, layout="parallel", ffn="gelu", rope=True, n_heads=4, n_kv_heads=2), 5),
    "parallel_rms_swiglu": (replace(LLAMA, layout="parallel"), 0),
    "lora_llama_gqa": (replace(LLAMA, n_heads=4, n_kv_heads=2, lora_rank=2), 0),
    "lora_all_projections_gpt2": (replace(GPT2, lora_rank=3, lora_alpha=6.0, lora_targets=(
        "q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj")), 0),
    "lora_post_swiglu_ffn_targets": (replace(BERT, ffn="swiglu", lora_rank=2, lora_alpha=4.0, lora_targets=(
        "v_proj", "gate_proj")), 0),
}


def frozen_under_lora(cfg: BlockCfg, params: dict) -> set:
    """With LoRA every base parameter (projections and norms) is frozen; only the adapters train."""
    if not cfg.lora_rank:
        return set()
    return {k for k in params if not k.endswith(("lora_A", "lora_B"))}


def relu_margin(cache) -> float:
    """min |z| over the FFN's pre-activations z = up_proj(x): how far the nearest one sits from relu's kink."""
    x, w, b = cache["ffn"]["up_proj"][:3]
    return float(np.abs(x @ w.T + (0.0 if b is None else b)).min())


@pytest.mark.parametrize("case", BLOCK_CASES)
def test_block_against_finite_differences(case):
    cfg, offset = BLOCK_CASES[case]
    rng = np.random.default_rng(zlib.crc32(case.encode()))
    params = block_params(cfg, rng)
    inputs = {"x": normal(rng, B, L, cfg.d_model), **params}
    if cfg.ffn == "relu":   # steps of 2h = 1e-3 move z by about that much: they must not cross the kink
        assert relu_margin(M.block_forward(inputs["x"], params, cfg, offset)[1]) > 1e-2

    def backward(dout, cache):
        dx, grads = M.block_backward(dout, cache)
        return {"x": dx, **grads}

    grads = check_grads(lambda p: M.block_forward(p["x"], p, cfg, offset), backward, inputs, rng,
                        expect=set(inputs) - frozen_under_lora(cfg, params))
    if cfg.lora_rank:
        assert any(np.abs(g).max() > 1e-3 for k, g in grads.items() if k.endswith("lora_A"))


@pytest.mark.parametrize("case", BLOCK_CASES)
def test_block_against_torch(case):
    """Same forward and same gradients as the torch reference (autograd); LoRA's frozen weights get none."""
    cfg, offset = BLOCK_CASES[case]
    rng = np.random.default_rng(zlib.crc32(case.encode()))
    params = block_params(cfg, rng)
    x = normal(rng, B, L, cfg.d_model)
    out, cache = M.block_forward(x, params, cfg, offset)
    dout = rng.standard_normal(out.shape)
    dx, grads = M.block_backward(dout, cache)
    frozen = frozen_under_lora(cfg, params)
    p = {k: torch.tensor(v, requires_grad=k not in frozen) for k, v in params.items()}
    tx = t(x)
    ref = torch_block.block_forward(tx, p, cfg, offset=offset)
    (ref * torch.tensor(dout)).sum().backward()
    assert rel_err(out, ref.detach()) <= TORCH_TOL
    assert rel_err(dx, tx.grad) <= TORCH_TOL
    assert set(grads) == {k for k, v in p.items() if v.requires_grad}
    for k, g in grads.items():
        assert rel_err(g, p[k].grad, GRAD_FLOOR) <= TORCH_TOL, k


@pytest.mark.parametrize("change, message", [
    ({"norm": "batch"}, "norm='batch'"),
    ({"layout": "sandwich"}, "layout='sandwich'"),
    ({"layout": "deep"}, "layout='deep'"),
])
def test_block_names_a_bad_config(rng, change, message):
    with pytest.raises(ValueError, match=message):
        M.block_forward(normal(rng, B, L, 8), block_params(LLAMA, rng), replace(LLAMA, **change))


def test_block_names_adapters_the_config_has_no_rank_for(rng):
    params = block_params(replace(LLAMA, lora_rank=2), rng)          # q_proj and v_proj carry lora_A, lora_B
    with pytest.raises(ValueError, match=r"attn\.q_proj\.lora_A .* lora_rank=0"):
        M.block_forward(normal(rng, B, L, 8), params, LLAMA)


# ------------------------------------------------------------------ four common pitfalls
def test_pitfall_1_post_norm_instead_of_pre_norm(rng):
    cfg = replace(LLAMA, n_heads=4, n_kv_heads=2)
    params, x = block_params(cfg, rng), normal(rng, B, L, cfg.d_model, scale=3.0)
    params["norm2.weight"] = np.ones(cfg.d_model)
    right, _ = M.block_forward(x, params, cfg)
    wrong, cache = pitfalls.post_norm_instead_of_pre_norm(x, params, cfg)
    assert rel_err(wrong, right) > 0.3
    # the residual stream itself got normalised: with norm2's gain 1 every output token has RMS 1
    # (sqrt(ms / (ms + eps)), to eps), where the pre-norm block keeps the stream's own scale
    np.testing.assert_allclose(np.sqrt((wrong ** 2).mean(-1)), 1.0, atol=1e-5)
    assert np.abs(np.sqrt((right ** 2).mean(-1)) - 1.0).min() > 0.5
    assert M.block_backward(np.ones_like(wrong), cache)[0].shape == x.shape


def test_pitfall_2_rope_before_head_split(rng):
    d_model, n_heads, n_kv_heads = 8, 2, 1
    projections, x = linears(attn_params(rng, d_model, n_heads, n_kv_heads), ATTENTION), normal(rng, B, L, d_model)
    right, _ = M.attention_forward(x, *projections, n_heads, n_kv_heads, offset=3)
    wrong, _ = pitfalls.rope_before_head_split(x, *projections, n_heads, n_kv_heads, offset=3)
    assert wrong.shape == right.shape and rel_err(wrong, right) > 0.1
    # without RoPE there is nothing to misplace: the two agree
    no_rope = [f(x, *projections, n_heads, n_kv_heads, rope_theta=None)[0]
               for f in (M.attention_forward, pitfalls.rope_before_head_split)]
    assert rel_err(*no_rope) <= 1e-15


def test_pitfall_3_dropped_residual_gradient(rng):
    cfg = replace(LLAMA, n_heads=4, n_kv_heads=2)
    params, x = block_params(cfg, rng), normal(rng, B, L, cfg.d_model)
    out, cache = M.block_forward(x, params, cfg)
    dout = rng.standard_normal(out.shape)
    dx, grads = M.block_backward(dout, cache)
    dx_wrong, grads_wrong = pitfalls.drop_residual_grad(dout, cache)
    assert rel_err(dx_wrong, dx) > 0.3
    for k in grads:   # everything past h is wrong; the FFN and norm2 gradients come before the mistake
        if k.startswith(("ffn.", "norm2.")):
            assert rel_err(grads_wrong[k], grads[k]) <= 1e-15, k
        else:
            assert rel_err(grads_wrong[k], grads[k]) > 0.1, k


@pytest.mark.parametrize("n_heads, n_kv_heads", [(4, 2), (4, 1), (2, 2)])
def test_pitfall_4_kv_gradients_reshaped_with_d_model(rng, n_heads, n_kv_heads):
    d_model = 8
    projections, x = linears(attn_params(rng, d_model, n_heads, n_kv_heads), ATTENTION), normal(rng, B, L, d_model)
    out, cache = M.attention_forward(x, *projections, n_heads, n_kv_heads)
    dout = rng.standard_normal(out.shape)
    dx, grads = M.attention_backward(dout, cache)
    dx_wrong, grads_wrong = pitfalls.kv_grad_reshaped_with_d_model(dout, cache)
    grads, grads_wrong = flatten(grads), flatten(grads_wrong)
    assert {k: g.shape for k, g in grads_wrong.items()} == {k: g.shape for k, g in grads.items()}  # it runs
    errors = [rel_err(dx_wrong, dx), *(rel_err(grads_wrong[k], grads[k]) for k in ("k_proj.weight",
                                                                                  "v_proj.weight"))]
    if n_heads == n_kv_heads:   # MHA: d_model is the KV width, so the mistake is invisible
        assert max(errors) <= 1e-15
    else:
        assert min(errors) > 0.1
        assert rel_err(grads_wrong["q_proj.weight"], grads["q_proj.weight"]) <= 1e-15


def test_merging_gqa_key_gradients_to_d_model_columns_fails_loudly(rng):
    """grad_K.transpose(0, 2, 1, 3).reshape(B, L, d_model), the merge written for multi-head attention, on GQA's
    summed dK (n_kv_heads heads, fewer than d_model columns): the sizes do not match, and numpy says so."""
    dk = rng.standard_normal((B, 2, L, 2))                              # (B, n_kv_heads, L, d_head), d_model = 8
    with pytest.raises(ValueError, match="cannot reshape"):
        dk.transpose(0, 2, 1, 3).reshape(B, L, 8)


# ------------------------------------------------------------------ plain array code
def test_only_common_imports_numpy():
    """manual/ runs on any array module with numpy's methods (numpy, cupy): no other file imports numpy."""
    files = sorted((Path(M.__file__).parent).glob("*.py"))
    assert len(files) >= 9
    for f in files:
        if f.name != "common.py":
            assert "import numpy" not in f.read_text() and "from numpy" not in f.read_text(), f.name
