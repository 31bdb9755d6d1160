"""tb.jit: a replay equals eager bit for bit (unfused), on new inputs each call; a capture is refused or taken
again whenever a replay could be stale. Oracle: the same function run eagerly on the same inputs and weights."""
import subprocess
from xml.etree import ElementTree

import numpy as np
import pytest

import tinygrad_block as tb
from tinygrad_block import nn, optim
from tinygrad_block.counting import count_flops
from tinygrad_block.fuse import kernel_instructions
from tinygrad_block.gradcheck import central_difference, rel_err

CFG = nn.preset("tiny")
LM_CFG = CFG.with_(n_layers=2, vocab_size=40, max_seq_len=16)


def block_and_inputs(seed=0, n=5, dtype=tb.float64, shape=(2, 8)):
    blk = nn.TransformerBlock(CFG, generator=tb.Generator(seed), dtype=dtype)
    g = tb.Generator(seed + 1)
    xs = [tb.randn(*shape, CFG.d_model, generator=g, dtype=dtype) for _ in range(n)]
    douts = [tb.randn(*shape, CFG.d_model, generator=g, dtype=dtype) for _ in range(n)]
    return blk, xs, douts


def forward_backward(blk):
    def step(x, dout):
        out = blk(x)
        out.backward(dout)
        return out
    return step


def results(blk, x):
    return [x.grad.numpy().copy()] + [p.grad.numpy().copy() for p in blk.parameters()]


def assert_each_call_equals_eager(blk, compiled, xs, douts):
    """On each input, the compiled forward+backward's output, input gradient and parameter gradients equal the
    eager run's bit for bit."""
    step = forward_backward(blk)
    for x, dout in zip(xs, douts):
        blk.zero_grad()
        xe, xc = x.detach().requires_grad_(), x.detach().requires_grad_()
        want = step(xe, dout).numpy().copy(), results(blk, xe)
        blk.zero_grad()
        got = compiled(xc, dout).numpy(), results(blk, xc)
        np.testing.assert_array_equal(got[0], want[0])
        for g, w in zip(got[1], want[1]):
            np.testing.assert_array_equal(g, w)


def test_a_replay_of_forward_and_backward_equals_eager_bit_for_bit_on_new_inputs():
    blk, xs, douts = block_and_inputs()
    compiled = tb.jit(forward_backward(blk), fuse=False)
    assert_each_call_equals_eager(blk, compiled, xs, douts)
    assert (compiled.captures, compiled.replays) == (2, 3)
    assert compiled.program is not None and len(compiled.program.plain) == len(compiled.program.kernels)


def lm_and_batches(n=6):
    r = np.random.default_rng(0)
    batches = [tb.tensor(r.integers(0, LM_CFG.vocab_size, (2, 9))) for _ in range(n)]
    return [(b[:, :-1], b[:, 1:]) for b in batches]


def sgd_run(compile_it: bool):
    model = nn.LM(LM_CFG, generator=tb.Generator(0))
    opt = optim.SGD(model.parameters(), lr=0.1)

    def train_step(ids, targets):
        opt.zero_grad()
        loss = model(ids).reshape(-1, LM_CFG.vocab_size).cross_entropy(targets.reshape(-1))
        loss.backward()
        opt.step()
        return loss
    step = tb.jit(train_step, fuse=False) if compile_it else train_step
    losses = [step(ids, targets).item() for ids, targets in lm_and_batches()]
    return losses, [p.numpy().copy() for p in model.parameters()], step


def test_a_compiled_training_step_writes_back_the_parameters_as_eager_does():
    eager, compiled = sgd_run(False), sgd_run(True)
    assert compiled[0] == eager[0]                                     # the losses, every step
    for got, want in zip(compiled[1], eager[1]):
        np.testing.assert_array_equal(got, want)
    # the first call starts with no gradients, the later ones with the last call's (zeroed inside): the second
    # and third captures agree, and the three calls after them replay
    assert (compiled[2].captures, compiled[2].replays) == (3, 3)


def test_new_shapes_capture_again_and_each_shape_replays():
    blk, xs, douts = block_and_inputs(n=3)
    _, longer, dlonger = block_and_inputs(n=3, shape=(2, 12))
    compiled = tb.jit(forward_backward(blk), fuse=False)
    for x, dout, y, dy in zip(xs, douts, longer, dlonger):
        for a, da in ((x, dout), (y, dy)):
            blk.zero_grad()
            got = compiled(a, da).numpy()
            blk.zero_grad()
            np.testing.assert_array_equal(got, blk(a).numpy())
    assert (compiled.captures, compiled.replays) == (4, 2)


