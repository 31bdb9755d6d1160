# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 13 — FLOPs and memory
#
# How much arithmetic does one token cost, how long does training a 70B model take, and how much memory does it
# need? The usual answers are rules of thumb: $2N$ per token, $6N$ for training, 16 bytes per parameter. This
# lesson gets the exact numbers by running the model on the shape-only device, where every primitive reports
# its FLOPs and the bytes it keeps, and then checks each rule of thumb against the count.
#
# **What you will learn**
# - the walk of one token through a Llama-2-7B block, step by step: its shape and its FLOPs;
# - FLOPs counted by running forward and backward, and why the backward's matmuls cost exactly twice the
#   forward's;
# - $2N$ FLOPs per token for a forward pass, $6N$ for training, and what these rules leave out;
# - where the compute goes, and the sequence length where attention overtakes the FFN (plotted);
# - training compute: Chinchilla's 20 tokens per parameter, how long a 70B model takes on a thousand GPUs, and
#   the `calc` command that does this arithmetic for any architecture;
# - training memory: weights, gradients, the state of the Adam optimizer, and the activations kept for backward,
#   estimated and measured;
# - the KV cache of generation, beside all that;
# - figures you will see quoted for these costs, each beside its exact count and why the two differ.
#
# Run it as a script, `python -m tinygrad_block lesson 13`, or as a notebook,
# `python -m tinygrad_block lesson 13 --notebook --execute` (it lands beside this file).

# %%
import json
import math
import subprocess
import sys

import numpy as np

import tinygrad_block as tb
from tinygrad_block import accounting as acc
from tinygrad_block import nn
from tinygrad_block.counting import count_flops, count_saved_bytes
from tinygrad_block.measure import measured_activations, meta_ids, meta_lm, walk
from tinygrad_block.pictures import figure

from course import out_dir, show

OUT = out_dir(13)         # lessons/out/13/: this lesson's pictures
GiB, KiB = 2**30, 2**10
cfg7, cfg70 = nn.preset("llama2-7b"), nn.preset("llama2-70b")

# %% [markdown]
# ## 1. One token through one block
#
# Every primitive carries its FLOP rule: a matmul $(M, K) @ (K, N)$ costs $2MNK$ (a multiply and an add per
# term), and an elementwise operation costs 1 per element. `measure.walk` runs one Llama-2-7B block on the
# shape-only device, groups its primitive calls into the steps the modules name, and adds up their FLOPs. Below
# is one token ($L = 1$), and beside it the cost per token when the block reads a context of $L = 4096$.
#
# The four attention projections and the three FFN matrices do almost all the work. $W_Q$, $W_K$, $W_V$ and
# $W_O$ cost $2d^2$ = 33,554,432 each, and $W_{gate}$, $W_{up}$ and $W_{down}$ cost $2\,d\,d_{ff}$ = 90,177,536
# each. Together they are **404,750,336** FLOPs per token, twice the block's 202,375,168 weights. The scores
# $q k^\top$ and the weighted sum of $V$ cost $2\,d\,L$ each per token, so they add $4dL$ = 16,384 $L$ on top:
# with attention over 4,096 tokens a token's matmuls cost 471,859,200.
#
# The rest are small, and the usual quick estimates of them are close but not exact. Counted per token:
#
# | step | quick estimate | counted | why |
# |---|---|---|---|
# | RMSNorm | about $4d$ | $4d + 3$ = 16,387 | $x^2$, sum ($d-1$), $/d$, $+\epsilon$, sqrt, $1/x$, two products |
# | RoPE on q and k | about $4d$ | $6d$ = 24,576 | 3 per element of q and k: two products and a sum or difference |
# | scale $q/\sqrt{d_{head}}$ | | $d$ = 4,096 | one division per element of q |
# | causal mask | | $HL$ | one add per score |
# | softmax | about $3HL$ | $5HL - 2H$ | max ($L - 1$), subtract, exp, sum ($L - 1$), divide: per row of $L$ scores |
# | SiLU(gate) × up | about $3 d_{ff}$ | $9\,d_{ff}$ = 99,072 | overflow-safe sigmoid 7, $\times x$ 1, $\times$ up 1 |
# | residual add | $d$ | $d$ = 4,096 | |
#
# The softmax's $5HL - 2H$ equals $3HL$ only at $L = 1$ ($3H$ = 96). At $L = 4096$ it is 655,296 per token
# against $3HL$ = 393,216.

# %%
d7, H7, dff7 = cfg7.d_model, cfg7.n_heads, cfg7.d_ff
one, ctx = walk(cfg7, 1, 1), walk(cfg7, 1, 4096)
print("walk: Llama-2-7B block, one token (L = 1), and per token with a context of L = 4096")
print(f"{'operation':28} {'shape after (L = 1)':>20} {'FLOPs (L = 1)':>14} {'per token, L = 4096':>20}")
for a, b in zip(one, ctx):
    assert a.operation == b.operation
    print(f"{a.operation:28} {str(a.shape):>20} {a.flops:>14,} {b.flops / 4096:>20,.0f}")
