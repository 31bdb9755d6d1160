"""Lesson 06's exercises: scaled dot-product attention from Tensor ops, a stable softmax, and attention's output
split into one contribution per head. Each check compares with an independent oracle, the hand-derived pairs of
manual/ in float64 (sdpa forward and backward, softmax forward and backward, the output projection as one linear)
and says what is wrong, with the numbers, naming the usual slips when it sees one."""
from __future__ import annotations

import numpy as np

import tinygrad_block as tb
from tinygrad_block import manual

from .common import CheckFailed, softmax_np, tensor_result


# ---------------------------------------------------------------- attention
def _attention_np(q, k, v, causal: bool, slip: str = "") -> np.ndarray:
    """The oracle: manual.sdpa_forward, masked by manual.causal_mask when causal. `slip` gives the usual mistakes,
    each the oracle with one change: the scores scaled by 1 or by 1 / d_head (q multiplied or divided by
    sqrt(d_head) first), the mask on the other triangle or over the diagonal too, the future weights zeroed after
    the softmax, the future scores set to 0 instead of -inf, the softmax taken over the queries, the values summed
    over the queries (the weights transposed), or k with every axis reversed (batch and heads too)."""
    L, d = q.shape[-2], q.shape[-1]
    mask = manual.causal_mask(L, q) if causal else None                                  # (L, L): -inf where j > i
    if slip in ("softmax over queries", "weights transposed"):
        s = q @ np.swapaxes(k, -1, -2) / np.sqrt(d) + (0 if mask is None else mask)      # (B, H, L, L)
        a = softmax_np(s, -2 if slip == "softmax over queries" else -1)
        return (np.swapaxes(a, -1, -2) if slip == "weights transposed" else a) @ v       # (B, H, L, d_head)
    if slip == "every axis":
        k = np.swapaxes(k.T, -1, -2)                                  # so that sdpa's k^T is k.T: (d, L, H, B)
    elif slip == "unscaled":
        q = q * np.sqrt(d)
    elif slip == "scaled by d":
        q = q / np.sqrt(d)
    elif causal and slip == "other triangle":
        mask = mask.T                                                                    # -inf where j < i
    elif causal and slip == "diagonal":
        mask = np.triu(np.full((L, L), -np.inf))                                         # -inf where j >= i
    elif causal and slip in ("weights zeroed", "scores zeroed"):
        s = q @ np.swapaxes(k, -1, -2) * (1 / np.sqrt(d))                                # (B, H, L, L)
        if slip == "weights zeroed":
            return np.where(np.isinf(mask), 0.0, softmax_np(s)) @ v
        return softmax_np(np.where(np.isinf(mask), 0.0, s)) @ v
    with np.errstate(invalid="ignore"):
        return manual.sdpa_forward(q, k, v, mask)[0]


def _attention_grads(q, k, v, dout):
    """Causal attention's gradients by hand (manual.sdpa_backward): dV = A^T dout, dA = dout V^T,
    dS = A (dA - sum(dA A)), dQ = dS K / sqrt(d), dK = dS^T Q / sqrt(d)."""
    return manual.sdpa_backward(dout, manual.sdpa_forward(q, k, v, manual.causal_mask(q.shape[-2], q))[1])


def _qkv(seed: int = 0):
    r = np.random.default_rng(seed)
    B, H, L, d = 2, 3, 5, 4
    return [r.standard_normal((B, H, L, d)) * 1.5 for _ in range(3)]


ATTENTION_SLIPS = [  # (the slip, as _attention_np produces it; the hint), tried when the learner's result is wrong
    ("unscaled", "the scores were not divided by sqrt(d_head) = 2"),
    ("scaled by d", "the scores were divided by d_head = 4, not by its square root, 2"),
    ("other triangle", "the mask is on the wrong triangle: it hides the keys before each query (j < i), not the "
                       "future ones (j > i)"),
    ("diagonal", "the mask hides the diagonal too: a query may read its own key (j = i), only the keys after it "
                 "(j > i) are hidden"),
    ("weights zeroed", "the future weights were zeroed after the softmax, so the rows no longer sum to 1: add "
                       "-inf to the scores before the softmax instead"),
    ("scores zeroed", "the future scores were set to 0, but e^0 = 1 still gives those keys weight: they "
                      "need -inf, so that e^-inf = 0"),
    ("softmax over queries", "the softmax normalised each key's column (over the queries); each query's weights "
                             "are a distribution over the keys it reads, so its own row must sum to 1"),
    ("weights transposed", "V was read along the wrong axis of the weights: output i summed the values with the "
                           "weights every query gave key i (column i), not with query i's own weights over the "
                           "keys (row i)"),
]
KEYS_TRANSPOSED = ("the transpose of k reversed all four of its axes, (B, H, L, d_head) -> (d_head, L, H, B), the "
                   "batch and head axes too; the scores need only each head's keys turned, its last two axes "
                   "(position and d_head) swapped")


