"""Lesson 03 exercises. Fill in each function, then run:  python -m tinygrad_block check 03"""
import tinygrad_block as tb


def unbroadcast(grad: tb.Tensor, shape: tuple) -> tb.Tensor:
    """The gradient of a tensor of shape `shape` that was broadcast (expanded) to grad.shape, given the gradient
    `grad` of the broadcast result: grad summed over the axes the broadcast created or stretched, returned with
    exactly `shape`. Use Tensor ops (grad.sum(axis=..., keepdims=...), .reshape(...)).
    Example: a bias of shape (4,) added to every row of a (3, 4) tensor gets grad.sum(axis=0), shape (4,)."""
    raise NotImplementedError


def linear_backward(x: tb.Tensor, w: tb.Tensor, b: tb.Tensor, dout: tb.Tensor) -> tuple:
    """The gradients (dx, dw, db) of a Linear layer y = x @ w.mT + b, by hand (matmuls and sums, no autograd),
    given dout = dL/dy. x: (..., d_in), w: (d_out, d_in) stored (out, in) as nn.Linear stores it, b: (d_out,),
    dout: (..., d_out). dx has x's shape, dw has w's shape, db has b's shape."""
    raise NotImplementedError


def matmul_flops(a_shape: tuple, b_shape: tuple) -> int:
    """FLOPs of a @ b for a of shape (..., M, K) and b of shape (..., K, N), both with at least two axes, by the
    engine's rule: each of the output's numbers costs 2K (a multiply and an add per term). The axes before the last
    two are batch axes and broadcast as in numpy: (2, 1, M, K) @ (4, K, N) makes a (2, 4, M, N) output."""
    raise NotImplementedError
