"""Generated kernels (kernels.py, the language; cpu_kernels.py, C on the CPU): a compiled program's fused chains run
as C functions, and each computes what numpy's functions compute, bit for bit (the ops generated are those IEEE
754 rounds exactly). Oracles: the same function run eagerly (numpy's functions, op by op), compared bit for bit,
NaN, infinities and signed zeros included; the generated source itself, read as text."""
import json
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tinygrad_block as tb
from tinygrad_block import cpu_kernels, nn
from tinygrad_block.kernels import literal, short


def bits(a: np.ndarray) -> np.ndarray:
    """The bytes of each element (so NaN == NaN and -0.0 != 0.0): bit-for-bit equality."""
    return np.ascontiguousarray(a).view(np.uint8)


def generated(program) -> list:
    return [k for k in program.kernels if isinstance(k, cpu_kernels.Generated)]


def replay(fn, *args, calls: int = 3):
    """fn compiled, called `calls` times (two captures, then replays); the last result and the compiled function."""
    compiled = tb.jit(fn)
    with tb.no_grad():
        for _ in range(calls):
            out = compiled(*args)
    return out, compiled


TINY = {tb.float16: 1e-6, tb.float32: 1e-40, tb.float64: 1e-310}           # a subnormal number of each dtype


@pytest.mark.parametrize("dtype", [tb.float16, tb.float32, tb.float64])
@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")   # on purpose: col holds a zero
def test_a_chain_over_broadcast_transposed_and_constant_operands_equals_numpy_bit_for_bit(dtype):
    """Operands read through strides: a transposed view, a row and a column broadcast, Python numbers written into
    the source; values that test the rules: NaN (maximum lets it win, as numpy's does), infinities, -0.0,
    subnormals, division by zero; float16 computed in float and rounded after each op, as numpy computes it."""
    r = np.random.default_rng(0)
    a = r.standard_normal((7, 33)).astype(dtype)
    a.flat[:8] = [np.nan, np.inf, -np.inf, -0.0, 0.0, TINY[dtype], 3.0, -2.0]
    row, col, w = r.standard_normal(7).astype(dtype), r.standard_normal((33, 1)).astype(dtype), np.zeros(7, dtype)
    col[0, 0], w[2] = 0.0, np.nan                                      # w: NaN on one side of a maximum only

    def f(a, row, col, w):
        t = a.T                                                        # (33, 7): a transposed view
        return ((t * row + 0.1) / col).maximum(t).maximum(w).sqrt() - 2.5 * row   # (33, 7)
    args = [tb.tensor(v, dtype=dtype) for v in (a, row, col, w)]
    out, compiled = replay(f, *args)
    with tb.no_grad():
        eager = f(*args).numpy()
    assert len(generated(compiled.program)) == 1 and compiled.program.checked
    np.testing.assert_array_equal(bits(out.numpy()), bits(eager))
    assert np.isnan(eager).any() and np.isinf(eager).any()             # the rules were exercised


@pytest.mark.parametrize("dtype", [tb.float16, tb.float32, tb.float64])
def test_a_maximum_of_zeros_of_both_signs_keeps_the_zero_numpys_keeps(dtype):
    """maximum(+0, -0) and maximum(-0, +0): numpy keeps one of two equal values by its position (on x86 the second
    for float32 and float64, as the CPU's max instruction does, the first for float16), so the sign of the zero
    comes out as numpy's; the same with a NaN on either side, and against a constant 0 (a ReLU of -0)."""
    zeros = np.array([0.0, -0.0, 0.0, -0.0, np.nan, 1.0, -1.0, 2.0])
    a = np.tile(zeros, 5)
    b = np.tile(np.array([-0.0, 0.0, 0.0, -0.0, 1.0, np.nan, -1.0, -3.0]), 5)
    args = [tb.tensor(v, dtype=dtype) for v in (a, b)]

    def f(a, b):
        return (a * 1.0).maximum(b * 1.0), (a * 1.0).maximum(0.0)
    (out, relu), compiled = replay(f, *args)
    with tb.no_grad():
        want, want_relu = f(*args)
    assert len(generated(compiled.program)) == 2
    np.testing.assert_array_equal(bits(out.numpy()), bits(want.numpy()))
    np.testing.assert_array_equal(bits(relu.numpy()), bits(want_relu.numpy()))
    assert np.signbit(want.numpy()[:2]).tolist() in ([False, True], [True, False])     # a tie of zeros was met


