"""Module and Parameter: named, nested collections of trainable tensors, as in PyTorch."""
from __future__ import annotations

from ..dtypes import as_dtype, names_a_dtype

from ..generator import Generator
from ..device import get_backend
from ..trace import scope
from ..tensor import Tensor, randn


class Parameter(Tensor):
    """A leaf tensor a Module trains (requires_grad=True unless frozen)."""

    __slots__ = ()

    def __init__(self, t: Tensor, requires_grad: bool = True):
        self.data, self.backend, self.grad, self._ctx, self._requires_grad = t.data, t.backend, None, None, False
        self.requires_grad = requires_grad


def init_weight(shape: tuple, generator: Generator, dtype, device) -> Parameter:
    """N(0, 1/fan_in): keeps activations of order 1 through a linear map (fan_in = the last axis)."""
    if not isinstance(generator, Generator):
        raise TypeError("modules draw their initial weights from an explicit generator: pass "
                        f"generator=tb.Generator(0), got {generator!r}")
    return Parameter(randn(*shape, generator=generator, dtype=dtype, device=device) * (shape[-1] ** -0.5))


class Module:
    """Parameters and submodules are found by walking attributes in the order they were set; lists of
    modules are named by index (`layers.0.attn`)."""

    scope_name = ""  # set by the parent to the attribute name ('attn', 'layers.3'); roots name themselves

    def __setattr__(self, name, value):
        if isinstance(value, Module):
            value.scope_name = name
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, Module) for v in value):
            for i, v in enumerate(value):
                v.scope_name = f"{name}.{i}"
        object.__setattr__(self, name, value)

    def __call__(self, *args, **kwargs):
        with scope(self.scope_name or type(self).__name__.lower()):   # FLOPs and graphs know the module
            return self.forward(*args, **kwargs)

    def named_children(self):
        for name, value in vars(self).items():
            if isinstance(value, Module):
                yield name, value
            elif isinstance(value, (list, tuple)) and value and all(isinstance(v, Module) for v in value):
                yield from ((f"{name}.{i}", v) for i, v in enumerate(value))

    def named_parameters(self, prefix: str = ""):
        """(dotted name, Parameter) pairs: this module's own, then each submodule's."""
        for name, value in vars(self).items():
            if isinstance(value, Parameter):
                yield prefix + name, value
        for name, child in self.named_children():
            yield from child.named_parameters(f"{prefix}{name}.")

    def named_modules(self, prefix: str = ""):
        yield prefix.rstrip("."), self
        for name, child in self.named_children():
            yield from child.named_modules(f"{prefix}{name}.")

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def num_parameters(self) -> int:
        return sum(p.size for p in self.parameters())

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad = None

    def state_dict(self) -> dict[str, Tensor]:
        return {name: p.detach() for name, p in self.named_parameters()}

    def load_state_dict(self, state: dict) -> None:
        """Copy tensors into the parameters: the keys must match exactly, and each shape and dtype too."""
        own = dict(self.named_parameters())
        missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
        if missing or unexpected:
            raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
        for name, p in own.items():
            t = state[name]
            if not isinstance(t, Tensor):
                raise TypeError(f"load_state_dict: {name} must be a Tensor, got {type(t).__name__}")
            if t.shape != p.shape or t.dtype != p.dtype or t.device != p.device:
                raise ValueError(f"load_state_dict: {name} is {t.dtype} {t.shape} on {t.device}, but the parameter "
                                 f"is {p.dtype} {p.shape} on {p.device}")
        for name, p in own.items():
            p.data = state[name].data

    def to(self, target) -> Module:
        """Cast every parameter and floating-point buffer (such as RoPE tables) to a dtype (`tb.float16`), or
        move every parameter and buffer to a device ('cuda', 'cpu', ...), in place: Parameters stay the same
        objects, so references to them stay valid. Gradients are dropped."""
        is_dtype = not isinstance(target, str) or names_a_dtype(target)
        if is_dtype:
            target = as_dtype(target, "Module.to")
        else:
            get_backend(target)  # a clear error for an unknown device, a missing GPU or CuPy, before anything moves
        for _, module in self.named_modules():
            for name, value in vars(module).items():
                if not isinstance(value, Tensor) or (is_dtype and value.dtype.kind != "f"):
                    continue
                moved = value.detach().to(target)
                if isinstance(value, Parameter):
                    value.data, value.backend, value.grad = moved.data, moved.backend, None
                else:
                    setattr(module, name, moved)
        return self

    def freeze(self) -> Module:
        """Stop training every parameter of this module (requires_grad=False)."""
        for p in self.parameters():
            p.requires_grad = False
        return self
