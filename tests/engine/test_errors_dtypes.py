"""No dtype is silently coerced (dtypes.py, tensor.py): mixed float32 and float64, a float number with an int
tensor, float math on ints, unsupported dtypes and gradients on non-float tensors raise, naming the op and the
dtypes."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import JOINING_OPS, f32, f64, msg

import tinygrad_block as tb


@pytest.mark.parametrize("op", list(JOINING_OPS))
def test_mixing_float32_and_float64_raises(op):
    with pytest.raises(TypeError, match=msg(op, "float32", "float64")):
        JOINING_OPS[op](f32(2, 3), f64(2, 3))
    with pytest.raises(TypeError, match=msg(op, "float32", "float64")):
        JOINING_OPS[op](f64(2, 3), f32(2, 3))


@pytest.mark.parametrize("op", list(JOINING_OPS))
def test_explicit_cast_fixes_the_dtype_mismatch(op):
    a = tb.tensor(np.arange(6.0).reshape(2, 3) + 1, dtype=tb.float32)
    b = tb.tensor(np.arange(6.0).reshape(2, 3) + 2, dtype=tb.float64)
    out = JOINING_OPS[op](a, b.to(tb.float32))
    assert out.dtype == (tb.bool_ if op == "lt" else tb.float32)
    ref = JOINING_OPS[op](b.to(tb.float32), b.to(tb.float32))  # same op, matching dtypes from the start
    assert out.shape == ref.shape
    out64 = JOINING_OPS[op](a.to(tb.float64), b)
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
                    JOINING_OPS[name](a, b)


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
