# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 07 — Positions and sharing
#
# The scores of lesson 06 do not depend on where the tokens stand: $q_i \cdot k_j$ is the same number whether
# token $j$ comes right before token $i$ or a hundred tokens earlier. Only the causal mask knows about order,
# and all it says is which keys are allowed. This lesson adds positions the way Llama does, by rotating queries
# and keys (RoPE). Then it
# shares keys and values between query heads (GQA, MQA), which is how large models keep the memory of a long
# conversation affordable.
#
# **What you will learn**
# - RoPE as rotations of pairs of dimensions, one frequency per pair, drawn as a clock with many hands;
# - why a rotated score depends only on the distance $n - m$ between two tokens, and why that makes
#   `block(x, offset=37)` equal `block(x)`;
# - what the base θ sets: wavelengths from $2\pi$ to $2\pi\theta^{1 - 2/d_{head}}$, and why Llama 3 raised θ
#   from 10000 to 500000;
# - why values are not rotated: shown by rotating them and watching the output depend on absolute position;
# - grouped-query and multi-query attention: which query head reads which key/value head, and the
#   parameters and KV-cache bytes they save, computed for Llama-sized models.
#
# Run it as a script, `python -m tinygrad_block lesson 07`, or as a notebook,
# `python -m tinygrad_block lesson 07 --notebook --execute` (it lands beside this file).

# %%
import math

import numpy as np

import tinygrad_block as tb
from tinygrad_block import accounting as acc
from tinygrad_block import nn
from tinygrad_block.measure import meta_ids, meta_lm
from tinygrad_block.pictures import figure

from course import out_dir, show

OUT = out_dir(7)          # lessons/out/07/: this lesson's pictures
GiB, MiB, KiB = 2**30, 2**20, 2**10

# %% [markdown]
# ## 1. RoPE turns pairs of dimensions
#
# Rotary position embedding (RoPE) leaves the token's vector alone and instead **rotates** each query and key
# by an angle that grows with its position. A head vector of $d_{head}$ numbers is cut into $d_{head}/2$ pairs,
# and pair $i$ of a token at position $p$ is turned by the angle $p\,\omega_i$, where
#
# $$\omega_i = \theta^{-2i/d_{head}}, \qquad i = 0, \dots, d_{head}/2 - 1,$$
#
# $$\begin{pmatrix} x'_a \\ x'_b \end{pmatrix} = \begin{pmatrix} \cos p\omega_i & -\sin p\omega_i \\
# \sin p\omega_i & \cos p\omega_i \end{pmatrix} \begin{pmatrix} x_a \\ x_b \end{pmatrix}.$$
#
# Think of a clock with $d_{head}/2$ hands. Pair 0 turns 1 radian per token (a full turn every $2\pi \approx 6.3$
# tokens); each later pair turns more slowly, down to $\theta^{-(d_{head}-2)/d_{head}}$ radians per token for
# the last one. θ (`rope_theta`, 10000 by default) sets how slow the slowest hands are.
#
# **Which dimensions form a pair.** The library pairs dimension $i$ with $i + d_{head}/2$, the first half of the
# head with the second (the "half-split" layout of Hugging Face's Llama; `nn.apply_rope` computes
# $(x_1\cos - x_2\sin,\; x_2\cos + x_1\sin)$ on the two halves). The RoPE paper and Meta's original Llama code
# pair *adjacent* dimensions $(2i, 2i+1)$. Both are the same rotation up to a fixed reordering of the head's
# dimensions, and converting a checkpoint from one layout to the other reorders the rows of $W_Q$ and $W_K$ to
# match. What matters is that the code and the weights use the same layout.
#
# A rotation keeps lengths: $\lVert \mathrm{RoPE}(x) \rVert = \lVert x \rVert$ at every position. Below, for
# the tiny preset's $d_{head} = 16$, `nn.apply_rope` agrees with the 2 × 2 rotation matrices written out in
# numpy. The picture shows two hands: pair 0 turning 1 radian per token, and pair 1 turning 0.316 radian per
# token (drawn shorter, as a rotation keeps any length). Beside it, $\cos(p\,\omega_i)$ for pairs 0 to 3,
# with wavelengths 6.3, 19.9, 62.8 and 198.7 tokens.

# %%
D_HEAD, THETA, P = 16, 10000.0, 201
cos, sin = nn.rope_tables(P, D_HEAD, THETA, tb.float64, "cpu")           # (P, d_head), each half repeated
x = tb.randn(1, 1, P, D_HEAD, generator=tb.Generator(0), dtype=tb.float64)   # (B, H, L, d_head)
rotated = nn.apply_rope(x, cos, sin).numpy()[0, 0]                      # (P, 16)

