"""Hugging Face checkpoints: a folder with config.json and model.safetensors (or shards listed in
model.safetensors.index.json), read into nn.LM, written back out, and counted from the file headers alone.

Llama, Mistral and Qwen2 store our parameters under other names; GPT-2 also fuses q, k and v into one `c_attn`
and stores its Conv1D weights as (in, out). Tensors are read with the safetensors package, never unpickled."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from ..accounting import total_params
from ..backend import Generator, float32
from ..tensor import Tensor
from .config import PRESETS, BlockConfig

ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "GPT2LMHeadModel")
MODEL_TYPES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
               "gpt2": "GPT2LMHeadModel"}
GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
NUMPY_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16}     # and BF16, converted by hand
# Constants some checkpoints store beside the weights (GPT-2's causal mask, old Llama's RoPE frequencies); every
# implementation rebuilds them from the config, so they are skipped, never loaded.
BUFFERS = re.compile(r"\.attn\.(masked_)?bias$|\.rotary_emb\.inv_freq$")
PICKLES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.pth", "model.ckpt")


# ---------------------------------------------------------------- the folder
def _json(file: Path, op: str, key: str | None = None):
    """A JSON file's contents (or its `key`), or an error naming the file."""
    try:
        data = json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{op}: {file} is not valid JSON ({e})") from None
    if key is not None and not isinstance(data.get(key), dict):
        raise ValueError(f"{op}: {file} has no {key!r} mapping each tensor to its shard")
    return data if key is None else data[key]


def checkpoint_files(path, op: str) -> tuple[dict, list[Path]]:
    """config.json's contents and the safetensors files of a checkpoint folder, or a clear error: no folder, no
    config.json, a missing shard, or only a pickle checkpoint (refused)."""
    folder = Path(path)
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        raise FileNotFoundError(f"{op}: {folder} {what}; expected a Hugging Face checkpoint folder holding "
                                "config.json and model.safetensors (or model-0000x-of-0000y.safetensors shards)")
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{op}: {folder} has no config.json (the architecture and its sizes)")
    config = _json(folder / "config.json", op)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(_json(index, op, "weight_map").values()))
        for missing in [s for s in shards if not (folder / s).is_file()]:
            raise FileNotFoundError(f"{op}: {index.name} names the shard {missing}, which is not in {folder}")
        return config, [folder / s for s in shards]
    if (folder / "model.safetensors").is_file():
        return config, [folder / "model.safetensors"]
    pickles = [p for p in PICKLES if (folder / p).exists()]
    if pickles:
        raise ValueError(f"{op}: {folder} holds only {pickles[0]}, a pickle: unpickling runs whatever code the file "
                         "contains, so tinygrad_block never loads one. Convert it to safetensors where you trust "
                         "it (transformers: AutoModelForCausalLM.from_pretrained(folder).save_pretrained(out))")
    raise FileNotFoundError(f"{op}: {folder} has no model.safetensors and no model.safetensors.index.json")


def read_headers(files: list[Path], op: str) -> dict[str, tuple[Path, str, tuple]]:
    """{tensor name: (file, safetensors dtype such as 'BF16', shape)} from the headers alone: no data is read."""
    found = {}
    for file in files:
        with safe_open(file, framework="numpy") as f:
            for name in f.keys():
                if name in found:
                    raise ValueError(f"{op}: tensor {name} is in both {found[name][0].name} and {file.name}")
                s = f.get_slice(name)
                found[name] = (file, s.get_dtype(), tuple(s.get_shape()))
    return found


