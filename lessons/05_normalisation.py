# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 05 — Normalisation
#
# Lesson 04 followed text through a model as boxes: each token's vector of $d$ numbers in the residual stream, read
# and added to by one block after another. This lesson opens the first piece inside a block. A block has two
# sublayers, attention (lesson 06) and the feed-forward network (lesson 08), and each reads the stream through a
# norm. A norm rescales each token's vector to a fixed size, so the sublayer sees the same scale in the first block
# and in the 80th. This lesson shows what the two norms in use, LayerNorm and RMSNorm, do to a vector, why Llama
# keeps only the simpler one, why neither is BatchNorm, and how the gradient gets back through them.
#
# **What you will learn**
# - LayerNorm and RMSNorm as formulas and as geometry: RMSNorm puts every token on a sphere of radius
#   $\sqrt d$, and LayerNorm first drops the token onto the plane $\sum_i x_i = 0$; a picture in three
#   dimensions, and what the small $\varepsilon$ does to the radius;
# - why modern models drop the centring: how far apart the two norms are (an angle you can compute), and
#   what the centring costs, counted in FLOPs and compared with the closed forms;
# - BatchNorm built from tensor operations, and why it does not suit language models: a batch of one
#   sequence, a token that depends on the other sequences, and padding that changes every real token;
# - RMSNorm's backward pass by hand, checked against autograd and finite differences.
#
# Run it as a script, `python -m tinygrad_block lesson 05`, or as a notebook,
# `python -m tinygrad_block lesson 05 --notebook --execute` (it lands beside this file).

# %%
import math

import numpy as np

import tinygrad_block as tb
from tinygrad_block import accounting as acc
from tinygrad_block import manual, nn
from tinygrad_block.counting import count_flops
from tinygrad_block.gradcheck import central_difference, rel_err
from tinygrad_block.pictures import figure

from course import out_dir, show

OUT = out_dir(5)          # lessons/out/05/: this lesson's pictures

# %% [markdown]
# ## 1. Two norms, one token at a time
#
# A norm looks at one token's vector $x \in \mathbb{R}^d$ at a time (the last axis of a (B, L, d) tensor) and never
# at the other tokens. LayerNorm (Ba et al., 2016) subtracts the vector's mean $\mu$, divides by its standard
# deviation $\sigma$, then scales each feature by a learned gain $g$ and shifts it by a learned bias $b$ ($\odot$ is
# the elementwise product):
#
# $$\mathrm{LayerNorm}(x) = g \odot \frac{x - \mu}{\sqrt{\sigma^2 + \varepsilon}} + b, \qquad
# \mu = \frac1d \sum_i x_i, \quad \sigma^2 = \frac1d \sum_i (x_i - \mu)^2.$$
#
# RMSNorm (Zhang and Sennrich, 2019) keeps only the division, by the root mean square of the entries:
#
# $$\mathrm{RMSNorm}(x) = g \odot \frac{x}{\sqrt{m + \varepsilon}}, \qquad m = \frac1d \sum_i x_i^2.$$
#
# It has no centring and no bias. The small $\varepsilon$ ($10^{-5}$ in the library and in Llama) keeps the division
# finite for a vector of zeros. `nn.LayerNorm` and `nn.RMSNorm` compute these formulas, and agree with numpy to
# rounding. A norm holds $d$ gains, plus $d$ biases for LayerNorm. Llama (and Mistral, and every other Llama-style
# preset in the library) uses RMSNorm; GPT-2 and BERT (Google's text model of 2018) use LayerNorm.
#
# We use the width of the `tiny` preset, $d = 64$, and a batch of 2 sequences of 8 tokens, in float64. The
# entries are drawn with mean 3 and standard deviation 2, so that the centring has something to remove.

# %%
CFG = nn.preset("tiny")
d, B, L = CFG.d_model, 2, 8
x = tb.randn(B, L, d, generator=tb.Generator(1), dtype=tb.float64) * 2.0 + 3.0    # (B, L, d), token means about 3
rms, ln = nn.RMSNorm(d, dtype=tb.float64), nn.LayerNorm(d, dtype=tb.float64)
eps, xs = rms.eps, x.numpy()

m = (xs * xs).mean(-1, keepdims=True)                                              # (B, L, 1)
centred = xs - xs.mean(-1, keepdims=True)
var = (centred * centred).mean(-1, keepdims=True)                                  # (B, L, 1)
err_rms = np.abs(rms(x).numpy() - xs / np.sqrt(m + eps)).max()
err_ln = np.abs(ln(x).numpy() - centred / np.sqrt(var + eps)).max()
print(f"x {x.shape}; RMSNorm vs numpy {err_rms:.0e}, LayerNorm vs numpy {err_ln:.0e} (eps = {eps:g})")
print(f"parameters: RMSNorm {rms.num_parameters()} (gain), LayerNorm {ln.num_parameters()} (gain and bias)")
print("norm of each preset: " + ", ".join(f"{name} {nn.preset(name).norm}" for name in nn.PRESETS))
assert err_rms < 1e-14 and err_ln < 1e-14 and eps == 1e-5 == nn.preset("llama2-7b").norm_eps
assert rms.num_parameters() == d and ln.num_parameters() == 2 * d
assert all(nn.preset(n).norm == "rms" for n in nn.PRESETS if n.startswith(("llama", "mistral", "tiny", "smollm")))
assert nn.preset("gpt2-small").norm == nn.preset("bert-base").norm == "layer"

# %% [markdown]
# ### Statistics per token, not per feature
#
# After LayerNorm, the $d$ entries *of each token* have mean 0 and standard deviation
# $\sqrt{\sigma^2 / (\sigma^2 + \varepsilon)}$, a hair under 1. It is sometimes said that "each feature" then
# has mean 0 and standard deviation 1. That is not so: one feature, followed across the 16 tokens of the
# batch, keeps a mean and a spread of its own. Normalising each feature across tokens is what BatchNorm does
# (section 5).
#
# The norms also forget things. LayerNorm gives the same output for $x$ and for $a x + c$ (any $a > 0$ and
# any number $c$ added to every entry): it forgets each token's scale and offset. RMSNorm forgets only the
# scale, $\mathrm{RMSNorm}(a x) = \mathrm{RMSNorm}(x)$. (Exactly so at $\varepsilon = 0$, which the cell below
# uses; section 2 shows what $\varepsilon$ changes.) The gain and bias are the same for every token, so they cannot
# give a token back its own mean and scale: a popular explanation says the model "can learn $g = \sigma$,
# $b = \mu$ to recover the original input", but $x$ and $2.5x - 7$ have the same LayerNorm output, and no
# single $g, b$ maps that output back to both.

