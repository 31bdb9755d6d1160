"""The KV cache: each layer's keys and values (after RoPE, one per KV head) of every position seen so far, so a
decode step computes K and V for its one new token only and attends to the rest from memory. KVCache grows by
concatenation (a Python offset, shapes that change every step); StaticKVCache writes each position into its own
slot of buffers of fixed shape, in place, and holds the position as a tensor, so every decode step has the same
shapes and a compiled step replays."""
from __future__ import annotations

import numbers

from ..dtypes import int64
from ..function import SetRows
from ..tensor import Tensor, arange, concat, where, zeros


def check_fits(cache: str, k: Tensor, v: Tensor, shape: tuple, positions: str) -> None:
    """k and v are (B, H_kv, <positions>, d_head) for shape = (B, H_kv, d_head), or a ValueError naming the cache."""
    for name, t in (("k", k), ("v", v)):
        if t.ndim != 4 or (t.shape[0], t.shape[1], t.shape[3]) != shape:
            B, H_kv, d_head = shape
            raise ValueError(f"{cache}: {name} of shape {t.shape} does not fit this cache of (B={B}, H_kv={H_kv}, "
                             f"{positions}, d_head={d_head}): a cache serves one model and one batch size")


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
        check_fits("KVCache", k, v, self.shape, "n")
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = concat([self.k, k], axis=2)            # (B, H_kv, n + L, d_head)
            self.v = concat([self.v, v], axis=2)
        return self.k, self.v

    @property
    def nbytes(self) -> int:
        return 0 if self.k is None else self.k.nbytes + self.v.nbytes


class PerLayer:
    """What both caches share: one layer cache per block in `layers`, their bytes, and a one-line repr that names
    the sizes each cache's `_sizes()` gives (its batch, and its length or max_len)."""
    layers: list

    @property
    def nbytes(self) -> int:
        """Bytes of every K and V tensor held: 2 n_layers B n H_kv d_head bytes_per_element, n the positions a layer
        holds (KVCache: those seen so far; StaticKVCache: all max_len slots)."""
        return sum(layer.nbytes for layer in self.layers)

    def __repr__(self):
        sizes = "".join(f", {name}={value}" for name, value in self._sizes().items())
        return f"{type(self).__name__}(layers={len(self.layers)}{sizes}, nbytes={self.nbytes})"


class KVCache(PerLayer):
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

    def _sizes(self) -> dict:
        return {"batch": self.batch, "length": self.length}