def test_a_value_read_inside_is_refused_while_capturing():
    blk, xs, _ = block_and_inputs(n=1)

    def branchy(x):
        out = blk(x)
        return out * 2.0 if out.sum().item() > 0 else out
    with pytest.raises(tb.JitError, match=r"reads a tensor's values \(\.item\(\)"):
        tb.jit(branchy)(xs[0])


def test_a_python_number_that_changes_between_calls_is_refused():
    blk, xs, _ = block_and_inputs(n=3)
    calls = []

    def scaled(x):
        calls.append(1)
        return blk(x) * float(len(calls))                               # a new constant every call
    compiled = tb.jit(scaled)
    compiled(xs[0])
    compiled(xs[1])
    with pytest.raises(tb.JitError, match="a constant read by mul .* changed between calls"):
        compiled(xs[2])


def test_a_replaced_parameter_is_seen_and_captured_again():
    blk, xs, _ = block_and_inputs(n=4)
    compiled = tb.jit(lambda x: blk(x), fuse=False)
    for x in xs[:3]:
        compiled(x)
    assert compiled.replays == 1
    blk.norm1.weight = nn.Parameter(tb.full((CFG.d_model,), 3.0, dtype=tb.float64))
    got = compiled(xs[3]).numpy()
    np.testing.assert_array_equal(got, blk(xs[3]).numpy())
    assert compiled.captures == 3 and compiled.replays == 1


def test_gradients_left_from_the_last_call_are_refused_by_name():
    blk, xs, douts = block_and_inputs(n=3)
    compiled = tb.jit(forward_backward(blk), fuse=False)
    compiled(xs[0], douts[0])
    with pytest.raises(tb.JitError, match="zero the gradients"):
        compiled(xs[1], douts[1])


def test_counting_a_replay_counts_what_eager_counts():
    blk, xs, douts = block_and_inputs(n=3)
    compiled = tb.jit(forward_backward(blk))
    for x, dout in zip(xs[:2], douts[:2]):
        blk.zero_grad()
        compiled(x, dout)
    blk.zero_grad()
    with count_flops() as replayed:
        compiled(xs[2], douts[2])
    assert compiled.replays == 1
    blk.zero_grad()
    with count_flops() as eager:
        forward_backward(blk)(xs[2], douts[2])
    for phase in ("forward", "backward"):
        for scope in ("block", "block.attn", "block.ffn"):
            assert replayed.total(phase, scope=scope) == eager.total(phase, scope=scope) > 0


def test_an_index_out_of_range_is_still_refused_on_a_replay():
    model = nn.LM(LM_CFG, generator=tb.Generator(0))
    compiled = tb.jit(lambda ids: model(ids))
    good = tb.tensor(np.arange(8).reshape(1, 8))
    compiled(good)
    compiled(good)
    with pytest.raises(IndexError, match="Embedding: token id 40 is outside the vocabulary of 40"):
        compiled(tb.tensor(np.array([[1, 2, 3, 4, 5, 6, 7, 40]])))


def test_the_program_prints_its_kernels():
    blk, xs, douts = block_and_inputs(n=2)
    compiled = tb.jit(forward_backward(blk), fuse=False)
    for x, dout in zip(xs, douts):
        blk.zero_grad()
        compiled(x, dout)
    text = str(compiled.program)
    assert text.splitlines()[0].startswith(f"program: {len(compiled.program.plain)} kernels")
    assert "matmul" in text and "block.attn" in text


def test_what_cannot_be_compiled_says_so():
    with pytest.raises(TypeError, match="expected a function"):
        tb.jit(3)
    blk, xs, _ = block_and_inputs(n=1)
    with pytest.raises(tb.JitError, match="hashable"):
        tb.jit(lambda x, extra: blk(x))(xs[0], np.zeros(3))


def test_a_fused_replay_equals_eager_on_new_inputs_and_its_program_says_what_fused():
    blk, xs, douts = block_and_inputs(dtype=tb.float32)
    compiled = tb.jit(forward_backward(blk))
    assert_each_call_equals_eager(blk, compiled, xs, douts)            # in place is the same arithmetic
    program = compiled.program
    assert len(program.kernels) < len(program.plain)
    text = str(program)
    assert "fused" in text and " > " in text and f"for {len(program.plain)} primitives" in text
    flops = sum(s.flops for s in program.instructions)
    assert f"{flops:,} FLOPs" in text.splitlines()[0]


