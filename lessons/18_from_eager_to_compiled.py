# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 18 — From eager to compiled
#
# Everything so far ran *eagerly*: each `a + b` computed its result at once, built a `Tensor` for it, and
# wrote down how it was made, so that `backward()` could walk back later. That bookkeeping is what makes the
# engine easy to read and to debug, and on a small model it costs more than the arithmetic. This lesson
# measures that cost, then removes it: `tb.jit(fn)` watches `fn` run, keeps the list of primitives it
# called, and from then on runs only that list, straight on the arrays. Along the way it merges groups of
# elementwise ops into single **kernels**: lessons 16 and 17 used the word for one program a GPU runs over a
# whole tensor; here, on the CPU, a kernel is one numpy call, or one loop of C that the program writes and
# compiles for a group of ops (section 4). We read the program it builds, draw it, time it against eager and
# against PyTorch, follow SiLU from its primitives to one loop of C and to the same loop as a GPU kernel, and
# watch the guards that stop it from ever replaying something that would be wrong.
#
# **What you will learn**
# - what one primitive call costs eagerly, and how much of it is arithmetic;
# - capture and replay: the first calls run eagerly while an observer at the choke point (the one that
#   counts FLOPs and draws graphs, lesson 11) records every primitive; later calls replay the kernels straight
#   on the arrays, and the answers equal eager's bit for bit;
# - the compiled program as text: kernels against primitives, fused groups such as `div > add > sqrt`, FLOPs
#   per kernel, the module each came from;
# - the grouping rule (an instruction joins the kernel of its one reader: same shape, same module, nothing kept; a row
#   sum may end a group), traced back to the lines of RMSNorm that made two groups, and why backward shrinks one;
# - a sum of squares as one loop of C that adds each row in numpy's own order;
# - the program drawn, one box per kernel;
# - eager, compiled and PyTorch eager timed on your machine;
# - SiLU from primitives to one generated loop, timed, and the same body as a CUDA kernel; the exp it calls;
# - the guards: a value read inside, a Python number that changes, a new shape, leftover gradients, a replaced
#   parameter.
#
# Run it as a script, `python -m tinygrad_block lesson 18`, or as a notebook,
# `python -m tinygrad_block lesson 18 --notebook --execute` (it lands beside this file). The reference for
# the compiler itself is `docs/compiled.md`.

# %%
import importlib.util
import shutil
import statistics
import textwrap
import time
from collections import Counter

import numpy as np

import tinygrad_block as tb
from tinygrad_block import kernels, manual, nn
from tinygrad_block.counting import count_flops
from tinygrad_block.fuse import kernel_instructions
from tinygrad_block.graph import render

from course import LESSONS, out_dir, show

OUT = out_dir(18)         # lessons/out/18/: this lesson's pictures
HAVE_GRAPHVIZ = shutil.which("dot") is not None and importlib.util.find_spec("graphviz") is not None
HAVE_TORCH = importlib.util.find_spec("torch") is not None
CFG = nn.preset("tiny")   # d_model 64, 4 query heads sharing 2 key/value heads, d_ff 172
B, L = 2, 16
g = tb.Generator(0)
block = nn.TransformerBlock(CFG, generator=g)                              # float32
x = tb.randn(B, L, CFG.d_model, generator=g)                               # (B, L, d_model)
dout = tb.randn(B, L, CFG.d_model, generator=g)                            # the upstream gradient


def step(x: tb.Tensor, dout: tb.Tensor) -> tb.Tensor:
    """One forward and backward of the block: the function this lesson compiles."""
    out = block(x)
    out.backward(dout)
    return out


def results(x: tb.Tensor, out: tb.Tensor) -> list[np.ndarray]:
    """The output, the input's gradient and every parameter's gradient, as arrays (copies)."""
    return [out.numpy().copy(), x.grad.numpy().copy()] + [p.grad.numpy().copy() for p in block.parameters()]


print(f"pictures go to lessons/out/18/; graphviz {'found' if HAVE_GRAPHVIZ else 'missing'}; "
      f"PyTorch {'found' if HAVE_TORCH else 'missing (its timings are left out)'}")
assert OUT.is_dir() and OUT.name == "18" and len(block.parameters()) == 9

# %% [markdown]
# ## 1. What an eager primitive call costs
#
# When you write `a + b` with `a` needing a gradient, the engine does much more than add. `Tensor.__add__`
# checks the two shapes and inserts an `expand` if they broadcast. `Function.apply`, the choke point, checks
# the devices and the dtype, makes an `Add` object, runs its `forward` (one `np.add`), wraps the result in a
# new `Tensor`, links that tensor to the `Add` object and the `Add` object to its inputs' tensors (the graph
# `backward()` will walk), and asks whether any observer (a FLOP counter, a graph recorder) is listening.
# Under `tb.no_grad()` the graph links are skipped; everything else still happens.
#
# Below, one add of two (2, 16, 64) float32 tensors is timed three ways, each the median of 7 runs of 500
# calls: with the graph, under `no_grad`, and `np.add` on the same two arrays (`a.data` and `b.data`, the numpy
# arrays the two tensors hold), which is the arithmetic alone.
# On the machine this course was written on, the eager add took four to five times as long as `np.add`:
# about three quarters of it was bookkeeping. Your numbers will differ; the assertion only holds that the eager add
# costs more than the arithmetic inside it.

