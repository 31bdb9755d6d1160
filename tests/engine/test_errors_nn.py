"""The block's numbers (nn/config.py, nn/attention.py): BlockConfig refuses floats that would fail only later, in
the RoPE table or a norm, and positions outside the RoPE table are refused, not read from its other end."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import msg

import tinygrad_block as tb
from tinygrad_block import manual, nn


# ---- BlockConfig numbers that would fail (or give NaN) only later, in the RoPE table or a norm
TINY = nn.BlockConfig(d_model=8, n_heads=2, n_kv_heads=1, d_ff=16, max_seq_len=16, vocab_size=11)


@pytest.mark.parametrize("key, value, expected", [
    ("rope_theta", 0.0, "> 0"), ("rope_theta", -10000.0, "> 0"), ("rope_theta", float("nan"), "finite"),
    ("rope_theta", float("inf"), "finite"), ("rope_theta", "10000", "finite"), ("norm_eps", -1e-5, ">= 0"),
    ("norm_eps", float("nan"), "finite"), ("lora_alpha", float("inf"), "finite"), ("lora_alpha", None, "finite"),
], ids=str)
def test_blockconfig_bad_float(key, value, expected):
    with pytest.raises(ValueError, match=msg("BlockConfig", key, repr(value), expected)):
        TINY.with_(**{key: value})


@pytest.mark.parametrize("value", [-1, 1.5, True, "2"], ids=repr)
def test_blockconfig_lora_rank_must_be_a_non_negative_int(value):
    with pytest.raises(ValueError, match=msg("BlockConfig", "lora_rank", repr(value), "int >= 0")):
        TINY.with_(lora_rank=value)


def test_blockconfig_edge_floats_are_accepted_and_used():
    x = np.random.default_rng(0).standard_normal((1, 4, 8))
    rms = nn.RMSNorm(8, eps=TINY.with_(norm_eps=0.0).norm_eps, dtype=tb.float64)(tb.tensor(x)).numpy()
    np.testing.assert_allclose(rms, x / np.sqrt((x * x).mean(-1, keepdims=True)), rtol=1e-12)
    cos, _ = nn.rope_tables(4, 8, TINY.with_(rope_theta=0.5).rope_theta, tb.float64, "cpu")
    angles = np.arange(4.0)[:, None] * 0.5 ** (-np.arange(0, 8, 2) / 8)
    np.testing.assert_allclose(cos.numpy(), np.cos(np.concatenate([angles, angles], -1)), rtol=1e-12)


# ---- positions: offset .. offset + L - 1 must lie in the RoPE table (0 .. max_seq_len - 1)
def _attention_and_input(cfg=TINY, L=3):
    attn = nn.Attention(cfg, generator=tb.Generator(0), dtype=tb.float64)
    return attn, tb.randn(1, L, cfg.d_model, generator=tb.Generator(1), dtype=tb.float64)


@pytest.mark.parametrize("offset, positions", [(-5, "-5..-3"), (-1, "-1..1"), (14, "14..16"), (100, "100..102")])
def test_attention_offset_out_of_the_table(offset, positions):
    attn, x = _attention_and_input()
    with pytest.raises(ValueError, match=msg("Attention", f"positions {positions}", f"offset {offset}", "L 3",
                                             "max_seq_len=16")):
        attn(x, offset)


@pytest.mark.parametrize("layout", [{}, {"layout": "post"}, {"layout": "parallel"}], ids=["pre", "post", "par"])
@pytest.mark.parametrize("offset", [-5, 14])
def test_block_offset_out_of_the_table(layout, offset):
    cfg = TINY.with_(**layout)
    x = tb.randn(2, 3, cfg.d_model, generator=tb.Generator(1), dtype=tb.float64)
    with pytest.raises(ValueError, match=msg("Attention", f"offset {offset}", "L 3", "max_seq_len=16")):
        nn.TransformerBlock(cfg, generator=tb.Generator(0), dtype=tb.float64)(x, offset)


@pytest.mark.parametrize("offset", [1.0, 2.5, True, None, np.float64(3.0)], ids=repr)
def test_offset_must_be_an_int(offset):
    attn, x = _attention_and_input()
    with pytest.raises(TypeError, match=msg("Attention", "offset", "int", repr(offset))):
        attn(x, offset)


def test_negative_offset_is_not_read_from_the_end_of_the_table():
    """offset -5, L 3 once sliced rows -5:-2 = 11..13 of the 16-row table; it raises, while 11 and the last
    full window 13..15 agree with the hand-derived attention at those positions."""
    attn, x = _attention_and_input()
    with pytest.raises(ValueError, match=msg("Attention", "offset -5", "L 3", "max_seq_len=16")):
        attn(x, -5)
    projections = [manual.Linear(getattr(attn, name).weight.data) for name in ("q_proj", "k_proj", "v_proj", "o_proj")]
    for offset in (11, 13, np.int64(13)):
        expected, _ = manual.attention_forward(x.numpy(), *projections, TINY.n_heads, TINY.n_kv_heads, True,
                                               TINY.rope_theta, int(offset))
        np.testing.assert_allclose(attn(x, offset).numpy(), expected, rtol=1e-12, atol=1e-13)
