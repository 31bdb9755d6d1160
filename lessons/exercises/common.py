"""What every lesson's checkers share: the failure they raise, and the first look at a learner's result."""
from __future__ import annotations

import tinygrad_block as tb


class CheckFailed(Exception):
    """A solution that does not do what the exercise asks; the message says what, with the numbers."""


def tensor_result(got, name: str, shape: tuple):
    """A learner's result as a numpy array, or CheckFailed if it is not a Tensor of the expected shape."""
    if not isinstance(got, tb.Tensor):
        raise CheckFailed(f"{name} must return a Tensor of shape {shape}; got {type(got).__name__}")
    if got.shape != shape:
        raise CheckFailed(f"{name} must return shape {shape}; got {got.shape}")
    return got.numpy()
