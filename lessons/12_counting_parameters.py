# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 12 — Counting parameters of real models
#
# A model's parameter count decides what it costs to store, to serve (to run for its users) and to train, and
# every estimate of compute and memory in lesson 13 starts from it. This lesson counts the parameters of real
# architectures exactly, down to the last one, on the shape-only device. A 70B model counts in milliseconds
# there, and every count is checked against a formula derived by hand.
#
# **What you will learn**
# - the shape-only device: how to build all 69 billion parameters of Llama-2-70B without allocating a byte;
# - where the parameters of a language model live: embedding, blocks, final norm and LM head, and why the
#   embedding matters for small models and hardly at all for big ones (drawn for eight models);
# - weight tying: the LM head reusing the embedding, and what it saves at a 128k vocabulary;
# - what grouped-query attention saves, and how it moves the balance between attention and the FFN;
# - Llama-2-7B's 6,738,415,616 parameters, derived by hand and then counted;
# - what changes, and what does not, from Llama-2-7B to Llama-2-70B;
# - what a checkpoint on disk holds, and how `inspect` counts it from the file's header alone;
# - figures you will see quoted for these models, each beside its exact count and why the two differ.
#
# Run it as a script, `python -m tinygrad_block lesson 12`, or as a notebook,
# `python -m tinygrad_block lesson 12 --notebook --execute` (it lands beside this file).

# %%
import json
import struct

import numpy as np

import tinygrad_block as tb
from tinygrad_block import accounting as acc
from tinygrad_block import nn
from tinygrad_block.measure import meta_lm
from tinygrad_block.checkpoint_info import inspect_checkpoint, inspect_text
from tinygrad_block.pictures import figure

from course import PART_COLOURS, out_dir, show

OUT = out_dir(12)         # lessons/out/12/: this lesson's pictures

# %% [markdown]
# ## 1. A 70B model that takes no memory
#
# On the `meta` device a tensor has a shape and a dtype and nothing else: no numbers are stored and none are
# computed. Every operation still runs and still checks its shapes, so a whole model can be built, and even run,
# as a skeleton. `measure.meta_lm(cfg)` builds `nn.LM(cfg, ..., device="meta")`.
#
# For Llama-2-70B that creates all **723** parameter tensors: 9 in each of the 80 blocks (two norm gains, the
# four attention projections, the three FFN matrices) plus the embedding, the final norm and the LM head. In
# float32 they would take 275,906,592,768 bytes, about 276 GB. Here they take none, and asking for their values
# is an error. Adding up their sizes gives **68,976,648,192** parameters (69.0 B, which the model's name rounds
# up to 70B). The same count for Llama-2-7B gives 6,738,415,616.

# %%
cfg70, cfg7 = nn.preset("llama2-70b"), nn.preset("llama2-7b")
model70 = meta_lm(cfg70)                                  # all 80 blocks, shapes only
params70 = model70.parameters()
n70 = sum(p.size for p in params70)
float32_bytes = sum(p.nbytes for p in params70)
embed = model70.embed.weight
print(f"Llama-2-70B on meta: {len(params70)} parameter tensors, {n70:,} parameters; "
      f"in float32 {float32_bytes:,} bytes ({float32_bytes / 1e9:.0f} GB), none allocated")
print(f"the embedding: shape {embed.shape}, dtype {embed.dtype}, device {embed.backend.name}")
refused = None
try:
    embed.numpy()                                         # there are no values to read
except RuntimeError as e:
    refused = str(e)
print(f"asking for its values: {refused}")
n7 = meta_lm(cfg7).num_parameters()
print(f"Llama-2-7B: {n7:,} parameters")
assert len(params70) == 723 == 9 * cfg70.n_layers + 3
assert n70 == model70.num_parameters() == acc.total_params(cfg70) == 68_976_648_192 and round(n70 / 1e9, 1) == 69.0
assert float32_bytes == 4 * n70 == 275_906_592_768 and round(float32_bytes / 1e9) == 276
assert n7 == acc.total_params(cfg7) == 6_738_415_616 and refused is not None and "no values" in refused

