"""Optimizers: SGD (with momentum) and AdamW, gradient clipping by global norm, a warmup + cosine schedule.

Tensors stay immutable: a step computes each parameter's new value as a fresh tensor, under no_grad, and
gives the Parameter that tensor's array (`p.assign(new)`). No array is ever written in place; the
Parameter is a named slot the model reads, like a variable in a program. The state is kept the same way: the
momentum buffer, AdamW's m, v and step count are Tensors made once, at a parameter's first update, whose `.data`
each step rebinds, and the learning rate is a 0-d tensor too (`lr_tensor`, written by the `lr` setter). So every
value that changes from step to step is a tensor that lives across steps, and a step can be compiled (tb.jit).
The update rules are PyTorch's (torch.optim.SGD and AdamW, torch.nn.utils.clip_grad_norm_), written with Tensor
ops, so they run on every device ('cpu', 'cuda', 'meta', 'strict').
"""
from __future__ import annotations

import math
import numbers
from abc import ABC, abstractmethod

from .dtypes import float64
from .trace import no_grad
from .tensor import Tensor


def _number(owner: str, name: str, value, low: float = 0.0, high: float = math.inf, high_open: bool = False):
    """`value` if it is a real number in [low, high] (or [low, high)), else a ValueError/TypeError naming it."""
    span = f"in [{low}, {high})" if high_open else (f">= {low}" if high == math.inf else f"in [{low}, {high}]")
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"{owner}: {name} must be a number {span}, got {type(value).__name__} {value!r}")
    if math.isnan(value) or value < low or value > high or (high_open and value == high):
        raise ValueError(f"{owner}: {name} must be a number {span}, got {value!r}")
    return float(value)


def _parameters(owner: str, params) -> list[Tensor]:
    """The tensors to train, checked: a non-empty list of distinct leaf float tensors on one device."""
    if isinstance(params, Tensor) or not hasattr(params, "__iter__"):
        raise TypeError(f"{owner}: params must be an iterable of tensors, e.g. model.parameters(); "
                        f"got {type(params).__name__}")
    params = list(params)
    if not params:
        raise ValueError(f"{owner}: params is empty; pass the tensors to train, e.g. model.parameters()")
    for i, p in enumerate(params):
        if not isinstance(p, Tensor):
            raise TypeError(f"{owner}: params[{i}] is a {type(p).__name__}, not a Tensor or Parameter")
        if not p.is_leaf or p.dtype.kind != "f":
            raise TypeError(f"{owner}: params[{i}] ({p.dtype} {p.shape}) must be a floating-point leaf tensor "
                            "(a Parameter), not the result of an op")
        if p.backend is not params[0].backend:
            raise RuntimeError(f"{owner}: params are on different devices: params[0] on {params[0].device}, "
                               f"params[{i}] on {p.device}; move the model to one device with model.to(device)")
    if len({id(p) for p in params}) != len(params):
        raise ValueError(f"{owner}: a tensor appears more than once in params; each would be updated twice")
    return params


