"""Bad inputs to Tensor's shape ops fail loudly (tensor.py): shapes that do not broadcast, matmul, concat and
stack, axes, reshape and expand, numpy arrays and lists where a Tensor belongs, and bad option values. The message
names the op, the shapes involved and what was expected; nothing is broadcast where numpy would refuse."""
from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import meta, msg
from hypothesis import given
from hypothesis import strategies as st

import tinygrad_block as tb


def test_msg_helper_requires_every_fragment():
    assert re.search(msg("add", "(2, 3)", "(4,)"), "add: shapes (2, 3) and (4,) differ")
    assert not re.search(msg("add", "(2, 3)", "(4,)"), "add: shapes (2, 3) and (5,) differ")
    assert not re.search(msg("sub", "(2, 3)"), "add: shapes (2, 3)")
    assert not re.search(msg("max", "(2, 3)"), "maximum: shapes (2, 3)")


# ================================================================ mismatched shapes
BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "pow": lambda a, b: a ** b,
    "maximum": lambda a, b: a.maximum(b),
    "minimum": lambda a, b: a.minimum(b),
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
}


@pytest.mark.parametrize("op", list(BINARY))
def test_elementwise_non_broadcastable_shapes(op):
    a, b = tb.ones(2, 3, requires_grad=True), tb.ones(4)
    with pytest.raises(ValueError, match=msg(op, "(2, 3)", "(4,)", "broadcast")):
        BINARY[op](a, b)


@pytest.mark.parametrize("shapes", [((3,), (4,)), ((2, 3), (3, 2)), ((5, 1, 3), (4, 2)), ((0,), (2,))],
                         ids=str)
def test_add_non_broadcastable_shapes_on_both_devices(shapes):
    for device in ("cpu", "meta"):
        a, b = (tb.zeros(*s, device=device) for s in shapes)
        with pytest.raises(ValueError, match=msg("add", *map(str, shapes))):
            a + b


def test_where_non_broadcastable_shapes():
    cond = tb.zeros(2, 3) > 0
    with pytest.raises(ValueError, match=msg("where", "(2, 3)", "(4,)")):
        tb.where(cond, tb.zeros(4), 0.0)


def test_expand_to_an_incompatible_shape():
    with pytest.raises(ValueError, match=msg("expand", "(2, 3)", "(4, 3)")):
        tb.zeros(2, 3).expand(4, 3)
    with pytest.raises(ValueError, match=msg("expand", "(3, 1)", "(3,)")):
        tb.zeros(3, 1).expand(3)


@pytest.mark.parametrize("a, b", [((2, 3), (4, 5)), ((3,), (4,)), ((2, 3, 4), (2, 5, 6)), ((2, 3), (4,)),
                                  ((4,), (3, 2))], ids=str)
def test_matmul_inner_dimension_mismatch(a, b):
    with pytest.raises(ValueError, match=msg("matmul", str(a), str(b))):
        tb.zeros(*a) @ tb.zeros(*b)


def test_matmul_non_broadcastable_batch_dims_names_the_operand_shapes():
    """The batch axes (2,) and (5,) clash; the message must show the shapes the user passed."""
    with pytest.raises(ValueError, match=msg("matmul", "(2, 3, 4)", "(5, 4, 6)")):
        tb.zeros(2, 3, 4) @ tb.zeros(5, 4, 6)


@pytest.mark.parametrize("a, b", [((), (2, 3)), ((2, 3), ()), ((), ())], ids=str)
def test_matmul_with_0d_operand(a, b):
    with pytest.raises(ValueError, match=msg("matmul", "0-d", str(a), str(b))):
        tb.zeros(*a) @ tb.zeros(*b)


def test_concat_shapes_differ_off_axis():
    with pytest.raises(ValueError, match=msg("concat", "(2, 3)", "(2, 4)", "axis 0")):
        tb.concat([tb.zeros(2, 3), tb.zeros(2, 4)])
    with pytest.raises(ValueError, match=msg("concat", "(2, 3)", "(3, 3)", "axis 1")):
        tb.concat([tb.zeros(2, 3), tb.zeros(3, 3)], axis=1)
    with pytest.raises(ValueError, match=msg("concat", "(2, 3)", "(2, 3, 1)")):
        tb.concat([tb.zeros(2, 3), tb.zeros(2, 3, 1)])


