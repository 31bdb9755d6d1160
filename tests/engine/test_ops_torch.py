"""function.py's primitives and tensor.py's composite ops against PyTorch: forward and backward of every op match
torch to 1e-12 (float64).

Each case builds the same random float64 inputs in both engines, runs the op, backpropagates the same random
upstream gradient and compares the output and every input gradient norm-wise (`conftest.rel_err`). Inputs are
kept away from kinks (relu/abs/max at 0, ties) and singularities (log/sqrt/1/x near 0), so a mismatch means a
wrong formula, not a different convention at a measure-zero point.
"""
from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import rel_err

import tinygrad_block as tb

TOL = 1e-12


# ---------------------------------------------------------------- input makers: rng -> float64 array
# (np.asarray: for shape () numpy returns a Python float, which tb.tensor would make float32)
def normal(*shape, scale: float = 1.0):
    return lambda rng: np.asarray(rng.standard_normal(shape) * scale, dtype=np.float64)


def positive(*shape, lo: float = 0.5, hi: float = 2.0):
    """Away from 0 and from the singularities of log, sqrt, 1/x, x ** p."""
    return lambda rng: np.asarray(rng.uniform(lo, hi, shape), dtype=np.float64)


def away_from_zero(*shape):
    """Mixed signs, |x| >= 0.2: no kink of relu/abs/sign at 0 is ever hit."""
    return lambda rng: rng.choice([-1.0, 1.0], shape) * rng.uniform(0.2, 2.0, shape)


def distinct(*shape):
    """Mixed signs, every pair of values at least 0.1 apart: no ties for max/min."""
    def make(rng):
        n = math.prod(shape)
        return ((rng.permutation(n) - (n - 1) / 2) * 0.1 * rng.uniform(1.0, 1.2)).reshape(shape)
    return make


# fixed non-differentiable operands (conditions, targets, index arrays), shared by both engines
_fixed = np.random.default_rng(1234)
COND_34 = _fixed.random((3, 4)) > 0.5
COND_4 = np.array([True, False, False, True])
TARGET_6 = _fixed.integers(0, 5, 6)
TARGET_23 = _fixed.integers(0, 7, (2, 3))


@dataclass
class Case:
    id: str
    tb_fn: Callable
    torch_fn: Callable
    inputs: list


def _tb_where(c):
    return lambda a, b: tb.where(tb.tensor(c), a, b)


def _t_where(c):
    return lambda a, b: torch.where(torch.tensor(c), a, b)


def _tb_pad(widths):
    return lambda x: x.pad(widths)


def _t_pad(widths):
    flat = tuple(w for pair in reversed(widths) for w in pair)  # F.pad lists the last axis first
    return lambda x: F.pad(x, flat)