by_step = {s.operation: s for s in one}
per_token = {s.operation: s.flops // 4096 for s in ctx}
weights = acc.params_per_block(cfg7) - 2 * d7                   # the block's matmul weights (no norm gains)
static = sum(s.matmul_flops for s in one) - 4 * 1 * d7          # L = 1: q k^T and weights @ V cost 2 d L each
print(f"weight matmuls: {static:,} FLOPs per token = 2 x {weights:,} weights; + 4 d L for the scores and the "
      f"weighted sum; per token at L = 4096: {sum(s.matmul_flops for s in ctx) // 4096:,}")
assert [by_step[p].matmul_flops for p in ("Q projection", "K projection", "V projection", "O projection")] == \
    [2 * d7 * d7] * 4 == [33_554_432] * 4
assert [by_step[p].matmul_flops for p in ("gate projection", "up projection", "down projection")] == \
    [2 * d7 * dff7] * 3 == [90_177_536] * 3
assert static == 2 * weights == 404_750_336 and weights == 202_375_168
assert sum(s.matmul_flops for s in ctx) == 4096 * (static + 4 * 4096 * d7) == 4096 * 471_859_200
assert 4 * d7 == 16_384
assert by_step["RMSNorm (norm1)"].flops == 4 * d7 + 3 == 16_387
assert by_step["RoPE on q, k"].flops == 6 * d7 == 24_576                      # MHA: k is as wide as q
assert by_step["scores q k^T / sqrt(d_head)"].flops - by_step["scores q k^T / sqrt(d_head)"].matmul_flops == d7
assert per_token["causal mask"] == H7 * 4096
assert by_step["softmax"].flops == 5 * H7 - 2 * H7 == 3 * H7 == 96
assert per_token["softmax"] == 5 * H7 * 4096 - 2 * H7 == 655_296 and 3 * H7 * 4096 == 393_216
assert by_step["SiLU(gate)"].flops + by_step["SiLU(gate) * up"].flops == 9 * dff7 == 99_072
assert {s.flops for s in one if s.operation == "residual add"} == {d7}

# %% [markdown]
# ## 2. FLOPs, counted by running forward and backward
#
# `count_flops` adds up the FLOP rule of every primitive that runs, in the forward pass and in the backward
# pass, which is made of primitive calls too. So the backward's cost is counted, not assumed. We run one
# Llama-2-7B block forward and backward on meta for $L = 1$ and $L = 4096$.
#
# **The backward's matmuls cost exactly twice the forward's**, at both lengths, and the reason is exact:
# $Y = XW$ needs $dX = dY\,W^\top$ and
# $dW = X^\top dY$, two matmuls of the same size as the forward one. For $q k^\top$ and the weighted sum of $V$,
# both inputs need a gradient too. Counting every op, not just matmuls, the backward is 1.9989 times the forward
# at $L = 4096$, mostly because the softmax's backward is cheaper per score than twice its forward, and the
# constant mask passes its gradient through for free.
#
# **All ops or matmuls only.** At $L = 4096$, norms, RoPE, the mask, softmax, SiLU and the residual adds add
# 3,911,999,488 FLOPs to the forward's 1,932,735,283,200 of matmuls: 0.20 % of the total. Most of them act on
# the $32 \times 4096 \times 4096$ scores ($T$ = 536,870,912): the mask is one add per score, and the softmax
# is $5T - 2R$ = 2,684,092,416 for its $R = 32 \times 4096$ rows. They barely count as arithmetic, but on a GPU
# each one is a trip through memory (its input read from the GPU's memory, its output written back), so they
# still take real time. Lesson 16 counts that traffic kernel by kernel (a kernel, lesson 10, is one program the
# GPU runs, such as one op over a whole tensor).
#
# **Closed forms.** `accounting.block_forward_flops` and `block_backward_flops` derive the same numbers on
# paper, for matmuls alone and for all ops. They equal the counts exactly, a difference of 0 in all four.

# %%
def count_block(cfg: nn.BlockConfig, L: int):
    """FLOPs of one block forward and backward on a (1, L, d_model) input, counted on meta."""
    cfg = cfg.with_(max_seq_len=max(L, cfg.max_seq_len))
    block = nn.TransformerBlock(cfg, generator=tb.Generator(0), device="meta")
    x = tb.zeros(1, L, cfg.d_model, device="meta", requires_grad=True)       # (B, L, d_model)
    with count_flops() as fc:
        out = block(x)
        out.backward(tb.ones_like(out))
    return fc


counts = {L: count_block(cfg7, L) for L in (1, 4096)}
print(f"{'Llama-2-7B block':16} {'fwd matmuls':>19} {'bwd matmuls':>19} {'bwd/fwd':>7} {'fwd all ops':>19} "
      f"{'bwd all ops':>19} {'bwd/fwd':>7}")
for L, fc in counts.items():
    fwd, bwd = fc.total("forward", matmul_only=True), fc.total("backward", matmul_only=True)
    fwd_all, bwd_all = fc.total("forward"), fc.total("backward")
    print(f"{'L = ' + str(L):16} {fwd:>19,} {bwd:>19,} {bwd / fwd:>7.4f} {fwd_all:>19,} {bwd_all:>19,} "
          f"{bwd_all / fwd_all:>7.4f}")
    assert bwd == 2 * fwd and fwd == L * acc.flops_per_token(cfg7, L)["total"]
    assert [fwd - acc.block_forward_flops(cfg7, L), bwd - acc.block_backward_flops(cfg7, L),
            fwd_all - acc.block_forward_flops(cfg7, L, matmul_only=False),
            bwd_all - acc.block_backward_flops(cfg7, L, matmul_only=False)] == [0, 0, 0, 0]
full = counts[4096]
fwd, fwd_all = full.total("forward", matmul_only=True), full.total("forward")
other = fwd_all - fwd
steps = full.by_step("forward", scope="block.attn")
T, R = H7 * 4096 * 4096, H7 * 4096
print(f"L = 4096: non-matmul forward FLOPs {other:,} ({other / fwd_all:.2%}); the mask {steps['mask']:,}, "
      f"the softmax {steps['softmax']:,}")
assert fwd == 1_932_735_283_200 and round(full.total("backward") / fwd_all, 4) == 1.9989
assert other == 3_911_999_488 and round(100 * other / fwd_all, 2) == 0.20
assert steps["mask"] == T == 536_870_912 and steps["softmax"] == 5 * T - 2 * R == 2_684_092_416

# %% [markdown]
# ## 3. The whole model: $2N$ per token, $6N$ per trained token
#
# A weight matrix used once per token costs 2 FLOPs per weight (a multiply and an add). So a forward pass costs
# about $2N$ FLOPs per token for a model of $N$ parameters, and training, with its backward at twice the
# forward, about $6N$: the **6N rule**. Counting the whole Llama-2-7B model at $L = 4096$ shows what the two rules
# leave out:
#
# - the **embedding** is a table lookup and costs nothing, though its 131.072 M parameters are in $N$. The
#   weights that multiply are 6,607,077,376: the blocks' matrices and the LM head (the norm gains only scale);
# - **attention over the context**, $4Ld$ per token in every layer forward, costs far more at $L = 4096$
#   than the embedding's share of $2N$.
#
# The forward comes to **15,361,638,400 FLOPs per token**: $2 \times$ 6,607,077,376 + $4 L d\,n_{layers}$
# (2,147,483,648). Training comes to **46,084,915,200**: $6 \times$ 6,607,077,376 + $12 L d\,n_{layers}$
# (6,442,450,944). That is **14.0 % more** than the rule's $6N$ = 40,430,493,696.
#
# Of those 15,361,638,400, the 32 blocks' weight matmuls are 12,952,010,752; with attention over 4,096 tokens the
# blocks come to 15,099,494,400, and the LM head adds the rest. How fast is that? The H100 is NVIDIA's data-centre
# GPU, and its peak for matrix products in bf16 is 990 TFLOP/s, $990 \times 10^{12}$ FLOPs per second. At full
# utilisation the whole forward allows 64,446 tokens per second on one H100 ($2N$ would allow 73,459). In practice
# throughput is lower still, because reading the weights from memory takes time (lesson 16, section 3: decoding,
# generating one token at a time, is bound by memory).

# %%
def count_model(cfg: nn.BlockConfig, L: int):
    """Forward and backward FLOPs of the whole LM on ids (1, L), counted on meta."""
    model = meta_lm(cfg)
    with count_flops() as fc:
        logits = model(meta_ids(1, L))                                       # (1, L, vocab_size)
        logits.backward(tb.ones_like(logits))
    multiplying = sum(p.size for p in model.parameters() if p.ndim == 2) - model.embed.num_parameters()
    return fc, model.num_parameters(), multiplying


fc7, N7, mult7 = count_model(cfg7, 4096)
fwd_token = fc7.total("forward", matmul_only=True) // 4096
train_token = (fc7.total("forward", matmul_only=True) + fc7.total("backward", matmul_only=True)) // 4096
attn_fwd = 4 * 4096 * d7 * cfg7.n_layers
print(f"Llama-2-7B, whole model, L = 4096: N = {N7:,}, of which {mult7:,} multiply")
print(f"  forward {fwd_token:,} FLOPs per token = 2 x {mult7:,} + {attn_fwd:,};  2N = {2 * N7:,}")
print(f"  training {train_token:,} = 6 x {mult7:,} + {3 * attn_fwd:,};  6N = {6 * N7:,} "
      f"(the count is {train_token / (6 * N7) - 1:+.1%})")
blocks_static, blocks_ctx = cfg7.n_layers * static, cfg7.n_layers * 471_859_200
speed = {"all of the forward": 990e12 / fwd_token, "2N": acc.inference_tokens_per_second(N7, 990e12)}
print(f"  32 blocks: {blocks_static:,} (weights), {blocks_ctx:,} (with attention over 4,096 tokens); "
      f"tokens per second at 990 TFLOP/s: " + ", ".join(f"{k} {v:,.0f}" for k, v in speed.items()))
assert fc7.total("backward", matmul_only=True) == 2 * fc7.total("forward", matmul_only=True)
assert N7 - mult7 == cfg7.vocab_size * d7 + (2 * cfg7.n_layers + 1) * d7 and mult7 == 6_607_077_376
assert cfg7.vocab_size * d7 == 131_072_000
assert fwd_token == 2 * mult7 + attn_fwd == 15_361_638_400 and attn_fwd == 2_147_483_648
assert train_token == 6 * mult7 + 3 * attn_fwd == 46_084_915_200 and 3 * attn_fwd == 6_442_450_944
assert 6 * N7 == 40_430_493_696 and round(100 * (train_token / (6 * N7) - 1), 1) == 14.0
assert blocks_static == 12_952_010_752 and blocks_ctx == 15_099_494_400
assert fwd_token == blocks_ctx + 2 * d7 * cfg7.vocab_size and attn_fwd > 8 * (2 * cfg7.vocab_size * d7)
assert round(speed["all of the forward"]) == 64_446 and int(speed["2N"]) == 73_459

# %% [markdown]
# ## 4. Where the compute goes: the FFN's cost is fixed, attention's grows
#
# Every module pushes its name while it runs, so `fc.by_scope(depth=2)` splits a block's FLOPs into
# `block.attn` and `block.ffn`. Per token, a block's forward matmuls fall into three parts:
#
# - **the FFN**, three $d \times d_{ff}$ matrices: $6\,d\,d_{ff}$, whatever the context;
# - **attention's four projections**: $4d^2 + 4\,d\,n_{kv} d_{head}$, whatever the context ($8d^2$ under MHA);
# - **attention's $L$-dependent part**, the scores $q k^\top$ and the weighted sum of $V$: $4Ld$, growing with the
#   context $L$.
#
# **The rule.** The FFN's cost per token is fixed and attention's grows with the context, so past some length
# attention costs more. All of attention equals the FFN where
#
# $$\text{projections} + 4Ld = 6\,d\,d_{ff}, \qquad L = \frac{6\,d\,d_{ff} - \text{projections}}{4d},$$
#
# and the $L$-dependent part alone equals the FFN at $L = 6\,d\,d_{ff} / 4d = 1.5\,d_{ff}$.
#
# The cell counts the three parts on meta for one token of Llama-2-7B: the FFN costs 270,532,608 and the
# projections 134,217,728, so the FFN costs **2.02 times** as much, $3 d_{ff} / 4d$. Then it counts them at two
# lengths for Llama-2-7B and Llama-2-70B, and finds them equal to the closed forms. The picture draws the three
# parts per token of one block against $L$ for both models: the points are counts made on meta, the lines the
# closed forms, and the dotted lines mark where the rule puts the two crossovers.

# %%
def per_token_costs(cfg: nn.BlockConfig, L: int) -> dict[str, float]:
    """Forward matmul FLOPs per token of one block at context L, counted on meta: attention's projections, its
    L-dependent part (q k^T and weights @ V, the matmuls of block.attn itself), and the FFN."""
    fc = count_block(cfg, L)
    core = fc.total("forward", scope="block.attn", matmul_only=True, own=True)
    attn = fc.total("forward", scope="block.attn", matmul_only=True)
    return {"projections": (attn - core) / L, "core": core / L, "ffn": fc.total("forward", scope="block.ffn",
                                                                                 matmul_only=True) / L}


def crossovers(cfg: nn.BlockConfig) -> dict[str, float]:
    """The rule's closed forms, per token of one block: the projections, the FFN, and the lengths where all of
    attention ('all') and its L-dependent part alone ('core') cost as much as the FFN."""
    d, d_kv = cfg.d_model, cfg.n_kv_heads * cfg.d_head
    proj, ffn = 2 * (2 * d * d + 2 * d * d_kv), 6 * d * cfg.d_ff
    return {"all": (ffn - proj) / (4 * d), "core": ffn / (4 * d), "proj": proj, "ffn": ffn}


one_token = per_token_costs(cfg7, 1)
ratio = one_token["ffn"] / one_token["projections"]
print(f"Llama-2-7B, one token: FFN {one_token['ffn']:,.0f}, attention projections {one_token['projections']:,.0f}, "
      f"ratio {ratio:.2f}")
assert one_token["ffn"] == 6 * d7 * dff7 == 270_532_608 and one_token["projections"] == 8 * d7 * d7 == 134_217_728
assert ratio == 3 * dff7 / (4 * d7) and round(ratio, 2) == 2.02

crossover = {name: crossovers(cfg) for name, cfg in (("llama2-7b", cfg7), ("llama2-70b", cfg70))}
for name, cfg in (("llama2-7b", cfg7), ("llama2-70b", cfg70)):
    c = crossover[name]
    at = {L: per_token_costs(cfg, L) for L in (int(c["all"]), int(c["core"]))}
    for L, k in at.items():
        assert k["projections"] == c["proj"] and k["ffn"] == c["ffn"] and k["core"] == 4 * L * cfg.d_model
    assert at[int(c["all"])]["projections"] + at[int(c["all"])]["core"] == c["ffn"]       # counted: equal there
    assert at[int(c["core"])]["core"] == c["ffn"]

fig = figure(12, 4.8)
axes = fig.subplots(1, 2, sharey=True)
lengths = 2 ** np.arange(8, 18)                                                # 256 .. 131072
for ax, (name, cfg) in zip(axes, (("llama2-7b", cfg7), ("llama2-70b", cfg70))):
    c, d = crossover[name], cfg.d_model
    fine = np.geomspace(lengths[0], lengths[-1], 200)
    counted = [per_token_costs(cfg, int(L)) for L in lengths]
    ax.plot(fine, np.full_like(fine, c["ffn"]), color="C2", lw=2, label=r"FFN, $6\,d\,d_{ff}$")
    ax.plot(fine, np.full_like(fine, c["proj"]), color="C1", lw=1.5, ls="--", label="attention projections")
    ax.plot(fine, 4 * fine * d, color="C0", lw=1.5, ls="--", label=r"attention's $L$-dependent part, $4Ld$")
    ax.plot(fine, c["proj"] + 4 * fine * d, color="C0", lw=2, label="all of attention")
    ax.plot(lengths, [k["ffn"] for k in counted], "o", color="C2", ms=4)
    ax.plot(lengths, [k["core"] for k in counted], "o", color="C0", ms=4, mfc="none")
    ax.plot(lengths, [k["core"] + k["projections"] for k in counted], "o", color="C0", ms=4,
            label="counted on meta")
    assert all(k["ffn"] == c["ffn"] and k["projections"] == c["proj"] for k in counted)
    for key, text in (("all", "all of attention = FFN"), ("core", r"$4Ld$ = FFN")):
        ax.axvline(c[key], color="0.4", lw=1, ls=":")
        ax.annotate(f"{text}\nL = {c[key]:,.0f} ({c[key] / d:.4g} d)", (c[key], c["ffn"]), xytext=(-6, 30 if key ==
                    "all" else -100), textcoords="offset points", ha="right", fontsize=8.5,
                    bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.85),
                    arrowprops=dict(arrowstyle="->", color="0.4"))
    ax.axvspan(lengths[0], cfg.max_seq_len, color="0.93", zorder=0)
    ax.text(cfg.max_seq_len / 1.1, 0.03, f"its context\n(up to {cfg.max_seq_len:,})", fontsize=8, color="0.4",
            ha="right", transform=ax.get_xaxis_transform())
    ax.set(xscale="log", yscale="log", xlabel="context length L (tokens)", xlim=(lengths[0], lengths[-1]),
           title=f"{name}: d = {d:,}, d_ff = {cfg.d_ff:,}, {cfg.n_kv_heads} KV heads")
