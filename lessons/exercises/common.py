"""What every lesson's checkers share: the failure they raise, the first look at a learner's result, and the
oracles more than one lesson checks against."""
from __future__ import annotations

import numpy as np

import tinygrad_block as tb
from tinygrad_block import manual


class CheckFailed(Exception):
    """A solution that does not do what the exercise asks; the message says what, with the numbers."""


def tensor_result(got, name: str, shape: tuple):
    """A learner's result as a numpy array, or CheckFailed if it is not a Tensor of the expected shape."""
    if not isinstance(got, tb.Tensor):
        raise CheckFailed(f"{name} must return a Tensor of shape {shape}; got {type(got).__name__}")
    if got.shape != shape:
        raise CheckFailed(f"{name} must return shape {shape}; got {got.shape}")
    return got.numpy()


def softmax_np(s: np.ndarray, axis: int = -1) -> np.ndarray:
    """The hand-written softmax (manual.softmax_forward) along `axis`: each row shifted by its own maximum, entries
    of -inf given weight 0."""
    return np.moveaxis(manual.softmax_forward(np.moveaxis(s, axis, -1))[0], -1, axis)
