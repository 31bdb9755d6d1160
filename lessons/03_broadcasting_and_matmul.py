# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 03 — Broadcasting, reductions, matmul and Linear
#
# A transformer block, the unit that language models (models that predict the next piece of a text, lesson 04)
# repeat dozens of times, is mostly matrix products, plus biases (vectors added to every row), norms (which rescale
# each row, lesson 05) and softmaxes that broadcast and reduce along axes. Lessons 04 to 09 build one. This lesson
# looks at each of these operations with its backward and its cost, and puts them together in the layer everything
# else is built from: `nn.Linear`.
#
# **What you will learn**
# - broadcasting is an explicit `expand`, whose backward is a **sum** over the axes it created or stretched;
# - the backward of `sum`, `mean` and `max`, and what a reduction costs;
# - why a matrix product of shapes $(M, K)$ and $(K, N)$ costs $2MNK$ FLOPs, counted by running it;
# - why its backward is two more matrix products, exactly **twice** the forward (or once, when one input needs no
#   gradient);
# - `nn.Linear` as a matmul plus a bias: its parameters, its backward by hand ($dX = dY\,W$, $dW = dY^\top X$,
#   $db$ = column sums), checked against autograd.
#
# Run it as a script, `python -m tinygrad_block lesson 03`, or as a notebook,
# `python -m tinygrad_block lesson 03 --notebook --execute` (it lands beside this file).

# %%
import numpy as np

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.counting import count_flops
from tinygrad_block.pictures import figure

from course import out_dir, show

OUT = out_dir(3)          # lessons/out/03/: this lesson's pictures
F64 = tb.float64

# %% [markdown]
# ## 1. Broadcasting is an `expand`, and its backward sums
#
# Adding a bias $b$ of shape (4,) to every row of $x$ of shape (3, 4) is "broadcasting": numpy lines the shapes up
# from the right, adds missing axes in front and stretches axes of size 1. numpy does this silently, inside the
# add. The engine makes it a primitive of its own: `expand` copies $b$ into a (3, 4) tensor (no arithmetic,
# 0 FLOPs), and then `add` sees two tensors of the same shape.
#
# That explicit step makes the backward simple. Each $b_j$ was copied into 3 places of the output, and each copy
# receives its own upstream gradient $G_{ij}$. A change $\delta$ in $b_j$ moves all 3 copies, so
# $\partial L / \partial b_j = \sum_i G_{ij}$. **The backward of an expand is a sum** over the axes it created (new
# leading ones) or stretched (size 1 to more). The stretched ones are kept with size 1, so the result has the
# input's shape. Watched below, the engine sums $G$ over axis 0 keeping it, (1, 4), and a `reshape` then drops the
# created axis to give (4,). No other primitive has to "unbroadcast" anything: `add` and `mul` only ever see
# equal shapes.

# %%
g = tb.Generator(0)
x = tb.randn(3, 4, generator=g, dtype=F64, requires_grad=True)
b = tb.randn(4, generator=g, dtype=F64, requires_grad=True)
G = tb.randn(3, 4, generator=g, dtype=F64)                                  # the upstream gradient dL/d(x + b)
events = []
with tb.observe(events.append):
    out = x + b
    out.backward(G)
seen = [(e.phase, e.op.name, e.inputs[0].shape, e.output.shape, e.flops) for e in events]
for phase, name, shape_in, shape_out, flops in seen:
    print(f"  {phase:8} {name:8} {str(shape_in):7} -> {str(shape_out):7} {flops:2d} FLOPs")
print(f"b.grad = {np.round(b.grad.numpy(), 4)};  G summed over its rows = {np.round(G.numpy().sum(axis=0), 4)}")
assert [(ph, name) for ph, name, *_ in seen] == [("forward", "expand"), ("forward", "add"),
                                                 ("backward", "sum"), ("backward", "reshape")]
assert seen[0][4] == 0 and seen[2][4] == (3 - 1) * 4                        # the sum: 2 additions per column
assert np.array_equal(b.grad.numpy(), G.numpy().sum(axis=0)) and np.array_equal(x.grad.numpy(), G.numpy())