axes[0].set_ylabel("forward matmul FLOPs per token, one block")
axes[0].legend(loc="upper left", fontsize=8)
fig.suptitle("Attention's cost grows with the context, the FFN's does not")
show(fig, OUT / "attention_vs_ffn.png")

# %% [markdown]
# ## 5. The rule read for Llama-2-7B and Llama-2-70B
#
# **Llama-2-7B** (MHA, $d_{ff}$ = 11,008). At its context of $L = 4096$, attention's $L$-dependent part costs
# 274,877,906,944 FLOPs in the block's forward, and the FFN is still 1.34 times all of attention. All of attention
# equals the FFN at **L = 8,320**, where `block.attn` and `block.ffn` count 2,250,831,298,560 FLOPs each; the
# $L$-dependent part alone equals it at $1.5\,d_{ff}$ = 16,512. For an MHA block whose FFN is exactly $8d/3$ wide
# the rule gives $8d^2 + 4Ld = 16d^2$, so $L = 2d$; Llama-2-7B's 8,320 is $2.03\,d$, since its FFN is a little
# wider than $8d/3$.
#
# **Llama-2-70B** (GQA, $d_{ff}$ = 28,672 = $3.5d$). GQA shrinks its projections to $4.5\,d^2$ per token: with
# $g = 8$ query heads per key/value head, $W_K$ and $W_V$ are $d \times d/g$, so Q, K and V together cost
# $2d^2 + 2 \cdot 2d^2/g = (2 + 4/g)\,d^2 = 2.5\,d^2$, and $W_O$ another $2d^2$ (the cell counts each). Its FFN
# costs $21\,d^2$ per token. So the crossover moves out to **L = 33,792** ($4.125\,d$). At $L = 2d$ = 16,384 its
# FFN still costs 1.68 times all of attention, and at its context of 4,096 tokens the FFN dominates. A block's
# forward costs $25.5\,d^2 + 4Ld$ per token: twice its weights, plus attention over the context.
#
# Where the crossover falls depends on the FFN's width and on how many key/value heads there are, not on $d$ alone.