# %%
def per_call(fn, calls: int = 500, runs: int = 7) -> float:
    """Seconds per call of fn(): the median over `runs` runs of `calls` calls each."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


a = tb.randn(B, L, CFG.d_model, generator=g, requires_grad=True)             # (2, 16, 64)
b = tb.randn(B, L, CFG.d_model, generator=g)
add_graph = per_call(lambda: a + b)
with tb.no_grad():
    add_no_grad = per_call(lambda: a + b)
add_array = per_call(lambda: np.add(a.data, b.data))
print(f"one add of (2, 16, 64) float32: eager {add_graph * 1e6:.2f} us, under no_grad {add_no_grad * 1e6:.2f} us, "
      f"np.add {add_array * 1e6:.2f} us")
print(f"eager / np.add = {add_graph / add_array:.1f}: {1 - add_array / add_graph:.0%} of the eager call is bookkeeping")
assert np.array_equal((a + b).numpy(), np.add(a.data, b.data))                  # the same arithmetic
assert add_graph > add_array and add_no_grad > add_array

# %% [markdown]
# A block is made of such calls. Counted by `count_flops`, the tiny block's forward on $(B, L) = (2, 16)$ makes 118
# primitive calls and its backward 164: 282 in all. (Lesson 17 counted 280 for a block of the same shape in float32. Its
# blocks had `max_seq_len` equal to $L$; the `tiny` preset's RoPE tables hold 128 positions, and cutting them to the 16
# in use costs two slices.) Only 154 of them do arithmetic; the other 128 are reshapes (46), permutes (42), expands
# (20), slices (14), pads (4) and concats (2), which compute nothing: they copy the numbers, or give a **view** of them
# (the same numbers in memory, read with another shape or in another order, so nothing is copied). A matmul of the tiny
# block is a $(32 \times 64) \cdot (64 \times 172)$ product at most, a few microseconds of arithmetic, so here the fixed
# cost of each call is a large part of the whole. Lesson 17 saw the same thing from the other side: a small block
# reaches almost nothing of the machine's peak.

# %%
block.zero_grad()
with count_flops() as fc:
    step(x.detach().requires_grad_(), dout)
calls = {phase: sum(n for (ph, *_), n in fc.calls.items() if ph == phase) for phase in ("forward", "backward")}
by_op = Counter()
for (_, _, _, op), n in fc.calls.items():                 # key: (phase, scope, step, op)
    by_op[op] += n
moving = {op: by_op[op] for op in ("reshape", "permute", "expand", "slice", "concat", "pad") if by_op[op]}
arithmetic = sum(by_op.values()) - sum(moving.values())
print(f"primitive calls: forward {calls['forward']}, backward {calls['backward']}, in all "
      f"{sum(calls.values())}; {arithmetic} of them do arithmetic; {fc.total():,} FLOPs")
print(f"the others move or copy numbers: {moving}")
assert calls == {"forward": 118, "backward": 164} and arithmetic == 154 and fc.total() == 9_365_760
assert moving == {"reshape": 46, "permute": 42, "expand": 20, "slice": 14, "concat": 2, "pad": 4}

# %% [markdown]
# ## 2. Capture, then replay
#
# `tb.jit(step)` returns a function that you call like `step`. What it does depends on the call:
#
# - **calls 1 and 2 are captured.** They run eagerly, exactly as `step` would, while an observer at the
#   choke point writes down each primitive: which op, its parameters, which arrays it read and which it
#   produced. An array that no recorded op produced is a *source*: an argument (read anew at each call), a
#   tensor that outlives the call, like a weight or the RoPE tables (the cosines and sines of every position's
#   angles, lesson 07; its `.data` is read at each call, so a weight an optimizer changed is seen), or a constant
#   such as the causal mask. Two captures are needed
#   because one proves nothing about the next call: only if two calls in a row run the same primitives on the
#   same shapes and constants is the list trusted.
# - **later calls are replayed.** No `Tensor`, `Function` or graph object is made: the program runs its kernels
#   on the arrays, then writes back what the eager call would have left behind: here, each parameter's `.grad`
#   and `x.grad`.
#
# `captures` and `replays` count the two kinds of call. Below, four calls on four different inputs are
# compared, array by array, with eager runs of `step` on the same inputs: the output, `x.grad` and the nine
# parameter gradients are **equal bit for bit**, at every call. Fusion changes where results are written, not
# how they are computed: a generated loop computes each primitive as eager does, in the same order, rounding as
# numpy rounds, sums each row in the order numpy adds it (section 4), and computes exp and log with the very
# functions eager calls (section 7).
#
# A FLOP counter still sees every primitive of a replay: under `count_flops()`, the program runs its kernels
# unfused and tells the counter about each primitive as the eager call would, so the replay counts the same
# 9,365,760 FLOPs in the same 282 calls.

# %%
compiled = tb.jit(step)
inputs = [tb.randn(B, L, CFG.d_model, generator=tb.Generator(10 + i)) for i in range(4)]
progress, equal = [], []
for xi in inputs:
    block.zero_grad()
    xe = xi.detach().requires_grad_()
    want = results(xe, step(xe, dout))                           # eager
    block.zero_grad()
    xc = xi.detach().requires_grad_()
    got = results(xc, compiled(xc, dout))                        # captured, or replayed
    progress.append((compiled.captures, compiled.replays))
    equal.append(all(np.array_equal(w, v) for w, v in zip(want, got)))
block.zero_grad()
with count_flops() as replayed:
    compiled(x.detach().requires_grad_(), dout)
print("after each call (captures, replays):", progress)
print(f"bit for bit equal to eager, output and 10 gradients, at each call: {equal}")
print(f"a counted replay: {replayed.total():,} FLOPs in {sum(replayed.calls.values())} primitive calls")
assert progress == [(1, 0), (2, 0), (2, 1), (2, 2)] and equal == [True] * 4 and compiled.replays == 3
assert replayed.total() == fc.total() and replayed.calls == fc.calls

# %% [markdown]
# ## 3. The program
#
# A compiled program is a list of **instructions**, one per primitive call the capture recorded
# (`program.instructions`); a kernel runs one instruction, or a fused group of several. `print(compiled.program)`
# lists the kernels, one per line: what runs (a fused kernel lists its primitives in program
# order, joined by `>`), `fused` or `direct`, the output's shape and dtype, the FLOPs, the bytes it reads and writes,
# their ratio (its **arithmetic intensity**, FLOPs per byte: lesson 16's roofline reads it), and the module and step
# the primitives came from. The first line sums it up. For the block's forward and backward: **206 kernels for 282
# primitives**, 25 of them fused. The 76 missing kernels are 61 primitives folded into fused kernels (25 groups
# holding 86 primitives) and 15 `expand`s dropped. An `expand` is dropped when every op that reads it is an
# elementwise op whose other operand already has the full shape: numpy broadcasts the small array on the fly, as the
# expand's view would have. The compiler knows the shapes of the arrays its own ops produce, not those of the
# arguments, so in `norm1`, where the other operand is the argument `x`, the expand stays (kernel 3 below); in
# `norm2`, whose input comes out of the residual add, it is dropped.
#
# Every other primitive is one `direct` kernel: it calls its array function (`np.matmul`, `np.concatenate`,
# `np.add.reduce` for a sum, an index for a slice) with no object of the engine in between, and a view of an
# array from outside the program (the transposed weight `permute` hands to a matmul) is made again only when
# that array is a new one. No kernel goes through its primitive's `forward` any more.
#
# The first 6 kernels are `norm1`, the block's first RMSNorm, forward, starting with `mul > sum`: the squares of x
# summed over each token's 64 numbers in one kernel (section 4). Of the 25 groups, 10 are in the forward and 15 in
# the backward: the backward of an elementwise op is made of elementwise ops of the same shape, which group well.
# RMSNorm's backward holds `mul > mul > neg > mul > div > div` and a `mul > sum` of its own, the two residual
# gradients meet in `add > add > add`, SiLU's backward is one group of 8 primitives, and the softmax's backward ends
# in a row sum, `mul > neg > mul > div > sum`. They come in 14 patterns, several of them twice or more: once per
# RMSNorm, or once for the queries and once for the keys in RoPE; `mul > sum` four times, forward and backward of
# each RMSNorm.

# %%
program = compiled.program
text = str(program)
print("\n".join(text.splitlines()[:10]))
groups = [kernel_instructions(k) for k in program.kernels if len(kernel_instructions(k)) > 1]
dropped = len(program.plain) - sum(len(kernel_instructions(k)) for k in program.kernels)
own_forward = [k for k in program.kernels if hasattr(k, "fn")]
patterns = Counter(" > ".join(s.op.name for s in c) for c in groups)
group_phases = Counter(c[0].phase for c in groups)
print(f"... {len(program.kernels) - 8} more kernels; {len(groups)} groups hold {sum(map(len, groups))} primitives, "
      f"{dropped} expands dropped, {len(own_forward)} kernels run their primitive's forward")
print(f"groups: {dict(group_phases)}; by pattern: {dict(patterns.most_common())}")
assert text.splitlines()[0].startswith("program: 206 kernels for 282 primitives")
assert len(program.plain) == 282 and len(program.kernels) == 206 and len(groups) == 25
assert sum(map(len, groups)) == 86 and dropped == 15 and 86 - 25 + 15 == 282 - 206
assert own_forward == []
assert group_phases == {"forward": 10, "backward": 15}
assert len(patterns) == 14 and patterns["mul > mul > add"] == 5 and patterns["mul > sum"] == 4
assert sorted(patterns.values()) == [1] * 8 + [2] * 4 + [4, 5] and patterns["mul > neg > mul > div > sum"] == 1
assert patterns["mul > mul > neg > mul > div > div"] == 2 and patterns["add > add > add"] == 2
assert [" > ".join(s.op.name for s in kernel_instructions(k)) for k in program.kernels[:7]] == [
    "mul > sum", "div > add > sqrt", "reciprocal", "expand", "mul", "mul", "permute"]
assert {".".join(s.scope) for k in program.kernels[:6] for s in kernel_instructions(k)} == {"block.norm1"}

# %% [markdown]
# ## 4. Which ops share a kernel, and why
#
# A **fused kernel** computes a group of elementwise primitives in one loop over its output's elements: for each
# element it reads its inputs, computes every primitive of the group one after the other, in the CPU's registers,
# and writes one number. The group's intermediate results never reach memory at all. The program writes the loop
# in a small **kernel language** (`tinygrad_block/kernels.py`) that holds add, sub, mul, div, neg, reciprocal,
# sqrt, maximum, exp, log, `where` and the six comparisons; the CPU's backend turns it into C and compiles it
# (below). Which primitives share a kernel? Each instruction of that language **joins the kernel of its reader** if:
#
# 1. it has exactly **one reader** (which may read it twice, as `a * a` does), and that reader is in the language
#    too. A result that two ops read must be written to memory, where both can find it;
# 2. its result is not kept after the call (returned, or written back as a gradient): a kept result must reach
#    memory anyway;
# 3. the reader has its shape and **memory layout** (the order in which the numbers lie in memory: a transposed
#    view holds the same numbers as its source, in another order), so that one loop walks both. The layout
#    matters: a matmul that reads the result later may add its products in another order, and so round
#    differently, when its input lies differently;
# 4. the reader runs in the same module (`block.norm1`, `block.ffn`): a kernel is one module's, as the graph
#    explorer draws it.
#
# An instruction joins its reader's whole group, so a group is a **tree**: its last instruction, whose result is
# written, and every instruction that flows into it through one-reader links. Branches may meet (`(a + b)` where
# `a` and `b` are both computed in the group), and the program's order does not matter: the instructions between
# two members may be anything. An instruction that joins no one and that no one joins stays one call of numpy's
# function. (Without a C
# compiler the program falls back to in-place chains of numpy calls, `np.add(r, eps, out=r)`, with a stricter rule:
# docs/compiled.md.)
#
# **A row sum may end a group.** A `sum` over its input's last axis alone (RMSNorm's, over each token's d_model numbers;
# the softmax's, over each query's keys) is not in the language, yet a float32 or float64 instruction whose one reader
# is such a sum, in the same module, joins it when the instruction's result lies in memory row after row (C order,
# numpy's own for a new array). The kernel then walks the rows: for each row it computes the row's elements and adds
# them up, and writes one number per row. The order of those additions matters, since every addition rounds: the same
# numbers added in another order can differ in the last bit. So each row is summed in numpy's own order, the
# **pairwise** sum numpy uses for numbers side by side in memory: below 8 numbers, one by one from the first; up to 128,
# eight running sums, over every eighth number, added in pairs, ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)), then
# the numbers left over; above 128, the row split in two (at half its length, rounded down to a multiple of 8), each
# half summed that way and the two added. A replay is still eager's bit for bit. The sum ends its group: it joins no
# reader (its result, one number a row, is written). Other sums stay numpy's call, because numpy adds them in other
# orders: over other axes (the gradient of RMSNorm's weight sums over B and L) it adds whole rows into the result one
# after another, and over numbers that do not lie in rows (a transposed view) its loop may walk another axis first. A
# kernel that reproduced those would need one order for each case.
#
# **Two groups, traced back to their code.** `nn.RMSNorm.forward` computes
# `rstd = ((xw * xw).mean(axis=-1, keepdims=True) + self.eps).rsqrt()`. In primitives: `mul` (x·x), `sum` and
# `div` (the mean is a sum divided by d), `add` (+ ε, lesson 05's small constant), then `sqrt` and `reciprocal`
# (`rsqrt`, the reciprocal square root, is written as 1/√·). The `mul`'s only reader is the `sum`, over the last
# axis of a (2, 16, 64) array laid out in rows: the `mul` joins it, and `mul > sum` is one kernel that squares each
# token's 64 numbers and adds them up, never writing the 2,048 squares. The sum ends that group. From `div` on,
# everything has shape (2, 16, 1) and each result has one reader, so compiling **the forward alone** gives the
# group `div > add > sqrt > reciprocal`, and then `mul > mul` (x · rstd · g).
#
# In the program of **forward and backward**, the same code gives `div > add > sqrt`, and `reciprocal` is a
# kernel of its own. The reason is backward: the derivative of $\sqrt{u}$ is $1 / (2\sqrt{u})$, so
# `sqrt`'s backward reads `sqrt`'s output. That output now has two readers, `reciprocal` in the forward and a
# `mul` in the backward, so it must be written to memory. What backward saves limits what the forward may fuse
# (`x · rstd`, read by the gradient of g, stays a kernel of its own too). The cell below lists norm1's groups in
# both programs and finds the readers of `sqrt`'s result.

# %%
forward_only = tb.jit(lambda x: block(x))
for xi in inputs[:3]:
    forward_only(xi)
fwd_program = forward_only.program


def forward_groups(prog, scope: str) -> list[list]:
    """The instructions of each fused kernel of module `scope` in a program's forward, in program order."""
    return [group for k in prog.kernels if len(group := kernel_instructions(k)) > 1
            and ".".join(group[0].scope) == scope and group[0].phase == "forward"]


