"""Shared test settings: a hypothesis profile sized for CI on a 2-core machine, the devices every device-aware
test runs on, and small helpers.

A test that takes a `device` argument runs on 'cpu' (numpy), on 'strict' (numpy arrays that refuse every
implicit read back to the host, so code that would stall or fail on a GPU fails here, on the CPU) and on
'cuda' (marked `gpu`; skipped, with the reason, where CuPy or a GPU is missing)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import tinygrad_block as tb

settings.register_profile("ci", max_examples=40, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci")


def cuda_missing() -> str | None:
    """Why device 'cuda' cannot run here (CuPy or a GPU missing), or None when it can."""
    try:
        tb.get_backend("cuda")
    except RuntimeError as e:
        return str(e)
    return None


CUDA_MISSING = cuda_missing()
GPU = [pytest.mark.gpu, pytest.mark.skipif(CUDA_MISSING is not None,
                                           reason=f"no GPU here: {(CUDA_MISSING or '').split(';')[0]}")]
DEVICES = ["cpu", "strict", pytest.param("cuda", marks=GPU)]


def needs_gpu(test):
    """Mark a test `gpu` and skip it, saying why, where CuPy or a GPU is missing."""
    for mark in GPU:
        test = mark(test)
    return test


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames and not any(m.name == "parametrize" and "device" in m.args[0]
                                                      for m in metafunc.definition.iter_markers()):
        metafunc.parametrize("device", DEVICES)


@pytest.fixture
def gen():
    """A fresh seeded generator per test."""
    return tb.Generator(0)


def rel_err(a, b) -> float:
    """Norm-wise relative error ||a - b|| / max(||a||, ||b||, tiny)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(a), np.linalg.norm(b), 1e-300))
