"""Lesson 04 exercises: reference solutions."""
import numpy as np

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.tokenizer import Tokenizer


def embed(weight: tb.Tensor, ids: tb.Tensor) -> tb.Tensor:
    """A one-hot vector per token times the table picks that token's row (weight[ids] gives the same)."""
    V = weight.shape[0]
    one_hot = (ids.unsqueeze(-1) == tb.arange(V)).to(weight.dtype)          # (B, L, V)
    return one_hot @ weight                                                  # (B, L, d)


def next_token_probs(logits: tb.Tensor) -> tb.Tensor:
    """Softmax over the vocabulary at the last position, with each row's largest logit subtracted first."""
    z = logits[:, -1]                                                        # (B, V)
    e = (z - z.max(axis=-1, keepdims=True)).exp()                            # every exponent <= 0
    return e / e.sum(axis=-1, keepdims=True)


def most_likely_next(model: nn.LM, tokenizer: Tokenizer, text: str, k: int) -> list:
    """Encode, run the model on a batch of one, softmax the last position, and sort."""
    ids = tb.tensor([tokenizer.encode(text)])                                # (1, L)
    p = next_token_probs(model(ids)).numpy()[0]                              # (V,)
    top = np.argsort(-p)[:k]
    return [(tokenizer.decode([int(i)]), float(p[i])) for i in top]