# %%
for name, cfg in (("llama2-7b", cfg7), ("llama2-70b", cfg70)):
    c = crossover[name]
    print(f"{name}: per token, projections {c['proj'] / cfg.d_model**2:g} d^2, FFN {c['ffn'] / cfg.d_model**2:g} "
          f"d^2; all of attention = FFN at L = {c['all']:,.0f} ({c['all'] / cfg.d_model:g} d), the L-dependent "
          f"part = FFN at L = {c['core']:,.0f}")
even = count_block(cfg7, 8_320).by_scope("forward", matmul_only=True, depth=2)
at4096 = counts[4096].by_scope("forward", matmul_only=True, depth=2)
core4096 = counts[4096].total("forward", scope="block.attn", matmul_only=True, own=True)
print(f"llama2-7b at L = 8,320: block.attn {even['block.attn']:,}, block.ffn {even['block.ffn']:,}; at L = 4096: "
      f"the L-dependent part {core4096:,}, FFN / all of attention {at4096['block.ffn'] / at4096['block.attn']:.2f}")
c7x, c70x = crossover["llama2-7b"], crossover["llama2-70b"]
assert c7x["all"] == 8_320 and c7x["all"] / d7 == 2.03125 and c7x["core"] == 16_512 == 1.5 * dff7
assert even["block.attn"] == even["block.ffn"] == 2_250_831_298_560
assert core4096 == 274_877_906_944 and round(at4096["block.ffn"] / at4096["block.attn"], 2) == 1.34
mha = cfg7.with_(d_model=3072, n_heads=24, n_kv_heads=24, d_ff=8192)                # MHA, an FFN exactly 8d/3 wide
assert crossovers(mha)["all"] == 2 * mha.d_model and dff7 / d7 > 8 / 3                # 8d^2 + 4Ld = 16d^2 at L = 2d

fc70 = count_block(cfg70, 1)                                                    # one token of Llama-2-70B
g70, d70 = cfg70.n_heads // cfg70.n_kv_heads, cfg70.d_model
qkv = sum(fc70.total("forward", scope=f"block.attn.{p}_proj", matmul_only=True) for p in "qkv")
out_proj = fc70.total("forward", scope="block.attn.o_proj", matmul_only=True)
print(f"llama2-70b, one token: Q, K and V {qkv:,} FLOPs = {qkv / d70**2:g} d^2 (g = {g70}), "
      f"O {out_proj / d70**2:g} d^2")
