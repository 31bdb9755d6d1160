"""Shared test settings: a hypothesis profile sized for CI on a 2-core machine, and small helpers."""
import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import tinygrad_block as tb

settings.register_profile("ci", max_examples=40, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci")


@pytest.fixture
def gen():
    """A fresh seeded generator per test."""
    return tb.Generator(0)


def rel_err(a, b) -> float:
    """Norm-wise relative error ||a - b|| / max(||a||, ||b||, tiny)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(a), np.linalg.norm(b), 1e-300))
