# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 02 — Backpropagation
#
# Training a model means nudging its millions or billions of **parameters**, the numbers it learns, against the
# gradient of its **loss**, one number that says how wrong its outputs are, so that the loss goes down (lesson 14
# trains one). One backward pass delivers all of those gradients for a small multiple of the cost of the forward
# pass (lesson 03 counts it). This lesson takes that pass apart: what each primitive contributes, the order in which
# the engine runs them, what happens where a tensor is used more than once, and how we make sure that every gradient
# is right.
#
# **What you will learn**
# - the chain rule as the engine applies it: each primitive turns the gradient of its output into gradients of
#   its inputs, knowing nothing about the rest of the graph;
# - why the backward pass needs a **topological order**, and the order the engine really runs, watched as it
#   happens;
# - why gradients **add up** where a tensor is reused, and where the engine does those additions;
# - finite differences as the independent check of every gradient, and why the checker uses four points rather
#   than two (with a picture of truncation against rounding error);
# - `tb.gradcheck`, and a broken primitive caught by it.
#
# Run it as a script, `python -m tinygrad_block lesson 02`, or as a notebook,
# `python -m tinygrad_block lesson 02 --notebook --execute` (it lands beside this file).

# %%
import inspect
import math
from collections import Counter

import numpy as np

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.autograd import toposort
from tinygrad_block.graph import record_graph
from tinygrad_block.pictures import figure

from course import out_dir, show

OUT = out_dir(2)          # lessons/out/02/: this lesson's pictures

# %% [markdown]
# ## 1. The chain rule, one primitive at a time
#
# Take $z = w x + b$, $a = \sin z$ and $L = e^a$, with $w = -1.5$, $x = 0.5$ and $b = 2$, so $z = 1.25$. The
# derivative of a composition is the product of the local derivatives along the way:
# $\frac{\partial L}{\partial w} = \frac{\partial L}{\partial a} \cdot \frac{\partial a}{\partial z} \cdot
# \frac{\partial z}{\partial w} = e^a \cdot \cos z \cdot x$.
#
# Backpropagation computes that product from the output end. `backward()` starts with
# $\partial L / \partial L = 1$ and hands it to the last primitive, `exp`. Each primitive receives the gradient of
# the loss with respect to its own output (the **upstream gradient** $g$), multiplies by its own local
# derivative, and passes the result to whatever made its inputs. `exp` sends $g \cdot e^a$; `sin` sends
# $g \cdot \cos z$; `add` passes $g$ unchanged to both of its inputs; `mul` sends $g \cdot x$ to $w$ and
# $g \cdot w$ to $x$. No primitive needs to know what lies before or after it in the graph.
#
# | node | local derivative | $\partial L / \partial\,$node |
# |---|---|---|
# | $L = e^a$ | | $1$ |
# | $a = \sin z$ | $\partial L / \partial a = e^a$ | $e^a$ |
# | $z = wx + b$ | $\partial a / \partial z = \cos z$ | $e^a \cos z$ |
# | $w$ | $\partial z / \partial w = x$ | $e^a \cos z \cdot x$ |
# | $x$ | $\partial z / \partial x = w$ | $e^a \cos z \cdot w$ |
# | $b$ | $\partial z / \partial b = 1$ | $e^a \cos z$ |
#
# `retain_grad()` keeps the gradient of an intermediate tensor too, so we can read every row of the table off
# the engine and compare it with the hand products.

# %%
w, x, b = (tb.tensor(v, dtype=tb.float64, requires_grad=True) for v in (-1.5, 0.5, 2.0))
z = (w * x + b).retain_grad()
a = z.sin().retain_grad()
L = a.exp()
L.backward()
zv = -1.5 * 0.5 + 2.0
by_hand = {"a": math.exp(math.sin(zv)), "z": math.exp(math.sin(zv)) * math.cos(zv)}
by_hand |= {"w": by_hand["z"] * 0.5, "x": by_hand["z"] * -1.5, "b": by_hand["z"]}
engine = {"a": a.grad.item(), "z": z.grad.item(), "w": w.grad.item(), "x": x.grad.item(), "b": b.grad.item()}
print(f"z = {z.item():g}, a = sin z = {a.item():.6f}, L = e^a = {L.item():.6f}")
print(f"{'node':5} {'dL/dnode, autograd':>20} {'by hand':>12}")
for name in by_hand:
    print(f"{name:5} {engine[name]:>20.12f} {by_hand[name]:>12.12f}")
