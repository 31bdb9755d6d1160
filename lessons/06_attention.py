# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 06 — Attention
#
# Attention is the only place in a transformer block where tokens exchange information: every other step works
# on each position alone. This lesson builds it from its parts: queries, keys and values, the scores, a scale, a
# mask, a softmax, the weighted sum of the values, heads and an output projection. For each part it shows what
# goes wrong without it.
#
# **What you will learn**
# - queries, keys and values: each token's query is compared with every key (the scores), softmax turns the
#   scores into weights, and the token receives the weighted sum of the values;
# - why the scores $q \cdot k$ are divided by $\sqrt{d_k}$: their variance grows with the width of $q$ and $k$,
#   and without the scale softmax saturates and its gradient vanishes (measured, and plotted);
# - the causal mask, and why it is added as $-\infty$ *before* the softmax;
# - why softmax subtracts each row's maximum: the naive formula overflows in float32 at scores near 89;
# - heads, and attention in `nn.Attention`, shape by shape, with proof that no token reads the future;
# - what the heads compute, and why the output projection $W_O$ is what mixes them;
# - what attention patterns look like, drawn as heatmaps.
#
# Run it as a script, `python -m tinygrad_block lesson 06`, or as a notebook,
# `python -m tinygrad_block lesson 06 --notebook --execute` (it lands beside this file).

# %%
import math

import numpy as np

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.pictures import figure

from course import out_dir, show

OUT = out_dir(6)          # lessons/out/06/: this lesson's pictures

# %% [markdown]
# ## 1. Queries, keys and values
#
# Lesson 04 left every token as a vector of $d_{model}$ numbers (the model's width) in the residual stream.
# Attention lets token $i$ gather information from the other tokens. It makes three vectors from each token's
# vector $x_i$, with three linear maps (lesson 03):
# - a **query** $q_i = W_Q x_i$: what token $i$ is looking for;
# - a **key** $k_i = W_K x_i$: what token $i$ can be found by;
# - a **value** $v_i = W_V x_i$: what token $i$ hands over to whoever reads it.
#
# Queries and keys are compared, so they have the same width, called $d_k$. The **score** of key $j$ for query
# $i$ is their dot product, $s_{ij} = q_i \cdot k_j = \sum_{t=1}^{d_k} q_{it} k_{jt}$: large when the two point
# the same way. Softmax (lesson 04) turns query $i$'s row of scores into **attention weights**
# $a_{ij} = e^{s_{ij}} / \sum_l e^{s_{il}}$, which are positive and sum to 1 over the keys. What token $i$
# receives is the **weighted sum of the values**,
#
# $$o_i = \sum_j a_{ij}\, v_j,$$
#
# an average of the values in which each value counts as much as its weight. A key that matches the query far
# better than the others takes nearly all the weight, and then $o_i$ is nearly that key's value.
#
# A small example by hand, with $d_k = 2$: four keys pointing in four directions, $3 \cdot (1, 0)$,
# $3 \cdot (0, 1)$, $3 \cdot (-1, 0)$, $3 \cdot (0, -1)$, and four values of width 3. Three queries ask:
# - $q = (3, 0)$ points like key 0. Its scores are $(9, 0, -9, 0)$, key 0 gets a weight above 0.999, and the
#   output is value 0 to within $3 \times 10^{-4}$;
# - $q = (0, 0)$ matches nothing. All its scores are 0, every weight is exactly 1/4, and the output is the plain
#   mean of the four values;
# - $q = (1.5, 1.5)$ lies between keys 0 and 1. Each of them gets a weight just under 1/2, and the output is
#   nearly the mean of values 0 and 1.
#
# Stacking the queries as the rows of a matrix $Q$ (and the keys as $K$, the values as $V$), all the scores are
# one matrix product, $S = Q K^\top$, with one row per query and one column per key. Softmax along each row
# gives the weights $A$, and all the outputs are one more product, $O = A V$.

# %%
K = tb.tensor([[3.0, 0.0], [0.0, 3.0], [-3.0, 0.0], [0.0, -3.0]], dtype=tb.float64)   # (4 keys, d_k = 2)
V = tb.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 1.0]], dtype=tb.float64)  # (4, 3)
Q = tb.tensor([[3.0, 0.0], [0.0, 0.0], [1.5, 1.5]], dtype=tb.float64)                  # (3 queries, d_k = 2)
S = Q @ K.mT                                                     # (3, 4): s_ij = q_i . k_j
A = S.softmax(axis=-1)                                           # (3, 4): each row sums to 1
out = A @ V                                                      # (3, 3): o_i = sum_j a_ij v_j
with np.printoptions(precision=5, suppress=True):
    print("scores S = Q K^T:\n", S.numpy())
    print("weights A = softmax(S), row by row:\n", A.numpy())
    print("outputs A V:\n", out.numpy())