# %% [markdown]
# The rule holds for any pair of shapes. Below, four products `x * y` whose shapes differ, each with the axes the
# backward summed for each input. In the last one **both** inputs are broadcast: (2, 1, 4) and (3, 1) meet at
# (2, 3, 4). `tb.gradcheck` confirms every gradient against finite differences.
#
# The picture shows the two sums for a (3, 4) upstream gradient. A bias of shape (4,), copied down the rows, sums
# its gradient down the columns (axis 0). A (3, 1) column, copied across, sums along the rows (axis 1, kept as
# size 1).

# %%
def summed_axes(x_shape, y_shape):
    """The axes each input's gradient was summed over, read off the backward's `sum` calls (they differentiate
    the two expands); gradcheck on x * y with both inputs."""
    xs = tb.randn(*x_shape, generator=tb.Generator(1), dtype=F64, requires_grad=True)
    ys = tb.randn(*y_shape, generator=tb.Generator(2), dtype=F64, requires_grad=True)
    calls = []
    with tb.observe(lambda e: calls.append(e)):
        product = xs * ys
        product.backward(tb.ones_like(product))
    sums = {e.output.shape: e.op.axes for e in calls if e.origin == "expand" and e.op.name == "sum"}
    return product.shape, sums, tb.gradcheck(lambda a, c: a * c, xs, ys)


print(f"{'x':10} {'y':8} {'x * y':10} {'axes summed -> shape kept':40} gradcheck")
for x_shape, y_shape in [((3, 4), (4,)), ((3, 4), (3, 1)), ((2, 3, 4), (3, 1)), ((2, 1, 4), (3, 1))]:
    shape, sums, ok = summed_axes(x_shape, y_shape)
    listed = ", ".join(f"{axes} -> {kept}" for kept, axes in sums.items())
    print(f"{str(x_shape):10} {str(y_shape):8} {str(shape):10} {listed:40} {ok}")
    assert ok and shape == np.broadcast_shapes(x_shape, y_shape)
    for small in (x_shape, y_shape):
        lead = len(shape) - len(small)
        wanted = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(small) if s == 1 and shape[lead + i] > 1)
        kept = tuple(1 if i in wanted else s for i, s in enumerate(shape))
        assert small == shape or sums[kept] == wanted


def draw_sum(ax, upstream, result, axis, title):
    """The upstream gradient as a grid of numbers, and the input's gradient: its sums along `axis`."""
    from matplotlib.patches import Rectangle
    rows, cols = upstream.shape
    for i, j in np.ndindex(rows, cols):
        ax.add_patch(Rectangle((j, -i - 1), 1, 1, fc="#dbe8f6", ec="#4a6fa5"))
        ax.text(j + 0.5, -i - 0.5, f"{upstream[i, j]:g}", ha="center", va="center", fontsize=11)
    for k, value in enumerate(result.ravel()):
        x0, y0 = (k, -rows - 1.7) if axis == 0 else (cols + 0.7, -k - 1)
        ax.add_patch(Rectangle((x0, y0), 1, 1, fc="#fde0b6", ec="#d9822b", lw=1.5))
        ax.text(x0 + 0.5, y0 + 0.5, f"{value:g}", ha="center", va="center", fontsize=11, weight="bold")
        start, end = ((k + 0.5, -rows - 0.05), (k + 0.5, -rows - 0.65)) if axis == 0 else \
            ((cols + 0.05, -k - 0.5), (cols + 0.65, -k - 0.5))
        ax.annotate("", end, start, arrowprops=dict(arrowstyle="->", color="#d9822b", lw=1.5))
    ax.text(-0.15, -rows / 2, "G", ha="right", va="center", fontsize=12, color="#4a6fa5", weight="bold")
    xlim = (-1.2, cols + 1.2) if axis == 0 else (-1.0, cols + 2.0)
    ax.set(xlim=xlim, ylim=(-rows - 2.0, 0.3), aspect="equal", title=title)
    ax.axis("off")


G_small = tb.tensor(np.array([[1.0, 2.0, 0.0, -1.0], [3.0, -2.0, 1.0, 0.0], [-1.0, 1.0, 2.0, 4.0]]), dtype=F64)
bias = tb.zeros(4, dtype=F64, requires_grad=True)                          # broadcast down the rows
column = tb.zeros(3, 1, dtype=F64, requires_grad=True)                     # broadcast across the columns
(tb.zeros(3, 4, dtype=F64) + bias).backward(G_small)
(tb.zeros(3, 4, dtype=F64) + column).backward(G_small)
fig = figure(10, 3.9)
left, right = fig.subplots(1, 2)
draw_sum(left, G_small.numpy(), bias.grad.numpy(), 0,
         "bias (4,) copied to (3, 4): its gradient\nsums G over axis 0, shape (4,)")
