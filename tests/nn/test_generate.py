"""Generation with a KV cache (nn/cache.py, LM.forward(ids, cache), LM.generate, nn/decode.py) and its accounting.

Oracles: the uncached model recomputing the whole sequence at every step (logits to 1e-12, greedy tokens equal);
numpy's argmax over those logits; the Gumbel-max draw and the top-k threshold written again in numpy and torch;
the softmax itself for sampling frequencies; the tensors actually held for cache bytes; the model's own matmul
parameter shapes (2 x parameters + attention term) and accounting.decode_flops for FLOPs counted by running.
The static cache: the dynamic KVCache's keys and values (the first layer's exactly); its compiled decode steps:
the same function run eagerly (logits bit for bit without fusion, tokens equal)."""
import math

import numpy as np
import pytest
import torch
from conftest import msg, rel_err

import tinygrad_block as tb
from tinygrad_block import accounting, measure, nn
from tinygrad_block.counting import count_flops
from tinygrad_block.nn.cache import KVCache, StaticKVCache
from tinygrad_block.nn.decode import Decoder
from tinygrad_block.nn.decode import keep_top_k, next_token

TINY = nn.preset("tiny")                                               # Llama layout, GQA: 4 query heads, 2 KV heads
GPT2 = nn.BlockConfig(16, 4, 4, 24, norm="layer", ffn="gelu_tanh", bias=True, rope=False, max_seq_len=24,
                      vocab_size=50, n_layers=2, tie_embeddings=True)     # learned positions, tied head
MQA_PARALLEL = nn.BlockConfig(16, 4, 1, 24, layout="parallel", ffn="relu", max_seq_len=24, vocab_size=40, n_layers=3)
POST_NORM = GPT2.with_(layout="post", rope=True, tie_embeddings=False)
CONFIGS = {"tiny": TINY, "gpt2": GPT2, "mqa-parallel": MQA_PARALLEL, "post-norm": POST_NORM}


def model_and_ids(cfg, B=2, L=12, dtype=tb.float64, device="cpu"):
    model = nn.LM(cfg, generator=tb.Generator(0), dtype=dtype, device=device)
    return model, tb.randint(0, cfg.vocab_size, (B, L), generator=tb.Generator(1), device=device)


# ---------------------------------------------------------------- the cache equals recomputation
@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("prompt_len", [1, 5])
def test_cached_logits_equal_full_recomputation_at_every_step(name, prompt_len):
    cfg = CONFIGS[name]
    model, ids = model_and_ids(cfg, L=prompt_len + 8)
    cache = KVCache(model, 2)
    with tb.no_grad():
        prefill = model(ids[:, :prompt_len], cache=cache)                       # (B, prompt_len, V)
        assert rel_err(prefill.numpy(), model(ids[:, :prompt_len]).numpy()) <= 1e-12
        for i in range(prompt_len, ids.shape[1]):
            cached = model(ids[:, i:i + 1], cache=cache)[:, 0]                  # (B, V): one token
            full = model(ids[:, :i + 1])[:, -1]                                 # the whole prefix again
            assert rel_err(cached.numpy(), full.numpy()) <= 1e-12, (name, i)
            assert cache.length == i + 1


@pytest.mark.parametrize("name", CONFIGS)
def test_greedy_generate_with_and_without_cache_equals_numpys_argmax(name):
    cfg = CONFIGS[name]
    model, ids = model_and_ids(cfg, L=3)
    tokens = ids.numpy()
    with tb.no_grad():
        for _ in range(9):                                                      # the oracle: argmax, recomputing
            logits = model(tb.tensor(tokens)).numpy()[:, -1]
            tokens = np.concatenate([tokens, logits.argmax(axis=-1)[:, None]], axis=1)
    cached = model.generate(ids, 9, temperature=0)
    uncached = model.generate(ids, 9, temperature=0, use_cache=False)
    assert cached.shape == (2, 12) and cached.dtype == tb.int64
    np.testing.assert_array_equal(cached.numpy(), tokens)
    np.testing.assert_array_equal(uncached.numpy(), tokens)


