"""Lesson 10 exercises. Fill in each function, then run:  python -m tinygrad_block check 10"""
import numpy as np


def swiglu_backward(x, w_gate, w_up, w_down, grad_out):
    """SwiGLU's backward by hand, in numpy (no autograd). The forward is
        out = (silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T,    silu(z) = z * sigmoid(z),
    with x: (B, L, d_model), w_gate and w_up: (d_ff, d_model), w_down: (d_model, d_ff) (weights stored
    (out, in), as in PyTorch). grad_out, (B, L, d_model), is the gradient of the loss with respect to out.
    Return (dx, dw_gate, dw_up, dw_down): numpy arrays of the shapes of x, w_gate, w_up and w_down."""
    raise NotImplementedError


def repeat_kv_backward(grad, n_rep):
    """repeat_kv's backward, in numpy. The forward turned k, (B, H_kv, L, d_head), into (B, H_kv * n_rep, L, d_head):
    query head h reads KV head h // n_rep. grad is the gradient of that repeated tensor,
    (B, H_kv * n_rep, L, d_head). Return the gradient of k, (B, H_kv, L, d_head)."""
    raise NotImplementedError


def rope_backward(grad, cos, sin):
    """RoPE's backward, in numpy. The forward is y = x * cos + rotate_half(x) * sin, where rotate_half maps the
    two halves (x1, x2) of the last axis to (-x2, x1): pair i is dimension i with dimension i + d_head/2.
    x, y and grad: (B, H, L, d_head); cos, sin: (L, d_head), the cosine and sine of each pair's angle at each
    position, written twice along the last axis (cat(c, c)). grad is the gradient of y; return that of x."""
    raise NotImplementedError