a, v, o = A.numpy(), V.numpy(), out.numpy()
by_sum = np.array([sum(a[i, j] * v[j] for j in range(4)) for i in range(3)])   # o_i = sum_j a_ij v_j, one by one
assert S.numpy()[0].tolist() == [9.0, 0.0, -9.0, 0.0] and np.abs(by_sum - o).max() < 1e-15
assert np.abs(a.sum(axis=-1) - 1).max() < 1e-15 and (a > 0).all()
assert a[0, 0] > 0.999 and np.abs(o[0] - v[0]).max() < 3e-4
assert (a[1] == 0.25).all() and np.abs(o[1] - v.mean(axis=0)).max() < 1e-15
assert 0.4999 < a[2, 0] == a[2, 1] < 0.5 and np.abs(o[2] - (v[0] + v[1]) / 2).max() < 2e-4

# %% [markdown]
# ### From the tokens' vectors
#
# In a model, nobody picks the queries, keys and values by hand: three `nn.Linear` layers make them from the
# tokens' vectors, and their matrices are learned in training. For $L$ tokens stacked as the rows of $X$,
# $(L, d_{model})$, that is $Q = X W_Q^\top$, $K = X W_K^\top$, $V = X W_V^\top$ (the library stores each
# matrix as (out, in), lesson 03). Below, 6 tokens of width 8 and $d_k = 4$: the scores and the weights are
# $6 \times 6$, one row per query and one column per key, and the outputs are $6 \times 4$, one value-sized
# vector per token. The values may have their own width; in the models of this course it is $d_k$ too.
#
# Two things are still missing. Here every token reads every other one, including the tokens after it, which a
# model that predicts the next token must not do (section 4). And the library divides the scores by
# $\sqrt{d_k}$ before the softmax (section 2 says why).

# %%
g = tb.Generator(0)
L6, D8, D4 = 6, 8, 4
X = tb.randn(L6, D8, generator=g, dtype=tb.float64)              # (6 tokens, d_model = 8)
W_Q, W_K, W_V = (nn.Linear(D8, D4, generator=g, dtype=tb.float64) for _ in range(3))
Q, K, V = W_Q(X), W_K(X), W_V(X)                                 # (6, 4) each: one query, key, value per token
A = (Q @ K.mT).softmax(axis=-1)                                  # (6, 6): row i = query i, column j = key j
out = A @ V                                                      # (6, 4): one output per token
print(f"X {X.shape} -> Q {Q.shape}, K {K.shape}, V {V.shape}; weights {A.shape}; outputs {out.shape}")
print(f"rows of the weights sum to 1 within {np.abs(A.numpy().sum(-1) - 1).max():.0e}; "
      f"q_0 = W_Q x_0: {np.allclose(Q.numpy()[0], W_Q.weight.numpy() @ X.numpy()[0], rtol=0, atol=1e-15)}")
assert (Q.shape, K.shape, V.shape, A.shape, out.shape) == ((6, 4), (6, 4), (6, 4), (6, 6), (6, 4))
assert np.abs(A.numpy().sum(-1) - 1).max() < 1e-15
assert np.allclose(Q.numpy()[0], W_Q.weight.numpy() @ X.numpy()[0], rtol=0, atol=1e-15)
assert np.allclose(out.numpy()[2], A.numpy()[2] @ V.numpy(), rtol=0, atol=1e-15)

# %% [markdown]
# ## 2. Scores, and why they are divided by $\sqrt{d_k}$
#
# The score $s_{ij} = q_i \cdot k_j$ is a sum of $d_k$ products, and its typical size grows with $d_k$. In the
# library $d_k$ is called `d_head`, for a reason section 6 gives.
#
# Suppose the entries of $q$ and $k$ are independent, with mean 0 and variance 1 (roughly what a normalised input
# gives, with $W_Q$ and $W_K$ drawn at random on a suitable scale, as they are before training). Each product
# $q_t k_t$ then has mean 0 and variance 1, and a sum of $d_k$ independent such terms has variance $d_k$. So the scores
# spread out as $\sqrt{d_k}$: about 11 for Llama's $d_k = 128$. Dividing by $\sqrt{d_k}$ brings the variance back to
# 1 at every width.
#
# Below, 20000 random pairs for each width: the measured variance of $q \cdot k$ is $d_k$ within 5 %, and
# after the scale it is 1 within 5 %.

# %%
g = tb.Generator(0)
N = 20_000
variances = {}
print(f"{'d_k':>5} {'var(q.k)':>10} {'var(q.k)/d_k':>13} {'var(q.k / sqrt(d_k))':>21}")
for d_k in (16, 64, 128, 256):
    q = tb.randn(N, d_k, generator=g, dtype=tb.float64)
    k = tb.randn(N, d_k, generator=g, dtype=tb.float64)
    dots = (q * k).sum(axis=-1)                                   # (N,): one score per pair
    variances[d_k] = (dots.var().item(), (dots / math.sqrt(d_k)).var().item())
    raw, scaled = variances[d_k]
    print(f"{d_k:>5} {raw:>10.2f} {raw / d_k:>13.3f} {scaled:>21.3f}")
    assert abs(raw / d_k - 1) < 0.05 and abs(scaled - 1) < 0.05
assert round(math.sqrt(128)) == 11

