"""Lesson 14 exercises. Fill in each function, then run:  python -m tinygrad_block check 14"""
import math

import numpy as np

import tinygrad_block as tb
from tinygrad_block import nn


def adamw_step(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, t: int, lr: float,
               betas: tuple = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.01) -> tuple:
    """AdamW's step number t (t = 1 for the first step) on the weights p with gradient g, as torch.optim.AdamW
    and tinygrad_block.optim.AdamW take it. m and v are the running averages of g and g^2 after step t - 1
    (zeros before the first step). Return (p, m, v) after the step, as numpy arrays of p's shape:
        m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2;   m_hat = m / (1 - b1^t);   v_hat = v / (1 - b2^t)
        p = p (1 - lr weight_decay) - lr m_hat / (sqrt(v_hat) + eps)"""
    raise NotImplementedError


def lr_at(step: int, lr_max: float, warmup: int, total: int, lr_min: float = 0.0) -> float:
    """The learning rate at step `step` (0, 1, 2, ...: the index of the optimizer step about to be taken):
    lr_max (step + 1) / warmup during the warmup (step < warmup); then half a cosine from lr_max at
    step = warmup down to lr_min at step = total; lr_min from step = total on."""
    raise NotImplementedError


def logit_lens(model: nn.LM, ids: tb.Tensor) -> list:
    """The logit lens of an nn.LM with an untied head (model.embed, model.layers, model.norm, model.lm_head) on
    ids (B, L): the residual stream after the embedding and after each block, each read through the model's
    final norm and unembedding. Return a list of n_layers + 1 Tensors of shape (B, L, vocab_size) (logits, not
    probabilities); the last one equals model(ids). The blocks are called as block(x)."""
    raise NotImplementedError
