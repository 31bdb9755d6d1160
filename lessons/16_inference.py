# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 16 — Inference
#
# Training runs every position of a sequence at once. Generating text cannot: a model writes one token, reads it
# back, and writes the next. This changes what limits the speed. This lesson runs generation with and without a KV
# cache, then counts the two numbers that decide how fast it can go on real hardware: the FLOPs and the bytes each
# step moves. Then it looks at the two ways of moving fewer bytes: fusing kernels (running several steps as one GPU
# program, section 4), and computing attention tile by tile with an online softmax, the idea behind FlashAttention.
# It ends with how the next token is chosen (sampling) and how well a model predicts a text (perplexity).
#
# **What you will learn**
# - prefill and decode: the prompt in one call, then one token per call, with a KV cache that keeps every
#   layer's keys and values; the cached logits equal the recomputed ones (float64);
# - what the cache saves in FLOPs, step by step, plotted;
# - arithmetic intensity (FLOPs per byte moved), and why decoding is bound by memory, not by arithmetic:
#   a roofline picture, and what batching does and does not fix;
# - the memory traffic of the naive block, kernel by kernel, and what each common fusion saves;
# - the online softmax: attention by tiles, equal to plain attention to 1e-12, keeping $O(L)$ bytes for backward
#   against $O(L^2)$, and its FLOPs;
# - choosing the next token: temperature, top-k and top-p (nucleus) sampling, each one's kept distribution
#   drawn; perplexity, the exponential of the mean cross-entropy, and why a uniform model scores $V$.
#
# Run it as a script, `python -m tinygrad_block lesson 16`, or as a notebook,
# `python -m tinygrad_block lesson 16 --notebook --execute` (it lands beside this file).

# %%
import numpy as np
from matplotlib.ticker import StrMethodFormatter

import tinygrad_block as tb
from tinygrad_block import accounting as acc
from tinygrad_block import manual, measure, nn
from tinygrad_block.counting import count_flops, count_saved_bytes
from tinygrad_block.nn.decode import next_token, sampling_probabilities
from tinygrad_block.nn.tiled import online_softmax_attention
from tinygrad_block.pictures import figure

from course import out_dir, show

OUT = out_dir(16)         # lessons/out/16/: this lesson's pictures
GiB, MiB = 2**30, 2**20
cfg7, cfg70 = nn.preset("llama2-7b"), nn.preset("llama2-70b")

# %% [markdown]
# ## 1. Prefill and decode, with a KV cache
#
# To generate, the model runs the sequence, takes the logits of the last position, picks a token, appends it
# and runs again. Done naively, each step recomputes every position although only the last one is new. But in
# a causal model nothing about an earlier position changes when a token is appended: its keys and values stay
# the same. So every attention layer can keep them in a **KV cache** (lesson 07 counted its size), and a step
# then runs the new token alone against them.
#
# Generation with a cache has two phases:
# - **prefill**: the whole prompt in one call, `model(prompt, cache=cache)`. It returns the logits of every
#   prompt position and fills the cache;
# - **decode**: one token per call, `model(new_token, cache=cache)`. The token sits at position
#   `cache.length`: RoPE rotates it by that position, and its query attends to every cached key and its own.
#
# Below, the `tiny` preset in float64 prefills a 6-token prompt (logits (1, 6, 256), 6,144 bytes of cache: 2 layers
# × K and V × 2 KV heads × 6 positions × 16 numbers × 8 bytes). One decode step of token 7 gives logits (1, 1, 256)
# that equal the last row of running all 7 tokens from scratch, to better than 1e-12 (the two paths add the same
# numbers in a different order, so they differ in the last bits). `model.generate` can draw each next token at
# random from the softmax of the last logits, with a **temperature** that divides the logits first (higher: a
# flatter draw); `temperature=0` draws nothing and is **greedy** generation, always picking the most likely next
# token. Greedy generation of 40 tokens with the cache (`use_cache=True`, the default) and with `use_cache=False`
# gives the same 40 tokens.
#
# The decode step costs 223,271 FLOPs, counted by running, exactly `accounting.decode_flops`. The same 7
# tokens recomputed cost 1,562,897 FLOPs, 7.0 times more.

# %%
cfg = nn.preset("tiny")
model = nn.LM(cfg, generator=tb.Generator(0), dtype=tb.float64)
prompt = tb.tensor([[1, 2, 3, 4, 5, 6]])                                   # (B, L) = (1, 6) token ids
cache = nn.KVCache(model, batch=1)
with tb.no_grad():
    prefill = model(prompt, cache=cache)                                   # (1, 6, vocab_size)
    prefill_len, prefill_bytes = cache.length, cache.nbytes
    with count_flops() as decode_count:
        decode = model(tb.tensor([[7]]), cache=cache)                      # (1, 1, vocab_size): position 6 only
    with count_flops() as full_count:
        full = model(tb.tensor([[1, 2, 3, 4, 5, 6, 7]]))                   # (1, 7, vocab_size), no cache
gap = np.abs(decode.numpy()[0, -1] - full.numpy()[0, -1]).max()
cached = model.generate(prompt, 40, temperature=0)                         # (1, 46)
recomputed = model.generate(prompt, 40, temperature=0, use_cache=False)
print(f"prefill: logits {prefill.shape}, cache length {prefill_len}: {prefill_bytes:,} bytes")
print(f"decode:  logits {decode.shape}, cache length {cache.length}; max |cached - recomputed| = {gap:.1e}")
print(f"greedy, 40 new tokens: same tokens with and without the cache: "
      f"{bool((cached.numpy() == recomputed.numpy()).all())}")
print(f"  {cached.numpy()[0, 6:].tolist()}")
print(f"FLOPs: decode step {decode_count.total():,}, recomputing 7 tokens {full_count.total():,} "
      f"({full_count.total() / decode_count.total():.1f} x)")
assert prefill.shape == (1, 6, 256) and decode.shape == (1, 1, 256) and (prefill_len, cache.length) == (6, 7)
assert prefill_bytes == acc.kv_cache_bytes(cfg, 6, 1, 8) == 2 * 2 * 2 * 6 * 16 * 8 == 6_144
assert cache.nbytes == acc.kv_cache_bytes(cfg, 7, 1, 8)
assert gap < 1e-12
assert cached.shape == (1, 46) and (cached.numpy() == recomputed.numpy()).all()
assert decode_count.total() == acc.decode_flops(cfg, 7, matmul_only=False) == 223_271
assert full_count.total() == acc.model_forward_flops(cfg, 7, matmul_only=False) == 1_562_897
assert round(full_count.total() / decode_count.total(), 1) == 7.0

