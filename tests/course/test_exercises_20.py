"""Lesson 20's checkers (lessons/exercises/20.py) reject typical wrong answers, each with the reason."""
import json
from pathlib import Path

import numpy as np

from conftest import failures, solution

REF = solution(20)



def test_the_two_kv_oracles_agree():
    from conftest import course_module
    from tinygrad_block import accounting
    course = course_module()
    from tinygrad_block.nn.hf_config import config_from_hf
    grader = course.exercises_module(20)
    config = grader.CONFIGS[0][1]
    for tokens, bpe in ((7, 4), (100, 8)):
        cfg = config_from_hf(config)[1]
        assert grader._filled(config, tokens, bpe) == accounting.kv_cache_bytes(cfg, tokens, 1, bpe)


# ---------------------------------------------------------------- params_from_config
def _params(norms=True, final_norm=True, gqa=True, tied_counts=False, kv_default=None, tie_default=False,
            head=True):
    """params_from_config with one slip switched on."""
    def params_from_config(config):
        d, H = config["hidden_size"], config["num_attention_heads"]
        H_kv = config["num_key_value_heads"] if kv_default == "missing" else \
            config.get("num_key_value_heads", kv_default or H)
        d_kv = H_kv * config.get("head_dim", d // H) if gqa else d
        block = 2 * d * d + 2 * d * d_kv + 3 * d * config["intermediate_size"] + (2 * d if norms else 0)
        V = config["vocab_size"]
        tied = config.get("tie_word_embeddings", tie_default)
        lm_head = V * d if head and (tied_counts or not tied) else 0
        return V * d + config["num_hidden_layers"] * block + (d if final_norm and norms else 0) + lm_head
    return params_from_config


def test_params_without_the_norms_is_rejected():
    why = failures(20, solution(20, params_from_config=_params(norms=False)))["params_from_config"]
    assert "params_from_config(the lesson's folder) = 156,160" in why and "leaves out every norm" in why


def test_params_without_the_final_norm_is_rejected():
    why = failures(20, solution(20, params_from_config=_params(final_norm=False)))["params_from_config"]
    assert "off by -64" in why and "model.norm.weight" in why


def test_params_with_full_k_and_v_under_gqa_is_rejected():
    why = failures(20, solution(20, params_from_config=_params(gqa=False)))["params_from_config"]
    assert "the lesson's folder" in why and "32 x 64, not hidden_size x hidden_size" in why


def test_params_counting_a_tied_head_is_rejected():
    why = failures(20, solution(20, params_from_config=_params(tied_counts=True)))["params_from_config"]
    assert "Llama-3.2-1B (tied)" in why and "counted once" in why


def test_params_without_the_head_is_rejected():
    why = failures(20, solution(20, params_from_config=_params(head=False)))["params_from_config"]
    assert "leaves out lm_head.weight, vocab_size x hidden_size = 32,768" in why


def test_params_reading_a_missing_num_key_value_heads_is_rejected():
    why = failures(20, solution(20, params_from_config=_params(kv_default="missing")))["params_from_config"]
    assert "KeyError: 'num_key_value_heads'" in why and "one KV head per query head" in why


def test_params_defaulting_to_one_kv_head_is_rejected():
    why = failures(20, solution(20, params_from_config=_params(kv_default=1)))["params_from_config"]
    assert "no num_key_value_heads" in why and "one KV head per query head" in why


def test_params_reading_a_missing_head_dim_is_rejected():
    def strict(config):
        config["head_dim"]
        return REF.params_from_config(config)
    why = failures(20, solution(20, params_from_config=strict))["params_from_config"]
    assert "KeyError: 'head_dim'" in why and "hidden_size / num_attention_heads" in why


def test_params_taking_an_absent_tie_as_tied_is_rejected():
    why = failures(20, solution(20, params_from_config=_params(tie_default=True)))["params_from_config"]
    assert "TinyLlama-1.1B, no tie_word_embeddings" in why and "untied head (false)" in why


def test_params_as_a_float_is_rejected():
    as_float = lambda config: float(REF.params_from_config(config))                      # noqa: E731
    assert "return an int" in failures(20, solution(20, params_from_config=as_float))["params_from_config"]


# ---------------------------------------------------------------- kv_cache_bytes
def _kv(k_only=False, query_heads=False, one_layer=False, numbers=False, one_token=False, kv="get"):
    """kv_cache_bytes with one slip switched on."""
    def kv_cache_bytes(config, tokens, bytes_per_element):
        d, H = config["hidden_size"], config["num_attention_heads"]
        H_kv = H if query_heads else config["num_key_value_heads"] if kv == "missing" else \
            config.get("num_key_value_heads", H)
        d_head = d // H
        return ((1 if k_only else 2) * (1 if one_layer else config["num_hidden_layers"]) * H_kv * d_head
                * (1 if one_token else tokens) * (1 if numbers else bytes_per_element))
    return kv_cache_bytes


def test_kv_of_k_alone_is_rejected():
    why = failures(20, solution(20, kv_cache_bytes=_kv(k_only=True)))["kv_cache_bytes"]
    assert "kv_cache_bytes(SmolLM-135M, tokens=2,048, bytes_per_element=4) = 47,185,920" in why
    assert "the cache takes 94,371,840 bytes" in why and "the cache keeps V too" in why


def test_kv_checked_against_a_filled_cache():
    smol_only = lambda config, tokens, bpe: REF.kv_cache_bytes(config, tokens, bpe) if tokens == 2048 else 0  # noqa
    why = failures(20, solution(20, kv_cache_bytes=smol_only))["kv_cache_bytes"]
    assert "tokens=7, bytes_per_element=4) = 0" in why and "a KVCache filled by the model holds 3,584" in why


def test_kv_of_the_query_heads_is_rejected():
    why = failures(20, solution(20, kv_cache_bytes=_kv(query_heads=True)))["kv_cache_bytes"]
    assert "num_attention_heads = 9 heads" in why and "num_key_value_heads = 3 KV heads only" in why


def test_kv_of_one_layer_is_rejected():
    assert "every one of the 30 layers" in failures(20, solution(20, kv_cache_bytes=_kv(one_layer=True)))[
        "kv_cache_bytes"]


def test_kv_in_numbers_not_bytes_is_rejected():
    assert "multiply by bytes_per_element = 4" in failures(20, solution(20, kv_cache_bytes=_kv(numbers=True)))[
        "kv_cache_bytes"]


def test_kv_of_one_token_is_rejected():
    assert "the cache holds all 2,048" in failures(20, solution(20, kv_cache_bytes=_kv(one_token=True)))[
        "kv_cache_bytes"]


def test_kv_reading_a_missing_num_key_value_heads_is_rejected():
    why = failures(20, solution(20, kv_cache_bytes=_kv(kv="missing")))["kv_cache_bytes"]
    assert "Llama-2-7B" in why and "KeyError: 'num_key_value_heads'" in why


def test_kv_as_a_float_is_rejected():
    as_float = lambda config, tokens, bpe: float(REF.kv_cache_bytes(config, tokens, bpe))   # noqa: E731
    assert "return an int" in failures(20, solution(20, kv_cache_bytes=as_float))["kv_cache_bytes"]


# ---------------------------------------------------------------- read_tensor
DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2"}


def _read(start="data", order="<", as_float32=False, flat=False, upcast=False):
    """read_tensor with one slip switched on: where the offsets count from, byte order, dtype, shape."""
    def read_tensor(path, name):
        raw = Path(path).read_bytes()
        n = int.from_bytes(raw[:8], "little")
        entry = json.loads(raw[8:8 + n])[name]
        base = {"data": 8 + n, "file": 0, "header": 8, "n": n}[start]
        begin, end = entry["data_offsets"]
        dtype = np.dtype("f4" if as_float32 else DTYPES[entry["dtype"]][1:]).newbyteorder(order)
        a = np.frombuffer(raw[base + begin:base + end], dtype)
        fits = a.size == int(np.prod(entry["shape"]))
        a = a if flat is True or (flat == "where it fits" and not fits) else a.reshape(entry["shape"])
        return a.astype(np.float32) if upcast else a
    return read_tensor


def test_offsets_from_the_start_of_the_file_are_rejected():
    why = failures(20, solution(20, read_tensor=_read(start="file")))["read_tensor"]
    assert "model.embed_tokens.weight" in why and "counted from the start of the file" in why


def test_offsets_from_the_start_of_the_header_are_rejected():
    why = failures(20, solution(20, read_tensor=_read(start="header")))["read_tensor"]
    assert "counted from the start of the header" in why


def test_offsets_from_byte_n_are_rejected():
    why = failures(20, solution(20, read_tensor=_read(start="n")))["read_tensor"]
    assert "the data starts at 8 + n" in why


def test_big_endian_numbers_are_rejected():
    why = failures(20, solution(20, read_tensor=_read(order=">")))["read_tensor"]
    assert "returned dtype >f4" in why and "little-endian" in why


def test_big_endian_numbers_converted_are_rejected():
    def converted(path, name):
        return _read(order=">")(path, name).astype(REF.read_tensor(path, name).dtype)
    why = failures(20, solution(20, read_tensor=converted))["read_tensor"]
    assert "other numbers" in why and "the right bytes read big-endian" in why


def test_every_tensor_as_float32_is_rejected():
    why = failures(20, solution(20, read_tensor=_read(as_float32=True)))["read_tensor"]
    assert "input_layernorm" in why and "raised ValueError" in why and "'F16' is float16" in why


def test_every_tensor_as_float32_without_a_reshape_error_is_rejected():
    why = failures(20, solution(20, read_tensor=_read(as_float32=True, flat="where it fits")))["read_tensor"]
    assert "input_layernorm.weight') returned dtype float32; the header says F16, which is float16" in why
    assert "read the bytes as that dtype" in why


def test_a_flat_array_is_rejected():
    assert "reshape the numbers" in failures(20, solution(20, read_tensor=_read(flat=True)))["read_tensor"]


def test_numbers_converted_to_float32_are_rejected():
    why = failures(20, solution(20, read_tensor=_read(upcast=True)))["read_tensor"]
    assert "returned dtype float32" in why and "F16" in why and "as stored" in why
