"""function.py's primitives and tensor.py's composite ops, forward and backward, on every device and on the
shape-only ('meta') backend; indexing is in test_index.py, the same ops against PyTorch in test_ops_torch.py.

Oracles: numpy computed in float64 from the same inputs (math.erf elementwise for erf), finite differences in
float64 (`tb.gradcheck` at its default rtol=1e-8, atol=1e-10), hand-derived gradients for cast and the closed
form of SiLU's minimum.
Inputs for gradcheck stay away from kinks (|x| >= 0.1 and pairwise gaps >= 0.13 for relu/abs/max/min/maximum)
and singularities (>= 0.5 for log/sqrt/reciprocal/pow), and |x| <= ~3 for exp-heavy ops, so the 4th-order
central difference with eps=1e-3 is accurate to ~1e-11.
"""
import math
import operator

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import tinygrad_block as tb

F16, F32, F64 = np.float16, np.float32, np.float64
TOL = {F16: {"rtol": 3e-3, "atol": 2e-3}, F32: {"rtol": 1e-5, "atol": 1e-6}, F64: {"rtol": 1e-10, "atol": 1e-12}}


# ---------------------------------------------------------------- helpers
def rng(seed=0):
    return np.random.default_rng(seed)


def distinct(shape, seed=0, start=0.1, step=0.13):
    """Values with distinct magnitudes start, start+step, ... and random signs, shuffled: every value is at
    least `start` from 0 and at least min(step, 2*start) from every other value (no kinks, no ties)."""
    r = rng(seed)
    n = math.prod(shape)
    v = (start + step * np.arange(n)) * r.choice([-1.0, 1.0], n)
    r.shuffle(v)
    return v.reshape(shape)


def positive(shape, seed=0, lo=0.5, hi=2.5):
    return rng(seed).uniform(lo, hi, shape)


def anyval(shape, seed=0, lo=-2.5, hi=2.5):
    return rng(seed).uniform(lo, hi, shape)


DOMAINS = {"any": anyval, "positive": positive, "kink": distinct}


def T(arr, dtype=F64, grad=False, device="cpu"):
    """A tensor from a numpy array, in `dtype`."""
    return tb.tensor(np.asarray(arr, dtype=dtype), requires_grad=grad, device=device)


def check(t, expected, dtype=None):
    """`t` has numpy's shape and the given dtype, and its values match `expected` within `dtype`'s tolerance."""
    expected = np.asarray(expected)
    dtype = np.dtype(dtype if dtype is not None else expected.dtype)
    assert isinstance(t, tb.Tensor)
    assert t.shape == expected.shape, (t.shape, expected.shape)
    assert t.dtype == dtype, (t.dtype, dtype)
    np.testing.assert_allclose(np.asarray(t.numpy(), dtype=F64), np.asarray(expected, dtype=F64),
                               **TOL[dtype.type])


def np_erf(x):
    return np.vectorize(math.erf, otypes=[F64])(np.asarray(x, dtype=F64))


