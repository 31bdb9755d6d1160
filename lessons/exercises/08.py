"""Lesson 08's exercises: the SwiGLU FFN from Tensor ops, the hidden width by Meta's rounding rule, and the FFN's
share of a model's parameters. Each check compares with an independent oracle (SwiGLU's forward and backward
from manual/ and nn.SwiGLU, the published widths of the presets, the parameters of each model built on the
shape-only device) and says what is wrong, with the numbers, naming the usual slips when it sees one."""
from __future__ import annotations

import math

import numpy as np

import tinygrad_block as tb
from tinygrad_block import manual, nn
from tinygrad_block.measure import meta_lm

from .common import CheckFailed, tensor_result

# ---------------------------------------------------------------- swiglu
W_GATE = np.array([[0.5, -0.3, 0.1], [0.2, 0.4, -0.2], [-0.1, 0.3, 0.5], [0.3, -0.1, 0.2]])   # (in, out): x @ W
W_UP = np.array([[0.4, 0.2, -0.1], [-0.3, 0.5, 0.3], [0.1, -0.2, 0.4], [0.2, 0.1, -0.3]])
W_DOWN = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, -0.5], [0.2, -0.3, 1.0], [-1.0, 0.4, 0.0]])   # (out, in) = (4, 3)


def _swiglu_np(x, w_gate, w_up, w_down, slip: str = ""):
    """The oracle: manual.swiglu_forward, weights stored (out, in). `slip` gives the usual mistakes: the gate and up
    projections swapped (SiLU on the up projection), or the gate's SiLU replaced by a sigmoid (GLU) or by 1."""
    if slip == "gate on up":
        w_gate, w_up = w_up, w_gate
    if slip in ("sigmoid", "no gate"):
        gate = manual.sigmoid(x @ w_gate.T) if slip == "sigmoid" else 1.0                  # (B, L, d_ff)
        return (gate * (x @ w_up.T)) @ w_down.T
    return manual.swiglu_forward(x, manual.Linear(w_gate), manual.Linear(w_up), manual.Linear(w_down))[0]


SWIGLU_SLIPS = [("gate on up", "SiLU went on the up projection; SiLU belongs on the gate projection, and the "
                               "up projection passes through unchanged"),
                ("sigmoid", "that is GLU, whose gate is a sigmoid; SwiGLU's gate is SiLU(z) = z * sigmoid(z)"),
                ("no gate", "the gate is missing: the hidden vector is SiLU(gate) * up, not up alone")]


def _call_swiglu(solution, arrays, where: str) -> np.ndarray:
    x, wg, wu, wd = (tb.tensor(a, dtype=tb.float64) for a in arrays)
    try:
        got = solution.swiglu(x, wg, wu, wd)
    except (ValueError, IndexError) as e:
        raise CheckFailed(f"swiglu on {where} raised {type(e).__name__}: {e}. The weights are stored (out, in): "
                          "w_gate and w_up are (d_ff, d_model) and w_down is (d_model, d_ff), so each projection "
                          "multiplies by its weight turned round (its last two axes swapped)") from None
    return tensor_result(got, "swiglu", x.shape)


