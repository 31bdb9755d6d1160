"""BlockConfig.head_dim: heads of their own width, d_head != d_model / n_heads (Qwen3, Gemma), through attention,
the KV caches, tiled attention, the hand-derived pairs and accounting's closed forms.

Oracles: finite differences (tb.gradcheck, float64), the hand-derived block (tinygrad_block.manual), the same
model's full forward (for the caches), plain attention (for the tiles), the built model's parameters and
count_flops on the shape-only device (for the closed forms), and the formulas written out by hand. Against
transformers: tests/nn/test_rope_scaling_qk_norm.py (a Qwen3 decoder layer of wide heads) and
tests/checkpoints/test_pretrained.py (whole Qwen3 and Llama models of their own head_dim)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import LLAMA, random_block, rel_err, rng, t64
from tinygrad_block.gradcheck import central_difference

import tinygrad_block as tb
from tinygrad_block import accounting as acc
from tinygrad_block import manual, measure, nn
from tinygrad_block.nn.cache import StaticKVCache
from tinygrad_block.nn.tiled import plain_attention, tiled_attention

WIDE = LLAMA.with_(head_dim=6)                       # d_model 16, 4 heads of 6: q 16 -> 24, o 24 -> 16
NARROW = LLAMA.with_(head_dim=2, n_kv_heads=1)       # 4 heads of 2 (MQA): q 16 -> 8
CONFIGS = {"wide": WIDE, "narrow": NARROW, "wide_qk_norm_bias": WIDE.with_(qk_norm=True, qkv_bias=True),
           "wide_parallel_gelu": WIDE.with_(layout="parallel", ffn="gelu_tanh", bias=True),
           "wide_lora": WIDE.with_(lora_rank=2, lora_targets=("q_proj", "o_proj"))}


def test_projections_have_the_heads_width():
    """Q: d_model x (H d_head), K and V: d_model x (H_kv d_head), O: (H d_head) x d_model (stored (out, in))."""
    shapes = {n: p.shape for n, p in random_block(WIDE).named_parameters()}
    assert shapes["attn.q_proj.weight"] == (4 * 6, 16) and shapes["attn.o_proj.weight"] == (16, 4 * 6)
    assert shapes["attn.k_proj.weight"] == shapes["attn.v_proj.weight"] == (2 * 6, 16)


@pytest.mark.parametrize("name", ["wide", "narrow", "wide_parallel_gelu"])
def test_autograd_equals_the_hand_derived_block_and_finite_differences(name):
    """The input's gradient three ways, and every weight's two ways (autograd and by hand) plus finite
    differences at entries of every head in q_proj and o_proj, whose shapes head_dim changes (float64, relative
    error <= 1e-8)."""
    cfg = CONFIGS[name]
    blk = random_block(cfg, 3)
    x_np, dout_np = rng(4).standard_normal((2, 5, cfg.d_model)), rng(5).standard_normal((2, 5, cfg.d_model))
    x = t64(x_np, requires_grad=True)
    out = blk(x, 2)
    out.backward(t64(dout_np))
    params = {n: p.numpy() for n, p in blk.named_parameters()}
    m_out, cache = manual.block_forward(x_np, params, cfg, 2)
    m_dx, m_grads = manual.block_backward(dout_np, cache)
    assert rel_err(out.numpy(), m_out) <= 1e-10 and rel_err(x.grad.numpy(), m_dx) <= 1e-10
    for n, p in blk.named_parameters():
        assert rel_err(p.grad.numpy(), m_grads[n]) <= 1e-10, n
    assert tb.gradcheck(lambda t: blk(t, 2), t64(x_np, requires_grad=True), rtol=1e-8)
    for name in ("q_proj", "o_proj"):                   # finite differences at 3 entries of every head's slice
        weight = getattr(blk.attn, name).weight
        heads = weight.shape[0 if name == "q_proj" else 1] // cfg.d_head
        rows, cols = rng(1).integers(0, cfg.d_head, (heads, 3)), rng(2).integers(0, cfg.d_model, (heads, 3))
        picked = [(h * cfg.d_head + r, c) if name == "q_proj" else (c, h * cfg.d_head + r)
                  for h in range(heads) for r, c in zip(rows[h], cols[h])]

        def loss(values, weight=weight):                # sum(out * dout), this weight set to `values`
            weight.assign(t64(values))
            with tb.no_grad():
                return float((blk(t64(x_np), 2).numpy() * dout_np).sum())

        numeric = central_difference(loss, params[f"attn.{name}.weight"], elements=picked)
        weight.assign(t64(params[f"attn.{name}.weight"]))
        got = np.array([m_grads[f"attn.{name}.weight"][i] for i in picked])      # = autograd's, asserted above
        assert rel_err(got, np.array([numeric[i] for i in picked])) <= 1e-8, name


def test_the_hand_derived_attention_refuses_projections_of_unequal_heads():
    blk = random_block(WIDE)
    proj = {n: manual.Linear(getattr(blk.attn, n).weight.numpy()) for n in ("q_proj", "k_proj", "v_proj", "o_proj")}
    short_k = manual.Linear(proj["k_proj"].weight[:8])                   # 2 KV heads of 4 beside 4 query heads of 6
    with pytest.raises(ValueError, match="k_proj of 8"):
        manual.attention_forward(rng(0).standard_normal((1, 3, 16)), proj["q_proj"], short_k, proj["v_proj"],
                                 proj["o_proj"], 4, 2)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_counts_equal_the_closed_forms(name):
    """Parameters of the built model; FLOPs of a block and of the model, forward and backward, every op, counted
    on the shape-only device; flops_per_token's attention term 4 L H d_head; all equal to accounting's."""
    cfg = CONFIGS[name].with_(n_layers=2, vocab_size=11)
    model = nn.LM(cfg, generator=tb.Generator(0), device="meta")
    assert model.num_parameters() == acc.total_params(cfg)
    H, H_kv, d, d_head = cfg.n_heads, cfg.n_kv_heads, cfg.d_model, cfg.d_head
    rows = acc.block_param_breakdown(cfg)
    assert rows["W_Q"] == rows["W_O"] == d * H * d_head and rows["W_K"] == rows["W_V"] == d * H_kv * d_head
    fc = measure.count_model(cfg, 2, 5)
    for phase, closed in [("forward", acc.model_forward_flops), ("backward", acc.model_backward_flops)]:
        for matmul_only in (True, False):
            assert fc.total(phase, matmul_only=matmul_only) == closed(cfg, 5, 2, matmul_only=matmul_only)
    assert acc.flops_per_token(cfg, 5)["attention"] == 4 * 5 * H * d_head


def test_kv_caches_hold_heads_of_head_dim_and_decode_as_the_full_forward():
    """KVCache and StaticKVCache hold (B, H_kv, n, d_head) per layer, kv_cache_bytes counts them, and prefill +
    decode give the logits of the whole sequence at once."""
    cfg = WIDE.with_(n_layers=2, vocab_size=13, qk_norm=True)
    model = nn.LM(cfg, generator=tb.Generator(1), dtype=tb.float64)
    ids = tb.tensor(rng(2).integers(0, 13, (2, 7)))
    full = model(ids).numpy()
    cache = nn.KVCache(model, 2)
    steps = [model(ids[:, :4], cache=cache).numpy()] + [model(ids[:, i:i + 1], cache=cache).numpy() for i in (4, 5, 6)]
    assert rel_err(np.concatenate(steps, axis=1), full) < 1e-12
    assert cache.layers[0].k.shape == (2, 2, 7, 6) and cache.nbytes == acc.kv_cache_bytes(cfg, 7, 2, 8)
    static = StaticKVCache(model, 2, 7)
    steps = [model(ids[:, :4], cache=static).numpy()] + [model(ids[:, i:i + 1], cache=static).numpy()
                                                         for i in (4, 5, 6)]
    assert rel_err(np.concatenate(steps, axis=1), full) < 1e-12
    assert static.nbytes == acc.kv_cache_bytes(cfg, 7, 2, 8)
    assert acc.kv_cache_bytes(cfg, 7, 2, 8) == 2 * 2 * 2 * 7 * 2 * 6 * 8         # 2 n_layers B L H_kv d_head 8


def test_greedy_generation_with_and_without_the_cache_agree():
    model = nn.LM(WIDE.with_(n_layers=2, vocab_size=17), generator=tb.Generator(2), dtype=tb.float64)
    ids = tb.tensor(rng(3).integers(0, 17, (1, 3)))
    cached = model.generate(ids, 6, jit=False).numpy()
    assert np.array_equal(cached, model.generate(ids, 6, use_cache=False).numpy())


def test_tiled_attention_takes_heads_of_any_width():
    """q (B, H, L, d_head) with d_head = 6 by tiles of 3 queries and 2 keys: plain attention's output and
    gradients."""
    r = rng(6)
    q, k, v = (t64(r.standard_normal(s), requires_grad=True) for s in [(1, 4, 7, 6), (1, 2, 7, 6), (1, 2, 7, 6)])
    plain = plain_attention(q, k, v)
    g = r.standard_normal(plain.shape)
    plain.backward(t64(g))
    want = [plain.numpy()] + [t.grad.numpy() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    tiled = tiled_attention(q, k, v, block_q=3, block_k=2)
    tiled.backward(t64(g))
    for a, b in zip([tiled.numpy()] + [t.grad.numpy() for t in (q, k, v)], want):
        assert rel_err(a, b) < 1e-12