def test_generate_fills_the_context_exactly_and_zero_new_tokens_returns_the_prompt():
    model, ids = model_and_ids(GPT2, L=4)                                       # learned positions up to 23
    out = model.generate(ids, GPT2.max_seq_len - 4, temperature=0)
    assert out.shape == (2, GPT2.max_seq_len)
    np.testing.assert_array_equal(out.numpy()[:, :4], ids.numpy())
    np.testing.assert_array_equal(model.generate(ids, 0, temperature=0).numpy(), ids.numpy())


def test_generate_runs_on_the_strict_device_as_on_the_cpu():
    """'strict' refuses implicit reads back to the host: the decode loop stays on the device, as on a GPU."""
    runs = []
    for device in ("cpu", "strict"):
        model, ids = model_and_ids(TINY, L=3, device=device)
        runs.append([model.generate(ids, 6, temperature=0).numpy(),
                     model.generate(ids, 6, temperature=0.8, top_k=5, generator=tb.Generator(4)).numpy()])
    for cpu, strict in zip(*runs):
        np.testing.assert_array_equal(cpu, strict)


# ---------------------------------------------------------------- bytes and FLOPs
@pytest.mark.parametrize("name", ["tiny", "gpt2", "mqa-parallel"])
@pytest.mark.parametrize("dtype", [tb.float32, tb.float64], ids=["f32", "f64"])
def test_cache_bytes_measured_on_the_tensors_equal_the_formula(name, dtype):
    cfg = CONFIGS[name]
    B, prompt_len = 3, 4
    model, ids = model_and_ids(cfg, B=B, L=prompt_len + 3, dtype=dtype)
    cache = KVCache(model, B)
    with tb.no_grad():
        for n, chunk in ((4, ids[:, :4]), (5, ids[:, 4:5]), (7, ids[:, 5:7])):   # prefill, decode, two more
            model(chunk, cache=cache)
            held = [t for layer in cache.layers for t in (layer.k, layer.v)]
            assert len(held) == 2 * cfg.n_layers
            assert all(t.shape == (B, cfg.n_kv_heads, n, cfg.d_head) and t.dtype == dtype for t in held)
            measured = sum(t.nbytes for t in held)
            assert measured == cache.nbytes == accounting.kv_cache_bytes(cfg, n, B, np.dtype(dtype).itemsize)


def matmul_weights(model) -> int:
    """Parameters that a decode step multiplies with (every 2-D weight but gathered tables), counted on the
    model; a tied head multiplies with the embedding."""
    tables = {"embed.weight", "pos_embed.weight"}
    count = sum(p.size for n, p in model.named_parameters() if p.ndim == 2 and n not in tables)
    return count + (model.embed.weight.size if model.cfg.tie_embeddings else 0)


@pytest.mark.parametrize("name", ["tiny", "gpt2", "mqa-parallel"])
def test_decode_flops_counted_by_running_equal_the_closed_form(name):
    cfg = CONFIGS[name]
    B, prompt_len = 2, 3
    model, ids = model_and_ids(cfg, B=B, L=prompt_len + 4)
    cache = KVCache(model, B)
    with tb.no_grad(), count_flops() as fc:
        model(ids[:, :prompt_len], cache=cache)
    assert fc.total() == accounting.model_forward_flops(cfg, prompt_len, B, matmul_only=False)
    for n in range(prompt_len + 1, prompt_len + 5):                         # the new token sees n keys
        with tb.no_grad(), count_flops() as fc:
            model(ids[:, n - 1:n], cache=cache)
        attention = 4 * n * cfg.n_heads * cfg.d_head                         # q k^T and weights @ V, per layer
        assert fc.total(matmul_only=True) == B * (2 * matmul_weights(model) + cfg.n_layers * attention)
        assert fc.total(matmul_only=True) == accounting.decode_flops(cfg, n, B)
        assert fc.total() == accounting.decode_flops(cfg, n, B, matmul_only=False)