draw_sum(right, G_small.numpy(), column.grad.numpy(), 1,
         "column (3, 1) copied to (3, 4): its gradient\nsums G over axis 1, kept: shape (3, 1)")
fig.suptitle("The backward of a broadcast: the upstream gradient G (blue) summed over the copied axis (orange)")
show(fig, OUT / "broadcast_gradient_sums.png")
print(f"bias.grad = {bias.grad.numpy()}, column.grad = {column.grad.numpy().ravel()} (shape {column.grad.shape})")
assert np.array_equal(bias.grad.numpy(), G_small.numpy().sum(axis=0)) and column.grad.shape == (3, 1)
assert np.array_equal(column.grad.numpy(), G_small.numpy().sum(axis=1, keepdims=True))

# %% [markdown]
# ## 2. Reductions: sum, mean and max
#
# A reduction is the mirror image of an expand. `sum` over an axis adds $n$ numbers into one, and each of them moved
# the sum one for one, so its backward **copies** the upstream gradient back to all $n$: a reshape and an expand, 0
# FLOPs. The two are each other's transpose: for any $a$ and $G$,
# $\langle \mathrm{expand}(a), G \rangle = \langle a, \mathrm{sum}(G) \rangle$, where $\langle u, v \rangle$ is the
# sum of the elementwise products of two tensors of one shape. That is what makes one the other's backward.
#
# `mean` is a sum divided by $n$, so each input receives $g / n$. The engine divides once per output of the mean,
# before copying. `max` passes the gradient only to the largest entry, since nudging any other entry changes
# nothing. At a tie the derivative does not exist; the engine splits $g$ equally among the tied entries, as
# PyTorch's `amax` does. The central difference agrees with that choice: raising one of two tied 3s by $h$ gives
# $3 + h$, lowering it gives 3, so $(3 + h - 3) / 2h = 1/2$.
#
# The FLOP rule for every reduction is $n - 1$ operations per output (adding $n$ numbers takes $n - 1$
# additions). For $R = 3$ rows of $n = 4$ numbers, each reduced to one, that is $3 \times 3 = 9$:
#
# | op | forward FLOPs | backward FLOPs | gradient of each input |
# |---|---|---|---|
# | `sum` | $R(n-1)$ = 9 | 0 (copies) | $g$ |
# | `mean` | $R(n-1) + R$ = 12 | $R$ = 3 (one division per row) | $g/n$ |
# | `max` | $R(n-1)$ = 9 | $3Rn + R(n-1)$ = 45 (find, count, share) | $g$ at the maximum (shared at a tie) |
#
# The backward of `max` is the dearest, because it must find the maxima again: $Rn$ comparisons mark every entry
# equal to its row's maximum, $R(n-1)$ additions count the marks in each row, and $2Rn$ more operations multiply
# the marks by $g$ and divide by the count.

# %%
xr = tb.tensor(np.array([[1.0, 5.0, 2.0, 0.0], [3.0, 3.0, -1.0, 2.0], [0.5, -2.0, 4.0, 4.0]]), dtype=F64,
               requires_grad=True)
R, n = 3, 4
table = {}
for name in ("sum", "mean", "max"):
    xr.grad = None
    events = []
    with tb.observe(events.append):
        reduced = getattr(xr, name)(axis=1)                                  # (3,)
        reduced.backward(tb.ones_like(reduced))
    table[name] = (sum(e.flops for e in events if e.phase == "forward"),
                   sum(e.flops for e in events if e.phase == "backward"), xr.grad.numpy())
    forward, backward, grad = table[name]
    print(f"{name:5} forward {forward:2d} FLOPs, backward {backward:2d}; gradient {grad.tolist()}")
max_backward = {e.op.name: e.flops for e in events if e.phase == "backward" and e.flops}       # the last loop: max
print(f"max's backward, FLOPs by op: {max_backward}")
assert max_backward == {"compare": R * n, "sum": R * (n - 1), "mul": R * n, "div": R * n}
winners = xr.numpy() == xr.numpy().max(axis=1, keepdims=True)
assert [table[k][:2] for k in table] == [(R * (n - 1), 0), (R * (n - 1) + R, R),
                                         (R * (n - 1), 3 * R * n + R * (n - 1))]
