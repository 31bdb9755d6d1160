"""Lesson 09 exercises: reference solutions."""
import numpy as np

import tinygrad_block as tb
from tinygrad_block import nn


def post_norm_block(block: nn.TransformerBlock, x: tb.Tensor) -> tb.Tensor:
    """The norm after each residual add: the stream itself is normalised twice per block."""
    h = block.norm1(x + block.attn(x))                                    # (B, L, d_model)
    return block.norm2(h + block.ffn(h))


def input_grad_ratio(blocks: list, x: tb.Tensor, dout: tb.Tensor) -> float:
    """|dL/dx| / |dout| for L = sum(out * dout): backward(dout) gives dL/dx in x.grad."""
    x = x.detach().requires_grad_()
    out = x
    for block in blocks:
        out = block(out)
    out.backward(dout)
    return float(np.linalg.norm(x.grad.numpy()) / np.linalg.norm(dout.numpy()))


def sublayer_writes(blocks: list, x: tb.Tensor) -> list:
    """Each sublayer reads the running stream (through its norm) and its write is added to it."""
    stream, writes = x, []
    for block in blocks:
        writes.append(block.attn(block.norm1(stream)))                    # attention's write
        stream = stream + writes[-1]
        writes.append(block.ffn(block.norm2(stream)))                     # the FFN's write
        stream = stream + writes[-1]
    return writes
