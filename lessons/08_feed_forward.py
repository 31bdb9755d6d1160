# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 08 — The feed-forward network
#
# Attention moves information between positions. The feed-forward network (FFN) then transforms each position
# on its own, and it holds most of a model's parameters: about two thirds of Llama-2-7B. This lesson takes apart
# the SwiGLU FFN that Llama uses: its activation, its gate, its odd width of 11008, and its share of the model.
#
# **What you will learn**
# - ReLU, GELU and SiLU, drawn with their derivatives, and why SiLU dips below zero: its minimum, found by
#   bisection with autograd and checked against a closed form;
# - the classic expand-and-contract FFN, the gated linear unit (GLU) and SwiGLU, and a worked example recomputed
#   (including a slip in the figures usually quoted for it);
# - why Llama's FFN is $\tfrac83 d$ wide instead of $4d$, and the rounding that turns $\tfrac83 \cdot 4096$ into
#   11008 (and Llama-2-70B's hidden width into 28672);
# - how many parameters the FFN holds, in one block and in a whole model, for nine published architectures.
#
# Run it as a script, `python -m tinygrad_block lesson 08`, or as a notebook,
# `python -m tinygrad_block lesson 08 --notebook --execute` (it lands beside this file).

# %%
import math

import numpy as np

import tinygrad_block as tb
from tinygrad_block import accounting as acc
from tinygrad_block import nn
from tinygrad_block.counting import count_flops
from tinygrad_block.measure import meta_lm
from tinygrad_block.pictures import figure

from course import PART_COLOURS, out_dir, show

OUT = out_dir(8)          # lessons/out/08/: this lesson's pictures

# %% [markdown]
# ## 1. Three activations
#
# An FFN is two matrices with a non-linear function between them, the **activation**, applied to each number on
# its own. Without that function, the two matrices would multiply into one, $W_{down} W_{up}$, and the FFN would
# be no more than a single linear map. These three activations are the ones in use:
#
# | name | formula | used by |
# |---|---|---|
# | ReLU | $\max(0, z)$ | the original transformer (Vaswani et al., 2017) |
# | GELU | $z\,\Phi(z) = \tfrac z2\big(1 + \mathrm{erf}(z/\sqrt2)\big)$ | BERT, GPT-2 (approximated with tanh) |
# | SiLU (also called swish) | $z\,\sigma(z) = z / (1 + e^{-z})$ | Llama, Mistral (inside SwiGLU) |
#
# GELU and SiLU are smooth versions of ReLU. Each multiplies $z$ by a number between 0 and 1 that depends on
# $z$ itself: for GELU the Gaussian CDF $\Phi(z)$, the probability that a standard normal variable falls below
# $z$; for SiLU the logistic sigmoid $\sigma(z) = 1 / (1 + e^{-z})$. For large
# positive $z$ they pass $z$ through almost unchanged, and for large negative $z$ they return almost 0. In
# between they let a little negative signal through. Their slope is 0 at a single point on the negative side,
# the bottom of their dip, where it changes sign; ReLU's is 0 on the whole negative side. A ReLU **unit** (one
# number of the FFN's hidden vector, section 2) whose input stays negative gets no gradient at all (a "dead"
# unit); a SiLU unit still gets one.
#
# Each activation acts elementwise, so one backward pass of their sum gives the derivative at every point of a
# grid at once. Autograd agrees with the derivatives worked out by hand to $10^{-12}$:
# $\mathrm{ReLU}'(z) = [z > 0]$, $\mathrm{GELU}'(z) = \Phi(z) + z\,\varphi(z)$ (with $\varphi$ the Gaussian
# density), and $\mathrm{SiLU}'(z) = \sigma(z)\,\big(1 + z\,(1 - \sigma(z))\big)$. A few values:
# $\mathrm{SiLU}(1) = 0.7311$ and $\mathrm{SiLU}(-1) = -0.2689$ (they differ by exactly 1, since
# $\sigma(-z) = 1 - \sigma(z)$), and $\mathrm{GELU}(1) = 0.8413$.

# %%
zs = np.linspace(-5.0, 3.0, 801)                                  # includes -1, 0 and 1 exactly
curves, slopes = {}, {}
for name, act in (("ReLU", lambda t: t.relu()), ("GELU", lambda t: t.gelu()), ("SiLU", lambda t: t.silu())):
    z = tb.tensor(zs, dtype=tb.float64, requires_grad=True)
    y = act(z)
    y.sum().backward()                                            # elementwise: z.grad[i] = act'(z[i])
    curves[name], slopes[name] = y.numpy(), z.grad.numpy()

sig = 1 / (1 + np.exp(-zs))
Phi = 0.5 * (1 + np.vectorize(math.erf)(zs / math.sqrt(2)))
phi = np.exp(-zs ** 2 / 2) / math.sqrt(2 * math.pi)
by_hand = {"ReLU": (np.maximum(zs, 0), (zs > 0).astype(float)), "GELU": (zs * Phi, Phi + zs * phi),
           "SiLU": (zs * sig, sig * (1 + zs * (1 - sig)))}
at = {v: int(np.argmin(np.abs(zs - v))) for v in (-1.0, 0.0, 1.0)}
for name in curves:
    value_err = np.abs(curves[name] - by_hand[name][0]).max()
    slope_err = np.abs(slopes[name] - by_hand[name][1]).max()
    print(f"{name}: value at -1, 0, 1 = {curves[name][[at[-1.0], at[0.0], at[1.0]]].round(4)}; autograd vs the "
          f"hand formulas: values {value_err:.0e}, derivatives {slope_err:.0e}")
    assert value_err < 1e-12 and slope_err < 1e-12
