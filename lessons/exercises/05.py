"""Lesson 05's exercises: BatchNorm that ignores padding, LayerNorm's backward by hand, and the fused residual add
+ RMSNorm with its backward. Each check compares with an independent oracle (numpy on the real tokens, autograd
through the library's modules, four-point finite differences of manual/'s numpy forward) and says what is
wrong, with the numbers, naming the usual slips when it sees one."""
from __future__ import annotations

import numpy as np

import tinygrad_block as tb
from tinygrad_block import manual, nn
from tinygrad_block.gradcheck import central_difference, rel_err

from .common import CheckFailed

EPS = 1e-5


def _array(got, name: str, shape: tuple, summed: bool = False) -> np.ndarray:
    """The learner's result as a float64 numpy array of `shape`, or CheckFailed saying what came back. With
    `summed` (a gain's or a bias's gradient), a result that still has token axes says what to sum over."""
    if isinstance(got, tb.Tensor):
        got = got.numpy()
    try:
        arr = np.asarray(got, dtype=np.float64)
    except (TypeError, ValueError):
        raise CheckFailed(f"{name} must be a numpy array of shape {shape}; got {type(got).__name__}") from None
    if arr.shape != shape:
        hint = (": one gain (or bias) serves every token, so sum over every axis but the last, "
                "axis=tuple(range(x.ndim - 1))" if summed and arr.shape[-1:] == shape and arr.ndim > 1 else "")
        raise CheckFailed(f"{name} must have shape {shape}; got {arr.shape}{hint}")
    return arr


def _tuple(got, name: str, names: tuple) -> tuple:
    """The learner's result unpacked into len(names) parts, or CheckFailed saying what it should be."""
    if not isinstance(got, (tuple, list)) or len(got) != len(names):
        raise CheckFailed(f"{name} must return a tuple ({', '.join(names)}); got {type(got).__name__}"
                          + (f" of length {len(got)}" if isinstance(got, (tuple, list)) else ""))
    return tuple(got)


def _worst(got: np.ndarray, want: np.ndarray) -> str:
    i = np.unravel_index(np.abs(got - want).argmax(), want.shape)
    return f"at index {tuple(int(j) for j in i)} it is {float(got[i])!r}, expected {float(want[i])!r}"


# ---------------------------------------------------------------- masked BatchNorm
LENGTHS = (5, 2, 4)


def _ragged(seed: int = 0):
    """A padded batch (3, 5, 4) of sequences of 5, 2 and 4 tokens (padding zero) and its (3, 5) mask."""
    r = np.random.default_rng(seed)
    x = r.standard_normal((len(LENGTHS), max(LENGTHS), 4)) * 1.5 + 0.7
    mask = np.zeros(x.shape[:2])
    for i, n in enumerate(LENGTHS):
        mask[i, :n] = 1.0
    return x * mask[..., None], mask


def _bn_np(x: np.ndarray, mask: np.ndarray, eps: float = EPS, count_padding: bool = False, ddof: int = 0,
           zero_padding: bool = True, per_token: bool = False) -> np.ndarray:
    """BatchNorm in numpy over the real tokens (or, as slips, over every position, with n - 1, or per token)."""
    if per_token:                                                 # LayerNorm's axis: each token on its own
        return manual.layernorm_forward(x, 1.0, None, eps)[0] * (mask[..., None] if zero_padding else 1)
    rows = x.reshape(-1, x.shape[-1]) if count_padding else x[mask > 0]
    mu, var = rows.mean(0), rows.var(0, ddof=ddof)
    y = (x - mu) / np.sqrt(var + eps)
    return y * mask[..., None] if zero_padding else y


BN_SLIPS = [  # (the slip, the hint)
    (dict(count_padding=True), "the statistics still count the padding positions: take the mean and variance "
                               "over the real tokens only, sum(x * mask) / sum(mask), and likewise the variance"),
    (dict(count_padding=True, zero_padding=False), "the statistics count the padding positions, and the padding "
                                                   "is not zeroed: take sums over the real tokens, divide by "
                                                   "sum(mask), and multiply the output by the mask"),
    (dict(zero_padding=False), "the real tokens are right, but the padding positions are not 0: multiply the "
                               "output by the mask"),
    (dict(ddof=1), "the variance divides by (count - 1); BatchNorm's batch statistics divide by the count"),
    (dict(eps=0.0), "eps is missing: (x - mean) / sqrt(var + eps)"),
    (dict(per_token=True), "each token is normalised over its features (LayerNorm's axis); BatchNorm normalises each "
                    "feature over the tokens"),
]


