"""Tiled attention with an online softmax (the idea behind FlashAttention), built from the engine's ops.

Plain attention makes the whole (L, n) score matrix, and autograd keeps it (and the softmax weights) for
backward: O(L * n) bytes per head. Tiled attention walks one block of queries against one block of keys at a
time, keeping per query only a running max m, a running sum l = sum exp(s - m) (`row_sum`) and a running output
acc = sum exp(s - m) v; when a new block raises the max, the old l and acc are rescaled by exp(m_old - m_new).
`tiled_attention` keeps only the output and logsumexp(s) = m + log l per query for backward (O(L) per head),
and its hand-derived backward recomputes each tile's weights from them, as FlashAttention does.
"""
from __future__ import annotations

import math

from ..function import Function
from ..tensor import Tensor, concat, maximum
from ..trace import no_grad
from .attention import causal_mask, repeat_kv, sdpa


def plain_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = True) -> Tensor:
    """softmax(q k^T / sqrt(d_head) + mask) v, nn.Attention's math (its `sdpa` and `causal_mask`). q: (B, H, L,
    d_head); k, v: (B, H_kv, n, d_head), n >= L keys, the queries being the last L positions (a KV cache's layout)."""
    H, n_keys = _check(q, k, v, causal, 1, 1, "plain_attention")
    k, v = repeat_kv(k, H // k.shape[1]), repeat_kv(v, H // v.shape[1])            # (B, H, n, d_head)
    L = q.shape[2]
    return sdpa(q, k, v, causal_mask(L, q.dtype, q.device, n_keys - L) if causal else None)   # (B, H, L, d_head)


def tiled_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = True, block_q: int = 64,
                    block_k: int = 64) -> Tensor:
    """plain_attention's result by blocks of block_q queries and block_k keys (the last block of each may be
    partial), keeping only O(L) per head for backward. q: (B, H, L, d_head); k, v: (B, H_kv, n, d_head)."""
    H, _ = _check(q, k, v, causal, block_q, block_k, "tiled_attention")
    k, v = repeat_kv(k, H // k.shape[1]), repeat_kv(v, H // v.shape[1])            # (B, H, n, d_head)
    return TiledAttention.apply(q, k, v, causal=causal, block_q=block_q, block_k=block_k)


def online_softmax_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, block_q: int,
                             block_k: int) -> tuple[Tensor, Tensor]:
    """The forward loop, in Tensor ops: (out (B, H, L, d_head), lse (B, H, L, 1) = logsumexp of each query's
    scores). q, k, v: (B, H, *, d_head), K/V already repeated. Under autograd, every tile it makes is kept for
    backward (O(L * n)); TiledAttention runs it without a graph and keeps only out and lse."""
    L, n_keys, scale = q.shape[2], k.shape[2], 1.0 / math.sqrt(q.shape[-1])
    outs, lses = [], []
    for i0 in range(0, L, block_q):
        qi = q[:, :, i0:i0 + block_q] * scale                                       # (B, H, bq, d_head)
        m = row_sum = acc = None
        for j0, s in _tiles(qi, k, i0, n_keys - L, causal, block_k):                 # s: (B, H, bq, bk)
            with no_grad():                                                         # the result does not depend on m
                m_new = s.max(axis=-1, keepdims=True) if m is None else maximum(m, s.max(axis=-1, keepdims=True))
            p = (s - m_new).exp()                                                   # (B, H, bq, bk)
            pv = p @ v[:, :, j0:j0 + block_k]                                       # (B, H, bq, d_head)
            if m is None:
                row_sum, acc = p.sum(axis=-1, keepdims=True), pv                     # (B, H, bq, 1), (B, H, bq, d_head)
            else:
                alpha = (m - m_new).exp()                                           # rescale the old block's sums
                row_sum, acc = alpha * row_sum + p.sum(axis=-1, keepdims=True), alpha * acc + pv
            m = m_new
        outs.append(acc / row_sum)
        lses.append(m + row_sum.log())
    return concat(outs, axis=2), concat(lses, axis=2)


