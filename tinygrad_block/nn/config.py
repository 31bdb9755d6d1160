"""BlockConfig: every number that defines a transformer block (and the model around it), and named presets
of published architectures."""
from __future__ import annotations

import difflib
import math
import numbers
from dataclasses import dataclass, field, replace

NORMS = {"rms": "RMSNorm  x / rms(x) * w",                        # the norms a config can name, what each is
         "layer": "LayerNorm  (x - mean(x)) / std(x) * w (+ b)",
         "rms1p": "RMSNorm  x / rms(x) * (1 + w), w starting at 0 (Gemma)"}
FFNS = {"swiglu": ("silu", True), "geglu_tanh": ("gelu_tanh", True),   # ffn -> (activation, gated): gated is
        "gelu": ("gelu", False), "gelu_tanh": ("gelu_tanh", False),      # down(act(gate(x)) * up(x)), else
        "relu": ("relu", False)}                                         # down(act(up(x)))
LAYOUTS = ("pre", "post", "parallel", "deep")
CHOICES = {"norm": tuple(NORMS), "layout": LAYOUTS, "ffn": tuple(FFNS)}
NUMBERS = {"norm_eps": ("a finite number >= 0", lambda v: v >= 0),      # what each float field must be
           "rope_theta": ("a finite number > 0", lambda v: v > 0),
           "lora_alpha": ("a finite number", lambda v: True)}