def np_sigmoid(x):
    """1 / (1 + e^-x) computed stably in float64."""
    x = np.asarray(x, dtype=F64)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def np_logsumexp(x, axis=-1, keepdims=False):
    x = np.asarray(x, dtype=F64)
    m = np.max(x, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def np_log_softmax(x, axis=-1):
    return np.asarray(x, dtype=F64) - np_logsumexp(x, axis, keepdims=True)


def np_softmax(x, axis=-1):
    return np.exp(np_log_softmax(x, axis))


def np_gelu(x):
    x = np.asarray(x, dtype=F64)
    return 0.5 * x * (1.0 + np_erf(x / math.sqrt(2.0)))


def np_gelu_tanh(x):
    x = np.asarray(x, dtype=F64)
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def np_cross_entropy(z, target, reduction):
    z, target = np.asarray(z, dtype=F64), np.asarray(target)
    logp = np_log_softmax(z).reshape(-1, z.shape[-1])
    nll = -logp[np.arange(logp.shape[0]), target.reshape(-1)].reshape(target.shape)
    return {"none": nll, "mean": nll.mean(), "sum": nll.sum()}[reduction]


# ---------------------------------------------------------------- 1. unary ops: forward vs numpy/math
# (id, engine fn, float64 numpy oracle, input domain)
UNARY = [
    ("neg", lambda t: -t, np.negative, "any"),
    ("exp", lambda t: t.exp(), np.exp, "any"),
    ("log", lambda t: t.log(), np.log, "positive"),
    ("sqrt", lambda t: t.sqrt(), np.sqrt, "positive"),
    ("reciprocal", lambda t: t.reciprocal(), np.reciprocal, "positive"),
    ("sin", lambda t: t.sin(), np.sin, "any"),
    ("cos", lambda t: t.cos(), np.cos, "any"),
    ("erf", lambda t: t.erf(), np_erf, "any"),
    ("pow2", lambda t: t ** 2, lambda x: x ** 2, "any"),
    ("pow3", lambda t: t ** 3, lambda x: x ** 3, "any"),
    ("pow0", lambda t: t ** 0, lambda x: x ** 0, "any"),
    ("pow1", lambda t: t ** 1.0, lambda x: x ** 1, "any"),
    ("pow0.5", lambda t: t ** 0.5, np.sqrt, "positive"),
    ("pow-1.5", lambda t: t ** -1.5, lambda x: x ** -1.5, "positive"),
    ("pow2.7", lambda t: t ** 2.7, lambda x: x ** 2.7, "positive"),
    ("rsqrt", lambda t: t.rsqrt(), lambda x: 1.0 / np.sqrt(x), "positive"),
    ("abs", lambda t: t.abs(), np.abs, "kink"),
    ("relu", lambda t: t.relu(), lambda x: np.maximum(x, 0.0), "kink"),
    ("sigmoid", lambda t: t.sigmoid(), np_sigmoid, "any"),
    ("tanh", lambda t: t.tanh(), np.tanh, "any"),
    ("silu", lambda t: t.silu(), lambda x: x * np_sigmoid(x), "any"),
    ("gelu", lambda t: t.gelu(), np_gelu, "any"),
    ("gelu_none", lambda t: t.gelu(approximate="none"), np_gelu, "any"),
    ("gelu_tanh", lambda t: t.gelu(approximate="tanh"), np_gelu_tanh, "any"),
    ("add_scalar", lambda t: t + 1.5, lambda x: x + 1.5, "any"),
    ("radd_scalar", lambda t: 1.5 + t, lambda x: 1.5 + x, "any"),
    ("sub_scalar", lambda t: t - 0.75, lambda x: x - 0.75, "any"),
    ("rsub", lambda t: 2.0 - t, lambda x: 2.0 - x, "any"),
    ("mul_scalar", lambda t: t * -3.0, lambda x: x * -3.0, "any"),
    ("rmul_scalar", lambda t: 3 * t, lambda x: 3 * x, "any"),
    ("div_scalar", lambda t: t / 4.0, lambda x: x / 4.0, "any"),
    ("rtruediv", lambda t: 3.0 / t, lambda x: 3.0 / x, "positive"),
    ("rtruediv_int", lambda t: 1 / t, lambda x: 1 / x, "positive"),
    ("rpow", lambda t: 2.0 ** t, lambda x: 2.0 ** x, "any"),
    ("maximum_scalar", lambda t: t.maximum(0.05), lambda x: np.maximum(x, 0.05), "kink"),
    ("minimum_scalar", lambda t: t.minimum(-0.05), lambda x: np.minimum(x, -0.05), "kink"),
    ("tb_minimum_scalar", lambda t: tb.minimum(t, 0.05), lambda x: np.minimum(x, 0.05), "kink"),
]
UNARY_IDS = [u[0] for u in UNARY]


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,fn,ref,domain", UNARY, ids=UNARY_IDS)
def test_unary_forward(name, fn, ref, domain, dtype, device):
    x = DOMAINS[domain]((3, 4), seed=1).astype(dtype)
    check(fn(T(x, dtype, device=device)), ref(x.astype(F64)), dtype)


@pytest.mark.parametrize("name,fn,ref,domain", UNARY, ids=UNARY_IDS)
def test_unary_forward_0d(name, fn, ref, domain, device):
    """0-d inputs give 0-d outputs with the same values."""
    x = np.asarray(DOMAINS[domain]((1,), seed=2)[0])
    check(fn(T(x, device=device)), ref(x), F64)


F16_OPS = [u for u in UNARY if u[0] in
           ("neg", "exp", "log", "sqrt", "reciprocal", "sin", "cos", "erf", "pow2", "rsqrt", "abs", "relu",
            "sigmoid", "add_scalar", "mul_scalar", "div_scalar", "rtruediv")]


@pytest.mark.parametrize("name,fn,ref,domain", F16_OPS, ids=[u[0] for u in F16_OPS])
def test_unary_forward_float16(name, fn, ref, domain, device):
    x = DOMAINS[domain]((3, 4), seed=3).astype(F16)
    out = fn(T(x, F16, device=device))
    assert out.dtype == tb.float16
    check(out, ref(x.astype(F64)), F16)


@pytest.mark.parametrize("op,ref", [(operator.add, np.add), (operator.mul, np.multiply),
                                    (operator.truediv, np.divide), (operator.sub, np.subtract),
                                    (tb.maximum, np.maximum), (tb.minimum, np.minimum)],
                         ids=["add", "mul", "div", "sub", "maximum", "minimum"])
def test_binary_forward_float16(op, ref, device):
    a, b = positive((2, 3), seed=4).astype(F16), positive((3,), seed=5).astype(F16)
    out = op(T(a, F16, device=device), T(b, F16, device=device))
    check(out, ref(a.astype(F64), b.astype(F64)), F16)


@pytest.mark.parametrize("device", ["cpu", "strict"])  # bit-exact: numpy's erf is math.erf itself
def test_erf_matches_math_erf_elementwise(device):
    xs = np.array([-4.0, -2.0, -1.0, -0.3, 0.0, 1e-9, 0.3, 0.5, 1.0, 1.7, 3.0, 6.0])
    out = T(xs, device=device).erf().numpy()
    assert out.dtype == F64
    for x, y in zip(xs, out, strict=True):
        assert y == math.erf(x)  # float64: computed by math.erf itself, so equal to the last bit
    out32 = T(xs, F32, device=device).erf().numpy()
    assert out32.dtype == F32
    np.testing.assert_allclose(out32, [math.erf(float(np.float32(x))) for x in xs], rtol=1e-7, atol=1e-30)


def test_erf_0d(device):
    check(T(np.asarray(0.5), device=device).erf(), math.erf(0.5), F64)


# ---------------------------------------------------------------- cast
@pytest.mark.parametrize("src,target", [(F32, tb.float64), (F64, tb.float32), (F64, tb.float16), (F32, tb.int64),
                                        (F64, tb.int32), (np.int64, tb.float32), (np.int64, "float64"),
                                        (F32, tb.bool_), (F32, "float64"), (F16, "float32"), (F64, np.float32)])
def test_cast_forward(src, target, device):
    dst = np.dtype(target)
    x = np.array([[-2.7, -0.5, 0.0], [0.4, 1.5, 3.9]]).astype(src)
    t = T(x, src, grad=np.dtype(src).kind == "f", device=device)
    out = t.to(target)
    assert out.dtype == dst
    np.testing.assert_array_equal(out.numpy(), x.astype(dst))
    assert out.requires_grad == (np.dtype(src).kind == "f" and dst.kind == "f")


def test_cast_shorthands(device):
    x = np.array([1.25, -2.5])
    assert T(x, device=device).float().dtype == tb.float32
    assert T(x, F32, device=device).double().dtype == tb.float64
    assert T(x, device=device).half().dtype == tb.float16
    np.testing.assert_array_equal(T(x, device=device).half().numpy(), x.astype(F16))


@pytest.mark.parametrize("src,dst", [(F32, F64), (F64, F32), (F32, F16), (F16, F64)])
def test_cast_backward_casts_grad_back(src, dst, device):
    """d(x.to(dst) * w)/dx = w cast back to x's dtype (hand derivation)."""
    x = T(np.array([0.5, -1.0, 2.0]), src, grad=True, device=device)
    w = np.array([1.5, -2.0, 0.25])
    (x.to(dst) * T(w, dst, device=device)).sum().backward()
    assert x.grad.dtype == np.dtype(src)
    np.testing.assert_array_equal(x.grad.numpy(), w.astype(dst).astype(src))


# ---------------------------------------------------------------- binary ops, comparisons, where
BINARY = [
    ("add", operator.add, np.add, "any"),
    ("mul", operator.mul, np.multiply, "any"),
    ("div", operator.truediv, np.divide, "div"),
    ("sub", operator.sub, np.subtract, "any"),
    ("maximum", lambda a, b: a.maximum(b), np.maximum, "kink"),
    ("tb_maximum", tb.maximum, np.maximum, "kink"),
    ("minimum", lambda a, b: a.minimum(b), np.minimum, "kink"),
    ("tb_minimum", tb.minimum, np.minimum, "kink"),
]


def binary_inputs(shape_a, shape_b, domain, seed=0):
    """Inputs for a binary op: distinct values across both operands for max/min, a denominator >= 0.5 in
    magnitude for div."""
    na, nb = math.prod(shape_a), math.prod(shape_b)
    if domain == "kink":
        v = distinct((na + nb,), seed)
        return v[:na].reshape(shape_a), v[na:].reshape(shape_b)
    a = anyval(shape_a, seed)
    if domain == "div":
        b = positive(shape_b, seed + 1) * rng(seed + 2).choice([-1.0, 1.0], shape_b)
    else:
        b = anyval(shape_b, seed + 1)
    return a, b


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,op,ref,domain", BINARY, ids=[b[0] for b in BINARY])
def test_binary_forward(name, op, ref, domain, dtype, device):
    for sa, sb in [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 4)), ((), (2, 3)), ((2, 3), ())]:
        a, b = binary_inputs(sa, sb, domain, seed=7)
        a, b = a.astype(dtype), b.astype(dtype)
        check(op(T(a, dtype, device=device), T(b, dtype, device=device)), ref(a.astype(F64), b.astype(F64)), dtype)


COMPARISONS = [(operator.lt, np.less), (operator.le, np.less_equal), (operator.gt, np.greater),
               (operator.ge, np.greater_equal), (operator.eq, np.equal), (operator.ne, np.not_equal)]


@pytest.mark.parametrize("dtype", [F32, F64, np.int64], ids=["f32", "f64", "i64"])
@pytest.mark.parametrize("op,ref", COMPARISONS, ids=["lt", "le", "gt", "ge", "eq", "ne"])
def test_comparisons(op, ref, dtype, device):
    a = np.array([[1, 2, 3, 4], [4, 3, 2, 1], [0, 2, 2, 5]]).astype(dtype)  # includes ties
    b = np.array([[1, 3, 2, 4], [0, 3, 5, 1], [0, 1, 2, 6]]).astype(dtype)
    grad = np.dtype(dtype).kind == "f"
    ta, tb_ = T(a, dtype, grad=grad, device=device), T(b, dtype, grad=grad, device=device)
    for out, expected in [(op(ta, tb_), ref(a, b)), (op(ta, 2), ref(a, 2)),
                          (op(ta, tb_[1]), ref(a, b[1])), (op(ta[:, :1], tb_), ref(a[:, :1], b))]:
        assert out.dtype == tb.bool_
        assert out.requires_grad is False
        assert out.shape == expected.shape
        np.testing.assert_array_equal(out.numpy(), expected)