assert table["sum"][:2] == (9, 0) and table["mean"][:2] == (12, 3) and table["max"][:2] == (9, 45)
assert np.array_equal(table["sum"][2], np.ones((3, 4))) and np.array_equal(table["mean"][2], np.full((3, 4), 1 / n))
assert np.array_equal(table["max"][2], winners / winners.sum(axis=1, keepdims=True))     # rows 2 and 3 are ties

a_vec, G_big = tb.randn(1, 4, generator=g, dtype=F64), tb.randn(3, 4, generator=g, dtype=F64)
left_side = (a_vec.expand(3, 4) * G_big).sum().item()                      # <expand(a), G>
right_side = (a_vec * G_big.sum(axis=0, keepdims=True)).sum().item()       # <a, sum(G)>
h = 2.0 ** -10                                                             # exact in binary
tie = (np.max([3.0 + h, 3.0]) - np.max([3.0 - h, 3.0])) / (2 * h)
print(f"<expand(a), G> = {left_side:.12f}, <a, sum(G)> = {right_side:.12f}; central difference at a tie: {tie}")
assert abs(left_side - right_side) < 1e-12 and tie == 0.5 == table["max"][2][1, 0]

# %% [markdown]
# ## 3. A matmul costs $2MNK$ FLOPs
#
# The product of an $(M, K)$ and a $(K, N)$ matrix has $MN$ numbers, each a dot product of length $K$: $K$
# multiplications and $K - 1$ additions, $MN(2K - 1)$ operations in all. The convention, used by PyTorch's
# `FlopCounterMode`, by papers and by this engine, counts $2K$ per output, **$2MNK$**. Accelerators (GPUs and
# similar chips) execute a multiply followed by an add as one instruction, a *fused* multiply-add, counted as 2
# FLOPs, and the difference, $MN$, is negligible for any real $K$.
#
# Batch axes multiply the count. A stack of $B$ products, $(B, M, K) @ (B, K, N)$, costs $2BMNK$. So does
# $(B, M, K) @ (K, N)$, which the engine computes as one $(BM, K) @ (K, N)$ product, with the batch folded into
# the rows. When the batch axes differ they broadcast as in section 1: $(2, 1, M, K) @ (1, 4, K, N)$ is a batch of
# $2 \times 4 = 8$ products. The shape-only device counts all of these without computing a single number, even
# for one of the largest products in Llama-2-7B (a 7-billion-parameter language model), the first layer of its
# feed-forward network (lesson 08) applied to a text of 4096 pieces, or tokens (lesson 04), one row each,
# $(4096, 4096) @ (4096, 11008)$: 369,367,187,456 FLOPs.

# %%
def matmul_count(a_shape, b_shape, grads=(True, True)):
    """FLOPs of a @ b (forward, backward matmuls, backward all ops) on the shape-only device."""
    a = tb.zeros(*a_shape, device="meta", requires_grad=grads[0])
    b = tb.zeros(*b_shape, device="meta", requires_grad=grads[1])
    with count_flops() as fc:
        product = a @ b
        if any(grads):
            product.backward(tb.ones_like(product))
    return fc.total("forward"), fc.total("backward", matmul_only=True), fc.total("backward"), product.shape


print(f"{'a':16} {'b':16} {'a @ b':16} {'counted':>17} {'2 x batch x MNK':>17}")
for a_shape, b_shape in [((2, 3), (3, 4)), ((8, 16, 32), (8, 32, 64)), ((8, 16, 32), (32, 64)),
                         ((2, 1, 16, 32), (1, 4, 32, 64)), ((4096, 4096), (4096, 11008))]:
    fwd, _, _, shape = matmul_count(a_shape, b_shape, (False, False))
    (M, K), N = a_shape[-2:], b_shape[-1]
    batch = int(np.prod(np.broadcast_shapes(a_shape[:-2], b_shape[:-2])))
    print(f"{str(a_shape):16} {str(b_shape):16} {str(shape):16} {fwd:>17,} {2 * batch * M * N * K:>17,}")
    assert fwd == 2 * batch * M * N * K and fwd - M * N * (2 * K - 1) * batch == batch * M * N
