"""Lesson 09's checkers (lessons/exercises/09.py) reject typical wrong answers, each with the reason."""
import numpy as np

import tinygrad_block as tb
from conftest import failures, solution


def test_pre_norm_in_place_of_post_norm_is_rejected():
    def pre_norm(block, x):
        h = x + block.attn(block.norm1(x))
        return h + block.ffn(block.norm2(h))
    why = failures(9, solution(9, post_norm_block=pre_norm))["post_norm_block"]
    assert "that is the pre-norm layout" in why and "AFTER the residual add" in why


def test_the_norm_before_the_add_is_rejected():
    """The typical wrong post-norm: the sublayer's output normalised, then added, so the stream is never
    normalised."""
    def norm_then_add(block, x):
        h = x + block.norm1(block.attn(x))
        return h + block.norm2(block.ffn(h))
    why = failures(9, solution(9, post_norm_block=norm_then_add))["post_norm_block"]
    assert "before the add" in why and "norm1(x + attn(x))" in why


def test_swapped_norms_are_rejected():
    def swapped(block, x):
        h = block.norm2(x + block.attn(x))
        return block.norm1(h + block.ffn(h))
    assert "swapped" in failures(9, solution(9, post_norm_block=swapped))["post_norm_block"]


def test_post_norm_outside_the_graph_is_rejected():
    detached = lambda block, x: tb.tensor(solution(9).post_norm_block(block, x).numpy())   # noqa: E731
    assert "no gradient reaches x" in failures(9, solution(9, post_norm_block=detached))["post_norm_block"]


def _ratio(upstream: str = "dout", divide: bool = True, norm=np.linalg.norm):
    def ratio(blocks, x, dout):
        x = x.detach().requires_grad_()
        out = x
        for block in blocks:
            out = block(out)
        out.backward(dout if upstream == "dout" else tb.ones_like(out))
        n = norm(x.grad.numpy())
        return float(n / norm(dout.numpy())) if divide else float(n)
    return ratio


def test_the_gradient_norm_not_divided_is_rejected():
    why = failures(9, solution(9, input_grad_ratio=_ratio(divide=False)))["input_grad_ratio"]
    assert "3 pre-norm blocks" in why and "divide by |dout|" in why


def test_a_gradient_of_ones_in_place_of_dout_is_rejected():
    why = failures(9, solution(9, input_grad_ratio=_ratio(upstream="ones")))["input_grad_ratio"]
    assert "gradient of ones" in why and "out.backward(dout)" in why


def test_a_ratio_of_largest_entries_is_rejected():
    largest = lambda a: np.abs(a).max()                                                    # noqa: E731
    why = failures(9, solution(9, input_grad_ratio=_ratio(norm=largest)))["input_grad_ratio"]
    assert "another norm" in why and "Frobenius" in why


def test_writes_returned_as_partial_sums_are_rejected():
    def streams(blocks, x):
        out, stream = [], x
        for w in solution(9).sublayer_writes(blocks, x):
            stream = stream + w
            out.append(stream)
        return out
    why = failures(9, solution(9, sublayer_writes=streams))["sublayer_writes"]
    assert "attention of block 0" in why and "return the write alone" in why


def test_sublayers_fed_the_original_input_are_rejected():
    def from_x(blocks, x):
        return [w for b in blocks for w in (b.attn(b.norm1(x)), b.ffn(b.norm2(x)))]
    why = failures(9, solution(9, sublayer_writes=from_x))["sublayer_writes"]
    assert "read the stack's input x" in why


def test_an_ffn_reading_the_block_input_is_rejected():
    def ffn_reads_input(blocks, x):
        writes, stream = [], x
        for b in blocks:
            writes += [b.attn(b.norm1(stream)), b.ffn(b.norm2(stream))]
            stream = stream + writes[-2] + writes[-1]
        return writes
    why = failures(9, solution(9, sublayer_writes=ffn_reads_input))["sublayer_writes"]
    assert "FFN of block 0" in why and "after attention's write" in why