def read_tensor(file: Path, name: str, dtype: str, op: str) -> np.ndarray:
    """One tensor's values. numpy has no bfloat16, but a bfloat16 is the top 16 bits of a float32: its raw bits
    (located by the file's header: 8 bytes of length, JSON, then the data) shifted up 16 are the exact float32."""
    if dtype in NUMPY_DTYPES:
        with safe_open(file, framework="numpy") as f:
            return f.get_tensor(name)
    if dtype != "BF16":
        raise ValueError(f"{op}: tensor {name} in {file.name} is {dtype}; expected F64, F32, F16 or BF16")
    with open(file, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        entry = json.loads(f.read(n))[name]
        begin, end = entry["data_offsets"]
        f.seek(8 + n + begin)
        bits = np.frombuffer(f.read(end - begin), dtype="<u2")
    return (bits.astype(np.uint32) << 16).view(np.float32).reshape(entry["shape"])


# ---------------------------------------------------------------- config.json <-> BlockConfig
def architecture(hf: dict, op: str) -> str:
    """The class named by config.json's `architectures` (or its `model_type`), if we read it."""
    names = hf.get("architectures") or [MODEL_TYPES.get(hf.get("model_type"), hf.get("model_type"))]
    if len(names) != 1 or names[0] not in ARCHITECTURES:
        raise ValueError(f"{op}: unsupported architecture {names}; supported: {', '.join(ARCHITECTURES)}")
    return names[0]


def _get(hf: dict, key: str, op: str):
    """A size config.json must give."""
    if hf.get(key) is None:
        raise ValueError(f"{op}: config.json has no {key!r}, which the architecture needs")
    return hf[key]


def _refuse(op: str, what: str, why: str):
    raise ValueError(f"{op}: this checkpoint uses {what}, which tinygrad_block does not implement ({why})")


def _rope_theta(hf: dict, op: str) -> float:
    """RoPE's base, from transformers 5's rope_parameters or 4's rope_theta; any scaling (Llama 3.1, YaRN) refused."""
    params, scaling = hf.get("rope_parameters") or {}, hf.get("rope_scaling") or {}
    for kind in (params.get("rope_type", "default"), scaling.get("rope_type", scaling.get("type", "default"))):
        if kind != "default":
            _refuse(op, f"RoPE scaling {kind!r}", "only the plain RoPE of Llama 2: angle = position * theta^(-2i/d)")
    if hf.get("partial_rotary_factor", params.get("partial_rotary_factor", 1.0)) != 1.0:
        _refuse(op, "partial_rotary_factor < 1", "RoPE here rotates every dimension of a head")
    return float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))


def _sliding_window(hf: dict, arch: str) -> int | None:
    """The attention window, if any layer has one: Mistral's sliding_window; Qwen2's when use_sliding_window."""
    if arch == "Qwen2ForCausalLM" and not hf.get("use_sliding_window", False):
        return None
    if "sliding_attention" not in hf.get("layer_types", ["sliding_attention"]):
        return None
    return hf.get("sliding_window")