silu1, silu_m1 = curves["SiLU"][at[1.0]], curves["SiLU"][at[-1.0]]
assert round(silu1, 4) == 0.7311 and round(silu_m1, 4) == -0.2689 and abs(silu1 - silu_m1 - 1) < 1e-15
assert round(curves["GELU"][at[1.0]], 4) == 0.8413 and curves["SiLU"][at[0.0]] == 0.0
assert (slopes["ReLU"][zs < 0] == 0).all()
for name in ("GELU", "SiLU"):                                     # one sign change of the slope for z < 0
    turns = np.flatnonzero(np.diff(np.sign(slopes[name][zs < 0])))
    print(f"{name}'s slope for z < 0 changes sign once, between z = {zs[turns[0]]:.2f} and {zs[turns[0] + 1]:.2f}")
    assert len(turns) == 1 and (slopes[name][zs < 0] != 0).all()

# %% [markdown]
# ### SiLU's minimum
#
# SiLU is not monotonic: it dips below zero, and it is often quoted as reaching a minimum of about $-0.278$ near
# $z \approx -1.278$. We find the minimum twice.
#
# **With autograd.** The minimum is where the slope crosses zero. The slope is negative at $z = -2$ and positive
# at $z = -1$, so bisection on $[-2, -1]$ closes in on the crossing. Each step asks autograd for
# $\mathrm{SiLU}'$ at the midpoint, and 60 halvings take the interval below float64's spacing.
#
# **In closed form.** Setting the slope to zero, $1 + z\,(1 - \sigma(z)) = 0$. Since
# $1 - \sigma(z) = 1/(1 + e^z)$, this is $1 + e^z + z = 0$. Put $w = -1 - z$; then $e^{-1-w} = w$, that is
# $w\,e^{w} = e^{-1}$. The function that inverts $w \mapsto w e^w$ is Lambert's $W$, so
#
# $$z^* = -1 - W(1/e), \qquad \mathrm{SiLU}(z^*) = z^*\sigma(z^*) = z^* + 1 = -W(1/e),$$
#
# because $\sigma(z^*) = 1 + 1/z^*$ at the crossing. The minimum's value and its position differ by exactly 1.
# $W(1/e)$ is the root of $w e^w - e^{-1}$, which Newton's method (follow the tangent of the function to where it
# crosses zero, and repeat) finds in a few steps. The two methods agree
# to $10^{-12}$, and the quoted $-0.278$ at $-1.278$ is right to three decimals:
# $\mathrm{SiLU}(-1.2784645) = -0.2784645$.

# %%
def silu_slope(z: float) -> float:
    """SiLU'(z) by autograd."""
    t = tb.tensor(z, dtype=tb.float64, requires_grad=True)
    t.silu().backward()
    return t.grad.item()


lo, hi = -2.0, -1.0
assert silu_slope(lo) < 0 < silu_slope(hi)
for _ in range(60):
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if silu_slope(mid) < 0 else (lo, mid)
z_min = (lo + hi) / 2
silu_min = tb.tensor(z_min, dtype=tb.float64).silu().item()

w = 0.5                                                           # Newton on f(w) = w e^w - 1/e
for _ in range(50):
    w -= (w * math.exp(w) - math.exp(-1)) / ((w + 1) * math.exp(w))
print(f"bisection with autograd: SiLU is smallest at z = {z_min:.10f}, where it is {silu_min:.10f}")
print(f"closed form: W(1/e) = {w:.10f}, so z* = {-1 - w:.10f} and SiLU(z*) = {-w:.10f}")
assert abs(w * math.exp(w) - math.exp(-1)) < 1e-16
assert abs(z_min - (-1 - w)) < 1e-12 and abs(silu_min - (-w)) < 1e-12
assert abs(z_min - (-1.278)) < 1e-3 and abs(silu_min - (-0.278)) < 1e-3
assert round(z_min, 7) == -1.2784645 and round(silu_min, 7) == -0.2784645

fig = figure(11, 4)
left, right = fig.subplots(1, 2)
for name, style in (("ReLU", "-"), ("GELU", "--"), ("SiLU", "-")):
    left.plot(zs, curves[name], style, lw=2, label=name)
    right.plot(zs, slopes[name], style, lw=2, label=name)
left.plot(zs, sig, ":", color="gray", label=r"sigmoid $\sigma(z)$ (GLU's gate)")
left.plot([z_min], [silu_min], "o", color="C2")
left.annotate(f"SiLU's minimum\n({z_min:.4f}, {silu_min:.4f})", (z_min, silu_min), xytext=(-4.9, 0.75),
              arrowprops=dict(arrowstyle="->", color="C2"), color="C2")
left.axhline(0, color="black", lw=0.5)
left.set(xlabel="input z", ylabel="activation(z)", title="The activations", ylim=(-0.6, 3.1))
left.legend(loc="upper left")
right.axhline(0, color="black", lw=0.5)
right.axvline(z_min, color="C2", lw=0.8, ls=":", label=f"SiLU' = 0 at z = {z_min:.4f}")
right.set(xlabel="input z", ylabel="d activation / dz (by autograd)", title="Their derivatives", ylim=(-0.2, 1.2))
right.legend(loc="upper left")
show(fig, OUT / "activations.png")