def test_a_maximum_whose_ties_numpy_keeps_by_no_position_stays_numpys(monkeypatch):
    """Where numpy keeps neither the first nor the second of two equal values (a max preferring +0 to -0, whichever
    comes first), a chain with a maximum runs numpy's functions, still eager's."""
    monkeypatch.setattr(cpu_kernels, "maximum_ties", lambda dtype: None)
    x = tb.tensor(np.tile([0.0, -0.0, 1.0, -2.0], 10), dtype=tb.float32)
    out, compiled = replay(lambda x: (x * 2.0).maximum(0.0) + 1.0, x)
    assert len(compiled.program.plans) == 1 and generated(compiled.program) == []
    with tb.no_grad():
        np.testing.assert_array_equal(bits(out.numpy()), bits(((x * 2.0).maximum(0.0) + 1.0).numpy()))

def test_the_blocks_fused_chains_run_as_generated_c_and_equal_eager_forward_and_backward():
    blk = nn.TransformerBlock(nn.preset("tiny"), generator=tb.Generator(0))
    x, dout = (tb.randn(2, 8, 64, generator=tb.Generator(i)) for i in (1, 2))

    def step(x):
        out = blk(x)
        out.backward(dout)
        return out
    compiled = tb.jit(step)
    for _ in range(4):
        blk.zero_grad()
        xc = x.detach().requires_grad_()
        out = compiled(xc)
    got = [out.numpy(), xc.grad.numpy()] + [p.grad.numpy() for p in blk.parameters()]
    blk.zero_grad()
    xe = x.detach().requires_grad_()
    want = [step(xe).numpy(), xe.grad.numpy()] + [p.grad.numpy() for p in blk.parameters()]
    program = compiled.program
    chains = [k for k in program.kernels if len(getattr(k, "instructions", ())) > 1]
    assert len(generated(program)) == len(program.plans) >= 20
    assert all(isinstance(k, cpu_kernels.Generated) or {"exp", "log"} & {s.op.name for s in k.instructions}
               for k in chains)                                           # the rest hold a transcendental op
    for g, w in zip(got, want):
        np.testing.assert_array_equal(bits(g), bits(w))


def test_an_input_laid_out_otherwise_at_a_later_call_runs_numpys_functions_instead():
    """The kernel was written for its inputs' strides at the capture; a later call may pass the same shape laid
    out otherwise (a transposed copy): then the chain's numpy functions run, and the answer is still eager's."""
    def f(a, b):
        return (a * b + 1.0) * a
    r = np.random.default_rng(1)
    a, b = tb.tensor(r.standard_normal((16, 16))), tb.tensor(r.standard_normal((16, 16)))
    _, compiled = replay(f, a, b)
    [kernel] = generated(compiled.program)
    transposed = tb.tensor(np.asfortranarray(r.standard_normal((16, 16))))       # same shape, other strides
    with tb.no_grad():
        got, want = compiled(transposed, b).numpy(), f(transposed, b).numpy()
    assert transposed.data.strides != a.data.strides and compiled.replays == 2
    np.testing.assert_array_equal(bits(got), bits(want))


def test_the_source_is_one_function_per_kernel_named_as_the_program_lists_it():
    blk = nn.TransformerBlock(nn.preset("tiny"), generator=tb.Generator(0))
    _, compiled = replay(lambda x: blk(x), tb.randn(2, 8, 64, generator=tb.Generator(1)))
    program, text = compiled.program, compiled.program.source()
    listed = {int(line.split()[0]) for line in str(program).splitlines()[2:] if " fused " in line}
    named = {int(n) for n in re.findall(r"^void k(\d+)\(", text, re.M)}
    assert named == {program.kernels.index(k) for k in generated(program)} <= listed
    start = text.index("void ", text.index(": div > add > sqrt"))                  # RMSNorm's statistics
    first = text[start:text.index("}\n", start)]
    assert "x0 / c0" in first and "sqrtf(" in first and "// div (2, 8, 1)   block.norm1" in first
    assert "float c1 = 9.999999747378752e-06;   // the constant 1e-05" in first      # RMSNorm's eps, exactly
    assert all(len(line) <= 160 for line in text.splitlines())