# %% [markdown]
# ## 2. Where the parameters are
#
# A decoder-only model, the kind this course builds (causal blocks only, each position reading only the ones before
# it), is an embedding table (vocabulary × $d_{model}$), a stack of identical blocks, a final norm, and an LM head
# that maps each position's final vector of the stream back to one score per vocabulary entry. For Llama-2-70B
# (vocabulary 32,000, $d_{model}$ = 8,192):
#
# | part | parameters | share |
# |---|---|---|
# | 80 blocks of 855,654,400 | 68,452,352,000 | 99.24 % |
# | embedding, 32,000 × 8,192 | 262,144,000 | 0.38 % |
# | LM head (its own matrix, not tied to the embedding) | 262,144,000 | 0.38 % |
# | final RMSNorm gain | 8,192 | 0.00001 % |
#
# A block holds $2d^2 + 2\,d\,n_{kv} d_{head} + 3\,d\,d_{ff} + 2d$: $W_Q$ and $W_O$ are $d \times d$, $W_K$ and
# $W_V$ are $d \times n_{kv} d_{head}$, the SwiGLU FFN has three $d \times d_{ff}$ matrices, and the two norms
# have a gain of $d$ each: 855,654,400 for one block of Llama-2-70B, 68,452,352,000 for its 80.
#
# The **body**, the stack of blocks, is 261 times the embedding (68,452,352,000 / 262,144,000 = 261.1), and 131
# times the embedding and the LM head together. The embedding, the head and the final norm add 524,296,192
# parameters, about 0.5 B, on top of the body.
#
# **Small models are different.** The embedding's size depends on the vocabulary and $d_{model}$, the body's on
# $n_{layers} d_{model}^2$. Shrink $d_{model}$ and the number of layers, keep a large vocabulary, and the embedding
# becomes a large share. Llama-3.2-1B (128,256 tokens, $d_{model}$ = 2,048, 16 layers, tied head) has 21.3 %
# of its 1,235,814,400 parameters in the embedding, and SmolLM-135M has 21.0 %. TinyLlama-1.1B, with a 32000
# vocabulary, has only 6.0 % (plus 6.0 % in its untied head). Llama-3.2-1B is not a preset of the library, so
# we build its config from the published numbers, and the total matches its published 1.24 B.
#
# The picture splits eight models by kind: embeddings (with GPT-2's position embeddings), attention (the four
# projections and their biases), FFN, norms, and LM head. A bar without an LM head belongs to a tied model
# (section 3). In every model the FFN is the largest part. Attention's share falls from a third in Llama-2-7B to
# between 13 % and 20 % in the models with GQA (section 4).

# %%
KINDS = ("embeddings", "attention", "FFN", "norms", "LM head")


def by_kind(model: nn.LM) -> dict[str, int]:
    """Parameters of a model per kind, read from the names of its parameters ('layers.3.attn.q_proj.weight')."""
    counts = dict.fromkeys(KINDS, 0)
    for name, p in model.named_parameters():
        part = name.split(".")
        if part[0] in ("embed", "pos_embed"):
            kind = "embeddings"
        elif part[0] in ("lm_head", "norm"):
            kind = "LM head" if part[0] == "lm_head" else "norms"
        else:                                                  # layers.<i>.<attn | ffn | norm1 | norm2>...
            kind = {"attn": "attention", "ffn": "FFN"}.get(part[2], "norms")
        counts[kind] += p.size
    return counts


llama32_1b = nn.BlockConfig(d_model=2048, n_heads=32, n_kv_heads=8, d_ff=8192, n_layers=16, vocab_size=128256,
                            max_seq_len=131072, rope_theta=500000.0, tie_embeddings=True, name="llama3.2-1b")
MODELS = {name: nn.preset(name) for name in ("smollm-135m", "gpt2-small", "tinyllama-1.1b")}
MODELS |= {"llama3.2-1b": llama32_1b} | {name: nn.preset(name) for name in
                                         ("llama2-7b", "llama3-8b", "llama2-70b", "llama3-70b")}
kinds = {name: by_kind(meta_lm(cfg)) for name, cfg in MODELS.items()}
share = {name: {k: v / sum(c.values()) for k, v in c.items()} for name, c in kinds.items()}
print(f"{'model':15} {'parameters':>15} " + " ".join(f"{k:>10}" for k in KINDS) + "  tied")
for name, c in kinds.items():
    print(f"{name:15} {sum(c.values()):>15,} " + " ".join(f"{100 * share[name][k]:>9.2f}%" for k in KINDS)
          + f"  {MODELS[name].tie_embeddings}")
    assert sum(c.values()) == acc.total_params(MODELS[name])          # the count by kind adds up to the closed form
    assert (c["LM head"] == 0) == MODELS[name].tie_embeddings

rows70 = acc.model_param_breakdown(cfg70)
block70 = acc.params_per_block(cfg70)
print(f"Llama-2-70B: blocks {rows70['blocks']:,} ({rows70['blocks'] / n70:.2%}), embedding {rows70['embedding']:,}, "
      f"LM head {rows70['lm_head']:,}, final norm {rows70['final_norm']:,}; body / embedding = "
      f"{rows70['blocks'] / rows70['embedding']:.1f}")
d, d_kv, d_ff = cfg70.d_model, cfg70.n_kv_heads * cfg70.d_head, cfg70.d_ff
assert block70 == 2 * d * d + 2 * d * d_kv + 3 * d * d_ff + 2 * d == 855_654_400
assert rows70["blocks"] == 80 * block70 == 68_452_352_000 and round(100 * rows70["blocks"] / n70, 2) == 99.24
assert rows70["embedding"] == rows70["lm_head"] == 32_000 * 8_192 == 262_144_000 and rows70["final_norm"] == 8_192
assert round(100 * rows70["embedding"] / n70, 2) == 0.38 and round(100 * rows70["final_norm"] / n70, 5) == 0.00001
assert round(rows70["blocks"] / rows70["embedding"], 1) == 261.1
assert round(rows70["blocks"] / (rows70["embedding"] + rows70["lm_head"])) == 131
assert n70 - rows70["blocks"] == 524_296_192 and round((n70 - rows70["blocks"]) / 1e9, 1) == 0.5
assert sum(kinds["llama3.2-1b"].values()) == 1_235_814_400 and round(1_235_814_400 / 1e9, 2) == 1.24
assert round(100 * share["llama3.2-1b"]["embeddings"], 1) == 21.3
assert round(100 * share["smollm-135m"]["embeddings"], 1) == 21.0
assert round(100 * share["tinyllama-1.1b"]["embeddings"], 1) == 6.0
assert share["tinyllama-1.1b"]["LM head"] == share["tinyllama-1.1b"]["embeddings"]
assert all(max(s, key=s.get) == "FFN" for s in share.values())
assert round(3 * share["llama2-7b"]["attention"]) == 1
assert all(0.13 < share[n]["attention"] < 0.20 for n, cfg in MODELS.items() if cfg.n_kv_heads < cfg.n_heads)