class StaticLayerCache:
    """K and V of one attention layer in buffers of fixed shape (B, H_kv, max_len, d_head), allocated once. Slot j
    holds position j: a call of L tokens at positions p .. p + L - 1 writes its K and V into those L slots, in
    place (the buffers' arrays written, not copied; only `reset` gives them new ones), and leaves the others as
    they are; attention reads all max_len slots, the mask hiding those after each query's position (empty, or the
    call's own later positions)."""

    def __init__(self, owner: StaticKVCache, k: Tensor, v: Tensor):
        self.owner = owner
        self.k, self.v = k, v                                    # (B, H_kv, max_len, d_head) each

    @property
    def mask(self) -> Tensor:
        """The current call's additive mask for its queries grouped by KV head, (n_rep L, max_len) (row r L + i for
        query i of each group's r-th head; (max_len,) for one token): -inf on slot j > p + i, after query i's
        position (still empty, or one of the call's own later positions)."""
        return self.owner.mask

    @property
    def rope(self) -> tuple[Tensor, Tensor]:
        """cos and sin of the current call's positions, the first half of each row (L, d_head/2): apply_rope's."""
        return self.owner.cos, self.owner.sin

    def write(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write the call's L positions (k, v: (B, H_kv, L, d_head)) into slots p .. p + L - 1 of the buffers
        (the positions StaticKVCache.start found, a tensor: the same ops at every position). SetRows writes into
        the buffers' own arrays, L rows each, so a decode step copies nothing of the cache, and a compiled step
        writes into the buffers its argument holds at every replay (nothing to write back). Returns both buffers
        as written, (B, H_kv, max_len, d_head)."""
        B, H_kv, _, d_head = self.k.shape
        check_fits("StaticKVCache", k, v, (B, H_kv, d_head), "L")
        at = self.owner.positions                                        # (L,) int64: p .. p + L - 1
        return SetRows.apply(self.k, k, at, axis=2), SetRows.apply(self.v, v, at, axis=2)

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes


class StaticKVCache(PerLayer):
    """One StaticLayerCache per block of `model` (an nn.LM), for `batch` sequences of up to `max_len` positions,
    and `position`, the next position to fill, as a 0-d int64 tensor. Every call of the same L has the same
    shapes and reads the position as data, not as a Python number, so a compiled decode step (tb.jit) replays
    at every position. `model(ids, cache=cache)` runs positions position .. position + L - 1 and advances it.

    What depends on the position is found once per call (`start`), for every layer: the positions (the slots the
    layers write), the mask, and with RoPE the rotation's cos and sin rows, looked up in a table of max_len rows
    (layer 0's tables, which every layer shares), so a position past the cache raises IndexError before anything
    is written, in a replay too."""

    def __init__(self, model, batch: int, max_len: int, state: tuple[Tensor, ...] | None = None):
        cfg = model.cfg
        self.model, (self.batch, self.max_len) = model, self.check(model, batch, max_len)
        self.positions = self.mask = self.cos = self.sin = None          # the current call's, set by start()
        if state is None:
            state = self._allocate()
        elif len(state) != 4 + 2 * cfg.n_layers or not all(isinstance(t, Tensor) for t in state):
            raise ValueError(f"StaticKVCache: state must be the {4 + 2 * cfg.n_layers} tensors of a cache of this "
                             f"model (StaticKVCache.state), got {len(state)} items")
        self.position, self.rows, self.slots, self.open, *buffers = state
        self.layers = [StaticLayerCache(self, k, v) for k, v in zip(buffers[0::2], buffers[1::2])]

    @staticmethod
    def check(model, batch: int, max_len: int) -> tuple[int, int]:
        """(batch, max_len) as ints, or a ValueError: both positive, max_len within the model's context."""
        for name, value, top in (("batch", batch, None), ("max_len", max_len, model.cfg.max_seq_len)):
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1 or \
                    (top is not None and value > top):
                limit = f" <= the context length max_seq_len={top}" if top is not None else ""
                raise ValueError(f"StaticKVCache: {name} must be a positive int{limit}, got {value!r}")
        return int(batch), int(max_len)

    def _allocate(self) -> tuple[Tensor, ...]:
        """A new cache's tensors, in the order of `state`: everything at position 0, every buffer zero."""
        cfg, weight = self.model.cfg, self.model.embed.weight
        shape = (self.batch, cfg.n_kv_heads, self.max_len, cfg.d_head)   # (B, H_kv, max_len, d_head)
        make = dict(dtype=weight.dtype, device=weight.device)
        self.slots = arange(self.max_len, device=weight.device)          # (max_len,): 0 .. max_len - 1
        buffers = [zeros(*shape, **make) for _ in range(2 * cfg.n_layers)]
        return (zeros((), dtype=int64, device=weight.device),            # 0-d: the next position to fill
                self.position_rows(),                                    # what a call looks its positions up in
                self.slots,
                zeros(self.max_len, **make),                             # (max_len,): the mask's zeros
                *buffers)                                                # k and v of layer 0, of layer 1, ...

    @property
    def state(self) -> tuple[Tensor, ...]:
        """Every tensor the cache holds: (position, rows, slots, open, k and v of each layer). A compiled decode
        step takes them as an argument and builds its cache over them, `StaticKVCache(model, batch, max_len,
        state)`, so one compiled step serves every cache of its shapes (one per generation)."""
        return (self.position, self.rows, self.slots, self.open, *[t for layer in self.layers
                                                                    for t in (layer.k, layer.v)])

    def position_rows(self) -> Tensor:
        """What a call looks its positions up in: with RoPE, the cos and sin rows of positions 0 .. max_len - 1
        side by side, the first half of each (the two halves are equal), from layer 0's tables, which every layer
        shares: (max_len, d_head); without RoPE, the slots themselves."""
        if not self.model.cfg.rope:
            return self.slots
        attn, half = self.model.layers[0].attn, self.model.cfg.d_head // 2
        return concat([attn.rope_cos[:self.max_len, :half], attn.rope_sin[:self.max_len, :half]], axis=-1)

    def reset(self) -> None:
        """Empty the cache: position 0, every buffer zero (stale values would be masked anyway), the position
        rows read again from the model's tables (rebound in place, as the buffers are)."""
        self.rows.assign(self.position_rows())
        self.position.assign(self.position.zeros_like())
        for layer in self.layers:
            layer.k.assign(layer.k.zeros_like())
            layer.v.assign(layer.v.zeros_like())

    def start(self, L: int) -> Tensor:
        """Begin a call of L tokens at positions p .. p + L - 1 (p = `position`): return them, (L,) int64, also
        kept as `positions`, the slots each layer writes; set the call's mask (n_rep L, max_len; (max_len,) for
        one token) and with RoPE the cos and sin rows (L, d_head/2); advance `position` by L. Once written, slots
        0 .. p + L - 1 are filled, and query i sees slot j iff j <= p + i."""
        if L > self.max_len:
            raise ValueError(f"StaticKVCache: {L} tokens do not fit a cache of max_len={self.max_len} positions")
        cfg, first = self.model.cfg, self.position
        positions = self.positions = first + arange(L, device=first.device)                   # (L,)
        rows = self.rows[positions]                             # (L, d_head) or (L,): IndexError past max_len
        if cfg.rope:
            self.cos, self.sin = rows[:, :cfg.d_head // 2], rows[:, cfg.d_head // 2:]          # (L, d_head/2) each
        query = positions if L == 1 else positions.reshape(L, 1)                             # (1,) or (L, 1)
        mask = where(self.slots > query, float("-inf"), self.open)    # (max_len,) or (L, max_len): j > p + i hidden
        if L > 1:
            n_rep = cfg.n_heads // cfg.n_kv_heads             # query heads per KV head: grouped, see attend_static
            mask = mask.reshape(1, L, self.max_len).expand(n_rep, L, self.max_len).reshape(n_rep * L, self.max_len)
        self.mask = mask                                         # (n_rep L, max_len); (max_len,) for one token
        self.position.assign(first + L)
        return positions

    def _sizes(self) -> dict:
        return {"batch": self.batch, "max_len": self.max_len}