def code_of(k) -> list[str]:
    """A kernel's C function as lines of code: its comment line, its comments and its name left out."""
    return [re.sub(r"\s*//.*", "", line).replace(k.name, "K") for line in cpu_kernels.function(k).splitlines()[1:]]


def test_a_kernel_whose_code_is_an_earlier_ones_calls_it_so_each_is_compiled_once_whatever_the_depth():
    """Each block makes the same kernels as the one before it: the C holds each kernel's code once, and every
    other kernel calls the first with that code (the code alike but for its comments and its name) on its own
    arrays. So the bodies compiled are as many for 8 blocks as for 2, and the replay of a tiny LM's forward and
    backward, run through the calls, equals eager bit for bit."""
    bodies = {}
    for n in (2, 8):
        cfg = nn.preset("tiny").with_(n_layers=n)
        model = nn.LM(cfg, generator=tb.Generator(0))
        ids = tb.tensor(np.random.default_rng(0).integers(0, cfg.vocab_size, (2, 8)), dtype=tb.int64)

        def step(ids, model=model):
            loss = model(ids).sum()
            loss.backward()
            return loss
        compiled = tb.jit(step, modules=[model])
        for _ in range(3):
            model.zero_grad()
            out = compiled(ids)
        got = [out.numpy()] + [p.grad.numpy() for p in model.parameters()]
        program, text = compiled.program, compiled.program.source()
        calls = dict(re.findall(r"^void (k\d+)\(.*\) \{\n  (k\d+)\(in0, .*out\);   // k\d+'s code\n\}$", text, re.M))
        bodies[n] = [name for name in re.findall(r"^void (k\d+)\(.*\) \{$", text, re.M) if name not in calls]
        assert len(calls) + len(bodies[n]) == len(program.plans) and compiled.replays >= 1
        plans = {k.name: k for k in program.plans}
        for name, first in calls.items():
            assert first in bodies[n] and int(first[1:]) < int(name[1:])
            assert code_of(plans[name]) == code_of(plans[first]), (name, first)
        model.zero_grad()
        want = [step(ids).numpy()] + [p.grad.numpy() for p in model.parameters()]
        for g, w in zip(got, want):
            np.testing.assert_array_equal(bits(g), bits(w))
    assert len(bodies[2]) == len(bodies[8]) and len(calls) > 6 * len(bodies[8])


def test_literals_read_back_as_the_same_number_and_read_well():
    for value in (0.1, 1 / 3, 64.0, 1e-310, -2.5e300, 9.999999747378752e-06):
        assert float(literal(value)) == value
    assert [literal(v) for v in (np.inf, -np.inf, np.nan, 2.0)] == ["INFINITY", "-INFINITY", "NAN", "2.0"]
    assert short(9.999999747378752e-06, "float32") == "1e-05" and short(1 / 3, "float64") == "0.3333333333333333"


def test_a_library_is_built_once_and_then_read_from_the_cache_by_its_sources_hash(tmp_path):
    first = cpu_kernels.Compiler(cache=tmp_path)
    text = "void twice(const double *restrict in0, double *restrict out) { out[0] = in0[0] * 2; }\n"
    lib = first.library(text)
    again = cpu_kernels.Compiler(cache=tmp_path)
    again.library(text)
    assert (first.built, again.built) == (1, 0) and len(list(tmp_path.glob("*.so"))) == 1
    x, out = np.array([21.0]), np.zeros(1)
    lib.twice(x.ctypes.data_as(cpu_kernels.ctypes.c_void_p), out.ctypes.data_as(cpu_kernels.ctypes.c_void_p))
    assert out[0] == 42.0 and not list(tmp_path.glob(".*.tmp"))            # no temporary left behind
    with pytest.raises(RuntimeError, match=r"kernels: .* could not compile .*\.c \(its messages: .*\.log\)"):
        first.library("this is not C")


