"""nn.MoE (n_experts > 1): Mixtral's top-k router over SwiGLU experts, and its closed-form accounting.

Oracles: a numpy loop over tokens and experts (argsort for the top k, Mixtral's renormalised gates); the dense
mixture sum_i softmax_i expert_i(x) when every expert is kept; finite differences in float64, away from ties;
the closed forms of accounting.py against counts on the meta device and against Mixtral-8x7B's published
totals (46.7B parameters, 12.9B active per token).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import LLAMA, msg, rng, t64

import tinygrad_block as tb
from tinygrad_block import accounting as acc
from tinygrad_block import nn
from tinygrad_block.counting import count_flops
from tinygrad_block.gradcheck import central_difference
from tinygrad_block.measure import measured_params

MOE = LLAMA.with_(n_experts=4, experts_top_k=2, n_layers=2)         # d_model 16, d_ff 24, 4 experts, top 2


def moe(cfg=MOE, seed: int = 0, device: str = "cpu") -> nn.MoE:
    """A float64 MoE whose router is scaled up, so that the logits' gaps dwarf a finite-difference step."""
    m = nn.MoE(cfg, generator=tb.Generator(seed), dtype=tb.float64)
    m.router.weight.data = (m.router.weight.detach() * 3.0).data
    return m.to(device)


def silu(z):
    return z / (1 + np.exp(-z))


