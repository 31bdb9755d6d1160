# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 01 — Tensors and the computation graph
#
# Everything in this course, from one multiplication to a model of 70 billion learned numbers, runs on a small
# engine you can read in an evening. This lesson opens it: what a tensor is, which operations the engine really
# knows, and what it writes down while your code runs.
#
# **What you will learn**
# - what a tensor holds: its data, shape, dtype and device, including a device that has shapes but no data;
# - the two kinds of operation: **primitives**, each a short class with a forward, a backward and a FLOP
#   rule, and **composites**, written from primitives;
# - how running a forward pass records a **graph** of the primitive calls, and how to watch them happen;
# - how `backward()` reads that graph to produce a derivative;
# - what a mistake looks like: an error that names the op and the shapes, never a silent guess.
#
# Run it as a script, `python -m tinygrad_block lesson 01`, or as a notebook,
# `python -m tinygrad_block lesson 01 --notebook --execute` (it lands beside this file).

# %%
import inspect

import numpy as np

import tinygrad_block as tb
from tinygrad_block import function
from tinygrad_block.graph import record_graph

from course import out_dir, show

OUT = out_dir(1)          # lessons/out/01/: this lesson's pictures

# %% [markdown]
# ## 1. A tensor: data, shape, dtype, device
#
# A `Tensor` wraps an array. Its **shape** says how many numbers lie along each axis and its **dtype** how each
# number is stored. A tensor made from Python floats is `float32`, the default for running models (4 bytes a
# number); the checks of derivatives in lesson 02 use `float64` (8 bytes). A float32 keeps 24 binary digits of
# each number, about 7.2 decimal digits; a float64 keeps 53, about 16.0. Integers stay integers (`int64`): they
# are indices, such as the token ids that number the pieces of a text (lesson 04).
#
# The **device** says where the data lives: `'cpu'` (numpy), `'cuda'` (an NVIDIA GPU, through CuPy, a numpy for
# GPUs) or `'meta'`, which keeps the shape and dtype but no numbers at all. A "70B" model is one with 70 billion
# learned numbers, its **parameters**, and most of them sit in **weight matrices**, which the model multiplies its
# inputs by. On `'meta'` one such matrix costs nothing to make: 8192 × 28672 numbers from the model's feed-forward
# network (lesson 08). Yet it still knows that it would take 8192 · 28672 · 4 bytes = 939,524,096 bytes in float32:
# 0.875 GiB, where a GiB is $2^{30}$ bytes. Lessons 12 and 13 count whole models that way.

# %%
x = tb.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
ids = tb.tensor([3, 1, 4])
w = tb.zeros(8192, 28672, device="meta")
print(f"x: shape {x.shape}, dtype {x.dtype}, device {x.device!r}, {x.nbytes} bytes")
print(f"ids: dtype {ids.dtype};  x in float64: {x.to(tb.float64).nbytes} bytes")
print(f"a 70B FFN weight on 'meta': {w}, would take {w.nbytes:,} bytes = {w.nbytes / 2**30:.3f} GiB")
assert x.shape == (2, 3) and x.dtype == tb.float32 and x.nbytes == 2 * 3 * 4 and x.device == "cpu"
assert ids.dtype == tb.int64 and x.to(tb.float64).nbytes == 2 * 3 * 8
assert w.nbytes == 8192 * 28672 * 4 == 939_524_096 and w.nbytes / 2**30 == 0.875
digits = {t: (np.finfo(t.name).nmant + 1, (np.finfo(t.name).nmant + 1) * np.log10(2)) for t in (tb.float32, tb.float64)}
print("significant digits: " + ", ".join(f"{t} {bits} binary = {dec:.1f} decimal" for t, (bits, dec) in digits.items()))
assert [(bits, round(dec, 1)) for bits, dec in digits.values()] == [(24, 7.2), (53, 16.0)]

# %% [markdown]
# ## 2. Primitives: forward, backward and FLOPs in one place
#
# The engine knows about thirty **primitives**: elementwise maths (`add`, `mul`, `exp`, `log`, ...), reductions
# (`sum`, `max`), the matrix product, and shape ops that move numbers without computing (`reshape`, `permute`,
# `expand`, `slice`, ...). Each one is a class that says three things side by side: how to compute its output (its
# **forward**), how to turn the gradient of its output into gradients of its inputs (its **backward**), and how many
# floating-point operations (**FLOPs**, such as additions, multiplications and comparisons) it costs. The
# **gradient** of a tensor is the derivative of one final number, such as a model's error, with respect to each of
# the tensor's entries, so it has the tensor's shape. Here is `exp` in full. Because $\frac{d}{da}e^a = e^a$, its
# backward multiplies the incoming gradient `g` by the output it saved; its FLOP rule, inherited from every
# elementwise op, is one per output element.

