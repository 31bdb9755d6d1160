# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 21 — The capstone: a block of your own
#
# Twenty lessons took one block apart: its parts (04 to 09), its backward pass (10), its graphs (11), its costs
# (12, 13), training (14), the variants published models use (15), generation with a cache (16), and real
# checkpoints (20). The capstone puts it all back together, on a block you choose. You pick a variant, and then
# five steps, each checked by `python -m tinygrad_block check 21`, show that you can build it, count it, take
# its gradient by hand, train it and generate with it.
#
# This lesson walks through the five steps on one variant, chosen so that it is not one of those suggested to
# you: a parallel block with multi-query attention, LayerNorm, a bias on every projection, and a GELU MLP.
#
# **What you will learn**
# - the menu: what `nn.BlockConfig` lets you change, and what sets a variant apart from Llama's block;
# - parameters and matmul FLOPs of the variant in closed form, equal to what the library counts, and what the
#   choices save against a Llama block of the same width;
# - the variant's backward put together from the hand-derived pairs of lesson 10, equal to autograd and to
#   finite differences, and what dropping the residual's identity path does;
# - training it on lesson 14's copying task beside a Llama block of the same size: an ablation;
# - greedy generation with the KV cache written out over the model's pieces, equal to recomputing, and the
#   FLOPs the cache saves; the trained model copying a prompt it has never seen.
#
# Run it as a script, `python -m tinygrad_block lesson 21`, or as a notebook,
# `python -m tinygrad_block lesson 21 --notebook --execute` (it lands beside this file).

# %%
import math

import numpy as np

import tinygrad_block as tb
from tinygrad_block import manual, nn
from tinygrad_block.counting import count_flops
from tinygrad_block.data import induction_batch
from tinygrad_block.gradcheck import central_difference, rel_err
from tinygrad_block.measure import meta_lm
from tinygrad_block.nn.config import FFNS, LAYOUTS, NORMS
from tinygrad_block.nn.decode import argmax
from tinygrad_block.pictures import figure
from tinygrad_block.tensor import zeros
from tinygrad_block.train import Schedule, evaluate_lm, train

from course import out_dir, show

OUT = out_dir(21)         # lessons/out/21/: this lesson's pictures

# %% [markdown]
# ## 1. The project, and the variant worked here
#
# A variant is an `nn.BlockConfig` that differs from Llama's block in at least one choice. The fields to play
# with, and where the course met them:
#
# - `layout`: `'pre'` (Llama, lesson 09), `'post'` (the 2017 original), `'parallel'` (attention and the FFN read
#   the same input), `'deep'` (DeepNorm; all three in lesson 15);
# - `norm`: `'rms'`, `'layer'` (LayerNorm, lesson 05), or `'rms1p'`, Gemma's RMSNorm, which multiplies by
#   $1 + w$ with $w$ starting at 0;
# - `ffn`: `'swiglu'` or `'geglu_tanh'` (gated, three matrices; the second gates with the tanh GELU, as Gemma
#   does), or `'gelu'`, `'gelu_tanh'`, `'relu'` (two matrices; lesson 08);
# - `bias` (every projection, and the LayerNorm shifts) and `qkv_bias` (q, k and v only, as in Qwen2; lesson
#   15), `qk_norm` (an RMSNorm of each head's q and k, as in Qwen3; lesson 20);
# - `n_kv_heads` below `n_heads`: GQA, or MQA at one (lesson 07); `rope=False`: learned position embeddings
#   instead of rotations, as in GPT-2; `tie_embeddings` (lesson 12), `scale_embeddings` (the embeddings times
#   $\sqrt{d_{model}}$, as in Gemma).
#
# Suggestions for yours: post-norm with DeepNorm; Gemma's norm with GeGLU; no RoPE; GQA with q/k/v biases;
# QK-norm; a ReLU MLP. Keep it small (the checker asks for `d_model` at most 64, `d_ff` at most 256, at most 2
# blocks) and fit for the copying task of lesson 14: a vocabulary of 32 and at least 19 positions.
#
# Then the five steps, each a function in `exercise_21.py`:
#
# 1. `build()` returns the config;
# 2. `count_params(cfg)` and `forward_flops(cfg, L)` give one block's parameters and forward matmul FLOPs in
#    closed form, equal to what the library counts on the shape-only device, at your size and at two others;
# 3. `block_backward_by_hand(x, params, cfg, dout)` gives the block's gradients in numpy, equal to autograd
#    and to finite differences in float64;
# 4. `train_it(cfg)` trains a model of the variant until its loss on fresh copying sequences is below 0.25 nats;
# 5. `generate_it(model, ids, n)` generates greedily with the KV cache, and its tokens equal those of
#    recomputing the whole sequence at every step.
#
# The variant worked here changes four things at once: the parallel layout, one key/value head for all four
# query heads (MQA), LayerNorm with a bias on every projection, and a GELU MLP of two matrices. The cell lists
# the choices the config knows and what sets this one apart from Llama's block.