def _attention_result(solution, arrays: list, causal: bool) -> np.ndarray:
    """The learner's attention on float64 tensors of `arrays`, as numpy. When it raises, it runs again on a cube,
    q, k, v of shape (3, 3, 3, 3), where k transposed whole fits: if it gives exactly that slip's result there, the
    slip is named; any other error is the learner's own."""
    q, k, v = (tb.tensor(a, dtype=tb.float64) for a in arrays)
    try:
        return tensor_result(solution.attention(q, k, v, causal), "attention", arrays[0].shape)
    except (ValueError, IndexError) as e:
        r = np.random.default_rng(4)
        cube = [r.standard_normal((3, 3, 3, 3)) for _ in range(3)]
        try:
            got = solution.attention(*(tb.tensor(a, dtype=tb.float64) for a in cube), causal).numpy()
        except Exception:
            raise e from None
        if got.shape != cube[0].shape or not np.allclose(got, _attention_np(*cube, causal, "every axis"), atol=1e-10):
            raise
        raise CheckFailed(f"attention(causal={causal}) on q, k, v of shape {arrays[0].shape} raised "
                          f"{type(e).__name__}: {e}: {KEYS_TRANSPOSED}") from None



def check_attention(solution) -> None:
    """Values against numpy (causal and not), then the gradients against the hand-derived ones."""
    qn, kn, vn = _qkv()
    shape = qn.shape
    for causal in (False, True):
        got = _attention_result(solution, [qn, kn, vn], causal)
        want = _attention_np(qn, kn, vn, causal)
        if np.isfinite(got).all() and np.abs(got - want).max() < 1e-10:
            continue
        for slip, hint in ATTENTION_SLIPS:
            with np.errstate(invalid="ignore"):
                wrong = _attention_np(qn, kn, vn, causal, slip)
            if np.allclose(got, wrong, rtol=0, atol=1e-10, equal_nan=True):
                raise CheckFailed(f"attention(causal={causal}) is off by up to {np.nanmax(np.abs(got - want)):.3g}: "
                                  f"{hint}")
        if not np.isfinite(got).all():
            raise CheckFailed(f"attention(causal={causal}) has non-finite entries ({np.isnan(got).sum()} NaN): a row "
                              "whose keys are all masked has nothing to read; query i must keep keys 0..i")
        other = _attention_np(qn, kn, vn, not causal)
        if np.abs(got - other).max() < 1e-10:
            raise CheckFailed(f"attention(causal={causal}) gives the {'causal' if not causal else 'unmasked'} result: "
                              + ("causal=True must hide the keys after each query" if causal else
                                 "causal=False must not mask anything (BERT-style attention reads every key)"))
        i = np.unravel_index(np.abs(got - want).argmax(), shape)
        raise CheckFailed(f"attention(causal={causal}) at index {tuple(int(j) for j in i)} is {got[i]!r}, expected "
                          f"{want[i]!r} (softmax(q k^T / sqrt(d_head) + mask) v, computed in numpy)")
    q, k, v = (tb.tensor(a, dtype=tb.float64, requires_grad=True) for a in (qn, kn, vn))
    dout = np.random.default_rng(1).standard_normal(shape)
    out = solution.attention(q, k, v, True)
    if not out.requires_grad:
        raise CheckFailed("no gradient reaches q, k, v: build attention from Tensor ops, not from numpy arrays")
    (out * tb.tensor(dout, dtype=tb.float64)).sum().backward()
    for name, t, want in zip("qkv", (q, k, v), _attention_grads(qn, kn, vn, dout)):
        if t.grad is None:
            raise CheckFailed(f"no gradient reached {name}: build attention from Tensor ops, not from numpy arrays")
        err = np.abs(t.grad.numpy() - want).max()
        if not err < 1e-10:
            raise CheckFailed(f"the gradient of {name} is off by {err:.3g} from the hand-derived one "
                              "(dS = A (dA - sum(dA A)), dQ = dS K / sqrt(d), dK = dS^T Q / sqrt(d), dV = A^T dout)")


# ---------------------------------------------------------------- stable softmax
INF = np.inf
ROWS = np.array([[1000.0, 999.0, 998.0, 0.0, -1.0],                 # e^1000 overflows
                 [-1000.0, -1001.0, -999.0, -1000.5, -2000.0],        # e^-1000 underflows to 0
                 [0.5, -INF, 1.5, -INF, 0.0],                          # masked keys get weight exactly 0
                 [0.1, 0.2, -0.3, 0.4, 0.0]])
COLUMNS = np.array([[500.0, -3.0, 0.0], [501.0, -INF, 0.0], [-200.0, -2.0, 0.0], [499.0, -4.0, 0.0]])