assert g70 == 8 and qkv == (2 + 4 / g70) * d70**2 == 2.5 * d70**2 == 167_772_160
assert out_proj == 2 * d70**2 and qkv + out_proj == 4.5 * d70**2 == c70x["proj"]
assert c70x["all"] == 33_792 and c70x["all"] / d70 == 4.125 and cfg70.d_ff == 3.5 * d70 == 28_672
assert c70x["ffn"] == 21 * d70**2 and round(c70x["ffn"] / (c70x["proj"] + 4 * 2 * d70 * d70), 2) == 1.68
assert c70x["ffn"] > c70x["proj"] + 4 * 4096 * d70
assert (c70x["proj"] + c70x["ffn"]) / d70**2 == 25.5 == 2 * (acc.params_per_block(cfg70) - 2 * d70) / d70**2

# %% [markdown]
# ## 6. Training compute for the whole model
#
# Training on $D$ tokens costs about $6ND$ FLOPs. The Chinchilla study (Hoffmann et al., 2022) asked how best to
# split a fixed amount of compute between parameters and training tokens. Its **compute-optimal** recipe, the one
# that reaches the lowest loss for the compute, is about 20 tokens per parameter, $D = 20N$, so
# $C = 6N \cdot 20N = 120 N^2$. For Llama-2-70B that is 1,379,532,963,840 tokens (about 1.4 T) and about
# $5.71 \times 10^{23}$ FLOPs. Compute grows as $N^2$: going from Llama-2-7B to Llama-2-70B multiplies the optimal
# compute by $(N_{70}/N_7)^2$ = 104.8, and on the same GPUs the training time too.
#
# At $L = 4096$ the count is 444,491,366,400 matmul FLOPs per token, **7.4 % above** $6N$ = 413,859,889,152.
# That is a smaller gap than for 7B: the weights grow with $d^2$ and attention over the context only with $d$.
#
# **The sanity check.** Suppose someone says "a 70B model takes 6 weeks on a thousand H100s". With $6ND$ =
# $6 \times 70\text{e}9 \times 1.4\text{e}12 = 5.88 \times 10^{23}$ FLOPs and 990 TFLOP/s per GPU (bf16, dense: the
# H100's peak of section 3, not the doubled figure its data sheet gives for sparse matrices):
#
# wall-clock days = $C$ / (GPUs × peak FLOP/s × MFU × 86,400 s).
#
# The **MFU** (model FLOPs utilisation) is the fraction of the GPUs' peak that the training really achieves:
# the model's FLOPs per second divided by the peak. Real runs reach well under 100 %, because GPUs also wait
# for memory and for each other.
#
# At 45 % MFU, 6 weeks deliver 1000 × 445.5 TFLOP/s (45 % of 990) × 42 days = $1.62 \times 10^{24}$ FLOPs, 2.7 times
# what is needed. Turned round: six weeks need only **16.4 %** MFU, and at 45 % training takes 15.3 days.

# %%
fc70, N70, mult70 = count_model(cfg70, 4096)
D70 = acc.chinchilla_tokens(N70)
C70 = acc.training_flops(N70, D70)
token70 = (fc70.total("forward", matmul_only=True) + fc70.total("backward", matmul_only=True)) // 4096
print(f"Llama-2-70B: N = {N70:,}; D = 20 N = {D70:,} tokens; C = 6 N D = {C70:.3g} FLOPs")
print(f"  counted at L = 4096: {token70:,} training matmul FLOPs per token; 6N = {6 * N70:,} "
      f"({token70 / (6 * N70) - 1:+.1%}); 70B / 7B compute at Chinchilla: {(N70 / N7) ** 2:.1f} x")
assert D70 == 1_379_532_963_840 and round(D70 / 1e12, 1) == 1.4
assert C70 == 120 * N70**2 and round(C70 / 1e23, 2) == 5.71
growth = acc.training_flops(N70, acc.chinchilla_tokens(N70)) / acc.training_flops(N7, acc.chinchilla_tokens(N7))
assert math.isclose(growth, (N70 / N7) ** 2) and round(growth, 1) == 104.8
assert token70 == 6 * mult70 + 12 * 4096 * d70 * cfg70.n_layers == 444_491_366_400 and 6 * N70 == 413_859_889_152
assert round(100 * (token70 / (6 * N70) - 1), 1) == 7.4

gpus, peak, weeks6 = 1000, 990e12, 42
claim = acc.training_flops(70e9, 1.4e12)
delivered = gpus * peak * 0.45 * weeks6 * 86400
mfu_6_weeks = claim / (gpus * peak * weeks6 * 86400)
days = {mfu: acc.training_days(claim, gpus, peak, mfu) for mfu in (0.45, mfu_6_weeks)}
print(f"70e9 parameters, 1.4e12 tokens: {claim:.3g} FLOPs; 6 weeks at 45% deliver {delivered:.3g} "
      f"({delivered / claim:.1f} x); 6 weeks need {mfu_6_weeks:.1%} MFU; at 45% {days[0.45]:.1f} days")
assert claim == 588 * 10**21 and round(claim / 1e23, 1) == 5.9
assert 0.45 * 990 == 445.5 and round(delivered / 1e24, 2) == 1.62 and round(delivered / claim, 1) == 2.7
assert round(days[0.45], 1) == 15.3 and round(100 * mfu_6_weeks, 1) == 16.4
assert math.isclose(days[mfu_6_weeks], weeks6)

# %% [markdown]
# ### The calculator
#
# `python -m tinygrad_block calc` does this arithmetic for any architecture, not only the presets, at any sequence
# length: it builds the model on the shape-only device, counts its parameters and FLOPs beside the closed forms,
# and turns them into training days for a number of GPUs at an MFU. Run on the sanity check's numbers
# (Llama-2-70B's real shape, 1.4 T tokens, 1,000 GPUs at 16.4 %), it reports two times: $6ND$ (printed as `6 N T`,
# with $T$ the tokens) with the exact $N$ (68,976,648,192 rather than 70 B, so a little under six weeks), and the
# FLOPs it counted at $L = 4096$, which include attention over the context (a little over). The cell runs the
# command as you would, with `--json`, and checks its numbers against `accounting`.

# %%
argv = ["calc", "--preset", "llama2-70b", "--seq-len", "4096", "--gpus", "1000", "--mfu", "0.164",
        "--tokens", "1.4e12", "--json"]
calc = json.loads(subprocess.run([sys.executable, "-m", "tinygrad_block", *argv], capture_output=True, text=True,
                                 check=True).stdout)
trained = calc["training"]
print("python -m tinygrad_block " + " ".join(argv[:-1]))
print(f"  parameters {calc['parameters']['total']:,}; 6 N T = {trained['flops']['six_n']:.4g} FLOPs "
      f"-> {trained['days']['six_n']:.1f} days; counted at L = 4096: {trained['flops']['counted']:.4g} FLOPs -> "
      f"{trained['days']['counted']:.1f} days")