class Optimizer(ABC):
    """What SGD and AdamW share: the checked parameter list, `lr` (change it between steps to follow a
    schedule), per-parameter state created on a parameter's first update, step() and zero_grad()."""

    def __init__(self, params, lr: float):
        self.params = _parameters(type(self).__name__, params)
        self.lr_tensor = self.scalar(0.0)                # () float64: the update reads the lr from here
        self.lr = lr
        self.state = [{} for _ in self.params]          # state[i]: params[i]'s tensors (momentum, m, v, step)

    def scalar(self, value: float) -> Tensor:
        """A 0-d float64 tensor on the parameters' device: the learning rate, a step count."""
        return Tensor(float(value), dtype=float64, device=self.params[0].device)

    @property
    def lr(self) -> float:
        return self._lr

    @lr.setter
    def lr(self, value: float):
        self._lr = _number(type(self).__name__, "lr", value)
        self.lr_tensor.assign(self.scalar(self._lr))

    def step(self) -> None:
        """Replace each parameter that has a gradient by its updated value; parameters without one stay put.
        Every gradient is checked before any parameter changes, so a bad one leaves the model as it was."""
        grads = [None if p.grad is None else self._grad(p) for p in self.params]
        with no_grad():
            for p, g, state in zip(self.params, grads, self.state):
                if g is not None:
                    p.assign(self.update(p, g, state))

    def _grad(self, p: Tensor) -> Tensor:
        g = p.grad
        if g.shape != p.shape or g.dtype != p.dtype or g.backend is not p.backend:
            raise ValueError(f"{type(self).__name__}: a gradient is {g.dtype} {g.shape} on {g.device} but its "
                             f"parameter is {p.dtype} {p.shape} on {p.device}")
        return g.detach()

    @abstractmethod
    def update(self, p: Tensor, g: Tensor, state: dict) -> Tensor:
        """The parameter's new value from its gradient and its state: what SGD and AdamW each define."""

    def zero_grad(self) -> None:
        """Forget the gradients (set them to None), as PyTorch does by default."""
        for p in self.params:
            p.grad = None

    def state_bytes(self) -> int:
        """Bytes held by the optimizer's state tensors, shaped like their parameters (AdamW's 0-d step counts,
        8 bytes a parameter tensor, are left out, as accounting.training_memory leaves them out)."""
        return sum(t.nbytes for state in self.state for k, t in state.items() if k != "step")

    def snapshot(self) -> tuple:
        """The arrays a step replaces (the weights, the state), kept by reference: no array is ever written in
        place, so `restore(snapshot)` undoes the steps taken since, at no cost."""
        return [p.data for p in self.params], [{k: (t, t.data) for k, t in s.items()} for s in self.state]

    def restore(self, snapshot: tuple) -> None:
        """Put the weights and the state back as they were at `snapshot()`."""
        arrays, states = snapshot
        for p, array in zip(self.params, arrays):
            p.data = array
        for state, saved in zip(self.state, states):
            state.clear()
            for k, (t, array) in saved.items():
                t.data, state[k] = array, t


class SGD(Optimizer):
    """Stochastic gradient descent with momentum and L2 weight decay, as torch.optim.SGD (dampening 0)."""

    def __init__(self, params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
        super().__init__(params, lr)
        self.momentum = _number("SGD", "momentum", momentum, high=1.0, high_open=True)
        self.weight_decay = _number("SGD", "weight_decay", weight_decay)

    def update(self, p: Tensor, g: Tensor, state: dict) -> Tensor:
        """g += wd p;  buf = momentum buf + g (buf starts at 0, so buf = g on the first step);  p -= lr buf"""
        if self.weight_decay:
            g = g + self.weight_decay * p
        if self.momentum:
            buf = state.setdefault("momentum", p.zeros_like())
            g = buf.assign(self.momentum * buf + g)
        return p - self.lr_tensor.to(p.dtype) * g


class AdamW(Optimizer):
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019), as torch.optim.AdamW."""

    def __init__(self, params, lr: float, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01):
        super().__init__(params, lr)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError(f"AdamW: betas must be a pair (beta1, beta2), got {betas!r}")
        self.betas = tuple(_number("AdamW", f"betas[{i}]", b, high=1.0, high_open=True) for i, b in enumerate(betas))
        self.eps = _number("AdamW", "eps", eps)
        self.weight_decay = _number("AdamW", "weight_decay", weight_decay)

    def update(self, p: Tensor, g: Tensor, state: dict) -> Tensor:
        """p -= lr wd p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  p -= lr m^ / (sqrt(v^) + eps),
        with the bias corrections m^ = m / (1 - b1^t), v^ = v / (1 - b2^t) at step t = 1, 2, ...
        The scalars (t, lr, the corrections) are 0-d float64 tensors, cast to p's dtype where they meet it."""
        (b1, b2), lr = self.betas, self.lr_tensor
        if not state:                                    # the first update: moments start at zero
            state.update(step=self.scalar(0), m=p.zeros_like(), v=p.zeros_like())
        t = state["step"].assign(state["step"] + 1)    # () 1, 2, ...
        m = state["m"].assign(b1 * state["m"] + (1 - b1) * g)
        v = state["v"].assign(b2 * state["v"] + (1 - b2) * g * g)
        p = p * (1 - lr * self.weight_decay).to(p.dtype)
        step_size, root = lr / (1 - b1 ** t), (1 - b2 ** t).sqrt()     # (), (): b ** t is exp(t ln b)
        return p - step_size.to(p.dtype) * m / (v.sqrt() / root.to(p.dtype) + self.eps)


