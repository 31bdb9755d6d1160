# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 03 — Counting a 70B model on a laptop
#
# How many parameters does Llama-2-70B have, how many FLOPs does one training token cost, and how much memory
# does training it take? The curriculum answers with formulas and round numbers. This lesson gets the exact
# numbers by running the model, without computing anything:
#
# 1. The **shape-only device** (`device="meta"`) builds the whole 70B model out of shapes alone.
# 2. **FLOPs are counted by running** forward and backward: every primitive declares its FLOP rule and
#    `count_flops` adds them up. Backward is counted from its own primitive calls, so "backward costs twice
#    the forward" is something we check, not something we assume.
# 3. Counts **per module** show where the compute goes.
# 4. **Whole-model training compute**: the 6N rule, Chinchilla's 20 tokens per parameter, days on a GPU cluster.
# 5. **Memory**: weights, gradients, Adam, the KV cache, and the activations kept for backward, measured.
# 6. A table of **the curriculum's figures that differ** from the exact values, and why.
#
# Run it: `python lessons/03_counting.py`. Every number stated below is asserted in `main()`.

# %%
from tinygrad_block import Generator, float16, int64, nn, ones_like, zeros
from tinygrad_block import accounting as acc
from tinygrad_block.measure import measured_activations
from tinygrad_block.counting import count_flops, count_saved_bytes
from tinygrad_block.curriculum import NOTES

GiB = 2**30

# %% [markdown]
# ## 1. A 70B model that takes no memory
#
# On the `meta` device a tensor has a shape and a dtype and nothing else. Building
# `nn.LM(nn.preset("llama2-70b"), ..., device="meta")` creates all 723 parameter tensors (9 in each of the
# 80 blocks, plus the embedding, the final norm and the LM head). In float32 they would take
# 275,906,592,768 bytes (about 276 GB); here they take none.
#
# Adding up their sizes gives **68,976,648,192** parameters, the published figure to the last digit
# (Llama-2-7B: **6,738,415,616**). Where they are:
#
# | part | parameters |
# |---|---|
# | 80 blocks of 855,654,400 | 68,452,352,000 |
# | embedding, 32,000 x 8,192 | 262,144,000 |
# | LM head (not tied to the embedding) | 262,144,000 |
# | final RMSNorm gain | 8,192 |
#
# A block holds $2d^2 + 2\,d\,n_{kv} d_{head} + 3\,d\,d_{ff} + 2d$. Llama-2-70B uses grouped-query
# attention: 8 KV heads of 128 serve 64 query heads, so $W_K$ and $W_V$ have 1,024 outputs instead of 8,192,
# and attention holds $2.25 d^2$ = 150,994,944 parameters against the FFN's $3\,d\,d_{ff}$ = 704,643,072.
# So attention has **17.6 %** of the block and the FFN **82.4 %** (for Llama-2-7B, which has one KV head per
# query head: 33.2 % and 66.8 %). The two norm gains (16,384) make up the rest.


# %%
def meta_lm(name: str) -> nn.LM:
    """The whole model, shapes only: its weights have shapes and a dtype, but no values."""
    return nn.LM(nn.preset(name), generator=Generator(0), device="meta")


def parameter_census(name: str) -> dict:
    """Count the parameters of a model built on meta, and those of its first block's parts."""
    model = meta_lm(name)
    block = model.layers[0]
    return {"tensors": len(model.parameters()), "total": model.num_parameters(),
            "float32_bytes": sum(p.nbytes for p in model.parameters()), "block": block.num_parameters(),
            "attn": block.attn.num_parameters(), "ffn": block.ffn.num_parameters(),
            "norms": block.norm1.num_parameters() + block.norm2.num_parameters(),
            "embedding": model.embed.num_parameters(), "lm_head": model.lm_head.num_parameters(),
            "final_norm": model.norm.num_parameters()}


