# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 02 — The transformer block, one piece at a time
#
# A Llama-style model is one block repeated (32 times in Llama-2-7B, 80 in Llama-2-70B) between an embedding
# and an output layer. This lesson takes the block apart on the `tiny` preset ($d_{model} = 64$, 4 query heads
# sharing 2 key/value heads, $d_{head} = 16$, $d_{ff} = 172$), on a batch of $B = 2$ sequences of $L = 8$
# tokens, in float64. Each claim is checked by running the code:
#
# 1. the block is two residual adds, so the stream it carries is a **sum of contributions**;
# 2. RMSNorm and LayerNorm put each token on a **sphere**;
# 3. attention, **shape by shape**: RoPE sees only relative positions, a KV head serves a group of query
#    heads, and no token reads the future;
# 4. the SwiGLU feed-forward network, and the curriculum's worked example recomputed;
# 5. the gradients three ways (autograd, the hand-derived backward, finite differences), and the residual
#    **gradient highway**;
# 6. the four classic mistakes, run next to the right code.
#
# Run it: `python lessons/02_the_block.py`. Every number stated below is asserted in `main()`.

# %%
import math

import numpy as np

import tinygrad_block as tb
from tinygrad_block import manual, nn
from tinygrad_block.manual import pitfalls

CFG = nn.preset("tiny")
B, L = 2, 8


def tiny_block(seed: int = 0):
    """The tiny block in float64 and an input x of shape (B, L, d_model), both drawn from one seeded generator."""
    g = tb.Generator(seed)
    block = nn.TransformerBlock(CFG, generator=g, dtype=tb.float64)
    return block, tb.randn(B, L, CFG.d_model, generator=g, dtype=tb.float64)


def rel_diff(a, b) -> float:
    """Largest |a - b|, relative to the largest |b|."""
    return float(np.abs(a - b).max() / np.abs(b).max())


# %% [markdown]
# ## 1. Two residual adds, and the stream they carry
#
# The pre-norm block, as `nn.TransformerBlock.forward` writes it:
#
# $$h = x + \mathrm{attn}(\mathrm{norm}_1(x)), \qquad \mathrm{out} = h + \mathrm{ffn}(\mathrm{norm}_2(h)).$$
#
# Each sublayer reads a normalised copy of the stream and *adds* what it computes; nothing overwrites the
# stream. So after any number of blocks the stream is the input plus one contribution per sublayer:
#
# $$x^{(n)} = x^{(0)} + \sum_{\ell=1}^{n} \big(\Delta^{(\ell)}_{attn} + \Delta^{(\ell)}_{ffn}\big).$$
#
# Every $\Delta$ has the stream's own shape, (2, 8, 64): all sublayers read from and write to the same
# 64-dimensional space, which is why "what did layer 5 add?" is a question you can ask of a trained model.
# Below, the two blocks of the tiny preset run in sequence, each sublayer's output is kept, and
# $x + \Delta_1 + \Delta_2 + \Delta_3 + \Delta_4$ equals the output of the stack to the last bit.


# %%
def residual_stream():
    g = tb.Generator(0)
    blocks = [nn.TransformerBlock(CFG, generator=g, dtype=tb.float64) for _ in range(CFG.n_layers)]
    x = tb.randn(B, L, CFG.d_model, generator=g, dtype=tb.float64)
    stream, deltas = x, []
    for block in blocks:
        deltas.append(block.attn(block.norm1(stream)))   # what attention writes
        stream = stream + deltas[-1]
        deltas.append(block.ffn(block.norm2(stream)))    # what the FFN writes
        stream = stream + deltas[-1]
    out = x
    for block in blocks:
        out = block(out)
    total = x
    for delta in deltas:
        total = total + delta
    return out.numpy(), total.numpy(), [d.shape for d in deltas]