CASES = [
    # ---- unary primitives ----
    Case("neg", lambda x: -x, lambda x: -x, [normal(3, 4)]),
    Case("exp", lambda x: x.exp(), torch.exp, [normal(3, 4)]),
    Case("log", lambda x: x.log(), torch.log, [positive(3, 4)]),
    Case("sqrt", lambda x: x.sqrt(), torch.sqrt, [positive(3, 4)]),
    Case("reciprocal", lambda x: x.reciprocal(), torch.reciprocal, [away_from_zero(3, 4)]),
    Case("one_over_x", lambda x: 1.0 / x, lambda x: 1.0 / x, [away_from_zero(3, 4)]),
    Case("sin", lambda x: x.sin(), torch.sin, [normal(3, 4, scale=3.0)]),
    Case("cos", lambda x: x.cos(), torch.cos, [normal(3, 4, scale=3.0)]),
    Case("erf", lambda x: x.erf(), torch.erf, [normal(3, 4)]),
    Case("pow_2", lambda x: x ** 2, lambda x: x ** 2, [normal(3, 4)]),
    Case("pow_3_negative_base", lambda x: x ** 3, lambda x: x ** 3, [away_from_zero(3, 4)]),
    Case("pow_half", lambda x: x ** 0.5, lambda x: x ** 0.5, [positive(3, 4)]),
    Case("pow_neg_1_5", lambda x: x ** -1.5, lambda x: x ** -1.5, [positive(3, 4)]),
    Case("pow_tensor_tensor", lambda x, y: x ** y, lambda x, y: x ** y, [positive(3, 4), normal(3, 4)]),
    Case("pow_tensor_tensor_broadcast", lambda x, y: x ** y, lambda x, y: x ** y, [positive(3, 4), normal(4)]),
    Case("pow_number_tensor", lambda x: 2.5 ** x, lambda x: 2.5 ** x, [normal(3, 4)]),
    Case("cast_f64_f32_f64", lambda x: x.to(tb.float32).to(tb.float64),
         lambda x: x.to(torch.float32).to(torch.float64), [normal(3, 4)]),
    # float32 * and + are correctly rounded in both engines (float32 exp, say, is not: it differs by ulps)
    Case("cast_f32_compute", lambda x: (x.to(tb.float32) * 3.0 + 1.0).to(tb.float64),
         lambda x: (x.to(torch.float32) * 3.0 + 1.0).to(torch.float64), [normal(3, 4)]),
    # ---- binary, with broadcasting ----
    Case("add", lambda a, b: a + b, lambda a, b: a + b, [normal(3, 4), normal(3, 4)]),
    Case("add_broadcast", lambda a, b: a + b, lambda a, b: a + b, [normal(2, 1, 4), normal(3, 1)]),
    Case("add_0d_requires_grad", lambda a, b: a + b, lambda a, b: a + b, [normal(3, 4), normal()]),
    Case("add_number", lambda a: 1.5 + a + 2.0, lambda a: 1.5 + a + 2.0, [normal(3, 4)]),
    Case("sub", lambda a, b: a - b, lambda a, b: a - b, [normal(3, 4), normal(3, 4)]),
    Case("sub_broadcast", lambda a, b: a - b, lambda a, b: a - b, [normal(4), normal(3, 1)]),
    Case("rsub_number", lambda a: 2.0 - a, lambda a: 2.0 - a, [normal(3, 4)]),
    Case("mul", lambda a, b: a * b, lambda a, b: a * b, [normal(3, 4), normal(3, 4)]),
    Case("mul_broadcast", lambda a, b: a * b, lambda a, b: a * b, [normal(2, 3, 1), normal(1, 4)]),
    Case("mul_self", lambda a: a * a, lambda a: a * a, [normal(3, 4)]),
    Case("mul_number", lambda a: a * -0.75, lambda a: a * -0.75, [normal(3, 4)]),
    Case("div", lambda a, b: a / b, lambda a, b: a / b, [normal(3, 4), away_from_zero(3, 4)]),
    Case("div_broadcast", lambda a, b: a / b, lambda a, b: a / b, [normal(2, 3, 4), away_from_zero(4)]),
    Case("rdiv_number", lambda a: 3.0 / a, lambda a: 3.0 / a, [away_from_zero(3, 4)]),
    Case("maximum", lambda a, b: tb.maximum(a, b), torch.maximum, [normal(3, 4), normal(3, 4)]),
    Case("maximum_broadcast", lambda a, b: a.maximum(b), torch.maximum, [normal(3, 4), normal(4)]),
    Case("maximum_number", lambda a: a.maximum(0.25), lambda a: torch.clamp(a, min=0.25), [away_from_zero(3, 4)]),
    Case("minimum", lambda a, b: tb.minimum(a, b), torch.minimum, [normal(3, 4), normal(3, 4)]),
    Case("minimum_broadcast", lambda a, b: a.minimum(b), torch.minimum, [normal(2, 1, 4), normal(3, 1)]),
    Case("where", _tb_where(COND_34), _t_where(COND_34), [normal(3, 4), normal(3, 4)]),
    Case("where_broadcast", _tb_where(COND_4), _t_where(COND_4), [normal(3, 4), normal(3, 1)]),
    Case("where_number", lambda a: tb.where(tb.tensor(COND_34), a, 0.5),
         lambda a: torch.where(torch.tensor(COND_34), a, torch.tensor(0.5, dtype=torch.float64)), [normal(3, 4)]),
    # ---- reductions ----
    Case("sum_all", lambda x: x.sum(), torch.sum, [normal(2, 3, 4)]),
    Case("sum_axis1", lambda x: x.sum(1), lambda x: x.sum(1), [normal(2, 3, 4)]),
    Case("sum_axes02_keepdims", lambda x: x.sum((0, 2), keepdims=True), lambda x: x.sum((0, 2), keepdim=True),
         [normal(2, 3, 4)]),
    Case("sum_neg_axis_torch_names", lambda x: x.sum(dim=-1, keepdim=True), lambda x: x.sum(-1, keepdim=True),
         [normal(2, 3, 4)]),
    Case("max_all", lambda x: x.max(), torch.amax, [distinct(2, 3, 4)]),
    Case("max_axis1", lambda x: x.max(1), lambda x: torch.amax(x, 1), [distinct(2, 3, 4)]),
    Case("max_axes02_keepdims", lambda x: x.max((0, 2), keepdims=True),
         lambda x: torch.amax(x, (0, 2), keepdim=True), [distinct(2, 3, 4)]),
    Case("min_all", lambda x: x.min(), torch.amin, [distinct(2, 3, 4)]),
    Case("min_axis_neg1_keepdims", lambda x: x.min(-1, keepdims=True), lambda x: torch.amin(x, -1, keepdim=True),
         [distinct(2, 3, 4)]),
    Case("mean_all", lambda x: x.mean(), torch.mean, [normal(2, 3, 4)]),
    Case("mean_axes01_keepdims", lambda x: x.mean((0, 1), keepdims=True),
         lambda x: x.mean((0, 1), keepdim=True), [normal(2, 3, 4)]),
    Case("var_all_correction0", lambda x: x.var(), lambda x: torch.var(x, correction=0), [normal(2, 3, 4)]),
    Case("var_axis1_correction0", lambda x: x.var(1, correction=0),
         lambda x: torch.var(x, 1, correction=0), [normal(2, 3, 4)]),
    Case("var_axis_neg1_correction1_keepdims", lambda x: x.var(-1, keepdims=True, correction=1),
         lambda x: torch.var(x, -1, correction=1, keepdim=True), [normal(2, 3, 4)]),
    Case("var_axes02_correction1", lambda x: x.var((0, 2), correction=1),
         lambda x: torch.var(x, (0, 2), correction=1), [normal(2, 3, 4)]),
    Case("logsumexp", lambda x: x.logsumexp(-1), lambda x: torch.logsumexp(x, -1), [normal(2, 3, 4, scale=3.0)]),
    Case("logsumexp_axis0_keepdims", lambda x: x.logsumexp(0, keepdims=True),
         lambda x: torch.logsumexp(x, 0, keepdim=True), [normal(2, 3, 4, scale=3.0)]),
    Case("logsumexp_large", lambda x: x.logsumexp(1), lambda x: torch.logsumexp(x, 1), [normal(3, 5, scale=300.0)]),
    Case("softmax", lambda x: x.softmax(-1), lambda x: torch.softmax(x, -1), [normal(2, 3, 5, scale=3.0)]),
    Case("softmax_axis1", lambda x: x.softmax(1), lambda x: torch.softmax(x, 1), [normal(2, 3, 5, scale=3.0)]),
    Case("log_softmax", lambda x: x.log_softmax(-1), lambda x: torch.log_softmax(x, -1),
         [normal(2, 3, 5, scale=3.0)]),
    Case("log_softmax_axis0", lambda x: x.log_softmax(0), lambda x: torch.log_softmax(x, 0),
         [normal(4, 5, scale=3.0)]),
    *[Case(f"cross_entropy_{r}", lambda x, r=r: x.cross_entropy(tb.tensor(TARGET_6), reduction=r),
           lambda x, r=r: F.cross_entropy(x, torch.tensor(TARGET_6), reduction=r), [normal(6, 5, scale=2.0)])
      for r in ("mean", "sum", "none")],
    *[Case(f"cross_entropy_3d_{r}", lambda x, r=r: x.cross_entropy(tb.tensor(TARGET_23), reduction=r),
           lambda x, r=r: F.cross_entropy(x.permute(0, 2, 1), torch.tensor(TARGET_23), reduction=r),
           [normal(2, 3, 7, scale=2.0)]) for r in ("mean", "sum", "none")],
    # ---- activations and other composites ----
    Case("relu", lambda x: x.relu(), torch.relu, [away_from_zero(3, 4)]),
    Case("sigmoid", lambda x: x.sigmoid(), torch.sigmoid, [normal(3, 4, scale=4.0)]),
    Case("sigmoid_large", lambda x: x.sigmoid(), torch.sigmoid, [normal(3, 4, scale=30.0)]),
    Case("tanh", lambda x: x.tanh(), torch.tanh, [normal(3, 4, scale=2.0)]),
    Case("silu", lambda x: x.silu(), F.silu, [normal(3, 4, scale=3.0)]),
    Case("gelu_none", lambda x: x.gelu(), lambda x: F.gelu(x, approximate="none"), [normal(3, 4, scale=2.0)]),
    Case("gelu_tanh", lambda x: x.gelu("tanh"), lambda x: F.gelu(x, approximate="tanh"), [normal(3, 4, scale=2.0)]),
    Case("abs", lambda x: x.abs(), torch.abs, [away_from_zero(3, 4)]),
    Case("rsqrt", lambda x: x.rsqrt(), torch.rsqrt, [positive(3, 4)]),
    # ---- movement ----
    Case("reshape", lambda x: x.reshape(4, -1), lambda x: x.reshape(4, -1), [normal(2, 3, 4)]),
    Case("reshape_tuple", lambda x: x.reshape((6, 2, 2)), lambda x: x.reshape(6, 2, 2), [normal(2, 3, 4)]),
    Case("permute", lambda x: x.permute(2, 0, 1), lambda x: x.permute(2, 0, 1), [normal(2, 3, 4)]),
    Case("permute_negative", lambda x: x.permute((-1, 0, -2)), lambda x: x.permute(-1, 0, -2), [normal(2, 3, 4)]),
    Case("transpose", lambda x: x.transpose(0, 2), lambda x: x.transpose(0, 2), [normal(2, 3, 4)]),
    Case("T", lambda x: x.T, lambda x: x.permute(2, 1, 0), [normal(2, 3, 4)]),
    Case("mT", lambda x: x.mT, lambda x: x.mT, [normal(2, 3, 4)]),
    Case("expand", lambda x: x.expand(2, 3, 4), lambda x: x.expand(2, 3, 4), [normal(3, 1)]),
    Case("expand_new_axes_only", lambda x: x.expand(5, 2, 3), lambda x: x.expand(5, 2, 3), [normal(2, 3)]),
    Case("squeeze_unsqueeze", lambda x: x.squeeze(1).unsqueeze(0), lambda x: x.squeeze(1).unsqueeze(0),
         [normal(3, 1, 4)]),
    Case("slice_basic", lambda x: x[1:, :2], lambda x: x[1:, :2], [normal(4, 5)]),
    Case("slice_int_and_none", lambda x: x[2, None, 1:4], lambda x: x[2, None, 1:4], [normal(4, 5)]),
    Case("slice_negative_int", lambda x: x[-1], lambda x: x[-1], [normal(4, 5)]),
    Case("slice_ellipsis", lambda x: x[..., 1], lambda x: x[..., 1], [normal(2, 3, 4)]),
    Case("slice_steps", lambda x: x[::2, 1::3], lambda x: x[::2, 1::3], [normal(5, 7)]),
    Case("slice_steps_bounds", lambda x: x[1:6:2, 0:7:3], lambda x: x[1:6:2, 0:7:3], [normal(7, 8)]),
    Case("slice_negative_step", lambda x: x[::-2], lambda x: torch.flip(x, [0])[::2], [normal(6, 3)]),
    Case("index_repeated", lambda x: x[[0, 2, 0, 1, 0]], lambda x: x[[0, 2, 0, 1, 0]], [normal(3, 4)]),
    Case("index_repeated_axis1", lambda x: x[:, [3, 3, 1, -1]], lambda x: x[:, [3, 3, 1, -1]], [normal(3, 4)]),
    Case("index_tensor_2d", lambda x: x[tb.tensor([[0, 1], [1, 1]])], lambda x: x[torch.tensor([[0, 1], [1, 1]])],
         [normal(3, 4)]),
    Case("index_two_arrays", lambda x: x[[0, 2, 0], [1, 1, 3]], lambda x: x[[0, 2, 0], [1, 1, 3]], [normal(3, 4)]),
    Case("index_two_arrays_broadcast", lambda x: x[[[0], [2]], [1, 1, 3]],
         lambda x: x[torch.tensor([[0], [2]]), torch.tensor([1, 1, 3])], [normal(3, 4)]),
    Case("index_nonadjacent_arrays", lambda x: x[[0, 1, 1], :, [2, 2, 0]], lambda x: x[[0, 1, 1], :, [2, 2, 0]],
         [normal(2, 3, 4)]),
    # numpy (which tb follows) counts the int as an index array, so the two indexed axes are not adjacent and
    # the index axis goes first; torch applies the int first. Same elements, transposed.
    Case("index_int_and_array", lambda x: x[1, :, [0, 0, 3]], lambda x: x[1][:, [0, 0, 3]].mT, [normal(2, 3, 4)]),
    Case("index_int_next_to_array", lambda x: x[1, [0, 0, 2]], lambda x: x[1, [0, 0, 2]], [normal(2, 3, 4)]),
    Case("index_array_and_slice", lambda x: x[[2, 0, 2], 1:3], lambda x: x[[2, 0, 2], 1:3], [normal(3, 4)]),
    Case("pad_2d", _tb_pad(((1, 2), (0, 3))), _t_pad(((1, 2), (0, 3))), [normal(3, 4)]),
    Case("pad_3d", _tb_pad(((0, 0), (2, 1), (1, 0))), _t_pad(((0, 0), (2, 1), (1, 0))), [normal(2, 3, 4)]),
    Case("concat_axis0", lambda a, b: tb.concat([a, b]), lambda a, b: torch.cat([a, b]), [normal(2, 3), normal(4, 3)]),
    Case("concat_axis_neg1_three", lambda a, b, c: tb.concat([a, b, c], axis=-1),
         lambda a, b, c: torch.cat([a, b, c], -1), [normal(2, 1), normal(2, 3), normal(2, 2)]),
    Case("cat_dim1_same_tensor", lambda a: tb.cat([a, a], dim=1), lambda a: torch.cat([a, a], 1), [normal(2, 3)]),
    Case("stack_axis0", lambda a, b: tb.stack([a, b]), lambda a, b: torch.stack([a, b]), [normal(2, 3), normal(2, 3)]),
    Case("stack_axis_neg1", lambda a, b, c: tb.stack([a, b, c], axis=-1), lambda a, b, c: torch.stack([a, b, c], -1),
         [normal(2, 3), normal(2, 3), normal(2, 3)]),
    # ---- matmul ----
    Case("matmul_2d", lambda a, b: a @ b, lambda a, b: a @ b, [normal(3, 4), normal(4, 5)]),
    Case("matmul_batched", lambda a, b: a @ b, lambda a, b: a @ b, [normal(2, 3, 4), normal(2, 4, 5)]),
    Case("matmul_batched_broadcast", lambda a, b: a @ b, lambda a, b: a @ b, [normal(2, 1, 3, 4), normal(5, 4, 6)]),
    Case("matmul_batched_by_2d", lambda a, b: a @ b, lambda a, b: a @ b, [normal(2, 3, 4), normal(4, 5)]),
    Case("matmul_2d_by_batched", lambda a, b: a @ b, lambda a, b: a @ b, [normal(3, 4), normal(2, 4, 5)]),
    Case("matmul_1d_1d", lambda a, b: a @ b, lambda a, b: a @ b, [normal(4), normal(4)]),
    Case("matmul_1d_2d", lambda a, b: a @ b, lambda a, b: a @ b, [normal(4), normal(4, 5)]),
    Case("matmul_2d_1d", lambda a, b: a.matmul(b), lambda a, b: a @ b, [normal(3, 4), normal(4)]),
    Case("matmul_1d_batched", lambda a, b: a @ b, lambda a, b: a @ b, [normal(4), normal(2, 4, 5)]),
    Case("matmul_batched_1d", lambda a, b: a @ b, lambda a, b: a @ b, [normal(2, 3, 4), normal(4)]),
]


