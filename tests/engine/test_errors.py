"""Bad inputs fail loudly: the right exception type, and a message that names the op, the shapes, dtypes or
devices involved and what was expected. Nothing is silently broadcast where numpy would refuse, and no dtype
is silently coerced.
"""
from __future__ import annotations

import re
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import DEVICES, msg, needs_gpu
from hypothesis import given
from hypothesis import strategies as st

import tinygrad_block as tb
from tinygrad_block import device as devices
from tinygrad_block import manual, nn


def test_msg_helper_requires_every_fragment():
    assert re.search(msg("add", "(2, 3)", "(4,)"), "add: shapes (2, 3) and (4,) differ")
    assert not re.search(msg("add", "(2, 3)", "(4,)"), "add: shapes (2, 3) and (5,) differ")
    assert not re.search(msg("sub", "(2, 3)"), "add: shapes (2, 3)")
    assert not re.search(msg("max", "(2, 3)"), "maximum: shapes (2, 3)")


def f32(*shape):
    return tb.zeros(*shape, dtype=tb.float32)


def f64(*shape):
    return tb.zeros(*shape, dtype=tb.float64)


def meta(*shape, dtype=tb.float32):
    return tb.zeros(*shape, dtype=dtype, device="meta")


# ================================================================ mismatched shapes
BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "pow": lambda a, b: a ** b,
    "maximum": lambda a, b: a.maximum(b),
    "minimum": lambda a, b: a.minimum(b),
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
}


@pytest.mark.parametrize("op", list(BINARY))
def test_elementwise_non_broadcastable_shapes(op):
    a, b = tb.ones(2, 3, requires_grad=True), tb.ones(4)
    with pytest.raises(ValueError, match=msg(op, "(2, 3)", "(4,)", "broadcast")):
        BINARY[op](a, b)


@pytest.mark.parametrize("shapes", [((3,), (4,)), ((2, 3), (3, 2)), ((5, 1, 3), (4, 2)), ((0,), (2,))],
                         ids=str)
def test_add_non_broadcastable_shapes_on_both_devices(shapes):
    for device in ("cpu", "meta"):
        a, b = (tb.zeros(*s, device=device) for s in shapes)
        with pytest.raises(ValueError, match=msg("add", *map(str, shapes))):
            a + b


def test_where_non_broadcastable_shapes():
    cond = tb.zeros(2, 3) > 0
    with pytest.raises(ValueError, match=msg("where", "(2, 3)", "(4,)")):
        tb.where(cond, tb.zeros(4), 0.0)


def test_expand_to_an_incompatible_shape():
    with pytest.raises(ValueError, match=msg("expand", "(2, 3)", "(4, 3)")):
        tb.zeros(2, 3).expand(4, 3)
    with pytest.raises(ValueError, match=msg("expand", "(3, 1)", "(3,)")):
        tb.zeros(3, 1).expand(3)


@pytest.mark.parametrize("a, b", [((2, 3), (4, 5)), ((3,), (4,)), ((2, 3, 4), (2, 5, 6)), ((2, 3), (4,)),
                                  ((4,), (3, 2))], ids=str)
def test_matmul_inner_dimension_mismatch(a, b):
    with pytest.raises(ValueError, match=msg("matmul", str(a), str(b))):
        tb.zeros(*a) @ tb.zeros(*b)


def test_matmul_non_broadcastable_batch_dims_names_the_operand_shapes():
    """The batch axes (2,) and (5,) clash; the message must show the shapes the user passed."""
    with pytest.raises(ValueError, match=msg("matmul", "(2, 3, 4)", "(5, 4, 6)")):
        tb.zeros(2, 3, 4) @ tb.zeros(5, 4, 6)


@pytest.mark.parametrize("a, b", [((), (2, 3)), ((2, 3), ()), ((), ())], ids=str)
def test_matmul_with_0d_operand(a, b):
    with pytest.raises(ValueError, match=msg("matmul", "0-d", str(a), str(b))):
        tb.zeros(*a) @ tb.zeros(*b)


def test_concat_shapes_differ_off_axis():
    with pytest.raises(ValueError, match=msg("concat", "(2, 3)", "(2, 4)", "axis 0")):
        tb.concat([tb.zeros(2, 3), tb.zeros(2, 4)])
    with pytest.raises(ValueError, match=msg("concat", "(2, 3)", "(3, 3)", "axis 1")):
        tb.concat([tb.zeros(2, 3), tb.zeros(3, 3)], axis=1)
    with pytest.raises(ValueError, match=msg("concat", "(2, 3)", "(2, 3, 1)")):
        tb.concat([tb.zeros(2, 3), tb.zeros(2, 3, 1)])