def test_gradients_of_a_fused_replay_match_finite_differences_in_float64():
    blk, xs, _ = block_and_inputs(n=4)

    def loss_and_backward(x):
        loss = (blk(x) * blk(x)).sum()
        loss.backward()
        return loss
    compiled = tb.jit(loss_and_backward)
    for x in xs:                                                        # two captures, then two replays
        xc = x.detach().requires_grad_()
        blk.zero_grad()
        compiled(xc)
    assert compiled.replays == 2 and len(compiled.program.kernels) < len(compiled.program.plain)
    x0 = xs[-1].numpy()

    def loss_at(values):
        with tb.no_grad():
            y = blk(tb.tensor(values))
            return float((y * y).sum().item())
    picked = [(0, 0, 0), (1, 7, 63), (0, 3, 17), (1, 5, 40)]
    numeric = central_difference(loss_at, x0, elements=picked)
    for idx in picked:
        assert rel_err(xc.grad.numpy()[idx], numeric[idx]) <= 1e-8, idx


def test_a_parameter_added_or_frozen_is_seen_and_captured_again():
    blk, xs, douts = block_and_inputs(n=6)
    compiled = tb.jit(forward_backward(blk), fuse=False)
    for x, dout in zip(xs[:3], douts[:3]):
        blk.zero_grad()
        compiled(x, dout)
    assert (compiled.captures, compiled.replays) == (2, 1)
    blk.ffn.down_proj.weight.requires_grad = False                     # frozen: no gradient may be written
    blk.zero_grad()
    compiled(xs[3], douts[3])
    assert compiled.captures == 3 and blk.ffn.down_proj.weight.grad is None
    blk.extra = nn.Parameter(tb.zeros(3, dtype=tb.float64))            # added
    blk.zero_grad()
    compiled(xs[4], douts[4])
    assert compiled.captures == 4


def test_on_the_strict_device_a_replay_runs_primitive_by_primitive_and_equals_eager():
    blk = nn.TransformerBlock(CFG, generator=tb.Generator(0), device="strict")
    g = tb.Generator(1)
    xs = [tb.randn(2, 8, CFG.d_model, generator=g, device="strict") for _ in range(3)]
    compiled = tb.jit(lambda x: blk(x))
    outs = [compiled(x) for x in xs]
    assert compiled.replays == 1 and compiled.program.kernels is compiled.program.plain
    np.testing.assert_array_equal(outs[2].numpy(), blk(xs[2]).numpy())


def test_the_program_draws_as_a_graph():
    blk, xs, douts = block_and_inputs(n=2, dtype=tb.float32)
    compiled = tb.jit(forward_backward(blk))
    for x, dout in zip(xs, douts):
        blk.zero_grad()
        compiled(x, dout)
    dot = compiled.program.to_dot()
    assert dot.startswith("digraph program") and dot.count("->") > len(compiled.program.kernels) // 2
    assert dot.count("[label=") == len(compiled.program.kernels) and "FLOPs" in dot
    title = 'a "quoted" \\N title\nover two lines & <b>'           # graphviz would read \N, " and &-entities
    svg = subprocess.run(["dot", "-Tsvg"], input=compiled.program.to_dot(title), capture_output=True, text=True,
                         check=True).stdout
    drawn = [t.text for t in ElementTree.fromstring(svg).iter("{http://www.w3.org/2000/svg}text")]
    assert drawn[:2] == ['a "quoted" \\N title', "over two lines & <b>"]


def test_fused_chains_are_counted_once_for_the_listing_and_the_drawing():
    """(a * b + a).exp() and (a - b) * 3 are two chains of elementwise ops, each read only by the next (the 3's
    broadcast dropped): two fused kernels, which print(program) and fuse.fused_chains both say."""
    from tinygrad_block.fuse import fused_chains
    compiled = tb.jit(lambda a, b: ((a * b + a).exp(), (a - b) * 3.0))
    g = tb.Generator(0)
    for _ in range(3):
        compiled(tb.randn(4, 8, generator=g), tb.randn(4, 8, generator=g))
    program = compiled.program
    assert [[s.op.name for s in kernel_instructions(k)] for k in program.kernels] == \
        [["mul", "add", "exp"], ["sub", "mul"]]
    assert fused_chains(program) == 2
    assert "(2 fused chains, " in str(program).splitlines()[0]
    assert program.to_dot().count('fillcolor="#f6d8ae"') == 2              # drawn as fused, both