# %%
y = ln(x).numpy().reshape(B * L, d)                                   # (16 tokens, d)
token_mean, token_std = y.mean(axis=1), y.std(axis=1)                 # over the d features of each token
feature_mean, feature_std = y.mean(axis=0), y.std(axis=0)             # over the 16 tokens, per feature
print(f"per token:   mean within {np.abs(token_mean).max():.0e} of 0, std {token_std.min():.8f}..{token_std.max():.8f}")
print(f"per feature: mean {feature_mean.min():+.2f}..{feature_mean.max():+.2f}, "
      f"std {feature_std.min():.2f}..{feature_std.max():.2f}")
assert np.abs(token_mean).max() < 1e-12 and (token_std < 1).all() and (1 - token_std).max() < 1e-5
assert np.abs(token_std - np.sqrt(var / (var + eps)).ravel()).max() < 1e-12
assert np.abs(feature_mean).max() > 0.5 and feature_std.min() < 0.7 and feature_std.max() > 1.2

ln0, rms0 = nn.LayerNorm(d, eps=0.0, dtype=tb.float64), nn.RMSNorm(d, eps=0.0, dtype=tb.float64)
ln_affine = np.abs(ln0(x * 2.5 - 7.0).numpy() - ln0(x).numpy()).max()
rms_scaled = np.abs(rms0(x * 2.5).numpy() - rms0(x).numpy()).max()
rms_shifted = np.abs(rms0(x - 7.0).numpy() - rms0(x).numpy()).max()
print(f"eps = 0, largest differences: LayerNorm(2.5 x - 7) vs LayerNorm(x) {ln_affine:.1e}; "
      f"RMSNorm(2.5 x) vs RMSNorm(x) {rms_scaled:.1e}; RMSNorm(x - 7) vs RMSNorm(x) {rms_shifted:.1e}")
assert ln_affine < 1e-12 and rms_scaled < 1e-12 and rms_shifted > 1.0 and B * L == 16

# %% [markdown]
# ## 2. The geometry: a sphere of radius $\sqrt d$
#
# Take $g = 1$, $b = 0$ and, for the exact picture, $\varepsilon = 0$. Since $\sqrt{m} = \lVert x\rVert/\sqrt d$,
#
# $$\mathrm{RMSNorm}(x) = \frac{x}{\sqrt{\tfrac1d \sum_i x_i^2}} = \sqrt d\,\frac{x}{\lVert x\rVert}:$$
#
# the direction of $x$ is kept and its length is set to $\sqrt d$. Every token lands on the sphere of radius
# $\sqrt{64} = 8$. LayerNorm first subtracts the mean, which moves the token onto the plane $\sum_i x_i = 0$
# (the hyperplane through the origin orthogonal to $(1, \dots, 1)$), and then does the same thing: its output
# has mean 0 *and* length 8. In one line, $\mathrm{LayerNorm}(x) = \mathrm{RMSNorm}(x - \mu)$. The tokens here
# have means of about 3, so the centring matters. Each of these statements holds to 12 decimal places.
#
# The gain then stretches each axis by its own factor: $y = g \odot \mathrm{RMSNorm}(x)$ lies on the ellipsoid
# $\sum_i (y_i / g_i)^2 = d$.

# %%
r, n = rms0(x).numpy(), ln0(x).numpy()
radius_rms, radius_ln = np.linalg.norm(r, axis=-1), np.linalg.norm(n, axis=-1)       # (B, L)
cosine = (r * xs).sum(-1) / (radius_rms * np.linalg.norm(xs, axis=-1))
ln_vs_centred = np.abs(n - rms0(x - x.mean(axis=-1, keepdims=True)).numpy()).max()
gain = 1.0 + 0.5 * tb.randn(d, generator=tb.Generator(2), dtype=tb.float64)
stretched = nn.RMSNorm(d, eps=0.0, dtype=tb.float64)
stretched.load_state_dict({"weight": gain})
on_ellipsoid = ((stretched(x).numpy() / gain.numpy()) ** 2).sum(-1)                  # (B, L)
print(f"token means {xs.mean(-1).min():.2f}..{xs.mean(-1).max():.2f}; sqrt(d) = {math.sqrt(d):g}")
print(f"RMSNorm:   length {radius_rms.min():.12f}..{radius_rms.max():.12f}, cosine with x >= {cosine.min():.12f}")
print(f"LayerNorm: length {radius_ln.min():.12f}..{radius_ln.max():.12f}, mean within {np.abs(n.mean(-1)).max():.0e} "
      f"of 0; LayerNorm(x) - RMSNorm(x - mean) = {ln_vs_centred:.0e}")
print(f"with a gain g: sum (y_i / g_i)^2 = {on_ellipsoid.min():.12f}..{on_ellipsoid.max():.12f} (d = {d})")
assert math.sqrt(d) == 8.0 and abs(xs.mean() - 3.0) < 0.5 and xs.mean(-1).min() > 2.0
assert np.abs(radius_rms - 8.0).max() < 1e-12 and np.abs(cosine - 1.0).max() < 1e-12
assert np.abs(radius_ln - 8.0).max() < 1e-12 and np.abs(n.mean(-1)).max() < 1e-12 and ln_vs_centred < 1e-12
assert np.abs(on_ellipsoid - d).max() < 1e-10

# %% [markdown]
# ### What $\varepsilon$ does to the radius
#
# With $\varepsilon > 0$ the length is no longer exactly $\sqrt d$:
#
# $$\lVert \mathrm{RMSNorm}(x) \rVert = \frac{\sqrt{d\,m}}{\sqrt{m + \varepsilon}}
# = \sqrt d\,\sqrt{\frac{m}{m + \varepsilon}},$$
#
# a hair inside the sphere for our tokens ($m \approx 13$, so the factor is about $1 - \varepsilon / 2m$, or
# $1 - 4 \cdot 10^{-7}$), but far inside for a small one. Scale a token down by $s$, so that $m = s^2$: the
# radius stays at $\sqrt d$ while $s \gg \sqrt\varepsilon \approx 0.0032$, falls to $\sqrt{d/2}$ at
# $s = \sqrt\varepsilon$, and shrinks in proportion to $s$ below that. A vector of zeros, such as a padding
# position (a filler slot that brings a short sequence to the length of the others; section 5), comes out as
# zeros, not as 0/0. (LayerNorm behaves the same way with $\sigma^2$ in place of $m$.)

# %%
radius = np.linalg.norm(rms(x).numpy(), axis=-1)
formula = math.sqrt(d) * np.sqrt(m[..., 0] / (m[..., 0] + eps))
unit = xs[0, 0] / np.sqrt((xs[0, 0] ** 2).mean())                                   # one token with m = 1
scales = np.logspace(-5, 1, 61)                                                     # includes sqrt(eps)
tokens = tb.tensor(scales[:, None] * unit, dtype=tb.float64)                        # (61, d): m = s^2
measured = np.linalg.norm(rms(tokens).numpy(), axis=-1)
expected = math.sqrt(d) * scales / np.sqrt(scales ** 2 + eps)
at_sqrt_eps = measured[np.argmin(np.abs(scales - math.sqrt(eps)))]
zeros_out = rms(tb.zeros(1, d, dtype=tb.float64)).numpy()
radius_ln_eps = np.linalg.norm(ln(x).numpy(), axis=-1)                             # LayerNorm: sigma^2 for m
ln_formula = math.sqrt(d) * np.sqrt(var[..., 0] / (var[..., 0] + eps))
print(f"default eps: length {radius.min():.9f}..{radius.max():.9f} (< 8), formula off by "
      f"{np.abs(radius - formula).max():.0e}")