def test_prefill_and_decode_phases_report_flops_bytes_and_intensity():
    """measure.generation_phases on meta: FLOPs equal the closed forms; decode reads every weight (the
    embedding only for its B looked-up rows) and the whole cache; its intensity is about 2 FLOPs per 4-byte
    weight, prefill's about prompt_len times that."""
    cfg, B, P = TINY, 2, 50
    prefill, decode = measure.generation_phases(cfg, P, B)
    assert prefill.flops == accounting.model_forward_flops(cfg, P, B, matmul_only=False)
    assert decode.flops == accounting.decode_flops(cfg, P + 1, B, matmul_only=False)
    assert decode.matmul_flops == accounting.decode_flops(cfg, P + 1, B)
    table = cfg.vocab_size * cfg.d_model
    assert decode.weight_bytes == 4 * (accounting.total_params(cfg) - table + B * cfg.d_model)
    assert prefill.weight_bytes == 4 * (accounting.total_params(cfg) - table + B * P * cfg.d_model)
    assert (prefill.cache_bytes, decode.cache_bytes) == (accounting.kv_cache_bytes(cfg, P, B, 4),
                                                         accounting.kv_cache_bytes(cfg, P + 1, B, 4))
    assert decode.intensity == decode.flops / (decode.weight_bytes + decode.cache_bytes)
    assert 0.4 * B < decode.intensity < 0.7 * B and prefill.intensity > 0.5 * P * decode.intensity


# ---------------------------------------------------------------- choosing the next token
def gumbel_oracle(logits: np.ndarray, temperature: float, top_k, seed: int) -> np.ndarray:
    """numpy: keep the top_k (ties with the k-th stay), add Gumbel noise from the same uniform draws, argmax."""
    if top_k is not None:
        kth = np.sort(logits, axis=-1)[:, ::-1][:, top_k - 1:top_k]
        logits = np.where(logits < kth, -np.inf, logits)
    u = np.random.default_rng(seed).random(logits.shape)
    return (logits / temperature - np.log(-np.log(u))).argmax(axis=-1)


@pytest.mark.parametrize("temperature, top_k", [(1.0, None), (0.7, 5), (2.5, 1), (1.0, 20)])
def test_next_token_is_the_gumbel_max_draw_from_the_generator(temperature, top_k):
    logits = np.random.default_rng(7).standard_normal((6, 20))
    got = next_token(tb.tensor(logits), temperature, top_k, tb.Generator(3)).numpy()
    np.testing.assert_array_equal(got, gumbel_oracle(logits, temperature, top_k, 3))


def test_keep_top_k_keeps_what_torch_topk_keeps_ties_included():
    logits = np.array([[1.0, 3.0, 3.0, 2.0, 0.0], [0.5, 0.5, 0.5, 0.5, 0.5], [4.0, -1.0, 2.0, 2.0, 7.0]])
    for k in range(1, 6):
        kth = torch.topk(torch.tensor(logits), k).values[:, -1:]
        want = torch.tensor(logits).masked_fill(torch.tensor(logits) < kth, -math.inf).numpy()
        np.testing.assert_array_equal(keep_top_k(tb.tensor(logits), k).numpy(), want)


def test_sampled_frequencies_follow_the_softmax_of_the_top_k():
    """20000 draws of one row: each token's frequency within 4.5 standard errors of softmax(logits / T) over
    the top 3 (0 outside them)."""
    logits, T, n = np.array([2.0, 0.5, 1.5, -1.0, 1.0]), 0.8, 20000
    draws = next_token(tb.tensor(np.tile(logits, (n, 1))), T, 3, tb.Generator(11)).numpy()
    freq = np.bincount(draws, minlength=5) / n
    p = np.where(logits >= 1.0, np.exp(logits / T), 0.0)
    p /= p.sum()
    assert np.all(np.abs(freq - p) <= 4.5 * np.sqrt(p * (1 - p) / n) + 1e-12), (freq, p)


def test_sampling_is_reproducible_from_the_seed_and_top_k_1_is_greedy():
    model, ids = model_and_ids(TINY, L=4)
    run = lambda seed, **kw: model.generate(ids, 8, temperature=1.2, generator=tb.Generator(seed), **kw).numpy()  # noqa: E731
    np.testing.assert_array_equal(run(5), run(5))
    np.testing.assert_array_equal(run(5), run(5, use_cache=False))      # same draws, same logits
    assert not np.array_equal(run(5), run(6))
    greedy = model.generate(ids, 8, temperature=0).numpy()
    np.testing.assert_array_equal(run(5, top_k=1), greedy)