# %% [markdown]
# ## 3. Without the scale, softmax saturates
#
# Why does the spread matter? Softmax, $p_j = e^{s_j} / \sum_l e^{s_l}$, compares *differences* of scores: a gap of
# 10 between the best key and the next makes the ratio of their weights $e^{10} \approx 2.2 \times 10^4$. When
# scores spread by $\sqrt{d_k}$, wide queries and keys produce such gaps all the time, and a row puts nearly all its
# weight on one key. That row is almost one-hot (one weight near 1, the others near 0), and the gradient through it
# almost vanishes. The softmax's **Jacobian**, the table of its partial derivatives, is
# $\partial p_i / \partial s_j = p_i(\delta_{ij} - p_j)$ ($\delta_{ij}$ is 1 when $i = j$ and 0 otherwise), and
# with one $p_i \approx 1$ and the others $\approx 0$ every entry is close to 0. Training cannot move a saturated
# row.
#
# The experiment: one query against 16 random keys, in 400 independent rows, at widths $d_k$ = 2 to 512.
# For each width we measure the largest weight in a row (averaged over the rows) and the size of the gradient
# that reaches the scores, $\lVert \partial \mathcal{L} / \partial s \rVert$ for a random upstream gradient
# (the median over rows). Both are measured with and without the scale.
#
# With the scale, the picture does not depend on the width: the largest weight stays between 0.2 and 0.3
# (a uniform row would give 1/16 = 0.0625), and the gradient stays the same size. Without it, at Llama's
# $d_k = 128$ the largest weight averages more than 0.85, over 40 % of the rows put more than 99 % of their
# weight on a single key, and the median gradient is more than 15 times smaller than with the scale. At
# $d_k = 512$ it is more than 500 times smaller.

# %%
R, KEYS = 400, 16
widths = [2 ** i for i in range(1, 10)]                          # 2 .. 512
saturation = {"scaled": {"top": [], "one_hot": [], "grad": []}, "unscaled": {"top": [], "one_hot": [], "grad": []}}
g = tb.Generator(1)
for d_k in widths:
    q = tb.randn(R, 1, d_k, generator=g, dtype=tb.float64)       # one query per row
    k = tb.randn(R, KEYS, d_k, generator=g, dtype=tb.float64)    # 16 keys per row
    upstream = tb.randn(R, 1, KEYS, generator=g, dtype=tb.float64)
    dots = q @ k.mT                                              # (R, 1, 16)
    for name, scores in (("scaled", dots / math.sqrt(d_k)), ("unscaled", dots)):
        s = scores.detach().requires_grad_()
        p = s.softmax(axis=-1)
        (p * upstream).sum().backward()                          # dL/ds for a random upstream gradient
        top = p.numpy().max(axis=-1)
        saturation[name]["top"].append(top.mean())
        saturation[name]["one_hot"].append((top > 0.99).mean())
        saturation[name]["grad"].append(np.median(np.linalg.norm(s.grad.numpy()[:, 0], axis=-1)))
sc, un = ({key: np.array(v) for key, v in saturation[name].items()} for name in ("scaled", "unscaled"))
at128, at512 = widths.index(128), widths.index(512)
print(f"{'d_k':>5} {'top weight, scaled':>19} {'unscaled':>9} {'rows > 0.99, unscaled':>22} "
      f"{'median |grad|, scaled':>22} {'unscaled':>9}")
for i, d_k in enumerate(widths):
    print(f"{d_k:>5} {sc['top'][i]:>19.3f} {un['top'][i]:>9.3f} {un['one_hot'][i]:>22.1%} "
          f"{sc['grad'][i]:>22.4f} {un['grad'][i]:>9.5f}")
assert (0.2 < sc["top"]).all() and (sc["top"] < 0.3).all() and sc["one_hot"].max() == 0.0
assert sc["grad"].max() / sc["grad"].min() < 1.2 and 1 / KEYS == 0.0625   # scaled: the same gradient at every width
assert un["top"][at128] > 0.85 and un["one_hot"][at128] > 0.40 and round(math.exp(10) / 1e4, 1) == 2.2
assert sc["grad"][at128] / un["grad"][at128] > 15 and sc["grad"][at512] / un["grad"][at512] > 500

fig = figure(11, 4)
left, right = fig.subplots(1, 2)
left.plot(widths, sc["top"], "o-", label=r"scaled: softmax($q\cdot k/\sqrt{d_k}$)")
left.plot(widths, un["top"], "s-", label=r"unscaled: softmax($q\cdot k$)")
left.axhline(1 / KEYS, color="gray", ls=":", label="uniform over 16 keys")
left.set(xscale="log", xlabel="width $d_k$ of q and k", ylabel="largest weight in a row (mean of 400 rows)",
         title="Without the scale, rows become one-hot", ylim=(0, 1.02))
left.set_xticks(widths, [str(w) for w in widths])
left.legend(loc="center right")
right.plot(widths, sc["grad"], "o-", label="scaled")
right.plot(widths, un["grad"], "s-", label="unscaled")
right.set(xscale="log", yscale="log", xlabel="width $d_k$ of q and k",
          ylabel=r"median $\|\partial L/\partial s\|$ over rows", title="...and the gradient through them vanishes")
right.set_xticks(widths, [str(w) for w in widths])
right.legend()
show(fig, OUT / "softmax_saturation.png")

