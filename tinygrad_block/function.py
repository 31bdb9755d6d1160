"""The primitive ops. Each one is a short class: forward (on backend arrays), backward (on Tensors, in this
same vocabulary) and its FLOP rule, side by side. The set is closed but for one Function defined elsewhere, on
purpose: nn/tiled.py's TiledAttention, whose backward recomputes attention by tiles (its FLOPs are those of the
primitives it runs).

`Function.apply` is the one choke point every primitive call passes, forward and backward alike: it builds
the autograd graph and tells the active observers (FLOP counter, graph recorder) what ran.

FLOP rules, in one place: a matmul (M, K) @ (K, N) costs 2*M*N*K (PyTorch's FlopCounterMode convention).
Every elementwise op costs 1 per output element, whatever it computes (add, exp, sqrt, division, pow,
erf, comparison, select). A sum or max reducing n elements to one costs n - 1. A scatter-add costs one add
per source element. Movement ops (reshape, permute, expand, slice, pad, concat, gather, setrows, cast, transfer:
the subclasses of Movement) cost 0.
"""
from __future__ import annotations

import math

from .trace import STATE, emit


def is_tensor(value) -> bool:
    """A Tensor, known by its autograd slot: tensor.py builds on this module, so this module never imports it."""
    return hasattr(value, "_ctx")


class Function:
    """Base of the primitives. Subclasses define forward(*inputs, **params) -> array, backward(g) -> grads
    (one per input, None where not needed) and flops(out_shape, *in_shapes) -> int.

    Before forward runs, `self.needs_grad[i]` says whether input i will want a gradient, so forward saves
    only the tensors that those gradients use (as PyTorch does): `x * 2.0` keeps nothing of x alive."""

    name = "function"
    float_only = False  # True for ops defined on real numbers only (exp, log, division, ...)
    retained = None  # a weakref to the output, set by Tensor.retain_grad()
    saves_output = False  # True: backward reads the output, kept as `self.out` when a gradient is wanted

    def __init_subclass__(cls):
        cls.name = cls.__name__.lower()

    def flops(self, out_shape, *in_shapes) -> int:
        return 0

    @classmethod
    def apply(cls, *inputs, **params):
        """Run the primitive on Tensors: the choke point for autograd, FLOP counting and graph recording."""
        first = inputs[0]
        backend = first.backend
        for t in inputs[1:]:
            if t.backend is not backend:
                devices = ", ".join(f"{t.device} {t.shape}" for t in inputs)
                raise RuntimeError(f"{cls.name}: tensors are on different devices ({devices}); "
                                   "move them to one device with .to(device) first")
        if cls.float_only and first.data.dtype.kind != "f":
            raise TypeError(f"{cls.name}: needs a floating-point tensor, got {first.dtype} {first.shape}; "
                            "cast it first, e.g. .to(tb.float32)")
        fn, state = cls(), STATE.get()             # this thread's (task's) switches
        fn.backend, grad = backend, state.grad_enabled
        fn.needs_grad = needs = tuple([grad and t._requires_grad for t in inputs])
        if backend.active is None:
            data = fn.forward(*inputs, **params)
        else:
            with backend.active:  # the backend's GPU is current while it runs
                data = fn.forward(*inputs, **params)
        out = first._make(data, fn.backend)  # a plain Tensor; fn.backend: Transfer's forward switches the device
        if True in needs and data.dtype.kind == "f":
            out._requires_grad, out._ctx = True, fn
            fn.scope, fn.step = state.scope, state.step
            fn.edges = tuple([t._ctx or (t if t._requires_grad else None) for t in inputs])
            if fn.saves_output:
                fn.out = out._make(data, fn.backend)  # its own Tensor object: no cycle out -> fn -> out
        if state.observers:
            emit(fn, inputs, out, state, params)
        return out

    def saved(self):
        """The tensors this op keeps alive for its backward."""
        return [v for v in vars(self).values() if is_tensor(v)]

    def saved_activations(self):
        """The saved tensors that are activations: results of recorded ops, and this op's own output (`out`);
        not parameters, inputs or constants."""
        return [v for k, v in vars(self).items() if is_tensor(v) and (v._ctx is not None or k == "out")]

    def release(self):
        """Drop saved tensors and graph edges once backward has used them."""
        self.__dict__.clear()
        self.edges = None


