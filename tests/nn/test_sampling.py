"""Sampling the next token (nn/decode.py: keep_top_p, sampled_logits, sampling_probabilities, choose; LM.generate's
top_p): temperature, top-k and top-p (the nucleus).

Oracles: the nucleus written again in numpy (sort, cumulative sum, the first prefix reaching p, renormalised
softmax); transformers' TopPLogitsWarper and TopKLogitsWarper on the same logits; a chi-square test of many draws
against the oracle's probabilities (its p-value from torch.special.gammaincc), which wrong distributions fail by
far; greedy decoding for a tiny p; plain sampling for p = 1; the eager and the uncached generation for compiled."""
import math

import numpy as np
import pytest
import torch
from conftest import msg
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.nn.decode import keep_top_p, next_token, sampled_logits, sampling_probabilities

TINY = nn.preset("tiny")


def nucleus_oracle(logits: np.ndarray, temperature: float, top_k: int | None, top_p: float | None) -> np.ndarray:
    """(B, V) -> (B, V): softmax(logits / T) over the top_k largest, cut to the smallest prefix of the likeliest
    whose probabilities sum to >= top_p, renormalised."""
    out = []
    for row in logits / temperature:
        if top_k is not None:
            row = np.where(row < np.sort(row)[-top_k], -np.inf, row)
        prob = np.exp(row - row.max())
        prob /= prob.sum()
        if top_p is not None:
            order = np.argsort(-prob, kind="stable")
            size = int(np.searchsorted(np.cumsum(prob[order]), top_p)) + 1     # first prefix reaching top_p
            keep = np.zeros(len(row), bool)
            keep[order[:min(size, len(row))]] = True
            prob = np.where(keep, prob, 0.0) / np.where(keep, prob, 0.0).sum()
        out.append(prob)
    return np.array(out)


def chi_square_p_value(counts: np.ndarray, prob: np.ndarray) -> float:
    """The probability that draws from `prob` give a chi-square at least as large as `counts`' (over the tokens of
    probability > 0; a draw outside them makes it 0)."""
    n, kept = counts.sum(), prob > 0
    if counts[~kept].any():
        return 0.0
    expected = n * prob[kept]
    chi2 = float(((counts[kept] - expected) ** 2 / expected).sum())
    return float(torch.special.gammaincc(torch.tensor((kept.sum() - 1) / 2, dtype=torch.float64),
                                         torch.tensor(chi2 / 2, dtype=torch.float64)))


# ---------------------------------------------------------------- the nucleus
@pytest.mark.parametrize("V", [2, 7, 50, 1000])
@pytest.mark.parametrize("p", [1e-9, 0.1, 0.5, 0.9, 0.999, 1.0])
def test_keep_top_p_keeps_what_transformers_top_p_warper_keeps(V, p):
    logits = np.random.default_rng(V).standard_normal((16, V)) * 3
    want = TopPLogitsWarper(p)(None, torch.tensor(logits)).numpy()
    np.testing.assert_array_equal(keep_top_p(tb.tensor(logits), p).numpy(), want)


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, None, 0.7), (0.5, None, 0.9), (2.0, 6, 0.8),
                                                       (1.3, 3, 0.95), (0.8, None, None), (1.0, 4, None)])
def test_sampling_probabilities_are_the_masked_renormalised_softmax(temperature, top_k, top_p):
    logits = np.random.default_rng(3).standard_normal((8, 12)) * 2
    got = sampling_probabilities(tb.tensor(logits), temperature, top_k, top_p).numpy()
    np.testing.assert_allclose(got, nucleus_oracle(logits, temperature, top_k, top_p), rtol=1e-12, atol=1e-15)


def test_at_temperature_0_the_distribution_is_all_on_the_first_largest_logit():
    logits = np.array([[0.5, 2.0, 2.0, -1.0], [3.0, 1.0, 0.0, 3.0]])
    got = sampling_probabilities(tb.tensor(logits), 0, top_k=2, top_p=0.5).numpy()
    np.testing.assert_array_equal(got, [[0, 1, 0, 0], [1, 0, 0, 0]])