def clip_grad_norm(params, max_norm: float) -> Tensor:
    """Scale every gradient by min(1, max_norm / (norm + 1e-6)), where norm = sqrt(sum of all squared grads)
    over all the parameters together, as torch.nn.utils.clip_grad_norm_. Returns that norm (0-d, before
    clipping). The gradients are replaced by scaled copies; parameters without one are skipped."""
    params = _parameters("clip_grad_norm", params)
    max_norm = _number("clip_grad_norm", "max_norm", max_norm)
    with no_grad():
        grads = [p.grad.detach() for p in params if p.grad is not None]
        if not grads:
            return params[0].zeros_like().sum()
        squares = [(g * g).sum() for g in grads]
        for s in squares[1:]:
            squares[0]._operand(s, "clip_grad_norm")     # a clear error for grads of mixed dtypes
        norm = sum(squares[1:], squares[0]).sqrt()        # () the global L2 norm
        scale = (max_norm / (norm + 1e-6)).minimum(1.0)  # () 1 when the norm is within max_norm
        for p in params:
            if p.grad is not None:
                p.grad = p.grad.detach() * scale
    return norm


def warmup_cosine(step: int, lr_max: float, warmup: int, total: int, lr_min: float = 0.0) -> float:
    """The learning rate for step `step` (0, 1, ...): a linear warmup lr_max (step + 1) / warmup for
    step < warmup, then a half cosine from lr_max down to lr_min over the steps warmup .. total,
        lr_min + (lr_max - lr_min) (1 + cos(pi (step - warmup) / (total - warmup))) / 2,
    and lr_min from step `total` on."""
    for name, value in (("step", step), ("warmup", warmup), ("total", total)):
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 0:
            raise ValueError(f"warmup_cosine: {name} must be an int >= 0, got {value!r}")
    if total < warmup:
        raise ValueError(f"warmup_cosine: total={total} steps must be >= warmup={warmup} steps")
    lr_max = _number("warmup_cosine", "lr_max", lr_max)
    lr_min = _number("warmup_cosine", "lr_min", lr_min, high=lr_max)
    if step < warmup:
        return lr_max * (step + 1) / warmup
    if step >= total:
        return lr_min
    return lr_min + (lr_max - lr_min) * (1 + math.cos(math.pi * (step - warmup) / (total - warmup))) / 2


class WarmupCosine:
    """Drives `optimizer.lr` by warmup_cosine, used as PyTorch's schedulers are: it sets the lr of step 0 when
    made, and `.step()` after each optimizer.step() sets the next one."""

    def __init__(self, optimizer: Optimizer, lr_max: float, warmup: int, total: int, lr_min: float = 0.0):
        self.optimizer, self.args, self.t = optimizer, (lr_max, warmup, total, lr_min), 0
        optimizer.lr = warmup_cosine(0, *self.args)

    def step(self) -> float:
        """Advance one step; returns the learning rate now set."""
        self.t += 1
        self.optimizer.lr = warmup_cosine(self.t, *self.args)
        return self.optimizer.lr