def ops(group: list) -> str:
    """A group's primitives, joined by >."""
    return " > ".join(s.op.name for s in group)


def readers(prog, slot: int) -> list:
    """(op, phase) of every instruction of the program that reads the array in `slot`."""
    return [(s.op.name, s.phase) for s in prog.instructions if slot in s.ins + tuple(k for _, k in s.array_params)]


for name, prog in (("forward only", fwd_program), ("forward + backward", program)):
    print(f"{name:18}: norm1's groups {[ops(c) for c in forward_groups(prog, 'block.norm1')]}")
    print(f"{'':18}  {str(prog).splitlines()[0]}")
sqrt_slot = next(s.out for c in forward_groups(program, "block.norm1") for s in c if s.op.name == "sqrt")
print(f"readers of sqrt's output, forward + backward: {readers(program, sqrt_slot)}")
assert [ops(c) for c in forward_groups(fwd_program, "block.norm1")] == ["mul > sum", "div > add > sqrt > reciprocal",
                                                                        "mul > mul"]
assert [ops(c) for c in forward_groups(program, "block.norm1")] == ["mul > sum", "div > add > sqrt"]
assert readers(program, sqrt_slot) == [("reciprocal", "forward"), ("mul", "backward")]
assert str(fwd_program).splitlines()[0].startswith("program: 79 kernels for 118 primitives")