# ---------------------------------------------------------------- bad input
def tiny_model():
    return model_and_ids(GPT2, L=3)


@pytest.mark.parametrize("ids, fragments", [
    (tb.zeros(2, 3), ("integer token ids", "(B, L)", "float32 (2, 3)")),
    (tb.zeros(3, dtype=tb.int64), ("(B, L)", "int64 (3,)")),
    ([[1, 2]], ("Tensor", "list")),
])
def test_generate_refuses_ids_that_are_not_a_b_by_l_integer_tensor(ids, fragments):
    model, _ = tiny_model()
    with pytest.raises(TypeError, match=msg("generate", *fragments)):
        model.generate(ids, 2)


@pytest.mark.parametrize("kwargs, fragments", [
    ({"ids": tb.zeros(2, 0, dtype=tb.int64)}, ("at least one token", "(2, 0)")),
    ({"max_new_tokens": -1}, ("max_new_tokens", "int >= 0", "-1")),
    ({"max_new_tokens": 2.0}, ("max_new_tokens", "int >= 0", "2.0")),
    ({"max_new_tokens": True}, ("max_new_tokens", "True")),
    ({"max_new_tokens": 22}, ("3 tokens", "max_new_tokens=22", "max_seq_len=24")),
    ({"temperature": -0.5}, ("temperature", ">= 0", "-0.5")),
    ({"temperature": math.nan}, ("temperature", "finite", "nan")),
    ({"top_k": 0}, ("top_k", "1..vocab_size=50", "0")),
    ({"top_k": 51}, ("top_k", "1..vocab_size=50", "51")),
    ({"top_k": 2.0}, ("top_k", "2.0")),
])
def test_generate_refuses_bad_arguments(kwargs, fragments):
    model, ids = tiny_model()
    args = {"ids": ids, "max_new_tokens": 2, "temperature": 0} | kwargs
    with pytest.raises(ValueError, match=msg("generate", *fragments)):
        model.generate(**args)


def test_sampling_without_a_generator_is_refused():
    model, ids = tiny_model()
    with pytest.raises(TypeError, match=msg("generate", "temperature 1.0", "generator=tb.Generator(seed)")):
        model.generate(ids, 2, temperature=1.0)


def test_a_cache_from_another_model_or_batch_size_is_refused():
    model, ids = tiny_model()
    twin = nn.LM(GPT2, generator=tb.Generator(0), dtype=tb.float64)          # same config, same weights
    with pytest.raises(ValueError, match=msg("LM", "another model", "KVCache(model, batch)")):
        model(ids, cache=KVCache(twin, 2))
    with pytest.raises(ValueError, match=msg("LM", "holds 3 sequences", "B=2")):
        model(ids, cache=KVCache(model, 3))
    with pytest.raises(TypeError, match=msg("LM", "KVCache", "dict")):
        model(ids, cache={})
    with pytest.raises(ValueError, match=msg("KVCache", "batch", "positive int", "0")):
        KVCache(model, 0)


def test_a_cache_past_the_context_or_at_the_wrong_offset_is_refused():
    model, ids = tiny_model()
    cache = KVCache(model, 2)
    with tb.no_grad():
        model(tb.zeros(2, 22, dtype=tb.int64), cache=cache)
        too_far = msg("LM", "positions 22..24", "3 tokens after 22 cached", "max_seq_len=24")
        with pytest.raises(ValueError, match=too_far):
            model(ids, cache=cache)
        attn, x = model.layers[0].attn, tb.zeros(2, 1, GPT2.d_model, dtype=tb.float64)
        with pytest.raises(ValueError, match=msg("Attention", "holds 22 positions", "offset 5")):
            attn(x, 5, cache.layers[0])


def test_a_cache_needs_causal_attention():
    cfg = GPT2.with_(causal=False)
    model = nn.LM(cfg, generator=tb.Generator(0), dtype=tb.float64)
    with pytest.raises(ValueError, match=msg("Attention", "KV cache", "causal")):
        model(tb.zeros(1, 2, dtype=tb.int64), cache=KVCache(model, 1))


def test_decode_flops_refuses_an_empty_context():
    with pytest.raises(ValueError, match=msg("decode_flops", "context_len", ">= 1", "0")):
        accounting.decode_flops(TINY, 0)


