"""Lesson 20's exercises: a Llama-shaped model's parameters and its KV cache from a config.json dict, and one tensor
read from a safetensors file by hand. Each check compares with an independent oracle (the model its config builds,
counted on the shape-only device; a KVCache filled by a real model and accounting.kv_cache_bytes; the arrays the
file was written from) and says what is wrong, with the numbers, naming the usual slips when it sees one."""
from __future__ import annotations

import json
import numbers
import tempfile
from pathlib import Path

import numpy as np

import tinygrad_block as tb
from tinygrad_block import accounting, nn
from tinygrad_block.safetensors_file import write_safetensors
from tinygrad_block.measure import meta_lm
from tinygrad_block.nn.cache import KVCache
from tinygrad_block.nn.hf_config import config_from_hf, config_to_hf

from .common import CheckFailed


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _config(cfg: nn.BlockConfig, *drop: str) -> dict:
    """config.json of a Llama-shaped cfg, as a published folder has it, less the keys `drop`."""
    hf = config_to_hf(cfg, "LlamaForCausalLM", tb.float32) | {"torch_dtype": "bfloat16"}
    return {k: v for k, v in hf.items() if k not in drop}


DEMO = nn.preset("tiny").with_(vocab_size=512, max_seq_len=256, rope_theta=500000.0)     # the lesson's folder
LLAMA32_1B = nn.BlockConfig(d_model=2048, n_heads=32, n_kv_heads=8, d_ff=8192, n_layers=16, vocab_size=128256,
                            max_seq_len=131072, rope_theta=500000.0, tie_embeddings=True, name="llama3.2-1b")
WIDE_HEADS = nn.BlockConfig(d_model=1024, n_heads=16, n_kv_heads=8, head_dim=128, d_ff=3072, n_layers=28,
                            vocab_size=151936, max_seq_len=40960, rope_theta=1e6, tie_embeddings=True)
CONFIGS = [("the lesson's folder", _config(DEMO)),
           ("Llama-3-8B", _config(nn.preset("llama3-8b"))),
           ("Llama-3.2-1B (tied)", _config(LLAMA32_1B)),
           ("SmolLM-135M (tied, 9 heads, 3 KV heads)", _config(nn.preset("smollm-135m"))),
           ("Llama-2-7B, no num_key_value_heads, no head_dim", _config(nn.preset("llama2-7b"), "num_key_value_heads",
                                                                       "head_dim")),
           ("TinyLlama-1.1B, no tie_word_embeddings", _config(nn.preset("tinyllama-1.1b"), "tie_word_embeddings")),
           ("Qwen3-0.6B's shape as a Llama (16 heads of head_dim 128 in hidden_size 1024)", _config(WIDE_HEADS))]
DEFAULTS = {"num_key_value_heads": "a config without num_key_value_heads has one KV head per query head "
                                   "(num_key_value_heads = num_attention_heads: no GQA)",
            "head_dim": "a config without head_dim has heads of hidden_size / num_attention_heads",
            "tie_word_embeddings": "a Llama config without tie_word_embeddings has an untied head (false)"}


def _call(fn, call: str, *args):
    """The learner's result, or CheckFailed naming the field a published config may leave out."""
    try:
        return fn(*args)
    except KeyError as e:
        key = e.args[0] if e.args else None
        if key in DEFAULTS:
            raise CheckFailed(f"{call} raised KeyError: {key!r}; {DEFAULTS[key]}: read it with a default, "
                              f"config.get({key!r}, ...)") from None
        raise


def _shape(config: dict) -> tuple:
    """(d_model, n_heads, n_kv_heads, d_head, n_layers) as the library reads them from config.json."""
    cfg = config_from_hf(config, "lesson 20")[1]
    return cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_head, cfg.n_layers