def check_masked_batchnorm(solution) -> None:
    """Values against numpy over the real tokens; the gradient against finite differences of that numpy
    oracle."""
    xn, mn = _ragged()
    want = _bn_np(xn, mn)
    x = tb.tensor(xn, dtype=tb.float64, requires_grad=True)
    out = solution.masked_batchnorm(x, tb.tensor(mn, dtype=tb.float64), EPS)
    if not isinstance(out, tb.Tensor):
        raise CheckFailed(f"masked_batchnorm must return a Tensor of shape {xn.shape}; got {type(out).__name__}")
    got = _array(out, "masked_batchnorm's output", xn.shape)
    if not (np.isfinite(got).all() and np.abs(got - want).max() < 1e-10):
        for slip, hint in BN_SLIPS:
            if np.allclose(got, _bn_np(xn, mn, **slip), rtol=0, atol=1e-10):
                raise CheckFailed(f"masked_batchnorm is off by up to {np.abs(got - want).max():.3g}: {hint}")
        if not np.isfinite(got).all():
            raise CheckFailed(f"masked_batchnorm has {int((~np.isfinite(got)).sum())} non-finite entries")
        raise CheckFailed(f"masked_batchnorm: {_worst(got, want)} (each feature normalised by the mean and "
                          "biased variance of the real tokens; 0 at padding)")
    if not out.requires_grad:
        raise CheckFailed("no gradient reaches x: build masked_batchnorm from Tensor ops, not from numpy arrays")
    dout = np.random.default_rng(1).standard_normal(xn.shape)
    (out * tb.tensor(dout, dtype=tb.float64)).sum().backward()
    if x.grad is None:
        raise CheckFailed("no gradient reaches x: build masked_batchnorm from Tensor ops, not from numpy arrays")
    numeric = central_difference(lambda v: float((_bn_np(v, mn) * dout).sum()), xn)
    err = rel_err(x.grad.numpy(), numeric)
    if not err <= 1e-8:
        hint = (" (were the mean or variance detached, or computed in numpy? the gradient must flow through "
                "them too)")
        raise CheckFailed(f"the gradient of x differs from finite differences by {err:.2e} (relative); expected "
                          f"at most 1e-8{hint}")


# ---------------------------------------------------------------- LayerNorm's backward
def _ln_case(seed: int = 2):
    r = np.random.default_rng(seed)
    x = r.standard_normal((2, 3, 6)) * 2.0 + 1.5
    return x, 1.0 + 0.3 * r.standard_normal(6), 0.2 * r.standard_normal(6), r.standard_normal((2, 3, 6))


def _ln_grads_autograd(dout, x, w, b, eps):
    """dx, dweight, dbias by autograd through nn.LayerNorm."""
    norm = nn.LayerNorm(x.shape[-1], eps=eps, dtype=tb.float64)
    norm.load_state_dict({"weight": tb.tensor(w, dtype=tb.float64), "bias": tb.tensor(b, dtype=tb.float64)})
    xt = tb.tensor(x, dtype=tb.float64, requires_grad=True)
    norm(xt).backward(tb.tensor(dout, dtype=tb.float64))
    return xt.grad.numpy(), norm.weight.grad.numpy(), norm.bias.grad.numpy()


def _ln_dx_slips(dout, x, w, eps):
    """dx as the usual slips compute it, with their hints: manual's backward with a term or a factor left out."""
    xc = x - x.mean(-1, keepdims=True)
    r, dn = 1 / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps), dout * w
    rmsnorm_of_centred = manual.rmsnorm_backward(dout, manual.rmsnorm_forward(xc, w, eps)[1])[0]
    unit_weight = manual.layernorm_backward(dout, manual.layernorm_forward(x, 1.0, None, eps)[1])[0]
    return [(rmsnorm_of_centred,
             "the mean(dn) term is missing: the forward subtracted the mean of x, so the backward subtracts the mean "
             "of dn = dout * weight too: dx = rstd * (dn - mean(dn) - n * mean(dn * n))"),
            (r * (dn - dn.mean(-1, keepdims=True)),
             "rstd was treated as a constant: it depends on x too, which adds the term - n * mean(dn * n)"),
            (r * dn, "only rstd * dn: the mean and rstd both depend on x, which gives the terms - mean(dn) and "
                     "- n * mean(dn * n)"),
            (unit_weight,
             "the weight is missing: the gradient reaching the normalised vector is dn = dout * weight")]


