"""Indexing a Tensor as numpy does, built from primitives: Slice for unit-step slices, Gather for stepped slices
and integer arrays (several arrays merged into one flat index), Reshape for ints and None.

Basic indexing (ints, slices, `...`, None) and integer arrays (Tensors, lists, numpy arrays) follow numpy's
rules, including where the indexed axes go; boolean masks are refused (use `tb.where`). The model uses three
forms: `weight[ids]` (the embedding), `table[offset:offset + L]` (RoPE) and `logp[rows, target]` (cross_entropy).
"""
from __future__ import annotations

import math
import numbers

from .dtypes import int64
from .function import Gather, Slice, is_tensor
from .trace import derive


def _index_array(t, k, axis: int):
    """An integer index (Tensor, list or array) as a backend int64 array, bounds-checked, negatives wrapped."""
    backend = t.backend
    if is_tensor(k):
        if k.backend is not backend:
            raise RuntimeError(f"getitem: index on {k.device} for a tensor on {t.device}")
        arr = k
    else:
        arr = backend.asarray(k, backend.infer_dtype(k, "getitem"))
    if arr.dtype.kind not in "iu":              # (a Tensor's dtype is its array's)
        raise TypeError(f"getitem: index arrays must hold integers, got {arr.dtype} for axis {axis}; "
                        "boolean masks are not supported (use tb.where)")
    return derive(_checked_index, arr, backend=backend, axis=axis, shape=t.shape)


def _checked_index(arr, backend, axis: int, shape: tuple):
    """`arr` bounds-checked for an axis of size shape[axis], negatives wrapped, as int64."""
    size = shape[axis]
    bounds = backend.index_range(arr)
    if bounds is not None and (bounds[0] < -size or bounds[1] >= size):
        bad = bounds[0] if bounds[0] < -size else bounds[1]
        raise IndexError(f"getitem: index {bad} is out of bounds for axis {axis} with size {size} (shape {shape})")
    arr = backend.cast(arr, int64)
    return arr if bounds is None or bounds[0] >= 0 else backend.index_wrap(arr, size)   # negatives: from the end


def getitem(t, key):
    """numpy indexing from primitives: Slice for unit-step slices, Gather for stepped slices and integer
    arrays (several arrays are merged into one flat index), Reshape for ints and None."""
    key, is_array = _full_key(t, key if isinstance(key, tuple) else (key,))
    bounds, stepped, arrays = _read_key(t, key, is_array)
    out = t if all(b == (0, s) for b, s in zip(bounds, t.shape)) else Slice.apply(t, bounds=tuple(bounds))
    for axis, idx in stepped:
        out = Gather.apply(out, idx=idx, axis=axis)
    if arrays:
        return _gather_arrays(out, arrays)
    shape, axis = [], 0
    for k in key:  # ints drop their axis, None adds one
        if k is None:
            shape.append(1)
            continue
        if isinstance(k, slice):
            shape.append(out.shape[axis])
        axis += 1
    return out.reshape(tuple(shape))


def _full_key(t, key: tuple) -> tuple[tuple, list]:
    """The key with its ellipsis (or the missing trailing axes) spelled out as full slices, and which of its
    entries are integer arrays; IndexError for two ellipses, too many indices, or None beside arrays."""
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError("getitem: an index can have only one ellipsis ('...')")
    used = sum(k is not None and k is not Ellipsis for k in key)
    if used > t.ndim:
        raise IndexError(f"getitem: too many indices ({used}) for a tensor of shape {t.shape}")
    fill = (slice(None),) * (t.ndim - used)
    at = next((i for i, k in enumerate(key) if k is Ellipsis), len(key))
    key = key[:at] + fill + key[at + 1:]
    is_array = [is_tensor(k) or isinstance(k, list) or hasattr(k, "__array__") for k in key]
    if any(is_array) and any(k is None for k in key):
        raise IndexError("getitem: None together with integer-array indices is not supported; reshape after")
    return key, is_array


def _read_key(t, key: tuple, is_array: list) -> tuple[list, list, list]:
    """Axis by axis: the (start, stop) each keeps, the stepped slices as (axis, index array), and the integer
    arrays as (axis, index array); an int beside arrays is a 0-d index array, as in numpy."""
    bounds, stepped, arrays, axis = [], [], [], 0
    for k, arr in zip(key, is_array):
        if k is None:
            continue
        size = t.shape[axis]
        if isinstance(k, numbers.Integral) and not isinstance(k, bool):
            k = _int_index(t, k, axis)
            bounds.append((0, size) if any(is_array) else (k, k + 1))
            if any(is_array):  # numpy treats an int next to arrays as a 0-d index array
                arrays.append((axis, t.backend.asarray(k, int64)))
        elif arr:
            arrays.append((axis, _index_array(t, k, axis)))
            bounds.append((0, size))
        elif isinstance(k, slice):
            start, stop, step = k.indices(size)
            bounds.append((start, max(start, stop)) if step == 1 else (0, size))
            if step != 1:
                stepped.append((axis, t.backend.arange(start, stop, step, int64)))
        else:
            raise TypeError(f"getitem: unsupported index {k!r} ({type(k).__name__}); use ints, slices, None, "
                            "... or integer arrays")
        axis += 1
    return bounds, stepped, arrays


def _int_index(t, k, axis: int) -> int:
    """An int index made non-negative, or IndexError if it is out of bounds for the axis."""
    size = t.shape[axis]
    if not -size <= k < size:
        raise IndexError(f"getitem: index {k} is out of bounds for axis {axis} with size {size} (shape {t.shape})")
    return int(k) % size


def _gather_arrays(t, arrays: list):
    """Advanced indexing with one or more integer arrays, numpy's placement rule: the broadcast index shape
    replaces the indexed axes if they are adjacent, else it goes first."""
    axes = [a for a, _ in arrays]
    if len(arrays) == 1:
        return Gather.apply(t, idx=arrays[0][1], axis=axes[0])
    if axes != list(range(axes[0], axes[0] + len(axes))):  # not adjacent: move them to the front
        t = t.permute(axes + [a for a in range(t.ndim) if a not in axes])
        axes = list(range(len(axes)))
    first, dims = axes[0], [t.shape[a] for a in axes]
    try:
        flat = derive(_flat_index, *[i for _, i in arrays], backend=t.backend, dims=tuple(dims))
    except ValueError:
        shapes = " ".join(str(i.shape) for _, i in arrays)
        raise IndexError(f"getitem: index arrays could not be broadcast together with shapes {shapes}") from None
    merged = t.reshape(t.shape[:first] + (math.prod(dims),) + t.shape[first + len(dims):])  # indexed axes as one
    return Gather.apply(merged, idx=flat, axis=first)


def _flat_index(*arrays, backend, dims: tuple):
    """Several index arrays (broadcast together) as one index into their axes merged into one."""
    return backend.index_flat(list(arrays), list(dims))