def _size(shape) -> int:
    return math.prod(shape)


class Elementwise(Function):
    """Shared FLOP rule: one per output element."""

    def flops(self, out_shape, *in_shapes):
        return _size(out_shape)


class Movement(Function):
    """Shared by the ops that move, re-view or convert values and compute nothing: 0 FLOPs.
    `aliases`: the output is a view of the input's memory on every device, so no bytes move (permute, expand,
    slice). `may_alias`: it can be one, so the saved-bytes count follows it back to the buffer it came from
    (those three, and reshape: a view of a contiguous input, a copy of a transposed one)."""
    aliases = may_alias = False

    def flops(self, out_shape, *in_shapes):
        return 0


# ---------------------------------------------------------------- unary
class Neg(Elementwise):
    """out = -a;  da = -g  (not for bools: -True has no bool value, as in PyTorch)"""
    def forward(self, a):
        if a.dtype.kind == "b":
            raise TypeError("neg: negation, the `-` operator, on a bool tensor is not supported; use `mask == False`")
        return self.backend.neg(a.data)

    def backward(self, g):
        return (-g,)


class Exp(Elementwise):
    """out = e^a;  da = g * out"""
    float_only, saves_output = True, True

    def forward(self, a):
        return self.backend.exp(a.data)

    def backward(self, g):
        return (g * self.out,)


class Log(Elementwise):
    """out = ln a;  da = g / a"""
    float_only = True

    def forward(self, a):
        self.a = a
        return self.backend.log(a.data)

    def backward(self, g):
        return (g / self.a,)


class Sqrt(Elementwise):
    """out = sqrt(a);  da = g / (2 * out)"""
    float_only, saves_output = True, True

    def forward(self, a):
        return self.backend.sqrt(a.data)

    def backward(self, g):
        return (g / (self.out * 2.0),)


class Reciprocal(Elementwise):
    """out = 1 / a;  da = -g * out^2"""
    float_only, saves_output = True, True

    def forward(self, a):
        return self.backend.reciprocal(a.data)

    def backward(self, g):
        return (-(g * self.out * self.out),)


class Sin(Elementwise):
    """out = sin a;  da = g * cos a"""
    float_only = True

    def forward(self, a):
        self.a = a
        return self.backend.sin(a.data)

    def backward(self, g):
        return (g * self.a.cos(),)


class Cos(Elementwise):
    """out = cos a;  da = -g * sin a"""
    float_only = True

    def forward(self, a):
        self.a = a
        return self.backend.cos(a.data)

    def backward(self, g):
        return (-(g * self.a.sin()),)


class Erf(Elementwise):
    """out = erf a = 2/sqrt(pi) * integral_0^a e^(-t^2) dt;  da = g * 2/sqrt(pi) * e^(-a^2)"""
    float_only = True

    def forward(self, a):
        self.a = a
        return self.backend.erf(a.data)

    def backward(self, g):
        return (g * (-(self.a * self.a)).exp() * (2.0 / math.sqrt(math.pi)),)


class Pow(Elementwise):
    """out = a^p for a Python number p;  da = g * p * a^(p-1)"""
    float_only = True

    def forward(self, a, exponent: float):
        self.a, self.exponent = a, exponent
        return self.backend.pow(a.data, exponent)

    def backward(self, g):
        return (g * Pow.apply(self.a, exponent=self.exponent - 1.0) * self.exponent,)


