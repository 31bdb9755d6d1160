"""The static KV cache written in place (nn/cache.py's StaticLayerCache.write, function.SetRows): slot j holds
position j, a call writes its L rows into their slots without copying the buffers, eagerly and in a compiled step.

Oracles: numpy's own row assignment for SetRows; the growing KVCache's K and V (concatenated, never written in
place) for the slots; the mask's rule written again in numpy (query i sees slot j iff j <= p + i); the buffers'
memory addresses for "no copy"; the eager decoder for the compiled one."""
import numpy as np
import pytest
from conftest import msg, rel_err

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.counting import count_flops
from tinygrad_block.function import Concat, SetRows
from tinygrad_block.nn.cache import KVCache, StaticKVCache
from tinygrad_block.nn.decode import Decoder

TINY = nn.preset("tiny")                                               # GQA: 4 query heads, 2 KV heads, RoPE
GPT2 = nn.BlockConfig(16, 4, 4, 24, norm="layer", ffn="gelu_tanh", bias=True, rope=False, max_seq_len=24,
                      vocab_size=50, n_layers=2, tie_embeddings=True)     # learned positions, no RoPE table


def model_and_ids(cfg, B=2, L=12, device="cpu"):
    model = nn.LM(cfg, generator=tb.Generator(0), dtype=tb.float64, device=device)
    return model, tb.randint(0, cfg.vocab_size, (B, L), generator=tb.Generator(1), device=device)


def address(t: tb.Tensor) -> int:
    """Where a tensor's array starts in memory: numpy's (also inside a strict array) or CuPy's device pointer."""
    a = getattr(t.data, "a", t.data)
    return a.data.ptr if hasattr(a.data, "ptr") else a.__array_interface__["data"][0]


# ---------------------------------------------------------------- the primitive
def test_setrows_writes_the_rows_into_the_buffers_own_array_at_0_flops(device):
    buf = tb.tensor(np.arange(2 * 3 * 6 * 4, dtype=np.float64).reshape(2, 3, 6, 4), device=device)
    rows = tb.tensor(-np.arange(2 * 3 * 2 * 4, dtype=np.float64).reshape(2, 3, 2, 4), device=device)
    want = buf.numpy().copy()
    want[:, :, [4, 1]] = rows.numpy()                                  # numpy's assignment: the oracle
    before, array = address(buf), buf.data
    with count_flops() as fc:
        out = SetRows.apply(buf, rows, tb.tensor([4, 1], device=device), axis=2)
    assert out.data is array and buf.data is array and address(buf) == before     # written, not copied
    np.testing.assert_array_equal(out.numpy(), want)
    assert fc.by_op()["setrows"] == 0 and fc.total() == 0


def test_setrows_on_meta_gives_the_buffers_shape():
    buf = tb.zeros(2, 3, 6, 4, device="meta")
    out = SetRows.apply(buf, tb.zeros(2, 3, 1, 4, device="meta"), tb.zeros(1, dtype=tb.int64, device="meta"), axis=2)
    assert out.shape == (2, 3, 6, 4) and out.data is buf.data


def test_setrows_refuses_rows_that_do_not_fit_and_has_no_gradient():
    buf, at = tb.zeros(2, 3, 6, 4, dtype=tb.float64), tb.tensor([0])
    with pytest.raises(ValueError, match=msg("setrows", "(2, 3, 2, 4)", "(2, 3, 6, 4)", "float64 (2, 3, 1, 4)")):
        SetRows.apply(buf, tb.zeros(2, 3, 2, 4, dtype=tb.float64), at, axis=2)
    with pytest.raises(ValueError, match=msg("setrows", "float32", "expected float64")):
        SetRows.apply(buf, tb.zeros(2, 3, 1, 4), at, axis=2)
    rows = tb.zeros(2, 3, 1, 4, dtype=tb.float64, requires_grad=True)
    out = SetRows.apply(buf, rows, at, axis=2)
    with pytest.raises(RuntimeError, match=msg("setrows", "no gradient", "no_grad")):
        out.sum().backward()


