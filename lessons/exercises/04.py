"""Lesson 04's exercises: the embedding lookup, the next-token probabilities from logits, and the k most likely
next characters of a model. Each check compares with an independent oracle (nn.Embedding and numpy's row lookup
and scatter-add, numpy's softmax in float64 and the library's, the model's logits read in numpy) and names the
usual slips when it sees one."""
from __future__ import annotations

import numbers

import numpy as np

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.tokenizer import CharTokenizer

from .common import CheckFailed, softmax_np, tensor_result


def _close(a, b, tol: float = 1e-10) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and bool(np.all(np.isfinite(a))) and np.abs(a - b).max() <= tol


# ---------------------------------------------------------------- embed
EMBED_CASES = [(6, 6, [[1, 4], [0, 5], [2, 2]]),           # a square table: the transposed one has the same shape
               (7, 5, [[3, 0, 6, 3], [1, 3, 5, 2]]),       # token 3 three times: its row collects three gradients
               (9, 4, [[8]])]


def _embedding(table: np.ndarray) -> nn.Embedding:
    """nn.Embedding holding `table` (V, d) in float64."""
    V, d = table.shape
    module = nn.Embedding(V, d, generator=tb.Generator(0), dtype=tb.float64)
    module.load_state_dict({"weight": tb.tensor(table, dtype=tb.float64)})
    return module


def _embed_slips(table: np.ndarray, ids: np.ndarray) -> list:
    """(vectors, hint) of the usual mistakes."""
    V, slips = table.shape[0], []
    for shift in (1, -1):
        rows = ids + shift
        hint = (f"the ids are off by one: id i is row i of the table (ids start at 0), not row i {'+-'[shift < 0]} 1 "
                "(a one-hot vector has its 1 at index i: ids == tb.arange(V))")
        slips += [(table[rows % V], hint),                                      # wrapped around, as weight[-1]
                   (table[rows % V] * ((rows >= 0) & (rows < V))[..., None], hint)]   # a one-hot with no 1
    if table.shape[0] == table.shape[1]:
        slips.insert(0, (table.T[ids], "those are columns of the table: it is (V, d), one row per token, so "
                                       "token i's vector is weight[i], a row (the one-hot vector goes on the left: "
                                       "one_hot @ weight)"))
    return slips


def check_embed(solution) -> None:
    """Vectors and the table's gradient against nn.Embedding, on tables with repeated ids and a square table."""
    r = np.random.default_rng(4)
    for V, d, ids in EMBED_CASES:
        ids_np, table = np.array(ids), r.standard_normal((V, d))
        B, L = ids_np.shape
        call = f"embed(weight {(V, d)}, ids {ids_np.shape} = {ids})"
        weight = tb.tensor(table, dtype=tb.float64, requires_grad=True)
        out = solution.embed(weight, tb.tensor(ids_np))
        got = tensor_result(out, call, (B, L, d))
        module = _embedding(table)
        want = module(tb.tensor(ids_np)).numpy()
        assert _close(want, table[ids_np], 0)                           # the two oracles agree
        if not _close(got, want):
            hint = next((h for wrong, h in _embed_slips(table, ids_np) if _close(got, wrong)), "")
            raise CheckFailed(f"{call}: off by up to {np.abs(got - want).max():.3g} from nn.Embedding"
                              + (f": {hint}" if hint else ""))
        G = r.standard_normal((B, L, d))                                # the upstream gradient
        if out.requires_grad:
            (out * tb.tensor(G, dtype=tb.float64)).sum().backward()
        if weight.grad is None:
            raise CheckFailed(f"{call}: the vectors are right, but no gradient reached the table (weight.grad is "
                              "None): build the result from Tensor operations on weight (indexing, or a one-hot "
                              "matrix product), not from numpy arrays")
        (module(tb.tensor(ids_np)) * tb.tensor(G, dtype=tb.float64)).sum().backward()
        dW = np.zeros((V, d))
        np.add.at(dW, ids_np, G)                                        # each use of a row adds its gradient
        assert _close(module.weight.grad.numpy(), dW)
        if not _close(weight.grad.numpy(), dW):
            raise CheckFailed(f"{call}: the vectors are right, but the table's gradient is off by up to "
                              f"{np.abs(weight.grad.numpy() - dW).max():.3g}: row i must collect the upstream "
                              "gradient of every position whose id is i, added up")


# ---------------------------------------------------------------- next_token_probs
def _probs_slips(z: np.ndarray) -> list:
    """(probabilities, hint) of the usual mistakes."""
    return [(softmax_np(z, axis=1)[:, -1], "the softmax ran over the positions (axis 1); it runs over the "
                                         "vocabulary, the last axis"),
            (softmax_np(z, axis=0)[:, -1], "the softmax ran over the batch (axis 0); it runs over the vocabulary, "
                                         "the last axis"),
            (softmax_np(z[:, 0]), "that is the first position's distribution; the next token after the text is "
                                "predicted at the last position, logits[:, -1]"),
            (z[:, -1], "those are the logits themselves; softmax turns them into probabilities that sum to 1"),
            (np.exp(z[:, -1]), "exp alone does not sum to 1: divide by the sum over the vocabulary")]