# %% [markdown]
# ## 2. What the cache saves
#
# Without a cache, the step that writes token $t + 1$ runs all $t$ positions: its cost grows with $t$, and the
# attention part of it with $t^2$. With a cache it runs one position, and only attention's $4\,t\,d$ FLOPs per
# layer (its scores and weighted sum over $t$ keys) grow with $t$.
#
# For Llama-2-7B writing 1,000 tokens after a 1,000-token prompt, the closed forms of `accounting` give each
# step's FLOPs (`model_forward_flops` for a whole recomputation, `decode_flops` for a cached step). They are
# checked against a count on the shape-only device first: `measure.generation_phases` runs a prefill of 1,000
# tokens and one decode step on meta, and counts 13,749,999,811,000 and 13,750,530,243 FLOPs, the closed forms
# exactly. The first step (the prefill) is the same either way. After it, the recomputing run spends
# 21.0 PFLOPs (peta: $10^{15}$) on the other 999 steps against 14.0 TFLOPs (tera: $10^{12}$) with the cache,
# **1,503 times** more: about the average length it recomputes.
#
# The price is memory: the cache of a 2,000-token sequence holds 1,048,576,000 bytes (1,000 MiB) in bf16,
# and that memory must be read at every step, as the next section shows.

# %%
prompt_len, new_tokens = 1000, 1000
prefill7, decode7 = measure.generation_phases(cfg7, prompt_len, 1, "bf16")
lengths = np.arange(prompt_len + 1, prompt_len + new_tokens)                  # context of steps 2 .. 1000
with_cache = np.array([acc.decode_flops(cfg7, int(n), matmul_only=False) for n in lengths])
without = np.array([acc.model_forward_flops(cfg7, int(n), matmul_only=False) for n in lengths])
ratio = without.sum() / with_cache.sum()
kv_2000 = acc.kv_cache_bytes(cfg7, prompt_len + new_tokens)
print(f"Llama-2-7B, counted on meta: prefill of {prompt_len} tokens {prefill7.flops:,} FLOPs, one decode step at "
      f"context {decode7.context} {decode7.flops:,}")
print(f"steps 2..{new_tokens}: recomputing {without.sum() / 1e15:.1f} PFLOPs, cached {with_cache.sum() / 1e12:.1f} "
      f"TFLOPs ({ratio:,.0f} x); the cache at {prompt_len + new_tokens} tokens: {kv_2000:,} bytes")
assert prefill7.flops == acc.model_forward_flops(cfg7, prompt_len, matmul_only=False) == 13_749_999_811_000
assert decode7.flops == acc.decode_flops(cfg7, prompt_len + 1, matmul_only=False) == 13_750_530_243
assert round(without.sum() / 1e15, 1) == 21.0 and round(with_cache.sum() / 1e12, 1) == 14.0 and round(ratio) == 1503
assert kv_2000 == 1_048_576_000 == 1000 * MiB

fig = figure(8, 3.6)
ax = fig.add_subplot()
ax.plot([1], [prefill7.flops], "o", color="0.3", label="step 1: the prompt (prefill), the same either way")
ax.plot(lengths - prompt_len + 1, without, color="C3", label="recomputing the whole sequence")
ax.plot(lengths - prompt_len + 1, with_cache, color="C0", label="with a KV cache: one new token")
ax.set(yscale="log", xlabel="generation step", ylabel="FLOPs per step",
       title="Llama-2-7B, 1,000-token prompt: the cost of each new token")
ax.legend(loc="center right", fontsize=9)
show(fig, OUT / "flops_per_step.png")

# %% [markdown]
# ## 3. Arithmetic intensity: why decoding is bound by memory
#
# A step costs time in two ways: the arithmetic, and moving its operands from the GPU's main memory (HBM, high-bandwidth
# memory) to the compute units. Their ratio, FLOPs per byte moved, is the step's **arithmetic intensity**. A GPU has a
# ratio of its own, its peak FLOP/s over its **bandwidth** (the bytes per second it can read from memory). We take an
# H100 SXM at **990 TFLOP/s** (*dense* bf16: matmuls of ordinary matrices; the datasheet's twice-as-large "sparse"
# figure needs two zeros in every four numbers, lesson 17) and **3.35 TB/s**: assumptions, the vendor's figures, never
# reached in practice. Its ratio, the **ridge point**, is 295.5 FLOPs per byte. (990 is the peak as commonly quoted;
# NVIDIA's exact figure is 989.4, which 990 rounds. This lesson keeps the round figure, since its assumptions are round
# anyway: with 989.4 the ratio would be 295.3. Lesson 17, which divides measured times by the peak, uses the exact
# 989.4.) A step whose intensity is below the ridge point waits for memory (it is *memory-bound*); above it, for
# arithmetic (*compute-bound*). The most FLOP/s a step can reach is min(peak, intensity × bandwidth): plotted against
# the intensity, this is the **roofline**, a slope that rises until the ridge point and a flat roof after it.
#
# `measure.generation_phases` counts both for Llama-2-7B in bf16, with a 1,000-token prompt. The bytes are the
# weights each phase reads (only the looked-up rows of the embedding) and the whole KV cache:
#
# - **prefill**: 13.75 TFLOPs over 13.2 GB of weights and 0.52 GB of cache: **1,000 FLOPs per byte**. Every
#   weight is read once and used for all 1,000 prompt tokens, so the intensity is about the prompt length.
#   Compute-bound.
# - **decode**: 13.75 GFLOPs over the same bytes: **1.0 FLOP per byte**. Each weight is read to do one
#   multiply and one add (2 FLOPs for 2 bytes). At 3.35 TB/s the step takes at least 4.10 ms, whatever the
#   arithmetic (13.9 µs of it at peak): at most **244 tokens per second** for one sequence, against the 71,997
#   its FLOPs alone would allow. (Lesson 13's 64,446 is the same bound at a context of 4,096, counting only the
#   matmuls.) The GPU runs at 0.34 % of its peak. Counting only the matmuls'
#   FLOPs and only the weights they read (exercise 2), the ratio is exactly 1: the attention over the cache
#   also does 2 FLOPs per 2-byte number it reads, because Llama-2-7B has one KV head per query head.
#
# **Batching** $B$ sequences reads each weight once for all of them, so the weights' share of the intensity
# grows with $B$. The cache does not: every sequence has its own. Attention over the cache does
# $4\,d_{head}$ FLOPs per key per query head and reads $2 \times 2\,d_{head}$ bytes per key per KV head, so its
# intensity is $H / H_{kv}$: 1 for Llama-2-7B (MHA), 8 for Llama-2-70B (GQA). At a context of 1,001 tokens:
#
# - Llama-2-7B's decode intensity rises from 1.0 to 18.8 at $B = 64$ and can never pass 26.2, its FLOPs per
#   sequence over its cache bytes per sequence: its decode stays memory-bound at every batch size.
# - Llama-2-70B's rises to 303.1 at $B = 1024$, towards a limit of 427.2. It crosses the H100's 295.5 from
#   $B$ = 941, where the caches alone hold 309 GB, several GPUs' worth.
#
# **Which parts are bound by what.** A common table of a block's compute marks the projections and the FFN
# "compute-bound" and only the attention core (in decode) and the norms "memory-bound". The label depends on
# the phase, not on the part: in prefill and training many tokens share each weight and the matmuls are
# compute-bound; in decode at small batch every matmul of the block runs at about 1 FLOP per byte and is
# memory-bound. The same table puts the four projections at about $4d^2$ FLOPs per token, about 33 %, against
# the FFN's $6\,d\,d_{ff}$, about 67 %. $4d^2$ is their number of weights; at 2 FLOPs a weight they cost $8d^2$ =
# 134,217,728 for Llama-2-7B against the FFN's 270,532,608, and those are the 33.2 % and 66.8 %.