def _tiles(qi: Tensor, k: Tensor, i0: int, past: int, causal: bool, block_k: int):
    """(j0, scores of query block qi (already scaled) against key block j0..j0 + bk) for every key block that
    holds a key the block's queries may see; the causal mask is added only where a tile crosses the diagonal.
    Query i sits at position past + i; key blocks wholly after the block's last query are skipped."""
    last = past + i0 + qi.shape[2] - 1                                               # the block's last query position
    for j0 in range(0, min(k.shape[2], last + 1) if causal else k.shape[2], block_k):
        kj = k[:, :, j0:j0 + block_k]                                                 # (B, H, bk, d_head)
        s = qi @ kj.mT                                                                # (B, H, bq, bk)
        if causal and j0 + kj.shape[2] - 1 > past + i0:                               # some key after the first query
            s = s + causal_mask(qi.shape[2], s.dtype, s.device, past + i0, keys=range(j0, j0 + kj.shape[2]))
        yield j0, s


class TiledAttention(Function):
    """out = softmax(q k^T / sqrt(d) + mask) v by tiles, keeping out and lse = logsumexp(scores) per query;
    backward recomputes each tile's weights P = exp(S - lse) and, with D = rowsum(dout * out):
    dV = P^T dout,  dS = P * (dout V^T - D),  dQ = dS K / sqrt(d),  dK = dS^T Q / sqrt(d).
    Its FLOPs are those of the primitives it runs, counted as they run (its own rule adds nothing)."""
    saves_output = True

    def forward(self, q, k, v, causal: bool, block_q: int, block_k: int):
        self.q, self.k, self.v, self.causal, self.blocks = q, k, v, causal, (block_q, block_k)
        with no_grad():
            out, self.lse = online_softmax_attention(q, k, v, causal, block_q, block_k)
        return out.data

    def saved_activations(self):
        return super().saved_activations() + [self.lse]      # lse is made without a graph: count it too

    def backward(self, g):                                    # g: (B, H, L, d_head)
        q, k, v, (block_q, block_k) = self.q, self.k, self.v, self.blocks
        L, n_keys, scale = q.shape[2], k.shape[2], 1.0 / math.sqrt(q.shape[-1])
        D = (g * self.out).sum(axis=-1, keepdims=True)                               # (B, H, L, 1)
        dq, dk, dv = [], {}, {}
        for i0 in range(0, L, block_q):
            qi, gi = q[:, :, i0:i0 + block_q] * scale, g[:, :, i0:i0 + block_q]   # (B, H, bq, d_head)
            lse, Di, dqi = self.lse[:, :, i0:i0 + block_q], D[:, :, i0:i0 + block_q], None
            for j0, s in _tiles(qi, k, i0, n_keys - L, self.causal, block_k):
                kj, vj = k[:, :, j0:j0 + block_k], v[:, :, j0:j0 + block_k]       # (B, H, bk, d_head)
                p = (s - lse).exp()                                                 # (B, H, bq, bk): the weights
                ds = p * (gi @ vj.mT - Di)                                          # (B, H, bq, bk): d scores
                dv[j0] = _add(dv.get(j0), p.mT @ gi)                                # (B, H, bk, d_head)
                dk[j0] = _add(dk.get(j0), ds.mT @ qi)                               # qi holds the scale already
                dqi = _add(dqi, ds @ kj)
            dq.append(dqi * scale)
        dk, dv = (concat([parts[j] for j in sorted(parts)], axis=2) for parts in (dk, dv))   # (B, H, n, d_head)
        return concat(dq, axis=2), dk, dv


def _add(total, t):
    return t if total is None else total + t


def _check(q: Tensor, k: Tensor, v: Tensor, causal: bool, block_q, block_k, op: str) -> tuple[int, int]:
    """(H, n): q (B, H, L, d), k and v (B, H_kv, n, d) with H a multiple of H_kv; causal needs n >= L."""
    if q.ndim != 4 or k.ndim != 4 or k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3] \
            or q.shape[1] % k.shape[1]:
        raise ValueError(f"{op}: expected q (B, H, L, d_head) and k, v (B, H_kv, n, d_head) with H a multiple of "
                         f"H_kv; got q {q.shape}, k {k.shape}, v {v.shape}")
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise TypeError(f"{op}: q, k, v must share one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if causal and k.shape[2] < q.shape[2]:
        raise ValueError(f"{op}: causal attention puts the {q.shape[2]} queries at the last positions of the "
                         f"{k.shape[2]} keys, so it needs n >= L; got q {q.shape}, k {k.shape}")
    for name, b in (("block_q", block_q), ("block_k", block_k)):
        if not isinstance(b, int) or isinstance(b, bool) or b < 1:
            raise ValueError(f"{op}: {name} must be a positive int; got {b!r}")
    return q.shape[1], k.shape[2]