# %% [markdown]
# ## 2. FLOPs, counted by running
#
# Every primitive carries its FLOP rule (a matmul $(M, K) @ (K, N)$ costs $2MNK$; an elementwise op 1 per
# element), and `count_flops` adds them up as the primitives run. We run one Llama-2-7B block forward and
# backward on `meta`, for a single token ($L = 1$) and for a full context ($L = 4096$).
#
# **Forward.** Per token, the matmuls cost $2 \times$ (the block's matmul weights) $+ \; 4 L d$. The block
# has 202,375,168 weights that multiply (its 202,383,360 parameters less the two norm gains), so
# **404,750,336** FLOPs per token come from the weights. The scores $q k^\top$ and the weighted sum of $V$
# cost $2 L d$ each per token: this engine computes the whole $L \times L$ square, and the causal mask zeroes
# half of it afterwards. So the count is 404,766,720 per token at $L = 1$ and 471,859,200 per token at
# $L = 4096$ (1,932,735,283,200 in all).
#
# **Backward.** The backward matmuls cost **exactly twice** the forward ones, at both lengths. The reason:
# $Y = XW$ needs $dX = dY\,W^\top$ and $dW = X^\top dY$, two matmuls the size of the forward one; for
# $q k^\top$ and the weighted sum of $V$ both inputs need a gradient too. That is where the **6N rule** comes
# from: $2N$ FLOPs forward plus $4N$ backward per token.
#
# **All ops or matmuls only.** Norms, RoPE, the mask, softmax, SiLU and the residual adds add 3,911,999,488
# FLOPs to the forward at $L = 4096$: 0.20 % of the total. Most of them act on the $32 \times L \times L$
# scores $T$: adding the causal mask is one add per score ($T$ = 536,870,912), and softmax is five operations
# per score, less one per row for each of its two reductions (row max, $s - \max$, exp, row sum, division:
# $5T - 2R$ = 2,684,092,416 with $R = 32 L$ rows). They barely count as arithmetic, but on a GPU each one is a
# trip through memory, so they still take real time.
#
# **Closed forms.** `accounting.block_forward_flops` and `block_backward_flops` work out the same numbers
# on paper, matmul-only and all ops; they equal the counts exactly (difference 0).


# %%
def count_block(name: str, L: int) -> dict:
    """Forward and backward FLOPs of one block on a (1, L, d_model) input, counted on meta."""
    cfg = nn.preset(name).with_(max_seq_len=max(L, 4096))
    block = nn.TransformerBlock(cfg, generator=Generator(0), device="meta")
    x = zeros(1, L, cfg.d_model, device="meta", requires_grad=True)          # (B, L, d_model)
    with count_flops() as fc:
        out = block(x)
        out.backward(ones_like(out))
    return {"fc": fc, "cfg": cfg, "fwd": fc.total("forward", matmul_only=True),
            "bwd": fc.total("backward", matmul_only=True), "fwd_all": fc.total("forward"),
            "bwd_all": fc.total("backward")}


def closed_form_differences(c: dict, L: int) -> list[int]:
    """Counted minus accounting's closed form, for forward/backward, matmul-only/all ops."""
    cfg = c["cfg"]
    return [c["fwd"] - acc.block_forward_flops(cfg, L), c["bwd"] - acc.block_backward_flops(cfg, L),
            c["fwd_all"] - acc.block_forward_flops(cfg, L, matmul_only=False),
            c["bwd_all"] - acc.block_backward_flops(cfg, L, matmul_only=False)]


# %% [markdown]
# ### The 6N rule on the whole model
#
# Count the whole Llama-2-7B model at $L = 4096$ and the training matmuls come to **46,084,915,200 FLOPs per
# token**. That is exactly $6 \times$ 6,607,077,376 (the weights that multiply: all the 2-d weights except
# the embedding, which is a table lookup and costs nothing) $+ \; 12 L d \, n_{layers}$ = 6,442,450,944 (the
# scores and the weighted sum of $V$, forward and backward). The rule $6N$ = 40,430,493,696 is **14.0 % low**
# here: it charges the embedding, which costs nothing, and leaves out attention over the context, which at
# $L = 4096$ costs far more.