@pytest.mark.parametrize("use_cache", [True, False])
def test_on_token_sees_each_new_token_as_it_is_chosen(use_cache):
    model = nn.LM(TINY, generator=tb.Generator(0))
    ids = tb.tensor([[1, 2, 3], [4, 5, 6]])
    seen = []
    out = model.generate(ids, 6, temperature=0.9, generator=tb.Generator(3), use_cache=use_cache,
                         on_token=lambda i, new: seen.append((i, new.numpy().tolist())))
    again = model.generate(ids, 6, temperature=0.9, generator=tb.Generator(3), use_cache=use_cache).numpy()
    assert [i for i, _ in seen] == list(range(6))
    assert np.array_equal(np.array([new for _, new in seen]).T, out.numpy()[:, 3:]) and np.array_equal(out.numpy(),
                                                                                                           again)


# ---------------------------------------------------------------- the static cache and compiled decoding
@pytest.mark.parametrize("name", CONFIGS)
def test_the_static_cache_holds_the_dynamic_caches_keys_and_values(name):
    """Prefill 5 tokens, then decode 4, into both caches: the static buffers' first 9 slots (slot j holds position j)
    hold the same K and V (the first layer's bit for bit: the same ops on the same inputs; later layers to 1e-12,
    their inputs having passed attention over max_len slots), the others stay zero, and the logits agree to 1e-12."""
    cfg = CONFIGS[name]
    model, ids = model_and_ids(cfg, L=9)
    dynamic, static = KVCache(model, 2), StaticKVCache(model, 2, 14)
    with tb.no_grad():
        for chunk in [ids[:, :5]] + [ids[:, i:i + 1] for i in range(5, 9)]:
            assert rel_err(model(chunk, cache=static).numpy(), model(chunk, cache=dynamic).numpy()) <= 1e-12
    assert static.position.numpy() == 9 and dynamic.length == 9
    for i, (d, s) in enumerate(zip(dynamic.layers, static.layers)):
        for want, buffer in ((d.k, s.k), (d.v, s.v)):
            assert buffer.shape == (2, cfg.n_kv_heads, 14, cfg.d_head)
            filled, rest = buffer.numpy()[:, :, :9], buffer.numpy()[:, :, 9:]
            assert (np.array_equal(filled, want.numpy()) if i == 0 else rel_err(filled, want.numpy()) <= 1e-12)
            assert not rest.any()
    assert static.nbytes == accounting.kv_cache_bytes(cfg, 14, 2, 8)
    assert repr(static) == f"StaticKVCache(layers={cfg.n_layers}, batch=2, max_len=14, nbytes={static.nbytes})"
    assert repr(dynamic) == f"KVCache(layers={cfg.n_layers}, batch=2, length=9, " \
                            f"nbytes={accounting.kv_cache_bytes(cfg, 9, 2, 8)})"


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("prompt_len", [1, 4])
def test_compiled_greedy_generation_writes_the_eager_and_the_uncached_tokens(name, prompt_len):
    """GQA (tiny), MQA in a parallel block, tied embeddings with learned positions (gpt2), post-norm; prompts of
    1 and 4 tokens, so the decode steps run at other positions."""
    cfg = CONFIGS[name]
    model, ids = model_and_ids(cfg, L=prompt_len)
    compiled = model.generate(ids, 10, temperature=0)
    calls = model.last_decoder.compiled                                 # the prefill, then 9 decode steps
    one_shape = prompt_len == 1                                         # the prefill's shape is a step's
    assert (calls.captures, calls.replays) == ((2, 8) if one_shape else (3, 7))
    np.testing.assert_array_equal(compiled.numpy(), model.generate(ids, 10, temperature=0, jit=False).numpy())
    np.testing.assert_array_equal(compiled.numpy(), model.generate(ids, 10, temperature=0, use_cache=False).numpy())


