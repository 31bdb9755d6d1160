"""Lesson 05's checkers (lessons/exercises/05.py) reject typical wrong answers, each with the reason."""
import numpy as np

import tinygrad_block as tb
from conftest import failures, solution


# ---------------------------------------------------------------- masked_batchnorm
def _batchnorm_over_every_position(x, mask, eps=1e-5):
    """The plain BatchNorm of the lesson: statistics over batch and positions, padding included."""
    mean = x.mean(axis=(0, 1), keepdims=True)
    xc = x - mean
    return xc * ((xc * xc).mean(axis=(0, 1), keepdims=True) + eps).rsqrt() * mask.unsqueeze(-1)


def test_batchnorm_that_counts_the_padding_is_rejected_with_the_reason():
    why = failures(5, solution(5, masked_batchnorm=_batchnorm_over_every_position))["masked_batchnorm"]
    assert "still count the padding" in why and "sum(mask)" in why


def test_batchnorm_that_leaves_the_padding_nonzero_is_rejected():
    def unmasked_output(x, mask, eps=1e-5):
        m = mask.unsqueeze(-1)
        mean = (x * m).sum(axis=(0, 1), keepdims=True) / m.sum()
        xc = x - mean
        return xc * (((xc * m) ** 2).sum(axis=(0, 1), keepdims=True) / m.sum() + eps).rsqrt()
    why = failures(5, solution(5, masked_batchnorm=unmasked_output))["masked_batchnorm"]
    assert "padding positions are not 0" in why


def test_batchnorm_along_the_features_is_rejected():
    def per_token(x, mask, eps=1e-5):
        xc = x - x.mean(axis=-1, keepdims=True)
        return xc * ((xc * xc).mean(axis=-1, keepdims=True) + eps).rsqrt() * mask.unsqueeze(-1)
    assert "LayerNorm's axis" in failures(5, solution(5, masked_batchnorm=per_token))["masked_batchnorm"]


def test_batchnorm_with_detached_statistics_is_rejected():
    """Right values, but the statistics are constants to autograd: the gradient misses their terms."""
    reference = solution(5).masked_batchnorm

    def detached(x, mask, eps=1e-5):
        m = mask.unsqueeze(-1)
        mean = ((x * m).sum(axis=(0, 1), keepdims=True) / m.sum()).detach()
        var = ((((x - mean) * m) ** 2).sum(axis=(0, 1), keepdims=True) / m.sum()).detach()
        return (x - mean) * m * (var + eps).rsqrt()
    assert np.allclose(detached(*_tensors()).numpy(), reference(*_tensors()).numpy())
    why = failures(5, solution(5, masked_batchnorm=detached))["masked_batchnorm"]
    assert "differs from finite differences" in why and "detached" in why


def _tensors():
    r = np.random.default_rng(0)
    mask = np.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    x = r.standard_normal((2, 3, 4)) * mask[..., None]
    return tb.tensor(x, dtype=tb.float64), tb.tensor(mask, dtype=tb.float64)


def test_batchnorm_returning_numpy_is_rejected():
    as_numpy = lambda x, mask, eps=1e-5: solution(5).masked_batchnorm(x, mask, eps).numpy()   # noqa: E731
    assert "must return a Tensor" in failures(5, solution(5, masked_batchnorm=as_numpy))["masked_batchnorm"]


# ---------------------------------------------------------------- layernorm_backward
def _layernorm_backward(mean_term=True, rstd_term=True):
    def backward(dout, x, weight, eps):
        xc = x - x.mean(-1, keepdims=True)
        rstd = 1 / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps)
        n, dn = xc * rstd, dout * weight
        dx = dn - (dn.mean(-1, keepdims=True) if mean_term else 0)
        dx = rstd * (dx - (n * (dn * n).mean(-1, keepdims=True) if rstd_term else 0))
        return dx, (dout * n).sum(axis=(0, 1)), dout.sum(axis=(0, 1))
    return backward


def test_layernorm_backward_without_the_mean_term_is_rejected_with_the_reason():
    why = failures(5, solution(5, layernorm_backward=_layernorm_backward(mean_term=False)))["layernorm_backward"]
    assert why.startswith("dx is off by") and "mean(dn) term is missing" in why


def test_layernorm_backward_with_a_constant_rstd_is_rejected():
    why = failures(5, solution(5, layernorm_backward=_layernorm_backward(rstd_term=False)))["layernorm_backward"]
    assert "rstd was treated as a constant" in why


def test_layernorm_backward_with_rstd_times_dn_alone_is_rejected():
    backward = _layernorm_backward(mean_term=False, rstd_term=False)
    assert "only rstd * dn" in failures(5, solution(5, layernorm_backward=backward))["layernorm_backward"]


def test_layernorm_backward_without_the_weight_is_rejected():
    def unit_weight(dout, x, weight, eps):
        _, dw, db = solution(5).layernorm_backward(dout, x, weight, eps)
        return _layernorm_backward()(dout, x, np.ones_like(weight), eps)[0], dw, db
    why = failures(5, solution(5, layernorm_backward=unit_weight))["layernorm_backward"]
    assert why.startswith("dx is off by") and "the weight is missing" in why


def test_layernorm_backward_with_swapped_parameter_gradients_is_rejected():
    def swapped(dout, x, weight, eps):
        dx, dw, db = solution(5).layernorm_backward(dout, x, weight, eps)
        return dx, db, dw
    why = failures(5, solution(5, layernorm_backward=swapped))["layernorm_backward"]
    assert why.startswith("dweight:") and "that is dbias" in why