fig = figure(10, 5.2)
ax = fig.add_subplot()
names = list(kinds)[::-1]                  # barh draws the first name at the bottom: the smallest model on top
left = np.zeros(len(names))
for k in KINDS:
    widths = np.array([100 * share[n][k] for n in names])
    ax.barh(names, widths, left=left, color=PART_COLOURS[k], label=k, edgecolor="white", linewidth=0.5)
    for y, (x0, w) in enumerate(zip(left, widths)):
        if w >= 4:
            ax.text(x0 + w / 2, y, f"{w:.0f}%", ha="center", va="center", fontsize=8, color="white")
    left += widths
for y, n in enumerate(names):
    total = sum(kinds[n].values())
    label = f"{total / 1e9:.2f} B" if total >= 1e9 else f"{total / 1e6:.0f} M"
    ax.text(101, y, label + ("  (tied head)" if MODELS[n].tie_embeddings else ""), va="center", fontsize=9)
ax.set(xlim=(0, 125), xlabel="share of the model's parameters (%)", xticks=range(0, 101, 20),
       title="Where the parameters are (counted on the shape-only device; norms are under 0.05 % everywhere)")
ax.legend(loc="lower center", bbox_to_anchor=(0.42, -0.26), ncols=5, frameon=False)
show(fig, OUT / "parameters_by_kind.png")

# %% [markdown]
# ## 3. Weight tying
#
# The embedding maps a token id to a row $E_t$ of the table $E$ (vocabulary × $d_{model}$). The LM head maps the final
# vector $h$ of the stream (after the final norm) to one score per token, and it too is a vocabulary × $d_{model}$
# matrix. A model can **tie** them (**weight tying**), $\text{logits} = h E^\top$, so that one matrix does both jobs. In
# the library, `tie_embeddings` does this: `nn.LM` then has no `lm_head` at all and multiplies by `embed.weight.T`.
# Tying saves exactly $V \cdot d_{model}$ parameters. The price is that a token's input vector and its output direction
# must be the same vector. Small models (GPT-2, SmolLM, Llama-3.2-1B) usually tie, because for them the saving is large.
# Large models usually keep the two apart.
#
# At a 128k vocabulary the saving is large in absolute terms. Llama 3's vocabulary is 128,256 tokens (a
# "128k" that is 256 more than 128000). Tying Llama-3-70B ($d_{model}$ = 8,192) would save
# 128,256 × 8,192 = **1,050,673,152** parameters (1.05 B). That is 1.5 % of its 70,553,706,496. For Llama-3-8B
# the saving is
# 525,336,576 (6.5 %). For a small model it is a different story: untying Llama-3.2-1B would add 262,668,288
# parameters, 21 % more than it has; they would be 17.5 % of the untied model.
#
# Below, each model is built on meta both ways. The tied one has one parameter tensor fewer, and the difference
# in the counts is exactly $V \cdot d_{model}$.

# %%
print(f"{'model':12} {'untied':>15} {'tied':>15} {'saved':>14} {'V x d_model':>14} {'saved / untied':>14}")
saved = {}
for name, cfg in (("llama3-70b", nn.preset("llama3-70b")), ("llama3-8b", nn.preset("llama3-8b")),
                  ("llama3.2-1b", llama32_1b), ("smollm-135m", nn.preset("smollm-135m"))):
    untied, tied = meta_lm(cfg.with_(tie_embeddings=False)), meta_lm(cfg.with_(tie_embeddings=True))
    saved[name] = (untied.num_parameters() - tied.num_parameters(), untied.num_parameters())
    print(f"{name:12} {untied.num_parameters():>15,} {tied.num_parameters():>15,} {saved[name][0]:>14,} "
          f"{cfg.vocab_size * cfg.d_model:>14,} {saved[name][0] / saved[name][1]:>14.2%}")
    assert saved[name][0] == cfg.vocab_size * cfg.d_model
    assert len(untied.parameters()) == len(tied.parameters()) + 1 and not hasattr(tied, "lm_head")
