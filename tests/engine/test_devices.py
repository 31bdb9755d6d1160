"""The same engine on every device: 'cpu' (numpy), 'strict' (arrays that refuse implicit host reads) and 'cuda'
(CuPy, GPU-marked). What a device must not change: the weights a seed draws, the values (to rounding), the
FLOP counts (tests/measure/test_counting.py), the graphs (tests/graph/test_graph.py), and the absence of reads
back to the host in a forward and backward pass. And float16, whose sums and norm statistics accumulate in
float32, against float64.

Oracles: the numpy run (itself held to finite differences, PyTorch and the hand-derived pairs elsewhere),
float64 for float16, and values worked out by hand.
"""
import subprocess
import sys

import numpy as np
import pytest
from conftest import needs_gpu, rel_err

import tinygrad_block as tb
from tinygrad_block import nn

F16_TOL = 5e-3  # float16 against float64: relative error (norm-wise), about five float16 ulps (2^-10 each)


def tiny_block(device, dtype=tb.float32, **changes):
    cfg = nn.preset("tiny").with_(**changes)
    return cfg, nn.TransformerBlock(cfg, generator=tb.Generator(0), dtype=dtype, device=device)


def run_block(block, cfg, device, dtype=tb.float32, B=2, L=8):
    """Output, input gradient and parameter gradients of sum(block(x) * dout) for seeded x and dout."""
    g = tb.Generator(1)
    x = tb.randn(B, L, cfg.d_model, generator=g, dtype=dtype, device=device, requires_grad=True)
    dout = tb.randn(B, L, cfg.d_model, generator=g, dtype=dtype, device=device)
    out = block(x)
    out.backward(dout)
    return out, x.grad, {n: p.grad for n, p in block.named_parameters()}


def test_importing_the_library_imports_no_gpu_library():
    code = ("import sys, tinygrad_block as tb; tb.ones(2, device='strict') * 2.0; "
            "print(sorted(m for m in ('cupy', 'cupyx', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_one_seed_draws_the_same_weights_on_every_device(device):
    _, cpu = tiny_block("cpu")
    _, there = tiny_block(device)
    for (name, a), (_, b) in zip(cpu.named_parameters(), there.named_parameters(), strict=True):
        assert b.device == tb.get_backend(device).name
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)   # drawn on the host, cast the same


def test_tensors_from_the_devices_own_arrays_and_tensors(device):
    """tb.tensor takes a device array (a cupy array on 'cuda') as it is, dtype included, and a tensor from
    any device; values come through unchanged."""
    values = np.arange(6, dtype=np.float64).reshape(2, 3) / 4
    t = tb.tensor(values, device=device)
    again = tb.tensor(t.data, device=device)
    assert (again.dtype, again.shape, again.device) == (tb.float64, (2, 3), t.device)
    np.testing.assert_array_equal(again.numpy(), values)
    for source in ("cpu", device):
        copy = tb.tensor(tb.tensor(values, device=source), device=device)
        assert copy.device == t.device
        np.testing.assert_array_equal(copy.numpy(), values)
    assert tb.tensor(np.float64(0.5), device=device).dtype == tb.float32   # a numpy scalar is Python data


def test_module_to_moves_every_parameter_and_buffer_and_keeps_the_parameters(device):
    cfg, block = tiny_block("cpu")
    before = {n: (p, p.numpy().copy()) for n, p in block.named_parameters()}
    cos = block.attn.rope_cos.numpy().copy()
    assert block.to(device) is block
    name = tb.get_backend(device).name
    for n, p in block.named_parameters():
        assert p is before[n][0] and p.device == name and p.grad is None
        np.testing.assert_array_equal(p.numpy(), before[n][1])
    assert block.attn.rope_cos.device == block.attn.rope_sin.device == name
    np.testing.assert_array_equal(block.attn.rope_cos.numpy(), cos)
    out, _, _ = run_block(block, cfg, device)
    assert out.device == name
    block.to("cpu")
    assert all(p.device == "cpu" for p in block.parameters())