assert calc["parameters"]["total"] == calc["parameters"]["closed_form"]["total"] == N70 == 68_976_648_192
assert trained["flops"]["six_n"] == acc.training_flops(N70, 1.4e12)
assert math.isclose(trained["days"]["six_n"], acc.training_days(6 * N70 * 1.4e12, 1000, 990e12, 0.164))
assert trained["flops"]["counted"] == token70 * 1.4e12
assert round(trained["days"]["six_n"], 1) == 41.3 and round(trained["days"]["counted"], 1) == 44.4

# %% [markdown]
# ## 7. Memory for training
#
# **Training state.** Adam, the usual **optimizer** (the rule that turns gradients into changes of the parameters;
# lesson 14 takes its steps by hand), keeps two running averages for every parameter: of its gradient and of its
# squared gradient (its two *moments*). In mixed precision the model computes in bf16 (lesson 07) and the optimizer
# updates an fp32 (float32) copy. So each parameter costs 16 bytes: the bf16 weight takes 2 and its gradient 2; the
# fp32 master copy of the weight and Adam's two moments take 4 + 4 + 4. For Llama-2-70B that is 1,103,626,371,072
# bytes, about 1.1 TB, before a single activation (a tensor kept for the backward, below). No GPU holds that, so the
# state is split over many GPUs, each holding a slice of the weights, gradients and moments (ZeRO-3; lesson 17,
# section 9).
#
# **Activations, estimated.** What training keeps for backward is often estimated at about $10d$ bytes per
# token per layer (bf16), assuming FlashAttention (an attention that never stores its $L \times L$ scores, see
# below) and a fused SwiGLU (one kernel that computes SiLU(gate) × up without keeping the steps in between).
# That is 81,920 bytes (80 KiB) for $d$ = 8,192, and for 80 layers at $L = 4096$ it is 26,843,545,600 bytes,
# 25 GiB. This **activation memory**, what the forward keeps for the backward, grows with the batch and the
# context, while the training state does not.
#
# **Activations, measured.** `count_saved_bytes` measures what this engine actually keeps. For one Llama-2-70B
# block at $L = 4096$ in float16 (the other common 2-byte float: more significant digits than bf16, but a far
# smaller range) it is 6,929,596,416 bytes (6.5 GiB), about **21 times** the estimate, and about
# 516 GiB for 80 layers. The difference comes from three places:
#
# - **Attention keeps two $H \times L \times L$ tensors**: the exponentials (the softmax's division needs them)
#   and the probabilities (the weighted sum of $V$ needs them). $2 \times 64 \times 4096^2 \times 2$ bytes
#   = 4 GiB, 62 % of the block. FlashAttention keeps neither: it recomputes them in backward from q, k, v and
#   one statistic per row (lesson 16, sections 5 and 6).
# - **SwiGLU keeps eight $L \times d_{ff}$ tensors** (the gate and up outputs, the stable sigmoid's pieces,
#   SiLU, their product): 1,879,048,192 bytes (1.75 GiB). A fused kernel keeps one or two.
# - **The rest** are the $d$-wide tensors the estimate is about (the norms' inputs and outputs, q, k, v,
#   attention's output, the per-row statistics): 755,580,928 bytes. The norms keep some of theirs in float32:
#   float16 norms compute their statistics in float32, since $x^2$ overflows float16 once $|x| > 256$.
#
# The block's input does not count here, because it was created outside the block. Inside the whole model,
# `layers.0` also keeps its input (64 MiB more), which is why `python -m tinygrad_block memory --preset
# llama2-70b --seq-len 4096 --batch 1` reports about 521 GiB.

# %%
mem = acc.training_memory(cfg70, 4096)
state = mem["parameters"] + mem["gradients"] + mem["optimizer"]
estimate = acc.activation_bytes_per_token_per_layer(cfg70)
d_ff70 = cfg70.d_ff
print(f"Llama-2-70B, bf16, L = 4096: training state {state:,} bytes ({state / 1e12:.1f} TB, 16 per parameter)")
print(f"  activations estimated at 10 d = {estimate:,} bytes per token per layer: {mem['activations']:,} bytes "
      f"({mem['activations'] / GiB:g} GiB) for 80 layers")
assert state == 16 * N70 == 1_103_626_371_072 and round(state / 1e12, 1) == 1.1
assert mem["parameters"] == mem["gradients"] == 2 * N70 and mem["optimizer"] == 12 * N70
assert estimate == 10 * d70 == 81_920 == 80 * KiB
assert mem["activations"] == 80 * 4096 * estimate == 26_843_545_600 == 25 * GiB


def saved_by_block(cfg: nn.BlockConfig, L: int) -> dict[str, int]:
    """Activation bytes one block keeps for backward, float16 on meta, per module scope."""
    block = nn.TransformerBlock(cfg, generator=tb.Generator(0), dtype=tb.float16, device="meta")
    x = tb.zeros(1, L, cfg.d_model, dtype=tb.float16, device="meta", requires_grad=True)   # (B, L, d_model)
    with count_saved_bytes() as saved:
        block(x)
    return dict(saved.bytes)


saved = saved_by_block(cfg70, 4096)
measured = sum(saved.values())
probabilities = 2 * cfg70.n_heads * 4096**2 * 2
swiglu = saved["block.ffn"] + saved["block.ffn.down_proj"]
print(f"  measured, one block: {measured:,} bytes ({measured / GiB:.1f} GiB, {measured / (4096 * estimate):.1f} x "
      f"the estimate): L x L tensors {probabilities:,}, SwiGLU {swiglu:,}, "
      f"the rest {measured - probabilities - swiglu:,}")
print("  by scope: " + ", ".join(f"{k} {v:,}" for k, v in saved.items()))
in_model = measured_activations(cfg70, 1, 4096, "bf16")                 # what the `memory` command prints
print(f"  inside the model, layers.0 also keeps its input: {in_model['per_layer']:,} bytes per layer, "
      f"{in_model['layers'] / GiB:.0f} GiB for 80 layers")
assert measured == 6_929_596_416 and round(measured / GiB, 1) == 6.5
assert round(measured / (4096 * estimate)) == 21 and round(80 * measured / GiB) == 516
assert 0 < saved["block.attn"] - probabilities < 100 * 2**20 and probabilities == 4 * GiB
assert round(100 * probabilities / measured) == 62
assert swiglu == 8 * 4096 * d_ff70 * 2 == 1_879_048_192 and swiglu / GiB == 1.75
assert measured - probabilities - swiglu == 755_580_928
assert in_model["per_layer"] - measured == 4096 * d70 * 2 == 64 * 2**20 and round(in_model["layers"] / GiB) == 521

# %% [markdown]
# ## 8. The KV cache, beside the rest
#
# Generation keeps each layer's keys and values for every past token (lesson 07):
# $2\, n_{layers} L\, n_{kv} d_{head}$ numbers. For Llama-2-70B at $L = 4096$ in bf16 that is 1,342,177,280
# bytes (1.25 GiB) per sequence, 320 KiB per token. With one KV head per query head (MHA, 64 instead of 8) it
# would be 10 GiB: GQA cuts the cache by $n_{heads} / n_{kv} = 8$. Training keeps K and V among its activations,
# so the cache is an inference cost only.
#
# The picture puts the memory of this section and the last side by side, on a log scale: training state
# against activations (the estimate and our measurement) against one sequence's KV cache. It shows why
# training a 70B model is planned around the optimizer state, and why FlashAttention's savings matter once the
# state is split over many GPUs.