print(f"scaled tokens: formula off by {np.abs(measured - expected).max():.0e}; at s = sqrt(eps) the length is "
      f"{at_sqrt_eps:.6f} = sqrt(d/2) = {math.sqrt(d / 2):.6f}; RMSNorm(0) = {np.abs(zeros_out).max()}")
print(f"LayerNorm: length = sqrt(d) sqrt(var / (var + eps)) to {np.abs(radius_ln_eps - ln_formula).max():.0e}")
assert np.abs(radius - formula).max() < 1e-12 and (radius < 8.0).all() and (8.0 - radius).max() < 1e-5
assert abs(m.mean() - 13) < 1.5 and abs((1 - radius / 8).mean() - 4e-7) < 0.5e-7
assert np.abs(measured - expected).max() < 1e-12 and round(math.sqrt(eps), 4) == 0.0032
assert abs(at_sqrt_eps - math.sqrt(d / 2)) < 1e-12 and (zeros_out == 0).all()
assert np.abs(radius_ln_eps - ln_formula).max() < 1e-12 and (ln(tb.zeros(1, d, dtype=tb.float64)).numpy() == 0).all()
assert abs(measured[0] / scales[0] - math.sqrt(d / eps)) / math.sqrt(d / eps) < 1e-4        # s << sqrt(eps)

fig = figure(7, 3.8)
ax = fig.add_subplot()
ax.semilogx(scales, measured / math.sqrt(d), "o", ms=4, color="C0", label="measured: |RMSNorm(s·u)| / √d")
ax.semilogx(scales, expected / math.sqrt(d), "-", color="C1", lw=1.2, label=r"$\sqrt{m/(m+\varepsilon)}$, m = s²")
ax.axvline(math.sqrt(eps), color="gray", ls=":", label=r"s = $\sqrt{\varepsilon}$ ≈ 0.0032: radius √(d/2)")
ax.set(xlabel="RMS of the input token, s (log scale)", ylabel="output length / √d",
       title=r"$\varepsilon = 10^{-5}$ pulls small tokens inside the sphere", ylim=(0, 1.08))
ax.legend(loc="lower right")
show(fig, OUT / "epsilon_radius.png")

# %% [markdown]
# ### The formula without $\varepsilon$
#
# LayerNorm is often quoted without $\varepsilon$, as $(x - \mu)/\sigma$. That formula is imprecise, and not
# only by a rounding error: it fails on a **constant token**, every entry the same (a token whose vector came
# out flat, a position filled with one value). Then $\sigma = 0$ and $x - \mu = 0$, so every feature is
# $0/0$: NaN, which every later layer then spreads to the whole sequence. With $\varepsilon$ the division is by
# $\sqrt{0 + \varepsilon}$, and the token comes out as zeros (then $g \odot 0 + b = b$). Below: the token
# $(5, 5, \dots, 5)$ through the formula as quoted, and through `nn.LayerNorm` ($\varepsilon = 10^{-5}$).

# %%
flat = tb.full((1, d), 5.0, dtype=tb.float64)                                    # a constant token: sigma = 0
mu, sigma = flat.numpy().mean(-1, keepdims=True), flat.numpy().std(-1, keepdims=True)
with np.errstate(invalid="ignore"):                                               # numpy warns of 0/0
    as_quoted = (flat.numpy() - mu) / sigma
with_eps = nn.LayerNorm(d, dtype=tb.float64)(flat).numpy()                        # g = 1, b = 0 as made
print(f"sigma = {sigma.item()}; (x - mu) / sigma: {np.isnan(as_quoted).sum()} of {d} features NaN; "
      f"nn.LayerNorm: {np.abs(with_eps).max()} everywhere")
assert sigma.item() == 0.0 and np.isnan(as_quoted).all()
assert (with_eps == 0).all() and ln.eps == 1e-5

# %% [markdown]
# ## 3. The picture in three dimensions
#
# At $d = 3$ the sphere can be drawn. Below are 16 points whose coordinates average about 1.5, so they sit
# well off the plane $x_1 + x_2 + x_3 = 0$. On the left, RMSNorm moves each point along the ray from the
# origin until it meets the sphere of radius $\sqrt 3$: points outside come in, points inside go out, and
# none changes direction. On the right, LayerNorm first drops each point onto the plane (subtracting its mean
# moves it along $(1, 1, 1)$, the plane's normal), then pushes it out along the plane to the circle where the
# sphere meets the plane. LayerNorm spends one dimension on the mean: in $d$ dimensions its outputs lie on a
# sphere of one dimension less than RMSNorm's. At $d = 3$ that leaves a circle instead of a sphere; at the
# widths of real models it is one direction out of thousands.

# %%
p3 = tb.randn(16, 3, generator=tb.Generator(5), dtype=tb.float64) * 0.8 + tb.tensor([2.0, 1.5, 1.0],
                                                                                       dtype=tb.float64)
pts = p3.numpy()
on_sphere = nn.RMSNorm(3, eps=0.0, dtype=tb.float64)(p3).numpy()                 # (16, 3)
on_circle = nn.LayerNorm(3, eps=0.0, dtype=tb.float64)(p3).numpy()               # (16, 3)
on_plane = pts - pts.mean(-1, keepdims=True)
R = math.sqrt(3)
print(f"16 points, coordinate means {pts.mean(-1).min():.2f}..{pts.mean(-1).max():.2f}, lengths "
      f"{np.linalg.norm(pts, axis=-1).min():.2f}..{np.linalg.norm(pts, axis=-1).max():.2f}")
len_rms, len_ln = np.linalg.norm(on_sphere, axis=-1), np.linalg.norm(on_circle, axis=-1)
print(f"RMSNorm: lengths {len_rms.min():.12f}..{len_rms.max():.12f} (sqrt(3) = {R:.12f})")
print(f"LayerNorm: lengths {len_ln.min():.12f}..{len_ln.max():.12f}, x1 + x2 + x3 within "
      f"{np.abs(on_circle.sum(-1)).max():.0e} of 0")
assert np.abs(len_rms - R).max() < 1e-12 and np.abs(len_ln - R).max() < 1e-12
assert np.abs(on_circle.sum(-1)).max() < 1e-12
assert (np.linalg.norm(pts, axis=-1) < R).any() and (np.linalg.norm(pts, axis=-1) > R).any()
assert abs(pts.mean() - 1.5) < 0.3

