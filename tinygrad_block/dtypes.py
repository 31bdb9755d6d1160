"""The engine's dtypes: numpy's dtype objects (which CuPy shares, so `tb.float32 == "float32"` holds), the names
they go by, and whether a Python number fits one."""
from __future__ import annotations

import math
import numbers

import numpy as np

# ---- dtypes: numpy's dtype objects, which cupy shares; `tb.float32 == "float32"` holds ----
float16, float32, float64 = np.dtype("float16"), np.dtype("float32"), np.dtype("float64")
int32, int64, bool_ = np.dtype("int32"), np.dtype("int64"), np.dtype("bool")
DTYPES = {str(d): d for d in (float16, float32, float64, int32, int64, bool_)}
# each supported dtype by itself, its name and its numpy type: one look-up where np.dtype(x) and str(d) take 4 us
KNOWN = {key: d for d in DTYPES.values() for key in (d, str(d), d.type)}


def as_dtype(dtype, op: str = "dtype") -> np.dtype:
    """Resolve 'float32', tb.float32 or np.float32 to one of the supported dtypes, or raise TypeError."""
    if isinstance(dtype, (np.dtype, str, type)) and dtype in KNOWN:    # else another spelling numpy reads, or none
        return KNOWN[dtype]
    try:
        d = np.dtype(dtype)
    except TypeError:
        d = None
    if d is None or str(d) not in DTYPES:
        raise TypeError(f"{op}: unsupported dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    return d


def nbytes(shape, dtype) -> int:
    """Bytes of an array of this shape and dtype (a name or a numpy dtype): the one byte count of the package."""
    return math.prod(shape) * as_dtype(dtype).itemsize


def names_a_dtype(name: str) -> bool:
    """Whether numpy reads `name` as a dtype at all (supported or not): 'complex64' does, 'cuda' does not."""
    try:
        np.dtype(name)
    except TypeError:
        return False
    return True


def is_float(dtype) -> bool:
    return dtype.kind == "f"


_LIMITS = {d: (np.finfo(d).max if d.kind == "f" else np.iinfo(d).max)
           for d in (float16, float32, float64, int32, int64)}


def scalar_fits(value, dtype) -> bool:
    """Whether a Python number joins a tensor of `dtype` without coercion: bools anywhere; ints in an
    integer dtype's range or a float dtype's; other reals only in float dtypes (inf and nan allowed)."""
    if type(value) is float:  # the common case first: it is on the path of every `x * 2.0`
        return dtype.kind == "f" and (abs(value) <= _LIMITS[dtype] or not math.isfinite(value))
    if isinstance(value, bool):
        return True
    if dtype.kind == "b" or not isinstance(value, numbers.Real):
        return False
    if isinstance(value, numbers.Integral):
        return -_LIMITS[dtype] - (dtype.kind == "i") <= value <= _LIMITS[dtype]
    return dtype.kind == "f" and (not math.isfinite(value) or abs(value) <= _LIMITS[dtype])
