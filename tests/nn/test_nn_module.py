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
from tinygrad_block import nn, optim
from tinygrad_block.counting import count_flops


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


MAKERS = {"block": lambda g: nn.TransformerBlock(LLAMA, generator=g), "linear": lambda g: nn.Linear(3, 4, generator=g),
          "embedding": lambda g: nn.Embedding(10, 4, generator=g), "swiglu": lambda g: nn.SwiGLU(LLAMA, generator=g),
          "mlp": lambda g: nn.MLP(GPT2, generator=g), "attention": lambda g: nn.Attention(LLAMA, generator=g)}
NOT_GENERATORS = {"none": None, "int": 0, "numpy-rng": np.random.default_rng(0)}
HAS_A_DEFAULT = ("linear", "embedding")   # None is tb.Generator(0) for them: tests/nn/test_nn_habits.py


@pytest.mark.parametrize("module, bad", [(m, b) for m in MAKERS for b in NOT_GENERATORS
                                         if not (b == "none" and m in HAS_A_DEFAULT)])
def test_modules_need_an_explicit_generator(module, bad):
    with pytest.raises(TypeError, match=msg(None, "generator", "tb.Generator")):
        MAKERS[module](NOT_GENERATORS[bad])


def test_omitting_the_generator_of_a_block_is_a_type_error():
    """A block's projections draw one after another from one generator: it has no default (Linear, Embedding and
    LM have one, tests/nn/test_nn_habits.py)."""
    with pytest.raises(TypeError, match="generator"):
        nn.TransformerBlock(LLAMA)


# ---------------------------------------------------------------- what a module holds
class Twice(nn.Module):
    """One Linear held under two names (and by the list of heads too), plus a Linear of its own."""

    def __init__(self, g):
        self.proj = nn.Linear(3, 4, bias=True, generator=g, dtype=F64)
        self.alias = self.proj
        self.heads = [self.proj, nn.Linear(4, 2, generator=g, dtype=F64)]

    def forward(self, x):
        return self.heads[1](self.proj(x) + self.alias(x))


def test_a_module_held_twice_is_counted_listed_and_trained_once_under_its_first_name():
    m = Twice(tb.Generator(0))
    names = [n for n, _ in m.named_parameters()]
    assert names == ["proj.weight", "proj.bias", "heads.1.weight"]
    assert m.num_parameters() == 4 * 3 + 4 + 2 * 4                      # hand count: each tensor once
    assert [n for n, _ in m.named_modules()] == ["", "proj", "heads.1"]
    assert list(m.state_dict()) == names
    W, b, W2 = (p.numpy().copy() for p in m.parameters())
    x = rng(51).standard_normal((5, 3))
    loss = m(t64(x)).sum()
    loss.backward()
    opt = optim.SGD(m.parameters(), lr=0.1)                            # refuses a tensor listed twice
    opt.step()
    dW2 = np.ones((5, 2)).T @ (2 * (x @ W.T + b))                       # out = (2 (x W^T + b)) W2^T
    dW = 2 * (np.ones((5, 2)) @ W2).T @ x                              # both uses of proj add up, once
    np.testing.assert_allclose(m.heads[1].weight.numpy(), W2 - 0.1 * dW2, rtol=1e-13)
    np.testing.assert_allclose(m.proj.weight.numpy(), W - 0.1 * dW, rtol=1e-13)


def test_a_parameter_shared_by_two_modules_and_a_cycle_are_walked_once():
    g = tb.Generator(0)
    outer = nn.Linear(3, 3, generator=g, dtype=F64)
    outer.inner = nn.Linear(3, 3, generator=g, dtype=F64)
    outer.inner.weight = outer.weight                                   # tied
    outer.inner.back = outer                                            # a cycle: the walk must end
    assert [n for n, _ in outer.named_parameters()] == ["weight"]
    assert outer.num_parameters() == 9
    assert [n for n, _ in outer.named_modules()] == ["", "inner"]


def test_a_dict_of_modules_is_registered_by_key():
    g = tb.Generator(0)
    m = nn.Linear(2, 2, generator=g, dtype=F64)
    m.experts = {"up": nn.Linear(2, 3, generator=g, dtype=F64), "down": nn.Linear(3, 2, generator=g, dtype=F64)}
    assert [n for n, _ in m.named_parameters()] == ["weight", "experts.up.weight", "experts.down.weight"]
    assert m.num_parameters() == 4 + 6 + 6
    assert m.experts["down"].scope_name == "experts.down"
    with count_flops() as c:
        m.experts["up"](tb.zeros(1, 2, dtype=F64))
    assert c.total(scope="experts.up") == 2 * 2 * 3
    m.to(tb.float32)
    assert m.experts["up"].weight.dtype == tb.float32
    state = {n: t64(rng(52).standard_normal(p.shape)).to(tb.float32) for n, p in m.named_parameters()}
    m.load_state_dict(state)
    np.testing.assert_array_equal(m.experts["down"].weight.numpy(), state["experts.down.weight"].numpy())


@pytest.mark.parametrize("value, fragments", [
    ({"a.b": "linear"}, ("'experts'", "key 'a.b'", "strings without dots")),
    ({3: "linear"}, ("'experts'", "key 3", "strings without dots")),
    (["linear", 3], ("'experts'", "mixed", "int")),
    ({"up": "linear", "scale": 2.0}, ("'experts'", "mixed", "float")),
], ids=["dotted-key", "int-key", "mixed-list", "mixed-dict"])
def test_containers_that_would_hide_modules_or_blur_their_names_are_refused(value, fragments):
    g = tb.Generator(0)
    lin = nn.Linear(2, 2, generator=g)
    value = [lin if v == "linear" else v for v in value] if isinstance(value, list) else \
        {k: lin if v == "linear" else v for k, v in value.items()}
    m = nn.Linear(2, 2, generator=g)
    with pytest.raises(TypeError, match=msg("Module", *fragments)):
        m.experts = value
    assert not hasattr(m, "experts")