fig = figure(13, 6.5)
u, v = np.mgrid[0:2 * np.pi:36j, 0:np.pi:18j]
sphere = R * np.cos(u) * np.sin(v), R * np.sin(u) * np.sin(v), R * np.cos(v)
e1, e2 = np.array([1, -1, 0]) / math.sqrt(2), np.array([1, 1, -2]) / math.sqrt(6)   # the plane's axes
t = np.linspace(0, 2 * np.pi, 200)
circle = R * (np.outer(np.cos(t), e1) + np.outer(np.sin(t), e2))
for k, (title, view) in enumerate((("RMSNorm: along each ray onto the sphere of radius √3", (12, -60)),
                                   ("LayerNorm: onto the plane x₁+x₂+x₃ = 0, then onto the circle", (35, 60)))):
    ax = fig.add_subplot(1, 2, k + 1, projection="3d", computed_zorder=False)
    ax.plot_wireframe(*sphere, color="0.75", lw=0.3)
    if k == 0:
        for a, b in zip(pts, on_sphere):
            end = a if np.linalg.norm(a) > R else b
            ax.plot(*np.array([[0, 0, 0], end]).T, color="C0", lw=0.7, alpha=0.6)
        ax.scatter(*pts.T, color="0.2", s=30, depthshade=False, label="inputs x")
        ax.scatter(*on_sphere.T, color="C0", s=45, edgecolor="white", depthshade=False,
                   label="RMSNorm(x): same direction, length √3")
    else:
        s_, w_ = np.meshgrid(np.linspace(-2.3, 2.3, 2), np.linspace(-2.3, 2.3, 2))
        plane = s_[..., None] * e1 + w_[..., None] * e2
        ax.plot_surface(plane[..., 0], plane[..., 1], plane[..., 2], color="C1", alpha=0.15)
        ax.plot(*circle.T, color="C3", lw=2, label="the circle where the sphere meets the plane")
        for a, b, c in zip(pts, on_plane, on_circle):
            ax.plot(*np.array([a, b]).T, color="0.4", lw=0.8, ls=":")
            ax.plot(*np.array([b, c]).T, color="C3", lw=0.8)
        ax.scatter(*pts.T, color="0.2", s=30, depthshade=False, label="inputs x")
        ax.scatter(*on_plane.T, color="C1", s=22, depthshade=False, label="x − mean(x): on the plane x₁+x₂+x₃ = 0")
        ax.scatter(*on_circle.T, color="C3", s=45, edgecolor="white", depthshade=False,
                   label="LayerNorm(x): then out to radius √3")
    ax.set(xlim=(-3, 3), ylim=(-3, 3), zlim=(-3, 3), xlabel="x₁", ylabel="x₂", zlabel="x₃", title=title)
    ax.set_box_aspect((1, 1, 1))
    ax.view_init(*view)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.03), fontsize=10, frameon=False)
show(fig, OUT / "norm_sphere.png")

# %% [markdown]
# ## 4. Why drop the centring
#
# ### How far apart the two norms are
#
# Both outputs have length $\sqrt d$ (at $\varepsilon = 0$), so they differ only in direction. LayerNorm's
# output points along $x - \mu\mathbf 1$, RMSNorm's along $x$, and since $x \cdot (x - \mu\mathbf 1) =
# d\,\sigma^2$, $\lVert x \rVert^2 = d\,(\sigma^2 + \mu^2)$ and $\lVert x - \mu\mathbf 1 \rVert^2 = d\,\sigma^2$,
# the angle $\theta$ between them is
#
# $$\cos\theta = \frac{\sigma}{\sqrt{\sigma^2 + \mu^2}}, \qquad \tan\theta = \frac{|\mu|}{\sigma}:$$
#
# it depends only on the token's mean measured in units of its own spread, and
# $\lVert \mathrm{LN}(x) - \mathrm{RMS}(x) \rVert = 2\sqrt d \sin(\theta / 2)$.
#
# The usual argument for RMSNorm is that the tokens of a trained model's residual stream have means close to
# 0, so the centring removes almost nothing. (That is an observation about trained models; this lesson
# trains none.) Below are tokens of Llama-2-7B's width, $d = 4096$, with entries of standard deviation 1 and
# a mean $\mu$ added. Even with nothing added ($\mu = 0$), a token's sample mean is not exactly 0: it is of the
# order of $1/\sqrt{4096} = 1/64$ of its spread, which puts the two norms less than a degree apart. At
# $|\mu| \approx \sigma$ they are about 45° apart and clearly different maps. Our $d = 64$ tokens above, with
# mean 3 and spread 2, are 45° to 60° apart ($\arctan(3/2) = 56°$).

# %%
mus = [0.0, 0.1, 0.5, 1.0, 1.5]
big = tb.randn(len(mus), 4096, generator=tb.Generator(3), dtype=tb.float64) + tb.tensor(mus, dtype=tb.float64)[:, None]
ln_big = nn.LayerNorm(4096, eps=0.0, dtype=tb.float64)(big).numpy()
rms_big = nn.RMSNorm(4096, eps=0.0, dtype=tb.float64)(big).numpy()
bigs = big.numpy()
ratio = np.abs(bigs.mean(-1)) / bigs.std(-1)                                            # |mu| / sigma per token
angle = np.degrees(np.arccos(np.clip((ln_big * rms_big).sum(-1) / 4096, -1, 1)))    # both have length sqrt(d)
gap = np.linalg.norm(ln_big - rms_big, axis=-1)
print(f"{'mu added':>9} {'|mu|/sigma':>11} {'angle (deg)':>12} {'arctan':>8} {'|LN - RMS|':>11} {'2 sqrt(d) sin':>14}")
for i, mu in enumerate(mus):
    closed = np.degrees(np.arctan(ratio[i]))
    print(f"{mu:>9} {ratio[i]:>11.4f} {angle[i]:>12.3f} {closed:>8.3f} {gap[i]:>11.4f} "
          f"{2 * math.sqrt(4096) * np.sin(np.radians(angle[i]) / 2):>14.4f}")
    assert abs(angle[i] - closed) < 1e-6 and abs(gap[i] - 2 * math.sqrt(4096) * np.sin(np.arctan(ratio[i]) / 2)) < 1e-9
ours = np.degrees(np.arctan(np.abs(xs.mean(-1)) / xs.std(-1)))
print(f"the d = 64 tokens of sections 1-2 (mean about 3, spread 2): {ours.min():.0f} to {ours.max():.0f} degrees apart")
assert ratio[0] < 2 / 64 and angle[0] < 1 and abs(angle[3] - 45) < 2
assert round(np.degrees(np.arctan(3 / 2))) == 56 and round(ours.min()) == 45 and round(ours.max()) == 60