def _llama_config(hf: dict, arch: str, op: str) -> BlockConfig:
    d, H = _get(hf, "hidden_size", op), _get(hf, "num_attention_heads", op)
    if hf.get("hidden_act", "silu") != "silu":
        _refuse(op, f"hidden_act={hf['hidden_act']!r}", "a Llama-style FFN here is SwiGLU, with SiLU")
    if hf.get("head_dim") not in (None, d // H):
        _refuse(op, f"head_dim={hf['head_dim']} with hidden_size={d}, heads={H}", "d_head is d_model / n_heads")
    bias = hf.get("attention_bias", False), hf.get("mlp_bias", False)
    if bias[0] != bias[1]:
        _refuse(op, f"attention_bias={bias[0]} with mlp_bias={bias[1]}", "biases are on every projection or none")
    positions = _get(hf, "max_position_embeddings", op)
    window = _sliding_window(hf, arch)
    return BlockConfig(d_model=d, n_heads=H, n_kv_heads=hf.get("num_key_value_heads") or H,
                       d_ff=_get(hf, "intermediate_size", op), bias=bias[0], qkv_bias=arch == "Qwen2ForCausalLM",
                       norm_eps=hf.get("rms_norm_eps", 1e-6), rope_theta=_rope_theta(hf, op),
                       max_seq_len=min(positions, window or positions), vocab_size=_get(hf, "vocab_size", op),
                       n_layers=_get(hf, "num_hidden_layers", op),
                       tie_embeddings=hf.get("tie_word_embeddings", False), name=arch)


def _gpt2_config(hf: dict, op: str) -> BlockConfig:
    act = hf.get("activation_function", "gelu_new")
    if act not in GPT2_ACTIVATIONS:
        _refuse(op, f"activation_function={act!r}", f"GPT-2's MLP here uses one of {list(GPT2_ACTIVATIONS)}")
    if not hf.get("scale_attn_weights", True) or hf.get("scale_attn_by_inverse_layer_idx", False):
        _refuse(op, "attention scores not scaled by 1/sqrt(d_head) alone", "scores are q k^T / sqrt(d_head)")
    if hf.get("add_cross_attention", False):
        _refuse(op, "cross-attention", "a decoder-only LM attends to its own tokens")
    d = _get(hf, "n_embd", op)
    return BlockConfig(d_model=d, n_heads=_get(hf, "n_head", op), n_kv_heads=_get(hf, "n_head", op),
                       d_ff=hf.get("n_inner") or 4 * d, norm="layer", ffn=GPT2_ACTIVATIONS[act], bias=True,
                       norm_eps=hf.get("layer_norm_epsilon", 1e-5), rope=False,
                       max_seq_len=_get(hf, "n_positions", op), vocab_size=_get(hf, "vocab_size", op),
                       n_layers=_get(hf, "n_layer", op), tie_embeddings=hf.get("tie_word_embeddings", True),
                       name="GPT2LMHeadModel")


def config_from_hf(hf: dict, op: str = "from_pretrained") -> tuple[str, BlockConfig]:
    """(architecture, BlockConfig) from config.json's dict. A sliding attention window W caps max_seq_len at W:
    up to W tokens, windowed attention is exactly full causal attention, and LM refuses longer inputs."""
    arch = architecture(hf, op)
    return arch, _gpt2_config(hf, op) if arch == "GPT2LMHeadModel" else _llama_config(hf, arch, op)


def hf_architecture(cfg: BlockConfig) -> str:
    """The Hugging Face class whose layout a config's model is: GPT-2, Qwen2 (biases on q/k/v only) or Llama."""
    if cfg.lora_rank:
        raise ValueError("save_pretrained: the model has LoRA adapters, which these layouts have no place for; "
                         "merge them into the weights (W + scale B A) first")
    sequential = cfg.norm_position == "pre" and not cfg.parallel and cfg.causal
    if sequential and cfg.rope and cfg.norm == "rms" and cfg.ffn == "swiglu":
        return "Qwen2ForCausalLM" if cfg.qkv_bias and not cfg.bias else "LlamaForCausalLM"
    if (sequential and not cfg.rope and cfg.norm == "layer" and cfg.bias and cfg.ffn != "swiglu"
            and cfg.n_kv_heads == cfg.n_heads):
        return "GPT2LMHeadModel"
    raise ValueError(f"save_pretrained: no Hugging Face layout fits {cfg}: Llama and Qwen2 need RoPE, RMSNorm, "
                     "SwiGLU; GPT-2 needs learned positions, LayerNorm and biases, a GELU or ReLU MLP and "
                     "n_kv_heads == n_heads; all three are pre-norm, sequential and causal")


def config_to_hf(cfg: BlockConfig, arch: str, dtype) -> dict:
    """config.json for `arch` (transformers 4 and 5 both read it). bos/eos tokens are unknown here: null."""
    common = {"architectures": [arch], "vocab_size": cfg.vocab_size, "tie_word_embeddings": cfg.tie_embeddings,
              "torch_dtype": str(dtype), "bos_token_id": None, "eos_token_id": None}
    if arch == "GPT2LMHeadModel":
        act = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}[cfg.ffn]
        return common | {"model_type": "gpt2", "n_embd": cfg.d_model, "n_head": cfg.n_heads, "n_layer": cfg.n_layers,
                         "n_positions": cfg.max_seq_len, "n_inner": cfg.d_ff, "activation_function": act,
                         "layer_norm_epsilon": cfg.norm_eps}
    hf = common | {"model_type": "qwen2" if arch == "Qwen2ForCausalLM" else "llama", "hidden_size": cfg.d_model,
                   "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads,
                   "head_dim": cfg.d_head, "intermediate_size": cfg.d_ff, "num_hidden_layers": cfg.n_layers,
                   "max_position_embeddings": cfg.max_seq_len, "rms_norm_eps": cfg.norm_eps,
                   "rope_theta": cfg.rope_theta, "hidden_act": "silu"}
    if arch == "Qwen2ForCausalLM":
        return hf | {"use_sliding_window": False, "sliding_window": None, "max_window_layers": cfg.n_layers}
    return hf | {"attention_bias": cfg.bias, "mlp_bias": cfg.bias}


# ---------------------------------------------------------------- parameter names and layouts
LLAMA_NAMES = [(r"^embed\.", "model.embed_tokens."), (r"^layers\.", "model.layers."), (r"^norm\.", "model.norm."),
               (r"\.norm1\.", ".input_layernorm."), (r"\.norm2\.", ".post_attention_layernorm."),
               (r"\.attn\.", ".self_attn."), (r"\.ffn\.", ".mlp.")]
GPT2_NAMES = [(r"^embed\.", "transformer.wte."), (r"^pos_embed\.", "transformer.wpe."),
              (r"^layers\.", "transformer.h."), (r"^norm\.", "transformer.ln_f."), (r"\.norm1\.", ".ln_1."),
              (r"\.norm2\.", ".ln_2."), (r"\.attn\.[qkv]_proj\.", ".attn.c_attn."), (r"\.o_proj\.", ".c_proj."),
              (r"\.ffn\.up_proj\.", ".mlp.c_fc."), (r"\.ffn\.down_proj\.", ".mlp.c_proj.")]


