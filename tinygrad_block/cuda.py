"""The GPU backend: the ArrayBackend code with CuPy as the array module, plus only what differs on a GPU:
erf, the copy back to the host, and matmuls sent to cuBLAS as strided-batched GEMMs.

Imported when a tensor is first put on 'cuda' or 'cuda:N', so `import tinygrad_block` never imports CuPy.
"""
from __future__ import annotations

import math

import numpy as np

from .backend import ArrayBackend

from .cuda_kernels import strided_gemm
from .dtypes import float16, float32, float64

INSTALL = ("install the 'gpu' extra: pip install -e '.[gpu]' from the repository's root (cupy-cuda13x, for a "
           "CUDA 13 driver; pip install cupy-cuda12x for a CUDA 12 driver)")

# Whether compiled replays (tb.jit) have been seen to match eager on a GPU: True since tools/gpu_check.py matched
# them on an H200 on 2026-11-27 (docs/gpu.md keeps that record, and a test holds the two together). While False,
# `train` and `generate` ran eagerly on 'cuda' unless compiled was asked for (jit=True, --compiled).
REPLAY_CHECKED = True


def jit_by_default(device: str) -> bool:
    """Whether train and generate compile their steps with tb.jit on `device` when not told: everywhere, on a GPU
    once REPLAY_CHECKED."""
    return REPLAY_CHECKED or not device.startswith("cuda")


def cuda_backend(device: str) -> CudaBackend:
    """The backend of GPU `device` ('cuda:N'), or a RuntimeError saying what is missing: CuPy, a usable
    GPU, or GPU number N."""
    index = device.removeprefix("cuda:")
    if not index.isdigit():
        raise ValueError(f"unknown device {device!r}; a GPU is 'cuda' or 'cuda:N', N its index (cuda:0, cuda:1, ...)")
    try:
        import cupy
    except ImportError:
        raise RuntimeError(f"device {device!r}: CuPy is not installed; {INSTALL}") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver, no GPU, or a driver older than CuPy's CUDA
        raise RuntimeError(f"device {device!r}: CuPy is installed but found no usable CUDA GPU ({e}); check that "
                           "`nvidia-smi` lists a GPU and that the CuPy wheel matches the driver's CUDA version"
                           ) from None
    if count == 0:
        raise RuntimeError(f"device {device!r}: CuPy is installed but this machine has no CUDA GPU")
    if int(index) >= count:
        have = ", ".join(f"cuda:{i}" for i in range(count))
        raise RuntimeError(f"device {device!r}: this machine has {count} CUDA GPU{'s' * (count > 1)} ({have})")
    return CudaBackend(int(index), cupy)


