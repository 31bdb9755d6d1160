"""config.json <-> BlockConfig for the Hugging Face classes the engine computes exactly: Llama (with Llama 3's
and linear RoPE scaling), Mistral, Qwen2, Qwen3 and GPT-2. config.json is untrusted input: every field is checked
for its type and range, named when wrong, and a field that would change the math and is not implemented is refused
by name, never ignored."""
from __future__ import annotations

import math

from .config import BlockConfig, check_heads
from ..hf_folder import is_int, shown, shown_list

ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "GPT2LMHeadModel")
MODEL_TYPES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
               "qwen3": "Qwen3ForCausalLM", "gpt2": "GPT2LMHeadModel"}
GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
ROPE_KEYS = {"rope_type", "type", "rope_theta", "factor", "low_freq_factor", "high_freq_factor",
             "original_max_position_embeddings"}
NOT_IMPLEMENTED = {   # config fields that change what a model computes, and why the engine cannot follow them
    "quantization_config": "quantized weights (the engine reads F64, F32, F16 and BF16 tensors)",
    "attn_logit_softcapping": "capped attention scores (Gemma 2)",
    "final_logit_softcapping": "capped logits (Gemma 2)",
    "embedding_multiplier": "scaled embeddings (Granite)", "logits_scaling": "scaled logits (Granite)",
    "residual_multiplier": "scaled residuals (Granite)", "attention_multiplier": "another attention scale"}
WINDOWED = ("MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")   # transformers' classes with a window
LLAMA_HEADS = ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim")   # config.json's names
GPT2_HEADS = ("n_embd", "n_head", None, None)                                            # of the heads' fields
WINDOW = 4096                  # transformers' sliding_window when these configs omit it
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
        if not isinstance(table, dict) or not all(isinstance(v, str | int | float) for v in table.values()):
            raise ValueError(f"{op}: config.json's {key!r} is {shown(table, limit=80)}; expected an object of "
                             "numbers and a rope_type")
        params |= table
        kinds.add(table.get("rope_type", table.get("type", "default")))
    kinds = kinds - {"default"} or {"default"}
    if len(kinds) > 1:
        raise ValueError(f"{op}: config.json's rope_scaling and rope_parameters name different RoPE types "
                         f"{shown_list(sorted(kinds, key=str))}; which one is meant is ambiguous")
    kind = kinds.pop()
    unknown = sorted(set(params) - ROPE_KEYS)
    if unknown:
        _refuse(op, f"RoPE settings {shown_list(unknown)}", "only RoPE's theta and the linear and llama3 scalings are "
                "read")
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


def _heads(f: Fields, keys: tuple = LLAMA_HEADS, head_dim_default: int | None = None,
           rope: bool = True) -> tuple[int, int, int | None]:
    """(n_heads, n_kv_heads, head_dim) read from config.json's `keys` (its names of d_model, n_heads, n_kv_heads
    and head_dim; None: the class has no such field) and checked by config.check_heads, the one check of the heads.
    head_dim None: hidden_size / num_attention_heads."""
    d_key, h_key, kv_key, hd_key = keys
    d, H = f.int(d_key), f.int(h_key)
    H_kv = f.int(kv_key, H) if kv_key else H
    head_dim = f.int(hd_key, head_dim_default) if hd_key and (f.hf.get(hd_key) is not None or head_dim_default) \
        else None
    names = dict(zip(("d_model", "n_heads", "n_kv_heads", "head_dim"), keys)) | {"d_model": f"config.json's {d_key}"}
    try:
        check_heads(d, H, H_kv, head_dim, rope, names)
    except ValueError as e:
        raise ValueError(f"{f.op}: {e}") from None
    return H, H_kv, head_dim


def _sliding_window(f: Fields, arch: str) -> int | None:
    """The attention window, as transformers applies it. Llama has none (a sliding_window in its config is ignored).
    Mistral's sliding_window is on every layer (4096 when config.json omits it, none when it is null; layer_types is
    ignored). Qwen2's and Qwen3's is on only with use_sliding_window, and then on the layers that layer_types marks
    'sliding_attention' (by default those from max_window_layers on): one windowed layer windows the model."""
    if arch not in WINDOWED or f.hf.get("sliding_window", WINDOW) is None:
        return None
    window = f.int("sliding_window", WINDOW)
    if arch == "MistralForCausalLM":
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


