"""The KV cache: each layer's keys and values (after RoPE, one per KV head) of every position seen so far, so a
decode step computes K and V for its one new token only and attends to the rest from memory."""
from __future__ import annotations

import numbers

from ..tensor import Tensor, concat


class LayerCache:
    """K and V of one attention layer: (B, H_kv, n, d_head) each, n = positions seen so far (None while empty).
    Tensors are immutable: each append concatenates into new tensors and rebinds the two slots."""

    def __init__(self, batch: int, n_kv_heads: int, d_head: int):
        self.shape = (batch, n_kv_heads, d_head)          # (B, H_kv, d_head): what every append must match
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add L new positions (k, v: (B, H_kv, L, d_head)); return all n + L of them."""
        for name, t in (("k", k), ("v", v)):
            if t.ndim != 4 or (t.shape[0], t.shape[1], t.shape[3]) != self.shape:
                B, H_kv, d_head = self.shape
                raise ValueError(f"KVCache: {name} of shape {t.shape} does not fit this cache of (B={B}, "
                                 f"H_kv={H_kv}, n, d_head={d_head}): a cache serves one model and one batch size")
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = concat([self.k, k], axis=2)            # (B, H_kv, n + L, d_head)
            self.v = concat([self.v, v], axis=2)
        return self.k, self.v

    @property
    def nbytes(self) -> int:
        return 0 if self.k is None else self.k.nbytes + self.v.nbytes


class KVCache:
    """One LayerCache per block of `model` (an nn.LM), for `batch` sequences. Pass it to the model's forward:
    `model(ids, cache=cache)` runs positions cache.length .. cache.length + L - 1 and fills it."""

    def __init__(self, model, batch: int):
        if not isinstance(batch, numbers.Integral) or isinstance(batch, bool) or batch < 1:
            raise ValueError(f"KVCache: batch must be a positive int, got {batch!r}")
        cfg = model.cfg
        self.model, self.batch = model, int(batch)
        self.layers = [LayerCache(self.batch, cfg.n_kv_heads, cfg.d_head) for _ in range(cfg.n_layers)]

    @property
    def length(self) -> int:
        """Positions held (every layer holds the same)."""
        return self.layers[0].length

    @property
    def nbytes(self) -> int:
        """Bytes of every cached K and V tensor: 2 n_layers B n H_kv d_head bytes_per_element."""
        return sum(layer.nbytes for layer in self.layers)

    def __repr__(self):
        return f"KVCache(layers={len(self.layers)}, batch={self.batch}, length={self.length}, nbytes={self.nbytes})"
