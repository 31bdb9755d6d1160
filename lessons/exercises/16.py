"""Lesson 16's exercises: merging two partial states of the online softmax, the arithmetic intensity of a decode
step, and the roofline's bound on decode speed. Each check compares with an independent oracle (the softmax over
all the keys in numpy; the model's decode step run on the shape-only device with a KV cache, its FLOPs counted
and its weights and cache measured) and says what is wrong, with the numbers, naming the usual slips."""
from __future__ import annotations

import math
import numbers
from functools import cache

import numpy as np

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.counting import count_flops
from tinygrad_block.measure import meta_ids, meta_lm

from .common import CheckFailed, tensor_result

# ---------------------------------------------------------------- 1. merging two online-softmax states
def _states(seed: int, R: int, n1: int, n2: int, d: int, offset: float):
    """Scores (R, n1 + n2) and values (n1 + n2, d); the two parts' (m, l, acc); the exact merged (m, l, acc).
    The second part's scores are shifted up on even rows, so the larger maximum lies in either part."""
    r = np.random.default_rng(seed)
    s = offset + 4 * r.standard_normal((R, n1 + n2))
    s[::2, n1:] += 3.0
    v = r.standard_normal((n1 + n2, d))

    def state(scores, values):
        m = scores.max(axis=1, keepdims=True)
        p = np.exp(scores - m)
        return m, p.sum(axis=1, keepdims=True), p @ values
    return s, v, state(s[:, :n1], v[:n1]), state(s[:, n1:], v[n1:]), state(s, v)


MERGE_CASES = [("scores around 0", (0, 6, 5, 7, 3, 0.0)), ("scores around 720", (1, 5, 4, 4, 2, 720.0)),
               ("one key in the first part", (2, 4, 1, 9, 5, 10.0))]


def _merge_hint(got, parts, want) -> str:
    """The usual slip behind a wrong (m, l, acc), if one fits."""
    (m1, l1, a1), (m2, l2, a2) = parts
    m, ell, a = want
    e1, e2 = np.exp(m1 - m), np.exp(m2 - m)
    slips = [((m, ell, a1 + a2), "acc must be rescaled like l: acc = acc1 exp(m1 - m) + acc2 exp(m2 - m)"),
                 ((m, l1 + l2, a), "l must be rescaled: l = l1 exp(m1 - m) + l2 exp(m2 - m)"),
                 ((m, l1 + l2, a1 + a2), "each part's l and acc were taken against its own maximum; restate them "
                                         "against the common m by multiplying by exp(m_i - m)"),
                 ((m, l1 / e1 + l2 / e2, a1 / e1[:, :1] + a2 / e2[:, :1]),
                  "the rescaling's sign: exp(m_i - m) (at most 1), not exp(m - m_i)"),
                 ((m, 1.0, a / ell), "return acc itself, not acc / l: the merged state must stay mergeable")]
    for slip, why in slips:
        with np.errstate(over="ignore", invalid="ignore"):
            if all(np.allclose(g, w, rtol=1e-9, atol=0) for g, w in zip(got, slip)):
                return ": " + why
    return ""


def check_merge_softmax_states(solution) -> None:
    """Each case: the merged (m, l, acc) against the state of all the keys at once, computed in numpy."""
    for name, (seed, R, n1, n2, d, offset) in MERGE_CASES:
        _, _, one, two, want = _states(seed, R, n1, n2, d, offset)
        args = [tb.tensor(x, dtype=tb.float64) for x in one + two]
        call = f"merge_softmax_states({name}, R={R}, d={d})"
        got = solution.merge_softmax_states(*args)
        if not isinstance(got, tuple) or len(got) != 3:
            raise CheckFailed(f"{call} returned {type(got).__name__}; return a tuple of three Tensors (m, l, acc)")
        got = [tensor_result(t, f"{call}'s {what}", shape) for t, what, shape in
               zip(got, ("m", "l", "acc"), ((R, 1), (R, 1), (R, d)))]
        if not np.array_equal(got[0], want[0]):
            raise CheckFailed(f"{call}: m is {got[0].ravel()}, expected {want[0].ravel()}, the larger of m1 and m2 "
                              "for each row (the largest score of all the keys)")
        for i, what in ((1, "l"), (2, "acc")):
            if not np.allclose(got[i], want[i], rtol=1e-10, atol=0):
                err = np.abs(got[i] - want[i]).max()
                hint = _merge_hint(got, (one, two), want)
                example, expected = float(got[i].ravel()[0]), float(want[i].ravel()[0])
                raise CheckFailed(f"{call}: {what} is off by up to {err:.3g} (for example {example:.6g} instead of "
                                  f"{expected:.6g}); expected the sums over all the keys against the common "
                                  f"maximum m{hint}")