def test_comparison_with_float_scalar(device):
    a = np.array([-1.0, 0.25, 0.5, 2.0])
    for op, ref in COMPARISONS:
        out = op(T(a, F32, grad=True, device=device), 0.5)
        assert out.dtype == tb.bool_ and not out.requires_grad
        np.testing.assert_array_equal(out.numpy(), ref(a, 0.5))


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
def test_where_forward(dtype, device):
    a, b = anyval((3, 4), 8).astype(dtype), anyval((3, 4), 9).astype(dtype)
    cond = a > b
    ta, tbb = T(a, dtype, device=device), T(b, dtype, device=device)
    tc = ta > tbb
    check(tb.where(tc, ta, tbb), np.where(cond, a, b).astype(F64), dtype)
    check(tb.where(tc, ta, 0.5), np.where(cond, a, 0.5), dtype)
    check(tb.where(tc, -1.0, tbb), np.where(cond, -1.0, b), dtype)
    check(tb.where(tc[:, :1], ta[0], tbb), np.where(cond[:, :1], a[0], b), dtype)  # broadcast all three
    check(tb.where(T(np.array(True), np.bool_, device=device), ta, tbb[0]), a.astype(F64), dtype)


# ---------------------------------------------------------------- reductions
AXES = [None, 0, 1, 2, -1, (0, 2), (1, 2), (0, 1, 2), (), [2, 0]]


def np_axis(axis):
    return tuple(axis) if isinstance(axis, list) else axis


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=[str(a) for a in AXES])
def test_reductions_forward(axis, keepdims, dtype, device):
    x = distinct((2, 3, 4), seed=10).astype(dtype)
    x64, ax = x.astype(F64), np_axis(axis)
    t = T(x, dtype, device=device)
    check(t.sum(axis, keepdims=keepdims), x64.sum(ax, keepdims=keepdims), dtype)
    check(t.max(axis, keepdims=keepdims), x64.max(ax, keepdims=keepdims), dtype)
    check(t.min(axis, keepdims=keepdims), x64.min(ax, keepdims=keepdims), dtype)
    if axis != ():
        check(t.mean(axis, keepdims=keepdims), x64.mean(ax, keepdims=keepdims), dtype)
        check(t.var(axis, keepdims=keepdims), x64.var(ax, keepdims=keepdims), dtype)
        check(t.var(axis, keepdims=keepdims, correction=0), x64.var(ax, keepdims=keepdims, ddof=0), dtype)
        check(t.var(axis, keepdims=keepdims, correction=1), x64.var(ax, keepdims=keepdims, ddof=1), dtype)
        check(t.logsumexp(axis, keepdims=keepdims), np_logsumexp(x64, ax, keepdims), dtype)


def test_reductions_torch_names_and_0d(device):
    x = distinct((2, 3), seed=11)
    t = T(x, device=device)
    check(t.sum(dim=1, keepdim=True), x.sum(1, keepdims=True), F64)
    check(t.max(dim=0), x.max(0), F64)
    check(t.mean(dim=-1, keepdim=True), x.mean(-1, keepdims=True), F64)
    s = T(np.asarray(1.75), device=device)
    check(s.sum(), 1.75, F64)
    check(s.max(), 1.75, F64)
    check(s.min(), 1.75, F64)
    check(s.mean(), 1.75, F64)


def test_max_min_with_ties_split_gradient(device):
    """max/min share the gradient equally among tied maxima (hand derivation), and maximum splits ties in half."""
    x = T(np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]), grad=True, device=device)
    x.max(axis=1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]], rtol=1e-15)
    y = T(np.array([[1.0, 3.0, 1.0]]), grad=True, device=device)
    y.min().backward()
    np.testing.assert_allclose(y.grad.numpy(), [[0.5, 0, 0.5]], rtol=1e-15)
    a = T(np.array([1.0, 2.0, 3.0]), grad=True, device=device)
    b = T(np.array([1.0, 5.0, 0.0]), grad=True, device=device)
    a.maximum(b).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [0.5, 0.0, 1.0])
    np.testing.assert_array_equal(b.grad.numpy(), [0.5, 1.0, 0.0])


# ---------------------------------------------------------------- movement
def test_reshape_forward(device):
    x = anyval((2, 3, 4), 12)
    t = T(x, device=device)
    for shape in [(4, -1), (24,), (-1,), (2, 12), (1, 2, 1, 12), (3, 2, 4)]:
        check(t.reshape(shape), x.reshape(shape), F64)
        check(t.reshape(*shape), x.reshape(shape), F64)
    check(T(np.asarray(2.0), device=device).reshape(1, 1), np.full((1, 1), 2.0), F64)
    check(T(np.array([2.0]), device=device).reshape(()), np.asarray(2.0), F64)


def test_permute_transpose_forward(device):
    x = anyval((2, 3, 4), 13)
    t = T(x, F32, device=device)
    for order in [(0, 1, 2), (2, 0, 1), (1, 2, 0), (2, 1, 0), (-1, 0, 1)]:
        check(t.permute(order), np.transpose(x, order), F32)
        check(t.permute(*order), np.transpose(x, order), F32)
    check(t.transpose(0, 2), np.swapaxes(x, 0, 2), F32)
    check(t.transpose(-1, 1), np.swapaxes(x, -1, 1), F32)
    check(t.T, x.T, F32)
    check(t.mT, np.swapaxes(x, -1, -2), F32)
    check(T(x[0], device=device).T, x[0].T, F64)
    check(T(x[0, 0], device=device).T, x[0, 0], F64)


def test_expand_forward(device):
    for src, dst in [((3, 1), (2, 3, 4)), ((), (2, 3)), ((1,), (5,)), ((2, 1, 4), (2, 3, 4)), ((4,), (3, 4))]:
        x = anyval(src, 14)
        check(T(x, device=device).expand(dst), np.broadcast_to(x, dst), F64)
        check(T(x, device=device).expand(*dst), np.broadcast_to(x, dst), F64)
        check(T(x, device=device).broadcast_to(dst), np.broadcast_to(x, dst), F64)


def test_unsqueeze_squeeze_forward(device):
    x = anyval((2, 1, 3, 1), 15)
    t = T(x, device=device)
    check(t.squeeze(), np.squeeze(x), F64)
    check(t.squeeze(1), np.squeeze(x, 1), F64)
    check(t.squeeze(-1), np.squeeze(x, -1), F64)
    check(t.squeeze((1, 3)), np.squeeze(x, (1, 3)), F64)
    check(t.squeeze(dim=1), np.squeeze(x, 1), F64)
    for axis in [0, 2, 4, -1, -5]:
        check(t.unsqueeze(axis), np.expand_dims(x, axis), F64)
    check(T(np.asarray(3.0), device=device).unsqueeze(0), np.array([3.0]), F64)


@pytest.mark.parametrize("widths", [((1, 0), (0, 2)), ((0, 0), (0, 0)), ((2, 3), (1, 1))])
def test_pad_forward(widths, device):
    x = anyval((2, 3), 18).astype(F32)
    check(T(x, F32, device=device).pad(widths), np.pad(x, widths).astype(F64), F32)
    check(T(x[0], F32, device=device).pad(widths[:1]), np.pad(x[0], widths[:1]).astype(F64), F32)


def test_concat_stack_forward(device):
    a, b, c = anyval((2, 3), 19), anyval((2, 1), 20), anyval((2, 4), 21)
    ta, tbb, tc = T(a, device=device), T(b, device=device), T(c, device=device)
    check(tb.concat([ta, tbb, tc], axis=1), np.concatenate([a, b, c], 1), F64)
    check(tb.cat([ta, tbb, tc], axis=-1), np.concatenate([a, b, c], -1), F64)
    check(tb.concat([ta, ta], dim=0), np.concatenate([a, a], 0), F64)
    check(tb.concat((ta,)), a, F64)
    for axis in [0, 1, 2, -1]:
        check(tb.stack([ta, T(c[:, :3], device=device), ta], axis=axis), np.stack([a, c[:, :3], a], axis), F64)
    check(tb.stack([T(np.asarray(1.0), device=device), T(np.asarray(2.0), device=device)]), np.array([1.0, 2.0]), F64)