assert z.item() == zv == 1.25
assert all(math.isclose(engine[k], by_hand[k], rel_tol=1e-15) for k in by_hand)

# %% [markdown]
# One backward sweep gives the gradient with respect to **every** input at once: here $w$, $x$ and $b$ together, for
# 5 FLOPs of backward primitives against 4 of forward. A finite-difference estimate (section 4) needs four
# evaluations of the whole function per input number. Llama-2-7B, an open language model published by Meta, has
# 6,738,415,616 parameters (the "7B" of its name is that count, rounded). For all of them that would be
# 26,953,662,464 forward passes for one gradient, against one backward pass. That asymmetry is why every
# deep-learning framework differentiates in reverse.

# %%
w, x, b = (tb.tensor(v, dtype=tb.float64, requires_grad=True) for v in (-1.5, 0.5, 2.0))
events = []
with tb.observe(events.append):
    L = (w * x + b).sin().exp()
    L.backward()
flops = Counter()
for e in events:
    flops[e.phase] += e.flops
print(f"forward: {[e.op.name for e in events if e.phase == 'forward']}, {flops['forward']} FLOPs")
print(f"backward: {[e.op.name for e in events if e.phase == 'backward']}, {flops['backward']} FLOPs; "
      f"gradients of w, x, b: {w.grad.item():.6f}, {x.grad.item():.6f}, {b.grad.item():.6f}")
assert (flops["forward"], flops["backward"]) == (4, 5)
assert [e.op.name for e in events if e.phase == "backward"] == ["mul", "cos", "mul", "mul", "mul"]
assert math.isclose(b.grad.item(), by_hand["b"], rel_tol=1e-15)
N = nn.LM(nn.preset("llama2-7b"), generator=tb.Generator(0), device="meta").num_parameters()   # shapes only
print(f"Llama-2-7B: {N:,} parameters; four-point differences for all of them: {4 * N:,} forward passes")
assert N == 6_738_415_616 and 4 * N == 26_953_662_464 and round(N / 1e9) == 7

# %% [markdown]
# ## 2. Topological order: no primitive runs before its gradient is complete
#
# In a chain the order is obvious. A graph can fork, though. Take $h = \sin x$ and $y = h + e^{h \cdot h}$ at
# $x = 0.7$: the tensor $h$ is read three times, twice by the `mul` and once by the `add`. So
# $\partial y / \partial h$ is the sum of three shares, and `sin` may apply its local derivative only once all
# three have arrived. The engine makes sure of that by sorting the calls first: each call comes **before the
# calls that made its inputs**, so every call runs after all the calls that used its output. That is a
# topological order of the graph. The engine builds it by a depth-first walk from the output, which lists each
# call after the calls that made its inputs (a post-order), and then reverses the list. The walk uses a stack
# of its own, not recursion, so a graph thousands of calls deep is sorted as easily as this one.
#
# Below, each line of the forward pass runs inside `tb.step(...)`, which labels its primitive calls. The backward
# primitives carry the label of the forward call they differentiate, so watching them with `tb.observe` shows
# the order in which the engine really ran. The drawing shows the forward graph, with the value each call
# computed (and, on `sin`, the gradient of $h$, kept by `retain_grad()`): $h$ leaves `sin` along two arrows, one
# into the `mul` (which reads it twice) and one into the `add`.

# %%
x = tb.tensor(0.7, dtype=tb.float64, requires_grad=True)
events = []
with record_graph(None, x) as graph, tb.observe(events.append):
    with tb.step("h = sin x"):
        h = x.sin().retain_grad()
    with tb.step("s = h * h"):
        s = h * h
    with tb.step("e = exp s"):
        e = s.exp()
    with tb.step("y = h + e"):
        y = h + e
    order = [(call.name, call.step) for call in toposort(y._ctx)]   # read before backward frees the calls
    y.backward()