def test_concat_of_0d_and_of_nothing():
    with pytest.raises(ValueError, match=msg("concat", "0-d")):
        tb.concat([tb.zeros(()), tb.zeros(())])
    with pytest.raises(TypeError, match=msg("concat", "non-empty")):
        tb.concat([])


def test_stack_unequal_shapes():
    with pytest.raises(ValueError, match=msg("stack", "(2, 3)", "(3, 2)")):
        tb.stack([tb.zeros(2, 3), tb.zeros(3, 2)])


# ---- nothing is broadcast where numpy would refuse (and nothing refused that numpy allows)
_shape = st.lists(st.integers(0, 3), max_size=3).map(tuple)


def _outcome(fn, *args):
    """The result's shape, or ValueError if `fn(*args)` refuses the shapes."""
    try:
        return fn(*args).shape
    except ValueError:
        return ValueError


@given(_shape, _shape, st.booleans())
def test_elementwise_broadcasting_agrees_with_numpy(a, b, requires_grad):
    expected = _outcome(np.add, np.zeros(a), np.zeros(b))
    for device in ("cpu", "meta"):
        x = tb.zeros(*a, device=device, requires_grad=requires_grad)
        y = tb.zeros(*b, device=device)
        for name in ("add", "sub", "mul", "maximum", "lt"):
            got = _outcome(BINARY[name], x, y)
            assert got == expected, (name, device, a, b, got, expected)
        cond = tb.zeros(*a, device=device) > 0
        assert _outcome(tb.where, cond, y, 0.0) == expected, ("where", device, a, b)


@given(_shape, _shape)
def test_expand_agrees_with_numpy_broadcast_to(a, b):
    expected = _outcome(np.broadcast_to, np.zeros(a), b)
    for device in ("cpu", "meta"):
        x = tb.zeros(*a, device=device, requires_grad=True)
        assert _outcome(x.expand, b) == expected, (device, a, b)


_mm_shape = st.lists(st.integers(0, 3), min_size=0, max_size=4).map(tuple)


@given(_mm_shape, _mm_shape)
def test_matmul_shapes_agree_with_numpy(a, b):
    expected = _outcome(np.matmul, np.zeros(a), np.zeros(b))
    for device in ("cpu", "meta"):
        x, y = tb.zeros(*a, device=device), tb.zeros(*b, device=device)
        assert _outcome(tb.Tensor.matmul, x, y) == expected, (device, a, b)


def test_matmul_batched_by_matrix_with_empty_inner_axis():
    """numpy gives zeros of shape (2, 3, 4); the empty K axis must not break the batch-folding reshape."""
    out = tb.zeros(2, 3, 0) @ tb.zeros(0, 4)
    assert out.shape == (2, 3, 4)
    assert not out.numpy().any()


# ================================================================ bad axes
AXIS_OPS = {
    "sum": lambda x, a: x.sum(a),
    "max": lambda x, a: x.max(a),
    "min": lambda x, a: x.min(a),
    "mean": lambda x, a: x.mean(a),
    "var": lambda x, a: x.var(a),
    "logsumexp": lambda x, a: x.logsumexp(a),
    "softmax": lambda x, a: x.softmax(a),
    "log_softmax": lambda x, a: x.log_softmax(a),
    "squeeze": lambda x, a: x.squeeze(a),
    "concat": lambda x, a: tb.concat([x, x], axis=a),
}


@pytest.mark.parametrize("op", list(AXIS_OPS))
@pytest.mark.parametrize("axis", [2, -3, 5])
def test_axis_out_of_range(op, axis):
    with pytest.raises(ValueError, match=msg(op, f"axis {axis}", "-2 <= axis < 2")):
        AXIS_OPS[op](tb.zeros(2, 3), axis)


def test_unsqueeze_axis_out_of_range():
    """unsqueeze (and stack, which adds an axis) accept -3 <= axis < 3 for a 2-d tensor."""
    with pytest.raises(ValueError, match=msg("unsqueeze", "axis 3", "-3 <= axis < 3")):
        tb.zeros(2, 3).unsqueeze(3)


def test_stack_axis_out_of_range():
    with pytest.raises(ValueError, match=msg("stack", "axis 5", "-3 <= axis < 3")):
        tb.stack([tb.zeros(2, 3), tb.zeros(2, 3)], axis=5)


def test_axis_must_be_an_int():
    with pytest.raises(TypeError, match=msg("sum", "1.5")):
        tb.zeros(2, 3).sum(1.5)
    with pytest.raises(TypeError, match=msg("sum", "True")):
        tb.zeros(2, 3).sum(True)


