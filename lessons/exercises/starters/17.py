"""Lesson 17 exercises. Fill in each function, then run:  python -m tinygrad_block check 17"""
from tinygrad_block import nn


def tp_params_per_device(cfg: nn.BlockConfig, t: int) -> int:
    """Parameters one device holds when the Llama-style model cfg (RMSNorm, SwiGLU, no biases, RoPE) is split
    over t devices by Megatron tensor parallelism: in every block, W_Q, W_K, W_V, W_gate and W_up split by
    their outputs and W_O and W_down by their inputs (each device holds 1/t of each); both norms of every block
    and the final norm whole on every device; the embedding (vocab_size x d_model) split by vocabulary rows and
    the LM head (d_model -> vocab_size) by its vocabulary outputs. With cfg.tie_embeddings the head is the
    embedding, held once. t divides n_kv_heads, d_ff and vocab_size. Fields: cfg.d_model, n_heads, n_kv_heads,
    d_head, d_ff, n_layers, vocab_size, tie_embeddings."""
    raise NotImplementedError


def zero_bytes_per_device(n_params: int, n_devices: int, stage: int) -> float:
    """Training-state bytes one device holds when n_params parameters are trained with Adam in mixed precision
    (bf16 weights 2 bytes, bf16 gradients 2, fp32 master weights and Adam's two moments 4 + 4 + 4: 16 bytes per
    parameter) on n_devices devices. stage 0: plain data parallelism (every device holds everything); stage 1
    (ZeRO-1): the 12 bytes of optimizer state divided among the devices; stage 2: the gradients too; stage 3:
    the weights too."""
    raise NotImplementedError


def training_mfu(cfg: nn.BlockConfig, batch: int, seq_len: int, step_seconds: float, n_devices: int,
                 peak_flops: float) -> float:
    """The model FLOPs utilisation (a fraction) of one training step of nn.LM(cfg) on batch sequences of seq_len
    tokens that takes step_seconds on n_devices devices of peak_flops FLOP/s each: the step's matmul FLOPs
    (forward and backward of the whole model, as this engine computes them: the full seq_len x seq_len square
    of scores in every layer; the embedding lookup costs none) over n_devices * peak_flops * step_seconds.
    Hint: tinygrad_block.accounting has closed forms for the forward and backward matmul FLOPs."""
    raise NotImplementedError