# %% [markdown]
# ## 2. The classic FFN: expand, activate, contract
#
# The original transformer and GPT-2 use the classic FFN, also called the **vanilla** FFN:
#
# $$\mathrm{FFN}(x) = W_{down}\,\mathrm{act}(W_{up}\,x + b_{up}) + b_{down},$$
#
# which widens each token's vector from $d_{model}$ numbers to a **hidden** vector of $d_{ff} = 4\,d_{model}$,
# applies the activation, and narrows it back. For GPT-2 small that is $768 \to 3072 \to 768$, with
# $2 \cdot 768 \cdot 3072$ weights and $3072 + 768$ biases: 4,722,432 parameters (`nn.MLP`; the library stores
# each weight (out, in), so `up_proj.weight` is 3072 × 768).
#
# An FFN treats each position on its own: the same matrices are applied to every token's vector, and nothing
# is mixed between positions. Change token 2 of a sequence and only output 2 changes; the others are the same to
# the last bit. Attention moves information between tokens, and the FFN then works on each token's vector
# separately. This is also why the FFN needs nothing like attention's KV cache (lesson 07) during generation:
# a new token's FFN output does not depend on the tokens before it.
#
# The activation matters. Remove it and the two layers are a single affine map (a linear map plus a constant),
# $x \mapsto (W_{down} W_{up})\,x + (W_{down} b_{up} + b_{down})$: the product of the two matrices is one
# 768 × 768 matrix.

# %%
gpt2 = nn.preset("gpt2-small")
mlp = nn.MLP(gpt2, generator=tb.Generator(0), dtype=tb.float64)
shapes = {name: p.shape for name, p in mlp.named_parameters()}
x = tb.randn(1, 5, gpt2.d_model, generator=tb.Generator(1), dtype=tb.float64)      # (B, L, d_model)
print(f"GPT-2 small's FFN ({gpt2.ffn}): {shapes}; {mlp.num_parameters():,} parameters")
print(f"x {x.shape} -> up {mlp.up_proj(x).shape} -> down {mlp(x).shape}")
assert shapes == {"up_proj.weight": (3072, 768), "up_proj.bias": (3072,), "down_proj.weight": (768, 3072),
                  "down_proj.bias": (768,)}
assert mlp.num_parameters() == 2 * 768 * 3072 + 3072 + 768 == 4_722_432 and gpt2.d_ff == 4 * gpt2.d_model

changed = x.numpy().copy()
changed[0, 2] += 1.0                                                                # every feature of token 2
moved = np.abs(mlp(tb.tensor(changed, dtype=tb.float64)).numpy() - mlp(x).numpy()).max(axis=(0, 2))   # (L,)
print(f"token 2 changed: largest change of the FFN's output per position {np.array2string(moved, precision=3)}")
assert (moved[[0, 1, 3, 4]] == 0.0).all() and moved[2] > 0

w_up, b_up = mlp.up_proj.weight.numpy(), mlp.up_proj.bias.numpy()
w_down, b_down = mlp.down_proj.weight.numpy(), mlp.down_proj.bias.numpy()
linear = mlp.down_proj(mlp.up_proj(x)).numpy()                                     # the FFN without its activation
one_map = x.numpy() @ (w_down @ w_up).T + (w_down @ b_up + b_down)                  # one 768 x 768 matrix
print(f"without the activation: the FFN equals one {(w_down @ w_up).shape} affine map to "
      f"{np.abs(linear - one_map).max():.0e}")
assert (w_down @ w_up).shape == (768, 768) and np.abs(linear - one_map).max() < 1e-12

# %% [markdown]
# ## 3. GLU and SwiGLU: an FFN with a gate
#
# A gated linear unit computes two projections of the same input instead of one, and lets one decide, unit by
# unit, how much of the other passes:
#
# $$\mathrm{GLU}(x) = W_{down}\big(\sigma(W_{gate}\,x) \odot W_{up}\,x\big), \qquad
# \mathrm{SwiGLU}(x) = W_{down}\big(\mathrm{SiLU}(W_{gate}\,x) \odot W_{up}\,x\big).$$
#
# $W_{up}\,x$ carries the content, and the gate sets how much of each hidden unit gets through. In GLU the
# gate is a sigmoid, so it lies strictly between 0 and 1: it can only shrink a unit. SwiGLU (Shazeer, 2020),
# which Llama uses, gates with SiLU instead. Its gate can fall to $-0.278$, which flips a unit's sign, and it has
# no upper bound, so it can also amplify. In a vanilla FFN each hidden unit is a fixed function of one
# projection. In a gated FFN the unit's weight depends on the input through a second projection, so the network
# can switch units on and off token by token.
#
# `nn.SwiGLU` is exactly the formula: written out from its own three projections, it gives the same numbers to
# the last bit. On the tiny preset ($d_{model} = 64$, $d_{ff} = 172$) with random inputs, GLU's gates all
# lie in (0, 1), while SwiGLU's reach below $-0.2$ and above 1; none goes below SiLU's minimum.

# %%
tiny = nn.preset("tiny")
ffn = nn.SwiGLU(tiny, generator=tb.Generator(0), dtype=tb.float64)
x = tb.randn(2, 8, tiny.d_model, generator=tb.Generator(2), dtype=tb.float64)
gate_in, up = ffn.gate_proj(x), ffn.up_proj(x)                         # (B, L, d_ff) each
swiglu_gate, glu_gate = gate_in.silu(), gate_in.sigmoid()
by_formula = ffn.down_proj(swiglu_gate * up)
glu_out = ffn.down_proj(glu_gate * up)                                 # the same weights, gated by a sigmoid
print(f"nn.SwiGLU vs the formula: identical = {np.array_equal(ffn(x).numpy(), by_formula.numpy())}; "
      f"x {x.shape} -> gate, up {up.shape} -> out {ffn(x).shape}")
