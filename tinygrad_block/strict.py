"""The 'strict' device: numpy arrays behind a wall that refuses every implicit trip to the host.

On a GPU, turning an array into numpy or into a Python number copies device memory back to the host and waits
for every queued kernel first (a sync); CuPy does some of that silently (`float(x)`, `int(x.max())`) and
refuses the rest (`np.asarray(x)`). A StrictArray refuses all of them: `np.asarray(x)`, `float(x)`, `int(x)`,
`bool(x)`, `x.item()`, `x.tolist()`, iterating, and mixing in a numpy array. So code that runs on
device='strict' makes no hidden host trip on device='cuda', and CPU-only CI catches what would fail or stall
on a GPU. The one way out is the backend's explicit `to_numpy`, counted in `host_reads`.

This module is also the strict array module itself (`xp`): the functions below are numpy's, lifted to take
and return StrictArrays.
"""
from __future__ import annotations

import sys

import numpy as np

from .backend import ArrayBackend


class HostConversionError(TypeError):
    """A StrictArray was asked for its values implicitly (on a GPU: a hidden sync)."""


def _refuse(what: str):
    def method(self, *args, **kwargs):
        raise HostConversionError(f"strict: {what} of a {self.dtype} array of shape {self.shape} would read it "
                                  "back to the host implicitly (on a GPU: a sync); use the backend's to_numpy")
    return method


def _unwrap(v):
    """StrictArray -> its numpy array, inside tuples and lists too; numpy arrays are refused (a host array
    cannot join device arrays; numpy scalars can, as kernel arguments)."""
    if isinstance(v, StrictArray):
        return v.a
    if isinstance(v, np.ndarray):
        raise TypeError(f"strict: a numpy array {v.dtype} {v.shape} cannot join strict arrays; move it with asarray")
    if isinstance(v, (tuple, list)):
        return type(v)(_unwrap(x) for x in v)
    return v


def _wrap(v):
    """numpy results -> StrictArrays (0-d results too: a device reduction gives a 0-d array, not a number)."""
    if isinstance(v, np.ndarray | np.generic):
        return StrictArray(np.asarray(v))
    if isinstance(v, tuple):
        return tuple(_wrap(x) for x in v)
    return v


def _call(f, args, kwargs):
    """f(*args, **kwargs) on the unwrapped arrays, its result wrapped."""
    return _wrap(f(*_unwrap(args), **{k: _unwrap(v) for k, v in kwargs.items()}))


def _lift(f):
    """numpy function f, taking and returning StrictArrays."""
    def lifted(*args, **kwargs):
        return _call(f, args, kwargs)
    lifted.__name__ = getattr(f, "__name__", "lifted")
    return lifted


def _method(name: str):
    """The numpy array method `name`, on the wrapped array."""
    def method(self, *args, **kwargs):
        return _call(getattr(self.a, name), args, kwargs)
    method.__name__ = name
    return method


