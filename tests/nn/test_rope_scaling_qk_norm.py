"""RoPE scaling (BlockConfig.rope_scaling: 'linear', 'llama3') and QK-norm (BlockConfig.qk_norm, Qwen3) in
nn/attention.py and nn/config.py, against transformers in float64.

Oracles: transformers' ROPE_INIT_FUNCTIONS and rotary embeddings (run in float64, see `float64_rope`),
LlamaDecoderLayer with llama3-scaled tables, Qwen3DecoderLayer (QK-norm), finite differences (tb.gradcheck),
the formula "linear scaling = positions divided by the factor", and a model's full forward for its KV cache.
FLOP and parameter counts against accounting's closed forms are in test_accounting.py.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import F64, Float64Torch, block, msg, random_block, randomize, rel_err, rng, t64
from test_nn_block_torch import B, HF_NAMES, L, float64_preserving, probe_rope, run_hf, run_ours

import tinygrad_block as tb
from tinygrad_block import manual, nn

FREQ_TOL = 1e-15    # our inverse frequencies vs transformers', both float64: a few ulps of pow
HF_TOL = 1e-10      # our block vs transformers' decoder layers in float64 (as test_nn_block_torch.py)
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}


# ---------------------------------------------------------------- transformers, in float64
@pytest.fixture
def hf(monkeypatch):
    """transformers' rope utilities, Llama and Qwen3 modules, offline, RoPE computed in float64."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    import transformers
    from transformers import modeling_rope_utils
    from transformers.models.llama import modeling_llama
    from transformers.models.qwen3 import modeling_qwen3
    for module in (modeling_rope_utils, modeling_llama, modeling_qwen3):
        monkeypatch.setattr(module, "torch", Float64Torch())
    return transformers, modeling_rope_utils, modeling_llama, modeling_qwen3


def llama_config(transformers, d_head: int, rope_parameters: dict, max_positions: int = 64):
    return transformers.LlamaConfig(hidden_size=4 * d_head, num_attention_heads=4, num_key_value_heads=2,
                                    intermediate_size=8, max_position_embeddings=max_positions,
                                    rope_parameters=rope_parameters)


def scaling_of(params: dict) -> tuple:
    """Our BlockConfig.rope_scaling for transformers' rope_parameters, written out by hand."""
    if params["rope_type"] == "linear":
        return ("linear", params["factor"])
    return ("llama3", params["factor"], params["low_freq_factor"], params["high_freq_factor"],
            params["original_max_position_embeddings"])