show(graph.render(OUT / "fork_forward.png", values=True, title="forward: y = h + exp(h * h), h = sin x", dpi=120))
print("topological order:", ", ".join(f"{name} ({step})" for name, step in order))
backward = [(e.step or "accumulate", e.op.name) for e in events if e.phase == "backward"]
print("backward primitives, in the order they ran:")
for step in dict.fromkeys(s for s, _ in backward):
    print(f"  {step:11} {', '.join(op for s, op in backward if s == step)}")
ran = [s for s, _ in backward]
assert [step for _, step in order] == ["y = h + e", "e = exp s", "s = h * h", "h = sin x"]
assert list(dict.fromkeys(ran)) == ["e = exp s", "s = h * h", "accumulate", "h = sin x"]
assert ran.index("h = sin x") > max(i for i, s in enumerate(ran) if s in ("s = h * h", "accumulate"))
assert "y = h + e" not in ran                                   # add passes g on as it is: no primitive

# %% [markdown]
# The `add` ran no primitive at all: its local derivative is 1, so it passes $g$ on as it is. `exp` ran one
# multiplication, the `mul` two (one share of $h$ for each time it read $h$), then two additions summed the three
# shares, and only then did `sin` run.
#
# What if `sin` ran too early? A walk that handles calls in the order it first meets them, breadth-first from
# $y$, reaches `sin` straight after the `add`, because $y$ reads $h$ directly. At that moment only the `add`'s
# share, 1, has arrived, so `sin` would pass on $\cos(0.7) \cdot 1 \approx 0.765$. The right answer is
# $(1 + 2h\,e^{h^2}) \cos x \approx 2.257$, and the shares that arrive later would have nowhere to go.

# %%
hv = math.sin(0.7)
too_early = math.cos(0.7) * 1.0
right = (1 + 2 * hv * math.exp(hv * hv)) * math.cos(0.7)
print(f"dy/dx: autograd {x.grad.item():.6f}, by hand {right:.6f}; sin run with only the add's share: {too_early:.6f}")
assert math.isclose(x.grad.item(), right, rel_tol=1e-15) and round(right, 3) == 2.257 and round(too_early, 3) == 0.765

# %% [markdown]
# ## 3. Gradients add up where a tensor is reused
#
# Nudge $h$ by $\delta$ and $y$ moves through every path that reads $h$. To first order the effects add, so
# $\partial y / \partial h$ is the **sum** of what each use sends back. Here that is 1 from the `add` and
# $h\,e^{h^2}$ from each of the `mul`'s two reads, $1 + 2h\,e^{h^2}$ in all. In the engine, a gradient that
# arrives where another is already waiting is added to it. Those additions are real primitive calls, and an
# observer sees them with `e.origin == 'accumulate'`. A tensor read $n$ times needs $n - 1$ of them. $h$ is read
# three times, every other tensor once, so the backward pass above made exactly 2.
#
# The drawing of the backward pass shows them as the orange "paths meet" circles, and each box shows the value it
# computed (for a single number, "mean" is the number itself and "std" is 0). The two `mul` boxes each send
# $h\,e^{h^2} \approx 0.976$. The `add`'s share of 1 has no box of its own, since the `add` runs no primitive:
# it waits in the first circle, which makes $1 + 0.976 = 1.98$. The second circle adds the other share, 2.95,
# and `sin`'s backward multiplies that by $\cos 0.7 \approx 0.765$: $\partial y / \partial x \approx 2.26$.

# %%
reads = Counter(id(t) for e in events if e.phase == "forward" for t in e.inputs if t.requires_grad)
accumulations = [e for e in events if e.origin == "accumulate"]
shares = [1.0, hv * math.exp(hv * hv), hv * math.exp(hv * hv)]
print(f"reads per tensor: {sorted(reads.values(), reverse=True)}; accumulate events: "
      f"{[(e.op.name, e.output.shape) for e in accumulations]}")
