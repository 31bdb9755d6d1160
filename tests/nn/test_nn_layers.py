"""nn/layers.py: Linear (with bias and LoRA), RMSNorm, LayerNorm, Embedding.

Oracles: the layers' formulas written in numpy (norms, LoRA's y = x W^T + b + s (x A^T) B^T with its
hand-derived gradients), the geometry they imply (RMSNorm maps onto the sphere of radius sqrt(d)), hand-counted
parameters and hand-summed embedding gradients.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import F64, msg, randomize, rng, t64

import tinygrad_block as tb
from tinygrad_block import nn

JIT_CFG = nn.preset("tiny").with_(n_layers=1, vocab_size=40, max_seq_len=16)    # a small LM for compiled calls


# ---------------------------------------------------------------- norm geometry
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


@pytest.mark.parametrize("norm", [nn.RMSNorm(5, dtype=F64), nn.LayerNorm(5, dtype=F64)], ids=["rms", "layer"])
@pytest.mark.parametrize("shape", [(), (3, 4), (2, 3, 6)])
def test_norms_reject_wrong_width(norm, shape):
    with pytest.raises(ValueError, match=msg(None, type(norm).__name__, "(..., 5)", str(shape))):
        norm(tb.zeros(*shape, dtype=F64))


# ---------------------------------------------------------------- Linear and LoRA
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


@pytest.mark.parametrize("shape", [(), (3, 4), (2, 3, 6)])
def test_linear_rejects_wrong_width(shape):
    lin = nn.Linear(5, 2, generator=tb.Generator(0), dtype=F64)
    with pytest.raises(ValueError, match=msg(None, "Linear", "(..., 5)", str(shape))):
        lin(tb.zeros(*shape, dtype=F64))


# ---------------------------------------------------------------- Embedding
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


@pytest.mark.parametrize("ids, bad", [([0, 7], 7), ([[3, -1], [0, 1]], -1), ([-8, 9], -8), ([2**40], 2**40)])
def test_embedding_refuses_ids_outside_the_vocabulary_by_name(ids, bad, device):
    """-1 is no row of the table (numpy indexing would take the last), and 7 is past it: both name the id."""
    emb = nn.Embedding(7, 3, generator=tb.Generator(0), dtype=F64, device=device)
    with pytest.raises(IndexError, match=msg("Embedding", f"token id {bad} ", "vocabulary of 7", "ids 0..6")):
        emb(tb.tensor(ids, device=device))


def test_embedding_takes_lists_and_int32_ids_and_refuses_float_ids():
    emb = nn.Embedding(7, 3, generator=tb.Generator(0), dtype=F64)
    W = emb.weight.numpy()
    np.testing.assert_array_equal(emb([[6, 0]]).numpy(), W[[[6, 0]]])
    np.testing.assert_array_equal(emb(tb.tensor([5, 2], dtype=tb.int32)).numpy(), W[[5, 2]])
    with pytest.raises(TypeError, match=msg("Embedding", "integers", "float32 (2,)")):
        emb(tb.tensor([1.0, 2.0]))


def test_a_bad_token_id_is_refused_by_a_compiled_replay_too():
    """The ids are data: the check is a step of the compiled program, run again at every replay (not a
    capture: the count of captures stays at 2)."""
    model = nn.LM(JIT_CFG, generator=tb.Generator(0))
    compiled = tb.jit(lambda ids: model(ids))
    good = tb.tensor([[1, 2, 3]])
    compiled(good)
    compiled(good)
    V = JIT_CFG.vocab_size
    for bad in (-1, V):
        with pytest.raises(IndexError, match=msg("Embedding", f"token id {bad} ", f"vocabulary of {V}")):
            compiled(tb.tensor([[1, bad, 3]]))
    np.testing.assert_array_equal(compiled(good).numpy(), model(good).numpy())
    assert (compiled.captures, compiled.replays) == (2, 1)


def test_generate_refuses_a_bad_prompt_id_when_its_prefill_replays():
    """The first two generations of a prompt length capture the prefill, the third replays it: a bad id there
    is refused as eagerly, and the model generates as before afterwards."""
    model = nn.LM(JIT_CFG, generator=tb.Generator(0))
    good = tb.tensor([[4, 5, 6]])
    first = model.generate(good, 3, temperature=0).numpy()
    model.generate(good, 3, temperature=0)
    with pytest.raises(IndexError, match=msg("Embedding", "token id -1 ", f"vocabulary of {JIT_CFG.vocab_size}")):
        model.generate(tb.tensor([[4, -1, 6]]), 3, temperature=0)
    assert model.last_decoder.compiled.replays > 0
    np.testing.assert_array_equal(model.generate(good, 3, temperature=0).numpy(), first)


def test_a_bad_token_id_is_refused_by_a_replayed_decode_step():
    from tinygrad_block.nn.decode import Decoder
    model = nn.LM(JIT_CFG, generator=tb.Generator(0))
    decoder = Decoder(model, 1, 8)
    token, _ = decoder.prefill(tb.tensor([[1, 2]]))
    for _ in range(3):                                                     # 2 captures, then a replay
        token, _ = decoder.step(token)
    assert decoder.compiled.replays >= 1
    with pytest.raises(IndexError, match=msg("Embedding", f"token id {JIT_CFG.vocab_size} ")):
        decoder.step(tb.tensor([[JIT_CFG.vocab_size]]))
    assert decoder.compiled.captures == 3                                  # the prefill's 1 and the steps' 2


# ---------------------------------------------------------------- sizes
@pytest.mark.parametrize("make, fragments", [
    (lambda g: nn.Linear(0, 4, generator=g), ("Linear", "d_in", ">= 1", "d_in=0")),
    (lambda g: nn.Linear(4, -2, generator=g), ("Linear", "d_out", "d_out=-2")),
    (lambda g: nn.Linear(4, 2, generator=g, lora_rank=-1), ("Linear", "lora_rank", ">= 0", "lora_rank=-1")),
    (lambda g: nn.Embedding(0, 4, generator=g), ("Embedding", "vocab_size", "vocab_size=0")),
    (lambda g: nn.Embedding(4, 0, generator=g), ("Embedding", "d", "d=0")),
    (lambda g: nn.RMSNorm(0), ("RMSNorm", "d", "d=0")),
    (lambda g: nn.LayerNorm(0), ("LayerNorm", "d", "d=0")),
], ids=["linear-in", "linear-out", "lora-rank", "embedding-vocab", "embedding-d", "rmsnorm", "layernorm"])
def test_layers_refuse_sizes_below_one_by_name(make, fragments):
    with pytest.raises(ValueError, match=msg(*fragments)):
        make(tb.Generator(0))


@pytest.mark.parametrize("make", [lambda g: nn.Linear(4.0, 2, generator=g),
                                  lambda g: nn.Embedding(True, 2, generator=g),
                                  lambda g: nn.RMSNorm("8")], ids=["float", "bool", "str"])
def test_layers_refuse_sizes_that_are_not_ints(make):
    with pytest.raises(TypeError, match=msg(None, "must be an int >= 1", "got")):
        make(tb.Generator(0))
