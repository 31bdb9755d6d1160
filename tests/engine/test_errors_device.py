"""Devices (device.py, strict.py, cuda.py): tensors on two devices never meet in one op, an unknown or missing
device says what there is and how to get CuPy or a GPU, and strict arrays refuse every implicit read to the host."""
from __future__ import annotations

import sys
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import JOINING_OPS, meta, msg, needs_gpu

import tinygrad_block as tb
from tinygrad_block import device as devices
from tinygrad_block import nn


# ================================================================ devices
@pytest.mark.parametrize("op", list(JOINING_OPS))
def test_mixing_cpu_and_meta_raises(op):
    with pytest.raises(RuntimeError, match=msg(op, "cpu", "meta")):
        JOINING_OPS[op](tb.zeros(2, 3), meta(2, 3))
    with pytest.raises(RuntimeError, match=msg(op, "cpu", "meta")):
        JOINING_OPS[op](meta(2, 3), tb.zeros(2, 3))


def test_where_with_cond_on_another_device():
    with pytest.raises(RuntimeError, match=msg("where", "cpu", "meta")):
        tb.where(meta(2, 3) > 0, tb.zeros(2, 3), tb.zeros(2, 3))
    with pytest.raises(RuntimeError, match=msg("where", "cpu", "meta")):
        tb.where(tb.zeros(2, 3) > 0, tb.zeros(2, 3), meta(2, 3))


def test_index_tensor_on_another_device():
    with pytest.raises(RuntimeError, match=msg("getitem", "cpu", "meta")):
        tb.zeros(2, 3)[tb.tensor([0, 1], device="meta")]


def test_cross_entropy_target_on_meta_logits_on_cpu():
    with pytest.raises(RuntimeError, match=msg("cross_entropy", "cpu", "meta")):
        tb.zeros(2, 3).cross_entropy(tb.tensor([0, 1], device="meta"))


def test_cross_entropy_target_on_cpu_logits_on_meta():
    with pytest.raises(RuntimeError, match=msg("cross_entropy", "cpu", "meta")):
        meta(2, 3).cross_entropy(tb.tensor([0, 1]))


def test_backward_grad_on_another_device():
    y = tb.ones(2, 3, requires_grad=True) * 2.0
    with pytest.raises(RuntimeError, match=msg("backward", "cpu", "meta")):
        y.backward(meta(2, 3))


def test_explicit_move_fixes_the_device_mismatch():
    a, b = tb.ones(2, 3, requires_grad=True), meta(2, 3)
    out = a.to("meta") * b
    assert out.device == "meta" and out.shape == (2, 3) and out.requires_grad
    out = tb.concat([a.to("meta"), b])
    assert out.device == "meta" and out.shape == (4, 3)


def test_meta_tensor_has_no_values():
    with pytest.raises(RuntimeError, match=msg(None, "meta", "no values")):
        meta(2, 3).numpy()
    with pytest.raises(RuntimeError, match=msg(None, "meta")):
        meta(1).item()


# ================================================================ unknown and missing devices
@pytest.mark.parametrize("make", [lambda: tb.zeros(2, device="tpu"), lambda: tb.tensor([1.0], device="tpu"),
                                  lambda: tb.ones(2).to("tpu"), lambda: tb.randn(2, generator=tb.Generator(0),
                                                                                  device="tpu")],
                         ids=["zeros", "tensor", "to", "randn"])
def test_unknown_device(make):
    with pytest.raises(ValueError, match=msg(None, "unknown device", "'tpu'", "'cpu'", "'cuda'", "'cuda:N'", "'meta'",
                                             "'strict'")):
        make()


@pytest.mark.parametrize("name", ["cuda:x", "cuda:", "cuda:-1"])
def test_malformed_gpu_name(name):
    with pytest.raises(ValueError, match=msg(None, "unknown device", repr(name), "'cuda:N'")):
        tb.zeros(2, device=name)


@pytest.fixture
def fresh_registry(monkeypatch):
    """The device registry without any GPU an earlier test set up, so 'cuda' is looked up again."""
    kept = {k: v for k, v in devices.BACKENDS.items() if not k.startswith("cuda")}
    monkeypatch.setattr(devices, "BACKENDS", kept)


def fake_cupy(count=None, error=None):
    """A stand-in CuPy module whose runtime reports `count` GPUs, or raises `error` when asked."""
    def get_device_count():
        if error:
            raise error
        return count
    return SimpleNamespace(cuda=SimpleNamespace(runtime=SimpleNamespace(getDeviceCount=get_device_count)))