s70, s8, s1 = saved["llama3-70b"], saved["llama3-8b"], saved["llama3.2-1b"]
assert nn.preset("llama3-70b").vocab_size == 128_256 == 128_000 + 256
assert s70[0] == 1_050_673_152 and round(s70[0] / 1e9, 2) == 1.05 and round(100 * s70[0] / s70[1], 1) == 1.5
assert s70[1] == acc.total_params(nn.preset("llama3-70b")) == 70_553_706_496
assert s8[0] == 525_336_576 and round(100 * s8[0] / s8[1], 1) == 6.5
assert s1[0] == 262_668_288 and round(100 * s1[0] / (s1[1] - s1[0])) == 21 and round(100 * s1[0] / s1[1], 1) == 17.5

# %% [markdown]
# ## 4. What grouped-query attention saves
#
# Under grouped-query attention (lesson 07) only $n_{kv}$ key/value heads serve all $n_{heads}$ query heads, so
# $W_K$ and $W_V$ map $d$ to $n_{kv} d_{head}$ numbers instead of $d$. Llama-2-70B has 8 KV heads of 128 for its
# 64 query heads: $W_K$ and $W_V$ have 1,024 outputs instead of 8,192, and attention holds
# $d^2 + 2\,d \cdot d/8 + d^2 = 2.25\,d^2$ = 150,994,944 parameters per block instead of $4d^2$ = 268,435,456,
# 43.75 % fewer. The whole model would have 78,371,889,152 parameters as MHA, 9,395,240,960 more. With $g = 8$
# query heads per key/value head the block is $2.25\,d^2 + 3\,d\,d_{ff} + 2d$ = 855,654,400 (the $2d$ are its
# two norms).
#
# GQA changes the balance inside the block. In Llama-2-7B (MHA) attention holds **33.2 %** of a block and the
# FFN **66.8 %**. In Llama-2-70B attention holds **17.6 %** and the FFN **82.4 %**. Llama-3-70B has exactly the
# same block, so the same 17.6 % / 82.4 %.
#
# Llama-3-8B and Mistral-7B show where the saving went. Both have 8 KV heads for 32 query heads, which saves
# 25,165,824 parameters per block against Llama-2-7B, and both spend that and more on a wider FFN: $d_{ff}$ =
# 14,336 = 3.5 $d$ instead of 11,008, 40,894,464 parameters more per block. Their block holds **218.112 M**
# parameters, with attention at 19.2 %: 8 KV heads of 128 for 32 query heads make $W_K$ and $W_V$ $d/4$ = 1,024
# wide. The two models differ only outside the blocks:
# Llama-3-8B's 128,256-token vocabulary makes its embedding and head 788,529,152 parameters bigger than
# Mistral-7B's, so the whole models have 8,030,261,248 and 7,241,732,096 parameters.

# %%
print(f"{'model':22} {'KV heads':>8} {'attention/block':>16} {'FFN/block':>13} {'per block':>13} {'attn':>6} "
      f"{'FFN':>6} {'model':>15}")
blocks, shares = {}, {}
for name, cfg in (("llama2-7b", cfg7), ("llama2-70b", cfg70), ("llama2-70b as MHA", cfg70.with_(n_kv_heads=64)),
                  ("llama3-70b", nn.preset("llama3-70b")), ("llama3-8b", nn.preset("llama3-8b")),
                  ("mistral-7b", nn.preset("mistral-7b"))):
    model = meta_lm(cfg)
    layer = model.layers[0]
    blocks[name] = (layer.attn.num_parameters(), layer.ffn.num_parameters(), layer.num_parameters(),
                    model.num_parameters())
    shares[name] = (blocks[name][0] / blocks[name][2], blocks[name][1] / blocks[name][2])
    print(f"{name:22} {cfg.n_kv_heads:>8} {blocks[name][0]:>16,} {blocks[name][1]:>13,} {blocks[name][2]:>13,} "
          f"{shares[name][0]:>6.1%} {shares[name][1]:>6.1%} {blocks[name][3]:>15,}")
    assert blocks[name][0] == 2 * cfg.d_model**2 + 2 * cfg.d_model * cfg.n_kv_heads * cfg.d_head
    assert shares[name] == tuple(acc.attention_ffn_shares(cfg))
assert blocks["llama2-70b"][0] == 2.25 * d**2 == 150_994_944 and blocks["llama2-70b as MHA"][0] == 4 * d**2
assert blocks["llama2-70b as MHA"][0] == 268_435_456 and 1 - 2.25 / 4 == 0.4375
d_ff70 = cfg70.d_ff
assert blocks["llama2-70b"][2] == 2.25 * d**2 + 3 * d * d_ff70 + 2 * d == 855_654_400        # not ~6d^2 + 3 d d_ff
assert cfg70.n_kv_heads * cfg70.d_head == 1_024 and cfg70.n_heads == 64
assert blocks["llama2-70b as MHA"][3] == 78_371_889_152 and blocks["llama2-70b as MHA"][3] - n70 == 9_395_240_960
assert [round(100 * s, 1) for s in shares["llama2-7b"] + shares["llama2-70b"]] == [33.2, 66.8, 17.6, 82.4]
assert shares["llama3-70b"] == shares["llama2-70b"]
l3, mi = blocks["llama3-8b"], blocks["mistral-7b"]
assert blocks["llama2-7b"][0] - l3[0] == 25_165_824 and l3[1] - blocks["llama2-7b"][1] == 40_894_464
assert nn.preset("llama3-8b").d_ff == nn.preset("mistral-7b").d_ff == 14_336 == 3.5 * 4096
assert l3[2] == mi[2] == 218_112_000 and round(100 * shares["llama3-8b"][0], 1) == 19.2
assert nn.preset("llama3-8b").n_kv_heads * 128 == 1_024 == 4096 // 4
assert l3[3] - mi[3] == 788_529_152 == 2 * (128_256 - 32_000) * 4096
assert (l3[3], mi[3]) == (8_030_261_248, 7_241_732_096)