half = D_HEAD // 2
omega = THETA ** (-2 * np.arange(half) / D_HEAD)                         # (8,): radians per token of each pair
angle = np.arange(P)[:, None] * omega                                    # (P, 8)
xa, xb = x.numpy()[0, 0, :, :half], x.numpy()[0, 0, :, half:]            # pair i = (x_i, x_{i+8})
by_matrix = np.concatenate([np.cos(angle) * xa - np.sin(angle) * xb, np.sin(angle) * xa + np.cos(angle) * xb], -1)
wavelengths = 2 * np.pi / omega
print(f"apply_rope vs the 2 x 2 rotations in numpy: max difference {np.abs(rotated - by_matrix).max():.1e}")
print(f"lengths before and after, largest difference: "
      f"{np.abs(np.linalg.norm(rotated, axis=-1) - np.linalg.norm(x.numpy()[0, 0], axis=-1)).max():.1e}")
print("radians per token, pairs 0..7:", np.array2string(omega, precision=5))
print("wavelengths in tokens, pairs 0..3:", np.array2string(wavelengths[:4], precision=1))
assert np.abs(rotated - by_matrix).max() < 1e-13
assert np.abs(np.linalg.norm(rotated, axis=-1) - np.linalg.norm(x.numpy()[0, 0], axis=-1)).max() < 1e-13
assert nn.BlockConfig(16, 1, 1, 16).rope_theta == THETA       # the default base
assert omega[0] == 1.0 and round(omega[1], 3) == 0.316 and abs(omega[-1] - THETA ** (-(D_HEAD - 2) / D_HEAD)) < 1e-18
assert wavelengths[:4].round(1).tolist() == [6.3, 19.9, 62.8, 198.7]

unit = tb.tensor(np.eye(D_HEAD)[[0, 1]] * [[1.0], [0.6]], dtype=tb.float64)      # e_0, and 0.6 e_1: a shorter hand
hands = nn.apply_rope(unit.reshape(2, 1, 1, D_HEAD).expand(2, 1, P, D_HEAD), cos, sin).numpy()[:, 0]   # (2, P, 16)
fig = figure(12, 4.6)
clock, waves = fig.subplots(1, 2, width_ratios=[1, 1.6])
t = np.linspace(0, 2 * np.pi, 200)
for pair, marker, color, radius in ((0, "o", "C0", 1.0), (1, "s", "C1", 0.6)):
    px, py = hands[pair, :8, pair], hands[pair, :8, pair + half]         # positions 0..7
    clock.plot(radius * np.cos(t), radius * np.sin(t), color="0.85", lw=1)
    clock.plot([0, px[7]], [0, py[7]], color=color, lw=2)               # the hand at position 7
    clock.plot(px, py, marker, color=color, label=f"pair {pair}: {omega[pair]:.3g} rad/token")
    for p in range(8):
        r = radius + (0.13 if pair == 0 else -0.14)
        clock.annotate(str(p), (r * px[p] / radius, r * py[p] / radius), color=color, ha="center", va="center",
                       fontsize=9)
clock.set(aspect="equal", xlim=(-1.3, 1.3), ylim=(-1.3, 1.3), xlabel="first number of the pair",
          ylabel="second number of the pair", title="Two pairs turned at positions 0..7\n(lines: position 7)")
clock.legend(loc="lower left", fontsize=8)
fine = np.linspace(0, P - 1, 4000)                 # the cosines of the table above, drawn between positions too
for i in range(4):
    waves.plot(fine, np.cos(fine * omega[i]), color=f"C{i}", lw=0.8 if i == 0 else 1.6,
               label=f"pair {i}: wavelength {wavelengths[i]:.1f} tokens")
waves.set(xlabel="position p (tokens)", ylabel=r"$\cos(p\,\omega_i)$", xlim=(0, P - 1), ylim=(-1.1, 1.6),
          title=r"Each pair turns at its own rate, $\omega_i = \theta^{-2i/d_{head}}$ ($d_{head}$ = 16)")
waves.legend(loc="upper right", ncols=2, fontsize=8)
show(fig, OUT / "rope_rotations.png")
assert np.abs(hands[0, :, 0] - np.cos(angle[:, 0])).max() < 1e-13
assert np.abs(hands[1, :, 1 + half] - 0.6 * np.sin(angle[:, 1])).max() < 1e-13

# %% [markdown]
# ## 2. Only the distance counts
#
# Why rotate? Because a score between a rotated query and a rotated key depends only on how far apart they are.
# Write $R_p$ for the rotation at position $p$ (all the pairs at once). Rotations compose by adding angles and
# are undone by their transpose, $R_m^\top R_n = R_{n-m}$, so
#
# $$\mathrm{RoPE}_m(q) \cdot \mathrm{RoPE}_n(k) = (R_m q)^\top (R_n k) = q^\top R_{n-m}\, k .$$
#
# The absolute positions $m$ and $n$ are gone; only $n - m$ remains. Below, one query and one key are placed at
# every pair of positions $0 \le m, n < 64$. The table of their scores is constant along every diagonal (to
# $10^{-13}$): moving both tokens along by the same amount changes nothing.

# %%
q1, k1 = (tb.randn(1, 1, 1, D_HEAD, generator=tb.Generator(s), dtype=tb.float64).expand(1, 1, 64, D_HEAD)
          for s in (1, 2))
