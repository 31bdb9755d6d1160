"""The backend seam: every array operation the engine performs is a method of a backend object.

`ArrayBackend` runs the primitive ops on an array module `xp`: numpy on the CPU ('cpu'), and the same code
with CuPy on an NVIDIA GPU ('cuda', 'cuda:N'; `cuda.py` adds only what differs there) or with the strict
arrays of `strict.py` ('strict': numpy behind a wall that refuses every implicit trip to the host, so CPU
tests catch what would stall a GPU). `MetaBackend` runs the ops on shapes alone: it carries (shape, dtype) and
computes nothing, so a 70B model's FLOPs can be counted on a laptop. `device.py` finds a device's backend by
name. numpy is imported by the backends (this file, cpu_kernels.py, cuda.py, cuda_kernels.py, strict.py,
device.py), by dtypes.py and generator.py (numpy's dtypes, its bit generator), and at the edges (the file readers
safetensors_file.py and nn/pretrained.py, the test tool `gradcheck`, the tour): ops, composites and modules call
`tensor.backend.<op>(...)`.
"""
from __future__ import annotations

import functools
import math
import numbers

import numpy as np

from .dtypes import as_dtype, bool_, float16, float32, int64, scalar_fits
from .generator import Generator

_UINT = {1: np.dtype("uint8"), 2: np.dtype("uint16"), 4: np.dtype("uint32"), 8: np.dtype("uint64")}  # where's bits


def check_nested(value, op: str) -> None:
    """Raise a clear error for Python data numpy cannot turn into a numeric array: an item that is not a number
    (TypeError), or ragged nesting (ValueError), naming the first such item. Returns quietly for good data."""
    level = [((), value)]                                   # (index path, item) at one depth
    while level:
        for path, v in level:
            if _length(v) is None and not _is_number(v):
                where = f"item {list(path)}" if path else "data"
                raise TypeError(f"{op}: {where} is a {type(v).__name__}{_short(v)}, not a number; expected numbers "
                                "or (nested) lists of numbers (tb.stack joins Tensors)")
        first = level[0]
        other = next((pv for pv in level if _length(pv[1]) != _length(first[1])), None)
        if other is not None:
            raise ValueError(f"{op}: ragged nested list: item {list(other[0])} {_describe(other[1])} but item "
                             f"{list(first[0])} {_describe(first[1])}; every list at one depth must have the "
                             "same length")
        level = [(p + (i,), x) for p, v in level if _length(v) is not None for i, x in enumerate(v)]


def _length(v) -> int | None:
    """The length of a list, tuple or numpy array of >= 1 dimension; None for anything else."""
    is_array = isinstance(v, np.ndarray) and v.ndim > 0
    return len(v) if isinstance(v, (list, tuple)) or is_array else None


def _is_number(v) -> bool:
    return isinstance(v, (numbers.Number, np.number, np.bool_)) or isinstance(v, np.ndarray) and v.ndim == 0


def _short(v) -> str:
    text = repr(v)
    return f" ({text})" if len(text) <= 40 and "\n" not in text else ""


def _describe(v) -> str:
    return f"has length {len(v)}" if _length(v) is not None else f"is a number ({v!r})"


def host_data(value, op: str, dtype=None):
    """`np.asarray(value)` for Python data, with `check_nested`'s errors in place of numpy's; ints that an
    integer `dtype` cannot hold raise rather than wrap (2**40 as int32 would become 0)."""
    try:
        arr = np.asarray(value)
    except ValueError:
        check_nested(value, op)
        raise
    if arr.dtype.kind in "OSUV":                            # objects, strings: numpy found no numbers
        check_nested(value, op)
    if dtype is not None and dtype.kind in "iu" and arr.dtype.kind in "iuO" and arr.size:
        values = (arr.min(), arr.max()) if arr.dtype.kind in "iu" else arr.flat
        bad = next((v for v in values if not scalar_fits(v, dtype)), None)
        if bad is not None:
            info = np.iinfo(dtype)
            raise OverflowError(f"{op}: {bad} does not fit {dtype}, which holds {info.min}..{info.max}")
    return arr


def on_device(method):
    """Run a backend method with the backend's GPU current (`active`; nothing to switch on the CPU)."""
    @functools.wraps(method)
    def run(self, *args):
        if self.active is None:
            return method(self, *args)
        with self.active:
            return method(self, *args)
    return run


