"""Module and Parameter: named, nested collections of trainable tensors, as in PyTorch (`print(model)` shows the
tree with each module's parameter count; `train()` and `eval()` set a flag that nothing here reads today)."""
from __future__ import annotations

import numbers

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


def check_sizes(op: str, minimum: int = 1, **sizes) -> None:
    """Refuse, by name, a layer size that is not an int >= `minimum` (`Linear(0, 4)` would divide by zero in
    init_weight; a float or a bool is no size)."""
    for name, value in sizes.items():
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            raise TypeError(f"{op}: {name} must be an int >= {minimum}, got {value!r} ({type(value).__name__})")
        if value < minimum:
            raise ValueError(f"{op}: {name} must be an int >= {minimum}, got {name}={value}")


DEFAULT_SEED = 0   # the seed of a module made without a generator: Linear(3, 4), Embedding(10, 4), LM(cfg)


def default_generator(generator: Generator | None, op: str) -> Generator:
    """`generator`, or for None a fresh tb.Generator(DEFAULT_SEED): a module made without one draws the same weights
    every time (randomness stays explicit and reproducible; pass a generator of your own for other weights)."""
    if generator is None:
        return Generator(DEFAULT_SEED)
    if not isinstance(generator, Generator):
        raise TypeError(f"{op}: generator must be a tb.Generator (or None for tb.Generator({DEFAULT_SEED})), "
                        f"got {generator!r}")
    return generator


def init_weight(shape: tuple, generator: Generator, dtype, device) -> Parameter:
    """N(0, 1/fan_in): keeps activations of order 1 through a linear map (fan_in = the last axis)."""
    if not isinstance(generator, Generator):
        raise TypeError("modules draw their initial weights from an explicit generator: pass "
                        f"generator=tb.Generator(0), got {generator!r}")
    if not shape or min(shape) < 1:
        raise ValueError(f"init_weight: a weight's sizes must all be >= 1, got shape {tuple(shape)}")
    return Parameter(randn(*shape, generator=generator, dtype=dtype, device=device) * (shape[-1] ** -0.5))


class Module:
    """Parameters and submodules are found by walking attributes in the order they were set; a list or tuple of
    modules is named by index (`layers.0.attn`), a dict of modules by key (`experts.up.weight`: keys are
    strings without dots). A container mixing modules with other values is refused, so no module goes unseen.
    A module or a parameter held twice (under two names, or in two places) is one object: it is walked, counted,
    listed and trained once, under the first name found (PyTorch's rule)."""

    scope_name = ""  # set by the parent to the attribute name ('attn', 'layers.3'); roots name themselves
    training = True  # PyTorch's flag, set by train() and eval(): no module in this package reads it

    def __setattr__(self, name, value):
        if isinstance(value, Module) and not any(v is value for v in vars(self).values()):   # else: its first name
            value.scope_name = name
        for key, module in _submodules(name, value, check=True):
            module.scope_name = f"{name}.{key}"
        object.__setattr__(self, name, value)

    def __call__(self, *args, **kwargs):
        with scope(self.scope_name or type(self).__name__.lower()):   # FLOPs and graphs know the module
            return self.forward(*args, **kwargs)

    def named_children(self):
        for name, value in vars(self).items():
            if isinstance(value, Module):
                yield name, value
            yield from ((f"{name}.{key}", v) for key, v in _submodules(name, value))

    def named_parameters(self, prefix: str = ""):
        """(dotted name, Parameter) pairs: each module's own, this module's first, then each submodule's; a
        parameter held twice is listed once, under its first name."""
        seen = set()
        for path, module in self.named_modules(prefix):
            for name, value in vars(module).items():
                if isinstance(value, Parameter) and id(value) not in seen:
                    seen.add(id(value))
                    yield f"{path}.{name}" if path else name, value

    def named_modules(self, prefix: str = ""):
        """(dotted name, module) for this module and every submodule below it, each once, under its first name."""
        seen, stack = set(), [(prefix.rstrip("."), self)]
        while stack:
            path, module = stack.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            yield path, module
            children = [(f"{path}.{name}" if path else name, child) for name, child in module.named_children()]
            stack += reversed(children)                                 # the first child is walked first

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
            p.assign(state[name])

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

    def train(self, mode: bool = True) -> Module:
        """Set `training` on this module and every submodule, as PyTorch's habit asks before a training loop.
        Nothing in this package behaves differently between the two today (there is no dropout and no batch
        norm); the flag is there for a module of your own that reads `self.training`. Gradients are another
        matter: no_grad() switches them off."""
        if not isinstance(mode, bool):
            raise TypeError(f"train: mode is True (training) or False (evaluation), got {mode!r}")
        for _, module in self.named_modules():
            module.training = mode
        return self

    def eval(self) -> Module:
        """train(False): `training` is False on this module and every submodule (nothing here reads it today)."""
        return self.train(False)

    def __repr__(self) -> str:
        """The module tree, PyTorch's way, one line per module: its attribute name, its class, its own parameters'
        shapes (`frozen` where they do not train) and, in the last column, its number of parameters (frozen ones
        included; the first line holds the total, num_parameters()). A run of identical modules in a list (same
        classes, shapes and counts) is one entry: `(layers): 12 x Block(` followed by the first one's tree."""
        rows = _tree(self, "", "", {})
        width = max(len(text) for text, _ in rows)
        rows[0] = rows[0][0], f"{rows[0][1]} parameters"
        return "\n".join(f"{text:<{width}}  # {count}".rstrip(" #") for text, count in rows)