# %% [markdown]
# The order of the program does not matter. SwiGLU computes `silu(gate(x)) * up(x)`. In the forward's program,
# SiLU ends in `where > add > div > mul`, and the final `* up(x)` is another `mul` of the same shape, in the same
# module, that reads SiLU's result once: it joins, and the group is `where > add > div > mul > mul`. Between the
# two multiplications the program runs `up_proj` (a permute, a reshape, a matmul, a reshape); the fused kernel
# runs after them, where its last instruction stands, and the next cell shows the kernels before it. (In the forward and
# backward program SiLU's result is read by backward too, so it is written, and the gating `mul` stays alone.)
#
# What does fusion save? A group of $n$ primitives writes one result instead of $n$: its $n - 1$ intermediate
# results are never written to memory nor read back. Over the 25 groups of the forward and backward, that is 61
# arrays, 494,336 bytes of float32, that a replay never writes: little at this size, but it is the same count that
# lesson 16 made for the memory traffic of a real block.

# %%
names = [" > ".join(s.op.name for s in kernel_instructions(k)) for k in fwd_program.kernels]     # the forward alone
swiglu = names.index("where > add > div > mul > mul")
before = names[swiglu - 4:swiglu + 1]
print(f"kernels {swiglu - 4}..{swiglu}: {before}")
saved_bytes = sum(s.dtype.itemsize * int(np.prod(s.shape)) for c in groups for s in c[:-1])
print(f"intermediates a fused replay never writes: {sum(len(c) - 1 for c in groups)} arrays, {saved_bytes:,} bytes")
assert before == ["permute", "reshape", "matmul", "reshape", "where > add > div > mul > mul"]
assert sum(len(c) - 1 for c in groups) == 61 and saved_bytes == 494_336

# %% [markdown]
# **A group as one loop of C.** On the CPU every fused kernel runs as one function of C, a **generated kernel**:
# the program writes it, compiles it once with the system's C compiler (the library is kept on disk, so the next
# run finds it), and runs it on the replay's arrays: one pass over memory instead of one per op, and no Python
# between the ops. `program.source()` is that C, written to be read: a loop over the output's elements, one line per
# primitive named after it, its shape and module in a comment, the numbers of the code (RMSNorm's d and ε)
# written in. Each op rounds as numpy's does (the compiler is told not to merge a multiply and an add into one
# rounding), and exp and log are the project's own functions, which eager calls too (section 7), so a replay is
# still eager's bit for bit. All 13 groups of the forward are generated kernels, the softmax's `sub > exp` and
# SiLU's `neg > where > exp` included. Below, the first two, both RMSNorm's: `k1`, `div > add > sqrt > reciprocal`,
# is one loop over the 32 tokens' numbers; `k0`, `mul > sum`, is a row sum, written as three functions. `k0_at`
# computes one element of a row (here the square), `k0_pairwise` adds n of them in numpy's pairwise order, calling
# itself on the two halves of a row longer than 128, and `k0` walks the 32 rows, each 64 numbers past the one
# before. Its `0.0f +` is numpy's too: a sum starts from 0, so a row of -0.0 sums to 0.0.
#
# A kernel whose code is an earlier one's, comments and name aside, is written once: norm2's row sum `k60` is
# norm1's `k0` on other arrays, so the file's `k60` is one line, `k0(in0, out);`, and the compiler builds the loop
# once. A model of 32 blocks makes 32 of each kernel and compiles the code of one of each.
#
# On a GPU the row sum is CUDA C as well, one thread per row (`program.source("cuda")`), but it does not run
# there: CuPy, which eager calls on a GPU, sums a row in another order than numpy's, so a replay there runs CuPy's
# own calls for these groups, to stay eager's bit for bit.

# %%
source = fwd_program.source()
start = source.index("/* k0:")
print(source[start:source.index("\n}\n", source.index("/* k1:")) + 2])
print(f"generated kernels of the forward's 13 groups: {len(fwd_program.plans)} "
      f"({', '.join(k.describe().split('   ')[0] for k in fwd_program.plans[:3])}, ...)")
assert len(fwd_program.plans) == 13 and "float div_0 = x0 / c0;" in source[source.index("/* k1:"):]
assert "float sqrt_2 = sqrtf(add_1);" in source and "float c1 = 9.999999747378752e-06;" in source
assert "float mul_0 = x0 * x0;" in source[start:] and "out[i0] = 0.0f + k0_pairwise(in0 + i0 * 64, 64);" in source
assert "tb_expf(" in source
lines = source.splitlines()
calls = [(head.split("(")[0].removeprefix("void "), body.split("(")[0].strip())      # (kernel, the one it calls)
         for head, body in zip(lines, lines[1:]) if head.startswith("void ") and body.endswith("'s code")]