# %%
print(inspect.getsource(function.Exp))


def leaves(cls):
    """The classes at the tips of cls's family tree: the primitives (shared bases like Elementwise are not)."""
    below = cls.__subclasses__()
    return [leaf for sub in below for leaf in leaves(sub)] if below else [cls]


primitives = sorted(cls.name for cls in leaves(function.Function))
print(f"{len(primitives)} primitives: {', '.join(primitives)}")
assert "def backward(self, g)" in inspect.getsource(function.Exp) and abs(len(primitives) - 30) <= 2
assert {"add", "mul", "exp", "sum", "max", "matmul", "reshape", "expand"} <= set(primitives)
assert function.Exp().flops((2, 5), (2, 5)) == 10                          # one per element

# %% [markdown]
# ## 3. Composites are written from primitives
#
# Everything else is a **composite**: a method written with other tensor operations, which needs no backward of its
# own because each primitive inside it has one. Softmax is the example: it turns each row of numbers into positive
# numbers that sum to 1, which can be read as probabilities. For each row $z$, $\mathrm{softmax}(z)_i = e^{z_i - m}
# / \sum_j e^{z_j - m}$ with $m = \max_j z_j$. Subtracting the maximum changes nothing mathematically but keeps
# $e^{\cdot}$ from overflowing (lesson 06 shows why that matters).
#
# `tb.observe` calls a function of yours after every primitive, with an **event** that says which op ran
# (`e.op.name`), on which inputs, with which output and how many FLOPs (`e.flops`). Watching a softmax of a (2, 5)
# tensor shows seven primitive calls. There is one max per row, and an `expand` to copy it back across the row
# (numpy would copy it silently, by broadcasting; here the copy is an op of its own, lesson 03), then a subtraction,
# 10 exponentials, and one sum per row with its own `expand`. Last comes a division. The reductions cost 4 FLOPs per
# row of 5 (the engine counts $n - 1$ comparisons or additions per row), so 8 each. The elementwise ops cost 10
# each, and the `expand`s cost nothing.

# %%
z = tb.randn(2, 5, generator=tb.Generator(0))
events = []
with tb.observe(events.append):
    p = z.softmax(axis=-1)
ops = [(e.op.name, e.output.shape, e.flops) for e in events]
for name, shape, flops in ops:
    print(f"  {name:7s} -> {shape}  {flops:2d} FLOPs")
assert [name for name, _, _ in ops] == ["max", "expand", "sub", "exp", "sum", "expand", "div"]
assert [f for _, _, f in ops] == [2 * 4, 0, 10, 10, 2 * 4, 0, 10]
assert np.allclose(p.numpy(), np.exp(z.numpy()) / np.exp(z.numpy()).sum(-1, keepdims=True), rtol=1e-6)
print(f"softmax of a (2, 5) tensor: {len(ops)} primitive calls, {sum(f for *_, f in ops)} FLOPs; rows sum to "
      f"{', '.join(f'{r:.6f}' for r in p.numpy().sum(-1))}")
assert np.allclose(p.numpy().sum(-1), 1.0, rtol=1e-6)

# %% [markdown]
# ## 4. Running the forward pass records a graph
#
# Running a computation from its inputs to its output is the **forward pass**; the **backward pass** runs the
# primitives' backward rules the other way, from the output to the inputs. Take $y = x^2 + 3x$ with $x = 2$: three
# primitive calls, `mul` ($x \cdot x$), `mul` ($x \cdot 3$) and `add`. When an input **requires a gradient** (made
# with `requires_grad=True`: we want derivatives with respect to it), each call leaves a note on its output:
# `y._ctx` is the `Add` call that made `y`, and its `edges` lead to the two `Mul` calls that made its inputs. The
# edges of $x \cdot x$ lead twice to the tensor $x$ itself, a **leaf**, made by no op. Following the edges back from
# `y` visits every call that contributed to it. That chain of notes *is* the computation graph, and it is all that
# `backward()` needs.
#
# The constant 3 required no gradient, so it has no edge (`None`). Under `tb.no_grad()` nothing is recorded
# at all, which is how you run a model when you only want its output.

# %%
x = tb.tensor(2.0, dtype=tb.float64, requires_grad=True)
y = x * x + x * 3.0
add = y._ctx
square, triple = add.edges
print(f"y = {y.item():g}, made by {add.name}; its inputs were made by {square.name} and {triple.name}")
print(f"x*x reads the leaf x twice: {square.edges[0] is x and square.edges[1] is x}; "
      f"x*3 reads x and a constant: {triple.edges[0] is x}, {triple.edges[1]}")
with tb.no_grad():
    y_plain = x * x + x * 3.0