# %%
VARIANT = nn.BlockConfig(d_model=48, n_heads=4, n_kv_heads=1, d_ff=96, layout="parallel", norm="layer",
                         ffn="gelu", bias=True, n_layers=2, vocab_size=32, max_seq_len=32, name="parallel-mqa")
LLAMA = VARIANT.with_(n_kv_heads=4, layout="pre", norm="rms", ffn="swiglu", bias=False, name="llama-like")
defaults = nn.BlockConfig(d_model=48, n_heads=4, n_kv_heads=4, d_ff=96)        # every choice left at Llama's
apart = {key: getattr(VARIANT, key) for key in ("layout", "norm", "ffn", "bias", "n_kv_heads")
         if getattr(VARIANT, key) != getattr(defaults, key)}
print(f"layouts {LAYOUTS}; norms {tuple(NORMS)}; FFNs {tuple(FFNS)}")
print(f"the variant differs from Llama's block in: {apart}")
print(f"the Llama block beside it: {[getattr(LLAMA, k) for k in apart]} for the same fields")
assert LAYOUTS == ("pre", "post", "parallel", "deep") and set(NORMS) == {"rms", "layer", "rms1p"}
assert apart == {"layout": "parallel", "norm": "layer", "ffn": "gelu", "bias": True, "n_kv_heads": 1}
assert all(getattr(LLAMA, k) == getattr(defaults, k) for k in apart)

# %% [markdown]
# ## 2. Counting it in closed form
#
# Write $d$ for `d_model`, $d_q = n_{heads}\, d_{head}$ for the width of the queries, $d_{kv} =
# n_{kv}\, d_{head}$ for that of the keys and values, and $d_{ff}$ for the MLP's width. One block of the variant
# holds
#
# - attention: $W_Q$ and $W_O$ with $d\, d_q$ each, $W_K$ and $W_V$ with $d\, d_{kv}$ each, and the four
#   biases, $d_q + 2 d_{kv} + d$;
# - the MLP: $W_{up}$ and $W_{down}$ with $d\, d_{ff}$ each, and their biases, $d_{ff} + d$;
# - two LayerNorms, each with a gain and a shift of $d$: $4d$. The norms are parameters like any weight, and a
#   closed form that forgets them is the commonest slip.
#
# Its forward on one sequence of $L$ tokens costs 2 FLOPs (a multiply and an add) per weight per token in the
# six projections, $2L(2 d\, d_q + 2 d\, d_{kv} + 2 d\, d_{ff})$, and attention's own two matmuls, $q k^\top$
# and weights $@\, V$, each $2 L^2 d_{head}$ per head, over the whole square (lesson 13). Biases, norms and the
# GELU are elementwise work, outside the matmul count.
#
# Both formulas equal what the library counts on the shape-only device: 15,432 parameters, and 638,400 matmul
# FLOPs at $L = 19$. A Llama block of the same width holds 23,136: multi-query attention and the MLP's missing
# gate take away more than the biases and the LayerNorm shifts add.

# %%
def count_params(cfg: nn.BlockConfig) -> int:
    """One block: attention's four matrices and biases, the MLP's two and their biases, two LayerNorms."""
    d, d_q, d_kv, d_ff = cfg.d_model, cfg.n_heads * cfg.d_head, cfg.n_kv_heads * cfg.d_head, cfg.d_ff
    attention = 2 * d * d_q + 2 * d * d_kv + (d_q + 2 * d_kv + d)
    mlp = 2 * d * d_ff + (d_ff + d)
    return attention + mlp + 2 * (2 * d)