# %%
def count_model(name: str, L: int) -> dict:
    """Forward and backward matmul FLOPs of the whole LM on ids (1, L), counted on meta."""
    model = meta_lm(name)
    with count_flops() as fc:
        logits = model(zeros(1, L, dtype=int64, device="meta"))             # (1, L, vocab_size)
        logits.backward(ones_like(logits))
    cfg = model.cfg
    multiplying = sum(p.size for p in model.parameters() if p.ndim == 2) - model.embed.num_parameters()
    return {"cfg": cfg, "N": model.num_parameters(), "multiplying": multiplying,
            "fwd": fc.total("forward", matmul_only=True), "bwd": fc.total("backward", matmul_only=True),
            "attention": 12 * L * cfg.d_model * cfg.n_layers}


# %% [markdown]
# ## 3. Where the compute goes: per module
#
# Every module pushes its name while it runs, so `fc.by_scope(depth=2)` splits the block's FLOPs into
# `block.attn` and `block.ffn`. For one token of Llama-2-7B, the FFN's matmuls (270,532,608) cost
# **2.02 times** those of attention's four projections (134,217,728): three $d \times d_{ff}$ matrices
# against four $d \times d$ ones, $3 d_{ff} / 4d$. This is 002's "the FFN is about 2x attention".
#
# Attention over the context grows with $L$, the FFN does not. At $L = 4096$ the scores and the weighted sum
# cost 274,877,906,944 forward FLOPs in the block, and the FFN is only 1.34 times the whole of attention. The
# two are equal when $8 d^2 + 4 L d = 6\, d\, d_{ff}$, at **L = 8,320**: counted at that length, `block.attn`
# and `block.ffn` come to 2,250,831,298,560 FLOPs each.


# %%
def module_table(fc) -> dict[str, tuple[int, int]]:
    """Matmul FLOPs of each scope in the block, (forward, backward); 'block.attn' alone is scores and weights @ V."""
    fwd = fc.by_scope("forward", matmul_only=True)
    bwd = fc.by_scope("backward", matmul_only=True)
    return {scope: (fwd[scope], bwd.get(scope, 0)) for scope in fwd}


# %% [markdown]
# ## 4. Training compute for the whole model
#
# Training on $D$ tokens costs about $6 N D$ FLOPs. Chinchilla's compute-optimal recipe is about 20 tokens
# per parameter, so $D = 20 N$ and $C = 120 N^2$. For Llama-2-70B that is 1,379,532,963,840 tokens (about
# 1.4 T) and about $5.71 \times 10^{23}$ FLOPs. Counting shows what $6N$ leaves out at $L = 4096$: the count is
# 444,491,366,400 matmul FLOPs per token, **7.4 % above** $6N$ = 413,859,889,152.
#
# Wall-clock days = $C$ / (GPUs x peak FLOP/s x utilisation (MFU) x 86,400 s). 002 checks the claim "a 70B
# model takes 6 weeks on 1,000 H100s" with $6 \times 70\text{e}9 \times 1.4\text{e}12 = 5.88 \times 10^{23}$
# FLOPs against 990 TFLOP/s per GPU. Its sum is right: at 45 % MFU, 6 weeks deliver $1.62 \times 10^{24}$
# FLOPs (002 rounds 45 % of 990 up to 450 TFLOP/s and gets 1.6e24), 2.7 times what is needed. Its conclusion
# is off: it says 6 weeks "works at MFU 35% or so", but at 35 % training takes only 19.6 days. Six weeks
# (42 days) need just **16.4 %** MFU, and at 45 % training takes 15.3 days.


# %%
def chinchilla_70b() -> dict:
    """002's sanity check, recomputed: 70B parameters, 1.4T tokens, 1,000 H100s at 990 TFLOP/s."""
    flops, gpus, peak, weeks6 = acc.training_flops(70e9, 1.4e12), 1000, 990e12, 42
    return {"flops": flops, "delivered_45": gpus * peak * 0.45 * weeks6 * 86400,
            "mfu_6_weeks": flops / (gpus * peak * weeks6 * 86400),
            "days_45": acc.training_days(flops, gpus, peak, 0.45),
            "days_35": acc.training_days(flops, gpus, peak, 0.35)}