# %% [markdown]
# ### What the centring costs
#
# The library counts FLOPs by running: one per elementwise operation, $n - 1$ per sum of $n$ numbers (lesson 03).
# Per token of width $d$, RMSNorm's forward is $x \cdot x$ ($d$), a sum ($d - 1$), $/d$, $+\varepsilon$, a square
# root and a reciprocal (4), then $x \cdot \mathrm{rstd}$ and $\cdot\, g$ ($2d$; rstd, the reciprocal of the root
# mean square, is $1 / \sqrt{m + \varepsilon}$): **$4d + 3$**. LayerNorm (no bias) adds the mean (a sum and a
# division, $d$) and the subtraction ($d$): **$6d + 3$**, with two sums over each token where RMSNorm has one. The
# backward passes, with $N$ tokens, are $8Nd + 5N$ to $x$ for RMSNorm and $11Nd + 5N$ for LayerNorm, plus $2Nd - d$
# for the gain's gradient (a product and a sum over the tokens). These are the closed forms the library's accounting
# uses (`tinygrad_block/accounting.py`), and the counter agrees with them exactly. So does the accounting of a whole
# block: the tiny block with LayerNorms costs exactly two norms' difference more than the same block with RMSNorms.
#
# For Llama-2-7B ($d = 4096$) one RMSNorm is 16,387 FLOPs per token, forward. Tables of a block's costs
# often say "about $4d$" (16,384), and sometimes give that one figure for the row of both norms: counted, the
# two norms are $2\,(4d + 3)$ = 32,774 per token. Either way it is under 0.01 % of the block's forward FLOPs.
# The centring's saving is real but small in FLOPs. It matters more that a norm is a pass over memory for
# very little arithmetic, and RMSNorm needs fewer passes: one reduction per token instead of two in the
# forward, and two sums instead of three in the backward (one of them the gain's, over the tokens).

# %%
def counted(norm) -> tuple[int, int, int, int]:
    """(forward FLOPs, backward FLOPs, sums in the forward, sums in the backward) of `norm` on a fresh
    (B, L, d) input that wants a gradient, with a gradient of ones on the output."""
    xx = tb.randn(B, L, d, generator=tb.Generator(4), dtype=tb.float64, requires_grad=True)
    with count_flops() as fc:
        out = norm(xx)
        out.backward(tb.ones_like(out))
    sums = {phase: sum(n for (ph, _, _, op), n in fc.calls.items() if ph == phase and op == "sum")
            for phase in ("forward", "backward")}
    return fc.total("forward"), fc.total("backward"), sums["forward"], sums["backward"]


N = B * L
closed = {"RMSNorm": (4 * N * d + 3 * N, 8 * N * d + 5 * N + 2 * N * d - d),
          "LayerNorm": (6 * N * d + 3 * N, 11 * N * d + 5 * N + 2 * N * d - d)}
got = {"RMSNorm": counted(nn.RMSNorm(d, dtype=tb.float64)),
       "LayerNorm": counted(nn.LayerNorm(d, bias=False, dtype=tb.float64))}
print(f"N = {N} tokens of d = {d}: {'counted fwd':>12} {'closed form':>12} {'counted bwd':>12} {'closed form':>12} "
      f"{'sums fwd, bwd':>14}")
for name in got:
    print(f"{name:>24} {got[name][0]:>12,} {closed[name][0]:>12,} {got[name][1]:>12,} {closed[name][1]:>12,} "
          f"{got[name][2]:>9}, {got[name][3]}")
    assert got[name][:2] == closed[name]
assert got["RMSNorm"][2:] == (1, 2) and got["LayerNorm"][2:] == (2, 3)

ln_block = CFG.with_(norm="layer")
fwd_gap = acc.block_forward_flops(ln_block, L, B, matmul_only=False) - acc.block_forward_flops(CFG, L, B,
                                                                                               matmul_only=False)
bwd_gap = acc.block_backward_flops(ln_block, L, B, matmul_only=False) - acc.block_backward_flops(CFG, L, B,
                                                                                                 matmul_only=False)
print(f"tiny block, LayerNorm minus RMSNorm: forward {fwd_gap:,} = 2 x {fwd_gap // 2:,}, backward {bwd_gap:,}")
assert fwd_gap == 2 * (closed["LayerNorm"][0] - closed["RMSNorm"][0]) == 2 * 2 * N * d
assert bwd_gap == 2 * (closed["LayerNorm"][1] - closed["RMSNorm"][1]) == 2 * 3 * N * d

cfg7 = nn.preset("llama2-7b")
d7 = cfg7.d_model
with count_flops() as fc:
    nn.RMSNorm(d7, device="meta")(tb.zeros(1, 1, d7, device="meta"))              # one token, shapes only
one_norm = fc.total("forward")
block7 = acc.block_forward_flops(cfg7, 1, 1, matmul_only=False)
print(f"Llama-2-7B, per token: one RMSNorm {one_norm:,} FLOPs (4d = {4 * d7:,}); LayerNorm would be "
      f"{6 * d7 + 3:,}; the block's two norms {2 * one_norm:,} of its {block7:,} ({100 * 2 * one_norm / block7:.4f} %)")
assert one_norm == 4 * d7 + 3 == 16_387 and 4 * d7 == 16_384 and 6 * d7 + 3 == 24_579
assert 2 * one_norm == 8 * d7 + 6 == 32_774 and 2 * one_norm / block7 < 1e-4

# %% [markdown]
# ## 5. BatchNorm, and why language models don't use it
#
# BatchNorm (Ioffe and Szegedy, 2015) normalises the other way round: each *feature* by its mean and variance
# over the batch. For sequences, "the batch" means every position of every sequence, $B \cdot L$ tokens:
#
# $$\mathrm{BN}(x)_{b,t,j} = \frac{x_{b,t,j} - \mu_j}{\sqrt{\sigma_j^2 + \varepsilon}}, \qquad
# \mu_j = \frac{1}{BL}\sum_{b,t} x_{b,t,j}, \quad \sigma_j^2 = \frac{1}{BL}\sum_{b,t} (x_{b,t,j} - \mu_j)^2$$
#
# (and a gain and shift per feature, left out here). It is a few tensor operations: the same mean and variance
# as LayerNorm's, taken over other axes. Ours agrees with numpy. After it, each feature has mean 0 across the
# tokens, and a token's own entries no longer do.
#
# During training BatchNorm uses the batch's statistics, as here. At **inference**, when the trained model is only
# run (to generate text, say; lesson 16), it uses running averages collected during training instead, so the same
# network computes something different in the two modes. LayerNorm and RMSNorm compute the same thing in both, for
# any batch.

# %%
def batchnorm(x: tb.Tensor, axes=(0, 1), eps: float = 1e-5) -> tb.Tensor:
    """Training-mode BatchNorm without gain or shift: each feature (last axis) normalised by its mean and
    biased variance over `axes` (the batch, and for sequences the positions too)."""
    mean = x.mean(axis=axes, keepdims=True)                           # (1, 1, d): one mean per feature
    xc = x - mean
    var = (xc * xc).mean(axis=axes, keepdims=True)                    # (1, 1, d)
    return xc * (var + eps).rsqrt()