def _llama_config(hf: dict, arch: str, op: str) -> BlockConfig:
    """Llama, Mistral, Qwen2 (biases on q, k, v) and Qwen3 (RMSNorm on each head's q and k)."""
    f = Fields(hf, op)
    d = f.int("hidden_size")
    H, H_kv, head_dim = _heads(f, head_dim_default=128 if arch == "Qwen3ForCausalLM" else None)   # transformers' Qwen3
    if f.str("hidden_act", "silu") != "silu":
        _refuse(op, f"hidden_act={shown(hf['hidden_act'], quote=True, limit=60)}", "a Llama-style FFN here is "
                "SwiGLU, with SiLU")
    bias = f.bool("attention_bias", False), f.bool("mlp_bias", False)
    if bias[0] != bias[1]:
        _refuse(op, f"attention_bias={bias[0]} with mlp_bias={bias[1]}", "biases are on every projection or none")
    if arch == "Qwen3ForCausalLM" and bias[0]:
        _refuse(op, "attention_bias=true in Qwen3", "Qwen3's attention biases are on q, k, v and o but not the FFN")
    theta, scaling = rope(hf, op)
    positions, window = f.int("max_position_embeddings"), _sliding_window(f, arch)
    return BlockConfig(d_model=d, n_heads=H, n_kv_heads=H_kv, d_ff=f.int("intermediate_size"), head_dim=head_dim,
                       bias=bias[0],
                       qkv_bias=arch == "Qwen2ForCausalLM", qk_norm=arch == "Qwen3ForCausalLM",
                       norm_eps=f.number("rms_norm_eps", 1e-6, below=1.0), rope_theta=theta, rope_scaling=scaling,
                       max_seq_len=min(positions, window or positions), vocab_size=f.int("vocab_size"),
                       n_layers=f.int("num_hidden_layers"), tie_embeddings=f.bool("tie_word_embeddings", False),
                       name=arch)


def _gpt2_config(hf: dict, op: str) -> BlockConfig:
    f = Fields(hf, op)
    act = f.str("activation_function", "gelu_new")
    if act not in GPT2_ACTIVATIONS:
        _refuse(op, f"activation_function={shown(act, quote=True, limit=60)}", "GPT-2's MLP here uses one of "
                f"{list(GPT2_ACTIVATIONS)}")
    if not f.bool("scale_attn_weights", True) or f.bool("scale_attn_by_inverse_layer_idx", False):
        _refuse(op, "attention scores not scaled by 1/sqrt(d_head) alone", "scores are q k^T / sqrt(d_head)")
    if f.bool("add_cross_attention", False):
        _refuse(op, "cross-attention", "a decoder-only LM attends to its own tokens")
    d, (H, _, _) = f.int("n_embd"), _heads(f, GPT2_HEADS, rope=False)
    return BlockConfig(d_model=d, n_heads=H, n_kv_heads=H, d_ff=f.int("n_inner", 4 * d), norm="layer",
                       ffn=GPT2_ACTIVATIONS[act], bias=True, norm_eps=f.number("layer_norm_epsilon", 1e-5, below=1.0),
                       rope=False, max_seq_len=f.int("n_positions"), vocab_size=f.int("vocab_size"),
                       n_layers=f.int("n_layer"), tie_embeddings=f.bool("tie_word_embeddings", True),
                       name="GPT2LMHeadModel")