@pytest.mark.parametrize("name", ["tiny", "gpt2", "mqa-parallel"])
def test_each_decode_steps_logits_equal_eager_bit_for_bit_without_fusion(name):
    cfg = CONFIGS[name]
    model, ids = model_and_ids(cfg, L=3)
    compiled, eager = (Decoder(model, 2, 12, jit=jit, fuse=False) for jit in (True, False))
    with tb.no_grad():
        (a, la), (b, lb) = compiled.prefill(ids), eager.prefill(ids)
        for _ in range(8):
            np.testing.assert_array_equal(la.numpy(), lb.numpy())
            np.testing.assert_array_equal(a.numpy(), b.numpy())
            (a, la), (b, lb) = compiled.step(a), eager.step(b)
    assert compiled.compiled.replays == 6 and compiled.compiled.fuse is False


def test_compiled_sampling_draws_what_eager_sampling_draws():
    """The uniform draws are made outside the step and passed in: the same seed, the same tokens."""
    model, ids = model_and_ids(TINY, L=4)
    run = lambda **kw: model.generate(ids, 12, temperature=0.9, top_k=7, generator=tb.Generator(5), **kw).numpy()  # noqa: E731
    compiled = run()
    assert model.last_decoder.compiled.replays == 9
    np.testing.assert_array_equal(compiled, run(jit=False))
    np.testing.assert_array_equal(compiled, run(use_cache=False))


def test_later_generations_replay_and_other_settings_make_another_decoder():
    model, ids = model_and_ids(TINY, L=4)
    first = model.generate(ids, 8, temperature=0).numpy()
    decoder = model.last_decoder
    np.testing.assert_array_equal(model.generate(ids, 8, temperature=0).numpy(), first)
    assert model.last_decoder is decoder
    counts = lambda: (decoder.compiled.captures, decoder.compiled.replays)   # noqa: E731
    assert counts() == (4, 12)                   # 2 prefills, both captured; 14 steps, 2 captured and 12 replayed
    model.generate(ids, 8, temperature=0)
    assert counts() == (4, 20)                   # a third generation replays its prefill too
    model.generate(ids, 9, temperature=0)                                    # another max_len: another cache
    assert model.last_decoder is not decoder and model.last_decoder.cache.max_len == 13


def test_a_decode_step_counts_the_matmul_flops_of_every_slot_replayed_or_not():
    """A static step attends to all max_len slots: accounting.decode_flops at context max_len, counted on the eager
    step and on a replay alike (a replay tells the counter of every primitive)."""
    model, ids = model_and_ids(TINY, L=3)
    decoder = Decoder(model, 2, 16)
    with tb.no_grad():
        token, _ = decoder.prefill(ids)
        for i in range(4):                                                  # 2 captures, then replays
            with count_flops() as fc:
                token, _ = decoder.step(token)
            assert fc.total(matmul_only=True) == accounting.decode_flops(TINY, 16, 2), i
    assert decoder.compiled.replays == 2


def test_the_static_cache_refuses_what_does_not_fit():
    model, ids = tiny_model()                                                # GPT2: max_seq_len 24
    with pytest.raises(ValueError, match=msg("StaticKVCache", "max_len", "max_seq_len=24", "25")):
        StaticKVCache(model, 2, 25)
    with pytest.raises(ValueError, match=msg("StaticKVCache", "batch", "positive int", "0")):
        StaticKVCache(model, 0, 8)
    twin = nn.LM(GPT2, generator=tb.Generator(0), dtype=tb.float64)
    with pytest.raises(ValueError, match=msg("LM", "another model", "StaticKVCache(model, batch, max_len)")):
        model(ids, cache=StaticKVCache(twin, 2, 8))
    with pytest.raises(ValueError, match=msg("LM", "StaticKVCache holds 3 sequences", "B=2")):
        model(ids, cache=StaticKVCache(model, 3, 8))
    with pytest.raises(ValueError, match=msg("StaticKVCache", "4 tokens", "max_len=3")):
        model(tb.zeros(2, 4, dtype=tb.int64), cache=StaticKVCache(model, 2, 3))
    with pytest.raises(ValueError, match=msg("Attention", "KV cache", "causal")):
        causal = nn.LM(GPT2.with_(causal=False), generator=tb.Generator(0), dtype=tb.float64)
        causal(ids, cache=StaticKVCache(causal, 2, 8))


