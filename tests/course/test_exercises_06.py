"""Lesson 06's checkers (lessons/exercises/06.py) reject typical wrong answers, each with the reason."""
import math

import numpy as np
import pytest

import tinygrad_block as tb
from conftest import failures, solution


def _attention(scale=None, masked=1, lower=False, after_softmax=False, axis=-1, transposed=False):
    """Attention with one slip: another scale, the mask on another diagonal or triangle, the future weights
    zeroed after the softmax, the softmax over another axis, or the weights transposed before they read V."""
    def attention(q, k, v, causal):
        L, d = q.shape[-2], q.shape[-1]
        s = (q @ k.mT) * (1 / math.sqrt(d) if scale is None else scale)
        if causal:
            future = np.tril(np.ones((L, L)), k=-1) if lower else np.triu(np.ones((L, L)), k=masked)
            if after_softmax:
                return (s.softmax(axis=-1) * tb.tensor(1 - future, dtype=q.dtype)) @ v
            s = s + tb.tensor(np.where(future > 0, -np.inf, 0.0), dtype=q.dtype)
        weights = s.softmax(axis=axis)
        return (weights.mT if transposed else weights) @ v
    return attention


def test_attention_without_the_scale_is_rejected_with_the_reason():
    why = failures(6, solution(6, attention=_attention(scale=1.0)))["attention"]
    assert "causal=False" in why and "not divided by sqrt(d_head) = 2" in why


def test_attention_divided_by_d_is_rejected():
    why = failures(6, solution(6, attention=_attention(scale=0.25)))["attention"]
    assert "divided by d_head = 4, not by its square root" in why


def test_attention_masking_the_wrong_triangle_is_rejected():
    why = failures(6, solution(6, attention=_attention(lower=True)))["attention"]
    assert "causal=True" in why and "wrong triangle" in why and "not the future ones (j > i)" in why
    assert "triu" not in why                                             # the idea, not the code


@pytest.mark.filterwarnings("ignore:invalid value")
def test_attention_masking_the_diagonal_is_rejected():
    why = failures(6, solution(6, attention=_attention(masked=0)))["attention"]
    assert "hides the diagonal too" in why and "its own key (j = i)" in why and "triu" not in why


def test_attention_masked_after_the_softmax_is_rejected():
    why = failures(6, solution(6, attention=_attention(after_softmax=True)))["attention"]
    assert "zeroed after the softmax" in why and "no longer sum to 1" in why


def test_attention_with_the_future_scores_set_to_zero_is_rejected():
    def zero_scores(q, k, v, causal):
        L = q.shape[-2]
        s = (q @ k.mT) / math.sqrt(q.shape[-1])
        if causal:
            s = s * tb.tensor(np.tril(np.ones((L, L))), dtype=q.dtype)          # 0, not -inf, above the diagonal
        return s.softmax(axis=-1) @ v
    why = failures(6, solution(6, attention=zero_scores))["attention"]
    assert "causal=True" in why and "set to 0" in why and "e^-inf = 0" in why


def test_attention_with_k_transposed_whole_is_rejected_with_the_reason():
    """k.T reverses all four axes: (2, 3, 5, 4) -> (4, 5, 3, 2), so q @ k.T does not even fit; on a cube it would
    fit, and give q[b, h] @ k[h, b].T-like nonsense. The hint names the slip, not the code."""
    def whole_transpose(q, k, v, causal):
        s = (q @ k.T) / math.sqrt(q.shape[-1])
        return s.softmax(axis=-1) @ v
    why = failures(6, solution(6, attention=whole_transpose))["attention"]
    assert why.startswith("attention(causal=False) on q, k, v of shape (2, 3, 5, 4) raised ValueError: matmul")
    assert "reversed all four of its axes" in why and "the batch and head axes too" in why and ".mT" not in why


def test_attention_failing_otherwise_keeps_its_own_error():
    def wrong_shape(q, k, v, causal):
        return q @ k                                                     # (.., 5, 4) @ (.., 5, 4) does not fit
    why = failures(6, solution(6, attention=wrong_shape))["attention"]
    assert why.startswith("raised ValueError: matmul: inner dimensions differ") and "reversed" not in why


def test_attention_summing_v_over_the_queries_is_rejected_with_the_reason():
    columns = _attention(transposed=True)                                # out_i = sum_j A_ji v_j
    why = failures(6, solution(6, attention=columns))["attention"]
    assert why.startswith("attention(causal=False) is off by up to")
    assert "V was read along the wrong axis of the weights" in why and "row i" in why


def test_attention_with_the_softmax_over_the_queries_is_rejected_with_the_reason():
    why = failures(6, solution(6, attention=_attention(axis=-2)))["attention"]
    assert "normalised each key's column (over the queries)" in why and "must sum to 1" in why


def test_the_attention_starter_states_the_task_not_the_code():
    from conftest import course_module
    course = course_module()
    starter = course.exercises(6).starter
    task = starter[starter.index("def attention"):starter.index("def stable_softmax")]
    assert "(B, H, L, d_head)" in task and "sum to 1" in task and "j <= i" in task
    for code in ("triu", ".mT", "softmax(axis", "-inf", "tb.tensor(", "sqrt("):
        assert code not in task, code


