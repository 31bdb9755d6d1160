"""Lesson 18's exercises: the grouping rule written by hand, SiLU in one kernel, and a compiled SGD step whose
learning rate changes at every call. The oracles are the library's: the kernels `tb.jit` made of real programs
(small elementwise functions, RMSNorm, the tiny block's forward and backward), `Tensor.silu`, and SGD run
eagerly on a second copy of the model. Each check says what is wrong, with the numbers, naming the usual slip."""
from __future__ import annotations

from functools import cache

import numpy as np

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.compiled import Compiled
from tinygrad_block.fuse import kernel_instructions, layout
from tinygrad_block.kernels import op_name, sums_last_axis

from .common import CheckFailed, tensor_result

# the primitives the kernel language computes (tinygrad_block/kernels.py, EXPR), and a learner's broader guess
LANGUAGE = {"add", "sub", "mul", "div", "neg", "reciprocal", "sqrt", "maximum", "exp", "log", "where",
            "less", "less_equal", "equal", "not_equal", "greater", "greater_equal"}
ELEMENTWISE = LANGUAGE | {"sin", "cos", "pow", "erf", "cast"}


def in_rows(shape: tuple) -> bool:
    """Whether an instruction's (shape, layout) lies in rows, C order, as a new numpy array of that shape does (every
    program the check hands over is float64: 8 bytes a number)."""
    dims, layout = shape
    strides, stride = [], 8
    for n in reversed(dims):
        strides.insert(0, stride)
        stride *= n
    return tuple(st for n, st in zip(dims, strides) if n > 1) == tuple(layout)


# ---------------------------------------------------------------- 1. the grouping rule
def _one_chain(x, y):
    return ((x * y).exp() + 1.0).log().sqrt() - x          # mul > exp > add > log > sqrt > sub


def _read_twice(x, y):
    a = x.exp()
    return a * a + y                                        # a * a reads a twice: one reader


def _two_readers(x, y):
    b = x.exp() + 1.0
    return b.sqrt() * b                                     # b is read by sqrt and by mul


def _kept(x, y):
    a = (x * y).exp()
    return a + 1.0, a                                       # a is returned too


def _shape_change(x, y):
    z = y.exp()
    r = ((x * x).sum(axis=-1, keepdims=True) + 1.0).sqrt()  # (4, 1)
    return z * r                                            # (4, 8): reads r, but is wider


def _in_between(x, y):
    a = x.exp()
    t = y.reshape(8, 4)                                     # a reshape between exp and the mul that reads it
    return a * 2.0, t


def _two_branches(x, y):
    a, b = x.exp(), y.exp()
    return (a + b).sqrt()                                   # a tree: two exps meet in the add


def _outside(x, y):
    return (x.sin() * y).exp()                              # sin is not in the kernel language


def _sums(x, y):
    rows = ((x - y).exp() * y).sum(axis=-1)                 # a row sum: sub > exp > mul > row_sum
    return rows, (x * y).sum(axis=0)                        # a sum over the first axis: the mul stays alone


def _not_in_rows(x, y):
    t = x.permute(1, 0).exp() * 2.0                         # (8, 4), laid out as x is: not in rows
    return t.sum(axis=-1), (y * y).sum(axis=-1)             # only y * y joins its row sum


_NORM = nn.RMSNorm(8, dtype=tb.float64)


def _two_modules(x, y):
    return (_NORM(x) + y).exp()                             # RMSNorm's last mul, read by an add outside it


def _program(fn, args: tuple, reset=lambda: None):
    """The verified program tb.jit makes of fn(*args): two captures (reset() before each), no replay."""
    compiled = tb.jit(fn)
    for _ in range(2):
        reset()
        compiled(*args)
    reset()
    return compiled.program