qr, kr = nn.apply_rope(q1, cos[:64], sin[:64]), nn.apply_rope(k1, cos[:64], sin[:64])   # (1, 1, 64, 16)
S = (qr @ kr.mT).numpy()[0, 0]                                           # (64, 64): S[m, n]
spread = max(np.ptp(np.diagonal(S, offset)) for offset in range(-63, 64))
print(f"score(m, n) for 0 <= m, n < 64: largest spread along a diagonal {spread:.1e}; "
      f"score(3, 1) = {S[3, 1]:.6f}, score(40, 38) = {S[40, 38]:.6f}, score(3, 0) = {S[3, 0]:.6f}")
assert spread < 1e-13 and abs(S[3, 1] - S[40, 38]) < 1e-13 and abs(S[3, 1] - S[3, 0]) > 1e-3

fig = figure(5.6, 4.6)
ax = fig.add_subplot()
image = ax.imshow(S, cmap="RdBu_r", vmin=-np.abs(S).max(), vmax=np.abs(S).max())
ax.set(xlabel="key position n", ylabel="query position m",
       title="RoPE score of one query and one key\nat every pair of positions: constant along diagonals")
fig.colorbar(image, ax=ax, label=r"score $R_m q \cdot R_n k$")
show(fig, OUT / "rope_relative_scores.png")

# %% [markdown]
# The same holds inside the block. `nn.TransformerBlock` is the whole block: its two norms, attention and the
# feed-forward network, which lesson 09 wires together. Start the sequence at position 37 instead of 0 (`offset=37`,
# as when a model continues a text it has already read). The rotated queries change completely, yet every score
# stays the same to within $10^{-12}$. Values are not rotated, so the whole block's output does not move either:
# `block(x, offset=37)` equals `block(x)` to within $10^{-12}$. A model with RoPE never sees absolute positions at
# all; it sees how far back each key is.

# %%
CFG = nn.preset("tiny")
B, L = 2, 8
g = tb.Generator(0)
block = nn.TransformerBlock(CFG, generator=g, dtype=tb.float64)
x = tb.randn(B, L, CFG.d_model, generator=g, dtype=tb.float64)


def rotated_qk(attn: nn.Attention, a: tb.Tensor, offset: int = 0):
    """The rotated queries (B, H, L, d_head) and keys (B, H_kv, L, d_head) of attn at positions offset.."""
    Bn, Ln, _ = a.shape
    q = attn.q_proj(a).reshape(Bn, Ln, CFG.n_heads, CFG.d_head).transpose(1, 2)        # (B, H, L, d_head)
    k = attn.k_proj(a).reshape(Bn, Ln, CFG.n_kv_heads, CFG.d_head).transpose(1, 2)     # (B, H_kv, L, d_head)
    c, s = attn.rope_cos[offset:offset + Ln], attn.rope_sin[offset:offset + Ln]       # (L, d_head)
    return nn.apply_rope(q, c, s), nn.apply_rope(k, c, s)