assert fwd == 369_367_187_456
assert matmul_count((2, 1, 16, 32), (1, 4, 32, 64), (False, False))[3] == (2, 4, 16, 64)     # a batch of 2 x 4

# %% [markdown]
# ## 4. The backward of a matmul is two matmuls: twice the forward
#
# For $Y = A B$ with upstream gradient $G = \partial L / \partial Y$ of shape $(M, N)$:
#
# $$\frac{\partial L}{\partial A} = G B^\top \quad (M, N) @ (N, K), \qquad
#   \frac{\partial L}{\partial B} = A^\top G \quad (K, M) @ (M, N).$$
#
# Each is a product of the same three sizes $M$, $N$, $K$, so each costs $2MNK$, and the backward costs **exactly
# twice** the forward. That is where the rule "training costs $6N$ FLOPs per token", for a model of $N$ parameters,
# comes from: each weight does one multiply-add per token (per row of input, one row for each piece of the text;
# lesson 04), $2N$ forward, plus $4N$ backward (lesson 13 counts it on whole models). If only one input needs a
# gradient, only one product runs, and the backward costs the same as the forward. That happens for the first layer,
# whose input is data, or for a **frozen** weight, one that training leaves as it is (LoRA, lesson 15, fine-tunes a
# trained model, training it further on new text, by keeping its big matrices fixed and training small ones added
# beside them).
#
# A popular rule of thumb says "3× for backward". Counted, a matmul's backward is exactly 2 times its forward; the
# 3 is forward plus backward together, as the last column below shows. Ops other than matmuls can cost a little
# more or less than twice, but in a transformer they are a small fraction of the FLOPs (lesson 13 counts them).
#
# One more cost shows up in the backward only. When the batch axes were broadcast, each input was expanded, and
# the expand's backward sums (section 1). $(2, 1, 16, 32) @ (1, 4, 32, 64)$ adds $2 \cdot 16 \cdot 32 \cdot (4-1)
# + 4 \cdot 32 \cdot 64 \cdot (2-1)$ = 11,264 FLOPs of sums to the backward's 1,048,576 FLOPs of matmuls.

# %%
shapes = ((2048, 4096), (4096, 11008))
print(f"{'needs a gradient':22} {'forward':>18} {'backward matmuls':>18} {'bwd/fwd':>8} {'(fwd+bwd)/fwd':>14}")
for grads, label in [((True, True), "A and B"), ((False, True), "B only (A is data)"),
                     ((True, False), "A only (B frozen)")]:
    fwd, bwd, bwd_all, _ = matmul_count(*shapes, grads)
    print(f"{label:22} {fwd:>18,} {bwd:>18,} {bwd / fwd:>8g} {(fwd + bwd) / fwd:>14g}")
    assert bwd == bwd_all == fwd * sum(grads) and fwd == 2 * 2048 * 4096 * 11008
    assert grads != (True, True) or (fwd + bwd) / fwd == 3                  # the "3x": forward plus backward
fwd, bwd, bwd_all, _ = matmul_count((2, 1, 16, 32), (1, 4, 32, 64))
print(f"(2, 1, 16, 32) @ (1, 4, 32, 64): backward matmuls {bwd:,} = 2 x forward; sums of the expands "
      f"{bwd_all - bwd:,}")
assert bwd == 2 * fwd == 1_048_576 and bwd_all - bwd == 2 * 16 * 32 * (4 - 1) + 4 * 32 * 64 * (2 - 1) == 11_264

# %% [markdown]
# The two formulas, checked: with random $A$, $B$ and $G$ in float64, autograd's gradients equal $G B^\top$ and
# $A^\top G$ computed in numpy, and finite differences agree with them.

# %%
A = tb.randn(5, 3, generator=g, dtype=F64, requires_grad=True)
B = tb.randn(3, 4, generator=g, dtype=F64, requires_grad=True)
G = tb.randn(5, 4, generator=g, dtype=F64)
(A @ B).backward(G)
gap_a = np.abs(A.grad.numpy() - G.numpy() @ B.numpy().T).max()
gap_b = np.abs(B.grad.numpy() - A.numpy().T @ G.numpy()).max()
checked = tb.gradcheck(lambda a, b: a @ b, A, B)
print(f"|dA - G B^T| = {gap_a:.1e}, |dB - A^T G| = {gap_b:.1e}; gradcheck: {checked}")
assert gap_a < 1e-14 and gap_b < 1e-14 and checked