def test_attention_slightly_off_names_the_entry_and_the_expected_value():
    off = lambda q, k, v, causal: _attention()(q, k, v, causal) * 1.001               # noqa: E731
    why = failures(6, solution(6, attention=off))["attention"]
    assert "attention(causal=False) at index (1, 0, 3, 3)" in why and "expected np.float64(-5.31728203540084" in why


def test_attention_that_always_masks_is_rejected():
    masked = lambda q, k, v, causal: _attention()(q, k, v, True)                      # noqa: E731
    why = failures(6, solution(6, attention=masked))["attention"]
    assert "attention(causal=False) gives the causal result" in why and "must not mask anything" in why


def test_attention_with_the_wrong_gradient_is_rejected():
    def steep(q, k, v, causal):
        out = _attention()(q, k, v, causal)
        return out + (out - out.detach()) * 0.5                        # right values, 1.5 times the gradient
    why = failures(6, solution(6, attention=steep))["attention"]
    assert "the gradient of q is off by 1.19 from the hand-derived one" in why


def test_attention_that_ignores_causal_is_rejected():
    unmasked = lambda q, k, v, causal: _attention()(q, k, v, False)                   # noqa: E731
    why = failures(6, solution(6, attention=unmasked))["attention"]
    assert "causal=True must hide the keys after each query" in why


def test_attention_outside_the_graph_is_rejected():
    detached = lambda q, k, v, causal: tb.tensor(_attention()(q, k, v, causal).numpy())   # noqa: E731
    assert "no gradient reaches q, k, v" in failures(6, solution(6, attention=detached))["attention"]


@pytest.mark.filterwarnings("ignore:overflow encountered", "ignore:invalid value")
def test_naive_softmax_is_rejected_with_the_reason():
    def naive(x, axis=-1):
        e = x.exp()
        return e / e.sum(axis=axis, keepdims=True)
    why = failures(6, solution(6, stable_softmax=naive))["stable_softmax"]
    assert "[1000.0, 999.0, 998.0, 0.0, -1.0] is not finite" in why and "overflows" in why


@pytest.mark.filterwarnings("ignore:invalid value")
def test_softmax_shifted_by_the_global_maximum_is_rejected():
    def global_max(x, axis=-1):
        e = (x - x.max()).exp()
        return e / e.sum(axis=axis, keepdims=True)
    why = failures(6, solution(6, stable_softmax=global_max))["stable_softmax"]
    assert "underflows" in why and "not the maximum of the whole tensor" in why


def test_softmax_along_the_last_axis_only_is_rejected():
    def last_axis(x, axis=-1):
        e = (x - x.max(axis=-1, keepdims=True)).exp()
        return e / e.sum(axis=-1, keepdims=True)
    why = failures(6, solution(6, stable_softmax=last_axis))["stable_softmax"]
    assert "axis=0" in why and "use the `axis` argument" in why


def test_softmax_without_keepdims_is_rejected_with_the_reason():
    def dropped_axis(x, axis=-1):
        e = (x - x.max(axis=axis)).exp()
        return e / e.sum(axis=axis, keepdims=True)
    why = failures(6, solution(6, stable_softmax=dropped_axis))["stable_softmax"]
    assert "raised ValueError" in why and "keep that axis, with length 1" in why and "keepdims" not in why


def test_softmax_divided_by_the_total_is_rejected():
    def total(x, axis=-1):
        e = (x - x.max(axis=axis, keepdims=True)).exp()
        return e / e.sum()
    why = failures(6, solution(6, stable_softmax=total))["stable_softmax"]
    assert "it sums to 0.175876, not 1" in why


def test_softmax_with_the_wrong_gradient_is_rejected():
    def steep(x, axis=-1):
        p = solution(6).stable_softmax(x, axis)
        return p + (p - p.detach()) * 0.5                               # right values, 1.5 times the gradient
    why = failures(6, solution(6, stable_softmax=steep))["stable_softmax"]
    assert "the gradient of stable_softmax is" in why and "expected p (g - sum(p g))" in why


def test_head_contributions_from_rows_of_w_o_are_rejected_with_the_reason():
    def rows(weighted, w_o):
        d_head = weighted.shape[-1]
        return tb.stack([weighted[:, h] @ w_o[h * d_head:(h + 1) * d_head] for h in range(weighted.shape[1])])
    why = failures(6, solution(6, head_contributions=rows))["head_contributions"]
    assert "stored (out, in)" in why and "block of columns" in why
    assert "o_weight[" not in why and ".mT" not in why and "@" not in why          # the idea, not the code


def test_head_contributions_as_a_list_are_rejected():
    as_list = lambda weighted, w_o: list(solution(6).head_contributions(weighted, w_o))   # noqa: E731
    why = failures(6, solution(6, head_contributions=as_list))["head_contributions"]
    assert "returned a list of 4" in why and "stacked on a new first axis" in why and "tb.stack" not in why


def test_head_contributions_off_name_the_gap_to_the_output_projection():
    off = lambda weighted, w_o: solution(6).head_contributions(weighted, w_o) * 1.01   # noqa: E731
    why = failures(6, solution(6, head_contributions=off))["head_contributions"]
    assert "the slices are off by up to 0.106" in why and "differs from o_proj(merged) by 0.121" in why
