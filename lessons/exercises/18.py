"""Lesson 18's exercises: the fusion rule written by hand, SiLU in one fused kernel, and a compiled SGD step whose
learning rate changes at every call. The oracles are the library's: the chains `tb.jit` made of real programs
(small elementwise functions, RMSNorm, the tiny block's forward and backward), `Tensor.silu`, and SGD run
eagerly on a second copy of the model. Each check says what is wrong, with the numbers, naming the usual slip."""
from __future__ import annotations

from functools import cache

import numpy as np

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.compiled import Compiled
from tinygrad_block.fuse import kernel_steps, layout

from .common import CheckFailed, tensor_result

ELEMENTWISE = {"add", "sub", "mul", "div", "maximum", "neg", "exp", "log", "sqrt", "reciprocal", "sin", "cos"}


# ---------------------------------------------------------------- 1. the fusion rule
def _one_chain(x, y):
    return ((x * y).exp() + 1.0).log().sqrt() - x          # mul > exp > add > log > sqrt > sub


def _read_twice(x, y):
    a = x.exp()
    return a * a + y                                        # a * a reads a twice


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


def _two_starts(x, y):
    a, b = x.exp(), y.exp()
    return (a + b).sqrt()


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
    """(name, program) of each program the check hands to fused_chains."""
    r = np.random.default_rng(0)
    x, y = (tb.tensor(r.standard_normal((4, 8))) for _ in range(2))                     # float64
    cases = [(fn.__name__.strip("_").replace("_", " "), _program(fn, (x, y)))
             for fn in (_one_chain, _read_twice, _two_readers, _kept, _shape_change, _in_between, _two_starts)]
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


def _steps(program) -> tuple[list, set, list]:
    """(steps, kept, chains) as the exercise sees a program: elided expands left out (their readers read the
    expand's input), steps renumbered; the chains are the library's fused kernels."""
    steps, n = program.steps, len(program.steps)
    escapes = program.escaping()
    in_kernels = {s.out for k in program.kernels for s in kernel_steps(k)}
    alias = {i: s.ins[0] for i, s in enumerate(steps) if i not in in_kernels}       # the dropped expands
    assert all(steps[i].op.name == "expand" for i in alias)
    index = {old: new for new, old in enumerate(i for i in range(n) if i not in alias)}

    def ref(k):
        while k in alias:
            k = alias[k]
        return index[k] if k < n else f"in{k - n}"
    seen = [(s.op.name, tuple(ref(k) for k in s.ins + tuple(k for _, k in s.array_params)),
             (tuple(s.shape), layout(s.shape, s.strides))) for i, s in enumerate(steps) if i not in alias]
    chains = [[index[s.out] for s in kernel_steps(k)] for k in program.kernels if len(kernel_steps(k)) > 1]
    return seen, {index[k] for k in escapes if k in index}, chains


def rule(steps: list, kept: set, *, in_order: bool = True, single_reader: bool = True, read_once: bool = True,
         not_kept: bool = True, same_shape: bool = True, lone: bool = False) -> list:
    """The fusion rule, with one part switched off for each usual slip (all on: fuse.py's rule)."""
    readers = {}
    for i, (_, ins, _) in enumerate(steps):
        for k in set(ins):
            readers.setdefault(k, []).append(i)
    chains, open_chains = [], []                           # in order: at most one open chain, the last one
    for i, (op, ins, shape) in enumerate(steps):
        if op not in ELEMENTWISE:
            if in_order:
                open_chains = []
            continue
        joined = None
        for chain in reversed(open_chains):
            last = chain[-1]
            if ((ins.count(last) == 1 if read_once else last in ins)
                    and (readers.get(last) == [i] if single_reader else True)
                    and (last not in kept or not not_kept)
                    and (shape == steps[chain[0]][2] or not same_shape)):
                joined = chain
                break
        if joined is not None:
            joined.append(i)
            if in_order:
                open_chains = [joined]
        else:
            chain = [i]
            chains.append(chain)
            open_chains = [chain] if in_order else open_chains + [chain]
    return [c for c in chains if lone or len(c) > 1]


SLIPS = [(dict(single_reader=False), "a step joins a chain only if it is the only reader of the chain's last "
          "result: the chain overwrites that result in place, and any other reader would then see the wrong numbers"),
         (dict(read_once=False), "a step that reads the chain's result twice (like a * a) does not join it: the "
          "rule asks for exactly one read"),
         (dict(not_kept=False), "a result that is kept (returned, or written back as a gradient) must survive the "
          "call, so nothing may overwrite it: the chain ends there"),
         (dict(same_shape=False), "a step joins only if it has the chain's shape: the chain's buffer holds exactly "
          "that many numbers (a wider op reading a (4, 1) chain broadcasts it, and cannot run in place)"),
         (dict(in_order=False), "chains follow the program's order: any other step in between (a reshape, a sum, a "
          "matmul) ends the chain, even when a later step reads its result; and an elementwise step that does "
          "not join starts a new chain, closing the one before"),
         (dict(lone=True), "return only chains of two or more steps: a lone op is a kernel, not a fused chain")]


def check_fused_chains(solution) -> None:
    """Each program's steps, handed over as the starter describes; the chains against tb.jit's."""
    for name, program in _cases():
        steps, kept, want = _steps(program)
        got = solution.fused_chains([tuple(s) for s in steps], set(kept))
        call = f"fused_chains({name}: {len(steps)} steps)"
        if not isinstance(got, (list, tuple)) or not all(isinstance(c, (list, tuple)) for c in got):
            raise CheckFailed(f"{call} returned {type(got).__name__}; return a list of chains, each a list of step "
                              "numbers")
        got = [[int(i) for i in c] for c in got]
        if got == want:
            continue
        hint = next((": " + why for switches, why in SLIPS
                     if (slip := rule(steps, kept, **switches)) != want and slip == got), "")
        shown = "" if len(steps) > 16 else "; steps " + ", ".join(f"{i} {op}{list(ins)}{list(shape)}"
                                                                   for i, (op, ins, shape) in enumerate(steps))
        missing = [c for c in want if c not in got][:3]
        extra = [c for c in got if c not in want][:3]
        raise CheckFailed(f"{call}: got {len(got)} chain{'s' * (len(got) != 1)}, tb.jit made {len(want)}; missing "
                          f"{missing}, not chains {extra}{hint}{shown} (kept: {sorted(kept)})")


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
        if len(kernels) != 1 or len(kernel_steps(kernels[0])) < 2:
            ops = {s.op.name for s in compiled.program.steps}
            hint = ("where and compare (x.sigmoid(), x.silu(), x.relu()) are not elementwise ops a chain takes "
                    "in: build it from neg, exp, add and div (or reciprocal and mul)" if ops & {"where", "compare"}
                    else "each op must read the result of the op just before it, once, and nothing else may read "
                    "that result: compute each intermediate once and use it once")
            raise CheckFailed(f"{call} compiles to {len(kernels)} kernels, not one fused chain: {hint}\n"
                              f"{compiled.program}")


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


CHECKS = [("fused_chains", check_fused_chains), ("silu_in_one_kernel", check_silu_in_one_kernel),
          ("make_sgd_step", check_make_sgd_step)]