def rope_parameters(cfg: nn.BlockConfig) -> dict:
    """transformers 5's rope_parameters for a BlockConfig, written out by hand."""
    if not cfg.rope_scaling:
        return {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope_scaling[0] == "linear":
        return {"rope_type": "linear", "factor": cfg.rope_scaling[1], "rope_theta": cfg.rope_theta}
    _, factor, low, high, context = cfg.rope_scaling
    return {"rope_type": "llama3", "factor": factor, "low_freq_factor": low, "high_freq_factor": high,
            "original_max_position_embeddings": context, "rope_theta": cfg.rope_theta}


# ---------------------------------------------------------------- inverse frequencies
FREQUENCY_CASES = {   # name: (d_head, rope_parameters)
    "linear-4": (16, {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}),
    "linear-2.5-theta1e6": (128, {"rope_type": "linear", "factor": 2.5, "rope_theta": 1e6}),
    "llama3-small": (16, {**LLAMA3, "original_max_position_embeddings": 64, "rope_theta": 10000.0}),
    "llama3-64": (64, {**LLAMA3, "original_max_position_embeddings": 64, "rope_theta": 500000.0}),
    "llama3.1": (128, {**LLAMA3, "original_max_position_embeddings": 8192, "rope_theta": 500000.0}),
    "llama3.2": (64, {**LLAMA3, "factor": 32.0, "original_max_position_embeddings": 8192, "rope_theta": 500000.0}),
    "llama3-odd-numbers": (32, {"rope_type": "llama3", "factor": 3.0, "low_freq_factor": 2.0, "high_freq_factor": 7.5,
                                "original_max_position_embeddings": 1000, "rope_theta": 20000.0}),
}


@pytest.mark.parametrize("d_head, params", FREQUENCY_CASES.values(), ids=FREQUENCY_CASES)
def test_inverse_frequencies_equal_transformers_rope_init_functions(hf, d_head, params):
    transformers, rope_utils, _, _ = hf
    config = llama_config(transformers, d_head, params, max_positions=131072)
    theirs, attention_factor = rope_utils.ROPE_INIT_FUNCTIONS[params["rope_type"]](config, "cpu")
    ours = nn.rope_frequencies(d_head, params["rope_theta"], scaling_of(params)).numpy()
    assert theirs.dtype == torch.float64 and ours.dtype == np.float64 and ours.shape == (d_head // 2,)
    assert attention_factor == 1.0                       # neither kind rescales cos and sin
    assert np.max(np.abs(ours - theirs.numpy()) / theirs.numpy()) < FREQ_TOL
    plain = nn.rope_frequencies(d_head, params["rope_theta"]).numpy()
    assert np.max(np.abs(ours / plain - 1)) > 0.5       # scaling changed something (by 1/factor somewhere)


def test_llama3_scaling_keeps_fast_pairs_divides_slow_ones_and_blends_between(hf):
    """Llama 3.1 (theta 500000, d_head 128, factor 8, low 1, high 4, context 8192): pairs whose wavelength
    2 pi / inv_freq is under 8192 / 4 = 2048 tokens keep their frequency, those over 8192 / 1 are slowed 8
    times, the band between is blended; the scaled frequencies still fall monotonically."""
    transformers, rope_utils, _, _ = hf
    plain = nn.rope_frequencies(128, 500000.0).numpy()
    scaled = nn.rope_frequencies(128, 500000.0, ("llama3", 8.0, 1.0, 4.0, 8192)).numpy()
    wavelength = 2 * math.pi / plain
    kept, divided = wavelength < 2048, wavelength > 8192
    between = ~kept & ~divided
    assert (kept.sum(), between.sum(), divided.sum()) == (29, 6, 29)
    np.testing.assert_array_equal(scaled[kept], plain[kept])
    np.testing.assert_array_equal(scaled[divided], plain[divided] / 8)
    ratio = scaled[between] / plain[between]
    assert np.all((1 / 8 < ratio) & (ratio < 1)) and np.all(np.diff(ratio) < 0)
    assert np.all(np.diff(scaled) < 0)
    config = llama_config(transformers, 128, {**LLAMA3, "original_max_position_embeddings": 8192,
                                              "rope_theta": 500000.0}, 131072)
    theirs = rope_utils.ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")[0].numpy()
    assert np.max(np.abs(scaled - theirs) / theirs) < FREQ_TOL


def test_linear_scaling_is_positions_divided_by_the_factor():
    """('linear', s): the angle at position s p is the unscaled angle at p (the factor 4 is a power of two, so
    inv_freq / 4 and 4 p are exact and the tables agree bit for bit)."""
    cos, sin = nn.rope_tables(64, 16, 10000.0, F64, "cpu")
    cos4, sin4 = nn.rope_tables(253, 16, 10000.0, F64, "cpu", scaling=("linear", 4.0))
    np.testing.assert_array_equal(cos4.numpy()[::4], cos.numpy())
    np.testing.assert_array_equal(sin4.numpy()[::4], sin.numpy())


@pytest.mark.parametrize("rope_type", ["default", "llama3", "linear"])
def test_block_rope_tables_equal_transformers_rotary_embedding(hf, rope_type):
    """transformers' own LlamaRotaryEmbedding (config -> rope type -> inv_freq -> cos, sin) at positions
    17..21, in float64, against the tables our attention builds from BlockConfig.rope_scaling."""
    transformers, _, modeling_llama, _ = hf
    params = {"default": {"rope_type": "default"}, "linear": {"rope_type": "linear", "factor": 3.0},
              "llama3": {**LLAMA3, "original_max_position_embeddings": 64}}[rope_type] | {"rope_theta": 10000.0}
    rotary = modeling_llama.LlamaRotaryEmbedding(llama_config(transformers, 16, params, 512))
    cos_hf, sin_hf = rotary(torch.zeros(1, dtype=torch.float64), torch.arange(17, 22)[None])
    cfg = nn.BlockConfig(64, 4, 2, 8, max_seq_len=512,
                         rope_scaling=() if rope_type == "default" else scaling_of(params))
    attn = nn.Attention(cfg, generator=tb.Generator(0), dtype=F64)
    assert cos_hf.dtype == torch.float64
    assert rel_err(attn.rope_cos.numpy()[17:22], cos_hf[0].numpy()) < 1e-14
    assert rel_err(attn.rope_sin.numpy()[17:22], sin_hf[0].numpy()) < 1e-14


def test_make_rope_tables_rebuilds_the_tables_of_a_model_built_on_meta():
    """The checkpoint loader's path: build on 'meta' (shapes only), then make the tables on a real device."""
    cfg = nn.BlockConfig(16, 2, 1, 8, max_seq_len=32, rope_scaling=("llama3", 8.0, 1.0, 4.0, 16), qk_norm=True)
    meta = nn.TransformerBlock(cfg, generator=tb.Generator(0), dtype=F64, device="meta")
    assert meta.attn.rope_cos.device == "meta"
    meta.attn.make_rope_tables(F64, "cpu")
    cpu = block(cfg)
    assert meta.attn.rope_cos.device == "cpu" and meta.attn.rope_cos.dtype == F64
    np.testing.assert_array_equal(meta.attn.rope_cos.numpy(), cpu.attn.rope_cos.numpy())
    np.testing.assert_array_equal(meta.attn.rope_sin.numpy(), cpu.attn.rope_sin.numpy())
    unscaled = block(cfg.with_(rope_scaling=()))
    assert np.abs(unscaled.attn.rope_cos.numpy() - cpu.attn.rope_cos.numpy()).max() > 0.1


# ---------------------------------------------------------------- blocks against transformers' layers
QK_NAMES = {"self_attn.q_norm.weight": "attn.q_norm.weight", "self_attn.k_norm.weight": "attn.k_norm.weight"}


def hf_run(monkeypatch, layer, rotary, modeling, blk, cfg, offset: int, seed: int):
    """Run transformers' layer (tables from its rotary embedding) and our block on the same x and upstream
    gradient. Returns the relative errors of the output, the input gradient and every parameter's gradient,
    transformers' rotated q and k, and its output."""
    r = rng(seed)
    x_np, g_np = r.standard_normal((B, L, cfg.d_model)), r.standard_normal((B, L, cfg.d_model))
    position_ids = torch.arange(offset, offset + L)[None].expand(B, L)
    cos, sin = rotary(torch.zeros(1, dtype=torch.float64), position_ids)               # (B, L, d_head), float64
    hf_seen, hf_apply = [], modeling.apply_rotary_pos_emb

    def hf_recording(q, k, *args, **kwargs):
        q, k = hf_apply(q, k, *args, **kwargs)
        hf_seen.extend([q.detach().numpy(), k.detach().numpy()])
        return q, k

    monkeypatch.setattr(modeling, "apply_rotary_pos_emb", hf_recording)
    out_hf, xt = run_hf(layer, x_np, g_np, cos, sin, position_ids)
    out, gx, grads = run_ours(blk, x_np, g_np, offset)
    errors = [rel_err(out, out_hf.detach().numpy()), rel_err(gx, xt.grad.numpy())]
    errors += [rel_err(grads[{**HF_NAMES, **QK_NAMES}[n]], p.grad.numpy()) for n, p in layer.named_parameters()]
    return errors, hf_seen, out_hf.detach().numpy()


def load_layer(layer, blk, names: dict):
    """Copy our block's weights into transformers' layer, every name accounted for on both sides."""
    ours = dict(blk.named_parameters())
    assert set(names) == {n for n, _ in layer.named_parameters()} and set(names.values()) == set(ours)
    layer.load_state_dict({h: torch.tensor(np.array(ours[o].numpy())) for h, o in names.items()})


LLAMA3_BLOCKS = [   # (name, BlockConfig fields, offset); d_head 16 at theta 1e4 and context 64: three regions
    ("gqa-llama3", dict(d_model=32, n_heads=2, n_kv_heads=1, d_ff=40, rope_scaling=("llama3", 8.0, 1.0, 4.0, 64)),
     0),
    ("mha-llama3-offset", dict(d_model=32, n_heads=2, n_kv_heads=2, d_ff=24, rope_theta=500000.0,
                               rope_scaling=("llama3", 4.0, 1.0, 4.0, 32)), 41),
    ("gqa-linear-offset", dict(d_model=32, n_heads=4, n_kv_heads=2, d_ff=24, rope_scaling=("linear", 3.0)), 23),
]


@pytest.mark.parametrize("name, fields, offset", LLAMA3_BLOCKS, ids=[c[0] for c in LLAMA3_BLOCKS])
def test_rope_scaled_block_matches_hf_llama_decoder_layer(hf, monkeypatch, name, fields, offset):
    transformers, _, modeling_llama, _ = hf
    float64_preserving(monkeypatch, modeling_llama)
    cfg = nn.BlockConfig(**fields, max_seq_len=64)
    seed = sum(map(ord, name))
    blk = random_block(cfg, seed)
    config = transformers.LlamaConfig(
        hidden_size=cfg.d_model, intermediate_size=cfg.d_ff, num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_kv_heads, rms_norm_eps=cfg.norm_eps, max_position_embeddings=cfg.max_seq_len,
        rope_parameters=rope_parameters(cfg), attention_bias=False, mlp_bias=False, num_hidden_layers=1,
        hidden_act="silu")
    config._attn_implementation = "eager"
    layer = modeling_llama.LlamaDecoderLayer(config, layer_idx=0).double()
    load_layer(layer, blk, HF_NAMES)
    seen = probe_rope(monkeypatch)
    errors, hf_seen, out_hf = hf_run(monkeypatch, layer, modeling_llama.LlamaRotaryEmbedding(config), modeling_llama,
                                     blk, cfg, offset, seed)
    assert max(errors) < HF_TOL, errors
    assert len(seen) == len(hf_seen) == 2 and all(rel_err(a, b) < HF_TOL for a, b in zip(seen, hf_seen))
    unscaled = random_block(cfg.with_(rope_scaling=()), seed)                # same weights, tables unscaled
    x = rng(seed).standard_normal((B, L, cfg.d_model))
    assert rel_err(unscaled(t64(x), offset=offset).numpy(), out_hf) > 1e-4


QWEN3_BLOCKS = [   # (name, BlockConfig fields, offset)
    ("gqa", dict(d_model=32, n_heads=4, n_kv_heads=2, d_ff=40), 0),
    ("mqa-offset-eps", dict(d_model=24, n_heads=4, n_kv_heads=1, d_ff=36, norm_eps=1e-3, rope_theta=1e6), 29),
    ("mha-llama3", dict(d_model=32, n_heads=2, n_kv_heads=2, d_ff=24, rope_scaling=("llama3", 8.0, 1.0, 4.0, 64)),
     7),
    ("wide-heads", dict(d_model=16, n_heads=4, n_kv_heads=2, d_ff=24, head_dim=12), 5),    # head_dim != 16 / 4
    ("narrow-heads", dict(d_model=24, n_heads=3, n_kv_heads=1, d_ff=20, head_dim=4), 0),
]


@pytest.mark.parametrize("name, fields, offset", QWEN3_BLOCKS, ids=[c[0] for c in QWEN3_BLOCKS])
def test_qk_norm_block_matches_hf_qwen3_decoder_layer(hf, monkeypatch, name, fields, offset):
    """Qwen3: q_norm and k_norm (random gains, so their place before RoPE matters: RoPE keeps a head's length
    but not an elementwise gain) on each head after the split. Also HF's float32 RMSNorm (Qwen3RMSNorm, a copy
    of LlamaRMSNorm) replaced by the same formula without the casts."""
    transformers, _, modeling_llama, modeling_qwen3 = hf
    float64_preserving(monkeypatch, modeling_llama)
    monkeypatch.setattr(modeling_qwen3.Qwen3RMSNorm, "forward", modeling_llama.LlamaRMSNorm.forward)
    cfg = nn.BlockConfig(**fields, qk_norm=True, max_seq_len=64)
    seed = sum(map(ord, name)) + 3
    blk = random_block(cfg, seed)
    config = transformers.Qwen3Config(
        hidden_size=cfg.d_model, intermediate_size=cfg.d_ff, num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_kv_heads, head_dim=cfg.d_head, rms_norm_eps=cfg.norm_eps,
        max_position_embeddings=cfg.max_seq_len, rope_parameters=rope_parameters(cfg), attention_bias=False,
        num_hidden_layers=1, hidden_act="silu")
    config._attn_implementation = "eager"
    layer = modeling_qwen3.Qwen3DecoderLayer(config, layer_idx=0).double()
    load_layer(layer, blk, HF_NAMES | QK_NAMES)
    seen = probe_rope(monkeypatch)
    errors, hf_seen, _ = hf_run(monkeypatch, layer, modeling_qwen3.Qwen3RotaryEmbedding(config), modeling_qwen3,
                                blk, cfg, offset, seed)
    assert max(errors) < HF_TOL, errors
    assert len(seen) == len(hf_seen) == 2 and all(rel_err(a, b) < HF_TOL for a, b in zip(seen, hf_seen))


# ---------------------------------------------------------------- gradients, the KV cache, layouts
GRAD_CFG = nn.BlockConfig(12, 2, 1, 10, max_seq_len=16, qk_norm=True,      # d_head 6: three pairs, one per
                          rope_scaling=("llama3", 4.0, 1.0, 4.0, 256))     # llama3 region (kept, blended, slowed)


@pytest.mark.parametrize("cfg", [GRAD_CFG, GRAD_CFG.with_(qk_norm=False), GRAD_CFG.with_(rope_scaling=()),
                                 GRAD_CFG.with_(layout="post", rope_scaling=("linear", 2.0))],
                         ids=["qk_norm+llama3", "llama3", "qk_norm", "post+qk_norm+linear"])
def test_gradients_match_finite_differences(cfg):
    blk = random_block(cfg, 5)
    x = t64(rng(6).standard_normal((2, 4, cfg.d_model)), requires_grad=True)
    assert tb.gradcheck(lambda t: blk(t, offset=3), x)


def test_qk_norm_gain_gradients_match_finite_differences():
    blk = random_block(GRAD_CFG, 7)
    x = t64(rng(8).standard_normal((2, 4, GRAD_CFG.d_model)))
    q_gain, k_gain = (t64(p.numpy(), requires_grad=True) for p in (blk.attn.q_norm.weight, blk.attn.k_norm.weight))

    def run(q, k):
        blk.attn.q_norm.weight, blk.attn.k_norm.weight = q, k               # the gains as inputs
        return blk(x, offset=2)

    assert tb.gradcheck(run, q_gain, k_gain)


def test_kv_cache_decode_equals_the_full_forward_with_qk_norm_and_scaled_rope():
    """Prefill 6 tokens, then decode 3 one at a time: the cached keys went through k_norm and the scaled RoPE
    at their own positions, so each step's logits equal those of the whole sequence run at once."""
    cfg = GRAD_CFG.with_(n_layers=2, vocab_size=20, rope_scaling=("llama3", 8.0, 1.0, 4.0, 8))
    model = nn.LM(cfg, generator=tb.Generator(0), dtype=F64)
    randomize(model, 9)
    ids = tb.tensor(rng(10).integers(0, 20, (2, 9)))
    with tb.no_grad():
        full = model(ids).numpy()                                                    # (2, 9, vocab)
        cache = nn.KVCache(model, 2)
        steps = [model(ids[:, :6], cache=cache).numpy()]
        steps += [model(ids[:, n:n + 1], cache=cache).numpy() for n in range(6, 9)]
    assert rel_err(np.concatenate(steps, axis=1), full) < 1e-13


@pytest.mark.parametrize("fields", [dict(layout="parallel"), dict(layout="deep", n_layers=4),
                                    dict(n_experts=3, experts_top_k=2), dict(lora_rank=2)],
                         ids=["parallel", "deepnorm", "moe", "lora"])
def test_qk_norm_in_every_layout_normalises_each_head(fields, monkeypatch):
    """Whatever the layout, with unit gains every head of the rotated q and k has RMS 1 (up to eps; RoPE turns
    pairs, keeping each head's length), while q_proj's output does not; LoRA freezes the gains with every
    other base parameter."""
    cfg = GRAD_CFG.with_(**fields)
    blk = random_block(cfg, 11)
    for gain in (blk.attn.q_norm.weight, blk.attn.k_norm.weight):
        gain.data = tb.ones(cfg.d_head, dtype=F64).data
    seen = probe_rope(monkeypatch)
    x = t64(rng(12).standard_normal((2, 5, cfg.d_model)))
    blk(x)
    assert len(seen) == 2
    for rotated in seen:                                                             # (B, heads, L, d_head)
        np.testing.assert_allclose(np.sqrt((rotated ** 2).mean(axis=-1)), 1.0, rtol=1e-4)
    q = blk.attn.q_proj(x).numpy().reshape(2, 5, cfg.n_heads, cfg.d_head)
    assert np.abs(np.sqrt((q ** 2).mean(axis=-1)) - 1).max() > 0.1
    assert blk.attn.q_norm.weight.requires_grad == (not cfg.lora_rank)


# ---------------------------------------------------------------- the config
@pytest.mark.parametrize("fields, fragments", [
    (dict(rope_scaling=("yarn", 4.0)), ["rope_scaling", "'linear'", "'llama3'", "'yarn'"]),
    (dict(rope_scaling=["linear", 2.0]), ["rope_scaling", "['linear', 2.0]"]),
    (dict(rope_scaling=("linear",)), ["rope_scaling", "'linear'", "factor"]),
    (dict(rope_scaling=("linear", 0.0)), ["factor", "> 0", "0.0"]),
    (dict(rope_scaling=("linear", float("inf"))), ["factor", "finite", "inf"]),
    (dict(rope_scaling=("llama3", 8.0, 1.0, 4.0)), ["'llama3'", "original_max_position_embeddings"]),
    (dict(rope_scaling=("llama3", 8.0, -1.0, 4.0, 8192)), ["low_freq_factor", "> 0", "-1.0"]),
    (dict(rope_scaling=("llama3", 8.0, 4.0, 1.0, 8192)), ["high_freq_factor", "low_freq_factor", "4.0", "1.0"]),
    (dict(rope_scaling=("llama3", 8.0, 1.0, 4.0, 8192.0)), ["original_max_position_embeddings", "int", "8192.0"]),
    (dict(rope_scaling=("llama3", 8.0, 1.0, 4.0, 0)), ["original_max_position_embeddings", "positive", "0"]),
    (dict(rope_scaling=("linear", 2.0), rope=False), ["rope_scaling", "rope=False"]),
    (dict(qk_norm=True, norm="layer"), ["qk_norm", "norm='rms'", "'layer'"]),
    (dict(qk_norm=1), ["qk_norm", "True or False", "1"]),
])
def test_bad_rope_scaling_or_qk_norm_raises_naming_the_field(fields, fragments):
    with pytest.raises(ValueError, match=msg(None, "BlockConfig", *fragments)):
        nn.BlockConfig(16, 2, 1, 8, **fields)


def test_configs_stay_hashable_and_compare_by_value():
    a = nn.BlockConfig(16, 2, 1, 8, qk_norm=True, rope_scaling=("llama3", 8.0, 1.0, 4.0, 8192))
    b = nn.BlockConfig(16, 2, 1, 8, qk_norm=True, rope_scaling=("llama3", 8, 1, 4, 8192), name="other")
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert a != a.with_(rope_scaling=("llama3", 8.0, 1.0, 4.0, 4096)) and a != a.with_(qk_norm=False)
    assert nn.preset("llama3-8b").rope_scaling == () and not nn.preset("llama3-8b").qk_norm


def test_the_hand_derived_block_refuses_what_it_lacks():
    x = rng(0).standard_normal((1, 3, 16))
    for cfg in (GRAD_CFG.with_(d_model=16, n_heads=2, rope_scaling=()),
                nn.BlockConfig(16, 2, 1, 8, rope_scaling=("linear", 2.0))):
        p = randomize(block(cfg))
        with pytest.raises(ValueError, match=msg("block", "qk_norm", "rope_scaling")):
            manual.block_forward(x, p, cfg)