print(f"GLU's gate: {glu_gate.numpy().min():.3f} .. {glu_gate.numpy().max():.3f}; "
      f"SwiGLU's gate: {swiglu_gate.numpy().min():.3f} .. {swiglu_gate.numpy().max():.3f}; "
      f"GLU and SwiGLU outputs differ by up to {np.abs(glu_out.numpy() - by_formula.numpy()).max():.2f}")
assert np.array_equal(ffn(x).numpy(), by_formula.numpy()) and up.shape == (2, 8, 172) and tiny.d_model == 64
assert 0 < glu_gate.numpy().min() and glu_gate.numpy().max() < 1
assert -0.2784645 < swiglu_gate.numpy().min() < -0.2 and swiglu_gate.numpy().max() > 1

# %% [markdown]
# ### A worked example, recomputed
#
# A SwiGLU with $d_{model} = 4$ and $d_{ff} = 3$, the input $x = [1, -0.5, 0.2, 0.8]$, and weights written in
# the $x W$ convention (4 × 3: input rows, hidden columns):
#
# $$W_{gate} = \begin{bmatrix} 0.5 & -0.3 & 0.1 \\ 0.2 & 0.4 & -0.2 \\ -0.1 & 0.3 & 0.5 \\ 0.3 & -0.1 & 0.2
# \end{bmatrix}, \qquad W_{up} = \begin{bmatrix} 0.4 & 0.2 & -0.1 \\ -0.3 & 0.5 & 0.3 \\ 0.1 & -0.2 & 0.4 \\
# 0.2 & 0.1 & -0.3 \end{bmatrix}.$$
#
# The library stores weights (out, in), so they go into `nn.SwiGLU` transposed. No $W_{down}$ is given, so the
# example stops at the hidden vector. Step by step, with the figures this example is usually quoted with:
#
# | step | computed here | as usually quoted |
# |---|---|---|
# | gate $= x W_{gate}$ | [0.62, −0.52, 0.46] | the same |
# | up $= x W_{up}$ | [0.73, −0.01, −0.41] | the same |
# | $\sigma$(gate) | [0.6502, 0.3729, 0.6130] | [**0.6504**, 0.3729, 0.6130] |
# | SiLU(gate) | [0.4031, −0.1939, 0.2820] | [**0.4033**, −0.1939, 0.2820] |
# | hidden = SiLU(gate) ⊙ up | [0.2943, 0.0019, −0.1156] | [**0.2944**, 0.0019, −0.1156] |
#
# The quoted figures slip at $\sigma(0.62)$, which is $1/(1 + e^{-0.62}) = 0.650219$, not 0.6504. The slip
# carries into the first hidden unit, though not consistently: $0.62 \times 0.6504 = 0.4032$, not the quoted
# 0.4033, while the quoted hidden value 0.2944 does follow from 0.4033 ($0.4033 \times 0.73$). The other
# entries are right.
#
# Read the gating in this example: the first unit's gate (0.40) lets its content (0.73) through at 40 %. The
# second unit's gate is slightly negative ($-0.19$), but its content is almost 0 ($-0.01$), so the product is
# close to 0.
#
# **A zero input gives a zero output, whatever the weights.** With $x = 0$, both projections are 0,
# $\mathrm{SiLU}(0) = 0$, and so the hidden vector and the output are exactly 0. (The same holds for GLU:
# $\sigma(0) = \tfrac12$, but the content is 0.) It holds because Llama's projections have no biases.
# Below it is checked on the example and on the tiny preset's random FFN.

# %%
ex_cfg = nn.BlockConfig(d_model=4, n_heads=1, n_kv_heads=1, d_ff=3)
W_gate = np.array([[0.5, -0.3, 0.1], [0.2, 0.4, -0.2], [-0.1, 0.3, 0.5], [0.3, -0.1, 0.2]])    # (in, out)
W_up = np.array([[0.4, 0.2, -0.1], [-0.3, 0.5, 0.3], [0.1, -0.2, 0.4], [0.2, 0.1, -0.3]])
example = nn.SwiGLU(ex_cfg, generator=tb.Generator(3), dtype=tb.float64)      # W_down stays random
example.load_state_dict({"gate_proj.weight": tb.tensor(W_gate.T, dtype=tb.float64),
                         "up_proj.weight": tb.tensor(W_up.T, dtype=tb.float64),
                         "down_proj.weight": example.down_proj.weight.detach()})
x = tb.tensor([[[1.0, -0.5, 0.2, 0.8]]], dtype=tb.float64)                    # (1, 1, d_model = 4)
gate, up = example.gate_proj(x), example.up_proj(x)
steps = {"gate": gate, "up": up, "sigma(gate)": gate.sigmoid(), "SiLU(gate)": gate.silu(),
         "hidden": gate.silu() * up}
steps = {name: t.numpy()[0, 0] for name, t in steps.items()}
for name, v in steps.items():
    print(f"  {name:12} {v.round(6)}")
