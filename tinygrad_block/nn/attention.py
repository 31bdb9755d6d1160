"""Causal grouped-query attention with rotary position embeddings, built from primitive ops; with a KV cache,
the queries of this call attend to every key cached before them too."""
from __future__ import annotations

import math
import numbers

from ..dtypes import float32, float64
from ..tensor import Tensor, arange, concat, tensor, where, zeros
from ..trace import constant, no_grad, step
from .cache import LayerCache, StaticLayerCache
from .config import BlockConfig
from .layers import RMSNorm, projection
from .module import Module


def rope_frequencies(d_head: int, theta: float, scaling: tuple = (), device="cpu") -> Tensor:
    """inv_freq[i] = 1 / theta^(2i / d_head), i < d_head/2 (radians per token of pair i), scaled as `scaling`
    says (BlockConfig.rope_scaling): (d_head/2,) float64. Computed as Hugging Face transformers does, in its
    order (modeling_rope_utils, ROPE_INIT_FUNCTIONS), in Python floats; neither kind rescales cos and sin."""
    inv_freq = [1.0 / theta ** (i / d_head) for i in range(0, d_head, 2)]
    return tensor([scaled_frequency(f, scaling) for f in inv_freq], dtype=float64, device=device)


def scaled_frequency(inv_freq: float, scaling: tuple = ()) -> float:
    """One pair's frequency under RoPE scaling. ('linear', s): inv_freq / s (positions slowed s times).
    ('llama3', s, low, high, n_old) with wavelength w = 2 pi / inv_freq: w < n_old / high keeps inv_freq (fast
    pairs, already many turns within the old context); w > n_old / low divides it by s; in between, the
    mixture (1 - a) inv_freq / s + a inv_freq, a = (n_old / w - low) / (high - low) (a goes 0 -> 1)."""
    if not scaling:
        return inv_freq
    if scaling[0] == "linear":
        return inv_freq / scaling[1]
    _, factor, low, high, old_context = scaling
    wavelength = 2 * math.pi / inv_freq
    if wavelength < old_context / high:
        return inv_freq
    if wavelength > old_context / low:
        return inv_freq / factor
    smooth = (old_context / wavelength - low) / (high - low)
    return (1 - smooth) * inv_freq / factor + smooth * inv_freq


