"""Lesson 03 exercises: reference solutions."""
import math

import numpy as np

import tinygrad_block as tb


def unbroadcast(grad: tb.Tensor, shape: tuple) -> tb.Tensor:
    """Sum the new leading axes and the stretched size-1 axes (keeping them, as size 1), then drop the leading
    ones with a reshape: the backward of the engine's own Expand."""
    lead = grad.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and grad.shape[lead + i] != 1)
    summed = grad.sum(axis=axes, keepdims=True) if axes else grad
    return summed.reshape(*shape)


def linear_backward(x: tb.Tensor, w: tb.Tensor, b: tb.Tensor, dout: tb.Tensor) -> tuple:
    """dx = dY W;  dW = dY^T X over all rows;  db = the column sums of dY. Leading axes are flattened into rows."""
    rows_x = x.reshape(-1, x.shape[-1])                                  # (rows, d_in)
    rows_dout = dout.reshape(-1, dout.shape[-1])                         # (rows, d_out)
    dx = dout @ w                                                        # (..., d_in)
    dw = rows_dout.mT @ rows_x                                           # (d_out, d_in), w's shape
    db = rows_dout.sum(axis=0)                                           # (d_out,)
    return dx, dw, db


def matmul_flops(a_shape: tuple, b_shape: tuple) -> int:
    """2K for each number of the (batch..., M, N) output; the batch is the numpy broadcast of both batch shapes."""
    (M, K), N = a_shape[-2:], b_shape[-1]
    batch = np.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2]))
    return 2 * math.prod(batch) * M * N * K