# %% [markdown]
# ## 5. Memory
#
# **Training state.** With Adam in mixed precision, each parameter costs 16 bytes: the bf16 weight (2) and
# its gradient (2), plus an fp32 master copy and Adam's two moments (4 + 4 + 4). For Llama-2-70B that is
# 1,103,626,371,072 bytes, about 1.1 TB, before a single activation. No GPU holds it, so the state is sharded
# over many GPUs (ZeRO-3).
#
# **KV cache.** When generating, each layer keeps K and V for every past token: $2\, n_{layers} L\, n_{kv}
# d_{head}$ elements. For Llama-2-70B at $L = 4096$ in bf16, that is 1,342,177,280 bytes (1.25 GiB) per
# sequence, or 320 KiB per token. With one KV head per query head (64 instead of 8) it would be 10 GiB:
# GQA cuts the cache by $n_{heads} / n_{kv} = 8$.
#
# **Activations.** 002 estimates what training keeps for backward at about $10 d$ bytes per token per layer
# (bf16, with FlashAttention and a fused SwiGLU): 81,920 bytes for $d = 8192$, so 25 GiB for 80 layers at
# $L = 4096$. `count_saved_bytes` measures what this engine actually keeps. For one Llama-2-70B block at
# $L = 4096$ in float16 it is 6,929,596,416 bytes (6.5 GiB): about **21 times** the estimate, or about 516 GiB
# for 80 layers. The difference comes from three places:
#
# - **Attention keeps two $H \times L \times L$ tensors**: the exponentials (the softmax division needs them)
#   and the probabilities (the weighted sum of $V$ needs them). $2 \times 64 \times 4096^2 \times 2$ bytes
#   = 4 GiB, 62 % of the block. FlashAttention keeps neither: it recomputes them in backward from q, k, v
#   and one statistic per row.
# - **SwiGLU keeps eight $L \times d_{ff}$ tensors** (the gate and up outputs, the stable sigmoid's pieces,
#   SiLU, their product): 1,879,048,192 bytes (1.75 GiB). A fused kernel keeps one or two.
# - **The rest** are the $d$-wide tensors the estimate is about (norm inputs and outputs, q, k, v, the
#   attention output, the per-row statistics): 755,580,928 bytes. The norms keep some of theirs in float32:
#   float16 norms compute their statistics in float32, since $x^2$ overflows float16 once $|x| > 256$.
#
# The block's input does not count here, because it was created outside the block. Inside the whole model,
# `layers.0` also keeps its input (64 MiB more), which is why `python -m tinygrad_block memory --preset
# llama2-70b --seq-len 4096` reports about 521 GiB.


# %%
def kv_caches(name: str, L: int) -> tuple[int, int]:
    """KV-cache bytes in bf16 with the model's GQA, and with one KV head per query head."""
    cfg = nn.preset(name)
    return acc.kv_cache_bytes(cfg, L), acc.kv_cache_bytes(cfg.with_(n_kv_heads=cfg.n_heads), L)


def saved_by_block(name: str, L: int) -> dict[str, int]:
    """Activation bytes one block keeps for backward, float16 on meta, per module scope."""
    cfg = nn.preset(name)
    block = nn.TransformerBlock(cfg, generator=Generator(0), dtype=float16, device="meta")
    x = zeros(1, L, cfg.d_model, dtype=float16, device="meta", requires_grad=True)   # (B, L, d_model)
    with count_saved_bytes() as saved:
        block(x)
    return dict(saved.bytes)


# %% [markdown]
# ## 6. Where the curriculum's figures differ
#
# `tinygrad_block.curriculum.NOTES` lists every figure in the curriculum's documents that differs from the
# exact value, with the reason. The command line prints the same notes under `params`, `flops` and `memory`.
# Several came up above: 004's "about 822 M" per 70B block (exactly 855,654,400), 000's "about 480 M" static
# FLOPs per token of a Llama-2-7B block (404,750,336), and 002's "MFU ~35%" for six weeks (16.4 %).


# %%
def note_rows() -> list[tuple[str, str, str, str]]:
    """(what, the document's figure, the exact value, why) for every note."""
    return [(f"{n.what} ({n.preset})", n.document, n.exact(), n.why) for n in NOTES]


def find_note(rows, what: str, preset: str) -> tuple:
    return next(r for r in rows if r[0] == f"{what} ({preset})")