print(f"dy/dh = {' + '.join(f'{v:.6f}' for v in shares)} = {sum(shares):.6f}; autograd: {h.grad.item():.6f}")
show(graph.render(OUT / "fork_backward.png", backward=True, values=True, title="backward: gradients of y", dpi=120))
assert reads[id(h)] == 3 and len(accumulations) == sum(n - 1 for n in reads.values()) == 2
assert all(e.op.name == "add" for e in accumulations)
assert math.isclose(h.grad.item(), sum(shares), rel_tol=1e-15)
circles = [e.output.item() for e in accumulations]                       # what the two circles computed
print(f"the circles: {circles[0]:.2f} = 1 + {shares[1]:.3f}, then {circles[1]:.2f}; times cos 0.7 = "
      f"{math.cos(0.7):.3f}: dy/dx = {right:.2f}")
assert math.isclose(circles[0], 1 + shares[1], rel_tol=1e-15) and math.isclose(circles[1], sum(shares), rel_tol=1e-15)
assert (round(shares[1], 3), round(circles[0], 2), round(circles[1], 2)) == (0.976, 1.98, 2.95)
assert (round(math.cos(0.7), 3), round(right, 2)) == (0.765, 2.26)

# %% [markdown]
# The same thing happens wherever one tensor feeds several products. In a model's attention (the part where each
# position of a text reads from the others, lesson 06), one input $n$ is multiplied by three weight matrices, $W_Q$,
# $W_K$ and $W_V$ (each stored (out, in), so the product is $n W^\top$; `@` is the matrix product, and lesson 03
# derives its backward: the gradient of $n$ through $n W^\top$ is $g\,W$). So the gradient of $n$ is a three-way
# sum, $\partial n = g_Q W_Q + g_K W_K + g_V W_V$, where $g_Q$, $g_K$, $g_V$ are the gradients arriving at the three
# outputs. Below, three products read one tensor of shape (2, 5, 16), and the engine makes 2 accumulations of that
# shape, which match the three terms summed by hand in numpy. Two of the matrices are narrower (8 outputs against
# 16), as in models that make two of the three products smaller to save memory (lesson 07); the sum does not care.

# %%
g = tb.Generator(0)
n = tb.randn(2, 5, 16, generator=g, dtype=tb.float64, requires_grad=True)            # 10 inputs of width 16
weights = [tb.randn(d_out, 16, generator=g, dtype=tb.float64) for d_out in (16, 8, 8)]   # W_Q, W_K, W_V
upstream = [tb.randn(2, 5, w.shape[0], generator=g, dtype=tb.float64) for w in weights]  # g_Q, g_K, g_V
events = []
with tb.observe(events.append):
    loss = sum(((n @ w.mT * u).sum() for w, u in zip(weights, upstream)), tb.tensor(0.0, dtype=tb.float64))
    loss.backward()
sums = [e.output.shape for e in events if e.origin == "accumulate"]
by_hand = sum(u.numpy() @ w.numpy() for w, u in zip(weights, upstream))
gap = np.abs(n.grad.numpy() - by_hand).max()
print(f"accumulations: {sums}; |autograd - (g_Q W_Q + g_K W_K + g_V W_V)| = {gap:.1e}")
assert sums == [(2, 5, 16), (2, 5, 16)] and gap < 1e-14

# %% [markdown]
# Gradients also add up **across** backward passes: `backward()` adds into `.grad` rather than replacing it (as
# PyTorch, the most widely used deep-learning library, does too), so a second pass through the same graph (kept with
# `retain_graph=True`) doubles it. That lets a training step sum the gradients of several **batches** (groups of
# examples run together) before it changes the parameters, and it is why the training loop of lesson 14 clears them
# (`zero_grad()`) before each new step.

# %%
x = tb.tensor(2.0, dtype=tb.float64, requires_grad=True)
y = x * x + x * 3.0
y.backward(retain_graph=True)
first = x.grad.item()
y.backward()
print(f"dy/dx after one backward: {first:g}; after a second: {x.grad.item():g}")
assert first == 2 * 2.0 + 3 and x.grad.item() == 2 * first