@pytest.mark.parametrize("changes", [{}, {"norm": "layer", "bias": True, "ffn": "gelu_tanh", "rope": False},
                                     {"layout": "parallel", "lora_rank": 2},
                                     {"qk_norm": True, "rope_scaling": ("llama3", 8.0, 1.0, 4.0, 16)}])
def test_block_values_and_gradients_equal_the_numpy_run(changes, device):
    cfg, cpu = tiny_block("cpu", tb.float64, **changes)
    _, there = tiny_block(device, tb.float64, **changes)
    ref, got = run_block(cpu, cfg, "cpu", tb.float64), run_block(there, cfg, device, tb.float64)
    assert rel_err(ref[0].numpy(), got[0].numpy()) < 1e-13
    assert rel_err(ref[1].numpy(), got[1].numpy()) < 1e-13
    for n, g in ref[2].items():
        assert (g is None) == (got[2][n] is None), n
        if n == "attn.k_proj.bias" and not cfg.rope:   # zero in theory (softmax ignores a shift shared by all
            assert max(abs(g.numpy()).max(), abs(got[2][n].numpy()).max()) < 1e-12   # keys): rounding only
        elif g is not None:
            assert rel_err(g.numpy(), got[2][n].numpy()) < 1e-13, n


def test_a_forward_and_backward_pass_reads_nothing_back_to_the_host(device):
    """The block's forward and backward make no host read: no bounds check, no scalar pulled back, no
    implicit conversion (device 'strict' would raise on one). On a GPU, CuPy's own sync detector agrees."""
    cfg, block = tiny_block(device)
    be = tb.get_backend(device)
    before = be.host_reads
    if device == "cuda":
        import cupyx
        with pytest.warns(UserWarning), cupyx.allow_synchronize(False):   # CuPy warns the detector is experimental
            run_block(block, cfg, device)
    else:
        run_block(block, cfg, device)
    assert be.host_reads == before
    out, _, _ = run_block(block, cfg, device)
    out.numpy()                                                    # an explicit read is one, and is counted
    assert be.host_reads == before + 1


def test_the_reads_that_indexing_and_the_loss_make_are_counted(device):
    """Integer-array indexing checks its bounds on the host: one read per index array. cross_entropy checks
    its targets (one read) and then indexes rows and targets (two more)."""
    be = tb.get_backend(device)
    table = tb.randn(10, 4, generator=tb.Generator(0), device=device)
    ids = tb.tensor([[1, 2], [9, 0]], device=device)
    before = be.host_reads
    table[ids]
    assert be.host_reads == before + 1
    logits = tb.randn(3, 5, generator=tb.Generator(0), device=device)
    logits.cross_entropy(tb.tensor([0, 4, 2], device=device))
    assert be.host_reads == before + 4


# ---------------------------------------------------------------- float16
def test_float16_block_against_float64(device):
    """The block in float16 (weights and inputs rounded from the float64 run's): output and every gradient
    within F16_TOL of float64."""
    cfg, ref_block = tiny_block("cpu", tb.float64)
    ref = run_block(ref_block, cfg, "cpu", tb.float64)
    _, block = tiny_block("cpu", tb.float64)
    block.to(tb.float16).to(device)
    g = tb.Generator(1)
    x = tb.randn(2, 8, cfg.d_model, generator=g, dtype=tb.float64).to(tb.float16).to(device).detach()
    dout = tb.randn(2, 8, cfg.d_model, generator=g, dtype=tb.float64).to(tb.float16).to(device)
    x.requires_grad = True
    out = block(x)
    out.backward(dout)
    assert out.dtype == x.grad.dtype == tb.float16
    assert rel_err(out.numpy(), ref[0].numpy()) < F16_TOL
    assert rel_err(x.grad.numpy(), ref[1].numpy()) < F16_TOL
    for n, p in block.named_parameters():
        assert p.grad.dtype == tb.float16 and rel_err(p.grad.numpy(), ref[2][n].numpy()) < F16_TOL, n