def check_layernorm_backward(solution) -> None:
    """dx, dweight, dbias against autograd through nn.LayerNorm, and dx against finite differences."""
    x, w, b, dout = _ln_case()
    got = _tuple(solution.layernorm_backward(dout, x, w, EPS), "layernorm_backward", ("dx", "dweight", "dbias"))
    dx = _array(got[0], "dx", x.shape)
    dw, db = _array(got[1], "dweight", w.shape, summed=True), _array(got[2], "dbias", w.shape, summed=True)
    want_dx, want_dw, want_db = _ln_grads_autograd(dout, x, w, b, EPS)
    if rel_err(dx, want_dx) > 1e-10:
        for wrong, hint in _ln_dx_slips(dout, x, w, EPS):
            if rel_err(dx, wrong) < 1e-10:
                raise CheckFailed(f"dx is off by {rel_err(dx, want_dx):.2e} (relative): {hint}")
        raise CheckFailed(f"dx: {_worst(dx, want_dx)} (autograd through nn.LayerNorm)")
    numeric = central_difference(lambda v: float((manual.layernorm_forward(v, w, b, EPS)[0] * dout).sum()), x)
    if rel_err(dx, numeric) > 1e-8:
        raise CheckFailed(f"dx agrees with autograd but differs from finite differences by {rel_err(dx, numeric):.2e}")
    if rel_err(dw, want_dw) > 1e-10:
        hint = (": that is dbias; dweight sums dout * n, the normalised x" if rel_err(dw, want_db) < 1e-10 else
                ": dweight sums dout * n (n the normalised x) over every axis but the last")
        raise CheckFailed(f"dweight: {_worst(dw, want_dw)}{hint}")
    if rel_err(db, want_db) > 1e-10:
        hint = (": that is dweight; dbias sums dout alone" if rel_err(db, want_dw) < 1e-10 else
                ": dbias sums dout over every axis but the last")
        raise CheckFailed(f"dbias: {_worst(db, want_db)}{hint}")


# ---------------------------------------------------------------- fused residual add + RMSNorm
def _fused_case(seed: int = 3):
    r = np.random.default_rng(seed)
    x, res = r.standard_normal((2, 3, 8)), r.standard_normal((2, 3, 8)) * 2.0 + 0.5
    return x, res, 1.0 + 0.3 * r.standard_normal(8), r.standard_normal((2, 3, 8)), r.standard_normal((2, 3, 8))


def _rmsnorm(h, w, eps):
    """RMSNorm(h) with gain w (manual.rmsnorm_forward's output)."""
    return manual.rmsnorm_forward(h, w, eps)[0]


def check_fused_add_rmsnorm(solution) -> None:
    """(normed, new_residual) against nn.RMSNorm applied to x + residual."""
    x, res, w, _, _ = _fused_case()
    got = _tuple(solution.fused_add_rmsnorm(x, res, w, EPS), "fused_add_rmsnorm", ("normed", "new_residual"))
    normed, new_res = _array(got[0], "normed", x.shape), _array(got[1], "new_residual", x.shape)
    norm = nn.RMSNorm(x.shape[-1], eps=EPS, dtype=tb.float64)
    norm.load_state_dict({"weight": tb.tensor(w, dtype=tb.float64)})
    h = x + res
    want = norm(tb.tensor(h, dtype=tb.float64)).numpy()
    if np.abs(new_res - h).max() > 1e-12:
        hint = (": that is the old residual; the new one is x + residual" if np.abs(new_res - res).max() < 1e-12
                else ": that is the normalised output; new_residual is h = x + residual itself"
                if np.abs(new_res - want).max() < 1e-12 else ": new_residual is h = x + residual")
        raise CheckFailed(f"new_residual: {_worst(new_res, h)}{hint}")
    if np.abs(normed - want).max() > 1e-12:
        for wrong, hint in ((_rmsnorm(x, w, EPS), "x alone was normalised; normalise h = x + residual"),
                            (_rmsnorm(res, w, EPS), "the residual alone was normalised; normalise h = x + residual"),
                            (_rmsnorm(h, 1.0, EPS), "the gain is missing: multiply by weight"),
                            (_rmsnorm(h, w, 0.0), "eps is missing: h / sqrt(mean(h^2) + eps)")):
            if np.abs(normed - wrong).max() < 1e-12:
                raise CheckFailed(f"normed is off by up to {np.abs(normed - want).max():.3g}: {hint}")
        raise CheckFailed(f"normed: {_worst(normed, want)} (nn.RMSNorm of x + residual)")