def _submodules(name: str, value, check: bool = False) -> list:
    """[(key, module)] of a list, tuple or dict of modules held under attribute `name` (index or dict key as key);
    [] for anything else. With `check`, a container that mixes modules with other values, or a dict of modules
    with a key that is not a string without dots, is a TypeError (it would leave modules unregistered, or names
    ambiguous)."""
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, (list, tuple)):
        items = list(enumerate(value))
    else:
        return []
    modules = [(k, v) for k, v in items if isinstance(v, Module)]
    if not check or not modules:
        return modules if len(modules) == len(items) else []
    if len(modules) != len(items):
        other = next(type(v).__name__ for _, v in items if not isinstance(v, Module))
        raise TypeError(f"Module: attribute {name!r} holds modules mixed with other values (a {other}); a "
                        f"{type(value).__name__} of modules must hold modules only, or they would go unregistered")
    bad = next((k for k, _ in modules if isinstance(value, dict) and (not isinstance(k, str) or "." in k or not k)),
               None)
    if bad is not None:
        raise TypeError(f"Module: attribute {name!r} is a dict of modules with key {bad!r}; its keys name the "
                        "modules (`name.key.weight`), so they must be non-empty strings without dots")
    return modules


def _tree(module: Module, path: str, pad: str, seen: dict) -> list[tuple[str, str]]:
    """Module.__repr__'s rows (text, count) for `module`, named `path` in the tree and indented by `pad`; `seen`
    maps every module shown so far to its path, so a module held twice is shown once."""
    seen[id(module)] = path
    own = [(name, f"{p.shape}" + ("" if p.requires_grad else " frozen"), p.size) for name, p in vars(module).items()
           if isinstance(p, Parameter)]
    count, kind = f"{module.num_parameters():,}", type(module).__name__
    children = [(name, f"{path}.{name}" if path else name, child) for name, child in module.named_children()]
    if not children:
        return [(f"{pad}{kind}({', '.join(f'{name} {shape}' for name, shape, _ in own)})", count)]
    rows = [(f"{pad}{kind}(", count)]
    rows += [(f"{pad}  ({name}): Parameter {shape}", f"{n:,}") for name, shape, n in own]
    for group in _runs(children, pad + "  ", seen):
        rows += group
    return rows + [(f"{pad})", "")]


def _runs(children: list, pad: str, seen: dict) -> list[list[tuple[str, str]]]:
    """The rows of each child (name, path, module), each group's first row labelled `(name): `; a run of identical
    modules in one list (`layers.0`, `layers.1`, ...) is one group, `(layers): 12 x Block(` (or `(layers.0-5): 6 x`
    when the run is only part of the list), followed by the first one's tree."""
    shown = []                                                  # [name, rows, how many in the run]
    for name, path, child in children:
        if id(child) in seen:
            shown.append([name, [(f"{pad}the module {seen[id(child)]}, again", "")], 1])
            continue
        rows = _tree(child, path, pad, seen)
        if shown and _same_list(shown[-1][0], name) and shown[-1][1] == rows:
            shown[-1][2] += 1
        else:
            shown.append([name, rows, 1])
    groups = []
    for name, rows, n in shown:
        label, (head, count) = f"({name}): ", rows[0]
        if n > 1:
            base, _, first = name.rpartition(".")
            whole = sum(_same_list(name, other) for other, _, _ in children) == n
            label = f"({base}): {n} x " if whole else f"({base}.{first}-{int(first) + n - 1}): {n} x "
            count = f"{n} x {count}"
        groups.append([(pad + label + head[len(pad):], count), *rows[1:]])
    return groups


def _same_list(name: str, other: str) -> bool:
    """Both names are items of one list: `layers.3` and `layers.4`."""
    base, _, index = name.rpartition(".")
    other_base, _, other_index = other.rpartition(".")
    return bool(base) and base == other_base and index.isdigit() and other_index.isdigit()