def test_concat_of_0d_and_of_nothing():
    with pytest.raises(ValueError, match=msg("concat", "0-d")):
        tb.concat([tb.zeros(()), tb.zeros(())])
    with pytest.raises(TypeError, match=msg("concat", "non-empty")):
        tb.concat([])


def test_stack_unequal_shapes():
    with pytest.raises(ValueError, match=msg("stack", "(2, 3)", "(3, 2)")):
        tb.stack([tb.zeros(2, 3), tb.zeros(3, 2)])


# ---- nothing is broadcast where numpy would refuse (and nothing refused that numpy allows)
_shape = st.lists(st.integers(0, 3), max_size=3).map(tuple)


def _outcome(fn, *args):
    """The result's shape, or ValueError if `fn(*args)` refuses the shapes."""
    try:
        return fn(*args).shape
    except ValueError:
        return ValueError


@given(_shape, _shape, st.booleans())
def test_elementwise_broadcasting_agrees_with_numpy(a, b, requires_grad):
    expected = _outcome(np.add, np.zeros(a), np.zeros(b))
    for device in ("cpu", "meta"):
        x = tb.zeros(*a, device=device, requires_grad=requires_grad)
        y = tb.zeros(*b, device=device)
        for name in ("add", "sub", "mul", "maximum", "lt"):
            got = _outcome(BINARY[name], x, y)
            assert got == expected, (name, device, a, b, got, expected)
        cond = tb.zeros(*a, device=device) > 0
        assert _outcome(tb.where, cond, y, 0.0) == expected, ("where", device, a, b)


@given(_shape, _shape)
def test_expand_agrees_with_numpy_broadcast_to(a, b):
    expected = _outcome(np.broadcast_to, np.zeros(a), b)
    for device in ("cpu", "meta"):
        x = tb.zeros(*a, device=device, requires_grad=True)
        assert _outcome(x.expand, b) == expected, (device, a, b)


_mm_shape = st.lists(st.integers(0, 3), min_size=0, max_size=4).map(tuple)


@given(_mm_shape, _mm_shape)
def test_matmul_shapes_agree_with_numpy(a, b):
    expected = _outcome(np.matmul, np.zeros(a), np.zeros(b))
    for device in ("cpu", "meta"):
        x, y = tb.zeros(*a, device=device), tb.zeros(*b, device=device)
        assert _outcome(tb.Tensor.matmul, x, y) == expected, (device, a, b)


def test_matmul_batched_by_matrix_with_empty_inner_axis():
    """numpy gives zeros of shape (2, 3, 4); the empty K axis must not break the batch-folding reshape."""
    out = tb.zeros(2, 3, 0) @ tb.zeros(0, 4)
    assert out.shape == (2, 3, 4)
    assert not out.numpy().any()


# ================================================================ bad axes
AXIS_OPS = {
    "sum": lambda x, a: x.sum(a),
    "max": lambda x, a: x.max(a),
    "min": lambda x, a: x.min(a),
    "mean": lambda x, a: x.mean(a),
    "var": lambda x, a: x.var(a),
    "logsumexp": lambda x, a: x.logsumexp(a),
    "softmax": lambda x, a: x.softmax(a),
    "log_softmax": lambda x, a: x.log_softmax(a),
    "squeeze": lambda x, a: x.squeeze(a),
    "concat": lambda x, a: tb.concat([x, x], axis=a),
}


@pytest.mark.parametrize("op", list(AXIS_OPS))
@pytest.mark.parametrize("axis", [2, -3, 5])
def test_axis_out_of_range(op, axis):
    with pytest.raises(ValueError, match=msg(op, f"axis {axis}", "-2 <= axis < 2")):
        AXIS_OPS[op](tb.zeros(2, 3), axis)