# %%
kv = acc.kv_cache_bytes(cfg70, 4096)
kv_mha = acc.kv_cache_bytes(cfg70.with_(n_kv_heads=cfg70.n_heads), 4096)
print(f"KV cache, Llama-2-70B, bf16, L = 4096: {kv:,} bytes ({kv / GiB:g} GiB, {kv // 4096 // KiB} KiB per token); "
      f"with MHA {kv_mha / GiB:g} GiB")
assert kv == 2 * 80 * 4096 * 8 * 128 * 2 == 1_342_177_280 and kv / GiB == 1.25 and kv // 4096 == 320 * KiB
assert kv_mha == 10 * GiB == 8 * kv and cfg70.n_heads // cfg70.n_kv_heads == 8

rows = {"bf16 weights": mem["parameters"], "gradients": mem["gradients"],
        "Adam: fp32 master + 2 moments": mem["optimizer"], "activations, 10d estimate": mem["activations"],
        "activations, measured here": in_model["layers"], "KV cache, one sequence": kv}
fig = figure(9, 4.6)
ax = fig.add_subplot()
names = list(rows)[::-1]                                       # barh draws the first name at the bottom
group = {"bf16 weights": "C0", "gradients": "C0", "Adam: fp32 master + 2 moments": "C0",
         "activations, 10d estimate": "C4", "activations, measured here": "C4", "KV cache, one sequence": "C3"}
bars = ax.barh(names, [rows[n] / GiB for n in names], color=[group[n] for n in names])
for y, n in enumerate(names):
    ax.text(rows[n] / GiB * 1.08, y, f"{rows[n] / GiB:,.2f} GiB" if rows[n] < 10 * GiB else
            f"{rows[n] / GiB:,.0f} GiB", va="center", fontsize=9)
ax.axvline(80e9 / GiB, color="0.3", ls=":", lw=1.2)
ax.text(80e9 / GiB * 1.08, 0, "one 80 GB GPU", ha="left", va="center", fontsize=8.5, color="0.3")
ax.legend([bars[5], bars[1], bars[0]],
          ["training state, 16 bytes per parameter", "activations kept for backward", "KV cache of generation"],
          loc="upper center", bbox_to_anchor=(0.4, -0.16), ncols=3, fontsize=8.5, frameon=False)
ax.set(xscale="log", xlim=(0.5, 5e3), xlabel="GiB (log scale)",
       title="Llama-2-70B, 4,096 tokens in bf16: what training and generation hold")
show(fig, OUT / "memory_70b.png")
assert rows["Adam: fp32 master + 2 moments"] == max(rows.values())
assert rows["KV cache, one sequence"] == min(rows.values())

# %% [markdown]
# ## Figures you will see quoted
#
# Some of this lesson's numbers circulate in a rounded or slipped form. Each row gives the figure as commonly
# quoted, the exact value from this lesson's code, and why the two differ; the cell under the box computes each
# value again and checks the reason. Unless a row says otherwise, the model is Llama-2-7B and FLOPs are per token.
#
# | figure | commonly quoted | counted | why they differ |
# |---|---|---|---|
# | a block's weight matmuls | 480 M | 404,750,336 | twice its 202,375,168 weights; with $L = 4096$ still 471,859,200 |
# | backward / forward | 2 to 3 | 2 (matmuls) | a matmul's backward is two matmuls of its own size (all ops: 1.9989) |
# | forward of the model | 15 G | 15,361,638,400 | 15 G is the 32 blocks at $L = 4096$, without the LM head |
# | tokens/s on an H100 | 66k | 64,446 | 990 TFLOP/s over 15 G, not over the whole forward |
# | attention overtakes the FFN at | $L \approx 2d$ | $2.03\,d$; 70B: $4.125\,d$ | $2d$ holds for MHA, $8d/3$ FFN only |
# | 70B: attention dominates from | 32k | 33,792 | at 32,768 the FFN is still 2.4 % ahead |
# | a block's forward | $24d^2 + 4Ld$ | 70B: $25.5\,d^2 + 4Ld$ | $24d^2$ fits MHA with an $8d/3$ FFN |
# | $4Ld$ at $L$ = 32,768 | comparable to the FFN | 1.98 × the FFN | 536,870,912 against 270,532,608 |
# | $L = 2048$: projections, core, FFN | 137, 69, 555 B | 274.9, 68.7, 554.1 B | 137 B is two of the four projections |
# | $L = 2048$: the FFN's share | 67 % | 61.7 % | 66.8 % is its share without the $L$-dependent core |
# | 70B, 6 weeks on 1,000 H100s | 35 % MFU | 16.4 % MFU | at 35 % it takes 19.6 days |
# | 70B activations, $L = 4096$ | 25 GB | 26,843,545,600 bytes | that is 25 GiB |
# | 70B activations per token, layer | $10d$, itemised | 122,880 bytes | the items sum to $8d + 2\,d_{ff}$ |
# | 70B, the FFN's hidden per token | 44 KB | 57,344 bytes | 44 KB is $2 \times 8d/3$; the real $d_{ff}$ is $3.5d$ |

# %%
quoted7 = {"weights": static, "whole forward": fwd_token, "tokens/s": round(speed["all of the forward"])}
at2048 = count_block(cfg7, 2048).by_scope("forward", matmul_only=True, depth=2)
core2048 = 2048 * per_token_costs(cfg7, 2048)["core"]
proj2048, ffn2048 = at2048["block.attn"] - core2048, at2048["block.ffn"]
long = per_token_costs(cfg7, 32_768)
days35 = acc.training_days(claim, gpus, peak, 0.35)
itemised = 2 * d70 * 4 + 2 * d_ff70                         # x, norm output, Q and K, attention output; FFN hidden
print(f"Llama-2-7B per token: weight matmuls {static:,}, with L = 4096 {static + 4 * 4096 * d7:,}; forward "
      f"{fwd_token:,}, the blocks at L = 4096 {blocks_ctx:,}; {quoted7['tokens/s']:,} tokens/s, "
      f"{990e12 / blocks_ctx:,.0f} over the blocks alone")
print(f"crossover: an MHA block with an 8d/3 FFN at {crossovers(mha)['all'] / mha.d_model:g} d; llama2-7b at "
      f"{c7x['all'] / d7:.2f} d; llama2-70b at {c70x['all'] / d70:g} d; 4Ld / FFN at 32,768: "
      f"{long['core'] / long['ffn']:.2f}")
