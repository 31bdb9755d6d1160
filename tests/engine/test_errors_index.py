"""Indexing (index.py): indices out of range, too many indices, ragged index lists, bool masks and assignment are
refused with the op, the index and the shape in the message; nothing is read out of range."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import msg

import tinygrad_block as tb


# ================================================================ out-of-range indices
@pytest.mark.parametrize("key, bad, axis, size", [(3, 3, 0, 3), (-4, -4, 0, 3), ((0, 4), 4, 1, 4),
                                                  ((0, -5), -5, 1, 4)], ids=str)
def test_int_index_out_of_range(key, bad, axis, size):
    x = tb.zeros(3, 4)
    with pytest.raises(IndexError, match=msg("getitem", f"index {bad}", f"axis {axis}", f"size {size}")):
        x[key]


@pytest.mark.parametrize("index", [[0, 3], [-4, 0], np.array([[1], [7]]), tb.tensor([2, 0, 3])], ids=str)
def test_integer_array_index_out_of_range(index):
    bad = next(int(i) for i in np.asarray(index.numpy() if isinstance(index, tb.Tensor) else index).ravel()
               if not -3 <= i < 3)
    with pytest.raises(IndexError, match=msg("getitem", f"index {bad}", "size 3")):
        tb.zeros(3, 4)[index]


def test_integer_array_index_out_of_range_on_second_axis():
    with pytest.raises(IndexError, match=msg("getitem", "index 4", "axis 1", "size 4")):
        tb.zeros(3, 4)[:, [0, 4]]
    with pytest.raises(IndexError, match=msg("getitem", "index 4", "axis 1", "size 4")):
        tb.zeros(3, 4)[[0, 1], [0, 4]]


def test_too_many_indices():
    with pytest.raises(IndexError, match=msg("getitem", "(2, 3)", "too many")):
        tb.zeros(2, 3)[0, 1, 2]


@pytest.mark.parametrize("target, bad", [([0, 3], "3"), ([-1, 0], "-1"), ([7, 9], "9")], ids=str)
def test_cross_entropy_target_out_of_range(target, bad):
    logits = tb.zeros(2, 3, requires_grad=True)
    with pytest.raises(IndexError, match=msg("cross_entropy", "[0, 3)", bad)):
        logits.cross_entropy(tb.tensor(target))


@pytest.mark.parametrize("key, where", [([[0, 1], [2]], ("item [1] has length 1", "item [0] has length 2")),
                                        ([0, [1, 2]], ("item [1] has length 2", "item [0] is a number (0)"))],
                         ids=str)
def test_ragged_index_list(key, where):
    with pytest.raises(ValueError, match=msg("getitem", "ragged nested list", *where)):
        tb.arange(5)[key]
    with pytest.raises(ValueError, match=msg("getitem", "ragged nested list", *where)):
        tb.zeros(5, 2)[key, 0]
    with pytest.raises(TypeError, match=msg("getitem", "item [1] is a NoneType", "not a number")):
        tb.arange(5)[[0, None]]


@pytest.mark.parametrize("key, value", [(0, 1.0), ((slice(None), 1), tb.zeros(2)), (..., tb.zeros(2, 3))],
                         ids=["int", "slice", "ellipsis"])
def test_setitem_is_refused(key, value):
    x = tb.zeros(2, 3)
    with pytest.raises(TypeError, match=msg("setitem", "immutable")):
        x[key] = value
    assert not x.numpy().any()


@pytest.mark.parametrize("key", [lambda x: x > 0, lambda x: [True, False], lambda x: np.array([True, False]),
                                 lambda x: (0, [True, False, True])], ids=["tensor", "list", "ndarray", "axis1"])
def test_bool_mask_index_raises(key):
    x = tb.zeros(2, 3)
    with pytest.raises(TypeError, match=msg("getitem", "bool", "tb.where")):
        x[key(x)]


def test_bool_and_float_scalar_index_raise():
    x = tb.zeros(2, 3)
    with pytest.raises(TypeError, match=msg("getitem", "True", "bool")):
        x[True]
    with pytest.raises(TypeError, match=msg("getitem", "1.5", "float")):
        x[1.5]
    with pytest.raises(TypeError, match=msg("getitem", "float", "integers")):
        x[[0.5, 1.0]]