class Cast(Movement):
    """out = a converted to `dtype`;  da = g converted back"""
    def forward(self, a, dtype):
        self.in_dtype = a.dtype
        return self.backend.cast(a.data, dtype)

    def backward(self, g):
        return (Cast.apply(g, dtype=self.in_dtype),)


class Transfer(Movement):
    """out = a copied to another device (backend);  da = g copied back"""
    def forward(self, a, backend):
        self.source, self.backend = a.backend, backend
        return backend.from_host(a.backend.to_numpy(a.data), a.dtype)

    def backward(self, g):
        return (Transfer.apply(g, backend=self.source),)


# ------------------------------------------------- binary (equal shapes, or a 0-d constant from a Python number)
class Add(Elementwise):
    """out = a + b"""
    def forward(self, a, b):
        return self.backend.add(a.data, b.data)

    def backward(self, g):
        return g, g


class Sub(Elementwise):
    """out = a - b;  da = g, db = -g"""
    def forward(self, a, b):
        return self.backend.sub(a.data, b.data)

    def backward(self, g):
        return g, (-g if self.needs_grad[1] else None)


class Mul(Elementwise):
    """out = a * b;  da = g * b, db = g * a"""
    def forward(self, a, b):
        da, db = self.needs_grad
        self.a, self.b = (a if db else None), (b if da else None)  # da needs b, db needs a
        return self.backend.mul(a.data, b.data)

    def backward(self, g):
        da, db = self.needs_grad
        return (g * self.b if da else None), (g * self.a if db else None)


class Div(Elementwise):
    """out = a / b;  da = g / b, db = -g * a / b^2"""
    float_only = True

    def forward(self, a, b):
        da, db = self.needs_grad
        self.a, self.b = (a if db else None), b
        return self.backend.div(a.data, b.data)

    def backward(self, g):
        da, db = self.needs_grad
        return (g / self.b if da else None), (-(g * self.a) / (self.b * self.b) if db else None)


class Maximum(Elementwise):
    """out = max(a, b);  the gradient goes to the larger input, split in half on ties (as PyTorch)"""
    def forward(self, a, b):
        self.a, self.b = a, b
        return self.backend.maximum(a.data, b.data)

    def backward(self, g):
        da, db = self.needs_grad
        ga = g * ((self.a > self.b).to(g.dtype) + (self.a == self.b).to(g.dtype) * 0.5)
        return (ga if da else None), (g - ga if db else None)


class Compare(Elementwise):
    """out = a <op> b as booleans; not differentiable (op: less, less_equal, equal, ...)"""
    def forward(self, a, b, op: str):
        self.op = op
        return self.backend.compare(a.data, b.data, op)


class Where(Elementwise):
    """out = cond ? a : b;  da = cond ? g : 0, db = cond ? 0 : g"""
    def forward(self, cond, a, b):
        self.cond = cond
        return self.backend.where(cond.data, a.data, b.data)

    def backward(self, g):
        _, da, db = self.needs_grad
        zero = g._make(self.backend.constant(0, g.dtype), self.backend)  # 0-d: the backend broadcasts it for free
        return None, (Where.apply(self.cond, g, zero) if da else None), \
            (Where.apply(self.cond, zero, g) if db else None)


# ---------------------------------------------------------------- reductions
class Reduce(Function):
    """Shared FLOP rule: reducing n elements into each output costs n - 1."""

    def flops(self, out_shape, in_shape):
        return _size(in_shape) - _size(out_shape)


class Sum(Reduce):
    """out = sum of a over `axes`;  da = g broadcast back over them. Bools and ints sum to int64 (backend.sum_dtype)"""
    def forward(self, a, axes: tuple, keepdims: bool):
        self.in_shape, self.axes, self.keepdims = a.shape, axes, keepdims
        return self.backend.sum(a.data, axes, keepdims)

    def backward(self, g):
        return (_unreduce(g, self.in_shape, self.axes, self.keepdims),)