def rope_tables(n_positions: int, d_head: int, theta: float, dtype, device,
                scaling: tuple = ()) -> tuple[Tensor, Tensor]:
    """cos and sin of angle[p, i] = p * inv_freq[i] (rope_frequencies: theta^(-2i / d_head), scaled as
    `scaling` says), each laid out twice along the last axis (the half-split pairing of Hugging Face Llama):
    shapes (n_positions, d_head). Computed once, in float64, without recording a graph."""
    with no_grad():
        inv_freq = rope_frequencies(d_head, theta, scaling, device)                          # (d_head/2,)
        angles = arange(n_positions, dtype=float64, device=device).unsqueeze(1) * inv_freq   # (P, d_head/2)
        angles = concat([angles, angles], axis=-1)                                           # (P, d_head)
        return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate each pair (x1, x2) = (x_i, x_{i + d/2}) by its angle: (x1 cos - x2 sin, x2 cos + x1 sin), the
    half-split pairing of Hugging Face Llama (its x cos + rotate_half(x) sin). x: (B, H, L, d_head);
    cos, sin: (L, d_head), whose two halves are equal, or their first halves alone, (L, d_head/2)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]                           # (B, H, L, d_head/2) each
    c, s = cos[..., :half], sin[..., :half]                         # (L, d_head/2)
    return concat([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)      # (B, H, L, d_head)


def causal_mask(L: int, dtype, device, past: int = 0, keys: range | None = None) -> Tensor:
    """(L, n) additive mask for L queries at positions past .. past + L - 1 and the n keys at positions `keys`
    (by default range(past + L), n = past + L: every key up to the last query): 0 where key j <= query position
    past + i, -inf where j > past + i (the future). past = 0: the (L, L) lower triangle; past > 0 (a KV cache):
    every cached key is visible; a tile of tiled attention passes its own key range. Added to the scores, it
    zeroes those softmax weights, and its backward passes the gradient through unchanged. A constant, like a
    RoPE table: built under `constant()`, so no op is recorded, counted or drawn (Attention builds it once per
    shape)."""
    keys = range(past + L) if keys is None else keys
    with constant():
        key_at = arange(keys.start, keys.stop, device=device).reshape(1, len(keys))   # (1, n): j along each row
        query_at = arange(past, past + L, device=device).reshape(L, 1)                # (L, 1): past + i down a column
        return where(key_at > query_at, float("-inf"), zeros(L, len(keys), dtype=dtype, device=device))   # (L, n)


def sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
    """Scaled dot-product attention, softmax(q k^T / sqrt(d_head) + mask) v, in its four named steps ('scores',
    'mask', 'softmax', 'weighted sum': the graphs and FLOP tables group by them). q: (B, H, L, d_head);
    k, v: (B, H, n, d_head), one KV head per query head (repeat_kv first); mask: (L, n) additive, or None."""
    with step("scores"):
        scores = (q / math.sqrt(q.shape[-1])) @ k.mT                  # (B, H, L, n): q k^T / sqrt(d_head)
    if mask is not None:
        with step("mask"):
            scores = scores + mask                                      # -inf where a key is in the future
    with step("softmax"):
        weights = scores.softmax(axis=-1)                               # (B, H, L, n)
    with step("weighted sum"):
        return weights @ v                                              # (B, H, L, d_head)


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """(B, H_kv, L, d_head) -> (B, H_kv * n_rep, L, d_head): each KV head serves n_rep consecutive query
    heads. An expand, so the backward sums the group's gradients."""
    if n_rep == 1:
        return x
    B, H_kv, L, d_head = x.shape
    x = x.reshape(B, H_kv, 1, L, d_head).expand(B, H_kv, n_rep, L, d_head)   # (B, H_kv, n_rep, L, d_head)
    return x.reshape(B, H_kv * n_rep, L, d_head)                             # (B, H, L, d_head)


class Attention(Module):
    """softmax(Q K^T / sqrt(d_head) + causal mask) V, with Q, K, V, O projections (Q: d_model -> n_heads d_head,
    K, V: d_model -> n_kv_heads d_head, O: n_heads d_head -> d_model; n_heads d_head = d_model unless the config's
    head_dim says otherwise), RoPE on Q and K after the head split, and n_kv_heads key/value heads shared by
    groups of query heads (MHA, GQA, MQA). With cfg.qk_norm (Qwen3), each head's q and k pass an RMSNorm over
    d_head (q_norm, k_norm: one gain each, shared by every head) between the head split and RoPE."""

    def __init__(self, cfg: BlockConfig, *, generator, dtype=float32, device="cpu"):
        self.cfg = cfg
        d, d_q, d_kv = cfg.d_model, cfg.n_heads * cfg.d_head, cfg.n_kv_heads * cfg.d_head   # d_q = d unless head_dim
        make = dict(generator=generator, dtype=dtype, device=device)
        self.q_proj, self.k_proj = projection(cfg, "q_proj", d, d_q, **make), projection(cfg, "k_proj", d, d_kv, **make)
        self.v_proj, self.o_proj = projection(cfg, "v_proj", d, d_kv, **make), projection(cfg, "o_proj", d_q, d, **make)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(cfg.d_head, cfg.norm_eps, dtype=dtype, device=device)
            self.k_norm = RMSNorm(cfg.d_head, cfg.norm_eps, dtype=dtype, device=device)
        self.make_rope_tables(dtype, device)
        self.last_mask = (None, None)  # ((L, past, dtype, device), the mask): rebuilt only when its shape changes

    def make_rope_tables(self, dtype, device) -> None:
        """Build rope_cos and rope_sin, (max_seq_len, d_head) constants in `dtype` on `device`, as the config
        says (theta, scaling); nothing without RoPE. A model built on 'meta' calls it again once real weights
        are in place (the checkpoint loader)."""
        cfg = self.cfg
        if cfg.rope:
            self.rope_cos, self.rope_sin = rope_tables(cfg.max_seq_len, cfg.d_head, cfg.rope_theta, dtype, device,
                                                       cfg.rope_scaling)

    def forward(self, x: Tensor, offset: int | Tensor = 0, cache=None) -> Tensor:   # x: (B, L, d_model)
        """Positions offset .. offset + L - 1. With `cache` (a LayerCache holding the K, V of positions
        0 .. offset - 1), this call's K and V join it, and the queries attend to all offset + L keys. With a
        StaticLayerCache, `offset` is the tensor of the L positions (StaticKVCache.start): K and V are written into
        its buffers at those slots, in place, and the queries attend to all max_len slots, those after their
        position masked."""
        cfg = self.cfg
        B, L, _ = x.shape
        H, H_kv, d_head = cfg.n_heads, cfg.n_kv_heads, cfg.d_head
        self._check_positions(offset, L)
        self._check_cache(cache, offset)
        q_norm, k_norm = (self.q_norm, self.k_norm) if cfg.qk_norm else (None, None)
        q = self.split_heads(self.q_proj(x), H, q_norm)                    # (B, H, L, d_head)
        k = self.split_heads(self.k_proj(x), H_kv, k_norm)                 # (B, H_kv, L, d_head)
        v = self.split_heads(self.v_proj(x), H_kv)                         # (B, H_kv, L, d_head)
        if cfg.rope and isinstance(cache, StaticLayerCache):
            with step("rope"):                                            # q and k rotated in one go
                qk = apply_rope(concat([q, k], axis=1), *cache.rope)       # (B, H + H_kv, L, d_head)
                q, k = qk[:, :H], qk[:, H:]
        elif cfg.rope:
            with step("rope"):
                cos, sin = self.rope_at(offset, L)                         # (L, d_head)
                q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if isinstance(cache, StaticLayerCache):
            return self.o_proj(self.attend_static(q, k, v, cache))
        if cache is not None:
            k, v = cache.append(k, v)                                     # (B, H_kv, offset + L, d_head)
        with step("repeat kv"):
            k, v = repeat_kv(k, H // H_kv), repeat_kv(v, H // H_kv)       # (B, H, n, d_head), n keys
        mask = self.mask(L, q, k.shape[2] - L) if cfg.causal else None   # (L, n): -inf where a key is in the future
        out = sdpa(q, k, v, mask)                                         # (B, H, L, d_head)
        out = out.transpose(1, 2).reshape(B, L, H * d_head)               # (B, L, H d_head): heads merged
        return self.o_proj(out)

    def attend_static(self, q: Tensor, k: Tensor, v: Tensor, cache: StaticLayerCache) -> Tensor:
        """Attention over a static cache's buffers, once k and v (B, H_kv, L, d_head) are written into their slots.
        The queries are grouped by KV head instead of the keys repeated per query head, so the max_len slots are never
        copied: q (B, H, L, d_head) -> (B, H_kv, n_rep L, d_head) (query heads g n_rep .. g n_rep + n_rep - 1 use
        KV head g). Returns (B, L, H d_head), heads merged."""
        B, H, L, d_head = q.shape
        H_kv = self.cfg.n_kv_heads
        k, v = cache.write(k, v)                                           # (B, H_kv, max_len, d_head)
        grouped = q.reshape(B, H_kv, H // H_kv * L, d_head)                # (B, H_kv, n_rep L, d_head)
        out = sdpa(grouped, k, v, cache.mask)                              # (B, H_kv, n_rep L, d_head)
        if L == 1:                                                         # one token: the heads are in order
            return out.reshape(B, 1, H * d_head)                           # (B, 1, H d_head)
        return out.reshape(B, H, L, d_head).transpose(1, 2).reshape(B, L, H * d_head)   # (B, L, H d_head)

    def split_heads(self, t: Tensor, n_heads: int, norm: RMSNorm | None = None) -> Tensor:
        """(B, L, n_heads * d_head) -> (B, n_heads, L, d_head); `norm` (q_norm or k_norm, Qwen3's QK-norm)
        normalises each head's vector over d_head on the way."""
        B, L, _ = t.shape
        t = t.reshape(B, L, n_heads, self.cfg.d_head)                      # (B, L, n_heads, d_head)
        if norm is not None:
            with step("qk norm"):
                t = norm(t)
        return t.transpose(1, 2)                                           # (B, n_heads, L, d_head)

    def rope_at(self, offset: int | Tensor, L: int) -> tuple[Tensor, Tensor]:
        """cos and sin of positions offset .. offset + L - 1, (L, d_head) each: rows sliced for an int offset,
        looked up for a tensor of positions (the lookup is data, so a compiled step replays at any position)."""
        if isinstance(offset, Tensor):
            return self.rope_cos[offset], self.rope_sin[offset]
        return self.rope_cos[offset:offset + L], self.rope_sin[offset:offset + L]

    def mask(self, L: int, like: Tensor, past: int = 0) -> Tensor:
        """The causal mask for L queries after `past` cached positions, in `like`'s dtype and device: built on
        first use, then reused while the shape stays the same (one mask is kept: a model run at many lengths
        does not hoard L x L tables)."""
        key = (L, past, like.dtype, like.device)
        if self.last_mask[0] != key:
            self.last_mask = (key, causal_mask(L, like.dtype, like.device, past))
        return self.last_mask[1]

    def _check_positions(self, offset, L: int) -> None:
        """Positions offset .. offset + L - 1 must lie in the RoPE table (the context length). A tensor of
        positions is checked by its lookup in the table, when it runs."""
        if isinstance(offset, Tensor):
            if offset.shape != (L,) or offset.dtype.kind not in "iu":
                raise TypeError(f"Attention: a tensor offset holds the positions of the L={L} tokens, (L,) integers; "
                                f"got {offset.dtype} {offset.shape}")
            return
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
        if isinstance(cache, StaticLayerCache) != isinstance(offset, Tensor):
            raise TypeError("Attention: a StaticLayerCache takes the tensor of positions that StaticKVCache.start "
                            f"gives as its offset, and only it does; got {type(offset).__name__} with "
                            f"{type(cache).__name__}")
        if isinstance(cache, LayerCache) and cache.length != offset:
            raise ValueError(f"Attention: the KV cache holds {cache.length} positions, but this call starts at offset "
                             f"{offset}; the offset must equal the cached length")