class CudaBackend(ArrayBackend):
    """The primitive ops on one NVIDIA GPU through CuPy. Python numbers reach kernels as arguments (see
    `constant`), so nothing in a forward or backward pass waits for the GPU: the only reads back to the host
    are `to_numpy` (`.numpy()`, `.item()`, printing) and the bounds check of integer-array indexing."""

    def __init__(self, index: int, cupy):
        super().__init__(f"cuda:{index}", cupy)
        from cupy.cuda import device
        from cupy_backends.cuda.api import runtime
        from cupy_backends.cuda.libs import cublas
        from cupyx.scipy.special import erf
        self.active, self._erf, self._cublas = cupy.cuda.Device(index), erf, cublas
        self._cublas_handle = device.get_cublas_handle  # the handle of the current GPU
        # (cuBLAS data type, compute type, alpha = 1, beta = 0): float16 multiplies on tensor cores and
        # accumulates in float32; float32 stays full float32 (no TF32), as PyTorch's default
        one32, zero32 = np.ones(1, np.float32), np.zeros(1, np.float32)
        self._gemm_types = {
            float16: (runtime.CUDA_R_16F, cublas.CUBLAS_COMPUTE_32F, one32, zero32),
            float32: (runtime.CUDA_R_32F, cublas.CUBLAS_COMPUTE_32F, one32, zero32),
            float64: (runtime.CUDA_R_64F, cublas.CUBLAS_COMPUTE_64F, np.ones(1, np.float64), np.zeros(1, np.float64)),
        }

    def host(self, x):
        with self.active:
            return x.get() if isinstance(x, self.xp.ndarray) else np.asarray(x)

    def where(self, cond, a, b):
        return self.xp.where(cond, a, b)   # one kernel on the GPU, no branching cost to avoid

    def generates(self) -> bool:
        return True

    def generated(self, kernels: list, runs: list) -> list | None:
        """The program's generated kernels as CUDA C (cuda_kernels.py), compiled by NVRTC, one thread an element."""
        from .cuda_kernels import load
        with self.active:
            return load(kernels, runs, self.xp) if kernels else None

    def graph(self, program):
        """The replay as one CUDA graph (cuda_kernels.ReplayGraph), or None and why CUDA could not capture it."""
        from .cuda_kernels import ReplayGraph
        with self.active:
            return ReplayGraph.make(program, self.xp)

    def ufunc(self, name: str):
        """CuPy's function `name`, except exp and log (kernels.MATH's, as a generated kernel computes them) and
        matmul (this backend's cuBLAS call, as eager's)."""
        from .cuda_kernels import math_functions
        if name == "matmul":
            return lambda a, b, out=None: self.matmul(a, b)
        return math_functions(self.xp)[name] if name in ("exp", "log") else super().ufunc(name)

    def reducer(self, name: str):
        return None                        # CuPy's add.reduce is not cupy.sum's kernel: sums stay eager's call

    def erf(self, a):
        return self._erf(a).astype(a.dtype, copy=False)

    def matmul(self, a, b):
        """(..., M, K) @ (..., K, N), equal batch axes, as one cuBLAS strided-batched GEMM: a transposed view
        goes in as cuBLAS's transpose flag rather than as a copy, and float16 batches run on tensor cores
        (CuPy's own batched float16 matmul is about ten times slower)."""
        if a.dtype not in self._gemm_types:
            return self.xp.matmul(a, b)  # integer matmuls: CuPy's own kernel
        *batch, M, K = a.shape
        N = b.shape[-1]
        if 0 in (M, N, K, math.prod(batch)):
            return self.xp.zeros((*batch, M, N), dtype=a.dtype)
        out = self.xp.empty((*batch, M, N), dtype=a.dtype)
        a3, op_a, ld_a, stride_a = self._gemm_operand(a.reshape(-1, M, K))      # (batch, M, K)
        b3, op_b, ld_b, stride_b = self._gemm_operand(b.reshape(-1, K, N))      # (batch, K, N)
        dtype, compute, one, zero = self._gemm_types[a.dtype]
        # cuBLAS is column-major: a row-major (R, C) matrix is its (C, R) transpose, so out = a @ b is
        # computed as out^T = b^T a^T, with b first
        strided_gemm(self._cublas_handle())(      # cuBLAS straight, so a CUDA graph can capture it (cuda_kernels)
            op_b, op_a, N, M, K, one.ctypes.data,
            b3.data.ptr, dtype, ld_b, stride_b, a3.data.ptr, dtype, ld_a, stride_a,
            zero.ctypes.data, out.data.ptr, dtype, N, M * N, math.prod(batch), compute,
            self._cublas.CUBLAS_GEMM_DEFAULT)
        return out

    def _gemm_operand(self, x):
        """(array, op, leading dimension, batch stride) of a (batch, R, C) operand for cuBLAS: rows contiguous
        is op N with ld = the row stride; columns contiguous (a transposed view) is op T with ld = the column
        stride; any other layout is copied to rows contiguous first."""
        R, C = x.shape[1:]
        batch_stride, row, col = (s // x.itemsize for s in x.strides)
        if col == 1 and row >= C:
            return x, self._cublas.CUBLAS_OP_N, row, batch_stride
        if row == 1 and col >= R:
            return x, self._cublas.CUBLAS_OP_T, col, batch_stride
        x = self.xp.ascontiguousarray(x)
        return x, self._cublas.CUBLAS_OP_N, C, R * C
