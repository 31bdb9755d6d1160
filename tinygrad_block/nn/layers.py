"""The small layers: Linear (with optional bias and LoRA), Embedding, RMSNorm, LayerNorm."""
from __future__ import annotations

from ..dtypes import float32, int64
from ..function import Gather
from ..generator import Generator
from ..tensor import Tensor, ones, zeros
from ..trace import derive
from .module import Module, Parameter, check_sizes, default_generator, init_weight


class Linear(Module):
    """y = x W^T + b, W stored (out, in) as in PyTorch and Hugging Face checkpoints.

    W starts as N(0, 1/d_in) draws from `generator` (None: a fresh tb.Generator(0), so Linear(3, 4) is the same
    every time) and b as zeros. PyTorch draws both from U(-1/sqrt(d_in), 1/sqrt(d_in)), a third of this variance;
    the lessons' numbers rest on this init, so it stays. With LoRA (rank r > 0): y = x W^T + b + (alpha / r)
    (x A^T) B^T, A (r, in) random, B (out, r) zero, so the adapter starts as the identity change; train A and B
    with W frozen."""

    def __init__(self, d_in: int, d_out: int, bias: bool = False, *, generator: Generator | None = None,
                 dtype=float32, device="cpu", lora_rank: int = 0, lora_alpha: float = 16.0):
        check_sizes("Linear", d_in=d_in, d_out=d_out)
        check_sizes("Linear", minimum=0, lora_rank=lora_rank)           # 0: no adapter
        generator = default_generator(generator, "Linear")
        self.d_in, self.d_out = d_in, d_out
        self.weight = init_weight((d_out, d_in), generator, dtype, device)
        self.bias = Parameter(zeros(d_out, dtype=dtype, device=device)) if bias else None
        if lora_rank:
            self.lora_A = init_weight((lora_rank, d_in), generator, dtype, device)
            self.lora_B = Parameter(zeros(d_out, lora_rank, dtype=dtype, device=device))
            self.lora_scale = lora_alpha / lora_rank

    def forward(self, x: Tensor) -> Tensor:                          # x: (..., d_in)
        if x.ndim < 1 or x.shape[-1] != self.d_in:
            raise ValueError(f"Linear: expected input (..., {self.d_in}), got shape {x.shape}")
        y = x @ self.weight.T                                        # (..., d_out)
        if self.bias is not None:
            y = y + self.bias
        if hasattr(self, "lora_A"):
            y = y + (x @ self.lora_A.T) @ self.lora_B.T * self.lora_scale
        return y


def projection(cfg, name: str, d_in: int, d_out: int, *, generator, dtype, device) -> Linear:
    """A block's Linear `name` (q_proj, ..., down_proj): biases (all, or q/k/v only) and LoRA as the config says.
    Its weights come from the block's one generator, which must be given: a default for each projection would give
    them all the same draws."""
    if not isinstance(generator, Generator):
        raise TypeError(f"{name}: a block's projections draw their weights one after another from one explicit "
                        f"generator: pass generator=tb.Generator(seed) to the block, got {generator!r}")
    rank = cfg.lora_rank if name in cfg.lora_targets else 0
    bias = cfg.bias or (cfg.qkv_bias and name in ("q_proj", "k_proj", "v_proj"))
    return Linear(d_in, d_out, bias, generator=generator, dtype=dtype, device=device, lora_rank=rank,
                  lora_alpha=cfg.lora_alpha)


class Embedding(Module):
    """Row lookup: token ids (...) -> vectors (..., d); its backward scatter-adds into the used rows.

    Every id must lie in 0..vocab_size - 1: -1 is not the last row here (as in PyTorch), and a bad id is an
    IndexError naming it. The ids are data, so the check is a `derive`d step that a tb.jit replay runs again.
    The table starts as N(0, 1/d) draws from `generator` (None: a fresh tb.Generator(0)); PyTorch's as N(0, 1)."""

    def __init__(self, vocab_size: int, d: int, *, generator: Generator | None = None, dtype=float32, device="cpu"):
        check_sizes("Embedding", vocab_size=vocab_size, d=d)
        self.vocab_size, self.d = vocab_size, d
        self.weight = init_weight((vocab_size, d), default_generator(generator, "Embedding"), dtype, device)

    def forward(self, ids) -> Tensor:                                   # ids: (...) integers
        if not isinstance(ids, Tensor):
            ids = Tensor(ids, device=self.weight.backend)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"Embedding: token ids must be integers, got {ids.dtype} {ids.shape}")
        if ids.backend is not self.weight.backend:
            raise RuntimeError(f"Embedding: ids are on {ids.device} but the table is on {self.weight.device}; "
                               "move them with .to(device)")
        rows = derive(_checked_ids, ids, backend=ids.backend, vocab_size=self.vocab_size)
        return Gather.apply(self.weight, idx=rows, axis=0)             # (..., d)


