"""config.json <-> BlockConfig for the Hugging Face classes the engine computes exactly, one record each in
families.py: Llama (with Llama 3's and linear RoPE scaling), Mistral, Qwen2, Qwen3, Gemma, Phi-3 and GPT-2.
config.json is untrusted input: every field is checked for its type and range, named when wrong, and a field that
would change the math and is not implemented is refused by name, never ignored."""
from __future__ import annotations

import math

from .config import BlockConfig, check_heads
from .families import FAMILIES, MODEL_TYPES, Family, family_of
from ..files import is_int, shown, shown_list

ARCHITECTURES = tuple(FAMILIES)
ROPE_KEYS = {"rope_type", "type", "rope_theta", "factor", "low_freq_factor", "high_freq_factor",
             "original_max_position_embeddings", "partial_rotary_factor"}
NOT_IMPLEMENTED = {   # config fields that change what a model computes: why the engine cannot follow them, and
    # the values that change nothing (None: the field left out)
    "quantization_config": ("quantized weights (the engine reads F64, F32, F16 and BF16 tensors)", (None, {})),
    "attn_logit_softcapping": ("capped attention scores (Gemma 2)", (None,)),
    "final_logit_softcapping": ("capped logits (Gemma 2)", (None,)),
    "query_pre_attn_scalar": ("scores scaled by another number than sqrt(head_dim) (Gemma 2)", (None,)),
    "sliding_window_pattern": ("windows on alternating layers (Gemma 2, 3)", (None,)),
    "partial_rotary_factor": ("RoPE on part of each head (Phi-2, some Phi-3)", (None, 1, 1.0)),
    "embedding_multiplier": ("scaled embeddings (Granite)", (None, 1, 1.0)),
    "logits_scaling": ("scaled logits (Granite)", (None, 1, 1.0)),
    "residual_multiplier": ("scaled residuals (Granite)", (None, 1, 1.0)),
    "attention_multiplier": ("another attention scale", (None, 1, 1.0))}
WINDOW_LAYERS = 28             # transformers' max_window_layers for Qwen: the layers from this index on are windowed


class Fields:
    """Typed access to config.json's fields; a missing or ill-typed one is a ValueError naming the key."""

    def __init__(self, hf: dict, op: str):
        self.hf, self.op = hf, op

    def _fail(self, key: str, expected: str):
        value = self.hf[key]
        raise ValueError(f"{self.op}: config.json's {key!r} is {shown(value, quote=True, limit=60)} "
                         f"({type(value).__name__}); expected {expected}")

    def int(self, key: str, default=None, minimum: int = 1) -> int:
        """An integer >= minimum (JSON's true/false and 64.0 are not); `default` when absent or null."""
        if self.hf.get(key) is None:
            if default is None:
                raise ValueError(f"{self.op}: config.json has no {key!r}, which the architecture needs")
            return default
        if not is_int(self.hf[key]) or self.hf[key] < minimum:
            self._fail(key, f"an integer >= {minimum}")
        return self.hf[key]

    def number(self, key: str, default: float, positive: bool = True, table: dict | None = None,
               below: float | None = None) -> float:
        """A finite real number (> 0 when positive, < below when given), from `table` (a nested dict) or
        config.json itself."""
        table = self.hf if table is None else table
        value = table.get(key)
        if value is None:
            return default
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or (positive and value <= 0) or (below is not None and value >= below):
            raise ValueError(f"{self.op}: config.json's {key!r} is {shown(value, quote=True, limit=60)} "
                             f"({type(value).__name__}); expected a finite number{' > 0' if positive else ''}"
                             + (f" and < {below:g}" if below is not None else ""))
        return float(value)

    def _of(self, key: str, default, kind: type, expected: str):
        """A value of `kind` (`default` when absent or null)."""
        if self.hf.get(key) is None:
            return default
        if not isinstance(self.hf[key], kind):
            self._fail(key, expected)
        return self.hf[key]

    def bool(self, key: str, default: bool) -> bool:
        return self._of(key, default, bool, "true or false")

    def str(self, key: str, default: str) -> str:
        return self._of(key, default, str, "a string")