GPU_MAKERS = {"zeros": lambda d: tb.zeros(2, device=d), "tensor": lambda d: tb.tensor([1.0], device=d),
              "to": lambda d: tb.ones(2).to(d), "randn": lambda d: tb.randn(2, generator=tb.Generator(0), device=d),
              "Module.to": lambda d: nn.Linear(2, 3, generator=tb.Generator(0)).to(d)}


@pytest.mark.parametrize("make", GPU_MAKERS.values(), ids=GPU_MAKERS.keys())
def test_cuda_without_cupy_says_how_to_install_it(make, monkeypatch, fresh_registry):
    monkeypatch.setitem(sys.modules, "cupy", None)  # `import cupy` now raises ImportError
    with pytest.raises(RuntimeError, match=msg(None, "'cuda:0'", "CuPy is not installed", "pip install -e '.[gpu]'",
                                               "cupy-cuda13x", "cupy-cuda12x")):
        make("cuda")


@pytest.mark.parametrize("make", GPU_MAKERS.values(), ids=GPU_MAKERS.keys())
def test_cuda_with_cupy_but_no_usable_gpu(make, monkeypatch, fresh_registry):
    error = RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(error=error))
    with pytest.raises(RuntimeError, match=msg(None, "'cuda:0'", "no usable CUDA GPU", "cudaErrorNoDevice",
                                               "nvidia-smi")):
        make("cuda")
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(count=0))
    with pytest.raises(RuntimeError, match=msg(None, "'cuda:0'", "no CUDA GPU")):
        make("cuda")


@pytest.mark.parametrize("count, listed", [(1, "1 CUDA GPU (cuda:0)"), (2, "2 CUDA GPUs (cuda:0, cuda:1)")])
def test_a_gpu_index_past_the_last_gpu(count, listed, monkeypatch, fresh_registry):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(count=count))
    with pytest.raises(RuntimeError, match=msg(None, "'cuda:7'", listed)):
        tb.ones(2).to("cuda:7")


@needs_gpu
def test_a_gpu_index_past_the_last_gpu_on_this_machine():
    import cupy
    count = cupy.cuda.runtime.getDeviceCount()
    with pytest.raises(RuntimeError, match=msg(None, f"'cuda:{count}'", f"{count} CUDA GPU", "(cuda:0")):
        tb.ones(2).to(f"cuda:{count}")


@needs_gpu
def test_mixing_cpu_and_cuda_in_one_op():
    cpu, gpu = tb.ones(2, 3), tb.ones(2, 3, device="cuda")
    for op in ("add", "mul", "matmul", "where", "concat"):
        with pytest.raises(RuntimeError, match=msg(op, "different devices", "cpu", "cuda:0", ".to(")):
            {"add": lambda: cpu + gpu, "mul": lambda: gpu * cpu, "matmul": lambda: gpu @ cpu.T,
             "where": lambda: tb.where(gpu > 0, cpu, gpu), "concat": lambda: tb.concat([cpu, gpu])}[op]()


def test_mixing_cpu_and_strict_in_one_op():
    cpu, other = tb.ones(2, 3), tb.ones(2, 3, device="strict")
    with pytest.raises(RuntimeError, match=msg("add", "different devices", "cpu (2, 3)", "strict (2, 3)", ".to(")):
        cpu + other
    with pytest.raises(RuntimeError, match=msg("matmul", "different devices", "cpu", "strict")):
        other @ cpu.T


def test_module_to_an_unknown_device_moves_nothing():
    layer = nn.Linear(2, 3, generator=tb.Generator(0))
    with pytest.raises(ValueError, match=msg(None, "unknown device", "'tpu'")):
        layer.to("tpu")
    assert layer.weight.device == "cpu"


def test_strict_arrays_refuse_every_implicit_host_read():
    from tinygrad_block.strict import HostConversionError
    a = tb.ones(2, 3, device="strict").data
    for what, read in [("np.asarray", lambda: np.asarray(a)), ("float()", lambda: float(a[0, 0])),
                       ("int()", lambda: int(a.max())), ("bool()", lambda: bool(a[0, 0])),
                       ("item()", lambda: a.item()), ("tolist()", lambda: a.tolist()), ("iterating", lambda: list(a))]:
        with pytest.raises(HostConversionError, match=msg(None, what, "float32", "(", "sync", "to_numpy")):
            read()
    with pytest.raises(TypeError, match=msg(None, "numpy array", "cannot join strict arrays")):
        a + np.ones((2, 3), np.float32)