# %% [markdown]
# ## 5. Llama-2-7B by hand, then counted
#
# Given $d$ = 4,096, 32 layers, 32 heads (and 32 KV heads: MHA), $d_{ff}$ = 11,008 and a vocabulary of 32000,
# the whole count fits on a napkin:
#
# | part | formula | parameters | rounded |
# |---|---|---|---|
# | embedding | $V d$ | 131.072 M | 131 M |
# | attention per block | $4 d^2$ | 67,108,864 | 67 M |
# | FFN per block | $3\,d\,d_{ff}$ | 135,266,304 | 135 M |
# | norms per block | $2d$ | 8,192 | 8 K |
# | one block | $4d^2 + 3\,d\,d_{ff} + 2d$ | 202,383,360 | 202 M |
# | 32 blocks | | 6,476,267,520 | 6.5 B |
# | final norm | $d$ | 4,096 | |
# | LM head (untied) | $V d$ | 131.072 M | 131 M |
# | **total** | | **6,738,415,616** | **6.7 B** |
#
# Each attention matrix is 8.3 % of a block and each FFN matrix 22.3 %.
#
# The cell below does the napkin arithmetic with plain integers, then counts the model built on meta. The two
# agree to the last parameter.

# %%
V, d7, n_layers, d_ff7 = 32_000, 4_096, 32, 11_008
assert (cfg7.vocab_size, cfg7.d_model, cfg7.n_layers, cfg7.d_ff, cfg7.n_heads, cfg7.n_kv_heads) == \
    (V, d7, n_layers, d_ff7, 32, 32)
hand = {"embedding": V * d7, "attention per block": 4 * d7 * d7, "FFN per block": 3 * d7 * d_ff7,
        "norms per block": 2 * d7}
hand["one block"] = hand["attention per block"] + hand["FFN per block"] + hand["norms per block"]
hand |= {"32 blocks": n_layers * hand["one block"], "final norm": d7, "LM head": V * d7}
hand["total"] = hand["embedding"] + hand["32 blocks"] + hand["final norm"] + hand["LM head"]

model7 = meta_lm(cfg7)
layer7 = model7.layers[0]
counted = {"embedding": model7.embed.num_parameters(), "attention per block": layer7.attn.num_parameters(),
           "FFN per block": layer7.ffn.num_parameters(),
           "norms per block": layer7.norm1.num_parameters() + layer7.norm2.num_parameters(),
           "one block": layer7.num_parameters(), "32 blocks": sum(b.num_parameters() for b in model7.layers),
           "final norm": model7.norm.num_parameters(), "LM head": model7.lm_head.num_parameters(),
           "total": model7.num_parameters()}
print(f"{'Llama-2-7B':20} {'by hand':>15} {'counted on meta':>16}")
for part in hand:
    print(f"{part:20} {hand[part]:>15,} {counted[part]:>16,}")
assert hand == counted
assert hand["total"] == 6_738_415_616 and round(hand["total"] / 1e9, 1) == 6.7
assert [round(hand[p] / 1e6) for p in ("embedding", "attention per block", "FFN per block", "one block")] == \
    [131, 67, 135, 202]
assert hand["32 blocks"] == 6_476_267_520 and round(hand["32 blocks"] / 1e9, 1) == 6.5
matrix = {n: p.size / layer7.num_parameters() for n, p in layer7.named_parameters()}
print("share of a block: " + ", ".join(f"{n.split('.')[1]} {s:.1%}" for n, s in matrix.items() if "norm" not in n))
assert {round(100 * s, 1) for n, s in matrix.items() if n.startswith("attn.")} == {8.3}
assert {round(100 * s, 1) for n, s in matrix.items() if n.startswith("ffn.")} == {22.3}

