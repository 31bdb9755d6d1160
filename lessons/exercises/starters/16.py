"""Lesson 16 exercises. Fill in each function, then run:  python -m tinygrad_block check 16"""
import tinygrad_block as tb
from tinygrad_block import nn


def merge_softmax_states(m1: tb.Tensor, l1: tb.Tensor, acc1: tb.Tensor, m2: tb.Tensor, l2: tb.Tensor,
                         acc2: tb.Tensor) -> tuple:
    """Merge two partial results of the online softmax, each over its own set of keys, into the result over
    both sets. For every row (a query), part i holds m_i = the largest of its scores s_j, l_i = sum_j exp(s_j - m_i)
    and acc_i = sum_j exp(s_j - m_i) v_j. Shapes: m_i and l_i (R, 1), acc_i (R, d). Return the Tensors (m, l, acc)
    of the union of the two key sets, in the same form (m the largest score of all; l and acc taken against it),
    so that acc / l = softmax(all scores) @ V. Scores can be large (700 and more): exp of a score overflows.
    tb.maximum(a, b) is the elementwise maximum."""
    raise NotImplementedError


def decode_intensity(cfg: nn.BlockConfig, context_len: int, batch: int, bytes_per_element: int) -> float:
    """Arithmetic intensity (FLOPs per byte) of one decode step of the Llama-style model cfg (SwiGLU FFN, no
    biases, an LM head of its own): `batch` sequences each add one token, which attends to context_len keys (its
    own and context_len - 1 cached). FLOPs: the step's matmul FLOPs (2 per weight per token for every projection
    of every block and for the LM head, plus per layer, per sequence, 4 x context_len x n_heads x d_head for the
    scores and the weighted sum of V). Bytes: every matmul weight, read once for the whole batch (the embedding
    table and the norm gains are not counted), plus the whole KV cache the step reads: context_len positions of
    K and V per layer, per sequence, per KV head. bytes_per_element: 2 for bf16, 4 for fp32. Fields:
    cfg.d_model, n_heads, n_kv_heads, d_head, d_ff, n_layers, vocab_size."""
    raise NotImplementedError


def decode_tokens_per_second(cfg: nn.BlockConfig, context_len: int, batch: int, peak_flops: float,
                             bandwidth: float, bytes_per_element: int) -> float:
    """The roofline's upper bound on decode speed: tokens per second that one accelerator (peak_flops FLOP/s,
    bandwidth bytes/s) produces for `batch` sequences at context_len, with the step's FLOPs and bytes defined as
    in decode_intensity. The step takes at least its FLOPs at peak and at least its bytes at full bandwidth
    (the two overlap, so the longer one decides), and gives one new token per sequence."""
    raise NotImplementedError