def _fused_autograd(x, res, w, d_normed, d_res):
    """dx, dresidual, dweight by autograd through the unfused version: h = x + residual; nn.RMSNorm(h)."""
    norm = nn.RMSNorm(x.shape[-1], eps=EPS, dtype=tb.float64)
    norm.load_state_dict({"weight": tb.tensor(w, dtype=tb.float64)})
    xt, rt = (tb.tensor(a, dtype=tb.float64, requires_grad=True) for a in (x, res))
    h = xt + rt
    loss = (norm(h) * tb.tensor(d_normed, dtype=tb.float64)).sum() + (h * tb.tensor(d_res, dtype=tb.float64)).sum()
    loss.backward()
    return xt.grad.numpy(), rt.grad.numpy(), norm.weight.grad.numpy()


def _fused_numeric(x, res, w, d_normed, d_res):
    """The same three gradients by four-point central differences of the unfused forward (manual's RMSNorm)."""
    def loss(xv, rv, wv):
        h = xv + rv
        return float((_rmsnorm(h, wv, EPS) * d_normed).sum() + (h * d_res).sum())
    return (central_difference(lambda v: loss(v, res, w), x), central_difference(lambda v: loss(x, v, w), res),
            central_difference(lambda v: loss(x, res, v), w))


def check_fused_add_rmsnorm_backward(solution) -> None:
    """dx, dresidual, dweight against autograd of the unfused version and against finite differences."""
    x, res, w, d_normed, d_res = _fused_case()
    got = _tuple(solution.fused_add_rmsnorm_backward(d_normed, d_res, x, res, w, EPS), "fused_add_rmsnorm_backward",
                 ("dx", "dresidual", "dweight"))
    dx, dres = _array(got[0], "dx", x.shape), _array(got[1], "dresidual", x.shape)
    dw = _array(got[2], "dweight", w.shape, summed=True)
    auto, numeric = _fused_autograd(x, res, w, d_normed, d_res), _fused_numeric(x, res, w, d_normed, d_res)
    h = x + res
    through_norm, _ = manual.rmsnorm_backward(d_normed, manual.rmsnorm_forward(h, w, EPS)[1])   # the norm's share
    constant_rstd = d_normed * w / np.sqrt((h * h).mean(-1, keepdims=True) + EPS)              # rstd * dn alone
    for name, mine, want, fd in (("dx", dx, auto[0], numeric[0]), ("dresidual", dres, auto[1], numeric[1])):
        if rel_err(mine, want) <= 1e-10:
            continue
        if rel_err(mine, through_norm) < 1e-10:
            raise CheckFailed(f"{name} is off by {rel_err(mine, want):.2e} (relative): it holds only the gradient "
                              "that comes back through the norm. new_residual = h is an output too, and its "
                              "gradient d_new_residual flows on into h: add it")
        if rel_err(mine, constant_rstd + d_res) < 1e-10 or rel_err(mine, constant_rstd) < 1e-10:
            raise CheckFailed(f"{name} is off by {rel_err(mine, want):.2e} (relative): rstd was treated as a "
                              "constant; it depends on h too, which adds the term - n * mean(dn * n)")
        if rel_err(mine, d_res) < 1e-10:
            raise CheckFailed(f"{name} is only d_new_residual: the gradient through the norm, "
                              "rstd * (dn - n * mean(dn * n)) with dn = d_normed * weight, must be added to it")
        raise CheckFailed(f"{name}: {_worst(mine, want)} (autograd of h = x + residual, nn.RMSNorm(h); finite "
                          f"differences agree with autograd to {rel_err(want, fd):.1e})")
    if rel_err(dw, auto[2]) > 1e-10:
        hint = (": dweight sums d_normed * n (n = h * rstd, the normalised h) over every axis but the last"
                if rel_err(dw, (d_normed * h).sum(axis=(0, 1))) > 1e-10 else
                ": that sums d_normed * h; use the normalised h, n = h * rstd")
        raise CheckFailed(f"dweight: {_worst(dw, auto[2])}{hint}")
    for name, mine, fd in (("dx", dx, numeric[0]), ("dresidual", dres, numeric[1]), ("dweight", dw, numeric[2])):
        if rel_err(mine, fd) > 1e-8:
            raise CheckFailed(f"{name} agrees with autograd but differs from finite differences by "
                              f"{rel_err(mine, fd):.2e}")


CHECKS = [("masked_batchnorm", check_masked_batchnorm), ("layernorm_backward", check_layernorm_backward),
          ("fused_add_rmsnorm", check_fused_add_rmsnorm),
          ("fused_add_rmsnorm_backward", check_fused_add_rmsnorm_backward)]