# %% [markdown]
# ## 5. `nn.Linear`: a matmul and a bias
#
# `nn.Linear(d_in, d_out)` holds a weight $W$ stored as (out, in), the layout of PyTorch and of every Hugging Face
# checkpoint (Hugging Face is the main site where models are published; a checkpoint is the files a published model
# comes in, lesson 20), and optionally a bias $b$ of shape (out,). On an input $X$ of shape $(\dots, d_{in})$ it
# computes
#
# $$Y = X W^\top + b, \qquad \text{parameters: } d_{in} d_{out} + d_{out} \text{ (with the bias).}$$
#
# Llama's linear layers have no bias: in Llama-2-7B, `q_proj` ($4096 \to 4096$, the first of attention's four
# matrices, lesson 06) holds 16,777,216 parameters, and `up_proj` ($4096 \to 11008$, a first layer of the
# feed-forward network, or FFN, lesson 08) holds 45,088,768. GPT-2 (OpenAI's language model of 2019) has biases
# in its layers: its FFN's first layer (lesson 08), $768 \to 3072$, holds 2,359,296 weights and 3,072 biases,
# 2,362,368 in all.
#
# Its backward follows from sections 1 and 4. Flatten every leading axis of $X$ and of the upstream gradient
# $dY$ into rows. Then
#
# $$dX = dY\,W, \qquad dW = dY^\top X, \qquad db = \textstyle\sum_{\text{rows}} dY.$$
#
# $dW$ sums over every row, because the same $W$ served every row (every token, in a model; lesson 04); $db$ sums
# over every row, because the bias was broadcast to every row. Written by hand in numpy, they match autograd.

# %%
g = tb.Generator(3)
llama, gpt2 = nn.preset("llama2-7b"), nn.preset("gpt2-small")
q_proj = nn.Linear(llama.d_model, llama.d_model, bias=llama.bias, generator=g, device="meta")
up_proj = nn.Linear(llama.d_model, llama.d_ff, bias=llama.bias, generator=g, device="meta")
gpt2_fc = nn.Linear(gpt2.d_model, gpt2.d_ff, bias=gpt2.bias, generator=g, device="meta")
counts = [m.num_parameters() for m in (q_proj, up_proj, gpt2_fc)]
print(f"parameters: q_proj {counts[0]:,}, up_proj {counts[1]:,}, GPT-2 FFN in {counts[2]:,} "
      f"({gpt2_fc.weight.size:,} weights + {gpt2_fc.bias.size:,} biases)")
assert counts == [4096 * 4096, 4096 * 11008, 768 * 3072 + 3072] == [16_777_216, 45_088_768, 2_362_368]
assert (gpt2_fc.weight.size, gpt2_fc.bias.size) == (2_359_296, 3_072) and (llama.bias, gpt2.bias) == (False, True)

layer = nn.Linear(6, 4, bias=True, generator=g, dtype=F64)
layer.bias = nn.Parameter(tb.randn(4, generator=g, dtype=F64))            # starts at zero: give it a value
X = tb.randn(2, 5, 6, generator=g, dtype=F64, requires_grad=True)          # leading axes (2, 5), then d_in
dY = tb.randn(2, 5, 4, generator=g, dtype=F64)                            # leading axes (2, 5), then d_out
layer(X).backward(dY)
x_rows, dy_rows, W = X.numpy().reshape(-1, 6), dY.numpy().reshape(-1, 4), layer.weight.numpy()   # (10, 6), (10, 4)
by_hand = {"dX": (dY.numpy() @ W, X.grad), "dW": (dy_rows.T @ x_rows, layer.weight.grad),
           "db": (dy_rows.sum(axis=0), layer.bias.grad)}
for name, (mine, auto) in by_hand.items():
    print(f"{name}: shape {auto.shape}, |by hand - autograd| = {np.abs(mine - auto.numpy()).max():.1e}")
    assert mine.shape == auto.shape and np.abs(mine - auto.numpy()).max() < 1e-14