def forward_flops(cfg: nn.BlockConfig, L: int) -> int:
    """One block's forward matmul FLOPs on one sequence of L tokens: the projections and attention's square."""
    d, d_q, d_kv = cfg.d_model, cfg.n_heads * cfg.d_head, cfg.n_kv_heads * cfg.d_head
    return 2 * L * (2 * d * d_q + 2 * d * d_kv + 2 * d * cfg.d_ff) + 2 * (2 * L * L * d_q)


def counted(cfg: nn.BlockConfig, L: int) -> tuple[int, int]:
    """(parameters, forward matmul FLOPs on (1, L, d_model)) of one block built on the shape-only device."""
    block = meta_lm(cfg).layers[0]
    with count_flops() as fc:
        block(zeros(1, L, cfg.d_model, device="meta"))
    return sum(p.size for p in block.parameters()), fc.total("forward", matmul_only=True)


for cfg in (VARIANT, VARIANT.with_(d_model=96, d_ff=288), VARIANT.with_(d_model=96, n_heads=8)):
    for L in (7, 19):
        assert (count_params(cfg), forward_flops(cfg, L)) == counted(cfg, L), (cfg, L)
params, flops = counted(VARIANT, 19)
llama_params, llama_flops = counted(LLAMA, 19)
print(f"variant: {count_params(VARIANT):,} parameters (counted {params:,}); {forward_flops(VARIANT, 19):,} matmul "
      f"FLOPs at L = 19 (counted {flops:,}); equal at three sizes and two lengths")
print(f"Llama block of the same width: {llama_params:,} parameters, {llama_flops:,} FLOPs at L = 19")
assert (params, flops, llama_params) == (15_432, 638_400, 23_136)

# %% [markdown]
# ## 3. The backward by hand
#
# The parallel block is $out = x + attn(norm_1(x)) + ffn(norm_2(x))$. Backward reads it from the output end.
# The upstream gradient `dout` goes, unchanged, into each of the three terms: the attention sublayer's backward
# turns it into a gradient at $norm_1$'s output, the MLP's into one at $norm_2$'s output, and each norm's
# backward carries its share to $x$. The third term is $x$ itself, the residual's identity path, and it passes
# `dout` straight through. So $x$ receives three gradients, and they add:
#
# $$dx = dout + norm_1'(attn'(dout)) + norm_2'(ffn'(dout)).$$
#
# Every piece is a hand-derived pair from lesson 10 (`manual.layernorm_*`, `manual.attention_*`,
# `manual.ffn_*`): run each forward, keep its cache, then call the backwards in reverse. The result equals
# autograd up to rounding (a relative error below $10^{-12}$), and autograd equals the four-point finite
# differences of lesson 02.
# Leave out the identity's `dout` and $dx$ is wrong by a relative error of order one, while every parameter's
# gradient stays right: the slip hides from a check that looks at the weights alone.

# %%
def linear(params: dict, name: str) -> manual.Linear:
    return manual.Linear(params[f"{name}.weight"], params.get(f"{name}.bias"))


def block_backward_by_hand(x, params: dict, cfg: nn.BlockConfig, dout, identity: bool = True) -> tuple:
    """(dx, grads) of sum(block(x) * dout) for the parallel block, from manual's pairs; identity=False drops the
    residual's identity path (the slip)."""
    a, c_norm1 = manual.layernorm_forward(x, params["norm1.weight"], params["norm1.bias"], cfg.norm_eps)
    f, c_norm2 = manual.layernorm_forward(x, params["norm2.weight"], params["norm2.bias"], cfg.norm_eps)
    attn = [linear(params, f"attn.{p}") for p in ("q_proj", "k_proj", "v_proj", "o_proj")]
    _, c_attn = manual.attention_forward(a, *attn, cfg.n_heads, cfg.n_kv_heads, cfg.causal, cfg.rope_theta)
    _, c_ffn = manual.ffn_forward(f, linear(params, "ffn.up_proj"), linear(params, "ffn.down_proj"), cfg.activation)
    d_a, g_attn = manual.attention_backward(dout, c_attn)             # (B, L, d_model) at norm1's output
    d_f, g_ffn = manual.ffn_backward(dout, c_ffn)                     # ... at norm2's output
    dx_attn, g_norm1 = manual.layernorm_backward(d_a, c_norm1)
    dx_ffn, g_norm2 = manual.layernorm_backward(d_f, c_norm2)
    grads = manual.flatten({"norm1": g_norm1, "attn": g_attn, "norm2": g_norm2, "ffn": g_ffn})
    return (dout if identity else 0.0) + dx_attn + dx_ffn, grads


