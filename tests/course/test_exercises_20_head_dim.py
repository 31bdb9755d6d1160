"""Lesson 20's params_from_config checker on a model whose head_dim is not hidden_size / num_attention_heads."""
from conftest import failures, solution


def _square_q(config):
    """params_from_config taking q_proj and o_proj as hidden_size x hidden_size whatever head_dim says."""
    d, H = config["hidden_size"], config["num_attention_heads"]
    H_kv, d_head = config.get("num_key_value_heads", H), config.get("head_dim", d // H)
    block = 2 * d * d + 2 * d * H_kv * d_head + 3 * d * config["intermediate_size"] + 2 * d
    V = config["vocab_size"]
    head = 0 if config.get("tie_word_embeddings", False) else V * d
    return V * d + config["num_hidden_layers"] * block + d + head


def test_q_and_o_of_hidden_size_squared_are_rejected_when_head_dim_differs():
    """Qwen3-0.6B's shape: 16 heads of 128 in 1024, so q_proj and o_proj are 2048 x 1024 each; counting them as
    1024 x 1024 misses 28 layers x 2 x 1024 x 1024 = 58,720,256 parameters."""
    why = failures(20, solution(20, params_from_config=_square_q))["params_from_config"]
    assert "Qwen3-0.6B's shape" in why and "off by -58,720,256" in why
    assert "(num_attention_heads x head_dim) x hidden_size = 2,048 x 1,024" in why
