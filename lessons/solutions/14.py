"""Lesson 14 exercises: reference solutions."""
import math

import numpy as np

import tinygrad_block as tb
from tinygrad_block import nn


def adamw_step(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, t: int, lr: float,
               betas: tuple = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.01) -> tuple:
    """The two running averages, their bias corrections, then the decoupled decay and Adam's step."""
    b1, b2 = betas
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    m_hat, v_hat = m / (1 - b1 ** t), v / (1 - b2 ** t)
    p = p * (1 - lr * weight_decay) - lr * m_hat / (np.sqrt(v_hat) + eps)
    return p, m, v


def lr_at(step: int, lr_max: float, warmup: int, total: int, lr_min: float = 0.0) -> float:
    """Linear warmup to lr_max, half a cosine down to lr_min at step `total`, then lr_min."""
    if step < warmup:
        return lr_max * (step + 1) / warmup
    if step >= total:
        return lr_min
    x = (step - warmup) / (total - warmup)                             # 0 .. 1 through the cosine
    return lr_min + (lr_max - lr_min) * (1 + math.cos(math.pi * x)) / 2


def logit_lens(model: nn.LM, ids: tb.Tensor) -> list:
    """The stream after the embedding and after each block, each through the final norm and the head."""
    stream = model.embed(ids)                                          # (B, L, d_model)
    stages = [model.lm_head(model.norm(stream))]                       # (B, L, vocab_size)
    for block in model.layers:
        stream = block(stream)
        stages.append(model.lm_head(model.norm(stream)))
    return stages