# ---------------------------------------------------------------- the cache: slots, mask, no copy
def test_the_mask_shows_query_i_the_slots_up_to_its_own_position():
    """Slot j is filled iff j < p + L; query i of the call (position p + i) sees slot j iff j <= p + i. Prefill 3
    tokens at p = 0, then one at p = 3: -inf exactly where numpy's rule says, in every query head's rows."""
    model, _ = model_and_ids(TINY)
    cache, max_len, n_rep = StaticKVCache(model, 2, 8), 8, TINY.n_heads // TINY.n_kv_heads
    for p, L in ((0, 3), (3, 1)):
        positions = cache.start(L).numpy()
        np.testing.assert_array_equal(positions, np.arange(p, p + L))
        hidden = np.arange(max_len)[None, :] > (p + np.arange(L))[:, None]        # (L, max_len)
        want = np.where(hidden, -np.inf, 0.0)
        got = cache.mask.numpy()
        np.testing.assert_array_equal(got, np.tile(want, (n_rep, 1)) if L > 1 else want[0])
    assert cache.position.numpy() == 4


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("cfg", [TINY, GPT2], ids=["tiny", "gpt2"])
def test_each_call_writes_its_rows_into_their_slots_in_the_same_memory(cfg, jit, device):
    """A decoder's prefill (3 tokens) and 6 steps (2 captured, then replays when compiled): after each call the
    first p slots of every layer's K and V equal the growing cache's (fed the same tokens: layer 0 bit for bit,
    later layers to 1e-12), the other slots stay zero, and every buffer stays the array, at the address, it was
    after the prefill: no copy of the cache per token."""
    model, ids = model_and_ids(cfg, L=3, device=device)
    decoder, dynamic = Decoder(model, 2, 12, jit=jit), KVCache(model, 2)
    buffers = [t for layer in decoder.cache.layers for t in (layer.k, layer.v)]
    with tb.no_grad():
        token, _ = decoder.prefill(ids)                                 # (reset zeroes the buffers: new arrays)
        model(ids, cache=dynamic)
        arrays, addresses = [t.data for t in buffers], [address(t) for t in buffers]
        for p in range(4, 10):
            fed = token
            token, _ = decoder.step(fed)
            model(fed, cache=dynamic)
            assert all(t.data is a for t, a in zip(buffers, arrays)) and [address(t) for t in buffers] == addresses
            for i, (d, s) in enumerate(zip(dynamic.layers, decoder.cache.layers)):
                for want, buffer in ((d.k, s.k), (d.v, s.v)):
                    filled, empty = buffer.numpy()[:, :, :p], buffer.numpy()[:, :, p:]
                    assert np.array_equal(filled, want.numpy()) if i == 0 else rel_err(filled, want.numpy()) <= 1e-12
                    assert not empty.any()
    assert decoder.compiled is None or decoder.compiled.replays == 4


def test_a_compiled_decode_step_writes_rows_and_copies_no_buffer():
    """The replayed program writes each layer's K and V with one setrows each, into the buffers it was given (its
    arguments: no tensor's .data is written back but the position), and joins nothing of the cache's shape."""
    model, ids = model_and_ids(TINY, L=3)
    decoder = Decoder(model, 2, 12)
    with tb.no_grad():
        token, _ = decoder.prefill(ids)
        for _ in range(3):
            token, _ = decoder.step(token)
    program = decoder.compiled.program
    ops = [s.op for s in program.instructions]
    cache_shape = (2, TINY.n_kv_heads, 12, TINY.d_head)
    assert ops.count(SetRows) == 2 * TINY.n_layers
    assert all(s.shape == cache_shape for s in program.instructions if s.op is SetRows)
    assert not any(s.op is Concat and s.shape == cache_shape for s in program.instructions)
    written = [(arg, attr) for _, arg, attr, _, _ in program.writes]
    assert written == [(1, "data")]                                     # state[0]: the position, nothing else
    assert "setrows" in str(program)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "compiled"])
def test_generated_tokens_equal_the_uncached_recomputation_on_every_device(device, jit):
    """Greedy generation over the in-place cache writes the tokens of the whole sequence recomputed at every step
    (no cache), on cpu, strict and cuda, compiled and eager."""
    model, ids = model_and_ids(TINY, L=4, device=device)
    cached = model.generate(ids, 9, temperature=0, jit=jit).numpy()
    np.testing.assert_array_equal(cached, model.generate(ids, 9, temperature=0, use_cache=False).numpy())


def test_a_static_cache_on_meta_runs_prefill_and_a_step_by_shape():
    model = nn.LM(TINY, device="meta")
    cache = StaticKVCache(model, 2, 10)
    with tb.no_grad():
        assert model(tb.zeros(2, 4, dtype=tb.int64, device="meta"), cache=cache).shape == (2, 4, TINY.vocab_size)
        assert model(tb.zeros(2, 1, dtype=tb.int64, device="meta"), cache=cache).shape == (2, 1, TINY.vocab_size)
    assert cache.layers[0].k.shape == (2, TINY.n_kv_heads, 10, TINY.d_head)
