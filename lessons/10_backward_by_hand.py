# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 10 — The block's backward by hand
#
# Autograd hands us every gradient of the block without a single derivative written down. This lesson writes them
# anyway, piece by piece, because that is how you read a gradient bug, check a fused kernel, or see why a block
# trains at all. (A **kernel** is one program that a GPU runs over whole tensors, usually for a single op; a
# **fused** kernel does several steps of the block, forward or backward, in one such program, so its gradients
# are written by hand and must be checked against autograd. Lesson 16 counts what fusion saves, and lesson 18
# builds fused kernels.) Every piece is checked three ways, and the classic mistakes are run next to the right
# code: none of them raises an error, and each is plainly wrong once it is compared with the right answer.
#
# **What you will learn**
# - hand-derived pairs: a forward that returns its output and a cache, a backward that takes the output's
#   gradient and the cache; the whole block checked against autograd and finite differences in float64;
# - split and merge at a residual: the gradient of $h + F(h)$ is $g + J_F^\top g$, the identity path plus the
#   branch, measured term by term on the block;
# - SwiGLU's backward: the product rule at the gate, SiLU's derivative $\sigma(z)\,(1 + z(1 - \sigma(z)))$,
#   and two branches that meet at the input;
# - the group sum under GQA: the gradient of a key/value head is the sum over the query heads that share it;
# - RoPE's backward: the rotation by minus the angle, and why a test at position 0 cannot tell the two apart;
# - the four classic pitfalls and three more slips, each run wrong, with the size of its error and a map of
#   which gradients it spoils;
# - the gradient check, drawn: each module's backward coloured by how far autograd is from its hand-derived pair,
#   so a planted slip lights up the module where it lives.
#
# Run it as a script, `python -m tinygrad_block lesson 10`, or as a notebook,
# `python -m tinygrad_block lesson 10 --notebook --execute` (it lands beside this file).

# %%
import numpy as np

import tinygrad_block as tb
from tinygrad_block import manual, nn
from tinygrad_block.gradcheck import central_difference, rel_err
from tinygrad_block.manual import pitfalls
from tinygrad_block.pictures import figure

from course import out_dir, show

OUT = out_dir(10)          # lessons/out/10/: this lesson's pictures

# %% [markdown]
# ## 1. Hand-derived pairs, and the block three ways
#
# `tinygrad_block.manual` writes every piece of the block twice, in plain numpy and without autograd. The
# forward, `*_forward(...)`, returns the output and a **cache**: whatever its backward will need (the input of
# a matmul, $\sigma(z)$ of a SiLU, the softmax probabilities). The backward, `*_backward(dout, cache)`, takes
# `dout`, the gradient of the loss with respect to the output, and returns the gradients of the input and of
# the weights. A fused kernel's backward, written by hand, has this shape too. To test a backward we pick the
# loss $\mathcal L = \sum \mathrm{out} \odot \mathrm{dout}$ for a fixed random `dout`: then
# $\partial \mathcal L / \partial\,\mathrm{out}$ is exactly `dout`, and every number of the output takes part.
#
# Three ways to get the same gradients, each trusting something different:
#
# | | how | what it trusts |
# |---|---|---|
# | autograd | `block(x).backward(dout)`: every primitive's backward, chained (lesson 02) | the engine's rules |
# | by hand | `manual.block_forward`, then `manual.block_backward` | our derivations |
# | finite differences | nudge one number by $\pm h, \pm 2h$ and run the forward again (lesson 02) | only the forward |
#
# The tiny preset ($d_{model} = 64$, 4 query heads sharing 2 key/value heads of $d_{head} = 16$,
# $d_{ff} = 172$) on $B = 2$ sequences of $L = 8$ tokens, in float64. Finite differences cost four forward
# passes per number, so they check all 1,024 numbers of $x$, every number of both gains, and 16 random
# entries of each of the 7 weight matrices. By hand and autograd agree to about $10^{-16}$: the same
# arithmetic in another order. Finite differences agree with both to better than $10^{-8}$, relative, on every
# tensor.

# %%
CFG = nn.preset("tiny")
B, L = 2, 8
g = tb.Generator(0)
block = nn.TransformerBlock(CFG, generator=g, dtype=tb.float64)
x = tb.randn(B, L, CFG.d_model, generator=g, dtype=tb.float64, requires_grad=True)
dout = tb.randn(B, L, CFG.d_model, generator=tb.Generator(1), dtype=tb.float64)
block(x).backward(dout)                                                  # autograd
auto = {"x": x.grad.numpy(), **{name: p.grad.numpy() for name, p in block.named_parameters()}}

params = {name: p.numpy() for name, p in block.named_parameters()}
X, D = x.numpy(), dout.numpy()
out, cache = manual.block_forward(X, params, CFG)                        # by hand: the forward keeps a cache
dx, grads = manual.block_backward(D, cache)                              # ... the backward reads it
hand = {"x": dx, **grads}


def block_loss(name: str, value: np.ndarray) -> float:
    """sum(out * dout) of the hand-written forward, with x or one weight replaced by `value`."""
    weights = params if name == "x" else {**params, name: value}
    return float((manual.block_forward(value if name == "x" else X, weights, CFG)[0] * D).sum())


rng = np.random.default_rng(2)
errors = {"vs autograd": {}, "vs finite differences": {}}
print(f"{'tensor':22} {'shape':>12} {'max |grad|':>10} {'numbers checked':>15} {'vs autograd':>12} "
      f"{'vs finite diff':>15}")
for name, grad in hand.items():
    value = X if name == "x" else params[name]
    entries = ([tuple(int(i) for i in rng.integers(value.shape)) for _ in range(16)] if value.ndim == 2
               else list(np.ndindex(value.shape)))
    fd = central_difference(lambda v, name=name: block_loss(name, v), value.copy(), elements=entries)
    errors["vs autograd"][name] = rel_err(grad, auto[name])
    errors["vs finite differences"][name] = rel_err([grad[e] for e in entries], [fd[e] for e in entries])
    print(f"{name:22} {str(value.shape):>12} {np.abs(grad).max():10.4f} {len(entries):>15,} "
          f"{errors['vs autograd'][name]:12.1e} {errors['vs finite differences'][name]:15.1e}")
forward_diff = rel_err(out, block(x).numpy())
assert (CFG.d_model, CFG.n_heads, CFG.n_kv_heads, CFG.d_head, CFG.d_ff) == (64, 4, 2, 16, 172)
assert sum(value.ndim == 2 for value in params.values()) == 7
print(f"forward, by hand vs the module: {forward_diff:.1e}")
assert forward_diff < 1e-15 and len(hand) == 10 and X.size == 1024
assert max(errors["vs autograd"].values()) < 1e-14
assert max(errors["vs finite differences"].values()) <= 1e-8

