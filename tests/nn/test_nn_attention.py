"""nn/attention.py: RoPE (tables, rotation, relative positions), the causal mask, grouped-query attention and
the context length.

Oracles: the closed-form angle formula and the hand-derived rotation (tinygrad_block.manual), identities of
the mathematics (scores depend only on distances; rotations keep norms; GQA is MHA with each KV head repeated
for its group), and perturbation for causality. Attention's values and gradients against the hand-derived
pairs are in test_nn_manual.py, against PyTorch and Hugging Face in test_nn_block_torch.py.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import BERT, F64, GPT2, H_KV, LLAMA, PARALLEL, D, H, block, msg, randomize, rng, t64

import tinygrad_block as tb
from tinygrad_block import manual, nn


# ---------------------------------------------------------------- RoPE: scores depend only on relative position
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
    np.testing.assert_allclose(_rope(x, 0, 10), manual.rope_forward(x, 10000.0)[0], rtol=1e-13, atol=1e-14)


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


# ---------------------------------------------------------------- causality
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


# ---------------------------------------------------------------- GQA: MHA with each KV head repeated for its group
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


# ---------------------------------------------------------------- the context length
@pytest.mark.parametrize("rope", [True, False])
def test_sequence_beyond_the_context_length_raises(rope):
    blk = block(LLAMA.with_(max_seq_len=8, rope=rope))
    assert blk(tb.zeros(1, 8, D, dtype=F64)).shape == (1, 8, D)               # exactly full is fine
    assert blk(tb.zeros(1, 3, D, dtype=F64), offset=5).shape == (1, 3, D)
    with pytest.raises(ValueError, match=msg(None, "max_seq_len=8", "0..8")):
        blk(tb.zeros(1, 9, D, dtype=F64))
    with pytest.raises(ValueError, match=msg(None, "max_seq_len=8", "5..8")):
        blk(tb.zeros(1, 4, D, dtype=F64), offset=5)


def test_the_causal_mask_is_built_once_per_length_and_equals_numpys():
    """Oracle: np.triu of -inf above the diagonal. The same tensor serves every call at one length; a new
    length builds a new one (and only the latest is kept)."""
    cfg = nn.preset("tiny")
    attn = nn.Attention(cfg, generator=tb.Generator(0), dtype=tb.float64)
    x5, x7 = tb.zeros(1, 5, cfg.d_model, dtype=tb.float64), tb.zeros(1, 7, cfg.d_model, dtype=tb.float64)
    first = attn.mask(5, x5)
    np.testing.assert_array_equal(first.numpy(), np.triu(np.full((5, 5), -np.inf), 1))
    assert attn.mask(5, x5) is first and first.dtype == tb.float64
    seven = attn.mask(7, x7)
    assert seven is not first and seven.shape == (7, 7) and attn.mask(7, x7) is seven


@pytest.mark.parametrize("L, past, keys", [(4, 0, None), (3, 5, None), (3, 5, range(4, 10)), (2, 0, range(0, 5))])
def test_the_causal_mask_of_any_queries_and_keys_equals_the_position_rule(L, past, keys):
    """Oracle: mask[i, j] = -inf where key position keys[j] > query position past + i, else 0 (numpy, by
    positions). The default keys are 0 .. past + L - 1; a tile of tiled attention passes its own range."""
    positions = np.arange(past + L) if keys is None else np.arange(keys.start, keys.stop)
    want = np.where(positions[None, :] > past + np.arange(L)[:, None], -np.inf, 0.0)
    got = nn.causal_mask(L, F64, "cpu", past, keys=keys)
    assert got.dtype == F64 and not got.requires_grad
    np.testing.assert_array_equal(got.numpy(), want)


def test_the_causal_mask_is_a_constant_no_observer_sees():
    """Built under trace.constant(): no event reaches an observer (nothing counted or drawn) and no graph is
    recorded, on every array device, the strict one included (nothing read back to the host)."""
    events = []
    with tb.observe(events.append):
        masks = [nn.causal_mask(5, F64, device, 2) for device in ("cpu", "strict", "meta")]
    assert events == [] and all(m.is_leaf and not m.requires_grad and m.shape == (5, 7) for m in masks)
    np.testing.assert_array_equal(masks[1].numpy(), masks[0].numpy())


@pytest.mark.parametrize("causal", [True, False])
def test_sdpa_equals_the_formula_and_runs_in_its_four_named_steps(causal):
    """Oracle: softmax(q k^T / sqrt(d) + mask) v in numpy. The steps 'scores', 'mask' (causal only), 'softmax',
    'weighted sum' are what the graphs and the FLOP tables group by."""
    r = rng(21)
    q, k, v = r.standard_normal((2, 3, 4, 8)), r.standard_normal((2, 3, 6, 8)), r.standard_normal((2, 3, 6, 8))
    mask = nn.causal_mask(4, F64, "cpu", past=2) if causal else None
    steps = []
    with tb.observe(lambda e: steps.append(e.step)):
        out = nn.sdpa(t64(q), t64(k), t64(v), mask)
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(8) + (mask.numpy() if causal else 0)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(out.numpy(), p / p.sum(-1, keepdims=True) @ v, rtol=1e-13, atol=1e-14)
    named = ["scores", "mask", "softmax", "weighted sum"] if causal else ["scores", "softmax", "weighted sum"]
    assert list(dict.fromkeys(steps)) == named
