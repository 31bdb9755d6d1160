"""Lesson 02's checkers (lessons/exercises/02.py) reject typical wrong answers, each with the reason."""
from collections import deque

import tinygrad_block as tb
from conftest import failures, solution


def test_a_two_point_difference_is_rejected_with_the_reason():
    two_point = lambda f, x, h=1e-3: (f(x + h) - f(x - h)) / (2 * h)          # noqa: E731
    why = failures(2, solution(2, central_difference=two_point))["central_difference"]
    assert "error 9.01e-08" in why and "two-point" in why


def test_a_difference_over_the_wrong_divisor_is_rejected_with_the_reason():
    halved = lambda f, x, h=1e-3: (8 * (f(x + h) - f(x - h)) - (f(x + 2 * h) - f(x - 2 * h))) / (6 * h)   # noqa: E731
    why = failures(2, solution(2, central_difference=halved))["central_difference"]
    assert "2 times the derivative" in why and "divisor" in why


def _calls(call):
    return [e for e in call.edges if isinstance(e, tb.Function)]


def _preorder(y):
    """Depth-first, each call listed when first reached: a call can come before another that reads its output."""
    order, seen, stack = [], set(), [y._ctx]
    while stack:
        call = stack.pop()
        if call not in seen:
            seen.add(call)
            order.append(call)
            stack += _calls(call)[::-1]
    return order


def _breadth_first(y):
    order, seen, queue = [], {y._ctx}, deque([y._ctx])
    while queue:
        call = queue.popleft()
        order.append(call)
        for e in _calls(call):
            if e not in seen:
                seen.add(e)
                queue.append(e)
    return order


def _every_path(y):
    """Depth-first without remembering what was visited: a call reached along two paths is listed twice."""
    order, stack = [], [y._ctx]
    while stack:
        call = stack.pop()
        order.append(call)
        stack += _calls(call)
    return order


def test_a_depth_first_preorder_is_rejected_with_the_reason():
    why = failures(2, solution(2, topological_order=_preorder))["topological_order"]
    assert "comes before" in why and "reads its output" in why and "post-order" in why


def test_a_breadth_first_order_is_rejected():
    why = failures(2, solution(2, topological_order=_breadth_first))["topological_order"]
    assert "h = sin x; y = h + exp(h * h)" in why and "sin (position 1) comes before mul (position 3)" in why


def test_an_order_that_lists_a_call_twice_is_rejected():
    why = failures(2, solution(2, topological_order=_every_path))["topological_order"]
    assert "h = sin x" in why and "listed twice" in why


def test_a_post_order_not_reversed_is_rejected_with_the_reason():
    reference = solution(2).topological_order
    why = failures(2, solution(2, topological_order=lambda y: reference(y)[::-1]))["topological_order"]
    assert "the first call must be y._ctx (add)" in why and "reversed" in why


def _overwriting_backprop(y, leaves):
    """Like the reference, but a gradient arriving where another already waits replaces it."""
    order = solution(2).topological_order(y)
    pending, at_leaf = {y._ctx: y.ones_like()}, {}
    with tb.no_grad():
        for call in order:
            for edge, g in zip(call.edges, call.backward(pending.pop(call))):
                if edge is not None and g is not None:
                    (pending if isinstance(edge, tb.Function) else at_leaf)[edge] = g
    return [at_leaf.get(leaf) for leaf in leaves]


def test_a_backprop_that_overwrites_instead_of_summing_is_rejected_with_the_reason():
    why = failures(2, solution(2, backprop=_overwriting_backprop))["backprop"]
    assert "y = x * x + x * 3 at x = 2: d y / d x is 3.0, by hand 7.0" in why and "add up (+=, not =)" in why


def _backprop_in_breadth_first_order(y, leaves):
    """Sums correctly, but runs each call in breadth-first order: sin's backward runs before all shares arrived,
    and the late shares are lost."""
    pending, at_leaf = {y._ctx: y.ones_like()}, {}
    with tb.no_grad():
        for call in _breadth_first(y):
            for edge, g in zip(call.edges, call.backward(pending.pop(call))):
                if edge is not None and g is not None:
                    into = pending if isinstance(edge, tb.Function) else at_leaf
                    into[edge] = into[edge] + g if edge in into else g
    return [at_leaf.get(leaf) for leaf in leaves]


def test_a_backprop_in_the_wrong_order_is_rejected():
    why = failures(2, solution(2, backprop=_backprop_in_breadth_first_order))["backprop"]
    assert "x = 0.7" in why and "topological order" in why


def test_a_backprop_that_calls_backward_is_rejected():
    def lazy(y, leaves):
        y.backward()
        return [leaf.grad for leaf in leaves]
    assert "y.backward() ran" in failures(2, solution(2, backprop=lazy))["backprop"]