# ---------------------------------------------------------------- matmul
MATMUL_SHAPES = [
    ("2d", (3, 4), (4, 2)), ("batched", (2, 3, 4), (2, 4, 5)), ("broadcast_batch", (2, 1, 3, 4), (3, 4, 2)),
    ("broadcast_batch_left", (1, 3, 4), (2, 4, 2)), ("BLK_KN", (2, 3, 4), (4, 5)),
    ("B1LK_KN", (2, 1, 3, 4), (4, 2)), ("vec_mat", (4,), (4, 3)), ("mat_vec", (3, 4), (4,)),
    ("vec_vec", (4,), (4,)), ("vec_batched", (4,), (2, 4, 3)), ("batched_vec", (2, 3, 4), (4,)),
    ("K_KN_1", (1, 4), (4, 1)), ("KN_batched_right", (3, 4), (2, 4, 2)),
]


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,sa,sb", MATMUL_SHAPES, ids=[m[0] for m in MATMUL_SHAPES])
def test_matmul_forward(name, sa, sb, dtype, device):
    a, b = anyval(sa, 22).astype(dtype), anyval(sb, 23).astype(dtype)
    expected = np.matmul(a.astype(F64), b.astype(F64))
    check(T(a, dtype, device=device) @ T(b, dtype, device=device), expected, dtype)
    check(T(a, dtype, device=device).matmul(T(b, dtype, device=device)), expected, dtype)


# ---------------------------------------------------------------- softmax family, cross_entropy
@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_family_forward(axis, dtype, device):
    x = anyval((3, 4, 2), 24, -3, 3).astype(dtype)
    x64, t = x.astype(F64), T(x, dtype, device=device)
    check(t.softmax(axis), np_softmax(x64, axis), dtype)
    check(t.softmax(dim=axis), np_softmax(x64, axis), dtype)
    check(t.log_softmax(axis), np_log_softmax(x64, axis), dtype)
    check(t.logsumexp(axis), np_logsumexp(x64, axis), dtype)
    check(t.logsumexp(axis, keepdims=True), np_logsumexp(x64, axis, True), dtype)
    np.testing.assert_allclose(t.softmax(axis).numpy().astype(F64).sum(axis), 1.0, rtol=1e-6)


def test_logsumexp_default_axis_and_none(device):
    x = anyval((2, 3), 25)
    check(T(x, device=device).logsumexp(), np_logsumexp(x, -1), F64)
    check(T(x, device=device).logsumexp(None), np_logsumexp(x, None), F64)
    check(T(x, device=device).logsumexp((0, 1), keepdims=True), np_logsumexp(x, (0, 1), True), F64)


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_forward(reduction, dtype, device):
    z2, t2 = anyval((4, 5), 26, -3, 3).astype(dtype), np.array([0, 4, 2, 2])
    z3, t3 = anyval((2, 3, 4), 27, -3, 3).astype(dtype), np.array([[3, 0, 1], [1, 1, 2]])
    check(T(z2, dtype, device=device).cross_entropy(tb.tensor(t2, device=device), reduction=reduction),
          np_cross_entropy(z2, t2, reduction), dtype)
    check(T(z3, dtype, device=device).cross_entropy(tb.tensor(t3, device=device), reduction=reduction),
          np_cross_entropy(z3, t3, reduction), dtype)
    check(T(z2, dtype, device=device).cross_entropy(t2.tolist(), reduction), np_cross_entropy(z2, t2, reduction), dtype)
    z1 = z2[0]  # logits (C,) with a 0-d target
    check(T(z1, dtype, device=device).cross_entropy(tb.tensor(3, device=device), reduction),
          np_cross_entropy(z1, np.asarray(3), reduction), dtype)


def test_cross_entropy_default_reduction_is_mean(device):
    z, t = anyval((3, 4), 28), np.array([1, 0, 3])
    check(T(z, device=device).cross_entropy(tb.tensor(t, device=device)), np_cross_entropy(z, t, "mean"), F64)


# ---------------------------------------------------------------- 2. backward vs finite differences (float64)
def grad_input(domain, shape, seed, device="cpu"):
    return T(DOMAINS[domain](shape, seed), grad=True, device=device)


@pytest.mark.parametrize("name,fn,ref,domain", UNARY, ids=UNARY_IDS)
def test_unary_gradcheck(name, fn, ref, domain, device):
    assert tb.gradcheck(fn, grad_input(domain, (3, 4), 30, device=device))


def test_pow0_gradient_is_zero(device):
    x = grad_input("any", (3, 4), 30, device=device)
    (x ** 0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((3, 4)))


@pytest.mark.parametrize("name,fn,ref,domain", UNARY, ids=UNARY_IDS)
def test_unary_gradcheck_0d(name, fn, ref, domain, device):
    x = T(np.asarray(DOMAINS[domain]((1,), 31)[0]), grad=True, device=device)
    assert tb.gradcheck(fn, x)


@pytest.mark.parametrize("exponent", [2, 3, -1, -2.5, 0.5, 1.5])
def test_pow_gradcheck_exponents(exponent, device):
    dom = "positive" if float(exponent) != int(exponent) or exponent < 0 else "any"
    assert tb.gradcheck(lambda t: t ** exponent, grad_input(dom, (2, 3), 32, device=device))


def test_tensor_pow_tensor_gradcheck(device):
    a, p = grad_input("positive", (2, 3), 33, device=device), grad_input("any", (2, 3), 34, device=device)
    check(a.detach() ** p.detach(), a.numpy() ** p.numpy(), F64)
    assert tb.gradcheck(lambda x, y: x ** y, a, p)


@pytest.mark.parametrize("name,op,ref,domain", BINARY, ids=[b[0] for b in BINARY])
def test_binary_gradcheck(name, op, ref, domain, device):
    for sa, sb in [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 4)), ((), (2, 3)), ((2, 3), ())]:
        a, b = binary_inputs(sa, sb, domain, seed=35)
        assert tb.gradcheck(op, T(a, grad=True, device=device), T(b, grad=True, device=device))


@pytest.mark.parametrize("name,op,ref,domain", BINARY, ids=[b[0] for b in BINARY])
def test_binary_gradcheck_one_side_constant(name, op, ref, domain, device):
    """Only one operand requires grad; the other is a tensor that does not (0-d or full-shaped)."""
    for sa, sb in [((3, 4), ()), ((), (3, 4)), ((3, 4), (3, 4)), ((4,), (3, 4))]:
        a, b = binary_inputs(sa, sb, domain, seed=36)
        assert tb.gradcheck(op, T(a, grad=True, device=device), T(b, device=device))
        assert tb.gradcheck(op, T(a, device=device), T(b, grad=True, device=device))


def test_where_gradcheck(device):
    cond = T(anyval((3, 4), 37) > 0, np.bool_, device=device)
    a, b = grad_input("any", (3, 4), 38, device=device), grad_input("any", (3, 4), 39, device=device)
    assert tb.gradcheck(lambda x, y: tb.where(cond, x, y), a, b)
    assert tb.gradcheck(lambda x: tb.where(cond, x, 0.5), a)
    assert tb.gradcheck(lambda y: tb.where(cond, -2.0, y), b)
    assert tb.gradcheck(lambda x, y: tb.where(cond[:, :1], x, y), grad_input("any", (4,), 40, device=device),
                        grad_input("any", (3, 1), 41, device=device))


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=[str(a) for a in AXES])
def test_reductions_gradcheck(axis, keepdims, device):
    x = T(distinct((2, 3, 4), seed=42, step=0.12), grad=True, device=device)
    assert tb.gradcheck(lambda t: t.sum(axis, keepdims=keepdims), x)
    assert tb.gradcheck(lambda t: t.max(axis, keepdims=keepdims), x)
    assert tb.gradcheck(lambda t: t.min(axis, keepdims=keepdims), x)
    if axis != ():
        assert tb.gradcheck(lambda t: t.mean(axis, keepdims=keepdims), x)
        assert tb.gradcheck(lambda t: t.var(axis, keepdims=keepdims), x)
        assert tb.gradcheck(lambda t: t.var(axis, keepdims=keepdims, correction=1), x)
        assert tb.gradcheck(lambda t: t.logsumexp(axis, keepdims=keepdims), x)