# %%
PEAK, BANDWIDTH = 990e12, 3.35e12                      # assumptions: H100 SXM, dense bf16 FLOP/s and HBM bytes/s
ridge = PEAK / BANDWIDTH
for ph in (prefill7, decode7):
    print(f"{ph.name:8} {ph.tokens:>5} tokens: {ph.flops:>18,} FLOPs, weights {ph.weight_bytes:>14,} B, cache "
          f"{ph.cache_bytes:>12,} B: {ph.intensity:8.2f} FLOP/B")
moved = decode7.weight_bytes + decode7.cache_bytes
step_s = max(decode7.flops / PEAK, moved / BANDWIDTH)
print(f"H100 ratio {ridge:.1f} FLOP/B (at 989.4 TFLOP/s: {989.4e12 / BANDWIDTH:.1f}); decode step >= "
      f"{moved / BANDWIDTH * 1e3:.2f} ms of memory against {decode7.flops / PEAK * 1e6:.1f} us of arithmetic: "
      f"<= {1 / step_s:.0f} tokens/s ({PEAK / decode7.flops:,.0f} for the FLOPs alone), "
      f"{decode7.intensity * BANDWIDTH / PEAK:.2%} of peak")
assert round(ridge, 1) == 295.5 and round(prefill7.intensity) == 1000 and round(decode7.intensity, 1) == 1.0
assert round(prefill7.weight_bytes / 1e9, 1) == round(decode7.weight_bytes / 1e9, 1) == 13.2
assert round(prefill7.cache_bytes / 1e9, 2) == round(decode7.cache_bytes / 1e9, 2) == 0.52
assert round(prefill7.flops / 1e12, 2) == 13.75 and round(decode7.flops / 1e9, 2) == 13.75
assert round(moved / BANDWIDTH * 1e3, 2) == 4.10 and round(decode7.flops / PEAK * 1e6, 1) == 13.9
assert round(1 / step_s) == 244 and round(100 * decode7.intensity * BANDWIDTH / PEAK, 2) == 0.34
assert round(PEAK / decode7.flops) == 71_997 and round(PEAK / acc.decode_flops(cfg7, 4096)) == 64_446
assert round(989.4e12 / BANDWIDTH, 1) == 295.3                       # NVIDIA's exact peak, for comparison
matmul_weights = acc.total_params(cfg7) - cfg7.vocab_size * cfg7.d_model - (2 * cfg7.n_layers + 1) * cfg7.d_model
exact = acc.decode_flops(cfg7, prompt_len + 1) / (2 * matmul_weights + acc.kv_cache_bytes(cfg7, prompt_len + 1))
print(f"matmul FLOPs over matmul weights and cache: {exact} FLOP/B")
assert exact == 1.0
projections, ffn = 8 * cfg7.d_model**2, 6 * cfg7.d_model * cfg7.d_ff
print(f"per token: projections 8 d^2 = {projections:,} ({projections / (projections + ffn):.1%}), FFN 6 d d_ff = "
      f"{ffn:,}; 4 d^2 = {4 * cfg7.d_model**2:,} is the projections' weight count")
assert projections == 134_217_728 and ffn == 270_532_608 and round(100 * projections / (projections + ffn), 1) == 33.2
assert 4 * cfg7.d_model**2 == sum(acc.block_param_breakdown(cfg7)[k] for k in ("W_Q", "W_K", "W_V", "W_O"))

batches = [1, 4, 16, 64, 256, 1024, 4096]
decode_at = {c.name: [measure.generation_phases(c, prompt_len, B, "bf16")[1] for B in batches] for c in (cfg7, cfg70)}
limit = {}                                              # B -> infinity: FLOPs per sequence / cache bytes per sequence
for c in (cfg7, cfg70):
    one = decode_at[c.name][0]
    limit[c.name] = one.flops / one.cache_bytes
    print(f"{c.name}: decode intensity at B = " + ", ".join(f"{B}: {ph.intensity:.1f}" for B, ph in
                                                            zip(batches, decode_at[c.name])) +
          f"; limit {limit[c.name]:.1f}; attention over the cache alone: H / H_kv = {c.n_heads // c.n_kv_heads}")
one70 = decode_at["llama2-70b"][0]
crossing = ridge * one70.weight_bytes / (one70.flops - ridge * one70.cache_bytes)
print(f"llama2-70b crosses {ridge:.1f} FLOP/B from B = {np.ceil(crossing):.0f}: caches of "
      f"{np.ceil(crossing) * one70.cache_bytes / 1e9:.0f} GB")
at = {name: dict(zip(batches, phases)) for name, phases in decode_at.items()}
assert round(at["llama2-7b"][64].intensity, 1) == 18.8 and round(limit["llama2-7b"], 1) == 26.2
assert max(ph.intensity for ph in decode_at["llama2-7b"]) < limit["llama2-7b"] < ridge
assert round(at["llama2-70b"][1024].intensity, 1) == 303.1 and round(limit["llama2-70b"], 1) == 427.2 > ridge
assert np.ceil(crossing) == 941 and round(941 * one70.cache_bytes / 1e9) == 309
assert [measure.generation_phases(cfg70, prompt_len, B, "bf16")[1].intensity > ridge for B in (940, 941)] == \
    [False, True]                                                     # counted at the crossing itself
assert at["llama2-70b"][256].intensity < ridge < at["llama2-70b"][1024].intensity
assert all(ph.flops == B * decode_at["llama2-7b"][0].flops for B, ph in zip(batches, decode_at["llama2-7b"]))

fig = figure(12, 4.4)
ax, bx = fig.subplots(1, 2)
xs = np.logspace(-1, 4, 200)
ax.plot(xs, np.minimum(PEAK, xs * BANDWIDTH) / 1e12, color="0.2")
ax.axvline(ridge, color="0.5", ls=":", lw=1)
ax.text(ridge * 1.15, 2, f"ridge: {ridge:.1f} FLOP/B", fontsize=8.5, color="0.3")
points = [("prefill, 1,000 tokens", prefill7.intensity, "C2"), ("decode, B = 1", decode7.intensity, "C3"),
          ("decode, B = 64", at["llama2-7b"][64].intensity, "C1")]
for text, x, color in points:
    ax.plot(x, min(PEAK, x * BANDWIDTH) / 1e12, "o", color=color, ms=7, label=f"Llama-2-7B {text}: {x:,.1f}")
ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOPs per byte)", ylabel="attainable TFLOP/s",
       title="The roofline of an H100 (990 TFLOP/s, 3.35 TB/s)", ylim=(0.2, 2000))
ax.legend(loc="lower right", fontsize=8)
for (name, phases), color in zip(decode_at.items(), ("C0", "C4")):
    bx.plot(batches, [ph.intensity for ph in phases], "o-", color=color, label=f"{name} decode")
    bx.axhline(limit[name], color=color, ls="--", lw=1)
    bx.text(1.1, limit[name] * 1.12, f"limit {limit[name]:.1f} (FLOPs / cache bytes)", color=color, fontsize=8)