def check_swiglu(solution) -> None:
    """The worked example (d_model 4, d_ff 3) against numpy; a random FFN against nn.SwiGLU; the gradients of x and
    the three weights against the hand-derived backward (manual.swiglu_backward)."""
    example = (np.array([[[1.0, -0.5, 0.2, 0.8]]]), W_GATE.T, W_UP.T, W_DOWN)
    r = np.random.default_rng(7)
    d, d_ff = 6, 10
    rand = (r.standard_normal((2, 3, d)), r.standard_normal((d_ff, d)) / math.sqrt(d),
            r.standard_normal((d_ff, d)) / math.sqrt(d), r.standard_normal((d, d_ff)) / math.sqrt(d_ff))
    for where, arrays in (("the worked example, x = [1, -0.5, 0.2, 0.8]", example),
                          ("a random (2, 3, 6) input, d_ff = 10", rand)):
        got, want = _call_swiglu(solution, arrays, where), _swiglu_np(*arrays)
        if np.abs(got - want).max() < 1e-12:
            continue
        for slip, hint in SWIGLU_SLIPS:
            if np.abs(got - _swiglu_np(*arrays, slip=slip)).max() < 1e-12:
                raise CheckFailed(f"swiglu on {where} is {np.round(got.ravel()[:4], 4).tolist()}..., expected "
                                  f"{np.round(want.ravel()[:4], 4).tolist()}...: {hint}")
        hidden = manual.silu_forward(arrays[0] @ W_GATE)[0] * (arrays[0] @ W_UP) if arrays is example else None
        extra = (f" (the hidden vector SiLU(gate) * up should be {np.round(hidden.ravel(), 4).tolist()})"
                 if hidden is not None else "")
        raise CheckFailed(f"swiglu on {where} is {np.round(got.ravel()[:4], 6).tolist()}..., expected "
                          f"{np.round(want.ravel()[:4], 6).tolist()}... (W_down(SiLU(W_gate x) * W_up x)){extra}")
    cfg = nn.BlockConfig(d_model=d, n_heads=1, n_kv_heads=1, d_ff=d_ff)
    module = nn.SwiGLU(cfg, generator=tb.Generator(0), dtype=tb.float64)
    module.load_state_dict({name: tb.tensor(a, dtype=tb.float64) for name, a in
                            zip(("gate_proj.weight", "up_proj.weight", "down_proj.weight"), rand[1:])})
    if np.abs(_call_swiglu(solution, rand, "nn.SwiGLU's input") -
              module(tb.tensor(rand[0], dtype=tb.float64)).numpy()).max() > 1e-12:
        raise CheckFailed("swiglu differs from nn.SwiGLU with the same weights")
    leaves = [tb.tensor(a, dtype=tb.float64, requires_grad=True) for a in rand]
    out = solution.swiglu(*leaves)
    if not out.requires_grad:
        raise CheckFailed("no gradient reaches x or the weights: build swiglu from Tensor ops, not numpy arrays")
    dout = r.standard_normal(out.shape)
    (out * tb.tensor(dout, dtype=tb.float64)).sum().backward()
    _, cache = manual.swiglu_forward(rand[0], manual.Linear(rand[1]), manual.Linear(rand[2]), manual.Linear(rand[3]))
    dx, grads = manual.swiglu_backward(dout, cache)
    dw = [grads[proj]["weight"] for proj in ("gate_proj", "up_proj", "down_proj")]
    for name, leaf, want in zip(("x", "w_gate", "w_up", "w_down"), leaves, (dx, *dw)):
        if leaf.grad is None:
            raise CheckFailed(f"no gradient reached {name}: build swiglu from Tensor ops, not numpy arrays")
        if np.abs(leaf.grad.numpy() - want).max() > 1e-12:
            raise CheckFailed(f"the gradient of {name} is off by {np.abs(leaf.grad.numpy() - want).max():.3g} from "
                              "the hand-derived backward")


# ---------------------------------------------------------------- swiglu_width
WIDTHS = [("llama2-7b", 256, None), ("llama2-13b", 256, None), ("llama2-70b", 4096, 1.3),
          ("llama3-8b", 1024, 1.3), ("tinyllama-1.1b", 256, None)]


def check_swiglu_width(solution) -> None:
    """Each published width (the presets' d_ff) from its d_model, multiple_of and multiplier."""
    for name, multiple_of, mult in WIDTHS:
        cfg = nn.preset(name)
        args = f"swiglu_width({cfg.d_model}, {multiple_of}{'' if mult is None else f', {mult}'})"
        got = solution.swiglu_width(cfg.d_model, multiple_of, mult)
        if isinstance(got, float) and got == cfg.d_ff:
            raise CheckFailed(f"{args} = {got!r} is a float; a width is an int (use // or int())")
        if not isinstance(got, (int, np.integer)) or isinstance(got, bool):
            raise CheckFailed(f"{args} must return an int; got {type(got).__name__} {got!r}")
        if got == cfg.d_ff:
            continue
        hint = _width_hint(cfg.d_model, multiple_of, mult, got)
        raise CheckFailed(f"{args} = {got}, {'below' if got < cfg.d_ff else 'above'} {name}'s published width"
                          + (f": {hint}" if hint else ""))