xn = np.array([1.0, -0.5, 0.2, 0.8])                                          # the same by hand, in numpy
g_np, u_np = xn @ W_gate, xn @ W_up
s_np = 1 / (1 + np.exp(-g_np))
assert np.abs(steps["gate"] - g_np).max() < 1e-15 and np.abs(steps["up"] - u_np).max() < 1e-15
assert np.abs(steps["hidden"] - g_np * s_np * u_np).max() < 1e-15
assert steps["gate"].round(12).tolist() == [0.62, -0.52, 0.46]
assert steps["up"].round(12).tolist() == [0.73, -0.01, -0.41]
assert steps["sigma(gate)"].round(4).tolist() == [0.6502, 0.3729, 0.6130]
assert steps["SiLU(gate)"].round(4).tolist() == [0.4031, -0.1939, 0.2820]
assert steps["hidden"].round(4).tolist() == [0.2943, 0.0019, -0.1156] and round(steps["sigma(gate)"][0], 6) == 0.650219
assert round(0.62 * 0.6504, 4) == 0.4032 and round(0.4033 * 0.73, 4) == 0.2944   # the quoted figures' own arithmetic
assert np.array_equal(example(x).numpy(), example.down_proj(gate.silu() * up).numpy())

zero_out = example(tb.zeros(1, 1, 4, dtype=tb.float64)).numpy()
zero_tiny = ffn(tb.zeros(2, 8, tiny.d_model, dtype=tb.float64)).numpy()
print(f"zero input: the example's output {zero_out[0, 0]}, the tiny FFN's largest |output| {np.abs(zero_tiny).max()}")
assert (zero_out == 0).all() and (zero_tiny == 0).all()

# %% [markdown]
# ## 4. How wide: $\tfrac83 d$, and the rounding behind 11008
#
# A gate costs a third matrix. At the same hidden width, SwiGLU has 1.5 times the parameters and the FLOPs of a
# vanilla FFN. Llama therefore narrows the hidden width from $4d$ to $\tfrac23 \cdot 4d = \tfrac83 d$, which
# brings the parameter count back to $3 \cdot d \cdot \tfrac83 d = 8d^2$, the same as the vanilla FFN's
# $2 \cdot d \cdot 4d$. The FLOPs per token follow the parameters, because each weight costs one multiply and
# one add (lesson 03). Counted on the shape-only device for $d = 4096$, in units of $d^2$:
#
# | FFN | hidden width | parameters | matmul FLOPs per token |
# |---|---|---|---|
# | vanilla (ReLU) | $4d$ = 16384 | $8\,d^2$ | $16\,d^2$ |
# | SwiGLU at the same width | $4d$ = 16384 | $12\,d^2$ | $24\,d^2$ |
# | SwiGLU, Llama-2-7B | 11008 | $8.0625\,d^2$ | $16.125\,d^2$ |
#
# Llama-2-7B's three 4096 × 11008 matrices hold 135,266,304 weights, and the vanilla FFN's two 4096 × 16384
# matrices hold 134,217,728: 0.78 % fewer.
#
# Why 11008 ($2.6875\,d$) and not $\tfrac83 \cdot 4096 = 10922.67$? Meta's code takes
# $\lfloor \tfrac23 \cdot 4d \rfloor = 10922$ and rounds it **up** to the next multiple of 256 (`multiple_of`):
# $\lceil 10922 / 256 \rceil = 43$, and $43 \times 256 = 11008$. A GPU multiplies matrices in fixed-size tiles
# on units built for that, and sides that are multiples of large powers of two split into whole tiles, with none
# left half empty. The rounding goes up, not to the nearest multiple. For
# Llama-2-7B both give 11008 ($10922 / 256 = 42.7$), but Llama-2-13B ($d = 5120$) tells them apart:
# $\lfloor 13653.3 \rfloor / 256 = 53.3$ rounds up to $54 \times 256 = 13824$, its real width, and to the nearest
# to $53 \times 256 = 13568$.
#
# Llama-2-70B's 28672 does not follow from $\tfrac83 d$ at all. Rounded up to 256, $\tfrac83 \cdot 8192$ gives
# 22016. Its configuration has two more knobs. `ffn_dim_multiplier = 1.3` widens the FFN, to make up for the
# parameters that grouped-query attention (lesson 07) takes out of $W_K$ and $W_V$. And `multiple_of = 4096`
# sets a much coarser rounding: $\lfloor 1.3 \times 21845 \rfloor = 28398$ rounds up to
# $7 \times 4096 = 28672$. Together they add more than GQA removed: per block, $W_K$ and $W_V$ lose
# $2 \cdot 8192 \cdot (8192 - 1024) = 117{,}440{,}512$ parameters, and widening the FFN from 22016 to 28672 adds
# $3 \cdot 8192 \cdot 6656 = 163{,}577{,}856$. Llama-3-8B uses 1.3 with `multiple_of = 1024`:
# $\lfloor 1.3 \times 10922 \rfloor = 14198$, which rounds up to $14 \times 1024 = 14336 = 3.5\,d$, Mistral-7B's
# width too. The formula
# reproduces every width that the library's presets list for these models.

# %%
d = 4096


def meta_ffn(cfg: nn.BlockConfig):
    """An FFN of `cfg` on the shape-only device: its parameter count and its forward matmul FLOPs per token."""
    module = (nn.SwiGLU if cfg.ffn == "swiglu" else nn.MLP)(cfg, generator=tb.Generator(0), device="meta")
    with count_flops() as fc:
        module(tb.zeros(1, 1, cfg.d_model, device="meta"))            # one token
    return module.num_parameters(), fc.total("forward", matmul_only=True)