bx.axhline(ridge, color="0.3", ls=":", lw=1.2)
bx.text(1.1, ridge * 0.78, f"H100 ridge {ridge:.1f}", fontsize=8, color="0.3")
bx.set(xscale="log", yscale="log", xlabel="batch B (sequences decoded together)", ylabel="FLOPs per byte",
       title="Decode at context 1,001: batching, until the caches dominate", ylim=(0.5, 1500))
bx.legend(loc="lower right", fontsize=8)
show(fig, OUT / "roofline.png")

# %% [markdown]
# ## 4. The naive block's memory traffic, kernel by kernel
#
# Bytes are moved not only for the weights. A GPU runs a model as a series of **kernels**, each one program launched
# on the device (lesson 17 runs them). Without fusion, each step of the block is a kernel of its own: it reads its
# inputs from memory and writes its output back, and the next kernel reads it again. The table below counts those
# reads and writes for one Llama-2-7B block, per token, during a prefill of $L$ = 4,096 tokens, in numbers (multiply
# by 2 for bf16 bytes). The weights are left out here; each kernel is taken to read each input once. The widths of
# the tensors are those `measure.walk` finds when it runs the block.
#
# The $H \times L$ = 131,072 scores per token dominate: the scores are written, the mask reads and rewrites
# them, the softmax reads them and writes the weights, and the weighted sum of $V$ reads those. That is
# $6HL$ = 786,432 of the block's 971,264 numbers per token. The rest is the $d$- and $d_{ff}$-wide tensors.
#
# Each common fusion runs some neighbouring kernels as one, so a tensor made and used inside it stays **on chip**,
# in the small fast memory beside the compute units (registers and shared memory: kilobytes, where HBM holds
# gigabytes), and never reaches HBM. `fuse` below merges kernels and drops every such tensor from the count.
# What each saves, per token:
#
# | fusion | kernels merged | saves | numbers |
# |---|---|---|---|
# | residual add + RMSNorm | residual add 1, RMSNorm 2 | the norm's read of $h$ | 4,096 |
# | one QKV projection | Q, K, V projections | two of the three reads of the normed input | 8,192 |
# | RoPE inside the projection | QKV, RoPE | writing and reading the unrotated q and k | 16,384 |
# | SwiGLU in one kernel | gate, up, SiLU(gate) × up | writing and reading gate and up; one read of the input | 48,128 |
# | FlashAttention | scores, mask, softmax, weights @ V | every $H \times L$ tensor | 786,432 |
#
# The residual add and RMSNorm, fused, still write $h$: the block's second residual add needs it. A common
# summary says this fusion "avoids writing and re-reading $h$"; it avoids the re-reading only. Forward, the pair
# moves 4 $d$-wide rows instead of 5, and backward 4 instead of 6 (`manual.add_rmsnorm_traffic`, the same count
# from the fused op's own kernel list). The block has a second such pair: its last residual add with the next
# block's first RMSNorm.
#
# Fused, the block moves 108,032 numbers per token, 9.0 times less. Compare with the weights: read once for
# the 4,096 tokens of the prefill they cost 49,408 numbers per token. So in a long prefill (and in training),
# the naive block's traffic is mostly attention's $L \times L$ tensors, and FlashAttention is the fusion that
# matters. In decode it is the other way round. A decode step reads the block's 202,375,168 weights for one
# token, and at a context of 4,096 its cache, 33,554,432 numbers. Its one query against 4,096 keys makes as
# many scores as a prefill token does, so its activations are the same 971,264 numbers; fusing them all saves
# at most 0.36 % of the step's traffic.

# %%
d, d_kv, d_ff, H, L = cfg7.d_model, cfg7.n_kv_heads * cfg7.d_head, cfg7.d_ff, cfg7.n_heads, 4096


def naive_kernels(d: int, d_kv: int, d_ff: int, scores: int) -> list:
    """One block's kernels as (name, {tensor read: width}, {tensor written: width}), per token; `scores` is the
    number of attention scores per token (H x context)."""
    return [("RMSNorm 1", {"x": d}, {"xn": d}),
            ("Q projection", {"xn": d}, {"q": d}), ("K projection", {"xn": d}, {"k": d_kv}),
            ("V projection", {"xn": d}, {"v": d_kv}),
            ("RoPE", {"q": d, "k": d_kv}, {"q_rot": d, "k_rot": d_kv}),
            ("scores", {"q_rot": d, "k_rot": d_kv}, {"s": scores}), ("mask", {"s": scores}, {"s_masked": scores}),
            ("softmax", {"s_masked": scores}, {"p": scores}), ("weights @ V", {"p": scores, "v": d_kv}, {"o": d}),
            ("O projection", {"o": d}, {"a": d}), ("residual add 1", {"x": d, "a": d}, {"h": d}),
            ("RMSNorm 2", {"h": d}, {"hn": d}),
            ("gate projection", {"hn": d}, {"g": d_ff}), ("up projection", {"hn": d}, {"u": d_ff}),
            ("SiLU(gate) x up", {"g": d_ff, "u": d_ff}, {"m": d_ff}), ("down projection", {"m": d_ff}, {"f": d}),
            ("residual add 2", {"h": d, "f": d}, {"out": d})]


def fuse(kernels: list, names: list, new_name: str) -> list:
    """Run the kernels `names` (consecutive) as one: it reads what the group reads from outside, once, and
    writes only what a later kernel reads (or the block's output); the rest stays on chip."""
    at = [i for i, k in enumerate(kernels) if k[0] in names]
    group, later = kernels[at[0]:at[-1] + 1], kernels[at[-1] + 1:]
    made = {t: w for _, _, writes in group for t, w in writes.items()}
    reads = {t: w for _, r, _ in group for t, w in r.items() if t not in made}
    needed = {t for _, r, _ in later for t in r} | ({"out"} if not later else set())
    writes = {t: w for t, w in made.items() if t in needed}
    return kernels[:at[0]] + [(new_name, reads, writes)] + later


def traffic(kernels: list) -> int:
    return sum(sum(r.values()) + sum(w.values()) for _, r, w in kernels)


steps = {s.operation: s for s in measure.walk(cfg7, 1, 8)}           # widths per token, from running the block
assert steps["Q projection"].shape[1] * steps["Q projection"].shape[3] == d and steps["K projection"].shape[1] * \
    steps["K projection"].shape[3] == d_kv and steps["gate projection"].shape[-1] == d_ff
assert steps["softmax"].shape[1] * steps["softmax"].shape[3] == H * 8  # H x context scores per token

FUSIONS = [("residual add + RMSNorm", ["residual add 1", "RMSNorm 2"]),
           ("one QKV projection", ["Q projection", "K projection", "V projection"]),
           ("RoPE inside the projection", ["one QKV projection", "RoPE"]),
           ("SwiGLU in one kernel", ["gate projection", "up projection", "SiLU(gate) x up"]),
           ("FlashAttention", ["scores", "mask", "softmax", "weights @ V"])]
kernels = naive_kernels(d, d_kv, d_ff, H * L)
print(f"{'Llama-2-7B block, L = 4096, per token':42} {'reads':>9} {'writes':>9}")
for name, reads, writes in kernels:
    print(f"  {name:40} {sum(reads.values()):>9,} {sum(writes.values()):>9,}")
