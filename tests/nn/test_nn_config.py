"""nn/config.py: BlockConfig's validation (bad values are named with the field and the numbers) and the presets.

Oracles: the error messages' fragments; a config that is fine (odd d_head without RoPE) against the
hand-derived block (tinygrad_block.manual). The presets' parameter counts against the closed forms and the
published figures are in test_accounting.py.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import LLAMA, block, msg, randomize, rng, t64

import tinygrad_block as tb
from tinygrad_block import manual, nn


@pytest.mark.parametrize("kwargs, fragments", [
    (dict(d_model=10, n_heads=3, n_kv_heads=3, d_ff=8), ["d_model=10", "n_heads=3", "divisible"]),
    (dict(d_model=12, n_heads=4, n_kv_heads=3, d_ff=8), ["n_heads=4", "n_kv_heads=3", "divisible"]),
    (dict(d_model=12, n_heads=4, n_kv_heads=4, d_ff=8), ["RoPE", "d_head", "12 / 4 = 3", "odd"]),
    (dict(d_model=16, n_heads=4, n_kv_heads=4, d_ff=8, norm="batch"), ["norm", "'rms'", "'layer'", "'batch'"]),
    (dict(d_model=16, n_heads=4, n_kv_heads=4, d_ff=8, ffn="geglu"), ["ffn", "'swiglu'", "'geglu'"]),
    (dict(d_model=16, n_heads=4, n_kv_heads=4, d_ff=8, layout="middle"), ["layout", "'middle'"]),
    (dict(d_model=0, n_heads=4, n_kv_heads=4, d_ff=8), ["d_model", "positive", "0"]),
    (dict(d_model=16, n_heads=-4, n_kv_heads=4, d_ff=8), ["n_heads", "positive", "-4"]),
    (dict(d_model=16, n_heads=4, n_kv_heads=0, d_ff=8), ["n_kv_heads", "positive", "0"]),
    (dict(d_model=16, n_heads=4, n_kv_heads=4, d_ff=-1), ["d_ff", "positive", "-1"]),
    (dict(d_model=16, n_heads=4, n_kv_heads=4, d_ff=8, max_seq_len=0), ["max_seq_len", "positive", "0"]),
    (dict(d_model=16.0, n_heads=4, n_kv_heads=4, d_ff=8), ["d_model", "int", "16.0"]),
    (dict(d_model=16, n_heads=4, n_kv_heads=4, d_ff=8, lora_rank=-1), ["lora_rank", "-1"]),
    (dict(d_model=16, n_heads=4, n_kv_heads=4, d_ff=8, lora_rank=2, lora_targets=("w_q",)), ["lora_targets", "w_q"]),
    (dict(d_model=16, n_heads=4, n_kv_heads=4, d_ff=8, head_dim=5), ["head_dim=5 is odd", "RoPE"]),
    (dict(d_model=16, n_heads=4, n_kv_heads=4, d_ff=8, head_dim=0), ["head_dim=0", "positive int"]),
    (dict(d_model=16, n_heads=4, n_kv_heads=4, d_ff=8, head_dim=8.0), ["head_dim=8.0", "positive int"]),
    (dict(d_model=16, n_heads=4, n_kv_heads=4, d_ff=8, head_dim=True), ["head_dim=True", "positive int"]),
    (dict(d_model=10, n_heads=3, n_kv_heads=2, d_ff=8, head_dim=4), ["n_heads=3", "n_kv_heads=2", "divisible"]),
])
def test_bad_block_config_raises_naming_the_field_and_values(kwargs, fragments):
    with pytest.raises(ValueError, match=msg(None, "BlockConfig", *fragments)):
        nn.BlockConfig(**kwargs)


def test_with_revalidates_and_odd_d_head_is_fine_without_rope():
    with pytest.raises(ValueError, match=msg(None, "n_kv_heads=3")):
        LLAMA.with_(n_kv_heads=3)
    cfg = nn.BlockConfig(12, 4, 4, 8, rope=False)
    assert cfg.d_head == 3
    blk = block(cfg)
    p = randomize(blk, seed=42)
    x = rng(43).standard_normal((1, 4, 12))
    np.testing.assert_allclose(blk(t64(x)).numpy(), manual.block_forward(x, p, cfg)[0], rtol=1e-12, atol=1e-12)


def test_head_dim_is_a_field_of_its_own():
    """head_dim sets d_head whatever d_model / n_heads is (it need not divide); spelt as the default it is kept as
    None, so the two configs are equal and with_(d_model=...) rescales the heads as before."""
    wide = nn.BlockConfig(10, 3, 1, 8, head_dim=6)                 # 10 / 3 is no width at all
    assert (wide.d_head, wide.head_dim) == (6, 6)
    assert nn.BlockConfig(16, 4, 2, 8, head_dim=4) == nn.BlockConfig(16, 4, 2, 8)
    assert nn.BlockConfig(16, 4, 2, 8, head_dim=4).head_dim is None
    assert LLAMA.with_(d_model=32).d_head == 8 and LLAMA.with_(head_dim=12).with_(d_model=32).d_head == 12
    assert nn.BlockConfig(12, 4, 4, 8, head_dim=3, rope=False).d_head == 3


def test_unknown_preset_lists_the_presets():
    with pytest.raises(ValueError, match=msg(None, "'nope'", *nn.PRESETS)):
        nn.preset("nope")


@pytest.mark.parametrize("name", list(nn.PRESETS))
def test_preset_blocks_hold_their_parameters_on_meta(name):
    """The presets build on the shape-only device; their counts against the closed forms are in
    test_accounting.py."""
    cfg = nn.preset(name)
    assert cfg is nn.PRESETS[name] and cfg.name == name
    blk = nn.TransformerBlock(cfg, generator=tb.Generator(0), device="meta")
    assert all(p.device == "meta" for p in blk.parameters())
    assert blk.num_parameters() == sum(math.prod(p.shape) for p in blk.parameters())