def _grad_np(rng, shape):
    return np.asarray(rng.standard_normal(shape), dtype=np.float64)


def _compare(case_id, tb_fn, torch_fn, arrays, rng):
    xs = [tb.tensor(a, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, out_t = tb_fn(*xs), torch_fn(*ts)
    assert out.dtype == tb.float64, case_id
    assert out.shape == tuple(out_t.shape), (out.shape, tuple(out_t.shape))
    err = rel_err(out.numpy(), out_t.detach().numpy())
    assert err <= TOL, f"{case_id}: forward rel err {err:.3g}"
    g = _grad_np(rng, out.shape)
    out.backward(tb.tensor(g))
    out_t.backward(torch.tensor(g))
    for i, (x, t) in enumerate(zip(xs, ts, strict=True)):
        assert x.grad is not None, f"{case_id}: input {i} got no gradient"
        assert x.grad.shape == x.shape and x.grad.dtype == tb.float64, (i, x.grad.shape, x.grad.dtype)
        err = rel_err(x.grad.numpy(), t.grad.numpy())
        assert err <= TOL, f"{case_id}: gradient of input {i} rel err {err:.3g}"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op_matches_torch(case):
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    arrays = [make(rng) for make in case.inputs]
    _compare(case.id, case.tb_fn, case.torch_fn, arrays, rng)


def test_case_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))