variants = {"vanilla (ReLU), 4d": nn.BlockConfig(d, 32, 32, 4 * d, ffn="relu"),
            "SwiGLU, 4d": nn.BlockConfig(d, 32, 32, 4 * d),
            "SwiGLU, Llama-2-7B": nn.preset("llama2-7b")}
costs = {name: meta_ffn(cfg) for name, cfg in variants.items()}
for name, (params, flops) in costs.items():
    print(f"  {name:20} d_ff {variants[name].d_ff:>6}: {params:>12,} parameters = {params / d**2:.4f} d^2; "
          f"{flops:>12,} matmul FLOPs per token = {flops / d**2:.4f} d^2")
assert [p / d**2 for p, _ in costs.values()] == [8, 12, 8.0625] and all(f == 2 * p for p, f in costs.values())
assert costs["SwiGLU, Llama-2-7B"][0] == 3 * 4096 * 11008 == 135_266_304
assert costs["vanilla (ReLU), 4d"][0] == 2 * 4096 * 16384 == 134_217_728
assert round(100 * (1 - 134_217_728 / 135_266_304), 2) == 0.78

print(f"8/3 x 4096 = {8 * d / 3:.2f}; Meta's code floors 2/3 x 4d to {int(2 * 4 * d / 3)}")
widths = {}
for name, mult, multiple_of in (("llama2-7b", None, 256), ("llama2-13b", None, 256), ("llama2-70b", 1.3, 4096),
                                ("llama3-8b", 1.3, 1024), ("tinyllama-1.1b", None, 256)):
    cfg = nn.preset(name)
    hidden = int(2 * 4 * cfg.d_model / 3)                                # floor(8d/3)
    if mult is not None:
        hidden = int(mult * hidden)                                      # floor(1.3 x ...)
    up_ = math.ceil(hidden / multiple_of) * multiple_of                  # round UP to a multiple
    nearest = round(hidden / multiple_of) * multiple_of
    plain = math.ceil(int(8 * cfg.d_model / 3) / 256) * 256              # 8d/3 up to 256, no multiplier
    widths[name] = (hidden, up_, nearest, plain)
    print(f"  {name:15} d {cfg.d_model:>5}, multiplier {mult!s:4}, multiple of {multiple_of:>4}: {hidden:>6} -> up "
          f"{up_:>6}, nearest {nearest:>6}; preset d_ff {cfg.d_ff:>6}")
    assert up_ == cfg.d_ff
assert 8 * d / 3 - 10922.67 < 0.01 and widths["llama2-7b"][:2] == (10922, 11008) and 11008 == 43 * 256
assert widths["llama2-13b"][1:3] == (13824, 13568) and widths["tinyllama-1.1b"][1:3] == (5632, 5376)
assert widths["llama2-70b"][:2] == (28398, 28672) == (int(1.3 * 21845), 7 * 4096) and widths["llama2-70b"][3] == 22016
assert widths["llama3-8b"][:2] == (14198, 14336) and nn.preset("mistral-7b").d_ff == 14336 == 3.5 * 4096
c70 = nn.preset("llama2-70b")
gqa_cut = 2 * c70.d_model * (c70.d_model - c70.n_kv_heads * c70.d_head)            # W_K, W_V: 8192 -> 1024 columns
wider = 3 * c70.d_model * (c70.d_ff - widths["llama2-70b"][3])                       # the FFN: 22016 -> 28672
print(f"Llama-2-70B, per block: GQA removes {gqa_cut:,} parameters, the wider FFN adds {wider:,}")
assert gqa_cut == 117_440_512 and wider == 163_577_856 and c70.d_ff - 22016 == 6656
assert round(11008 / 4096, 4) == 2.6875 and round(10922 / 256, 1) == 42.7 and round(13653 / 256, 1) == 53.3

# %% [markdown]
# ## 5. Where the parameters are
#
# Per block, Llama's attention holds $2d^2 + 2\,d\,n_{kv} d_{head}$ parameters ($W_Q$ and $W_O$ are
# $d \times d$; $W_K$ and $W_V$ are as wide as the $n_{kv}$ key/value heads, lesson 07's $H_{kv}$, the config's
# `n_kv_heads`), the FFN $3\,d\,d_{ff}$, and the two
# norms $2d$. With MHA and $d_{ff} \approx \tfrac83 d$ that is $4d^2$ against $8d^2$: the FFN holds two
# thirds of each block. A whole model adds an embedding and an LM head of $V \times d$ each (or one of them, when
# they are **tied**: the LM head then reuses the embedding table as its weight, lesson 12), and a final norm.
#
# Counted exactly from `named_parameters()` of each model built on the shape-only device, Llama-2-7B's FFNs
# hold 4,328,521,728 of its 6,738,415,616 parameters: **64.2 %** of the model, more than 60 %, and 66.8 % of
# each block. The usual figures, "about 33 % in attention and 67 % in the FFN", are per block and right:
# 33.2 % and 66.8 %.
#
# Two commonly quoted splits deserve a closer look:
# - **GPT-3** is said to keep about 67 % of its parameters in the FFN and 33 % in attention. Built from its
#   published shape (96 layers, $d = 12288$, $d_{ff} = 4d$, a vocabulary of 50257, biases, tied embeddings,
#   and 2048 learned position vectors: a table with one vector per position, added to the token embeddings,
#   which is how GPT-2 and GPT-3 mark positions instead of RoPE), it has 174,604,259,328 parameters, the
#   "175 B" of its name. The FFN holds 66.4 % of them and attention 33.2 %, so the quoted split holds.
# - **Llama-3-70B** (and Llama-2-70B, which has the same blocks) is said to split "about 25 % / 75 %". Counted,
#   it is **17.6 % / 82.4 %** of a block. Grouped-query attention shrinks $W_K$ and $W_V$ to 1,024 columns, so
#   attention holds $2.25\,d^2$ = 150,994,944 parameters against the FFN's 704,643,072. Over the whole model,
#   Llama-3-70B's FFN share is 79.9 %; its embedding and head are larger than Llama-2-70B's, with a vocabulary of
#   128,256 tokens against 32,000.
#
# The share over the whole model depends on the embeddings. Small models spend a large part of their budget on
# them, so in GPT-2 small the FFNs hold only 45.5 % of the parameters even though they hold two thirds of each
# block.