@dataclass(frozen=True)
class BlockConfig:
    """A block: d_model wide, n_heads query heads sharing n_kv_heads key/value heads (GQA), an FFN of width
    d_ff; plus what a whole model needs (vocab_size, n_layers, tied embeddings, context length)."""

    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    head_dim: int | None = None       # each head's width d_head; None: d_model / n_heads (Qwen3, Gemma: wider)
    norm: str = "rms"                 # 'rms' (RMSNorm), 'layer' (LayerNorm), 'rms1p' (RMSNorm by 1 + w): NORMS
    layout: str = "pre"               # 'pre': x + f(norm(x)); 'post': norm(x + f(x)); 'deep': norm(alpha x + f(x));
                                      # 'parallel': x + attn(norm1(x)) + ffn(norm2(x))
    ffn: str = "swiglu"               # 'swiglu', 'geglu_tanh' (gated), 'gelu' (erf form), 'gelu_tanh', 'relu': FFNS
    bias: bool = False                # biases on every projection (and LayerNorm shifts)
    qkv_bias: bool = False            # biases on q_proj, k_proj and v_proj only (Qwen2)
    qk_norm: bool = False             # RMSNorm of each head's q and k (a d_head gain each) before RoPE (Qwen3)
    norm_eps: float = 1e-5
    rope: bool = True                 # rotary embeddings on q and k; False: positions are added outside
    rope_theta: float = 10000.0
    rope_scaling: tuple = ()          # (): none; ('linear', factor); ('llama3', factor, low_freq_factor,
                                      # high_freq_factor, original_max_position_embeddings) (Llama 3.1, 3.2)
    causal: bool = True               # False for encoders (BERT)
    max_seq_len: int = 4096           # context length, and the length of the RoPE table
    vocab_size: int = 32000
    n_layers: int = 1
    tie_embeddings: bool = False
    scale_embeddings: bool = False    # the embeddings times sqrt(d_model) before the first block (Gemma)
    lora_rank: int = 0                # 0: no LoRA
    lora_alpha: float = 16.0
    lora_targets: tuple = ("q_proj", "v_proj")
    n_experts: int = 1                # > 1: a mixture of n_experts SwiGLU experts (nn.MoE); 1: the dense FFN
    experts_top_k: int = 1            # experts each token is routed to (Mixtral: 2 of 8)
    name: str = field(default="custom", compare=False)

    @property
    def d_head(self) -> int:
        """Each head's width: head_dim, or d_model / n_heads when the config leaves it out."""
        return self.d_model // self.n_heads if self.head_dim is None else self.head_dim

    @property
    def gated(self) -> bool:
        """Whether the FFN is gated, down(act(gate(x)) * up(x)) with three matrices (SwiGLU, GeGLU): FFNS."""
        return FFNS[self.ffn][1]

    @property
    def activation(self) -> str:
        """The FFN's activation: 'silu', 'gelu', 'gelu_tanh' or 'relu' (FFNS)."""
        return FFNS[self.ffn][0]

    def __post_init__(self):
        """Every field checked, and named in the error, before any array is sized by it."""
        self._check_fields()
        self._check_heads()
        self._check_lora()
        self._check_experts()
        self._check_rope_scaling()

    def _check_fields(self) -> None:
        """Each field of its own: sizes positive ints, numbers finite and in range, switches bools, choices known."""
        for key in ("d_model", "n_heads", "n_kv_heads", "d_ff", "max_seq_len", "vocab_size", "n_layers"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"BlockConfig: {key} must be a positive int, got {value!r}")
        for key, (expected, ok) in NUMBERS.items():
            value = getattr(self, key)
            real = isinstance(value, numbers.Real) and not isinstance(value, bool)
            if not (real and math.isfinite(value) and ok(value)):
                raise ValueError(f"BlockConfig: {key} must be {expected}, got {value!r}")
        for key in ("bias", "qkv_bias", "qk_norm", "scale_embeddings"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"BlockConfig: {key} must be True or False, got {getattr(self, key)!r}")
        for key, allowed in CHOICES.items():
            if getattr(self, key) not in allowed:
                raise ValueError(f"BlockConfig: {key} must be one of {allowed}, got {getattr(self, key)!r}")

    def _check_heads(self) -> None:
        """The heads fit d_model (check_heads); qk_norm needs RMSNorm."""
        try:
            check_heads(self.d_model, self.n_heads, self.n_kv_heads, self.head_dim, self.rope)
        except ValueError as e:
            raise ValueError(f"BlockConfig: {e}") from None
        if self.head_dim == self.d_model / self.n_heads:     # the default spelt out: kept as None, so equal models
            object.__setattr__(self, "head_dim", None)        # have equal configs, and with_(d_model=...) rescales
        if self.qk_norm and self.norm != "rms":
            raise ValueError(f"BlockConfig: qk_norm=True normalises q and k with RMSNorm (Qwen3), so it needs "
                             f"norm='rms'; got norm={self.norm!r}")

    def _check_lora(self) -> None:
        """lora_rank an int >= 0; with adapters, targets among the projections."""
        if not isinstance(self.lora_rank, int) or isinstance(self.lora_rank, bool) or self.lora_rank < 0:
            raise ValueError(f"BlockConfig: lora_rank must be an int >= 0 (0: no LoRA), got {self.lora_rank!r}")
        if self.lora_rank and not set(self.lora_targets) <= set(PROJECTIONS):
            raise ValueError(f"BlockConfig: lora_targets must be among {PROJECTIONS}, got {self.lora_targets!r}")

    def _check_experts(self) -> None:
        """n_experts >= 1, 1 <= experts_top_k <= n_experts; a mixture (n_experts > 1) is of bias-free SwiGLU
        experts without LoRA adapters."""
        for key in ("n_experts", "experts_top_k"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"BlockConfig: {key} must be a positive int, got {value!r}")
        if self.experts_top_k > self.n_experts:
            raise ValueError(f"BlockConfig: experts_top_k={self.experts_top_k} exceeds n_experts={self.n_experts}: "
                             "a token cannot be routed to more experts than there are")
        if self.n_experts > 1 and (self.ffn != "swiglu" or self.bias):
            raise ValueError(f"BlockConfig: a mixture of experts (n_experts={self.n_experts}) is built of bias-free "
                             f"SwiGLU experts; got ffn={self.ffn!r}, bias={self.bias}")
        if self.n_experts > 1 and self.lora_rank and set(self.lora_targets) & {"gate_proj", "up_proj", "down_proj"}:
            raise ValueError(f"BlockConfig: LoRA adapters on the experts are not supported (n_experts="
                             f"{self.n_experts}, lora_targets={self.lora_targets!r}); target attention only")

    def _check_rope_scaling(self) -> None:
        """() or ('linear', factor) or ('llama3', factor, low_freq_factor, high_freq_factor,
        original_max_position_embeddings): factors finite and > 0, low < high, the original context a positive int."""
        scaling = self.rope_scaling
        if scaling == ():
            return
        if not isinstance(scaling, tuple) or not scaling or scaling[0] not in tuple(ROPE_SCALING):
            raise ValueError(f"BlockConfig: rope_scaling must be () (none), ('linear', factor) or ('llama3', "
                             f"{', '.join(ROPE_SCALING['llama3'])}); got {scaling!r}")
        if not self.rope:
            raise ValueError(f"BlockConfig: rope_scaling={scaling!r} scales RoPE's frequencies, but rope=False")
        kind, names = scaling[0], ROPE_SCALING[scaling[0]]
        if len(scaling) != 1 + len(names):
            raise ValueError(f"BlockConfig: rope_scaling {kind!r} takes ({kind!r}, {', '.join(names)}); "
                             f"got {scaling!r}")
        factors = scaling[1:4]                                   # the context length, llama3's last, is an int
        for name, value in zip(names, factors):
            real = isinstance(value, numbers.Real) and not isinstance(value, bool)
            if not (real and math.isfinite(value) and value > 0):
                raise ValueError(f"BlockConfig: rope_scaling's {name} must be a finite number > 0, got {value!r}")
        if kind == "llama3":
            _, _, low, high, context = scaling
            if high <= low:
                raise ValueError(f"BlockConfig: rope_scaling's high_freq_factor must exceed its low_freq_factor "
                                 f"(the interpolated band lies between them); got low {low!r}, high {high!r}")
            if not isinstance(context, int) or isinstance(context, bool) or context < 1:
                raise ValueError(f"BlockConfig: rope_scaling's original_max_position_embeddings must be a positive "
                                 f"int, got {context!r}")

    def with_(self, **changes) -> BlockConfig:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)