# ---------------------------------------------------------------- 2 and 3. a decode step, counted
DECODE_CASES = [("llama2-7b", nn.preset("llama2-7b"), 1001, 1, 2), ("llama2-70b", nn.preset("llama2-70b"), 4096, 64, 2),
                ("llama3-8b", nn.preset("llama3-8b"), 8192, 16, 2), ("tiny", nn.preset("tiny"), 100, 4, 4)]


@cache
def _decode_counts(name: str, context_len: int, batch: int) -> tuple[int, int, int]:
    """(matmul FLOPs, matmul weights, cache numbers) of one decode step, run on meta: a KVCache filled with
    context_len - 1 positions, then one token per sequence; the weights are the 2-D parameters but the
    embedding; the cache numbers are what the step reads, after it appended its own K and V."""
    cfg = nn.preset(name)
    model = meta_lm(cfg, tb.float16)                                           # 2 bytes a number on meta
    kv = nn.KVCache(model, batch)
    with tb.no_grad():
        if context_len > 1:
            model(meta_ids(batch, context_len - 1), cache=kv)                  # prefill: (batch, context_len - 1)
        with count_flops() as fc:
            model(meta_ids(batch, 1), cache=kv)                                # decode: (batch, 1)
    weights = sum(p.size for n, p in model.named_parameters() if p.ndim == 2 and not n.startswith("embed"))
    assert kv.length == context_len
    return fc.total(matmul_only=True), weights, kv.nbytes // 2


