"""backward() (autograd.py) and gradcheck (gradcheck.py): a missing or mis-shaped gradient, a freed graph, and a
gradcheck with nothing to check or in float32 fail with a message that says what was expected."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import f64, msg

import tinygrad_block as tb


# ================================================================ backward
def test_backward_on_non_scalar_without_grad():
    y = tb.ones(2, 3, requires_grad=True) * 2.0
    with pytest.raises(RuntimeError, match=msg("backward", "(2, 3)", "grad")):
        y.backward()


def test_backward_on_a_tensor_that_does_not_require_grad():
    with pytest.raises(RuntimeError, match=msg("backward", "does not require grad")):
        (tb.ones(2, 3) * 2.0).sum().backward()
    with pytest.raises(RuntimeError, match=msg("backward", "does not require grad")):
        tb.ones(()).backward()


def test_backward_with_a_grad_of_the_wrong_shape():
    y = tb.ones(2, 3, requires_grad=True) * 2.0
    with pytest.raises(ValueError, match=msg("backward", "(3,)", "(2, 3)")):
        y.backward(tb.ones(3))
    with pytest.raises(ValueError, match=msg("backward", "(3, 2)", "(2, 3)")):
        y.backward(tb.ones(3, 2))


def test_backward_with_a_grad_of_the_wrong_dtype_or_type():
    y = tb.ones(2, 3, requires_grad=True) * 2.0
    with pytest.raises(TypeError, match=msg("backward", "float32", "float64")):
        y.backward(f64(2, 3))
    with pytest.raises(TypeError, match=msg("backward", "ndarray", "Tensor")):
        y.backward(np.ones((2, 3), dtype=np.float32))


def test_second_backward_through_a_freed_graph():
    x = tb.ones(2, 3, requires_grad=True)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match=msg("backward", "retain_graph", "freed")):
        y.backward()


def test_backward_through_a_subgraph_freed_by_another_output():
    x = tb.ones(2, 3, requires_grad=True)
    z = x.exp()
    z.sum().backward()
    with pytest.raises(RuntimeError, match=msg("backward", "retain_graph")):
        (z * 3.0).sum().backward()


def test_retain_graph_allows_a_second_backward_that_accumulates():
    x = tb.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert x.grad.tolist() == [4.0, 8.0, 12.0]
    with pytest.raises(RuntimeError, match=msg("backward", "retain_graph")):
        y.backward()


def test_gradcheck_with_a_float32_input():
    x = tb.ones(3, requires_grad=True)
    with pytest.raises(TypeError, match=msg("gradcheck", "input 0", "float32", "float64")):
        tb.gradcheck(lambda a: a * 2.0, x)


def test_gradcheck_with_nothing_to_check():
    with pytest.raises(ValueError, match=msg("gradcheck", "requires_grad")):
        tb.gradcheck(lambda a: a * 2.0, tb.ones(3, dtype=tb.float64))
