"""Randomness is always explicit: a `Generator(seed)` is the one source of every random draw, made on the host so
the same seed gives the same numbers on every device."""
from __future__ import annotations

import numbers

import numpy as np


class Generator:
    """An explicit, seeded random source (numpy's PCG64). Samples are drawn on the host in float64 and
    then cast and moved, so the same seed gives the same numbers on every device and in every dtype."""

    def __init__(self, seed: int):
        if not isinstance(seed, numbers.Integral) or isinstance(seed, bool):
            raise TypeError(f"Generator: seed must be an int, got {type(seed).__name__} {seed!r}")
        if seed < 0:
            raise ValueError(f"Generator: seed must be >= 0, got {seed}")
        self.seed = int(seed)
        self._rng = np.random.default_rng(seed)

    def normal(self, shape):
        return self._rng.standard_normal(shape)

    def uniform(self, shape):
        return self._rng.random(shape)

    def integers(self, low: int, high: int, shape):
        return self._rng.integers(low, high, shape, dtype=np.int64)

    @property
    def state(self) -> dict:
        """Where the stream stands, as JSON-ready data: setting it back makes the same draws follow."""
        return {"seed": self.seed, "bit_generator": self._rng.bit_generator.state}

    @state.setter
    def state(self, value: dict) -> None:
        try:
            self._rng.bit_generator.state = value["bit_generator"]
        except (TypeError, KeyError, ValueError) as e:
            raise ValueError(f"Generator.state: expected what Generator.state gave (a PCG64 state), got "
                             f"{value!r:.80} ({e})") from None
        self.seed = value["seed"]

    def __repr__(self):
        return f"Generator(seed={self.seed})"