# %% [markdown]
# Counted on the shape-only device, with the bias: the forward is the matmul, $2 R\, d_{in} d_{out}$ for $R$ rows,
# plus one addition per output number for the bias, $R\, d_{out}$. The backward is two matmuls, $4 R\, d_{in}
# d_{out}$, plus the bias's column sums, $(R - 1)\, d_{out}$. For `up_proj` with a bias on a (1, 2048, 4096)
# input, that is 184,706,138,112 FLOPs forward and 369,389,720,832 backward. The ratio of all ops is
# 1.99988, within a hundredth of a percent of 2.
#
# The picture splits the backward of `up_proj` (without a bias, as in Llama) into its two products, for the three
# cases of section 4. Each product is the size of the forward. $dX$ is needed whenever anything before the layer
# learns; $dW$ is needed whenever the weight does. So a **hidden** layer, one with other learned layers before it,
# needs both.

# %%
rows, d_in, d_out = 2048, 4096, 11008
lin = nn.Linear(d_in, d_out, bias=True, generator=g, device="meta")
with count_flops() as fc:
    y = lin(tb.zeros(1, rows, d_in, device="meta", requires_grad=True))
    y.backward(tb.ones_like(y))
fwd, bwd = fc.total("forward"), fc.total("backward")
print(f"up_proj with a bias, {rows} rows: forward {fwd:,}, backward {bwd:,}, ratio {bwd / fwd:.5f}")
assert fwd == 2 * rows * d_in * d_out + rows * d_out == 184_706_138_112
assert bwd == 4 * rows * d_in * d_out + (rows - 1) * d_out == 369_389_720_832 and round(bwd / fwd, 5) == 1.99988
assert abs(bwd / fwd - 2) / 2 < 1e-4


def backward_products(x_grad: bool, w_grad: bool):
    """Forward and backward matmul FLOPs of a bias-free up_proj, the backward split into dX and dW by the shape
    of what each product makes: dX is (rows, d_in), the gradient of W^T is (d_in, d_out)."""
    layer = nn.Linear(d_in, d_out, generator=tb.Generator(0), device="meta")
    layer.weight.requires_grad = w_grad
    made = []
    with tb.observe(lambda e: made.append((e.phase, e.output.shape, e.flops)) if e.op.name == "matmul" else None):
        y = layer(tb.zeros(1, rows, d_in, device="meta", requires_grad=x_grad))
        y.backward(tb.ones_like(y))
    forward = sum(f for ph, _, f in made if ph == "forward")
    dx = sum(f for ph, shape, f in made if ph == "backward" and shape == (rows, d_in))
    dw = sum(f for ph, shape, f in made if ph == "backward" and shape == (d_in, d_out))
    return forward, dx, dw


cases = {"hidden layer:\nneeds dX and dW": backward_products(True, True),
         "first layer (X is data):\nneeds dW only": backward_products(False, True),
         "frozen W (as under LoRA):\nneeds dX only": backward_products(True, False)}
fig = figure(8, 4.4)
ax = fig.add_subplot()
for k, (forward, dx, dw) in enumerate(cases.values()):
    ax.bar(k - 0.2, forward / 1e9, 0.36, color="0.6", label="forward: $Y = X W^T$" if k == 0 else None)
    ax.bar(k + 0.2, dx / 1e9, 0.36, color="tab:blue", label="backward: $dX = dY\\,W$" if k == 0 else None)
    ax.bar(k + 0.2, dw / 1e9, 0.36, bottom=dx / 1e9, color="tab:orange",
           label="backward: $dW = dY^T X$" if k == 0 else None)
    ax.text(k + 0.2, (dx + dw) / 1e9 + 6, f"{(dx + dw) / forward:g} x forward", ha="center", fontsize=9)
ax.set_xticks(range(len(cases)), list(cases))
ax.set(ylabel="GFLOPs", ylim=(0, 450),
       title=f"Llama-2-7B's up_proj ({d_in} -> {d_out}) on {rows} tokens: matmul FLOPs, counted")
ax.legend(loc="upper right", fontsize=9)
show(fig, OUT / "linear_forward_backward_flops.png")
for label, (forward, dx, dw) in cases.items():
    print(f"{label.replace(chr(10), ' '):38} forward {forward:,}  dX {dx:,}  dW {dw:,}")