# %% [markdown]
# ## 4. The causal mask
#
# A language model predicts each token from the ones before it (lesson 04), so position $i$ may read keys
# $j \le i$ only, and section 1's attention, in which every token reads every other one, must be restricted.
# The **causal mask** is an $L \times L$ table added to the scores: 0 where $j \le i$ and $-\infty$ where
# $j > i$ (the future). Since $e^{-\infty} = 0$, softmax gives every future key a weight of exactly 0, and it
# spreads each row's weight over the keys that remain: row 0 can only read itself (weight 1), row $i$ reads
# $i + 1$ keys, and every row still sums to 1.
#
# The mask goes in *before* the softmax. Zeroing the future weights *after* the softmax would leave rows that
# no longer sum to 1: in the example below, row 0 would keep only the weight it gave itself, 0.14, and every
# row but the last would sum to less than 1. `nn.causal_mask` builds the table (attention builds it once per
# length and reuses it). It is a constant, so no op is recorded for it, and in the backward pass its add lets
# the gradient through unchanged.

# %%
L5 = 5
mask = nn.causal_mask(L5, tb.float64, tb.get_backend("cpu"))      # (5, 5): 0 on and below the diagonal
print("causal mask for L = 5:\n", mask.numpy())
scores = tb.randn(L5, L5, generator=tb.Generator(2), dtype=tb.float64)
weights = (scores + mask).softmax(axis=-1)
zeroed_after = scores.softmax(axis=-1).numpy() * np.tril(np.ones((L5, L5)))
print("softmax(scores + mask):\n", weights.numpy().round(3))
print(f"rows sum to {weights.numpy().sum(-1).round(12)}; zeroing after the softmax leaves "
      f"{zeroed_after.sum(-1).round(3)}")
assert np.array_equal(mask.numpy(), np.triu(np.full((L5, L5), -np.inf), k=1))
assert (weights.numpy()[np.triu_indices(L5, k=1)] == 0.0).all() and weights.numpy()[0, 0] == 1.0
assert np.allclose(weights.numpy().sum(-1), 1.0, rtol=0, atol=1e-15)
assert [int((w > 0).sum()) for w in weights.numpy()] == [1, 2, 3, 4, 5]
assert round(zeroed_after[0].sum(), 2) == 0.14 and (zeroed_after.sum(-1)[:-1] < 1.0).all()

# %% [markdown]
# ## 5. The stable softmax
#
# Written as in the textbook, $e^{s_j} / \sum_l e^{s_l}$ overflows. The largest float32 number is about
# $3.4 \times 10^{38} = e^{88.72}$, so $e^{88}$ is still finite but $e^{89}$ is already infinite. A row of scores
# $[100, 99, 98]$ gives $\infty / \infty$, which is NaN. Such scores happen: attention scores are not bounded,
# and the same softmax turns the model's final logits into probabilities (lesson 04 met the overflow there, on
# logits near 1,000). At the other end, a row of scores all
# near $-110$ underflows: every $e^{s}$ rounds to 0, and $0/0$ is NaN too.
#
# The cure costs one reduction. Softmax does not change when the same number $m$ is subtracted from every score
# of a row, because $e^{s_j - m} / \sum_l e^{s_l - m} = e^{s_j} / \sum_l e^{s_l}$. With $m = \max_l s_l$ the
# largest exponent is exactly $e^0 = 1$, so the sum lies between 1 and the row length: it can neither overflow
# nor be zero. `Tensor.softmax` does exactly this. It treats $m$ as a constant, outside the graph, which is
# allowed because the result does not depend on it. Its gradient is still the exact Jacobian product
# $p \odot (g - p \cdot g)$. In a masked row the maximum is never $-\infty$, because the diagonal is always
# unmasked.

# %%
big = tb.tensor([[100.0, 99.0, 98.0]])                           # float32
tiny = tb.tensor([[-110.0, -111.0, -112.0]])
with np.errstate(over="ignore", invalid="ignore"):               # the overflows, on purpose
    edge = tb.tensor([88.0, 89.0]).exp()
    naive_big = (big.exp() / big.exp().sum(axis=-1, keepdims=True)).numpy()
    naive_tiny = (tiny.exp() / tiny.exp().sum(axis=-1, keepdims=True)).numpy()
stable_big, stable_tiny = big.softmax(axis=-1).numpy(), tiny.softmax(axis=-1).numpy()


def softmax_f64(s):
    """The stable formula in float64 numpy: the oracle for the float32 results."""
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


print(f"float32: e^88 = {edge.numpy()[0]:.4g}, e^89 = {edge.numpy()[1]}; ln(float32 max) = "
      f"{math.log(np.finfo(np.float32).max):.2f}")
print(f"scores [100, 99, 98]:    naive {naive_big[0]}, stable {stable_big[0].round(6)}")
print(f"scores [-110, -111, -112]: naive {naive_tiny[0]}, stable {stable_tiny[0].round(6)}")
assert np.isfinite(edge.numpy()[0]) and np.isinf(edge.numpy()[1])
assert round(math.log(np.finfo(np.float32).max), 2) == 88.72 and round(float(np.finfo(np.float32).max) / 1e38, 1) == 3.4
assert np.isnan(naive_big).all() and np.isnan(naive_tiny).all()
assert np.allclose(stable_big, softmax_f64(np.array([[100.0, 99.0, 98.0]])), rtol=1e-6)
assert np.allclose(stable_tiny, softmax_f64(np.array([[-110.0, -111.0, -112.0]])), rtol=1e-6)