@pytest.mark.parametrize("op", ["sum", "max", "min", "mean", "var"])
@pytest.mark.parametrize("axes", [(0, 0), (1, -1)], ids=str)
def test_repeated_axes(op, axes):
    with pytest.raises(ValueError, match=msg(op, "repeated", str(axes))):
        AXIS_OPS[op](tb.zeros(2, 3), axes)


@pytest.mark.parametrize("order", [(0, 0), (0,), (1, 1, 0)], ids=str)
def test_permute_not_a_permutation(order):
    with pytest.raises(ValueError, match=msg("permute", str(order), "(2, 3)", "permutation")):
        tb.zeros(2, 3).permute(order)


def test_permute_axis_out_of_range():
    with pytest.raises(ValueError, match=msg("permute", "axis 2", "-2 <= axis < 2")):
        tb.zeros(2, 3).permute(0, 2)


def test_squeeze_of_a_non_1_axis():
    with pytest.raises(ValueError, match=msg("squeeze", "(0,)", "(2, 1, 3)", "size 1")):
        tb.zeros(2, 1, 3).squeeze(0)
    with pytest.raises(ValueError, match=msg("squeeze", "(2, 1, 3)", "size 1")):
        tb.zeros(2, 1, 3).squeeze((1, 2))


@pytest.mark.parametrize("axes", [(0, 2), (-3, 1), (2, 2)], ids=str)
def test_transpose_out_of_range(axes):
    bad = next(a for a in axes if not -2 <= a < 2)
    with pytest.raises(ValueError, match=msg("transpose", f"axis {bad}", "-2 <= axis < 2")):
        tb.zeros(2, 3).transpose(*axes)


# ================================================================ reshape
@pytest.mark.parametrize("shape", [(4, 2), (7,), (2, 2), (0, 6)], ids=str)
def test_reshape_incompatible_size(shape):
    with pytest.raises(ValueError, match=msg("reshape", "(2, 3)", str(shape))):
        tb.zeros(2, 3).reshape(shape)


def test_reshape_minus_one_that_does_not_divide():
    with pytest.raises(ValueError, match=msg("reshape", "(2, 3)", "(-1, 4)")):
        tb.zeros(2, 3).reshape(-1, 4)


def test_reshape_two_minus_ones():
    with pytest.raises(ValueError, match=msg("reshape", "(-1, -1)", "-1")):
        tb.zeros(2, 3).reshape(-1, -1)
    with pytest.raises(ValueError, match=msg("reshape", "(2, -2)")):
        tb.zeros(2, 3).reshape(2, -2)


def test_reshape_same_size_on_meta_still_checked():
    with pytest.raises(ValueError, match=msg("reshape", "(2, 3)", "(5,)")):
        meta(2, 3).reshape(5)


# ================================================================ dtypes: no silent coercion
DTYPE_OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "maximum": lambda a, b: a.maximum(b),
    "lt": lambda a, b: a < b,
    "matmul": lambda a, b: a @ b.T,
    "concat": lambda a, b: tb.concat([a, b]),
    "stack": lambda a, b: tb.stack([a, b]),
    "where": lambda a, b: tb.where(a > 0, a, b),
}


@pytest.mark.parametrize("op", list(DTYPE_OPS))
def test_mixing_float32_and_float64_raises(op):
    with pytest.raises(TypeError, match=msg(op, "float32", "float64")):
        DTYPE_OPS[op](f32(2, 3), f64(2, 3))
    with pytest.raises(TypeError, match=msg(op, "float32", "float64")):
        DTYPE_OPS[op](f64(2, 3), f32(2, 3))


@pytest.mark.parametrize("op", list(DTYPE_OPS))
def test_explicit_cast_fixes_the_dtype_mismatch(op):
    a = tb.tensor(np.arange(6.0).reshape(2, 3) + 1, dtype=tb.float32)
    b = tb.tensor(np.arange(6.0).reshape(2, 3) + 2, dtype=tb.float64)
    out = DTYPE_OPS[op](a, b.to(tb.float32))
    assert out.dtype == (tb.bool_ if op == "lt" else tb.float32)
    ref = DTYPE_OPS[op](b.to(tb.float32), b.to(tb.float32))  # same op, matching dtypes from the start
    assert out.shape == ref.shape
    out64 = DTYPE_OPS[op](a.to(tb.float64), b)
    assert out64.dtype == (tb.bool_ if op == "lt" else tb.float64)


def test_where_mixed_value_dtypes_in_either_slot():
    cond = tb.zeros(2, 3) > 0
    with pytest.raises(TypeError, match=msg("where", "float32", "float64")):
        tb.where(cond, f32(2, 3), f64(2, 3))
    with pytest.raises(TypeError, match=msg("where", "int64", "float32")):
        tb.where(cond, tb.zeros(2, 3, dtype=tb.int64), f32(2, 3))


