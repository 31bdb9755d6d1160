"""nn/module.py: Module and Parameter: state_dict round trips and their validation, gradients through
parameters (accumulate, zero_grad, freeze), moving to a dtype, and the explicit generator.

Oracles: exact equality of outputs before and after loading weights, hand-computed gradient sums, a float64
run for the float32 one.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import D_FF, F64, GPT2, H_KV, LLAMA, D, H, block, msg, randomize, rng, t64

import tinygrad_block as tb
from tinygrad_block import nn


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


def test_load_state_dict_names_missing_and_unexpected_keys():
    blk = block(LLAMA)
    state = blk.state_dict()
    missing = dict(state)
    del missing["attn.k_proj.weight"]
    with pytest.raises(KeyError, match=msg(None, "missing", "attn.k_proj.weight")):
        blk.load_state_dict(missing)
    extra = dict(state, **{"attn.k_proj.bias": tb.zeros(8, dtype=F64)})
    with pytest.raises(KeyError, match=msg(None, "unexpected", "attn.k_proj.bias")):
        blk.load_state_dict(extra)


def test_load_state_dict_names_a_misshaped_or_mistyped_entry_and_loads_nothing():
    blk = block(LLAMA)
    before = {k: v.numpy().copy() for k, v in blk.state_dict().items()}
    new = {k: t64(v + 1.0) for k, v in before.items()}      # all valid but one
    bad_shape = dict(new, **{"attn.k_proj.weight": tb.zeros(D, D, dtype=F64)})
    with pytest.raises(ValueError, match=msg(None, "attn.k_proj.weight", f"({D}, {D})", f"({H_KV * D // H}, {D})")):
        blk.load_state_dict(bad_shape)
    bad_dtype = dict(new, **{"ffn.up_proj.weight": tb.zeros(D_FF, D, dtype=tb.float32)})
    with pytest.raises(ValueError, match=msg(None, "ffn.up_proj.weight", "float32", "float64", f"({D_FF}, {D})")):
        blk.load_state_dict(bad_dtype)
    not_tensor = dict(new, **{"norm1.weight": np.ones(D)})
    with pytest.raises(TypeError, match=msg(None, "norm1.weight", "Tensor", "ndarray")):
        blk.load_state_dict(not_tensor)
    for k, v in blk.state_dict().items():                     # validated before anything is copied
        np.testing.assert_array_equal(v.numpy(), before[k])


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
    with pytest.raises(TypeError, match=msg(None, "generator", "tb.Generator")):
        make(bad)


def test_omitting_the_generator_is_a_type_error():
    with pytest.raises(TypeError, match="generator"):
        nn.TransformerBlock(LLAMA)
    with pytest.raises(TypeError, match="generator"):
        nn.Linear(3, 4)