s = (tb.randn(3, 6, generator=tb.Generator(3), dtype=tb.float64) * 50.0).requires_grad_()   # scores up to ~100
upstream = tb.randn(3, 6, generator=tb.Generator(4), dtype=tb.float64)
p = s.softmax(axis=-1)
(p * upstream).sum().backward()
pn, gn = p.numpy(), upstream.numpy()
by_hand = pn * (gn - (pn * gn).sum(-1, keepdims=True))          # the Jacobian product, derived by hand
print(f"gradient through the stable softmax vs p * (g - p.g): max difference "
      f"{np.abs(s.grad.numpy() - by_hand).max():.1e}")
assert np.abs(s.grad.numpy() - by_hand).max() < 1e-15

# %% [markdown]
# ## 6. Heads, and attention shape by shape
#
# A model does not run attention once over the whole width $d_{model}$. It cuts the width into $H$ **heads**:
# the projections $W_Q$, $W_K$, $W_V$ still make $d_{model}$ numbers per token, but these are read as $H$
# vectors of $d_{head} = d_{model} / H$ numbers, and each head runs sections 1 to 5 on its own slice: its own
# queries, keys and values, its own scores and weights. So the $d_k$ of the scale is $d_{head}$, the width of one
# head. The $H$ outputs, $d_{head}$ numbers each, are then put side by side again (the heads are **merged**) and
# passed through a fourth linear map, the **output projection** $W_O$ (`o_proj`), which makes the $d_{model}$
# numbers that attention returns to the residual stream. Section 7 shows what $W_O$ does that the merge cannot.
#
# `nn.Attention` is this whole sublayer. We build it from the `tiny` preset ($d_{model} = 64$, $H = 4$ heads of
# $d_{head} = 16$) with two settings changed, so that it computes exactly what this lesson has explained:
# `n_kv_heads=4`, so that every head has its own keys and values (the preset has 2 sets of keys and values, each
# shared by two heads' queries, which lesson 07 explains), and `rope=False`, no positions (RoPE, the rotary position
# embedding of lesson 07, gives queries and keys the positions of their tokens). Its input is a batch of $B = 2$
# sequences of $L = 8$ token vectors, normalised with RMSNorm (lesson 05; lesson 09 shows where this norm sits in
# the block), in float64. Every intermediate is kept:
#
# | step | shape |
# |---|---|
# | `a = norm(x)` | (2, 8, 64) |
# | `q = q_proj(a)`, `k = k_proj(a)`, `v = v_proj(a)` | (2, 8, 64) each: 4 heads × 16 |
# | split heads: `reshape(B, L, H, d_head).transpose(1, 2)` | q, k, v (2, 4, 8, 16) |
# | scores $q k^\top / \sqrt{16}$ | (2, 4, 8, 8) |
# | plus the causal mask | (2, 4, 8, 8) |
# | weights: softmax of each row | (2, 4, 8, 8) |
# | weighted sum: `weights @ v` | (2, 4, 8, 16) |
# | merge heads: `transpose(1, 2).reshape(B, L, 64)` | (2, 8, 64) |
# | `o_proj` | (2, 8, 64) |
#
# The batch axis and the head axis ride along in front: `@` multiplies the last two axes of each
# (sequence, head) pair, as lesson 03's batched matmul does. Two details deserve a look. The split is a
# `reshape` followed by a `transpose`, not one reshape to (B, H, L, d_head): the projection's 64 outputs of one
# token are laid out head after head, so the reshape cuts each token's row into heads, and the transpose brings
# the heads forward as a batch axis. The product $q k^\top$ uses `k.mT`, which swaps only the last two axes;
# `.T` would reverse all four. The steps, run by hand, give exactly the array that `attn` computes, and the
# library's `nn.sdpa` ("scaled dot-product attention": the scores, the mask, the softmax and the weighted sum)
# gives exactly the weighted sum of the table.

# %%
CFG = nn.preset("tiny").with_(n_kv_heads=4, rope=False)          # one key/value head per query head; no positions
B, L = 2, 8
g = tb.Generator(0)
attn = nn.Attention(CFG, generator=g, dtype=tb.float64)
norm = nn.RMSNorm(CFG.d_model, CFG.norm_eps, dtype=tb.float64)
x = tb.randn(B, L, CFG.d_model, generator=g, dtype=tb.float64)