def test_every_dtype_pair_raises_rather_than_promoting():
    names = ["float16", "float32", "float64", "int32", "int64", "bool"]
    for da in names:
        for db in names:
            a, b = tb.zeros(2, dtype=da), tb.zeros(2, dtype=db)
            if da == db:
                assert (a + b).dtype == da and (a * b).dtype == da and tb.concat([a, b]).dtype == da
                continue
            for name in ("add", "mul", "maximum", "concat"):
                with pytest.raises(TypeError, match=msg(name, da, db)):
                    DTYPE_OPS[name](a, b)


@pytest.mark.parametrize("value", [1.5, -0.25, float("inf")], ids=str)
@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
def test_float_number_with_int_tensor_raises(value, dtype):
    t = tb.zeros(3, dtype=dtype)
    for name, fn in [("add", lambda: t + value), ("add", lambda: value + t), ("mul", lambda: t * value),
                     ("mul", lambda: value * t), ("div", lambda: t / value), ("maximum", lambda: t.maximum(value)),
                     ("lt", lambda: t < value), ("where", lambda: tb.where(tb.ones(3) > 0, t, value))]:
        with pytest.raises(TypeError, match=msg(name, repr(value), dtype)):
            fn()


def test_explicit_cast_fixes_a_float_number_with_an_int_tensor():
    t = tb.tensor([1, 2, 3])
    out = t.to(tb.float64) * 1.5
    assert out.dtype == tb.float64
    assert out.tolist() == [1.5, 3.0, 4.5]


def test_python_numbers_take_the_tensor_dtype():
    """A Python number never changes the tensor's dtype (numpy 2's rule, with no promotion)."""
    assert (tb.zeros(2, dtype=tb.float16) + 0.5).dtype == tb.float16
    assert (tb.zeros(2, dtype=tb.int32) + 3).dtype == tb.int32
    assert (2 * tb.zeros(2, dtype=tb.float32)).dtype == tb.float32
    assert (tb.zeros(2, dtype=tb.float64) * 2).dtype == tb.float64


def test_int_too_big_for_the_tensor_dtype_names_the_op():
    with pytest.raises((TypeError, OverflowError), match=msg("add", "int32")):
        tb.zeros(2, dtype=tb.int32) + 2 ** 40


def test_complex_number_message_does_not_suggest_a_useless_cast():
    with pytest.raises(TypeError, match=msg("add", "(1+2j)", "float32")) as info:
        f32(2) + (1 + 2j)
    assert ".to('float32')" not in str(info.value), str(info.value)


INT_FLOAT_MATH = {
    "div": lambda t: t / t,
    "exp": lambda t: t.exp(),
    "log": lambda t: t.log(),
    "sqrt": lambda t: t.sqrt(),
    "reciprocal": lambda t: t.reciprocal(),
    "sin": lambda t: t.sin(),
    "erf": lambda t: t.erf(),
    "mean": lambda t: t.mean(),
    "pow": lambda t: t ** 2,
}


@pytest.mark.parametrize("op", list(INT_FLOAT_MATH))
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_float_math_on_an_int_tensor_raises_rather_than_changing_dtype(op, device):
    """cpu would otherwise silently return float64 (or, for erf and reciprocal, truncate back to int64),
    while meta reports int64: the two devices would disagree about the dtype."""
    t = tb.tensor([1, 2, 4], device=device)
    with pytest.raises(TypeError, match=msg(op, "int64")):
        INT_FLOAT_MATH[op](t)


def test_int_ops_keep_the_int_dtype_on_both_devices():
    for device in ("cpu", "meta"):
        t = tb.tensor([1, 2, 4], device=device)
        for out in (t + t, t * 3, -t, t.sum(), t.max(), t.maximum(t), t.reshape(3, 1), t[1:]):
            assert out.dtype == tb.int64, (device, out)


# ================================================================ devices
DEVICE_OPS = DTYPE_OPS  # the same binary ops must refuse mixed devices as they refuse mixed dtypes


@pytest.mark.parametrize("op", list(DEVICE_OPS))
def test_mixing_cpu_and_meta_raises(op):
    with pytest.raises(RuntimeError, match=msg(op, "cpu", "meta")):
        DEVICE_OPS[op](tb.zeros(2, 3), meta(2, 3))
    with pytest.raises(RuntimeError, match=msg(op, "cpu", "meta")):
        DEVICE_OPS[op](meta(2, 3), tb.zeros(2, 3))