@pytest.mark.parametrize("jit", [True, False])
def test_a_position_past_the_static_cache_is_an_index_error_in_a_replay_too(jit):
    """The position is data, so no Python check sees it: its lookup in the cache's max_len rows checks it, and a
    replay redoes that check (never a write that silently falls off the end)."""
    model, ids = model_and_ids(TINY, L=2)
    decoder = Decoder(model, 2, 6, jit=jit)
    with tb.no_grad():
        token, _ = decoder.prefill(ids)
        for _ in range(4):                                                   # positions 2..5: 2 captures, 2 replays
            token, _ = decoder.step(token)
        with pytest.raises(IndexError, match=msg("getitem", "index 6", "size 6")):
            decoder.step(token)
    assert decoder.compiled is None or decoder.compiled.replays == 2


def test_a_model_changed_between_or_during_generations_is_never_replayed_stale():
    """The decoder checks the model's fingerprint before a generation and after each on_token call: a weight
    replaced by a new Parameter (the old one still alive, so only the fingerprint can tell) gets a new compiled
    step, and the tokens are those of the eager decoder with the same change at the same point."""
    def run(jit: bool, change_at: int | None):
        model, ids = model_and_ids(TINY, L=3)
        old = model.layers[0].attn.q_proj.weight

        def on_token(i, new):
            if i == change_at:
                model.layers[0].attn.q_proj.weight = nn.Parameter(old * 3.0)
        first = model.generate(ids, 10, temperature=0, jit=jit).numpy()           # the decoder is kept ...
        model.layers[1].ffn.up_proj.weight = nn.Parameter(model.layers[1].ffn.up_proj.weight * -1.0)
        second = model.generate(ids, 10, temperature=0, jit=jit, on_token=on_token).numpy()   # ... and reused
        return first, second, model.last_decoder
    (a, b, compiled), (c, d, _) = run(True, 5), run(False, 5)
    np.testing.assert_array_equal(a, c)
    np.testing.assert_array_equal(b, d)
    assert not np.array_equal(b, run(False, None)[1])                       # the change mattered
    assert compiled.compiled.captures == 2 and compiled.compiled.replays == 2   # steps 6..9 of a fresh compile


# ---------------------------------------------------------------- threads
@pytest.mark.parametrize("jit", [True, False])
def test_threads_generating_from_one_model_at_once_each_get_their_own_tokens(jit):
    """Four threads generate from one model at the same moment, greedy and sampled, with prompts of their own:
    each gets the tokens of the same generation run alone (each generation has a cache of its own; the compiled
    step is shared)."""
    import threading
    model, _ = model_and_ids(TINY, L=4)
    prompts = [tb.randint(0, TINY.vocab_size, (2, 4), generator=tb.Generator(10 + i)) for i in range(4)]
    settings = lambda i: dict(temperature=0) if i % 2 else dict(temperature=0.8, top_k=9,   # noqa: E731
                                                                  generator=tb.Generator(i))
    want = [model.generate(prompts[i], 12, jit=False, **settings(i)).numpy() for i in range(4)]
    barrier, got, errors = threading.Barrier(4), {}, []

    def work(i):
        try:
            barrier.wait()
            for r in range(3):
                got[i, r] = model.generate(prompts[i], 12, jit=jit, **settings(i)).numpy()
        except Exception as e:
            errors.append(e)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for (i, r), tokens in got.items():
        np.testing.assert_array_equal(tokens, want[i], err_msg=f"thread {i}, generation {r}")


@pytest.mark.parametrize("by_default", [True, False])
def test_generate_compiles_where_cuda_jit_by_default_says_unless_told(monkeypatch, by_default):
    """LM.generate's jit=None asks cuda.jit_by_default about the model's device (eager on a GPU whose replays are
    not yet checked); jit=True or False is followed as given; the tokens are the same either way."""
    from tinygrad_block.nn import model as model_module
    asked = []
    monkeypatch.setattr(model_module, "jit_by_default", lambda device: asked.append(device) or by_default)
    model, ids = model_and_ids(TINY, L=3)
    default = model.generate(ids, 5).numpy()
    assert asked == ["cpu"] and model.last_decoder.jit is by_default
    for jit in (True, False):
        np.testing.assert_array_equal(model.generate(ids, 5, jit=jit).numpy(), default)
        assert model.last_decoder.jit is jit and asked == ["cpu"]