def hf_layout(model, arch: str) -> dict[str, tuple[bool, list[str]]]:
    """{HF tensor name: (conv1d, [our parameter names])}, in our order. Several names: stacked along the output
    axis (GPT-2's c_attn = q, k, v). conv1d: a GPT-2 block weight, stored transposed, (in, out)."""
    gpt2 = arch == "GPT2LMHeadModel"
    layout = {}
    for ours, p in model.named_parameters():
        hf = ours
        for pattern, new in GPT2_NAMES if gpt2 else LLAMA_NAMES:
            hf = re.sub(pattern, new, hf)
        conv1d = gpt2 and ours.startswith("layers.") and p.ndim == 2
        layout.setdefault(hf, (conv1d, []))[1].append(ours)
    return layout


def to_hf(conv1d: bool, arrays: list[np.ndarray]) -> np.ndarray:
    """Our parameters -> one HF tensor: stacked along the output axis (axis 0 of (out, in) and of a bias)."""
    a = np.concatenate(arrays) if len(arrays) > 1 else arrays[0]
    return a.T if conv1d and a.ndim == 2 else a


def from_hf(conv1d: bool, a: np.ndarray, shapes: list[tuple]) -> list[np.ndarray]:
    """One HF tensor -> our parameters of `shapes`: the inverse of to_hf."""
    a = a.T if conv1d and a.ndim == 2 else a
    return np.split(a, np.cumsum([s[0] for s in shapes])[:-1])


def hf_shape(conv1d: bool, shapes: list[tuple]) -> tuple:
    """The shape to_hf gives for our `shapes`, found without any data."""
    shape = (sum(s[0] for s in shapes), *shapes[0][1:])
    return shape[::-1] if conv1d else shape


def _canonical(name: str, arch: str) -> str:
    """GPT-2 as first published names its tensors without the `transformer.` prefix (wte.weight, h.0.ln_1.weight)."""
    if arch == "GPT2LMHeadModel" and not name.startswith(("transformer.", "lm_head.")):
        return "transformer." + name
    return name


def _check_tensors(layout: dict, shapes: dict, headers: dict, op: str) -> None:
    """Every tensor the model needs is present with its shape; nothing else is (bar BUFFERS), each named."""
    expected = {hf: hf_shape(conv1d, [shapes[o] for o in ours]) for hf, (conv1d, ours) in layout.items()}
    missing = sorted(set(expected) - set(headers))
    unexpected = sorted(n for n in set(headers) - set(expected) if not BUFFERS.search(n))
    misshaped = [f"{n} is {headers[n][2]}, expected {expected[n]}" for n in sorted(set(expected) & set(headers))
                 if headers[n][2] != expected[n]]
    if missing or unexpected or misshaped:
        raise ValueError(f"{op}: the checkpoint's tensors do not fit the model its config.json describes: "
                         f"missing {missing}, unexpected {unexpected}, misshaped {misshaped}")


# ---------------------------------------------------------------- load and save
def load_pretrained(model_class, path, dtype=float32, device="cpu"):
    """A checkpoint folder as a `model_class` (nn.LM) of `dtype` on `device`; LM.from_pretrained calls this.
    The model is built (randomly initialised), then every parameter is replaced by the checkpoint's."""
    op = "from_pretrained"
    hf_config, files = checkpoint_files(path, op)
    arch, cfg = config_from_hf(hf_config, op)
    model = model_class(cfg, generator=Generator(0), dtype=dtype, device=device)
    layout, shapes = hf_layout(model, arch), {n: p.shape for n, p in model.named_parameters()}
    headers = read_headers(files, op)
    names = {_canonical(n, arch): n for n in headers}                  # our HF name -> the file's
    found = {hf: headers[n] for hf, n in names.items()}
    tied_copy = found.pop("lm_head.weight", None) if cfg.tie_embeddings else None
    _check_tensors(layout, shapes, found, op)
    read = lambda hf: read_tensor(found[hf][0], names[hf], found[hf][1], op)   # noqa: E731
    state = {}
    for hf, (conv1d, ours) in layout.items():
        parts = from_hf(conv1d, read(hf), [shapes[o] for o in ours])
        state |= {o: Tensor(np.ascontiguousarray(a), dtype=dtype, device=device) for o, a in zip(ours, parts)}
    if tied_copy is not None:
        found["lm_head.weight"] = tied_copy
        embedding = next(hf for hf, (_, ours) in layout.items() if ours == ["embed.weight"])
        if not np.array_equal(read("lm_head.weight"), read(embedding)):
            raise ValueError(f"{op}: tie_word_embeddings is true, but lm_head.weight differs from the embedding")
    model.load_state_dict(state)
    return model