# %% [markdown]
# ## 2. Split and merge at a residual
#
# The pre-norm block is two residual adds:
#
# $$h = x + \mathrm{attn}(\mathrm{norm}_1(x)), \qquad \mathrm{out} = h + \mathrm{ffn}(\mathrm{norm}_2(h)).$$
#
# Write the second as $\mathrm{out} = h + F(h)$ with $F = \mathrm{ffn} \circ \mathrm{norm}_2$. Its Jacobian is
# $I + J_F$, so with $g = \partial\mathcal L / \partial\,\mathrm{out}$:
#
# $$\frac{\partial \mathcal L}{\partial h} = g + J_F^\top g .$$
#
# In the backward pass this is a **split** and a **merge**. The add hands $g$, unchanged, to both of its inputs:
# that is the split, a copy with no arithmetic. (Code that updates gradients in place must make that copy; the
# pairs here never write into their inputs, so both paths can read the same array, and `dout` is left as it
# was.) One copy reaches $h$ directly (the identity path). The other
# runs back through the FFN and norm2 (the branch, $J_F^\top g$). $h$ was used twice, so its two gradients
# **add**: that is the merge. Then the same again one residual down, with attention and norm1:
# $\partial\mathcal L / \partial x = \partial\mathcal L / \partial h + J_A^\top\, \partial\mathcal L / \partial h$.
#
# Below, each term is computed on its own from the hand-derived pairs. Their sums are compared with autograd's
# gradient at $h$ (an intermediate tensor; `retain_grad` keeps its gradient) and at $x$, and with finite
# differences of the second half of the block, $h \mapsto \sum (h + F(h)) \odot g$, at all 1,024 numbers of
# $h$. Each agrees to better than $10^{-8}$.
#
# The sizes show the identity path at work (it is often called the gradient highway, drawn in lesson 11). The
# identity term is $g$ itself, whatever the weights are. The branches add corrections of comparable size here,
# at initialisation: $\partial\mathcal L/\partial x$ differs from $g$ by 81 % of $g$'s length. Scale the two
# output projections $W_O$ and $W_{down}$ by 0.01 and the branches shrink with them, while the identity path
# does not: the difference falls to 1.3 %. Then $\partial\mathcal L/\partial x \approx g$, and the gradient
# reaches the block's input whole.

# %%
d_f, _ = manual.swiglu_backward(D, cache["ffn"])                         # the branch at h: back through the FFN
branch_h, _ = manual.rmsnorm_backward(d_f, cache["norm2"])               # ... and norm2: J_F^T g
dh = D + branch_h                                                        # merge: identity + branch
d_a, _ = manual.attention_backward(dh, cache["attn"])                    # the branch at x: attention ...
branch_x, _ = manual.rmsnorm_backward(d_a, cache["norm1"])               # ... and norm1: J_A^T dh
dx_merged = dh + branch_x                                                # merge again

xa = x.detach().requires_grad_()
h = xa + block.attn(block.norm1(xa))                                     # autograd, keeping h's gradient
h.retain_grad()
(h + block.ffn(block.norm2(h))).backward(dout)
ffn_proj = [manual.Linear(params[f"ffn.{name}.weight"]) for name in ("gate_proj", "up_proj", "down_proj")]


def second_half(hv: np.ndarray) -> float:
    """sum((h + ffn(norm2(h))) * dout), from the hand-written forwards."""
    f, _ = manual.rmsnorm_forward(hv, params["norm2.weight"], CFG.norm_eps)
    return float(((hv + manual.swiglu_forward(f, *ffn_proj)[0]) * D).sum())


fd_h = central_difference(second_half, h.numpy().copy())
size = {name: float(np.linalg.norm(t)) for name, t in
        (("g", D), ("J_F^T g", branch_h), ("dL/dh", dh), ("J_A^T dh", branch_x), ("dL/dx", dx_merged))}
print("sizes (2-norm): " + ", ".join(f"|{k}| = {v:.2f}" for k, v in size.items()))
print(f"dL/dh: vs autograd {rel_err(dh, h.grad.numpy()):.1e}, vs finite differences {rel_err(dh, fd_h):.1e}")
print(f"dL/dx: vs autograd {rel_err(dx_merged, xa.grad.numpy()):.1e}, vs section 1 {rel_err(dx_merged, dx):.1e}")
assert rel_err(dh, h.grad.numpy()) < 1e-14 and rel_err(dh, fd_h) <= 1e-8
assert rel_err(dx_merged, xa.grad.numpy()) < 1e-14 and np.array_equal(dx_merged, dx)
assert np.array_equal(D, dout.numpy())                                   # no backward wrote into dout
assert 0.3 < size["J_F^T g"] / size["g"] < 3 and 0.3 < size["J_A^T dh"] / size["dL/dh"] < 3

small = {**params, "attn.o_proj.weight": 0.01 * params["attn.o_proj.weight"],
         "ffn.down_proj.weight": 0.01 * params["ffn.down_proj.weight"]}
dx_small, _ = manual.block_backward(D, manual.block_forward(X, small, CFG)[1])
away, away_small = rel_err(dx, D), rel_err(dx_small, D)
print(f"|dL/dx - g| / |g|: {away:.3f} as initialised, {away_small:.5f} with W_O and W_down scaled by 0.01")
assert round(away, 2) == 0.81 and round(away_small, 3) == 0.013

# %% [markdown]
# The whole backward of the block is those lines, in the reverse order of the forward. Here they are once more
# as one function, with its three pieces passed in, so that the next sections can swap one piece for a wrong
# one and watch what happens. Its result equals `manual.block_backward`'s bit for bit.

# %%
def block_backward(dout, cache, identity: bool = True, swiglu_backward=manual.swiglu_backward,
                   attention_backward=manual.attention_backward):
    """(dx, grads) of the pre-norm block from manual.block_forward's cache: at each residual the identity
    path plus the branch. identity=False drops the identity path at h; the two functions can be swapped."""
    d_f, g_ffn = swiglu_backward(dout, cache["ffn"])                     # cache["ffn"]: swiglu_forward's cache
    branch_h, g_norm2 = manual.rmsnorm_backward(d_f, cache["norm2"])     # cache["norm2"]: rmsnorm_forward's
    dh = (dout if identity else 0.0) + branch_h                          # merge at h
    d_a, g_attn = attention_backward(dh, cache["attn"])
    branch_x, g_norm1 = manual.rmsnorm_backward(d_a, cache["norm1"])
    grads = manual.flatten({"norm1": g_norm1, "attn": g_attn, "norm2": g_norm2, "ffn": g_ffn})   # named as params
    return dh + branch_x, grads                                          # merge at x


dx_mine, grads_mine = block_backward(D, cache)
same = np.array_equal(dx_mine, dx) and all(np.array_equal(grads_mine[k], grads[k]) for k in grads)
print(f"block_backward equals manual.block_backward bit for bit: {same}")
assert same and grads_mine.keys() == grads.keys()

