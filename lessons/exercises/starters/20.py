"""Lesson 20 exercises. Fill in each function, then run:  python -m tinygrad_block check 20"""
from pathlib import Path

import numpy as np


def params_from_config(config: dict) -> int:
    """The number of parameters of the Llama-shaped model (RMSNorm, SwiGLU FFN, RoPE, no biases) that a
    config.json describes: config is the file's object as a dict, with Hugging Face's field names (hidden_size,
    intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, vocab_size,
    tie_word_embeddings). Count every tensor the checkpoint holds: the embedding, each block's attention
    projections, FFN matrices and two norm gains, the final norm, and the LM head unless it is tied to the
    embedding. A published config may leave out num_key_value_heads, head_dim and tie_word_embeddings: read
    each with the value the library takes when it is absent."""
    raise NotImplementedError


def kv_cache_bytes(config: dict, tokens: int, bytes_per_element: int) -> int:
    """The bytes of the KV cache that `tokens` positions of one sequence fill in the model the config.json dict
    describes (the fields as in params_from_config), every number stored in bytes_per_element bytes (2 for
    bfloat16, 4 for float32)."""
    raise NotImplementedError


def read_tensor(path: Path, name: str) -> np.ndarray:
    """The tensor `name` of the safetensors file at `path`, read by hand from the file's bytes (no library that
    reads safetensors): a numpy array of the dtype the header gives ('F32', 'F16' or 'F64': float32, float16,
    float64) and its shape, equal to the array that was written."""
    raise NotImplementedError