def _decode_hint(cfg, context_len, batch, b, got, want, of) -> str:
    """The usual slip whose `of(flops, weights, cache numbers)` equals `got`, if any."""
    flops, weights, cache_numbers = _decode_counts(cfg.name, context_len, batch)
    per_seq_flops = flops // batch
    attention = batch * cfg.n_layers * 4 * context_len * cfg.n_heads * cfg.d_head
    mha_cache = cache_numbers * cfg.n_heads // cfg.n_kv_heads
    slips = [(of(flops, weights, mha_cache), f"the cache holds n_kv_heads = {cfg.n_kv_heads} heads of K and V per "
                                             f"layer, not n_heads = {cfg.n_heads} (grouped-query attention)"),
             (of(flops, weights, cache_numbers // batch), "every sequence has its own cache: multiply it by batch"),
             (of(flops, weights * batch, cache_numbers), "the weights are read once for the whole batch, not once "
                                                         "per sequence: that is what batching is for"),
             (of(per_seq_flops, weights, cache_numbers), "the FLOPs are per sequence: multiply them by batch"),
             (of(flops, weights, 0), "the step also reads the whole KV cache"),
             (of(flops - attention, weights, cache_numbers), "the step also computes the scores and the weighted "
                                                             "sum of V over context_len keys: 4 x context_len x "
                                                             "n_heads x d_head per layer per sequence"),
             (of(flops, weights + cfg.vocab_size * cfg.d_model, cache_numbers),
              "the embedding is a lookup of one row per token, not a weight the step reads whole"),
             (of(flops, weights, cache_numbers // 2), "the cache holds K and V: 2 tensors per layer"),
             (of(flops // 2, weights, cache_numbers), "half the FLOPs: one FLOP per weight (and per product in "
                                                      "attention); each is a multiply and an add, 2 FLOPs")]
    return next((": " + why for value, why in slips if not math.isclose(value, want, rel_tol=1e-9)
                 and math.isclose(got, value, rel_tol=1e-9)), "")


def _check_float(call: str, got) -> None:
    if not isinstance(got, numbers.Real) or isinstance(got, bool) or not math.isfinite(got) or got <= 0:
        raise CheckFailed(f"{call} returned {got!r}; return a positive float")


def check_decode_intensity(solution) -> None:
    """Each case against the decode step counted and measured on meta."""
    for name, cfg, n, batch, b in DECODE_CASES:
        flops, weights, cache_numbers = _decode_counts(name, n, batch)
        of = lambda f, w, c, b=b: f / ((w + c) * b)                                      # noqa: E731
        want = of(flops, weights, cache_numbers)
        call = f"decode_intensity({name}, context_len={n}, batch={batch}, bytes_per_element={b})"
        got = solution.decode_intensity(cfg, n, batch, b)
        _check_float(call, got)
        if not math.isclose(got, want, rel_tol=1e-9):
            hint = _decode_hint(cfg, n, batch, b, got, want, of)
            raise CheckFailed(f"{call} = {got:.6g}, but the step counted on the shape-only device does {flops:,} "
                              f"matmul FLOPs over {weights:,} weights and {cache_numbers:,} cached numbers, "
                              f"{b} bytes each: {want:.6g} FLOPs per byte{hint}")


ROOFLINE_CASES = [("H100", 990e12, 3.35e12), ("a GPU of 312 TFLOP/s and 2.0 TB/s", 312e12, 2.0e12)]


def check_decode_tokens_per_second(solution) -> None:
    """Each case: batch / max(FLOPs / peak, bytes / bandwidth), with the step counted on meta; a memory-bound
    and a compute-bound case."""
    cases = [(c, hw) for c in DECODE_CASES for hw in ROOFLINE_CASES[:1]] + \
        [(("llama2-70b", nn.preset("llama2-70b"), 1001, 1024, 2), ROOFLINE_CASES[0]),     # compute-bound
         (DECODE_CASES[0], ROOFLINE_CASES[1])]
    for (name, cfg, n, batch, b), (gpu, peak, bandwidth) in cases:
        flops, weights, cache_numbers = _decode_counts(name, n, batch)
        of = lambda f, w, c, B=batch, b=b, peak=peak, bw=bandwidth: B / max(f / peak, (w + c) * b / bw)  # noqa: E731
        want = of(flops, weights, cache_numbers)
        call = f"decode_tokens_per_second({name}, context_len={n}, batch={batch}, {gpu}, bytes_per_element={b})"
        got = solution.decode_tokens_per_second(cfg, n, batch, peak, bandwidth, b)
        _check_float(call, got)
        if math.isclose(got, want, rel_tol=1e-9):
            continue
        compute, memory = flops / peak, (weights + cache_numbers) * b / bandwidth
        hints = [(1 / (compute + memory) * batch, "the FLOPs and the bytes overlap: the step takes the longer of "
                                                  "the two times, not their sum"),
                 (batch / min(compute, memory), "the step cannot be faster than either bound: take the longer "
                  f"time, not the shorter (here the {'FLOPs' if compute > memory else 'bytes'}: the step is "
                  f"{'compute' if compute > memory else 'memory'}-bound)"),
                 (want / batch, "each step gives one token per sequence: batch tokens, not one")]
        hint = next((": " + why for value, why in hints if not math.isclose(value, want, rel_tol=1e-9)
                     and math.isclose(got, value, rel_tol=1e-9)), "")
        raise CheckFailed(f"{call} = {got:.6g}, expected {want:.6g}: the step's {flops:,} FLOPs take "
                          f"{compute * 1e3:.4g} ms at peak and its {(weights + cache_numbers) * b:,} bytes "
                          f"{memory * 1e3:.4g} ms at full bandwidth{hint}")


CHECKS = [("merge_softmax_states", check_merge_softmax_states), ("decode_intensity", check_decode_intensity),
          ("decode_tokens_per_second", check_decode_tokens_per_second)]