@pytest.mark.parametrize("temperature, top_k, top_p", [(0.7, None, 0.6), (1.5, 8, 0.9)])
def test_the_logits_drawn_from_equal_transformers_warpers_in_their_order(temperature, top_k, top_p):
    """temperature, then top-k, then top-p, as transformers' generate applies its warpers."""
    logits = np.random.default_rng(4).standard_normal((8, 30)) * 2
    want = torch.tensor(logits) / temperature
    if top_k is not None:
        want = TopKLogitsWarper(top_k)(None, want)
    want = TopPLogitsWarper(top_p)(None, want).numpy()
    got = sampled_logits(tb.tensor(logits), temperature, top_k, top_p).numpy()
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_allclose(got[~np.isinf(got)], want[~np.isinf(want)], rtol=1e-15)


def test_tokens_tied_at_the_edge_of_the_nucleus_all_stay():
    """probabilities 0.4, 0.2, 0.2, 0.2 (logits log of them): p = 0.5 needs the first and one of the three tied at 0.2;
    all three stay, as top-k keeps its ties. p = 0.4 keeps the first alone; p = 1 keeps all."""
    logits = np.log(np.array([[0.4, 0.2, 0.2, 0.2]]))
    inf = -math.inf
    np.testing.assert_array_equal(np.isinf(keep_top_p(tb.tensor(logits), 0.5).numpy()), [[False] * 4])
    np.testing.assert_array_equal(keep_top_p(tb.tensor(logits), 0.3).numpy(), [[logits[0, 0], inf, inf, inf]])
    np.testing.assert_array_equal(keep_top_p(tb.tensor(logits), 1.0).numpy(), logits)
    ties = np.zeros((1, 5))                                                   # five equal logits: every p keeps all
    np.testing.assert_array_equal(keep_top_p(tb.tensor(ties), 0.01).numpy(), ties)


def test_logits_already_cut_by_top_k_are_cut_again_by_mass():
    """-inf logits (outside a top-k) weigh nothing and stay -inf."""
    logits = np.array([[3.0, -math.inf, 1.0, 2.0, -math.inf]])
    prob = np.exp(logits - 3.0) / np.exp(logits - 3.0).sum()                 # 0.665, 0, 0.090, 0.245, 0
    kept = keep_top_p(tb.tensor(logits), 0.8).numpy()                        # 0.665 < 0.8 <= 0.665 + 0.245
    assert prob[0, 0] < 0.8 <= prob[0, 0] + prob[0, 3]
    np.testing.assert_array_equal(kept, [[3.0, -math.inf, -math.inf, 2.0, -math.inf]])


# ---------------------------------------------------------------- draws
def test_many_draws_follow_the_nucleus_probabilities():
    """40000 draws of one row, T = 0.9, top_p = 0.8: the chi-square p-value against the oracle is not small, while
    the same draws reject the uncut softmax and a nucleus one token short (p-values below 1e-12)."""
    logits, T, p, n = np.array([[2.0, 0.3, 1.4, -1.0, 1.0, 0.1]]), 0.9, 0.8, 40000
    draws = next_token(tb.tensor(np.repeat(logits, n, axis=0)), T, None, tb.Generator(21), top_p=p).numpy()
    counts = np.bincount(draws, minlength=6)
    want = nucleus_oracle(logits, T, None, p)[0]
    assert (want > 0).sum() == 3                                              # tokens 0, 2, 4
    assert chi_square_p_value(counts, want) > 1e-4, (counts, want)
    uncut = nucleus_oracle(logits, T, None, None)[0]
    short = nucleus_oracle(logits, T, None, 0.6)[0]
    assert (short > 0).sum() == 2
    assert chi_square_p_value(counts, uncut) < 1e-12 and chi_square_p_value(counts, short) < 1e-12


def test_top_p_1_is_plain_sampling_and_a_tiny_top_p_is_greedy():
    logits = tb.tensor(np.random.default_rng(5).standard_normal((64, 20)))
    plain = next_token(logits, 1.0, None, tb.Generator(2)).numpy()
    np.testing.assert_array_equal(next_token(logits, 1.0, None, tb.Generator(2), top_p=1.0).numpy(), plain)
    tiny = next_token(logits, 1.0, None, tb.Generator(2), top_p=1e-9).numpy()
    np.testing.assert_array_equal(tiny, logits.numpy().argmax(axis=-1))
    assert not np.array_equal(plain, tiny)


