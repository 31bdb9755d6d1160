"""Autograd semantics: reuse, diamonds, deep graphs, no_grad, detach, backward twice, accumulation, memory."""
import gc
import tracemalloc
import weakref

import numpy as np
import pytest

import tinygrad_block as tb
from tinygrad_block.autograd import toposort


def leaf(values, device="cpu"):
    return tb.tensor(np.asarray(values, dtype=np.float64), requires_grad=True, device=device)


def test_reuse_accumulates_x_times_x(device):
    x = leaf([1.5, -2.0, 3.0], device=device)
    (x * x).sum().backward()                       # d/dx sum x^2 = 2x
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, -4.0, 6.0])


def test_reuse_accumulates_x_plus_x(device):
    x = leaf([1.5, -2.0], device=device)
    (x + x + x).sum().backward()                   # d/dx 3x = 3
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])


def test_diamond(device):
    # y = 2x feeds two branches, z = y*y + exp(y): dz/dx = 2 * (2y + e^y)
    x = leaf([0.3, -0.7], device=device)
    y = x * 2.0
    (y * y + y.exp()).sum().backward()
    yv = 2 * np.array([0.3, -0.7])
    np.testing.assert_allclose(x.grad.numpy(), 2 * (2 * yv + np.exp(yv)), rtol=1e-15)


def test_two_leaves_share_a_graph(device):
    a, b = leaf([2.0], device=device), leaf([5.0], device=device)
    (a * b + a).sum().backward()                   # d/da = b + 1, d/db = a
    assert a.grad.item() == 6.0 and b.grad.item() == 2.0


def test_broadcast_gradient_sums_over_expanded_axes(device):
    w = leaf([[1.0, 2.0, 3.0]], device=device)                    # (1, 3), broadcast over 4 rows
    x = leaf(np.arange(12.0).reshape(4, 3), device=device)
    (x * w).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), x.numpy().sum(axis=0, keepdims=True))
    np.testing.assert_array_equal(x.grad.numpy(), np.broadcast_to(w.numpy(), (4, 3)))


def test_deep_chain_of_100k_ops_has_no_recursion_limit():
    x = leaf([1.0])
    y = x
    for _ in range(100_000):
        y = y * 1.0 + 0.0
    y.sum().backward()
    assert x.grad.item() == 1.0


def test_toposort_is_deterministic_and_ordered(device):
    def graph():
        x = leaf([1.0, 2.0], device=device)
        a, b = x.exp(), x.sin()
        return (a * b + a.log()).sum()
    names = [[fn.name for fn in toposort(graph()._ctx)] for _ in range(3)]
    assert names[0] == names[1] == names[2]
    out = graph()
    order = toposort(out._ctx)
    position = {fn: i for i, fn in enumerate(order)}
    for fn in order:  # every Function comes before the Functions that made its inputs
        for edge in fn.edges:
            if isinstance(edge, tb.Function):
                assert position[fn] < position[edge]


def test_no_grad_records_nothing(device):
    x = leaf([1.0, 2.0], device=device)
    with tb.no_grad():
        y = (x * 3.0).exp()
        with tb.enable_grad():
            z = x * 2.0
    assert not y.requires_grad and y.is_leaf
    assert z.requires_grad and not z.is_leaf
    w = x * 2.0                                    # recording is back on after the block
    assert w.requires_grad


def test_detach_stops_the_gradient(device):
    x = leaf([2.0], device=device)
    y = x * x
    (y.detach() * x).sum().backward()              # the detached factor is a constant 4
    assert x.grad.item() == 4.0
    assert not y.detach().requires_grad


def test_leaf_without_requires_grad_gets_no_grad(device):
    x, c = leaf([1.0], device=device), tb.tensor([3.0], dtype=tb.float64, device=device)
    (x * c).sum().backward()
    assert c.grad is None and x.grad.item() == 3.0


def test_grads_accumulate_across_backward_calls_until_reset(device):
    x = leaf([1.0, 2.0], device=device)
    (x * 3.0).sum().backward()
    (x * 4.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [7.0, 7.0])
    x.grad = None
    (x * 5.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [5.0, 5.0])


def test_backward_twice_raises_once_the_graph_is_freed(device):
    x = leaf([1.0, 2.0], device=device)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])   # the failed call changed nothing