# ---------------------------------------------------------------- params_from_config
def _params_hint(config: dict, got: int, want: int) -> str:
    """The usual slip that gives exactly `got`, if any."""
    cfg = config_from_hf(config, "lesson 20")[1]
    d, L, V, H = cfg.d_model, cfg.n_layers, cfg.vocab_size, cfg.n_heads
    full_kv = 2 * L * d * (d - cfg.n_kv_heads * cfg.d_head)
    untied_default = "tie_word_embeddings" not in config
    slips = [(want - (2 * L + 1) * d, "that leaves out every norm: each block has two RMSNorm gains of hidden_size, "
                                      "and there is a final norm of hidden_size"),
             (want - 2 * L * d, f"that leaves out the blocks' norms: 2 x hidden_size = {2 * d:,} per block"),
             (want - d, f"that leaves out the final norm (model.norm.weight), hidden_size = {d:,} parameters"),
             (want + full_kv, f"under GQA k_proj and v_proj are (num_key_value_heads x head_dim) x hidden_size = "
                              f"{cfg.n_kv_heads * cfg.d_head:,} x {d:,}, not hidden_size x hidden_size"),
             (want + V * d if cfg.tie_embeddings else None,
              "tie_word_embeddings is true: the head is the embedding, one matrix, counted once"),
             (want - V * d if not cfg.tie_embeddings else None,
              (DEFAULTS["tie_word_embeddings"] + ", so lm_head.weight is a matrix of its own") if untied_default
              else f"that leaves out lm_head.weight, vocab_size x hidden_size = {V * d:,} (this model does not tie "
                   "it)")]
    wide_q = 2 * L * d * (H * cfg.d_head - d)                 # q_proj and o_proj taken as hidden_size x hidden_size
    if wide_q:
        slips.append((want - wide_q, f"head_dim is given: q_proj and o_proj are (num_attention_heads x head_dim) x "
                                     f"hidden_size = {H * cfg.d_head:,} x {d:,}, not hidden_size x hidden_size"))
    if H == cfg.n_kv_heads:                                    # KV heads defaulted to 1: K and V of one head's width
        slips.append((want - 2 * L * d * (d - cfg.d_head), DEFAULTS["num_key_value_heads"]))
    return next((": " + why for value, why in slips if value is not None and value != want and got == value), "")


def check_params_from_config(solution) -> None:
    """Each config against the model it describes, built on the shape-only device and counted."""
    for name, config in CONFIGS:
        want = meta_lm(config_from_hf(config, "lesson 20")[1]).num_parameters()
        call = f"params_from_config({name})"
        got = _call(solution.params_from_config, call, dict(config))
        if not _is_int(got):
            raise CheckFailed(f"{call} returned {got!r}, a {type(got).__name__}; return an int (the fields are "
                              "integers, and no division is needed)")
        if got != want:
            raise CheckFailed(f"{call} = {got:,}, but the model this config describes, built on the shape-only "
                              f"device, has {want:,} (off by {got - want:+,}){_params_hint(config, got, want)}")


# ---------------------------------------------------------------- kv_cache_bytes
KV_CASES = [("SmolLM-135M", CONFIGS[3][1], 2048, 4),       # first: every slip gives another number
            ("the lesson's folder", CONFIGS[0][1], 7, 4), ("the lesson's folder", CONFIGS[0][1], 100, 8),
            ("Llama-3-8B", CONFIGS[1][1], 8192, 2), ("Llama-2-7B, no num_key_value_heads", CONFIGS[4][1], 4096, 2),
            ("Llama-3.2-1B", CONFIGS[2][1], 1, 2)]
FILLED = {4: tb.float32, 8: tb.float64}                 # bytes per element: a model of that dtype fills a cache


def _filled(config: dict, tokens: int, bytes_per_element: int) -> int:
    """The oracle for a small model: a KVCache filled by the model's forward on `tokens` ids, its bytes."""
    cfg = config_from_hf(config, "lesson 20")[1]
    model = nn.LM(cfg, generator=tb.Generator(0), dtype=FILLED[bytes_per_element])
    cache = KVCache(model, batch=1)
    with tb.no_grad():
        model(tb.randint(0, cfg.vocab_size, (1, tokens), generator=tb.Generator(1)), cache=cache)
    return cache.nbytes