# %% [markdown]
# ## 2. RMSNorm and LayerNorm put tokens on a sphere
#
# Both norms act on each token's vector alone. With unit gain (and, for the exact picture, $\varepsilon = 0$):
#
# $$\mathrm{RMSNorm}(x) = \frac{x}{\sqrt{\tfrac1d \sum_i x_i^2}} = \sqrt{d}\,\frac{x}{\lVert x\rVert},$$
#
# the direction of $x$ kept and its length set to $\sqrt d$: every token lands on the sphere of radius
# $\sqrt{64} = 8$. LayerNorm first subtracts the token's mean, which moves it onto the hyperplane
# $\sum_i x_i = 0$, then does the same: its output has zero mean *and* length 8. In fact
# $\mathrm{LayerNorm}(x) = \mathrm{RMSNorm}(x - \bar x)$, so on a stream whose tokens already have mean about
# zero the two nearly agree, and RMSNorm saves the extra reduction; Llama uses it.
#
# We feed tokens with a mean of about 3, so the centring matters; each of these statements holds to 12 decimal
# places. With the default $\varepsilon = 10^{-5}$ the radius is $\sqrt d \sqrt{m/(m + \varepsilon)}$,
# $m = \tfrac1d\sum_i x_i^2$: a hair inside the sphere.


# %%
def norm_geometry():
    d = CFG.d_model
    x = tb.randn(B, L, d, generator=tb.Generator(1), dtype=tb.float64) * 2.0 + 3.0   # token means about 3
    rms = nn.RMSNorm(d, eps=0.0, dtype=tb.float64)
    ln = nn.LayerNorm(d, eps=0.0, dtype=tb.float64)
    xs, r, n = x.numpy(), rms(x).numpy(), ln(x).numpy()
    cosine = (r * xs).sum(-1) / (np.linalg.norm(r, axis=-1) * np.linalg.norm(xs, axis=-1))
    centred = rms(x - x.mean(axis=-1, keepdims=True)).numpy()
    m = (xs * xs).mean(-1)
    with_eps = np.linalg.norm(nn.RMSNorm(d, dtype=tb.float64)(x).numpy(), axis=-1)
    return {"rms radius": np.linalg.norm(r, axis=-1), "cosine": cosine, "ln mean": n.mean(-1),
            "ln radius": np.linalg.norm(n, axis=-1), "ln vs rms(centred)": np.abs(n - centred).max(),
            "input means": xs.mean(-1), "eps radius": with_eps,
            "eps radius error": np.abs(with_eps - math.sqrt(d) * np.sqrt(m / (m + 1e-5)))}


# %% [markdown]
# ## 3. Attention, shape by shape
#
# Here is `nn.Attention.forward` again, step by step, with every intermediate kept. For the tiny preset the
# shapes are:
#
# | step | shape |
# |---|---|
# | `a = norm1(x)` | (2, 8, 64) |
# | `q = q_proj(a)` | (2, 8, 64) — 4 heads × 16 |
# | `k = k_proj(a)`, `v = v_proj(a)` | (2, 8, 32) — only 2 KV heads × 16 |
# | split heads: `reshape(B, L, heads, d_head).transpose(1, 2)` | q (2, 4, 8, 16); k, v (2, 2, 8, 16) |
# | RoPE on q and k (not v) | unchanged |
# | `repeat_kv`: each KV head copied for its 2 query heads | k, v (2, 4, 8, 16) |
# | scores $q k^\top / \sqrt{16}$, plus the causal mask | (2, 4, 8, 8) |
# | `softmax(scores) @ v` | (2, 4, 8, 16) |
# | merge heads: `transpose(1, 2).reshape(B, L, 64)` | (2, 8, 64) |
# | `o_proj` | (2, 8, 64) |
#
# and the result is the same array `block.attn` computes.


# %%
def causal_mask(n: int) -> tb.Tensor:
    """(n, n): 0 where key j <= query i, -inf where j > i (the future)."""
    return tb.tensor(np.triu(np.full((n, n), -np.inf), k=1), dtype=tb.float64)