def test_backward_twice_with_retain_graph_accumulates(device):
    x = leaf([1.0, 2.0], device=device)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 8.0])


def test_backward_releases_saved_tensors_and_edges(device):
    x = leaf([1.0, 2.0], device=device)
    y = x.exp()
    fn = y._ctx
    assert [t.shape for t in fn.saved()] == [(2,)]   # Exp saved its output
    y.sum().backward()
    assert fn.edges is None and fn.saved() == []


def test_graph_does_not_hold_intermediates_that_no_backward_needs(device):
    x = leaf(np.ones(4), device=device)
    h = x * 2.0                 # Mul by a constant saves only the constant
    h_ref = weakref.ref(h)
    y = (h + 1.0).sum()         # Add saves nothing
    del h
    assert h_ref() is None      # freed by reference counting alone: no cycle holds it
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0] * 4)


def test_retain_grad_keeps_an_intermediate_gradient(device):
    x = leaf([1.0, 2.0], device=device)
    h = (x * 3.0).retain_grad()
    (h * h).sum().backward()
    np.testing.assert_array_equal(h.grad.numpy(), 2 * h.numpy())
    np.testing.assert_array_equal(x.grad.numpy(), 6 * h.numpy())


def test_backward_with_explicit_grad_on_non_scalar(device):
    x = leaf([1.0, 2.0, 3.0], device=device)
    y = x * x
    y.backward(tb.tensor([1.0, 0.5, 0.0], dtype=tb.float64, device=device))
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 0.0])


def test_backward_on_a_leaf(device):
    x = leaf([1.0, 2.0], device=device)
    x.backward(tb.tensor([3.0, 4.0], dtype=tb.float64, device=device))
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 4.0])


def test_gradients_keep_the_dtype_float32_by_default(device):
    x = tb.tensor([1.0, 2.0], requires_grad=True, device=device)
    assert x.dtype == tb.float32
    (x * x).sum().backward()
    assert x.grad.dtype == tb.float32 and not x.grad.requires_grad


def test_memory_is_flat_over_a_training_loop():
    """2,000 iterations of forward, backward and an SGD step: memory after the last equals memory after
    the 1,000th, once the interpreter's freelists have warmed up (no graph, activation or gradient outlives
    its iteration: one leaked 4x8 activation per step would add over 100 KiB). gc is off, so only
    reference counting frees memory: a reference cycle would show up as growth."""
    g = tb.Generator(0)
    w = tb.randn(8, 8, generator=g, requires_grad=True)
    x = tb.randn(4, 8, generator=g)
    targets = tb.tensor([1, 0, 3, 2])

    def step():
        nonlocal w
        loss = (x @ w).relu().cross_entropy(targets)
        loss.backward()
        with tb.no_grad():
            w = (w - w.grad * 0.01).requires_grad_()   # a new leaf, as an optimizer step makes

    gc.collect()
    gc.disable()
    try:
        tracemalloc.start()
        for i in range(2000):
            step()
            if i == 999:
                warm = tracemalloc.get_traced_memory()[0]
        after_2000 = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
    finally:
        gc.enable()
    assert after_2000 - warm < 4 * 1024, (warm, after_2000)


def test_gradcheck_reports_the_worst_element(device):
    x = leaf([0.5, 1.0, 2.0], device=device)

    class WrongSquare(tb.Function):
        """x^2 with a deliberately wrong backward: 3x instead of 2x"""
        def forward(self, a):
            self.a = a
            return self.backend.mul(a.data, a.data)

        def backward(self, g):
            return (g * self.a * 3.0,)

    with pytest.raises(tb.GradcheckError, match=r"element \(2,\)") as err:
        tb.gradcheck(lambda t: WrongSquare.apply(t).sum(), x)
    assert "autograd 6.0 vs finite differences 3.99999999999" in str(err.value)


def test_gradcheck_passes_on_a_correct_function_and_leaves_grads_alone(device):
    x = leaf([0.3, 0.9], device=device)
    x.grad = tb.tensor([7.0, 7.0], dtype=tb.float64, device=device)
    assert tb.gradcheck(lambda t: (t.sin() * t.exp()).sum() + t.sum() ** 2.0, x)
    np.testing.assert_array_equal(x.grad.numpy(), [7.0, 7.0])
