"""Lesson 10's checkers (lessons/exercises/10.py) reject typical wrong answers, each with the reason."""
import numpy as np

from conftest import failures, solution


def _swiglu(silu_prime="right", with_up=True, branches=("gate", "up"), transpose=False):
    """SwiGLU's backward by hand with one slip: SiLU's derivative taken as sigmoid alone (or as the sigmoid's
    derivative), the gate's gradient without the factor u, dx from one branch only, weight gradients transposed."""
    def swiglu_backward(x, w_gate, w_up, w_down, grad_out):
        z, u = x @ w_gate.T, x @ w_up.T
        s = 1 / (1 + np.exp(-z))
        prime = {"right": s * (1 + z * (1 - s)), "sigmoid": s, "sigmoid'": s * (1 - s)}[silu_prime]
        dm = grad_out @ w_down
        du, dz = dm * z * s, dm * (u if with_up else 1.0) * prime
        dx = (dz @ w_gate if "gate" in branches else 0.0) + (du @ w_up if "up" in branches else 0.0)

        def outer(d, a):
            dw = d.reshape(-1, d.shape[-1]).T @ a.reshape(-1, a.shape[-1])
            return dw.T if transpose else dw
        return dx, outer(dz, x), outer(du, x), outer(grad_out, z * s * u)
    return swiglu_backward


def _swiglu_weights(slip: str):
    """The right SwiGLU backward (the reference solution's), with one slip in dw_up or dw_down."""
    def swiglu_backward(x, w_gate, w_up, w_down, grad_out):
        z, u = x @ w_gate.T, x @ w_up.T
        s = 1 / (1 + np.exp(-z))
        act, dm = z * s, grad_out @ w_down
        du, dz = dm * act, dm * u * s * (1 + z * (1 - s))

        def outer(d, a):
            return d.reshape(-1, d.shape[-1]).T @ a.reshape(-1, a.shape[-1])
        dw_up, dw_down = outer(du, x), outer(grad_out, act * u)
        if slip == "one sequence":
            dw_up, dw_down = du[0].T @ x[0], grad_out[0].T @ (act * u)[0]
        elif slip == "without silu":
            dw_up = outer(dm, x)
        elif slip == "z for silu":
            dw_up = outer(dm * z, x)
        elif slip == "silu alone":
            dw_down = outer(grad_out, act)
        return dz @ w_gate + du @ w_up, outer(dz, x), dw_up, dw_down
    return swiglu_backward


def test_weight_gradients_from_one_sequence_are_rejected_with_the_sum_over_tokens():
    why = failures(10, solution(10, swiglu_backward=_swiglu_weights("one sequence")))["swiglu_backward"]
    assert "dw_up off by" in why and "dw_down off by" in why and "dx, dw_gate right" in why
    assert "dw_up and dw_down hold the first sequence's gradient only" in why and why.count("sums over all") == 1


def test_dw_up_without_the_factor_silu_or_with_z_is_named():
    why = failures(10, solution(10, swiglu_backward=_swiglu_weights("without silu")))["swiglu_backward"]
    assert "dw_up off by" in why and "dx, dw_gate, dw_down right" in why and "misses the factor silu(z)" in why
    why = failures(10, solution(10, swiglu_backward=_swiglu_weights("z for silu")))["swiglu_backward"]
    assert "takes z (the gate's output) for silu(z)" in why


def test_dw_down_from_silu_alone_is_named():
    why = failures(10, solution(10, swiglu_backward=_swiglu_weights("silu alone")))["swiglu_backward"]
    assert "dw_down off by" in why and "dw_down reads silu(z) alone" in why


def test_the_slip_helper_without_slips_passes():
    assert "swiglu_backward" not in failures(10, solution(10, swiglu_backward=_swiglu()))
    assert "swiglu_backward" not in failures(10, solution(10, swiglu_backward=_swiglu_weights("")))


def test_silu_derivative_as_sigmoid_alone_is_rejected_with_the_product_rule():
    why = failures(10, solution(10, swiglu_backward=_swiglu(silu_prime="sigmoid")))["swiglu_backward"]
    assert "dx off by" in why and "dw_gate off by" in why and "dw_up, dw_down right" in why
    assert "not sigmoid(z) alone" in why and "product rule" in why


