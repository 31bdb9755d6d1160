"""Properties of the transformer block and its layers, each checked against an oracle of its own: a hand
derivation, the closed-form formula, a plain-numpy re-implementation, or finite differences.

Sizes are tiny and everything runs in float64, so tolerances sit near machine precision; identities that hold
exactly in floating point (adding a zero branch, masking) are checked for exact equality.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

import tinygrad_block as tb
from tinygrad_block import nn

F64 = tb.float64
D, H, H_KV, D_FF = 16, 4, 2, 24          # d_head = 4: the default tiny block (GQA, 2 query heads per KV head)
LLAMA = nn.BlockConfig(D, H, H_KV, D_FF, max_seq_len=64)
GPT2 = nn.BlockConfig(D, H, H, D_FF, norm="layer", ffn="gelu_tanh", bias=True, rope=False, max_seq_len=64)
BERT = GPT2.with_(norm_position="post", ffn="gelu", causal=False, norm_eps=1e-12)
PARALLEL = LLAMA.with_(parallel=True, ffn="relu")


def msg(*fragments: str) -> str:
    """A `match=` regex requiring every literal fragment, in any order."""
    return "(?s)" + "".join(f"(?=.*{re.escape(f)})" for f in fragments)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def t64(a, requires_grad: bool = False) -> tb.Tensor:
    return tb.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


def block(cfg: nn.BlockConfig, seed: int = 0, dtype=F64) -> nn.TransformerBlock:
    return nn.TransformerBlock(cfg, generator=tb.Generator(seed), dtype=dtype)


def randomize(module: nn.Module, seed: int = 0, gain_jitter: float = 0.3) -> dict[str, np.ndarray]:
    """Give every parameter random values (norm gains around 1, biases and LoRA B nonzero) so that no term of
    the forward pass is trivially zero or one; returns the values as numpy arrays."""
    r, values = rng(seed), {}
    for name, p in module.named_parameters():
        if name.endswith("norm1.weight") or name.endswith("norm2.weight") or name == "weight" and p.ndim == 1:
            a = 1.0 + gain_jitter * r.standard_normal(p.shape)
        else:
            a = r.standard_normal(p.shape) / math.sqrt(p.shape[-1])
        values[name] = a
    module.load_state_dict({k: tb.tensor(v, dtype=module_dtype(module)) for k, v in values.items()})
    return values


def module_dtype(module: nn.Module):
    return module.parameters()[0].dtype


# ---------------------------------------------------------------------------------------------------------------
# A plain-numpy block: the oracle for the forward pass (written from the formulas, not from the engine's code).
# ---------------------------------------------------------------------------------------------------------------

def np_linear(p: dict, name: str, x: np.ndarray) -> np.ndarray:
    y = x @ p[f"{name}.weight"].T
    return y + p[f"{name}.bias"] if f"{name}.bias" in p else y


def np_norm(cfg, p: dict, name: str, x: np.ndarray) -> np.ndarray:
    if cfg.norm == "rms":
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + cfg.norm_eps) * p[f"{name}.weight"]
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + cfg.norm_eps) * p[f"{name}.weight"]
    return y + p[f"{name}.bias"] if f"{name}.bias" in p else y


def np_rope(x: np.ndarray, positions: np.ndarray, theta: float) -> np.ndarray:
    """Rotate each pair (x_i, x_{i + d/2}) by the angle p * theta^(-2i/d): the half-split (Hugging Face Llama)
    pairing, written as a 2x2 rotation of each pair. x: (..., L, d)."""
    d = x.shape[-1]
    half = d // 2
    angle = positions[:, None] * theta ** (-2.0 * np.arange(half) / d)          # (L, d/2)
    c, s = np.cos(angle), np.sin(angle)
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], axis=-1)


def np_attention(cfg, p: dict, x: np.ndarray, offset: int = 0) -> np.ndarray:
    B, L, _ = x.shape
    nh, nkv, dh = cfg.n_heads, cfg.n_kv_heads, cfg.d_head
    q = np_linear(p, "attn.q_proj", x).reshape(B, L, nh, dh).transpose(0, 2, 1, 3)
    k = np_linear(p, "attn.k_proj", x).reshape(B, L, nkv, dh).transpose(0, 2, 1, 3)
    v = np_linear(p, "attn.v_proj", x).reshape(B, L, nkv, dh).transpose(0, 2, 1, 3)
    if cfg.rope:
        pos = np.arange(offset, offset + L, dtype=np.float64)
        q, k = np_rope(q, pos, cfg.rope_theta), np_rope(k, pos, cfg.rope_theta)
    out = np.empty((B, nh, L, dh))
    for b in range(B):
        for h in range(nh):
            g = h // (nh // nkv)                                  # the KV head serving query head h
            s = q[b, h] @ k[b, g].T / math.sqrt(dh)
            if cfg.causal:
                s = np.where(np.arange(L)[None, :] > np.arange(L)[:, None], -np.inf, s)
            w = np.exp(s - s.max(-1, keepdims=True))
            out[b, h] = (w / w.sum(-1, keepdims=True)) @ v[b, g]
    return np_linear(p, "attn.o_proj", out.transpose(0, 2, 1, 3).reshape(B, L, nh * dh))


_erf = np.vectorize(math.erf)


def np_ffn(cfg, p: dict, x: np.ndarray) -> np.ndarray:
    up = np_linear(p, "ffn.up_proj", x)
    if cfg.ffn == "swiglu":
        gate = np_linear(p, "ffn.gate_proj", x)
        hidden = gate / (1.0 + np.exp(-gate)) * up
    elif cfg.ffn == "gelu":
        hidden = 0.5 * up * (1.0 + _erf(up / math.sqrt(2.0)))
    elif cfg.ffn == "gelu_tanh":
        hidden = 0.5 * up * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (up + 0.044715 * up ** 3)))
    else:
        hidden = np.maximum(up, 0.0)
    return np_linear(p, "ffn.down_proj", hidden)


def np_block(cfg, p: dict, x: np.ndarray, offset: int = 0) -> np.ndarray:
    attn = lambda t: np_attention(cfg, p, t, offset)  # noqa: E731
    if cfg.parallel:
        return x + attn(np_norm(cfg, p, "norm1", x)) + np_ffn(cfg, p, np_norm(cfg, p, "norm2", x))
    if cfg.norm_position == "post":
        h = np_norm(cfg, p, "norm1", x + attn(x))
        return np_norm(cfg, p, "norm2", h + np_ffn(cfg, p, h))
    h = x + attn(np_norm(cfg, p, "norm1", x))
    return h + np_ffn(cfg, p, np_norm(cfg, p, "norm2", h))


NUMPY_CASES = {
    "llama-gqa": (LLAMA, 0),
    "llama-gqa-offset": (LLAMA, 9),
    "mha": (LLAMA.with_(n_kv_heads=H), 0),
    "mqa": (LLAMA.with_(n_kv_heads=1), 3),
    "gpt2": (GPT2, 0),
    "bert": (BERT, 0),
    "parallel-relu": (PARALLEL, 0),
    "llama-layernorm-gelu-bias": (LLAMA.with_(norm="layer", ffn="gelu", bias=True, rope_theta=500000.0), 2),
}


@pytest.mark.parametrize("name", NUMPY_CASES)
def test_block_forward_matches_a_numpy_block_written_from_the_formulas(name):
    cfg, offset = NUMPY_CASES[name]
    blk = block(cfg)
    p = randomize(blk, seed=1)
    x = rng(2).standard_normal((2, 5, D))
    got = blk(t64(x), offset=offset).numpy()
    np.testing.assert_allclose(got, np_block(cfg, p, x, offset), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cfg", [LLAMA, GPT2, BERT, PARALLEL], ids=["llama", "gpt2", "bert", "parallel"])
def test_block_input_gradient_matches_finite_differences(cfg):
    blk = block(cfg)
    randomize(blk, seed=3)
    x = t64(rng(4).standard_normal((1, 3, D)), requires_grad=True)
    assert tb.gradcheck(lambda t: blk(t, offset=1), x)


# ---------------------------------------------------------------------------------------------------------------
# 1. Zero sublayers: the pre-norm block is the identity, and so is its backward (the residual highway).
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg", [LLAMA, GPT2, PARALLEL, GPT2.with_(parallel=True)],
                         ids=["llama", "gpt2", "parallel", "gpt2-parallel"])
def test_zero_sublayer_weights_make_the_pre_norm_block_the_identity(cfg):
    blk = block(cfg)
    values = randomize(blk, seed=5)                      # norms keep random gains (and shifts)
    zeroed = {k: (np.zeros_like(v) if "_proj." in k else v) for k, v in values.items()}
    assert any("_proj." in k for k in zeroed) and any("norm" in k for k in zeroed)
    blk.load_state_dict({k: t64(v) for k, v in zeroed.items()})
    x = t64(rng(6).standard_normal((2, 5, D)), requires_grad=True)
    y = blk(x)
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    upstream = rng(7).standard_normal((2, 5, D))
    y.backward(t64(upstream))
    np.testing.assert_array_equal(x.grad.numpy(), upstream)


def test_nonzero_sublayer_weights_break_the_identity():
    """The converse of the identity property, so that test cannot pass by a block that ignores its weights."""
    blk = block(LLAMA)
    x = t64(rng(6).standard_normal((2, 5, D)))
    assert np.abs(blk(x).numpy() - x.numpy()).max() > 1e-3


# ---------------------------------------------------------------------------------------------------------------
# 2. SwiGLU and SiLU.
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_swiglu_of_zero_is_zero_whatever_the_weights(seed):
    ffn = nn.SwiGLU(LLAMA, generator=tb.Generator(seed), dtype=F64)
    values = randomize(ffn, seed=seed)
    ffn.load_state_dict({k: t64(10.0 * v) for k, v in values.items()})   # large weights, still zero out
    np.testing.assert_array_equal(ffn(tb.zeros(2, 3, D, dtype=F64)).numpy(), np.zeros((2, 3, D)))
    assert np.abs(ffn(t64(rng(seed).standard_normal((2, 3, D)))).numpy()).max() > 1e-3


def test_silu_at_zero_one_and_minus_one():
    got = t64([0.0, 1.0, -1.0]).silu().numpy()
    expected = [0.0, 1.0 / (1.0 + math.exp(-1.0)), -1.0 / (1.0 + math.e)]
    np.testing.assert_allclose(got, expected, rtol=1e-15, atol=0)
    np.testing.assert_allclose(got[1:], [0.7311, -0.2689], atol=5e-5)     # the curriculum's rounded values


def _silu_argmin_by_bisection() -> float:
    """The minimum solves silu'(z) = sigma(z) (1 + z (1 - sigma(z))) = 0, i.e. 1 + z (1 - sigma(z)) = 0."""
    f = lambda z: 1.0 + z * (1.0 - 1.0 / (1.0 + math.exp(-z)))  # noqa: E731
    lo, hi = -2.0, -1.0                                           # f(-2) < 0 < f(-1)
    assert f(lo) < 0 < f(hi)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return 0.5 * (lo + hi)


