"""Lesson 10's exercises: three backward passes by hand, in numpy. SwiGLU's (checked against autograd and finite
differences), repeat_kv's group sum (against autograd and manual.repeat_kv_backward) and RoPE's inverse rotation
(against autograd and manual.rope_backward, the rotation by minus the angle). Each check says what is wrong, with
the numbers, and names the usual slip when it sees one."""
from __future__ import annotations

import numpy as np

import tinygrad_block as tb
from tinygrad_block import manual, nn
from tinygrad_block.gradcheck import central_difference, rel_err

from .common import CheckFailed

def _array(got, what: str, shape: tuple) -> np.ndarray:
    """The learner's result as a float numpy array of `shape`, or CheckFailed saying what came back instead."""
    if isinstance(got, tb.Tensor):
        raise CheckFailed(f"{what} must be a numpy array; got a Tensor. This exercise is by hand: numpy only, "
                          "no autograd")
    try:
        arr = np.asarray(got, dtype=np.float64)
    except (TypeError, ValueError):
        raise CheckFailed(f"{what} must be a numpy array of shape {shape}; got {type(got).__name__}") from None
    if arr.shape != shape:
        raise CheckFailed(f"{what} must have shape {shape}; got {arr.shape}")
    return arr


# ---------------------------------------------------------------- SwiGLU
def _swiglu_np(x, w_gate, w_up, w_down):
    """SwiGLU's forward, manual.swiglu_forward, for the finite differences."""
    return manual.swiglu_forward(x, manual.Linear(w_gate), manual.Linear(w_up), manual.Linear(w_down))[0]


def _swiglu_autograd(x, w_gate, w_up, w_down, grad_out) -> list[np.ndarray]:
    """(dx, dw_gate, dw_up, dw_down) by the engine's autograd."""
    ts = [tb.tensor(a, requires_grad=True) for a in (x, w_gate, w_up, w_down)]
    tx, tg, tu, td = ts
    out = ((tx @ tg.mT).silu() * (tx @ tu.mT)) @ td.mT
    out.backward(tb.tensor(grad_out))
    return [t.grad.numpy() for t in ts]


def _swiglu_slips(x, w_gate, w_up, w_down, grad_out) -> dict:
    """The usual slips, each as (dx, dw_gate) it would give, keyed by the hint that names it: SiLU's derivative
    (manual.silu_backward) spoilt, or one of the two branches into x left out. The gate and up projections, forward
    and backward, are manual's linear pair."""
    (z, c_gate), (u, c_up) = manual.linear_forward(x, w_gate), manual.linear_forward(x, w_up)   # (B, L, d_ff)
    (silu, silu_cache), s = manual.silu_forward(z), manual.sigmoid(z)
    dm = grad_out @ w_down                                                # (B, L, d_ff)
    dx_up, _ = manual.linear_backward(dm * silu, c_up)

    def grads(dz, gate=True, up=True):
        dx_gate, g_gate = manual.linear_backward(dz, c_gate)
        return (dx_gate if gate else 0.0) + (dx_up if up else 0.0), g_gate["weight"]

    right = manual.silu_backward(dm * u, silu_cache)
    return {
        "SiLU's derivative is not sigmoid(z) alone: by the product rule on z * sigmoid(z) it is "
        "sigmoid(z) + z sigmoid(z) (1 - sigmoid(z))": grads(dm * u * s),
        "that derivative, sigmoid(z) (1 - sigmoid(z)), is the sigmoid's; SiLU(z) = z sigmoid(z) has "
        "sigmoid(z) (1 + z (1 - sigmoid(z)))": grads(dm * u * s * (1 - s)),
        "the gate's gradient misses the factor u = x @ w_up.T: at hidden = silu(z) * u each factor gets the "
        "upstream gradient times the other": grads(manual.silu_backward(dm, silu_cache)),
        "dx has only the gate's branch: x feeds both the gate and the up projection, so dx = dz @ w_gate + "
        "du @ w_up": grads(right, up=False),
        "dx has only the up projection's branch: x feeds both, so dx = dz @ w_gate + du @ w_up":
        grads(right, gate=False),
    }


