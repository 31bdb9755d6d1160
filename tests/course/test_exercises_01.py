"""Lesson 01's checkers (lessons/exercises/01.py) reject typical wrong answers, each with the reason."""
import numpy as np
import pytest

import tinygrad_block as tb
from conftest import failures, solution


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")   # the naive solution's e^1000
def test_softplus_that_overflows_is_rejected():
    naive = lambda x: (x.exp() + 1.0).log()                                     # noqa: E731
    assert "not finite at x = 1000" in failures(1, solution(1, softplus=naive))["softplus"]


def test_softplus_with_inconsistent_branches_at_the_kink_is_rejected():
    """max(x, 0) splits its gradient at the tie (1/2) while |x| takes the x branch: at 0 they sum to 0, not the
    sigmoid's 1/2. The values are right; only the gradient check can see it."""
    kinked = lambda x: x.maximum(0.0) + ((-x.abs()).exp() + 1.0).log()        # noqa: E731
    why = failures(1, solution(1, softplus=kinked))["softplus"]
    assert "at x = 0 is 0.0" in why and "sigmoid" in why and "0.5" in why


def test_softplus_outside_the_graph_is_rejected():
    detached = lambda x: tb.tensor(np.logaddexp(0.0, x.numpy()))               # noqa: E731
    assert "no gradient reached x" in failures(1, solution(1, softplus=detached))["softplus"]


def _recursive_count(y, seen=None):
    """Counts each call once, but by recursion: Python's stack ends near 1000 deep."""
    seen = set() if seen is None else seen
    call = y._ctx if isinstance(y, tb.Tensor) else y
    if call is None or call in seen:
        return 0
    seen.add(call)
    return 1 + sum(_recursive_count(e, seen) for e in call.edges if e is not None and not isinstance(e, tb.Tensor))


def _count_paths(y):
    """Counts every path to each call: a call reached twice counts twice."""
    stack, n = [y._ctx], 0
    while stack:
        call = stack.pop()
        n += 1
        stack += [e for e in call.edges if e is not None and not isinstance(e, tb.Tensor)]
    return n


def test_count_ops_that_counts_paths_is_rejected_with_the_reason():
    why = failures(1, solution(1, count_ops=_count_paths))["count_ops"]
    assert "z = x * x; y = z + z: got 3, the graph holds 2" in why and "counts once" in why


def test_count_ops_by_recursion_fails_on_a_deep_graph():
    why = failures(1, solution(1, count_ops=_recursive_count))["count_ops"]
    assert why.startswith("raised RecursionError")