def test_where_with_cond_on_another_device():
    with pytest.raises(RuntimeError, match=msg("where", "cpu", "meta")):
        tb.where(meta(2, 3) > 0, tb.zeros(2, 3), tb.zeros(2, 3))
    with pytest.raises(RuntimeError, match=msg("where", "cpu", "meta")):
        tb.where(tb.zeros(2, 3) > 0, tb.zeros(2, 3), meta(2, 3))


def test_index_tensor_on_another_device():
    with pytest.raises(RuntimeError, match=msg("getitem", "cpu", "meta")):
        tb.zeros(2, 3)[tb.tensor([0, 1], device="meta")]


def test_cross_entropy_target_on_meta_logits_on_cpu():
    with pytest.raises(RuntimeError, match=msg("cross_entropy", "cpu", "meta")):
        tb.zeros(2, 3).cross_entropy(tb.tensor([0, 1], device="meta"))


def test_cross_entropy_target_on_cpu_logits_on_meta():
    with pytest.raises(RuntimeError, match=msg("cross_entropy", "cpu", "meta")):
        meta(2, 3).cross_entropy(tb.tensor([0, 1]))


def test_backward_grad_on_another_device():
    y = tb.ones(2, 3, requires_grad=True) * 2.0
    with pytest.raises(RuntimeError, match=msg("backward", "cpu", "meta")):
        y.backward(meta(2, 3))


def test_explicit_move_fixes_the_device_mismatch():
    a, b = tb.ones(2, 3, requires_grad=True), meta(2, 3)
    out = a.to("meta") * b
    assert out.device == "meta" and out.shape == (2, 3) and out.requires_grad
    out = tb.concat([a.to("meta"), b])
    assert out.device == "meta" and out.shape == (4, 3)


def test_meta_tensor_has_no_values():
    with pytest.raises(RuntimeError, match=msg(None, "meta", "no values")):
        meta(2, 3).numpy()
    with pytest.raises(RuntimeError, match=msg(None, "meta")):
        meta(1).item()


# ================================================================ requires_grad on non-float tensors
@pytest.mark.parametrize("dtype, data", [("int64", [1, 2]), ("int32", [1, 2]), ("bool", [True, False])])
def test_non_float_tensor_cannot_require_grad(dtype, data):
    with pytest.raises(TypeError, match=msg("requires_grad", dtype, "(2,)", "floating-point")):
        tb.tensor(data, dtype=dtype, requires_grad=True)
    t = tb.tensor(data, dtype=dtype)
    with pytest.raises(TypeError, match=msg("requires_grad", dtype, "(2,)", "floating-point")):
        t.requires_grad = True
    assert t.requires_grad is False
    with pytest.raises(TypeError, match=msg("requires_grad", dtype, "floating-point")):
        t.requires_grad_()
    with pytest.raises(TypeError, match=msg("requires_grad", dtype, "floating-point")):
        tb.zeros(2, dtype=dtype, requires_grad=True)
    with pytest.raises(TypeError, match=msg("requires_grad", dtype, "floating-point")):
        tb.ones(2, dtype=dtype, device="meta", requires_grad=True)


def test_int_tensor_built_from_python_ints_cannot_require_grad():
    with pytest.raises(TypeError, match=msg("requires_grad", "int64")):
        tb.tensor([1, 2, 3], requires_grad=True)
    assert tb.tensor([1.0, 2.0], requires_grad=True).requires_grad  # floats are fine


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


# ================================================================ backward
def test_backward_on_non_scalar_without_grad():
    y = tb.ones(2, 3, requires_grad=True) * 2.0
    with pytest.raises(RuntimeError, match=msg("backward", "(2, 3)", "grad")):
        y.backward()


def test_backward_on_a_tensor_that_does_not_require_grad():
    with pytest.raises(RuntimeError, match=msg("backward", "does not require grad")):
        (tb.ones(2, 3) * 2.0).sum().backward()
    with pytest.raises(RuntimeError, match=msg("backward", "does not require grad")):
        tb.ones(()).backward()


def test_backward_with_a_grad_of_the_wrong_shape():
    y = tb.ones(2, 3, requires_grad=True) * 2.0
    with pytest.raises(ValueError, match=msg("backward", "(3,)", "(2, 3)")):
        y.backward(tb.ones(3))
    with pytest.raises(ValueError, match=msg("backward", "(3, 2)", "(2, 3)")):
        y.backward(tb.ones(3, 2))


def test_backward_with_a_grad_of_the_wrong_dtype_or_type():
    y = tb.ones(2, 3, requires_grad=True) * 2.0
    with pytest.raises(TypeError, match=msg("backward", "float32", "float64")):
        y.backward(f64(2, 3))
    with pytest.raises(TypeError, match=msg("backward", "ndarray", "Tensor")):
        y.backward(np.ones((2, 3), dtype=np.float32))