def _kv_hint(config: dict, tokens: int, bpe: int, got: int, want: int) -> str:
    d, H, H_kv, d_head, L = _shape(config)
    slips = [(want // 2, "that is K alone: the cache keeps V too, as many bytes again"),
             (want // H_kv * H, f"that counts num_attention_heads = {H} heads; the cache keeps K and V for the "
                                f"num_key_value_heads = {H_kv} KV heads only (the query heads share them)"),
             (want // L, f"that is one layer; every one of the {L} layers keeps its own K and V"),
             (want // bpe, f"that counts numbers, not bytes: multiply by bytes_per_element = {bpe}"),
             (want // tokens, f"that is one token; the cache holds all {tokens:,}")]
    if H == H_kv:
        slips.append((want // H_kv, DEFAULTS["num_key_value_heads"]))
    return next((": " + why for value, why in slips if value != want and got == value), "")


def check_kv_cache_bytes(solution) -> None:
    """Small cases against a KVCache filled by a real model; every case against accounting.kv_cache_bytes."""
    for name, config, tokens, bpe in KV_CASES:
        small = name == "the lesson's folder"
        want = _filled(config, tokens, bpe) if small else \
            accounting.kv_cache_bytes(config_from_hf(config, "lesson 20")[1], tokens, 1, bpe)
        call = f"kv_cache_bytes({name}, tokens={tokens:,}, bytes_per_element={bpe})"
        got = _call(solution.kv_cache_bytes, call, dict(config), tokens, bpe)
        if not _is_int(got):
            raise CheckFailed(f"{call} returned {got!r}, a {type(got).__name__}; return an int (a count of bytes)")
        if got != want:
            source = "a KVCache filled by the model holds" if small else "the cache takes"
            raise CheckFailed(f"{call} = {got:,}, but {source} {want:,} bytes"
                              f"{_kv_hint(config, tokens, bpe, got, want)}")


# ---------------------------------------------------------------- read_tensor
def _arrays() -> dict[str, np.ndarray]:
    """The tensors of the checker's file: float32, float16 and float64, none of them first by chance."""
    r = np.random.default_rng(20)
    return {"model.embed_tokens.weight": r.standard_normal((6, 4)).astype(np.float32),
            "model.layers.0.input_layernorm.weight": (1 + r.standard_normal(8) / 10).astype(np.float16),
            "model.layers.0.self_attn.q_proj.weight": r.standard_normal((4, 4)).astype(np.float32),
            "model.norm.weight": r.standard_normal((2, 3, 2)),
            "lm_head.weight": r.standard_normal((5, 4)).astype(np.float16)}


def _read_slip(raw: bytes, begin: int, end: int, dtype, shape) -> np.ndarray | None:
    """The bytes raw[begin:end] as the tensor would be read, or None where they cannot be."""
    part = raw[max(begin, 0):max(end, 0)]
    if len(part) != end - begin or len(part) % np.dtype(dtype).itemsize:
        return None
    a = np.frombuffer(part, dtype)
    return a.reshape(shape) if shape is not None and a.size == int(np.prod(shape)) else a


def _read_hint(raw: bytes, entry: dict, want: np.ndarray, got: np.ndarray) -> str:
    n = int.from_bytes(raw[:8], "little")
    begin, end = entry["data_offsets"]
    start = 8 + n                                                      # where the data starts
    slips = [(_read_slip(raw, begin, end, want.dtype, want.shape),
              f"those bytes are counted from the start of the file; data_offsets count from the end of the header, "
              f"byte 8 + {n:,} = {start:,}"),
             (_read_slip(raw, 8 + begin, 8 + end, want.dtype, want.shape),
              f"those bytes are counted from the start of the header; data_offsets count from its end, {n:,} bytes "
              "later"),
             (_read_slip(raw, n + begin, n + end, want.dtype, want.shape),
              "those bytes are counted from byte n, the header's length: the 8 bytes that give that length come "
              "first, so the data starts at 8 + n"),
             (_read_slip(raw, start + begin, start + end, want.dtype.newbyteorder(">"), want.shape),
              "those are the right bytes read big-endian; safetensors stores numbers little-endian ('<f4')")]
    for wrong, why in slips:
        if wrong is not None and wrong.shape == got.shape and \
                np.array_equal(wrong.astype(got.dtype), got, equal_nan=True):
            return ": " + why
    return ""


def check_read_tensor(solution) -> None:
    """Every tensor of a file written with mixed dtypes, against the array it was written from."""
    arrays = _arrays()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.safetensors"
        write_safetensors(path, arrays, metadata={"format": "pt"})
        raw = path.read_bytes()
        header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
        for name, want in arrays.items():
            entry, call = header[name], f"read_tensor(file, {name!r})"
            try:
                got = solution.read_tensor(path, name)
            except ValueError as e:
                what = f"{call} ({entry['dtype']} {tuple(entry['shape'])}) raised ValueError: {e}"
                hint = (f"; this tensor is {entry['dtype']}: read it as its header says ('F16' is float16, 2 bytes "
                        "a number; 'F64' float64, 8)" if entry["dtype"] != "F32" else "")
                raise CheckFailed(what + hint) from None
            if not isinstance(got, np.ndarray):
                raise CheckFailed(f"{call} returned a {type(got).__name__}; return a numpy array")
            if got.dtype != want.dtype:
                hint = ("; safetensors stores numbers little-endian ('<f4'), and this dtype is big-endian"
                        if got.dtype == want.dtype.newbyteorder(">") else
                        ": read the bytes as that dtype, and return the numbers as stored")
                raise CheckFailed(f"{call} returned dtype {got.dtype}; the header says {entry['dtype']}, which is "
                                  f"{want.dtype}{hint}")
            if got.shape != want.shape:
                hint = ": reshape the numbers to the header's shape" if got.size == want.size else \
                    _read_hint(raw, entry, want, got)
                raise CheckFailed(f"{call} has shape {got.shape}; the header says {tuple(entry['shape'])}{hint}")
            if got.tobytes() != want.tobytes():
                raise CheckFailed(f"{call} has the right dtype and shape but other numbers: {got.ravel()[:3]} ... "
                                  f"instead of {want.ravel()[:3]} ...{_read_hint(raw, entry, want, got)}")


CHECKS = [("params_from_config", check_params_from_config), ("kv_cache_bytes", check_kv_cache_bytes),
          ("read_tensor", check_read_tensor)]