# %%
def main():
    # 1. the shape-only device
    p70, p7 = parameter_census("llama2-70b"), parameter_census("llama2-7b")
    assert p70["tensors"] == 723 == 80 * 9 + 3
    assert p70["float32_bytes"] == 275_906_592_768 == 4 * p70["total"] and round(p70["float32_bytes"] / 1e9) == 276
    assert p70["total"] == 68_976_648_192 == acc.total_params(nn.preset("llama2-70b"))
    assert p7["total"] == 6_738_415_616 == acc.total_params(nn.preset("llama2-7b"))
    assert p70["block"] == 855_654_400 and 80 * p70["block"] == 68_452_352_000
    assert p70["embedding"] == p70["lm_head"] == 262_144_000 and p70["final_norm"] == 8_192
    assert 80 * p70["block"] + p70["embedding"] + p70["lm_head"] + p70["final_norm"] == p70["total"]
    assert p70["attn"] == 150_994_944 == 2.25 * 8192**2 and p70["ffn"] == 704_643_072 and p70["norms"] == 16_384
    c70 = nn.preset("llama2-70b")
    assert (c70.n_kv_heads, c70.d_head, c70.n_heads, c70.d_model) == (8, 128, 64, 8192)
    assert c70.n_kv_heads * c70.d_head == 1_024 and p70["embedding"] == 32_000 * 8_192
    shares70 = (p70["attn"] / p70["block"], p70["ffn"] / p70["block"])
    shares7 = (p7["attn"] / p7["block"], p7["ffn"] / p7["block"])
    assert [round(100 * s, 1) for s in shares70 + shares7] == [17.6, 82.4, 33.2, 66.8]
    assert shares70 == tuple(acc.attention_ffn_shares(nn.preset("llama2-70b")))
    print(f"Llama-2-70B on meta: {p70['tensors']} parameter tensors, {p70['total']:,} parameters "
          f"({p70['float32_bytes'] / 1e9:.0f} GB in float32, none allocated); Llama-2-7B: {p7['total']:,}")
    print(f"  per block {p70['block']:,} = attention {p70['attn']:,} ({shares70[0]:.1%}) + FFN {p70['ffn']:,} "
          f"({shares70[1]:.1%}) + norms {p70['norms']:,}; Llama-2-7B: {shares7[0]:.1%} / {shares7[1]:.1%}")

    # 2. FLOPs by running one Llama-2-7B block
    one, full = count_block("llama2-7b", 1), count_block("llama2-7b", 4096)
    d, block7 = 4096, acc.params_per_block(nn.preset("llama2-7b"))
    assert block7 == 202_383_360 and block7 - 2 * d == 202_375_168 and 2 * (block7 - 2 * d) == 404_750_336
    assert one["fwd"] == 404_750_336 + 4 * 1 * d == 404_766_720
    assert full["fwd"] == 4096 * (404_750_336 + 4 * 4096 * d) == 4096 * 471_859_200 == 1_932_735_283_200
    for c, L in ((one, 1), (full, 4096)):
        assert c["fwd"] / L == acc.flops_per_token(c["cfg"], L)["total"]
        assert c["bwd"] == 2 * c["fwd"]
        assert closed_form_differences(c, L) == [0, 0, 0, 0]
    other = full["fwd_all"] - full["fwd"]
    assert other == 3_911_999_488 and round(100 * other / full["fwd_all"], 2) == 0.20
    steps = full["fc"].by_step("forward", scope="block.attn")
    T, R = 32 * 4096 * 4096, 32 * 4096
    assert steps["mask"] == T == 536_870_912 and steps["softmax"] == 5 * T - 2 * R == 2_684_092_416
    for L, c in ((1, one), (4096, full)):
        print(f"Llama-2-7B block, L = {L}: forward matmuls {c['fwd']:,} ({c['fwd'] // L:,} per token), "
              f"backward {c['bwd']:,} = {c['bwd'] / c['fwd']:g} x forward; all ops {c['fwd_all']:,} / {c['bwd_all']:,}")
    print(f"  non-matmul forward FLOPs at L = 4096: {other:,} ({other / full['fwd_all']:.2%}), of which the mask "
          f"{steps['mask']:,} and softmax {steps['softmax']:,}; closed forms minus counts: "
          f"{closed_form_differences(full, 4096)}")

    # the 6N rule on the whole model
    m7 = count_model("llama2-7b", 4096)
    per_token = (m7["fwd"] + m7["bwd"]) // 4096
    assert m7["bwd"] == 2 * m7["fwd"] and per_token * 4096 == m7["fwd"] + m7["bwd"]
    assert m7["multiplying"] == 6_607_077_376 and m7["attention"] == 6_442_450_944
    assert per_token == 46_084_915_200 == 6 * m7["multiplying"] + m7["attention"]
    assert 6 * m7["N"] == 40_430_493_696 and round(100 * (per_token / (6 * m7["N"]) - 1), 1) == 14.0
    print(f"Llama-2-7B, whole model, L = 4096: {per_token:,} training matmul FLOPs per token = 6 x "
          f"{m7['multiplying']:,} + {m7['attention']:,}; 6N = {6 * m7['N']:,} ({per_token / (6 * m7['N']) - 1:+.1%})")

    # 3. per module
    one_scopes = one["fc"].by_scope("forward", matmul_only=True, depth=2)
    projections = one_scopes["block.attn"] - 4 * 1 * d
    assert projections == 134_217_728 and one_scopes["block.ffn"] == 270_532_608
    ratio = one_scopes["block.ffn"] / projections
    assert ratio == 3 * 11008 / (4 * d) and round(ratio, 2) == 2.02
    table = module_table(full["fc"])
    full_scopes = full["fc"].by_scope("forward", matmul_only=True, depth=2)
    assert table["block.attn"][0] == 274_877_906_944 == 4 * 4096 * 4096 * d
    assert round(full_scopes["block.ffn"] / full_scopes["block.attn"], 2) == 1.34
    assert (6 * d * 11008 - 8 * d * d) // (4 * d) == 8_320
    even = count_block("llama2-7b", 8320)["fc"].by_scope("forward", matmul_only=True, depth=2)
    assert even["block.attn"] == even["block.ffn"] == 2_250_831_298_560
    print("Llama-2-7B block, L = 4096, matmul FLOPs per module (block.attn alone: scores and weights @ V):")
    for scope, (f, b) in table.items():
        print(f"  {scope:22} forward {f:>17,}  backward {b:>17,}")
    print(f"  L = 1: FFN / attention projections = {one_scopes['block.ffn'] / projections:.2f}; L = 4096: FFN / "
          f"attention = {full_scopes['block.ffn'] / full_scopes['block.attn']:.2f}; equal at L = 8,320 "
          f"({even['block.attn']:,} each)")

    # 4. training compute
    m70 = count_model("llama2-70b", 4096)
    N = m70["N"]
    D, C = acc.chinchilla_tokens(N), acc.training_flops(N, acc.chinchilla_tokens(N))
    assert D == 1_379_532_963_840 and round(D / 1e12, 1) == 1.4 and C == 120 * N**2 and round(C / 1e23, 2) == 5.71
    per_token70 = (m70["fwd"] + m70["bwd"]) // 4096
    assert per_token70 == 444_491_366_400 and 6 * N == 413_859_889_152
    assert round(100 * (per_token70 / (6 * N) - 1), 1) == 7.4
    ch = chinchilla_70b()
    assert round(1000 * 450e12 * 42 * 86400 / 1e24, 1) == 1.6
    assert ch["flops"] == 588 * 10**21 and round(ch["delivered_45"] / 1e24, 2) == 1.62
    assert round(ch["delivered_45"] / ch["flops"], 1) == 2.7 and round(ch["days_35"], 1) == 19.6
    assert round(100 * ch["mfu_6_weeks"], 1) == 16.4 and round(ch["days_45"], 1) == 15.3
    print(f"Llama-2-70B: Chinchilla D = 20 N = {D:,} tokens, C = 6 N D = {C:.3g} FLOPs; counted at L = 4096: "
          f"{per_token70:,} per token vs 6N = {6 * N:,} ({per_token70 / (6 * N) - 1:+.1%})")
    print(f"  002's check, 6 x 70e9 x 1.4e12 = {ch['flops']:.3g} FLOPs on 1,000 H100s: 6 weeks need "
          f"{ch['mfu_6_weeks']:.1%} MFU; at 45% {ch['days_45']:.1f} days, at 35% {ch['days_35']:.1f} days")

    # 5. memory
    cfg70 = nn.preset("llama2-70b")
    mem = acc.training_memory(cfg70, 4096)
    state = mem["parameters"] + mem["gradients"] + mem["optimizer"]
    assert state == 16 * N == 1_103_626_371_072 and round(state / 1e12, 1) == 1.1
    kv, kv_mha = kv_caches("llama2-70b", 4096)
    assert kv == 2 * 80 * 4096 * 8 * 128 * 2 == 1_342_177_280 and kv / GiB == 1.25 and kv // 4096 == 320 * 1024
    assert kv_mha == 10 * GiB and kv_mha == 8 * kv and cfg70.n_heads // cfg70.n_kv_heads == 8
    estimate = acc.activation_bytes_per_token_per_layer(cfg70)
    assert estimate == 10 * 8192 == 81_920 and mem["activations"] == 80 * 4096 * estimate == 25 * GiB
    saved = saved_by_block("llama2-70b", 4096)
    measured = sum(saved.values())
    probabilities = 2 * 64 * 4096**2 * 2
    swiglu = saved["block.ffn"] + saved["block.ffn.down_proj"]
    assert measured == 6_929_596_416 and round(measured / GiB, 1) == 6.5
    assert abs(measured / (4096 * estimate) - 21) < 0.5 and abs(80 * measured / GiB - 516) < 1
    assert saved["block.attn"] - probabilities < 100 * 2**20 and probabilities == 4 * GiB
    assert round(100 * probabilities / measured) == 62
    assert swiglu == 8 * 4096 * 28672 * 2 == 1_879_048_192 and swiglu / GiB == 1.75
    assert measured - probabilities - swiglu == 755_580_928
    in_model = measured_activations(cfg70, 1, 4096, "bf16")            # what the `memory` command prints
    assert in_model["per_layer"] - measured == 4096 * 8192 * 2 == 64 * 2**20 and round(in_model["layers"] / GiB) == 521
    print(f"Llama-2-70B memory, bf16, L = 4096: training state {state:,} bytes (16 per parameter); "
          f"KV cache {kv / GiB:g} GiB per sequence (MHA: {kv_mha / GiB:g} GiB)")
    print(f"  activations per layer: estimate {4096 * estimate:,} bytes (10 d per token), measured {measured:,} "
          f"({measured / (4096 * estimate):.1f} x): L x L tensors {probabilities:,}, SwiGLU {swiglu:,}, "
          f"the rest {measured - probabilities - swiglu:,}; 80 layers: {80 * measured / GiB:.0f} GiB")
    print(f"  inside the model, layers.0 also keeps its input: {in_model['per_layer']:,} per layer, "
          f"{in_model['layers'] / GiB:.0f} GiB for 80 layers")
    print("  saved by scope: " + ", ".join(f"{k} {v:,}" for k, v in saved.items()))

    # 6. the curriculum's figures
    rows = note_rows()
    assert all(doc and exact and doc != exact for _, doc, exact, _ in rows)
    assert find_note(rows, "parameters per block", "llama2-70b")[2] == f"{p70['block']:,}" == "855,654,400"
    assert find_note(rows, "static matmul FLOPs per token of a block", "llama2-7b")[2] == "404,750,336"
    assert "822 M" in find_note(rows, "parameters per block", "llama2-70b")[1]
    assert "480 M" in find_note(rows, "static matmul FLOPs per token of a block", "llama2-7b")[1]
    assert "35%" in find_note(rows, "Chinchilla training time on 1,000 H100s", "llama2-70b")[1]
    assert f"{ch['mfu_6_weeks']:.1%}" in find_note(rows, "Chinchilla training time on 1,000 H100s", "llama2-70b")[2]
    print("Where the curriculum's figures differ (tinygrad_block.curriculum.NOTES):")
    for what, document, exact, why in rows:
        print(f"  {what}\n    document: {document}\n    exact:    {exact}\n    why:      {why}")


if __name__ == "__main__":
    main()
