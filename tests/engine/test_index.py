"""index.py: `Tensor.__getitem__` (ints, slices, steps, None, Ellipsis, integer arrays and tensors) and the
scatter-add backward of the gather it lowers to.

Oracles: numpy's own indexing of the same array (forward), finite differences (backward), and hand-summed
gradients where an index repeats.
"""
import numpy as np
import pytest
from test_ops import F32, F64, T, anyval, check, grad_input

import tinygrad_block as tb


X3 = anyval((4, 5, 3), 16)


SLICE_KEYS = [
    ("int", 1), ("neg_ints", (-1, 2)), ("unit_slice", slice(1, 3)),
    ("mixed_step", (slice(None), slice(1, 4), slice(None, None, 2))),
    ("reverse", slice(None, None, -1)), ("neg_step", (slice(3, 0, -2), slice(None), 1)),
    ("ellipsis", (Ellipsis, 1)), ("none", (None, slice(1, 3), slice(None), None)),
    ("ellipsis_none", (0, Ellipsis, None)), ("neg_bounds", (slice(-3, -1), slice(None, None, 3))),
    ("clamped", slice(2, 100)), ("empty", (slice(None), slice(5, 1))),
    ("array_axis1", (slice(None), [0, 2, 4])), ("array_repeat", [3, 0, 3, 3]),
    ("arrays_separated", ([3, 0, 3], slice(None), [1, 1, 2])), ("arrays_adjacent", ([0, 1], [4, 2])),
    ("int_and_array", (2, [1, 3])), ("array_slice_int", ([1, 2], slice(None), 0)),
    ("array_2d", np.array([[0, 1], [2, 3]])), ("array_negative", ([-1, 0, -4],)),
    ("array_broadcast", (np.array([[0], [3]]), slice(1, 3), np.array([0, 2, 1]))),
    ("slice_then_array", (slice(1, 3), [4, 0])), ("step_then_array", (slice(None, None, 2), [0, 0, 1])),
]


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
@pytest.mark.parametrize("key", [k for _, k in SLICE_KEYS], ids=[n for n, _ in SLICE_KEYS])
def test_getitem_forward(key, dtype, device):
    x = X3.astype(dtype)
    check(T(x, dtype, device=device)[key], x[key].astype(F64), dtype)


def test_getitem_tensor_index(device):
    x = anyval((5, 3), 17)
    idx = np.array([[4, -1], [0, 2]])
    check(T(x, device=device)[tb.tensor(idx, device=device)], x[idx], F64)
    check(T(x, device=device)[tb.tensor(idx.astype(np.int32), dtype=tb.int32, device=device)], x[idx], F64)
    check(T(x, device=device)[:, tb.tensor([2, 0], device=device)], x[:, [2, 0]], F64)


@pytest.mark.parametrize("key", [k for _, k in SLICE_KEYS], ids=[n for n, _ in SLICE_KEYS])
def test_getitem_gradcheck(key, device):
    assert tb.gradcheck(lambda t: t[key], grad_input("any", (4, 5, 3), 43, device=device))


def test_gather_tensor_index_gradcheck(device):
    idx = tb.tensor(np.array([[4, -1], [0, 4]]), device=device)
    assert tb.gradcheck(lambda t: t[idx], grad_input("any", (5, 3), 48, device=device))


def test_gather_repeated_indices_accumulate(device):
    x = T(np.array([1.0, 2.0, 3.0, 4.0]), grad=True, device=device)
    y = x[[0, 0, 2]]
    check(y, [1.0, 1.0, 3.0], F64)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 0.0, 1.0, 0.0])


def test_gather_repeated_indices_weighted(device):
    x = T(np.zeros(4), grad=True, device=device)
    w = np.array([1.0, 10.0, 100.0, 1000.0, 0.5])
    (x[[0, 0, 2, 0, -1]] * T(w, device=device)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0 + 10.0 + 1000.0, 0.0, 100.0, 0.5])


def test_gather_repeated_rows_and_columns(device):
    x = T(np.zeros((3, 4)), grad=True, device=device)
    w = np.arange(1.0, 9.0).reshape(2, 4)
    (x[[1, 1]] * T(w, device=device)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0, 0, 0], w.sum(0), [0, 0, 0, 0]])
    x2 = T(np.zeros((3, 4)), grad=True, device=device)
    w2 = np.arange(1.0, 10.0).reshape(3, 3)
    (x2[:, [2, 0, 2]] * T(w2, device=device)).sum().backward()
    expected = np.zeros((3, 4))
    expected[:, 2] = w2[:, 0] + w2[:, 2]
    expected[:, 0] = w2[:, 1]
    np.testing.assert_array_equal(x2.grad.numpy(), expected)


def test_gather_multi_array_and_2d_index_accumulate(device):
    x = T(np.zeros((3, 4)), grad=True, device=device)
    x[[0, 0, 2, 0], [1, 1, 3, -3]].sum().backward()  # (0,1) three times (the last as -3 -> 1)
    expected = np.zeros((3, 4))
    expected[0, 1], expected[2, 3] = 3.0, 1.0
    np.testing.assert_array_equal(x.grad.numpy(), expected)
    x2 = T(np.zeros(5), grad=True, device=device)
    idx = np.array([[4, 4], [1, 4]])
    (x2[idx] * T(np.array([[1.0, 2.0], [3.0, 4.0]]), device=device)).sum().backward()
    np.testing.assert_array_equal(x2.grad.numpy(), [0.0, 3.0, 0.0, 0.0, 7.0])


def test_gather_backward_through_twice_gathered(device):
    """Second-order structure: gather of a gather composes the scatter-adds (hand count)."""
    x = T(np.zeros(3), grad=True, device=device)
    x[[2, 2, 0]][[0, 1, 1, 2]].sum().backward()  # picks x2, x2, x2, x0
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 0.0, 3.0])