# %% [markdown]
# ## 4. Finite differences, and why the checker uses four points
#
# Every backward rule in the engine is checked against an estimate that knows nothing about it: finite
# differences of the function itself. Taylor's formula gives
#
# $$f(x \pm h) = f \pm h f' + \tfrac{h^2}{2} f'' \pm \tfrac{h^3}{6} f''' + \tfrac{h^4}{24} f'''' \pm
#   \tfrac{h^5}{120} f^{(5)} + \dots,$$
#
# so the **two-point** central difference is
#
# $$D_2(h) = \frac{f(x+h) - f(x-h)}{2h} = f' + \frac{h^2}{6} f''' + \frac{h^4}{120} f^{(5)} + \dots$$
#
# Its error is of order $h^2$. For $f = \sin$ at $x = 1$ and $h = 10^{-3}$ it is $-\frac{h^2}{6}\cos 1 \approx
# -9.0 \times 10^{-8}$, a relative error of $1.7 \times 10^{-7}$. The engine's checker, `tb.gradcheck` (section 5),
# demands agreement to a relative $10^{-8}$, so a two-point estimate would reject correct gradients. Combining two
# widths cancels the $h^2$ term:
#
# $$D_4(h) = \frac{4 D_2(h) - D_2(2h)}{3} = \frac{8\,(f(x+h) - f(x-h)) - (f(x+2h) - f(x-2h))}{12h}
#   = f' - \frac{h^4}{30} f^{(5)} + \dots$$
#
# Its truncation error at $h = 10^{-3}$ would be $\frac{h^4}{30}\cos 1 \approx 1.8 \times 10^{-14}$. The
# measured error, $1.1 \times 10^{-13}$, is larger, because at that point a second error dominates: rounding.

# %%
def d2(f, x, h):
    """Two-point central difference."""
    return (f(x + h) - f(x - h)) / (2 * h)


def d4(f, x, h):
    """Four-point central difference."""
    return (8 * (f(x + h) - f(x - h)) - (f(x + 2 * h) - f(x - 2 * h))) / (12 * h)


exact = math.cos(1.0)
e2, e4 = d2(math.sin, 1.0, 1e-3) - exact, d4(math.sin, 1.0, 1e-3) - exact
print(f"sin'(1) at h = 1e-3: two-point error {e2:.3e} (h^2/6 f''' = {-1e-6 / 6 * exact:.3e}), relative "
      f"{abs(e2) / exact:.1e}")
print(f"                     four-point error {e4:.1e} (truncation h^4/30 f^(5) would be {1e-12 / 30 * exact:.1e})")
assert math.isclose(e2, -1e-6 / 6 * exact, rel_tol=1e-5) and round(e2, 9) == -9.0e-8
rtol = inspect.signature(tb.gradcheck).parameters["rtol"].default
assert round(abs(e2) / exact, 8) == 1.7e-7 and abs(e2) / exact > rtol == 1e-8
assert round(1e-12 / 30 * exact, 15) == 1.8e-14 and round(abs(e4), 14) == 1.1e-13

# %% [markdown]
# Each value $f(x \pm h)$ is rounded to float64, an error of about $\varepsilon |f|$ with
# $\varepsilon = 2.2 \times 10^{-16}$. The difference does not shrink those errors, and dividing by $h$ magnifies
# them. So the total error is roughly
#
# $$\underbrace{\tfrac{h^2}{6} |f'''|}_{\text{truncation}} + \underbrace{\varepsilon |f| / h}_{\text{rounding}}
#   \quad\text{(two points)}, \qquad \tfrac{h^4}{30} |f^{(5)}| + 1.5\,\varepsilon |f| / h \quad\text{(four points,
#   whose weights } \tfrac{8+8+1+1}{12} = 1.5\text{)}.$$
#
# Shrinking $h$ cuts the first term and grows the second. The picture plots the measured errors against $h$
# (dots), with the two terms as lines. On the right, the errors fall along slopes 2 and 4; on the left they rise
# as $1/h$. In between each formula has a best $h$, where the two terms balance. For two points it is near
# $h = 1.0 \times 10^{-5}$, with an error of about $2.8 \times 10^{-11}$. For four points it is near
# $h = 1.3 \times 10^{-3}$, with about $2.7 \times 10^{-13}$, a hundred times better. That is why `tb.gradcheck`
# uses four points at $h = 10^{-3}$. Every measured error in the picture lies at or below the sum of the two
# terms.

