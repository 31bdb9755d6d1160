"""Lesson 14's exercises: one AdamW step by hand, the warmup + cosine learning rate, and the logit lens. Each
check compares with an independent oracle (optim.AdamW stepping a float64 parameter, optim.warmup_cosine, and
the stream recomputed with the hand-derived numpy blocks of manual/) and names the usual slips when it sees one."""
from __future__ import annotations

import math
import numbers

import numpy as np

from tinygrad_block import manual, nn
from tinygrad_block.dtypes import float64
from tinygrad_block.generator import Generator
from tinygrad_block.manual.norms import rmsnorm_forward
from tinygrad_block.optim import AdamW, warmup_cosine
from tinygrad_block.tensor import Tensor, randint, tensor

from .common import CheckFailed, tensor_result

# ---------------------------------------------------------------- adamw_step
def _adamw_oracle(p, g, m, v, t, lr, betas, eps, wd):
    """(p, m, v) after optim.AdamW's step t on a float64 parameter whose state is (m, v) after step t - 1."""
    param = tensor(p, dtype=float64, requires_grad=True)
    opt = AdamW([param], lr, betas=betas, eps=eps, weight_decay=wd)
    if t > 1:
        opt.state[0].update(step=opt.scalar(t - 1), m=tensor(m, dtype=float64), v=tensor(v, dtype=float64))
    param.grad = tensor(g, dtype=float64)
    opt.step()
    return param.numpy(), opt.state[0]["m"].numpy(), opt.state[0]["v"].numpy()


def _adamw_slips(p, g, m, v, t, lr, betas, eps, wd) -> list:
    """(p after the step, hint) for the usual mistakes."""
    b1, b2 = betas
    m1, v1 = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g

    def step(mh, vh, decay=lr * wd, gg=None, inside=False):
        if gg is not None:                                      # L2: the decay folded into the gradient
            mm, vv = b1 * m + (1 - b1) * gg, b2 * v + (1 - b2) * gg * gg
            return p - lr * (mm / (1 - b1 ** t)) / (np.sqrt(vv / (1 - b2 ** t)) + eps)
        root = np.sqrt(vh + eps) if inside else np.sqrt(vh) + eps
        return p * (1 - decay) - lr * mh / root

    with np.errstate(all="ignore"):
        slips = [(step(m1, v1), "there is no bias correction: divide m by (1 - b1^t) and v by (1 - b2^t)"),
                 (step(m1 / (1 - b1 ** t), v1), "v is not bias-corrected: v_hat = v / (1 - b2^t)"),
                 (step(m1, v1 / (1 - b2 ** t)), "m is not bias-corrected: m_hat = m / (1 - b1^t)"),
                 (step(None, None, gg=g + wd * p),
                  "that is Adam with L2 regularisation: the decay was added to the gradient; AdamW decouples it, "
                  "p (1 - lr weight_decay), outside Adam's division"),
                 (step(m1 / (1 - b1 ** t), v1 / (1 - b2 ** t), decay=wd),
                  "the decay must be scaled by the learning rate: p (1 - lr weight_decay), not p (1 - weight_decay)"),
                 (step(m1 / (1 - b1 ** t), v1 / (1 - b2 ** t), decay=0.0), "the weight decay is missing"),
                 (step(m1 / (1 - b1 ** t), v1 / (1 - b2 ** t), inside=True),
                  "eps went inside the square root: sqrt(v_hat) + eps, not sqrt(v_hat + eps)"),
                 ((p - lr * (m1 / (1 - b1 ** t)) / (np.sqrt(v1 / (1 - b2 ** t)) + eps)) * (1 - lr * wd),
                  "the decay shrank the already-updated weights; it applies to the weights before the step, "
                  "p (1 - lr wd) - lr m_hat / (sqrt(v_hat) + eps)")]
        for off, word in ((t - 1, "from 0: step t uses b^t with t = 1 on the first step"),
                          (t + 1, "one too far: the first step is t = 1, and t is already this step's number")):
            if off > 0:
                slips.append((step(m1 / (1 - b1 ** off), v1 / (1 - b2 ** off)),
                              f"the bias correction counts the steps {word}"))
    return slips


ADAM_CASES = [(1, 1e-3, (0.9, 0.999), 1e-8, 0.01), (3, 3e-3, (0.9, 0.95), 1e-3, 0.1),
              (40, 2e-2, (0.8, 0.99), 1e-8, 0.05)]