def test_silu_minimum_is_about_minus_0_278_near_minus_1_278():
    z = np.linspace(-4.0, 1.0, 500_001)                           # step 1e-5
    values = t64(z).silu().numpy()
    i = int(np.argmin(values))
    z_star, s_star = z[i], values[i]
    assert 0 < i < len(z) - 1                                     # an interior minimum, not a grid edge
    assert abs(z_star - (-1.278)) < 5e-4 and abs(s_star - (-0.278)) < 5e-4
    z_ref = _silu_argmin_by_bisection()                           # -1.27846454...
    s_ref = z_ref / (1.0 + math.exp(-z_ref))                      # = 1 + z_ref at the minimum
    assert abs(z_star - z_ref) <= 1e-5 and abs(s_star - s_ref) < 1e-9
    assert abs(s_ref - (1.0 + z_ref)) < 1e-12
    zs = t64([z_star, z_ref], requires_grad=True)
    zs.silu().sum().backward()
    slope = zs.grad.numpy()
    assert abs(slope[0]) < 1e-5 and abs(slope[1]) < 1e-12
    # and the slope is not identically small: the derivative formula at 0 gives 1/2
    z0 = t64([0.0, 2.0], requires_grad=True)
    z0.silu().sum().backward()
    sig2 = 1.0 / (1.0 + math.exp(-2.0))
    np.testing.assert_allclose(z0.grad.numpy(), [0.5, sig2 * (1.0 + 2.0 * (1.0 - sig2))], rtol=1e-14)