# %% [markdown]
# ## 3. SwiGLU's backward
#
# The FFN is $y = m\,W_{down}^\top$ with $m = \mathrm{SiLU}(z) \odot u$, $z = f\,W_{gate}^\top$ and
# $u = f\,W_{up}^\top$, for $f = \mathrm{norm}_2(h)$ (weights stored (out, in), as in PyTorch). Going back from
# $dy$, one rule per line:
#
# | forward | backward |
# |---|---|
# | $y = m\,W_{down}^\top$ | $dm = dy\,W_{down}$, $\quad dW_{down} = dy^\top m$ |
# | $m = s \odot u$ | $du = dm \odot s$, $\quad ds = dm \odot u$ |
# | $s = \mathrm{SiLU}(z) = z\,\sigma(z)$ | $dz = ds \odot \mathrm{SiLU}'(z)$ |
# | $u = f\,W_{up}^\top$ | $dW_{up} = du^\top f$, $\quad df \mathrel{+}= du\,W_{up}$ |
# | $z = f\,W_{gate}^\top$ | $dW_{gate} = dz^\top f$, $\quad df \mathrel{+}= dz\,W_{gate}$ |
#
# At the product $m = s \odot u$ each factor gets the upstream gradient times the *other* factor. A weight's
# gradient such as $dy^\top m$ sums over every token of the batch, since all of them share the weight. $f$ feeds
# both the gate and the up projection, so its two gradients add ($\mathrel{+}=$), as at a residual. SiLU's
# derivative is the product rule again, on $z \cdot \sigma(z)$, with $\sigma'(z) = \sigma(z)(1 - \sigma(z))$:
#
# $$\mathrm{SiLU}'(z) = \sigma(z) + z\,\sigma(z)\,(1 - \sigma(z)) = \sigma(z)\,\big(1 + z\,(1 - \sigma(z))\big),$$
#
# computed from the $\sigma(z)$ the forward already kept. The function below is the table, line by line. It
# agrees with `manual.swiglu_backward` and with autograd (`block.ffn`) to rounding, about $10^{-16}$, and
# with finite differences at all 1,024 numbers of $f$ to better than $10^{-8}$.
#
# **A slip: $\mathrm{SiLU}' = \sigma$.** Forget the second term of the product rule and the backward still runs.
# What is missing, $z\,\sigma(z)(1 - \sigma(z))$, is 0 at $z = 0$ and at most 0.224 in size (at
# $z \approx \pm 1.54$), so a test whose gate inputs sit near zero barely sees it. On the tiny block it puts
# the FFN's input gradient off by 18 % and $dW_{gate}$ by 24 %. $dW_{up}$ and $dW_{down}$ stay exact: they
# never pass through SiLU'.

# %%
def swiglu_backward(dout, c, silu_prime=lambda z, s: s * (1.0 + z * (1.0 - s))):
    """SwiGLU's backward, one line per row of the table. c: manual.swiglu_forward's cache;
    silu_prime(z, sigma(z)): SiLU's derivative."""
    dm, g_down = manual.linear_backward(dout, c["down_proj"])            # (B, L, d_ff)
    z, s = c["silu"]                                                     # the gate's input, and sigma(z)
    du = dm * c["act"]                                                   # product rule: the other factor, SiLU(z)
    dz = dm * c["up"] * silu_prime(z, s)                                 # ... and u, then through SiLU
    df_gate, g_gate = manual.linear_backward(dz, c["gate_proj"])
    df_up, g_up = manual.linear_backward(du, c["up_proj"])
    return df_gate + df_up, {"gate_proj": g_gate, "up_proj": g_up, "down_proj": g_down}   # f fed both: they add


c_ffn = cache["ffn"]
f = c_ffn["gate_proj"][0]                                                # the FFN's input, norm2(h): (B, L, d_model)
df, g_ffn = swiglu_backward(D, c_ffn)
df_lib, g_lib = manual.swiglu_backward(D, c_ffn)
block.zero_grad()
ft = tb.tensor(f, requires_grad=True)
block.ffn(ft).backward(dout)                                             # autograd
fd_f = central_difference(lambda v: float((manual.swiglu_forward(v, *ffn_proj)[0] * D).sum()), f.copy())
print(f"SwiGLU df: vs manual.swiglu_backward {rel_err(df, df_lib):.1e}, "
      f"vs autograd {rel_err(df, ft.grad.numpy()):.1e}, vs finite differences {rel_err(df, fd_f):.1e}")
for k in g_ffn:
    print(f"  d{k}.weight: vs autograd {rel_err(g_ffn[k]['weight'], getattr(block.ffn, k).weight.grad.numpy()):.1e}")
assert rel_err(df, df_lib) < 1e-15 and all(rel_err(g_ffn[k]["weight"], g_lib[k]["weight"]) < 1e-15 for k in g_lib)
assert rel_err(df, ft.grad.numpy()) < 1e-14 and rel_err(df, fd_f) <= 1e-8 and f.size == 1024
assert all(rel_err(g_ffn[k]["weight"], getattr(block.ffn, k).weight.grad.numpy()) < 1e-14 for k in g_ffn)

zs = np.linspace(-10, 10, 400_001)
sig = 1 / (1 + np.exp(-zs))
missing = np.abs(zs * sig * (1 - sig))                                   # |SiLU'(z) - sigma(z)|
i_max = int(np.argmax(missing))
sigma_only = lambda z, s: s                                              # noqa: E731  (the slip)
df_slip, g_slip = swiglu_backward(D, c_ffn, silu_prime=sigma_only)
slip = {"df": rel_err(df_slip, df), **{f"{k}.weight": rel_err(g_slip[k]["weight"], g_ffn[k]["weight"]) for k in g_ffn}}
print(f"SiLU'(z) - sigma(z) = z sigma(z) (1 - sigma(z)): 0 at z = 0, at most {missing[i_max]:.3f} in size, at "
      f"z = +-{abs(zs[i_max]):.2f}")
print("with SiLU' = sigma: " + ", ".join(f"{k} off by {v:.0%}" if v else f"{k} exact" for k, v in slip.items()))
assert missing[200_000] == 0 and round(missing[i_max], 3) == 0.224 and round(abs(zs[i_max]), 2) == 1.54
assert round(slip["df"], 2) == 0.18 and round(slip["gate_proj.weight"], 2) == 0.24
assert slip["up_proj.weight"] == 0 and slip["down_proj.weight"] == 0