def check_adamw_step(solution) -> None:
    """Three steps (the first, from zero state; an early one; a late one) against optim.AdamW."""
    r = np.random.default_rng(14)
    for t, lr, betas, eps, wd in ADAM_CASES:
        p, g = r.standard_normal((5, 7)), 0.01 * r.standard_normal((5, 7))
        m = np.zeros_like(p) if t == 1 else 0.01 * r.standard_normal(p.shape)
        v = np.zeros_like(p) if t == 1 else 1e-4 * r.random(p.shape)
        call = f"adamw_step(t={t}, lr={lr}, betas={betas}, eps={eps}, weight_decay={wd})"
        got = solution.adamw_step(p.copy(), g.copy(), m.copy(), v.copy(), t, lr, betas, eps, wd)
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise CheckFailed(f"{call} must return a tuple (p, m, v); got {type(got).__name__}")
        got = [np.asarray(x.numpy() if isinstance(x, Tensor) else x, dtype=float) for x in got]
        if any(x.shape != p.shape for x in got):
            raise CheckFailed(f"{call} returned shapes {[x.shape for x in got]}; each must be p's shape {p.shape}")
        want = _adamw_oracle(p, g, m, v, t, lr, betas, eps, wd)
        if not np.allclose(got[0], want[0], rtol=1e-10, atol=1e-15):
            hint = next((h for wrong, h in _adamw_slips(p, g, m, v, t, lr, betas, eps, wd)
                         if np.all(np.isfinite(wrong)) and np.allclose(got[0], wrong, rtol=1e-10, atol=1e-15)), "")
            if not hint and not np.all(np.isfinite(got[0])):
                hint = "the weights are not finite: at t = 1, 1 - b^(t - 1) = 0; the first step is t = 1"
            raise CheckFailed(f"{call}: p is off by up to {np.abs(got[0] - want[0]).max():.3g} from optim.AdamW's "
                              "step" + (f": {hint}" if hint else ""))
        for name, x, w, given in (("m", got[1], want[1], m), ("v", got[2], want[2], v)):
            if not np.allclose(x, w, rtol=1e-10, atol=0):
                rule = "m = b1 m + (1 - b1) g" if name == "m" else "v = b2 v + (1 - b2) g^2"
                hint = (f"it is the {name} you were given; return the updated one" if np.array_equal(x, given)
                        else rule)
                raise CheckFailed(f"{call}: p is right, but the returned {name} is off by up to "
                                  f"{np.abs(x - w).max():.3g}: {hint}")


# ---------------------------------------------------------------- lr_at
LR_CASES = [(3e-3, 20, 150, 3e-4, [0, 1, 10, 19, 20, 21, 50, 85, 120, 149, 150, 151, 400]),
            (1.0, 4, 10, 0.0, [0, 3, 4, 6, 7, 9, 10, 12]),
            (6e-4, 0, 100, 6e-5, [0, 1, 25, 50, 99, 100])]


def _lr_slips(step, lr_max, warmup, total, lr_min) -> list:
    """(value, hint) of the usual mistakes at this step."""
    slips = []
    if step < warmup:
        slips += [(lr_max * step / warmup, "the warmup starts at 0: it is lr_max (step + 1) / warmup, so step 0 "
                                           "already takes a small step and step warmup - 1 reaches lr_max")]
        return slips
    span = total - warmup
    if step >= total:
        phase = (step - warmup) / span
        return [(lr_min + (lr_max - lr_min) * (1 + math.cos(math.pi * phase)) / 2,
                 f"past the last step the cosine must stop: lr = lr_min from step total = {total} on")]
    x = (step - warmup) / span
    cos = lambda f: (1 + math.cos(f)) / 2                          # noqa: E731
    return [(lr_min + (lr_max - lr_min) * cos(math.pi * step / total),
             "the cosine's phase must start at the end of the warmup: pi (step - warmup) / (total - warmup)"),
            (lr_min + (lr_max - lr_min) * cos(math.pi * (step - warmup) / total),
             "the cosine runs over total - warmup steps, not total: pi (step - warmup) / (total - warmup)"),
            (lr_min + (lr_max - lr_min) * cos(math.pi * (step - warmup) / max(span - 1, 1)),
             "the cosine reaches lr_min at step total (one past the last step), not at total - 1: "
             "pi (step - warmup) / (total - warmup)"),
            (lr_min + (lr_max - lr_min) * cos(2 * math.pi * x), "that is a full cosine period; it is half of one, "
                                                               "pi (step - warmup) / (total - warmup)"),
            (lr_max * cos(math.pi * x), "it decays to 0, not to lr_min: lr_min + (lr_max - lr_min) (1 + cos) / 2"),
            (lr_min + (lr_max - lr_min) * (1 - x), "that is a linear decay; the schedule is half a cosine, "
                                                   "lr_min + (lr_max - lr_min) (1 + cos(pi x)) / 2")]


def check_lr_at(solution) -> None:
    """Every case against optim.warmup_cosine, on the edges of the warmup, the cosine and beyond."""
    for lr_max, warmup, total, lr_min, steps in LR_CASES:
        for step in steps:
            want = warmup_cosine(step, lr_max, warmup, total, lr_min)
            got = solution.lr_at(step, lr_max, warmup, total, lr_min)
            call = f"lr_at(step={step}, lr_max={lr_max}, warmup={warmup}, total={total}, lr_min={lr_min})"
            if not isinstance(got, numbers.Real) or isinstance(got, bool):
                raise CheckFailed(f"{call} returned {got!r}, a {type(got).__name__}; return a float")
            if math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-15):
                continue
            hint = next((h for value, h in _lr_slips(step, lr_max, warmup, total, lr_min)
                         if not math.isclose(value, want, rel_tol=1e-12, abs_tol=1e-15)
                         and math.isclose(got, value, rel_tol=1e-12, abs_tol=1e-15)), "")
            raise CheckFailed(f"{call} = {got:.10g}, but warmup_cosine gives {want:.10g}"
                              + (f": {hint}" if hint else ""))