def test_threads_asking_for_one_new_library_at_once_each_get_it_built_once(tmp_path):
    """Four threads of one process, a cold cache, the same source: one build, every thread a working library, no
    temporary left (threads share a process id, so the temporaries' names alone cannot keep them apart)."""
    import threading
    comp = cpu_kernels.Compiler(cache=tmp_path)
    text = "void thrice(const double *restrict in0, double *restrict out) { out[0] = in0[0] * 3; }\n"
    got, errors, start = [], [], threading.Barrier(4)

    def build():
        start.wait()
        try:
            lib = comp.library(text)
            x, out = np.array([14.0]), np.zeros(1)
            lib.thrice(x.ctypes.data_as(cpu_kernels.ctypes.c_void_p), out.ctypes.data_as(cpu_kernels.ctypes.c_void_p))
            got.append(out[0])
        except Exception as e:                                   # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=build) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and got == [42.0] * 4 and comp.built == 1 and not list(tmp_path.glob(".*.tmp"))


def test_without_a_c_compiler_a_replay_runs_numpys_functions_and_says_so_once(monkeypatch):
    monkeypatch.setattr(cpu_kernels.shutil, "which", lambda name: None)
    cpu_kernels.compiler.cache_clear()
    try:
        def f(a):
            return (a * 2.0 + 1.0) * a
        a = tb.tensor(np.arange(12.0).reshape(3, 4))
        with pytest.warns(RuntimeWarning, match="no C compiler found") as said:
            out, compiled = replay(f, a)
            replay(f, a)                                                # a second program: nothing said again
        assert len(said) == 1 and generated(compiled.program) == [] and len(compiled.program.plans) == 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            np.testing.assert_array_equal(out.numpy(), f(a).numpy())
    finally:
        cpu_kernels.compiler.cache_clear()


def test_a_number_kept_alive_by_the_graph_is_read_from_memory_of_its_own():
    """With gradients recorded and the outputs kept, the Python numbers of the first calls (numpy scalars, which own
    no memory an address could point into) outlive the call and are read as inputs: each replay still equals
    eager (README's example: RMSNorm's 1/n and eps)."""
    block = nn.TransformerBlock(nn.preset("tiny"), generator=tb.Generator(0))
    step = tb.jit(lambda x: block(x))
    xs = [tb.randn(2, 8, 64, generator=tb.Generator(i)) for i in range(5)]
    outs = [step(x) for x in xs]
    assert any(not isinstance(t.data, np.ndarray) for k in generated(step.program) for t in k.ins)
    for x, out in zip(xs, outs):
        np.testing.assert_array_equal(bits(out.numpy()), bits(block(x).numpy()))


def test_a_compiler_that_refuses_the_source_leaves_the_chains_to_numpy_and_says_so(monkeypatch):
    """A compiler that takes other flags (an old clang without -march=native, say): one line saying so, the log kept
    beside the source, and the replay runs the chains' numpy functions."""
    monkeypatch.setattr(cpu_kernels, "FLAGS", cpu_kernels.FLAGS + ["-fno-such-flag-anywhere"])

    def f(a):
        return (a * 3.0 - 1.0) * a
    a = tb.tensor(np.linspace(-1, 1, 40).reshape(5, 8))
    with pytest.warns(RuntimeWarning, match=r"tb.jit: kernels: .* could not compile .*\.c \(its messages: .*\.log\); "
                                            r"numpy's functions run"):
        out, compiled = replay(f, a)
    assert generated(compiled.program) == []
    np.testing.assert_array_equal(bits(out.numpy()), bits(f(a).numpy()))


def test_a_module_name_cannot_end_its_comment_or_reach_the_code():
    """Module names go into the source's comments; a line break, a backslash (which carries a // comment onto the
    next line) or another control character there is shown as ?, so any name compiles and runs as written."""
    class Affine(nn.Module):
        def forward(self, x):
            return x * 2.0 + 1.0

    class Outer(nn.Module):
        def __init__(self):
            setattr(self, "evil\\\n}\nvoid injected(void) {\n//", Affine())

        def forward(self, x):
            return next(m for _, m in self.named_children())(x)
    outer = Outer()
    with warnings.catch_warnings():
        warnings.simplefilter("error")                              # no "could not compile" warning
        out, compiled = replay(outer, tb.tensor(np.arange(6.0).reshape(2, 3)))
    [kernel] = generated(compiled.program)
    named = [line for line in compiled.program.source().splitlines() if "injected" in line]
    assert named and all(0 <= line.index("//") < line.index("evil??}?void injected(void) {?//") for line in named)
    np.testing.assert_array_equal(out.numpy(), np.arange(6.0).reshape(2, 3) * 2 + 1)