def test_second_backward_through_a_freed_graph():
    x = tb.ones(2, 3, requires_grad=True)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match=msg("backward", "retain_graph", "freed")):
        y.backward()


def test_backward_through_a_subgraph_freed_by_another_output():
    x = tb.ones(2, 3, requires_grad=True)
    z = x.exp()
    z.sum().backward()
    with pytest.raises(RuntimeError, match=msg("backward", "retain_graph")):
        (z * 3.0).sum().backward()


def test_retain_graph_allows_a_second_backward_that_accumulates():
    x = tb.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert x.grad.tolist() == [4.0, 8.0, 12.0]
    with pytest.raises(RuntimeError, match=msg("backward", "retain_graph")):
        y.backward()


# ================================================================ sizes, nesting, seeds and ranges
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


# ---- expand: -1 keeps an existing axis's size (as in PyTorch); other negatives are refused
def test_expand_minus_one_keeps_the_axis():
    torch = pytest.importorskip("torch")
    x = np.arange(3.0).reshape(3, 1)
    for shape in [(-1, 4), (2, -1, 4), (2, -1, -1), (-1, -1), (5, 3, 1)]:
        got = tb.tensor(x).expand(*shape).numpy()
        np.testing.assert_array_equal(got, torch.tensor(x).expand(*shape).numpy())


@pytest.mark.parametrize("shape, bad, axis", [((-2, 3), -2, 0), ((-1, 3), -1, 0), ((2, -3), -3, 1),
                                              ((-1, -1, 3), -1, 0)], ids=str)
def test_expand_negative_size_refused(shape, bad, axis):
    with pytest.raises(ValueError, match=msg("expand", f"bad size {bad} at axis {axis}", str(shape), "(3,)",
                                             "-1 to keep")):
        tb.zeros(3).expand(*shape)


_target = st.lists(st.integers(-3, 3), max_size=4).map(tuple)


@given(_shape, _target)
def test_expand_agrees_with_torch(a, b):
    torch = pytest.importorskip("torch")
    try:
        expected = tuple(torch.zeros(a).expand(b).shape)
    except RuntimeError:
        expected = ValueError
    if expected is not ValueError and min(expected, default=0) < 0:
        expected = ValueError  # torch lets a -1 on a new axis through after a new 0 axis: (0, -1) from ()
    for device in ("cpu", "meta"):
        assert _outcome(tb.zeros(*a, device=device).expand, b) == expected, (device, a, b)


# ---- cross_entropy, Generator, randint
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_cross_entropy_on_0d_logits(device):
    with pytest.raises(ValueError, match=msg("cross_entropy", "0-d", "(..., C)")):
        tb.tensor(1.5, device=device).cross_entropy(tb.tensor(0, device=device))


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


@pytest.mark.parametrize("args, error, expected", [
    ((0, float("inf")), ValueError, "finite"), ((float("nan"),), ValueError, "finite"),
    ((0, 3, float("-inf")), ValueError, "finite"), (("3",), TypeError, "numbers"), ((0, 3, 0), ValueError, "zero"),
], ids=str)
def test_arange_bad_bounds(args, error, expected):
    with pytest.raises(error, match=msg("arange", "start=", "stop=", "step=", expected)):
        tb.arange(*args)


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


# ================================================================ misc bad inputs
# ================================================================ devices
@pytest.mark.parametrize("make", [lambda: tb.zeros(2, device="tpu"), lambda: tb.tensor([1.0], device="tpu"),
                                  lambda: tb.ones(2).to("tpu"), lambda: tb.randn(2, generator=tb.Generator(0),
                                                                                  device="tpu")],
                         ids=["zeros", "tensor", "to", "randn"])
def test_unknown_device(make):
    with pytest.raises(ValueError, match=msg(None, "unknown device", "'tpu'", "'cpu'", "'cuda'", "'cuda:N'", "'meta'",
                                             "'strict'")):
        make()


@pytest.mark.parametrize("name", ["cuda:x", "cuda:", "cuda:-1"])
def test_malformed_gpu_name(name):
    with pytest.raises(ValueError, match=msg(None, "unknown device", repr(name), "'cuda:N'")):
        tb.zeros(2, device=name)


@pytest.fixture
def fresh_registry(monkeypatch):
    """The device registry without any GPU an earlier test set up, so 'cuda' is looked up again."""
    kept = {k: v for k, v in devices.BACKENDS.items() if not k.startswith("cuda")}
    monkeypatch.setattr(devices, "BACKENDS", kept)


def fake_cupy(count=None, error=None):
    """A stand-in CuPy module whose runtime reports `count` GPUs, or raises `error` when asked."""
    def get_device_count():
        if error:
            raise error
        return count
    return SimpleNamespace(cuda=SimpleNamespace(runtime=SimpleNamespace(getDeviceCount=get_device_count)))


