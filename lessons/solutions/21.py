"""Lesson 21 exercises: reference solutions, for one variant: a GPT-J-style parallel block (attention and the FFN
read the same input and add to it together), LayerNorm and a bias on every projection, a GELU MLP of two
matrices, and multi-query attention (one key/value head for all the query heads)."""
import numpy as np

import tinygrad_block as tb
from tinygrad_block import manual, nn
from tinygrad_block.data import induction_batch
from tinygrad_block.nn.decode import argmax
from tinygrad_block.train import Schedule, train


def build() -> nn.BlockConfig:
    """The variant, small enough to train in seconds on the copying task (vocabulary 32)."""
    return nn.BlockConfig(d_model=48, n_heads=4, n_kv_heads=1, d_ff=96, layout="parallel", norm="layer",
                          ffn="gelu", bias=True, n_layers=2, vocab_size=32, max_seq_len=32, name="parallel-mqa")


def count_params(cfg: nn.BlockConfig) -> int:
    """W_Q and W_O d x d_q, W_K and W_V d x d_kv, the MLP's two matrices, a bias on each of the six projections,
    and two LayerNorms of a gain and a shift each."""
    d, d_q, d_kv, d_ff = cfg.d_model, cfg.n_heads * cfg.d_head, cfg.n_kv_heads * cfg.d_head, cfg.d_ff
    attention = 2 * d * d_q + 2 * d * d_kv + (d_q + 2 * d_kv + d)        # weights, then the four biases
    mlp = 2 * d * d_ff + (d_ff + d)                                       # up and down, then their biases
    norms = 2 * (2 * d)                                                   # norm1 and norm2: gain and shift
    return attention + mlp + norms


def forward_flops(cfg: nn.BlockConfig, L: int) -> int:
    """2 FLOPs per weight per token for the six projections, and 2 L^2 d_head per head for q k^T and again for
    weights @ V (the whole square: this engine does not skip the masked half)."""
    d, d_q, d_kv = cfg.d_model, cfg.n_heads * cfg.d_head, cfg.n_kv_heads * cfg.d_head
    projections = 2 * L * (2 * d * d_q + 2 * d * d_kv + 2 * d * cfg.d_ff)
    attention = 2 * (2 * L * L * d_q)
    return projections + attention


def _linear(params: dict, name: str) -> manual.Linear:
    return manual.Linear(params[f"{name}.weight"], params.get(f"{name}.bias"))


def block_backward_by_hand(x: np.ndarray, params: dict, cfg: nn.BlockConfig, dout: np.ndarray) -> tuple:
    """out = x + attn(norm1(x)) + ffn(norm2(x)): run the three pairs forward, then back; x fed three paths (the
    identity, attention, the MLP), so its three gradients add."""
    a, c_norm1 = manual.layernorm_forward(x, params["norm1.weight"], params["norm1.bias"], cfg.norm_eps)
    f, c_norm2 = manual.layernorm_forward(x, params["norm2.weight"], params["norm2.bias"], cfg.norm_eps)
    attn = [_linear(params, f"attn.{p}") for p in ("q_proj", "k_proj", "v_proj", "o_proj")]
    _, c_attn = manual.attention_forward(a, *attn, cfg.n_heads, cfg.n_kv_heads, cfg.causal,
                                         cfg.rope_theta if cfg.rope else None)
    _, c_ffn = manual.ffn_forward(f, _linear(params, "ffn.up_proj"), _linear(params, "ffn.down_proj"), cfg.activation)
    d_a, g_attn = manual.attention_backward(dout, c_attn)                 # (B, L, d_model) into norm1's output
    d_f, g_ffn = manual.ffn_backward(dout, c_ffn)                         # ... and into norm2's
    dx_attn, g_norm1 = manual.layernorm_backward(d_a, c_norm1)
    dx_ffn, g_norm2 = manual.layernorm_backward(d_f, c_norm2)
    grads = manual.flatten({"norm1": g_norm1, "attn": g_attn, "norm2": g_norm2, "ffn": g_ffn})
    return dout + dx_attn + dx_ffn, grads


def train_it(cfg: nn.BlockConfig) -> nn.LM:
    """150 AdamW steps of 32 copying sequences, as lesson 14 trained its model."""
    gen = tb.Generator(0)
    model = nn.LM(cfg, generator=gen)
    train(model, lambda: induction_batch(32, 10, cfg.vocab_size, gen),
          Schedule(steps=150, lr=3e-3, warmup=10, lr_min=3e-4), progress=False)
    return model


def _logits(model: nn.LM, ids: tb.Tensor, cache: nn.KVCache) -> tb.Tensor:
    """The model's forward for ids at positions cache.length ..., each block reading and filling its own layer
    cache. This variant has RoPE, an untied head and unscaled embeddings: nothing else to add."""
    offset = cache.length                                                 # the first new position
    h = model.embed(ids)                                                  # (B, L, d_model)
    for block, layer in zip(model.layers, cache.layers):
        h = block(h, offset, layer)
    return model.lm_head(model.norm(h))                                   # (B, L, vocab_size)


def generate_it(model: nn.LM, ids: tb.Tensor, n: int) -> tb.Tensor:
    """The prompt once into the cache, then each new token alone; greedy."""
    B, cache, tokens, new = ids.shape[0], nn.KVCache(model, ids.shape[0]), ids, ids
    with tb.no_grad():
        for _ in range(n):
            new = argmax(_logits(model, new, cache)[:, -1]).reshape(B, 1)  # (B, 1)
            tokens = tb.concat([tokens, new], axis=1)                      # (B, L + i + 1)
    return tokens