def test_the_programs_drawing_writes_its_numbers_as_the_graphs_drawing_does():
    """One writer (graph_dot): x + 1 on one element is 1 FLOP, written "1 FLOP" as the graph writes it; a shape of
    one axis is written (1,)."""
    compiled = tb.jit(lambda x: x + 1.0)
    for i in range(3):
        compiled(tb.tensor([float(i)]))
    assert 'label="add\\n(1,) float32\\n1 FLOP, 4 B"' in compiled.program.to_dot()


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "forward+backward"])
def test_a_compiled_programs_flops_equal_the_closed_form(backward):
    from tinygrad_block import accounting, recordings
    program = recordings.compiled_program(CFG, whole_model=False, B=2, L=16, backward=backward)
    want = accounting.block_forward_flops(CFG, 16, 2, matmul_only=False)
    if backward:
        want += accounting.block_backward_flops(CFG, 16, 2, matmul_only=False)
    assert sum(s.flops for s in program.instructions) == want
    assert f"{want:,} FLOPs" in str(program).splitlines()[0]


def test_zero_dimensional_results_replay():
    """A mean over every axis and ops on it make 0-d results (numpy gives scalars there): replayed exactly."""
    blk, xs, _ = block_and_inputs(n=4, dtype=tb.float32)

    def loss_step(x):
        loss = (blk(x) * blk(x)).mean() * 2.0 + 1.0
        loss.backward()
        return loss
    compiled = tb.jit(loss_step)
    for x in xs:
        blk.zero_grad()
        got = compiled(x).item()
        grads = [p.grad.numpy().copy() for p in blk.parameters()]
        blk.zero_grad()
        assert got == loss_step(x).item()
        for g, p in zip(grads, blk.parameters()):
            np.testing.assert_array_equal(g, p.grad.numpy())
    assert compiled.replays == 2


def test_two_expands_into_one_op_are_not_both_dropped():
    """Dropping both would broadcast (2, 3, 1) + (2, 3, 1) to (2, 3, 1), and the sum after it would sum less."""
    def f(a, b):
        return (a.expand(2, 3, 4) + b.expand(2, 3, 4)).sum(axis=-1)
    compiled, g = tb.jit(f), tb.Generator(0)
    for _ in range(4):
        a, b = tb.randn(2, 3, 1, generator=g), tb.randn(2, 3, 1, generator=g)
        np.testing.assert_array_equal(compiled(a, b).numpy(), f(a, b).numpy())
    assert compiled.replays == 2


def test_fused_adamw_training_equals_eager_bit_for_bit():
    """AdamW's update chains run in place; each keeps the memory layout eager's ops gave the result, since a
    matmul reading a weight rounds by its layout (a transposed gradient's layout would otherwise spread)."""
    def run(compile_it: bool):
        model = nn.LM(LM_CFG, generator=tb.Generator(0))
        opt = optim.AdamW(model.parameters(), lr=3e-3)

        def train_step(ids, targets):
            opt.zero_grad()
            loss = model(ids).reshape(-1, LM_CFG.vocab_size).cross_entropy(targets.reshape(-1))
            loss.backward()
            opt.step()
            return loss
        step = tb.jit(train_step) if compile_it else train_step
        losses = [step(ids, targets).item() for ids, targets in lm_and_batches(8)]
        return losses, [p.numpy().copy() for p in model.parameters()], step
    eager, fused = run(False), run(True)
    assert fused[0] == eager[0]
    for got, want in zip(fused[1], eager[1]):
        np.testing.assert_array_equal(got, want)
    program = fused[2].program
    assert fused[2].replays >= 5 and len(program.kernels) < len(program.plain)


def test_a_kernel_whose_layout_differs_from_eager_sends_the_program_back_to_unfused():
    blk, xs, douts = block_and_inputs(n=4, dtype=tb.float32)
    compiled = tb.jit(forward_backward(blk))
    for x, dout in zip(xs[:2], douts[:2]):
        blk.zero_grad()
        compiled(x, dout)
    program = compiled.program
    chain = next(k for k in program.kernels if len(getattr(k, "instructions", ())) > 1)   # fused, generated or not
    last = chain.instructions[-1]
    last.strides = (1,) * len(last.shape)                       # as if eager had laid it out otherwise
    for x, dout in zip(xs[2:], douts[2:]):
        blk.zero_grad()
        got = compiled(x, dout).numpy()
        blk.zero_grad()
        np.testing.assert_array_equal(got, blk(x).numpy())
    assert program.kernels is program.plain