GPU_MAKERS = {"zeros": lambda d: tb.zeros(2, device=d), "tensor": lambda d: tb.tensor([1.0], device=d),
              "to": lambda d: tb.ones(2).to(d), "randn": lambda d: tb.randn(2, generator=tb.Generator(0), device=d),
              "Module.to": lambda d: nn.Linear(2, 3, generator=tb.Generator(0)).to(d)}


@pytest.mark.parametrize("make", GPU_MAKERS.values(), ids=GPU_MAKERS.keys())
def test_cuda_without_cupy_says_how_to_install_it(make, monkeypatch, fresh_registry):
    monkeypatch.setitem(sys.modules, "cupy", None)  # `import cupy` now raises ImportError
    with pytest.raises(RuntimeError, match=msg(None, "'cuda:0'", "CuPy is not installed", "pip install -e '.[gpu]'",
                                               "cupy-cuda13x", "cupy-cuda12x")):
        make("cuda")


@pytest.mark.parametrize("make", GPU_MAKERS.values(), ids=GPU_MAKERS.keys())
def test_cuda_with_cupy_but_no_usable_gpu(make, monkeypatch, fresh_registry):
    error = RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(error=error))
    with pytest.raises(RuntimeError, match=msg(None, "'cuda:0'", "no usable CUDA GPU", "cudaErrorNoDevice",
                                               "nvidia-smi")):
        make("cuda")
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(count=0))
    with pytest.raises(RuntimeError, match=msg(None, "'cuda:0'", "no CUDA GPU")):
        make("cuda")


@pytest.mark.parametrize("count, listed", [(1, "1 CUDA GPU (cuda:0)"), (2, "2 CUDA GPUs (cuda:0, cuda:1)")])
def test_a_gpu_index_past_the_last_gpu(count, listed, monkeypatch, fresh_registry):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(count=count))
    with pytest.raises(RuntimeError, match=msg(None, "'cuda:7'", listed)):
        tb.ones(2).to("cuda:7")


@needs_gpu
def test_a_gpu_index_past_the_last_gpu_on_this_machine():
    import cupy
    count = cupy.cuda.runtime.getDeviceCount()
    with pytest.raises(RuntimeError, match=msg(None, f"'cuda:{count}'", f"{count} CUDA GPU", "(cuda:0")):
        tb.ones(2).to(f"cuda:{count}")


@needs_gpu
def test_mixing_cpu_and_cuda_in_one_op():
    cpu, gpu = tb.ones(2, 3), tb.ones(2, 3, device="cuda")
    for op in ("add", "mul", "matmul", "where", "concat"):
        with pytest.raises(RuntimeError, match=msg(op, "different devices", "cpu", "cuda:0", ".to(")):
            {"add": lambda: cpu + gpu, "mul": lambda: gpu * cpu, "matmul": lambda: gpu @ cpu.T,
             "where": lambda: tb.where(gpu > 0, cpu, gpu), "concat": lambda: tb.concat([cpu, gpu])}[op]()


def test_mixing_cpu_and_strict_in_one_op():
    cpu, other = tb.ones(2, 3), tb.ones(2, 3, device="strict")
    with pytest.raises(RuntimeError, match=msg("add", "different devices", "cpu (2, 3)", "strict (2, 3)", ".to(")):
        cpu + other
    with pytest.raises(RuntimeError, match=msg("matmul", "different devices", "cpu", "strict")):
        other @ cpu.T


def test_module_to_an_unknown_device_moves_nothing():
    layer = nn.Linear(2, 3, generator=tb.Generator(0))
    with pytest.raises(ValueError, match=msg(None, "unknown device", "'tpu'")):
        layer.to("tpu")
    assert layer.weight.device == "cpu"


def test_strict_arrays_refuse_every_implicit_host_read():
    from tinygrad_block.strict import HostConversionError
    a = tb.ones(2, 3, device="strict").data
    for what, read in [("np.asarray", lambda: np.asarray(a)), ("float()", lambda: float(a[0, 0])),
                       ("int()", lambda: int(a.max())), ("bool()", lambda: bool(a[0, 0])),
                       ("item()", lambda: a.item()), ("tolist()", lambda: a.tolist()), ("iterating", lambda: list(a))]:
        with pytest.raises(HostConversionError, match=msg(None, what, "float32", "(", "sync", "to_numpy")):
            read()
    with pytest.raises(TypeError, match=msg(None, "numpy array", "cannot join strict arrays")):
        a + np.ones((2, 3), np.float32)