def test_unsqueeze_axis_out_of_range():
    """unsqueeze (and stack, which adds an axis) accept -3 <= axis < 3 for a 2-d tensor."""
    with pytest.raises(ValueError, match=msg("unsqueeze", "axis 3", "-3 <= axis < 3")):
        tb.zeros(2, 3).unsqueeze(3)


def test_stack_axis_out_of_range():
    with pytest.raises(ValueError, match=msg("stack", "axis 5", "-3 <= axis < 3")):
        tb.stack([tb.zeros(2, 3), tb.zeros(2, 3)], axis=5)


def test_axis_must_be_an_int():
    with pytest.raises(TypeError, match=msg("sum", "1.5")):
        tb.zeros(2, 3).sum(1.5)
    with pytest.raises(TypeError, match=msg("sum", "True")):
        tb.zeros(2, 3).sum(True)


@pytest.mark.parametrize("op", ["sum", "max", "min", "mean", "var"])
@pytest.mark.parametrize("axes", [(0, 0), (1, -1)], ids=str)
def test_repeated_axes(op, axes):
    with pytest.raises(ValueError, match=msg(op, "repeated", str(axes))):
        AXIS_OPS[op](tb.zeros(2, 3), axes)


@pytest.mark.parametrize("order", [(0, 0), (0,), (1, 1, 0)], ids=str)
def test_permute_not_a_permutation(order):
    with pytest.raises(ValueError, match=msg("permute", str(order), "(2, 3)", "permutation")):
        tb.zeros(2, 3).permute(order)


def test_permute_axis_out_of_range():
    with pytest.raises(ValueError, match=msg("permute", "axis 2", "-2 <= axis < 2")):
        tb.zeros(2, 3).permute(0, 2)


def test_squeeze_of_a_non_1_axis():
    with pytest.raises(ValueError, match=msg("squeeze", "(0,)", "(2, 1, 3)", "size 1")):
        tb.zeros(2, 1, 3).squeeze(0)
    with pytest.raises(ValueError, match=msg("squeeze", "(2, 1, 3)", "size 1")):
        tb.zeros(2, 1, 3).squeeze((1, 2))


@pytest.mark.parametrize("axes", [(0, 2), (-3, 1), (2, 2)], ids=str)
def test_transpose_out_of_range(axes):
    bad = next(a for a in axes if not -2 <= a < 2)
    with pytest.raises(ValueError, match=msg("transpose", f"axis {bad}", "-2 <= axis < 2")):
        tb.zeros(2, 3).transpose(*axes)


# ================================================================ reshape
@pytest.mark.parametrize("shape", [(4, 2), (7,), (2, 2), (0, 6)], ids=str)
def test_reshape_incompatible_size(shape):
    with pytest.raises(ValueError, match=msg("reshape", "(2, 3)", str(shape))):
        tb.zeros(2, 3).reshape(shape)


def test_reshape_minus_one_that_does_not_divide():
    with pytest.raises(ValueError, match=msg("reshape", "(2, 3)", "(-1, 4)")):
        tb.zeros(2, 3).reshape(-1, 4)


def test_reshape_two_minus_ones():
    with pytest.raises(ValueError, match=msg("reshape", "(-1, -1)", "-1")):
        tb.zeros(2, 3).reshape(-1, -1)
    with pytest.raises(ValueError, match=msg("reshape", "(2, -2)")):
        tb.zeros(2, 3).reshape(2, -2)


def test_reshape_same_size_on_meta_still_checked():
    with pytest.raises(ValueError, match=msg("reshape", "(2, 3)", "(5,)")):
        meta(2, 3).reshape(5)


# ---- expand: -1 keeps an existing axis's size (as in PyTorch); other negatives are refused
def test_expand_minus_one_keeps_the_axis():
    torch = pytest.importorskip("torch")
    x = np.arange(3.0).reshape(3, 1)
    for shape in [(-1, 4), (2, -1, 4), (2, -1, -1), (-1, -1), (5, 3, 1)]:
        got = tb.tensor(x).expand(*shape).numpy()
        np.testing.assert_array_equal(got, torch.tensor(x).expand(*shape).numpy())


