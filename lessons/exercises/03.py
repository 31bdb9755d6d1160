"""Lesson 03's exercises: a broadcast gradient summed back to its input's shape; a Linear layer's backward by hand;
the FLOPs of a batched matmul. Each check compares with an independent oracle (autograd through an explicit
expand and through x @ W^T + b, and the FLOPs the engine counts on the shape-only device) and says what is
wrong, with the numbers, naming the usual slips when it sees one."""
from __future__ import annotations

import itertools
import math

import numpy as np

import tinygrad_block as tb
from tinygrad_block.counting import count_flops

from .common import CheckFailed

def _shape_of(got) -> str:
    return f"{type(got).__name__} {getattr(got, 'shape', '')}".strip()


# ---------------------------------------------------------------- unbroadcast
PAIRS = [((4,), (3, 4)), ((1, 4), (3, 4)), ((3, 1), (3, 3)), ((3, 1), (3, 4)), ((3, 1), (2, 3, 4)),
         ((2, 1, 4), (2, 3, 4)), ((1, 1, 1), (2, 3, 4)), ((), (2, 3)), ((5, 1), (2, 3, 5, 4)), ((2, 3, 4), (2, 3, 4))]


def _autograd_unbroadcast(grad: np.ndarray, shape: tuple) -> np.ndarray:
    """The oracle: autograd's gradient of a tensor of `shape` expanded to grad.shape, under upstream `grad`."""
    small = tb.zeros(*shape, dtype=tb.float64, requires_grad=True)
    (small.expand(*grad.shape) * tb.tensor(grad, dtype=tb.float64)).sum().backward()
    return small.grad.numpy()


def _summed_axes(shape: tuple, big: tuple) -> tuple:
    """The axes of `big` that broadcasting `shape` to it created (leading) or stretched (size 1 to more)."""
    lead = len(big) - len(shape)
    return tuple(i for i in range(len(big)) if i < lead or (shape[i - lead] == 1 and big[i] != 1))


def _wrong_axes(grad: np.ndarray, values: np.ndarray) -> tuple | None:
    """The set of axes whose sum gives the learner's numbers, when it is not the right one (a slip to name)."""
    for n in range(grad.ndim + 1):
        for axes in itertools.combinations(range(grad.ndim), n):
            total = grad.sum(axis=axes)
            if total.size == values.size and np.allclose(total.reshape(values.shape), values):
                return axes
    return None


def check_unbroadcast(solution) -> None:
    """Each shape pair against autograd through an explicit expand, with a random upstream gradient."""
    r = np.random.default_rng(0)
    for shape, big in PAIRS:
        grad = r.integers(-4, 5, big).astype(np.float64)
        want = _autograd_unbroadcast(grad, shape)
        got = solution.unbroadcast(tb.tensor(grad, dtype=tb.float64), shape)
        what = f"unbroadcast(grad of shape {big}, {shape})"
        if not isinstance(got, tb.Tensor):
            raise CheckFailed(f"{what} must return a Tensor of shape {shape}; got {_shape_of(got)}")
        values = got.numpy()
        if got.shape != shape:
            hint = ""
            if values.size == want.size and np.allclose(values.reshape(want.shape), want):
                hint = (f": the numbers are right, the shape is not; keep the stretched size-1 axes "
                        f"(keepdims=True) and drop only the new leading ones, to get {shape}")
            raise CheckFailed(f"{what} has shape {got.shape}, expected {shape}{hint}")
        if not np.allclose(values, want, rtol=0, atol=1e-12):
            axes = _wrong_axes(grad, values)
            hint = (f"; that is grad summed over axes {axes}, but the broadcast created or stretched axes "
                    f"{_summed_axes(shape, big)}" if axes is not None else "")
            raise CheckFailed(f"{what} = {values.tolist()}, expected {want.tolist()} (autograd through an "
                              f"explicit expand){hint}")


# ---------------------------------------------------------------- linear_backward
def _linear_grads(x: np.ndarray, w: np.ndarray, b: np.ndarray, dout: np.ndarray):
    """The oracle: autograd's gradients of sum((x @ w^T + b) * dout)."""
    xt, wt, bt = (tb.tensor(v, dtype=tb.float64, requires_grad=True) for v in (x, w, b))
    ((xt @ wt.mT + bt) * tb.tensor(dout, dtype=tb.float64)).sum().backward()
    return xt.grad.numpy(), wt.grad.numpy(), bt.grad.numpy()


