"""Lesson 04's checkers (lessons/exercises/04.py) reject typical wrong answers, each with the reason."""
import numpy as np

import tinygrad_block as tb

from conftest import failures, solution

REF = solution(4)



def test_indexing_is_as_good_as_the_one_hot_product():
    assert "embed" not in failures(4, solution(4, embed=lambda weight, ids: weight[ids]))


def test_the_transposed_table_is_rejected():
    why = failures(4, solution(4, embed=lambda weight, ids: weight.T[ids]))["embed"]
    assert "(6, 6)" in why and "columns of the table" in why


def test_columns_picked_by_a_one_hot_product_are_rejected():
    def columns(weight, ids):
        one_hot = (ids.unsqueeze(-1) == tb.arange(weight.shape[1])).to(weight.dtype)     # (B, L, d)
        return one_hot @ weight.T                                                       # (B, L, V)
    assert "columns of the table" in failures(4, solution(4, embed=columns))["embed"]


def test_ids_off_by_one_are_rejected():
    def from_one(weight, ids):                                      # the 1 of id i at index i - 1; none for id 0
        V = weight.shape[0]
        return (ids.unsqueeze(-1) == tb.arange(1, V + 1)).to(weight.dtype) @ weight
    why = failures(4, solution(4, embed=from_one))["embed"]
    assert "off by one" in why and "not row i - 1" in why
    why = failures(4, solution(4, embed=lambda weight, ids: weight[ids - 1]))["embed"]
    assert "off by one" in why and "not row i - 1" in why
    def ahead(weight, ids):                                         # the 1 of id i at index i + 1; none for V - 1
        V = weight.shape[0]
        return (ids.unsqueeze(-1) == tb.arange(-1, V - 1)).to(weight.dtype) @ weight
    why = failures(4, solution(4, embed=ahead))["embed"]
    assert "off by one" in why and "not row i + 1" in why


def test_vectors_from_numpy_that_cut_the_gradient_are_rejected():
    cut = lambda weight, ids: tb.tensor(weight.numpy()[ids.numpy()], dtype=weight.dtype)    # noqa: E731
    why = failures(4, solution(4, embed=cut))["embed"]
    assert "no gradient reached the table" in why


def _softmax(axis=-1, position=-1, subtract=True):
    """next_token_probs with one slip switched on."""
    def probs(logits):
        z = logits - logits.max(axis=axis, keepdims=True) if subtract else logits
        e = z.exp()
        return (e / e.sum(axis=axis, keepdims=True))[:, position]
    return probs


def test_a_softmax_over_the_positions_is_rejected():
    why = failures(4, solution(4, next_token_probs=_softmax(axis=1)))["next_token_probs"]
    assert "ordinary logits" in why and "over the positions (axis 1)" in why


def test_a_softmax_over_the_batch_is_rejected():
    why = failures(4, solution(4, next_token_probs=_softmax(axis=0)))["next_token_probs"]
    assert "over the batch (axis 0)" in why


def test_the_first_position_is_rejected():
    why = failures(4, solution(4, next_token_probs=_softmax(position=0)))["next_token_probs"]
    assert "first position" in why and "logits[:, -1]" in why


def test_a_softmax_without_the_max_overflows_near_1000_and_is_rejected():
    why = failures(4, solution(4, next_token_probs=_softmax(subtract=False)))["next_token_probs"]
    assert "logits near 1,000" in why and "not finite" in why and "subtract each row's largest logit" in why


def test_logits_returned_as_probabilities_are_rejected():
    why = failures(4, solution(4, next_token_probs=lambda logits: logits[:, -1]))["next_token_probs"]
    assert "logits themselves" in why


def test_a_missing_position_index_is_rejected_by_its_shape():
    why = failures(4, solution(4, next_token_probs=lambda logits: logits.softmax(axis=-1)))["next_token_probs"]
    assert "(2, 7)" in why and "(2, 5, 7)" in why


def _next(order=-1, position=-1, logits=False, ids=False):
    """most_likely_next with one slip switched on."""
    def most_likely_next(model, tokenizer, text, k):
        z = model(tb.tensor([tokenizer.encode(text)])).numpy()[0, position]
        scores = z if logits else np.exp(z - z.max()) / np.exp(z - z.max()).sum()
        top = np.argsort(order * scores)[:k]
        return [(int(i) if ids else tokenizer.decode([int(i)]), float(scores[i])) for i in top]
    return most_likely_next


def test_the_least_likely_first_is_rejected():
    why = failures(4, solution(4, most_likely_next=_next(order=1)))["most_likely_next"]
    assert "'the lion '" in why and "least likely first" in why


def test_the_first_positions_prediction_is_rejected():
    why = failures(4, solution(4, most_likely_next=_next(position=0)))["most_likely_next"]
    assert "first position's predictions" in why


def test_logits_in_place_of_probabilities_are_rejected():
    why = failures(4, solution(4, most_likely_next=_next(logits=True)))["most_likely_next"]
    assert "logits; give the probabilities" in why


def test_ids_in_place_of_characters_are_rejected():
    why = failures(4, solution(4, most_likely_next=_next(ids=True)))["most_likely_next"]
    assert "not its id" in why and "tokenizer.decode" in why