def attention_steps(attn: nn.Attention, a: tb.Tensor) -> dict:
    """attn(a) written out step by step: every intermediate, by name (the same ops as nn.Attention.forward)."""
    H, d_head = CFG.n_heads, CFG.d_head
    Bn, Ln, _ = a.shape
    s = {"a": a, "q": attn.q_proj(a), "k": attn.k_proj(a), "v": attn.v_proj(a)}
    for name in "qkv":
        s[f"{name} heads"] = s[name].reshape(Bn, Ln, H, d_head).transpose(1, 2)   # (B, H, L, d_head)
    s["scores"] = (s["q heads"] / math.sqrt(d_head)) @ s["k heads"].mT             # (B, H, L, L)
    s["masked"] = s["scores"] + nn.causal_mask(Ln, a.dtype, a.backend)            # -inf above the diagonal
    s["weights"] = s["masked"].softmax(axis=-1)                                    # (B, H, L, L)
    s["weighted"] = s["weights"] @ s["v heads"]                                    # (B, H, L, d_head)
    s["merged"] = s["weighted"].transpose(1, 2).reshape(Bn, Ln, H * d_head)        # (B, L, d_model)
    s["out"] = attn.o_proj(s["merged"])
    return s


steps = attention_steps(attn, norm(x))
shapes = {name: t.shape for name, t in steps.items()}
for name, shape in shapes.items():
    print(f"  {name:9} {shape}")
same = np.array_equal(steps["out"].numpy(), attn(norm(x)).numpy())
by_sdpa = nn.sdpa(steps["q heads"], steps["k heads"], steps["v heads"], nn.causal_mask(L, tb.float64, x.backend))
print(f"step by step == attn(norm(x)), bit for bit: {same}; nn.sdpa == the weighted sum: "
      f"{np.array_equal(by_sdpa.numpy(), steps['weighted'].numpy())}")
assert (CFG.d_model, CFG.n_heads, CFG.n_kv_heads, CFG.d_head, CFG.rope) == (64, 4, 4, 16, False)
assert nn.preset("tiny").n_kv_heads == 2
assert shapes == {"a": (2, 8, 64), "q": (2, 8, 64), "k": (2, 8, 64), "v": (2, 8, 64),
                  "q heads": (2, 4, 8, 16), "k heads": (2, 4, 8, 16), "v heads": (2, 4, 8, 16),
                  "scores": (2, 4, 8, 8), "masked": (2, 4, 8, 8), "weights": (2, 4, 8, 8),
                  "weighted": (2, 4, 8, 16), "merged": (2, 8, 64), "out": (2, 8, 64)}
assert same and np.array_equal(by_sdpa.numpy(), steps["weighted"].numpy())
assert steps["q heads"].numpy()[0, 1, 3].tolist() == steps["q"].numpy()[0, 3, 16:32].tolist()

# %% [markdown]
# ### No token reads the future
#
# The mask's promise holds for the whole sublayer, not only for one softmax. Change every number of token 5 and
# run the norm and attention again. The outputs at positions 0 to 4 do not change at all (the difference is
# exactly 0, not merely small), while positions 5, 6 and 7, which may read token 5, all change. The norm and the
# four projections work on each position alone, so the mask is the only thing standing between a position and
# its future. The parts that later lessons add around attention (positions in lesson 07, the feed-forward network
# in lesson 08) also work one position at a time, so the mask keeps this promise for the whole block.

# %%
changed = x.numpy().copy()
changed[:, 5] += 1.0                                              # every feature of token 5
diff = np.abs(attn(norm(tb.tensor(changed, dtype=tb.float64))).numpy() - attn(norm(x)).numpy())
per_position = diff.max(axis=(0, 2))                              # (L,): largest change at each position
print(f"token 5 changed; largest change of attention's output per position: "
      f"{np.array2string(per_position, precision=3)}")
assert (per_position[:5] == 0.0).all() and (per_position[5:] > 0.0).all()

# %% [markdown]
# ## 7. Why $W_O$ mixes the heads
#
# Each head has its own queries and keys, so each computes its own weights, and it reads its own
# $d_{head} = 16$ numbers from the values. Merging the heads is only a concatenation: head $h$'s result lands in
# features $16h$ to $16h + 15$ of the merged vector, side by side with the others, with no arithmetic between
# them. The mixing is done by the output projection. Split $W_O$ into the blocks of columns that read each head
# (the library stores weights as (out, in), so these are its columns; in the $x W_O$ convention of many papers
# they are rows):
#
# $$\mathrm{out} = \mathrm{concat}(o_0, \dots, o_{H-1})\, W_O^\top = \sum_{h} o_h\, W_{O,h}^\top,\qquad
# W_{O,h} = W_O[:,\, 16h : 16h + 16].$$
#
# So attention's output is a **sum of one contribution per head**, and each contribution has the full width
# $d_{model} = 64$: every head writes into every output feature, through its own 64 × 16 block of $W_O$.
#
# That answers a classic interview question: *what is the role of $W_O$?* Switch one head off (zero its 16
# numbers before the merge) and look at what changes:
# - **without $W_O$** (the merged vector itself), exactly the 16 features of that head change, and the other 48
#   do not move at all;
# - **with $W_O$**, all 64 output features change, and the change is exactly that head's contribution
#   $o_h W_{O,h}^\top$.
#
# Without $W_O$, a head could only write into its own fixed 16 coordinates of the residual stream. With it,
# each head chooses where its result goes. What head $h$ does to a token's vector, from the value it reads to
# what it writes, is the 64 × 64 matrix $W_{O,h} W_{V,h}$ ($W_{V,h}$: the 16 rows of `v_proj.weight` that make
# the values head $h$ reads). Its rank is 16 ($d_{head}$), so each head reads one 16-dimensional subspace of the
# stream and writes another. Later layers read all 64 features, so they can
# still combine what different heads wrote.