def save_pretrained(model, path) -> Path:
    """Write config.json and model.safetensors (the model's dtype) in the layout of the Hugging Face class the
    config matches (hf_architecture), so transformers' from_pretrained rebuilds the same model. Returns the folder."""
    arch, folder = hf_architecture(model.cfg), Path(path)
    if folder.exists() and not folder.is_dir():
        raise FileExistsError(f"save_pretrained: {folder} is a file; expected a folder to write into")
    params = {n: p.numpy() for n, p in model.named_parameters()}
    tensors = {hf: np.ascontiguousarray(to_hf(conv1d, [params[o] for o in ours]))
               for hf, (conv1d, ours) in hf_layout(model, arch).items()}
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})   # 'pt': what transformers expects
    dtype = model.parameters()[0].dtype
    (folder / "config.json").write_text(json.dumps(config_to_hf(model.cfg, arch, dtype), indent=2) + "\n")
    return folder


# ---------------------------------------------------------------- inspect
COMPONENTS = [("norms", r"norm|\.ln_|^ln_f\."), ("embedding", r"embed_tokens|wte|wpe"), ("lm_head", r"^lm_head\."),
              ("attention", r"self_attn|\.attn\."), ("ffn", r"\.mlp\.")]


def component(name: str) -> str:
    """Which part of the model an HF tensor belongs to: embedding, attention, ffn, norms, lm_head (or other)."""
    return next((part for part, pattern in COMPONENTS if re.search(pattern, name)), "other")


def inspect_checkpoint(path) -> dict:
    """Parameters of a checkpoint folder per component, from the safetensors headers alone (no tensor data is
    read), beside accounting's closed form for the BlockConfig its config.json maps to (and a preset it equals)."""
    op = "inspect"
    hf_config, files = checkpoint_files(path, op)
    headers = read_headers(files, op)
    names = hf_config.get("architectures") or [hf_config.get("model_type")]
    info = {"path": str(path), "files": [f.name for f in files], "architecture": ", ".join(map(str, names)),
            "buffers_skipped": sorted(n for n in headers if BUFFERS.search(n)), "dtypes": {}, "components": {}}
    try:
        arch, cfg = config_from_hf(hf_config, op)
        info |= {"config": cfg, "closed_form": total_params(cfg), "why_no_closed_form": None,
                 "preset": next((name for name, p in PRESETS.items() if p == cfg), None)}
    except ValueError as e:
        cfg, info = None, info | {"config": None, "closed_form": None, "why_no_closed_form": str(e), "preset": None}
    counted = {n: entry for n, entry in headers.items() if not BUFFERS.search(n)}
    if cfg is not None and cfg.tie_embeddings and "lm_head.weight" in counted:
        counted.pop("lm_head.weight")                                   # a stored copy of the tied embedding
        info["buffers_skipped"].append("lm_head.weight (a copy of the tied embedding)")
    for name, (_, code, shape) in counted.items():
        n = int(np.prod(shape, dtype=np.int64))
        info["components"][component(name)] = info["components"].get(component(name), 0) + n
        info["dtypes"][code] = info["dtypes"].get(code, 0) + n
    order = ("embedding", "attention", "ffn", "norms", "lm_head", "other")
    info["components"] = {part: info["components"][part] for part in order if part in info["components"]}
    info["parameters"] = sum(info["components"].values())
    info["shares"] = {k: v / max(info["parameters"], 1) for k, v in info["components"].items()}
    info["matches"] = None if cfg is None else info["parameters"] == info["closed_form"]
    return info


def inspect_text(info: dict) -> list[str]:
    """inspect_checkpoint's dict as lines to print."""
    lines = [f"{info['path']}: {info['architecture']}, {len(info['files'])} file(s), "
             f"{info['parameters']:,} parameters ({', '.join(f'{k} {v:,}' for k, v in info['dtypes'].items())})"]
    lines += [f"  {part:<10} {n:>15,}  {info['shares'][part]:6.1%}" for part, n in info["components"].items()]
    if info["buffers_skipped"]:
        lines.append(f"  skipped (not parameters): {', '.join(info['buffers_skipped'])}")
    if info["config"] is None:
        lines.append(f"  no closed form: {info['why_no_closed_form']}")
    else:
        verdict = "matches" if info["matches"] else "DIFFERS from"
        preset = f" (preset {info['preset']})" if info["preset"] else ""
        lines.append(f"  the headers' count {verdict} accounting.total_params{preset}: {info['closed_form']:,}")
    return lines