def test_the_sigmoids_own_derivative_is_rejected():
    why = failures(10, solution(10, swiglu_backward=_swiglu(silu_prime="sigmoid'")))["swiglu_backward"]
    assert "is the sigmoid's" in why


def test_the_gate_without_the_factor_u_is_rejected():
    why = failures(10, solution(10, swiglu_backward=_swiglu(with_up=False)))["swiglu_backward"]
    assert "misses the factor u" in why


def test_dx_from_one_branch_is_rejected():
    why = failures(10, solution(10, swiglu_backward=_swiglu(branches=("gate",))))["swiglu_backward"]
    assert "dx off by" in why and "dw_gate, dw_up, dw_down right" in why and "only the gate's branch" in why
    why = failures(10, solution(10, swiglu_backward=_swiglu(branches=("up",))))["swiglu_backward"]
    assert "only the up projection's branch" in why


def test_transposed_weight_gradients_are_rejected_by_shape():
    why = failures(10, solution(10, swiglu_backward=_swiglu(transpose=True)))["swiglu_backward"]
    assert "dw_gate has shape (5, 7), the transpose of the weight's (7, 5)" in why


def test_a_tensor_or_a_wrong_tuple_is_rejected():
    import tinygrad_block as tb
    as_tensors = lambda *args: tuple(tb.tensor(a) for a in _swiglu()(*args))   # noqa: E731
    assert "got a Tensor" in failures(10, solution(10, swiglu_backward=as_tensors))["swiglu_backward"]
    only_dx = lambda *args: _swiglu()(*args)[0]                                 # noqa: E731
    assert "must return a tuple (dx, dw_gate, dw_up, dw_down)" in failures(
        10, solution(10, swiglu_backward=only_dx))["swiglu_backward"]


def test_first_head_of_each_group_is_rejected():
    why = failures(10, solution(10, repeat_kv_backward=lambda g, n: g[:, ::n]))["repeat_kv_backward"]
    assert "repeat_kv_backward(grad (2, 6, 3, 4), n_rep=2)" in why and "first query head of each group" in why


def test_interleaved_groups_are_rejected():
    def interleaved(g, n):
        B, H, L, d = g.shape
        return g.reshape(B, n, H // n, L, d).sum(axis=1)
    why = failures(10, solution(10, repeat_kv_backward=interleaved))["repeat_kv_backward"]
    assert "grouping of tiling" in why and "h // n_rep" in why


def test_the_mean_and_the_unsummed_gradient_are_rejected():
    def mean(g, n):
        B, H, L, d = g.shape
        return g.reshape(B, H // n, n, L, d).mean(axis=2)
    assert "mean over each group" in failures(10, solution(10, repeat_kv_backward=mean))["repeat_kv_backward"]
    why = failures(10, solution(10, repeat_kv_backward=lambda g, n: g))["repeat_kv_backward"]
    assert "one gradient per query head" in why and "(2, 3, 3, 4)" in why


def _rotate_half(a):
    half = a.shape[-1] // 2
    return np.concatenate([-a[..., half:], a[..., :half]], axis=-1)


def test_the_forward_rotation_on_the_gradient_is_rejected():
    forward = lambda g, cos, sin: g * cos + _rotate_half(g) * sin          # noqa: E731
    why = failures(10, solution(10, rope_backward=forward))["rope_backward"]
    assert "positions 0..4" in why and "forward rotation again" in why and "-angle" in why


def test_the_gradient_unchanged_and_swapped_tables_are_rejected():
    assert "the identity only at position 0" in failures(
        10, solution(10, rope_backward=lambda g, cos, sin: g))["rope_backward"]
    swapped = lambda g, cos, sin: g * sin - _rotate_half(g) * cos          # noqa: E731
    assert "cos and sin are swapped" in failures(10, solution(10, rope_backward=swapped))["rope_backward"]


def test_rope_backward_of_the_wrong_shape_is_rejected():
    why = failures(10, solution(10, rope_backward=lambda g, cos, sin: g[..., : g.shape[-1] // 2]))["rope_backward"]
    assert "must have shape (2, 3, 5, 8); got (2, 3, 5, 4)" in why
