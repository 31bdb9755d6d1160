"""Byte-pair encoding by hand (tokenizer.py: pair_counts, merge_pair, learn_bpe, bpe_encode), as lesson 04 teaches it.

Oracles: the merges of a small corpus derived by hand (the pair counts, the tie rule); the tokenizers library's
BPE trained by its BpeTrainer on the same text, with the settings under which the two are the same algorithm
(words split at whitespace only, no normaliser, no special tokens, vocab_size = alphabet + merges): its
vocabulary, its merges in order, and its encoding of every word."""
import json
import random
from collections import Counter

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from tinygrad_block.tokenizer import bpe_encode, learn_bpe, merge_pair, pair_counts

SENNRICH = "low " * 5 + "lower " * 2 + "newest " * 6 + "widest " * 3


def library_bpe(text: str, n_merges: int) -> tuple[Tokenizer, list[str], list[tuple[str, str]]]:
    """The tokenizers library's BPE trained on `text`: (the tokenizer, its vocabulary by id, its merges)."""
    alphabet = set(text) - set(" \n")
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    bpe.train_from_iterator([text], trainers.BpeTrainer(vocab_size=len(alphabet) + n_merges, show_progress=False))
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return bpe, sorted(model["vocab"], key=model["vocab"].get), merges


def test_pairs_are_counted_with_each_words_frequency_and_merged_from_the_left():
    words = Counter(tuple(w) for w in SENNRICH.split())
    counts = pair_counts(words)
    assert counts[("e", "s")] == counts[("s", "t")] == 6 + 3 and counts[("w", "e")] == 2 + 6
    assert counts[("l", "o")] == counts[("o", "w")] == 5 + 2 and sum(counts.values()) == 5 * 2 + 2 * 4 + 9 * 5
    assert merge_pair(tuple("aaab"), ("a", "a")) == ("aa", "a", "b")
    assert merge_pair(("n", "e", "w", "es", "t"), ("es", "t")) == ("n", "e", "w", "est")


def test_the_first_merges_of_a_small_corpus_are_the_hand_derived_ones():
    """(e,s) and (s,t) both occur 9 times: e comes first in the vocabulary, so (e,s); then (es,t) 9; (l,o) and
    (o,w) both 7: (l,o); then (lo,w) 7; then (e,w), (n,e) and (w,est) all 6: (e,w)."""
    vocab, merges = learn_bpe(SENNRICH, 5)
    assert merges == [("e", "s"), ("es", "t"), ("l", "o"), ("lo", "w"), ("e", "w")]
    assert vocab == [*"deilnorstw", "es", "est", "lo", "low", "ew"]
    assert bpe_encode("lowest", merges) == ["low", "est"] and bpe_encode("newer", merges) == ["n", "ew", "e", "r"]


@pytest.mark.parametrize("n_merges", [1, 4, 8, 12])
def test_learned_merges_and_encodings_equal_the_tokenizers_library(n_merges):
    rng = random.Random(n_merges)
    corpora = [SENNRICH, "hug hug pug pun bun hugs hugs pugs bun bun"]
    for _ in range(10):
        words = ["".join(rng.choice("abcde") for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(3, 12))]
        corpora.append(" ".join(rng.choice(words) for _ in range(40)))
    for text in corpora:
        vocab, merges = learn_bpe(text, n_merges)
        bpe, want_vocab, want_merges = library_bpe(text, n_merges)
        assert (vocab, merges) == (want_vocab, want_merges), text
        for word in set(text.split()) | {"lowest", "abcabc", "bugs"}:
            if set(word) <= set(vocab):
                assert bpe_encode(word, merges) == bpe.encode(word).tokens, (text, word)


def test_training_stops_when_no_pair_is_left():
    vocab, merges = learn_bpe("ab ab a", 10)
    assert merges == [("a", "b")] and vocab == ["a", "b", "ab"]


@pytest.mark.parametrize("text, n_merges", [(b"low", 2), ("low", -1), ("low", 2.0), ("low", True)])
def test_learn_bpe_refuses_what_is_not_a_text_and_a_count(text, n_merges):
    with pytest.raises(ValueError, match="learn_bpe"):
        learn_bpe(text, n_merges)
