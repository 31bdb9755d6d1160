"""Lesson 04 exercises. Fill in each function, then run:  python -m tinygrad_block check 04"""
import numpy as np

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.tokenizer import Tokenizer


def embed(weight: tb.Tensor, ids: tb.Tensor) -> tb.Tensor:
    """The vectors of the token ids `ids` (B, L), integers in 0 .. V - 1, looked up in the embedding table
    `weight` (V, d): a Tensor (B, L, d) whose [b, i] is the vector of token ids[b, i]. Compute it with Tensor
    operations on `weight`, by indexing or by a one-hot matrix product (a one-hot vector can be built with
    `==` against tb.arange(V), then .to(weight.dtype)), so that backward() gives weight its gradient."""
    raise NotImplementedError


def next_token_probs(logits: tb.Tensor) -> tb.Tensor:
    """The probabilities of the next token after the last position: logits (B, L, V) -> a Tensor (B, V) whose
    rows are positive and sum to 1. Write the softmax yourself with Tensor operations (exp, max, sum, /), not
    Tensor.softmax, and make it work for logits near 1,000 too."""
    raise NotImplementedError


def most_likely_next(model: nn.LM, tokenizer: Tokenizer, text: str, k: int) -> list:
    """The k most likely next characters after `text` by `model`: encode the text with `tokenizer`, run the
    model on it as a batch of one sequence, and return a list of k pairs (character, probability), the most
    likely first; each character a str (tokenizer.decode), each probability a float."""
    raise NotImplementedError
