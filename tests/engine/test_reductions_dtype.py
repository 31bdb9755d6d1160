"""The dtypes of reductions and the ops that have no meaning on bools: a sum of bools or ints is int64 (as numpy and
PyTorch), on every device, on the shape-only backend and in a compiled replay; mean is for floats only; min of ints
and of bools is exact at the ends of the range; -mask is refused by name.

Oracles: numpy on the same values (np.sum, np.min, np.max and their result dtypes), PyTorch's dtypes, and
Python's own integers for the sums past int32's range."""
import operator

import numpy as np
import pytest
import torch
from conftest import msg

import tinygrad_block as tb
from tinygrad_block.counting import count_flops

I32, I64 = np.iinfo(np.int32), np.iinfo(np.int64)
AXES = [None, 0, 1, (0, 1)]


def mask(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((3, 5)) < 0.4                     # (3, 5) bools, some rows mixed


# ---------------------------------------------------------------- sums
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
def test_a_sum_of_bools_counts_them_in_int64(axis, keepdims, device):
    m = mask(1)
    got = tb.tensor(m, device=device).sum(axis, keepdims=keepdims)
    want = np.sum(m, axis=axis, keepdims=keepdims)
    assert got.dtype == want.dtype == np.int64 == torch.ones(2, dtype=torch.bool).sum().numpy().dtype
    np.testing.assert_array_equal(got.numpy(), want)


def test_accuracy_is_the_count_of_matches_over_n(device):
    pred, y = tb.tensor([1, 2, 3, 4], device=device), tb.tensor([1, 0, 3, 4], device=device)
    assert (pred == y).sum().item() == 3                                      # was True
    assert (pred == y).to(tb.float32).mean().item() == 0.75


@pytest.mark.parametrize("dtype", [tb.int32, tb.int64])
def test_int_sums_accumulate_in_int64_and_never_wrap(dtype, device):
    big = I32.max // 2 + 1                                                    # 2**30: two of them pass int32
    x = tb.tensor([[big, big, 7], [-big, -big, -big]], dtype=dtype, device=device)
    assert x.sum().dtype == np.sum(np.zeros(1, dtype)).dtype == tb.int64
    assert x.sum().item() == big + big + 7 - 3 * big                          # Python ints: exact
    np.testing.assert_array_equal(x.sum(axis=1).numpy(), [2 * big + 7, -3 * big])
    assert x.sum(axis=1).tolist() == [2 * big + 7, -3 * big]


def test_float_sums_keep_their_dtype_and_their_gradient(device):
    for dtype in (tb.float16, tb.float32, tb.float64):
        assert tb.ones(2, 3, dtype=dtype, device=device).sum(axis=0).dtype == dtype
    x = tb.tensor(np.arange(6.0).reshape(2, 3), dtype=tb.float64, device=device, requires_grad=True)
    (x.sum(axis=1) * tb.tensor([2.0, 3.0], dtype=tb.float64, device=device)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[2, 2, 2], [3, 3, 3]])     # d/dx of sum_i w_i sum_j x_ij


@pytest.mark.parametrize("dtype", [tb.bool_, tb.int32, tb.int64, tb.float16, tb.float32])
def test_the_shape_only_backend_computes_numpys_dtypes_and_the_same_flops(dtype):
    x = np.ones((4, 6), dtype)
    for axis in AXES:
        results = {}
        for device in ("cpu", "meta"):
            with count_flops() as c:
                out = tb.tensor(x, device=device).sum(axis, keepdims=True)
                top = tb.tensor(x, device=device).max(axis)
            results[device] = (out.shape, out.dtype, top.shape, top.dtype, c.total())
        want = np.sum(x, axis=axis, keepdims=True)
        assert results["meta"] == results["cpu"]
        assert results["meta"][:2] == (want.shape, want.dtype)
        assert results["meta"][3] == np.max(x, axis=axis).dtype
        assert results["meta"][4] == 2 * (x.size - want.size)                   # n - 1 per output, twice


# ---------------------------------------------------------------- mean, max, min
@pytest.mark.parametrize("dtype", [tb.bool_, tb.int32, tb.int64])
def test_mean_of_bools_or_ints_is_refused_naming_the_op_and_dtype(dtype, device):
    x = tb.tensor(np.ones((2, 3), dtype), device=device)
    with pytest.raises(TypeError, match=msg("mean", str(dtype), "(2, 3)", ".to(tb.float32)")):
        x.mean()


