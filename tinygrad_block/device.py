"""Devices by name: 'cpu', 'meta', 'cuda' / 'cuda:N' and 'strict', each one backend object, made on first use.

CuPy is imported only when a 'cuda' device is first asked for, so `import tinygrad_block` never needs a GPU.
"""
from __future__ import annotations

import numpy as np

from .backend import ArrayBackend, MetaBackend
from .cpu_kernels import CpuBackend
from .cuda import cuda_backend
from .strict import StrictArray, StrictBackend

BACKENDS = {"cpu": CpuBackend(), "meta": MetaBackend()}  # the GPUs and 'strict' join on first use


def get_backend(device) -> ArrayBackend | MetaBackend:
    """The backend for a device name: 'cpu', 'cuda' (= 'cuda:0'), 'cuda:N', 'meta' or 'strict'. CuPy is imported
    only when a 'cuda' device is first asked for; a missing CuPy or GPU raises RuntimeError saying which."""
    if isinstance(device, (ArrayBackend, MetaBackend)):
        return device
    name = "cuda:0" if device == "cuda" else device
    if name not in BACKENDS and isinstance(name, str) and name.startswith("cuda:"):
        BACKENDS[name] = cuda_backend(name)   # imports CuPy: only on a machine that asks for a GPU
    elif name == "strict" and name not in BACKENDS:
        BACKENDS[name] = StrictBackend()
    if name not in BACKENDS:
        raise ValueError(f"unknown device {device!r}; expected 'cpu', 'cuda', 'cuda:N' (N a GPU index), 'meta' "
                         "or 'strict'")
    return BACKENDS[name]


def array_backend(x) -> ArrayBackend:
    """The backend whose arrays `x` is one of (numpy, cupy or strict): the hand-derived pairs in manual/ ask it
    for their array module and erf."""
    if isinstance(x, np.ndarray | np.generic):
        return BACKENDS["cpu"]
    if type(x).__module__.split(".")[0] == "cupy":
        return get_backend(f"cuda:{x.device.id}")
    if isinstance(x, StrictArray):
        return get_backend("strict")
    raise TypeError(f"expected a numpy, cupy or strict array, got {type(x).__name__}")