def _weight_slips(x, w_gate, w_up, w_down, grad_out) -> dict:
    """The usual slips in dw_up and dw_down, each as (which gradient, the array it would give), keyed by the hint
    that names it: one sequence's gradient instead of the sum over all, the wrong factor of the gated product, z
    for SiLU(z). From manual's SwiGLU forward."""
    (z, _), (u, _) = manual.linear_forward(x, w_gate), manual.linear_forward(x, w_up)            # (B, L, d_ff)
    silu = manual.silu_forward(z)[0]
    dm = grad_out @ w_down                                                # the gradient of silu(z) * u

    def outer(d, a):                                                      # d^T a over every token
        return d.reshape(-1, d.shape[-1]).T @ a.reshape(-1, a.shape[-1])
    every = ("every token of every sequence uses the same weight, so its gradient dout^T input sums over all "
             "of them: reshape both to (B L, features) before the product")
    return {
        f"dw_up holds the first sequence's gradient only ({every})": ("dw_up", outer(dm[:1] * silu[:1], x[:1])),
        f"dw_down holds the first sequence's gradient only ({every})":
            ("dw_down", outer(grad_out[:1], silu[:1] * u[:1])),
        "dw_up misses the factor silu(z): at hidden = silu(z) * u, u's gradient is the upstream gradient times "
        "the other factor, silu(z)": ("dw_up", outer(dm, x)),
        "dw_up takes z (the gate's output) for silu(z): the factor beside u in the product is silu(z) = z "
        "sigmoid(z)": ("dw_up", outer(dm * z, x)),
        "dw_down reads silu(z) alone: down_proj's input is the product silu(z) * u": ("dw_down", outer(grad_out, silu)),
        "dw_down reads u alone: down_proj's input is the product silu(z) * u": ("dw_down", outer(grad_out, u)),
    }


SWIGLU_CASES = [((2, 3, 5), 7, 1.0), ((1, 4, 6), 10, 3.0)]               # (B, L, d_model), d_ff, gate scale


def check_swiglu_backward(solution) -> None:
    """Each gradient against autograd and finite differences (which agree with each other); the usual slips named."""
    r = np.random.default_rng(0)
    for (B, L, d), d_ff, scale in SWIGLU_CASES:
        x = r.standard_normal((B, L, d))
        w_gate = scale * r.standard_normal((d_ff, d)) / np.sqrt(d)
        w_up, w_down = r.standard_normal((d_ff, d)) / np.sqrt(d), r.standard_normal((d, d_ff)) / np.sqrt(d_ff)
        grad_out = r.standard_normal((B, L, d))
        inputs = {"x": x, "w_gate": w_gate, "w_up": w_up, "w_down": w_down}
        want = _swiglu_autograd(x, w_gate, w_up, w_down, grad_out)
        for i, (name, value) in enumerate(inputs.items()):                # the two oracles agree
            entries = [tuple(int(j) for j in r.integers(value.shape)) for _ in range(4)]

            def loss(v, name=name, inputs=inputs, grad_out=grad_out):
                return float((_swiglu_np(**{**inputs, name: v}) * grad_out).sum())
            fd = central_difference(loss, value.copy(), elements=entries)
            assert rel_err([want[i][e] for e in entries], [fd[e] for e in entries]) < 1e-8, name
        got = solution.swiglu_backward(x.copy(), w_gate.copy(), w_up.copy(), w_down.copy(), grad_out.copy())
        call = f"swiglu_backward(x {x.shape}, w_gate {w_gate.shape}, w_up {w_up.shape}, w_down {w_down.shape}, ...)"
        if not isinstance(got, (tuple, list)) or len(got) != 4:
            raise CheckFailed(f"{call} must return a tuple (dx, dw_gate, dw_up, dw_down); got {type(got).__name__}"
                              + (f" of {len(got)}" if isinstance(got, (tuple, list)) else ""))
        names = ["dx", "dw_gate", "dw_up", "dw_down"]
        for g, name, value in zip(got, names, inputs.values()):
            if np.shape(g) == value.shape[::-1] and value.ndim == 2:
                raise CheckFailed(f"{call}: {name} has shape {np.shape(g)}, the transpose of the weight's "
                                  f"{value.shape}. A weight stored (out, in) gets dW = dout^T x, of shape (out, in), "
                                  "summed over every token")
            if np.ndim(g) == 4 or (np.ndim(g) == 3 and value.ndim == 2):
                raise CheckFailed(f"{call}: {name} has shape {np.shape(g)}; sum over the batch and the positions, "
                                  f"since every token uses the same weight: dW = dout^T x has the weight's shape "
                                  f"{value.shape}")
        got = [_array(g, f"{name} of {call}", value.shape) for g, name, value in zip(got, names, inputs.values())]
        errs = {name: rel_err(g, w) for name, g, w in zip(names, got, want)}
        if max(errs.values()) <= 1e-8:
            continue
        bad = ", ".join(f"{name} off by {e:.3g}" for name, e in errs.items() if e > 1e-8)
        hints = [hint for hint, (dx, dw_gate) in _swiglu_slips(x, w_gate, w_up, w_down, grad_out).items()
                 if (errs["dx"] > 1e-8 and rel_err(got[0], dx) < 1e-9)
                 or (errs["dw_gate"] > 1e-8 and rel_err(got[1], dw_gate) < 1e-9)][:1]
        hints += [hint for hint, (name, slip) in _weight_slips(x, w_gate, w_up, w_down, grad_out).items()
                  if errs[name] > 1e-8 and rel_err(got[names.index(name)], slip) < 1e-9]
        if len(hints) == 2 and all("first sequence" in h for h in hints):     # both: say it once
            hints = ["dw_up and dw_down hold " + hints[0].split(" holds ", 1)[1]]
        raise CheckFailed(f"{call}: {bad} (relative error against autograd and finite differences; "
                          f"{', '.join(n for n, e in errs.items() if e <= 1e-8) or 'none'} right)"
                          + (f": {'; '.join(hints)}" if hints else ""))