# ---------------------------------------------------------------- exp and log: kernels.MATH, eager and compiled alike
def _exact(op: str, x: np.ndarray) -> np.ndarray:
    """op(x) in the platform's long double (64 bits of mantissa or more): the oracle, rounded to x's dtype."""
    with np.errstate(all="ignore"):
        return getattr(np, op)(x.astype(np.longdouble))


def _sample(dtype, op: str) -> np.ndarray:
    """Values over the whole range a dtype's exp or log takes (logs of positives from subnormal to the largest),
    and the edges: the overflow and underflow thresholds, zeros, infinities, NaN, negatives for log."""
    r, info = np.random.default_rng(7), np.finfo(dtype)
    top = float(np.log(info.max))
    if op == "exp":
        x = np.concatenate([r.uniform(-top * 1.1, top * 1.1, 200_000), r.standard_normal(50_000),
                            np.linspace(-top * 1.05, top * 1.01, 5001)])
    else:
        x = np.exp(r.uniform(np.log(float(info.smallest_subnormal)), top, 200_000))
        x = np.concatenate([x, 1 + r.standard_normal(50_000) * 1e-3])
    edges = [0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 1.0, float(info.max), float(info.tiny),
             float(info.smallest_subnormal), top, -top]
    with np.errstate(over="ignore"):
        return np.concatenate([x, edges]).astype(dtype)