HEAD_NAMES = {key: key for key in ("d_model", "n_heads", "n_kv_heads", "head_dim")}   # how check_heads names them


def check_heads(d_model: int, n_heads: int, n_kv_heads: int, head_dim: int | None = None, rope: bool = True,
                names: dict = HEAD_NAMES, sep: str = "=") -> int:
    """d_head of a config's heads: head_dim when given (a positive int), else d_model / n_heads, which must then
    divide evenly; n_heads a multiple of n_kv_heads (each key/value head serves an equal group of query heads);
    d_head even with RoPE (it rotates pairs). The one check of the heads: BlockConfig, config.json's reader and the
    command line call it, each with `names` for the fields as its user writes them (and `sep` between a name and
    its value); a ValueError otherwise, without a prefix (the caller adds its own)."""
    def shown(key: str, value) -> str:
        return f"{names[key]}{sep}{value}"

    if head_dim is not None and (not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim < 1):
        raise ValueError(f"{shown('head_dim', repr(head_dim))}: expected a positive int (None: d_model / n_heads)")
    if head_dim is None and d_model % n_heads:
        raise ValueError(f"{shown('d_model', d_model)} is not divisible by {shown('n_heads', n_heads)}: each head "
                         "takes d_model / n_heads dimensions unless head_dim gives its width")
    if n_heads % n_kv_heads:
        raise ValueError(f"{shown('n_heads', n_heads)} is not divisible by {shown('n_kv_heads', n_kv_heads)}: each "
                         "key/value head serves an equal group of query heads")
    d_head = d_model // n_heads if head_dim is None else head_dim
    if rope and d_head % 2:
        why = shown("head_dim", head_dim) if head_dim is not None else \
            f"d_head = {d_model} / {n_heads} = {d_head} ({names['d_model']} / {names['n_heads']})"
        raise ValueError(f"{why} is odd, but RoPE rotates pairs of dimensions")
    return d_head


ROPE_SCALING = {"linear": ("factor",),          # the numbers after the kind in BlockConfig.rope_scaling
                "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _llama(name, d_model, n_layers, n_heads, n_kv_heads, d_ff, vocab_size, max_seq_len, rope_theta=10000.0,
           tie_embeddings=False):
    return BlockConfig(d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads, d_ff=d_ff, n_layers=n_layers,
                       vocab_size=vocab_size, max_seq_len=max_seq_len, rope_theta=rope_theta,
                       tie_embeddings=tie_embeddings, name=name)


PRESETS = {
    "llama2-7b": _llama("llama2-7b", 4096, 32, 32, 32, 11008, 32000, 4096),
    "llama2-13b": _llama("llama2-13b", 5120, 40, 40, 40, 13824, 32000, 4096),
    "llama2-70b": _llama("llama2-70b", 8192, 80, 64, 8, 28672, 32000, 4096),
    "llama3-8b": _llama("llama3-8b", 4096, 32, 32, 8, 14336, 128256, 8192, rope_theta=500000.0),
    "llama3-70b": _llama("llama3-70b", 8192, 80, 64, 8, 28672, 128256, 8192, rope_theta=500000.0),
    "mistral-7b": _llama("mistral-7b", 4096, 32, 32, 8, 14336, 32000, 32768),
    "tinyllama-1.1b": _llama("tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000, 2048),
    "smollm-135m": _llama("smollm-135m", 576, 30, 9, 3, 1536, 49152, 2048, tie_embeddings=True),
    "gpt2-small": BlockConfig(d_model=768, n_heads=12, n_kv_heads=12, d_ff=3072, norm="layer", ffn="gelu_tanh",
                              bias=True, rope=False, max_seq_len=1024, vocab_size=50257, n_layers=12,
                              tie_embeddings=True, name="gpt2-small"),
    "bert-base": BlockConfig(d_model=768, n_heads=12, n_kv_heads=12, d_ff=3072, norm="layer", layout="post",
                             ffn="gelu", bias=True, norm_eps=1e-12, rope=False, causal=False, max_seq_len=512,
                             vocab_size=30522, n_layers=12, tie_embeddings=True, name="bert-base"),
    "tiny": BlockConfig(d_model=64, n_heads=4, n_kv_heads=2, d_ff=172, n_layers=2, vocab_size=256, max_seq_len=128,
                        name="tiny"),
}


def preset(name: str) -> BlockConfig:
    """A named architecture's config, or ValueError listing the names (and the closest ones to a misspelt name)."""
    if name not in PRESETS:
        close = close_presets(str(name))
        guess = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise ValueError(f"unknown preset {name!r}; expected one of {', '.join(PRESETS)}{guess}")
    return PRESETS[name]


def close_presets(typed: str) -> list[str]:
    """The presets a mistyped name probably meant: the one it names in other letter case, else those it begins
    (`gpt2`), else the closest spellings (difflib's, at most 3)."""
    typed = typed.lower()
    if typed in PRESETS:
        return [typed]
    return [n for n in PRESETS if typed and n.startswith(typed)] or difflib.get_close_matches(typed, PRESETS, 3)
