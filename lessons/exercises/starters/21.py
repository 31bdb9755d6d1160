"""Lesson 21 exercises, the capstone. Choose a block variant, then fill in each function and run:
    python -m tinygrad_block check 21
The checks go in order: build_and_count, block_backward_by_hand, train_it, generate_it."""
import numpy as np

import tinygrad_block as tb
from tinygrad_block import manual, nn                    # noqa: F401  (manual: the hand-derived pairs of lesson 10)


def build() -> nn.BlockConfig:
    """Your variant of Llama's block, as an nn.BlockConfig: change at least one of layout ('post', 'parallel',
    'deep'), norm ('layer', 'rms1p'), ffn ('gelu', 'gelu_tanh', 'relu', 'geglu_tanh'), bias, qkv_bias, qk_norm,
    rope (False: learned positions), n_kv_heads (GQA, MQA), tie_embeddings or scale_embeddings (lesson 21, section 1
    lists them). Keep it small and fit for the copying task of lesson 14: vocab_size=32, max_seq_len between 19
    and 64, d_model <= 64, d_ff <= 256, n_layers <= 2; causal, one dense FFN, no LoRA."""
    raise NotImplementedError


def count_params(cfg: nn.BlockConfig) -> int:
    """The parameters of ONE block of your variant, in closed form from cfg's fields (d_model, n_heads,
    n_kv_heads, d_head, d_ff, ...): every weight matrix, bias and norm parameter it holds. The checker tries your
    config and resized copies of it, so write the formula, not a number."""
    raise NotImplementedError


def forward_flops(cfg: nn.BlockConfig, L: int) -> int:
    """The matmul FLOPs of ONE block's forward on one sequence of L tokens (a batch of one), in closed form, as
    this engine computes it (lesson 13): every projection and attention's own two matmuls. Elementwise work
    (norms, activations, softmax, biases) is not counted."""
    raise NotImplementedError


def block_backward_by_hand(x: np.ndarray, params: dict, cfg: nn.BlockConfig, dout: np.ndarray) -> tuple:
    """The backward of one block of your variant, in numpy (no autograd), put together from the sublayers'
    forward/backward pairs in tinygrad_block.manual (norms, attention, FFN) or your own; not manual's whole-block
    backward. x, dout: (B, L, d_model) float64; params: {name: array} keyed as the block's named_parameters
    ('norm1.weight', 'attn.q_proj.weight', 'ffn.up_proj.bias', ...). Run the forward keeping each pair's cache,
    then go back. Return (dx, grads): dx of x's shape, grads a dict with one array per entry of params, of its
    shape: the gradients of sum(block(x) * dout)."""
    raise NotImplementedError


def train_it(cfg: nn.BlockConfig) -> nn.LM:
    """Train an nn.LM of cfg on the copying task of lesson 14 (data.induction_batch(batch, 10, 32, generator):
    10 random tokens, then the same 10 again, the loss on the second half; train.train runs the loop) and return
    it. The checker scores it on 256 sequences it has never seen: the loss must fall below 0.25 nats (chance is
    ln 32 = 3.47), within 60 s of processor time; a few hundred steps take about 10 s."""
    raise NotImplementedError


def generate_it(model: nn.LM, ids: tb.Tensor, n: int) -> tb.Tensor:
    """Greedy generation with the KV cache, written out: ids (B, L) -> (B, L + n), the prompt then n tokens, each
    the argmax of the last position's logits (tinygrad_block.nn.decode.argmax). Make one nn.KVCache(model, B); run
    the prompt once, then each new token alone, through the model's pieces: model.embed, each block as
    block(h, offset, cache.layers[i]) with offset the position of h's first token, model.norm and the head
    (model.lm_head, or what your variant uses). Not model(ids) or model.generate: the loop is the exercise. The
    tokens must equal model.generate(ids, n, use_cache=False)'s."""
    raise NotImplementedError
