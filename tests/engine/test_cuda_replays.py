"""tb.jit on the GPU: compiled replays on 'cuda' against eager on 'cuda', and every generated CUDA kernel of a
program launched on the GPU against the same kernel compiled as C and run on the CPU. Oracles: eager (each
primitive a CuPy or cuBLAS call), and the C of the same body (kernels.py), which the CPU's tests hold to numpy's
functions. All marked `gpu`: skipped, saying why, where CuPy or a GPU is missing."""
import ctypes

import numpy as np
import pytest

from conftest import GPU, block_program, rel_err

import tinygrad_block as tb
from tinygrad_block import cpu_kernels, cuda_kernels, nn, optim
from tinygrad_block.train import training_step

pytestmark = GPU
TOL = {tb.float16: 2e-2, tb.float32: 1e-5, tb.float64: 1e-12}


def _block(dtype, device):
    blk = nn.TransformerBlock(nn.preset("tiny"), generator=tb.Generator(0), dtype=dtype, device=device)
    return blk, tb.randn(2, 8, 64, generator=tb.Generator(1), dtype=dtype, device=device)


def _programs(dtype):
    """The tiny block's forward + backward, an AdamW training step and a decode step, compiled on 'cuda'."""
    blk, x = _block(dtype, "cuda")
    out = {"block": block_program(blk, x)}
    cfg = nn.preset("tiny").with_(n_layers=1, vocab_size=48, max_seq_len=16)
    model = nn.LM(cfg, generator=tb.Generator(0), dtype=dtype, device="cuda")
    opt = optim.AdamW(model.parameters(), lr=1e-3, eps=1e-4)
    step = tb.jit(training_step(model, opt, max_grad_norm=1.0), modules=[model, opt])
    ids = tb.randint(0, 48, (2, 9), generator=tb.Generator(1), device="cuda")
    for _ in range(3):
        step(ids[:, :-1], ids[:, 1:])
    out["adamw"] = step.program
    model.generate(tb.randint(0, 48, (1, 3), generator=tb.Generator(1), device="cuda"), 6, jit=True)
    out["decode"] = model.last_decoder.compiled.program
    return out