print("one body, two kernels: " + ", ".join(f"{name} calls {first}" for name, first in calls))
assert calls == [("k60", "k0"), ("k62", "k3")]
cuda_rows = fwd_program.source("cuda")
assert "k0_pairwise(" in cuda_rows and [k.describe().split("   ")[0] for k in fwd_program.plans[:2]] == [
    "mul > sum", "div > add > sqrt > reciprocal"]

# %% [markdown]
# ## 5. The program, drawn
#
# `program.to_dot(title)` writes the kernels as a graph for graphviz: one box per kernel, with its shape,
# dtype, FLOPs and the size of its result in bytes (a reshape, permute or expand makes a view, so nothing is
# copied there), and an arrow from the kernel that wrote an array to each kernel that reads it. **Orange**
# boxes are fused kernels (they list their primitives, top to bottom), **blue** ones a single elementwise op,
# **grey** everything else. Arrays that come from outside the program (the argument, the weights) have no box
# of their own.
#
# The block's whole program is 206 boxes, and even its forward (79) is too tall to read on a screen, so we
# draw the block's second half, forward: `h + FFN(RMSNorm(h))`, 20 kernels for 32 primitives. Read it top to
# bottom. RMSNorm: the row sum `mul > sum`, the group `div > add > sqrt > reciprocal`, its `expand` (kept, because the
# other operand is the argument `h`, section 3) and `mul > mul` (h · rstd · g). The gate and up projections,
# side by side. SiLU is computed from $e^{-|x|}$ so that it never overflows: a `compare` (x ≥ 0) picks the sign
# twice, in two `where`s. The comparison is read by both, so it is written to memory and stays a kernel of its
# own; then `neg > where > exp` makes $e^{-|x|}$, and `where > add > div > mul > mul` finishes SiLU and multiplies
# by the up projection. Last, the down projection and the residual `add`. Exercise 2 writes SiLU in one kernel.

# %%
def second_half(h: tb.Tensor) -> tb.Tensor:
    """The block's second residual branch, forward: h + FFN(RMSNorm(h))."""
    return h + block.ffn(block.norm2(h))


half = tb.jit(second_half)
for xi in inputs[:3]:
    half(xi)
half_text = str(half.program)
half_groups = [" > ".join(s.op.name for s in group) for k in half.program.kernels
               if len(group := kernel_instructions(k)) > 1]
print(half_text.splitlines()[0])
print(f"its fused kernels: {half_groups}")
assert half_text.splitlines()[0].startswith("program: 20 kernels for 32 primitives")
assert half_groups == ["mul > sum", "div > add > sqrt > reciprocal", "mul > mul", "neg > where > exp",
                       "where > add > div > mul > mul"]
dot = half.program.to_dot("h + FFN(RMSNorm(h)), forward, compiled: 20 kernels for 32 primitives")
if HAVE_GRAPHVIZ:
    show(render(dot, OUT / "compiled_ffn_half.png"))
else:
    print("graphviz is missing, so the drawing is skipped (apt-get install graphviz; pip install -e '.[viz]')")

# %% [markdown]
# The whole program reads better beside the primitives it runs, in the graph explorer: `tb.explore(block, x,
# compiled=True)` (or `python -m tinygrad_block graph --preset tiny --compiled --out compiled.html`) writes a
# page whose third pane, **compiled**, holds the kernels inside the same module frames as the forward and
# backward panes (press *compiled* or *all* at the top). Click a kernel and the primitives it runs light up in
# the other panes; click a primitive and the kernel that runs it lights up (an `expand` that the program
# broadcasts on the fly has none). Every primitive the eager panes count is run by exactly one kernel, so the
# compiled pane's FLOPs are the sum of the other two:

# %%
page = tb.explore(block, inputs[0].detach().requires_grad_(), compiled=True)   # dx too, as step computes
total = page.data["modules"]["block"]["total"]
print(f"the page's program: {page.data['program']}; FLOPs per pane {total['flops']}")
assert page.data["program"]["kernels"] == len(program.kernels)
assert total["flops"]["compiled"] == total["flops"]["forward"] + total["flops"]["backward"]
show(page.save(OUT / "compiled_explorer.html"))                 # in a notebook: the explorer itself, inline

# %% [markdown]
# ## 6. Timing: eager, compiled, PyTorch
#
# Timing on a shared machine is noisy, so every engine runs once per **round**, in an order that rotates from
# round to round, and we compare medians: a slow spell hits every engine alike. The engines, all computing the
# block's forward and backward in float32 on the same input:
#
# - **eager**: `step` as written;
# - **replayed, unfused**: `tb.jit(step, fuse=False)`, each primitive's own `forward` on the arrays;
# - **compiled**: `tb.jit(step)`, fused, each kernel calling its array function directly (section 3);
# - **manual**: lesson 10's hand-derived pairs (`manual.block_forward` and `block_backward`), plain numpy code;
# - **PyTorch eager**, if it is installed: the same block written in PyTorch from its equations
#   (`tools/torch_block.py`, the independent version the tests compare with), held to one thread
#   (`torch.set_num_threads(1)`) so that it does not compete with numpy for the cores.
#
# On the 2-core machine this course was written on, the compiled step took about a quarter of eager's time and
# about half PyTorch eager's, while eager took about twice PyTorch's. Per call, eager spent about 8 µs on each
# primitive when the machine was quiet, the replay a few µs on each kernel, arithmetic included. The hand-written
# pairs were faster still: they do fewer operations, since a derivation by hand merges steps that autograd takes
# one by one. At bigger sizes the 282 calls stay 282 while their arithmetic grows, so the fixed cost weighs less and
# the engines draw closer (`python tools/bench_block.py --engines autograd compiled manual pytorch` times four
# sizes). The numbers below are your machine's, and a busy machine scatters them; the assertion holds only
# that the compiled step is faster than the eager one.

# %%
if HAVE_TORCH:
    import torch
    spec = importlib.util.spec_from_file_location("torch_block", LESSONS.parent / "tools" / "torch_block.py")
    torch_block = importlib.util.module_from_spec(spec)      # the repository's tools/torch_block.py, by path
    spec.loader.exec_module(torch_block)
    block_forward, rope_cos_sin = torch_block.block_forward, torch_block.rope_cos_sin
    torch.set_num_threads(1)