# %% [markdown]
# ## 4. The group sum under GQA
#
# The tiny block has $H = 4$ query heads and $H_{kv} = 2$ key/value heads, so each KV head serves a group of
# $G = H / H_{kv} = 2$ query heads. `repeat_kv` copies it for them: (B, $H_{kv}$, L, $d_{head}$) becomes
# (B, H, L, $d_{head}$), and query head $h$ reads KV head $h \,//\, G$. The groups are consecutive heads (0 and
# 1 read KV head 0, 2 and 3 read KV head 1), as in Hugging Face's Llama.
#
# Every number of KV head $j$ is used $G$ times, once per query head of its group, so its gradient is the sum of
# the $G$ gradients that come back:
#
# $$dK_j = \sum_{h = jG}^{jG + G - 1} dK^{\mathrm{rep}}_h .$$
#
# In array code that is one reshape to (B, $H_{kv}$, G, L, $d_{head}$) and a sum over the group axis
# (`manual.repeat_kv_backward`). In the engine `repeat_kv` is an expand, and an expand's backward is exactly this
# sum (lesson 03). The sum is the **transpose** of the copy, which the dot-product test shows without any
# calculus: $\langle \mathrm{repeat}(k), g\rangle = \langle k, \mathrm{repeat}^\top(g)\rangle$ for every $k$ and
# $g$.
#
# Two slips run without complaint, and both return the right shape:
# - taking the **first head** of each group, `g[:, ::G]`, as if the copy had been used once;
# - summing the **wrong heads**: every $H_{kv}$-th head instead of consecutive ones, `g.reshape(B, G, H_kv, L,
#   d).sum(1)`. That is the grouping of tiling (`np.tile`, head $h$ reading KV head $h \bmod H_{kv}$), not of
#   `repeat_kv`.
#
# On random gradients the first is off by 68 % and the second by 107 % (for $G = 2$ one expects about
# $1/\sqrt 2$ and 1: the first misses one of two equal-sized terms, the second swaps one for another). Under
# multi-head attention ($G = 1$) all three give exactly the same result, so a test on an MHA configuration cannot
# catch either of them.

# %%
H, H_kv, d_head = CFG.n_heads, CFG.n_kv_heads, CFG.d_head
G = H // H_kv
k = rng.standard_normal((B, H_kv, L, d_head))
gk = rng.standard_normal((B, H, L, d_head))                              # the gradient of the repeated keys
summed = manual.repeat_kv_backward(gk, G)                                # (B, H_kv, L, d_head)
by_loop = np.stack([sum(gk[:, h] for h in range(j * G, j * G + G)) for j in range(H_kv)], axis=1)
kt = tb.tensor(k, requires_grad=True)
nn.repeat_kv(kt, G).backward(tb.tensor(gk))                              # autograd: the expand's backward
dot_left, dot_right = float((manual.repeat_kv(k, G) * gk).sum()), float((k * summed).sum())
first = gk[:, ::G]
wrong_heads = gk.reshape(B, G, H_kv, L, d_head).sum(axis=1)
print(f"{gk.shape} -> {summed.shape}; query heads 0..{H - 1} read KV heads {[h // G for h in range(H)]}")
print(f"group sum vs a loop over heads {rel_err(summed, by_loop):.0e}, "
      f"vs autograd {rel_err(summed, kt.grad.numpy()):.0e}; "
      f"<repeat(k), g> = {dot_left:.10f}, <k, group sum> = {dot_right:.10f}")
print(f"slips: first head of each group off by {rel_err(first, summed):.0%}, the wrong heads summed off by "
      f"{rel_err(wrong_heads, summed):.0%}")
assert (H, H_kv, G) == (4, 2, 2)
assert np.array_equal(summed, by_loop) and np.array_equal(summed, kt.grad.numpy()) and abs(dot_left - dot_right) < 1e-12
assert round(rel_err(first, summed), 2) == 0.68 and round(rel_err(wrong_heads, summed), 2) == 1.07

g1 = rng.standard_normal((B, H, L, d_head))                              # MHA: G = 1
mha_same = np.array_equal(manual.repeat_kv_backward(g1, 1), g1[:, ::1]) and np.array_equal(
    manual.repeat_kv_backward(g1, 1), g1.reshape(B, 1, H, L, d_head).sum(axis=1))
print(f"under MHA (G = 1) the right sum and both slips agree exactly: {mha_same}")
assert mha_same

# %% [markdown]
# Attention's backward, written out from the pairs, shows where the group sum sits: after the backward of the
# weighted sum (for V) and of the softmax and the scores (for K) has handed back one gradient per query head,
# and before RoPE is undone (section 5). At the end, the normalised input $a = \mathrm{norm}_1(x)$ fed three
# projections, Q, K and V, so its three gradients add: the same merge as at a residual, three ways. The function
# takes the group sum and RoPE's backward as arguments, so that the slips can run inside the block; with the right
# ones it agrees with `manual.attention_backward` bit for bit.
#
# Inside the block, the first-head slip spoils the gradients of $W_K$ and $W_V$ and of everything the gradient
# reaches after them (norm1's gain and $x$), while $W_Q$, $W_O$ and the whole FFN stay exact.

# %%
def attention_backward(dout, c, group_sum=manual.repeat_kv_backward, rope_backward=manual.rope_backward):
    """(da, grads) of attention from manual.attention_forward's cache c; group_sum(d, G) and
    rope_backward(d, (cos, sin)) can be swapped."""
    d_o, g_o = manual.linear_backward(dout, c["o_proj"])                         # (B, L, H * d_head)
    dq, dk, dv = manual.sdpa_backward(manual.split_heads(d_o, c["n_heads"]), c["sdpa"])   # (B, H, L, d_head) each
    dk, dv = group_sum(dk, c["G"]), group_sum(dv, c["G"])                       # (B, H_kv, L, d_head)
    dq, dk = rope_backward(dq, c["rope"]), rope_backward(dk, c["rope"])         # undo the rotation
    da, grads = 0.0, {}
    for name, d in (("q_proj", dq), ("k_proj", dk), ("v_proj", dv)):            # a fed three projections:
        da_i, grads[name] = manual.linear_backward(manual.merge_heads(d), c[name])   # (B, L, d_model)
        da = da + da_i                                                           # their gradients add
    return da, {**grads, "o_proj": g_o}


da, g_attn = attention_backward(dh, cache["attn"])
da_lib, g_attn_lib = manual.attention_backward(dh, cache["attn"])
g_attn, g_attn_lib = manual.flatten(g_attn), manual.flatten(g_attn_lib)     # 'q_proj.weight', ...
same = np.array_equal(da, da_lib) and all(np.array_equal(g_attn[k], g_attn_lib[k]) for k in g_attn_lib)
print(f"attention_backward equals manual.attention_backward bit for bit: {same}")
assert same


def first_head(d, G):
    """The slip: the first query head of each group instead of the group's sum."""
    return d[:, ::G]


def spoiled_by(dx_wrong, grads_wrong) -> dict:
    """Relative error of a wrong backward's gradients against the right ones (section 1), per tensor."""
    return {"x": rel_err(dx_wrong, dx), **{name: rel_err(grads_wrong[name], grads[name]) for name in grads}}


