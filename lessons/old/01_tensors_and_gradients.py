# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 01 — Tensors, graphs and gradients
#
# Everything later in the course (the transformer block, its FLOPs, its graphs) runs on the small engine
# this lesson introduces. Four ideas:
#
# 1. Every operation on tensors is a **primitive** (a short class with a forward, a backward and a FLOP
#    rule) or a **composite** written from primitives.
# 2. Running the forward pass records a graph; `backward()` walks it in reverse and applies the chain rule.
# 3. **Broadcasting is an explicit op** (`expand`), and its backward *sums* — which is why the gradient of a
#    bias added to every row is the column sum of the upstream gradient.
# 4. We never trust a gradient we have not checked against **finite differences**.
#
# Run it: `python lessons/01_tensors_and_gradients.py`. Every number stated below is asserted in `main()`.

# %%
import math

import numpy as np

import tinygrad_block as tb

# %% [markdown]
# ## 1. A scalar function and its derivative
#
# $y = x^2 + 3x$ at $x = 2$ gives $y = 10$; by hand, $dy/dx = 2x + 3 = 7$.


# %%
def scalar_example():
    x = tb.tensor(2.0, dtype=tb.float64, requires_grad=True)
    y = x * x + x * 3.0
    y.backward()
    return y.item(), x.grad.item()


# %% [markdown]
# ## 2. Which primitives ran?
#
# `tb.observe` calls a function after every primitive, forward and backward, with an event that says which op
# ran (`e.op.name`), in which phase (`e.phase`), on which inputs and output. $y = x^2 + 3x$ is three
# primitives forward (mul, mul, add). Backward, `add` passes its gradient through unchanged (no op). The
# `mul` in $x \cdot x$ uses $x$ twice, so it sends two gradients to $x$ ($g \cdot x$ for each use): 2 muls.
# The `mul` in $3x$ sends one ($g \cdot 3$; the constant needs none): 1 mul. Three gradients arrive at $x$
# and are summed: 2 adds. Five primitives backward, and $2x + 3$ comes out.


# %%
def count_primitives():
    calls = []
    x = tb.tensor(2.0, dtype=tb.float64, requires_grad=True)
    with tb.observe(lambda e: calls.append((e.phase, e.op.name))):
        (x * x + x * 3.0).backward()
    forward = [name for phase, name in calls if phase == "forward"]
    backward = [name for phase, name in calls if phase == "backward"]
    return forward, backward


# %% [markdown]
# ## 3. Broadcasting is an `expand`, and its backward sums
#
# Adding a bias `b` of shape (1, 4) to `x` of shape (3, 4) first expands `b` to (3, 4). Each element of
# `b` was copied to 3 rows, so its gradient is the sum of 3 upstream gradients: with an upstream gradient
# of ones, every entry of `b.grad` is 3.


# %%
def broadcast_example():
    x = tb.zeros(3, 4, dtype=tb.float64)
    b = tb.zeros(1, 4, dtype=tb.float64, requires_grad=True)
    out = x + b
    out.backward(tb.ones(3, 4, dtype=tb.float64))
    expand_calls = []
    with tb.observe(lambda e: expand_calls.append(e.op.name)):
        x + b
    return out.shape, b.grad.numpy(), expand_calls


# %% [markdown]
# ## 4. Finite differences, and why the checker uses four points
#
# The central difference $[f(x+h) - f(x-h)]/2h$ is off by about $\frac{h^2}{6} f'''(x)$. For $f = \sin$ at
# $x = 1$ and $h = 10^{-3}$ that is $\frac{10^{-6}}{6}\cos 1 \approx 9.0 \times 10^{-8}$ — far too coarse to
# certify a gradient to $10^{-8}$. The four-point formula
# $[8(f(x+h) - f(x-h)) - (f(x+2h) - f(x-2h))]/12h$ cancels the $h^2$ term; its error is about
# $\frac{h^4}{30} f^{(5)}(x) \approx 1.8 \times 10^{-14}$ here, so what is left (below $10^{-12}$) is
# float64 rounding in the differences themselves. That is what `tb.gradcheck` uses.


# %%
def finite_difference_errors(h=1e-3, x=1.0):
    f, exact = math.sin, math.cos(x)
    two_point = (f(x + h) - f(x - h)) / (2 * h)
    four_point = (8 * (f(x + h) - f(x - h)) - (f(x + 2 * h) - f(x - 2 * h))) / (12 * h)
    return abs(two_point - exact), abs(four_point - exact)


# %% [markdown]
# ## 5. A gradient checked for real
#
# The softmax of a vector sums to 1 whatever the input, so the gradient of `softmax(z).sum()` is exactly
# zero — while the gradient of a weighted sum is not. `tb.gradcheck` compares autograd with finite
# differences element by element (relative error at most 1e-8).


# %%
def softmax_checks():
    g = tb.Generator(1)
    z = tb.randn(5, generator=g, dtype=tb.float64, requires_grad=True)
    z.softmax().sum().backward()
    weights = tb.tensor([1.0, -2.0, 0.5, 3.0, 0.0], dtype=tb.float64)
    ok = tb.gradcheck(lambda t: (t.softmax() * weights).sum(), z)
    return np.abs(z.grad.numpy()).max(), ok


# %%
def main():
    y, dydx = scalar_example()
    assert (y, dydx) == (10.0, 7.0)
    print(f"y = x^2 + 3x at x = 2: y = {y:g}, dy/dx = {dydx:g}")

    forward, backward = count_primitives()
    assert forward == ["mul", "mul", "add"] and sorted(backward) == ["add", "add", "mul", "mul", "mul"]
    print(f"forward primitives: {forward}; backward primitives: {backward}")

    shape, bgrad, calls = broadcast_example()
    assert shape == (3, 4) and (bgrad == 3.0).all() and calls == ["expand", "add"]
    print(f"bias (1, 4) + x (3, 4): ops {calls}, every bias gradient = {bgrad[0, 0]:g}")

    e2, e4 = finite_difference_errors()
    assert abs(e2 - 1e-6 / 6 * math.cos(1.0)) < 1e-11 and round(e2, 9) == 9.0e-8
    assert e4 < 1e-12
    print(f"sin'(1) by central differences, h = 1e-3: 2-point error {e2:.1e}, 4-point error {e4:.1e}")

    max_grad, ok = softmax_checks()
    assert max_grad < 1e-15 and ok
    print(f"d/dz sum(softmax(z)) is zero (max |grad| = {max_grad:.0e}); gradcheck of a weighted sum passed")


if __name__ == "__main__":
    main()