# ---------------------------------------------------------------- the GQA group sum
REPEAT_CASES = [((2, 6, 3, 4), 2), ((1, 4, 2, 3), 4), ((2, 3, 3, 2), 1), ((1, 6, 2, 3), 3)]


def check_repeat_kv_backward(solution) -> None:
    """Against autograd through nn.repeat_kv (an expand) and manual.repeat_kv_backward (the sum over each group)."""
    r = np.random.default_rng(1)
    for shape, n_rep in REPEAT_CASES:
        B, H, L, d = shape
        H_kv = H // n_rep
        grad = r.standard_normal(shape)
        k = tb.tensor(r.standard_normal((B, H_kv, L, d)), requires_grad=True)
        nn.repeat_kv(k, n_rep).backward(tb.tensor(grad))
        want = manual.repeat_kv_backward(grad, n_rep)
        assert rel_err(k.grad.numpy(), want) < 1e-15
        call = f"repeat_kv_backward(grad {shape}, n_rep={n_rep})"
        got = solution.repeat_kv_backward(grad.copy(), n_rep)
        if np.shape(got) == shape and n_rep > 1:
            raise CheckFailed(f"{call} returned shape {shape}, one gradient per query head; KV head j needs one: "
                              f"the sum over the {n_rep} query heads of its group, shape {(B, H_kv, L, d)}")
        got = _array(got, call, (B, H_kv, L, d))
        err = rel_err(got, want)
        if err <= 1e-12:
            continue
        slips = {"that is the first query head of each group alone; every head of the group read the KV head, so "
                 "its gradient is the sum over the group": grad[:, ::n_rep],
                 "that is the mean over each group; a value used n_rep times gets the sum of the n_rep gradients, "
                 "not their mean": want / n_rep,
                 "that sums every H_kv-th head (h % H_kv == j), the grouping of tiling; here query head h reads KV "
                 "head h // n_rep, so KV head j's group is the consecutive heads j * n_rep .. j * n_rep + n_rep - 1":
                 grad.reshape(B, n_rep, H_kv, L, d).sum(axis=1)}
        hints = [hint for hint, slip in slips.items() if rel_err(got, slip) < 1e-12]
        raise CheckFailed(f"{call} is off by {err:.3g} (relative) from the sum over each group of query heads"
                          + (f": {hints[0]}" if hints else ""))


# ---------------------------------------------------------------- RoPE's inverse rotation
ROPE_CASES = [((2, 3, 5, 8), 0, 10000.0), ((1, 2, 6, 16), 37, 500000.0)]   # shape, first position, theta


def check_rope_backward(solution) -> None:
    """Against autograd through nn.apply_rope and manual.rope_backward, the rotation by minus the angle (the two
    agree); at positions from 0 and from 37, for two thetas."""
    r = np.random.default_rng(2)
    for shape, first, theta in ROPE_CASES:
        B, H, L, d = shape
        cos_t, sin_t = nn.rope_tables(first + L, d, theta, tb.float64, "cpu")
        cos, sin = cos_t.numpy()[first:], sin_t.numpy()[first:]           # (L, d)
        x, grad = r.standard_normal(shape), r.standard_normal(shape)
        xt = tb.tensor(x, requires_grad=True)
        nn.apply_rope(xt, cos_t[first:], sin_t[first:]).backward(tb.tensor(grad))
        turned_back = manual.rope_backward(grad, manual.rope_forward(x, theta, first)[1])   # R(-angle) grad
        assert rel_err(xt.grad.numpy(), turned_back) < 1e-14
        call = f"rope_backward(grad {shape}, cos, sin) at positions {first}..{first + L - 1}, theta={theta:g}"
        got = _array(solution.rope_backward(grad.copy(), cos.copy(), sin.copy()), call, shape)
        err = rel_err(got, turned_back)
        if err > 1e-12:
            slips = {"that is the forward rotation again, turning the gradient by +angle; the backward of a rotation "
                     "is its transpose, the rotation by -angle: grad * cos - rotate_half(grad) * sin":
                     manual.rope_forward(grad, theta, first)[0],
                     "that is the gradient unchanged; RoPE is a rotation, the identity only at position 0":
                     grad, "cos and sin are swapped": grad * sin - manual.rotate_half(grad) * cos}
            hints = [hint for hint, slip in slips.items() if rel_err(got, slip) < 1e-12]
            raise CheckFailed(f"{call} is off by {err:.3g} (relative) from autograd's gradient"
                              + (f": {hints[0]}" if hints else ""))


CHECKS = [("swiglu_backward", check_swiglu_backward), ("repeat_kv_backward", check_repeat_kv_backward),
          ("rope_backward", check_rope_backward)]