naive = traffic(kernels)
totals, saved = [("naive", naive)], {}
for name, group in FUSIONS:
    before = traffic(kernels)
    kernels = fuse(kernels, group, name)
    saved[name] = before - traffic(kernels)
    totals.append((f"+ {name}", traffic(kernels)))
    print(f"+ {name:40} saves {saved[name]:>9,} -> {traffic(kernels):>9,}")
fused = traffic(kernels)
weights_block = acc.params_per_block(cfg7) - 2 * d                  # the matmul weights (the norm gains are 2 d)
cache_4096 = acc.kv_cache_bytes(cfg7, 4096, 1, 1) // cfg7.n_layers     # one layer's K and V, in numbers
decode_naive = traffic(naive_kernels(d, d_kv, d_ff, H * 4096))           # one query against 4,096 keys
decode_share = (decode_naive - fused) / (weights_block + cache_4096 + decode_naive)
print(f"naive {naive:,}, fused {fused:,} ({naive / fused:.1f} x); weights per token in the prefill "
      f"{weights_block // L:,}")
assert naive == 971_264 and 6 * H * L == 786_432 and H * L == 131_072
assert saved == {"residual add + RMSNorm": d, "one QKV projection": 2 * d, "RoPE inside the projection":
                 2 * (d + d_kv), "SwiGLU in one kernel": d + 4 * d_ff, "FlashAttention": 6 * H * L}
assert list(saved.values()) == [4096, 8192, 16384, 48128, 786432]
print(f"decode at context 4096, per block: weights {weights_block:,}, cache {cache_4096:,}, activations "
      f"{decode_naive:,}: fusing saves at most {decode_share:.2%}")
assert fused == 108_032 and round(naive / fused, 1) == 9.0 and weights_block // L == 49_408
assert weights_block == 202_375_168 and cache_4096 == 33_554_432 and decode_naive == naive
assert round(100 * decode_share, 2) == 0.36
pair = {fused_: manual.add_rmsnorm_traffic(fused_) for fused_ in (False, True)}
pair_rows = [kernel for kernel in naive_kernels(1, 1, 1, 1) if kernel[0] in ("residual add 1", "RMSNorm 2")]
assert sum(pair[False]["forward"]) == traffic(pair_rows) == 5 and sum(pair[True]["forward"]) == 4
assert sum(pair[False]["backward"]) == 6 and sum(pair[True]["backward"]) == 4

fig = figure(9, 3.8)
ax = fig.add_subplot()
names = [name for name, _ in totals][::-1]                       # barh draws the first name at the bottom
values = [total for _, total in totals][::-1]
ax.barh(names, values, color=["C2"] + ["C0"] * (len(values) - 2) + ["C3"])
for y, v in enumerate(values):
    ax.text(v * 1.03, y, f"{v:,}", va="center", fontsize=8.5)
