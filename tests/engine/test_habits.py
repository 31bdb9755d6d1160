"""PyTorch's habits on the Tensor and the switches: `t.size()` / `t.size(dim)` beside numpy's `t.size`, `view`,
`argmax` / `argmin`, `item`, and `no_grad` / `enable_grad` as decorators. PyTorch and numpy are the oracles, each
asked the same question on the same values."""
from __future__ import annotations

import copy
import json
import pickle
import threading

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

import tinygrad_block as tb

from conftest import DEVICES, msg


# ---------------------------------------------------------------- size
@pytest.mark.parametrize("shape", [(), (5,), (2, 3), (2, 1, 4), (0, 3)])
def test_size_is_numpys_count_and_pytorchs_shape_when_called(shape):
    t, ref = tb.zeros(shape), torch.zeros(shape)
    assert t.size == np.zeros(shape).size == ref.numel()                 # numpy: the number of elements
    assert t.size() == tuple(ref.size()) == shape and type(t.size()) is tuple
    for dim in range(-len(shape), len(shape)):
        assert t.size(dim) == ref.size(dim) == shape[dim]
        assert t.size(dim=dim) == ref.size(dim=dim)


@pytest.mark.parametrize("shape, dim", [((2, 3), 2), ((2, 3), -3), ((), 0), ((4,), 7)])
def test_size_of_an_axis_out_of_range_is_an_index_error_as_in_pytorch(shape, dim):
    with pytest.raises(IndexError):
        torch.zeros(shape).size(dim)
    with pytest.raises(IndexError, match=msg("size", f"dim {dim}", f"shape {shape}", "expected")):
        tb.zeros(shape).size(dim)


@pytest.mark.parametrize("dim", [1.0, True, "0"])
def test_size_of_something_that_is_not_an_axis_is_a_type_error(dim):
    with pytest.raises(TypeError, match=msg("size", repr(dim))):
        tb.zeros(2, 3).size(dim)


def test_size_still_works_everywhere_an_int_does():
    n = tb.zeros(3, 4).size
    assert n + 1 == 13 and n // 4 == 3 and f"{n:,}" == "12" and json.dumps({"n": n}) == '{"n": 12}'
    assert np.zeros(n).shape == (12,) and tb.zeros(n).shape == (12,) and range(n)[-1] == 11
    for again in (pickle.loads(pickle.dumps(n)), copy.deepcopy(n)):
        assert again == 12 and again() == (3, 4) and again(-1) == 4


# ---------------------------------------------------------------- view
@pytest.mark.parametrize("shape, new", [((2, 3), (3, 2)), ((2, 3), (-1,)), ((2, 3, 4), (6, -1)), ((4,), (2, 1, 2)),
                                        ((), (1, 1))])
def test_view_is_pytorchs_view(shape, new):
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    ours, theirs = tb.tensor(x).view(*new), torch.tensor(x).view(*new)
    assert ours.shape == tuple(theirs.shape)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    np.testing.assert_array_equal(tb.tensor(x).view(new).numpy(), theirs.numpy())     # a tuple, as in PyTorch


@pytest.mark.parametrize("new", [(4,), (2, -1, -1), (5, -1), (-2, 3)])
def test_view_refuses_what_pytorch_refuses_naming_view(new):
    with pytest.raises(RuntimeError):
        torch.zeros(2, 3).view(*new)
    with pytest.raises(ValueError, match=msg("view", "(2, 3)")):
        tb.zeros(2, 3).view(*new)