def _refuse(op: str, what: str, why: str):
    raise ValueError(f"{op}: this checkpoint uses {what}, which tinygrad_block does not implement ({why})")


def architecture(hf: dict, op: str) -> str:
    """The class named by config.json's `architectures` (a list of one string), or else by its `model_type`. Both
    given, they must name the same model: transformers picks the config class by model_type and the model class by
    architectures, so a disagreement is refused as ambiguous, naming both."""
    model_type, names = Fields(hf, op).str("model_type", ""), hf.get("architectures")
    if names is None:
        names = [MODEL_TYPES.get(model_type, model_type or "(no architectures, no model_type)")]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{op}: config.json's 'architectures' is {shown(names, quote=True, limit=60)}; expected a "
                         "list of class names such as [\"LlamaForCausalLM\"]")
    if len(names) != 1 or names[0] not in ARCHITECTURES:
        raise ValueError(f"{op}: unsupported architecture {shown_list(names)}; supported: {', '.join(ARCHITECTURES)}")
    if model_type and MODEL_TYPES.get(model_type) != names[0]:
        expected = next(t for t, a in MODEL_TYPES.items() if a == names[0])
        raise ValueError(f"{op}: config.json's architectures {shown_list(names)} and model_type "
                         f"{shown(model_type, quote=True, limit=60)} name different models ({names[0]}'s model_type "
                         f"is {expected!r}); which one is meant is ambiguous")
    return names[0]


def rope(hf: dict, op: str) -> tuple[float, tuple]:
    """(theta, scaling) from transformers 5's rope_parameters or 4's rope_theta + rope_scaling. scaling is () for
    the plain RoPE, ('linear', factor) or ('llama3', factor, low_freq_factor, high_freq_factor, original context);
    any other kind (YaRN, dynamic, longrope, ...) or an unknown key is refused by name."""
    f, params, kinds = Fields(hf, op), {}, set()
    for key in ("rope_scaling", "rope_parameters"):
        table = hf.get(key) or {}
        kind = table.get("rope_type", table.get("type", "default")) if isinstance(table, dict) else None
        if not isinstance(kind, str) or not all(isinstance(v, str | int | float | list) for v in table.values()):
            raise ValueError(f"{op}: config.json's {key!r} is {shown(table, limit=80)}; expected an object of "
                             "numbers and a rope_type")               # lists (longrope's factors): refused by name
        params |= table
        kinds.add(kind)
    kinds = kinds - {"default"} or {"default"}
    if len(kinds) > 1:
        raise ValueError(f"{op}: config.json's rope_scaling and rope_parameters name different RoPE types "
                         f"{shown_list(sorted(kinds, key=str))}; which one is meant is ambiguous")
    kind = kinds.pop()
    unknown = sorted(set(params) - ROPE_KEYS)
    if unknown:
        _refuse(op, f"RoPE settings {shown_list(unknown)}", "only RoPE's theta and the linear and llama3 scalings are "
                "read")
    if params.get("partial_rotary_factor", 1) not in (1, 1.0):
        _refuse(op, f"partial_rotary_factor={shown(params['partial_rotary_factor'], limit=60)}",
                NOT_IMPLEMENTED["partial_rotary_factor"][0])
    theta = f.number("rope_theta", f.number("rope_theta", 10000.0), table=params)
    if kind == "default":
        return theta, ()
    factor = f.number("factor", None, table=params)
    if kind == "linear" and factor is not None:
        return theta, ("linear", factor)
    if kind == "llama3" and factor is not None:
        sizes = [f.number(k, None, table=params) for k in ("low_freq_factor", "high_freq_factor")]
        context = params.get("original_max_position_embeddings")
        if None not in sizes and is_int(context) and context > 0:
            return theta, ("llama3", factor, *sizes, context)
    if kind in ("linear", "llama3"):
        raise ValueError(f"{op}: config.json's RoPE scaling {kind!r} needs a factor (and for llama3 low_freq_factor, "
                         f"high_freq_factor and an integer original_max_position_embeddings); got "
                         f"{shown(params, limit=200)}")
    _refuse(op, f"RoPE scaling {shown(kind, quote=True, limit=60)}", "the plain RoPE and the 'linear' and 'llama3' "
            "scalings are implemented")