# %%
H, d_head = CFG.n_heads, CFG.d_head
o, w_o = steps["weighted"], attn.o_proj.weight                          # (B, H, L, 16); (64, 64) = (out, in)
contributions = [o[:, h] @ w_o[:, h * d_head:(h + 1) * d_head].mT for h in range(H)]   # each (B, L, 64)
total = contributions[0] + contributions[1] + contributions[2] + contributions[3]
print(f"sum of the {H} head contributions vs o_proj(merged): max difference "
      f"{np.abs(total.numpy() - steps['out'].numpy()).max():.1e}")
assert np.abs(total.numpy() - steps["out"].numpy()).max() < 1e-14
assert all(c.shape == (B, L, CFG.d_model) for c in contributions)

off = 1                                                                  # switch head 1 off
keep = tb.tensor([1.0 if h != off else 0.0 for h in range(H)], dtype=tb.float64).reshape(1, H, 1, 1)
merged_off = (o * keep).transpose(1, 2).reshape(B, L, CFG.d_model)      # (B, L, 64)
out_off = attn.o_proj(merged_off)
merged_change = np.abs(merged_off.numpy() - steps["merged"].numpy()).max(axis=(0, 1))   # (64,) per feature
out_change = np.abs(out_off.numpy() - steps["out"].numpy()).max(axis=(0, 1))
moved = np.flatnonzero(merged_change)
print(f"head {off} off, without W_O: {len(moved)} features change ({moved.min()}..{moved.max()}), "
      f"{int((merged_change == 0).sum())} are exactly unchanged")
removed = steps["out"].numpy() - out_off.numpy()                          # what switching head 1 off took away
print(f"head {off} off, with W_O: {int((out_change > 0).sum())} of {CFG.d_model} output features change; "
      f"change vs head {off}'s contribution: {np.abs(removed - contributions[off].numpy()).max():.1e}")
assert moved.tolist() == list(range(16, 32)) and int((merged_change == 0).sum()) == 48
assert (out_change > 0).all()
assert np.abs(removed - contributions[off].numpy()).max() < 1e-14

w_v = attn.v_proj.weight.numpy()                                         # (64, 64) = (out, in): 4 heads of 16
ranks = [int(np.linalg.matrix_rank(w_o.numpy()[:, h * 16:(h + 1) * 16] @ w_v[h * 16:(h + 1) * 16])) for h in range(H)]
print(f"rank of each head's 64 x 64 matrix W_O,h W_V,h: {ranks}")
assert ranks == [d_head] * H == [16, 16, 16, 16]

# %% [markdown]
# ## 8. What the heads look at
#
# The weights after the softmax form one $L \times L$ **attention pattern** per head: row $i$ says how query
# position $i$ spreads its attention over the key positions. Below are the four heads of section 6 on one
# sequence of 12 random tokens. Everything above the diagonal is exactly 0 (drawn in grey: the future), the first
# row is always a single 1 (position 0 can only read itself), and each row sums to 1.
#
# Each head has its own queries and keys, so each has its own pattern: any two of the four differ by more than
# 0.1 somewhere. (Lesson 07 lets several query heads share one key/value head; their patterns still differ,
# because their queries do.) These weights are random, so the patterns have no meaning yet. In a trained model,
# heads learn sharp, readable patterns, such as "look at the previous token" or "look at the first token".
# Lesson 14 trains a small model and finds one: a head that looks back to copy (its section 6).

# %%
L12 = 12
x12 = tb.randn(1, L12, CFG.d_model, generator=tb.Generator(5), dtype=tb.float64)
patterns = attention_steps(attn, norm(x12))["weights"].numpy()[0]             # (H, L, L)
above = patterns[:, *np.triu_indices(L12, k=1)]                          # every weight on a future key
print(f"patterns {patterns.shape}; largest weight above the diagonal {above.max()}; "
      f"rows sum to 1 within {np.abs(patterns.sum(-1) - 1).max():.0e}")
print("head 0's pattern, rows 0..4:\n", patterns[0, :5, :5].round(2))
assert (above == 0.0).all()
assert (patterns[:, 0, 0] == 1.0).all() and np.abs(patterns.sum(-1) - 1).max() < 1e-14
assert min(np.abs(patterns[h] - patterns[j]).max() for h in range(H) for j in range(h)) > 0.1   # every pair

fig = figure(13, 3.9)
axes = fig.subplots(1, H)
future = np.triu(np.ones((L12, L12), dtype=bool), k=1)
for h, ax in enumerate(axes):
    ax.set_facecolor("0.85")                                             # masked cells show this grey
    image = ax.imshow(np.ma.masked_where(future, patterns[h]), cmap="viridis", vmin=0, vmax=1)
    ax.set(title=f"head {h}", xlabel="key position", xticks=range(0, L12, 2),
           yticks=range(0, L12, 2))
    if h == 0:
        ax.set_ylabel("query position")