def test_inputs_avoid_kinks_and_ties():
    """The input makers do what the comparisons rely on."""
    rng = np.random.default_rng(0)
    assert np.abs(away_from_zero(50, 50)(rng)).min() >= 0.2
    assert positive(50, 50)(rng).min() >= 0.5
    d = np.sort(distinct(6, 7)(rng).ravel())
    assert np.diff(d).min() >= 0.1 - 1e-12 and d.min() < 0 < d.max()


# ---------------------------------------------------------------- composite chains
def _mlp(lib, x, w1, b1, w2, b2, target):
    if lib == "tb":
        h = (x @ w1 + b1).gelu("tanh")
        return (h @ w2 + b2).cross_entropy(tb.tensor(target))
    h = F.gelu(x @ w1 + b1, approximate="tanh")
    return F.cross_entropy(h @ w2 + b2, torch.tensor(target))


def test_mlp_cross_entropy_matches_torch():
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(s) for s in ((8, 5), (5, 16), (16,), (16, 4), (4,))]
    target = rng.integers(0, 4, 8)
    _compare("mlp", lambda *a: _mlp("tb", *a, target), lambda *a: _mlp("torch", *a, target), arrays, rng)


def _block(lib, x, g, w_qkv, w_o):
    """LayerNorm (no bias) -> single-head causal attention -> residual, then the mean of squares."""
    if lib == "tb":
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        h = (x - mu) * (var + 1e-5).rsqrt() * g
        qkv = h @ w_qkv
        q, k, v = qkv[:, :4], qkv[:, 4:8], qkv[:, 8:]
        scores = q @ k.T * (1 / math.sqrt(4))
        mask = tb.tensor(np.tril(np.ones((5, 5), dtype=bool)))
        att = tb.where(mask, scores, -1e9).softmax(-1)
        y = x + (att @ v) @ w_o
        return (y * y).mean()
    mu, var = x.mean(-1, keepdim=True), x.var(-1, keepdim=True, correction=0)
    h = (x - mu) * torch.rsqrt(var + 1e-5) * g
    qkv = h @ w_qkv
    q, k, v = qkv[:, :4], qkv[:, 4:8], qkv[:, 8:]
    scores = q @ k.T * (1 / math.sqrt(4))
    mask = torch.tensor(np.tril(np.ones((5, 5), dtype=bool)))
    att = torch.softmax(torch.where(mask, scores, torch.tensor(-1e9, dtype=torch.float64)), -1)
    y = x + (att @ v) @ w_o
    return (y * y).mean()


