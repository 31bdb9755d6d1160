"""Lesson 07's checkers (lessons/exercises/07.py) reject typical wrong answers, each with the reason."""
import numpy as np

import tinygrad_block as tb
from conftest import failures, solution


def _rope(adjacent=False, exponent=2.0, sign=1.0, from_zero=False):
    """RoPE with one slip: adjacent pairs, the frequency theta^(-i/d), the rotation the other way, or positions
    0..L-1 instead of those given."""
    def rope(x, positions, theta):
        d = x.shape[-1]
        positions = range(x.shape[2]) if from_zero else positions
        angle = sign * np.asarray(positions, float)[:, None] * theta ** (-exponent * np.arange(d // 2) / d)
        c, s = tb.tensor(np.cos(angle), dtype=x.dtype), tb.tensor(np.sin(angle), dtype=x.dtype)
        if adjacent:
            pairs = x.reshape(*x.shape[:-1], d // 2, 2)
            x1, x2 = pairs[..., 0], pairs[..., 1]
            return tb.stack([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1).reshape(*x.shape)
        x1, x2 = x[..., :d // 2], x[..., d // 2:]
        return tb.concat([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)
    return rope


def test_rope_on_adjacent_pairs_is_rejected_with_the_convention():
    why = failures(7, solution(7, rope=_rope(adjacent=True)))["rope"]
    assert "adjacent pairs (2i, 2i + 1)" in why and "pairs dimension i with i + d_head/2" in why


def test_rope_with_the_wrong_frequency_is_rejected():
    assert "theta^(-i/d_head)" in failures(7, solution(7, rope=_rope(exponent=1.0)))["rope"]


def test_rope_turning_the_wrong_way_is_rejected():
    assert "turns the wrong way" in failures(7, solution(7, rope=_rope(sign=-1.0)))["rope"]


def test_rope_ignoring_the_positions_is_rejected():
    why = failures(7, solution(7, rope=_rope(from_zero=True)))["rope"]
    assert "positions=[37, 38, 39, 40, 41]" in why and "uses positions 0..L-1" in why


def test_rope_ignoring_theta_is_rejected():
    fixed_theta = lambda x, positions, theta: _rope()(x, positions, 10000.0)                # noqa: E731
    why = failures(7, solution(7, rope=fixed_theta))["rope"]
    assert "theta=500000" in why and "uses theta = 10000 whatever `theta` is given" in why


def test_rope_with_the_wrong_gradient_is_rejected():
    leaky = lambda x, positions, theta: _rope()(x, positions, theta) + (x - x.detach()) * 0.1   # noqa: E731
    assert "not the inverse rotation" in failures(7, solution(7, rope=leaky))["rope"]


def test_rope_outside_the_graph_is_rejected():
    detached = lambda x, positions, theta: tb.tensor(_rope()(x, positions, theta).numpy())   # noqa: E731
    assert "no gradient reaches x" in failures(7, solution(7, rope=detached))["rope"]


def test_repeat_kv_by_tiling_is_rejected_with_the_reason():
    tiled = lambda x, n_rep: tb.concat([x] * n_rep, axis=1)                                # noqa: E731
    why = failures(7, solution(7, repeat_kv=tiled))["repeat_kv"]
    assert "read KV heads [0, 1, 2, 0, 1, 2], expected [0, 0, 1, 1, 2, 2]" in why and "tiling" in why


def test_repeat_kv_with_the_wrong_gradient_is_rejected():
    def doubled(x, n_rep):
        out = solution(7).repeat_kv(x, n_rep)
        return out + (out - out.detach())                                 # right values, twice the gradient
    why = failures(7, solution(7, repeat_kv=doubled))["repeat_kv"]
    assert "the sum of its group's gradients" in why


def _kv(n_heads=False, pair=2, layers=True):
    def kv_cache_bytes(cfg, batch, seq_len, bytes_per_element):
        heads = cfg.n_heads if n_heads else cfg.n_kv_heads
        return pair * (cfg.n_layers if layers else 1) * batch * seq_len * heads * cfg.d_head * bytes_per_element
    return kv_cache_bytes


def test_kv_cache_with_every_query_head_is_rejected_with_the_reason():
    why = failures(7, solution(7, kv_cache_bytes=_kv(n_heads=True)))["kv_cache_bytes"]
    assert "llama2-70b" in why and "= 10,737,418,240, expected 1,342,177,280" in why and "n_kv_heads = 8" in why


def test_kv_cache_without_v_is_rejected():
    why = failures(7, solution(7, kv_cache_bytes=_kv(pair=1)))["kv_cache_bytes"]
    assert "half the answer" in why and "K and V" in why


def test_kv_cache_of_one_layer_is_rejected():
    assert "that is one layer" in failures(7, solution(7, kv_cache_bytes=_kv(layers=False)))["kv_cache_bytes"]


def test_kv_cache_as_a_float_is_rejected():
    as_float = lambda cfg, batch, seq_len, size: float(_kv()(cfg, batch, seq_len, size))     # noqa: E731
    assert "return an int" in failures(7, solution(7, kv_cache_bytes=as_float))["kv_cache_bytes"]
