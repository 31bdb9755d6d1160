"""nn/tiled.py: tiled attention with an online softmax equals plain attention (nn.Attention's math, itself checked
against PyTorch's scaled_dot_product_attention) to 1e-12 in float64, values and gradients, for any L, key count
and block sizes, causal or not, MHA/GQA/MQA; its hand-derived backward agrees with finite differences; the
bytes it keeps for backward grow as L against plain attention's L^2 (count_saved_bytes, beside a hand count);
and its matmul FLOPs match a count of the tiles it visits.
"""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import LLAMA, rel_err

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.counting import count_flops, count_saved_bytes
from tinygrad_block.gradcheck import gradcheck
from tinygrad_block.nn.tiled import online_softmax_attention, plain_attention, tiled_attention

F64 = tb.float64


def qkv(B, H, H_kv, L, n, d, seed=0):
    r = np.random.default_rng(seed)
    return tuple(tb.tensor(r.standard_normal(s), dtype=F64, requires_grad=True)
                 for s in ((B, H, L, d), (B, H_kv, n, d), (B, H_kv, n, d)))


def grads(fn, q, k, v, g):
    """fn(q, k, v) and d sum(fn * g) / d (q, k, v), as numpy arrays."""
    for t in (q, k, v):
        t.grad = None
    out = fn(q, k, v)
    out.backward(g)
    return out.numpy(), [t.grad.numpy() for t in (q, k, v)]


SHAPES = [  # (B, H, H_kv, L, n, d_head, block_q, block_k)
    (2, 4, 2, 7, 7, 3, 2, 3),     # GQA, partial last blocks of both kinds
    (1, 2, 2, 5, 9, 4, 2, 4),     # MHA, 4 cached keys before the 5 queries
    (1, 4, 1, 6, 6, 2, 6, 6),     # MQA, one block of each
    (1, 1, 1, 9, 9, 2, 1, 1),     # one query against one key at a time
    (1, 2, 1, 4, 11, 3, 64, 5),   # blocks larger than L
]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_tiled_equals_plain_values_and_gradients(shape, causal):
    B, H, H_kv, L, n, d, bq, bk = shape
    q, k, v = qkv(B, H, H_kv, L, n, d)
    g = tb.tensor(np.random.default_rng(1).standard_normal((B, H, L, d)), dtype=F64)
    want, want_grads = grads(lambda *a: plain_attention(*a, causal=causal), q, k, v, g)
    got, got_grads = grads(lambda *a: tiled_attention(*a, causal=causal, block_q=bq, block_k=bk), q, k, v, g)
    assert rel_err(got, want) <= 1e-12 and np.abs(got - want).max() <= 1e-12
    for mine, theirs in zip(got_grads, want_grads):
        assert rel_err(mine, theirs) <= 1e-12, rel_err(mine, theirs)