MOVEMENT_GRAD = [
    ("reshape", (2, 3, 4), lambda t: t.reshape(4, -1)),
    ("reshape_0d", (), lambda t: t.reshape(1, 1)),
    ("reshape_to_0d", (1, 1), lambda t: t.reshape(())),
    ("permute", (2, 3, 4), lambda t: t.permute(2, 0, 1)),
    ("transpose", (2, 3, 4), lambda t: t.transpose(0, 2)),
    ("T", (2, 3, 4), lambda t: t.T),
    ("mT", (2, 3, 4), lambda t: t.mT),
    ("expand", (3, 1), lambda t: t.expand(2, 3, 4)),
    ("expand_0d", (), lambda t: t.expand(2, 3)),
    ("expand_middle", (2, 1, 3), lambda t: t.expand(2, 4, 3)),
    ("unsqueeze", (2, 3), lambda t: t.unsqueeze(1)),
    ("squeeze", (2, 1, 3, 1), lambda t: t.squeeze()),
    ("squeeze_axis", (2, 1, 3, 1), lambda t: t.squeeze(-1)),
    ("pad", (2, 3), lambda t: t.pad(((1, 0), (2, 1)))),
    ("pad_slice", (2, 3), lambda t: t.pad(((1, 2), (0, 1)))[1:3, 1:]),
    ("concat", (2, 3), lambda t: tb.concat([t, t * 2.0, t[:, :1]], axis=1)),
    ("stack", (2, 3), lambda t: tb.stack([t, t.exp()], axis=1)),
]


@pytest.mark.parametrize("name,shape,fn", MOVEMENT_GRAD, ids=[m[0] for m in MOVEMENT_GRAD])
def test_movement_gradcheck(name, shape, fn, device):
    assert tb.gradcheck(fn, grad_input("any", shape, 43, device=device))


def test_concat_gradcheck_several_inputs(device):
    a, b, c = (grad_input("any", shape, seed, device=device) for shape, seed in [((2, 3), 44), ((2, 1), 45),
                                                                                 ((2, 2), 46)])
    assert tb.gradcheck(lambda x, y, z: tb.concat([x, y, z], axis=-1), a, b, c)
    assert tb.gradcheck(lambda x, y: tb.stack([x, y], axis=0), a, grad_input("any", (2, 3), 47, device=device))
    ones = T(np.ones((2, 2)), device=device)
    assert tb.gradcheck(lambda x: tb.concat([x, ones], axis=1), a)  # second input needs no grad


@pytest.mark.parametrize("name,sa,sb", MATMUL_SHAPES, ids=[m[0] for m in MATMUL_SHAPES])
def test_matmul_gradcheck(name, sa, sb, device):
    a, b = grad_input("any", sa, 49, device=device), grad_input("any", sb, 50, device=device)
    assert tb.gradcheck(lambda x, y: x @ y, a, b)
    assert tb.gradcheck(lambda x: x @ b.detach(), a)
    assert tb.gradcheck(lambda y: a.detach() @ y, b)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_family_gradcheck(axis, device):
    x = grad_input("any", (3, 4, 2), 51, device=device)
    assert tb.gradcheck(lambda t: t.softmax(axis), x)
    assert tb.gradcheck(lambda t: t.log_softmax(axis), x)
    assert tb.gradcheck(lambda t: t.logsumexp(axis), x)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_gradcheck(reduction, device):
    z2, t2 = grad_input("any", (4, 5), 52, device=device), tb.tensor(np.array([0, 4, 2, 2]), device=device)
    z3, t3 = grad_input("any", (2, 3, 4), 53, device=device), tb.tensor(np.array([[3, 0, 1], [1, 1, 2]]), device=device)
    assert tb.gradcheck(lambda z: z.cross_entropy(t2, reduction=reduction), z2)
    assert tb.gradcheck(lambda z: z.cross_entropy(t3, reduction=reduction), z3)


def test_cross_entropy_gradient_hand_derivation(device):
    """d mean CE / dz = (softmax(z) - onehot(t)) / N."""
    z, t = anyval((3, 4), 54), np.array([2, 0, 3])
    zt = T(z, grad=True, device=device)
    zt.cross_entropy(tb.tensor(t, device=device)).backward()
    expected = (np_softmax(z) - np.eye(4)[t]) / 3
    np.testing.assert_allclose(zt.grad.numpy(), expected, rtol=1e-12, atol=1e-15)


def test_composite_expression_gradcheck(device):
    """A layer-norm + MLP-ish chain mixing many ops."""
    x, w = grad_input("any", (2, 3, 4), 55, device=device), grad_input("any", (4, 3), 56, device=device)

    def f(x, w):
        h = (x - x.mean(-1, keepdims=True)) * (x.var(-1, keepdims=True) + 1e-5).rsqrt()
        return (h @ w).gelu().softmax(-1)

    assert tb.gradcheck(f, x, w)


# ---------------------------------------------------------------- 3. hypothesis: broadcasting and reductions
SMALL = 24
broadcast_pairs = mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=1, max_side=3).filter(
    lambda s: math.prod(s.result_shape) <= SMALL)
broadcast_triples = mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, min_side=1,
                                                  max_side=3).filter(lambda s: math.prod(s.result_shape) <= SMALL)
HYP_BINARY = [b for b in BINARY if b[0] in ("add", "mul", "div", "maximum", "sub", "minimum")]


@given(shapes=broadcast_pairs, which=st.sampled_from(HYP_BINARY), seed=st.integers(0, 2 ** 16),
       grad_b=st.booleans())
def test_hyp_binary_broadcast(shapes, which, seed, grad_b, device):
    name, op, ref, domain = which
    sa, sb = shapes.input_shapes
    a, b = binary_inputs(sa, sb, domain, seed)
    out = op(T(a, device=device), T(b, device=device))
    assert out.shape == np.broadcast_shapes(sa, sb) == shapes.result_shape
    check(out, ref(a, b), F64)
    assert tb.gradcheck(op, T(a, grad=True, device=device), T(b, grad=grad_b, device=device))


@given(shapes=broadcast_triples, seed=st.integers(0, 2 ** 16), scalar=st.sampled_from([None, "a", "b"]))
def test_hyp_where_broadcast(shapes, seed, scalar, device):
    sc, sa, sb = shapes.input_shapes
    r = rng(seed)
    cond = r.random(sc) < 0.5
    a, b = anyval(sa, seed + 1), anyval(sb, seed + 2)
    tc = T(cond, np.bool_, device=device)
    ta, tbb = T(a, grad=True, device=device), T(b, grad=True, device=device)
    if scalar == "a":
        fn, args, expected = (lambda y: tb.where(tc, 0.25, y)), (tbb,), np.where(cond, 0.25, b)
    elif scalar == "b":
        fn, args, expected = (lambda x: tb.where(tc, x, -0.5)), (ta,), np.where(cond, a, -0.5)
    else:
        fn, args, expected = (lambda x, y: tb.where(tc, x, y)), (ta, tbb), np.where(cond, a, b)
    out = fn(*args)
    assert out.shape == expected.shape
    check(out, expected, F64)
    assert tb.gradcheck(fn, *args)