@cache
def _cases() -> list:
    """(name, program) of each program the check hands to fused_groups."""
    r = np.random.default_rng(0)
    x, y = (tb.tensor(r.standard_normal((4, 8))) for _ in range(2))                     # float64
    small = (_one_chain, _two_branches, _in_between, _read_twice, _two_readers, _kept, _shape_change, _outside,
             _two_modules, _sums, _not_in_rows)
    cases = [(fn.__name__.strip("_").replace("_", " "), _program(fn, (x, y))) for fn in small]
    norm = nn.RMSNorm(8, dtype=tb.float64)
    xg, dout = x.detach().requires_grad_(), tb.tensor(r.standard_normal((4, 8)))

    def norm_step(x):
        norm(x).backward(dout)

    def forget():
        xg.grad = norm.weight.grad = None
    cases.append(("RMSNorm forward", _program(norm, (x,))))
    cases.append(("RMSNorm forward and backward", _program(norm_step, (xg,), forget)))
    cfg = nn.preset("tiny")
    block = nn.TransformerBlock(cfg, generator=tb.Generator(0), dtype=tb.float64)
    xb = tb.randn(2, 8, cfg.d_model, generator=tb.Generator(1), dtype=tb.float64, requires_grad=True)
    db = tb.randn(2, 8, cfg.d_model, generator=tb.Generator(2), dtype=tb.float64)

    def block_step(x):
        block(x).backward(db)

    def forget_block():
        block.zero_grad()
        xb.grad = None
    cases.append(("the tiny block, forward and backward", _program(block_step, (xb,), forget_block)))
    return cases


def _instructions(program) -> tuple[list, set, list]:
    """(instructions, kept, groups) as the exercise sees a program: elided expands left out (their readers read the
    expand's input), instructions renumbered, each (op, ins, (shape, layout), module); the groups are the
    library's kernels of more than one instruction, each sorted, in sorted order. A sum over its input's last axis
    alone is named 'row_sum'."""
    instructions, n = program.instructions, len(program.instructions)
    escapes = program.escaping()
    in_kernels = {s.out for k in program.kernels for s in kernel_instructions(k)}
    alias = {i: s.ins[0] for i, s in enumerate(instructions) if i not in in_kernels}       # the dropped expands
    assert all(instructions[i].op.name == "expand" for i in alias)
    index = {old: new for new, old in enumerate(i for i in range(n) if i not in alias)}

    def ref(k):
        while k in alias:
            k = alias[k]
        return index[k] if k < n else f"in{k - n}"
    seen = [("row_sum" if sums_last_axis(s) else op_name(s) or s.op.name,
             tuple(ref(k) for k in s.ins + tuple(k for _, k in s.array_params)),
             (tuple(s.shape), layout(s.shape, s.strides)), ".".join(s.scope))
            for i, s in enumerate(instructions) if i not in alias]
    groups = sorted(sorted(index[s.out] for s in kernel_instructions(k)) for k in program.kernels
                    if len(kernel_instructions(k)) > 1)
    return seen, {index[k] for k in escapes if k in index}, groups


def _chains(instructions: list, kept: set, readers: dict) -> list:
    """The in-place chains rule (the fallback without a C compiler): in program order, an instruction joins the chain
    just before it if it reads the chain's last result once, is its only reader, and that result is not kept."""
    chains, chain = [], None
    for i, (op, ins, shape, _) in enumerate(instructions):
        if op not in LANGUAGE:
            chain = None
            continue
        if chain is not None and ins.count(chain[-1]) == 1 and readers.get(chain[-1]) == [i] \
                and chain[-1] not in kept and shape == instructions[chain[0]][2]:
            chain.append(i)
            continue
        chain = [i]
        chains.append(chain)
    return sorted(c for c in chains if len(c) > 1)