class ArrayBackend:
    """The primitive ops on a real array module. One method per primitive, plus creation and transfer.

    `active` is a context manager that makes this backend's device current (Function.apply runs every
    primitive inside it); None on the CPU, where there is nothing to switch. `host_reads` counts the values
    read back to the host (`to_numpy`, index bounds checks): on a GPU each one waits for the queued work, a sync."""

    active = None
    host_reads = 0

    def __init__(self, name: str, xp):
        self.name, self.xp = name, xp

    def __repr__(self):
        return f"<{type(self).__name__} device={self.name!r}>"

    # ---- creation and transfer ----
    def infer_dtype(self, value, op: str = "tensor") -> np.dtype:
        """dtype for Python data: floats -> float32 (the default), ints -> int64, bools -> bool; an array
        (numpy, cupy or strict) keeps its own. `op` names the caller in errors."""
        if hasattr(value, "dtype") and hasattr(value, "shape") and not isinstance(value, np.generic):
            return as_dtype(value.dtype, op)
        arr = host_data(value, op)
        if arr.dtype.kind == "O":                           # numbers, but none of numpy's: 2**70, Fraction(1, 3)
            odd = (v for v in arr.flat if not isinstance(v, (float, np.number)) and not scalar_fits(v, int64))
            bad = next(odd, arr.flat[0])
            raise TypeError(f"{op}: {bad!r} fits no supported dtype; expected ints within int64's range, floats or "
                            "bools (pass dtype=tb.float64 to store large ints as floats)")
        if arr.dtype.kind == "f" and not isinstance(value, np.ndarray):
            return float32
        if arr.dtype.kind in "iu" and not isinstance(value, np.ndarray):
            return int64
        return as_dtype(arr.dtype, op)

    @on_device
    def asarray(self, value, dtype):
        if not hasattr(value, "dtype"):                     # Python data: a cast would read None as nan
            value = host_data(value, "tensor", dtype)
        return self.xp.asarray(value, dtype=dtype)

    @on_device
    def from_host(self, host_array, dtype):
        return self.xp.asarray(host_array, dtype=dtype)

    def random(self, generator: Generator, kind: str, shape, dtype, *args):
        """Samples drawn on the host in float64 ('normal', 'uniform' or 'integers'), then cast and moved."""
        return self.from_host(getattr(generator, kind)(*args, shape), dtype)

    def to_numpy(self, x):
        """The values as a read-only numpy array (tensors are immutable, so their data must not be edited in
        place): the one explicit way to the host, counted in `host_reads`."""
        self.host_reads += 1
        out = self.host(x).view()
        out.flags.writeable = False
        return out

    def host(self, x):
        """`x` as a numpy array (a copy from device memory where the device has its own)."""
        return np.asarray(x)

    @on_device
    def full(self, shape, value, dtype):
        return self.xp.full(shape, value, dtype=dtype)

    def constant(self, value, dtype):
        """A numpy scalar holding a Python number, the operand of `x * 2.0`: every array module takes it as is
        (CuPy passes it to the kernel as an argument, where a 0-d device array would cost a host-to-device
        copy on every op)."""
        return dtype.type(value)

    @on_device
    def arange(self, start, stop, step, dtype):
        return self.xp.arange(start, stop, step, dtype=dtype)

    @on_device
    def eye(self, n, m, dtype):
        return self.xp.eye(n, m, dtype=dtype)

    def format(self, x) -> str:
        return np.array2string(self.to_numpy(x), separator=", ", precision=4, prefix="Tensor(")

    # ---- integer index helpers (not ops: no gradient, no FLOPs) ----
    @on_device
    def index_range(self, idx):
        """(min, max) of an integer index array, for bounds checks; None for an empty one. One read back
        to the host: on a GPU, the one place indexing waits for the device (on the host, nothing to gather)."""
        if not idx.size:
            return None
        if self.xp is np:
            self.host_reads += 1                      # the same one read, counted as to_numpy counts it
            return int(idx.min()), int(idx.max())
        return tuple(self.to_numpy(self.xp.stack([idx.min(), idx.max()])).tolist())

    @on_device
    def index_wrap(self, idx, size):
        """Negative indices counted from the end, as in numpy."""
        return self.xp.where(idx < 0, idx + size, idx)

    @on_device
    def index_flat(self, idxs, dims):
        """Flat index into the merged axes `dims` for the broadcast integer arrays `idxs` (row-major)."""
        flat = self.xp.zeros(self.xp.broadcast_shapes(*[i.shape for i in idxs]), dtype=int64)
        for i, d in zip(idxs, dims):
            flat = flat * d + i
        return flat

    # ---- elementwise primitives ----
    lowers = True      # a compiled replay may call this backend's array functions straight (fuse.py asks ufunc)

    def ufunc(self, name: str):
        """The array library's function `name` ('exp', 'add', 'matmul', 'concatenate', 'take', 'reshape', ...) as a
        compiled replay calls it: fuse.py asks by name, and a backend answers with its own where it has one. A
        reshape or transpose is the array's own method (numpy's function of that name wraps it: 3x the time)."""
        return getattr(self.xp.ndarray if name in ("reshape", "transpose") else self.xp, name)

    def reducer(self, name: str):
        """`name`'s reduce ('add': a sum, 'maximum': a max), as a compiled replay calls it; None: the backend's sum."""
        return getattr(self.ufunc(name), "reduce", None)

    def neg(self, a):
        return self.xp.negative(a)

    def exp(self, a):
        return self.ufunc("exp")(a)      # a backend with exp of its own (kernels.MATH) answers ufunc with it

    def log(self, a):
        return self.ufunc("log")(a)

    def sqrt(self, a):
        return self.xp.sqrt(a)

    def reciprocal(self, a):
        return self.xp.reciprocal(a)

    def sin(self, a):
        return self.xp.sin(a)

    def cos(self, a):
        return self.xp.cos(a)

    def erf(self, a):
        # numpy has no erf ufunc; math.erf is correctly rounded in float64, then cast back
        return np.asarray(np.frompyfunc(math.erf, 1, 1)(a), dtype=a.dtype)

    def pow(self, a, exponent: float):
        return self.xp.power(a, self.constant(exponent, a.dtype))

    def cast(self, a, dtype):
        return a.astype(dtype)

    def add(self, a, b):
        return self.xp.add(a, b)

    def sub(self, a, b):
        return self.xp.subtract(a, b)

    def mul(self, a, b):
        return self.xp.multiply(a, b)

    def div(self, a, b):
        return self.xp.divide(a, b)

    def maximum(self, a, b):
        return self.xp.maximum(a, b)

    def compare(self, a, b, op: str):
        return getattr(self.xp, op)(a, b)  # op is a numpy ufunc name: less, equal, greater_equal, ...

    def where(self, cond, a, b):
        """cond ? a : b as a bitwise select, b ^ ((a ^ b) * cond): exact for every value (inf, nan, -0.0), and
        about 10x faster than np.where, which branches per element, on a mixed mask (a sigmoid's, a ReLU's).
        Below SMALL_WHERE elements np.where itself: one call instead of three, and few branches to miss."""
        if max(cond.size, a.size, b.size) < SMALL_WHERE:
            return self.xp.where(cond, a, b)
        dtype, bits = a.dtype, _UINT[a.dtype.itemsize]
        a, b = a.view(bits), b.view(bits)
        picked = self.xp.multiply(self.xp.bitwise_xor(a, b), cond)     # a ^ b where cond holds, 0 elsewhere
        return self.xp.bitwise_xor(picked, b).view(dtype)

    # ---- reductions ----
    def sum(self, a, axes, keepdims):
        """A sum of `sum_dtype(a.dtype)`: bools and ints accumulate in int64; float16 sums accumulate in float32
        and round once at the end, on every device."""
        wide = float32 if a.dtype == float16 else sum_dtype(a.dtype)
        return self.xp.sum(a, axis=axes, keepdims=keepdims, dtype=wide).astype(sum_dtype(a.dtype), copy=False)

    def max(self, a, axes, keepdims):
        return self.xp.max(a, axis=axes, keepdims=keepdims)

    def kth_largest(self, a, k: int):
        """The k-th largest along the last axis, kept as an axis of 1: one partition (introselect) of the axis,
        O(n) however large k is, where a sort would be O(n log n) and k maxima O(k n)."""
        n = a.shape[-1]
        return self.xp.partition(a, n - k, axis=-1)[..., n - k:n - k + 1].copy()

    # ---- movement ----
    def reshape(self, a, shape):
        return a.reshape(shape)  # the array's method: numpy's function form adds a Python wrapper per call

    def permute(self, a, order):
        return a.transpose(order)

    def expand(self, a, shape):
        return self.xp.broadcast_to(a, shape)

    def slice(self, a, bounds):
        return a[tuple(slice(lo, hi) for lo, hi in bounds)]

    @on_device
    def pad(self, a, widths):
        """Zeros with `a` written inside (a fraction of np.pad's cost, which is written in Python)."""
        out = self.xp.zeros(tuple(s + lo + hi for s, (lo, hi) in zip(a.shape, widths)), dtype=a.dtype)
        out[tuple(slice(lo, lo + s) for s, (lo, _) in zip(a.shape, widths))] = a
        return out

    def concat(self, arrays, axis):
        return self.xp.concatenate(arrays, axis=axis)

    def gather(self, a, idx, axis):
        return self.xp.take(a, idx, axis=axis)

    def set_rows(self, buf, idx, rows, axis):
        """buf[..., idx[j], ...] = rows[..., j, ...] along `axis`, written into buf itself, which is returned."""
        buf[(slice(None),) * axis + (idx,)] = rows
        return buf

    @on_device
    def scatter_add(self, g, idx, axis, size):
        shape = g.shape[:axis] + (size,) + g.shape[axis + idx.ndim:]
        if self.xp is np and axis == 0 and idx.size >= SORTED_SCATTER and g.size > idx.size:
            return _scatter_rows(g, idx, size).reshape(shape)
        out = self.xp.zeros(shape, dtype=g.dtype)
        self.xp.add.at(out, (slice(None),) * axis + (idx,), g)
        return out

    # ---- matmul ----
    def matmul(self, a, b):
        return self.xp.matmul(a, b)

    # ---- generated kernels ----
    def generates(self) -> bool:
        """Whether this backend makes generated kernels (`generated`): then tb.jit plans groups of them."""
        return False

    def graph(self, program) -> tuple[object | None, str]:
        """(a graph of `program`'s kernels whose `run()` replays them in one launch, '') or (None, why there is
        none): the GPU's backend captures a CUDA graph (cuda_kernels.ReplayGraph); a CPU runs kernel by kernel."""
        return None, "kernels run one by one on this device"

    def generated(self, kernels: list, runs: list) -> list | None:
        """Runnable steps for a program's generated kernels (kernels.py), or None where this backend generates none
        (then numpy's functions run them): the CPU's backend (cpu_kernels.CpuBackend) compiles them as C."""
        return None


