"""Lesson 03's checkers (lessons/exercises/03.py) reject typical wrong answers, each with the reason."""
import math

from conftest import failures, solution


def _summed_without_keepdims(grad, shape):
    """The right axes, but the stretched size-1 axes are summed away instead of kept."""
    lead = grad.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and grad.shape[lead + i] != 1)
    return grad.sum(axis=axes) if axes else grad


def test_unbroadcast_without_keepdims_is_rejected_with_the_reason():
    why = failures(3, solution(3, unbroadcast=_summed_without_keepdims))["unbroadcast"]
    assert "(1, 4)) has shape (4,), expected (1, 4)" in why and "keepdims=True" in why


def test_unbroadcast_over_the_wrong_axis_is_rejected_with_the_reason():
    always_rows = lambda grad, shape: grad.sum(axis=0, keepdims=True).reshape(*shape)      # noqa: E731
    why = failures(3, solution(3, unbroadcast=always_rows))["unbroadcast"]
    assert "grad of shape (3, 3), (3, 1)" in why and "summed over axes (0,)" in why and "stretched axes (1,)" in why


def test_unbroadcast_that_returns_numpy_is_rejected():
    as_numpy = lambda grad, shape: solution(3).unbroadcast(grad, shape).numpy()            # noqa: E731
    assert "must return a Tensor of shape (4,); got ndarray" in failures(3, solution(3, unbroadcast=as_numpy))[
        "unbroadcast"]


def _dw_transposed(x, w, b, dout):
    """dW = X^T dY: the gradient of W^T, not of W stored (out, in)."""
    rows_x, rows_dout = x.reshape(-1, x.shape[-1]), dout.reshape(-1, dout.shape[-1])
    return dout @ w, rows_x.mT @ rows_dout, rows_dout.sum(axis=0)


def _dw_per_batch(x, w, b, dout):
    """dW computed per batch element and never summed over the batch; db summed over the first axis only."""
    return dout @ w, dout.mT @ x, dout.sum(axis=0)


def test_linear_backward_with_dw_transposed_is_rejected_with_the_reason():
    why = failures(3, solution(3, linear_backward=_dw_transposed))["linear_backward"]
    assert "dw has shape (6, 4), expected (4, 6)" in why and "dW = dY^T X" in why


def test_linear_backward_that_forgets_the_batch_is_rejected_with_the_reason():
    why = failures(3, solution(3, linear_backward=_dw_per_batch))["linear_backward"]
    assert "x of shape (2, 5, 6)" in why and "dw has shape (2, 4, 6)" in why and "sum over the batch" in why


def test_linear_backward_with_db_over_one_axis_only_is_rejected():
    reference = solution(3).linear_backward

    def db_first_axis(x, w, b, dout):
        dx, dw, _ = reference(x, w, b, dout)
        return dx, dw, dout.sum(axis=0)
    why = failures(3, solution(3, linear_backward=db_first_axis))["linear_backward"]
    assert "db has shape (5, 4), expected (4,)" in why and "every axis but the last" in why


def test_matmul_flops_without_the_batch_is_rejected_with_the_reason():
    why = failures(3, solution(3, matmul_flops=lambda a, b: 2 * a[-2] * a[-1] * b[-1]))["matmul_flops"]
    assert "((8, 16, 32), (8, 32, 64)) = 65,536, the engine counts 524,288" in why and "batch axes are missing" in why


def test_matmul_flops_with_a_batch_alone_names_the_broadcast_batch():
    a_only = lambda a, b: 2 * math.prod(a[:-2]) * a[-2] * a[-1] * b[-1]                     # noqa: E731
    why = failures(3, solution(3, matmul_flops=a_only))["matmul_flops"]
    assert "((16, 32), (8, 32, 64)) = 65,536" in why and "batch (8,), the numpy broadcast of () and (8,)" in why


def test_matmul_flops_counting_2k_minus_1_is_rejected_with_the_reason():
    exact = lambda a, b: math.prod(a[:-2]) * a[-2] * b[-1] * (2 * a[-1] - 1)                # noqa: E731
    why = failures(3, solution(3, matmul_flops=exact))["matmul_flops"]
    assert "((2, 3), (3, 4)) = 40, the engine counts 48" in why and "counts 2K" in why


def test_matmul_flops_multiplying_the_batches_is_rejected_with_the_reason():
    product = lambda a, b: 2 * math.prod(a[:-2]) * math.prod(b[:-2]) * a[-2] * a[-1] * b[-1]   # noqa: E731
    why = failures(3, solution(3, matmul_flops=product))["matmul_flops"]
    assert "4,194,304" in why and "do not multiply" in why


def test_matmul_flops_counting_one_flop_per_multiply_add_is_rejected_with_the_reason():
    half = lambda a, b: solution(3).matmul_flops(a, b) // 2                                   # noqa: E731
    why = failures(3, solution(3, matmul_flops=half))["matmul_flops"]
    assert why == ("matmul_flops((2, 3), (3, 4)) = 24, the engine counts 48: that is exactly half: one FLOP per "
                   "multiply-add; the convention (and the engine) counts the multiply and the add, 2 FLOPs")


def test_matmul_flops_as_a_float_is_rejected():
    as_float = lambda a, b: float(solution(3).matmul_flops(a, b))                            # noqa: E731
    assert "must return an int; got float" in failures(3, solution(3, matmul_flops=as_float))["matmul_flops"]