bn_out = batchnorm(x).numpy()
oracle = (xs - xs.mean(axis=(0, 1))) / np.sqrt(xs.var(axis=(0, 1)) + 1e-5)
print(f"batchnorm vs numpy: {np.abs(bn_out - oracle).max():.0e}; per feature: mean within "
      f"{np.abs(bn_out.mean(axis=(0, 1))).max():.0e} of 0; per token: means {bn_out.mean(-1).min():+.2f}.."
      f"{bn_out.mean(-1).max():+.2f}")
assert np.abs(bn_out - oracle).max() < 1e-14 and np.abs(bn_out.mean(axis=(0, 1))).max() < 1e-12
assert np.abs(bn_out.mean(-1)).max() > 0.1

# %% [markdown]
# ### (a) A batch of one, and a batch of others
#
# **One sequence, normalised over the batch only.** With $B = 1$ the "batch" of each feature at each position is a
# single number. Its mean is that number and its variance is 0, so every output is $0 / \sqrt{\varepsilon} = 0$: the
# layer erases its input. Generating text, which picks a next token from the probabilities of lesson 04, appends it
# and runs again, can feed the model one new token at a time ($B = 1$, $L = 1$): the model keeps what attention
# (lesson 06) computed for the earlier tokens, its KV cache (lesson 07), and runs only the new one. That is the same
# situation even when the statistics also run over the positions.
#
# **One sequence, normalised over its positions.** Now the statistics come from the sequence's own tokens,
# including the ones after the current token. In a causal language model, where position $i$ may use only the
# tokens $0 \dots i$ (lesson 04), that leaks the future: change the last token, and the output at position 0
# moves. LayerNorm's output at position 0 does not change at all.
#
# **A batch of several sequences.** A token's output now depends on which other sequences happen to share
# its batch. Replace sequence 3 of a batch of 4 by other text: sequence 0's BatchNorm output changes, while
# its LayerNorm and RMSNorm outputs are the same to the last bit.

# %%
one = x[:1]                                                                         # (1, L, d)
print(f"B = 1: variance over the batch axis, largest of all {L * d}: {one.var(axis=0).numpy().max()}")
print(f"B = 1, over the batch only: output[0, 0, :4] = {batchnorm(one, axes=(0,)).numpy()[0, 0, :4]}, largest "
      f"|output| = {np.abs(batchnorm(one, axes=(0,)).numpy()).max()}")
print(f"B = 1, L = 1 (one token while generating), over batch and positions: largest |output| = "
      f"{np.abs(batchnorm(x[:1, :1]).numpy()).max()}")
assert (one.var(axis=0).numpy() == 0).all()
assert (batchnorm(one, axes=(0,)).numpy() == 0).all() and (batchnorm(x[:1, :1]).numpy() == 0).all()

later = one.numpy().copy()
later[0, -1] += 1.0                                                                 # change the last token
later = tb.tensor(later, dtype=tb.float64)
bn_leak = np.abs(batchnorm(later).numpy()[0, 0] - batchnorm(one).numpy()[0, 0]).max()
ln_leak = np.abs(ln(later).numpy()[0, 0] - ln(one).numpy()[0, 0]).max()
print(f"last token changed: position 0 moves by {bn_leak:.3f} under BatchNorm, by {ln_leak} under LayerNorm")
assert bn_leak > 0.01 and ln_leak == 0.0

batch = tb.randn(4, L, d, generator=tb.Generator(6), dtype=tb.float64)              # (4, L, d)
other = np.concatenate([batch.numpy()[:3], 3.0 + 2.0 * batch.numpy()[3:]])          # sequence 3 replaced
other = tb.tensor(other, dtype=tb.float64)
moves = {name: np.abs(f(other).numpy()[0] - f(batch).numpy()[0]).max()
         for name, f in (("BatchNorm", batchnorm), ("LayerNorm", ln), ("RMSNorm", rms))}
print("sequence 3 replaced; sequence 0's output moves by: " + ", ".join(f"{k} {v:.3g}" for k, v in moves.items()))
assert moves["BatchNorm"] > 0.1 and moves["LayerNorm"] == 0.0 and moves["RMSNorm"] == 0.0

# %% [markdown]
# ### (b) Ragged lengths: padding changes every real token
#
# Sequences in a batch have different lengths, so the short ones are padded, here with zero vectors, to the
# length of the longest. Three sequences of 8, 5 and 3 tokens make 16 real tokens. Pad them to a common length
# $L_{pad} \ge 8$: a fraction $f = 16 / (3 L_{pad})$ of the positions is real. The padding enters BatchNorm's
# statistics. If the real tokens have per-feature mean $\mu_j$ and variance $\sigma_j^2$, then with the zero
# padding the statistics become
#
# $$\mu'_j = f\,\mu_j, \qquad \sigma'^2_j = f\,(\sigma_j^2 + \mu_j^2) - f^2 \mu_j^2,$$
#
# and every real token's output changes with them. The padding pulls each feature's mean towards 0 and
# changes its variance by $\sigma'^2_j - \sigma_j^2 = (1 - f)(f\mu_j^2 - \sigma_j^2)$, which shrinks it
# unless the feature's mean is large; with much padding every feature's variance shrinks, and the real tokens
# are scaled up. The more padding, the larger the change. (The fix is to take the statistics over the real
# tokens only: that is the first exercise.) LayerNorm and RMSNorm never look across tokens, so the real
# tokens' outputs are exactly those of the unpadded sequences, whatever the padding.
#
# The table and the plot give, for each $L_{pad}$, the largest change of a real token's output. For BatchNorm
# the change is measured from BatchNorm with statistics over the 16 real tokens alone; for LayerNorm and
# RMSNorm, from each norm applied to the three sequences without padding.

# %%
lengths = [8, 5, 3]
seqs = [tb.randn(1, n, d, generator=tb.Generator(10 + i), dtype=tb.float64) + 0.5 for i, n in enumerate(lengths)]
real = np.concatenate([s.numpy()[0] for s in seqs])                                 # (16, d)
mu, sigma2 = real.mean(0), real.var(0)
reference = batchnorm(tb.tensor(real[None], dtype=tb.float64)).numpy()[0]          # statistics of the 16 real tokens
alone = {name: np.concatenate([f(s).numpy()[0] for s in seqs]) for name, f in (("LayerNorm", ln), ("RMSNorm", rms))}


def padded(L_pad: int) -> tb.Tensor:
    """The three sequences, padded with zero vectors to L_pad positions: (3, L_pad, d)."""
    out = np.zeros((len(lengths), L_pad, d))
    for i, s in enumerate(seqs):
        out[i, :lengths[i]] = s.numpy()[0]
    return tb.tensor(out, dtype=tb.float64)