def test_view_of_a_transposed_tensor_works_where_pytorchs_asks_for_reshape():
    """The documented difference: PyTorch's view needs a layout it can share; tensors here are immutable."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with pytest.raises(RuntimeError, match="reshape"):
        torch.tensor(x).T.view(6)
    np.testing.assert_array_equal(tb.tensor(x).T.view(6).numpy(), torch.tensor(x).T.reshape(6).numpy())


def test_view_as_a_dtype_is_refused_naming_view():
    with pytest.raises(TypeError, match=msg("view", "a shape is a sequence of ints", "float16")):
        tb.zeros(2, 3).view(tb.float16)


def test_view_is_differentiable_as_reshape():
    x = tb.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    (x.view(3, 2) * tb.tensor(np.arange(6.0).reshape(3, 2))).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.arange(6.0).reshape(2, 3))     # d/dx sum(x * c) = c


# ---------------------------------------------------------------- argmax / argmin
def with_ties(shape, seed: int) -> np.ndarray:
    """Small integers as floats: every row has ties, so 'the first index' is really tested."""
    return np.random.default_rng(seed).integers(-3, 3, shape).astype(np.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axis", [None, 0, 1, -1, 2])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("which", ["argmax", "argmin"])
def test_argmax_and_argmin_are_numpys_first_index_on_ties(device, axis, keepdims, which):
    x = with_ties((4, 5, 6), seed=3)
    ours = getattr(tb.tensor(x, device=device), which)(axis=axis, keepdims=keepdims)
    want = getattr(np, which)(x, axis=axis, keepdims=keepdims)
    theirs = getattr(torch.tensor(x), which)(dim=axis, keepdim=keepdims)
    assert ours.dtype == tb.int64 and ours.device == tb.tensor(x, device=device).device        # cuda is cuda:0
    assert ours.shape == want.shape == tuple(theirs.shape)
    np.testing.assert_array_equal(ours.numpy(), want)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5),
                  elements=st.sampled_from([-1.5, 0.0, 2.0, np.inf, -np.inf, np.nan])), st.data())
def test_argmax_and_argmin_match_numpy_on_any_shape_with_infinities_and_nan(x, data):
    axis = data.draw(st.sampled_from([None, *range(-x.ndim, x.ndim)]))
    t = tb.tensor(x)
    np.testing.assert_array_equal(t.argmax(axis).numpy(), np.argmax(x, axis))           # NaN: the first NaN
    np.testing.assert_array_equal(t.argmin(axis).numpy(), np.argmin(x, axis))


@pytest.mark.parametrize("dtype, values", [
    (tb.int64, [[3, -2**63, 2**63 - 1, 2**63 - 1], [0, 0, -2**63, 1]]),
    (tb.int32, [[7, -8, 7, -8], [1, 2, 3, 4]]),
    (tb.bool_, [[False, True, True, False], [False, False, False, False]]),
    (tb.float16, [[1.0, 65504.0, -65504.0, 65504.0], [0.5, 0.5, 0.25, 0.25]]),
])
def test_argmax_and_argmin_of_ints_bools_and_float16_keep_their_extremes_exact(dtype, values):
    x = np.array(values, dtype=np.dtype(str(dtype)))
    t = tb.tensor(x, dtype=dtype)
    for axis in (None, 0, 1):
        np.testing.assert_array_equal(t.argmax(axis).numpy(), np.argmax(x, axis))
        np.testing.assert_array_equal(t.argmin(axis).numpy(), np.argmin(x, axis))


def test_argmax_of_a_tensor_that_requires_grad_has_no_graph_and_leaves_its_gradient_alone():
    x = tb.tensor([[1.0, 5.0, 2.0]], requires_grad=True)
    i = x.argmax(-1)
    assert not i.requires_grad and i.tolist() == [1]
    (x * 2.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[2.0, 2.0, 2.0]])


def test_argmax_on_the_shape_only_device_gives_the_shape():
    t = tb.zeros(3, 7, 5, device="meta")
    assert t.argmax(1).shape == (3, 5) and t.argmin(axis=-1, keepdims=True).shape == (3, 7, 1)
    assert t.argmax().shape == () and t.argmax(keepdims=True).shape == (1, 1, 1) and t.argmax().dtype == tb.int64


def test_argmax_of_a_0d_tensor_is_0_as_numpy():
    assert tb.tensor(4.0).argmax().item() == np.argmax(np.float32(4.0)) == 0


@pytest.mark.parametrize("call, fragments", [
    (lambda t: t.argmax(1), ("argmax", "axis 1", "(3, 0)", "empty")),
    (lambda t: t.argmin(), ("argmin", "(3, 0)", "empty")),
    (lambda t: t.argmax(2), ("argmax", "axis 2", "out of range")),
    (lambda t: t.argmin(dim=-3), ("argmin", "axis -3", "out of range")),
])
def test_argmax_refuses_an_empty_or_missing_axis_by_name(call, fragments):
    with pytest.raises(ValueError, match=msg(None, *fragments)):
        call(tb.zeros(3, 0))


# ---------------------------------------------------------------- item
def test_item_is_the_python_number_and_refuses_more_than_one_element():
    assert tb.tensor([[2.5]]).item() == torch.tensor([[2.5]]).item() == 2.5
    assert type(tb.tensor(7).item()) is int and type(tb.tensor(True).item()) is bool
    with pytest.raises(ValueError, match=msg("item", "(2,)")):
        tb.tensor([1.0, 2.0]).item()


# ---------------------------------------------------------------- no_grad and enable_grad as decorators
def grad_recorded() -> bool:
    """Whether an op run here records the graph."""
    return (tb.ones(1, requires_grad=True) * 2.0).requires_grad


@pytest.mark.parametrize("called", [True, False], ids=["no_grad()", "no_grad"])
def test_no_grad_decorates_a_function_with_or_without_parentheses(called):
    def double(x):
        """Twice x."""
        return x * 2.0, grad_recorded()
    quiet = tb.no_grad()(double) if called else tb.no_grad(double)
    y, recorded = quiet(tb.ones(3, requires_grad=True))
    assert not recorded and not y.requires_grad and y.tolist() == [2.0, 2.0, 2.0]
    assert grad_recorded() and double(tb.ones(1, requires_grad=True))[0].requires_grad   # outside: recording
    assert (quiet.__name__, quiet.__doc__) == ("double", "Twice x.")


def test_enable_grad_decorates_a_function_called_inside_no_grad():
    @tb.enable_grad
    def recording():
        return grad_recorded()

    @tb.enable_grad()
    def also_recording():
        return grad_recorded()

    with tb.no_grad():
        assert recording() and also_recording() and not grad_recorded()


def test_a_decorated_function_that_raises_leaves_recording_on():
    @tb.no_grad()
    def fails():
        raise KeyError("inside")
    with pytest.raises(KeyError):
        fails()
    assert grad_recorded()


def test_one_decorated_function_recursing_and_nested_restores_each_level():
    seen = []

    @tb.no_grad()
    def down(n):
        seen.append(grad_recorded())
        if n:
            down(n - 1)
            seen.append(inner())
        return grad_recorded()

    @tb.enable_grad()
    def inner():
        return grad_recorded()
    assert down(2) is False and seen == [False, False, False, True, True] and grad_recorded()


def test_a_decorated_function_in_one_thread_leaves_another_recording():
    inside, checked, seen = threading.Event(), threading.Event(), {}

    @tb.no_grad()
    def quiet():
        inside.set()
        checked.wait(10)
        seen["quiet"] = grad_recorded()

    def loud():
        inside.wait(10)
        seen["loud"] = grad_recorded()
        checked.set()
    threads = [threading.Thread(target=quiet), threading.Thread(target=loud)]
    [t.start() for t in threads]
    [t.join(10) for t in threads]
    assert seen == {"quiet": False, "loud": True}


def not_a_plain_function():
    def gen():
        yield grad_recorded()

    async def coroutine():
        return grad_recorded()

    async def agen():
        yield 1
    return {"generator": gen, "coroutine": coroutine, "async generator": agen, "int": 3}


@pytest.mark.parametrize("kind", list(not_a_plain_function()))
@pytest.mark.parametrize("switch", [tb.no_grad, tb.enable_grad])
def test_decorating_a_generator_an_async_function_or_a_non_function_is_refused(kind, switch):
    """Their bodies run a piece at a time after the call returns: the switch would not hold there."""
    fn = not_a_plain_function()[kind]
    for decorate in (switch(), switch):                                 # @tb.no_grad() and @tb.no_grad
        with pytest.raises(TypeError, match=msg(None, "no_grad", "plain function", "with tb.no_grad()")):
            decorate(fn)


def test_the_refusal_is_needed_the_generators_body_would_record():
    """What a plain wrapper would do to a generator: its body runs after the switch is gone."""
    def gen():
        yield grad_recorded()
    with tb.no_grad():
        made = gen()
    assert next(made) is True


def test_assign_gives_a_tensor_new_values_that_every_holder_sees():
    lin = tb.nn.Linear(3, 2, generator=tb.Generator(0), dtype=tb.float64)
    held, new = lin.weight, tb.randn(2, 3, generator=tb.Generator(1), dtype=tb.float64)
    assert held.assign(new) is held and lin.weight is held
    x = tb.ones(1, 3, dtype=tb.float64)
    assert np.array_equal(lin(x).numpy(), x.numpy() @ new.numpy().T)             # the module reads the new values


@pytest.mark.parametrize("value, names", [(lambda: tb.zeros(3, 2, dtype=tb.float64), "float64 (3, 2) on cpu"),
                                          (lambda: tb.zeros(2, 3), "float32 (2, 3) on cpu"),
                                          (lambda: np.zeros((2, 3)), "ndarray")])
def test_assign_refuses_values_of_another_shape_dtype_or_kind(value, names):
    t = tb.zeros(2, 3, dtype=tb.float64)
    with pytest.raises(ValueError) as e:
        t.assign(value())
    assert str(e.value) == f"assign: a tensor float64 (2, 3) on cpu takes the values of one just like it, got {names}"
    assert not t.numpy().any()