def test_layernorm_backward_with_an_unsummed_gain_gradient_is_rejected():
    def unsummed(dout, x, weight, eps):
        dx, dw, db = solution(5).layernorm_backward(dout, x, weight, eps)
        return dx, dout * (x - x.mean(-1, keepdims=True)), db
    why = failures(5, solution(5, layernorm_backward=unsummed))["layernorm_backward"]
    assert "dweight must have shape (6,); got (2, 3, 6)" in why and "sum over every axis but the last" in why


def test_layernorm_backward_with_a_gain_gradient_summed_over_one_axis_is_rejected_with_the_reason():
    def one_axis(dout, x, weight, eps):
        dx, dw, db = solution(5).layernorm_backward(dout, x, weight, eps)
        return dx, dw, dout.sum(axis=0)
    why = failures(5, solution(5, layernorm_backward=one_axis))["layernorm_backward"]
    assert "dbias must have shape (6,); got (3, 6)" in why and "sum over every axis but the last" in why


def test_layernorm_backward_returning_one_array_is_rejected():
    only_dx = lambda dout, x, weight, eps: solution(5).layernorm_backward(dout, x, weight, eps)[0]   # noqa: E731
    why = failures(5, solution(5, layernorm_backward=only_dx))["layernorm_backward"]
    assert "must return a tuple (dx, dweight, dbias); got ndarray" in why


# ---------------------------------------------------------------- fused_add_rmsnorm
def test_fused_add_rmsnorm_returning_the_old_residual_is_rejected():
    def old_residual(x, residual, weight, eps):
        return solution(5).fused_add_rmsnorm(x, residual, weight, eps)[0], residual
    why = failures(5, solution(5, fused_add_rmsnorm=old_residual))["fused_add_rmsnorm"]
    assert "that is the old residual" in why


def test_fused_add_rmsnorm_normalising_x_alone_is_rejected():
    def x_alone(x, residual, weight, eps):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * weight, x + residual
    why = failures(5, solution(5, fused_add_rmsnorm=x_alone))["fused_add_rmsnorm"]
    assert "x alone was normalised" in why


def _rmsnorm(h, weight, eps):
    return h / np.sqrt((h * h).mean(-1, keepdims=True) + eps) * weight


def test_fused_add_rmsnorm_normalising_the_residual_alone_is_rejected():
    residual_alone = lambda x, residual, weight, eps: (_rmsnorm(residual, weight, eps), x + residual)   # noqa: E731
    why = failures(5, solution(5, fused_add_rmsnorm=residual_alone))["fused_add_rmsnorm"]
    assert "the residual alone was normalised" in why


def test_fused_add_rmsnorm_without_the_gain_or_eps_is_rejected():
    no_gain = lambda x, residual, weight, eps: (_rmsnorm(x + residual, 1.0, eps), x + residual)   # noqa: E731
    assert "the gain is missing" in failures(5, solution(5, fused_add_rmsnorm=no_gain))["fused_add_rmsnorm"]
    no_eps = lambda x, residual, weight, eps: (_rmsnorm(x + residual, weight, 0.0), x + residual)   # noqa: E731
    assert "eps is missing" in failures(5, solution(5, fused_add_rmsnorm=no_eps))["fused_add_rmsnorm"]


# ---------------------------------------------------------------- fused_add_rmsnorm_backward
def test_fused_backward_that_forgets_the_stream_gradient_is_rejected_with_the_reason():
    """The typical slip: h's gradient taken only from the norm, as if new_residual went nowhere."""
    def norm_only(d_normed, d_new_residual, x, residual, weight, eps):
        return solution(5).fused_add_rmsnorm_backward(d_normed, np.zeros_like(d_new_residual), x, residual,
                                                      weight, eps)
    why = failures(5, solution(5, fused_add_rmsnorm_backward=norm_only))["fused_add_rmsnorm_backward"]
    assert why.startswith("dx is off by") and "d_new_residual flows on" in why


def test_fused_backward_with_a_constant_rstd_is_rejected():
    def constant_rstd(d_normed, d_new_residual, x, residual, weight, eps):
        h = x + residual
        rstd = 1 / np.sqrt((h * h).mean(-1, keepdims=True) + eps)
        dh = rstd * d_normed * weight + d_new_residual
        return dh, dh, (d_normed * h * rstd).sum(axis=(0, 1))
    why = failures(5, solution(5, fused_add_rmsnorm_backward=constant_rstd))["fused_add_rmsnorm_backward"]
    assert "rstd was treated as a constant" in why


def test_fused_backward_with_the_gain_gradient_on_h_is_rejected():
    def raw_h(d_normed, d_new_residual, x, residual, weight, eps):
        dx, dres, _ = solution(5).fused_add_rmsnorm_backward(d_normed, d_new_residual, x, residual, weight, eps)
        return dx, dres, (d_normed * (x + residual)).sum(axis=(0, 1))
    why = failures(5, solution(5, fused_add_rmsnorm_backward=raw_h))["fused_add_rmsnorm_backward"]
    assert why.startswith("dweight:") and "use the normalised h" in why


def test_fused_backward_that_passes_only_the_stream_gradient_is_rejected():
    def stream_only(d_normed, d_new_residual, x, residual, weight, eps):
        _, _, dw = solution(5).fused_add_rmsnorm_backward(d_normed, d_new_residual, x, residual, weight, eps)
        return d_new_residual, d_new_residual, dw
    why = failures(5, solution(5, fused_add_rmsnorm_backward=stream_only))["fused_add_rmsnorm_backward"]
    assert "dx is only d_new_residual" in why and "must be added to it" in why
