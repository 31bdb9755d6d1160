"""Lesson 09 exercises. Fill in each function, then run:  python -m tinygrad_block check 09"""
import numpy as np

import tinygrad_block as tb
from tinygrad_block import nn


def post_norm_block(block: nn.TransformerBlock, x: tb.Tensor) -> tb.Tensor:
    """The post-norm layout (the 2017 transformer, BERT) with the modules of `block` (block.norm1, block.attn,
    block.norm2, block.ffn; call them like functions):  h = norm1(x + attn(x));  out = norm2(h + ffn(h)).
    x: (B, L, d_model). Returns (B, L, d_model)."""
    raise NotImplementedError


def input_grad_ratio(blocks: list, x: tb.Tensor, dout: tb.Tensor) -> float:
    """Run x through the blocks in order (out = blocks[-1](...blocks[0](x))), backpropagate `dout` (the gradient
    of the loss with respect to out) and return |dL/dx| / |dout|, the ratio of the Frobenius norms, as a float.
    x is given without requires_grad: make a leaf that requires it (x.detach().requires_grad_())."""
    raise NotImplementedError


def sublayer_writes(blocks: list, x: tb.Tensor) -> list:
    """What each sublayer of a stack of pre-norm blocks adds to the residual stream, in order: [attention of
    block 0, FFN of block 0, attention of block 1, ...], each a Tensor of x's shape, such that x plus all of them
    equals the stack's output. Attention reads norm1 of the stream it sees; the FFN reads norm2 of the stream
    after attention's write."""
    raise NotImplementedError