# ---------------------------------------------------------------------------------------------------------------
# 3. Norm geometry.
# ---------------------------------------------------------------------------------------------------------------

def test_rmsnorm_with_unit_gain_maps_onto_the_sphere_of_radius_sqrt_d():
    d = 32
    x = rng(8).standard_normal((3, 7, d)) * rng(9).uniform(0.01, 100.0, (3, 7, 1))   # very different lengths
    y = nn.RMSNorm(d, eps=1e-300, dtype=F64)(t64(x)).numpy()
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), math.sqrt(d), rtol=1e-13)
    np.testing.assert_allclose(y, math.sqrt(d) * x / np.linalg.norm(x, axis=-1, keepdims=True), rtol=1e-13)


def test_rmsnorm_radius_shrinks_by_the_eps_factor():
    d, eps = 8, 0.5
    x = rng(10).standard_normal((4, d)) * 0.3
    y = nn.RMSNorm(d, eps=eps, dtype=F64)(t64(x)).numpy()
    ms = (x * x).mean(-1)
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), math.sqrt(d) * np.sqrt(ms / (ms + eps)), rtol=1e-13)
    assert np.all(np.linalg.norm(y, axis=-1) < math.sqrt(d) * 0.9)


def test_layernorm_output_has_zero_mean_and_unit_variance():
    d = 24
    x = rng(11).standard_normal((5, d)) * 7.0 + 3.0
    y = nn.LayerNorm(d, eps=1e-300, dtype=F64)(t64(x)).numpy()
    np.testing.assert_allclose(y.mean(-1), 0.0, atol=1e-14)
    np.testing.assert_allclose(y.var(-1), 1.0, rtol=1e-13)
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), math.sqrt(d), rtol=1e-13)   # sphere in the hyperplane


def test_layernorm_and_rmsnorm_with_gain_and_shift_follow_their_formulas():
    d = 6
    x = rng(12).standard_normal((3, d)) + 1.5
    g, b = rng(13).standard_normal(d), rng(14).standard_normal(d)
    ln = nn.LayerNorm(d, eps=1e-5, dtype=F64)
    ln.load_state_dict({"weight": t64(g), "bias": t64(b)})
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(ln(t64(x)).numpy(), (x - mu) / np.sqrt(var + 1e-5) * g + b, rtol=1e-13)
    rms = nn.RMSNorm(d, eps=1e-5, dtype=F64)
    rms.load_state_dict({"weight": t64(g)})
    expected = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-5) * g
    np.testing.assert_allclose(rms(t64(x)).numpy(), expected, rtol=1e-13)
    assert [n for n, _ in nn.LayerNorm(d, bias=False, dtype=F64).named_parameters()] == ["weight"]


# ---------------------------------------------------------------------------------------------------------------
# 4. RoPE: scores depend only on relative position; rotations keep norms.
# ---------------------------------------------------------------------------------------------------------------

def _rope(x: np.ndarray, start: int, n_positions: int = 128, d_head: int = 8, theta: float = 10000.0) -> np.ndarray:
    cos, sin = nn.rope_tables(n_positions, d_head, theta, F64, "cpu")
    L = x.shape[-2]
    return nn.apply_rope(t64(x), cos[start:start + L], sin[start:start + L]).numpy()