block = nn.make_block(VARIANT, generator=tb.Generator(21), dtype=tb.float64)
r = np.random.default_rng(21)
for name, p in block.named_parameters():                             # gains near 1 and biases near 0, random
    if p.ndim == 1:
        centre = 1.0 if name in ("norm1.weight", "norm2.weight") else 0.0
        p.data = tb.tensor(centre + 0.3 * r.standard_normal(p.shape), dtype=tb.float64).data
x, dout = r.standard_normal((2, 6, VARIANT.d_model)), r.standard_normal((2, 6, VARIANT.d_model))   # (B, L, d)
params = {name: p.numpy() for name, p in block.named_parameters()}

xt = tb.tensor(x, requires_grad=True)
block(xt).backward(tb.tensor(dout))                                  # autograd, float64
dx, grads = block_backward_by_hand(x, params, VARIANT, dout)
worst = max(rel_err(grads[name], p.grad.numpy()) for name, p in block.named_parameters())


def loss_at(v):                                                      # sum(block(v) * dout), the forward alone
    with tb.no_grad():
        return float((block(tb.tensor(v)).numpy() * dout).sum())


entries = [(0, 0, 3), (1, 5, 40), (0, 2, 17), (1, 4, 0)]
fd = central_difference(loss_at, x.copy(), elements=entries)
slip_dx, slip_grads = block_backward_by_hand(x, params, VARIANT, dout, identity=False)
print(f"dx against autograd: {rel_err(dx, xt.grad.numpy()):.1e}; the worst of {len(grads)} parameter "
      f"gradients: {worst:.1e}")
print(f"autograd's dx against finite differences at {len(entries)} entries: "
      f"{rel_err([xt.grad.numpy()[e] for e in entries], [fd[e] for e in entries]):.1e}")
print(f"without the identity path: dx off by {rel_err(slip_dx, xt.grad.numpy()):.2f}; the parameters' worst "
      f"{max(rel_err(slip_grads[k], grads[k]) for k in grads):.1e}")
assert rel_err(dx, xt.grad.numpy()) < 1e-12 and worst < 1e-12 and set(grads) == set(params)
assert rel_err([xt.grad.numpy()[e] for e in entries], [fd[e] for e in entries]) < 1e-8
assert rel_err(slip_dx, xt.grad.numpy()) > 0.1 and all(np.array_equal(slip_grads[k], grads[k]) for k in grads)

# %% [markdown]
# ## 4. Training it, and an ablation
#
# The task is lesson 14's: 10 random tokens out of 32, then the same 10 again, with the loss taken on the
# second half, which only attention can predict. `train.train` runs the loop: 120 AdamW steps of 32 sequences,
# the learning rate warmed up over 10 steps to $3 \times 10^{-3}$ and decayed along half a cosine.
#
# Does the variant help or hurt? An **ablation** answers that kind of question: train the model with and
# without a change, keeping everything else equal (the data, the seed, the steps, the size), and compare. Here
# the other arm is the Llama block of the same width, trained from the same seed on the same batches. Both
# runs are scored on 256 sequences neither has seen. In this run both learn to copy; the variant's held-out
# loss falls below the checker's bar of 0.25 nats and the Llama block's stays above it at 120 steps: its
# training loss drops below 1 nat later than the variant's. One seed is one run, not a finding: an ablation
# worth believing repeats over several seeds, and changes one thing at a time, where this variant changes four.