def _probs_cases() -> list:
    r = np.random.default_rng(40)
    return [("ordinary logits", r.standard_normal((2, 5, 7))),
            ("logits near 1,000", 1000 + 3 * r.standard_normal((3, 4, 6))),
            ("one position", 2 * r.standard_normal((1, 1, 9)))]


def check_next_token_probs(solution) -> None:
    """Against numpy's softmax in float64 and the library's, on ordinary logits and on logits near 1,000."""
    for name, z in _probs_cases():
        B, L, V = z.shape
        logits = tb.tensor(z, dtype=tb.float64)
        want = softmax_np(z[:, -1])
        assert _close(want, logits[:, -1].softmax(axis=-1).numpy(), 1e-12)     # the two oracles agree
        call = f"next_token_probs(logits {z.shape}, {name})"
        got = tensor_result(solution.next_token_probs(logits), call, (B, V))
        if _close(got, want):
            continue
        if not np.all(np.isfinite(got)):
            raise CheckFailed(f"{call} holds {np.count_nonzero(~np.isfinite(got))} values that are not finite: "
                              "e^1000 overflows to inf, and inf / inf is nan; subtract each row's largest logit "
                              "before exp (it cancels in the ratio)")
        hint = next((h for wrong, h in _probs_slips(z) if _close(got, wrong)), "")
        raise CheckFailed(f"{call}: off by up to {np.abs(got - want).max():.3g} from softmax(logits[:, -1])"
                          + (f": {hint}" if hint else ""))


# ---------------------------------------------------------------- most_likely_next
CHARS = " .abcehilnorst"
PROMPTS = [("the lion ", 3), ("a cat", 5), ("nice stories.", 1)]


def _model() -> nn.LM:
    """A float64 character model over CHARS, with weights large enough that its probabilities differ clearly."""
    cfg = nn.preset("tiny").with_(d_model=16, n_heads=2, n_kv_heads=1, d_ff=32, vocab_size=len(CHARS),
                                  max_seq_len=32)
    model = nn.LM(cfg, generator=tb.Generator(44), dtype=tb.float64)
    r = np.random.default_rng(41)
    model.load_state_dict({name: tb.tensor(1 + 0.3 * r.standard_normal(q.shape) if q.ndim == 1 else
                                           2 * r.standard_normal(q.shape) / np.sqrt(q.shape[-1]), dtype=tb.float64)
                           for name, q in model.named_parameters()})
    return model


def _next_slips(z: np.ndarray, k: int) -> list:
    """(pairs, hint) of the usual mistakes, from the logits z (L, V) of one prompt."""
    def pairs(scores, order):
        return [(CHARS[i], float(scores[i])) for i in order[:k]]
    p, first = softmax_np(z[-1]), softmax_np(z[0])
    return [(pairs(p, np.argsort(p)), "that is the least likely first: sort from the most likely down"),
            (pairs(first, np.argsort(-first)), "those are the first position's predictions; the character after "
                                               "the text is predicted at the last position"),
            (pairs(z[-1], np.argsort(-z[-1])), "those numbers are logits; give the probabilities (softmax)")]


def _same(got, want) -> bool:
    return len(got) == len(want) and all(c == w and abs(q - v) < 1e-9 for (c, q), (w, v) in zip(got, want))


def check_most_likely_next(solution) -> None:
    """The k pairs against the model's last-position logits, read and softmaxed in numpy."""
    model, tok = _model(), CharTokenizer(CHARS)
    for text, k in PROMPTS:
        call = f"most_likely_next(model, tokenizer, {text!r}, k={k})"
        got = solution.most_likely_next(model, tok, text, k)
        if not isinstance(got, (list, tuple)) or not all(isinstance(x, (list, tuple)) and len(x) == 2 for x in got):
            raise CheckFailed(f"{call} must return a list of (character, probability) pairs; got {got!r}")
        if len(got) != k:
            raise CheckFailed(f"{call} returned {len(got)} pairs; expected k = {k}")
        if not all(isinstance(c, str) for c, _ in got):
            raise CheckFailed(f"{call} returned {[c for c, _ in got]!r}: give each as the character it stands for, "
                              "tokenizer.decode([id]), not its id")
        if not all(isinstance(q, numbers.Real) for _, q in got):
            raise CheckFailed(f"{call}: each probability must be a number (a float); got {[q for _, q in got]!r}")
        z = model(tb.tensor([tok.encode(text)])).numpy()[0]            # (L, V): the oracle's logits
        p = softmax_np(z[-1])
        want = [(CHARS[i], float(p[i])) for i in np.argsort(-p)[:k]]
        if _same(got, want):
            continue
        hint = next((h for wrong, h in _next_slips(z, k) if _same(got, wrong)), "")
        show = ", ".join(f"{c!r} {q:.4f}" for c, q in want)
        raise CheckFailed(f"{call} returned {[(c, round(float(q), 4)) for c, q in got]}; expected {show}"
                          + (f": {hint}" if hint else ""))


CHECKS = [("embed", check_embed), ("next_token_probs", check_next_token_probs),
          ("most_likely_next", check_most_likely_next)]
