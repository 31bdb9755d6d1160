"""Lesson 07's exercises: RoPE from Tensor ops, repeat_kv for grouped-query attention, and the KV cache of a whole
model. Each check compares with an independent oracle (the library's nn.apply_rope, manual/'s RoPE and rotations
written in numpy, manual.repeat_kv and its backward, accounting.kv_cache_bytes and the K and V measured on the
shape-only device) and says what is wrong, with the numbers, naming the usual slips when it sees one."""
from __future__ import annotations

import numbers

import numpy as np

import tinygrad_block as tb
from tinygrad_block import accounting, manual, nn
from tinygrad_block.measure import meta_ids, meta_lm

from .common import CheckFailed, tensor_result

# ---------------------------------------------------------------- RoPE
def _rope_np(x, positions, theta, *, adjacent=False, exponent=2.0, sign=1.0) -> np.ndarray:
    """RoPE in numpy, with the usual slips as options: adjacent pairs (2i, 2i + 1), the frequency
    theta^(-exponent i / d), the rotation turned the other way (sign -1)."""
    d = x.shape[-1]
    angle = sign * np.asarray(positions, float)[:, None] * theta ** (-exponent * np.arange(d // 2) / d)   # (L, d/2)
    c, s = np.cos(angle), np.sin(angle)
    if adjacent:
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = a * c - b * s, b * c + a * s
        return out
    a, b = x[..., :d // 2], x[..., d // 2:]
    return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)


def _library_rope(x: np.ndarray, positions, theta) -> np.ndarray:
    """nn.apply_rope with the library's tables, rows taken at `positions`."""
    cos, sin = nn.rope_tables(max(positions) + 1, x.shape[-1], theta, tb.float64, "cpu")
    return nn.apply_rope(tb.tensor(x), cos[list(positions)], sin[list(positions)]).numpy()


ROPE_SLIPS = [
    (dict(adjacent=True), "you rotated adjacent pairs (2i, 2i + 1), the layout of the RoPE paper and Meta's original "
                          "Llama code; this library, like Hugging Face's Llama, pairs dimension i with i + d_head/2"),
    (dict(exponent=1.0), "the frequencies are theta^(-i/d_head); pair i turns by theta^(-2i/d_head) per token "
                         "(i counts pairs, and 2i is the pair's first dimension in the adjacent layout)"),
    (dict(sign=-1.0), "the rotation turns the wrong way: the first number of a pair becomes x1 cos - x2 sin, the "
                      "second x2 cos + x1 sin"),
]
ROPE_CASES = [((2, 3, 5, 8), [37, 38, 39, 40, 41], 10000.0), ((1, 2, 5, 16), [0, 7, 2, 1000, 3], 500000.0)]


def check_rope(solution) -> None:
    """Values against nn.apply_rope at the given positions, for two thetas; the gradient against the inverse
    rotation, manual.rope_backward (the transpose of a rotation is the rotation by minus the angle)."""
    r = np.random.default_rng(0)
    for shape, positions, theta in ROPE_CASES:
        x = r.standard_normal(shape)
        got = tensor_result(solution.rope(tb.tensor(x), list(positions), theta), "rope", shape)
        want = _library_rope(x, positions, theta)
        call = f"rope(x {shape}, positions={positions}, theta={theta:g})"
        err = np.abs(got - want).max()
        if err < 1e-12:
            continue
        hints = [hint for slip, hint in ROPE_SLIPS if np.abs(got - _rope_np(x, positions, theta, **slip)).max() < 1e-9]
        if np.abs(got - manual.rope_forward(x, theta)[0]).max() < 1e-9:                      # positions 0..L-1
            hints.append("the rotation uses positions 0..L-1; use the `positions` given")
        if np.abs(got - _rope_np(x, positions, 10000.0)).max() < 1e-9:
            hints.append("the rotation uses theta = 10000 whatever `theta` is given")
        raise CheckFailed(f"{call} is off by up to {err:.3g} from nn.apply_rope" + (": " + hints[0] if hints else ""))
    x = tb.tensor(r.standard_normal((1, 2, 5, 8)), requires_grad=True)
    positions = [3, 4, 5, 6, 7]
    out = solution.rope(x, positions, 10000.0)
    if not out.requires_grad:
        raise CheckFailed("no gradient reaches x: build rope from Tensor ops on x, not from numpy arrays")
    g = r.standard_normal(x.shape)
    (out * tb.tensor(g)).sum().backward()
    want = manual.rope_backward(g, manual.rope_forward(x.numpy(), 10000.0, offset=positions[0])[1])   # R^T g
    if x.grad is None or np.abs(x.grad.numpy() - want).max() > 1e-12:
        raise CheckFailed("the gradient of rope is not the inverse rotation of the upstream gradient (off by "
                          f"{np.inf if x.grad is None else np.abs(x.grad.numpy() - want).max():.3g})")


# ---------------------------------------------------------------- repeat_kv
def check_repeat_kv(solution) -> None:
    """Values against manual.repeat_kv, numpy's repeat along the head axis (head h reads KV head h // n_rep); the
    gradient against manual.repeat_kv_backward, the sum over each group."""
    r = np.random.default_rng(1)
    for shape, n_rep in (((2, 3, 4, 5), 2), ((2, 2, 3, 4), 1), ((1, 1, 3, 4), 4), ((1, 2, 3, 4), 3)):
        x = r.standard_normal(shape)
        B, H_kv, L, d = shape
        out_shape = (B, H_kv * n_rep, L, d)
        got = tensor_result(solution.repeat_kv(tb.tensor(x), n_rep), f"repeat_kv(x {shape}, {n_rep})", out_shape)
        want = manual.repeat_kv(x, n_rep)
        if np.array_equal(got, want):
            continue
        reads = [next((j for j in range(H_kv) if np.array_equal(got[:, h], x[:, j])), None)
                 for h in range(H_kv * n_rep)]
        hint = (": that is tiling, query head h reading KV head h % H_kv; GQA hands KV head j to the consecutive query "
                "heads j * n_rep .. j * n_rep + n_rep - 1, so head h reads h // n_rep (reshape to "
                "(B, H_kv, 1, L, d), expand the new axis to n_rep, reshape back)"
                if reads == [h % H_kv for h in range(H_kv * n_rep)] else "")
        raise CheckFailed(f"repeat_kv(x {shape}, {n_rep}): query heads 0..{H_kv * n_rep - 1} read KV heads {reads}, "
                          f"expected {[h // n_rep for h in range(H_kv * n_rep)]}{hint}")
    x = tb.tensor(r.standard_normal((2, 3, 4, 5)), requires_grad=True)
    out = solution.repeat_kv(x, 2)
    if not out.requires_grad:
        raise CheckFailed("no gradient reaches x: build repeat_kv from Tensor ops, not from numpy arrays")
    g = r.standard_normal(out.shape)
    out.backward(tb.tensor(g))
    want = manual.repeat_kv_backward(g, 2)                                # each KV head: the sum over its group
    if x.grad is None or np.abs(x.grad.numpy() - want).max() > 1e-12:
        raise CheckFailed("the gradient of each KV head must be the sum of its group's gradients (query heads 2j "
                          "and 2j + 1 for n_rep = 2)")


# ---------------------------------------------------------------- the KV cache
def measured_kv_bytes(cfg: nn.BlockConfig, batch: int, seq_len: int, bytes_per_element: int) -> int:
    """The K and V that every layer computes, measured: the whole model run on the shape-only device in float16,
    the bytes of each layer's k_proj and v_proj outputs added up, and scaled to bytes_per_element."""
    found = []

    def keep(event):
        if event.scope[-1:] in (("k_proj",), ("v_proj",)) and event.op.name == "matmul":
            found.append(event.output.size)
    with tb.no_grad(), tb.observe(keep):
        meta_lm(cfg, tb.float16)(meta_ids(batch, seq_len))
    return sum(found) * bytes_per_element


KV_CASES = [("llama2-7b", nn.preset("llama2-7b"), 1, 4096, 2), ("llama2-70b", nn.preset("llama2-70b"), 1, 4096, 2),
            ("llama2-70b with MQA", nn.preset("llama2-70b").with_(n_kv_heads=1), 4, 1024, 2),
            ("llama3-8b", nn.preset("llama3-8b"), 3, 8192, 4), ("tiny", nn.preset("tiny"), 2, 16, 4)]


def check_kv_cache_bytes(solution) -> None:
    """Each case against accounting.kv_cache_bytes and the measured K and V; the usual slips named."""
    for name, cfg, batch, seq_len, size in KV_CASES:
        got = solution.kv_cache_bytes(cfg, batch, seq_len, size)
        want = accounting.kv_cache_bytes(cfg, seq_len, batch, size)
        measured = measured_kv_bytes(cfg, batch, seq_len, size)
        assert measured == want, (name, measured, want)                  # the two oracles agree
        call = f"kv_cache_bytes({name}, batch={batch}, seq_len={seq_len}, bytes_per_element={size})"
        if not isinstance(got, numbers.Integral) or isinstance(got, bool):
            raise CheckFailed(f"{call} returned {got!r}, a {type(got).__name__}; return an int (bytes are whole "
                              "numbers: no division is needed)")
        if got == want:
            continue
        hint = ""
        per = 2 * cfg.n_layers * batch * seq_len * size
        if got == per * cfg.n_heads * cfg.d_head and cfg.n_heads != cfg.n_kv_heads:
            hint = (f": that counts all {cfg.n_heads} query heads, but only the n_kv_heads = {cfg.n_kv_heads} "
                    "key/value heads are cached (each is shared by a group of query heads)")
        elif got * 2 == want:
            hint = ": half the answer. The cache keeps K and V, two tensors per layer"
        elif got * cfg.n_layers == want:
            hint = f": that is one layer; each of the {cfg.n_layers} layers keeps its own K and V"
        elif got * batch == want:
            hint = f": that is one sequence; each of the {batch} sequences of the batch has its own cache"
        raise CheckFailed(f"{call} = {got:,}, expected {want:,} (measured on the model: K and V of every layer){hint}")


CHECKS = [("rope", check_rope), ("repeat_kv", check_repeat_kv), ("kv_cache_bytes", check_kv_cache_bytes)]