fig.colorbar(image, ax=axes, shrink=0.85, label="attention weight")
fig.suptitle("Causal attention patterns of four heads (random weights; grey: the future, weight exactly 0)")
show(fig, OUT / "attention_patterns.png")

# %% [markdown]
# ## Check yourself
#
# 1. Why are the scores divided by $\sqrt{d_k}$?
#
#    <details><summary>Answer</summary>
#
#    A score is a sum of $d_k$ products, so with entries of variance 1 its variance is $d_k$: the scores spread as
#    $\sqrt{d_k}$, about 11 at $d_k = 128$. Unscaled, softmax saturates: at $d_k = 128$ the largest weight averages
#    more than 0.85, over 40 % of the rows put more than 99 % on one key, and the gradient is more than 15 times
#    smaller. Dividing brings the variance back to 1.
#
#    </details>
#
# 2. Why is the causal mask added as $-\infty$ before the softmax rather than applied as zeros after it?
#
#    <details><summary>Answer</summary>
#
#    Before the softmax, $e^{-\infty} = 0$ gives every future key a weight of exactly 0 and the row's weight is
#    spread over the keys that remain, so each row still sums to 1. Zeroing after the softmax leaves rows that sum to
#    less than 1: row 0 would keep only the 0.14 it gave itself.
#
#    </details>
#
# 3. Why does softmax subtract each row's maximum first?
#
#    <details><summary>Answer</summary>
#
#    It changes nothing mathematically, since the same factor cancels above and below, but it makes the largest
#    exponent $e^0 = 1$. Without it scores such as $[100, 99, 98]$ overflow float32 to $\infty / \infty$, NaN, and
#    scores near $-110$ underflow to $0 / 0$.
#
#    </details>
#
# 4. Merging the heads only puts their outputs side by side. What does the output projection $W_O$ add?
#
#    <details><summary>Answer</summary>
#
#    Mixing: attention's output is a sum of one contribution per head, $o_h W_{O,h}^\top$, each of the full width
#    $d_{model}$. Without $W_O$ each head would write only its own $d_{head}$ features.
#
#    </details>

# %% [markdown]
# ## Words from this lesson
#
# - **attention**: the sublayer in which each token gathers information from the other tokens, as a weighted sum of
#   the vectors they hand over, their values (§1)
# - **query**: the vector $q_i = W_Q x_i$ that says what token $i$ is looking for (§1)
# - **key**: the vector $k_i = W_K x_i$ that says what token $i$ can be found by (§1)
# - **attention weights**: the softmax of a query's scores, its dot products with the keys, positive and summing to 1
#   over the keys (§1)
# - **Jacobian**: the table of a function's partial derivatives, $\partial p_i / \partial s_j$ for the softmax (§3)
# - **saturate**: for a softmax, to put nearly all the weight on one entry, where its gradient nearly vanishes (§3)
# - **causal mask**: an $L \times L$ table added to the scores, 0 where key $j \le i$ and $-\infty$ where $j > i$,
#   so that no position reads the future (§4)
# - **stable softmax**: softmax computed after subtracting each row's maximum, so that no exponent overflows (§5)
# - **heads**: the $H$ slices of width $d_{head} = d_{model} / H$ into which attention cuts its queries, keys and
#   values, each running attention on its own (§6)
# - **d_head**: the width of one attention head, $d_{model} / H$; the $d_k$ of the scale (§6)
# - **output projection**: $W_O$ (`o_proj`), the linear map that mixes the merged heads into the $d_{model}$
#   numbers attention returns (§6)
# - **attention pattern**: one head's $L \times L$ table of attention weights, row $i$ for query position $i$ (§8)

# %% [markdown]
# ## Exercises
#
# 1. `attention`: scaled dot-product attention from tensor operations. Given q, k, v of shape (B, H, L, d_head),
#    `attention(q, k, v, causal)` returns softmax($q k^\top / \sqrt{d_{head}}$ + mask) $v$, with the causal mask
#    when `causal` is true. The checker compares with a numpy implementation and with the hand-derived gradient,
#    and it recognises the usual slips: a missing scale, the mask on the wrong triangle, the mask applied after
#    the softmax, a transpose of k that turns every axis instead of the last two, the softmax taken over the
#    queries, and the values summed along the wrong axis of the weights.
# 2. `stable_softmax`: `stable_softmax(x, axis)` is a softmax that stays finite for scores of ±1000 and gives
#    exactly 0 to entries of $-\infty$ (masked keys), along any axis. Its gradient must be the Jacobian product
#    $p \odot (g - p \cdot g)$.
# 3. `head_contributions`: split attention's output into one $d_{model}$-wide contribution per head (section 7).
#    Given the heads' outputs `weighted`, (B, H, L, d_head), and `o_weight`, which is `o_proj.weight` (stored
#    (out, in)), `head_contributions(weighted, o_weight)` returns a tensor (H, B, L, d_model) whose sum over
#    heads is the output projection of the merged heads.
#
# `python -m tinygrad_block exercise 06` writes `exercise_06.py` with the three functions to fill in;
# `python -m tinygrad_block check 06` checks them and says what is wrong.