matmul = 2 * rows * d_in * d_out                                          # the forward product, 2 R d_in d_out
assert list(cases.values()) == [(matmul, matmul, matmul), (matmul, 0, matmul), (matmul, matmul, 0)]

# %% [markdown]
# ## Check yourself
#
# 1. A bias of shape (4,) is added to every row of a (3, 4) tensor. What is the bias's gradient, and why?
#
#    <details><summary>Answer</summary>
#
#    The sum of the upstream gradient down the rows (over axis 0), shape (4,). The `expand` copied each $b_j$ into 3
#    places, and a change in $b_j$ moves all 3 copies, so their gradients add: the backward of an expand is a sum.
#
#    </details>
#
# 2. How many FLOPs does a $(M, K) @ (K, N)$ product cost, and how many does its backward cost when both inputs
#    need a gradient?
#
#    <details><summary>Answer</summary>
#
#    $2MNK$ forward, counting a multiply and an add for each of the $K$ terms of each of the $MN$ outputs. The
#    backward is two products of the same three sizes, $G B^\top$ and $A^\top G$, so exactly $4MNK$: twice the
#    forward.
#
#    </details>
#
# 3. When does a matmul's backward cost only as much as its forward?
#
#    <details><summary>Answer</summary>
#
#    When only one input needs a gradient: the first layer, whose input is data, or a frozen weight. Then only one
#    of the two products runs.
#
#    </details>
#
# 4. Why does the gradient of `nn.Linear`'s weight, $dW = dY^\top X$, sum over every row of the input?
#
#    <details><summary>Answer</summary>
#
#    The same $W$ served every row, so each row's contribution to the loss adds to $W$'s
#    gradient. The bias's gradient sums over the rows for the same reason.
#
#    </details>

# %% [markdown]
# ## Words from this lesson
#
# - **broadcasting**: lining two shapes up from the right and stretching axes of size 1, which the engine does with
#   an explicit `expand` whose backward is a sum (§1)
# - **matmul**: the matrix product `a @ b`, which costs $2MNK$ FLOPs for an $(M, K)$ and a $(K, N)$ matrix (§3)
# - **fused multiply-add**: a multiplication followed by an addition run as one instruction and counted as 2 FLOPs
#   (§3)
# - **accelerator**: a GPU or a similar chip built to multiply matrices fast (§3)
# - **shape-only device**: the device `'meta'`, on which tensors have shapes and dtypes but no numbers, so that
#   costs can be counted without computing (§3)
# - **frozen**: said of a weight that training leaves as it is, so that no gradient of it is computed (§4)
# - **fine-tune**: to train an already trained model further, on new text (§4)
# - **bias**: a learned vector added to every row of a layer's output (§5)
# - **linear layer**: `nn.Linear`, which computes $Y = X W^\top + b$ with its weight stored as (out, in) (§5)
# - **checkpoint**: the files a published model comes in, such as its weights and its configuration (§5)
# - **Hugging Face**: the main site where models are published, whose checkpoint layout the library reads (§5)
# - **GPT-2**: OpenAI's language model of 2019, whose layers have biases (§5)
# - **hidden layer**: a layer with other learned layers before it, so that it needs both $dX$ and $dW$ (§5)

# %% [markdown]
# ## Exercises
#
# 1. `unbroadcast`: given the gradient of a broadcast result and the shape of the tensor that was broadcast,
#    return that tensor's gradient: the sum over the axes the broadcast created or stretched, with exactly the
#    input's shape (section 1). The checker compares with autograd through an explicit `expand` on ten pairs of
#    shapes, and it says when the numbers are right but the size-1 axes went missing (`keepdims`), or when the
#    sum ran over the wrong axes.
# 2. `linear_backward`: the gradients $(dX, dW, db)$ of $Y = X W^\top + b$ by hand, with $W$ stored (out, in), for
#    inputs with any number of leading axes (section 5). The checker compares with autograd and recognises a
#    transposed $dW$, a $dW$ not summed over the batch, and a $db$ summed over one axis only.
# 3. `matmul_flops`: the FLOPs of `a @ b` from the two shapes, batch axes broadcast as in numpy (section 3),
#    checked against what the engine counts on the shape-only device.
#
# `python -m tinygrad_block exercise 03` writes `exercise_03.py` with the three functions to fill in;
# `python -m tinygrad_block check 03` checks them and says what is wrong.
