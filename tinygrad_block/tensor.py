"""The Tensor: data on a backend, an optional gradient, and the Function that made it.

Operators and methods here either call one primitive (`Mul.apply`, `Sum.apply`, ...) or are composites
written from other Tensor methods (`softmax`, `silu`, `cross_entropy`, ...), which need no backward of their
own. Broadcasting happens in one place, `_pair` (every binary op's two operands), by an explicit `expand`; a
number that needs no gradient stays 0-d, and every backend broadcasts it for free.

Naming follows numpy for shapes and reductions (`shape`, `size`, `axis`, `keepdims`; PyTorch's `dim` and
`keepdim` are accepted too) and PyTorch for autograd (`requires_grad`, `backward`, `grad`, `detach`). PyTorch's
habits that cost nothing work too: `t.size()` and `t.size(dim)`, `view`, `argmax`/`argmin`, `item`.
"""
from __future__ import annotations

import functools
import math
import numbers
import weakref

from . import autograd
from .dtypes import as_dtype, float16, float32, float64, int64, is_float, names_a_dtype, scalar_fits
from .generator import Generator
from .device import get_backend
from .function import (Add, Cast, Compare, Concat, Cos, Div, Erf, Exp, Expand, Log, Matmul, Max, Maximum, Mul, Neg,
                       Pad, Permute, Pow, Reciprocal, Reshape, Sin, Sqrt, Sub, Sum, Transfer, Where)
from .index import getitem
from .trace import no_grad, read_value


def _torch_names(method):
    """Accept PyTorch's `dim=`/`keepdim=` for numpy's `axis=`/`keepdims=`."""
    @functools.wraps(method)
    def wrapper(*args, dim=None, keepdim=None, **kwargs):
        if dim is not None:
            kwargs["axis"] = dim
        if keepdim is not None:
            kwargs["keepdims"] = keepdim
        return method(*args, **kwargs)
    return wrapper


def _shape_arg(args, op: str) -> tuple:
    """`f(2, 3)` and `f((2, 3))` both mean shape (2, 3)."""
    shape = tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else tuple(args)
    if all(type(s) is int for s in shape):  # the common case, without the slower checks below
        return shape
    if not all(isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in shape):
        raise TypeError(f"{op}: a shape is a sequence of ints, got {shape!r}")
    return tuple(int(s) for s in shape)


def _axis(axis: int, ndim: int, op: str) -> int:
    if type(axis) is int and -ndim <= axis < ndim:  # the common case, without the slower checks below
        return axis % ndim
    if not isinstance(axis, numbers.Integral) or isinstance(axis, bool):
        raise TypeError(f"{op}: an axis is an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for a tensor of {ndim} dimensions; "
                         f"expected {-ndim} <= axis < {ndim}")
    return int(axis) % ndim


def _axes(axis, ndim: int, op: str) -> tuple:
    """None -> every axis; an int or a sequence of ints -> sorted, non-negative, no repeats."""
    if axis is None:
        return tuple(range(ndim))
    axes = tuple(_axis(a, ndim, op) for a in (axis if isinstance(axis, (tuple, list)) else (axis,)))
    if len(set(axes)) != len(axes):
        raise ValueError(f"{op}: repeated axis in {axis!r}")
    return tuple(sorted(axes))


def broadcast_shape(a: tuple, b: tuple, op: str) -> tuple:
    """numpy's rule: align trailing axes; each pair must be equal or contain a 1."""
    out = []
    for x, y in zip(((1,) * (len(b) - len(a)) + a), ((1,) * (len(a) - len(b)) + b)):
        if x != y and 1 not in (x, y):
            raise ValueError(f"{op}: shapes {a} and {b} cannot be broadcast together "
                             "(trailing dimensions must be equal or 1)")
        out.append(y if x == 1 else x)
    return tuple(out)


class _Size(int):
    """numpy's `t.size`, the number of elements, which PyTorch's habit may call: `t.size()` is the shape (a tuple),
    `t.size(dim)` one axis's length."""

    def __new__(cls, n: int, shape: tuple = ()):    # shape=(): pickle and copy make it from the int alone
        size = super().__new__(cls, n)
        size.shape = shape
        return size

    def __call__(self, dim=None):
        n = len(self.shape)
        if isinstance(dim, numbers.Integral) and not isinstance(dim, bool) and not -n <= dim < n:
            raise IndexError(f"size: dim {dim} is out of range for shape {self.shape}; expected {-n} <= dim < {n}")
        return self.shape if dim is None else self.shape[_axis(dim, n, "size")]


def _is_constant(t) -> bool:
    return not t.data.ndim and not t._requires_grad


def _flip(t):
    """An order-reversing map that is its own inverse, so min x = flip(max(flip(x))): -x for floats; ~x = -1 - x
    for ints (-x overflows at the most negative int: -(-2**63) is -2**63); not x, `x == False`, for bools."""
    return -t if t.dtype.kind == "f" else -1 - t if t.dtype.kind in "iu" else t == False  # noqa: E712 (elementwise)


