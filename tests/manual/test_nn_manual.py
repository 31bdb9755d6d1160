"""nn/ (layers, attention, the FFNs, the block) against the hand-derived pairs of tinygrad_block.manual: values
and every gradient agree to 1e-10 relative (float64), for every component and the whole block across its
variants, on every device (the manual pairs run on that device's arrays too).
"""
import numpy as np
import pytest
from conftest import LLAMA, random_block, rel_err

import tinygrad_block as tb
from tinygrad_block import manual, nn
from tinygrad_block.device import array_backend

TOL = 1e-10
B, L = 2, 5
BASE = LLAMA                # d_model=16, n_heads=4, n_kv_heads=2, d_ff=24
CONFIGS = {
    "mha": BASE.with_(n_kv_heads=4),
    "gqa2": BASE,
    "gqa4": BASE.with_(d_model=32, n_heads=8, n_kv_heads=2),
    "mqa": BASE.with_(n_kv_heads=1),
    "post_norm": BASE.with_(layout="post"),
    "layernorm_bias": BASE.with_(norm="layer", bias=True),
    "layernorm_no_bias": BASE.with_(norm="layer"),
    "gelu": BASE.with_(ffn="gelu"),
    "gelu_tanh_bias": BASE.with_(ffn="gelu_tanh", bias=True),
    "relu": BASE.with_(ffn="relu"),
    "swiglu_bias": BASE.with_(bias=True),
    "parallel": BASE.with_(layout="parallel"),
    "lora_qv": BASE.with_(lora_rank=2, lora_alpha=4.0),
    "lora_all": BASE.with_(lora_rank=3, lora_alpha=6.0, bias=True,
                           lora_targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")),
    "gpt2_like": BASE.with_(norm="layer", ffn="gelu_tanh", bias=True, rope=False, n_kv_heads=4),
    "bert_like": BASE.with_(norm="layer", layout="post", ffn="gelu", bias=True, rope=False, causal=False,
                            n_kv_heads=4),
    "layernorm_gelu_bias_theta_5e5": BASE.with_(norm="layer", ffn="gelu", bias=True, rope_theta=500000.0),
    "head_dim_wide": BASE.with_(head_dim=6),            # q: 16 -> 24, o: 24 -> 16 (Qwen3, Gemma: heads wider)
    "head_dim_narrow_bias": BASE.with_(head_dim=2, bias=True, layout="parallel"),
    "gemma_like": BASE.with_(norm="rms1p", ffn="geglu_tanh", head_dim=8),    # RMSNorm by 1 + w, GeGLU (tanh)
    "gemma_like_post": BASE.with_(norm="rms1p", ffn="geglu_tanh", layout="post", n_kv_heads=1),
}


def on(device, a):
    """A float64 numpy array as an array of `device` (numpy, strict or cupy): what the manual pairs run on."""
    return tb.tensor(a, dtype=tb.float64, device=device).data


def host(a):
    """A device array (or a dict of them) back as numpy, explicitly."""
    if isinstance(a, dict):
        return {k: host(v) for k, v in a.items()}
    return array_backend(a).to_numpy(a)


def autograd_run(block, x_np, dout_np, offset=0, device="cpu"):
    x = tb.tensor(x_np, requires_grad=True, device=device)
    out = block(x, offset)
    out.backward(tb.tensor(dout_np, device=device))
    grads = {n: p.grad.numpy() for n, p in block.named_parameters() if p.grad is not None}
    return out.numpy(), x.grad.numpy(), grads


def inputs(cfg, seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((B, L, cfg.d_model)), rng.standard_normal((B, L, cfg.d_model))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_block_autograd_equals_manual(name, device):
    cfg = CONFIGS[name]
    block, (x, dout) = random_block(cfg, device=device), inputs(cfg)
    offset = 3 if cfg.rope else 0
    out, dx, grads = autograd_run(block, x, dout, offset, device)
    params = {n: p.data for n, p in block.named_parameters()}                  # the device's own arrays
    m_out, cache = manual.block_forward(on(device, x), params, cfg, offset)
    m_dx, m_grads = manual.block_backward(on(device, dout), cache)
    m_out, m_dx, m_grads = host(m_out), host(m_dx), host(m_grads)
    assert rel_err(out, m_out) <= TOL and rel_err(dx, m_dx) <= TOL
    assert set(grads) == set(m_grads)
    if cfg.lora_rank:
        assert all(n.endswith(("lora_A", "lora_B")) for n in grads)
    for n in grads:
        if n == "attn.k_proj.bias" and not cfg.rope:   # exactly zero: softmax ignores a shift shared by all keys
            assert np.abs(grads[n]).max() < 1e-12 and np.abs(m_grads[n]).max() < 1e-12
            continue
        assert rel_err(grads[n], m_grads[n]) <= TOL, n


# ---------------------------------------------------------------- components
def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def backprop(fn, *arrays, device="cpu"):
    """Autograd output and gradients of sum(fn(*tensors) * dout) for float64 arrays; dout random."""
    ts = [tb.tensor(a, requires_grad=True, device=device) for a in arrays]
    out = fn(*ts)
    dout = rand(*out.shape, seed=9)
    out.backward(tb.tensor(dout, device=device))
    return out.numpy(), dout, [None if t.grad is None else t.grad.numpy() for t in ts]


def close(a, b):
    """Relative error <= TOL; a manual result on a device array is read back to the host first."""
    a, b = (x if isinstance(x, np.ndarray) else host(x) for x in (a, b))
    assert rel_err(a, b) <= TOL


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("lora", [False, True])
def test_linear(bias, lora, device):
    x, w, b, A, Bm = rand(B, L, 6), rand(5, 6, seed=1), rand(5, seed=2), rand(2, 6, seed=3), rand(5, 2, seed=4)
    scale = 1.5

    def f(x, w, b, A, Bm):
        y = x @ w.T + (b if bias else 0.0)
        return y + (x @ A.T) @ Bm.T * scale if lora else y
    out, dout, (dx, dw, db, dA, dB) = backprop(f, x, w, b, A, Bm, device=device)
    x, w, b, A, Bm, dout = (on(device, a) for a in (x, w, b, A, Bm, dout))
    m_out, cache = manual.linear_forward(x, w, b if bias else None, manual.Adapter(A, Bm, scale) if lora else None,
                                         frozen=lora)
    m_dx, g = manual.linear_backward(dout, cache)
    close(out, m_out), close(dx, m_dx)
    if lora:                                            # base frozen: only the adapters get gradients
        assert set(g) == {"lora_A", "lora_B"}
        close(dA, g["lora_A"]), close(dB, g["lora_B"])
    else:
        close(dw, g["weight"])
        if bias:
            close(db, g["bias"])


def test_rmsnorm_and_layernorm(device):
    x, w, b = rand(B, L, 8), 1 + 0.1 * rand(8, seed=1), rand(8, seed=2)
    xd, wd, bd = (on(device, a) for a in (x, w, b))                 # the manual pairs' inputs, on the device
    rmsnorm = nn.RMSNorm(8, 1e-5, dtype=tb.float64, device=device)
    out, dout, (dx, dw) = backprop(lambda x, w: rmsnorm(x) * w, x, w, device=device)
    m_out, cache = manual.rmsnorm_forward(xd, wd, 1e-5)
    m_dx, g = manual.rmsnorm_backward(on(device, dout), cache)
    close(out, m_out), close(dx, m_dx), close(dw, g["weight"])

    def layernorm(x, w, b):
        centered = x - x.mean(-1, keepdims=True)
        return centered * ((centered * centered).mean(-1, keepdims=True) + 1e-5).rsqrt() * w + b
    out, dout, (dx, dw, db) = backprop(layernorm, x, w, b, device=device)
    m_out, cache = manual.layernorm_forward(xd, wd, bd, 1e-5)
    m_dx, g = manual.layernorm_backward(on(device, dout), cache)
    close(out, m_out), close(dx, m_dx), close(dw, g["weight"]), close(db, g["bias"])


@pytest.mark.parametrize("name, fn, pair", [
    ("softmax", lambda t: t.softmax(-1), (manual.softmax_forward, manual.softmax_backward)),
    ("silu", lambda t: t.silu(), (manual.silu_forward, manual.silu_backward)),
    ("gelu", lambda t: t.gelu(), (manual.gelu_forward, manual.gelu_backward)),
    ("gelu_tanh", lambda t: t.gelu("tanh"), (manual.gelu_tanh_forward, manual.gelu_tanh_backward)),
])
def test_activations(name, fn, pair, device):
    z = rand(B, L, 7)
    out, dout, (dz,) = backprop(fn, z, device=device)
    m_out, cache = pair[0](on(device, z))
    close(out, m_out), close(dz, pair[1](on(device, dout), cache))


def projections(module, names) -> list:
    """The manual Linear of each of `module`'s projections `names`: its weight, bias and LoRA adapter, as the
    device's own arrays."""
    def linear(p):
        adapter = manual.Adapter(p.lora_A.data, p.lora_B.data, p.lora_scale) if hasattr(p, "lora_A") else None
        return manual.Linear(p.weight.data, p.bias.data if p.bias is not None else None, adapter)
    return [linear(getattr(module, name)) for name in names]


def test_rope(device):
    d_head, theta, offset = 8, 10000.0, 4
    x = rand(B, 3, L, d_head)
    cos, sin = nn.rope_tables(offset + L, d_head, theta, tb.float64, device)
    out, dout, (dx,) = backprop(lambda t: nn.apply_rope(t, cos[offset:], sin[offset:]), x, device=device)
    m_out, cache = manual.rope_forward(on(device, x), theta, offset)
    close(out, m_out), close(dx, manual.rope_backward(on(device, dout), cache))


@pytest.mark.parametrize("name", ["gqa2", "swiglu_bias", "gelu", "relu", "lora_all"])
def test_ffn(name, device):
    cfg = CONFIGS[name]
    block = random_block(cfg, device=device)
    x = rand(B, L, cfg.d_model)
    out, dout, (dx,) = backprop(block.ffn, x, device=device)
    x, dout = on(device, x), on(device, dout)
    frozen = bool(cfg.lora_rank)
    if cfg.ffn == "swiglu":
        m_out, cache = manual.swiglu_forward(x, *projections(block.ffn, ("gate_proj", "up_proj", "down_proj")),
                                             frozen=frozen)
        m_dx, g = manual.swiglu_backward(dout, cache)
    else:
        m_out, cache = manual.ffn_forward(x, *projections(block.ffn, ("up_proj", "down_proj")), cfg.ffn,
                                          frozen=frozen)
        m_dx, g = manual.ffn_backward(dout, cache)
    close(out, m_out), close(dx, m_dx)
    for n, p in block.ffn.named_parameters():
        if p.grad is not None:
            proj, leaf = n.split(".")
            close(p.grad.numpy(), g[proj][leaf])


@pytest.mark.parametrize("name", ["mha", "gqa2", "gqa4", "mqa", "bert_like", "lora_all", "head_dim_wide"])
def test_attention(name, device):
    cfg = CONFIGS[name]
    block = random_block(cfg, device=device)
    x, offset = rand(B, L, cfg.d_model), 2
    out, dout, (dx,) = backprop(lambda t: block.attn(t, offset), x, device=device)
    x, dout = on(device, x), on(device, dout)
    m_out, cache = manual.attention_forward(x, *projections(block.attn, ("q_proj", "k_proj", "v_proj", "o_proj")),
                                            cfg.n_heads, cfg.n_kv_heads, cfg.causal,
                                            cfg.rope_theta if cfg.rope else None, offset, frozen=bool(cfg.lora_rank))
    m_dx, g = manual.attention_backward(dout, cache)
    close(out, m_out), close(dx, m_dx)
    for n, p in block.attn.named_parameters():
        if p.grad is not None and n != "k_proj.bias":
            proj, leaf = n.split(".")
            close(p.grad.numpy(), g[proj][leaf])