def test_a_live_tensor_used_as_an_index_is_read_again_at_each_replay():
    table, pos = tb.arange(10) * 3, tb.zeros(1, dtype=tb.int64)
    compiled = tb.jit(lambda: table[pos])
    for i in range(5):
        pos.data = tb.tensor([i]).data                                 # the position moves between calls
        assert compiled().tolist() == [3 * i]
    assert compiled.replays == 3
    pos.data = tb.tensor([10]).data
    with pytest.raises(IndexError, match="index 10 is out of bounds"):
        compiled()


def test_an_argument_whose_data_the_function_rebinds_is_written_back_at_each_replay():
    """As a KV cache passed in as an argument: the function rebinds the argument's .data, and every replay does
    the same, so the running total is eager's at every call."""
    def accumulate(total, x):
        total.data = (total + x * 2.0).data             # the same Tensor, its array replaced
        return total.sum()

    eager_total, compiled_total = tb.zeros(3, dtype=tb.float64), tb.zeros(3, dtype=tb.float64)
    step = tb.jit(accumulate)
    for i in range(5):
        x = tb.tensor([1.0, 2.0, 3.0 + i], dtype=tb.float64)
        assert step(compiled_total, x).item() == accumulate(eager_total, x).item()
        np.testing.assert_array_equal(compiled_total.numpy(), eager_total.numpy())
    assert (step.captures, step.replays) == (2, 3)


# ---------------------------------------------------------------- threads
def run_in_threads(work, n_threads: int) -> list:
    """work(i) in n_threads real threads started together; what each returned (an exception is raised here)."""
    import threading
    barrier, results, errors = threading.Barrier(n_threads), [None] * n_threads, []

    def worker(i):
        try:
            barrier.wait()
            results[i] = work(i)
        except BaseException as e:               # noqa: B036 (re-raised in the main thread)
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def matmul_silu_step(x, w):
    """Forward and backward of a function of its arguments only: what it sets (x.grad, w.grad) is each call's."""
    y = (x @ w).silu() * x.sum(axis=-1, keepdims=True)
    y.sum().backward()
    return y


@pytest.mark.parametrize("fuse", [True, False])
def test_one_compiled_function_replayed_by_four_threads_at_once_gives_each_call_its_own_answer(fuse):
    """Replays from several threads at once (numpy lets go of the GIL in a matmul, so kernels of two replays do
    interleave): every output and gradient equals the eager call on the same arguments, bit for bit."""
    g = tb.Generator(0)
    inputs = [(tb.randn(64, 48, generator=g, dtype=tb.float64), tb.randn(48, 96, generator=g, dtype=tb.float64))
              for _ in range(8)]

    def eager(x, w):
        x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
        return [matmul_silu_step(x, w).numpy(), x.grad.numpy(), w.grad.numpy()]
    want = [eager(x, w) for x, w in inputs]
    step = tb.jit(matmul_silu_step, fuse=fuse)

    def work(i):
        wrong = []
        for r in range(40):
            j = (i + r) % len(inputs)
            x, w = (t.detach().requires_grad_() for t in inputs[j])
            got = [step(x, w).numpy(), x.grad.numpy(), w.grad.numpy()]
            wrong += [(r, j) for a, b in zip(got, want[j]) if not np.array_equal(a, b)]
        return wrong
    assert run_in_threads(work, 4) == [[], [], [], []]
    assert step.captures == 2 and step.replays == 4 * 40 - 2


def test_threads_that_capture_at_once_each_get_their_eager_answer_and_one_program_is_kept():
    """Four threads call a new compiled block at the same moment, so their first calls are captures: each call's
    result equals eager's, the captures are taken one at a time (two, then every call replays)."""
    blk, xs, _ = block_and_inputs(n=4, dtype=tb.float32, shape=(2, 16))
    with tb.no_grad():
        want = [blk(x).numpy() for x in xs]
    for trial in range(3):
        compiled = tb.jit(lambda x: blk(x))

        def work(i, compiled=compiled):
            with tb.no_grad():
                return [np.array_equal(compiled(xs[(i + r) % 4]).numpy(), want[(i + r) % 4]) for r in range(3)]
        assert run_in_threads(work, 4) == [[True] * 3] * 4, trial
        assert (compiled.captures, compiled.replays) == (2, 10)
