"""`python -m tinygrad_block tour`: the tiny Llama-style block, forward and backward, with every gradient
computed three ways — autograd, the hand-derived backward pass, finite differences — side by side."""
from __future__ import annotations

from collections import Counter

import numpy as np

from . import manual
from .backend import Generator, float64
from .function import observe
from .gradcheck import numerical_grad
from .nn import TransformerBlock, preset
from .tensor import Tensor, randn

SAMPLES = 3  # finite differences check this many random entries of each tensor (all of them would take minutes)


def _rel(a, b) -> float:
    return float(np.abs(a - b).max() / max(np.abs(a).max(), np.abs(b).max(), 1e-300))


def _fd_entries(block, x: Tensor, dout: Tensor, name: str, rng) -> tuple[list, np.ndarray]:
    """Finite-difference gradients of sum(block(x) * dout) at SAMPLES random entries of x or one parameter."""
    target = x if name == "x" else dict(block.named_parameters())[name]
    saved = target.data
    entries = [tuple(int(rng.integers(s)) for s in target.shape) for _ in range(SAMPLES)]

    def loss(value: Tensor) -> Tensor:
        if name == "x":
            return (block(value) * dout).sum()
        target.data = value.data  # try this value of the one parameter
        return (block(x) * dout).sum()
    try:
        return entries, numerical_grad(loss, [target.detach()], 0, elements=entries)
    finally:
        target.data = saved


def run(out=print) -> dict:
    """Run the tour; returns the numbers it printed (the tests check them)."""
    cfg = preset("tiny")
    g, rng = Generator(0), np.random.default_rng(0)
    B, L = 2, 8
    block = TransformerBlock(cfg, generator=g, dtype=float64)
    x = randn(B, L, cfg.d_model, generator=g, dtype=float64, requires_grad=True)
    dout = randn(B, L, cfg.d_model, generator=g, dtype=float64)
    calls = {"forward": Counter(), "backward": Counter()}
    with observe(lambda fn, inputs, result, phase: calls[phase].update([fn.name])):
        y = block(x)
        y.backward(dout)

    params = {name: p.numpy() for name, p in block.named_parameters()}
    m_out, cache = manual.block_forward(x.numpy(), params, cfg)
    m_dx, m_grads = manual.block_backward(dout.numpy(), cache)

    out(f"tinygrad_block tour: the '{cfg.name}' block (d_model={cfg.d_model}, n_heads={cfg.n_heads}, "
        f"n_kv_heads={cfg.n_kv_heads}, d_ff={cfg.d_ff}), x of shape {x.shape}, float64")
    out("  h = x + attn(rmsnorm1(x));  out = h + swiglu(rmsnorm2(h))")
    for phase, counter in calls.items():
        listing = ", ".join(f"{name} x{n}" for name, n in sorted(counter.items(), key=lambda kv: -kv[1]))
        out(f"  {phase}: {sum(counter.values())} primitive calls ({listing})")
    out(f"  output: autograd vs hand-derived forward, max relative difference {_rel(y.numpy(), m_out):.1e}")
    out(f"  gradients of sum(out * dout); finite differences at {SAMPLES} random entries per tensor (h = 1e-3)")
    out(f"  {'tensor':<26}{'shape':>12}{'max |grad|':>12}{'vs manual':>11}{'vs finite diff':>16}")
    worst = {"manual": _rel(y.numpy(), m_out), "fd": 0.0}
    for name, auto, hand in [("x", x.grad.numpy(), m_dx)] + [
            (n, p.grad.numpy(), m_grads[n]) for n, p in block.named_parameters()]:
        entries, fd = _fd_entries(block, x, dout, name, rng)
        rel_manual = _rel(auto, hand)
        picked = np.array([auto[e] for e in entries]), np.array([fd[e] for e in entries])
        rel_fd = _rel(*picked)
        worst["manual"], worst["fd"] = max(worst["manual"], rel_manual), max(worst["fd"], rel_fd)
        out(f"  {name:<26}{str(auto.shape):>12}{np.abs(auto).max():>12.4f}{rel_manual:>11.1e}{rel_fd:>16.1e}")
    ok = worst["manual"] <= 1e-10 and worst["fd"] <= 1e-8
    out(f"  autograd, hand-derived and finite differences {'agree' if ok else 'DISAGREE'}: worst relative "
        f"difference {worst['manual']:.1e} to the manual pairs (bound 1e-10), {worst['fd']:.1e} to finite "
        f"differences (bound 1e-8)")
    return {"worst": worst, "ok": ok, "calls": calls, "out": y}