# ---------------------------------------------------------------- logit_lens
LENS_CFG = nn.BlockConfig(d_model=16, n_heads=4, n_kv_heads=2, d_ff=24, n_layers=3, vocab_size=20, max_seq_len=16,
                          name="lens")


def _lens_model() -> nn.LM:
    """A float64 LM whose every parameter is random, norm gains included, so each step of the lens shows."""
    model = nn.LM(LENS_CFG, generator=Generator(0), dtype=float64)
    r = np.random.default_rng(140)
    model.load_state_dict({name: tensor(1 + 0.3 * r.standard_normal(q.shape) if q.ndim == 1 else
                                        r.standard_normal(q.shape) / np.sqrt(q.shape[-1]), dtype=float64)
                           for name, q in model.named_parameters()})
    return model


def _lens_by_hand(model: nn.LM, ids: np.ndarray) -> tuple[list, list]:
    """(the streams after the embedding and each block, their logits), with manual's numpy blocks."""
    stream, streams = model.embed.weight.numpy()[ids], []               # (B, L, d_model)
    streams.append(stream)
    for block in model.layers:
        params = {name: q.numpy() for name, q in block.named_parameters()}
        stream, _ = manual.block_forward(stream, params, LENS_CFG)
        streams.append(stream)
    W_U, gain = model.lm_head.weight.numpy(), model.norm.weight.numpy()  # (vocab, d_model), (d_model,)
    return streams, [rmsnorm_forward(s, gain, LENS_CFG.norm_eps)[0] @ W_U.T for s in streams]


def check_logit_lens(solution) -> None:
    """Each stage against the stream recomputed by hand and read through the final RMSNorm and W_U."""
    model, ids = _lens_model(), randint(0, LENS_CFG.vocab_size, (2, 7), generator=Generator(141))
    n, shape = LENS_CFG.n_layers, (2, 7, LENS_CFG.vocab_size)
    got = solution.logit_lens(model, ids)
    if not isinstance(got, (list, tuple)):
        raise CheckFailed(f"logit_lens must return a list of {n + 1} Tensors; got {type(got).__name__}")
    streams, want = _lens_by_hand(model, ids.numpy())
    if len(got) == 2 * n + 1:
        raise CheckFailed(f"logit_lens returned {len(got)} stages for {n} blocks: read the stream after each block "
                          f"(n_layers + 1 = {n + 1} in all, the embedding first), not after each sublayer")
    if len(got) != n + 1:
        hint = ": the stream right after the embedding comes first" if len(got) == n else ""
        raise CheckFailed(f"logit_lens returned {len(got)} stages for {n} blocks; expected n_layers + 1 = {n + 1}"
                          + hint)
    for i, x in enumerate(got):
        if isinstance(x, Tensor) and x.shape == streams[i].shape != shape:
            raise CheckFailed(f"stage {i} has shape {x.shape}, the stream's: read it through model.norm and "
                              f"model.lm_head to get logits {shape}")
        x = tensor_result(x, f"logit_lens stage {i}", shape)
        if np.abs(x - want[i]).max() < 1e-10:
            continue
        W_U = model.lm_head.weight.numpy()
        norm1 = rmsnorm_forward(streams[i], model.layers[min(i, n - 1)].norm1.weight.numpy(), LENS_CFG.norm_eps)[0]
        slips = [(streams[i] @ W_U.T, "the final norm is missing: logits = lm_head(norm(stream))"),
                 (norm1 @ W_U.T, "read every stage through the model's final norm, model.norm, not a block's norm1"),
                 (manual.softmax_forward(want[i])[0], "those are probabilities; return the logits (no softmax)"),
                 (want[i + 1] if i < n else None, f"stage {i} is the stream after {i} blocks; stage 0 is the "
                                                  "embedding itself, before any block")]
        hint = next((h for wrong, h in slips if wrong is not None and np.abs(x - wrong).max() < 1e-10), "")
        raise CheckFailed(f"logit_lens stage {i} ({'the embedding' if i == 0 else f'after block {i - 1}'}) is off "
                          f"by up to {np.abs(x - want[i]).max():.3g}" + (f": {hint}" if hint else ""))
    if np.abs(got[-1].numpy() - model(ids).numpy()).max() > 1e-10:
        raise CheckFailed("the last stage differs from model(ids)")


CHECKS = [("adamw_step", check_adamw_step), ("lr_at", check_lr_at), ("logit_lens", check_logit_lens)]