@given(shapes=broadcast_pairs, seed=st.integers(0, 2 ** 16))
def test_hyp_broadcast_gradient_sums_over_broadcast_axes(shapes, seed, device):
    """d sum((a + b) * w)/db = w summed over b's broadcast axes (hand derivation with numpy)."""
    sa, sb = shapes.input_shapes
    out_shape = shapes.result_shape
    a, b = T(anyval(sa, seed), grad=True, device=device), T(anyval(sb, seed + 1), grad=True, device=device)
    w = anyval(out_shape, seed + 2)
    ((a + b) * T(w, device=device)).sum().backward()
    for t, s in [(a, sa), (b, sb)]:
        lead = len(out_shape) - len(s)
        g = w.sum(axis=tuple(range(lead))) if lead else w
        g = g.sum(axis=tuple(i for i, d in enumerate(s) if d == 1), keepdims=True) if s else g
        assert t.grad.shape == s
        np.testing.assert_allclose(t.grad.numpy(), np.reshape(g, s), rtol=1e-12, atol=1e-12)


@st.composite
def shape_and_axes(draw, max_dims=3, max_side=3, limit=SMALL):
    shape = tuple(draw(st.lists(st.integers(1, max_side), min_size=0, max_size=max_dims)))
    if math.prod(shape) > limit:
        shape = shape[:2]
    if draw(st.booleans()) and shape:
        axes = None
    else:
        axes = tuple(sorted(draw(st.sets(st.integers(0, len(shape) - 1))))) if shape else ()
        if axes and draw(st.booleans()):  # spell some axes negatively
            axes = tuple(a - len(shape) for a in axes)
    return shape, axes


REDUCTIONS = {
    "sum": (lambda t, ax, k: t.sum(ax, keepdims=k), lambda x, ax, k: np.sum(x, ax, keepdims=k)),
    "max": (lambda t, ax, k: t.max(ax, keepdims=k), lambda x, ax, k: np.max(x, ax, keepdims=k)),
    "min": (lambda t, ax, k: t.min(ax, keepdims=k), lambda x, ax, k: np.min(x, ax, keepdims=k)),
    "mean": (lambda t, ax, k: t.mean(ax, keepdims=k), lambda x, ax, k: np.mean(x, ax, keepdims=k)),
    "var": (lambda t, ax, k: t.var(ax, keepdims=k), lambda x, ax, k: np.var(x, ax, keepdims=k)),
    "logsumexp": (lambda t, ax, k: t.logsumexp(ax, keepdims=k), np_logsumexp),
}


@given(sa=shape_and_axes(), name=st.sampled_from(sorted(REDUCTIONS)), keepdims=st.booleans(),
       seed=st.integers(0, 2 ** 16))
def test_hyp_reductions(sa, name, keepdims, seed, device):
    shape, axes = sa
    if name in ("mean", "var", "logsumexp") and axes == ():
        axes = None  # an empty reduction divides by zero elements: not meaningful for these
    fn, ref = REDUCTIONS[name]
    x = distinct(shape, seed, step=0.12)
    expected = ref(x, axes, keepdims)
    out = fn(T(x, device=device), axes, keepdims)
    assert out.shape == np.shape(expected)
    check(out, expected, F64)
    assert tb.gradcheck(lambda t: fn(t, axes, keepdims), T(x, grad=True, device=device))


# ---------------------------------------------------------------- 4. stability
Z_EXTREME = np.array([-1e4, -1e3, -50.0, -20.0, 0.0, 20.0, 50.0, 1e3, 1e4])


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
def test_sigmoid_extreme_values(dtype, device):
    z = Z_EXTREME.astype(dtype)
    x = T(z, dtype, grad=True, device=device)
    s = x.sigmoid()
    assert s.dtype == np.dtype(dtype)
    assert np.all(np.isfinite(s.numpy()))
    expected = np_sigmoid(z.astype(F64))
    np.testing.assert_allclose(s.numpy().astype(F64), expected, rtol=TOL[dtype]["rtol"], atol=0)
    assert s.numpy()[0] == 0.0 and s.numpy()[-1] == 1.0 and s.numpy()[4] == 0.5
    s.sum().backward()
    g = x.grad.numpy().astype(F64)
    assert np.all(np.isfinite(g))
    z64 = z.astype(F64)
    np.testing.assert_allclose(g, np_sigmoid(z64) * np_sigmoid(-z64), rtol=TOL[dtype]["rtol"], atol=1e-30)


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
def test_sigmoid_based_composites_extreme_values(dtype, device):
    z = Z_EXTREME.astype(dtype)
    z64 = z.astype(F64)
    for fn, ref in [(lambda t: t.tanh(), np.tanh), (lambda t: t.silu(), lambda v: v * np_sigmoid(v)),
                    (lambda t: t.gelu(), np_gelu), (lambda t: t.gelu(approximate="tanh"), np_gelu_tanh)]:
        x = T(z, dtype, grad=True, device=device)
        out = fn(x)
        assert np.all(np.isfinite(out.numpy()))
        np.testing.assert_allclose(out.numpy().astype(F64), ref(z64), rtol=TOL[dtype]["rtol"], atol=1e-6)
        out.sum().backward()
        assert np.all(np.isfinite(x.grad.numpy()))


def test_sigmoid_gradcheck_in_far_tails(device):
    x = T(np.array([-30.0, -8.0, -0.3, 0.3, 8.0, 30.0]), grad=True, device=device)
    assert tb.gradcheck(lambda t: t.sigmoid(), x)


def extreme_tol(dtype):
    """The ordinary tolerance of the dtype: log_softmax subtracts the row maximum before the log-sum, so
    logits of size 1e4 lose nothing to rounding even in float32."""
    return TOL[dtype]


LOGITS = np.array([[1e4, -1e4, 0.0, 1e4 - 1.0], [-1e4, -1e4 + 2.0, -1e4 + 0.5, -1e4], [3.0, 1e4, -2.0, 1.0]])


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
def test_softmax_family_extreme_logits(dtype, device):
    z = LOGITS.astype(dtype)
    z64 = z.astype(F64)
    t = T(z, dtype, grad=True, device=device)
    for out, expected in [(t.logsumexp(-1), np_logsumexp(z64)), (t.softmax(-1), np_softmax(z64))]:
        assert np.all(np.isfinite(out.numpy()))
        check(out, expected, dtype)
    out = t.log_softmax(-1)
    assert out.dtype == np.dtype(dtype) and np.all(np.isfinite(out.numpy()))
    np.testing.assert_allclose(out.numpy().astype(F64), np_log_softmax(z64), **extreme_tol(dtype))
    # hand values: row 0 is 1e4 + log(1 + e^-1); row 1 is -1e4 + 2 + log(1 + e^-1.5 + 2 e^-2)
    np.testing.assert_allclose(np_logsumexp(z64)[:2], [1e4 + math.log1p(math.exp(-1)),
                                                      -1e4 + 2 + math.log(1 + math.exp(-1.5) + 2 * math.exp(-2))])
    t.logsumexp(-1).sum().backward()
    assert np.all(np.isfinite(t.grad.numpy()))
    np.testing.assert_allclose(t.grad.numpy().astype(F64), np_softmax(z64), **TOL[dtype])


@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_extreme_logits(reduction, dtype, device):
    z, target = LOGITS.astype(dtype), np.array([1, 0, 1])  # row 0 targets the -1e4 logit: loss ~ 2e4
    t = T(z, dtype, grad=True, device=device)
    out = t.cross_entropy(tb.tensor(target, device=device), reduction=reduction)
    assert out.dtype == np.dtype(dtype) and np.all(np.isfinite(out.numpy()))
    expected = np_cross_entropy(z.astype(F64), target, reduction)
    assert out.shape == expected.shape
    np.testing.assert_allclose(out.numpy().astype(F64), expected, **extreme_tol(dtype))
    out.sum().backward()
    g = t.grad.numpy().astype(F64)
    assert np.all(np.isfinite(g))
    expected = np_softmax(z.astype(F64)) - np.eye(4)[target]
    np.testing.assert_allclose(g, expected / 3 if reduction == "mean" else expected, **TOL[dtype])