def test_rope_tables_follow_the_angle_formula():
    cos, sin = nn.rope_tables(10, 8, 10000.0, F64, "cpu")
    angle = np.arange(10)[:, None] * 10000.0 ** (-np.arange(0, 8, 2) / 8)
    np.testing.assert_allclose(cos.numpy(), np.cos(np.concatenate([angle, angle], -1)), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(sin.numpy(), np.sin(np.concatenate([angle, angle], -1)), rtol=1e-14, atol=1e-15)
    x = rng(15).standard_normal((1, 2, 10, 8))
    np.testing.assert_allclose(_rope(x, 0, 10), np_rope(x, np.arange(10.0), 10000.0), rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("shift", [1, 7, 93])
def test_rope_scores_are_unchanged_when_every_position_shifts(shift):
    r = rng(16)
    q, k = r.standard_normal((2, 3, 6, 8)), r.standard_normal((2, 3, 6, 8))
    scores = lambda start: _rope(q, start) @ np.swapaxes(_rope(k, start), -1, -2)  # noqa: E731
    np.testing.assert_allclose(scores(shift), scores(0), rtol=1e-12, atol=1e-12)
    assert np.abs(_rope(q, shift) - _rope(q, 0)).max() > 1e-2     # the vectors themselves did move


def test_rope_score_of_fixed_vectors_depends_only_on_the_distance():
    """The same q at every position and the same k at every position: score[i, j] is a function of i - j, so
    the score matrix is constant along each diagonal (Toeplitz)."""
    r = rng(17)
    L = 9
    q = np.broadcast_to(r.standard_normal(8), (1, 1, L, 8)).copy()
    k = np.broadcast_to(r.standard_normal(8), (1, 1, L, 8)).copy()
    s = (_rope(q, 0) @ np.swapaxes(_rope(k, 0), -1, -2))[0, 0]
    for offset in range(-L + 1, L):
        diag = np.diagonal(s, offset)
        np.testing.assert_allclose(diag, diag[0], rtol=1e-12, atol=1e-12)
    assert abs(s[0, 0] - s[1, 0]) > 1e-3                              # and the distance does matter


def test_rope_preserves_vector_norms():
    x = rng(18).standard_normal((2, 3, 20, 8)) * 5.0
    for start in (0, 50):
        np.testing.assert_allclose(np.linalg.norm(_rope(x, start), axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-13)


@pytest.mark.parametrize("offset", [1, 11, 40])
def test_attention_and_block_outputs_are_unchanged_by_the_rope_offset(offset):
    blk = block(LLAMA)
    randomize(blk, seed=19)
    x = t64(rng(20).standard_normal((2, 6, D)))
    np.testing.assert_allclose(blk.attn(x, offset).numpy(), blk.attn(x, 0).numpy(), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(blk(x, offset=offset).numpy(), blk(x).numpy(), rtol=1e-11, atol=1e-12)
    # the offset does reach the tables: a query rotated at other positions differs
    q = blk.attn.q_proj(x).reshape(2, 6, H, D // H).transpose(1, 2)
    cos, sin = blk.attn.rope_cos, blk.attn.rope_sin
    moved = nn.apply_rope(q, cos[offset:offset + 6], sin[offset:offset + 6]).numpy()
    assert np.abs(moved - nn.apply_rope(q, cos[:6], sin[:6]).numpy()).max() > 1e-3


# ---------------------------------------------------------------------------------------------------------------
# 5. Causality.
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg", [LLAMA, GPT2, PARALLEL], ids=["llama", "gpt2", "parallel"])
def test_perturbing_token_j_never_changes_earlier_outputs(cfg):
    blk = block(cfg)
    randomize(blk, seed=21)
    L = 6
    x = rng(22).standard_normal((2, L, D))
    y = blk(t64(x)).numpy()
    for j in range(L):
        x2 = x.copy()
        x2[:, j] += rng(23 + j).standard_normal((2, D))
        y2 = blk(t64(x2)).numpy()
        np.testing.assert_array_equal(y2[:, :j], y[:, :j])
        change = np.abs(y2[:, j:] - y[:, j:]).max(axis=(0, 2))      # per position >= j
        assert np.all(change > 1e-6), (j, change)


def test_causal_block_gradient_of_position_i_reaches_no_later_input():
    blk = block(LLAMA)
    randomize(blk, seed=24)
    L = 5
    for i in range(L):
        x = t64(rng(25).standard_normal((1, L, D)), requires_grad=True)
        upstream = np.zeros((1, L, D))
        upstream[0, i] = rng(26 + i).standard_normal(D)
        blk(x).backward(t64(upstream))
        g = np.abs(x.grad.numpy()[0]).max(axis=-1)
        assert np.all(g[i + 1:] == 0) and np.all(g[:i + 1] > 0), (i, g)


@pytest.mark.parametrize("cfg", [LLAMA.with_(causal=False), BERT], ids=["llama-bidirectional", "bert"])
def test_non_causal_block_lets_a_later_token_change_earlier_outputs(cfg):
    blk = block(cfg)
    randomize(blk, seed=27)
    x = rng(28).standard_normal((1, 5, D))
    x2 = x.copy()
    x2[:, -1] += 1.0
    change = np.abs(blk(t64(x2)).numpy() - blk(t64(x)).numpy()).max(axis=-1)[0]
    assert np.all(change > 1e-6), change


# ---------------------------------------------------------------------------------------------------------------
# 6. GQA is MHA with each KV head repeated for its group of consecutive query heads.
# ---------------------------------------------------------------------------------------------------------------

def _repeat_heads(a: np.ndarray, n_kv: int, n_rep: int) -> np.ndarray:
    """Rows (or entries) of a K/V projection, (n_kv * d_head, ...) -> (n_kv * n_rep * d_head, ...): head g's
    rows repeated for query heads g * n_rep ... g * n_rep + n_rep - 1."""
    per_head = a.reshape(n_kv, -1, *a.shape[1:])
    return np.repeat(per_head, n_rep, axis=0).reshape(-1, *a.shape[1:])


@pytest.mark.parametrize("n_kv", [1, 2])
@pytest.mark.parametrize("bias", [False, True])
def test_gqa_equals_mha_with_repeated_kv_weights(n_kv, bias):
    gqa_cfg = LLAMA.with_(n_kv_heads=n_kv, bias=bias)
    mha_cfg = gqa_cfg.with_(n_kv_heads=H)
    gqa, mha = block(gqa_cfg, seed=0), block(mha_cfg, seed=1)
    p = randomize(gqa, seed=29)
    n_rep = H // n_kv
    mha_state = {k: (_repeat_heads(v, n_kv, n_rep) if k.startswith(("attn.k_proj", "attn.v_proj")) else v)
                 for k, v in p.items()}
    mha.load_state_dict({k: t64(v) for k, v in mha_state.items()})
    x = rng(30).standard_normal((2, 5, D))
    xg, xm = t64(x, requires_grad=True), t64(x, requires_grad=True)
    yg, ym = gqa(xg, offset=2), mha(xm, offset=2)
    np.testing.assert_allclose(yg.numpy(), ym.numpy(), rtol=1e-13, atol=1e-13)
    upstream = t64(rng(31).standard_normal((2, 5, D)))
    yg.backward(upstream)
    ym.backward(upstream)
    np.testing.assert_allclose(xg.grad.numpy(), xm.grad.numpy(), rtol=1e-12, atol=1e-13)
    # a shared KV weight's gradient is the sum of the gradients of its copies (repeat_kv's backward)
    for name in ("k_proj", "v_proj"):
        g_mha = getattr(mha.attn, name).weight.grad.numpy().reshape(n_kv, n_rep, -1, D).sum(axis=1).reshape(-1, D)
        np.testing.assert_allclose(getattr(gqa.attn, name).weight.grad.numpy(), g_mha, rtol=1e-12, atol=1e-13)


def test_gqa_grouping_is_consecutive_not_interleaved():
    """Repeating the KV heads in the other order (interleaved, head h -> KV head h % n_kv) gives another block."""
    gqa, mha = block(LLAMA, seed=0), block(LLAMA.with_(n_kv_heads=H), seed=1)
    p = randomize(gqa, seed=32)
    tile = lambda a: np.tile(a.reshape(H_KV, -1, D), (H // H_KV, 1, 1)).reshape(-1, D)  # noqa: E731
    mha.load_state_dict({k: t64(tile(v) if k.startswith(("attn.k_proj", "attn.v_proj")) else v)
                         for k, v in p.items()})
    x = t64(rng(33).standard_normal((1, 5, D)))
    assert np.abs(gqa(x).numpy() - mha(x).numpy()).max() > 1e-4


def test_repeat_kv_repeats_each_head_for_consecutive_query_heads():
    x = rng(34).standard_normal((2, 3, 4, 5))
    out = nn.repeat_kv(t64(x), 2).numpy()
    np.testing.assert_array_equal(out, x[:, [0, 0, 1, 1, 2, 2]])
    assert nn.repeat_kv(t64(x), 1).shape == (2, 3, 4, 5)


def test_mha_attention_module_matches_attention_by_hand():
    cfg = LLAMA.with_(n_kv_heads=H)
    blk = block(cfg)
    p = randomize(blk, seed=35)
    x = rng(36).standard_normal((2, 5, D))
    np.testing.assert_allclose(blk.attn(t64(x), 4).numpy(), np_attention(cfg, p, x, 4), rtol=1e-12, atol=1e-13)


# ---------------------------------------------------------------------------------------------------------------
# 7. LoRA.
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("targets", [("q_proj", "v_proj"), nn.config.PROJECTIONS], ids=["qv", "all"])
def test_lora_with_zero_b_equals_the_base_block_and_trains_only_the_adapters(targets):
    lora_cfg = LLAMA.with_(lora_rank=2, lora_alpha=8.0, lora_targets=targets)
    lora, base = block(lora_cfg, seed=0), block(LLAMA, seed=1)
    base_state = {k: v for k, v in lora.state_dict().items() if not k.endswith(("lora_A", "lora_B"))}
    base.load_state_dict(base_state)
    adapters = [k for k, _ in lora.named_parameters() if k.endswith(("lora_A", "lora_B"))]
    owner = lambda t: "attn" if t in ("q_proj", "k_proj", "v_proj", "o_proj") else "ffn"  # noqa: E731
    assert sorted(adapters) == sorted(f"{owner(t)}.{t}.lora_{ab}" for t in targets for ab in "AB")
    x = t64(rng(37).standard_normal((2, 5, D)))
    y = lora(x)
    np.testing.assert_array_equal(y.numpy(), base(x).numpy())
    y.backward(t64(rng(38).standard_normal((2, 5, D))))
    for name, p in lora.named_parameters():
        if name.endswith(("lora_A", "lora_B")):
            assert p.requires_grad and p.grad is not None, name
        else:
            assert not p.requires_grad and p.grad is None, name
    # with B = 0 the gradient of A is zero (it is multiplied by B), and the gradient of B is not
    assert np.abs(lora.attn.q_proj.lora_B.grad.numpy()).max() > 1e-6
    np.testing.assert_array_equal(lora.attn.q_proj.lora_A.grad.numpy(), 0.0)


def test_lora_linear_follows_its_formula_and_its_hand_derived_gradients():
    d_in, d_out, r, alpha = 5, 3, 2, 6.0
    lin = nn.Linear(d_in, d_out, bias=True, generator=tb.Generator(0), dtype=F64, lora_rank=r, lora_alpha=alpha)
    p = randomize(lin, seed=39)
    W, b, A, B = p["weight"], p["bias"], p["lora_A"], p["lora_B"]
    s = alpha / r
    x = rng(40).standard_normal((4, d_in))
    xt = t64(x, requires_grad=True)
    y = lin(xt)
    np.testing.assert_allclose(y.numpy(), x @ W.T + b + s * (x @ A.T) @ B.T, rtol=1e-13)
    g = rng(41).standard_normal((4, d_out))
    y.backward(t64(g))
    np.testing.assert_allclose(lin.lora_B.grad.numpy(), s * g.T @ (x @ A.T), rtol=1e-13)
    np.testing.assert_allclose(lin.lora_A.grad.numpy(), s * (g @ B).T @ x, rtol=1e-13)
    np.testing.assert_allclose(lin.weight.grad.numpy(), g.T @ x, rtol=1e-13)
    np.testing.assert_allclose(lin.bias.grad.numpy(), g.sum(0), rtol=1e-13)
    np.testing.assert_allclose(xt.grad.numpy(), g @ W + s * (g @ B) @ A, rtol=1e-13)


def test_lora_adds_rank_times_fan_in_plus_fan_out_parameters():
    cfg = nn.preset("tiny")
    r = 4
    base = nn.TransformerBlock(cfg, generator=tb.Generator(0), device="meta").num_parameters()
    lora = nn.TransformerBlock(cfg.with_(lora_rank=r), generator=tb.Generator(0), device="meta").num_parameters()
    d, d_kv = cfg.d_model, cfg.n_kv_heads * cfg.d_head
    assert lora - base == r * (d + d) + r * (d + d_kv)            # q_proj (d -> d) and v_proj (d -> d_kv)


# ---------------------------------------------------------------------------------------------------------------
# 8. Parameter counts against the closed forms.
# ---------------------------------------------------------------------------------------------------------------

def closed_form_block_params(cfg: nn.BlockConfig) -> int:
    d, d_ff, d_kv = cfg.d_model, cfg.d_ff, cfg.n_kv_heads * cfg.d_head
    if cfg.name in ("gpt2-small", "bert-base"):
        return 4 * d * d + 4 * d + 2 * d * d_ff + d_ff + d + 4 * d
    return 2 * d * d + 2 * d * d_kv + 3 * d * d_ff + 2 * d


@pytest.mark.parametrize("name", list(nn.PRESETS))
def test_preset_block_parameter_count_equals_its_closed_form(name):
    cfg = nn.preset(name)
    assert cfg is nn.PRESETS[name] and cfg.name == name
    blk = nn.TransformerBlock(cfg, generator=tb.Generator(0), device="meta")
    assert all(p.device == "meta" for p in blk.parameters())
    assert blk.num_parameters() == closed_form_block_params(cfg)
    assert blk.num_parameters() == sum(math.prod(p.shape) for p in blk.parameters())


def test_the_closed_form_covers_both_preset_families():
    llama_like = [n for n, c in nn.PRESETS.items() if c.norm == "rms" and c.ffn == "swiglu" and not c.bias]
    assert sorted(set(nn.PRESETS) - set(llama_like)) == ["bert-base", "gpt2-small"]
    for name in ("gpt2-small", "bert-base"):
        c = nn.preset(name)
        assert c.norm == "layer" and c.bias and c.ffn != "swiglu" and c.n_kv_heads == c.n_heads


@pytest.mark.parametrize("name, expected, n_blocks_total", [
    ("llama2-7b", 202_383_360, 6_476_267_520),     # 000 and 004: "~202 M"; 004's shares table says ~6.4 B for 32
    # 004's "Real-World Configurations" table says ~822 M (and ~65.7 B for 80 layers); the exact count is
    # 855,654,400 per block, 68,452,352,000 for the 80 blocks.
    ("llama2-70b", 855_654_400, 68_452_352_000),
    # 004 says ~213 M for Llama-3-8B and Mistral-7B (and ~6.8 B for 32 layers); the exact count is
    # 218,112,000 per block, 6,979,584,000 for the 32 blocks.
    ("llama3-8b", 218_112_000, 6_979_584_000),
    ("mistral-7b", 218_112_000, 6_979_584_000),
    ("gpt2-small", 7_087_872, 85_054_464),
])
def test_curriculum_block_parameter_counts(name, expected, n_blocks_total):
    cfg = nn.preset(name)
    assert closed_form_block_params(cfg) == expected
    assert nn.TransformerBlock(cfg, generator=tb.Generator(0), device="meta").num_parameters() == expected
    assert cfg.n_layers * expected == n_blocks_total


def test_llama2_7b_whole_model_count_and_attention_ffn_split():
    """000: 32 blocks ~6.5 B plus embedding and unembedding give the published 6.7 B. The untied embedding and
    LM head are 2 * 32000 * 4096 = 262,144,000 (000 says ~0.5 B); with the final RMSNorm the total is exactly
    Llama-2-7B's 6,738,415,616. Attention holds 33.2% of a block, the FFN 66.8% (004's count_parameters)."""
    cfg = nn.preset("llama2-7b")
    blk = nn.TransformerBlock(cfg, generator=tb.Generator(0), device="meta")
    embeddings = 2 * cfg.vocab_size * cfg.d_model
    assert not cfg.tie_embeddings and embeddings == 262_144_000
    assert cfg.n_layers * blk.num_parameters() + embeddings + cfg.d_model == 6_738_415_616
    attn, ffn = blk.attn.num_parameters(), blk.ffn.num_parameters()
    assert (round(100 * attn / blk.num_parameters(), 1), round(100 * ffn / blk.num_parameters(), 1)) == (33.2, 66.8)


def test_gqa_attention_of_the_70b_models_is_2_25_d_squared():
    """000: with d_kv = d/8 the four attention projections hold d^2 + 2 d d/8 + d^2 = 2.25 d^2. Its split for
    Llama-3-70B, "~25% / 75%", is off: attention is 150,994,944 of 855,654,400 (17.6%), the FFN 82.4%."""
    for name in ("llama2-70b", "llama3-70b"):
        cfg = nn.preset(name)
        blk = nn.TransformerBlock(cfg, generator=tb.Generator(0), device="meta")
        d = cfg.d_model
        assert blk.attn.num_parameters() * 4 == 9 * d * d == 4 * 150_994_944
        assert blk.num_parameters() == 855_654_400
        share = blk.attn.num_parameters() / blk.num_parameters()
        assert (round(100 * share, 1), round(100 * blk.ffn.num_parameters() / blk.num_parameters(), 1)) == (17.6, 82.4)


def test_llama2_7b_block_matches_the_4d2_plus_3d_dff_table():
    """000's table: 4 d^2 + 3 d d_ff (MHA), plus the 2 d norm gains it calls negligible."""
    d, d_ff = 4096, 11008
    assert 4 * d * d + 3 * d * d_ff + 2 * d == 202_383_360
    assert round(d * d / 1e6, 1) == 16.8 and round(d * d_ff / 1e6, 1) == 45.1


# ---------------------------------------------------------------------------------------------------------------
# 9. Bad input: clear errors naming the parameter and the numbers.
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, fragments", [
    (dict(d_model=10, n_heads=3, n_kv_heads=3, d_ff=8), ["d_model=10", "n_heads=3", "divisible"]),
    (dict(d_model=12, n_heads=4, n_kv_heads=3, d_ff=8), ["n_heads=4", "n_kv_heads=3", "divisible"]),
    (dict(d_model=12, n_heads=4, n_kv_heads=4, d_ff=8), ["RoPE", "d_head", "12 / 4 = 3", "odd"]),
    (dict(d_model=16, n_heads=4, n_kv_heads=4, d_ff=8, norm="batch"), ["norm", "'rms'", "'layer'", "'batch'"]),
    (dict(d_model=16, n_heads=4, n_kv_heads=4, d_ff=8, ffn="geglu"), ["ffn", "'swiglu'", "'geglu'"]),
    (dict(d_model=16, n_heads=4, n_kv_heads=4, d_ff=8, norm_position="middle"), ["norm_position", "'middle'"]),
    (dict(d_model=0, n_heads=4, n_kv_heads=4, d_ff=8), ["d_model", "positive", "0"]),
    (dict(d_model=16, n_heads=-4, n_kv_heads=4, d_ff=8), ["n_heads", "positive", "-4"]),
    (dict(d_model=16, n_heads=4, n_kv_heads=0, d_ff=8), ["n_kv_heads", "positive", "0"]),
    (dict(d_model=16, n_heads=4, n_kv_heads=4, d_ff=-1), ["d_ff", "positive", "-1"]),
    (dict(d_model=16, n_heads=4, n_kv_heads=4, d_ff=8, max_seq_len=0), ["max_seq_len", "positive", "0"]),
    (dict(d_model=16.0, n_heads=4, n_kv_heads=4, d_ff=8), ["d_model", "int", "16.0"]),
    (dict(d_model=16, n_heads=4, n_kv_heads=4, d_ff=8, lora_rank=-1), ["lora_rank", "-1"]),
    (dict(d_model=16, n_heads=4, n_kv_heads=4, d_ff=8, lora_rank=2, lora_targets=("w_q",)), ["lora_targets", "w_q"]),
])
def test_bad_block_config_raises_naming_the_field_and_values(kwargs, fragments):
    with pytest.raises(ValueError, match=msg("BlockConfig", *fragments)):
        nn.BlockConfig(**kwargs)


def test_with_revalidates_and_odd_d_head_is_fine_without_rope():
    with pytest.raises(ValueError, match=msg("n_kv_heads=3")):
        LLAMA.with_(n_kv_heads=3)
    cfg = nn.BlockConfig(12, 4, 4, 8, rope=False)
    assert cfg.d_head == 3
    blk = block(cfg)
    p = randomize(blk, seed=42)
    x = rng(43).standard_normal((1, 4, 12))
    np.testing.assert_allclose(blk(t64(x)).numpy(), np_block(cfg, p, x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("rope", [True, False])
def test_sequence_beyond_the_context_length_raises(rope):
    blk = block(LLAMA.with_(max_seq_len=8, rope=rope))
    assert blk(tb.zeros(1, 8, D, dtype=F64)).shape == (1, 8, D)               # exactly full is fine
    assert blk(tb.zeros(1, 3, D, dtype=F64), offset=5).shape == (1, 3, D)
    with pytest.raises(ValueError, match=msg("max_seq_len=8", "0..8")):
        blk(tb.zeros(1, 9, D, dtype=F64))
    with pytest.raises(ValueError, match=msg("max_seq_len=8", "5..8")):
        blk(tb.zeros(1, 4, D, dtype=F64), offset=5)


@pytest.mark.parametrize("shape", [(5, D), (1, 1, 5, D), (1, 5, D + 1), (1, 5, 8)])
def test_block_rejects_wrong_rank_or_width(shape):
    with pytest.raises(ValueError, match=msg("TransformerBlock", f"d_model={D}", str(shape))):
        block(LLAMA)(tb.zeros(*shape, dtype=F64))


@pytest.mark.parametrize("shape", [(), (3, 4), (2, 3, 6)])
def test_linear_rejects_wrong_width(shape):
    lin = nn.Linear(5, 2, generator=tb.Generator(0), dtype=F64)
    with pytest.raises(ValueError, match=msg("Linear", "(..., 5)", str(shape))):
        lin(tb.zeros(*shape, dtype=F64))


@pytest.mark.parametrize("norm", [nn.RMSNorm(5, dtype=F64), nn.LayerNorm(5, dtype=F64)], ids=["rms", "layer"])
@pytest.mark.parametrize("shape", [(), (3, 4), (2, 3, 6)])
def test_norms_reject_wrong_width(norm, shape):
    with pytest.raises(ValueError, match=msg(type(norm).__name__, "(..., 5)", str(shape))):
        norm(tb.zeros(*shape, dtype=F64))


def test_load_state_dict_names_missing_and_unexpected_keys():
    blk = block(LLAMA)
    state = blk.state_dict()
    missing = dict(state)
    del missing["attn.k_proj.weight"]
    with pytest.raises(KeyError, match=msg("missing", "attn.k_proj.weight")):
        blk.load_state_dict(missing)
    extra = dict(state, **{"attn.k_proj.bias": tb.zeros(8, dtype=F64)})
    with pytest.raises(KeyError, match=msg("unexpected", "attn.k_proj.bias")):
        blk.load_state_dict(extra)


def test_load_state_dict_names_a_misshaped_or_mistyped_entry_and_loads_nothing():
    blk = block(LLAMA)
    before = {k: v.numpy().copy() for k, v in blk.state_dict().items()}
    new = {k: t64(v + 1.0) for k, v in before.items()}      # all valid but one
    bad_shape = dict(new, **{"attn.k_proj.weight": tb.zeros(D, D, dtype=F64)})
    with pytest.raises(ValueError, match=msg("attn.k_proj.weight", f"({D}, {D})", f"({H_KV * D // H}, {D})")):
        blk.load_state_dict(bad_shape)
    bad_dtype = dict(new, **{"ffn.up_proj.weight": tb.zeros(D_FF, D, dtype=tb.float32)})
    with pytest.raises(ValueError, match=msg("ffn.up_proj.weight", "float32", "float64", f"({D_FF}, {D})")):
        blk.load_state_dict(bad_dtype)
    not_tensor = dict(new, **{"norm1.weight": np.ones(D)})
    with pytest.raises(TypeError, match=msg("norm1.weight", "Tensor", "ndarray")):
        blk.load_state_dict(not_tensor)
    for k, v in blk.state_dict().items():                     # validated before anything is copied
        np.testing.assert_array_equal(v.numpy(), before[k])


@pytest.mark.parametrize("make", [
    lambda g: nn.TransformerBlock(LLAMA, generator=g),
    lambda g: nn.Linear(3, 4, generator=g),
    lambda g: nn.Embedding(10, 4, generator=g),
    lambda g: nn.SwiGLU(LLAMA, generator=g),
    lambda g: nn.MLP(GPT2, generator=g),
    lambda g: nn.Attention(LLAMA, generator=g),
], ids=["block", "linear", "embedding", "swiglu", "mlp", "attention"])
@pytest.mark.parametrize("bad", [None, 0, np.random.default_rng(0)], ids=["none", "int", "numpy-rng"])
def test_modules_need_an_explicit_generator(make, bad):
    with pytest.raises(TypeError, match=msg("generator", "tb.Generator")):
        make(bad)


def test_omitting_the_generator_is_a_type_error():
    with pytest.raises(TypeError, match="generator"):
        nn.TransformerBlock(LLAMA)
    with pytest.raises(TypeError, match="generator"):
        nn.Linear(3, 4)


def test_unknown_preset_lists_the_presets():
    with pytest.raises(ValueError, match=msg("'nope'", *nn.PRESETS)):
        nn.preset("nope")


# ---------------------------------------------------------------------------------------------------------------
# 10. Module API.
# ---------------------------------------------------------------------------------------------------------------

def test_named_parameters_of_a_swiglu_pre_norm_block():
    blk = block(LLAMA)
    d_kv = H_KV * LLAMA.d_head
    assert [(n, p.shape) for n, p in blk.named_parameters()] == [
        ("norm1.weight", (D,)),
        ("attn.q_proj.weight", (D, D)), ("attn.k_proj.weight", (d_kv, D)),
        ("attn.v_proj.weight", (d_kv, D)), ("attn.o_proj.weight", (D, D)),
        ("norm2.weight", (D,)),
        ("ffn.gate_proj.weight", (D_FF, D)), ("ffn.up_proj.weight", (D_FF, D)), ("ffn.down_proj.weight", (D, D_FF)),
    ]
    assert [n for n, _ in blk.named_modules()] == ["", "norm1", "attn", "attn.q_proj", "attn.k_proj", "attn.v_proj",
                                                  "attn.o_proj", "norm2", "ffn", "ffn.gate_proj", "ffn.up_proj",
                                                  "ffn.down_proj"]


def test_named_parameters_of_a_gpt2_style_block_with_biases():
    blk = block(GPT2)
    assert [(n, p.shape) for n, p in blk.named_parameters()] == [
        ("norm1.weight", (D,)), ("norm1.bias", (D,)),
        ("attn.q_proj.weight", (D, D)), ("attn.q_proj.bias", (D,)),
        ("attn.k_proj.weight", (D, D)), ("attn.k_proj.bias", (D,)),
        ("attn.v_proj.weight", (D, D)), ("attn.v_proj.bias", (D,)),
        ("attn.o_proj.weight", (D, D)), ("attn.o_proj.bias", (D,)),
        ("norm2.weight", (D,)), ("norm2.bias", (D,)),
        ("ffn.up_proj.weight", (D_FF, D)), ("ffn.up_proj.bias", (D_FF,)),
        ("ffn.down_proj.weight", (D, D_FF)), ("ffn.down_proj.bias", (D,)),
    ]
    assert not hasattr(blk.attn, "rope_cos")
    assert blk.parameters() == [p for _, p in blk.named_parameters()]
    np.testing.assert_array_equal(blk.norm1.weight.numpy(), 1.0)           # gains start at 1, biases at 0
    np.testing.assert_array_equal(blk.attn.q_proj.bias.numpy(), 0.0)


def test_named_parameters_of_a_lora_block():
    blk = block(LLAMA.with_(lora_rank=3))
    names = [n for n, _ in blk.named_parameters()]
    assert names[1:4] == ["attn.q_proj.weight", "attn.q_proj.lora_A", "attn.q_proj.lora_B"]
    assert blk.attn.q_proj.lora_A.shape == (3, D) and blk.attn.v_proj.lora_B.shape == (H_KV * LLAMA.d_head, 3)
    assert not hasattr(blk.attn.k_proj, "lora_A")


def test_state_dict_round_trip_changes_outputs_accordingly():
    a, b = block(LLAMA, seed=0), block(LLAMA, seed=1)
    x = t64(rng(44).standard_normal((2, 4, D)))
    ya, yb = a(x).numpy(), b(x).numpy()
    assert np.abs(ya - yb).max() > 1e-3
    state = a.state_dict()
    assert list(state) == [n for n, _ in a.named_parameters()]
    assert all(not t.requires_grad for t in state.values())
    b.load_state_dict(state)
    np.testing.assert_array_equal(b(x).numpy(), ya)
    # and back: b's old weights restore b's old outputs
    c = block(LLAMA, seed=1)
    b.load_state_dict(c.state_dict())
    np.testing.assert_array_equal(b(x).numpy(), yb)


def test_zero_grad_clears_every_gradient():
    blk = block(GPT2)
    blk(t64(rng(45).standard_normal((1, 3, D)))).sum().backward()
    assert all(p.grad is not None for p in blk.parameters())
    blk.zero_grad()
    assert all(p.grad is None for p in blk.parameters())


def test_gradients_accumulate_across_backward_calls():
    blk = block(LLAMA)
    x = t64(rng(46).standard_normal((1, 3, D)))
    blk(x).sum().backward()
    first = blk.attn.q_proj.weight.grad.numpy().copy()
    blk(x).sum().backward()
    np.testing.assert_allclose(blk.attn.q_proj.weight.grad.numpy(), 2 * first, rtol=1e-14)


def test_to_float32_casts_parameters_and_rope_tables_and_still_runs():
    blk = block(LLAMA)
    randomize(blk, seed=47)
    x = rng(48).standard_normal((2, 5, D))
    y64 = blk(t64(x)).numpy()
    blk(t64(x)).sum().backward()
    assert blk.to(tb.float32) is blk
    assert all(p.dtype == tb.float32 and p.grad is None for p in blk.parameters())
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in blk.parameters())
    assert blk.attn.rope_cos.dtype == tb.float32 and blk.attn.rope_sin.dtype == tb.float32
    y32 = blk(tb.tensor(x, dtype=tb.float32))
    assert y32.dtype == tb.float32
    np.testing.assert_allclose(y32.numpy(), y64, rtol=1e-5, atol=1e-5)
    assert np.abs(y32.numpy() - y64).max() > 0                        # it really is float32 arithmetic
    y32.sum().backward()
    assert blk.attn.q_proj.weight.grad.dtype == tb.float32


def test_freeze_stops_gradients():
    blk = block(LLAMA)
    assert blk.attn.freeze() is blk.attn
    x = t64(rng(49).standard_normal((1, 3, D)), requires_grad=True)
    blk(x).sum().backward()
    for name, p in blk.named_parameters():
        if name.startswith("attn."):
            assert not p.requires_grad and p.grad is None, name
        else:
            assert p.requires_grad and p.grad is not None, name
    assert x.grad is not None
    blk.zero_grad()
    blk.freeze()
    x2 = t64(rng(49).standard_normal((1, 3, D)), requires_grad=True)
    blk(x2).sum().backward()
    assert all(p.grad is None for p in blk.parameters()) and x2.grad is not None
    with pytest.raises(RuntimeError, match="does not require grad"):
        blk(t64(rng(50).standard_normal((1, 3, D)))).sum().backward()


# ---------------------------------------------------------------------------------------------------------------
# 11. Embedding.
# ---------------------------------------------------------------------------------------------------------------

def test_embedding_lookup_equals_weight_rows():
    emb = nn.Embedding(7, 3, generator=tb.Generator(0), dtype=F64)
    ids = np.array([[1, 3, 1], [6, 1, 0]])
    W = emb.weight.numpy()
    out = emb(tb.tensor(ids)).numpy()
    assert out.shape == (2, 3, 3)
    for b in range(2):
        for i in range(3):
            np.testing.assert_array_equal(out[b, i], W[ids[b, i]])


def test_embedding_backward_scatter_adds_repeated_ids():
    emb = nn.Embedding(7, 3, generator=tb.Generator(0), dtype=F64)
    ids = np.array([[1, 3, 1], [6, 1, 0]])
    g = np.arange(1.0, 19.0).reshape(2, 3, 3)            # upstream rows: [1,2,3], [4,5,6], ..., [16,17,18]
    emb(tb.tensor(ids)).backward(t64(g))
    expected = np.array([
        [16.0, 17.0, 18.0],                              # id 0: g[1, 2]
        [1 + 7 + 13, 2 + 8 + 14, 3 + 9 + 15],            # id 1: g[0, 0] + g[0, 2] + g[1, 1]
        [0.0, 0.0, 0.0],
        [4.0, 5.0, 6.0],                                 # id 3: g[0, 1]
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
        [10.0, 11.0, 12.0],                              # id 6: g[1, 0]
    ])
    np.testing.assert_array_equal(emb.weight.grad.numpy(), expected)


def test_embedding_rejects_out_of_range_ids():
    emb = nn.Embedding(7, 3, generator=tb.Generator(0), dtype=F64)
    with pytest.raises(IndexError, match=msg("7", "out of bounds")):
        emb(tb.tensor(np.array([0, 7])))