def engines(cfg: nn.BlockConfig, B: int, L: int) -> tuple[dict, int]:
    """{name: a function running one forward + backward}, and the compiled program's number of kernels."""
    gen = tb.Generator(0)
    blk = nn.TransformerBlock(cfg, generator=gen)
    x0, d0 = (tb.randn(B, L, cfg.d_model, generator=gen) for _ in range(2))     # (B, L, d_model)

    def fwd_bwd(x):
        blk(x).backward(d0)
    jitted = {"replayed, unfused": tb.jit(fwd_bwd, fuse=False), "compiled": tb.jit(fwd_bwd)}
    run = {"eager": fwd_bwd} | jitted
    runners = {name: (lambda f=f: (blk.zero_grad(), f(x0.detach().requires_grad_()))) for name, f in run.items()}
    arrays = {n: p.data for n, p in blk.named_parameters()}
    runners["manual"] = lambda: manual.block_backward(d0.data, manual.block_forward(x0.data, arrays, cfg)[1])
    if HAVE_TORCH:
        params = {n: torch.tensor(p.numpy(), requires_grad=True) for n, p in blk.named_parameters()}
        xt, dt = torch.tensor(x0.numpy()), torch.tensor(d0.numpy())
        cos, sin = rope_cos_sin(L, cfg.d_head, cfg.rope_theta, torch.float32)

        def pytorch():
            block_forward(xt.clone().requires_grad_(), params, cfg, cos, sin).backward(dt)
            for p in params.values():
                p.grad = None
        runners["PyTorch eager"] = pytorch
    for f in runners.values():                                # warm up; the compiled ones capture here
        for _ in range(3):
            f()
    return runners, len(jitted["compiled"].program.kernels)


def rounds(runners: dict, n: int = 15, calls: int = 3) -> dict[str, float]:
    """Median seconds per call of each runner over n rounds (`calls` calls each per round), the order rotating."""
    names, times = list(runners), {name: [] for name in runners}
    for r in range(n):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start = time.perf_counter()
            for _ in range(calls):
                runners[name]()
            times[name].append((time.perf_counter() - start) / calls)
    return {name: statistics.median(ts) for name, ts in times.items()}


runners, n_kernels = engines(CFG, B, L)
timed = rounds(runners)
base = timed.get("PyTorch eager")
print(f"tiny block, (B, L, d_model) = ({B}, {L}, {CFG.d_model}), forward + backward, float32, median of 15 rounds:")
for name, t in timed.items():
    print(f"  {name:18} {t * 1e3:7.3f} ms   {t / timed['eager']:5.2f} x eager" +
          (f"   {t / base:5.2f} x PyTorch" if base else ""))
print(f"eager {timed['eager'] / 282 * 1e6:.2f} us per primitive call; replayed unfused "
      f"{timed['replayed, unfused'] / 282 * 1e6:.2f} us per primitive; compiled "
      f"{timed['compiled'] / n_kernels * 1e6:.2f} us per kernel ({n_kernels} kernels)")
assert n_kernels == 206 and timed["compiled"] < timed["eager"]

# %% [markdown]
# ## 7. SiLU: from primitives to one loop, on a CPU and on a GPU
#
# SwiGLU's activation, $\mathrm{SiLU}(x) = x \cdot \sigma(x)$, forward and backward, on a (2048, 344) float32 array:
# 2,048 tokens of an FFN 344 wide, the size of the `small` preset's activations for a batch. Eagerly it is a list
# of primitives, each one numpy call that reads its inputs from memory and writes its result back. The sigmoid is
# computed from $e^{-|x|}$, so that no exponential ever overflows: a comparison $x \ge 0$ and two `where`s pick
# the signs.

# %%
def silu_step(x: tb.Tensor) -> tb.Tensor:
    """SiLU forward, and backward from a gradient of ones: the function this section compiles."""
    out = x * x.sigmoid()
    out.backward(tb.ones_like(out))
    return out


xs = [tb.randn(2048, 344, generator=tb.Generator(20 + i)) for i in range(3)]          # (2048, 344) float32
with count_flops() as silu_calls:
    silu_step(xs[0].detach().requires_grad_())
silu_ops = {phase: [op for (ph, _, _, op), n in silu_calls.calls.items() for _ in range(n) if ph == phase]
            for phase in ("forward", "backward")}
print(f"forward, {len(silu_ops['forward'])} primitives: {' '.join(silu_ops['forward'])}")
print(f"backward, {len(silu_ops['backward'])} primitives: {' '.join(silu_ops['backward'])}")
assert len(silu_ops["forward"]) == 8 and len(silu_ops["backward"]) == 15

# %% [markdown]
# Compiled, the 23 primitives become 9 kernels: the comparison (two `where`s read it), four forward results that
# backward reads again (so they must be written), and three generated kernels: `neg > where > exp` makes
# $e^{-|x|}$, and the backward is two groups of 8 and 6 primitives. The replay is eager's bit for bit.

# %%
silu = tb.jit(silu_step)
for xi in xs:
    silu(xi.detach().requires_grad_())
xe, xc = xs[1].detach().requires_grad_(), xs[1].detach().requires_grad_()
silu_same = np.array_equal(silu_step(xe).numpy(), silu(xc).numpy()) and np.array_equal(xe.grad.numpy(),
                                                                                         xc.grad.numpy())
print(silu.program)
print(f"replayed output and gradient equal eager's bit for bit: {silu_same}")
assert str(silu.program).startswith("program: 9 kernels for 23 primitives") and len(silu.program.plans) == 3
assert silu_same and [p.describe().split("   ")[0] for p in silu.program.plans][0] == "neg > where > exp"

# %% [markdown]
# The generated C of the kernel that holds the exp. One loop over the 704,512 elements; the mask from the
# comparison is read as an int, 0 or 1; each primitive is one line; `tb_expf` is the exp every kernel calls (its
# text is further down). The values `neg_0` and `where_1` live in registers: only `out` is written.

# %%
def function_of(source: str, name: str) -> str:
    """The text of the kernel `name` (its comment and its function) in a program's source."""
    start = source.index(f"/* {name}:")
    return source[start:source.index("\n}\n", start) + 2]


c_kernel = function_of(silu.program.source(), "k1")
print(c_kernel)
assert "float exp_2 = tb_expf(where_1);" in c_kernel and "for (long i0 = 0; i0 < 704512; i0++)" in c_kernel

# %% [markdown]
# Timed below, eager against the replay, the median of 5 rounds of one call each. Eagerly, each of the 23
# primitives reads its inputs from memory and writes its result back, a pass over 2.8 MB arrays each time; the
# replay's 9 kernels make far fewer passes. A generated loop gains only if it also runs as fast per element as
# numpy's functions do, and those run on vector instructions, several elements at a time: whether the loop does
# too is the C compiler's decision (a body it cannot vectorise runs one element at a time, and then fusion can lose
# to numpy). The numbers are printed, not asserted: they say where your machine and compiler stand. Section 6
# timed the whole block, where most of the replay's gain is Python's time saved.