def rule(instructions: list, kept: set, *, one_reader: bool = True, reads_are_readers: bool = False,
         not_kept: bool = True, same_shape: bool = True, same_module: bool = True, language: bool = True,
         chains: bool = False, lone: bool = False, row_sums: bool = True, rows: bool = True, any_sum: bool = False,
         sum_joins: bool = False) -> list:
    """The grouping rule, with one part changed for each usual slip (the defaults: fuse.py's rule)."""
    readers = {}
    for i, (_, ins, _, _) in enumerate(instructions):
        for k in (ins if reads_are_readers else dict.fromkeys(ins)):
            readers.setdefault(k, []).append(i)
    if chains:
        return _chains(instructions, kept, readers)
    ops, into = (LANGUAGE if language else ELEMENTWISE) | ({"row_sum"} if sum_joins else set()), {}
    ends = {"row_sum", "sum"} if any_sum else {"row_sum"}
    for i, (op, _, shape, module) in enumerate(instructions):
        found = readers.get(i, [])
        if op not in ops or not found or (one_reader and len(found) > 1) or (not_kept and i in kept):
            continue
        r_op, _, r_shape, r_module = instructions[found[0]]
        if r_module != module and same_module:
            continue
        if r_op in ops and (r_shape == shape or not same_shape):
            into[i] = found[0]
        elif row_sums and r_op in ends and (in_rows(shape) or not rows):
            into[i] = found[0]                              # a row sum ends the group
    groups = {}
    for i in sorted(into):
        root = i
        while root in into:
            root = into[root]
        groups.setdefault(root, [root]).append(i)
    alone = [[i] for i in range(len(instructions)) if i not in into and i not in groups] if lone else []
    return sorted([sorted(g) for g in groups.values()] + alone)


SLIPS = [(dict(one_reader=False), "an instruction joins its reader's kernel only if it has exactly one reader: a "
          "result that two ops read must be written to memory, where both can find it"),
         (dict(reads_are_readers=True), "count readers, not reads: an instruction read twice by one op (a * a) has "
          "one reader, and joins it"),
         (dict(not_kept=False), "a result that is kept (returned, or written back as a gradient) must reach "
          "memory: the instruction does not join its reader"),
         (dict(same_shape=False), "an instruction joins only a reader of its own shape and layout: a kernel is one "
          "loop over its output's elements (a wider op reading a (4, 1) result broadcasts it, so that result is made "
          "first)"),
         (dict(same_module=False), "an instruction joins only a reader in its own module: a kernel is one module's, "
          "as the explorer draws it"),
         (dict(language=False), "only the ops the kernel language computes join (add sub mul div neg reciprocal sqrt "
          "maximum exp log where and the comparisons): sin, cos, pow, erf and cast stay the array library's calls"),
         (dict(lone=True), "return only groups of two or more instructions: a lone op is the array library's call, "
          "not a generated kernel"),
         (dict(row_sums=False), "an instruction whose one reader is a row sum ('row_sum': a sum over its input's last "
          "axis alone) joins it, in the same module, when the instruction's result lies in rows (in_rows): the kernel "
          "adds each row up as it computes it"),
         (dict(rows=False), "a row sum takes in an instruction only if the instruction's result lies in rows (in_rows, "
          "C order): numpy sums numbers that lie side by side pairwise, the kernel adds in that order, and over "
          "another layout numpy adds in another"),
         (dict(any_sum=True), "only a row sum ends a group: numpy adds a sum over other axes ('sum') in another "
          "order (whole rows one after another), so it stays numpy's call and its input is written"),
         (dict(sum_joins=True), "a row sum ends its group: it is not in the kernel language, so it joins no reader "
          "(its result, one number a row, is written)"),
         (dict(chains=True), "a group is a tree, not a chain: an instruction joins its one reader's kernel wherever "
          "that reader comes in the program (past a reshape or a matmul) and whatever else it reads (two branches may "
          "meet in an add)")]


def check_fused_groups(solution) -> None:
    """Each program's instructions, handed over as the starter describes; the groups against the kernels tb.jit made."""
    cases = _cases()
    if not cases[0][1].backend.generates():
        raise CheckFailed("fused_groups: this machine has no C compiler, so tb.jit runs the in-place chains of "
                          "docs/compiled.md instead of generated kernels, and there are no groups to check against: "
                          "install one (gcc: README's setup) and check again")
    for name, program in cases:
        instructions, kept, want = _instructions(program)
        got = solution.fused_groups([tuple(s) for s in instructions], set(kept))
        call = f"fused_groups({name}: {len(instructions)} instructions)"
        if not isinstance(got, (list, tuple)) or not all(isinstance(g, (list, tuple)) for g in got):
            raise CheckFailed(f"{call} returned {type(got).__name__}; return a list of groups, each a list of "
                              "instruction numbers")
        got = sorted(sorted(int(i) for i in g) for g in got)
        if got == want:
            continue
        hint = next((": " + why for switches, why in SLIPS
                     if (slip := rule(instructions, kept, **switches)) != want and slip == got), "")
        shown = "" if len(instructions) > 16 else "; instructions " + ", ".join(
            f"{i} {op}{list(ins)}{list(shape[0])}" for i, (op, ins, shape, _) in enumerate(instructions))
        missing = [g for g in want if g not in got][:3]
        extra = [g for g in got if g not in want][:3]
        raise CheckFailed(f"{call}: got {len(got)} group{'s' * (len(got) != 1)}, tb.jit made {len(want)}; missing "
                          f"{missing}, not kernels {extra}{hint}{shown} (kept: {sorted(kept)})")


