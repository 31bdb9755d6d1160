"""Creating tensors (backend.py): negative sizes, ragged nested lists, data that is not numbers, ints that fit no
dtype and bad arange bounds are refused, naming the creation op and the item at fault."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import DEVICES, msg

import tinygrad_block as tb


# ================================================================ sizes and nesting
ALL_DEVICES = [*DEVICES, "meta"]
CREATE_NEGATIVE = {
    "zeros": lambda device: tb.zeros(2, -3, device=device),
    "ones": lambda device: tb.ones((2, -3), device=device),
    "full": lambda device: tb.full((2, -3), 1.0, device=device),
    "randn": lambda device: tb.randn(2, -3, generator=tb.Generator(0), device=device),
    "rand": lambda device: tb.rand((2, -3), generator=tb.Generator(0), device=device),
    "randint": lambda device: tb.randint(0, 5, (2, -3), generator=tb.Generator(0), device=device),
}


@pytest.mark.parametrize("device", ALL_DEVICES)
@pytest.mark.parametrize("op", list(CREATE_NEGATIVE))
def test_negative_size_in_a_creation_op(op, device):
    with pytest.raises(ValueError, match=msg(op, "negative size -3", "(2, -3)", ">= 0")):
        CREATE_NEGATIVE[op](device)


@pytest.mark.parametrize("n, m, bad", [(-2, None, "n=-2"), (2, -3, "m=-3"), (-1, 4, "n=-1"), (0, -1, "m=-1")],
                         ids=str)
def test_eye_with_a_negative_size(n, m, bad):
    with pytest.raises(ValueError, match=msg("eye", bad, "must be >= 0")):
        tb.eye(n, m)


@pytest.mark.parametrize("n, m, bad", [(2.0, None, "n, the number of rows"), (True, 2, "n, the number of rows"),
                                       (2, 3.5, "m, the number of columns")], ids=str)
def test_eye_with_a_size_that_is_not_an_int(n, m, bad):
    with pytest.raises(TypeError, match=msg("eye", bad, "must be an int")):
        tb.eye(n, m)


def test_zero_sizes_stay_allowed():
    g = tb.Generator(0)
    for t, expected in [(tb.zeros(2, 0), np.zeros((2, 0))), (tb.ones(0), np.ones(0)), (tb.full((0, 3), 7.0),
                        np.full((0, 3), 7.0)), (tb.randn(0, 3, generator=g), np.zeros((0, 3))),
                        (tb.rand(3, 0, generator=g), np.zeros((3, 0))), (tb.eye(0), np.eye(0)),
                        (tb.eye(2, 0), np.eye(2, 0)), (tb.eye(3, 2), np.eye(3, 2))]:
        np.testing.assert_array_equal(t.numpy(), expected)
        assert t.shape == expected.shape


RAGGED = [([[1, 2], [3]], ("item [1] has length 1", "item [0] has length 2")),
          ([[1.0, 2.0], 3.0], ("item [1] is a number (3.0)", "item [0] has length 2")),
          ([1, [2, 3]], ("item [1] has length 2", "item [0] is a number (1)")),
          ([[[1, 2], [3, 4]], [[5, 6], [7]]], ("item [1, 1] has length 1", "item [0, 0] has length 2")),
          (([1, 2], (3, 4, 5)), ("item [1] has length 3", "item [0] has length 2")),
          ([[1, 2], []], ("item [1] has length 0", "item [0] has length 2"))]


@pytest.mark.parametrize("device", ALL_DEVICES)
@pytest.mark.parametrize("dtype", [None, tb.float64], ids=["inferred", "float64"])
@pytest.mark.parametrize("data, where", RAGGED, ids=[str(d) for d, _ in RAGGED])
def test_ragged_nested_list(data, where, dtype, device):
    with pytest.raises(ValueError, match=msg("tensor", "ragged nested list", *where)):
        tb.tensor(data, dtype=dtype, device=device)


def test_ragged_rows_given_as_numpy_arrays():
    with pytest.raises(ValueError, match=msg("tensor", "ragged nested list", "item [1] has length 3",
                                             "item [0] has length 2")):
        tb.tensor([np.zeros(2), np.ones(3)])


def test_rectangular_nested_lists_still_work():
    for data in ([[1, 2], [3, 4]], [[[1.5], [2.5]]], [[], []], ([1, 2], (3, 4)), [np.arange(2), [5, 6]]):
        np.testing.assert_array_equal(tb.tensor(data).numpy(), np.array(data))


NOT_NUMBERS = [([None, 1.0], "item [0] is a NoneType (None)"), ([[1, 2], "ab"], "item [1] is a str ('ab')"),
               ([["1.5"]], "item [0, 0] is a str ('1.5')"), (None, "data is a NoneType (None)"),
               ([{}, 2], "item [0] is a dict ({})")]


@pytest.mark.parametrize("device", ALL_DEVICES)
@pytest.mark.parametrize("dtype", [None, tb.float32], ids=["inferred", "float32"])
@pytest.mark.parametrize("data, where", NOT_NUMBERS, ids=[str(d) for d, _ in NOT_NUMBERS])
def test_data_that_is_not_numbers(data, where, dtype, device):
    """With a dtype given numpy would read None as nan and '1.5' as 1.5; both are refused, naming the item."""
    with pytest.raises(TypeError, match=msg("tensor", where, "not a number", "expected numbers")):
        tb.tensor(data, dtype=dtype, device=device)


def test_a_list_of_tensors_points_to_stack():
    with pytest.raises(TypeError, match=msg("tensor", "item [0] is a Tensor", "not a number", "tb.stack")):
        tb.tensor([tb.ones(2), tb.ones(2)])
    np.testing.assert_array_equal(tb.stack([tb.ones(2), tb.zeros(2)]).numpy(), [[1, 1], [0, 0]])


@pytest.mark.parametrize("device", ALL_DEVICES)
def test_ints_that_fit_no_dtype(device):
    """A cast would wrap 2**40 into int32 (to 0); the value is refused instead, naming the dtype's range."""
    with pytest.raises(TypeError, match=msg("tensor", str(2 ** 70), "no supported dtype", "int64", "float64")):
        tb.tensor([1, 2 ** 70], device=device)
    for data, dtype, bounds in [([2 ** 40], tb.int32, "-2147483648..2147483647"), (2 ** 40, tb.int32, "..2147"),
                                ([1, -(2 ** 70)], tb.int64, "-9223372036854775808..")]:
        with pytest.raises(OverflowError, match=msg("tensor", str(np.ravel(data)[-1]), f"does not fit {dtype}",
                                                    bounds)):
            tb.tensor(data, dtype=dtype, device=device)


def test_ints_at_the_edge_of_a_dtype_are_kept():
    assert tb.tensor([2 ** 70], dtype=tb.float64).item() == float(2 ** 70)
    assert tb.tensor([2 ** 31 - 1, -(2 ** 31)], dtype=tb.int32).tolist() == [2 ** 31 - 1, -(2 ** 31)]
    assert tb.tensor([2 ** 63 - 1], dtype=tb.int64).tolist() == [2 ** 63 - 1]


@pytest.mark.parametrize("args, error, expected", [
    ((0, float("inf")), ValueError, "finite"), ((float("nan"),), ValueError, "finite"),
    ((0, 3, float("-inf")), ValueError, "finite"), (("3",), TypeError, "numbers"), ((0, 3, 0), ValueError, "zero"),
], ids=str)
def test_arange_bad_bounds(args, error, expected):
    with pytest.raises(error, match=msg("arange", "start=", "stop=", "step=", expected)):
        tb.arange(*args)