def _heads(f: Fields, fam: Family) -> tuple[int, int, int | None]:
    """(n_heads, n_kv_heads, head_dim) read under the family's names (fam.heads: None where it has no such field)
    and checked by config.check_heads, the one check of the heads. head_dim None: d_model / n_heads."""
    d_key, h_key, kv_key, hd_key = fam.heads
    d, H = f.int(d_key), f.int(h_key)
    H_kv = f.int(kv_key, H) if kv_key else H
    default = fam.defaults.get(hd_key)
    head_dim = f.int(hd_key, default) if hd_key and (f.hf.get(hd_key) is not None or default) else None
    names = dict(zip(("d_model", "n_heads", "n_kv_heads", "head_dim"), fam.heads))
    names["d_model"] = f"config.json's {d_key}"
    try:
        check_heads(d, H, H_kv, head_dim, fam.fixed["rope"], names)
    except ValueError as e:
        raise ValueError(f"{f.op}: {e}") from None
    return H, H_kv, head_dim


def _sliding_window(f: Fields, fam: Family) -> int | None:
    """The attention window, as transformers applies it. Families without one ignore a sliding_window in their
    config (Llama). 'every' (Mistral, Phi-3): sliding_window on every layer (the family's default when config.json
    omits it, none when it is null; layer_types is ignored). 'qwen' (Qwen2, Qwen3): only with use_sliding_window,
    and then on the layers that layer_types marks 'sliding_attention' (by default those from max_window_layers
    on): one windowed layer windows the model."""
    default = fam.defaults.get("sliding_window")
    if not fam.window or f.hf.get("sliding_window", default) is None:
        return None
    window = f.int("sliding_window", default)
    if fam.window == "every":
        return window
    if not f.bool("use_sliding_window", False):
        return None
    n_layers, layer_types = f.int("num_hidden_layers"), f.hf.get("layer_types")
    if layer_types is None:
        return window if n_layers > f.int("max_window_layers", WINDOW_LAYERS, minimum=0) else None
    kinds = ("full_attention", "sliding_attention")
    if not isinstance(layer_types, list) or len(layer_types) != n_layers or not all(t in kinds for t in layer_types):
        raise ValueError(f"{f.op}: config.json's 'layer_types' is {shown(layer_types, limit=80)}; expected a list of "
                         f"{n_layers} (num_hidden_layers) entries, each 'full_attention' or 'sliding_attention'")
    return window if "sliding_attention" in layer_types else None


def _sizes(f: Fields, fam: Family) -> dict:
    """The family's size fields (fam.sizes), each a positive int, its default from fam.defaults when absent."""
    sizes = {}
    for name, key in fam.sizes.items():
        default = fam.defaults.get(key)
        sizes[name] = f.int(key, default(sizes) if callable(default) else default)
    return sizes


def _ffn(f: Fields, fam: Family) -> str:
    """cfg.ffn from the family's activation key (its default: the first value it takes)."""
    key, table = fam.activation
    act = f.str(key, next(iter(table)))
    if act not in table:
        _refuse(f.op, f"{key}={shown(act, quote=True, limit=60)}", f"{fam.label}'s feed-forward here uses one of "
                f"{list(table)}")
    return table[act]


def _bias(f: Fields, fam: Family) -> bool:
    """cfg.bias: the family's bias keys, which must agree, and what its record fixes."""
    values = [f.bool(key, False) for key in fam.bias_keys]
    if len(set(values)) > 1:
        said = " with ".join(f"{k}={v}" for k, v in zip(fam.bias_keys, values))
        _refuse(f.op, said, "biases are on every projection or none")
    bias = values[0] if values else fam.fixed.get("bias", False)
    if "bias" in fam.fixed and bias != fam.fixed["bias"]:
        _refuse(f.op, f"{fam.bias_keys[0]}={bias} in {fam.label}", f"{fam.label}'s attention biases are on q, k, v "
                "and o but not the FFN")
    return bias


def _checks(f: Fields, fam: Family) -> None:
    """The family's fields of which one value is implemented (fam.checks): any other is refused by name."""
    for key, implemented, why in fam.checks:
        value = f.hf.get(key)
        if value is not None and value != implemented:
            _refuse(f.op, f"{key}={shown(value, quote=True, limit=60)}", why)


