"""KthLargest, the selection primitive behind top-k sampling: its values against numpy's sort and torch.topk, its
gradient against finite differences, its FLOP rule, its shape on the shape-only device, and what it refuses; and
top-k decoding whose compiled program does not grow with k."""
import numpy as np
import pytest
import torch
from conftest import msg

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.counting import count_flops
from tinygrad_block.function import KthLargest
from tinygrad_block.gradcheck import gradcheck


@pytest.mark.parametrize("k", [1, 2, 7, 50])
def test_the_kth_largest_of_each_row_is_numpys_sorted_row_at_k(k, device):
    a = np.random.default_rng(k).standard_normal((3, 4, 50))
    a[0, 0, :10] = 0.25                                                    # ties
    got = KthLargest.apply(tb.tensor(a, device=device), k=k)
    want = np.sort(a, axis=-1)[..., ::-1][..., k - 1:k]                    # (3, 4, 1)
    assert got.shape == (3, 4, 1)
    np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(got.numpy()[..., 0], torch.topk(torch.tensor(a), k, dim=-1).values[..., -1].numpy())


def test_its_gradient_is_finite_differences_and_ties_share_it_as_max_does():
    x = tb.tensor(np.random.default_rng(0).standard_normal((4, 9)), requires_grad=True)
    assert gradcheck(lambda t: KthLargest.apply(t, k=3), x)
    tied = tb.tensor([[1.0, 3.0, 2.0, 3.0, 0.0]], requires_grad=True)
    KthLargest.apply(tied, k=2).sum().backward()                           # the 2nd largest is 3.0, held twice
    tied_max = tied.detach().requires_grad_()
    tied_max.max(axis=-1).sum().backward()
    np.testing.assert_array_equal(tied.grad.numpy(), [[0, 0.5, 0, 0.5, 0]])
    np.testing.assert_array_equal(tied.grad.numpy(), tied_max.grad.numpy())


def test_it_counts_as_a_reduction_and_has_the_right_shape_on_the_shape_only_device():
    with count_flops() as fc:
        KthLargest.apply(tb.zeros(4, 10), k=3)
    assert fc.by_op() == {"kthlargest": 4 * 9}                               # n - 1 per row, as max
    meta = KthLargest.apply(tb.zeros(2, 5, 128000, device="meta", dtype=tb.float16), k=1000)
    assert (meta.shape, meta.dtype) == ((2, 5, 1), tb.float16)


@pytest.mark.parametrize("k", [0, 11, 2.0, True])
def test_a_k_outside_the_row_is_refused_by_name(k):
    with pytest.raises(ValueError, match=msg("kthlargest", "1..10", repr(k), "(3, 10)")):
        KthLargest.apply(tb.zeros(3, 10), k=k)


def test_a_compiled_top_k_decoder_runs_the_same_kernels_for_every_k():
    """top-k by one selection pass: the compiled decode step is the same program for k = 1 and k = vocab_size
    (k maxima one after another made it k times longer, each pass kept by the replay), and its tokens are eager's."""
    cfg = nn.preset("tiny").with_(n_layers=1, vocab_size=512, max_seq_len=16)
    model = nn.LM(cfg, generator=tb.Generator(0))
    ids = tb.randint(0, 512, (1, 3), generator=tb.Generator(1))
    sizes = {}
    for k in (1, 64, 512):
        eager, compiled = (model.generate(ids, 6, temperature=0.8, top_k=k, generator=tb.Generator(2),
                                          jit=jit).numpy() for jit in (False, True))
        np.testing.assert_array_equal(compiled, eager)
        program = model.last_decoder.compiled.program
        sizes[k] = (len(program.plain), len(program.kernels))
    assert sizes[1] == sizes[64] == sizes[512]
