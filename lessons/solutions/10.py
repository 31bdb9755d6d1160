"""Lesson 10 exercises: reference solutions."""
import numpy as np


def swiglu_backward(x, w_gate, w_up, w_down, grad_out):
    """Back through down, the gate's product, SiLU and the two projections; x fed both, so its gradients add."""
    z, u = x @ w_gate.T, x @ w_up.T                                       # (B, L, d_ff) each
    s = 0.5 * (1.0 + np.tanh(0.5 * z))                                    # sigmoid(z), without overflow
    act = z * s                                                           # SiLU(z)
    dm = grad_out @ w_down                                                # (B, L, d_ff)
    du = dm * act                                                         # product rule: the other factor
    dz = dm * u * s * (1.0 + z * (1.0 - s))                               # ... times SiLU'(z)

    def outer(d, a):                                                      # d^T a summed over every token
        return d.reshape(-1, d.shape[-1]).T @ a.reshape(-1, a.shape[-1])
    return dz @ w_gate + du @ w_up, outer(dz, x), outer(du, x), outer(grad_out, act * u)


def repeat_kv_backward(grad, n_rep):
    """Each KV head's gradient: the sum over its n_rep consecutive query heads."""
    B, H, L, d = grad.shape
    return grad.reshape(B, H // n_rep, n_rep, L, d).sum(axis=2)           # (B, H_kv, L, d)


def rope_backward(grad, cos, sin):
    """The transpose of the rotation, the rotation by minus the angle: the forward with the sine's sign flipped."""
    half = grad.shape[-1] // 2
    rotated = np.concatenate([-grad[..., half:], grad[..., :half]], axis=-1)   # rotate_half(grad)
    return grad * cos - rotated * sin