# ---------------------------------------------------------------- 5. the shape-only ('meta') backend
def make(specs, device):
    """Tensors for specs: (shape, dtype) floats require grad; bool specs are random conditions."""
    out = []
    for i, (shape, dtype) in enumerate(specs):
        if np.dtype(dtype) == np.bool_:
            out.append(tb.tensor(rng(i).random(shape) < 0.5, device=device))
        elif np.dtype(dtype).kind in "iu":
            out.append(tb.tensor(rng(i).integers(0, 3, shape).astype(dtype), device=device))
        else:
            out.append(tb.tensor(positive(shape, i).astype(dtype), device=device, requires_grad=True))
    return out


def assert_meta_matches_cpu(fn, specs):
    cpu, meta = make(specs, "cpu"), make(specs, "meta")
    out_c, out_m = fn(*cpu), fn(*meta)
    assert out_m.device == "meta" and out_c.device == "cpu"
    assert out_m.shape == out_c.shape
    assert out_m.dtype == out_c.dtype
    assert out_m.requires_grad == out_c.requires_grad
    if out_c.requires_grad:
        out_c.sum().backward()
        out_m.sum().backward()
        for c, m in zip(cpu, meta, strict=True):
            if c.requires_grad:
                assert c.grad is not None and m.grad is not None
                assert m.grad.device == "meta"
                assert (m.grad.shape, m.grad.dtype) == (c.grad.shape, c.grad.dtype) == (c.shape, c.dtype)
    return out_c, out_m


S = (2, 3)
META_CASES = [
    ("neg", lambda x: -x, [(S, F32)]), ("exp", lambda x: x.exp(), [(S, F32)]),
    ("log", lambda x: x.log(), [(S, F64)]), ("sqrt", lambda x: x.sqrt(), [(S, F16)]),
    ("reciprocal", lambda x: x.reciprocal(), [(S, F32)]), ("sin", lambda x: x.sin(), [(S, F32)]),
    ("cos", lambda x: x.cos(), [(S, F32)]), ("erf", lambda x: x.erf(), [(S, F32)]),
    ("pow", lambda x: x ** 3, [(S, F32)]), ("pow_frac", lambda x: x ** -0.5, [(S, F64)]),
    ("cast_f64", lambda x: x.to(tb.float64), [(S, F32)]), ("cast_f16", lambda x: x.to("float16"), [(S, F32)]),
    ("cast_int", lambda x: x.to(tb.int64), [(S, F32)]),
    ("cast_int_to_float", lambda i: i.to(tb.float32), [(S, np.int64)]),
    ("add", lambda a, b: a + b, [(S, F32), (S, F32)]),
    ("add_bcast", lambda a, b: a + b, [((2, 1, 3), F32), ((4, 1), F32)]),
    ("mul", lambda a, b: a * b, [((3,), F32), (S, F32)]), ("mul_scalar", lambda a: 2.0 * a * 3, [(S, F32)]),
    ("div", lambda a, b: a / b, [(S, F64), ((), F64)]), ("rdiv", lambda a: 1.0 / a, [(S, F64)]),
    ("radd_rsub", lambda a: 1.0 + (2 - a), [(S, F32)]), ("rpow", lambda a: 2.0 ** a, [(S, F32)]),
    ("maximum", lambda a, b: a.maximum(b), [(S, F32), ((1, 3), F32)]),
    ("lt", lambda a, b: a < b, [(S, F32), ((3,), F32)]), ("le", lambda a: a <= 0.5, [(S, F32)]),
    ("gt", lambda a, b: a > b, [(S, F32), (S, F32)]), ("ge", lambda a, b: a >= b, [((2, 1), F32), ((3,), F32)]),
    ("eq", lambda a, b: a == b, [(S, np.int64), (S, np.int64)]), ("ne", lambda a: a != 1.0, [(S, F64)]),
    ("where", lambda c, a, b: tb.where(c, a, b), [(S, np.bool_), (S, F32), (S, F32)]),
    ("where_bcast", lambda c, a, b: tb.where(c, a, b), [((3,), np.bool_), ((2, 1), F32), ((), F32)]),
    ("where_scalar", lambda c, a: tb.where(c, a, 0.0), [((2, 1), np.bool_), (S, F32)]),
    ("sum", lambda x: x.sum(1), [((2, 3, 4), F32)]),
    ("sum_keep", lambda x: x.sum((0, 2), keepdims=True), [((2, 3, 4), F32)]),
    ("sum_all", lambda x: x.sum(), [((2, 3, 4), F16)]), ("max", lambda x: x.max(-1), [((2, 3, 4), F32)]),
    ("max_keep", lambda x: x.max((0, 1), keepdims=True), [((2, 3, 4), F32)]),
    ("reshape", lambda x: x.reshape(3, -1), [((2, 3, 4), F32)]),
    ("permute", lambda x: x.permute(2, 0, 1), [((2, 3, 4), F32)]),
    ("transpose", lambda x: x.transpose(0, 1), [((2, 3, 4), F32)]), ("T", lambda x: x.T, [((2, 3, 4), F32)]),
    ("mT", lambda x: x.mT, [((2, 3, 4), F32)]), ("expand", lambda x: x.expand(4, 2, 3), [((2, 1), F32)]),
    ("slice", lambda x: x[1:, :2, 3], [((2, 3, 4), F32)]), ("slice_step", lambda x: x[::-1, ::2], [((3, 5), F32)]),
    ("slice_none_ellipsis", lambda x: x[None, ..., 1:2, None], [((2, 3, 4), F32)]),
    ("pad", lambda x: x.pad(((1, 2), (0, 3))), [(S, F32)]),
    ("concat", lambda a, b: tb.concat([a, b, a], axis=1), [(S, F32), ((2, 5), F32)]),
    ("stack", lambda a, b: tb.stack([a, b], axis=-1), [(S, F32), (S, F32)]),
    ("gather_list", lambda x: x[[0, 0, 2]], [((3, 4), F32)]),
    ("gather_2d_index", lambda x: x[:, np.array([[0, 1], [3, 3]])], [((3, 4), F32)]),
    ("gather_multi", lambda x: x[[0, 1], :, [2, 2]], [((2, 3, 4), F32)]),
    ("gather_tensor", lambda x, i: x[i], [((5, 2), F32), ((2, 3), np.int64)]),
    ("matmul", lambda a, b: a @ b, [((2, 3), F32), ((3, 4), F32)]),
    ("matmul_batched", lambda a, b: a @ b, [((2, 2, 3), F32), ((2, 3, 4), F32)]),
    ("matmul_bcast", lambda a, b: a @ b, [((2, 1, 2, 3), F32), ((3, 3, 4), F32)]),
    ("matmul_BLK_KN", lambda a, b: a @ b, [((2, 5, 3), F64), ((3, 4), F64)]),
    ("matmul_vec", lambda a, b: a @ b, [((3,), F32), ((2, 3, 4), F32)]),
    ("matmul_mat_vec", lambda a, b: a @ b, [((2, 3), F32), ((3,), F32)]),
    ("matmul_vec_vec", lambda a, b: a @ b, [((3,), F32), ((3,), F32)]),
    ("softmax", lambda x: x.softmax(-1), [((2, 3, 4), F32)]),
    ("log_softmax", lambda x: x.log_softmax(0), [((2, 3), F32)]),
    ("logsumexp", lambda x: x.logsumexp(1), [((2, 3, 4), F32)]), ("var", lambda x: x.var(-1, correction=1), [(S, F32)]),
    ("mean", lambda x: x.mean((0, 1), keepdims=True), [((2, 3, 4), F32)]), ("min", lambda x: x.min(0), [(S, F32)]),
    ("gelu", lambda x: x.gelu(), [(S, F32)]), ("gelu_tanh", lambda x: x.gelu(approximate="tanh"), [(S, F16)]),
    ("sigmoid_tanh_silu", lambda x: x.sigmoid() + x.tanh() + x.silu(), [(S, F32)]),
    ("abs_relu", lambda x: x.abs() * x.relu(), [(S, F32)]), ("rsqrt", lambda x: x.rsqrt(), [(S, F32)]),
    ("minimum", lambda a, b: tb.minimum(a, b), [(S, F32), ((3,), F32)]),
    ("cross_entropy", lambda z: z.cross_entropy([[0, 2, 1], [3, 3, 0]]), [((2, 3, 4), F32)]),
    ("cross_entropy_none", lambda z: z.cross_entropy([1, 2], reduction="none"), [((2, 4), F32)]),
    ("layernorm_mlp", lambda x, w: ((x - x.mean(-1, keepdims=True)) * (x.var(-1, keepdims=True) + 1e-5).rsqrt()
                                    @ w).gelu(), [((2, 3, 4), F32), ((4, 5), F32)]),
]