# %%
PARTS = ("attention", "FFN", "norms", "embeddings")


def census(cfg: nn.BlockConfig) -> dict:
    """Parameters of nn.LM(cfg) by part, counted from named_parameters() on the shape-only device."""
    parts = dict.fromkeys(PARTS, 0)
    for name, p in meta_lm(cfg).named_parameters():
        where = name.split(".")[2] if name.startswith("layers.") else name.split(".")[0]
        parts[{"attn": "attention", "ffn": "FFN", "norm1": "norms", "norm2": "norms", "norm": "norms"}.get(
            where, "embeddings")] += p.size                           # embed, pos_embed and lm_head: embeddings
    return parts


gpt3 = nn.BlockConfig(d_model=12288, n_heads=96, n_kv_heads=96, d_ff=4 * 12288, norm="layer", ffn="gelu", bias=True,
                      rope=False, max_seq_len=2048, vocab_size=50257, n_layers=96, tie_embeddings=True, name="gpt3")
models = ["gpt2-small", "smollm-135m", "tinyllama-1.1b", "llama2-7b", "llama3-8b", "mistral-7b", "llama2-70b",
          "llama3-70b"]
counts = {name: census(nn.preset(name)) for name in models} | {"gpt3-175b": census(gpt3)}
print(f"{'model':15} {'parameters':>16} " + " ".join(f"{p:>11}" for p in PARTS) + "   FFN share of a block")
for name, parts in counts.items():
    total = sum(parts.values())
    cfg = gpt3 if name == "gpt3-175b" else nn.preset(name)
    print(f"{name:15} {total:>16,} " + " ".join(f"{parts[p] / total:>11.1%}" for p in PARTS)
          + f"   {acc.attention_ffn_shares(cfg).ffn:.1%}")
    assert total == acc.total_params(cfg)                               # the closed form agrees
    assert parts["FFN"] == cfg.n_layers * round(acc.attention_ffn_shares(cfg).ffn * acc.params_per_block(cfg))
l7 = counts["llama2-7b"]
share7 = l7["FFN"] / sum(l7.values())
assert l7["FFN"] == 32 * 3 * 4096 * 11008 == 4_328_521_728 and sum(l7.values()) == 6_738_415_616
assert share7 > 0.60 and round(100 * share7, 1) == 64.2
assert [round(100 * s, 1) for s in acc.attention_ffn_shares(nn.preset("llama2-7b"))] == [33.2, 66.8]
g3 = counts["gpt3-175b"]
assert sum(g3.values()) == 174_604_259_328 and round(sum(g3.values()) / 1e9) == 175 and len(counts) == 9
assert [round(100 * g3[p] / sum(g3.values()), 1) for p in ("FFN", "attention")] == [66.4, 33.2]
s70 = acc.attention_ffn_shares(nn.preset("llama3-70b"))
assert [round(100 * s, 1) for s in s70] == [17.6, 82.4] and s70 == acc.attention_ffn_shares(nn.preset("llama2-70b"))
assert 2 * 8192**2 + 2 * 8192 * 1024 == 2.25 * 8192**2 == 150_994_944 and 3 * 8192 * 28672 == 704_643_072
assert round(100 * counts["llama3-70b"]["FFN"] / sum(counts["llama3-70b"].values()), 1) == 79.9
assert round(100 * counts["gpt2-small"]["FFN"] / sum(counts["gpt2-small"].values()), 1) == 45.5
assert nn.preset("llama3-70b").n_kv_heads * nn.preset("llama3-70b").d_head == 1024
assert nn.preset("llama3-70b").vocab_size == 128_256 and nn.preset("llama2-70b").vocab_size == 32_000
assert all(parts["norms"] / sum(parts.values()) < 1e-3 for parts in counts.values())    # the legend's "< 0.1 %"

fig = figure(10, 4.6)
ax = fig.add_subplot()
names = list(counts)
left_edge = np.zeros(len(names))
colors = PART_COLOURS                                              # one colour per part, as in lesson 12
for part in PARTS:
    frac = np.array([counts[n][part] / sum(counts[n].values()) for n in names])
    ax.barh(names, frac, left=left_edge, color=colors[part], label=part if part != "norms" else "norms (< 0.1 %)")
    for i, f in enumerate(frac):
        if f > 0.06:
            ax.text(left_edge[i] + f / 2, i, f"{f:.0%}", ha="center", va="center", color="white", fontsize=9)
    left_edge += frac