def moe_numpy(x: np.ndarray, m: nn.MoE, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Token by token: logits = W_r x, p = softmax, the k largest (stable argsort: ties to the lower index),
    gates = p_kept / sum p_kept, out = sum_r gate_r down_e(silu(gate_e x) * up_e x). Returns (out, indices)."""
    W_r, Wg, Wu, Wd = (p.numpy() for p in (m.router.weight, m.gate_proj, m.up_proj, m.down_proj))
    rows = x.reshape(-1, x.shape[-1])
    out, chosen = np.zeros_like(rows), []
    for n, xn in enumerate(rows):
        logits = W_r @ xn
        p = np.exp(logits - logits.max())
        p /= p.sum()
        top = np.argsort(-logits, kind="stable")[:k]
        chosen.append(top)
        for e in top:
            out[n] += p[e] / p[top].sum() * (Wd[e] @ (silu(Wg[e] @ xn) * (Wu[e] @ xn)))
    return out.reshape(x.shape), np.array(chosen)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_forward_equals_a_loop_over_tokens_and_experts(k):
    m = moe(MOE.with_(experts_top_k=k))
    x = rng(1).standard_normal((2, 5, 16))
    want, chosen = moe_numpy(x, m, k)
    np.testing.assert_allclose(m(t64(x)).numpy(), want, rtol=1e-12, atol=1e-13)
    idx, gates = m.route(t64(x.reshape(10, 16)))
    np.testing.assert_array_equal(idx.numpy(), chosen)
    np.testing.assert_allclose(gates.numpy().sum(axis=-1), 1.0, rtol=1e-15)


def test_top_k_indices_breaks_ties_toward_the_lower_index_like_a_stable_sort():
    logits = np.array([[1.0, 3.0, 3.0, 0.0], [0.0, 0.0, 0.0, 0.0], [2.0, -1.0, 2.0, 2.0], [5.0, 4.0, 3.0, 2.0]])
    for k in (1, 2, 3, 4):
        want = np.argsort(-logits, axis=-1, kind="stable")[:, :k]
        np.testing.assert_array_equal(nn.top_k_indices(t64(logits), k).numpy(), want)


def test_keeping_every_expert_is_the_dense_softmax_mixture():
    cfg = MOE.with_(experts_top_k=4)
    m = moe(cfg)
    x = rng(2).standard_normal((1, 6, 16))
    p = np.exp(x @ m.router.weight.numpy().T)
    p /= p.sum(axis=-1, keepdims=True)                              # (1, 6, E)
    dense = sum(p[..., e:e + 1] * (silu(x @ m.gate_proj.numpy()[e].T) * (x @ m.up_proj.numpy()[e].T))
                @ m.down_proj.numpy()[e].T for e in range(4))
    np.testing.assert_allclose(m(t64(x)).numpy(), dense, rtol=1e-12, atol=1e-13)


def test_gradients_match_finite_differences_away_from_ties():
    """To x (tb.gradcheck) and to the router's weights: the gradient reaches the router only through the kept
    gates' softmax; the choice is piecewise constant, so steps of 1e-3 that leave it alone see the same."""
    m = moe(MOE.with_(d_model=8, d_ff=6, n_heads=2, n_kv_heads=1), seed=3)
    x = t64(rng(4).standard_normal((1, 4, 8)), requires_grad=True)
    logits = np.sort(x.numpy().reshape(4, 8) @ m.router.weight.numpy().T, axis=-1)
    assert (logits[:, -2] - logits[:, -3]).min() > 0.05             # the 2nd and 3rd largest stay apart
    assert tb.gradcheck(lambda x: m(x), x)
    v = t64(rng(5).standard_normal((1, 4, 8)))
    w = m.router.weight
    m.zero_grad()
    (m(x.detach()) * v).sum().backward()

    def loss(values):
        w.data = t64(values).data
        with tb.no_grad():
            return (m(x.detach()) * v).sum().item()

    numeric = central_difference(loss, w.numpy().copy())
    np.testing.assert_allclose(w.grad.numpy(), numeric, rtol=1e-8, atol=1e-10)
    assert np.abs(numeric).max() > 1e-3                              # the router does learn


def test_total_and_active_parameters_equal_the_closed_forms():
    for cfg in (MOE, MOE.with_(experts_top_k=1, n_experts=8), MOE.with_(tie_embeddings=True)):
        model = nn.LM(cfg, generator=tb.Generator(0), device="meta")
        E, k = cfg.n_experts, cfg.experts_top_k
        total = sum(p.size for p in model.parameters())
        # measured: an expert tensor holds E experts; a token uses k of them, everything else whole
        active = sum(p.size * k // E if n.split(".")[-1] in ("gate_proj", "up_proj", "down_proj") else p.size
                     for n, p in model.named_parameters())
        assert total == acc.total_params(cfg)
        assert active == acc.active_params(cfg)
        d, d_ff, d_kv = cfg.d_model, cfg.d_ff, cfg.n_kv_heads * cfg.d_head
        assert acc.params_per_block(cfg) == 2 * d * d + 2 * d * d_kv + 3 * E * d * d_ff + E * d + 2 * d
        assert acc.active_params_per_block(cfg) == 2 * d * d + 2 * d * d_kv + 3 * k * d * d_ff + E * d + 2 * d


def test_mixtral_8x7b_totals_match_the_published_figures():
    """Mixtral of Experts (Jiang et al. 2024): 47B parameters, 13B active per token (46.7B and 12.9B)."""
    cfg = nn.preset("mistral-7b").with_(n_experts=8, experts_top_k=2)
    total, active = acc.total_params(cfg), acc.active_params(cfg)
    assert total == sum(p.size for p in nn.LM(cfg, generator=tb.Generator(0), device="meta").parameters())
    assert round(total / 1e9, 1) == 46.7 and round(active / 1e9, 1) == 12.9
    assert acc.active_params(nn.preset("mistral-7b")) == acc.total_params(nn.preset("mistral-7b"))


@pytest.mark.parametrize("cfg", [MOE, MOE.with_(experts_top_k=1, n_experts=3),
                                 MOE.with_(layout="deep"), MOE.with_(lora_rank=2)])
def test_flops_counted_on_meta_equal_the_closed_form(cfg):
    B, L, N = 2, 5, 10
    blk = nn.TransformerBlock(cfg, generator=tb.Generator(0), device="meta")
    for dx in (True, False):
        x = tb.zeros(B, L, cfg.d_model, device="meta", requires_grad=dx)
        blk.zero_grad()                                              # no accumulation adds
        with count_flops() as fc:
            blk(x).backward(tb.zeros(B, L, cfg.d_model, device="meta"))
        for matmul_only in (True, False):
            assert fc.total("forward", matmul_only=matmul_only) == acc.block_forward_flops(
                cfg, L, B, matmul_only=matmul_only)
            assert fc.total("backward", matmul_only=matmul_only) == acc.block_backward_flops(
                cfg, L, B, matmul_only=matmul_only, input_requires_grad=dx)
    d, d_ff, E, k = cfg.d_model, cfg.d_ff, cfg.n_experts, cfg.experts_top_k
    ffn = fc.total("forward", matmul_only=True, scope="block.ffn")
    assert ffn == N * (2 * d * E + k * 6 * d * d_ff)                 # router + the k active experts, per token
    assert fc.total("forward", matmul_only=True) == N * acc.flops_per_token(cfg, L)["static"] + \
        4 * B * cfg.n_heads * L * L * cfg.d_head


def test_runs_on_meta_as_a_whole_model():
    model = nn.LM(MOE, generator=tb.Generator(0), device="meta")
    logits = model(tb.zeros(3, 7, dtype=tb.int64, device="meta"))
    assert logits.shape == (3, 7, MOE.vocab_size) and logits.device == "meta"


def test_forward_and_backward_read_nothing_back_to_the_host(device):
    """On 'strict' (CPU) any implicit read back raises; on a GPU CuPy's sync detector would."""
    m = moe(device=device)
    x = tb.tensor(rng(6).standard_normal((2, 3, 16)), dtype=tb.float64, device=device, requires_grad=True)
    be = tb.get_backend(device)
    before = be.host_reads
    if device == "cuda":
        import cupyx
        with pytest.warns(UserWarning), cupyx.allow_synchronize(False):
            m(x).sum().backward()
    else:
        m(x).sum().backward()
    assert be.host_reads == before
    want, _ = moe_numpy(rng(6).standard_normal((2, 3, 16)), moe(), 2)
    np.testing.assert_allclose(m(x).numpy(), want, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("changes, fragments", [
    (dict(n_experts=4, experts_top_k=5), ["experts_top_k=5", "n_experts=4"]),
    (dict(n_experts=0), ["n_experts", "positive", "0"]),
    (dict(n_experts=4, experts_top_k=0), ["experts_top_k", "positive", "0"]),
    (dict(n_experts=True), ["n_experts", "positive", "True"]),
    (dict(n_experts=4, ffn="gelu"), ["n_experts=4", "SwiGLU", "'gelu'"]),
    (dict(n_experts=4, bias=True), ["n_experts=4", "bias=True"]),
    (dict(n_experts=4, lora_rank=2, lora_targets=("up_proj",)), ["LoRA", "n_experts=4", "up_proj"]),
])
def test_bad_expert_configs_raise_naming_the_fields(changes, fragments):
    with pytest.raises(ValueError, match=msg(None, "BlockConfig", *fragments)):
        LLAMA.with_(**changes)


def test_measured_params_names_a_mixtures_rows_and_adds_up_to_the_closed_form():
    """measure.measured_params (what the counting commands read) knows the stacked experts and the router."""
    cfg = nn.preset("tiny").with_(n_experts=4, experts_top_k=2)
    block, model, _ = measured_params(cfg)
    assert block["W_gate"] == block["W_up"] == [(4, 172, 64)] and block["W_down"] == [(4, 64, 172)]
    assert block["W_router"] == [(4, 64)]
    assert sum(math.prod(s) for v in block.values() for s in v) == acc.params_per_block(cfg) == 144_768
    assert sum(math.prod(s) for v in model.values() for s in v) == acc.total_params(cfg) == 322_368