def config_from_hf(hf: dict, op: str = "from_pretrained") -> tuple[str, BlockConfig]:
    """(architecture, BlockConfig) from config.json's dict. A sliding attention window W caps max_seq_len at W:
    up to W tokens, windowed attention is exactly full causal attention, and LM refuses longer inputs."""
    if not isinstance(hf, dict):
        raise ValueError(f"{op}: config.json holds a JSON {type(hf).__name__}; expected an object")
    arch = architecture(hf, op)
    for key, what in NOT_IMPLEMENTED.items():
        if hf.get(key) not in (None, 1, 1.0) or (key == "quantization_config" and hf.get(key)):
            _refuse(op, f"{key}={shown(hf[key], quote=True, limit=60)}", what)
    try:
        cfg = _gpt2_config(hf, op) if arch == "GPT2LMHeadModel" else _llama_config(hf, arch, op)
    except ValueError as e:
        if str(e).startswith(op):
            raise
        raise ValueError(f"{op}: config.json describes a model the engine cannot build: {e}") from None
    return arch, cfg


def hf_architecture(cfg: BlockConfig) -> str:
    """The Hugging Face class whose layout a config's model is: GPT-2, Qwen2 (biases on q/k/v only), Qwen3 (QK-norm)
    or Llama (which also holds linear and llama3 RoPE scaling)."""
    if cfg.lora_rank:
        raise ValueError("save_pretrained: the model has LoRA adapters, which these layouts have no place for; "
                         "merge them into the weights (W + scale B A) first")
    sequential = cfg.layout == "pre" and cfg.causal and cfg.n_experts == 1
    if sequential and cfg.rope and cfg.norm == "rms" and cfg.ffn == "swiglu":
        if cfg.qk_norm and not (cfg.bias or cfg.qkv_bias):
            return "Qwen3ForCausalLM"
        if not cfg.qk_norm:
            return "Qwen2ForCausalLM" if cfg.qkv_bias and not cfg.bias else "LlamaForCausalLM"
    if (sequential and not cfg.rope and cfg.norm == "layer" and cfg.bias and cfg.ffn != "swiglu"
            and cfg.n_kv_heads == cfg.n_heads):
        return "GPT2LMHeadModel"
    raise ValueError(f"save_pretrained: no Hugging Face layout fits {cfg}: Llama, Qwen2 and Qwen3 need RoPE, "
                     "RMSNorm, SwiGLU; GPT-2 needs learned positions, LayerNorm and biases, a GELU or ReLU MLP and "
                     "n_kv_heads == n_heads; all are pre-norm, sequential, causal and dense")


def config_to_hf(cfg: BlockConfig, arch: str, dtype) -> dict:
    """config.json for `arch` (transformers 4 and 5 both read it). bos/eos tokens are unknown here: null."""
    common = {"architectures": [arch], "vocab_size": cfg.vocab_size, "tie_word_embeddings": cfg.tie_embeddings,
              "torch_dtype": str(dtype), "bos_token_id": None, "eos_token_id": None}
    if arch == "GPT2LMHeadModel":
        act = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}[cfg.ffn]
        return common | {"model_type": "gpt2", "n_embd": cfg.d_model, "n_head": cfg.n_heads, "n_layer": cfg.n_layers,
                         "n_positions": cfg.max_seq_len, "n_inner": cfg.d_ff, "activation_function": act,
                         "layer_norm_epsilon": cfg.norm_eps}
    model_type = {"Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}.get(arch, "llama")
    hf = common | {"model_type": model_type, "hidden_size": cfg.d_model, "num_attention_heads": cfg.n_heads,
                   "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.d_head, "intermediate_size": cfg.d_ff,
                   "num_hidden_layers": cfg.n_layers, "max_position_embeddings": cfg.max_seq_len,
                   "rms_norm_eps": cfg.norm_eps, "rope_theta": cfg.rope_theta, "hidden_act": "silu"}
    if cfg.rope_scaling:
        keys = ("rope_type", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
        hf["rope_scaling"] = dict(zip(keys, cfg.rope_scaling))
    if arch in ("Qwen2ForCausalLM", "Qwen3ForCausalLM"):
        qwen = {"use_sliding_window": False, "sliding_window": None, "max_window_layers": cfg.n_layers}
        return hf | qwen | ({"attention_bias": False} if arch == "Qwen3ForCausalLM" else {})
    return hf | {"attention_bias": cfg.bias, "mlp_bias": cfg.bias}