# %% [markdown]
# ## 6. From 7B to 70B
#
# What does it take to scale Llama-2-7B up to Llama-2-70B? The table compares the two configs.
#
# - **Wider and deeper.** $d_{model}$ doubles (4,096 → 8,192) and the number of layers goes up 2.5 times
#   (32 → 80). A block's matrices grow as $d^2$, so the parameters grow by about $2.5 \times 4 = 10$: the count
#   says 10.24 times.
# - **More heads of the same width.** Query heads double (32 → 64), each still $d_{head}$ = 128 wide. The
#   keys and values go the other way: 32 KV heads become 8 (GQA).
# - **The FFN is not a fixed multiple of $d$.** Llama-2-7B has $d_{ff}$ = 2.6875 $d$ (8d/3 rounded up to a
#   multiple of 256, lesson 08) and Llama-2-70B has 3.5 $d$. Part of what GQA saved went into the FFN.
# - **Unchanged:** the vocabulary (32000), the context (4,096), the RoPE base, and the block's design: pre-norm,
#   RMSNorm, SwiGLU, no biases.
#
# A block of the 7B model holds $12.06\,d^2$ parameters: $4d^2$ in attention and $3 \times 2.6875\,d^2$ in the
# FFN. This is close to the rule of thumb $12\,d^2$ (4 for attention, 8 for an FFN of width $8d/3$), so
# $12\,n_{layers} d^2$ = 6,442,450,944 lands only 0.5 % below the 6,476,267,520 in the 7B model's blocks. A block
# of the 70B model holds $12.75\,d^2$ ($2.25\,d^2$ in attention and $10.5\,d^2$ in the FFN). There the rule gives
# 64,424,509,440, 5.9 % below the 68,452,352,000 counted.

# %%
fields = ("d_model", "n_layers", "n_heads", "n_kv_heads", "d_head", "d_ff", "vocab_size", "max_seq_len", "rope_theta")
print(f"{'':14} {'llama2-7b':>14} {'llama2-70b':>14} {'ratio':>8}")
for f in fields:
    a, b = getattr(cfg7, f), getattr(cfg70, f)
    print(f"{f:14} {a:>14,} {b:>14,} {b / a:>8.4g}")
per_d2 = {name: acc.params_per_block(cfg) / cfg.d_model**2 for name, cfg in (("7b", cfg7), ("70b", cfg70))}
rule = {name: 12 * cfg.n_layers * cfg.d_model**2 for name, cfg in (("7b", cfg7), ("70b", cfg70))}
body = {"7b": hand["32 blocks"], "70b": rows70["blocks"]}
for name in ("7b", "70b"):
    print(f"{name:>4}: a block is {per_d2[name]:.4f} d^2; 12 n_layers d^2 = {rule[name]:,} vs {body[name]:,} "
          f"counted ({rule[name] / body[name] - 1:+.1%})")
print(f"70B / 7B: per block {block70 / hand['one block']:.2f} x, in all {n70 / n7:.2f} x")
assert cfg70.d_model / cfg7.d_model == 2 and cfg70.n_layers / cfg7.n_layers == 2.5
assert (cfg7.n_heads, cfg70.n_heads, cfg7.d_head, cfg70.d_head) == (32, 64, 128, 128)
assert (cfg7.n_kv_heads, cfg70.n_kv_heads) == (32, 8)
assert cfg7.d_ff / cfg7.d_model == 2.6875 and cfg70.d_ff / cfg70.d_model == 3.5
assert all(getattr(cfg7, f) == getattr(cfg70, f) for f in ("vocab_size", "max_seq_len", "rope_theta", "norm",
                                                              "ffn", "bias", "layout"))
assert (cfg7.vocab_size, cfg7.max_seq_len) == (32_000, 4_096)
assert round(per_d2["7b"], 2) == 12.06 and per_d2["70b"] == 12.75 + 2 / cfg70.d_model
assert per_d2["7b"] == 4 + 3 * 2.6875 + 2 / cfg7.d_model
assert rule["7b"] == 6_442_450_944 and round(100 * (rule["7b"] / body["7b"] - 1), 1) == -0.5
assert rule["70b"] == 64_424_509_440 and round(100 * (rule["70b"] / body["70b"] - 1), 1) == -5.9
assert round(n70 / n7, 2) == 10.24 and round(block70 / hand["one block"], 2) == 4.23

# %% [markdown]
# ## 7. A checkpoint on disk, counted from its header
#
# Real models are shipped as **safetensors** files (Hugging Face's format, next to a `config.json`). A file
# starts with 8 bytes that give the length of a JSON header; the header lists every tensor's name, dtype,
# shape and byte range; the raw numbers follow. So the parameter count of a checkpoint is in its header: a few
# kilobytes, however many gigabytes the weights take. `nn.LM.save_pretrained` writes such a folder (the layout
# that `transformers`, Hugging Face's Python library for published models, loads), `nn.LM.from_pretrained` reads
# one back, and
# `python -m tinygrad_block inspect FOLDER` counts it from the header alone, beside the closed form.
#
# Below, the tiny preset's model is saved, its header read by hand with `struct` and `json`, and the count
# compared three ways: the header, the model in memory, and `accounting.total_params`. The file's size is the
# 8 bytes, the header, and 4 bytes per float32 parameter, nothing else.

# %%
tiny = nn.LM(nn.preset("tiny"), generator=tb.Generator(0))
folder = OUT / "tiny_checkpoint"
tiny.save_pretrained(folder)
raw = (folder / "model.safetensors").read_bytes()
header_len = struct.unpack("<Q", raw[:8])[0]                      # little-endian unsigned 64-bit
header = json.loads(raw[8:8 + header_len])
tensors = {name: entry for name, entry in header.items() if name != "__metadata__"}
by_hand = sum(int(np.prod(entry["shape"])) for entry in tensors.values())
first = next(iter(tensors))
print(f"{folder.name}: {sorted(p.name for p in folder.iterdir())}; model.safetensors is {len(raw):,} bytes")
print(f"header: {header_len:,} bytes, {len(tensors)} tensors; the first: {first} {tensors[first]}")
print(f"parameters: header {by_hand:,}, model {tiny.num_parameters():,}, closed form "
      f"{acc.total_params(nn.preset('tiny')):,}")