print(f"under no_grad: y = {y_plain.item():g}, recorded: {y_plain._ctx is not None}")
assert y.item() == 10.0 and (add.name, square.name, triple.name) == ("add", "mul", "mul")
assert square.edges == (x, x) and triple.edges == (x, None)
assert x.is_leaf and not y.is_leaf and y_plain._ctx is None and y_plain.item() == 10.0

# %% [markdown]
# The library can draw what it records. `record_graph` watches the primitive calls (its first argument is a model
# whose weights it would name, here none; then the inputs, here `x`), and `render` pipes the drawing through
# graphviz, a program that lays out graphs. In the picture below $x$ is the box marked "input". It feeds both
# multiplications (one arrow to $x \cdot x$, though it reads $x$ twice), and the scalar 3 is not a node of its own:
# its box says "with a scalar". Each box gives the output's shape (`()`, a single number), its dtype and its FLOPs.
# Lesson 11 draws a whole transformer block this way, forward and backward: the unit that a language model (a model
# that predicts the next piece of a text) repeats dozens of times; lessons 04 to 09 build one.

# %%
x = tb.tensor(2.0, dtype=tb.float64, requires_grad=True)
with record_graph(None, x) as graph:
    y = x * x + x * 3.0
view = graph.view()
drawing = graph.render(OUT / "square_plus_triple.png", dpi=150)
show(drawing)
print(f"{len([n for n in view.nodes if n.kind == 'op'])} op nodes: {[n.label for n in view.nodes if n.kind == 'op']}")
assert sorted(n.label for n in view.nodes if n.kind == "op") == ["add", "mul", "mul"]
assert drawing.read_bytes()[:4] == b"\x89PNG"

# %% [markdown]
# ## 5. `backward()` reads the graph in reverse
#
# By hand, $dy/dx = 2x + 3 = 7$ at $x = 2$. `y.backward()` walks the graph from `y` back to the leaves. At each call
# it applies that primitive's backward rule, and it adds up the gradients arriving at a leaf. Watching it: `add`
# passes its gradient through unchanged, so it calls no primitive. The `mul` in $x \cdot x$ sends two gradients to
# $x$ ($g \cdot x$ once for each use): 2 multiplications. The `mul` in $3x$ sends one ($g \cdot 3$; the constant
# needs none): 1 multiplication. Three gradients arrive at $x$ and are summed: 2 additions. Five primitives backward
# for three forward, and out comes $2 \cdot 2 + 3 = 7$. This machinery, derivatives computed automatically from the
# recorded graph, is called **autograd**. Lesson 02 takes it apart: the order of the walk, and the sums where a
# tensor is reused.

# %%
x = tb.tensor(2.0, dtype=tb.float64, requires_grad=True)
calls = []
with tb.observe(lambda e: calls.append((e.phase, e.op.name))):
    y = x * x + x * 3.0
    y.backward()
forward = [name for phase, name in calls if phase == "forward"]
backward = [name for phase, name in calls if phase == "backward"]
print(f"y = {y.item():g}, dy/dx = {x.grad.item():g}")
print(f"forward: {forward}; backward: {backward}")
assert (y.item(), x.grad.item()) == (10.0, 2 * 2.0 + 3)
assert forward == ["mul", "mul", "add"] and sorted(backward) == ["add", "add", "mul", "mul", "mul"]

# %% [markdown]
# ## 6. Mistakes are errors that say what is wrong
#
# The engine never guesses. Adding a (3, 4) tensor to a (4, 3) tensor could be "fixed" by transposing one of
# them, and a ragged list could be padded, but either guess would hide a bug in your code. Instead the error
# names the op, the shapes involved and what was expected.

# %%
mistakes = {"add (3, 4) + (4, 3)": lambda: tb.zeros(3, 4) + tb.zeros(4, 3),
            "a ragged list": lambda: tb.tensor([[1.0, 2.0], [3.0]]),
            "gradient of an integer": lambda: tb.tensor([1, 2], requires_grad=True)}
said = {}
for what, mistake in mistakes.items():
    try:
        mistake()
    except (ValueError, TypeError) as e:
        said[what] = f"{type(e).__name__}: {e}"
        print(f"{what}:\n    {said[what]}")
assert "add: shapes (3, 4) and (4, 3) cannot be broadcast" in said["add (3, 4) + (4, 3)"]
assert "ragged nested list" in said["a ragged list"]
assert "only floating-point tensors can require grad" in said["gradient of an integer"]