# %%
def train_it(cfg: nn.BlockConfig, steps: int = 120) -> tuple[nn.LM, list, dict]:
    """A model of cfg trained on the copying task from seed 0: the model, its losses, its held-out score."""
    gen = tb.Generator(0)
    model = nn.LM(cfg, generator=gen)
    held_out = induction_batch(256, 10, cfg.vocab_size, gen)         # drawn before any batch, never trained on
    history = train(model, lambda: induction_batch(32, 10, cfg.vocab_size, gen),
                    Schedule(steps=steps, lr=3e-3, warmup=10, lr_min=3e-4), progress=False)
    return model, history.losses, evaluate_lm(model, *held_out)


model, losses, score = train_it(VARIANT)
llama_model, llama_losses, llama_score = train_it(LLAMA)
print(f"chance: ln 32 = {math.log(32):.3f} nats")
print(f"variant: held-out loss {score['loss']:.3f}, accuracy {score['accuracy']:.1%}")
print(f"Llama block: held-out loss {llama_score['loss']:.3f}, accuracy {llama_score['accuracy']:.1%}")
first_below = [next(i for i, loss in enumerate(run) if loss < 1.0) for run in (losses, llama_losses)]
print(f"training loss below 1 nat from step {first_below[0]} (variant) and {first_below[1]} (Llama block)")
assert score["loss"] < 0.25 < llama_score["loss"] < 1.0 < math.log(32)
assert first_below[0] < first_below[1]

fig = figure(7, 3.6)
ax = fig.subplots()
ax.plot(losses, label=f"variant ({VARIANT.name})")
ax.plot(llama_losses, label="Llama block, same width")
ax.axhline(0.25, color="gray", linestyle=":", label="the checker's bar")
ax.set(xlabel="step", ylabel="training loss (nats)", yscale="log", title="an ablation: one seed, 120 steps")
ax.legend()
show(fig, OUT / "ablation.png")

# %% [markdown]
# ## 5. Generating with the KV cache, written out
#
# `model.generate` hides the loop; the capstone writes it. One `nn.KVCache` holds every block's keys and values.
# The prompt runs once (prefill), and then each new token runs alone (decode): each block gets the token's
# position as its `offset`, which is the number of positions already in the cache, and its own layer cache, so
# it attends to every earlier key without recomputing it. The greedy tokens equal those of `model.generate`
# recomputing the whole sequence at every step, and the FLOPs counted show the saving: for a prompt of 10
# tokens and 10 new ones, the cached loop runs 19 token positions through the projections, the recomputing one
# 145.
#
# Finally the trained model meets a prompt it has never seen: 10 random tokens. What should come next is the
# same 10 again, and the model produces them: the cell checks that at least 90 % of the generated tokens
# repeat the prompt.

# %%
def generate_it(model: nn.LM, ids: tb.Tensor, n: int) -> tb.Tensor:
    """Greedy: the prompt once into the cache, then each new token alone, at offset = cache.length."""
    B, cache, tokens, new = ids.shape[0], nn.KVCache(model, ids.shape[0]), ids, ids
    with tb.no_grad():
        for _ in range(n):
            offset, h = cache.length, model.embed(new)                # (B, L_new, d_model)
            for block_i, layer in zip(model.layers, cache.layers):
                h = block_i(h, offset, layer)
            new = argmax(model.lm_head(model.norm(h))[:, -1]).reshape(B, 1)   # (B, 1)
            tokens = tb.concat([tokens, new], axis=1)
    return tokens


prompt = tb.randint(0, 32, (4, 10), generator=tb.Generator(2100))    # 4 prompts of 10 tokens
with count_flops() as cached:
    mine = generate_it(model, prompt, 10)                             # (4, 20)
with count_flops() as recomputed:
    slow = model.generate(prompt, 10, use_cache=False)
cached_flops, slow_flops = (c.total("forward", matmul_only=True) for c in (cached, recomputed))


def positions(counter) -> int:
    """Token positions of one sequence through the first block's q_proj: its FLOPs over 2 d^2 per position, B = 4."""
    q_proj = sum(n for scope, n in counter.by_scope("forward", matmul_only=True).items()
                 if scope.endswith("layers.0.attn.q_proj"))
    return q_proj // (4 * 2 * VARIANT.d_model * VARIANT.d_model)