print("\n".join(inspect_text(inspect_checkpoint(folder))))
assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
assert by_hand == tiny.num_parameters() == acc.total_params(nn.preset("tiny")) == 123_712
assert len(raw) == 8 + header_len + 4 * by_hand and len(tensors) == 2 * 9 + 3
assert inspect_checkpoint(folder)["parameters"] == by_hand and inspect_checkpoint(folder)["matches"]

# %% [markdown]
# ## Figures you will see quoted
#
# Some of this lesson's counts circulate in a rounded or slipped form. Each row gives the figure as commonly
# quoted, the exact count from this lesson's code, and why the two differ; the cell under the box computes each
# count again and checks the reason.
#
# | figure | commonly quoted | counted | why they differ |
# |---|---|---|---|
# | Llama-2-70B, one block | 822 M | 855,654,400 | its own formula, $2.25\,d^2 + 3\,d\,d_{ff} + 2d$, gives the count |
# | Llama-2-70B, 80 blocks | 65.7 B | 68,452,352,000 | 80 times the block above |
# | Llama-2-70B, body / embedding | 250 | 261.1 | 68,452,352,000 / 262,144,000 |
# | embedding share near 1 B | a quarter | 21.3 %, 6.0 % | Llama-3.2-1B's 128,256 tokens, TinyLlama-1.1B's 32,000 |
# | an untied head at $d$ = 8,192 | 1.6 B | 1,050,673,152 | Llama-3-70B's $V d$; 1.6 B would need $V \approx$ 195,000 |
# | a 70B GQA + SwiGLU block | $6d^2 + 3\,d\,d_{ff}$ | 855,654,400 | 8 query heads per KV head: attention $2.25\,d^2$ |
# | Llama-3-70B, attention / FFN | 25 % / 75 % | 17.6 % / 82.4 % | GQA makes $W_K$ and $W_V$ $d/8$ wide |
# | Llama-3-8B, one block | 213 M | 218,112,000 | 213 M takes $W_K$, $W_V$ $d/8$ wide; they are $d/4$ |
# | Llama-3-8B, 32 blocks | 6.8 B | 6,979,584,000 | the same slip, 32 times |
# | Llama-2-7B, 32 blocks | 6.4 B | 6,476,267,520 | 6.476 cut off after one decimal instead of rounded |
# | Llama-2-7B, embedding + head | 0.5 B | 262,144,000 | 0.5 B is Llama-2-70B's pair, 524,288,000 |

# %%
as_70b = acc.params_per_block(nn.preset("llama3-8b").with_(n_kv_heads=4))           # K and V d/8 wide, as in 70B
pair7, pair70 = hand["embedding"] + hand["LM head"], rows70["embedding"] + rows70["lm_head"]
quoted = {"Llama-2-70B, one block": ("822 M", block70), "Llama-2-70B, 80 blocks": ("65.7 B", rows70["blocks"]),
          "Llama-2-70B, body / embedding": ("250", round(rows70["blocks"] / rows70["embedding"], 1)),
          "embedding share, Llama-3.2-1B": ("a quarter", f"{share['llama3.2-1b']['embeddings']:.1%}"),
          "embedding share, TinyLlama-1.1B": ("a quarter", f"{share['tinyllama-1.1b']['embeddings']:.1%}"),
          "an untied head at d = 8,192": ("1.6 B", s70[0]),
          "a 70B GQA + SwiGLU block": (f"6d^2 + 3 d d_ff = {6 * d**2 + 3 * d * d_ff:,}", blocks["llama2-70b"][2]),
          "Llama-3-70B, attention / FFN": ("25 % / 75 %", " / ".join(f"{x:.1%}" for x in shares["llama3-70b"])),
          "Llama-3-8B, one block": ("213 M", l3[2]), "Llama-3-8B, 32 blocks": ("6.8 B", 32 * l3[2]),
          "Llama-2-7B, 32 blocks": ("6.4 B", hand["32 blocks"]), "Llama-2-7B, embedding + head": ("0.5 B", pair7)}
for figure_, (said, count) in quoted.items():
    print(f"{figure_:34} {said:>34} {count if isinstance(count, str) else f'{count:,}':>16}")
print(f"Llama-3-8B's block with W_K, W_V d/8 wide: {as_70b:,} (32 of them {32 * as_70b:,}); Llama-2-70B's "
      f"embedding + head {pair70:,}")
