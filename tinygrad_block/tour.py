"""`python -m tinygrad_block tour`: the tiny Llama-style block, forward and backward, with every gradient
computed three ways — autograd, the hand-derived backward pass, finite differences — side by side."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from . import accounting, manual
from .dtypes import float64
from .generator import Generator
from .counting import count_flops
from .trace import observe
from .gradcheck import numerical_grad, rel_err
from .explorer_page import page_of
from .graph import record_graph, render
from .nn import TransformerBlock, preset
from .tensor import Tensor, randn

SAMPLES = 3  # finite differences check this many random entries of each tensor (all of them would take minutes)


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


def _flop_table(fc, cfg, B, L, out) -> int:
    """FLOPs per module and phase, counted, beside the closed forms of `accounting`; returns the difference."""
    out("  FLOPs, counted by the engine's rules (matmul 2MNK, 1 per elementwise op; see function.py)")
    out(f"  {'module':<14}{'fwd matmul':>14}{'fwd all':>14}{'bwd matmul':>14}{'bwd all':>14}")
    for scope, name in [("block.norm1", "norm1"), ("block.attn", "attn"), ("block.norm2", "norm2"),
                        ("block.ffn", "ffn"), ("block", "block total")]:
        row = [fc.total(ph, scope=scope, matmul_only=mm) for ph in ("forward", "backward") for mm in (True, False)]
        out(f"  {name:<14}" + "".join(f"{n:>14,}" for n in row))
    closed = [accounting.block_forward_flops(cfg, L, B, matmul_only=True),
              accounting.block_forward_flops(cfg, L, B, matmul_only=False),
              accounting.block_backward_flops(cfg, L, B, matmul_only=True),
              accounting.block_backward_flops(cfg, L, B, matmul_only=False)]
    out(f"  {'closed form':<14}" + "".join(f"{n:>14,}" for n in closed))
    counted = [fc.total(ph, scope="block", matmul_only=mm) for ph in ("forward", "backward") for mm in (True, False)]
    return sum(abs(a - b) for a, b in zip(counted, closed))


def _graphs(graph, out_dir: Path, out) -> list[Path]:
    """The forward graph at depth 2 and the gradient flow at depth 1, as SVG (DOT text if `dot` is missing), and
    the explorer page of both."""
    views = [("tiny_block_forward_depth2", dict(depth=2), "forward, depth 2"),
             ("tiny_block_backward", dict(depth=1, backward=True), "backward (the gradient flow), depth 1")]
    paths = []
    for name, kwargs, what in views:
        dot = graph.to_dot(**kwargs, title=f"tiny block, {what}")
        try:
            paths.append(render(dot, out_dir / f"{name}.svg"))
        except RuntimeError as err:
            out(f"  ({err}; writing DOT text instead)")
            out_dir.mkdir(parents=True, exist_ok=True)
            paths.append(out_dir / f"{name}.dot")
            paths[-1].write_text(dot)
        out(f"  graph, {what}: {paths[-1]}")
    page = page_of(graph, title="tiny block, x (2, 8, 64): forward and backward", depth=1, values=True)
    paths.append(page.save(out_dir / "tiny_block_explorer.html"))
    out(f"  graph explorer, both phases (open it in a browser; click a box to open it): {paths[-1]}")
    return paths


def run(out=print, out_dir="tinygrad_block_tour", device="cpu") -> dict:
    """Run the tour on `device`; returns the numbers it printed (the tests check them)."""
    cfg = preset("tiny")
    g, rng = Generator(0), np.random.default_rng(0)
    B, L = 2, 8
    block = TransformerBlock(cfg, generator=g, dtype=float64, device=device)
    x = randn(B, L, cfg.d_model, generator=g, dtype=float64, device=device, requires_grad=True)
    dout = randn(B, L, cfg.d_model, generator=g, dtype=float64, device=device)
    calls = {"forward": Counter(), "backward": Counter()}
    with observe(lambda e: calls[e.phase].update([e.op.name])), count_flops() as fc, \
            record_graph(block, x) as graph:
        y = block(x)
        y.backward(dout)

    params = {name: p.data for name, p in block.named_parameters()}     # the hand-derived pairs run on the
    m_out, cache = manual.block_forward(x.data, params, cfg)           # same device's arrays
    m_dx, m_grads = manual.block_backward(dout.data, cache)
    host = x.backend.to_numpy
    m_out, m_dx, m_grads = host(m_out), host(m_dx), {n: host(g) for n, g in m_grads.items()}

    out(f"tinygrad_block tour: the '{cfg.name}' block (d_model={cfg.d_model}, n_heads={cfg.n_heads}, "
        f"n_kv_heads={cfg.n_kv_heads}, d_ff={cfg.d_ff}), x of shape {x.shape}, float64, on {x.device}")
    out("  h = x + attn(rmsnorm1(x));  out = h + swiglu(rmsnorm2(h))")
    for phase, counter in calls.items():
        listing = ", ".join(f"{name} x{n}" for name, n in sorted(counter.items(), key=lambda kv: -kv[1]))
        out(f"  {phase}: {sum(counter.values())} primitive calls ({listing})")
    worst = {"manual": rel_err(y.numpy(), m_out, ord=np.inf), "fd": 0.0}   # largest |a - b| / largest |a|, |b|
    out(f"  output: autograd vs hand-derived forward, max relative difference {worst['manual']:.1e}")
    out(f"  gradients of sum(out * dout); finite differences at {SAMPLES} random entries per tensor (h = 1e-3)")
    out(f"  {'tensor':<26}{'shape':>12}{'max |grad|':>12}{'vs manual':>11}{'vs finite diff':>16}")
    for name, auto, hand in [("x", x.grad.numpy(), m_dx)] + [
            (n, p.grad.numpy(), m_grads[n]) for n, p in block.named_parameters()]:
        entries, fd = _fd_entries(block, x, dout, name, rng)
        rel_manual = rel_err(auto, hand, ord=np.inf)
        picked = np.array([auto[e] for e in entries]), np.array([fd[e] for e in entries])
        rel_fd = rel_err(*picked, ord=np.inf)
        worst["manual"], worst["fd"] = max(worst["manual"], rel_manual), max(worst["fd"], rel_fd)
        out(f"  {name:<26}{str(auto.shape):>12}{np.abs(auto).max():>12.4f}{rel_manual:>11.1e}{rel_fd:>16.1e}")
    agree = worst["manual"] <= 1e-10 and worst["fd"] <= 1e-8
    out(f"  autograd, hand-derived and finite differences {'agree' if agree else 'DISAGREE'}: worst relative "
        f"difference {worst['manual']:.1e} to the manual pairs (bound 1e-10), {worst['fd']:.1e} to finite "
        f"differences (bound 1e-8)")
    flop_gap = _flop_table(fc, cfg, B, L, out)
    out(f"  counted FLOPs {'equal' if flop_gap == 0 else 'DIFFER FROM'} the closed forms (difference {flop_gap})")
    paths = _graphs(graph, Path(out_dir), out)
    return {"worst": worst, "ok": agree and flop_gap == 0, "calls": calls, "out": y, "flops": fc,
            "graphs": paths}
