"""tinygrad_block: learn how a transformer block computes by running it, one primitive op at a time."""
from .dtypes import bool_, float16, float32, float64, int32, int64
from .generator import Generator
from .device import BACKENDS, get_backend
from .function import Function
from .trace import Event, enable_grad, no_grad, observe, step
from .gradcheck import GradcheckError, gradcheck
from .tensor import (Tensor, arange, cat, concat, eye, full, maximum, minimum, ones, ones_like, rand, randint,
                     randn, stack, tensor, where, zeros, zeros_like)

from . import nn, optim          # tb.nn.LM, tb.optim.AdamW: reachable from `import tinygrad_block as tb`

__version__ = "0.1.0"


def __getattr__(name: str):
    """tb.explore, tb.jit and tb.JitError load their rooms (the explorer page, the compiler) when first used, so
    that `import tinygrad_block` loads the engine and nn alone."""
    if name == "explore":
        from .explorer_page import explore
        return explore
    if name in ("jit", "JitError"):
        from . import compiled
        return getattr(compiled, name)
    raise AttributeError(f"module 'tinygrad_block' has no attribute {name!r}")

__all__ = [
    "BACKENDS", "Event", "Function", "Generator", "GradcheckError", "JitError", "Tensor", "arange", "bool_",
    "cat", "concat", "enable_grad", "explore", "eye", "float16", "float32", "float64", "full", "get_backend",
    "gradcheck", "int32", "int64", "jit", "maximum", "minimum", "nn", "no_grad", "observe", "optim", "ones",
    "ones_like", "rand", "randint", "randn", "stack", "step", "tensor", "where", "zeros", "zeros_like",
]