@pytest.mark.parametrize("dtype", [tb.int32, tb.int64])
@pytest.mark.parametrize("axis", AXES, ids=str)
def test_min_and_max_of_ints_are_exact_at_the_ends_of_the_range(axis, dtype, device):
    info = np.iinfo(dtype)
    x = np.array([[info.min, 0, 5, -3, info.max], [info.max, info.max, 1, info.min + 1, -1],
                  [2, 3, 4, 5, 6]], dtype)
    t = tb.tensor(x, device=device)
    for got, want in ((t.min(axis), np.min(x, axis=axis)), (t.max(axis), np.max(x, axis=axis))):
        assert got.dtype == want.dtype == dtype
        np.testing.assert_array_equal(got.numpy(), want)                    # -x would wrap at info.min


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
def test_min_and_max_of_bools_are_all_and_any(axis, keepdims, device):
    m = mask(2)
    m[0] = True                                                               # a row of all True
    t = tb.tensor(m, device=device)
    for got, want in ((t.min(axis, keepdims=keepdims), np.all(m, axis=axis, keepdims=keepdims)),
                      (t.max(axis, keepdims=keepdims), np.any(m, axis=axis, keepdims=keepdims))):
        assert got.dtype == tb.bool_
        np.testing.assert_array_equal(got.numpy(), want)


def test_elementwise_minimum_of_ints_and_bools_is_exact(device):
    for dtype in (tb.int32, tb.int64):
        info = np.iinfo(dtype)
        a, b = np.array([info.min, 0, info.max, -5], dtype), np.array([0, info.min, 3, info.max], dtype)
        got = tb.minimum(tb.tensor(a, device=device), tb.tensor(b, device=device))
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.numpy(), np.minimum(a, b))          # [min, min, 3, -5]
    m, n = mask(4), mask(5)
    got = tb.minimum(tb.tensor(m, device=device), tb.tensor(n, device=device))
    assert got.dtype == tb.bool_
    np.testing.assert_array_equal(got.numpy(), m & n)


def test_negating_a_bool_tensor_is_refused_by_name(device):
    m = tb.tensor([True, False], device=device)
    with pytest.raises(TypeError, match=msg("neg", "`-` operator", "bool tensor", "not supported", "mask == False")):
        operator.neg(m)
    np.testing.assert_array_equal((m == False).numpy(), [False, True])      # noqa: E712 (the way the error names)
    assert (-tb.tensor([1, -2], dtype=tb.int32, device=device)).tolist() == [-1, 2]


def test_negating_a_bool_tensor_on_meta_is_refused_too():
    with pytest.raises(TypeError, match=msg("neg", "bool tensor", "not supported")):
        operator.neg(tb.zeros(3, dtype=tb.bool_, device="meta"))


# ---------------------------------------------------------------- compiled replays
@pytest.mark.parametrize("fuse", [False, True], ids=["unfused", "fused"])
def test_a_compiled_replay_sums_bools_and_ints_as_eager_does(fuse):
    """Eager, the first replay and a later one: the same int64 counts and sums, keepdims or not, 0-d or not."""
    def counts(pred, y, big):
        hit = pred == y                                                       # (4, 6) bools
        return hit.sum(), hit.sum(axis=1), big.sum(axis=0, keepdims=True), (big * 2).sum(axis=1)

    compiled = tb.jit(counts, fuse=fuse)
    r = np.random.default_rng(3)
    for _ in range(5):
        pred, y = r.integers(0, 3, (4, 6)), r.integers(0, 3, (4, 6))
        big = r.integers(2**29, 2**30, (4, 6)).astype(np.int32)
        args = tb.tensor(pred), tb.tensor(y), tb.tensor(big, dtype=tb.int32)
        got, eager = compiled(*args), counts(*args)
        want = (np.sum(pred == y), np.sum(pred == y, axis=1), np.sum(big, axis=0, keepdims=True),
                np.sum((big * 2).astype(np.int32), axis=1))                  # big * 2 stays int32, as numpy's
        for g, e, w in zip(got, eager, want, strict=True):
            assert g.dtype == e.dtype == w.dtype == np.int64
            np.testing.assert_array_equal(g.numpy(), w)
            np.testing.assert_array_equal(e.numpy(), w)
    assert compiled.replays == 3


@pytest.mark.parametrize("shape", [(), (0, 3), (2, 3, 5)])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int64", "bool"])
def test_nbytes_is_numpys_count_of_the_arrays_bytes(shape, dtype):
    from tinygrad_block.dtypes import nbytes
    assert nbytes(shape, dtype) == np.zeros(shape, dtype).nbytes == nbytes(shape, np.dtype(dtype))