# %%
silu_times = {"eager": [], "compiled": []}
for r in range(5):
    for name, f in (("eager", silu_step), ("compiled", silu))[::1 if r % 2 else -1]:
        xi = xs[0].detach().requires_grad_()
        start = time.perf_counter()
        f(xi)
        silu_times[name].append(time.perf_counter() - start)
silu_median = {name: statistics.median(ts) for name, ts in silu_times.items()}
print(f"SiLU forward + backward, (2048, 344) float32: eager {silu_median['eager'] * 1e3:.2f} ms, compiled "
      f"{silu_median['compiled'] * 1e3:.2f} ms ({silu_median['compiled'] / silu_median['eager']:.2f} x eager)")
assert all(len(ts) == 5 for ts in silu_times.values())

# %% [markdown]
# **The same body as a GPU kernel.** `program.source("cuda")` writes each kernel as CUDA C: a function that a GPU
# runs once per element, on as many threads as there are elements (in blocks of 256). There is no loop: each thread
# computes its element's number `i` from its block's number and its own, `blockIdx.x * blockDim.x + threadIdx.x`,
# returns if `i` is past the end, and turns `i` into the loop's indexes (here one index, `i0 = i`). Then come the
# same lines as the C loop's body, the same text, calling the same `tb_expf`: the CPU's tests of the C kernels
# check what a GPU runs. No GPU is needed to read it; with one, CuPy compiles and launches it (lesson 17).

# %%
cuda_kernel = function_of(silu.program.source("cuda"), "k1")
print(cuda_kernel)


def body(kernel: str) -> list[str]:
    """A kernel's per-element lines: those with a comment (an input, a primitive, the result)."""
    return [line.strip() for line in kernel.splitlines() if "//" in line]


print(f"body lines shared with the C kernel: {len(body(cuda_kernel))} of {len(body(c_kernel))}")
assert "blockIdx.x * blockDim.x + threadIdx.x" in cuda_kernel and body(cuda_kernel) == body(c_kernel)

# %% [markdown]
# **The exp every kernel calls.** numpy's exp and a GPU's differ in the last bit here and there, so a kernel that
# called each language's own would compute other numbers on a CPU than on a GPU, and other numbers than eager.
# The kernel language therefore brings its own exp and log (`kernels.MATH`): one text for C and CUDA C, made
# from + - * / alone, in double: $e^x = 2^k e^r$ with $k$ the nearest whole number to $x / \ln 2$, $|r| \le
# \ln 2 / 2$, and $e^r$ by Taylor's series. The engine's eager exp and log on the CPU (and on a GPU) call the
# same compiled functions, so eager and compiled agree bit for bit, and a float32 result, rounded once from a
# double that is far more precise, is the correctly rounded one. What it costs: it works in double, half as many
# numbers per vector instruction as float32, with more operations than a float32 exp needs; inside a fused kernel
# it saves whole passes over memory besides. Ours and numpy's are timed below on a lone array; the
# values are checked against numpy's float64 exp, to within one float32 ulp (the gap between two neighbouring
# float32 numbers).

# %%
exp_text = kernels.MATH[kernels.MATH.index("/* e^x"):kernels.MATH.index("\n}\n", kernels.MATH.index("/* e^x")) + 2]
print(exp_text)
values = np.array([-87.3, -10.0, -1.0, -1e-3, 0.0, 1e-3, 0.5, 1.0, 2.5, 10.0, 88.7], dtype=np.float32)
ours = tb.tensor(values).exp().numpy()                        # eager: the same function the kernels call
exact = np.exp(values.astype(np.float64))
ulps = np.abs(ours - exact) / np.spacing(np.abs(exact).astype(np.float32))
print(f"exp of {len(values)} float32 values: at most {ulps.max():.3f} float32 ulp from float64's; "
      f"{int((ours == exact.astype(np.float32)).sum())} of {len(values)} equal to it rounded")
lone = xs[0].data
with tb.no_grad():
    exp_ours = per_call(lambda: xs[0].exp(), calls=3, runs=5)
exp_numpy = per_call(lambda: np.exp(lone), calls=3, runs=5)
print(f"exp of a (2048, 344) float32 array: ours {exp_ours * 1e3:.2f} ms, numpy's {exp_numpy * 1e3:.2f} ms")
assert ours.dtype == np.float32 and (ulps <= 1.0).all()

# %% [markdown]
# ## 8. The guards: never a stale replay
#
# A replay repeats the captured primitives without running your Python. That is only right if your Python
# would have made the same calls again. `tb.jit` refuses, or captures again, wherever that might not hold,
# and each case below fires once:
#
# 1. **A value read inside.** `if out.sum().item() > 0:` lets a number decide which primitives run, and the
#    next call might take the other branch. Reading a value (`.item()`, `.numpy()`, `bool(t)`) while capturing
#    raises `tb.JitError`, naming the read. Read values outside the compiled function.
# 2. **A Python number that changes.** A number used in an op becomes a constant of the program. If it differs
#    between calls, the captures disagree, and after three that do, `JitError` names the op that read it. The fix
#    is to pass the number as a 0-d tensor argument (a tensor of shape `()`, one number: `tb.tensor(2.0)`):
#    then it is an input, read anew at every replay. Exercise 3 does this with a learning rate.
# 3. **A new shape.** The arguments' shapes, dtypes and devices are checked at every call; a new shape is
#    captured on its own (twice, as always), and the old shape keeps its program: coming back to it replays.
# 4. **Leftover gradients.** Eager `backward()` *adds* to a `.grad` that is already there. A replay writes
#    gradients; it does not add. So a call that finds last call's gradients still set is refused: zero them
#    before each call, or inside the function.
# 5. **A replaced parameter.** Each call compares a fingerprint of the modules the function uses (found in its
#    closure and globals): a parameter replaced, added or frozen means a new capture.

# %%
def branchy(x):
    out = block(x)
    return out * 2.0 if out.sum().item() > 0 else out


def say(number: int, err: Exception) -> None:
    """Print a JitError's message, wrapped."""
    print(textwrap.fill(str(err), 116, initial_indent=f"{number}. ", subsequent_indent="   "))


try:
    tb.jit(branchy)(x)
    value_read = None
except tb.JitError as err:
    value_read = err
say(1, value_read)

scale = 1.0


def scaled(x):
    return block(x) * scale                          # `scale`: a Python number, read as a constant


scaled_jit, number_changed = tb.jit(scaled), None
try:
    for value in (1.0, 2.0, 3.0):
        scale = value
        scaled_jit(x)
except tb.JitError as err:
    number_changed = err
say(2, number_changed)


def scaled_by(x, s):
    return block(x) * s                              # s: a 0-d tensor argument