class StrictArray:
    """A numpy array that answers shape questions but never hands out its values implicitly."""

    __slots__ = ("a",)
    __array_ufunc__ = None  # numpy operators and ufuncs on a StrictArray defer to it (and are refused)

    def __init__(self, a: np.ndarray):
        self.a = a

    shape = property(lambda self: self.a.shape)
    dtype = property(lambda self: self.a.dtype)
    ndim = property(lambda self: self.a.ndim)
    size = property(lambda self: self.a.size)
    nbytes = property(lambda self: self.a.nbytes)
    strides = property(lambda self: self.a.strides)
    itemsize = property(lambda self: self.a.itemsize)
    T = property(lambda self: StrictArray(self.a.T))
    mT = property(lambda self: StrictArray(self.a.mT))

    def __repr__(self):
        return f"StrictArray(shape={self.shape}, dtype={self.dtype})"

    def __array_namespace__(self, api_version=None):
        return sys.modules[__name__]

    def __len__(self):
        return len(self.a)

    __array__ = _refuse("np.asarray")
    __float__, __int__, __bool__ = _refuse("float()"), _refuse("int()"), _refuse("bool()")
    __index__, __complex__, __iter__ = _refuse("using it as an index"), _refuse("complex()"), _refuse("iterating")
    item, tolist = _refuse("item()"), _refuse("tolist()")

    def __setitem__(self, key, value):
        self.a[_unwrap(key)] = _unwrap(value)

    # operators and the array methods the manual pairs use: numpy's own, on the wrapped array
    __getitem__, __neg__, __pos__, __abs__ = (_method(n) for n in ("__getitem__", "__neg__", "__pos__", "__abs__"))
    __add__, __radd__, __sub__, __rsub__ = (_method(n) for n in ("__add__", "__radd__", "__sub__", "__rsub__"))
    __mul__, __rmul__, __matmul__, __rmatmul__ = (_method(n) for n in ("__mul__", "__rmul__", "__matmul__",
                                                                      "__rmatmul__"))
    __truediv__, __rtruediv__, __pow__, __rpow__ = (_method(n) for n in ("__truediv__", "__rtruediv__", "__pow__",
                                                                         "__rpow__"))
    __lt__, __le__, __gt__, __ge__, __eq__, __ne__ = (_method(n) for n in ("__lt__", "__le__", "__gt__", "__ge__",
                                                                           "__eq__", "__ne__"))
    __and__, __or__, __invert__ = (_method(n) for n in ("__and__", "__or__", "__invert__"))
    reshape, transpose, swapaxes, sum, mean = (_method(n) for n in ("reshape", "transpose", "swapaxes", "sum", "mean"))
    max, min, astype, copy, repeat, view = (_method(n) for n in ("max", "min", "astype", "copy", "repeat", "view"))

    __hash__ = None



class _Ufunc:
    """A lifted ufunc that keeps its `at` method (scatter-add uses add.at)."""

    def __init__(self, f):
        self.f, self.__name__ = f, f.__name__

    def __call__(self, *args, **kwargs):
        return _call(self.f, args, kwargs)

    def at(self, a, index, b):
        self.f.at(_unwrap(a), _unwrap(index), _unwrap(b))


# ---- the array module: numpy's functions that the ArrayBackend and the manual pairs call, lifted ----
ndarray = StrictArray
inf, pi, broadcast_shapes = np.inf, np.pi, np.broadcast_shapes
add = _Ufunc(np.add)
negative, exp, log, sqrt, reciprocal = map(_lift, (np.negative, np.exp, np.log, np.sqrt, np.reciprocal))
sin, cos, tanh, power = map(_lift, (np.sin, np.cos, np.tanh, np.power))
subtract, multiply, divide, maximum = map(_lift, (np.subtract, np.multiply, np.divide, np.maximum))
less, less_equal, greater = map(_lift, (np.less, np.less_equal, np.greater))
greater_equal, equal, not_equal = map(_lift, (np.greater_equal, np.equal, np.not_equal))
where, sum, max, matmul = map(_lift, (np.where, np.sum, np.max, np.matmul))
partition = _lift(np.partition)
bitwise_and, bitwise_xor = map(_lift, (np.bitwise_and, np.bitwise_xor))
reshape, transpose, broadcast_to, pad = map(_lift, (np.reshape, np.transpose, np.broadcast_to, np.pad))
concatenate, stack, take, repeat, triu = map(_lift, (np.concatenate, np.stack, np.take, np.repeat, np.triu))
zeros, full, arange, eye = map(_lift, (np.zeros, np.full, np.arange, np.eye))

def asarray(value, dtype=None) -> StrictArray:
    """Host data (lists, numpy arrays) or a StrictArray as a StrictArray: the one way in, like cupy.asarray."""
    return StrictArray(np.asarray(value.a if isinstance(value, StrictArray) else value, dtype=dtype))


class StrictBackend(ArrayBackend):
    """The ArrayBackend over strict arrays (device 'strict'): a compiled replay runs it primitive by primitive."""
    lowers = False

    def __init__(self):
        super().__init__("strict", sys.modules[__name__])

    def host(self, x):
        return x.a if isinstance(x, StrictArray) else np.asarray(x)

    def erf(self, a):
        return StrictArray(super().erf(a.a))
