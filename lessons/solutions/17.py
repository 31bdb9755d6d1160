"""Lesson 17 exercises: reference solutions."""
from tinygrad_block import accounting, nn


def tp_params_per_device(cfg: nn.BlockConfig, t: int) -> int:
    """1/t of every block's seven matrices, of the embedding and of an untied head; the norms whole."""
    d, d_kv = cfg.d_model, cfg.n_kv_heads * cfg.d_head
    matrices = 2 * d * d + 2 * d * d_kv + 3 * d * cfg.d_ff             # W_Q, W_O; W_K, W_V; gate, up, down
    norms = (2 * cfg.n_layers + 1) * d                                 # two per block and the final one
    vocab = (1 if cfg.tie_embeddings else 2) * cfg.vocab_size * d      # embedding, and the head unless tied
    return (cfg.n_layers * matrices + vocab) // t + norms


def zero_bytes_per_device(n_params: int, n_devices: int, stage: int) -> float:
    """2 + 2 + 12 bytes per parameter; stage s divides the optimizer state (s >= 1), gradients (s >= 2) and
    weights (s = 3) by the devices."""
    weights, grads, adam = 2 * n_params, 2 * n_params, 12 * n_params
    t = n_devices
    return weights / (t if stage >= 3 else 1) + grads / (t if stage >= 2 else 1) + adam / (t if stage >= 1 else 1)


def training_mfu(cfg: nn.BlockConfig, batch: int, seq_len: int, step_seconds: float, n_devices: int,
                 peak_flops: float) -> float:
    """The step's forward + backward matmul FLOPs over what the devices could do in that time."""
    flops = accounting.model_forward_flops(cfg, seq_len, batch) + accounting.model_backward_flops(cfg, seq_len, batch)
    return flops / (n_devices * peak_flops * step_seconds)