ax.axvline(0.6, color="black", ls="--", lw=1, label="60 %")
ax.invert_yaxis()
ax.set(xlim=(0, 1), xlabel="share of all parameters (embedding and LM head included)",
       title="Where a model's parameters are: the FFN holds most of every large model")


def billions(n: int) -> str:
    return f"{n / 1e6:.0f} M" if n < 1e9 else f"{n / 1e9:.1f} B" if n < 1e10 else f"{n / 1e9:.0f} B"


ax.set_yticks(range(len(names)), [f"{n} ({billions(sum(counts[n].values()))})" for n in names])
ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncols=5, frameon=False)
show(fig, OUT / "parameter_shares.png")

# %% [markdown]
# ## Check yourself
#
# 1. Why does an FFN need an activation between its two matrices?
#
#    <details><summary>Answer</summary>
#
#    Without it the two matrices multiply into one, $W_{down} W_{up}$, and the FFN is a single linear map: the
#    lesson's 768 → 3072 → 768 FFN without its activation equals one (768, 768) affine map within $10^{-12}$.
#
#    </details>
#
# 2. What can SwiGLU's gate do to a hidden unit that GLU's sigmoid gate cannot?
#
#    <details><summary>Answer</summary>
#
#    The sigmoid lies strictly between 0 and 1, so it can only shrink a unit. SiLU dips to about $-0.278$, which
#    flips a unit's sign, and has no upper bound, so it can also amplify.
#
#    </details>
#
# 3. Why is Llama-2-7B's FFN 11008 wide rather than $4d$ = 16384?
#
#    <details><summary>Answer</summary>
#
#    A gate adds a third matrix, so the width is cut to $\tfrac23 \cdot 4d = \tfrac83 d$ to keep the parameters near
#    the vanilla FFN's $8d^2$. Meta's code takes $\lfloor \tfrac83 \cdot 4096 \rfloor = 10922$ and rounds it up to
#    the next multiple of 256: $43 \times 256 = 11008$.
#
#    </details>
#
# 4. What share of Llama-2-7B's parameters sits in its FFNs?
#
#    <details><summary>Answer</summary>
#
#    4,328,521,728 of 6,738,415,616: 64.2 % of the model and 66.8 % of each block, counted from
#    `named_parameters()` on the shape-only device.
#
#    </details>

# %% [markdown]
# ## Words from this lesson
#
# - **FFN**: the feed-forward network, the sublayer that transforms each position's vector on its own with two or
#   three matrices and an activation (§1)
# - **activation**: the non-linear function an FFN applies to each number on its own between its matrices (§1)
# - **ReLU**: the activation $\max(0, z)$ (§1)
# - **GELU**: the activation $z\,\Phi(z)$, with $\Phi$ the Gaussian CDF, used by BERT and GPT-2 (§1)
# - **SiLU**: the activation $z\,\sigma(z) = z / (1 + e^{-z})$, also called swish, which dips to about $-0.278$
#   (§1)
# - **vanilla FFN**: the classic FFN, $W_{down}\,\mathrm{act}(W_{up}\,x + b_{up}) + b_{down}$, which widens each
#   vector to $d_{ff}$ numbers and narrows it back (§2)
# - **d_ff**: the FFN's hidden width, $4\,d_{model}$ in the vanilla FFN and about $\tfrac83 d_{model}$ in Llama's
#   (§2)
# - **GLU**: the gated linear unit, an FFN whose hidden units are one projection of the input scaled by a sigmoid of
#   another (§3)
# - **gate**: the second projection of a gated FFN, which sets how much of each hidden unit gets through (§3)
# - **SwiGLU**: the gated FFN Llama uses, $W_{down}(\mathrm{SiLU}(W_{gate}\,x) \odot W_{up}\,x)$ (§3)

# %% [markdown]
# ## Exercises
#
# 1. `swiglu`: the SwiGLU FFN from tensor operations. Given $x$ (B, L, $d_{model}$) and the three weights
#    stored (out, in) as the library stores them, `swiglu(x, w_gate, w_up, w_down)` returns
#    $W_{down}(\mathrm{SiLU}(W_{gate} x) \odot W_{up} x)$. The checker compares with `nn.SwiGLU` and with the
#    worked example of section 3, and it recognises the gate on the wrong projection, a sigmoid gate (GLU) and
#    untransposed weights.
# 2. `swiglu_width`: `swiglu_width(d_model, multiple_of, multiplier=None)` returns the hidden width by Meta's
#    rule (section 4): $\lfloor \tfrac23 \cdot 4d \rfloor$, times the multiplier if there is one (floored again),
#    rounded **up** to a multiple of `multiple_of`. It is checked against the widths of Llama-2 7B, 13B and 70B,
#    Llama-3-8B and TinyLlama, and it catches rounding to the nearest multiple.
# 3. `ffn_share`: verify that the FFN holds more than 60 % of Llama-2-7B's parameters. `ffn_share(cfg)` returns
#    the fraction of all parameters of `nn.LM(cfg)` (embedding and LM head included) that sit in the FFNs, from
#    the config's numbers. It must handle SwiGLU (three matrices) and the classic FFN with biases (two matrices),
#    and tied and untied embeddings. The checker counts the parameters of each model built on the shape-only
#    device, and it recognises the usual slips: the share of one block instead of the whole model, a matrix too
#    many or too few per FFN, an LM head counted when it is tied (or missing when it is not), missing biases.
#
# `python -m tinygrad_block exercise 08` writes `exercise_08.py` with the three functions to fill in;
# `python -m tinygrad_block check 08` checks them and says what is wrong.