@pytest.mark.skipif(np.finfo(np.longdouble).nmant < 63, reason="the oracle needs a long double wider than double")
@pytest.mark.parametrize("op", ["exp", "log"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_exp_and_log_are_within_two_ulps_and_correctly_rounded_in_float16(op, dtype):
    """MATH's exp and log (in double for float64, in float for float32 and float16) against long double: float32
    and float64 within 2 units in the last place, float16 correctly rounded at every sample point; zeros,
    infinities, NaN, subnormal results and overflow as numpy's."""
    x = _sample(dtype, op)
    got = cpu_kernels.math_functions()[op](x)
    exact = _exact(op, x)
    with np.errstate(over="ignore"):
        want = exact.astype(dtype)
    assert got.dtype == dtype and got.shape == x.shape
    odd = ~np.isfinite(want) | (want == 0)
    np.testing.assert_array_equal(got[odd], want[odd])                          # inf, -inf, NaN, 0 where exact
    ulps = np.abs(got[~odd] - exact[~odd]) / np.spacing(np.abs(want[~odd])).astype(np.longdouble)
    if dtype == np.float16:
        np.testing.assert_array_equal(got[~odd], want[~odd])
    else:
        assert ulps.max() <= 2.0, float(ulps.max())


def test_eager_exp_and_log_are_maths_and_a_chain_holding_exp_is_one_generated_loop():
    """SiLU forward and backward compiled: its chains, exp included, run as generated loops calling tb_expf, and
    equal eager bit for bit, because eager's exp is the same function (not numpy's, which rounds otherwise in the
    last bit for some inputs)."""
    r = np.random.default_rng(3)
    x = tb.tensor(r.standard_normal((64, 172)).astype(np.float32) * 4, requires_grad=True)
    ours = cpu_kernels.math_functions()["exp"]
    np.testing.assert_array_equal(bits(x.detach().exp().numpy()), bits(ours(x.numpy())))
    np.testing.assert_array_equal(bits(x.detach().abs().log().numpy()),
                                  bits(cpu_kernels.math_functions()["log"](np.abs(x.numpy()))))

    def silu(x):
        out = x * x.sigmoid()
        out.backward(tb.ones_like(out))
        return out
    compiled = tb.jit(silu)
    for _ in range(3):
        x.grad = None
        got, got_grad = compiled(x).numpy(), x.grad.numpy()
    x.grad = None
    want, want_grad = silu(x).numpy(), x.grad.numpy()
    kernels = generated(compiled.program)
    assert any("tb_expf(" in cpu_kernels.function(k.kernel) for k in kernels)
    np.testing.assert_array_equal(bits(got), bits(want))
    np.testing.assert_array_equal(bits(got_grad), bits(want_grad))


@pytest.mark.parametrize("layout", ["rows", "columns", "strided", "broadcast", "0-d"])
def test_eager_exp_takes_any_layout_and_writes_where_out_says(layout):
    """An eager exp of a transposed, strided, broadcast or 0-d array: numpy's shape, each value MATH's (the same
    as on a copy in rows), and `out=` written in place, as numpy's ufunc is called in a chain."""
    base = np.random.default_rng(4).standard_normal((6, 8))
    a = {"rows": base, "columns": base.T, "strided": base[::2, 1::3],
         "broadcast": np.broadcast_to(base[0], (5, 8)), "0-d": np.float64(0.5)}[layout]
    f = cpu_kernels.math_functions()["exp"]
    got = f(a)
    assert np.shape(got) == np.shape(a)
    np.testing.assert_array_equal(bits(np.asarray(got)), bits(f(np.ascontiguousarray(a))))
    if layout != "0-d":
        out = np.empty_like(np.asarray(a))
        assert f(a, out=out) is out
        np.testing.assert_array_equal(bits(out), bits(np.asarray(got)))


def test_without_a_c_compiler_eager_exp_is_numpys(monkeypatch):
    monkeypatch.setattr(cpu_kernels.shutil, "which", lambda name: None)
    cpu_kernels.compiler.cache_clear()
    cpu_kernels.math_functions.cache_clear()
    try:
        a = np.random.default_rng(5).standard_normal(1000).astype(np.float32) * 20
        with pytest.warns(RuntimeWarning, match="no C compiler found"):
            got = tb.tensor(a).exp().numpy()
        np.testing.assert_array_equal(bits(got), bits(np.exp(a)))
    finally:
        cpu_kernels.compiler.cache_clear()
        cpu_kernels.math_functions.cache_clear()


def test_finite_differences_through_a_float64_compiled_program_match_its_replayed_gradient():
    """The tiny block in float64, its loss compiled (the forward's groups generated, exp in softmax and SiLU): the
    gradient a replay computes against central differences of the replayed loss itself (every evaluation a
    replay), relative error <= 1e-8."""
    from tinygrad_block.gradcheck import central_difference, rel_err
    blk = nn.TransformerBlock(nn.preset("tiny"), generator=tb.Generator(0), dtype=tb.float64)
    v = tb.randn(1, 4, 64, generator=tb.Generator(2), dtype=tb.float64)

    def loss(x):
        out = (blk(x) * v).sum()
        out.backward()
        return out
    compiled = tb.jit(loss, modules=[blk])
    x0 = np.random.default_rng(1).standard_normal((1, 4, 64))

    def replayed(x):
        blk.zero_grad()
        t = tb.tensor(x, dtype=tb.float64, requires_grad=True)
        return compiled(t), t
    for _ in range(3):
        replayed(x0)
    _, t = replayed(x0)
    assert compiled.replays >= 1 and generated(compiled.program)
    elements = [(0, i, j) for i in range(4) for j in range(0, 64, 9)]
    analytic = [t.grad.numpy()[e] for e in elements]
    numeric = central_difference(lambda x: replayed(x)[0].item(), x0, elements=elements)
    assert rel_err(analytic, [numeric[e] for e in elements]) <= 1e-8


# ---------------------------------------------------------------- row sums: a kernel that ends by summing its rows
@pytest.mark.parametrize("dtype", [tb.float32, tb.float64])
@pytest.mark.parametrize("keepdims", [True, False])
def test_a_row_sum_ends_a_generated_kernel_and_sums_as_numpy_does_bit_for_bit(dtype, keepdims):
    """((x - m) * w) summed over the last axis, for row lengths around every branch of numpy's pairwise order (below
    8, up to 128, and split in halves above), values spanning 12 orders of magnitude (where the order of additions
    shows), a broadcast operand among the inputs: one generated kernel, each row's sum bit for bit eager's."""
    r = np.random.default_rng(8)
    for n in (5, 8, 100, 135, 4099):
        x = tb.tensor(r.standard_normal((3, 2, n)) * 10.0 ** r.uniform(-6, 6, (3, 2, n)), dtype=dtype)
        m = tb.tensor(r.standard_normal((3, 2, 1)), dtype=dtype)
        w = tb.tensor(r.standard_normal(n), dtype=dtype)

        def f(x, m, w):
            return ((x - m) * w).sum(-1, keepdims=keepdims)
        out, compiled = replay(f, x, m, w)
        [kernel] = generated(compiled.program)
        assert kernel.kernel.reduce and kernel.kernel.describe().startswith("sub > mul > sum"), n
        with tb.no_grad():
            want = f(x, m, w).numpy()
        assert out.shape == want.shape
        np.testing.assert_array_equal(bits(out.numpy()), bits(want))


@pytest.mark.parametrize("dtype", [tb.float32, tb.float64])
def test_a_row_sum_reads_a_mask_from_outside_its_kernel_as_bytes(dtype):
    """A comparison read by two kernels stays an array of bools (one byte each); a row sum's group that selects
    with it reads those bytes as bytes: the replay equals eager bit for bit (read as floats, it summed garbage)."""
    r = np.random.default_rng(12)
    x, y = (tb.tensor(r.standard_normal((5, 37)), dtype=dtype) for _ in range(2))

    def f(x, y):
        mask = x > y
        return (tb.where(mask, x, y) * 2.0).sum(-1), tb.where(mask, y, x)
    (rows, other), compiled = replay(f, x, y)
    assert any(k.kernel.reduce == "sum" and any(op.dtype == "bool" for op in k.kernel.inputs)
               for k in generated(compiled.program))
    with tb.no_grad():
        want_rows, want_other = f(x, y)
    np.testing.assert_array_equal(bits(rows.numpy()), bits(want_rows.numpy()))
    np.testing.assert_array_equal(other.numpy(), want_other.numpy())


@pytest.mark.parametrize("dtype", [tb.float32, tb.float64])
def test_a_row_max_ends_a_generated_kernel_and_answers_as_numpy_does_bit_for_bit(dtype):
    """(x * s + m) maxed over the last axis, rows of 1 to 300 elements full of ties, zeros of both signs, infinities
    and NaNs (where numpy's answer depends on which of two equal values it keeps): one generated kernel ending in a
    max, each row's result eager's bit for bit (a NaN as a NaN). Rows whose max is a zero of either sign among
    smaller values tell apart the lanes numpy's vector max uses (a max from the first element on, keeping the
    later of two equal values, answers otherwise on each of x86's vector widths)."""
    r = np.random.default_rng(11)
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan])
    for n in (1, 2, 7, 8, 9, 17, 33, 64, 129, 300):
        values = np.where(r.random((50, n)) < 0.6, special[r.integers(0, 7, (50, n))], r.standard_normal((50, n)))
        values[:25][np.isnan(values[:25])] = 0.0                            # half the rows without a NaN
        values[:5] = r.choice([0.0, -0.0], (5, n))                          # and some of zeros alone
        s = r.choice([1.0, -1.0], n)
        values[5:20] = r.choice([0.0, -0.0, -1.0], (15, n)) * s             # x * s: zeros among -1s
        x = tb.tensor(values, dtype=dtype)
        s = tb.tensor(s, dtype=dtype)
        m = tb.tensor(r.choice([0.0, -0.0], (50, 1)), dtype=dtype)

        def f(x, s, m):
            return (x * s + m).max(-1)
        out, compiled = replay(f, x, s, m)
        [kernel] = generated(compiled.program)
        assert kernel.kernel.reduce == "max" and kernel.kernel.describe().startswith("mul > add > max"), n
        with tb.no_grad():
            want = f(x, s, m).numpy()
        got = out.numpy()
        assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(want).any() and (want == 0).any()
        np.testing.assert_array_equal(bits(got[~np.isnan(got)]), bits(want[~np.isnan(want)]))