@pytest.mark.parametrize("shape, bad, axis", [((-2, 3), -2, 0), ((-1, 3), -1, 0), ((2, -3), -3, 1),
                                              ((-1, -1, 3), -1, 0)], ids=str)
def test_expand_negative_size_refused(shape, bad, axis):
    with pytest.raises(ValueError, match=msg("expand", f"bad size {bad} at axis {axis}", str(shape), "(3,)",
                                             "-1 to keep")):
        tb.zeros(3).expand(*shape)


_target = st.lists(st.integers(-3, 3), max_size=4).map(tuple)


@given(_shape, _target)
def test_expand_agrees_with_torch(a, b):
    torch = pytest.importorskip("torch")
    try:
        expected = tuple(torch.zeros(a).expand(b).shape)
    except RuntimeError:
        expected = ValueError
    if expected is not ValueError and min(expected, default=0) < 0:
        expected = ValueError  # torch lets a -1 on a new axis through after a new 0 axis: (0, -1) from ()
    for device in ("cpu", "meta"):
        assert _outcome(tb.zeros(*a, device=device).expand, b) == expected, (device, a, b)


# ---- cross_entropy, numpy arrays, lists and options
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_cross_entropy_on_0d_logits(device):
    with pytest.raises(ValueError, match=msg("cross_entropy", "0-d", "(..., C)")):
        tb.tensor(1.5, device=device).cross_entropy(tb.tensor(0, device=device))


def test_numpy_view_is_read_only():
    x = tb.zeros(2, 3)
    with pytest.raises(ValueError, match="read-only"):
        x.numpy()[0, 0] = 1.0


NUMPY_MIXES = {
    "add": (lambda x, a: x + a, lambda x, a: a + x),
    "sub": (lambda x, a: x - a, lambda x, a: a - x),
    "mul": (lambda x, a: x * a, lambda x, a: a * x),
    "div": (lambda x, a: x / a, lambda x, a: a / x),
    "maximum": (lambda x, a: x.maximum(a), lambda x, a: tb.maximum(x, a)),
    "where": (lambda x, a: tb.where(x > 0, x, a), lambda x, a: tb.where(x > 0, a, x)),
    "matmul": (lambda x, a: x @ a, lambda x, a: x.matmul(a)),
}


@pytest.mark.parametrize("op", list(NUMPY_MIXES))
def test_numpy_array_in_arithmetic_raises(op):
    x = tb.zeros(2, 3)
    for fn in NUMPY_MIXES[op]:
        with pytest.raises(TypeError, match=msg(op, "ndarray", "Tensor")):
            fn(x, np.ones((2, 3), dtype=np.float32))


def test_numpy_array_on_the_left_of_matmul_raises():
    with pytest.raises(TypeError, match=msg(None, "ndarray", "Tensor")):
        np.ones((3, 2), dtype=np.float32) @ tb.zeros(2, 3)


def test_list_in_arithmetic_raises():
    with pytest.raises(TypeError, match=msg("add", "list", "tb.tensor")):
        tb.zeros(3) + [1.0, 2.0, 3.0]


@pytest.mark.parametrize("convert", [lambda t: t.item(), float, int, bool], ids=["item", "float", "int", "bool"])
def test_multi_element_to_python_number(convert):
    with pytest.raises(ValueError, match=msg(None, "(2, 3)")):
        convert(tb.zeros(2, 3))
    assert convert(tb.ones(1, 1)) == 1


def test_bad_option_values():
    x = tb.zeros(2, 3, requires_grad=True)
    with pytest.raises(ValueError, match=msg("gelu", "'erf'", "'none'", "'tanh'")):
        x.gelu("erf")
    with pytest.raises(ValueError, match=msg("cross_entropy", "'avg'", "'mean'")):
        x.cross_entropy(tb.tensor([0, 1]), reduction="avg")
    with pytest.raises(ValueError, match=msg("pow", "-2.0")):
        (-2.0) ** x
    with pytest.raises(ValueError, match=msg("pad", "(2, 3)")):
        x.pad(((1, 1),))
    with pytest.raises(ValueError, match=msg("pad", "(2, 3)")):
        x.pad(((0, 0), (-1, 0)))