def sum_dtype(dtype) -> np.dtype:
    """The dtype of a sum, as in numpy and PyTorch: bools and ints sum to int64 (a count of Trues is a number, and
    int32 sums would wrap past 2**31 - 1); floats keep their dtype."""
    return int64 if dtype.kind in "biu" else dtype


SMALL_WHERE = 1024      # elements below which np.where's branches cost less than the bitwise select's calls
SORTED_SCATTER = 64     # indices from which rows are summed after a sort (an embedding's gradient) on the CPU


def _scatter_rows(g, idx, size):
    """out[i] = the sum of the rows g[j] with idx[j] = i (out (size, rest)), without np.add.at, which visits one
    row at a time (1.7 ms for 2,048 rows of 96 floats): sort the indices (stably), then add each run of equal ones
    with one add.reduceat (0.2 ms). The sums are rounded in another order than add.at's, so they can differ from
    its results in the last bits."""
    flat = idx.reshape(-1)
    rows = g.reshape(flat.size, -1)
    order = np.argsort(flat, kind="stable")
    keys = flat[order]
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    out = np.zeros((size, rows.shape[1]), g.dtype)
    out[keys[starts]] = np.add.reduceat(rows[order], starts, axis=0)
    return out


class MetaArray:
    """What a shape-only tensor holds: a shape and a dtype, no values."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(map(int, shape)), np.dtype(dtype)

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: math.prod(self.shape))
    nbytes = property(lambda self: self.size * self.dtype.itemsize)


class MetaBackend:
    """The same primitive ops on shapes alone ("meta" device): every method returns a MetaArray."""

    name, lowers = "meta", False
    active = None
    host_reads = 0

    def __repr__(self):
        return "<MetaBackend device='meta'>"

    def _no_values(self, what):
        raise RuntimeError(f"{what}: a 'meta' tensor has a shape and a dtype but no values "
                           "(shape-only backend); run on device='cpu' to compute numbers")

    # ---- creation and transfer ----
    infer_dtype = ArrayBackend.infer_dtype

    def asarray(self, value, dtype):
        if isinstance(value, MetaArray):
            return MetaArray(value.shape, dtype)
        return MetaArray(host_data(value, "tensor", dtype).shape, dtype)

    def from_host(self, host_array, dtype):
        return MetaArray(host_array.shape, dtype)

    def random(self, generator, kind, shape, dtype, *args):
        return MetaArray(shape, dtype)  # nothing is sampled, so a 70B model's weights cost no memory

    def to_numpy(self, x):
        self._no_values("numpy")

    def full(self, shape, value, dtype):
        return MetaArray(shape, dtype)

    def constant(self, value, dtype):
        return MetaArray((), dtype)

    def arange(self, start, stop, step, dtype):
        return MetaArray((len(range(0, math.ceil((stop - start) / step))),), dtype)

    def eye(self, n, m, dtype):
        return MetaArray((n, m), dtype)

    def format(self, x) -> str:
        return "<no values>"

    def index_range(self, idx):
        return None  # nothing to check: meta indices have no values

    def index_wrap(self, idx, size):
        return idx

    def index_flat(self, idxs, dims):
        return MetaArray(np.broadcast_shapes(*[i.shape for i in idxs]), int64)

    # ---- elementwise (one side of a binary op may be a 0-d constant) ----
    def _unary(self, a, *params):
        return MetaArray(a.shape, a.dtype)

    def _binary(self, a, b):
        return MetaArray(max(a.shape, b.shape, key=len), a.dtype)

    neg = exp = log = sqrt = reciprocal = sin = cos = erf = pow = _unary
    add = sub = mul = div = maximum = _binary

    def cast(self, a, dtype):
        return MetaArray(a.shape, dtype)

    def compare(self, a, b, op):
        return MetaArray(max(a.shape, b.shape, key=len), bool_)

    def where(self, cond, a, b):
        return MetaArray(cond.shape, a.dtype)

    # ---- reductions ----
    def sum(self, a, axes, keepdims):
        shape = [1 if i in axes else s for i, s in enumerate(a.shape)]
        return MetaArray(shape if keepdims else [s for i, s in enumerate(shape) if i not in axes], sum_dtype(a.dtype))

    def max(self, a, axes, keepdims):
        return MetaArray(self.sum(a, axes, keepdims).shape, a.dtype)      # a sum's shape, the input's dtype

    def kth_largest(self, a, k: int):
        return MetaArray(tuple(a.shape[:-1]) + (1,), a.dtype)

    # ---- movement ----
    def reshape(self, a, shape):
        return MetaArray(shape, a.dtype)

    def permute(self, a, order):
        return MetaArray([a.shape[i] for i in order], a.dtype)

    def expand(self, a, shape):
        return MetaArray(shape, a.dtype)

    def slice(self, a, bounds):
        return MetaArray([hi - lo for lo, hi in bounds], a.dtype)

    def pad(self, a, widths):
        return MetaArray([s + lo + hi for s, (lo, hi) in zip(a.shape, widths)], a.dtype)

    def concat(self, arrays, axis):
        shape = list(arrays[0].shape)
        shape[axis] = sum(x.shape[axis] for x in arrays)
        return MetaArray(shape, arrays[0].dtype)

    def gather(self, a, idx, axis):
        return MetaArray(a.shape[:axis] + idx.shape + a.shape[axis + 1:], a.dtype)

    def set_rows(self, buf, idx, rows, axis):
        return buf

    def scatter_add(self, g, idx, axis, size):
        return MetaArray(g.shape[:axis] + (size,) + g.shape[axis + idx.ndim:], g.dtype)

    def matmul(self, a, b):
        return MetaArray(a.shape[:-1] + b.shape[-1:], a.dtype)
