"""manual/fused.py: the fused residual add + RMSNorm against the unfused Tensor version (h = x + residual, then
nn.RMSNorm(h)) by autograd and against finite differences, in float64; lesson 05's checkers accept it; and
the memory-traffic count, checked row by row against what each kernel can have in memory.
"""
import numpy as np
import pytest
from conftest import failures, rel_err, solution

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.gradcheck import central_difference
from tinygrad_block.manual.fused import KERNELS, add_rmsnorm_traffic, fused_add_rmsnorm_backward, \
    fused_add_rmsnorm_forward

EPS = 1e-5
B, L, D = 2, 3, 6


@pytest.fixture
def case():
    """x, residual (B, L, D), a gain w (D,) and the two upstream gradients d_normed, d_new_residual."""
    r = np.random.default_rng(0)
    x, res, d_normed, d_res = (r.standard_normal((B, L, D)) for _ in range(4))
    return x, res * 2.0 + 0.3, 1.0 + 0.5 * r.standard_normal(D), d_normed, d_res


def unfused_autograd(x, res, w, d_normed, d_res):
    """(normed, h) and (dx, dresidual, dw) by autograd through nn.RMSNorm after an add."""
    norm = nn.RMSNorm(D, eps=EPS, dtype=tb.float64)
    norm.load_state_dict({"weight": tb.tensor(w, dtype=tb.float64)})
    xt, rt = (tb.tensor(a, dtype=tb.float64, requires_grad=True) for a in (x, res))
    h = xt + rt
    normed = norm(h)
    ((normed * tb.tensor(d_normed, dtype=tb.float64)).sum() + (h * tb.tensor(d_res, dtype=tb.float64)).sum()).backward()
    return (normed.numpy(), h.numpy()), (xt.grad.numpy(), rt.grad.numpy(), norm.weight.grad.numpy())


def test_forward_equals_rmsnorm_after_the_add(case):
    x, res, w, d_normed, d_res = case
    (normed, h), _ = fused_add_rmsnorm_forward(x, res, w, EPS)
    (want_normed, want_h), _ = unfused_autograd(*case)
    assert np.array_equal(h, x + res)
    assert rel_err(normed, want_normed) <= 1e-14


def test_backward_equals_autograd_of_the_unfused_version(case):
    x, res, w, d_normed, d_res = case
    _, cache = fused_add_rmsnorm_forward(x, res, w, EPS)
    dx, dres, grads = fused_add_rmsnorm_backward(d_normed, d_res, cache)
    _, (want_dx, want_dres, want_dw) = unfused_autograd(*case)
    for got, want in ((dx, want_dx), (dres, want_dres), (grads["weight"], want_dw)):
        assert got.shape == want.shape
        assert rel_err(got, want) <= 1e-12, rel_err(got, want)


def test_backward_equals_finite_differences(case):
    x, res, w, d_normed, d_res = case

    def loss(xv, rv, wv):   # sum(normed * d_normed) + sum(h * d_new_residual), of the fused forward's outputs
        (normed, h), _ = fused_add_rmsnorm_forward(xv, rv, wv, EPS)
        return float((normed * d_normed).sum() + (h * d_res).sum())

    _, cache = fused_add_rmsnorm_forward(x, res, w, EPS)
    dx, dres, grads = fused_add_rmsnorm_backward(d_normed, d_res, cache)
    numeric = (central_difference(lambda v: loss(v, res, w), x), central_difference(lambda v: loss(x, v, w), res),
               central_difference(lambda v: loss(x, res, v), w))
    for got, want in zip((dx, dres, grads["weight"]), numeric):
        assert rel_err(got, want) <= 1e-8, rel_err(got, want)


def test_the_stream_gradient_is_not_optional(case):
    """Dropping d_new_residual (the gradient that flows on along the stream) gives a different, wrong dx."""
    x, res, w, d_normed, d_res = case
    _, cache = fused_add_rmsnorm_forward(x, res, w, EPS)
    with_stream, _, _ = fused_add_rmsnorm_backward(d_normed, d_res, cache)
    without, _, _ = fused_add_rmsnorm_backward(d_normed, np.zeros_like(d_res), cache)
    assert rel_err(with_stream - without, d_res) <= 1e-14


def test_lesson_04_checkers_accept_the_library_version():
    """The exercise's signature: fused_add_rmsnorm(x, residual, weight, eps) -> (normed, new_residual) and
    fused_add_rmsnorm_backward(d_normed, d_new_residual, x, residual, weight, eps) -> (dx, dresidual, dweight)."""
    def forward(x, residual, weight, eps):
        return fused_add_rmsnorm_forward(x, residual, weight, eps)[0]

    def backward(d_normed, d_new_residual, x, residual, weight, eps):
        dx, dres, grads = fused_add_rmsnorm_backward(d_normed, d_new_residual,
                                                     fused_add_rmsnorm_forward(x, residual, weight, eps)[1])
        return dx, dres, grads["weight"]

    why = failures(5, solution(5, fused_add_rmsnorm=forward, fused_add_rmsnorm_backward=backward))
    assert "fused_add_rmsnorm" not in why and "fused_add_rmsnorm_backward" not in why, why


def test_shape_errors_name_the_op():
    x = np.zeros((2, 4))
    with pytest.raises(ValueError, match=r"fused_add_rmsnorm_forward: .*\(2, 4\).*\(2, 3\)"):
        fused_add_rmsnorm_forward(x, np.zeros((2, 3)), np.ones(4), EPS)
    with pytest.raises(ValueError, match=r"gain w \(3,\)"):
        fused_add_rmsnorm_forward(x, x, np.ones(3), EPS)


# ------------------------------------------------------------------ memory traffic
def test_traffic_counts_by_hand():
    """Unfused forward: the add reads x, residual and writes h; the norm reads h back and writes normed (3 reads,
    2 writes). Fused: read x, residual; write h, normed (2, 2). Backward unfused: the norm's backward reads
    d_normed, h and writes dh_norm; adding the stream's gradient reads dh_norm, d_new_residual, writes dh (4, 2).
    Fused: read d_normed, d_new_residual, h; write dh (3, 1). So fusing saves 1 of 5 rows forward, 2 of 6 back."""
    assert add_rmsnorm_traffic(fused=False) == {"forward": (3, 2), "backward": (4, 2)}
    assert add_rmsnorm_traffic(fused=True) == {"forward": (2, 2), "backward": (3, 1)}
    # bytes: rows x tokens x d_model x itemsize; one Llama-2-7B layer's pair at 4096 tokens in bfloat16
    n, d = 4096, 4096
    unfused, fused = add_rmsnorm_traffic(False, n, d, 2), add_rmsnorm_traffic(True, n, d, 2)
    assert sum(unfused["forward"]) - sum(fused["forward"]) == n * d * 2 == 32 * 2 ** 20       # 32 MiB saved
    assert sum(unfused["backward"]) - sum(fused["backward"]) == 2 * n * d * 2


@pytest.mark.parametrize("kind", ["unfused", "fused"])
@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_every_row_a_kernel_reads_exists_when_it_runs(kind, phase):
    """A kernel reads only the op's inputs (and, backward, the saved h) or rows an earlier kernel wrote, and
    each phase ends having written its outputs: normed and h forward, dh (= dx = dresidual) backward."""
    have = {"x", "residual"} if phase == "forward" else {"d_normed", "d_new_residual", "h"}
    for name, reads, writes in KERNELS[kind][phase]:
        assert set(reads) <= have, (name, set(reads) - have)
        have |= set(writes)
    assert ({"normed", "h"} if phase == "forward" else {"dh"}) <= have