def _read(hf: dict, fam: Family, op: str) -> BlockConfig:
    """The BlockConfig of a config.json of family `fam`."""
    f = Fields(hf, op)
    _checks(f, fam)
    sizes = _sizes(f, fam)
    H, H_kv, head_dim = _heads(f, fam)
    theta, scaling = rope(hf, op) if fam.fixed["rope"] else (10000.0, ())
    window = _sliding_window(f, fam)
    eps_key, eps_default = fam.eps
    fixed = {k: v for k, v in fam.fixed.items() if k != "bias"}
    return BlockConfig(**sizes | {"max_seq_len": min(sizes["max_seq_len"], window or sizes["max_seq_len"])},
                       n_heads=H, n_kv_heads=H_kv, head_dim=head_dim, norm=fam.norm, ffn=_ffn(f, fam),
                       bias=_bias(f, fam), norm_eps=f.number(eps_key, eps_default, below=1.0), rope_theta=theta,
                       rope_scaling=scaling, tie_embeddings=f.bool("tie_word_embeddings",
                                                                   fam.defaults.get("tie_word_embeddings", False)),
                       name=fam.hf_class, **fixed)


def config_from_hf(hf: dict, op: str = "from_pretrained") -> tuple[str, BlockConfig]:
    """(architecture, BlockConfig) from config.json's dict, read as the architecture's record (families.py) says.
    A sliding attention window W caps max_seq_len at W: up to W tokens, windowed attention is exactly full causal
    attention, and LM refuses longer inputs."""
    if not isinstance(hf, dict):
        raise ValueError(f"{op}: config.json holds a JSON {type(hf).__name__}; expected an object")
    arch = architecture(hf, op)
    for key, (what, harmless) in NOT_IMPLEMENTED.items():
        if hf.get(key) not in harmless:
            _refuse(op, f"{key}={shown(hf[key], quote=True, limit=60)}", what)
    try:
        cfg = _read(hf, FAMILIES[arch], op)
    except ValueError as e:
        if str(e).startswith(op):
            raise
        raise ValueError(f"{op}: config.json describes a model the engine cannot build: {e}") from None
    return arch, cfg


def hf_architecture(cfg: BlockConfig) -> str:
    """The Hugging Face class whose layout a config's model is saved in (families.family_of)."""
    if cfg.lora_rank:
        raise ValueError("save_pretrained: the model has LoRA adapters, which these layouts have no place for; "
                         "merge them into the weights (W + scale B A) first")
    return family_of(cfg).hf_class


def config_to_hf(cfg: BlockConfig, arch: str, dtype) -> dict:
    """config.json for `arch` (transformers 4 and 5 both read it), every field named as its record says. bos,
    eos and pad tokens are unknown here: null. A window is written switched off (the context is max_seq_len)."""
    fam = FAMILIES[arch]
    hf = {"architectures": [arch], "model_type": fam.model_type, "tie_word_embeddings": cfg.tie_embeddings,
          "torch_dtype": str(dtype), "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
    hf |= {key: getattr(cfg, name) for name, key in fam.sizes.items()}
    values = {"d_model": cfg.d_model, "n_heads": cfg.n_heads, "n_kv_heads": cfg.n_kv_heads, "head_dim": cfg.d_head}
    hf |= {key: value for key, value in zip(fam.heads, values.values()) if key}
    hf |= {fam.eps[0]: cfg.norm_eps, fam.activation[0]: next(k for k, v in fam.activation[1].items() if v == cfg.ffn)}
    hf |= dict.fromkeys(fam.bias_keys, cfg.bias)
    if cfg.rope:
        hf["rope_theta"] = cfg.rope_theta
    if cfg.rope_scaling:
        keys = ("rope_type", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
        hf["rope_scaling"] = dict(zip(keys, cfg.rope_scaling))
    if fam.window == "every":
        hf["sliding_window"] = None
    if fam.window == "qwen":
        hf |= {"use_sliding_window": False, "sliding_window": None, "max_window_layers": cfg.n_layers}
    return hf