# %%
hs = np.logspace(-8, -1, 57)
f1, f3, f5 = math.sin(1.0), math.cos(1.0), math.cos(1.0)          # |f|, |f'''|, |f^(5)| at x = 1
measured2 = np.array([abs(d2(math.sin, 1.0, h) - exact) for h in hs])
measured4 = np.array([abs(d4(math.sin, 1.0, h) - exact) for h in hs])
eps = np.finfo(np.float64).eps
model2 = hs**2 / 6 * f3 + eps * f1 / hs
model4 = hs**4 / 30 * f5 + 1.5 * eps * f1 / hs
best2, best4 = (3 * eps * f1 / f3) ** (1 / 3), (30 * 1.5 * eps * f1 / (4 * f5)) ** (1 / 5)   # d/dh of the model = 0
at_best2, at_best4 = best2**2 / 6 * f3 + eps * f1 / best2, best4**4 / 30 * f5 + 1.5 * eps * f1 / best4

fig = figure(7.5, 4.6)
ax = fig.add_subplot()
for measured, trunc, rnd, colour, name in ((measured2, hs**2 / 6 * f3, eps * f1 / hs, "tab:blue", "two-point"),
                                           (measured4, hs**4 / 30 * f5, 1.5 * eps * f1 / hs, "tab:red", "four-point")):
    ax.loglog(hs, np.maximum(measured, 1e-17), "o", ms=5 if name == "two-point" else 3, color=colour,
              label=f"{name}: measured |error|")
    ax.loglog(hs, trunc, "-", color=colour, lw=1.2, label=f"{name}: truncation " +
              ("$h^2 |f'''|/6$" if name == "two-point" else "$h^4 |f^{(5)}|/30$"))
    ax.loglog(hs, rnd, ":", color=colour, lw=1.5, label=f"{name}: rounding " +
              (r"$\varepsilon |f| / h$" if name == "two-point" else r"$1.5\,\varepsilon |f| / h$"))
ax.axvline(1e-3, color="grey", lw=0.8, ls="--")
ax.annotate("tb.gradcheck: four points, h = 1e-3", (1e-3, 1e-16), xytext=(6, 0), textcoords="offset points",
            fontsize=8, color="grey")
ax.set(xlabel="step h", ylabel="|estimate - cos(1)|", ylim=(1e-17, 1e-1),
       title="Derivative of sin at 1 by central differences: truncation falls, rounding rises")
ax.legend(fontsize=7.5, loc="upper left", ncol=2)
show(fig, OUT / "finite_difference_error.png")
print(f"best h by the model: two-point {best2:.1e} (error {at_best2:.1e}), four-point {best4:.1e} "
      f"(error {at_best4:.1e})")
right_side = hs >= 1e-2                                                    # where truncation dominates
slopes = [np.polyfit(np.log(hs[right_side]), np.log(m[right_side]), 1)[0] for m in (measured2, measured4)]
print(f"log-log slopes for h >= 1e-2: two-point {slopes[0]:.3f}, four-point {slopes[1]:.3f}")
assert np.all(measured2 <= model2) and np.all(measured4 <= model4)
assert [round(slope, 2) for slope in slopes] == [2.0, 4.0]
assert (round(best2, 6), round(best4, 4)) == (1.0e-5, 1.3e-3) and round(eps, 17) == 2.2e-16
assert (round(at_best2, 12), round(at_best4, 14)) == (2.8e-11, 2.7e-13) and at_best2 / at_best4 > 100
assert inspect.signature(tb.gradcheck).parameters["eps"].default == 1e-3

# %% [markdown]
# ## 5. `tb.gradcheck`, for real
#
# `tb.gradcheck(fn, *inputs)` runs autograd on `fn` once, then moves each input number by $\pm h$ and $\pm 2h$ and
# compares, element by element. It accepts a difference of at most $10^{-10} + 10^{-8}\,|\text{numeric}|$. It
# needs float64 (in float32, $\varepsilon \approx 1.2 \times 10^{-7}$ and the rounding term alone would be
# around $10^{-4}$), and it refuses anything else. A function with a non-scalar output is first projected on a
# fixed random vector, $\sum_i \text{out}_i v_i$, which checks every output element at once.
#
# Two facts about softmax make a good test. Its outputs sum to 1 whatever the input, so the gradient of
# `softmax(z).sum()` is exactly zero. The gradient of a weighted sum of its outputs is not zero, and gradcheck
# confirms it.