# %% [markdown]
# ## Check yourself
#
# 1. Softmax has no backward rule of its own. How does `backward()` still differentiate it?
#
#    <details><summary>Answer</summary>
#
#    Softmax is a composite: it runs seven primitive calls (max, expand, sub, exp, sum, expand, div), and the graph
#    records each of them. The backward pass applies each primitive's own backward rule in turn, so the composite's
#    derivative comes out of its parts.
#
#    </details>
#
# 2. For $y = x \cdot x + 3x$ at $x = 2$, the forward pass makes 3 primitive calls and the backward pass 5. Where do
#    the 5 come from, and what do they give?
#
#    <details><summary>Answer</summary>
#
#    The `mul` in $x \cdot x$ sends two gradients to $x$ and the `mul` in $3x$ one: 3 multiplications. The three
#    gradients meet at the leaf $x$ and are summed: 2 additions. The `add` passes its gradient on without a call.
#    The result is $dy/dx = 2 \cdot 2 + 3 = 7$.
#
#    </details>
#
# 3. A (8192, 28672) float32 tensor on the device `'meta'` is made instantly. Why, and what does it still know?
#
#    <details><summary>Answer</summary>
#
#    `'meta'` keeps only the shape and the dtype, no numbers, so nothing is allocated. It still knows that the data
#    would take 8192 · 28672 · 4 = 939,524,096 bytes, 0.875 GiB.
#
#    </details>
#
# 4. Adding a (3, 4) tensor to a (4, 3) tensor could be made to work by transposing one of them. Why does the
#    engine raise an error instead?
#
#    <details><summary>Answer</summary>
#
#    Any guess would hide a bug in the code that made the shapes. The error names the op (`add`) and both shapes,
#    so the mistake is found where it happens.
#
#    </details>

# %% [markdown]
# ## Words from this lesson
#
# - **tensor**: an array of numbers together with its shape, dtype and device, which also records the call that
#   made it when a gradient is wanted (§1)
# - **shape**: how many numbers a tensor holds along each of its axes, such as (2, 3) (§1)
# - **dtype**: how each number of a tensor is stored, such as `float32` (4 bytes) or `int64` (§1)
# - **device**: where a tensor's data lives: `'cpu'`, `'cuda'` (a GPU) or `'meta'`, which keeps the shape and
#   dtype but no numbers (§1)
# - **GPU**: a graphics processor, the chip that large models are trained and run on; the device `'cuda'` (§1)
# - **parameter**: one of the numbers a model learns; a "70B" model has 70 billion of them (§1)
# - **primitive**: one of the engine's thirty or so basic operations, a class that holds its forward, its backward
#   and its FLOP rule side by side (§2)
# - **elementwise**: computed for each number on its own, as `add`, `mul` and `exp` are (§2)
# - **reduction**: an operation that combines the numbers along an axis into one, such as `sum` or `max` (§2)
# - **FLOP**: one floating-point operation, such as an addition, a multiplication or a comparison; costs are
#   counted in FLOPs (§2)
# - **gradient**: the derivative of one final number with respect to each entry of a tensor, so it has the
#   tensor's shape (§2)
# - **composite**: an operation written with other tensor operations, which needs no backward of its own (§3)
# - **softmax**: the composite that turns a row of numbers into positive numbers summing to 1,
#   $e^{z_i - m} / \sum_j e^{z_j - m}$ with $m$ the row's maximum (§3)
# - **forward pass**: running a computation from its inputs to its output (§4)
# - **backward pass**: running the primitives' backward rules from the output back to the inputs, to get gradients
#   (§4)
# - **leaf**: a tensor made by no operation, such as an input or a weight; gradients are collected there (§4)
# - **computation graph**: the record of primitive calls, each linked to the calls that made its inputs, that a
#   forward pass leaves behind (§4)
# - **language model**: a model that predicts the next piece of a text from the pieces before it (§4)
# - **transformer block**: the unit that a language model repeats dozens of times, built in lessons 04 to 09 (§4)
# - **autograd**: computing derivatives automatically, by running the recorded graph backward (§5)

# %% [markdown]
# ## Exercises
#
# 1. `softplus`: $\log(1 + e^x)$ written with tensor operations, so that autograd differentiates it. It must
#    stay finite and exact at $x = \pm 1000$, where $e^{1000}$ overflows; rewrite it so that nothing large is
#    ever exponentiated. Its gradient must be the sigmoid $1 / (1 + e^{-x})$ everywhere, including at the kink
#    $x = 0$ of whatever pieces you use.
# 2. `count_ops`: how many primitive calls the recorded graph behind a tensor `y` holds, found by following
#    `y._ctx` and each call's `edges` (section 4). A call reached along two paths, such as `z` in
#    `z = x * x; y = z + z`, counts once.
#
# `python -m tinygrad_block exercise 01` writes `exercise_01.py` with both functions to fill in;
# `python -m tinygrad_block check 01` checks them and says what is wrong.