def describe(errs: dict) -> str:
    return ", ".join(f"{name} {err:.0%}" if err else f"{name} exact" for name, err in errs.items())


first_in_block = spoiled_by(*block_backward(
    D, cache, attention_backward=lambda d, c: attention_backward(d, c, group_sum=first_head)))
print("first head of each group, in the block:", describe(first_in_block))
spoiled = {name for name, err in first_in_block.items() if err > 0}
assert spoiled == {"x", "norm1.weight", "attn.k_proj.weight", "attn.v_proj.weight"}
assert min(first_in_block[name] for name in spoiled) > 0.3

# %% [markdown]
# ## 5. RoPE's backward: the inverse rotation
#
# RoPE turns each pair $(x_i, x_{i + d_{head}/2})$ of a query or key at position $p$ by the angle
# $a = p\,\omega_i$, $\omega_i = \theta^{-2i/d_{head}}$ (lesson 07): $y = R(a)\,x$. It is linear in $x$, so its
# backward is its transpose, $dx = R(a)^\top dy$. A rotation is orthogonal, $R(a)^\top = R(a)^{-1} = R(-a)$: the
# backward **turns the gradient back by the same angle**. In the library's layout the forward is
# $y = x \cos + \mathrm{rotate\_half}(x) \sin$, where `rotate_half`, $(x_1, x_2) \mapsto (-x_2, x_1)$, is a
# quarter turn of every pair, and the transpose of a quarter turn is the quarter turn the other way. So
#
# $$dx = dy \cos - \mathrm{rotate\_half}(dy) \sin ,$$
#
# the forward with one sign flipped (`manual.rope_backward`). A second check needs no gradient at all: applied
# to $y$ itself, the backward must give back $x$.
#
# **A slip: the forward rotation on the gradient.** Flip that sign back and the gradient is turned by $+a$
# instead of $-a$: off by the angle $2a$. Pair $i$ at position $p$ is then wrong by $2\,|\sin(p\,\omega_i)|$ of
# its length. At position 0 every angle is 0 and the two agree exactly, so a test with a single token, or one
# that only looks at the first position, passes. From position 1 on the error is large, 68 % already there,
# since the fastest pair turns a whole radian per token; over the 64 positions below it averages 103 %.
# Inside the block it spoils $W_Q$, $W_K$, norm1's gain and $x$; $W_V$, $W_O$ and the FFN never pass through
# RoPE's backward and stay exact.

# %%
P = 64
q = rng.standard_normal((2, H, P, d_head))                               # queries at positions 0..63
y, rope_cache = manual.rope_forward(q, CFG.rope_theta)                   # rope_cache: cos, sin, each (P, d_head)
dy = rng.standard_normal(y.shape)
dq = manual.rope_backward(dy, rope_cache)                                # dy cos - rotate_half(dy) sin

half = d_head // 2
angle = np.arange(P)[:, None] * CFG.rope_theta ** (-2 * np.arange(half) / d_head)   # (P, d_head/2): a = p omega_i
c, s = np.cos(angle), np.sin(angle)
dy1, dy2 = dy[..., :half], dy[..., half:]
turned_back = np.concatenate([dy1 * c + dy2 * s, dy2 * c - dy1 * s], axis=-1)        # R(-a) dy, pair by pair
qt = tb.tensor(q, requires_grad=True)
cos_t, sin_t = nn.rope_tables(P, d_head, CFG.rope_theta, tb.float64, "cpu")
nn.apply_rope(qt, cos_t, sin_t).backward(tb.tensor(dy))                 # autograd
q8, dy8 = q[:1, :1, :8], dy[:1, :1, :8]                                  # finite differences on 128 numbers
fd_q = central_difference(lambda v: float((manual.rope_forward(v, CFG.rope_theta)[0] * dy8).sum()), q8.copy())
dq8 = manual.rope_backward(dy8, manual.rope_forward(q8, CFG.rope_theta)[1])
print(f"RoPE backward vs R(-a) pair by pair {rel_err(dq, turned_back):.1e}, "
      f"vs autograd {rel_err(dq, qt.grad.numpy()):.1e}, vs finite differences {rel_err(dq8, fd_q):.1e}")
print(f"the backward applied to y gives back x: {rel_err(manual.rope_backward(y, rope_cache), q):.1e}")
assert rel_err(dq, turned_back) < 1e-15 and rel_err(dq, qt.grad.numpy()) < 1e-15
assert rel_err(dq8, fd_q) <= 1e-8
assert rel_err(manual.rope_backward(y, rope_cache), q) < 1e-15

cos_c, sin_c = rope_cache
forward_again = dy * cos_c + manual.rotate_half(dy) * sin_c             # the slip: R(+a) dy


def norm_per_position(a: np.ndarray) -> np.ndarray:
    """(B, H, P, d_head) -> (P,): the 2-norm of everything at each position."""
    return np.sqrt((a * a).sum(axis=(0, 1, 3)))


per_position = norm_per_position(forward_again - dq) / norm_per_position(dq)     # (P,)
predicted = np.sqrt((4 * np.sin(angle) ** 2 * (dy1 ** 2 + dy2 ** 2)).sum(axis=(0, 1, 3))
                    / (dy ** 2).sum(axis=(0, 1, 3)))                     # 2 |sin a| per pair, weighted by length
right_per_position = norm_per_position(dq - qt.grad.numpy()) / norm_per_position(dq)
print(f"forward rotation on the gradient: off by {per_position[0]:g} at position 0, {per_position[1]:.0%} at 1, "
      f"{per_position.mean():.0%} on average over positions 0..{P - 1} (2|sin(p w_i)| per pair predicts it to "
      f"{np.abs(per_position - predicted).max():.0e})")
assert per_position[0] == 0 and np.abs(per_position - predicted).max() < 1e-12
assert round(per_position.mean(), 2) == 1.03 and round(per_position[1], 2) == 0.68 and per_position[1:].min() > 0.3

fig = figure(12, 4.4)
pair, turn = fig.subplots(1, 2, width_ratios=[1, 1.7])
a0 = 1.0                                                                 # pair 0 at position 1: one radian
g0 = np.array([0.9, 0.45])                                               # a gradient arriving at y, for one pair
rot = lambda v, t: np.array([v[0] * np.cos(t) - v[1] * np.sin(t), v[0] * np.sin(t) + v[1] * np.cos(t)])  # noqa: E731
for vec, color, label in ((g0, "0.35", "dy: the gradient at the rotated pair"),
                          (rot(g0, -a0), "C2", "right: R(-a) dy, turned back"),
                          (rot(g0, a0), "C3", "slip: R(+a) dy, turned further")):
    pair.annotate("", xy=vec, xytext=(0, 0), arrowprops=dict(arrowstyle="-|>", color=color, lw=2.2))
    pair.plot([], [], color=color, lw=2.2, label=label)