# ---------------------------------------------------------------- 2. SiLU in one kernel
def check_silu_in_one_kernel(solution) -> None:
    """float64 and float32 inputs: the replayed result against Tensor.silu, and a program of one fused kernel."""
    r = np.random.default_rng(1)
    for dtype, tol in ((tb.float64, 1e-12), (tb.float32, 1e-6)):
        xs = [tb.tensor(r.uniform(-8, 8, (4, 16)), dtype=dtype) for _ in range(3)]
        compiled = tb.jit(solution.silu_in_one_kernel)
        call = f"silu_in_one_kernel({dtype} (4, 16))"
        try:
            for x in xs:
                out = compiled(x)
        except tb.JitError as e:
            raise CheckFailed(f"{call} could not be compiled: {e}") from None
        got = tensor_result(out, call, (4, 16))
        x = xs[-1].numpy().astype(np.float64)
        want = xs[-1].silu().numpy()
        if got.dtype != want.dtype:
            raise CheckFailed(f"{call} returned {got.dtype}; keep the input's dtype, {want.dtype}")
        if not np.allclose(got, want, rtol=tol, atol=tol):
            slips = [(x / (1 + np.exp(x)), "SiLU is x / (1 + e^(-x)): the exponent is -x"),
                     (1 / (1 + np.exp(-x)), "that is the sigmoid alone; SiLU multiplies it by x"),
                     (x * (1 + np.exp(-x)), "x times the sigmoid: divide by 1 + e^(-x), or multiply by its "
                                            "reciprocal")]
            hint = next((": " + why for value, why in slips if np.allclose(got, value, rtol=1e-5, atol=1e-5)), "")
            i = np.unravel_index(np.abs(got - want).argmax(), got.shape)
            raise CheckFailed(f"{call}: at x = {x[i]:.4g} it gives {got[i]:.6g}, SiLU is {want[i]:.6g}{hint}")
        kernels = compiled.program.kernels
        if len(kernels) != 1 or len(kernel_instructions(kernels[0])) < 2:
            ops = {op_name(s) or s.op.name for s in compiled.program.instructions}
            hint = next((why for key, why in SILU_HINTS if key in ops), ONE_READER)
            raise CheckFailed(f"{call} compiles to {len(kernels)} kernels, not one: {hint}\n{compiled.program}")


SILU_HINTS = [("greater_equal", "x.sigmoid() (and x.silu()) picks its formula by the sign of x, so that e^x never "
               "overflows: the comparison is read by two wheres, and a result two ops read is written to memory. "
               "Build SiLU from neg, exp, add and div (or reciprocal and mul)"),
              ("pow", "v ** -1 is a pow with an exponent, outside the kernel language: write 1 / v or v.reciprocal()")]
ONE_READER = ("a result that two ops read (e = x.exp(); x * e / (1 + e)) is written to memory, and the kernel "
               "ends there: give each intermediate one reader, computing e^(-x) once and using it once")


# ---------------------------------------------------------------- 3. a compiled SGD step
def _loss(pred: tb.Tensor, y: tb.Tensor) -> tb.Tensor:
    """The loss the check trains with: the sum of squared errors."""
    return ((pred - y) ** 2).sum()


SGD_CASES = [("nn.Linear(8, 4)", lambda: nn.Linear(8, 4, generator=tb.Generator(0), dtype=tb.float64),
              (16, 8), (16, 4), 0.02),
             ("the tiny block", lambda: nn.TransformerBlock(nn.preset("tiny"), generator=tb.Generator(0),
                                                            dtype=tb.float64), (1, 8, 64), (1, 8, 64), 1e-3)]