LANES_SCRIPT = """
import json, sys
import numpy as np
import tinygrad_block as tb
from numpy.lib.introspect import opt_func_info
from tinygrad_block import cpu_kernels
info = opt_func_info(func_name="^maximum$", signature="float32")["maximum"]["fff"]
r, out = np.random.default_rng(3), {"target": info["current"]}
for dtype in ("float32", "float64"):
    lanes = cpu_kernels.max_lanes(dtype)
    rows = r.choice(np.array([0.0, -0.0, -1.0], dtype), (400, 2 * len(lanes) + 1 if lanes else 9))
    f = tb.jit(lambda x: (x * 1.0).max(-1))
    with tb.no_grad():
        for _ in range(3):
            got = f(tb.tensor(rows)).numpy()
    one_lane = [cpu_kernels._max_of(list(row), (0,)) for row in rows]
    out[dtype] = {"lanes": lanes, "generated": sum(type(k).__name__ == "Generated" for k in f.program.kernels),
                  "same": bool(np.array_equal(np.signbit(got), np.signbit(np.maximum.reduce(rows, axis=-1)))),
                  "one lane would be": bool(np.array_equal(np.signbit(one_lane), np.signbit(got)))}
print(json.dumps(out))
"""


def test_each_vector_width_numpy_can_run_here_has_its_lanes_found_and_a_row_max_replays_as_eager():
    """numpy picks its max's vector width from the CPU (AVX-512, AVX2, SSE on x86); numpy's own switch
    (NPY_DISABLE_CPU_FEATURES) holds it to each narrower one this machine has, in a process of its own: there
    cpu_kernels.max_lanes finds twice as many lanes for float32 as for float64, a replay of rows of zeros of both
    signs among -1s runs the generated max and keeps the sign of each zero as eager, and the same rows maxed
    from the first element on in one lane would not (on a machine with vectors)."""
    from numpy.lib.introspect import opt_func_info
    available = opt_func_info(func_name="^maximum$", signature="float32")["maximum"]["fff"]["available"].split()
    names = [t for t in available if not t.startswith("baseline")]
    seen = []
    for k in range(len(available)):
        env = dict(os.environ, NPY_DISABLE_CPU_FEATURES=" ".join(names[:k]))
        done = subprocess.run([sys.executable, "-c", LANES_SCRIPT], capture_output=True, text=True, env=env,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout)
        f32, f64 = found["float32"], found["float64"]
        seen.append((found["target"], len(f32["lanes"]), len(f64["lanes"])))
        assert found["target"] == available[k]
        assert len(f32["lanes"]) == 2 * len(f64["lanes"]) and sorted(f64["lanes"]) == list(range(len(f64["lanes"])))
        for result in (f32, f64):
            assert result["generated"] == 1 and result["same"], (found, seen)
            assert result["one lane would be"] is (len(result["lanes"]) == 1), (found, seen)
    assert len({lanes for _, lanes, _ in seen}) == len(seen), seen             # each width its own lanes