@pytest.mark.parametrize("name,fn,specs", META_CASES, ids=[m[0] for m in META_CASES])
def test_meta_matches_cpu(name, fn, specs):
    assert_meta_matches_cpu(fn, specs)


def test_meta_expected_shapes_by_hand():
    """Shapes on meta against hand-written expectations (not only against the cpu backend)."""
    a = tb.randn(2, 1, 4, 3, generator=tb.Generator(0), device="meta", requires_grad=True)
    b = tb.randn(5, 3, 6, generator=tb.Generator(1), device="meta")
    out = a @ b
    assert (out.shape, out.dtype, out.device) == ((2, 5, 4, 6), tb.float32, "meta")
    s = (out.softmax(-1) * 2.0).sum((1, 3), keepdims=True)
    assert s.shape == (2, 1, 4, 1)
    s.sum().backward()
    assert a.grad.shape == (2, 1, 4, 3) and a.grad.device == "meta"
    assert b.grad is None


def test_meta_transfer_primitive():
    """x.to('meta') keeps shape, dtype and requires_grad; a gradient cannot flow back to the cpu leaf (it would
    need values), and that is reported as a RuntimeError naming 'meta'."""
    x = T(positive((2, 3), 57), F32, grad=True)
    m = x.to("meta")
    assert (m.shape, m.dtype, m.device, m.requires_grad) == ((2, 3), tb.float32, "meta", True)
    assert x.to("cpu") is x
    y = (m.exp() * 2.0).sum(0)
    assert (y.shape, y.dtype, y.device) == ((3,), tb.float32, "meta")
    with pytest.raises(RuntimeError, match="meta"):
        y.sum().backward()


def test_meta_has_no_values():
    m = tb.zeros(1, device="meta", requires_grad=True)
    for get in (lambda t: t.numpy(), lambda t: t.item(), lambda t: t.tolist(), lambda t: float(t)):
        with pytest.raises(RuntimeError, match="meta"):
            get(m)
    with pytest.raises(RuntimeError, match="meta"):
        (m * 2.0).sum().numpy()
    with pytest.raises(RuntimeError, match="meta"):
        tb.randn(2, 3, generator=tb.Generator(0), device="meta").numpy()


HYP_META_OPS = [
    ("add", operator.add), ("mul", operator.mul), ("div", operator.truediv), ("sub", operator.sub),
    ("maximum", tb.maximum), ("minimum", tb.minimum), ("lt", operator.lt), ("eq", operator.eq),
    ("where", lambda a, b: tb.where(a > b, a, b)), ("where_scalar", lambda a, b: tb.where(a > b, a, 0.0)),
]


@given(shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, min_side=1, max_side=4),
       which=st.sampled_from(HYP_META_OPS), dtype=st.sampled_from([F16, F32, F64]),
       grad_b=st.booleans())
def test_hyp_meta_broadcast(shapes, which, dtype, grad_b):
    name, op = which
    sa, sb = shapes.input_shapes
    cpu = [T(positive(sa, 1), dtype, grad=True), T(positive(sb, 2), dtype, grad=grad_b)]
    meta = [tb.tensor(np.zeros(sa, dtype), device="meta", requires_grad=True),
            tb.tensor(np.zeros(sb, dtype), device="meta", requires_grad=grad_b)]
    oc, om = op(*cpu), op(*meta)
    expected_shape = np.broadcast_shapes(sa, sb)
    assert oc.shape == om.shape == expected_shape
    assert oc.dtype == om.dtype == (np.dtype(np.bool_) if name in ("lt", "eq") else np.dtype(dtype))
    assert oc.requires_grad == om.requires_grad
    if oc.requires_grad:
        oc.sum().backward()
        om.sum().backward()
        for c, m in zip(cpu, meta, strict=True):
            if c.requires_grad:
                assert c.grad.shape == m.grad.shape == c.shape
                assert c.grad.dtype == m.grad.dtype == c.dtype


@given(sa=shape_and_axes(max_dims=4, max_side=4, limit=256), name=st.sampled_from(sorted(REDUCTIONS) + ["exp_sum"]),
       keepdims=st.booleans())
def test_hyp_meta_reductions(sa, name, keepdims):
    shape, axes = sa
    if name in ("mean", "var", "logsumexp") and axes == ():
        axes = None
    fn = (lambda t, ax, k: t.exp().sum(ax, keepdims=k)) if name == "exp_sum" else REDUCTIONS[name][0]
    out_c, out_m = assert_meta_matches_cpu(lambda t: fn(t, axes, keepdims), [(shape, F32)])
    assert out_m.shape == np.sum(np.zeros(shape), axis=axes, keepdims=keepdims).shape


# ---------------------------------------------------------------- 6. SiLU against its closed form
def test_silu_at_zero_one_and_minus_one():
    got = T([0.0, 1.0, -1.0]).silu().numpy()
    expected = [0.0, 1.0 / (1.0 + math.exp(-1.0)), -1.0 / (1.0 + math.e)]
    np.testing.assert_allclose(got, expected, rtol=1e-15, atol=0)
    np.testing.assert_allclose(got[1:], [0.7311, -0.2689], atol=5e-5)     # the curriculum's rounded values


def _silu_argmin_by_bisection() -> float:
    """The minimum solves silu'(z) = sigma(z) (1 + z (1 - sigma(z))) = 0, i.e. 1 + z (1 - sigma(z)) = 0."""
    f = lambda z: 1.0 + z * (1.0 - 1.0 / (1.0 + math.exp(-z)))  # noqa: E731
    lo, hi = -2.0, -1.0                                           # f(-2) < 0 < f(-1)
    assert f(lo) < 0 < f(hi)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return 0.5 * (lo + hi)


def test_silu_minimum_is_about_minus_0_278_near_minus_1_278():
    z = np.linspace(-4.0, 1.0, 500_001)                           # step 1e-5
    values = T(z).silu().numpy()
    i = int(np.argmin(values))
    z_star, s_star = z[i], values[i]
    assert 0 < i < len(z) - 1                                     # an interior minimum, not a grid edge
    assert abs(z_star - (-1.278)) < 5e-4 and abs(s_star - (-0.278)) < 5e-4
    z_ref = _silu_argmin_by_bisection()                           # -1.27846454...
    s_ref = z_ref / (1.0 + math.exp(-z_ref))                      # = 1 + z_ref at the minimum
    assert abs(z_star - z_ref) <= 1e-5 and abs(s_star - s_ref) < 1e-9
    assert abs(s_ref - (1.0 + z_ref)) < 1e-12
    zs = T([z_star, z_ref], grad=True)
    zs.silu().sum().backward()
    slope = zs.grad.numpy()
    assert abs(slope[0]) < 1e-5 and abs(slope[1]) < 1e-12
    # and the slope is not identically small: the derivative formula at 0 gives 1/2
    z0 = T([0.0, 2.0], grad=True)
    z0.silu().sum().backward()
    sig2 = 1.0 / (1.0 + math.exp(-2.0))
    np.testing.assert_allclose(z0.grad.numpy(), [0.5, sig2 * (1.0 + 2.0 * (1.0 - sig2))], rtol=1e-14)