def check_stable_softmax(solution) -> None:
    """Along the last axis of ROWS and the first axis of COLUMNS, against float64 numpy; then the gradient against
    the Jacobian product p (g - sum(p g)), derived by hand."""
    for x, axis, kind in ((ROWS, -1, "row"), (COLUMNS, 0, "column")):
        try:
            out = solution.stable_softmax(tb.tensor(x, dtype=tb.float64), axis)
        except ValueError as e:
            if "broadcast" not in str(e):
                raise
            raise CheckFailed(f"stable_softmax(x, axis={axis}) on x of shape {x.shape} raised ValueError: {e}. A "
                              "reduction removes the axis it reduces, so the maxima and the sums no longer line up "
                              "with x's rows: keep that axis, with length 1, so that they broadcast back against x"
                              ) from None
        got = tensor_result(out, "stable_softmax", x.shape)
        want = softmax_np(x, axis)
        lines = (lambda a: a) if axis == -1 else (lambda a: a.T)          # the rows or the columns, one by one
        for xi, gi, wi in zip(lines(x), lines(got), lines(want)):
            where = f"stable_softmax(x, axis={axis}) for the {kind} {xi.tolist()}"
            if not np.isfinite(gi).all():
                hint = ("e^1000 overflows to inf, and inf/inf is NaN: subtract each row's maximum before exp"
                        if xi.max() > 700 else
                        "every e^x underflows to 0 here, and 0/0 is NaN: subtract each row's own maximum along "
                        "`axis`, not the maximum of the whole tensor")
                raise CheckFailed(f"{where} is not finite: {gi.tolist()}; {hint}")
            if (gi[xi == -INF] != 0.0).any():
                raise CheckFailed(f"{where}: entries of -inf (masked keys) must get weight exactly 0; got "
                                  f"{np.round(gi, 4).tolist()}")
            if not np.abs(gi - wi).max() < 1e-12:
                if axis != -1 and np.abs(got - softmax_np(x, -1)).max() < 1e-12:
                    hint = f"; that is the softmax along the last axis: use the `axis` argument ({axis})"
                elif abs(gi.sum() - 1) > 1e-9:
                    hint = f"; it sums to {gi.sum():.6f}, not 1: divide by the sum along `axis`"
                else:
                    hint = ""
                raise CheckFailed(f"{where} is {np.round(gi, 6).tolist()}, expected {np.round(wi, 6).tolist()}"
                                  f"{hint}")
    x = tb.tensor(ROWS, dtype=tb.float64, requires_grad=True)
    p = solution.stable_softmax(x, -1)
    if not p.requires_grad:
        raise CheckFailed("no gradient reaches x: build stable_softmax from Tensor ops, not from numpy arrays")
    g = np.random.default_rng(2).standard_normal(ROWS.shape)
    (p * tb.tensor(g, dtype=tb.float64)).sum().backward()
    want = manual.softmax_backward(g, manual.softmax_forward(ROWS)[1])
    if x.grad is None or not np.isfinite(x.grad.numpy()).all() or np.abs(x.grad.numpy() - want).max() > 1e-12:
        got = None if x.grad is None else x.grad.numpy()
        raise CheckFailed(f"the gradient of stable_softmax is {got if got is None else np.round(got, 6).tolist()}, "
                          f"expected p (g - sum(p g)) = {np.round(want, 6).tolist()}")


# ---------------------------------------------------------------- one contribution per head
def check_head_contributions(solution) -> None:
    """Each head's slice against numpy (weighted[:, h] times the columns of o_weight that read head h), and their
    sum against the output projection of the merged heads."""
    r = np.random.default_rng(3)
    B, H, L, d_head = 2, 4, 3, 5
    d_model = H * d_head
    weighted, w_o = r.standard_normal((B, H, L, d_head)), r.standard_normal((d_model, H * d_head))
    got = solution.head_contributions(tb.tensor(weighted, dtype=tb.float64), tb.tensor(w_o, dtype=tb.float64))
    if isinstance(got, (list, tuple)):
        raise CheckFailed(f"head_contributions returned a {type(got).__name__} of {len(got)}; return one Tensor "
                          f"(H, B, L, d_model) = {(H, B, L, d_model)}, the heads' contributions stacked on a new "
                          "first axis")
    got = tensor_result(got, "head_contributions", (H, B, L, d_model))
    want = np.stack([weighted[:, h] @ w_o[:, h * d_head:(h + 1) * d_head].T for h in range(H)])
    full = manual.linear_forward(manual.merge_heads(weighted), w_o)[0]                   # o_proj(merged)
    if np.abs(got - want).max() < 1e-12 and np.abs(got.sum(0) - full).max() < 1e-12:
        return
    rows = np.stack([weighted[:, h] @ w_o[h * d_head:(h + 1) * d_head] for h in range(H)])
    if np.abs(got - rows).max() < 1e-12:
        raise CheckFailed("each head's contribution came from a block of ROWS of o_weight; o_proj.weight is "
                          "stored (out, in), so a row belongs to one output and a column to one input: the weights "
                          "that read head h's d_head numbers are its block of columns")
    err = np.abs(got.sum(0) - full).max()
    raise CheckFailed(f"head_contributions: the slices are off by up to {np.abs(got - want).max():.3g}, and their sum "
                      f"differs from o_proj(merged) by {err:.3g}")


CHECKS = [("attention", check_attention), ("stable_softmax", check_stable_softmax),
          ("head_contributions", check_head_contributions)]