@pytest.mark.parametrize("dtype", [tb.float16, tb.float32, tb.float64], ids=str)
def test_every_generated_kernel_computes_on_the_gpu_what_its_c_computes_on_the_cpu(dtype):
    """Each kernel of the three programs, launched on the GPU on random inputs (NaN, inf, -0 among them), against
    the same kernel compiled as C: bit for bit (one text for both bodies), a row sum's pairwise order included
    (replays run CuPy's sums instead, but the kernel is the same function)."""
    import cupy
    rng = np.random.default_rng(0)
    programs = _programs(dtype) if dtype != tb.float64 else {"block": block_program(*_block(dtype, "cuda"))}
    checked = 0
    for name, program in programs.items():
        assert program.plans, f"{name}: no generated kernels on cuda"
        assert any(isinstance(k, cuda_kernels.CudaGenerated) for k in program.kernels), name
        functions = cpu_kernels.load(program.plans, cpu_kernels.compiler())
        module = cupy.RawModule(code=cuda_kernels.source(program.plans), options=cuda_kernels.OPTIONS)
        for k, c_function in zip(program.plans, functions):
            host = []
            for op in k.inputs:
                size = 1 + sum((n - 1) * s for n, s in zip(k.shape, op.strides))
                values = rng.standard_normal(size) * 3
                values[: min(size, 4)] = [np.nan, np.inf, -0.0, -np.inf][: min(size, 4)]
                host.append(values.astype(op.dtype))
            n = int(np.prod(k.shape[:-1] if k.reduce else k.shape))     # a row sum: one value (and thread) a row
            out_size = 1 + sum((m - 1) * s for m, s in zip(k.shape, k.out.strides))
            assert out_size == n
            want = np.full(n, np.nan, dtype=k.dtype)
            c_function(*[a.ctypes.data_as(ctypes.c_void_p) for a in host], want.ctypes.data_as(ctypes.c_void_p))
            device = [cupy.asarray(a) for a in host]
            got = cupy.full(n, np.nan, dtype=k.dtype)
            grid = ((n + cuda_kernels.THREADS - 1) // cuda_kernels.THREADS,)
            module.get_function(k.name)(grid, (cuda_kernels.THREADS,), (*device, got))
            got = got.get()
            nan = np.isnan(want)           # NaN's sign and payload are the processor's (x86: negative; the GPU: not)
            assert np.array_equal(np.isnan(got), nan), f"{name} {k.name}: {k.describe()}"
            assert got[~nan].tobytes() == want[~nan].tobytes(), f"{name} {k.name}: {k.describe()}"
            checked += 1
    assert checked >= 10


@pytest.mark.parametrize("dtype", [tb.float16, tb.float32, tb.float64], ids=str)
def test_the_block_compiled_on_the_gpu_equals_eager_on_the_gpu(dtype):
    """Forward and backward of the tiny block: output, input gradient and every weight gradient of three replays
    against eager, and a replay equal to the next on the same input (run to run)."""
    blk, x = _block(dtype, "cuda")

    def run(x):
        out = blk(x)
        out.backward(tb.ones_like(out))
        return out

    def results(f, x):
        blk.zero_grad()
        x = x.detach().requires_grad_()
        out = f(x)
        return [out.numpy(), x.grad.numpy()] + [p.grad.numpy() for p in blk.parameters()]
    f = tb.jit(run, modules=[blk])
    g = tb.Generator(5)
    for _ in range(4):
        x = tb.randn(2, 8, 64, generator=g, dtype=dtype, device="cuda")
        got, want = results(f, x), results(run, x)
        for a, b in zip(got, want):
            assert np.isfinite(a).all() and rel_err(a.astype(np.float64), b.astype(np.float64)) <= TOL[dtype]
    assert f.replays >= 2 and f.program.plans
    again = results(f, x)
    assert all(np.array_equal(a, b) for a, b in zip(again, got))


def test_training_compiled_on_the_gpu_follows_eager():
    """Six AdamW steps of a 2-layer model in float32, compiled against eager from the same start: losses and the
    final weights."""
    from tinygrad_block.data import induction_batch
    cfg = nn.preset("tiny").with_(n_layers=2, vocab_size=64, max_seq_len=32)

    def run(jit):
        model = nn.LM(cfg, generator=tb.Generator(0), device="cuda")
        opt = optim.AdamW(model.parameters(), 3e-3)
        step = training_step(model, opt, 1.0)
        step = tb.jit(step, modules=[model, opt]) if jit else step
        g, losses = tb.Generator(1), []
        for _ in range(6):
            loss, _ = step(*induction_batch(4, 8, cfg.vocab_size, g, "cuda"))
            losses.append(loss.item())
        return np.array(losses), [p.numpy() for p in model.parameters()]
    (l1, w1), (l2, w2) = run(True), run(False)
    assert rel_err(l1, l2) < 1e-5
    assert all(rel_err(a, b) < 1e-3 for a, b in zip(w1, w2))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=str)