@pytest.mark.parametrize("causal", [True, False])
def test_plain_attention_equals_torch_sdpa(causal):
    """The reference itself against PyTorch: GQA by repeat_interleave, the queries at the last L of n positions."""
    B, H, H_kv, L, n, d = 2, 4, 2, 5, 8, 3
    q, k, v = qkv(B, H, H_kv, L, n, d)
    g = np.random.default_rng(1).standard_normal((B, H, L, d))
    out, ours = grads(lambda *a: plain_attention(*a, causal=causal), q, k, v, tb.tensor(g, dtype=F64))
    tq, tk, tv = (torch.tensor(t.numpy(), requires_grad=True) for t in (q, k, v))
    allowed = torch.arange(n)[None, :] <= torch.arange(n - L, n)[:, None] if causal else None   # (L, n)
    ref = F.scaled_dot_product_attention(tq, tk.repeat_interleave(H // H_kv, 1), tv.repeat_interleave(H // H_kv, 1),
                                         attn_mask=allowed)
    ref.backward(torch.tensor(g))
    assert rel_err(out, ref.detach().numpy()) <= 1e-12
    for mine, t in zip(ours, (tq, tk, tv)):
        assert rel_err(mine, t.grad.numpy()) <= 1e-12


def test_tiled_inside_nn_attention_gives_its_output():
    """nn.Attention's own projections and RoPE, with tiled_attention in place of its scores-softmax-sum core."""
    cfg = LLAMA
    attn = nn.Attention(cfg, generator=tb.Generator(0), dtype=F64)
    B, L = 2, 11
    x = tb.randn(B, L, cfg.d_model, generator=tb.Generator(1), dtype=F64)
    q = attn.q_proj(x).reshape(B, L, cfg.n_heads, cfg.d_head).transpose(1, 2)        # (B, H, L, d_head)
    k = attn.k_proj(x).reshape(B, L, cfg.n_kv_heads, cfg.d_head).transpose(1, 2)     # (B, H_kv, L, d_head)
    v = attn.v_proj(x).reshape(B, L, cfg.n_kv_heads, cfg.d_head).transpose(1, 2)
    cos, sin = attn.rope_cos[:L], attn.rope_sin[:L]
    q, k = nn.apply_rope(q, cos, sin), nn.apply_rope(k, cos, sin)
    out = tiled_attention(q, k, v, block_q=4, block_k=3).transpose(1, 2).reshape(B, L, cfg.d_model)
    assert rel_err(attn.o_proj(out).numpy(), attn(x).numpy()) <= 1e-12


@pytest.mark.parametrize("causal", [True, False])
def test_hand_backward_equals_finite_differences(causal):
    q, k, v = qkv(1, 2, 1, 5, 6, 3, seed=2)
    assert gradcheck(lambda q, k, v: tiled_attention(q, k, v, causal=causal, block_q=2, block_k=4), q, k, v)


def test_tiled_runs_on_the_shape_only_device():
    q, k, v = (t.detach().to("meta") for t in qkv(1, 4, 2, 8, 8, 4))
    assert tiled_attention(q, k, v, block_q=3, block_k=3).shape == (1, 4, 8, 4)


# ------------------------------------------------------------------ saved bytes: O(L) against O(L^2)
def saved(fn, L, d=8, block=16):
    q, k, v = qkv(1, 1, 1, L, L, d)
    with count_saved_bytes() as sb:
        fn(q, k, v, block)
    return sb.total()


PLAIN = lambda q, k, v, b: plain_attention(q, k, v)                                       # noqa: E731
TILED = lambda q, k, v, b: tiled_attention(q, k, v, block_q=b, block_k=b)                 # noqa: E731
LOOP = lambda q, k, v, b: online_softmax_attention(q, k, v, True, b, b)[0]                # noqa: E731


def test_saved_bytes_by_hand():
    """Per head, q, k, v being inputs (not activations): plain keeps the exp of the scores and the softmax
    weights, (L, n) each, plus q / sqrt(d) (L, d) and the row sums (L, 1); tiled keeps the output (L, d) and
    logsumexp (L, 1). Measured = hand count exactly, 8 bytes an element."""
    for L, d in ((32, 8), (48, 4)):
        assert saved(PLAIN, L, d) == 8 * (2 * L * L + L * d + L)
        assert saved(TILED, L, d) == 8 * (L * d + L)


def test_saved_bytes_grow_as_L_for_tiled_and_L_squared_for_plain():
    plain, tiled, loop = ([saved(f, L) for L in (32, 64, 128)] for f in (PLAIN, TILED, LOOP))
    assert tiled[1] == 2 * tiled[0] and tiled[2] == 2 * tiled[1]        # doubling L doubles it exactly
    assert 3.5 < plain[1] / plain[0] < 4 and 3.7 < plain[2] / plain[1] < 4   # -> 4: the L^2 terms dominate
    # autograd through the same loop keeps every tile it made: about half of L^2 (the causal tiles), growing
    # towards 4x per doubling. That is why tiled_attention keeps only out and lse and recomputes the tiles.
    assert loop[2] / loop[1] > 3 and loop[2] > 8 * tiled[2]


# ------------------------------------------------------------------ FLOPs
def visited_area(L, n, bq, bk, causal):
    """Score entries in the tiles the loop visits: a query block at positions p0..p1 visits the key blocks
    that start at or before p1 (all of them without a mask)."""
    area = 0
    for i0 in range(0, L, bq):
        last = n - L + min(i0 + bq, L) - 1
        for j0 in range(0, n, bk):
            if not causal or j0 <= last:
                area += (min(i0 + bq, L) - i0) * (min(j0 + bk, n) - j0)
    return area


@pytest.mark.parametrize("L, n, d, bq, bk, causal", [(16, 16, 4, 4, 4, True), (16, 16, 4, 4, 4, False),
                                                     (6, 9, 4, 4, 2, True), (10, 10, 2, 3, 4, True)])
def test_matmul_flops_follow_the_visited_tiles(L, n, d, bq, bk, causal):
    """Forward: two matmuls per tile (q k^T and p v), 2 * 2 * d FLOPs per score entry: 4 d A with A the visited
    area, against plain attention's 4 d L n. Backward: five per tile (the scores recomputed, dV, dP, dQ, dK),
    10 d A, against plain's four (dP, dV, dQ, dK), 8 d L n."""
    q, k, v = qkv(1, 1, 1, L, n, d)
    g = tb.tensor(np.ones((1, 1, L, d)), dtype=F64)
    area = visited_area(L, n, bq, bk, causal)
    for fn, fwd, bwd in ((lambda: tiled_attention(q, k, v, causal, bq, bk), 4 * d * area, 10 * d * area),
                         (lambda: plain_attention(q, k, v, causal), 4 * d * L * n, 8 * d * L * n)):
        with count_flops() as fc:
            fn().backward(g)
        assert (fc.total("forward", matmul_only=True), fc.total("backward", matmul_only=True)) == (fwd, bwd)
    if causal and L == n and L % bq == 0 and bq == bk:       # T x T square tiles: the T(T+1)/2 on or below the diagonal
        T = L // bq
        assert area == bq * bq * T * (T + 1) // 2


# ------------------------------------------------------------------ errors
def test_errors_name_the_op_and_shapes():
    q, k, v = qkv(1, 4, 2, 5, 5, 3)
    with pytest.raises(ValueError, match=r"tiled_attention: block_q must be a positive int; got 0"):
        tiled_attention(q, k, v, block_q=0)
    with pytest.raises(ValueError, match=r"tiled_attention: expected q .* got q \(1, 4, 5, 3\), k \(1, 3, 5, 3\)"):
        tiled_attention(q, *qkv(1, 3, 3, 5, 5, 3)[1:])
    q6 = qkv(1, 4, 2, 6, 5, 3)[0]
    with pytest.raises(ValueError, match=r"plain_attention: causal attention .* needs n >= L"):
        plain_attention(q6, k, v)
    assert math.isfinite(tiled_attention(q6, k, v, causal=False, block_q=4).numpy().sum())
