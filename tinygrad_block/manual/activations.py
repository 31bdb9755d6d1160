"""Softmax and the FFN nonlinearities (SiLU, GELU in its erf and tanh forms, ReLU), forward and backward.

Each backward multiplies dout by the local derivative, written from values the forward kept.
"""
from __future__ import annotations

import math

from .common import erf, xp_of

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
GELU_TANH_C = 0.044715


def softmax_forward(s):
    """p = exp(s - max(s)) / sum(exp(s - max(s))) over the last axis (the shift changes nothing but overflow;
    -inf entries, e.g. a causal mask, get p = 0)."""
    e = xp_of(s).exp(s - s.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    return p, p


def softmax_backward(dout, cache):
    """ds = p * (dp - sum(dp * p))    (Jacobian diag(p) - p p^T applied to dp)"""
    p = cache
    return p * (dout - (dout * p).sum(axis=-1, keepdims=True))


def sigmoid(z):
    """sigma(z) = 1 / (1 + exp(-z)), written as (1 + tanh(z/2)) / 2, which never overflows."""
    return 0.5 * (1.0 + xp_of(z).tanh(0.5 * z))


def silu_forward(z):
    """silu(z) = z * sigma(z)"""
    s = sigmoid(z)
    return z * s, (z, s)


def silu_backward(dout, cache):
    """silu'(z) = sigma(z) + z sigma(z) (1 - sigma(z)) = sigma(z) (1 + z (1 - sigma(z)))"""
    z, s = cache
    return dout * s * (1.0 + z * (1.0 - s))


def gelu_forward(z):
    """gelu(z) = z Phi(z) = z/2 (1 + erf(z / sqrt2))   (exact form; BERT, torch's default)"""
    cdf = 0.5 * (1.0 + erf(z * (1.0 / math.sqrt(2.0))))
    return z * cdf, (z, cdf)


def gelu_backward(dout, cache):
    """gelu'(z) = Phi(z) + z phi(z),   phi(z) = exp(-z^2 / 2) / sqrt(2 pi)"""
    z, cdf = cache
    pdf = xp_of(z).exp(-0.5 * z * z) * (1.0 / math.sqrt(2.0 * math.pi))
    return dout * (cdf + z * pdf)


def gelu_tanh_forward(z):
    """gelu_tanh(z) = z/2 (1 + tanh(u)),  u = sqrt(2/pi) (z + 0.044715 z^3)   (GPT-2's approximation)"""
    t = xp_of(z).tanh(SQRT_2_OVER_PI * (z + GELU_TANH_C * z * z * z))
    return 0.5 * z * (1.0 + t), (z, t)


def gelu_tanh_backward(dout, cache):
    """gelu_tanh'(z) = (1 + t)/2 + z/2 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 z^2),  t = tanh(u)"""
    z, t = cache
    du = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_TANH_C * z * z)
    return dout * (0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * du)


def relu_forward(z):
    """relu(z) = max(z, 0)"""
    on = z > 0
    return z * on, on


def relu_backward(dout, cache):
    """relu'(z) = 1 where z > 0, else 0 (0 at the kink, as torch)"""
    return dout * cache


# name -> (forward, backward), as the FFN config names the activation
ACTIVATIONS = {
    "silu": (silu_forward, silu_backward),
    "gelu": (gelu_forward, gelu_backward),
    "gelu_tanh": (gelu_tanh_forward, gelu_tanh_backward),
    "relu": (relu_forward, relu_backward),
}
