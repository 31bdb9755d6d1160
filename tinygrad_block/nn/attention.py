"""Causal grouped-query attention with rotary position embeddings, built from primitive ops; with a KV cache,
the queries of this call attend to every key cached before them too."""
from __future__ import annotations

import math
import numbers

from ..backend import float32, float64, int64
from ..tensor import Tensor, arange, concat
from ..trace import no_grad, step
from .config import BlockConfig
from .layers import projection
from .module import Module


def rope_tables(n_positions: int, d_head: int, theta: float, dtype, device) -> tuple[Tensor, Tensor]:
    """cos and sin of angle[p, i] = p * theta^(-2i / d_head), i < d_head/2, each laid out twice along the
    last axis (the half-split pairing of Hugging Face Llama): shapes (n_positions, d_head). Computed once,
    in float64, without recording a graph."""
    with no_grad():
        inv_freq = (arange(0, d_head, 2, dtype=float64, device=device) * (-math.log(theta) / d_head)).exp()
        angles = arange(n_positions, dtype=float64, device=device).unsqueeze(1) * inv_freq   # (P, d_head/2)
        angles = concat([angles, angles], axis=-1)                                           # (P, d_head)
        return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate each pair (x1, x2) = (x_i, x_{i + d/2}) by its angle: (x1 cos - x2 sin, x2 cos + x1 sin), the
    half-split pairing of Hugging Face Llama (its x cos + rotate_half(x) sin). x: (B, H, L, d_head);
    cos, sin: (L, d_head), whose two halves are equal."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]                           # (B, H, L, d_head/2) each
    c, s = cos[..., :half], sin[..., :half]                         # (L, d_head/2)
    return concat([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)      # (B, H, L, d_head)


def causal_mask(L: int, dtype, backend, past: int = 0) -> Tensor:
    """(L, past + L) additive mask for L queries at positions past .. past + L - 1 and keys 0 .. past + L - 1:
    0 where key j <= query position past + i, -inf where j > past + i (the future). past = 0: the (L, L)
    lower triangle; past > 0 (a KV cache): every cached key is visible. Added to the scores, it zeroes those
    softmax weights, and its backward passes the gradient through unchanged. A constant, made directly on the
    backend like a RoPE table: no op is recorded or counted (Attention builds it once per shape)."""
    be, n = backend, past + L
    keys = be.expand(be.reshape(be.arange(0, n, 1, int64), (1, n)), (L, n))          # j, along each row
    queries = be.expand(be.reshape(be.arange(past, n, 1, int64), (L, 1)), (L, n))    # past + i, down each column
    future = be.compare(keys, queries, "greater")                                     # (L, n): j > past + i
    return Tensor._make(be.where(future, be.constant(float("-inf"), dtype), be.full((L, n), 0, dtype)), be)


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """(B, H_kv, L, d_head) -> (B, H_kv * n_rep, L, d_head): each KV head serves n_rep consecutive query
    heads. An expand, so the backward sums the group's gradients."""
    if n_rep == 1:
        return x
    B, H_kv, L, d_head = x.shape
    x = x.reshape(B, H_kv, 1, L, d_head).expand(B, H_kv, n_rep, L, d_head)   # (B, H_kv, n_rep, L, d_head)
    return x.reshape(B, H_kv * n_rep, L, d_head)                             # (B, H, L, d_head)


class Attention(Module):
    """softmax(Q K^T / sqrt(d_head) + causal mask) V, with Q, K, V, O projections, RoPE on Q and K after the
    head split, and n_kv_heads key/value heads shared by groups of query heads (MHA, GQA, MQA)."""

    def __init__(self, cfg: BlockConfig, *, generator, dtype=float32, device="cpu"):
        self.cfg = cfg
        d, d_kv = cfg.d_model, cfg.n_kv_heads * cfg.d_head
        make = dict(generator=generator, dtype=dtype, device=device)
        self.q_proj, self.k_proj = projection(cfg, "q_proj", d, d, **make), projection(cfg, "k_proj", d, d_kv, **make)
        self.v_proj, self.o_proj = projection(cfg, "v_proj", d, d_kv, **make), projection(cfg, "o_proj", d, d, **make)
        if cfg.rope:
            self.rope_cos, self.rope_sin = rope_tables(cfg.max_seq_len, cfg.d_head, cfg.rope_theta, dtype, device)
        self.last_mask = (None, None)  # ((L, past, dtype, backend), the mask): rebuilt only when its shape changes

    def forward(self, x: Tensor, offset: int = 0, cache=None) -> Tensor:   # x: (B, L, d_model)
        """Positions offset .. offset + L - 1. With `cache` (a LayerCache holding the K, V of positions
        0 .. offset - 1), this call's K and V join it, and the queries attend to all offset + L keys."""
        cfg = self.cfg
        B, L, _ = x.shape
        H, H_kv, d_head = cfg.n_heads, cfg.n_kv_heads, cfg.d_head
        self._check_positions(offset, L)
        self._check_cache(cache, offset)
        q = self.q_proj(x).reshape(B, L, H, d_head).transpose(1, 2)        # (B, H, L, d_head)
        k = self.k_proj(x).reshape(B, L, H_kv, d_head).transpose(1, 2)     # (B, H_kv, L, d_head)
        v = self.v_proj(x).reshape(B, L, H_kv, d_head).transpose(1, 2)     # (B, H_kv, L, d_head)
        if cfg.rope:
            with step("rope"):
                cos, sin = self.rope_cos[offset:offset + L], self.rope_sin[offset:offset + L]   # (L, d_head)
                q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.append(k, v)                                     # (B, H_kv, offset + L, d_head)
        with step("repeat kv"):
            k, v = repeat_kv(k, H // H_kv), repeat_kv(v, H // H_kv)       # (B, H, n, d_head), n keys
        with step("scores"):
            scores = (q / math.sqrt(d_head)) @ k.mT                       # (B, H, L, n): q k^T / sqrt(d_head)
        if cfg.causal:
            with step("mask"):
                scores = scores + self.mask(L, scores, k.shape[2] - L)    # -inf where a key is in the future
        with step("softmax"):
            weights = scores.softmax(axis=-1)                             # (B, H, L, n)
        with step("weighted sum"):
            out = weights @ v                                             # (B, H, L, d_head)
        out = out.transpose(1, 2).reshape(B, L, H * d_head)               # (B, L, d_model): heads merged
        return self.o_proj(out)

    def mask(self, L: int, like: Tensor, past: int = 0) -> Tensor:
        """The causal mask for L queries after `past` cached positions, in `like`'s dtype and device: built on
        first use, then reused while the shape stays the same (one mask is kept: a model run at many lengths
        does not hoard L x L tables)."""
        key = (L, past, like.dtype, like.backend)
        if self.last_mask[0] != key:
            self.last_mask = (key, causal_mask(L, like.dtype, like.backend, past))
        return self.last_mask[1]

    def _check_positions(self, offset, L: int) -> None:
        """Positions offset .. offset + L - 1 must lie in the RoPE table (the context length)."""
        if not isinstance(offset, numbers.Integral) or isinstance(offset, bool):
            raise TypeError(f"Attention: offset is the position of the first token, an int; got {offset!r}")
        if offset < 0 or offset + L > self.cfg.max_seq_len:
            raise ValueError(f"Attention: positions {offset}..{offset + L - 1} (offset {offset}, L {L}) must lie in "
                             f"0..{self.cfg.max_seq_len - 1}, the context length max_seq_len={self.cfg.max_seq_len}")

    def _check_cache(self, cache, offset: int) -> None:
        """A cache must hold exactly the positions before this call's first, 0 .. offset - 1, and the keys a
        query sees must all lie before it: so only causal attention can cache."""
        if cache is None:
            return
        if not self.cfg.causal:
            raise ValueError("Attention: a KV cache needs causal attention (cfg.causal=True): without the mask, "
                             "earlier tokens would attend to later ones, which the cache has not seen")
        if cache.length != offset:
            raise ValueError(f"Attention: the KV cache holds {cache.length} positions, but this call starts at offset "
                             f"{offset}; the offset must equal the cached length")