def _width_hint(d_model: int, multiple_of: int, mult: float | None, got: int) -> str:
    """The usual slip that gives exactly `got`, named with the numbers on the way but not the answer."""
    hidden = int(2 * 4 * d_model / 3)
    if mult is not None:
        hidden = int(mult * hidden)
    up, down = -(-hidden // multiple_of) * multiple_of, hidden // multiple_of * multiple_of
    nearest = " (the nearest one, too)" if round(hidden / multiple_of) * multiple_of == down else ""
    slips = [(-(-int(2 * 4 * d_model / 3) // multiple_of) * multiple_of, "the multiplier was left out"),
             (-(-int((mult or 0) * 4 * d_model) // multiple_of) * multiple_of,
              "the multiplier went on 4 d_model; it multiplies the 2/3 * 4 d_model width"),
             (down, f"that is the multiple of {multiple_of} below {hidden}{nearest}; Meta's code rounds UP, to the "
                    f"first multiple of {multiple_of} at or above the width"),
             (hidden, f"that is {hidden} before rounding; round it up to a multiple of {multiple_of}")]
    return next((h for value, h in slips if value == got and value != up), "")


# ---------------------------------------------------------------- ffn_share
SHARE_MODELS = ["llama2-7b", "llama2-70b", "llama3-8b", "smollm-135m", "gpt2-small"]


def _counted(cfg: nn.BlockConfig) -> dict:
    """Parameters of nn.LM(cfg) built on meta: the FFNs', each block's FFN weights alone, and everything."""
    ffn = weights = total = 0
    for name, p in meta_lm(cfg).named_parameters():
        total += p.size
        if ".ffn." in name:
            ffn += p.size
            weights += p.size if name.endswith(".weight") else 0
    return {"ffn": ffn, "weights": weights, "total": total}


def check_ffn_share(solution) -> None:
    """The share counted on the shape-only device, for Llama-2 7B and 70B, Llama-3-8B, SmolLM (tied embeddings) and
    GPT-2 small (the classic FFN with biases, tied embeddings, learned positions)."""
    for name in SHARE_MODELS:
        cfg = nn.preset(name)
        got = solution.ffn_share(cfg)
        if not isinstance(got, (float, int, np.floating)) or isinstance(got, bool):
            raise CheckFailed(f"ffn_share(preset({name!r})) must return a number (a fraction); got "
                              f"{type(got).__name__}")
        n = _counted(cfg)
        want = n["ffn"] / n["total"]
        if abs(got - want) < 1e-12:
            continue
        side = "more" if got > want else "less"
        raise CheckFailed(f"ffn_share(preset({name!r})) = {float(got):.6f}, {side} than the share counted on the "
                          f"model{_share_hint(cfg, float(got), n)}")
    share = solution.ffn_share(nn.preset("llama2-7b"))
    if not share > 0.6:
        raise CheckFailed(f"Llama-2-7B's FFN share is {share:.4f}, not more than 0.6")


def _share_hint(cfg: nn.BlockConfig, got: float, n: dict) -> str:
    """Name the usual slip when the learner's number is what it would give: each slip's share is counted on the
    model of a changed config, or from the counts with one matrix too few or too many."""
    total, per_matrix = n["total"], cfg.n_layers * cfg.d_model * cfg.d_ff
    block = meta_lm(cfg).layers[0]
    three = cfg.ffn == "swiglu"
    matrices = ("that counts two matrices per FFN; SwiGLU has three: gate, up and down" if three else
                "that counts three matrices per FFN; the classic FFN has two (up and down): only SwiGLU has a gate")
    extra = -per_matrix if three else per_matrix
    slips = [((n["ffn"] + extra) / (total + extra), matrices), ((n["ffn"] + extra) / total, matrices),
             (block.ffn.num_parameters() / block.num_parameters(),
              "that is the FFN's share of ONE BLOCK; the exercise asks for its share of the whole model, embedding "
              "and LM head included"),
             (_share(cfg.with_(tie_embeddings=not cfg.tie_embeddings)),
              "the LM head was counted, but this model ties it to the embedding (cfg.tie_embeddings): the same "
              "matrix, counted once" if cfg.tie_embeddings else
              "the LM head is missing from the total: untied, it is a second vocab_size x d_model matrix")]
    if cfg.bias:
        slips.append((_share(cfg.with_(bias=False)), "the biases are missing (cfg.bias: one per output of each "
                                                     "projection, and LayerNorm's shifts)"))
    if not cfg.rope:
        slips.append((_share(cfg.with_(rope=True)), "the learned position embedding (max_seq_len x d_model) is "
                                                    "missing from the total"))
    hint = next((f": {hint}" for value, hint in slips if abs(got - value) < 1e-9), "")
    if hint or not got > 0:
        return hint
    off = round(n["ffn"] / got) - total                                   # the learner's total, if their FFN is right
    per_block = f" ({cfg.n_layers} blocks x {abs(off) // cfg.n_layers:,})" if off % cfg.n_layers == 0 else ""
    return (f" (if your FFN count is right, your total has {abs(off):,} parameters "
            f"{'too few' if off < 0 else 'too many'}{per_block}: compare each part with the model's "
            "named_parameters())" if off else "")


def _share(cfg: nn.BlockConfig) -> float:
    n = _counted(cfg)
    return n["ffn"] / n["total"]


CHECKS = [("swiglu", check_swiglu), ("swiglu_width", check_swiglu_width), ("ffn_share", check_ffn_share)]