@pytest.mark.parametrize("op, make", [
    ("tensor", lambda: tb.tensor([1.0], dtype="complex64")),
    ("tensor", lambda: tb.tensor(np.array([1 + 1j]))),
    ("tensor", lambda: tb.tensor(np.zeros(2, dtype=np.uint8))),
    ("zeros", lambda: tb.zeros(2, dtype="complex64")),
    ("full", lambda: tb.full((2,), 1.0, dtype="complex64")),
    ("arange", lambda: tb.arange(3, dtype="complex64")),
    ("randn", lambda: tb.randn(2, generator=tb.Generator(0), dtype="complex64")),
    ("to", lambda: tb.ones(2).to(np.complex64)),
    ("to", lambda: tb.ones(2).to("complex64")),
], ids=["tensor_str", "tensor_array", "tensor_uint8", "zeros", "full", "arange", "randn", "to_np", "to_str"])
def test_unsupported_dtype(op, make):
    with pytest.raises(TypeError, match=msg(op, "unsupported dtype", "float32", "float64")):
        make()


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


@pytest.mark.parametrize("key, value", [(0, 1.0), ((slice(None), 1), tb.zeros(2)), (..., tb.zeros(2, 3))],
                         ids=["int", "slice", "ellipsis"])
def test_setitem_is_refused(key, value):
    x = tb.zeros(2, 3)
    with pytest.raises(TypeError, match=msg("setitem", "immutable")):
        x[key] = value
    assert not x.numpy().any()


def test_numpy_view_is_read_only():
    x = tb.zeros(2, 3)
    with pytest.raises(ValueError, match="read-only"):
        x.numpy()[0, 0] = 1.0


NUMPY_MIXES = {
    "add": (lambda x, a: x + a, lambda x, a: a + x),
    "sub": (lambda x, a: x - a, lambda x, a: a - x),
    "mul": (lambda x, a: x * a, lambda x, a: a * x),
    "div": (lambda x, a: x / a, lambda x, a: a / x),
    "maximum": (lambda x, a: x.maximum(a), lambda x, a: tb.maximum(x, a)),
    "where": (lambda x, a: tb.where(x > 0, x, a), lambda x, a: tb.where(x > 0, a, x)),
    "matmul": (lambda x, a: x @ a, lambda x, a: x.matmul(a)),
}


@pytest.mark.parametrize("op", list(NUMPY_MIXES))
def test_numpy_array_in_arithmetic_raises(op):
    x = tb.zeros(2, 3)
    for fn in NUMPY_MIXES[op]:
        with pytest.raises(TypeError, match=msg(op, "ndarray", "Tensor")):
            fn(x, np.ones((2, 3), dtype=np.float32))


def test_numpy_array_on_the_left_of_matmul_raises():
    with pytest.raises(TypeError, match=msg(None, "ndarray", "Tensor")):
        np.ones((3, 2), dtype=np.float32) @ tb.zeros(2, 3)


def test_list_in_arithmetic_raises():
    with pytest.raises(TypeError, match=msg("add", "list", "tb.tensor")):
        tb.zeros(3) + [1.0, 2.0, 3.0]


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


@pytest.mark.parametrize("convert", [lambda t: t.item(), float, int, bool], ids=["item", "float", "int", "bool"])
def test_multi_element_to_python_number(convert):
    with pytest.raises(ValueError, match=msg(None, "(2, 3)")):
        convert(tb.zeros(2, 3))
    assert convert(tb.ones(1, 1)) == 1


def test_gradcheck_with_a_float32_input():
    x = tb.ones(3, requires_grad=True)
    with pytest.raises(TypeError, match=msg("gradcheck", "input 0", "float32", "float64")):
        tb.gradcheck(lambda a: a * 2.0, x)


def test_gradcheck_with_nothing_to_check():
    with pytest.raises(ValueError, match=msg("gradcheck", "requires_grad")):
        tb.gradcheck(lambda a: a * 2.0, tb.ones(3, dtype=tb.float64))


def test_bad_option_values():
    x = tb.zeros(2, 3, requires_grad=True)
    with pytest.raises(ValueError, match=msg("gelu", "'erf'", "'none'", "'tanh'")):
        x.gelu("erf")
    with pytest.raises(ValueError, match=msg("cross_entropy", "'avg'", "'mean'")):
        x.cross_entropy(tb.tensor([0, 1]), reduction="avg")
    with pytest.raises(ValueError, match=msg("pow", "-2.0")):
        (-2.0) ** x
    with pytest.raises(ValueError, match=msg("pad", "(2, 3)")):
        x.pad(((1, 1),))
    with pytest.raises(ValueError, match=msg("pad", "(2, 3)")):
        x.pad(((0, 0), (-1, 0)))