def _checked_ids(ids, backend, vocab_size: int):
    """Token ids checked to lie in 0..vocab_size - 1, as int64 (one read of their min and max)."""
    bounds = backend.index_range(ids)
    if bounds is not None and (bounds[0] < 0 or bounds[1] >= vocab_size):
        bad = bounds[0] if bounds[0] < 0 else bounds[1]
        raise IndexError(f"Embedding: token id {bad} is outside the vocabulary of {vocab_size} "
                         f"(ids 0..{vocab_size - 1})")
    return backend.cast(ids, int64)


class RMSNorm(Module):
    """y = x / sqrt(mean(x^2) + eps) * g over the last axis (Zhang & Sennrich 2019). unit_offset (Gemma): the gain
    is 1 + w, w stored starting at zero, so a checkpoint's w is read as it is stored."""

    def __init__(self, d: int, eps: float = 1e-5, *, unit_offset: bool = False, dtype=float32, device="cpu"):
        check_sizes("RMSNorm", d=d)
        self.d, self.eps, self.unit_offset = d, eps, unit_offset
        self.weight = Parameter((zeros if unit_offset else ones)(d, dtype=dtype, device=device))

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 1 or x.shape[-1] != self.d:
            raise ValueError(f"RMSNorm: expected input (..., {self.d}), got shape {x.shape}")
        xw = x.wide()                                                      # float16's statistics in float32
        rstd = ((xw * xw).mean(axis=-1, keepdims=True) + self.eps).rsqrt()  # (..., 1)
        return x * rstd.to(x.dtype) * (self.weight + 1.0 if self.unit_offset else self.weight)


class LayerNorm(Module):
    """y = (x - mean) / sqrt(var + eps) * g + b over the last axis (Ba et al. 2016); b is optional."""

    def __init__(self, d: int, eps: float = 1e-5, bias: bool = True, *, dtype=float32, device="cpu"):
        check_sizes("LayerNorm", d=d)
        self.d, self.eps = d, eps
        self.weight = Parameter(ones(d, dtype=dtype, device=device))
        self.bias = Parameter(zeros(d, dtype=dtype, device=device)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 1 or x.shape[-1] != self.d:
            raise ValueError(f"LayerNorm: expected input (..., {self.d}), got shape {x.shape}")
        xw = x.wide()                                                      # float16's statistics in float32
        centered = xw - xw.mean(axis=-1, keepdims=True)
        rstd = ((centered * centered).mean(axis=-1, keepdims=True) + self.eps).rsqrt()   # (..., 1)
        y = (centered * rstd).to(x.dtype) * self.weight
        return y + self.bias if self.bias is not None else y


NORMS = {  # cfg.norm -> the module (config.NORMS says what each computes)
    "rms": lambda cfg, **make: RMSNorm(cfg.d_model, cfg.norm_eps, **make),
    "rms1p": lambda cfg, **make: RMSNorm(cfg.d_model, cfg.norm_eps, unit_offset=True, **make),
    "layer": lambda cfg, **make: LayerNorm(cfg.d_model, cfg.norm_eps, bias=cfg.bias, **make)}


def norm(cfg, *, dtype=float32, device="cpu") -> RMSNorm | LayerNorm:
    """The norm a config asks for (NORMS): RMSNorm, RMSNorm by 1 + w, or LayerNorm (with a shift when the config
    has biases)."""
    return NORMS[cfg.norm](cfg, dtype=dtype, device=device)