SGD_CALLS = 6


def _eager_sgd(model, data, lrs) -> tuple[list, list]:
    """The oracle: the same steps run eagerly. (losses, the parameters' arrays after the last step)."""
    losses = []
    for (x, y), lr in zip(data, lrs):
        loss = _loss(model(x), y)
        loss.backward()
        losses.append(loss.item())
        with tb.no_grad():
            for p in model.parameters():
                p.data = (p - tb.tensor(lr, dtype=tb.float64) * p.grad).data
                p.grad = None
    return losses, [p.numpy().copy() for p in model.parameters()]


JIT_HINTS = [("reads a tensor's values", "do not read a value inside the step (lr.item(), float(lr), .numpy()): "
              "multiply by the 0-d tensor lr itself"),
             ("adds to a gradient", "leave no gradient behind: set p.grad = None for every parameter after its "
              "update (or before the forward), so that the next call starts clean"),
             ("made outside the recorded ops", "compute the new weights with tensor ops, p - lr * p.grad, and "
              "rebind p.data = new.data; numpy arithmetic on p.data is not recorded"),
             ("does not repeat itself", "a Python number changes between calls: the learning rate must enter the "
              "step as the tensor it is given")]


def check_make_sgd_step(solution) -> None:
    """Six calls with a new learning rate each, against eager SGD: the losses, the weights, and the replays."""
    r = np.random.default_rng(2)
    for name, make, x_shape, y_shape, lr0 in SGD_CASES:
        data = [(tb.tensor(r.standard_normal(x_shape)), tb.tensor(r.standard_normal(y_shape)))
                for _ in range(SGD_CALLS)]
        lrs = [lr0 / (1 + i) for i in range(SGD_CALLS)]
        want_losses, want_weights = _eager_sgd(make(), data, lrs)
        model = make()
        step = solution.make_sgd_step(model, _loss)
        call = f"make_sgd_step({name})"
        if not isinstance(step, Compiled):
            raise CheckFailed(f"{call} returned {type(step).__name__}; return the step compiled: tb.jit(step)")
        for i, ((x, y), lr) in enumerate(zip(data, lrs)):
            try:
                loss = step(x, y, tb.tensor(lr, dtype=tb.float64))
            except tb.JitError as e:
                hint = next((why for key, why in JIT_HINTS if key in str(e)), "see the message")
                raise CheckFailed(f"{call}: call {i + 1} raised JitError: {hint} ({e})") from None
            got = float(tensor_result(loss, f"{call}'s step", ()))
            if not np.isclose(got, want_losses[i], rtol=1e-12, atol=0):
                raise CheckFailed(f"{call}: call {i + 1} (lr = {lr:.4g}) returned the loss {got:.10g}; SGD run "
                                  f"eagerly gives {want_losses[i]:.10g}: return loss_fn(model(x), y), computed "
                                  "before the update, with the weights the previous calls left")
        got_weights = [p.numpy() for p in model.parameters()]
        if not all(np.allclose(g, w, rtol=1e-12, atol=1e-15) for g, w in zip(got_weights, want_weights)):
            first = next(i for i, (g, w) in enumerate(zip(got_weights, want_weights)) if not np.allclose(g, w))
            rise = _eager_sgd(make(), data, [-lr for lr in lrs])[1]
            hint = ("descend: p - lr * p.grad" if all(np.allclose(g, w) for g, w in zip(got_weights, rise))
                    else "each call must update with its own lr: p - lr * p.grad, with the 0-d tensor passed in")
            raise CheckFailed(f"{call}: after {SGD_CALLS} calls, parameter {first} differs from eager SGD by up to "
                              f"{np.abs(got_weights[first] - want_weights[first]).max():.3g}: {hint}")
        if step.replays < SGD_CALLS - 3:
            raise CheckFailed(f"{call}: in {SGD_CALLS} calls it captured {step.captures} times and replayed "
                              f"{step.replays} times; a compiled step captures twice (three times if it clears the "
                              "gradients itself) and then replays: something in it changes from call to call")


CHECKS = [("fused_groups", check_fused_groups), ("silu_in_one_kernel", check_silu_in_one_kernel),
          ("make_sgd_step", check_make_sgd_step)]