def scores(q: tb.Tensor, k: tb.Tensor) -> np.ndarray:
    """q k^T / sqrt(d_head) with each KV head repeated for its query heads: (B, H, L, L)."""
    return ((q / math.sqrt(CFG.d_head)) @ nn.repeat_kv(k, CFG.n_heads // CFG.n_kv_heads).mT).numpy()


a = block.norm1(x)
(q0, k0), (q37, k37) = rotated_qk(block.attn, a), rotated_qk(block.attn, a, offset=37)
q_moved = np.abs(q37.numpy() - q0.numpy()).max()
scores_moved = np.abs(scores(q37, k37) - scores(q0, k0)).max()
block_moved = np.abs(block(x, offset=37).numpy() - block(x).numpy()).max()
print(f"positions shifted by 37: the rotated queries move by up to {q_moved:.2f}, the scores by {scores_moved:.0e}, "
      f"the block's output by {block_moved:.0e}")
assert CFG.rope_theta == 10000.0 and q_moved > 0.5 and scores_moved < 1e-12 and block_moved < 1e-12

# %% [markdown]
# ## 3. θ = 10000 or 500000
#
# Pair $i$ comes back to where it started every $\lambda_i = 2\pi/\omega_i = 2\pi\,\theta^{2i/d_{head}}$ tokens,
# its **wavelength**. The fastest pair always has $\lambda_0 = 2\pi$. The slowest has
# $\lambda = 2\pi\,\theta^{1 - 2/d_{head}}$. For Llama's $d_{head} = 128$ that is 54,410 tokens with
# θ = 10000 (Llama 2), and 2,559,196 tokens with θ = 500000 (Llama 3).
#
# A pair whose wavelength is shorter than the distances the model must judge wraps around: on its own it
# cannot tell a key 10 tokens back from one $10 + \lambda_i$ back. The fast pairs give fine detail, and the
# slow pairs keep long distances apart. A model's **context** is the most tokens it reads at once. With
# θ = 10000 and Llama 2's 4,096-token context, 46 of the 64 pairs
# wrap at least once, and the slowest pair turns 0.47 radians from one end of the context to the other.
# Llama 3 doubled the context to 8,192 and raised θ to 500000. Now only 35 pairs wrap, and the slowest turns
# 0.020 radians over the whole context. Every pair except the first turns more slowly, so more of the head is
# left for long distances. The larger base was chosen with longer contexts in mind. Stretch θ = 10000 to
# 131,072 tokens and all 64 pairs wrap (the slowest turns 15.1 radians, 2.4 times round); with 500000 only 49
# do.
#
# The radians per token below are read back from the library's own tables (the angle at position 1, from
# `rope_tables`) and agree with the formula. In the library's presets, θ is 500000 for the Llama 3 models and
# 10000 for all the others.

# %%
D128 = 128


def table_omegas(theta: float) -> np.ndarray:
    """Radians per token of each pair, read from the library's RoPE table: the angle at position 1."""
    c, s = nn.rope_tables(2, D128, theta, tb.float64, "cpu")
    return np.arctan2(s.numpy()[1, :D128 // 2], c.numpy()[1, :D128 // 2])


rows = {}
for theta, context in ((10000.0, 4096), (500000.0, 8192), (10000.0, 131072), (500000.0, 131072)):
    om = table_omegas(theta)
    lam = 2 * np.pi / om
    rows[theta, context] = {"lam": lam, "wrap": int((lam <= context).sum()), "slowest": context * om[-1]}
    print(f"theta {theta:>6.0f}, context {context:>7,}: slowest wavelength {lam[-1]:>11,.0f} tokens; "
          f"{rows[theta, context]['wrap']:>2} of 64 pairs wrap; the slowest pair turns "
          f"{rows[theta, context]['slowest']:.3f} rad")
    closed = 2 * np.pi * theta ** (2 * np.arange(64) / D128)
    assert np.abs(lam / closed - 1).max() < 1e-12
lam10k, lam500k = rows[10000.0, 4096]["lam"], rows[500000.0, 8192]["lam"]
assert round(lam10k[-1]) == round(2 * math.pi * 10000 ** (1 - 2 / D128)) == 54_410
assert round(lam500k[-1]) == round(2 * math.pi * 500000 ** (1 - 2 / D128)) == 2_559_196
assert abs(lam10k[0] - 2 * math.pi) < 1e-12 and abs(lam500k[0] - 2 * math.pi) < 1e-12
assert rows[10000.0, 4096]["wrap"] == 46 and rows[500000.0, 8192]["wrap"] == 35
assert round(rows[10000.0, 4096]["slowest"], 2) == 0.47 and round(rows[500000.0, 8192]["slowest"], 3) == 0.020
assert rows[10000.0, 131072]["wrap"] == 64 and round(rows[10000.0, 131072]["slowest"], 1) == 15.1
assert round(rows[10000.0, 131072]["slowest"] / (2 * math.pi), 1) == 2.4 and rows[500000.0, 131072]["wrap"] == 49
assert (lam500k[1:] > lam10k[1:]).all()
thetas = {name: cfg.rope_theta for name, cfg in nn.PRESETS.items() if cfg.rope}
print("rope_theta in the presets:", thetas)
assert all(t == (500000.0 if name.startswith("llama3") else 10000.0) for name, t in thetas.items())
assert nn.preset("llama3-8b").d_head == nn.preset("llama2-7b").d_head == D128
assert (nn.preset("llama2-7b").max_seq_len, nn.preset("llama3-8b").max_seq_len) == (4096, 8192)

fig = figure(8, 4.6)
ax = fig.add_subplot()
pairs = np.arange(64)
ax.plot(pairs, lam10k, "o", ms=3.5, label="θ = 10000 (Llama 2)")
ax.plot(pairs, lam500k, "s", ms=3.5, label="θ = 500000 (Llama 3)")
ax.axhline(4096, color="C0", ls=":", lw=1.2, label="Llama 2 context, 4,096 tokens")
ax.axhline(8192, color="C1", ls="--", lw=1.2, label="Llama 3 context, 8,192 tokens")
ax.set(yscale="log", xlabel="pair i (of the 64 in a 128-wide head)", ylabel="wavelength (tokens)",
       title="RoPE wavelength of each pair: $2\\pi\\,\\theta^{2i/128}$")
ax.legend(loc="upper left")
ax.text(63, 30, "a pair below a context line turns\nat least once within that context", ha="right", va="bottom",
        fontsize=9, color="0.3")
show(fig, OUT / "rope_wavelengths.png")

# %% [markdown]
# ## 4. Why values are not rotated
#
# RoPE goes on the queries and the keys, because their dot product is where position belongs: it decides *how
# much* each key is read. The values are *what* is read, the content that gets copied. Rotating them too would
# stamp each key's absolute position onto its content. The output at $m$ would become
# $\sum_n a_{mn} R_n v_n$: the weights $a_{mn}$ still depend only on $n - m$, but $R_n$ depends on where key $n$
# sits. Two runs of the same text that start at different positions would then give different outputs.
#
# Both effects are easy to see by rotating V on purpose:
# - **A sequence of identical tokens.** Every value is the same vector $v$, and the weights of a row sum to 1,
#   so attention's output is the same at every position. With rotated values it varies along the sequence,
#   though nothing in the input does.
# - **The shift by 37 of section 2.** Without rotating V the output does not move. With rotated values it
#   changes by more than half the size of the output itself.

# %%
def attend(attn: nn.Attention, a: tb.Tensor, offset: int = 0, rotate_v: bool = False) -> np.ndarray:
    """Attention's output (B, L, d_model) at positions offset..; with rotate_v, V is rotated like K (wrong)."""
    Bn, Ln, _ = a.shape
    q, k = rotated_qk(attn, a, offset)
    v = attn.v_proj(a).reshape(Bn, Ln, CFG.n_kv_heads, CFG.d_head).transpose(1, 2)     # (B, H_kv, L, d_head)
    if rotate_v:
        v = nn.apply_rope(v, attn.rope_cos[offset:offset + Ln], attn.rope_sin[offset:offset + Ln])
    n_rep = CFG.n_heads // CFG.n_kv_heads
    weights = (tb.tensor(scores(q, k), dtype=a.dtype) + nn.causal_mask(Ln, a.dtype, a.backend)).softmax(axis=-1)
    out = (weights @ nn.repeat_kv(v, n_rep)).transpose(1, 2).reshape(Bn, Ln, CFG.d_model)   # (B, L, d_model)
    return attn.o_proj(out).numpy()


right = attend(block.attn, a)
print(f"attend() vs block.attn: max difference {np.abs(right - block.attn(a).numpy()).max():.1e}")
assert np.abs(right - block.attn(a).numpy()).max() < 1e-14

same = block.norm1(x[:, :1].expand(B, L, CFG.d_model))                   # token 0, repeated at every position
plain, spun = attend(block.attn, same), attend(block.attn, same, rotate_v=True)
print(f"identical tokens: output varies along the sequence by {np.ptp(plain, axis=1).max():.1e} "
      f"(V as is) and by {np.ptp(spun, axis=1).max():.2f} (V rotated); output size {np.abs(plain).max():.2f}")
assert np.ptp(plain, axis=1).max() < 1e-14 and np.ptp(spun, axis=1).max() > 0.3 * np.abs(plain).max()

shift_plain = np.abs(attend(block.attn, a, 37) - right).max()
shift_spun = np.abs(attend(block.attn, a, 37, rotate_v=True) - attend(block.attn, a, rotate_v=True)).max()
print(f"shifted by 37: output moves by {shift_plain:.0e} (V as is) and by {shift_spun:.2f} (V rotated); "
      f"output size {np.abs(right).max():.2f}")
assert shift_plain < 1e-12 and shift_spun > 0.5 * np.abs(right).max()

# %% [markdown]
# ## 5. Sharing keys and values: GQA and MQA
#
# In **multi-head attention** (MHA) every query head has its own key and value head. **Grouped-query attention**
# (GQA) keeps all $H$ query heads but only $H_{kv}$ key/value heads. Each of these serves a group of
# $H / H_{kv}$ consecutive query heads, so query head $h$ reads KV head $h \,//\, (H/H_{kv})$.
# **Multi-query attention** (MQA) is the extreme, $H_{kv} = 1$: every query head reads the same keys and values.
#
# In code the sharing is one function, `repeat_kv`. It copies each KV head for the query heads of its group,
# turning (B, $H_{kv}$, L, $d_{head}$) into (B, H, L, $d_{head}$), after which attention proceeds exactly as in
# MHA. The copies are exact: with the tiny preset's 4 query heads and 2 KV heads, KV head 0 goes to query
# heads 0 and 1, and KV head 1 to heads 2 and 3. PyTorch's `repeat_interleave` on the head axis gives the same
# order; tiling with `repeat` would give $h \bmod H_{kv}$ instead, a different model that runs without error.
# `repeat_kv` is an `expand`, and the backward of an expand sums. So the gradient reaching a KV head is the sum
# of what its query heads send back: exactly, as the check below shows. MQA (`n_rep` = 4 here) hands the one KV
# head to all four.

# %%
k_heads = tb.randn(B, 2, L, CFG.d_head, generator=tb.Generator(3), dtype=tb.float64, requires_grad=True)
k_rep = nn.repeat_kv(k_heads, 2)                                         # (B, 4, L, d_head)
serves = [next(j for j in range(2) if np.array_equal(k_rep.numpy()[:, h], k_heads.numpy()[:, j])) for h in range(4)]
upstream = tb.randn(*k_rep.shape, generator=tb.Generator(4), dtype=tb.float64)
k_rep.backward(upstream)
group_sum = upstream.numpy()[:, 0::2] + upstream.numpy()[:, 1::2]        # query heads (0, 1) and (2, 3)
one = tb.randn(B, 1, L, CFG.d_head, generator=tb.Generator(5), dtype=tb.float64)
mqa = nn.repeat_kv(one, 4).numpy()                                       # (B, 4, L, d_head)
print(f"{k_heads.shape} -> {k_rep.shape}; query heads 0..3 read KV heads {serves}")
print(f"gradient of each KV head minus the sum over its group: {np.abs(k_heads.grad.numpy() - group_sum).max():g}")
mqa_same = all(np.array_equal(mqa[:, h], one.numpy()[:, 0]) for h in range(4))
print(f"MQA: all 4 query heads read the one KV head: {mqa_same}")
assert serves == [h // 2 for h in range(4)] == [0, 0, 1, 1]
assert np.array_equal(k_heads.grad.numpy(), group_sum)
assert mqa_same

# %% [markdown]
# ### The parameters they save
#
# Only $W_K$ and $W_V$ shrink: each maps $d_{model}$ to $H_{kv} d_{head}$ numbers instead of $d_{model}$.
# Llama-2-70B ($d_{model} = 8192$, 64 query heads of 128, 8 KV heads) has $W_K$ and $W_V$ of
# 1,024 × 8,192 = 8,388,608 weights each instead of 67,108,864. Its attention holds $d^2 + 2 \cdot d \cdot d/8
# + d^2 = 2.25\,d^2$ = 150,994,944 parameters per block instead of MHA's $4d^2$ = 268,435,456, and with MQA
# it would hold 136,314,880. Over 80 blocks GQA saves 9,395,240,960 parameters, about 9.4 B. The counts below
# come from the attention modules built on the shape-only device and match $2d^2 + 2\,d\,H_{kv} d_{head}$.

# %%
c70 = nn.preset("llama2-70b")
d = c70.d_model
print(f"{'Llama-2-70B attention':24} {'KV heads':>8} {'k_proj.weight':>15} {'attention params':>17} {'/ d^2':>6}")
attention_params = {}
for kind, n_kv in (("MHA", 64), ("GQA", 8), ("MQA", 1)):
    attn = nn.Attention(c70.with_(n_kv_heads=n_kv), generator=tb.Generator(0), device="meta")
    attention_params[kind] = attn.num_parameters()
    print(f"{kind:24} {n_kv:>8} {str(attn.k_proj.weight.shape):>15} {attention_params[kind]:>17,} "
          f"{attention_params[kind] / d**2:>6.3f}")
    assert attention_params[kind] == 2 * d * d + 2 * d * n_kv * c70.d_head
    assert attn.k_proj.weight.shape == attn.v_proj.weight.shape == (n_kv * c70.d_head, d)
saving = attention_params["MHA"] - attention_params["GQA"]
print(f"GQA saves {saving:,} parameters per block, {c70.n_layers * saving:,} over {c70.n_layers} blocks")
assert c70.n_kv_heads == 8 and c70.n_kv_heads * c70.d_head * d == 8_388_608 and d * d == 67_108_864
assert attention_params == {"MHA": 268_435_456, "GQA": 150_994_944, "MQA": 136_314_880}
assert attention_params["GQA"] == 2.25 * d**2 and attention_params["MHA"] == 4 * d**2
assert saving == 117_440_512 and c70.n_layers * saving == 9_395_240_960 and round(c70.n_layers * saving / 1e9, 1) == 9.4
assert acc.block_param_breakdown(c70)["W_K"] == 8_388_608

# %% [markdown]
# ## 6. The KV cache, and what sharing saves
#
# A model generates text one token at a time, and each new token's query must see the keys and values of every
# earlier token. Recomputing them at each step would redo the work for every earlier token, so every layer keeps
# them: the **KV cache**. Per token and per layer it holds $2 \times H_{kv} \times d_{head}$ numbers (K and V). For
# a batch of $B$ sequences of $L$ tokens:
#
# $$\text{KV-cache bytes} = 2 \cdot n_{layers} \cdot B \cdot L \cdot H_{kv} \cdot d_{head} \cdot
# \text{bytes per number}.$$
#
# With MHA, $H_{kv} d_{head} = d_{model}$, and the cache is $2\,d\,L$ numbers per layer. GQA divides it by
# the group size $H / H_{kv}$, and MQA by $H$. The table gives the bytes in bf16 (bfloat16: a 2-byte float with
# float32's range but only 8 significant binary digits, the format large models are usually run in) from
# `accounting.kv_cache_bytes`, next to a measurement. For the measurement, the whole model runs on the
# shape-only device in a 2-byte dtype, and the K and V that every layer computes are added up. The two agree
# for every row. The last column is the cache of one sequence at the model's full context length
# (`max_seq_len`), the most a single sequence can need.
#
# For Llama-2-70B at 4,096 tokens, GQA needs 1.25 GiB per sequence (320 KiB per token). The same model with MHA
# would need 10 GiB, eight times more, and with MQA 160 MiB. Llama-2-7B is MHA: 2 GiB per 4,096-token
# sequence.
#
# **Two popular figures, checked.**
# - *"GQA with 8 KV heads cuts the KV cache 8 ×."* The cut is the group size $H / H_{kv}$, not the number of
#   KV heads. With 64 query heads (Llama-2-70B, Llama-3-70B) 8 KV heads make groups of 8, a cut of 8 ×. With
#   32 query heads (Llama-3-8B, Mistral-7B), 8 KV heads make groups of 4: a cut of 4 ×. TinyLlama's 32
#   heads over 4 KV heads give 8 ×; SmolLM-135M's 9 over 3 give 3 ×.
# - *"With MHA, Llama-2-70B's KV cache would need about 107 GB, more than an 80 GB A100"* (an NVIDIA GPU; a GB is
#   $10^9$ bytes). Counted exactly, one full 4,096-token sequence needs 10 GiB = 10,737,418,240 bytes, about 10.7
#   GB: ten times less. The 107 GB is what ten such sequences need (100 GiB = 107,374,182,400 bytes). A server runs
#   many sequences at once, and the MHA cache passes 80 GB from 8 full sequences on. That is the real reason for
#   GQA: the weights alone already need 137,953,296,384 bytes (138 GB) in bf16, so the model is split over several
#   GPUs anyway, and the cache decides how many sequences fit beside it.

# %%
def measured_kv_bytes(cfg: nn.BlockConfig, batch: int, seq_len: int) -> int:
    """Bytes of the K and V that every layer computes for (batch, seq_len) tokens: the whole model run on meta
    in float16 (2 bytes a number, like bf16), the outputs of each layer's k_proj and v_proj added up."""
    found = []

    def keep(event):
        if event.scope[-1:] in (("k_proj",), ("v_proj",)) and event.op.name == "matmul":
            found.append(event.output.nbytes)
    with tb.no_grad(), tb.observe(keep):
        meta_lm(cfg, tb.float16)(meta_ids(batch, seq_len))
    assert len(found) == 2 * cfg.n_layers
    return sum(found)


def size(n: int) -> str:
    return next(f"{n / unit:g} {name}" for unit, name in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB"), (1, "B"))
                if n >= unit)


configs = {"llama2-7b (MHA)": nn.preset("llama2-7b"), "llama2-70b (GQA)": c70,
           "llama2-70b as MHA": c70.with_(n_kv_heads=64), "llama2-70b as MQA": c70.with_(n_kv_heads=1),
           "llama3-8b (GQA)": nn.preset("llama3-8b"), "mistral-7b (GQA)": nn.preset("mistral-7b")}
cache = {}
print(f"{'model':20} {'H':>3} {'H_kv':>4} {'per token':>10} {'4,096 tokens':>13} {'measured':>14}  "
      f"{'full context':>20}")
for name, cfg in configs.items():
    per_token = acc.kv_cache_bytes(cfg, 1)                               # bf16, batch 1
    cache[name] = acc.kv_cache_bytes(cfg, 4096)
    measured = measured_kv_bytes(cfg, 1, 4096)
    full = acc.kv_cache_bytes(cfg, cfg.max_seq_len)
    print(f"{name:20} {cfg.n_heads:>3} {cfg.n_kv_heads:>4} {size(per_token):>10} {size(cache[name]):>13} "
          f"{measured:>14,}  {size(full):>9} at {cfg.max_seq_len:,}")
    assert measured == cache[name] == 4096 * per_token
    assert per_token == 2 * cfg.n_layers * cfg.n_kv_heads * cfg.d_head * 2
assert cache["llama2-70b (GQA)"] == 1.25 * GiB and acc.kv_cache_bytes(c70, 1) == 320 * KiB
assert cache["llama2-70b as MHA"] == 10 * GiB == 8 * cache["llama2-70b (GQA)"]
assert cache["llama2-70b as MQA"] == 160 * MiB == cache["llama2-70b as MHA"] / c70.n_heads
assert cache["llama2-7b (MHA)"] == 2 * GiB
c7 = nn.preset("llama2-7b")
assert acc.kv_cache_bytes(c7, 4096) // (2 * c7.n_layers) == 2 * c7.d_model * 4096   # 2 d L numbers a layer

groups = {name: cfg.n_heads // cfg.n_kv_heads for name, cfg in nn.PRESETS.items() if cfg.n_kv_heads < cfg.n_heads}
ratios = {name: acc.kv_cache_bytes(cfg.with_(n_kv_heads=cfg.n_heads), 1) / acc.kv_cache_bytes(cfg, 1)
          for name, cfg in nn.PRESETS.items() if cfg.n_kv_heads < cfg.n_heads}
print("KV-cache cut of GQA over MHA, per preset:", {name: f"{r:g} x" for name, r in ratios.items()})
assert ratios == groups and all(nn.preset(n).n_kv_heads == 8 for n in ("llama2-70b", "llama3-8b", "mistral-7b"))
assert ratios["llama2-70b"] == ratios["llama3-70b"] == 8 and ratios["llama3-8b"] == ratios["mistral-7b"] == 4
assert ratios["tinyllama-1.1b"] == 8 and ratios["smollm-135m"] == 3
assert (nn.preset("tinyllama-1.1b").n_heads, nn.preset("tinyllama-1.1b").n_kv_heads) == (32, 4)
assert (nn.preset("smollm-135m").n_heads, nn.preset("smollm-135m").n_kv_heads) == (9, 3)
assert all(nn.preset(n).n_heads == 64 for n in ("llama2-70b", "llama3-70b"))
assert all(nn.preset(n).n_heads == 32 for n in ("llama3-8b", "mistral-7b"))

mha70 = cache["llama2-70b as MHA"]
weights_bf16 = 2 * acc.total_params(c70)
print(f"Llama-2-70B as MHA: {mha70:,} bytes ({mha70 / 1e9:.1f} GB) per 4,096-token sequence; ten sequences "
      f"{10 * mha70:,} ({10 * mha70 / 1e9:.0f} GB); past 80 GB from {math.ceil(80e9 / mha70)} sequences; "
      f"weights in bf16 {weights_bf16:,} bytes ({weights_bf16 / 1e9:.0f} GB)")
assert mha70 == 10_737_418_240 and round(mha70 / 1e9, 1) == 10.7
assert 10 * mha70 == 100 * GiB == 107_374_182_400 and round(10 * mha70 / 1e9) == 107
assert math.ceil(80e9 / mha70) == 8 and weights_bf16 == 137_953_296_384 and round(weights_bf16 / 1e9) == 138

# %% [markdown]
# ## Check yourself
#
# 1. Why does a score between a RoPE-rotated query and key depend only on the distance between the two tokens?
#
#    <details><summary>Answer</summary>
#
#    Rotations compose by adding angles and are undone by their transpose, so $(R_m q)^\top (R_n k) = q^\top
#    R_{n-m}\, k$: the absolute positions cancel and only $n - m$ remains. That is why `block(x, offset=37)` equals
#    `block(x)` to within $10^{-12}$.
#
#    </details>
#
# 2. Why are the values not rotated?
#
#    <details><summary>Answer</summary>
#
#    Position belongs in the query–key product, which decides how much each key is read. The values are what is
#    read; rotating them would stamp each key's absolute position onto its content, so the same text started at
#    another position would give another output.
#
#    </details>
#
# 3. What does raising θ from 10000 to 500000 change, at $d_{head} = 128$?
#
#    <details><summary>Answer</summary>
#
#    The slowest pair's wavelength, $2\pi\,\theta^{1 - 2/d_{head}}$, grows from 54,410 tokens to 2,559,196, so
#    the slow pairs still keep long distances apart in a longer context. The fastest pair's wavelength stays
#    $2\pi$.
#
#    </details>
#
# 4. Llama-2-70B has 64 query heads and 8 KV heads. By how much does GQA cut its KV cache, and why not by the
#    number of KV heads?
#
#    <details><summary>Answer</summary>
#
#    By the group size $H / H_{kv} = 64 / 8 = 8$: 1.25 GiB per 4,096-token sequence instead of MHA's 10 GiB. The cut
#    is the group size, so 8 KV heads under 32 query heads (Llama-3-8B) cut it only 4 ×.
#
#    </details>

# %% [markdown]
# ## Words from this lesson
#
# - **RoPE**: rotary position embedding, which rotates each pair of a query's and a key's dimensions by an angle
#   that grows with the token's position (§1)
# - **rope_theta**: the base θ of RoPE's frequencies $\omega_i = \theta^{-2i/d_{head}}$, 10000 by default (§1)
# - **wavelength**: the number of tokens after which a RoPE pair comes back to where it started,
#   $2\pi\,\theta^{2i/d_{head}}$ (§3)
# - **context**: the most tokens a model reads at once (§3)
# - **multi-head attention**: attention in which every query head has its own key and value head (MHA) (§5)
# - **GQA**: grouped-query attention, in which each key/value head serves a group of $H / H_{kv}$ query heads (§5)
# - **MQA**: multi-query attention, in which every query head reads the same single key/value head (§5)
# - **KV head**: a head of keys and values, which several query heads may share (§5)
# - **KV cache**: the keys and values of every earlier token, kept by every layer so that generating the next
#   token does not recompute them (§6)
# - **bf16**: bfloat16, a 2-byte float with float32's range but only 8 significant binary digits, the format large
#   models are usually run in (§6)

# %% [markdown]
# ## Exercises
#
# 1. `rope`: `rope(x, positions, theta)` rotates queries or keys (B, H, L, $d_{head}$) standing at the given
#    positions, with tensor operations, in this library's half-split layout (dimension $i$ pairs with
#    $i + d_{head}/2$). The checker compares with `nn.apply_rope` and with the hand-derived gradient (the
#    inverse rotation), and it recognises adjacent pairs, a wrong frequency and a rotation the wrong way.
# 2. `repeat_kv`: `repeat_kv(x, n_rep)` hands each KV head to its group of query heads (section 5). Query head
#    $h$ must read KV head $h \,//\, n_{rep}$ (tiling gives $h \bmod H_{kv}$), and the gradient of each KV head
#    must be the sum over its group.
# 3. `kv_cache_bytes`: `kv_cache_bytes(cfg, batch, seq_len, bytes_per_element)` is the size in bytes of a whole
#    model's KV cache (section 6). It is checked against `accounting.kv_cache_bytes` and against the K and V
#    measured on the shape-only device, for MHA, GQA and MQA models.
#
# `python -m tinygrad_block exercise 07` writes `exercise_07.py` with the three functions to fill in;
# `python -m tinygrad_block check 07` checks them and says what is wrong.
