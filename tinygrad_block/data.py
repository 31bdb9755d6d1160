"""Data for the two training demonstrations, as batches of (ids, targets) the training loop takes:
the induction task (n random tokens, then the same n again) and a character-level text (Python's own help
pages, which ship with CPython in `pydoc_data`: no download)."""
from __future__ import annotations

import numbers

from .dtypes import int64

from .generator import Generator
from .tensor import Tensor, arange, concat, randint, tensor
from .tokenizer import CharTokenizer   # it lives with the other tokenizers; train and the lessons import it from here


def _positive(op: str, **values) -> None:
    for name, value in values.items():
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{op}: {name} must be a positive int, got {value!r}")


# ---------------------------------------------------------------- induction
def induction_batch(batch: int, n: int, vocab_size: int, generator: Generator,
                    device: str = "cpu") -> tuple[Tensor, Tensor]:
    """s = n random tokens, then s again: ids = (s, s) without its last token (B, 2n - 1); targets = the second
    s (B, n), which the logits at positions n - 1 .. 2n - 2 predict. Token t + n copies token t, so from
    position n - 1 on, the next token is the one n - 1 positions back: only attention can fetch it."""
    _positive("induction_batch", batch=batch, n=n, vocab_size=vocab_size)
    s = randint(0, vocab_size, (batch, n), generator=generator, device=device)   # (B, n)
    both = concat([s, s], axis=1)                                                 # (B, 2n)
    return both[:, :-1], s                                                        # (B, 2n - 1), (B, n)


# ---------------------------------------------------------------- text
def python_help_text() -> str:
    """CPython's help pages (`help('assert')`, ...; the module pydoc_data.topics), joined in name order: about
    465,000 characters of English about Python, on every machine that has Python (their exact text follows the
    Python version)."""
    from pydoc_data.topics import topics
    return "".join(topics[name] for name in sorted(topics))


def text_splits(text: str, tokenizer: CharTokenizer, holdout: float = 0.1,
                device: str = "cpu") -> tuple[Tensor, Tensor]:
    """The text as token ids, split in two: the first 1 - holdout to train on, the rest to evaluate (1-D int64)."""
    if not 0 < holdout < 1:
        raise ValueError(f"text_splits: holdout is the fraction kept for evaluation, in (0, 1); got {holdout!r}")
    ids = tokenizer.encode(text)
    cut = int(len(ids) * (1 - holdout))
    return tensor(ids[:cut], dtype=int64, device=device), tensor(ids[cut:], dtype=int64, device=device)


def text_batch(data: Tensor, batch: int, seq_len: int, generator: Generator) -> tuple[Tensor, Tensor]:
    """`batch` windows of seq_len + 1 tokens at random places in `data` (1-D): ids = each window but its last
    token, targets = each window but its first (B, seq_len), so targets[b, i] is the token after ids[b, i]."""
    _positive("text_batch", batch=batch, seq_len=seq_len)
    if data.ndim != 1 or data.shape[0] < seq_len + 1:
        raise ValueError(f"text_batch: data must be 1-D token ids longer than seq_len={seq_len}, got shape "
                         f"{data.shape}")
    starts = randint(0, data.shape[0] - seq_len, (batch, 1), generator=generator, device=data.device)  # (B, 1)
    windows = data[starts + arange(seq_len + 1, device=data.device)]                # (B, seq_len + 1)
    return windows[:, :-1], windows[:, 1:]