# %%
z = tb.randn(5, generator=tb.Generator(1), dtype=tb.float64, requires_grad=True)
z.softmax().sum().backward()
weights = tb.tensor([1.0, -2.0, 0.5, 3.0, 0.0], dtype=tb.float64)
ok = tb.gradcheck(lambda t: (t.softmax() * weights).sum(), z)
ok_vector = tb.gradcheck(lambda t: t.softmax(), z)                          # (5,) output: projected
try:
    tb.gradcheck(lambda t: t.softmax(), z.detach().to(tb.float32).requires_grad_())
    refused = ""
except TypeError as err:
    refused = str(err)
print(f"d/dz sum(softmax(z)): max |grad| = {np.abs(z.grad.numpy()).max():.0e}")
print(f"gradcheck of a weighted sum: {ok}; of the whole (5,) output: {ok_vector}; in float32: {refused}")
assert np.abs(z.grad.numpy()).max() < 1e-15 and ok and ok_vector and "need float64" in refused
tolerances = {k: inspect.signature(tb.gradcheck).parameters[k].default for k in ("atol", "rtol", "eps")}
eps32 = float(np.finfo(np.float32).eps)
print(f"gradcheck's tolerances {tolerances}; float32's epsilon {eps32:.1e}, over h = 1e-3: {eps32 / 1e-3:.1e}")
assert tolerances == {"atol": 1e-10, "rtol": 1e-8, "eps": 1e-3} and round(eps32, 8) == 1.2e-7
assert 1e-4 < eps32 / tolerances["eps"] < 2e-4

# %% [markdown]
# And a bug, caught. Here is a new primitive, $x^2$, whose backward forgets the factor 2, the kind of slip that is
# easy to make by hand. A primitive is a subclass of `tb.Function` with a `forward` that takes the input tensors and
# returns the output as a plain array, computed from their arrays `.data` with `self.backend` (the array library of
# the tensor's device: numpy on the CPU), and a `backward` on tensors; `Square.apply(t)` runs it and records
# the call, as for every built-in primitive. Its forward is right, so nothing looks wrong until gradcheck compares
# it with finite differences. It names the element and both values: autograd says $x$, the function's slope is $2x$.

# %%
class Square(tb.Function):
    """out = a * a;  da = g * a   (wrong: the derivative of a^2 is 2a)"""
    def forward(self, a):
        self.a = a
        return self.backend.mul(a.data, a.data)

    def backward(self, g):
        return (g * self.a,)


v = tb.tensor([0.5, -1.0, 2.0], dtype=tb.float64, requires_grad=True)
try:
    tb.gradcheck(lambda t: Square.apply(t).sum(), v)
    caught = ""
except tb.GradcheckError as err:
    caught = str(err)
print(caught)
numeric = float(caught.split("finite differences ")[1].split()[0])
assert "element (2,): autograd 2.0 vs finite differences" in caught and abs(numeric - 2 * 2.0) < 1e-10
assert np.allclose(Square.apply(v).numpy(), v.numpy() ** 2)                 # the forward was fine