def test_attention_block_matches_torch():
    """Tensors used many times (x, h, qkv) accumulate their gradients across every use, as in torch."""
    rng = np.random.default_rng(11)
    arrays = [rng.standard_normal(s) for s in ((5, 6), (6,), (6, 12), (4, 6))]
    _compare("block", lambda *a: _block("tb", *a), lambda *a: _block("torch", *a), arrays, rng)


def test_mlp_training_steps_match_torch():
    """Three SGD steps: parameters, losses and gradients stay within 1e-12 of torch's after each step."""
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s) * 0.5 for s in ((5, 16), (16,), (16, 4), (4,))]
    x, target = rng.standard_normal((8, 5)), rng.integers(0, 4, 8)
    params_tb = [tb.tensor(a, requires_grad=True) for a in arrays]
    params_t = [torch.tensor(a, requires_grad=True) for a in arrays]
    for _ in range(3):
        loss = _mlp("tb", tb.tensor(x), *params_tb, target)
        loss_t = _mlp("torch", torch.tensor(x), *params_t, target)
        assert rel_err(loss.item(), loss_t.item()) <= TOL
        loss.backward()
        loss_t.backward()
        for p, pt in zip(params_tb, params_t, strict=True):
            assert rel_err(p.grad.numpy(), pt.grad.numpy()) <= TOL
        params_tb = [tb.tensor(p.numpy() - 0.1 * p.grad.numpy(), requires_grad=True) for p in params_tb]
        with torch.no_grad():
            params_t = [(pt - 0.1 * pt.grad).requires_grad_() for pt in params_t]
        for p, pt in zip(params_tb, params_t, strict=True):
            assert rel_err(p.numpy(), pt.detach().numpy()) <= TOL