class Max(Reduce):
    """out = max of a over `axes`;  da = g at the maxima, shared equally among ties (as PyTorch's amax)"""
    saves_output = True

    def forward(self, a, axes: tuple, keepdims: bool):
        self.a, self.axes, self.keepdims = a, axes, keepdims
        return self.backend.max(a.data, axes, keepdims)

    def backward(self, g):
        shape = self.a.shape
        hit = (self.a == _unreduce(self.out, shape, self.axes, self.keepdims)).to(g.dtype)
        count = Sum.apply(hit, axes=self.axes, keepdims=True)
        return (hit * _unreduce(g, shape, self.axes, self.keepdims) / count.expand(shape),)


class KthLargest(Reduce):
    """out = the k-th largest of a along its last axis, kept as an axis of 1 (k = 1: the max), found in one
    selection pass (a partition, not a sort: time and memory do not grow with k);  da as Max's: g at the elements
    equal to it, shared among ties"""
    saves_output = True

    def forward(self, a, k: int):
        n = a.shape[-1] if a.ndim else 0
        if not (isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= n):
            raise ValueError(f"kthlargest: k must be an int in 1..{n} (the length of the last axis of {a.dtype} "
                             f"{a.shape}), got {k!r}")
        self.a, self.axes, self.keepdims = a, (a.ndim - 1,), True
        return self.backend.kth_largest(a.data, k)

    backward = Max.backward


def _unreduce(g, in_shape, axes, keepdims):
    """Broadcast a reduced tensor back to the input shape it was reduced from."""
    if not keepdims:
        g = Reshape.apply(g, shape=tuple(1 if i in axes else s for i, s in enumerate(in_shape)))
    return Expand.apply(g, shape=in_shape)


# ---------------------------------------------------------------- movement (0 FLOPs)
class Reshape(Movement):
    """out = a with a new shape (same elements, row-major order)"""
    may_alias = True  # a view of a contiguous input; a copy of a transposed one

    def forward(self, a, shape: tuple):
        self.in_shape = a.shape
        return self.backend.reshape(a.data, shape)

    def backward(self, g):
        return (Reshape.apply(g, shape=self.in_shape),)


class Permute(Movement):
    """out = a with its axes reordered: out.shape[i] = a.shape[order[i]]"""
    aliases = may_alias = True

    def forward(self, a, order: tuple):
        self.order = order
        return self.backend.permute(a.data, order)

    def backward(self, g):
        inverse = tuple(sorted(range(len(self.order)), key=self.order.__getitem__))
        return (Permute.apply(g, order=inverse),)


class Expand(Movement):
    """out = a broadcast to `shape` (new leading axes, size-1 axes stretched);  da = g summed back"""
    aliases = may_alias = True

    def forward(self, a, shape: tuple):
        self.in_shape = a.shape
        return self.backend.expand(a.data, shape)

    def backward(self, g):
        lead = g.ndim - len(self.in_shape)
        axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(self.in_shape)
                                          if s == 1 and g.shape[lead + i] != 1)
        out = Sum.apply(g, axes=axes, keepdims=True) if axes else g
        return (Reshape.apply(out, shape=self.in_shape) if lead else out,)


class Slice(Movement):
    """out = a[lo0:hi0, lo1:hi1, ...] with `bounds` = ((lo0, hi0), ...);  da = g padded with zeros"""
    aliases = may_alias = True

    def forward(self, a, bounds: tuple):
        self.widths = tuple((lo, s - hi) for (lo, hi), s in zip(bounds, a.shape))
        return self.backend.slice(a.data, bounds)

    def backward(self, g):
        return (Pad.apply(g, widths=self.widths),)


class Pad(Movement):
    """out = a with zeros added: `widths` = ((before0, after0), ...);  da = g sliced back"""
    def forward(self, a, widths: tuple):
        self.bounds = tuple((lo, lo + s) for (lo, _), s in zip(widths, a.shape))
        return self.backend.pad(a.data, widths)

    def backward(self, g):
        return (Slice.apply(g, bounds=self.bounds),)