r0 = np.linalg.norm(g0)
t = np.linspace(0, 2 * np.pi, 200)
pair.plot(r0 * np.cos(t), r0 * np.sin(t), color="0.85", lw=1)
start = np.arctan2(g0[1], g0[0])
for sign, color in ((-1, "C2"), (1, "C3")):                              # the two turns, a radian each way
    arc = start + sign * np.linspace(0, a0, 50)
    pair.plot(0.45 * np.cos(arc), 0.45 * np.sin(arc), color=color, lw=1.2)
    mid = start + sign * a0 / 2
    pair.annotate("-a" if sign < 0 else "+a", (0.58 * np.cos(mid), 0.58 * np.sin(mid)), color=color,
                  ha="center", va="center", fontsize=10)
pair.set(aspect="equal", xlim=(-1.25, 1.25), ylim=(-1.25, 1.25), xlabel="first number of the pair",
         ylabel="second number of the pair", title="One pair at angle a = 1 rad (pair 0, position 1):\n"
                                                     "the slip ends 2a = 2 rad from the right answer")
pair.legend(loc="lower left", fontsize=8)
turn.plot(range(P), per_position, "o-", color="C3", ms=3, label="slip: the forward rotation on the gradient")
turn.plot(range(P), right_per_position, "o-", color="C2", ms=3,
          label=f"right: the inverse rotation (vs autograd: at most {right_per_position.max():.0e})")
turn.set(xlabel="position p of the token", ylabel="relative error of dx at that position", xlim=(-0.5, P - 1),
         ylim=(-0.05, 1.75), title=f"The gradient of the queries: exact at position 0, wrong from position 1 on\n"
                                   f"({B} x {H} heads, d_head = {d_head}, theta = {CFG.rope_theta:g})")
turn.legend(loc="upper left", fontsize=8)
show(fig, OUT / "rope_backward.png")

wrong_rope = lambda d, c: d * c[0] + manual.rotate_half(d) * c[1]       # noqa: E731  (the slip)
rope_in_block = spoiled_by(*block_backward(
    D, cache, attention_backward=lambda d, c: attention_backward(d, c, rope_backward=wrong_rope)))
print("forward rotation in the block:", describe(rope_in_block))
assert {name for name, err in rope_in_block.items() if err > 0} == {"x", "norm1.weight", "attn.q_proj.weight",
                                                                     "attn.k_proj.weight"}

# %% [markdown]
# ## 6. Four pitfalls, each run wrong
#
# `manual.pitfalls` keeps the four classic mistakes of writing a block by hand, each with the signature of the
# function it spoils. All four run without complaint and return arrays of the right shapes.
#
# 1. **Post-norm in place of pre-norm** (`post_norm_instead_of_pre_norm`, spoiling `block_forward`):
#    $h = \mathrm{norm}_1(x + \mathrm{attn}(x))$, the norm on the stream itself (lesson 09 follows it through
#    depth). A different function: its output and every gradient differ, and every token leaves the block with
#    an RMS of 1.
# 2. **RoPE before the head split** (`rope_before_head_split`, spoiling `attention_forward`): rotating the flat
#    projection, 64 numbers wide for q, pairs dimension $i$ with $i + 32$, which belongs to another head, and
#    turns it at the frequencies of a head 64 wide. A forward mistake: the library gives it no backward.
# 3. **The identity gradient dropped** (`drop_residual_grad`, spoiling `block_backward`): at
#    $\mathrm{out} = h + F(h)$ only the branch reaches $h$, so $\partial\mathcal L/\partial h = J_F^\top g$:
#    section 2's merge without its first term. It is our `block_backward(identity=False)`, bit for bit.
# 4. **K/V gradients reshaped with $d_{model}$** (`kv_grad_reshaped_with_d_model`, spoiling
#    `attention_backward`): attention code written for MHA, reused under GQA. The per-query-head gradient of K,
#    4 heads × 16 = 64 numbers a token, is flattened with $d_{model} = 64$ and never summed over the groups;
#    to fit $W_K$, only its first $H_{kv} d_{head} = 32$ numbers are kept. So KV head $j$ gets the gradient of
#    query head $j$ alone instead of its group's sum. It equals our `attention_backward` with a "group sum"
#    that takes heads 0 and 1, bit for bit.
#
# Beside them, the two slips of sections 3 and 5, and one more, **one cache for two norms**. A block written
# with objects that keep their cache inside, and one norm object used twice, would keep only the last cache:
# norm1's backward would read the statistics of norm2's input. Our pairs return their caches, so the slip must
# be made on purpose, by handing norm1's backward the cache of norm2.
#
# Each mistake's error is measured against the right code of section 1, on the block's output and on every
# gradient; the right code against autograd comes first. The right code is off by rounding, below
# $10^{-15}$. Wherever a mistake is off, it is off by at least 9 %, some fourteen orders of magnitude more.

# %%
attn_proj = [manual.Linear(params[f"attn.{name}.weight"]) for name in ("q_proj", "k_proj", "v_proj", "o_proj")]
a_in = cache["attn"]["q_proj"][0]                                        # norm1(x), attention's input
NA = np.nan                                                              # not computed: no backward
SAME = -1.0                                                              # a backward mistake: same forward


def block_with_attention(attn_out: np.ndarray) -> np.ndarray:
    """The block's output for a given attention output: h = x + attn_out, out = h + ffn(norm2(h))."""
    h_ = X + attn_out
    f_, _ = manual.rmsnorm_forward(h_, params["norm2.weight"], CFG.norm_eps)
    return h_ + manual.swiglu_forward(f_, *ffn_proj)[0]


rows = {"right code, vs autograd": {"output": forward_diff, **errors["vs autograd"]}}

out_post, cache_post = pitfalls.post_norm_instead_of_pre_norm(X, params, CFG)
rms_post = np.sqrt((out_post ** 2).mean(axis=-1))
rows["1. post-norm in place of pre-norm"] = {"output": rel_err(out_post, out),
                                             **spoiled_by(*manual.block_backward(D, cache_post))}

attn_wrong, _ = pitfalls.rope_before_head_split(a_in, *attn_proj, H, H_kv, True, CFG.rope_theta)
attn_right, _ = manual.attention_forward(a_in, *attn_proj, H, H_kv, True, CFG.rope_theta)
rows["2. RoPE before the head split"] = {"output": rel_err(block_with_attention(attn_wrong), out),
                                         **dict.fromkeys(hand, NA)}

dx_drop, grads_drop = pitfalls.drop_residual_grad(D, cache)
dx_id, grads_id = block_backward(D, cache, identity=False)
rows["3. identity gradient dropped at h"] = {"output": SAME, **spoiled_by(dx_drop, grads_drop)}