def test_float16_mean_accumulates_in_float32(device):
    """70,000 ones sum past float16's largest value (65,504): the mean divides in float32 before rounding."""
    assert tb.ones(70_000, dtype=tb.float16, device=device).mean().item() == 1.0
    x = tb.full((4096,), 0.1, dtype=tb.float16, device=device)        # 0.1 is 0.0999755859375 in float16
    assert x.mean().item() == np.float16(0.1)                          # a float16 running sum stalls at 256
    assert x.sum().item() == np.float16(4096 * float(np.float16(0.1)))


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_float16_norms_of_large_activations(norm, device):
    """|x| up to 1000: x^2 overflows float16 (> 65,504), but the statistics are computed in float32."""
    values = np.linspace(-1000.0, 1000.0, 64).reshape(1, 64) + np.arange(64).reshape(1, 64) % 7
    layer = (nn.RMSNorm if norm == "rms" else nn.LayerNorm)(64, dtype=tb.float64)
    ref = layer(tb.tensor(values, dtype=tb.float64)).numpy()
    layer.to(tb.float16).to(device)
    out = layer(tb.tensor(values, dtype=tb.float16, device=device))
    assert np.isfinite(out.numpy()).all() and rel_err(out.numpy(), ref) < F16_TOL


def test_float16_softmax_and_loss_against_float64(device):
    logits = np.random.default_rng(0).standard_normal((4, 4096)) * 3
    target = [0, 17, 4095, 2048]
    probs = tb.tensor(logits, dtype=tb.float16, device=device).softmax(-1)
    ref = tb.tensor(logits, dtype=tb.float64).softmax(-1).numpy()
    assert rel_err(probs.numpy(), ref) < F16_TOL
    np.testing.assert_allclose(probs.sum(-1).numpy().astype(np.float64), 1.0, atol=2e-3)
    loss = tb.tensor(logits, dtype=tb.float16, device=device).cross_entropy(tb.tensor(target, device=device))
    ref_loss = tb.tensor(logits, dtype=tb.float64).cross_entropy(tb.tensor(target)).item()
    assert abs(loss.item() - ref_loss) / ref_loss < F16_TOL


# ---------------------------------------------------------------- the GPU's own paths
@needs_gpu
@pytest.mark.parametrize("dtype", [tb.float16, tb.float32, tb.float64])
@pytest.mark.parametrize("sa, sb, transpose", [((7, 5), (5, 3), ""), ((2, 3, 7, 5), (2, 3, 5, 4), ""),
                                               ((2, 3, 7, 5), (2, 3, 4, 5), "b"), ((2, 5, 7), (2, 4, 5), "ab"),
                                               ((4, 1, 5), (4, 5, 1), ""), ((3, 0, 5), (3, 5, 2), "")])
def test_cublas_gemm_layouts_against_numpy(sa, sb, transpose, dtype):
    """Row-major operands, transposed views (cuBLAS's transpose flag) and empty shapes, against numpy in
    float64, forward and backward."""
    r = np.random.default_rng(0)
    a_np, b_np = r.standard_normal(sa), r.standard_normal(sb)
    a = tb.tensor(a_np, dtype=dtype, device="cuda", requires_grad=True)
    b = tb.tensor(b_np, dtype=dtype, device="cuda", requires_grad=True)
    A, Bm = (a.mT if "a" in transpose else a), (b.mT if "b" in transpose else b)
    A_np, B_np = (a_np.swapaxes(-1, -2) if "a" in transpose else a_np), (b_np.swapaxes(-1, -2) if "b" in transpose
                                                                        else b_np)
    out = A @ Bm
    tol = {tb.float16: 2e-3, tb.float32: 1e-6, tb.float64: 1e-14}[dtype]
    expected = np.asarray(A_np, np.float64) @ np.asarray(B_np, np.float64)
    assert out.shape == expected.shape and (expected.size == 0 or rel_err(out.numpy(), expected) < tol)
    out.sum().backward()
    ones = np.ones(expected.shape)
    da, db = ones @ B_np.swapaxes(-1, -2), A_np.swapaxes(-1, -2) @ ones
    da, db = (da.swapaxes(-1, -2) if "a" in transpose else da), (db.swapaxes(-1, -2) if "b" in transpose else db)
    for got, want in ((a.grad, da), (b.grad, db)):
        assert got.shape == want.shape and (want.size == 0 or rel_err(got.numpy(), want) < tol)