class Tensor:
    """An N-d array that records how it was made, so `backward()` can compute gradients."""

    __slots__ = ("data", "backend", "grad", "_requires_grad", "_ctx", "__weakref__")
    __array_ufunc__ = None  # `ndarray * Tensor` defers to Tensor (and raises), never loops elementwise
    __hash__ = object.__hash__  # == builds a comparison tensor, so hash by identity

    def __init__(self, data, *, dtype=None, device="cpu", requires_grad: bool = False):
        backend = get_backend(device)
        if isinstance(data, Tensor):
            data = data.data if data.backend is backend else data.numpy()
        dtype = as_dtype(dtype, "tensor") if dtype is not None else backend.infer_dtype(data)
        self.data, self.backend, self.grad, self._ctx = backend.asarray(data, dtype), backend, None, None
        self._requires_grad = False
        self.requires_grad = requires_grad

    @staticmethod
    def _make(data, backend) -> Tensor:
        """Wrap a backend array without copying or checking (used by the ops)."""
        t = object.__new__(Tensor)
        t.data, t.backend, t.grad, t._requires_grad, t._ctx = data, backend, None, False, None
        return t

    # ---- attributes ----
    shape = property(lambda self: self.data.shape)
    ndim = property(lambda self: self.data.ndim)
    size = property(lambda self: _Size(self.data.size, self.data.shape))   # numpy's count; t.size() PyTorch's shape
    dtype = property(lambda self: self.data.dtype)
    device = property(lambda self: self.backend.name)
    nbytes = property(lambda self: self.data.nbytes)
    is_leaf = property(lambda self: self._ctx is None)

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag: bool):
        if flag and not is_float(self.dtype):
            raise TypeError(f"requires_grad: only floating-point tensors can require grad; "
                            f"this one is {self.dtype} with shape {self.shape}")
        if not flag and self._ctx is not None:
            raise RuntimeError("requires_grad: a tensor computed by an op keeps requires_grad; use .detach()")
        self._requires_grad = bool(flag)

    def requires_grad_(self, flag: bool = True) -> Tensor:
        self.requires_grad = flag
        return self

    def __repr__(self):
        extra = "" if self.device == "cpu" else f", device={self.device!r}"
        extra += ", requires_grad=True" if self._requires_grad else ""
        if self.device == "meta":
            return f"Tensor(shape={self.shape}, dtype={self.dtype}{extra})"
        return f"Tensor({self.backend.format(self.data)}, dtype={self.dtype}{extra})"

    # ---- leaving the graph ----
    def numpy(self):
        """The values as a read-only numpy array (a copy from the GPU; an error on 'meta')."""
        read_value(self)
        return self.backend.to_numpy(self.data)

    def item(self):
        if self.size != 1:
            raise ValueError(f"item: only a one-element tensor converts to a Python number; shape is {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    __float__ = lambda self: float(self.item())  # noqa: E731
    __int__ = lambda self: int(self.item())  # noqa: E731

    def __bool__(self):
        if self.size != 1:
            raise ValueError(f"bool: the truth value of a tensor of shape {self.shape} is ambiguous; "
                             "use .all()-style reductions or compare .item()")
        return bool(self.item())

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len: a 0-d tensor has no length")
        return self.shape[0]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iter: a 0-d tensor cannot be iterated; use .item()")
        return (self[i] for i in range(self.shape[0]))

    def __setitem__(self, key, value):
        raise TypeError("setitem: tensors are immutable; build a new one with where(), pad() or concat()")

    def assign(self, value: Tensor) -> Tensor:
        """This tensor, its array replaced by value's (same shape, dtype, device): the object stays, so whatever
        holds it (a module, an optimizer, a compiled step) sees the new values. Not differentiable."""
        kind = lambda t: f"{t.dtype} {t.shape} on {t.device}" if isinstance(t, Tensor) else type(t).__name__  # noqa: E731
        if kind(value) != kind(self):
            raise ValueError(f"assign: a tensor {kind(self)} takes the values of one just like it, got {kind(value)}")
        self.data = value.data
        return self

    def detach(self) -> Tensor:
        """The same data, cut from the graph (requires_grad=False)."""
        return Tensor._make(self.data, self.backend)

    def to(self, target) -> Tensor:
        """`to(tb.float64)` casts (differentiable); `to('meta')` moves to another device (differentiable
        between devices that hold values; a gradient cannot flow back from the shape-only 'meta' device)."""
        if isinstance(target, str) and not names_a_dtype(target):
            backend = get_backend(target)  # ValueError naming the known devices
            return self if backend is self.backend else Transfer.apply(self, backend=backend)
        dtype = as_dtype(target, "to")
        return self if dtype == self.dtype else Cast.apply(self, dtype=dtype)

    float = lambda self: self.to(float32)  # noqa: E731
    double = lambda self: self.to(float64)  # noqa: E731
    half = lambda self: self.to(float16)  # noqa: E731

    # ---- autograd ----
    def backward(self, grad: Tensor | None = None, retain_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into `.grad` of every leaf that requires grad.

        `grad` is d(loss)/d(self); it may be omitted for a one-element output (it is then 1). The graph is
        freed afterwards: a second backward() through it raises RuntimeError unless the first one passed
        `retain_graph=True`, in which case gradients accumulate again (as in PyTorch)."""
        if not self._requires_grad:
            raise RuntimeError(f"backward: this tensor (shape {self.shape}) does not require grad; "
                               "no tensor it was computed from had requires_grad=True")
        if grad is None:
            if self.size != 1:
                raise RuntimeError(f"backward: grad can be implied only for a one-element output, but this "
                                   f"output has shape {self.shape}; pass grad= a tensor of that shape")
            grad = self.ones_like()
        grad = self._operand(grad, "backward", scalars=False)
        if grad.shape != self.shape:
            raise ValueError(f"backward: grad has shape {grad.shape} but the output has shape {self.shape}")
        autograd.backward(self, grad.detach(), retain_graph)

    def retain_grad(self) -> Tensor:
        """Keep `.grad` on this intermediate tensor too (leaves always keep theirs)."""
        if self._ctx is not None:
            self._ctx.retained = weakref.ref(self)
        return self

    # ---- operands and broadcasting ----
    def _operand(self, other, op: str, scalars: bool = True) -> Tensor:
        """`other` as a Tensor on this tensor's device and dtype: tensors must already match (no silent casts
        or moves); a Python number becomes a 0-d constant of this tensor's dtype, if the dtype holds it."""
        if isinstance(other, Tensor):
            if other.backend is not self.backend:
                raise RuntimeError(f"{op}: tensors are on different devices ({self.device} {self.shape} and "
                                   f"{other.device} {other.shape}); move one with .to(device)")
            if other.data.dtype != self.data.dtype:
                raise TypeError(f"{op}: dtypes differ ({self.dtype} {self.shape} and {other.dtype} "
                                f"{other.shape}); cast one explicitly, e.g. .to({str(self.dtype)!r})")
            return other
        if scalars and scalar_fits(other, self.data.dtype):
            return Tensor._make(self.backend.constant(other, self.data.dtype), self.backend)
        if scalars and isinstance(other, numbers.Real):
            raise TypeError(f"{op}: the Python number {other!r} does not fit a {self.dtype} tensor (out of range, "
                            "or a float with an integer tensor); cast the tensor explicitly, e.g. .to(tb.float64)")
        if scalars and isinstance(other, numbers.Number):
            raise TypeError(f"{op}: {other!r} is {type(other).__name__}; only real numbers join a {self.dtype} tensor")
        wanted = "a Tensor or a Python number" if scalars else "a Tensor"
        raise TypeError(f"{op}: expected {wanted}, got {type(other).__name__}; wrap arrays with tb.tensor(...)")

    def _pair(self, other, name: str) -> tuple[Tensor, Tensor]:
        """(self, other) checked and broadcast for a binary op. Operands of different shapes are broadcast
        by explicit Expands (whose backward sums), except a constant: a Python number or a 0-d tensor that
        does not require grad stays 0-d, and every backend broadcasts it for free."""
        x, other = self, self._operand(other, name)
        if other.data.shape != x.data.shape and not (_is_constant(other) or _is_constant(x)):
            shape = broadcast_shape(x.shape, other.shape, name)
            x, other = x.expand(shape), other.expand(shape)
        return x, other

    def _binary(self, fn, other, name: str, reverse: bool = False, **params) -> Tensor:
        x, other = self._pair(other, name)
        return fn.apply(other, x, **params) if reverse else fn.apply(x, other, **params)

    def expand(self, *shape) -> Tensor:
        """Broadcast to `shape` (numpy rules, one way: size-1 axes stretch, new axes go in front); -1 keeps an
        axis's size, as in PyTorch."""
        shape = _shape_arg(shape, "expand")
        if shape == self.shape:
            return self
        if len(shape) >= self.ndim and min(shape) < 0:
            shape = self._keep_sizes(shape)
        if len(shape) < self.ndim or broadcast_shape(self.shape, shape, "expand") != shape:
            raise ValueError(f"expand: cannot broadcast shape {self.shape} to {shape}")
        return Expand.apply(self, shape=shape)

    def _keep_sizes(self, shape: tuple) -> tuple:
        """`expand`'s -1 (as in PyTorch): keep that existing axis's size; new leading axes need a real size."""
        new = len(shape) - self.ndim
        for i, s in enumerate(shape):
            if s < -1 or s == -1 and i < new:
                raise ValueError(f"expand: bad size {s} at axis {i} in {shape} for a tensor of shape {self.shape}; "
                                 "sizes must be >= 0, or -1 to keep the size of an existing axis")
        return tuple(self.shape[i - new] if s == -1 else s for i, s in enumerate(shape))

    broadcast_to = expand

    # ---- arithmetic operators ----
    def __add__(self, other): return self._binary(Add, other, "add")
    def __radd__(self, other): return self._binary(Add, other, "add", reverse=True)
    def __mul__(self, other): return self._binary(Mul, other, "mul")
    def __rmul__(self, other): return self._binary(Mul, other, "mul", reverse=True)
    def __truediv__(self, other): return self._binary(Div, other, "div")
    def __rtruediv__(self, other): return self._binary(Div, other, "div", reverse=True)
    def __neg__(self): return Neg.apply(self)
    def __matmul__(self, other): return self.matmul(other)

    def __sub__(self, other): return self._binary(Sub, other, "sub")
    def __rsub__(self, other): return self._binary(Sub, other, "sub", reverse=True)

    def __pow__(self, exponent):
        """a ** p: one Pow primitive for a number p; exp(p * log a) for a tensor p."""
        if isinstance(exponent, numbers.Real) and not isinstance(exponent, bool):
            if not is_float(self.dtype):
                raise TypeError(f"pow: needs a floating-point tensor, got {self.dtype}; cast it first")
            return Pow.apply(self, exponent=float(exponent))
        a, p = self._pair(exponent, "pow")
        return (p * a.log()).exp()

    def __rpow__(self, base):
        """b ** a for a Python number b > 0: exp(a * ln b)"""
        if not isinstance(base, numbers.Real) or base <= 0:
            raise ValueError(f"pow: a number raised to a tensor needs a positive real base, got {base!r}")
        return (self * math.log(base)).exp()

    # ---- comparisons: boolean tensors, not differentiable ----
    def __lt__(self, other): return self._binary(Compare, other, "lt", op="less")
    def __le__(self, other): return self._binary(Compare, other, "le", op="less_equal")
    def __gt__(self, other): return self._binary(Compare, other, "gt", op="greater")
    def __ge__(self, other): return self._binary(Compare, other, "ge", op="greater_equal")
    def __eq__(self, other): return self._binary(Compare, other, "eq", op="equal")
    def __ne__(self, other): return self._binary(Compare, other, "ne", op="not_equal")

    # ---- elementwise primitives and composites ----
    def exp(self): return Exp.apply(self)
    def log(self): return Log.apply(self)
    def sqrt(self): return Sqrt.apply(self)
    def reciprocal(self): return Reciprocal.apply(self)
    def sin(self): return Sin.apply(self)
    def cos(self): return Cos.apply(self)
    def erf(self): return Erf.apply(self)

    def maximum(self, other) -> Tensor:
        return self._binary(Maximum, other, "maximum")

    def minimum(self, other) -> Tensor:
        """min(a, b) = -max(-a, -b), with ints' and bools' own flip (`_flip`)"""
        a, b = self._pair(other, "minimum")
        return _flip(_flip(a).maximum(_flip(b)))

    def masked_fill(self, mask: Tensor, value) -> Tensor:
        """`value` where mask is True, self elsewhere (e.g. the causal mask before a softmax)"""
        return where(mask, value, self)

    def rsqrt(self) -> Tensor:
        """1 / sqrt(x)"""
        return self.sqrt().reciprocal()

    def abs(self) -> Tensor:
        return where(self < 0, -self, self)

    def relu(self) -> Tensor:
        """max(x, 0); the gradient at 0 is 0, as in PyTorch"""
        return where(self > 0, self, 0.0)

    def sigmoid(self) -> Tensor:
        """1 / (1 + e^-x), computed from e^-|x| <= 1 so it never overflows (x up to +-1e4 and beyond)"""
        positive = self >= 0
        e = where(positive, -self, self).exp()  # e^-|x|
        return where(positive, 1.0, e) / (e + 1.0)

    def tanh(self) -> Tensor:
        """tanh x = 2 sigmoid(2x) - 1"""
        return (self * 2.0).sigmoid() * 2.0 - 1.0

    def silu(self) -> Tensor:
        """SiLU (swish): x * sigmoid(x)"""
        return self * self.sigmoid()

    def gelu(self, approximate: str = "none") -> Tensor:
        """GELU: x * Phi(x) = x/2 * (1 + erf(x / sqrt 2)); approximate='tanh' gives
        x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))), the form GPT-2 uses."""
        if approximate == "none":
            return self * 0.5 * ((self * (1 / math.sqrt(2))).erf() + 1.0)
        if approximate == "tanh":
            inner = (self + self * self * self * 0.044715) * math.sqrt(2 / math.pi)
            return self * 0.5 * (inner.tanh() + 1.0)
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")

    # ---- reductions ----
    @_torch_names
    def sum(self, axis=None, keepdims: bool = False) -> Tensor:
        """The sum over `axis` (every axis by default). Bools and ints sum to int64, as in numpy and PyTorch:
        `(pred == y).sum()` counts the matches, and int32 values cannot wrap; floats keep their dtype."""
        return Sum.apply(self, axes=_axes(axis, self.ndim, "sum"), keepdims=keepdims)

    @_torch_names
    def max(self, axis=None, keepdims: bool = False) -> Tensor:
        axes = _axes(axis, self.ndim, "max")
        if any(self.shape[a] == 0 for a in axes):
            raise ValueError(f"max: cannot reduce an empty axis (shape {self.shape}, axes {axes})")
        return Max.apply(self, axes=axes, keepdims=keepdims)

    @_torch_names
    def min(self, axis=None, keepdims: bool = False) -> Tensor:
        """min x = -max(-x), with ints' and bools' own flip (`_flip`): for bools min is `all`, as max is `any`"""
        _axes(axis, self.ndim, "min")
        return _flip(_flip(self).max(axis, keepdims))

    @_torch_names
    def mean(self, axis=None, keepdims: bool = False) -> Tensor:
        """sum / n (float16 sums and divides in float32, then rounds once: its sum could overflow). Floats only,
        as in PyTorch: the mean of ints or bools has no int value, so cast first (an accuracy is
        `(pred == y).to(tb.float32).mean()`)."""
        self._need_float("mean")
        n = math.prod(self.shape[a] for a in _axes(axis, self.ndim, "mean"))
        return (self.wide().sum(axis, keepdims) / n).to(self.dtype)

    def wide(self) -> Tensor:
        """float16 as float32, where sums and statistics of float16 accumulate; other dtypes as they are."""
        return self.to(float32) if self.dtype == float16 else self

    @_torch_names
    def var(self, axis=None, keepdims: bool = False, correction: int = 0) -> Tensor:
        """mean squared deviation: sum((x - mean)^2) / (n - correction). correction=0 (numpy's default,
        and what LayerNorm uses); PyTorch's var defaults to correction=1."""
        self._need_float("var")
        n = math.prod(self.shape[a] for a in _axes(axis, self.ndim, "var"))
        x = self.wide()
        d = x - x.mean(axis, keepdims=True)
        return ((d * d).sum(axis, keepdims) / (n - correction)).to(self.dtype)

    @_torch_names
    def logsumexp(self, axis=-1, keepdims: bool = False) -> Tensor:
        """log sum e^x = m + log sum e^(x - m) with m = max x (held constant: the result does not depend
        on m), so logits of +-1e4 neither overflow nor underflow"""
        _axes(axis, self.ndim, "logsumexp")
        m = self._row_max(axis)
        out = (self - m).exp().sum(axis, keepdims=True).log() + m
        return out if keepdims else out.squeeze(axis)

    def _row_max(self, axis) -> Tensor:
        """max over `axis` (keepdims) as a constant: softmax and logsumexp do not depend on it, so no graph"""
        with no_grad():
            return self.max(axis, keepdims=True)

    @_torch_names
    def softmax(self, axis=-1) -> Tensor:
        """e^(x - max) / sum e^(x - max)"""
        _axes(axis, self.ndim, "softmax")
        e = (self - self._row_max(axis)).exp()
        return e / e.sum(axis, keepdims=True)

    @_torch_names
    def log_softmax(self, axis=-1) -> Tensor:
        """x - logsumexp(x), computed as (x - m) - log sum e^(x - m) with m = max x: subtracting first keeps
        float32 exact where x and logsumexp(x) are both large (logits of 1e4)"""
        _axes(axis, self.ndim, "log_softmax")
        shifted = self - self._row_max(axis)
        return shifted - shifted.exp().sum(axis, keepdims=True).log()

    def cross_entropy(self, target, reduction: str = "mean") -> Tensor:
        """-log softmax(logits)[target] for logits (..., C) and integer class indices `target` (...)."""
        if self.ndim == 0:
            raise ValueError("cross_entropy: logits must have shape (..., C), one score per class, at least 1 "
                             "dimension; got a 0-d tensor")
        target = target if isinstance(target, Tensor) else Tensor(target, device=self.backend)
        if target.backend is not self.backend:
            raise RuntimeError(f"cross_entropy: logits are on {self.device} but target is on {target.device}")
        if target.dtype.kind not in "iu" or target.shape != self.shape[:-1]:
            raise TypeError(f"cross_entropy: target must be integer class indices of shape {self.shape[:-1]} "
                            f"for logits of shape {self.shape}; got {target.dtype} {target.shape}")
        classes = self.shape[-1]
        bounds = self.backend.index_range(target.data)
        if bounds is not None and (bounds[0] < 0 or bounds[1] >= classes):
            raise IndexError(f"cross_entropy: target values must lie in [0, {classes}); got {bounds[0]}..{bounds[1]}")
        logp = self.log_softmax(-1).reshape(-1, classes)                      # (N, C)
        rows = arange(logp.shape[0], device=self.backend)
        nll = -logp[rows, target.reshape(-1)].reshape(target.shape)           # (...)
        if reduction == "none":
            return nll
        if reduction in ("mean", "sum"):
            return nll.mean() if reduction == "mean" else nll.sum()
        raise ValueError(f"cross_entropy: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")

    @_torch_names
    def argmax(self, axis=None, keepdims: bool = False) -> Tensor:
        """The index (int64) of the largest value along `axis`, or in the flattened tensor when axis is None: the
        first one on ties, and the first NaN where there is one, as numpy and PyTorch (no gradient)."""
        return self.detach()._first_max(axis, keepdims, "argmax")

    @_torch_names
    def argmin(self, axis=None, keepdims: bool = False) -> Tensor:
        """The index (int64) of the smallest value: the argmax of the order-reversing `_flip`, so ties and NaN
        go as in argmax."""
        return _flip(self.detach())._first_max(axis, keepdims, "argmin")

    def _first_max(self, axis, keepdims: bool, op: str) -> Tensor:
        """argmax from primitives: max, ==, and a countdown n - i at index i, whose largest mark among the maxima
        is the first one."""
        x = self if axis is not None else self.reshape(-1)
        a = _axis(0 if axis is None else axis, x.ndim, op)
        n = x.shape[a]
        if n == 0:
            raise ValueError(f"{op}: axis {axis} of shape {self.shape} is empty; there is no index to return")
        is_max = (x == x.max(a, keepdims=True)).maximum(x != x)           # a NaN counts as the largest, as in numpy
        countdown = arange(n, 0, -1, device=x.backend).reshape((n,) + (1,) * (x.ndim - 1 - a))  # n - i at index i
        out = n - where(is_max, countdown, 0).max(a, keepdims=keepdims)
        return out.reshape((1,) * self.ndim) if axis is None and keepdims else out

    # ---- movement ----
    def reshape(self, *shape) -> Tensor:
        """Same elements in a new shape; one axis may be -1 (inferred)."""
        return self._reshape(_shape_arg(shape, "reshape"), "reshape")

    def view(self, *shape) -> Tensor:
        """PyTorch's view, which is reshape here: PyTorch refuses a view whose memory layout would need a copy
        (after a transpose) and asks for reshape; tensors here are immutable, so whether two share memory cannot
        be seen, and view works on every layout. view(dtype), PyTorch's reinterpretation of the bytes, is refused."""
        return self._reshape(_shape_arg(shape, "view"), "view")

    def _reshape(self, shape: tuple, op: str) -> Tensor:
        if shape.count(-1) > 1 or any(s < -1 for s in shape):
            raise ValueError(f"{op}: invalid shape {shape} for shape {self.shape}; sizes are >= 0 with at most one -1")
        n, known = self.data.size, math.prod(s for s in shape if s != -1)
        if -1 in shape and known and n % known == 0:
            shape = tuple(n // known if s == -1 else s for s in shape)
        if math.prod(shape) != n or -1 in shape:
            raise ValueError(f"{op}: cannot reshape shape {self.shape} ({n} elements) "
                             f"into {shape} ({known} elements{' times the -1 axis' if -1 in shape else ''})")
        return self if shape == self.shape else Reshape.apply(self, shape=shape)

    def permute(self, *order) -> Tensor:
        """Reorder axes: out.shape[i] = self.shape[order[i]] (numpy's transpose(axes))."""
        order = _shape_arg(order, "permute")
        axes = tuple(_axis(a, self.ndim, "permute") for a in order)
        if sorted(axes) != list(range(self.ndim)):
            raise ValueError(f"permute: {order} is not a permutation of the {self.ndim} axes of shape {self.shape}")
        return self if axes == tuple(range(self.ndim)) else Permute.apply(self, order=axes)

    def transpose(self, axis0: int, axis1: int) -> Tensor:
        """Swap two axes (PyTorch's transpose; numpy's transpose(axes) is `permute`)."""
        order = list(range(self.ndim))
        a, b = _axis(axis0, self.ndim, "transpose"), _axis(axis1, self.ndim, "transpose")
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    T = property(lambda self: self.permute(tuple(range(self.ndim))[::-1]), doc="all axes reversed")
    mT = property(lambda self: self.transpose(-2, -1), doc="the last two axes swapped")

    @_torch_names
    def unsqueeze(self, axis: int) -> Tensor:
        """Insert a size-1 axis at `axis` (counted in the result)."""
        axis = _axis(axis, self.ndim + 1, "unsqueeze")
        return self.reshape(self.shape[:axis] + (1,) + self.shape[axis:])

    @_torch_names
    def squeeze(self, axis=None) -> Tensor:
        """Drop size-1 axes: all of them, or the ones named."""
        if axis is None:
            axes = [a for a in range(self.ndim) if self.shape[a] == 1]
        else:
            axes = _axes(axis, self.ndim, "squeeze")
        if any(self.shape[a] != 1 for a in axes):
            raise ValueError(f"squeeze: axes {axes} of shape {self.shape} are not all of size 1")
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def pad(self, widths) -> Tensor:
        """Zeros around the data: widths = ((before, after), ...) per axis, as numpy.pad."""
        widths = tuple(tuple(int(w) for w in pair) for pair in widths)
        if len(widths) != self.ndim or any(len(p) != 2 or min(p) < 0 for p in widths):
            raise ValueError(f"pad: widths must be {self.ndim} pairs of non-negative ints for shape "
                             f"{self.shape}, got {widths}")
        return Pad.apply(self, widths=widths)

    def __getitem__(self, key) -> Tensor:
        """numpy's basic and integer-array indexing, built from Slice, Gather and Reshape (see index.py)"""
        return getitem(self, key)

    # ---- matmul ----
    def matmul(self, other) -> Tensor:
        """numpy's matmul: (..., M, K) @ (..., K, N) with broadcast batch axes; 1-D operands are vectors."""
        if not isinstance(other, Tensor):
            raise TypeError(f"matmul: expected a Tensor, got {type(other).__name__}")
        other = self._operand(other, "matmul")
        if self.ndim == 0 or other.ndim == 0:
            raise ValueError(f"matmul: 0-d operands can't be matrix-multiplied ({self.shape} @ {other.shape}); "
                             "use * for scalars")
        a = self.reshape(1, -1) if self.ndim == 1 else self        # (1, K)
        b = other.reshape(-1, 1) if other.ndim == 1 else other     # (K, 1)
        if a.shape[-1] != b.shape[-2]:
            raise ValueError(f"matmul: inner dimensions differ: {self.shape} @ {other.shape}; the left's last "
                             f"axis ({a.shape[-1]}) must equal the right's second-to-last ({b.shape[-2]})")
        if b.ndim == 2 and a.ndim > 2:  # fold batch axes into rows: (..., M, K) -> (batch*M, K)
            rows = a.reshape(math.prod(a.shape[:-1]), a.shape[-1])
            out = Matmul.apply(rows, b).reshape(*a.shape[:-1], b.shape[-1])                # (..., M, N)
        else:
            try:
                batch = broadcast_shape(a.shape[:-2], b.shape[:-2], "matmul")
            except ValueError:
                raise ValueError(f"matmul: the batch axes of {self.shape} @ {other.shape} cannot be broadcast "
                                 "together (all axes but the last two follow numpy's broadcasting rule)") from None
            out = Matmul.apply(a.expand(*batch, *a.shape[-2:]), b.expand(*batch, *b.shape[-2:]))
        drop = ({out.ndim - 2} if self.ndim == 1 else set()) | ({out.ndim - 1} if other.ndim == 1 else set())
        return out.reshape(tuple(s for i, s in enumerate(out.shape) if i not in drop)) if drop else out

    # ---- constants shaped like this tensor ----
    def zeros_like(self) -> Tensor:
        return Tensor._make(self.backend.full(self.shape, 0, self.dtype), self.backend)

    def ones_like(self) -> Tensor:
        return Tensor._make(self.backend.full(self.shape, 1, self.dtype), self.backend)

    def _need_float(self, op: str) -> None:
        if self.data.dtype.kind != "f":
            raise TypeError(f"{op}: needs a floating-point tensor, got {self.dtype} {self.shape}; "
                            "cast it first, e.g. .to(tb.float32)")


# ---------------------------------------------------------------- functions of several tensors
def where(cond: Tensor, a, b) -> Tensor:
    """cond ? a : b elementwise; `a` or `b` may be a Python number. Tensors are broadcast together."""
    if not isinstance(cond, Tensor) or cond.dtype.kind != "b":
        raise TypeError(f"where: cond must be a bool Tensor, got {getattr(cond, 'dtype', type(cond).__name__)}")
    ref = a if isinstance(a, Tensor) else b
    if not isinstance(ref, Tensor):
        raise TypeError("where: at least one of a, b must be a Tensor (it sets the dtype)")
    if cond.backend is not ref.backend:
        raise RuntimeError(f"where: tensors are on different devices (cond {cond.device} {cond.shape}, values "
                           f"{ref.device} {ref.shape}); move them to one device with .to(device)")
    shape = cond.shape
    for t in (a, b):
        shape = broadcast_shape(shape, t.shape, "where") if isinstance(t, Tensor) else shape
    a, b = [ref._operand(t, "where").expand(shape) if isinstance(t, Tensor) else ref._operand(t, "where")
            for t in (a, b)]
    return Where.apply(cond.expand(shape), a, b)


def maximum(a: Tensor, b) -> Tensor:
    return a.maximum(b)


def minimum(a: Tensor, b) -> Tensor:
    return a.minimum(b)


@_torch_names
def concat(tensors, axis: int = 0) -> Tensor:
    """Join tensors along an existing axis; every other axis must match."""
    tensors = list(tensors)
    if not tensors or not all(isinstance(t, Tensor) for t in tensors):
        raise TypeError("concat: expected a non-empty sequence of Tensors")
    first = tensors[0]
    if first.ndim == 0:
        raise ValueError("concat: 0-d tensors have no axis to join along; use stack")
    axis = _axis(axis, first.ndim, "concat")
    for t in tensors[1:]:
        first._operand(t, "concat")
        if t.ndim != first.ndim or any(x != y for i, (x, y) in enumerate(zip(t.shape, first.shape)) if i != axis):
            raise ValueError(f"concat: shapes {first.shape} and {t.shape} must match except on axis {axis}")
    return Concat.apply(*tensors, axis=axis)


cat = concat


@_torch_names
def stack(tensors, axis: int = 0) -> Tensor:
    """Join equal-shaped tensors along a new axis."""
    tensors = list(tensors)
    if not tensors or not all(isinstance(t, Tensor) for t in tensors):
        raise TypeError("stack: expected a non-empty sequence of Tensors")
    _axis(axis, tensors[0].ndim + 1, "stack")
    for t in tensors[1:]:
        tensors[0]._operand(t, "stack")
    if any(t.shape != tensors[0].shape for t in tensors):
        raise ValueError(f"stack: all shapes must be equal, got {[t.shape for t in tensors]}")
    return concat([t.unsqueeze(axis) for t in tensors], axis)


# ---------------------------------------------------------------- creation
def tensor(data, *, dtype=None, device="cpu", requires_grad: bool = False) -> Tensor:
    """A tensor from Python data or a numpy array (Python floats become float32, ints int64)."""
    return Tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)


def _sizes(args, op: str) -> tuple:
    """A new tensor's shape: ints >= 0 (zero sizes make empty tensors)."""
    shape = _shape_arg(args, op)
    if min(shape, default=0) < 0:
        raise ValueError(f"{op}: negative size {min(shape)} in shape {shape}; sizes must be >= 0")
    return shape


def _filled(op, shape, value, dtype, device, requires_grad) -> Tensor:
    backend = get_backend(device)
    dtype = as_dtype(dtype, op) if dtype is not None else backend.infer_dtype(value)
    t = Tensor._make(backend.full(shape, value, dtype), backend)
    return t.requires_grad_(requires_grad)


def zeros(*shape, dtype=float32, device="cpu", requires_grad: bool = False) -> Tensor:
    return _filled("zeros", _sizes(shape, "zeros"), 0, dtype, device, requires_grad)


def ones(*shape, dtype=float32, device="cpu", requires_grad: bool = False) -> Tensor:
    return _filled("ones", _sizes(shape, "ones"), 1, dtype, device, requires_grad)


def full(shape, value, *, dtype=None, device="cpu", requires_grad: bool = False) -> Tensor:
    """A tensor of one value; dtype from the value unless given (3 -> int64, 3.0 -> float32)."""
    return _filled("full", _sizes((shape,), "full"), value, dtype, device, requires_grad)


def zeros_like(t: Tensor) -> Tensor:
    return t.zeros_like()


def ones_like(t: Tensor) -> Tensor:
    return t.ones_like()


def arange(start, stop=None, step=1, *, dtype=None, device="cpu") -> Tensor:
    """start, start + step, ... < stop; int64 for int arguments, float32 otherwise (as PyTorch)."""
    if stop is None:
        start, stop = 0, start
    backend = get_backend(device)
    given = f"start={start!r}, stop={stop!r}, step={step!r}"
    if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in (start, stop, step)):
        raise TypeError(f"arange: start, stop and step must be numbers, got {given}")
    if not all(math.isfinite(v) for v in (start, stop, step)):
        raise ValueError(f"arange: start, stop and step must be finite, got {given}")
    if step == 0:
        raise ValueError(f"arange: step must not be zero, got {given}")
    default = int64 if all(isinstance(v, numbers.Integral) for v in (start, stop, step)) else float32
    return Tensor._make(backend.arange(start, stop, step, as_dtype(dtype or default, "arange")), backend)


