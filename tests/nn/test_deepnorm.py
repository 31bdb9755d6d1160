"""nn.DeepNormBlock (layout='deep'): x_{l+1} = norm(alpha x + F(x)) around both sublayers, with DeepNet's
alpha = (2N)^(1/4) and beta = (8N)^(-1/4) for N layers (Wang et al. 2022, Figure 2).

Oracles: the hand-derived numpy sublayers (tinygrad_block.manual) put together by the formula; the post-norm
block built from the same generator (DeepNorm's init is that one, with the FFN, v_proj and o_proj weights times
beta); finite differences; the closed-form FLOP count against the count on the meta device.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import LLAMA, randomize, rng, t64

import tinygrad_block as tb
from tinygrad_block import accounting as acc
from tinygrad_block import nn
from tinygrad_block.counting import count_flops
from tinygrad_block.gradcheck import central_difference
from tinygrad_block.manual.block import attn_forward, block_weights, ffn_sublayer_forward, norm_forward

DEEP = LLAMA.with_(layout="deep", n_layers=6)               # alpha = 12^(1/4), beta = 48^(-1/4)


def deepnorm_numpy(x: np.ndarray, params: dict, cfg, alpha: float) -> np.ndarray:
    """The formula with hand-derived numpy sublayers: h = LN1(alpha x + attn(x)); out = LN2(alpha h + ffn(h))."""
    w = block_weights(params, cfg)                                  # each sublayer's own arrays
    h = norm_forward(alpha * x + attn_forward(x, w.attn, cfg, 0)[0], w.norm1, cfg)[0]
    return norm_forward(alpha * h + ffn_sublayer_forward(h, w.ffn, cfg)[0], w.norm2, cfg)[0]


@pytest.mark.parametrize("n_layers, alpha, beta", [(1, 2 ** 0.25, 8 ** -0.25), (2, 2 ** 0.5, 0.5),
                                                   (50, 10 ** 0.5, 20 ** -0.5), (200, 20 ** 0.5, 40 ** -0.5)])
def test_alpha_beta_are_deepnets_decoder_only_constants(n_layers, alpha, beta):
    got = nn.deepnorm_alpha_beta(n_layers)
    assert got == pytest.approx((alpha, beta), rel=1e-15)


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_forward_equals_the_formula_on_hand_derived_sublayers(norm):
    cfg = DEEP.with_(norm=norm)
    blk = nn.TransformerBlock(cfg, generator=tb.Generator(0), dtype=tb.float64)
    assert type(blk) is nn.DeepNormBlock
    params = randomize(blk, seed=3)
    x = rng(4).standard_normal((2, 5, cfg.d_model))
    want = deepnorm_numpy(x, params, cfg, (2 * 6) ** 0.25)
    np.testing.assert_allclose(blk(t64(x)).numpy(), want, rtol=1e-12, atol=1e-12)
    post = deepnorm_numpy(x, params, cfg, 1.0)                      # alpha = 1 is post-norm: visibly different
    assert np.abs(want - post).max() > 1e-2


def test_init_scales_ffn_v_and_o_weights_by_beta_and_nothing_else():
    cfg = DEEP.with_(lora_rank=2, lora_targets=("q_proj", "v_proj", "up_proj"))
    deep = dict(nn.TransformerBlock(cfg, generator=tb.Generator(7), dtype=tb.float64).named_parameters())
    post = dict(nn.TransformerBlock(cfg.with_(layout="post"), generator=tb.Generator(7),
                                    dtype=tb.float64).named_parameters())
    beta = 48 ** -0.25
    scaled = {"ffn.gate_proj.weight", "ffn.up_proj.weight", "ffn.down_proj.weight", "attn.v_proj.weight",
              "attn.o_proj.weight"}
    assert deep.keys() == post.keys() and scaled < deep.keys()
    for name in deep:
        want = post[name].numpy() * (beta if name in scaled else 1.0)
        np.testing.assert_array_equal(deep[name].numpy(), want, err_msg=name)
    std = deep["ffn.up_proj.weight"].numpy().std()                  # N(0, beta^2 / d_model): about 0.38 / 4
    assert abs(std - beta / np.sqrt(cfg.d_model)) < 0.2 * beta / np.sqrt(cfg.d_model)


def test_gradient_matches_finite_differences():
    """To the input (tb.gradcheck) and to a beta-scaled weight (v_proj), both against central differences."""
    cfg = nn.BlockConfig(8, 2, 1, 12, layout="deep", n_layers=4, max_seq_len=8)
    blk = nn.TransformerBlock(cfg, generator=tb.Generator(1), dtype=tb.float64)
    randomize(blk, seed=1)
    x = t64(rng(2).standard_normal((1, 3, 8)), requires_grad=True)
    assert tb.gradcheck(lambda x: blk(x), x)
    v = t64(rng(3).standard_normal((1, 3, 8)))
    w = blk.attn.v_proj.weight
    blk.zero_grad()
    (blk(x.detach()) * v).sum().backward()

    def loss(values):
        w.data = t64(values).data
        with tb.no_grad():
            return (blk(x.detach()) * v).sum().item()

    numeric = central_difference(loss, w.numpy().copy())
    np.testing.assert_allclose(w.grad.numpy(), numeric, rtol=1e-8, atol=1e-10)


def test_flops_on_meta_equal_the_closed_form():
    for cfg in (DEEP, DEEP.with_(norm="layer", bias=True, ffn="gelu", rope=False), DEEP.with_(lora_rank=2)):
        blk = nn.TransformerBlock(cfg, generator=tb.Generator(0), device="meta")
        x = tb.zeros(2, 5, cfg.d_model, device="meta", requires_grad=True)
        with count_flops() as fc:
            blk(x).backward(tb.zeros(2, 5, cfg.d_model, device="meta"))
        for matmul_only in (True, False):
            assert fc.total("forward", matmul_only=matmul_only) == acc.block_forward_flops(cfg, 5, 2,
                                                                                            matmul_only=matmul_only)
            assert fc.total("backward", matmul_only=matmul_only) == acc.block_backward_flops(
                cfg, 5, 2, matmul_only=matmul_only)