def real_rows(y: np.ndarray) -> np.ndarray:
    """The real tokens of a padded (3, L_pad, d) output, in order: (16, d)."""
    return np.concatenate([y[i, :n] for i, n in enumerate(lengths)])


pads = list(range(8, 41, 2))
drift, variances = {"BatchNorm": [], "LayerNorm": [], "RMSNorm": []}, []
for L_pad in pads:
    xp = padded(L_pad)
    f = sum(lengths) / (len(lengths) * L_pad)
    bn_real = real_rows(batchnorm(xp).numpy())
    by_formula = (real - f * mu) / np.sqrt(f * (sigma2 + mu ** 2) - f ** 2 * mu ** 2 + 1e-5)
    assert np.abs(bn_real - by_formula).max() < 1e-12
    variances.append(f * (sigma2 + mu ** 2) - f ** 2 * mu ** 2)                  # (d,): sigma'^2 per feature
    drift["BatchNorm"].append(np.abs(bn_real - reference).max())
    for name, norm in (("LayerNorm", ln), ("RMSNorm", rms)):
        drift[name].append(np.abs(real_rows(norm(xp).numpy()) - alone[name]).max())
print(f"{'L_pad':>6} {'real share f':>13} " + " ".join(f"{k:>10}" for k in drift))
for i, L_pad in enumerate(pads):
    if L_pad in (8, 16, 24, 40):
        print(f"{L_pad:>6} {16 / (3 * L_pad):>13.3f} " + " ".join(f"{drift[k][i]:>10.3g}" for k in drift))
print("padded BatchNorm equals the formula with mu' = f mu, sigma'^2 = f (sigma^2 + mu^2) - f^2 mu^2 at every L_pad")
assert drift["BatchNorm"][0] > 0.3 and all(np.diff(drift["BatchNorm"]) > 0)
shrunk = [int((v < sigma2).sum()) for v in variances]
print(f"features whose variance the padding shrinks: {shrunk[0]} of {d} at L_pad = 8, {shrunk[-1]} at L_pad = 40")
for L_pad, v in zip(pads, variances):
    f = sum(lengths) / (3 * L_pad)
    assert np.abs(v - sigma2 - (1 - f) * (f * mu ** 2 - sigma2)).max() < 1e-12
assert shrunk[-1] == d and shrunk[0] < d
assert max(drift["LayerNorm"]) == 0.0 and max(drift["RMSNorm"]) == 0.0

fig = figure(7.5, 4)
ax = fig.add_subplot()
ax.plot(pads, drift["BatchNorm"], "o-", color="C3", label="BatchNorm (statistics over batch and positions)")
ax.plot(pads, drift["LayerNorm"], "s-", color="C0", ms=7, label="LayerNorm: exactly 0")
ax.plot(pads, drift["RMSNorm"], "x--", color="C2", ms=7, label="RMSNorm: exactly 0")
ax.set(xlabel="padded length L_pad (16 real tokens among 3 L_pad positions)",
       ylabel="largest change of a real token's output\n(vs the 16 real tokens without padding)",
       title="Sequences of 8, 5 and 3 tokens padded with zeros: who notices?")
ax.legend(loc="upper left")
show(fig, OUT / "padding_batchnorm.png")

# %% [markdown]
# ## 6. The backward pass by hand
#
# `manual.rmsnorm_backward` is RMSNorm's backward derived on paper. Write $r = (m + \varepsilon)^{-1/2}$ (the
# "rstd"), $n = x\,r$ (the normalised vector) and $y = g \odot n$. Given the gradient $\bar y$ of the loss with
# respect to the output, the gain's gradient sums $\bar y \odot n$ over the tokens, and the gradient reaching
# $n$ is $\bar n = \bar y \odot g$. Every entry of $n$ depends on every entry of $x$ through $r$, with
# $\partial r / \partial x_j = -r^3 x_j / d$, so
#
# $$\bar x_j = r\,\bar n_j + \sum_i \bar n_i\, x_i \Big(-\frac{r^3 x_j}{d}\Big)
# = r\Big(\bar n_j - n_j \cdot \frac1d \sum_i \bar n_i\, n_i\Big), \qquad
# \bar x = r\,\big(\bar n - n \,\mathrm{mean}(\bar n \odot n)\big).$$
#
# In `manual/norms.py` this is the line `dx = rstd * (dn - n * (dn * n).mean(axis=-1, keepdims=True))`. The
# second term takes out of $\bar n$ its component along $n$ (exactly so at $\varepsilon = 0$, where
# $\lVert n \rVert^2 = d$). At $\varepsilon = 0$ this is geometry again:
# stretching $x$ does not move the output, so the gradient has no component along $x$, and
# $x \cdot \bar x = 0$. With $\varepsilon$ it is small but not zero: $x \cdot \bar x = r\,(x \cdot \bar n)\,
# \varepsilon / (m + \varepsilon)$.
#
# We check the formula three ways on a (2, 3, 64) input with a random gain. The hand-derived backward and
# autograd (which differentiates `nn.RMSNorm`'s forward one primitive at a time) agree to float64 rounding,
# and both agree with four-point central differences of a plain numpy forward, at every entry of $x$ and $g$,
# to better than $10^{-8}$.