@pytest.mark.parametrize("op", ["exp", "log"])
def test_eager_exp_and_log_on_the_gpu_are_the_cpus_bit_for_bit(op, dtype):
    """kernels.MATH is one text: eager exp and log on 'cuda' (NVRTC's build) equal the CPU's (the C compiler's) on
    every value, NaN aside (its sign is the processor's), except where a float32 is subnormal: CuPy compiles every
    kernel, its own and ours, with -ftz=true (cupy/cuda/compiler.py appends it), so a subnormal float32 in or out
    is 0 there."""
    r = np.random.default_rng(1)
    x = np.concatenate([r.standard_normal(100_000) * 40, np.exp(r.uniform(-740, 700, 100_000)),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-310, 5e-324, 88.7, 89.0, -103.9, -745.0]])
    with np.errstate(all="ignore"):
        x = x.astype(dtype)
    want = cpu_kernels.math_functions()[op](x)
    got = getattr(tb.tensor(x, device="cuda"), op)().numpy()
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    normal = ~nan
    if dtype == np.float32:
        tiny = np.finfo(np.float32).tiny
        sub = (np.abs(x) < tiny) & (x != 0) | (np.abs(want) < tiny) & (want != 0)
        flushed = {"exp": 0.0, "log": -np.inf}[op]           # exp's subnormal result is 0; log's subnormal x is 0
        assert sub.sum() > 100 and ((got[sub] == want[sub]) | (got[sub] == flushed)).all()
        normal &= ~sub
    assert got[normal].tobytes() == want[normal].tobytes()
    square = x[:10_000].reshape(100, 100).T
    np.testing.assert_array_equal(getattr(tb.tensor(square, device="cuda"), op)().numpy(),
                                  getattr(tb.tensor(np.ascontiguousarray(square), device="cuda"), op)().numpy())


# ---------------------------------------------------------------- a replay as one CUDA graph


def test_a_replay_on_the_gpu_is_one_cuda_graph_equal_to_its_kernels_one_by_one():
    """The tiny block's forward and backward plus an AdamW step (no embedding, so no atomic adds: every kernel is
    deterministic), compiled twice from the same start: replayed as one CUDA graph and kernel by kernel, the loss
    of every step and the final weights equal bit for bit; each step's loss is an array of its own (the next replay
    does not overwrite a result the caller kept); the graph's program says so when printed."""
    def run(graph: bool):
        blk, _ = _block(tb.float32, "cuda")
        opt = optim.AdamW(blk.parameters(), lr=1e-2)

        def step(x):
            opt.zero_grad()
            loss = (blk(x) ** 2).mean()
            loss.backward()
            opt.step()
            return loss
        f, g, losses = tb.jit(step, modules=[blk, opt]), tb.Generator(3), []
        for _ in range(7):
            if f.program is not None and not graph:
                f.program.why = "held to kernel by kernel"
            losses.append(f(tb.randn(2, 8, 64, generator=g, device="cuda")))
        return f, [loss.numpy() for loss in losses], [p.numpy() for p in blk.parameters()]
    (f, l1, w1), (h, l2, w2) = run(True), run(False)
    assert isinstance(f.program.graph, cuda_kernels.ReplayGraph) and f.program.why == ""
    assert h.program.graph is None and f.replays == h.replays >= 4
    assert "replayed as one CUDA graph" in str(f.program).splitlines()[0]
    assert np.array_equal(np.array(l1), np.array(l2)) and len(set(map(float, l1))) == len(l1)
    assert all(np.array_equal(a, b) for a, b in zip(w1, w2))


def test_decoding_on_the_gpu_replays_one_graph_per_cache_and_generates_eagers_tokens():
    """Greedy decoding with the static KV cache, compiled: its decode steps run as a CUDA graph that writes the
    cache in place (the cache's arrays are the graph's own inputs), the tokens equal eager's; a second generation
    (a new cache, other arrays) captures a graph again and still equals eager."""
    cfg = nn.preset("tiny").with_(n_layers=2, vocab_size=48, max_seq_len=32)
    model = nn.LM(cfg, generator=tb.Generator(0), device="cuda")
    for seed in (1, 2):
        prompt = tb.randint(0, 48, (1, 4), generator=tb.Generator(seed), device="cuda")
        got = model.generate(prompt, 12, jit=True).numpy()
        program = model.last_decoder.compiled.program
        assert isinstance(program.graph, cuda_kernels.ReplayGraph) and program.graph.fixed, program.why
        assert np.array_equal(got, model.generate(prompt, 12, jit=False).numpy())