ax.axvline(weights_block // L, color="0.3", ls=":", lw=1.2)
ax.text(weights_block // L * 1.3, -0.95, f"the weights, read once for all 4,096 tokens: {weights_block // L:,} "
        "per token", va="center", fontsize=8.5, color="0.3")
ax.xaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
ax.set(xlim=(0, 1.15 * naive), ylim=(-1.5, len(values) - 0.5),
       xlabel="numbers read + written per token (bf16: 2 bytes each)",
       title="One Llama-2-7B block, prefill of 4,096 tokens: activation traffic, fusion by fusion")
show(fig, OUT / "fusion_traffic.png")

# %% [markdown]
# ## 5. The online softmax: attention one block of keys at a time
#
# FlashAttention's fusion needs one idea: a softmax over keys that arrive in blocks, without ever holding all
# the scores. For one query with scores $s_j$ and values $v_j$, keep three numbers as the blocks go by:
# the largest score so far $m$, the sum $\ell = \sum_j e^{s_j - m}$, and the unnormalised output
# $\mathrm{acc} = \sum_j e^{s_j - m} v_j$. When a block brings a larger maximum $m'$, the old sums were
# computed against the old $m$, and multiplying them by $e^{m - m'}$ restates them against the new one:
#
# $$m' = \max(m, \max_{j \in b} s_j), \quad \ell' = \ell\, e^{m - m'} + \sum_{j \in b} e^{s_j - m'}, \quad
# \mathrm{acc}' = \mathrm{acc}\, e^{m - m'} + \sum_{j \in b} e^{s_j - m'} v_j.$$
#
# At the end, $\mathrm{acc} / \ell$ is exactly $\mathrm{softmax}(s)\,V$. Subtracting the running maximum also
# keeps every exponent at or below 0: the exponential of a score above about 709.8 overflows float64 (and
# above 88.7, float32): these are the logarithms of the largest number each can hold.
#
# Below, one query meets 12 keys in 3 blocks of 4. Its scores lie between 704 and 713 and rise from block to
# block, so the running maximum changes at each block, and $e^{s}$ taken directly overflows to infinity for
# the last block's 4 scores. The online result equals the softmax, computed stably on all 12 scores at once, to
# within 1e-15.

# %%
r = np.random.default_rng(0)
rising = np.repeat([0.0, 3.0, 6.0], 4)                                     # each block's scores a little higher
scores = tb.tensor((704 + rising + r.uniform(0, 3, 12)).reshape(1, 12), dtype=tb.float64)  # (1 query, 12 keys)
values = tb.tensor(r.standard_normal((12, 3)), dtype=tb.float64)                                 # (12 keys, d = 3)
with np.errstate(over="ignore"):
    overflowed = int(np.isinf(np.exp(scores.numpy())).sum())
m = row_sum = out = None
ms = []                                                                              # the running max after each block
for j0 in range(0, 12, 4):
    s, v = scores[:, j0:j0 + 4], values[j0:j0 + 4]                                   # (1, 4), (4, 3)
    m_new = s.max(axis=-1, keepdims=True) if m is None else tb.maximum(m, s.max(axis=-1, keepdims=True))
    p = (s - m_new).exp()                                                            # (1, 4): every value <= 1
    if m is None:
        row_sum, out = p.sum(axis=-1, keepdims=True), p @ v                          # (1, 1), (1, 3)
    else:
        rescale = (m - m_new).exp()
        row_sum, out = rescale * row_sum + p.sum(axis=-1, keepdims=True), rescale * out + p @ v
    m = m_new
    ms.append(m.item())
    print(f"keys {j0:2}..{j0 + 3:2}: scores {np.round(s.numpy()[0], 1)}  m = {m.item():6.1f}  l = {row_sum.item():.4f}")
online = (out / row_sum).numpy()
reference = (scores.softmax(axis=-1) @ values).numpy()                              # (1, 3)
print(f"exp(s) overflows for {overflowed} of 12 scores; online - softmax(s) V: {np.abs(online - reference).max():.1e}")
assert overflowed == 4 and np.abs(online - reference).max() < 1e-15 and ms[0] < ms[1] < ms[2]
assert 704 < scores.numpy().min() and scores.numpy().max() < 713
assert [round(float(np.log(np.finfo(t).max)), 1) for t in (np.float64, np.float32)] == [709.8, 88.7]
assert m.item() == scores.numpy().max() and np.isclose(row_sum.item(), np.exp(scores.numpy() - m.item()).sum())

# %% [markdown]
# ## 6. Tiled attention: $O(L)$ kept for backward, and its FLOPs
#
# `nn.tiled_attention` runs this loop over blocks of queries and blocks of keys. Per query it keeps only
# $m$, $\ell$ and acc, skips the key blocks that lie wholly in a query block's future, and adds the causal mask
# only on tiles that cross the diagonal. For the backward it keeps just the output and one number per query,
# $\mathrm{lse} = m + \log \ell$, the log-sum-exp $\log \sum_j e^{s_j}$ of its scores; the backward recomputes
# each tile's weights as $e^{s - \mathrm{lse}}$.
# `nn.plain_attention` is the usual $\mathrm{softmax}(q k^\top / \sqrt{d} + \text{mask})\,V$.
#
# **Equal.** With 4 query heads sharing 2 KV heads, 24 queries whose keys follow 16 cached ones (40 keys in all,
# as a prompt continued after a KV cache has them),
# $d_{head}$ = 16 and tiles of 8 × 8, in float64, the outputs and the gradients of q, k and v agree to
# better than 1e-12.
#
# **Memory kept for backward**, measured with `count_saved_bytes`, per head, float32, $d_{head}$ = 128, tiles of
# 128, causal, $n = L$. Plain attention keeps two $L \times L$ tensors (the exponentials and the softmax
# weights), plus $q / \sqrt{d}$ and the row sums: $4\,(2L^2 + Ld + L)$ bytes. Tiled keeps the output and lse:
# $4\,(Ld + L)$. The same loop differentiated by autograd (`online_softmax_attention`) keeps every tile it made,
# still $O(L^2)$; that is why `tiled_attention` is a primitive of its own (a `tb.Function`, as lesson 02 wrote
# one), with a hand-derived backward. At
# $L$ = 4,096 plain keeps 136,331,264 bytes (130 MiB) per head, the loop under autograd 38,813,696, and tiled
# 2,113,536: 64.5 times less than plain. Doubling $L$ doubles tiled's bytes exactly.
#
# **FLOPs**, counted on meta for $L = n$ = 2,048 ($T$ = 16 tiles of 128 per side). Each tile costs $4 d$ matmul FLOPs
# per score forward ($q k^\top$, and $P V$ with $P$ the softmax weights) and $10 d$ backward (the scores recomputed,
# then $dV$, $dP$, $dQ$, $dK$), against plain's $4d$ and $8d$ on every score. Plain computes the whole square and then
# masks half of it; the tiles skip the blocks above the diagonal, so causal tiled attention does $(T + 1) / 2T$ = 17/32
# of plain's matmul work forward, and 85/128 of it backward: recomputing costs 10/8 per tile visited. Without a mask it
# visits every tile: the same forward, and 5/4 of plain's backward. What this does not show is time. Here each tile is
# several of the engine's ops, each writing its result to memory; FlashAttention's speed comes from one kernel that
# keeps the tile on chip (section 4). What carries over exactly is the math, the $O(L)$ memory kept for backward, and
# the FLOPs.

# %%
r = np.random.default_rng(1)
q, k, v = (tb.tensor(r.standard_normal(shape), dtype=tb.float64, requires_grad=True)
           for shape in ((1, 4, 24, 16), (1, 2, 40, 16), (1, 2, 40, 16)))      # q (B, H, L, d); k, v (B, H_kv, n, d)
dout = tb.tensor(r.standard_normal((1, 4, 24, 16)), dtype=tb.float64)
results = {}
for name, attend in (("plain", lambda: nn.plain_attention(q, k, v)),
                     ("tiled", lambda: nn.tiled_attention(q, k, v, block_q=8, block_k=8))):
    for t in (q, k, v):
        t.grad = None
    o = attend()                                                                 # (1, 4, 24, 16)
    o.backward(dout)
    results[name] = [o.numpy()] + [t.grad.numpy() for t in (q, k, v)]
gaps = [np.abs(a - b).max() for a, b in zip(results["plain"], results["tiled"])]
print("tiled - plain, float64: out {:.1e}, dq {:.1e}, dk {:.1e}, dv {:.1e}".format(*gaps))
assert max(gaps) < 1e-12


def saved_per_head(attend, L: int, d_head: int = 128) -> int:
    """Bytes attention keeps for backward, one head, float32, on meta; q, k, v are inputs (not counted)."""
    q, k, v = (tb.zeros(1, 1, L, d_head, device="meta", requires_grad=True) for _ in range(3))   # (B, H, L, d)
    with count_saved_bytes() as saved:
        attend(q, k, v)
    return saved.total()


ATTEND = {"plain": lambda q, k, v: nn.plain_attention(q, k, v),
          "autograd through the loop": lambda q, k, v: online_softmax_attention(q, k, v, True, 128, 128)[0],
          "tiled": lambda q, k, v: nn.tiled_attention(q, k, v, block_q=128, block_k=128)}
Ls = [512, 1024, 2048, 4096]
kept = {name: [saved_per_head(f, L) for L in Ls] for name, f in ATTEND.items()}
print(f"{'L':>6} " + " ".join(f"{name:>26}" for name in kept))
for i, L in enumerate(Ls):
    print(f"{L:>6} " + " ".join(f"{kept[name][i]:>26,}" for name in kept))
assert all(kept["plain"][i] == 4 * (2 * L * L + L * 128 + L) for i, L in enumerate(Ls))
assert all(kept["tiled"][i] == 4 * (L * 128 + L) for i, L in enumerate(Ls))
assert kept["plain"][-1] == 136_331_264 and round(kept["plain"][-1] / MiB) == 130
assert kept["autograd through the loop"][-1] == 38_813_696 and kept["tiled"][-1] == 2_113_536
assert round(kept["plain"][-1] / kept["tiled"][-1], 1) == 64.5 and kept["tiled"][-1] == 2 * kept["tiled"][-2]


def attention_flops(attend, causal: bool, L: int = 2048, d_head: int = 128) -> tuple[int, int]:
    """(forward, backward) matmul FLOPs of one head on meta."""
    q, k, v = (tb.zeros(1, 1, L, d_head, device="meta", requires_grad=True) for _ in range(3))
    with count_flops() as fc:
        o = attend(q, k, v, causal)                                              # (1, 1, L, d_head)
        o.backward(tb.ones_like(o))
    return fc.total("forward", matmul_only=True), fc.total("backward", matmul_only=True)


flops = {(name, causal): attention_flops(f, causal) for causal in (True, False) for name, f in
         (("plain", lambda q, k, v, c: nn.plain_attention(q, k, v, causal=c)),
          ("tiled", lambda q, k, v, c: nn.tiled_attention(q, k, v, causal=c, block_q=128, block_k=128)))}
for (name, causal), (fwd, bwd) in flops.items():
    print(f"{name}, {'causal' if causal else 'not causal':10}: forward {fwd:>14,}  backward {bwd:>14,}")
T, area = 2048 // 128, 128 * 128 * 16 * 17 // 2                    # tiles per side; scores in the visited tiles
assert flops["plain", True] == flops["plain", False] == (4 * 128 * 2048**2, 8 * 128 * 2048**2)
assert flops["tiled", True] == (4 * 128 * area, 10 * 128 * area)
assert flops["tiled", True][0] * 32 == 17 * flops["plain", True][0] and (T + 1) / (2 * T) == 17 / 32
assert flops["tiled", True][1] * 128 == 85 * flops["plain", True][1]
assert flops["tiled", False][0] == flops["plain", False][0]
assert 4 * flops["tiled", False][1] == 5 * flops["plain", False][1]

fig = figure(7.5, 4)
ax = fig.add_subplot()
for (name, values_), color in zip(kept.items(), ("C3", "C1", "C0")):
    ax.plot(Ls, values_, "o-", color=color, label=name)
    ax.text(Ls[-1] * 1.08, values_[-1], f"{values_[-1] / MiB:.1f} MiB", va="center", fontsize=8.5, color=color)
ax.set(xscale="log", yscale="log", xlabel="sequence length L", ylabel="bytes kept for backward, one head",
       title="Attention's memory for backward: L² for plain, L for tiled", xlim=(400, 7000))
ax.set_xticks(Ls, [f"{L:,}" for L in Ls])
ax.set_xticks([], minor=True)
ax.legend(loc="upper left", fontsize=9)
show(fig, OUT / "saved_bytes.png")

# %% [markdown]
# ## 7. Choosing the next token: temperature, top-k, top-p
#
# Section 1's `generate` took the likeliest token (greedy) or drew one from $\mathrm{softmax}(z / T)$. Sampling has
# two more knobs, applied in this order (as transformers applies them), each renormalising what it keeps:
# - **temperature** $T$ divides the logits: $T < 1$ sharpens the distribution, $T > 1$ flattens it;
# - **top-k** keeps the $k$ likeliest tokens;
# - **top-p** (nucleus sampling) keeps the smallest set of the likeliest tokens whose probabilities sum to at
#   least $p$: few tokens where the model is sure, many where it is not. `top_p=1` keeps all, a tiny `top_p`
#   keeps the likeliest alone, which is greedy.
#
# On one row of ten logits, `nn.decode.sampling_probabilities` gives the distribution a token is drawn from.
# $T = 0.5$ puts 0.657 on the likeliest token, $T = 1$ 0.399 and $T = 2$ 0.239, each equal to
# $e^{z_i/T} / \sum_j e^{z_j/T}$ to 1e-15. Top-k with $k = 3$ keeps 3 tokens, renormalised to 0.522, 0.286 and
# 0.192. The cumulative probabilities at $T = 1$ are 0.399, 0.619, 0.766, 0.855, ...: the first to reach
# $p = 0.8$ is the fourth, so the nucleus holds four tokens, renormalised to 0.467, 0.256, 0.172, 0.104. 20,000
# draws with `top_p=0.8` land on those four only, each as often as its probability (within 4.5 standard errors).

# %%
z = np.array([3.0, 2.4, 2.0, 1.5, 1.1, 0.6, 0.2, -0.4, -1.0, -1.5])        # one row of logits, vocabulary of 10
row = tb.tensor(z[None])                                                     # (1, 10)


def softmax_np(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


drawn_from = {"T = 0.5": sampling_probabilities(row, 0.5), "T = 1": sampling_probabilities(row, 1.0),
              "T = 2": sampling_probabilities(row, 2.0), "top-k 3": sampling_probabilities(row, 1.0, top_k=3),
              "top-p 0.8": sampling_probabilities(row, 1.0, top_p=0.8)}
drawn_from = {name: p.numpy()[0] for name, p in drawn_from.items()}        # name -> (10,) probabilities
for name, p in drawn_from.items():
    print(f"{name:>9}: " + " ".join(f"{v:.3f}" for v in p) + f"   ({(p > 0).sum()} tokens kept)")
for temp in (0.5, 1.0, 2.0):
    assert np.abs(drawn_from[f"T = {temp:g}"] - softmax_np(z / temp)).max() < 1e-15
assert [round(drawn_from[f"T = {temp:g}"][0], 3) for temp in (0.5, 1, 2)] == [0.657, 0.399, 0.239]
top3 = np.where(np.arange(10) < 3, np.exp(z), 0) / np.exp(z[:3]).sum()      # z is sorted: the top 3 come first
assert np.abs(drawn_from["top-k 3"] - top3).max() < 1e-15 and np.round(top3[:3], 3).tolist() == [0.522, 0.286, 0.192]

cumulative = np.cumsum(softmax_np(z))                                       # z is sorted, likeliest first
size = int(np.argmax(cumulative >= 0.8)) + 1                                # the first prefix reaching p
print("cumulative at T = 1: " + " ".join(f"{c:.3f}" for c in cumulative[:6]) + f" ...; nucleus of p = 0.8: {size}")
nucleus = np.where(np.arange(10) < size, softmax_np(z), 0) / cumulative[size - 1]
assert size == 4 and (drawn_from["top-p 0.8"] > 0).sum() == 4
assert np.round(cumulative[:4], 3).tolist() == [0.399, 0.619, 0.766, 0.855]
assert np.round(nucleus[:4], 3).tolist() == [0.467, 0.256, 0.172, 0.104]
assert np.abs(drawn_from["top-p 0.8"] - nucleus).max() < 1e-15
greedy_row = np.eye(10)[0]                                                  # all on the likeliest token
assert (sampling_probabilities(row, 1.0, top_p=1e-9).numpy()[0] == greedy_row).all()
assert (sampling_probabilities(row, 1.0, top_p=1.0).numpy() == sampling_probabilities(row, 1.0).numpy()).all()

n = 20_000
draws = next_token(tb.tensor(np.repeat(z[None], n, axis=0)), 1.0, None, tb.Generator(0), top_p=0.8).numpy()
freq = np.bincount(draws, minlength=10) / n
print("20,000 draws at top_p 0.8: " + " ".join(f"{f:.3f}" for f in freq))
assert set(draws.tolist()) == set(range(4))
assert np.all(np.abs(freq - nucleus) <= 4.5 * np.sqrt(nucleus * (1 - nucleus) / n))

fig = figure(8, 3.2)
axes = fig.subplots(1, len(drawn_from), sharey=True)
for ax, (name, p) in zip(axes, drawn_from.items()):
    ax.bar(range(10), p, color=np.where(p > 0, "C0", "0.8"))
    ax.bar(range(10), np.where(p > 0, 0, softmax_np(z)), color="none", edgecolor="0.6", linestyle=":")
    ax.set(title=name, xticks=range(0, 10, 3))
axes[0].set_ylabel("probability of being drawn")
axes[2].set_xlabel("token, likeliest first")
fig.suptitle("One row of logits: what temperature, top-k and top-p keep (dotted: the tokens cut)")
show(fig, OUT / "sampling.png")

# %% [markdown]
# ## 8. Perplexity
#
# How well does a model predict a text? The loss of training (lesson 14) is the mean cross-entropy, in nats per
# token; its exponential is the **perplexity**, $\exp\big(-\frac{1}{N}\sum_i \log p(x_i \mid x_{<i})\big)$: the
# number of equally likely tokens the model is, on average, choosing among. A model that spreads its probability
# evenly over the vocabulary has perplexity $V$ exactly (every token costs $\log V$); a model that is sure and
# right has perplexity 1.
#
# Below, `perplexity` computes it with the engine's `cross_entropy` and checks it against the formula in numpy.
# Uniform logits give 256.000000, the vocabulary size, to 1e-12. The untrained `tiny` model of section 1 does
# worse than uniform on a random text of 40 tokens, 478.5: its random weights make it confident, and wrong. On
# the 46 tokens of its own greedy text (section 1) it scores 33.0: each new token was its own likeliest choice.
# A trained model's perplexity on held-out text is the usual way to compare language models of one tokenizer.

# %%
def perplexity(model, ids: tb.Tensor) -> float:
    """exp(mean cross-entropy) of predicting each token of ids (1, L) from the ones before it."""
    with tb.no_grad():
        logits = model(ids)[:, :-1]                                          # (1, L - 1, vocab_size)
    return float(np.exp(logits.cross_entropy(ids[:, 1:]).item()))


def perplexity_np(model, ids: tb.Tensor) -> float:
    """The formula, in numpy, from the model's logits: exp of minus the mean log-probability of each next token."""
    with tb.no_grad():
        logits = model(ids).numpy()[0, :-1]                                  # (L - 1, vocab_size)
    targets = ids.numpy()[0, 1:]                                             # (L - 1,)
    log_p = logits - logits.max(-1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))                    # log softmax
    return float(np.exp(-log_p[np.arange(len(targets)), targets].mean()))


V = cfg.vocab_size
text = tb.randint(0, V, (1, 40), generator=tb.Generator(3))                 # a random text of 40 tokens
flat = float(np.exp(tb.zeros(1, 39, V, dtype=tb.float64).cross_entropy(text[:, 1:]).item()))   # uniform logits
random_text, own_text = perplexity(model, text), perplexity(model, cached)
print(f"uniform logits: perplexity {flat:.6f} (vocabulary {V})")
print(f"random tiny model: on a random text {random_text:.1f}, on its own greedy text {own_text:.1f}")
assert abs(flat - V) < 1e-12 * V
assert abs(random_text - perplexity_np(model, text)) < 1e-9 and abs(own_text - perplexity_np(model, cached)) < 1e-9
assert round(random_text, 1) == 478.5 > V and round(own_text, 1) == 33.0 and cached.shape == (1, 46)

# %% [markdown]
# ## Check yourself
#
# 1. Why can a decode step run the new token alone, and what do prefill and decode each do?
#
#    <details><summary>Answer</summary>
#
#    In a causal model nothing about an earlier position changes when a token is appended, so every layer keeps
#    its keys and values in the KV cache. Prefill runs the whole prompt in one call and fills the cache; decode runs
#    one token per call against it. For Llama-2-7B writing 1,000 tokens after a 1,000-token prompt, recomputing
#    instead costs 1,503 times the FLOPs.
#
#    </details>
#
# 2. Why is decoding one sequence bound by memory and not by arithmetic?
#
#    <details><summary>Answer</summary>
#
#    Each weight is read to do one multiply and one add, 2 FLOPs for its 2 bytes in bf16: an arithmetic intensity
#    of 1.0 FLOP per byte, far below the H100's ridge point of 295.5. Prefill reuses each weight for all 1,000
#    prompt tokens, about 1,000 FLOPs per byte, and is compute-bound.
#
#    </details>
#
# 3. What does the online softmax keep per query, and why is the result exact?
#
#    <details><summary>Answer</summary>
#
#    A running maximum $m$, a running sum $\ell$ and an accumulator. When a new block of keys raises the maximum, the
#    old sum and accumulator are rescaled by $e^{m - m'}$, so at the end $\mathrm{acc} / \ell$ is exactly
#    $\mathrm{softmax}(s)\,V$, without ever holding all the scores.
#
#    </details>
#
# 4. What perplexity does a model with uniform logits have over a vocabulary of 256, and what does a lower one mean?
#
#    <details><summary>Answer</summary>
#
#    Exactly 256, the vocabulary size: every token costs $\log V$. Perplexity is the exponential of the mean
#    cross-entropy, the number of equally likely tokens the model is choosing among on average, so lower is better
#    and 1 is sure and right.
#
#    </details>

# %% [markdown]
# ## Words from this lesson
#
# - **prefill**: the first phase of generation, the whole prompt in one call, which fills the KV cache (§1)
# - **decode**: the second phase of generation, one new token per call against the KV cache (§1)
# - **greedy**: generation that always picks the most likely next token (§1)
# - **arithmetic intensity**: a step's FLOPs per byte moved to and from memory (§3)
# - **HBM**: high-bandwidth memory, the GPU's main memory (§3)
# - **bandwidth**: the bytes per second a device can read from memory (§3)
# - **ridge point**: a device's peak FLOP/s over its bandwidth, the intensity at which a step stops waiting for
#   memory (§3)
# - **memory-bound**: said of a step whose arithmetic intensity is below the ridge point, so that it waits for
#   memory (§3)
# - **compute-bound**: said of a step whose arithmetic intensity is above the ridge point, so that it waits for
#   arithmetic (§3)
# - **roofline**: the bound min(peak, intensity × bandwidth) on a step's FLOP/s, plotted against intensity (§3)
# - **memory traffic**: the bytes a computation reads from and writes to the GPU's main memory (§4)
# - **fusion**: running neighbouring kernels as one, so that a tensor made and used inside it never reaches main
#   memory (§4)
# - **online softmax**: a softmax over keys that arrive in blocks, keeping a running maximum and sum and rescaling
#   what came before (§5)
# - **tiled attention**: attention computed tile by tile with the online softmax, which keeps $O(L)$ numbers for the
#   backward instead of $O(L^2)$ (§6)
# - **temperature**: the number $T$ the logits are divided by before sampling; below 1 it sharpens the distribution,
#   above 1 it flattens it (§7)
# - **top-k**: sampling from the $k$ likeliest tokens only, renormalised (§7)
# - **top-p**: sampling from the smallest set of likeliest tokens whose probabilities sum to at least $p$ (§7)
# - **perplexity**: the exponential of the mean cross-entropy, the number of equally likely tokens a model is on
#   average choosing among (§8)

# %% [markdown]
# ## Exercises
#
# 1. `merge_softmax_states`: two partial results of the online softmax over two disjoint sets of keys, each
#    $(m, \ell, \mathrm{acc})$, merged into the state of all the keys, for many rows at once. This is how
#    FlashAttention's split-key variants (and decoding over a long cache split across workers) combine their
#    pieces. The checker compares with the state of all the keys at once and names the usual slips: forgetting to
#    rescale acc, the rescaling's sign, adding the $\ell$'s unscaled.
# 2. `decode_intensity`: the arithmetic intensity of one decode step of a model: matmul FLOPs over the bytes of
#    the matmul weights and the KV cache read. It is checked against the model run on the shape-only device.
# 3. `decode_tokens_per_second`: the roofline's bound on decode speed for a batch: the step takes the longer of
#    its FLOPs at peak and its bytes at full bandwidth, and yields one token per sequence.
#
# `python -m tinygrad_block exercise 16` writes `exercise_16.py` with the functions to fill in;
# `python -m tinygrad_block check 16` checks them and says what is wrong.
