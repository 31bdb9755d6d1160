"""nn/block.py: the three layouts (pre-norm, post-norm, parallel), SwiGLU and MLP, and the block's parameters.

Oracles: finite differences (the input gradient), identities exact in floating point (zero sublayers make the
pre-norm block the identity; SwiGLU(0) = 0; LoRA with B = 0 is the base block) and hand-listed structure.
The block's values against the hand-derived pairs are in test_nn_manual.py, against PyTorch and Hugging Face
in test_nn_block_torch.py.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import BERT, D_FF, F64, GPT2, H_KV, LLAMA, PARALLEL, D, block, msg, randomize, rng, t64

import tinygrad_block as tb
from tinygrad_block import nn


# ---------------------------------------------------------------- values and gradients
@pytest.mark.parametrize("cfg", [LLAMA, LLAMA.with_(layout="post"), PARALLEL, GPT2, BERT,
                                 LLAMA.with_(lora_rank=2, lora_alpha=4.0)],
                         ids=["llama", "post-norm", "parallel", "gpt2", "bert", "lora-qv"])
def test_block_input_gradient_matches_finite_differences(cfg):
    blk = block(cfg)
    randomize(blk, seed=8)
    x = t64(rng(4).standard_normal((1, 3, D)), requires_grad=True)
    if cfg.layout == "parallel":   # relu's input: steps of 2h = 2e-3 must not cross its kink
        assert np.abs(blk.ffn.up_proj(blk.norm2(x)).numpy()).min() > 1e-2
    assert tb.gradcheck(lambda t: blk(t, offset=1), x)


@pytest.mark.parametrize("cfg", [LLAMA, GPT2, PARALLEL, GPT2.with_(layout="parallel")],
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


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_swiglu_of_zero_is_zero_whatever_the_weights(seed):
    ffn = nn.SwiGLU(LLAMA, generator=tb.Generator(seed), dtype=F64)
    values = randomize(ffn, seed=seed)
    ffn.load_state_dict({k: t64(10.0 * v) for k, v in values.items()})   # large weights, still zero out
    np.testing.assert_array_equal(ffn(tb.zeros(2, 3, D, dtype=F64)).numpy(), np.zeros((2, 3, D)))
    assert np.abs(ffn(t64(rng(seed).standard_normal((2, 3, D)))).numpy()).max() > 1e-3


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


# ---------------------------------------------------------------- structure and bad input
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


@pytest.mark.parametrize("shape", [(5, D), (1, 1, 5, D), (1, 5, D + 1), (1, 5, 8)])
def test_block_rejects_wrong_rank_or_width(shape):
    with pytest.raises(ValueError, match=msg(None, "TransformerBlock", f"d_model={D}", str(shape))):
        block(LLAMA)(tb.zeros(*shape, dtype=F64))


@pytest.mark.parametrize("changes, layout", [({}, nn.PreNormBlock), ({"layout": "post"}, nn.PostNormBlock),
                                             ({"layout": "deep"}, nn.DeepNormBlock),
                                             ({"layout": "parallel"}, nn.ParallelBlock)],
                         ids=["pre", "post", "deep", "parallel"])
def test_make_block_builds_the_layout_the_config_names(changes, layout):
    """make_block reads cfg.layout; nn.TransformerBlock(cfg) is the same function, and a
    layout's class builds that layout whatever the config says."""
    cfg = LLAMA.with_(**changes)
    made = nn.make_block(cfg, generator=tb.Generator(0), dtype=F64)
    assert type(made) is layout and type(block(cfg)) is layout and isinstance(made, nn.Block)
    assert nn.TransformerBlock is nn.make_block and type(layout(LLAMA, generator=tb.Generator(0))) is layout