assert block70 == 2.25 * d**2 + 3 * d * d_ff + 2 * d == 855_654_400 and round(block70 / 1e6) != 822
assert rows70["blocks"] == 80 * block70 == 68_452_352_000 and round(rows70["blocks"] / 1e9, 1) != 65.7
assert round(rows70["blocks"] / rows70["embedding"], 1) == 261.1 and rows70["embedding"] == 262_144_000
assert round(100 * share["llama3.2-1b"]["embeddings"], 1) == 21.3 and llama32_1b.vocab_size == 128_256
assert round(100 * share["tinyllama-1.1b"]["embeddings"], 1) == 6.0 and nn.preset("tinyllama-1.1b").vocab_size == 32_000
assert s70[0] == 1_050_673_152 and round(1.6e9 / 8192, -3) == 195_000
assert all(round(cfg.vocab_size * cfg.d_model / 1e9, 1) != 1.6 for cfg in nn.PRESETS.values())
assert 6 * d**2 + 3 * d * d_ff == 1_107_296_256 and blocks["llama2-70b"][0] == 2.25 * d**2
assert [round(100 * x, 1) for x in shares["llama3-70b"]] == [17.6, 82.4] and round(100 * shares["llama3-70b"][0]) != 25
assert l3[2] == 218_112_000 and as_70b == 213_917_696 and int(as_70b / 1e6) == 213 and round(l3[2] / 1e6) != 213
assert 32 * l3[2] == 6_979_584_000 and round(32 * as_70b / 1e9, 1) == 6.8 != round(32 * l3[2] / 1e9, 1)
assert hand["32 blocks"] == 6_476_267_520 and int(hand["32 blocks"] / 1e8) == 64
assert round(hand["32 blocks"] / 1e9, 1) == 6.5
assert pair7 == 262_144_000 and pair70 == 524_288_000 and round(pair70 / 1e9, 1) == 0.5

# %% [markdown]
# ## Check yourself
#
# 1. How can the library count all 68,976,648,192 parameters of Llama-2-70B in milliseconds, on a machine whose
#    memory could not hold them?
#
#    <details><summary>Answer</summary>
#
#    On the shape-only device a tensor has a shape and a dtype and no numbers. Building the model there creates its
#    723 parameter tensors without allocating anything, and the count adds up their sizes. In float32 the same
#    tensors would take about 276 GB.
#
#    </details>
#
# 2. Why is the embedding about a fifth of Llama-3.2-1B but under 0.4 % of Llama-2-70B?
#
#    <details><summary>Answer</summary>
#
#    The embedding holds $V d_{model}$ parameters and the body about $12\,n_{layers} d_{model}^2$. A small model with
#    a large vocabulary (128,256 tokens at $d_{model}$ = 2,048 and 16 layers) spends a large share on the table;
#    a wide and deep one with 32,000 tokens spends almost everything on its blocks.
#
#    </details>
#
# 3. What does weight tying save, and why do large models seldom tie?
#
#    <details><summary>Answer</summary>
#
#    Exactly $V d_{model}$ parameters, one whole matrix. For Llama-3-70B that is 1,050,673,152, only 1.5 % of the
#    model, while tying forces each token's input vector and its output direction to be one vector. For
#    Llama-3.2-1B the same saving is 17.5 % of the untied model.
#
#    </details>
#
# 4. How does grouped-query attention change a block's split between attention and the FFN?
#
#    <details><summary>Answer</summary>
#
#    $W_K$ and $W_V$ shrink to $n_{kv} d_{head}$ outputs, so with 8 query heads per key/value head attention holds
#    $2.25\,d^2$ instead of $4d^2$. Llama-2-7B (MHA) has 33.2 % of a block in attention, Llama-2-70B 17.6 %, and
#    models with GQA spend part of the saving on a wider FFN.
#
#    </details>

# %% [markdown]
# ## Words from this lesson
#
# - **decoder-only model**: a language model made of causal blocks only, each position reading only the ones
#   before it, between an embedding and an LM head (§2)
# - **body**: a model's stack of blocks, without its embedding, final norm and LM head (§2)
# - **weight tying**: using the embedding matrix as the LM head too, $\text{logits} = h E^\top$, which saves
#   $V \cdot d_{model}$ parameters (§3)
# - **safetensors**: the file format of published weights, an 8-byte length, a JSON header listing every tensor's
#   name, dtype, shape and byte range, then the raw numbers (§7)

# %% [markdown]
# ## Exercises
#
# 1. `llama_params`: `llama_params(cfg)` returns the number of parameters of the whole Llama-style model `cfg`
#    (an `nn.BlockConfig`: RMSNorm, SwiGLU, no biases, RoPE), from its fields alone: the embedding, `n_layers`
#    blocks, the final norm and the LM head, which is absent when `cfg.tie_embeddings` is true. The checker
#    compares it with the model built on the shape-only device, for MHA and GQA models and tied and untied
#    heads, and it names the usual slips: forgetting the norms, giving $W_K$ and $W_V$ the full $d \times d$
#    under GQA, counting a tied head twice.
# 2. `tied_saving`: `tied_saving(cfg)` returns a pair: how many parameters tying the LM head to the embedding
#    saves for the architecture `cfg`, and what fraction of the *untied* model that is (section 3). It is
#    checked against the two models built on meta.
#
# `python -m tinygrad_block exercise 12` writes `exercise_12.py` with the two functions to fill in;
# `python -m tinygrad_block check 12` checks them and says what is wrong.