def _linear_hint(name: str, got_shape: tuple, x: np.ndarray, w: np.ndarray) -> str:
    d_out, d_in = w.shape
    if name == "dw" and got_shape == (d_in, d_out):
        return (f"; that is the gradient of W^T: W is stored (out, in) = {w.shape}, so dW = dY^T X, "
                "with every leading axis of dY and X flattened into rows")
    if name == "dw" and len(got_shape) > 2 and got_shape[-2:] == (d_out, d_in):
        return "; sum over the batch too: flatten every leading axis of dout and x into rows, then dW = dY^T X"
    if name == "db":
        return "; db sums dout over every axis but the last (each row added the same bias)"
    if name == "dx":
        return "; dx = dY W, a (..., d_out) @ (d_out, d_in) product"
    return ""


def check_linear_backward(solution) -> None:
    """A 2-d and a 3-d input against autograd of x @ w^T + b, with a random upstream gradient."""
    r = np.random.default_rng(1)
    for x_shape in ((5, 6), (2, 5, 6)):
        x, w, b = r.standard_normal(x_shape), r.standard_normal((4, 6)), r.standard_normal(4)
        dout = r.standard_normal(x_shape[:-1] + (4,))
        wanted = _linear_grads(x, w, b, dout)
        got = solution.linear_backward(*(tb.tensor(v, dtype=tb.float64) for v in (x, w, b, dout)))
        what = f"linear_backward for x of shape {x_shape}, w (4, 6)"
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise CheckFailed(f"{what}: return a tuple (dx, dw, db); got {_shape_of(got)}")
        for name, g, want in zip(("dx", "dw", "db"), got, wanted):
            if not isinstance(g, tb.Tensor):
                raise CheckFailed(f"{what}: {name} must be a Tensor of shape {want.shape}; got {_shape_of(g)}")
            if g.shape != want.shape:
                raise CheckFailed(f"{what}: {name} has shape {g.shape}, expected {want.shape}"
                                  + _linear_hint(name, g.shape, x, w))
            err = np.abs(g.numpy() - want).max()
            if not err < 1e-12:
                raise CheckFailed(f"{what}: {name} is off by up to {err:.3g} from autograd"
                                  + _linear_hint(name, g.shape, x, w))


# ---------------------------------------------------------------- matmul_flops
MATMULS = [((2, 3), (3, 4)), ((16, 32), (32, 64)), ((8, 16, 32), (8, 32, 64)), ((8, 16, 32), (32, 64)),
           ((16, 32), (8, 32, 64)), ((2, 1, 16, 32), (1, 4, 32, 64)), ((3, 1, 5, 7), (6, 7, 2)),
           ((4096, 4096), (4096, 11008))]


def _counted(a_shape: tuple, b_shape: tuple) -> int:
    """The oracle: the matmul FLOPs the engine counts for a @ b on the shape-only device."""
    with count_flops() as fc:
        tb.zeros(*a_shape, device="meta") @ tb.zeros(*b_shape, device="meta")
    return fc.total("forward", matmul_only=True)


def check_matmul_flops(solution) -> None:
    for a_shape, b_shape in MATMULS:
        want = _counted(a_shape, b_shape)
        got = solution.matmul_flops(a_shape, b_shape)
        what = f"matmul_flops({a_shape}, {b_shape})"
        if not isinstance(got, (int, np.integer)) or isinstance(got, bool):
            raise CheckFailed(f"{what} must return an int; got {type(got).__name__} {got!r}")
        if got == want:
            continue
        (M, K), N = a_shape[-2:], b_shape[-1]
        batch_a, batch_b = math.prod(a_shape[:-2]), math.prod(b_shape[:-2])
        batch = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
        slips = [(2 * M * N * K, f"the batch axes are missing: the output's batch {batch}, the numpy broadcast of "
                                 f"{a_shape[:-2]} and {b_shape[:-2]}, holds {math.prod(batch)} matrices, each one "
                                 "more product"),
                 (M * N * (2 * K - 1), "each output is K multiplications and K - 1 additions, but the convention "
                                       "(and the engine) counts 2K: one multiply-add is 2 FLOPs"),
                 (2 * batch_a * M * N * K, "the batch axes broadcast: the output's batch is their numpy "
                                           "broadcast, not a's batch alone"),
                 (2 * batch_a * batch_b * M * N * K, "the batch axes broadcast, they do not multiply: (8,) and "
                                                     "(8,) make a batch of 8, not 64"),
                 (want // 2, "that is exactly half: one FLOP per multiply-add; the convention (and the engine) "
                             "counts the multiply and the add, 2 FLOPs")]
        hint = next((why for flops, why in slips if got == flops), "")
        raise CheckFailed(f"{what} = {got:,}, the engine counts {want:,}" + (f": {hint}" if hint else ""))


CHECKS = [("unbroadcast", check_unbroadcast), ("linear_backward", check_linear_backward),
          ("matmul_flops", check_matmul_flops)]