class Concat(Movement):
    """out = the inputs joined along `axis`;  each input's gradient is its slice of g"""
    def forward(self, *inputs, axis: int):
        self.axis, self.sizes = axis, [t.shape[axis] for t in inputs]
        return self.backend.concat([t.data for t in inputs], axis)

    def backward(self, g):
        grads, start = [], 0
        for size, needed in zip(self.sizes, self.needs_grad):
            bounds = tuple((start, start + size) if i == self.axis else (0, s) for i, s in enumerate(g.shape))
            grads.append(Slice.apply(g, bounds=bounds) if needed else None)
            start += size
        return tuple(grads)


class Gather(Movement):
    """out = a.take(idx, axis): out.shape = a.shape[:axis] + idx.shape + a.shape[axis+1:];
    da = g scatter-added back (repeated indices accumulate)"""
    def forward(self, a, idx, axis: int):
        self.idx, self.axis, self.size = idx, axis, a.shape[axis]
        return self.backend.gather(a.data, idx, axis)

    def backward(self, g):
        return (ScatterAdd.apply(g, idx=self.idx, axis=self.axis, size=self.size),)


class SetRows(Movement):
    """out = buf with buf[..., idx[j], ...] = rows[..., j, ...] along `axis`, written into buf's own array: the one
    primitive that writes into an input (a static KV cache's new positions, so no copy of the cache per token);
    idx: int64 (L,), in bounds (the caller checks it). The buffer never needs a gradient: none is defined"""
    def forward(self, buf, rows, idx, axis: int):
        want = buf.shape[:axis] + idx.shape + buf.shape[axis + 1:]
        if rows.shape != want or rows.dtype != buf.dtype:
            raise ValueError(f"setrows: rows {rows.dtype} {rows.shape} do not fit {idx.shape[0]} slots along axis "
                             f"{axis} of {buf.dtype} {buf.shape}: expected {buf.dtype} {want}")
        return self.backend.set_rows(buf.data, idx.data, rows.data, axis)

    def backward(self, g):
        raise RuntimeError("setrows: an in-place write has no gradient (the values it overwrote are gone); a static "
                           "KV cache is for inference: run it under tb.no_grad(), or differentiate without a cache")


class ScatterAdd(Function):
    """out = zeros with out[..., idx[j], ...] += g[..., j, ...] along `axis` (the transpose of Gather)"""
    def forward(self, g, idx, axis: int, size: int):
        self.idx, self.axis = idx, axis
        return self.backend.scatter_add(g.data, idx, axis, size)

    def backward(self, g):
        return (Gather.apply(g, idx=self.idx, axis=self.axis),)

    def flops(self, out_shape, in_shape):
        return _size(in_shape)


# ---------------------------------------------------------------- matmul
class Matmul(Function):
    """out = a @ b for (..., M, K) @ (..., K, N) with equal batch dims;  da = g @ b^T, db = a^T @ g"""
    def forward(self, a, b):
        da, db = self.needs_grad
        self.a, self.b = (a if db else None), (b if da else None)  # da needs b, db needs a
        return self.backend.matmul(a.data, b.data)

    def backward(self, g):
        da, db = self.needs_grad
        return (Matmul.apply(g, self.b.mT) if da else None), (Matmul.apply(self.a.mT, g) if db else None)

    def flops(self, out_shape, a_shape, b_shape):
        return 2 * _size(out_shape) * a_shape[-1]


# ---------------------------------------------------------------- looking a primitive up by its name
PRIMITIVES = {c.name: c for c in globals().values()
              if isinstance(c, type) and issubclass(c, Function) and "forward" in vars(c)}


def primitive(name: str) -> type[Function] | None:
    """The primitive called `name` ('reshape' -> Reshape), as a graph node's label or an event's op.name gives
    it; None for any other name (a module, a tensor, an op defined outside this file)."""
    return PRIMITIVES.get(name)
