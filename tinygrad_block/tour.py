"""`python -m tinygrad_block tour`: build a small computation, run backward, check every gradient against
finite differences, and print what happened along the way."""
from __future__ import annotations

import math
from collections import Counter

from .backend import Generator, float64
from .function import observe
from .gradcheck import numerical_grad
from .tensor import Tensor, randint, randn


def one_head_attention(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, targets: Tensor) -> Tensor:
    """A single causal attention head followed by a cross-entropy loss, written from Tensor ops."""
    L, d = x.shape                                               # x: (L, d)
    q, k, v = x @ w_q, x @ w_k, x @ w_v                          # (L, d) each
    scores = q @ k.T / math.sqrt(d)                              # (L, L)
    future = Tensor([[j > i for j in range(L)] for i in range(L)], device=x.backend)
    weights = scores.masked_fill(future, -1e9).softmax(axis=-1)  # each row sums to 1 over the past
    return (weights @ v).cross_entropy(targets)                  # scalar


def run(out=print) -> dict:
    """Run the tour; returns the numbers it printed (the tests check them)."""
    g = Generator(0)
    L, d = 5, 4
    x = randn(L, d, generator=g, dtype=float64)
    params = {name: (randn(d, d, generator=g, dtype=float64) * 0.5).requires_grad_() for name in ("w_q", "w_k", "w_v")}
    targets = randint(0, d, (L,), generator=g)

    calls = {"forward": Counter(), "backward": Counter()}
    with observe(lambda fn, inputs, result, phase: calls[phase].update([fn.name])):
        loss = one_head_attention(x, *params.values(), targets)
        loss.backward()

    out("tinygrad_block tour: one causal attention head, L=5 tokens, d=4, float64")
    out(f"  loss = cross_entropy(softmax(q k^T / sqrt(d) + causal mask) v, targets) = {loss.item():.6f}")
    for phase, counter in calls.items():
        listing = ", ".join(f"{name} x{n}" for name, n in sorted(counter.items()))
        out(f"  {phase}: {sum(counter.values())} primitive calls ({listing})")
    out("  gradients: autograd vs 4th-order central finite differences (h = 1e-3)")
    out(f"  {'param':<6}{'shape':>8}{'max |grad|':>14}{'max |diff|':>14}{'rel. error':>13}")
    worst = 0.0
    names = list(params)
    for i, name in enumerate(names):
        auto = params[name].grad.numpy()
        fd = numerical_grad(lambda *ps: one_head_attention(x, *ps, targets), list(params.values()), i)
        diff = abs(auto - fd).max()
        rel = diff / max(abs(auto).max(), 1e-300)
        worst = max(worst, rel)
        out(f"  {name:<6}{str(auto.shape):>8}{abs(auto).max():>14.6f}{diff:>14.2e}{rel:>13.2e}")
    verdict = "agree" if worst <= 1e-8 else "DISAGREE"
    out(f"  autograd and finite differences {verdict}: worst relative error {worst:.2e} (bound 1e-8)")
    return {"loss": loss.item(), "worst_rel_err": worst, "calls": calls}