print(f"L = 2048: projections {proj2048:,.0f}, core {core2048:,.0f}, FFN {ffn2048:,}; FFN share "
      f"{ffn2048 / (proj2048 + core2048 + ffn2048):.1%}, without the core {ffn2048 / (proj2048 + ffn2048):.1%}")
print(f"70B: 6 weeks need {mfu_6_weeks:.1%} MFU, at 35% {days35:.1f} days; activations {mem['activations']:,} "
      f"bytes = {mem['activations'] / GiB:g} GiB; itemised 8d + 2 d_ff = {itemised:,} bytes per token per layer")
assert static == 404_750_336 and round(static / 1e6) != 480 and static + 4 * 4096 * d7 == 471_859_200 < 480e6
assert fc7.total("backward", matmul_only=True) == 2 * fc7.total("forward", matmul_only=True)
assert round(full.total("backward") / full.total("forward"), 4) == 1.9989
assert round(blocks_ctx / 1e9) == 15 and fwd_token == 15_361_638_400 and fwd_token - blocks_ctx == 2 * d7 * 32_000
assert round(990e12 / blocks_ctx / 1e3) == 66 and quoted7["tokens/s"] == 64_446
assert crossovers(mha)["all"] == 2 * mha.d_model and c7x["all"] / d7 == 2.03125 and c70x["all"] / d70 == 4.125
assert c70x["all"] == 33_792 and round(100 * (c70x["ffn"] / (c70x["proj"] + 4 * 32_768 * d70) - 1), 1) == 2.4
assert (crossovers(mha)["proj"] + crossovers(mha)["ffn"]) / mha.d_model**2 == 24
assert (c70x["proj"] + c70x["ffn"]) / d70**2 == 25.5
assert long["core"] == 4 * 32_768 * d7 == 536_870_912 and round(long["core"] / long["ffn"], 2) == 1.98
assert proj2048 == 4 * 2 * 2048 * 4096**2 == 274_877_906_944 and round(2 * 2 * 2048 * 4096**2 / 1e9) == 137
assert core2048 == 68_719_476_736 and ffn2048 == 554_050_781_184 and round(ffn2048 / 1e9) == 554
assert round(100 * ffn2048 / (proj2048 + core2048 + ffn2048), 1) == 61.7
assert round(100 * ffn2048 / (proj2048 + ffn2048), 1) == 66.8
assert round(100 * mfu_6_weeks, 1) == 16.4 and round(days35, 1) == 19.6
assert mem["activations"] == 26_843_545_600 == 25 * GiB and round(mem["activations"] / 1e9, 1) == 26.8
assert itemised == 122_880 != estimate == 81_920 and round(2 * 8 * d70 / 3) == 43_691 and 2 * d_ff70 == 57_344
assert d_ff70 == 3.5 * d70

# %% [markdown]
# ## Check yourself
#
# 1. Why does training cost about $6N$ FLOPs per token when a forward pass costs about $2N$?
#
#    <details><summary>Answer</summary>
#
#    In the forward pass each weight is used once per token, a multiply and an add. The backward of $Y = XW$ needs
#    $dX = dY\,W^\top$ and $dW = X^\top dY$, two matmuls of the same size, so it costs twice the forward: $2N + 4N$.
#    Counted on meta, the backward's matmuls are exactly twice the forward's.
#
#    </details>
#
# 2. What do the $2N$ and $6N$ rules leave out, and how much does it matter for Llama-2-7B at $L = 4096$?
#
#    <details><summary>Answer</summary>
#
#    The embedding is a lookup and costs nothing, though its parameters are in $N$; attention over the context
#    costs $4Ld$ per token in each layer's forward, which no parameter accounts for. The second is much larger
#    there: training counts 14.0 % more than $6N$.
#
#    </details>
#
# 3. Why does attention overtake the FFN at about 8,300 tokens in Llama-2-7B but only at about 33,800 in
#    Llama-2-70B?
#
#    <details><summary>Answer</summary>
#
#    The crossover is where the projections plus $4Ld$ reach the FFN's $6\,d\,d_{ff}$. Llama-2-70B's GQA shrinks the
#    projections to $4.5\,d^2$ per token and its FFN is wider, $3.5d$, so $4Ld$ must grow to $16.5\,d^2$: at
#    $L = 4.125\,d$, against $2.03\,d$ for Llama-2-7B.
#
#    </details>
#
# 4. What does MFU measure, and what MFU lets 1,000 H100s train a 70B model on 1.4 T tokens in six weeks?
#
#    <details><summary>Answer</summary>
#
#    The fraction of the GPUs' peak FLOP/s that the training achieves. The run needs $6ND = 5.88 \times 10^{23}$
#    FLOPs, and 1,000 GPUs at 990 TFLOP/s deliver that in six weeks at 16.4 % MFU.
#
#    </details>

# %% [markdown]
# ## Words from this lesson
#
# - **6N rule**: the estimate that training costs about 6 FLOPs per parameter per token, 2 in the forward pass and
#   4 in the backward (§3)
# - **compute-optimal**: said of a split between parameters and training tokens that reaches the lowest loss for a
#   fixed amount of compute, about 20 tokens per parameter (§6)
# - **MFU**: model FLOPs utilisation, the model's FLOPs per second during training divided by the hardware's
#   peak (§6)
# - **optimizer**: the rule that turns gradients into changes of the parameters, such as Adam (§7)
# - **mixed precision**: computing in a 2-byte float such as bf16 while the optimizer updates a float32 copy of
#   the weights (§7)
# - **training state**: what training holds for every parameter besides the activations: the weight, its
#   gradient, and the optimizer's float32 copy and moments, 16 bytes per parameter in mixed precision (§7)
# - **activation memory**: the bytes of the tensors the forward pass keeps for the backward, which grow with the
#   batch and the context (§7)

# %% [markdown]
# ## Exercises
#
# 1. `forward_flops_per_token`: `forward_flops_per_token(cfg, seq_len)` returns the forward matmul FLOPs per
#    token of the whole Llama-style model `cfg` reading a sequence of `seq_len` tokens, the way this engine
#    computes it (the full $L \times L$ square of scores). Count the blocks' weights, attention over the
#    context, and the LM head. The checker counts the model on the shape-only device. It names the usual slips:
#    leaving out the head, charging the embedding lookup as a matmul, giving $W_K$ and $W_V$ the full width
#    under GQA, or counting only one of the two $L$-dependent matmuls.
# 2. `mfu_needed`: `mfu_needed(n_params, n_tokens, n_gpus, peak_flops_per_gpu, days)` returns the utilisation
#    (a fraction) at which training `n_params` parameters on `n_tokens` tokens with $6ND$ FLOPs takes `days` days
#    on `n_gpus` GPUs (section 6). It is checked against `accounting.training_days`, including the six-week
#    claim for a 70B model.
#
# `python -m tinygrad_block exercise 13` writes `exercise_13.py` with the two functions to fill in;
# `python -m tinygrad_block check 13` checks them and says what is wrong.