dx_kv, grads_kv = block_backward(D, cache, attention_backward=pitfalls.kv_grad_reshaped_with_d_model)
da_kv, g_kv = pitfalls.kv_grad_reshaped_with_d_model(dh, cache["attn"])
da_j, g_j = attention_backward(dh, cache["attn"], group_sum=lambda d, G: d[:, :d.shape[1] // G])
rows["4. K/V gradients without the group sum"] = {"output": SAME, **spoiled_by(dx_kv, grads_kv)}

rows["slip: SiLU' = σ"] = {"output": SAME, **spoiled_by(*block_backward(
    D, cache, swiglu_backward=lambda d, c: swiglu_backward(d, c, silu_prime=sigma_only)))}
rows["slip: RoPE's gradient rotated forward"] = {"output": SAME, **rope_in_block}
shared_cache = {**cache, "norm1": cache["norm2"]}                        # norm1's backward reads norm2's cache
rows["slip: one cache for two norms"] = {"output": SAME, **spoiled_by(*block_backward(D, shared_cache))}

print(f"{'':40}" + "".join(f"{k.removeprefix('attn.').removeprefix('ffn.').removesuffix('.weight'):>10}"
                           for k in rows["right code, vs autograd"]))
for label, errs in rows.items():
    print(f"{label:40}" + "".join(f"{'-':>10}" if np.isnan(e) else f"{'same':>10}" if e == SAME else
                                  f"{'0':>10}" if e == 0 else f"{e:10.1e}" if e < 1e-3 else f"{e:10.0%}"
                                  for e in errs.values()))
right_worst = max(rows["right code, vs autograd"].values())
off = [e for label, errs in rows.items() if label != "right code, vs autograd" for e in errs.values() if e > 0]
print(f"post-norm: every token's output RMS {rms_post.min():.6f}..{rms_post.max():.6f}; RoPE before the split: "
      f"attention's output off by {rel_err(attn_wrong, attn_right):.0%}")
print(f"smallest error of a spoiled result: {min(off):.0%}; the right code's largest: {right_worst:.0e}")
assert np.array_equal(dx_drop, dx_id) and all(np.array_equal(grads_drop[k], grads_id[k]) for k in grads)
g_kv, g_j = manual.flatten(g_kv), manual.flatten(g_j)
assert np.array_equal(da_kv, da_j) and all(np.array_equal(g_kv[k], g_j[k]) for k in g_j)
assert np.abs(rms_post - 1).max() < 1e-5 and rel_err(attn_wrong, attn_right) > 0.3
assert round(min(off), 2) == 0.09 and right_worst < 1e-15 and int(np.log10(min(off) / right_worst)) == 14
assert H * d_head == CFG.d_model == 64 and H_kv * d_head == 32

# %% [markdown]
# The picture shows *where* each mistake lands:
#
# - a backward mistake leaves the forward untouched ("same"), so no test of the output can see it;
# - it spoils exactly the gradients that its wrong numbers flow into on the way back to the input, and leaves
#   the others exact. The FFN's gradients come out first, so a check of those alone catches none of the
#   attention mistakes;
# - only $x$'s gradient is spoiled by every mistake that has a backward (all but pitfall 2). It is the last one
#   computed, and it is what the block below receives: in a stack, every earlier layer inherits the error.

# %%
columns = ["output", "x", "norm1\ngain", "$W_Q$", "$W_K$", "$W_V$", "$W_O$", "norm2\ngain", "$W_{gate}$", "$W_{up}$",
           "$W_{down}$"]
table = np.array([list(errs.values()) for errs in rows.values()])        # (mistakes + 1, 11)
fig = figure(12, 5.4)
ax = fig.add_subplot()
shown = np.ma.masked_where(~(table > 0), table)                          # exact, same, not computed: no colour
from matplotlib.colors import LogNorm                                    # noqa: E402  (only this picture needs it)
image = ax.imshow(shown, cmap="YlOrRd", norm=LogNorm(1e-16, 2), aspect="auto")
for (r, col), e in np.ndenumerate(table):
    if not np.isnan(e):
        text = "same" if e == SAME else "exact" if e == 0 else f"{e:.0e}" if e < 1e-3 else f"{e:.0%}"
        ax.text(col, r, text, ha="center", va="center", fontsize=9, color="black" if e > 1e-3 else "0.4",
                style="italic" if e == SAME else "normal")
for r, errs in enumerate(rows.values()):
    if any(np.isnan(e) for e in errs.values()):
        ax.text(5.5, r, "a forward mistake: no backward to compare", ha="center", va="center", fontsize=9,
                color="0.4", style="italic")
ax.set_xticks(range(len(columns)), columns)
ax.set_yticks(range(len(rows)), list(rows))
ax.tick_params(top=True, labeltop=True, bottom=False, labelbottom=False)
ax.set_xticks(np.arange(-0.5, len(columns)), minor=True)
ax.set_yticks(np.arange(-0.5, len(rows)), minor=True)
ax.grid(which="minor", color="0.85", lw=0.8)
ax.tick_params(which="minor", length=0)
ax.axvline(0.5, color="0.3", lw=1.5)
ax.axhline(0.5, color="0.3", lw=1.5)
ax.set_xlabel("the gradients, in the order the forward uses the weights; the backward pass computes them from "
              "right to left, x last")
ax.set_title("Relative error against the right code, for each result of the block (tiny preset, float64)")
fig.colorbar(image, ax=ax, label="relative error (log scale)", shrink=0.9)
show(fig, OUT / "pitfalls.png")

# %% [markdown]
# **A popular statement of pitfall 4, checked.** It is usually written as a reshape of the K gradient *after*
# the group sum, (B, $H_{kv}$, L, $d_{head}$), to (B, L, $d_{model}$), with the warning that under GQA this
# "silently produces wrong results or fails". It cannot be silent: after the sum the gradient holds
# $B \cdot H_{kv} \cdot L \cdot d_{head}$ = 512 numbers, and (B, L, $d_{model}$) needs 1,024, so numpy raises
# a `ValueError` at once. The mistake that does run silently is the one above, where the group sum is skipped
# too: then the 64 numbers a token do fit, and only the gradients are wrong.

# %%
summed_dk = np.zeros((B, H_kv, L, d_head))                               # the summed K gradient, (2, 2, 8, 16)
try:
    summed_dk.transpose(0, 2, 1, 3).reshape(B, L, CFG.d_model)           # the line as popularly written
    literal = "ran"
except ValueError as e:
    literal = f"ValueError ({e})"
print(f"reshaping the summed K gradient of {summed_dk.size} numbers to (B, L, d_model) = {(B, L, CFG.d_model)}: "
      f"{literal}")
assert literal.startswith("ValueError") and summed_dk.size == 512 and B * L * CFG.d_model == 1024

# %% [markdown]
# ## 7. The gradient check, drawn
#
# Section 6 measured each mistake on the block's gradients; it did not say *where* in the backward pass the wrong
# numbers start. `tb.explore(block, x, check=True)` does: it draws the block's forward and backward graphs as a
# page you click through in a browser (lesson 11 reads such graphs, lesson 19 tours the page: the **explorer**),
# and colours each backward op by the largest difference between autograd and the hand-derived pair of the
# module around it. Each
# pair is run on the very input and output gradient that autograd gave that module, so a wrong pair is seen in
# its own module and nowhere else: the ops after it get autograd's right gradient again. Choose "colour by:
# gradient check" on the page: green is float64 round-off, yellow to red a disagreement.
#
# With the right pairs every module agrees to about $10^{-15}$: round-off. Then we plant section 3's slip,
# SiLU' taken as $\sigma$, in the pair the check runs for the FFN. Only `ffn` turns red; its three projections,
# which `linear_backward` checks, stay green, and so do the norms and attention. The whole block's hand-derived
# backward, which chains every pair, is off too: there the slip flows on into everything computed after it.

# %%
from tinygrad_block.manual import block as manual_block                 # noqa: E402  (the pairs the check runs)

page = tb.explore(block, x, check=True)
checks = page.data["check"]
right_pair = manual_block.swiglu_backward
manual_block.swiglu_backward = lambda d, c: swiglu_backward(d, c, silu_prime=sigma_only)   # the slip, planted
try:
    slipped = tb.explore(block, x, check=True)
finally:
    manual_block.swiglu_backward = right_pair                           # the right pair back
show(slipped.save(OUT / "gradient_check.html"))                       # "colour by: gradient check" on the page
bad = slipped.data["check"]
print(f"{'module':22} {'pair':10} {'right pairs':>12} {'SiLU slip':>12}")
for path, c in checks.items():
    print(f"{path or '(whole block)':22} {c['pair']:10} {c['max']:12.1e} {bad[path]['max']:12.1e}")
lit = sorted(p for p, c in bad.items() if p and c["max"] > page.data["round_off"])
red = {n["check"] for n in slipped.data["nodes"] if n.get("check") in lit}
print(f"modules that light up: {lit}; the block's own ops: no pair of their own, never coloured")
assert max(c["max"] for c in checks.values()) < 1e-13 and len(checks) == 12
assert lit == ["block.ffn"] and red == {"block.ffn"}
assert bad[""]["max"] > 1e-2 and bad["block.ffn"]["max"] > 1e-2
assert all(bad[p]["max"] == checks[p]["max"] for p in checks if p not in ("", "block.ffn"))

# %% [markdown]
# ## Check yourself
#
# 1. At $\mathrm{out} = h + F(h)$, what is $\partial \mathcal L / \partial h$, and what goes wrong if the first term
#    is dropped?
#
#    <details><summary>Answer</summary>
#
#    $g + J_F^\top g$: the add copies $g$ to both inputs (the split), and the identity copy and the branch's
#    gradient add at $h$ (the merge). Dropping $g$ keeps only the branch, one of the four pitfalls: it runs without
#    complaint and spoils $x$'s gradient and everything computed after it.
#
#    </details>
#
# 2. Under GQA, why is a key/value head's gradient a sum over the query heads of its group?
#
#    <details><summary>Answer</summary>
#
#    `repeat_kv` copies each KV head once per query head of its group, so each of its numbers is used $G$ times and
#    the $G$ gradients that come back add. The sum is the transpose of the copy. Taking only the first head of each
#    group is off by 68 % on random gradients.
#
#    </details>
#
# 3. What is RoPE's backward, and why does a test at position 0 alone miss a sign slip in it?
#
#    <details><summary>Answer</summary>
#
#    A rotation is orthogonal, so its backward is the rotation by minus the same angle: $dx = dy \cos -
#    \mathrm{rotate\_half}(dy) \sin$. At position 0 every angle is 0, so the forward rotation and its inverse agree
#    exactly there; from position 1 on the slip is off by 68 %.
#
#    </details>
#
# 4. A popular statement says that reshaping the K gradient with $d_{model}$ under GQA "silently" gives wrong
#    results. Is that so?
#
#    <details><summary>Answer</summary>
#
#    Not as stated: after the group sum the gradient holds 512 numbers and (B, L, $d_{model}$) needs 1,024, so numpy
#    raises a `ValueError`. The silent mistake is the one that also skips the group sum, where the numbers fit and
#    only the gradients are wrong.
#
#    </details>

# %% [markdown]
# ## Words from this lesson
#
# - **kernel**: one program that a GPU runs over whole tensors, usually for a single op (§1)
# - **fused kernel**: a kernel that does several steps in one program, so that its backward is written by hand and
#   must be checked against autograd (§1)
# - **hand-derived pair**: a `*_forward` that returns its output and a cache of what its backward needs, and a
#   `*_backward(dout, cache)` derived on paper (§1)
# - **product rule**: the derivative of a product, $(uv)' = u'v + uv'$, so each factor gets the upstream gradient
#   times the other factor (§3)
# - **group sum**: under GQA, the sum of the gradients of the query heads that share one key/value head (§4)
# - **dot-product test**: checking that an operation and its claimed transpose satisfy
#   $\langle A k, g \rangle = \langle k, A^\top g \rangle$ for random $k$ and $g$ (§4)
# - **rotate_half**: the quarter turn $(x_1, x_2) \mapsto (-x_2, x_1)$ of every pair, with which RoPE is written
#   $x \cos + \mathrm{rotate\_half}(x) \sin$ (§5)

# %% [markdown]
# ## Exercises
#
# Three backward passes by hand, in numpy, without autograd: the pieces of this lesson written from the
# formulas.
#
# 1. `swiglu_backward`: `swiglu_backward(x, w_gate, w_up, w_down, grad_out)` returns
#    `(dx, dw_gate, dw_up, dw_down)` for $\mathrm{out} = (\mathrm{SiLU}(x W_{gate}^\top) \odot x W_{up}^\top)
#    W_{down}^\top$, the table of section 3. The checker compares each gradient with autograd and with finite
#    differences, and recognises SiLU' taken as $\sigma$ alone, the gate's gradient without the factor $u$, and
#    $dx$ from one branch only.
# 2. `repeat_kv_backward`: `repeat_kv_backward(grad, n_rep)` turns the gradient of the repeated keys,
#    (B, H, L, $d_{head}$), into the gradient of the KV heads, (B, H / n_rep, L, $d_{head}$): the group sum of
#    section 4, with query head $h$ reading KV head $h \,//\, n_{rep}$. The checker recognises the first head
#    of each group, the mean, and the groups of tiling.
# 3. `rope_backward`: `rope_backward(grad, cos, sin)` undoes RoPE's rotation on a gradient (section 5), for the
#    cos and sin tables of the positions, laid out as the library lays them out. It is checked at positions that
#    start at 0 and at 37, and the checker recognises the forward rotation run again.
#
# `python -m tinygrad_block exercise 10` writes `exercise_10.py` with the three functions to fill in;
# `python -m tinygrad_block check 10` checks them and says what is wrong.
