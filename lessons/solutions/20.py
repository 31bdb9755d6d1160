"""Lesson 20 exercises: reference solutions."""
import json
from pathlib import Path

import numpy as np

DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2"}          # safetensors stores numbers little-endian


def params_from_config(config: dict) -> int:
    """Embedding, blocks of 2 d d_q + 2 d d_kv + 3 d d_ff + 2d (d_q = H d_head: d unless head_dim says otherwise),
    the final norm, and the head unless tied."""
    d, H = config["hidden_size"], config["num_attention_heads"]
    H_kv = config.get("num_key_value_heads", H)                # absent: one KV head per query head
    d_head = config.get("head_dim", d // H)                    # absent: hidden_size / num_attention_heads
    d_q, d_kv = H * d_head, H_kv * d_head
    block = 2 * d * d_q + 2 * d * d_kv + 3 * d * config["intermediate_size"] + 2 * d
    V = config["vocab_size"]
    head = 0 if config.get("tie_word_embeddings", False) else V * d
    return V * d + config["num_hidden_layers"] * block + d + head


def kv_cache_bytes(config: dict, tokens: int, bytes_per_element: int) -> int:
    """K and V, per layer, per KV head, per position: 2 n_layers n_kv d_head tokens bytes."""
    d, H = config["hidden_size"], config["num_attention_heads"]
    H_kv = config.get("num_key_value_heads", H)
    d_head = config.get("head_dim", d // H)
    return 2 * config["num_hidden_layers"] * H_kv * d_head * tokens * bytes_per_element


def read_tensor(path: Path, name: str) -> np.ndarray:
    """8 bytes giving the header's length n, n bytes of JSON, then the data: offsets count from byte 8 + n."""
    raw = Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    entry = json.loads(raw[8:8 + n])[name]
    begin, end = entry["data_offsets"]
    data = raw[8 + n + begin:8 + n + end]
    return np.frombuffer(data, DTYPES[entry["dtype"]]).reshape(entry["shape"]).copy()