# %%
def rmsnorm_np(xv: np.ndarray, gv: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """RMSNorm in plain numpy: the oracle the finite differences run on."""
    return xv / np.sqrt((xv * xv).mean(-1, keepdims=True) + eps) * gv


xb = tb.randn(2, 3, d, generator=tb.Generator(7), dtype=tb.float64) * 2.0 + 3.0     # (2, 3, d)
gb = 1.0 + 0.3 * tb.randn(d, generator=tb.Generator(8), dtype=tb.float64)          # (d,)
dout = np.random.default_rng(9).standard_normal(xb.shape)                           # the gradient on the output

norm = nn.RMSNorm(d, dtype=tb.float64)
norm.load_state_dict({"weight": gb})
xa = xb.detach().requires_grad_()
norm(xa).backward(tb.tensor(dout, dtype=tb.float64))                                # autograd
_, cache = manual.rmsnorm_forward(xb.numpy(), gb.numpy(), 1e-5)
dx, grads = manual.rmsnorm_backward(dout, cache)                                    # by hand
fd_x = central_difference(lambda v: (rmsnorm_np(v, gb.numpy()) * dout).sum(), xb.numpy())
fd_g = central_difference(lambda v: (rmsnorm_np(xb.numpy(), v) * dout).sum(), gb.numpy())
print(f"dx: by hand vs autograd {rel_err(dx, xa.grad.numpy()):.1e}, vs finite differences {rel_err(dx, fd_x):.1e} "
      f"({fd_x.size} entries)")
print(f"dg: by hand vs autograd {rel_err(grads['weight'], norm.weight.grad.numpy()):.1e}, vs finite differences "
      f"{rel_err(grads['weight'], fd_g):.1e} ({fd_g.size} entries)")
assert rel_err(dx, xa.grad.numpy()) < 1e-14 and rel_err(grads["weight"], norm.weight.grad.numpy()) < 1e-14
assert rel_err(dx, fd_x) <= 1e-8 and rel_err(grads["weight"], fd_g) <= 1e-8

xv, r_ = xb.numpy(), cache[2]                                                       # rstd, (2, 3, 1)
dn = dout * gb.numpy()
radial = (xv * dx).sum(-1)                                                          # x . dx per token
mb = (xv * xv).mean(-1)
predicted = r_[..., 0] * (xv * dn).sum(-1) * 1e-5 / (mb + 1e-5)
_, cache0 = manual.rmsnorm_forward(xv, gb.numpy(), 0.0)
dx0, _ = manual.rmsnorm_backward(dout, cache0)
cos0 = (xv * dx0).sum(-1) / (np.linalg.norm(xv, axis=-1) * np.linalg.norm(dx0, axis=-1))
print(f"x . dx: {np.abs(radial).max():.2e} at most, = r (x . dn) eps / (m + eps) to "
      f"{np.abs(radial - predicted).max():.0e}; at eps = 0 the cosine of x and dx is {np.abs(cos0).max():.0e}")
assert np.abs(radial - predicted).max() < 1e-13 and np.abs(cos0).max() < 1e-14

# %% [markdown]
# LayerNorm's backward is the same formula with one more projection. The forward removed the mean of $x$, and
# the backward removes the mean of $\bar n$: $\bar x = r\,(\bar n - \mathrm{mean}(\bar n) - n\,\mathrm{mean}(\bar
# n \odot n))$. Deriving and checking it is the second exercise.

# %% [markdown]
# ## Check yourself
#
# 1. Where does RMSNorm put every token, and what does LayerNorm do first?
#
#    <details><summary>Answer</summary>
#
#    With gain 1 and $\varepsilon = 0$, RMSNorm keeps the token's direction and sets its length to $\sqrt d$ (8 at
#    $d = 64$): every token lands on the sphere of radius $\sqrt d$. LayerNorm first subtracts the mean, which drops
#    the token onto the plane $\sum_i x_i = 0$, and then does the same: $\mathrm{LayerNorm}(x) =
#    \mathrm{RMSNorm}(x - \mu)$.
#
#    </details>
#
# 2. What does $\varepsilon$ save a constant token from?
#
#    <details><summary>Answer</summary>
#
#    A constant token has $\sigma = 0$ and $x - \mu = 0$, so $(x - \mu)/\sigma$ is $0/0$, NaN, which later layers
#    spread to the whole sequence. With $\varepsilon$ the division is by $\sqrt{\varepsilon}$ and the token comes out
#    as zeros.
#
#    </details>
#
# 3. What does dropping the centring save, for Llama-2-7B's width?
#
#    <details><summary>Answer</summary>
#
#    One RMSNorm costs $4d + 3$ = 16,387 FLOPs per token forward, LayerNorm $6d + 3$, so the saving is small in
#    FLOPs. It matters more that RMSNorm makes one pass over each token instead of two in the forward.
#
#    </details>
#
# 4. Why does BatchNorm not suit a language model that generates one token at a time?
#
#    <details><summary>Answer</summary>
#
#    On a batch of one token each feature's statistics come from a single number: the mean is that number, the
#    variance 0, and every output is 0. Over a sequence's own positions it would also read the future, and a
#    token's output would depend on the other sequences in its batch. LayerNorm and RMSNorm look at one token only.
#
#    </details>

# %% [markdown]
# ## Words from this lesson
#
# - **LayerNorm**: a norm that subtracts a token's mean, divides by its standard deviation, then applies a gain and
#   a bias per feature (§1)
# - **RMSNorm**: a norm that divides a token's vector by the root mean square of its entries, then applies a gain;
#   Llama's norm (§1)
# - **root mean square**: $\sqrt{\tfrac1d \sum_i x_i^2}$, the typical size of a vector's entries (§1)
# - **constant token**: a token whose entries are all equal, which the formula without $\varepsilon$ turns into NaN
#   (§2)
# - **padding**: filler positions that bring a short sequence to the length of the others in its batch (§2)
# - **centring**: subtracting each token's mean, the step RMSNorm drops (§4)
# - **rstd**: the reciprocal of the root mean square, $1 / \sqrt{m + \varepsilon}$ (§4)
# - **BatchNorm**: a norm that normalises each feature by its mean and variance over the batch, not over the token
#   (§5)
# - **inference**: running a trained model only, to generate text for example, without training it further (§5)

# %% [markdown]
# ## Exercises
#
# 1. `masked_batchnorm`: BatchNorm that ignores padding. Given $x$ (B, L, d) and a mask (B, L) with 1.0 at real
#    tokens and 0.0 at padding, `masked_batchnorm(x, mask, eps)` normalises each feature by the mean and the biased
#    variance (divided by the count, not by the count minus 1) of the real tokens only, and returns 0 at the padding
#    positions, using Tensor operations so that autograd differentiates it. The checker compares with numpy on the
#    real tokens and with finite differences, and it recognises statistics that still count the padding, padding
#    left non-zero, and LayerNorm's axis in place of BatchNorm's.
# 2. `layernorm_backward`: LayerNorm's backward by hand, in numpy. `layernorm_backward(dout, x, weight, eps)`
#    returns `(dx, dweight, dbias)` for $y = g \odot (x - \mu)\,r + b$ over the last axis, $x$ of shape
#    (..., d). The checker compares with autograd through `nn.LayerNorm` and with finite differences, and
#    names the usual slips: the missing $\mathrm{mean}(\bar n)$ term, $r$ treated as a constant, the gain's
#    gradient not summed over every token.
# 3. `fused_add_rmsnorm`: in a block, a norm follows a residual add, $h = x + \Delta$, $a = \mathrm{RMSNorm}(h)$.
#    Inference engines (the programs that run trained models, lesson 16) fuse the two into one pass: it reads
#    $x$ and $\Delta$ once and writes both $h$ (the stream goes on) and $a$ (the sublayer reads it).
#    `fused_add_rmsnorm(x, residual, weight, eps)` returns `(normed, new_residual)` as numpy arrays. The checker
#    compares with `nn.RMSNorm` applied after the add.
# 4. `fused_add_rmsnorm_backward`: its backward by hand.
#    `fused_add_rmsnorm_backward(d_normed, d_new_residual, x, residual, weight, eps)` returns
#    `(dx, dresidual, dweight)`. The new residual is an output too, so its gradient flows on: the gradient of
#    $h$ is what comes back through the norm **plus** `d_new_residual`. The checker compares with autograd
#    of the unfused version and with finite differences, and says so when that second gradient is missing.
#
# `python -m tinygrad_block exercise 05` writes `exercise_05.py` with the four functions to fill in;
# `python -m tinygrad_block check 05` checks them and says what is wrong.