per_position, slow_positions = positions(cached), positions(recomputed)
copied = (mine.numpy()[:, 10:] == prompt.numpy()).mean()
print(f"cached tokens equal recomputed: {np.array_equal(mine.numpy(), slow.numpy())}")
print(f"matmul FLOPs: cached {cached_flops:,}, recomputed {slow_flops:,} ({slow_flops / cached_flops:.1f}x); "
      f"positions through q_proj per sequence: {per_position} against {slow_positions}")
print(f"prompt   {prompt.numpy()[0].tolist()}\ngenerated {mine.numpy()[0, 10:].tolist()}")
print(f"tokens that repeat the prompt: {copied:.0%}")
assert np.array_equal(mine.numpy(), slow.numpy()) and (per_position, slow_positions) == (19, 145)
assert copied >= 0.9

# %% [markdown]
# ## Check yourself
#
# 1. A closed form for the parameters of your block matches at one size but not at the checker's others. What
#    does that tell you, and what is the usual cause?
#
#    <details><summary>Answer</summary>
#
#    The formula is a number that happens to fit, not a count of the shapes: some term was written for one
#    size (a width taken as $d$ where it is $n_{kv} d_{head}$, or a hidden width fixed). Counting each matrix
#    from the config's fields, and the norms' gains too, fits every size.
#
#    </details>
#
# 2. In the parallel block, why does $x$ receive three gradients, and what goes wrong if one is left out?
#
#    <details><summary>Answer</summary>
#
#    $x$ feeds three terms of the output: the identity, attention through $norm_1$ and the MLP through $norm_2$,
#    and gradients of every use add. Leaving out the identity's `dout` makes $dx$ wrong while every parameter's
#    gradient stays right, so only a check of $dx$ catches it.
#
#    </details>
#
# 3. Why is the comparison in section 4 an ablation but not yet evidence that the variant trains faster?
#
#    <details><summary>Answer</summary>
#
#    It keeps the data, seed, steps and size equal and changes the block, which is what an ablation does; but
#    it is one seed, and it changes four things at once. Several seeds, and one change at a time, would say
#    whether the gap is real and which change makes it.
#
#    </details>
#
# 4. A decode step passes `offset=0` to every block. What does the library do, and why does the offset matter?
#
#    <details><summary>Answer</summary>
#
#    The attention refuses it with a ValueError: the offset must equal the number of positions already in the
#    layer's cache. The offset is the new token's position, which RoPE (or a position embedding) needs; at 0
#    every new token would look like the first one.
#
#    </details>

# %% [markdown]
# ## Words from this lesson
#
# - **ablation**: an experiment that trains a model with and without one change, keeping everything else equal,
#   to see what the change does (§4)

# %% [markdown]
# ## Exercises
#
# Build your own variant, then the four checks take it step by step (section 1 lists the menu).
#
# 1. `build_and_count`: `build()` returns your small `nn.BlockConfig`; `count_params(cfg)` and
#    `forward_flops(cfg, L)` give one block's parameters and forward matmul FLOPs in closed form. They are
#    checked against the block built on the shape-only device, at your size and two resized copies, at two
#    lengths. The checker recognises the norms' gains left out (or one norm only), biases left out, $W_K$ and
#    $W_V$ at full width under GQA or MQA, three FFN matrices for two (or two for three), the whole model for
#    one block, one FLOP per multiply-add (exactly half), attention's own matmuls left out or halved for the
#    mask, and FLOPs per token for those of the sequence.
# 2. `block_backward_by_hand`: your block's `(dx, grads)` in numpy from the hand-derived pairs (not manual's
#    whole-block backward, not autograd), against autograd and finite differences in float64, at two batch
#    shapes. It recognises a residual's identity path left out, a missing or unknown gradient, and a weight's
#    gradient of the transposed shape.
# 3. `train_it`: an `nn.LM` of your config trained on the copying task; its loss on 256 fresh sequences must be
#    below 0.25 nats, within 60 s of processor time. It says when the model has not found the copy yet, and
#    when training diverged.
# 4. `generate_it`: greedy generation with the KV cache over the model's pieces, equal to recomputing. It
#    recognises positions that do not advance, steps run without the earlier keys and values, and a loop
#    that recomputes earlier positions (right tokens, no saving).
#
# `python -m tinygrad_block exercise 21` writes `exercise_21.py` with the functions to fill in;
# `python -m tinygrad_block check 21` checks them and says what is wrong.