def test_a_max_whose_ties_numpy_keeps_in_no_order_found_stays_numpys(monkeypatch):
    """A max that no choice of lanes reproduces (here every zero max made +0, as a max preferring +0 to -0 would
    answer) is refused by lanes_of; with no lanes, a row max's group runs numpy's functions, still eager's."""
    assert cpu_kernels.lanes_of(lambda row: np.maximum.reduce(row) + 0.0, np.dtype("float32")) is None
    assert cpu_kernels.lanes_of(np.maximum.reduce, np.dtype("float64")) == cpu_kernels.max_lanes("float64")
    monkeypatch.setattr(cpu_kernels, "max_lanes", lambda dtype: None)
    x = tb.tensor(np.random.default_rng(4).choice([0.0, -0.0, -1.0], (30, 40)), dtype=tb.float32)
    out, compiled = replay(lambda x: (x * 2.0).max(-1), x)
    assert [plan.reduce for plan in compiled.program.plans] == ["max"] and generated(compiled.program) == []
    with tb.no_grad():
        np.testing.assert_array_equal(bits(out.numpy()), bits((x * 2.0).max(-1).numpy()))

def test_a_sum_of_columns_or_of_values_laid_out_otherwise_stays_numpys():
    """A sum over another axis than the last, or of a result eager lays out in columns, is not a row sum of memory
    (numpy adds those in another order): no generated kernel ends with it, and the replay is still eager's."""
    r = np.random.default_rng(9)
    x = tb.tensor(r.standard_normal((40, 30)), dtype=tb.float64)
    for f in (lambda x: (x * 3.0).sum(0), lambda x: (x.mT * 3.0).sum(-1)):
        out, compiled = replay(f, x)
        assert not any(k.kernel.reduce for k in generated(compiled.program))
        with tb.no_grad():
            np.testing.assert_array_equal(bits(out.numpy()), bits(f(x).numpy()))