# ---------------------------------------------------------------- generate
def model_and_ids(L=4):
    model = nn.LM(TINY, generator=tb.Generator(0), dtype=tb.float64)
    return model, tb.randint(0, TINY.vocab_size, (2, L), generator=tb.Generator(1))


def test_generate_with_top_p_compiled_equals_eager_and_recomputation():
    model, ids = model_and_ids()
    run = lambda **kw: model.generate(ids, 12, temperature=0.9, top_k=40, top_p=0.7,   # noqa: E731
                                      generator=tb.Generator(5), **kw).numpy()
    compiled = run()
    assert model.last_decoder.compiled.replays == 9 and model.last_decoder.top_p == 0.7
    np.testing.assert_array_equal(compiled, run(jit=False))
    np.testing.assert_array_equal(compiled, run(use_cache=False))
    assert not np.array_equal(compiled, model.generate(ids, 12, temperature=0.9, top_k=40,
                                                       generator=tb.Generator(5)).numpy())


@pytest.mark.parametrize("jit", [True, False])
def test_each_token_a_decoder_draws_lies_in_its_steps_nucleus(jit):
    """The decoder by hand: every token chosen at top_p = 0.3 has probability > 0 under the oracle on the logits
    its step returned (the KV-cache path, compiled and eager)."""
    model, ids = model_and_ids()
    decoder = model.decoder(2, 16, temperature=1.0, top_p=0.3, jit=jit)
    decoder.generator = tb.Generator(9)
    token, logits = decoder.prefill(ids)
    for _ in range(10):
        prob = nucleus_oracle(logits.numpy(), 1.0, None, 0.3)
        assert np.all(prob[[0, 1], token.numpy()[:, 0]] > 0)
        token, logits = decoder.step(token)
    assert (prob > 0).sum(axis=-1).max() < TINY.vocab_size / 4              # the nucleus is a real cut


@pytest.mark.parametrize("use_cache", [True, False])
def test_a_tiny_top_p_generates_the_greedy_tokens(use_cache):
    model, ids = model_and_ids()
    greedy = model.generate(ids, 10).numpy()
    tiny = model.generate(ids, 10, temperature=1.0, top_p=1e-12, generator=tb.Generator(3), use_cache=use_cache)
    np.testing.assert_array_equal(tiny.numpy(), greedy)


def test_a_different_top_p_makes_another_decoder():
    model, ids = model_and_ids()
    model.generate(ids, 4, temperature=1.0, top_p=0.5, generator=tb.Generator(0))
    first = model.last_decoder
    model.generate(ids, 4, temperature=1.0, top_p=0.5, generator=tb.Generator(0))
    assert model.last_decoder is first
    model.generate(ids, 4, temperature=1.0, top_p=0.6, generator=tb.Generator(0))
    assert model.last_decoder is not first and model.last_decoder.top_p == 0.6


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("top_p", [0, -0.1, 1.5, math.nan, True, "0.5"])
def test_generate_and_keep_top_p_refuse_a_top_p_outside_0_1(top_p):
    model, ids = model_and_ids()
    with pytest.raises(ValueError, match=msg("generate", "top_p", "(0, 1]", repr(top_p))):
        model.generate(ids, 2, temperature=1.0, top_p=top_p, generator=tb.Generator(0))
    with pytest.raises(ValueError, match=msg("keep_top_p", "(0, 1]", repr(top_p))):
        keep_top_p(tb.tensor(np.zeros((1, 3))), top_p)


def test_a_compiled_keep_top_p_replays_what_eager_keeps():
    """Compiled with fusion, the masked sums (a comparison's mask read by a generated row sum) replay eagerly's
    values on new logits, call after call."""
    step = tb.jit(lambda x: keep_top_p(x, 0.7), modules=[])
    rng = np.random.default_rng(0)
    for _ in range(5):
        logits = rng.standard_normal((2, 50))
        np.testing.assert_array_equal(step(tb.tensor(logits)).numpy(), keep_top_p(tb.tensor(logits), 0.7).numpy())
    assert step.replays == 3