scaled_by_jit, scales = tb.jit(scaled_by), (1.0, 2.0, 3.0, 0.5, -4.0)
fixed = [np.array_equal(scaled_by_jit(x, tb.tensor(s)).numpy(), (block(x) * s).numpy()) for s in scales]
print(f"   fixed: {len(scales)} scales as 0-d tensors: equal to eager {fixed}; captures {scaled_by_jit.captures}, "
      f"replays {scaled_by_jit.replays}")
assert "reads a tensor's values" in str(value_read) and "a constant read by mul" in str(number_changed)
assert "must reach the function as a tensor argument" in str(number_changed)
assert all(fixed) and (scaled_by_jit.captures, scaled_by_jit.replays) == (2, 3)

# %%
shapes = tb.jit(step)
seen = []
for shape in [(2, 16)] * 3 + [(1, 8)] * 3 + [(2, 16)]:
    block.zero_grad()
    shapes(tb.randn(*shape, CFG.d_model, generator=g).requires_grad_(), tb.randn(*shape, CFG.d_model, generator=g))
    seen.append((shape, shapes.captures, shapes.replays))
print("3. after each call, shape: captures/replays  " + "  ".join(f"{b_}x{l_}: {c}/{r}" for (b_, l_), c, r in seen))
leftover = None
try:
    shapes(x.detach().requires_grad_(), dout)                 # the last call's gradients are still there
except tb.JitError as err:
    leftover = err
say(4, leftover)
block.zero_grad()
kept = block.norm1.weight
block.norm1.weight = nn.Parameter(tb.full((CFG.d_model,), 2.0))
for _ in range(3):
    block.zero_grad()
    out = shapes(x.detach().requires_grad_(), dout)
replaced = (shapes.captures, shapes.replays)
with tb.no_grad():
    new_weight_equal = np.array_equal(out.numpy(), block(x).numpy())            # eager, with the new weight
    block.norm1.weight = kept
    old_weight_equal = np.array_equal(out.numpy(), block(x).numpy())
block.zero_grad()
print(f"5. norm1.weight replaced: after three more calls, captures {replaced[0]}, replays {replaced[1]}; the output "
      f"equals eager with the new weight: {new_weight_equal}")
assert [c for _, c, _ in seen] == [1, 2, 2, 3, 4, 4, 4] and [r for *_, r in seen] == [0, 0, 1, 1, 1, 2, 3]
assert "zero the gradients" in str(leftover) and replaced == (6, 4)
assert new_weight_equal and not old_weight_equal

# %% [markdown]
# ## Check yourself
#
# 1. Why does `tb.jit` capture two calls before it replays?
#
#    <details><summary>Answer</summary>
#
#    One call proves nothing about the next. Only if two calls in a row run the same primitives on the same shapes
#    and constants is the list trusted; from then on each call replays the list on the arrays, with no `Tensor`,
#    no graph and no Python of yours in between.
#
#    </details>
#
# 2. The tiny block's forward and backward make 282 primitive calls. Why does its compiled program hold only 206
#    kernels?
#
#    <details><summary>Answer</summary>
#
#    25 groups of elementwise primitives, 86 in all, each became one fused kernel, which folds 61 primitives away,
#    and 15 `expand`s were dropped because numpy broadcasts their small array on the fly.
#
#    </details>
#
# 3. When does an elementwise instruction join the kernel of the op that reads it?
#
#    <details><summary>Answer</summary>
#
#    When it has exactly one reader and that reader is in the kernel language too (with the further conditions of
#    section 4). A result that two ops read must be written to memory, where both can find it, so it ends its group.
#
#    </details>
#
# 4. A compiled function contains `if out.sum().item() > 0:`. What does `tb.jit` do, and why?
#
#    <details><summary>Answer</summary>
#
#    It raises `tb.JitError` naming the read. A value read while capturing may decide which primitives run, and a
#    replay, which runs none of your Python, would repeat the branch taken once even when the next call should take
#    the other.
#
#    </details>

# %% [markdown]
# ## Words from this lesson
#
# - **eager**: running each operation at once, as it is written, with its bookkeeping for autograd (§1)
# - **capture**: running a function eagerly while recording every primitive it calls, with the arrays each reads
#   and writes (§2)
# - **replay**: running a captured list of primitives again straight on the arrays, with no tensors and no graph
#   (§2)
# - **kernel language**: the small set of elementwise operations a fused kernel is written in, which the backend
#   turns into C or CUDA C (§4)
# - **generated kernel**: a fused kernel that the program writes as one loop of C and compiles (§4)
# - **compiled pane**: the explorer's third pane, which draws the compiled program's kernels beside the primitives
#   they run (§5)
# - **CUDA C**: the C dialect of NVIDIA's GPUs, in which a kernel is a function run once per element on its own
#   thread (§7)
# - **vector instruction**: a CPU instruction that works on several numbers at once (§7)
# - **guard**: a check with which `tb.jit` refuses, or captures again, wherever a replay might not do what your
#   Python would (§8)
# - **0-d tensor**: a tensor of shape `()`, one number, which a compiled function reads anew at every call (§8)

# %% [markdown]
# ## Exercises
#
# 1. `fused_groups`: the grouping rule of section 4, written by you. Given a program's instructions (each an op name,
#    what it reads, its shape and its module) and the instructions whose results are kept, return the groups that share
#    a generated kernel. A sum over its input's last axis alone reaches you as `row_sum`, and `in_rows` says whether a
#    result lies in rows. The checker takes the instructions from real compiled programs (small elementwise functions
#    and sums, RMSNorm, the tiny block's forward and backward) and compares with the kernels `tb.jit` made, naming the
#    part of the rule you missed: an instruction read by two ops, a kept result, another shape, another module, an op
#    outside the language, a row sum left out, a layout not in rows, a sum over other axes, a row sum inside a group, a
#    chain where a tree was meant.
# 2. `silu_in_one_kernel`: SiLU, $x \cdot \sigma(x) = x / (1 + e^{-x})$, written so that `tb.jit` compiles it
#    into a single generated kernel (the library's version takes 3, section 5). Checked against `Tensor.silu`,
#    with the compiled program printed when it has more than one kernel.
# 3. `make_sgd_step`: a compiled SGD step (plain gradient descent: each weight moves against its gradient,
#    scaled by the learning rate; no moments, unlike AdamW), `step(x, y, lr)`, whose learning rate changes at
#    every call and reaches it as a 0-d tensor. Checked against the same steps run eagerly (losses and weights
#    bit for bit) and for really replaying.
#
# `python -m tinygrad_block exercise 18` writes `exercise_18.py` with the functions to fill in;
# `python -m tinygrad_block check 18` checks them and says what is wrong.
