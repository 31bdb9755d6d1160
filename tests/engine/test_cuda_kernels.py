"""The GPU half of the generated kernels, checked without a GPU: every kernel of a program rendered as CUDA C
(cuda_kernels.py) and compiled to PTX by NVRTC (CuPy's bindings; the `gpu` extra brings CuPy and the NVRTC
library, which need no GPU). Oracles: the C source of the same kernels (the body is the same text), numpy's
unravel_index for the thread's index arithmetic, and NVRTC itself, which must accept every kernel and refuse a
wrong one with its own message."""
import re

import numpy as np
import pytest

from conftest import block_program as compiled_block

import tinygrad_block as tb
from tinygrad_block import cpu_kernels, cuda_kernels, nn, optim
from tinygrad_block.train import training_step

pytest.importorskip("cupy", reason="CuPy is missing: pip install -e '.[gpu]' (no GPU needed)", exc_type=ImportError)


def block_program(dtype):
    """The tiny block's forward and backward, compiled (conftest's block_program)."""
    blk = nn.TransformerBlock(nn.preset("tiny"), generator=tb.Generator(0), dtype=dtype)
    return compiled_block(blk, tb.randn(2, 8, 64, generator=tb.Generator(1), dtype=dtype))


def adamw_program(dtype):
    cfg = nn.preset("tiny").with_(n_layers=1, vocab_size=48, max_seq_len=16)
    model = nn.LM(cfg, generator=tb.Generator(0), dtype=dtype)
    opt = optim.AdamW(model.parameters(), lr=1e-3, eps=1e-4)
    step = training_step(model, opt, max_grad_norm=1.0)
    ids = tb.randint(0, 48, (2, 9), generator=tb.Generator(1))
    compiled = tb.jit(step, modules=[model, opt])
    for _ in range(3):
        compiled(ids[:, :-1], ids[:, 1:])
    return compiled.program


def decode_program(dtype):
    cfg = nn.preset("tiny").with_(n_layers=2, vocab_size=48, max_seq_len=32)
    model = nn.LM(cfg, generator=tb.Generator(0), dtype=dtype)
    model.generate(tb.randint(0, 48, (1, 3), generator=tb.Generator(1)), 6, jit=True)
    return model.last_decoder.compiled.program


PROGRAMS = {"block forward+backward": block_program, "AdamW training step": adamw_program,
            "decode step": decode_program}


@pytest.mark.parametrize("dtype", [tb.float16, tb.float32], ids=["float16", "float32"])
@pytest.mark.parametrize("name", PROGRAMS)
def test_every_kernel_of_the_program_compiles_to_ptx_for_hopper(name, dtype):
    program = PROGRAMS[name](dtype)
    text = program.source("cuda")
    ptx = cuda_kernels.compile_ptx(text, arch="compute_90")
    kernels = [k.name for k in program.plans]
    assert kernels and all(f".entry {k}(" in ptx for k in kernels), name
    assert len(re.findall(r"^\.visible \.entry ", ptx, re.M)) == len(kernels)


@pytest.mark.parametrize("dtype", [tb.float32, tb.float64], ids=["float32", "float64"])
def test_a_row_max_kernel_compiles_to_ptx_with_the_cs_text(dtype):
    """A group that ends in a max over the last axis (the CPU's tests hold its C to numpy's max bit for bit): its
    CUDA source holds the same row functions and compiles, one entry."""
    x = tb.tensor(np.random.default_rng(0).standard_normal((6, 40)), dtype=dtype)
    f = tb.jit(lambda x: (x * 2.0 + 1.0).max(-1))
    while f.replays < 1:
        f(x)
    [plan] = f.program.plans
    assert plan.reduce == "max"
    text = f.program.source("cuda")
    assert all(line in text for line in sum(plan.row(), []))
    assert f".entry {plan.name}(" in cuda_kernels.compile_ptx(text, arch="compute_90")


def test_eager_exp_and_log_compile_to_ptx_for_every_dtype():
    """What eager exp and log launch on a GPU (cuda_kernels.math_source: kernels.MATH, one function per op and
    dtype) compiles, each function an entry."""
    ptx = cuda_kernels.compile_ptx(cuda_kernels.math_source())
    for op in ("exp", "log"):
        for dtype in ("float16", "float32", "float64"):
            assert f".entry {op}_{dtype}(" in ptx


def test_the_body_is_the_same_text_in_c_and_in_cuda():
    program = block_program(tb.float32)
    c, cuda = program.source("c"), program.source("cuda")
    for k in program.plans:
        index = [f"i{a}" for a in range(len(k.shape))]
        body = sum(k.row(), []) + [k.row_sum(index[:-1])] if k.reduce else k.body(index)
        calls = re.search(rf"^void {k.name}\(.*\n  k\d+\(.*\);   // k\d+'s code$", c, re.M)   # an earlier kernel's (C)
        assert calls or all(line in c for line in body), k.name
        assert all(line in cuda for line in body), k.name
    assert any(k.reduce for k in program.plans)
    assert c.count("\nvoid k") == cuda.count("__global__ void k") == len(program.plans)


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), (4, 1, 6, 2)])
def test_each_thread_finds_its_element_as_numpy_unravels_it(shape):
    """The CUDA loop's unravelling, evaluated for every flat index i, is numpy's unravel_index."""
    index = [f"i{a}" for a in range(len(shape))]
    line = cuda_kernels.unravel(index, shape)                    # long i2 = i % 4, i1 = i / 4 % 3, i0 = i / 12;
    assignments = line.removeprefix("long ").removesuffix(";").split(", ")
    for i in range(int(np.prod(shape))):
        found = {}
        for text in assignments:
            name, expr = text.split(" = ")
            found[name] = eval(expr.replace(" / ", " // "), {"i": i})             # C's / on longs >= 0 is //
        assert tuple(found[n] for n in index) == np.unravel_index(i, shape)


def test_a_kernel_nvrtc_refuses_is_an_error_holding_its_message():
    broken = cuda_kernels.PRELUDE + 'extern "C" __global__ void k0(float *out) { out[0] = no_such_value; }\n'
    with pytest.raises(RuntimeError, match=r"(?s)NVRTC refused the CUDA source.*no_such_value.*undefined"):
        cuda_kernels.compile_ptx(broken)


def test_the_program_source_names_its_languages():
    program = block_program(tb.float64)
    assert program.source() == program.source("c") == cpu_kernels.source(program.plans)
    with pytest.raises(ValueError, match=r"Program.source: language must be 'c' or 'cuda', got 'ptx'"):
        program.source("ptx")