def attention_by_hand(attn, a, offset: int = 0):
    """attn(a, offset) written out; returns the output and every intermediate, by name."""
    H, H_kv, d_head = CFG.n_heads, CFG.n_kv_heads, CFG.d_head
    s = {"a": a, "q": attn.q_proj(a), "k": attn.k_proj(a), "v": attn.v_proj(a)}
    s["q heads"] = s["q"].reshape(B, L, H, d_head).transpose(1, 2)        # (B, H, L, d_head)
    s["k heads"] = s["k"].reshape(B, L, H_kv, d_head).transpose(1, 2)     # (B, H_kv, L, d_head)
    s["v heads"] = s["v"].reshape(B, L, H_kv, d_head).transpose(1, 2)     # (B, H_kv, L, d_head)
    cos, sin = nn.rope_tables(offset + L, d_head, CFG.rope_theta, tb.float64, "cpu")
    cos, sin = cos[offset:], sin[offset:]                                 # (L, d_head): positions offset..
    s["q rotated"] = nn.apply_rope(s["q heads"], cos, sin)
    s["k rotated"] = nn.apply_rope(s["k heads"], cos, sin)
    s["k repeated"] = nn.repeat_kv(s["k rotated"], H // H_kv)             # (B, H, L, d_head)
    s["v repeated"] = nn.repeat_kv(s["v heads"], H // H_kv)               # (B, H, L, d_head)
    s["scores"] = (s["q rotated"] / math.sqrt(d_head)) @ s["k repeated"].mT   # (B, H, L, L)
    s["masked"] = s["scores"] + causal_mask(L)                            # -inf above the diagonal
    s["weighted"] = s["masked"].softmax(axis=-1) @ s["v repeated"]        # (B, H, L, d_head)
    s["merged"] = s["weighted"].transpose(1, 2).reshape(B, L, H * d_head)   # (B, L, d_model)
    s["out"] = attn.o_proj(s["merged"])
    return s["out"], s


# %% [markdown]
# ### RoPE sees only relative positions
#
# RoPE turns each pair of dimensions $(i, i + d_{head}/2)$ of a query or key at position $p$ by the angle
# $p\,\theta_i$, $\theta_i = 10000^{-2i/d_{head}}$. A dot product of two turned vectors depends only on the
# *difference* of their angles: $(R_m q)\cdot(R_n k) = q \cdot R_{n-m}\, k$. So if every position moves by the
# same amount (here 37: the sequence starts at position 37 instead of 0), the rotated queries change
# completely, yet every score stays the same (up to rounding, below $10^{-12}$). Values are not rotated, so the
# whole block's output doesn't move either: `block(x, offset=37)` equals `block(x)` to within $10^{-12}$.
#
# ### Grouped-query attention: one KV head per group
#
# With 4 query heads and 2 KV heads, `repeat_kv` hands KV head 0 to query heads 0 and 1 and KV head 1 to query
# heads 2 and 3 (query head $h$ reads KV head $h // 2$, as Hugging Face's Llama does). The copies are exact.
# `repeat_kv` is an `expand`, so its backward *sums*: the gradient reaching KV head 0 is the sum of what query
# heads 0 and 1 send back. Keep that in mind for pitfall 4.
#
# ### Causality: no token reads the future
#
# The mask puts $-\infty$ on every score of a key after its query, so softmax gives those keys weight exactly
# 0. Change every number of token 5 and run the whole block again: the outputs at positions 0 to 4 do not
# change at all (difference exactly 0), while positions 5, 6 and 7, which may read token 5, all change.


# %%
def rope_shift(block, x, shift: int = 37):
    a = block.norm1(x)
    _, at0 = attention_by_hand(block.attn, a)
    _, shifted = attention_by_hand(block.attn, a, offset=shift)
    return (np.abs(shifted["q rotated"].numpy() - at0["q rotated"].numpy()).max(),
            np.abs(shifted["scores"].numpy() - at0["scores"].numpy()).max(),
            np.abs(block(x, offset=shift).numpy() - block(x).numpy()).max())


def gqa_groups(steps):
    k, k_rep = steps["k rotated"].numpy(), steps["k repeated"].numpy()
    serves = [next(j for j in range(CFG.n_kv_heads) if np.array_equal(k_rep[:, h], k[:, j]))
              for h in range(CFG.n_heads)]
    kv = steps["k rotated"].detach().requires_grad_()
    g = tb.randn(*k_rep.shape, generator=tb.Generator(2), dtype=tb.float64)
    nn.repeat_kv(kv, 2).backward(g)
    group_sum = g.numpy()[:, 0::2] + g.numpy()[:, 1::2]                   # query heads (0, 1) and (2, 3)
    return serves, np.abs(kv.grad.numpy() - group_sum).max()


def causality(block, x, j: int = 5):
    changed = x.numpy().copy()
    changed[:, j] += 1.0                                                  # every feature of token j
    diff = np.abs(block(tb.tensor(changed, dtype=tb.float64)).numpy() - block(x).numpy())
    return diff.max(axis=(0, 2))                                          # per position


# %% [markdown]
# ## 4. The SwiGLU feed-forward network
#
# $$\mathrm{ffn}(x) = W_{down}\big(\mathrm{SiLU}(W_{gate}\,x) \odot W_{up}\,x\big), \qquad
# \mathrm{SiLU}(z) = z\,\sigma(z) = \frac{z}{1 + e^{-z}}.$$
#
# The up projection carries the content; the gate, through SiLU, decides per hidden unit how much of it
# passes. Three matrices instead of the classic two, so Llama narrows the hidden width from $4d$ to about
# $\tfrac83 d$: the tiny preset's three $64 \times 172$ matrices hold 33,024 weights, the classic two
# $64 \times 256$ hold 32,768.
#
# SiLU is not monotonic: it dips below zero, to a minimum of about $-0.278$ near $z = -1.278$ (found below by
# bisection on the hand-derived derivative $\sigma(z)\,(1 + z(1 - \sigma(z)))$), and is 0 at $z = 0$.
#
# ### The worked example of the curriculum (004), recomputed
#
# $x = [1, -0.5, 0.2, 0.8]$, $d_{model} = 4$, $d_{ff} = 3$, with the document's $W_{gate}$ and $W_{up}$
# (written there as $x W$; our weights are stored (out, in), so they go in transposed). `manual.swiglu_forward`
# gives:
#
# | | ours | 004 |
# |---|---|---|
# | gate | [0.62, −0.52, 0.46] | same |
# | up | [0.73, −0.01, −0.41] | same |
# | σ(gate) | [0.650219, 0.372852, 0.613014] | [**0.6504**, 0.3729, 0.6130] |
# | SiLU(gate) | [0.4031, −0.1939, 0.2820] | [**0.4033**, −0.1939, 0.2820] |
# | hidden = SiLU(gate) ⊙ up | [0.2943, 0.0019, −0.1156] | [**0.2944**, 0.0019, −0.1156] |
#
# (gate and up agree to 12 decimal places; the rest are rounded as printed.)
#
# The document slips at σ(0.62): $1/(1 + e^{-0.62})$ is 0.650219, not 0.6504. The error carries into
# SiLU(0.62) = 0.4031 and hidden[0] = 0.2943; its 0.4033 does not even follow from its own 0.6504
# ($0.62 \times 0.6504 = 0.4032$). The other entries are right. (It gives no $W_{down}$, so the example stops
# at the hidden vector.)


# %%
def swiglu_worked_example():
    x = np.array([[[1.0, -0.5, 0.2, 0.8]]])                              # (1, 1, d_model = 4)
    w_gate = np.array([[0.5, -0.3, 0.1], [0.2, 0.4, -0.2], [-0.1, 0.3, 0.5], [0.3, -0.1, 0.2]])   # 004's (in, out)
    w_up = np.array([[0.4, 0.2, -0.1], [-0.3, 0.5, 0.3], [0.1, -0.2, 0.4], [0.2, 0.1, -0.3]])
    params = {"gate_proj.weight": w_gate.T, "up_proj.weight": w_up.T, "down_proj.weight": np.eye(4, 3)}
    _, cache = manual.swiglu_forward(x, params)
    gate, sigma = cache["silu"]
    return {"gate": gate[0, 0], "up": cache["up"][0, 0], "sigma": sigma[0, 0], "silu": cache["act"][0, 0],
            "hidden": cache["act"][0, 0] * cache["up"][0, 0]}


def silu_minimum():
    """Bisect the derivative silu'(z) = sigma(z) (1 + z (1 - sigma(z))) on [-2, -1], where it changes sign."""
    def slope(z):
        return manual.silu_backward(np.array(1.0), manual.silu_forward(np.array(z))[1])
    lo, hi = -2.0, -1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if slope(mid) < 0 else (lo, mid)
    return lo, float(manual.silu_forward(np.array(lo))[0])


# %% [markdown]
# ## 5. Gradients three ways, and the highway
#
# `manual.block_backward` is the block's backward pass derived by hand in plain numpy: at each residual add the
# gradient is copied down both paths, and where the paths meet the two gradients are summed
# ($\partial\mathcal L/\partial h = g + \text{(the FFN path's gradient)}$, and again at $x$). For the loss
# $\sum \mathrm{out} \odot g$ with a random $g$, autograd and the hand-derived pass agree on the gradient of
# $x$ and of all nine weight tensors to better than $10^{-14}$, relative: float64 rounding, nothing more.
#
# Neither is trusted without an independent oracle. `tb.gradcheck` nudges each entry of an input by
# $\pm h, \pm 2h$ and compares autograd with the four-point finite difference (lesson 01). It costs four
# forward passes per entry, so we check one sequence, x of shape (1, 8, 64): 512 entries, 2,048 runs of the
# block; and the gain of `norm1`, whose gradient comes back through the whole of attention.
#
# **The highway.** Since $\partial(h + f(h))/\partial h = I + \partial f/\partial h$, the gradient of the input
# is the gradient of the output plus whatever the sublayers add. Set every sublayer weight to zero (the four
# attention projections and the three FFN matrices): then both sublayers output 0, the block is exactly the
# identity, and the input gradient equals the output gradient exactly. A stack of pre-norm blocks keeps this
# path from top to bottom, which is what lets 80 of them (Llama-2-70B) train.


# %%
def gradients_three_ways():
    block, x = tiny_block()
    x.requires_grad = True
    g = tb.randn(B, L, CFG.d_model, generator=tb.Generator(3), dtype=tb.float64)
    block(x).backward(g)
    params = {name: p.numpy() for name, p in block.named_parameters()}
    _, cache = manual.block_forward(x.numpy(), params, CFG)
    dx, grads = manual.block_backward(g.numpy(), cache)
    diffs = {"x": rel_diff(x.grad.numpy(), dx)}
    diffs.update({name: rel_diff(p.grad.numpy(), grads[name]) for name, p in block.named_parameters()})
    return diffs


def gradcheck_block():
    block, _ = tiny_block()
    x1 = tb.randn(1, L, CFG.d_model, generator=tb.Generator(4), dtype=tb.float64, requires_grad=True)
    x_ok = tb.gradcheck(block, x1)
    gain = block.norm1.weight

    def block_of_gain(w):                     # the block as a function of norm1's gain alone
        block.norm1.weight = w
        return block(x1.detach())
    try:
        gain_ok = tb.gradcheck(block_of_gain, gain.detach().requires_grad_())
    finally:
        block.norm1.weight = gain
    return x1.size, x_ok, gain_ok


SUBLAYER_WEIGHTS = ("attn.q_proj.weight", "attn.k_proj.weight", "attn.v_proj.weight", "attn.o_proj.weight",
                    "ffn.gate_proj.weight", "ffn.up_proj.weight", "ffn.down_proj.weight")


def highway():
    block, x = tiny_block()
    block.load_state_dict({name: tb.zeros_like(p) if name in SUBLAYER_WEIGHTS else p.detach()
                           for name, p in block.named_parameters()})
    x.requires_grad = True
    g = tb.randn(B, L, CFG.d_model, generator=tb.Generator(3), dtype=tb.float64)
    out = block(x)
    out.backward(g)
    return np.abs(out.numpy() - x.numpy()).max(), np.abs(x.grad.numpy() - g.numpy()).max()


# %% [markdown]
# ## 6. Four mistakes, run next to the right code
#
# `manual.pitfalls` keeps the four mistakes 004 warns about, each with the signature of the function it spoils.
# All four run without complaint; each gets its result wrong by more than 30 % (relative to the right answer's
# largest entry), and only a comparison catches it. The right answers come from the hand-derived pairs that
# section 5 just held to autograd.
#
# 1. **Post-norm in place of pre-norm**: $h = \mathrm{norm}_1(x + \mathrm{attn}(x))$, the 2017 layout (003's
#    "big picture" formula is this one; BERT uses it). The norm now sits on the stream itself: every token
#    leaving the block has RMS about 1 (just under, by $\varepsilon$), whereas the pre-norm block's output is
#    not normalised at all, and the highway of section 5 passes through two norm backwards.
# 2. **RoPE before the head split**: rotating the flat projection (64 wide for q) pairs dimension $i$ with
#    $i + 32$, which belongs to another head, and turns it at frequencies meant for a head as wide as the whole
#    projection. Attention's output is wrong.
# 3. **A dropped residual gradient**: at $\mathrm{out} = h + \mathrm{ffn}(\mathrm{norm}_2(h))$ only the FFN
#    path's gradient is passed to $h$. The FFN's and `norm2`'s gradients are still exactly right (they sit
#    after the mistake); the input's, attention's and `norm1`'s are all wrong.
# 4. **K/V gradients reshaped with $d_{model}$**: MHA code reused under GQA. Per query head, dK has shape
#    (2, 4, 8, 16); the right code first sums each group of 2 into (2, 2, 8, 16) and flattens to
#    $2 \times 16 = 32$ columns. 004 writes the mistake as `reshape(B, L, d_model)` on the summed gradient
#    and says it "silently produces wrong results or fails". Under GQA it always fails, loudly: 512 numbers do
#    not fill (2, 8, 64). It runs silently only if the group sum is skipped too (4 heads × 16 = 64 columns
#    fit), and that is the version `pitfalls` keeps: each KV head then gets one query head's gradient instead
#    of its group's sum. The query and output projections' gradients are untouched.


# %%
def pitfall_post_norm(block, x):
    params = {name: p.numpy() for name, p in block.named_parameters()}
    right, _ = manual.block_forward(x.numpy(), params, CFG)
    wrong, _ = pitfalls.post_norm_instead_of_pre_norm(x.numpy(), params, CFG)
    return rel_diff(wrong, right), np.sqrt((right * right).mean(-1)), np.sqrt((wrong * wrong).mean(-1))


def attention_params(block):
    return {name.removeprefix("attn."): p.numpy() for name, p in block.named_parameters() if name.startswith("attn.")}


def pitfall_rope_before_split(block, x):
    a, params = block.norm1(x).numpy(), attention_params(block)
    right, _ = manual.attention_forward(a, params, CFG.n_heads, CFG.n_kv_heads, True, CFG.rope_theta)
    wrong, _ = pitfalls.rope_before_head_split(a, params, CFG.n_heads, CFG.n_kv_heads, True, CFG.rope_theta)
    return rel_diff(wrong, right)


def pitfall_dropped_residual(block, x):
    g = np.random.default_rng(5).standard_normal((B, L, CFG.d_model))
    params = {name: p.numpy() for name, p in block.named_parameters()}
    _, cache = manual.block_forward(x.numpy(), params, CFG)
    dx, grads = manual.block_backward(g, cache)
    wrong_dx, wrong = pitfalls.drop_residual_grad(g, cache)
    return rel_diff(wrong_dx, dx), {name: rel_diff(wrong[name], grads[name]) for name in grads}


def pitfall_kv_reshape(block, x):
    g = np.random.default_rng(6).standard_normal((B, L, CFG.d_model))
    a, params = block.norm1(x).numpy(), attention_params(block)
    _, cache = manual.attention_forward(a, params, CFG.n_heads, CFG.n_kv_heads, True, CFG.rope_theta)
    _, grads = manual.attention_backward(g, cache)
    _, wrong = pitfalls.kv_grad_reshaped_with_d_model(g, cache)
    summed_dk = np.zeros((B, CFG.n_kv_heads, L, CFG.d_head))             # the shape 004's line reshapes
    try:
        summed_dk.transpose(0, 2, 1, 3).reshape(B, L, CFG.d_model)
        literal_line = "ran"
    except ValueError:
        literal_line = "ValueError"
    return {name: rel_diff(wrong[name], grads[name]) for name in grads}, summed_dk.size, literal_line


# %%
def main():
    assert nn.preset("llama2-7b").n_layers == 32 and nn.preset("llama2-70b").n_layers == 80
    out, total, delta_shapes = residual_stream()
    assert np.array_equal(out, total) and len(delta_shapes) == 4
    assert all(s == (B, L, CFG.d_model) == (2, 8, 64) for s in delta_shapes)
    print(f"1. two blocks: output == x + sum of {len(delta_shapes)} sublayer contributions, each {delta_shapes[0]}, "
          "bit for bit")

    geo = norm_geometry()
    assert CFG.d_model == 64 and math.sqrt(CFG.d_model) == 8.0
    assert np.abs(geo["rms radius"] - 8.0).max() < 1e-12 and np.abs(geo["cosine"] - 1.0).max() < 1e-12
    assert np.abs(geo["ln mean"]).max() < 1e-12 and np.abs(geo["ln radius"] - 8.0).max() < 1e-12
    assert geo["ln vs rms(centred)"] < 1e-12 and abs(geo["input means"].mean() - 3.0) < 0.5
    assert geo["eps radius error"].max() < 1e-12 and (geo["eps radius"] < 8.0).all()
    print(f"2. token means {geo['input means'].min():.2f}..{geo['input means'].max():.2f}; RMSNorm: length "
          f"{geo['rms radius'].min():.12f}, direction kept (cosine {geo['cosine'].min():.12f}); LayerNorm: mean "
          f"{np.abs(geo['ln mean']).max():.0e}, length {geo['ln radius'].max():.12f}, = RMSNorm(x - mean) to "
          f"{geo['ln vs rms(centred)']:.1g}")

    block, x = tiny_block()
    attn_out, steps = attention_by_hand(block.attn, block.norm1(x))
    shapes = {name: t.shape for name, t in steps.items()}
    assert (CFG.n_heads, CFG.n_kv_heads, CFG.d_head, CFG.d_ff) == (4, 2, 16, 172)
    assert shapes == {"a": (2, 8, 64), "q": (2, 8, 64), "k": (2, 8, 32), "v": (2, 8, 32),
                      "q heads": (2, 4, 8, 16), "k heads": (2, 2, 8, 16), "v heads": (2, 2, 8, 16),
                      "q rotated": (2, 4, 8, 16), "k rotated": (2, 2, 8, 16), "k repeated": (2, 4, 8, 16),
                      "v repeated": (2, 4, 8, 16), "scores": (2, 4, 8, 8), "masked": (2, 4, 8, 8),
                      "weighted": (2, 4, 8, 16), "merged": (2, 8, 64), "out": (2, 8, 64)}
    assert np.array_equal(attn_out.numpy(), block.attn(block.norm1(x)).numpy())
    print("3. attention shapes: " + ", ".join(f"{name} {shape}" for name, shape in shapes.items()))
    print("   the step-by-step attention equals block.attn exactly")

    q_moved, scores_moved, block_moved = rope_shift(block, x)
    assert CFG.rope_theta == 10000.0 and q_moved > 0.5 and scores_moved < 1e-12 and block_moved < 1e-12
    print(f"   positions shifted by 37: rotated q moves by up to {q_moved:.2f}, scores by {scores_moved:.0e}, "
          f"the block's output by {block_moved:.0e}")

    serves, group_grad_err = gqa_groups(steps)
    assert serves == [h // 2 for h in range(4)] == [0, 0, 1, 1] and group_grad_err == 0.0
    print(f"   GQA: query heads 0..3 read KV heads {serves}; KV head gradient = sum over its group "
          f"(difference {group_grad_err:g})")

    per_position = causality(block, x, j=5)
    assert (per_position[:5] == 0.0).all() and (per_position[5:] > 0.0).all()
    print(f"   token 5 changed: output change per position {np.array2string(per_position, precision=2)}")

    ex = swiglu_worked_example()
    assert np.abs(ex["gate"] - [0.62, -0.52, 0.46]).max() < 1e-12
    assert np.abs(ex["up"] - [0.73, -0.01, -0.41]).max() < 1e-12
    assert (ex["sigma"].round(6) == [0.650219, 0.372852, 0.613014]).all()
    assert (ex["silu"].round(4) == [0.4031, -0.1939, 0.2820]).all()
    assert (ex["hidden"].round(4) == [0.2943, 0.0019, -0.1156]).all()
    assert (ex["sigma"].round(4) == [0.6502, 0.3729, 0.6130]).all() and round(0.62 * 0.6504, 4) == 0.4032
    assert round(0.4033 * 0.73, 4) == 0.2944                              # 004's hidden[0] follows its 0.4033
    assert 3 * 64 * 172 == 33_024 and 2 * 64 * 256 == 32_768 and abs(172 - 8 / 3 * 64) < 2
    print(f"4. SwiGLU example: gate {ex['gate'].round(4)}, up {ex['up'].round(4)}, sigma {ex['sigma'].round(6)}, "
          f"SiLU {ex['silu'].round(4)}, hidden {ex['hidden'].round(4)}")
    z_min, silu_min = silu_minimum()
    assert abs(z_min - (-1.278)) < 5e-4 and abs(silu_min - (-0.278)) < 5e-4
    assert float(manual.silu_forward(np.array(0.0))[0]) == 0.0
    print(f"   SiLU's minimum: {silu_min:.6f} at z = {z_min:.6f}")

    diffs = gradients_three_ways()
    assert len(diffs) == 10 and max(diffs.values()) < 1e-14 and len(SUBLAYER_WEIGHTS) == 7
    print(f"5. autograd vs hand-derived backward, worst relative difference over x and 9 weights: "
          f"{max(diffs.values()):.1e}")
    n, x_ok, gain_ok = gradcheck_block()
    assert n == 512 and 4 * n == 2048 and x_ok and gain_ok
    print(f"   tb.gradcheck (finite differences): x of {n} entries passed, norm1's gain passed")
    out_vs_x, dx_vs_dout = highway()
    assert out_vs_x == 0.0 and dx_vs_dout == 0.0
    print(f"   sublayer weights zero: |out - x| = {out_vs_x:g}, |dx - dout| = {dx_vs_dout:g}")

    off, rms_right, rms_wrong = pitfall_post_norm(block, x)
    assert off > 0.3 and np.abs(rms_wrong - 1.0).max() < 1e-5 and (rms_wrong < 1.0).all()
    assert np.abs(rms_right - 1.0).max() > 0.05
    print(f"6. post-norm: off by {off:.2f}; output RMS per token {rms_wrong.min():.6f}..{rms_wrong.max():.6f} "
          f"(pre-norm: {rms_right.min():.2f}..{rms_right.max():.2f})")
    off = pitfall_rope_before_split(block, x)
    assert off > 0.3
    print(f"   RoPE before the head split: attention output off by {off:.2f}")
    off_dx, off_grads = pitfall_dropped_residual(block, x)
    after = ("norm2.weight", "ffn.gate_proj.weight", "ffn.up_proj.weight", "ffn.down_proj.weight")
    assert off_dx > 0.3 and all(off_grads[name] == 0.0 for name in after)
    assert all(v > 0.3 for name, v in off_grads.items() if name not in after)
    print(f"   dropped residual gradient: dx off by {off_dx:.2f}; norm1 and attention weights off by "
          f"{min(v for k, v in off_grads.items() if k not in after):.2f} or more; FFN and norm2 exact")
    off_kv, size, literal_line = pitfall_kv_reshape(block, x)
    assert off_kv["k_proj.weight"] > 0.3 and off_kv["v_proj.weight"] > 0.3
    assert off_kv["q_proj.weight"] == 0.0 and off_kv["o_proj.weight"] == 0.0
    assert size == 512 and B * L * CFG.d_model == 1024 and literal_line == "ValueError"
    assert CFG.n_heads * CFG.d_head == 64 and CFG.d_model // 2 == 32
    print(f"   K/V gradients reshaped with d_model: k_proj off by {off_kv['k_proj.weight']:.2f}, v_proj by "
          f"{off_kv['v_proj.weight']:.2f}, q_proj and o_proj exact; 004's literal line raises {literal_line}")


if __name__ == "__main__":
    main()
