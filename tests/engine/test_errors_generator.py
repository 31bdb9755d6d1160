"""Random numbers (generator.py): a Generator takes any integer seed >= 0 and draws numpy's stream; random ops
without a generator, and randint with bad bounds, are refused."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import msg

import tinygrad_block as tb


@pytest.mark.parametrize("seed, error", [(-1, ValueError), (-(2 ** 70), ValueError), (1.5, TypeError),
                                         (True, TypeError), ("0", TypeError)], ids=str)
def test_generator_bad_seed(seed, error):
    expected = ">= 0" if error is ValueError else "int"
    with pytest.raises(error, match=msg("Generator", repr(seed), expected)):
        tb.Generator(seed)


def test_generator_takes_any_integer_seed_and_draws_numpys_stream():
    for seed in (0, np.int64(7), 2 ** 70):
        got = tb.randn(3, generator=tb.Generator(seed), dtype=tb.float64).numpy()
        np.testing.assert_array_equal(got, np.random.default_rng(int(seed)).standard_normal(3))


@pytest.mark.parametrize("low, high", [(3, 3), (5, 3), (0, -1)], ids=str)
def test_randint_low_not_below_high(low, high):
    with pytest.raises(ValueError, match=msg("randint", f"low={low}", f"high={high}", "low must be < high")):
        tb.randint(low, high, (2,), generator=tb.Generator(0))


def test_randint_bad_bounds():
    g = tb.Generator(0)
    with pytest.raises(TypeError, match=msg("randint", "low=0.5", "high=3")):
        tb.randint(0.5, 3, (2,), generator=g)
    with pytest.raises(ValueError, match=msg("randint", str(2 ** 40), "int32")):
        tb.randint(0, 2 ** 40, (2,), generator=g, dtype=tb.int32)


def test_randint_draws_numpys_integers():
    got = tb.randint(-3, 4, (5, 6), generator=tb.Generator(1)).numpy()
    np.testing.assert_array_equal(got, np.random.default_rng(1).integers(-3, 4, (5, 6)))


@pytest.mark.parametrize("kind, call", [
    ("randn", lambda g: tb.randn(2, 3, **g)),
    ("rand", lambda g: tb.rand(2, 3, **g)),
    ("randint", lambda g: tb.randint(0, 5, (2, 3), **g)),
], ids=["randn", "rand", "randint"])
@pytest.mark.parametrize("given_", [{}, {"generator": None}, {"generator": 0}], ids=["missing", "None", "seed"])
def test_random_without_a_generator(kind, call, given_):
    with pytest.raises(TypeError, match=msg(kind, "generator=tb.Generator(")):
        call(given_)


def test_random_with_a_generator_works():
    assert tb.randn(2, 3, generator=tb.Generator(0)).shape == (2, 3)
    with pytest.raises(TypeError, match=msg("Generator", "int", "str")):
        tb.Generator("0")