# %% [markdown]
# ## Check yourself
#
# 1. Why does one backward pass beat finite differences for finding the gradient of a model's loss?
#
#    <details><summary>Answer</summary>
#
#    One backward sweep gives the gradient with respect to every parameter at once, for a small multiple of the
#    forward pass's cost. A four-point finite difference needs four evaluations of the whole model per parameter:
#    26,953,662,464 forward passes for the 6,738,415,616 parameters of Llama-2-7B.
#
#    </details>
#
# 2. In $y = h + e^{h \cdot h}$ with $h = \sin x$, what goes wrong if `sin`'s backward runs as soon as the walk
#    reaches it, breadth-first from $y$?
#
#    <details><summary>Answer</summary>
#
#    Only the `add`'s share of $\partial y / \partial h$, 1, has arrived, so `sin` would pass on
#    $\cos(0.7) \cdot 1 \approx 0.765$ instead of $(1 + 2h\,e^{h^2}) \cos x \approx 2.257$. A topological order runs
#    `sin` only after every call that reads $h$ has sent its share.
#
#    </details>
#
# 3. A tensor is read three times in a graph. How many accumulating additions does the backward pass make for it,
#    and why are they additions?
#
#    <details><summary>Answer</summary>
#
#    Two, $n - 1$ for $n$ reads. To first order a nudge to the tensor moves the output through every path that
#    reads it, and those effects add, so the gradient is the sum of the shares each use sends back.
#
#    </details>
#
# 4. Why does `tb.gradcheck` use four points at $h = 10^{-3}$ rather than the two-point central difference?
#
#    <details><summary>Answer</summary>
#
#    The two-point difference has a truncation error of order $h^2$: a relative $1.7 \times 10^{-7}$ for $\sin$ at
#    $x = 1$, above the $10^{-8}$ gradcheck demands. Four points cancel the $h^2$ term; at its best $h$ the error is
#    about $2.7 \times 10^{-13}$, a hundred times better than the two-point's best, $2.8 \times 10^{-11}$.
#
#    </details>

# %% [markdown]
# ## Words from this lesson
#
# - **loss**: one number that says how wrong a model's outputs are; training moves the parameters to make it
#   smaller (§1)
# - **chain rule**: the derivative of a composition is the product of the local derivatives along the way (§1)
# - **local derivative**: the derivative of one primitive's output with respect to one of its inputs, which the
#   primitive knows without seeing the rest of the graph (§1)
# - **upstream gradient**: the gradient of the loss with respect to a primitive's output, which its backward turns
#   into gradients of its inputs (§1)
# - **backpropagation**: computing the chain rule's product from the output end, one primitive at a time (§1)
# - **Llama-2-7B**: an open language model published by Meta, with 6,738,415,616 parameters (§1)
# - **topological order**: an order of a graph's calls in which each call comes before the calls that made its
#   inputs, so that every gradient is complete before it is passed on (§2)
# - **batch**: a group of examples run through a model together (§3)
# - **PyTorch**: the most widely used deep-learning library, the reference this course's numbers are checked
#   against (§3)
# - **finite differences**: estimates of a derivative from values of the function itself at nearby points (§4)
# - **central difference**: the finite difference $(f(x + h) - f(x - h)) / 2h$, or a combination of such
#   differences at several widths (§4)
# - **truncation error**: the error a finite difference makes because $h$ is not zero, of order $h^2$ or $h^4$ (§4)
# - **rounding**: storing each number in a finite number of binary digits, an error that dividing by a small $h$
#   magnifies (§4)
# - **gradcheck**: `tb.gradcheck`, which compares autograd's gradients with four-point finite differences, element
#   by element, in float64 (§5)

# %% [markdown]
# ## Exercises
#
# 1. `central_difference`: the derivative of a Python function `f` at a point `x` from four of its values, with
#    an error of order $h^4$ (section 4). A two-point difference is rejected, with the size of its error.
# 2. `topological_order`: the calls of the graph behind a tensor `y`, each once, every call before the calls that
#    made its inputs (section 2). Follow `y._ctx` and each call's `.edges`. Graphs can be thousands of calls deep,
#    so use a stack of your own rather than recursion.
# 3. `backprop`: the backward pass, run by hand, giving `y`'s gradient with respect to each of `leaves`. Take the
#    calls in your topological order, call each one's `backward(g)`, send what it returns along its `.edges`, and
#    sum whatever arrives at the same place (section 3). The checker compares your gradients with derivatives by
#    hand and by finite differences, on graphs that reuse tensors, broadcast (an `expand` first, lesson 01) and
#    multiply matrices.
#
# `python -m tinygrad_block exercise 02` writes `exercise_02.py` with the three functions to fill in;
# `python -m tinygrad_block check 02` checks them and says what is wrong.
