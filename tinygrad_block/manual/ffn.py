"""The feed-forward sublayer: gated (SwiGLU, Llama; GeGLU, Gemma) and the classic two-matrix FFN (GELU,
GELU-tanh, ReLU).

Each projection is its own argument, a `Linear(weight, bias, adapter)` named as the FFN module names it
(gate_proj, up_proj, down_proj); backward returns one gradient dict per projection, as linear_backward does.
"""
from __future__ import annotations

from .activations import ACTIVATIONS
from .linear import Linear, linear_backward, linear_forward


def swiglu_forward(x, gate_proj: Linear, up_proj: Linear, down_proj: Linear, frozen: bool = False,
                   act: str = "silu"):
    """out = down(act(gate(x)) * up(x))      x: (B, L, d_model) -> gate, up: (B, L, d_ff) -> (B, L, d_model)
    act: 'silu' (SwiGLU) or any of ACTIVATIONS ('gelu_tanh': Gemma's GeGLU); frozen: as in linear_forward, for
    each projection."""
    act_forward, _ = activation(act, "swiglu_forward")
    gate, c_gate = linear_forward(x, *gate_proj, frozen=frozen)          # (B, L, d_ff)
    up, c_up = linear_forward(x, *up_proj, frozen=frozen)                # (B, L, d_ff)
    a, c_act = act_forward(gate)
    out, c_down = linear_forward(a * up, *down_proj, frozen=frozen)      # (B, L, d_model)
    return out, {"gate_proj": c_gate, "up_proj": c_up, "act_name": act, act: c_act, "act": a, "up": up,
                 "down_proj": c_down}                            # act: the activation's cache, under its name


def swiglu_backward(dout, cache):
    """d_hidden = dout W_down;   d_up = d_hidden * act(gate);   d_gate = act'(gate) * (d_hidden * up);
    dx = d_gate W_gate + d_up W_up   (x feeds both branches, so their gradients add).
    Returns (dx, {'gate_proj': ..., 'up_proj': ..., 'down_proj': ...})."""
    c = cache
    _, act_backward = activation(c["act_name"], "swiglu_backward")
    d_hidden, g_down = linear_backward(dout, c["down_proj"])             # (B, L, d_ff)
    d_gate = act_backward(d_hidden * c["up"], c[c["act_name"]])
    dx_gate, g_gate = linear_backward(d_gate, c["gate_proj"])
    dx_up, g_up = linear_backward(d_hidden * c["act"], c["up_proj"])
    return dx_gate + dx_up, {"gate_proj": g_gate, "up_proj": g_up, "down_proj": g_down}


def activation(act: str, op: str):
    """(forward, backward) of the activation named `act`, or a ValueError naming `op` and listing the names."""
    if act not in ACTIVATIONS:
        raise ValueError(f"{op}: unknown activation {act!r}; expected one of {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[act]


def ffn_forward(x, up_proj: Linear, down_proj: Linear, act: str = "gelu", frozen: bool = False):
    """out = down(act(up(x))), act in 'gelu' | 'gelu_tanh' | 'relu'      (B, L, d_model) -> (B, L, d_ff) -> back"""
    act_forward, _ = activation(act, "ffn_forward")
    up, c_up = linear_forward(x, *up_proj, frozen=frozen)                # (B, L, d_ff)
    hidden, c_act = act_forward(up)
    out, c_down = linear_forward(hidden, *down_proj, frozen=frozen)      # (B, L, d_model)
    return out, {"act_name": act, "up_proj": c_up, "act": c_act, "down_proj": c_down}


def ffn_backward(dout, cache):
    """d_hidden = dout W_down;   d_up = act'(up) * d_hidden;   dx = d_up W_up.
    Returns (dx, {'up_proj': ..., 'down_proj': ...})."""
    c = cache
    _, act_backward = ACTIVATIONS[c["act_name"]]
    d_hidden, g_down = linear_backward(dout, c["down_proj"])             # (B, L, d_ff)
    dx, g_up = linear_backward(act_backward(d_hidden, c["act"]), c["up_proj"])
    return dx, {"up_proj": g_up, "down_proj": g_down}