def eye(n: int, m: int | None = None, *, dtype=float32, device="cpu") -> Tensor:
    """The (n, m) identity matrix (m = n unless given): ones on the diagonal."""
    m = n if m is None else m
    for name, v, what in (("n", n, "rows"), ("m", m, "columns")):
        if not isinstance(v, numbers.Integral) or isinstance(v, bool):
            raise TypeError(f"eye: {name}, the number of {what}, must be an int, got {v!r}")
        if v < 0:
            raise ValueError(f"eye: {name}, the number of {what}, must be >= 0, got {name}={v}")
    backend = get_backend(device)
    return Tensor._make(backend.eye(n, m, as_dtype(dtype, "eye")), backend)


def _random(kind, shape, generator, dtype, device, requires_grad, *args) -> Tensor:
    if not isinstance(generator, Generator):
        raise TypeError(f"{kind}: pass an explicit generator, e.g. tb.{kind}(2, 3, generator=tb.Generator(0)); "
                        f"got {generator!r}")
    backend = get_backend(device)
    sample = {"randn": "normal", "rand": "uniform", "randint": "integers"}[kind]
    data = backend.random(generator, sample, shape, as_dtype(dtype, kind), *args)
    return Tensor._make(data, backend).requires_grad_(requires_grad)


def randn(*shape, generator: Generator | None = None, dtype=float32, device="cpu",
          requires_grad: bool = False) -> Tensor:
    """Standard normal samples from an explicit `Generator` (no hidden global seed)."""
    return _random("randn", _sizes(shape, "randn"), generator, dtype, device, requires_grad)


def rand(*shape, generator: Generator | None = None, dtype=float32, device="cpu",
         requires_grad: bool = False) -> Tensor:
    """Uniform samples in [0, 1) from an explicit `Generator`."""
    return _random("rand", _sizes(shape, "rand"), generator, dtype, device, requires_grad)


def randint(low: int, high: int, shape, *, generator: Generator | None = None, dtype=int64, device="cpu") -> Tensor:
    """Integers in [low, high) from an explicit `Generator`."""
    if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in (low, high)):
        raise TypeError(f"randint: low and high must be ints, got low={low!r}, high={high!r}")
    if low >= high:
        raise ValueError(f"randint: low must be < high (samples lie in [low, high)), got low={low}, high={high}")
    dtype = as_dtype(dtype, "randint")
    if not (scalar_fits(low, dtype) and scalar_fits(high - 1, dtype)):
        raise ValueError(f"randint: values in [{low}, {high}) do not fit {dtype}; expected a wider dtype")
    return _random("randint", _sizes((shape,), "randint"), generator, dtype, device, False, int(low), int(high))
