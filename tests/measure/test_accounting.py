"""accounting's closed forms against the engine (parameters of built modules, FLOPs counted by count_flops on
the shape-only 'meta' device and on numpy), and the figures commonly quoted for these models: reproduced where
right, pinned to the exact value and flagged in a comment where the quoted figure differs."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinygrad_block as tb
from tinygrad_block import accounting as acc
from tinygrad_block import measure, nn
from tinygrad_block.counting import count_flops
from tinygrad_block.nn.config import FFNS, NORMS, PROJECTIONS

P = nn.PRESETS
GiB, KiB = 2 ** 30, 2 ** 10
H100_BF16 = 990e12          # dense bf16 peak as usually quoted, FLOP/s


# ---------------------------------------------------------------- measuring
def counted(fc) -> tuple[int, int, int, int]:
    """(forward matmul, forward all, backward matmul, backward all) FLOPs of a counter."""
    return (fc.total("forward", matmul_only=True), fc.total("forward"),
            fc.total("backward", matmul_only=True), fc.total("backward"))


def count_block(cfg, B: int, L: int, *, input_requires_grad: bool = True, device: str = "meta"):
    """Run one block forward and backward (upstream gradient on the output) under count_flops."""
    block = nn.TransformerBlock(cfg, generator=tb.Generator(0), device=device)
    x = tb.zeros(B, L, cfg.d_model, device=device, requires_grad=input_requires_grad)
    with count_flops() as fc:
        out = block(x)
        if out.requires_grad:   # LoRA on frozen inputs can leave nothing to differentiate
            out.backward(tb.zeros(B, L, cfg.d_model, device=device))
    return counted(fc)


def count_model(cfg, B: int, L: int, device: str = "meta"):
    model = nn.LM(cfg, generator=tb.Generator(0), device=device)
    ids = tb.zeros(B, L, dtype=tb.int64, device=device)
    with count_flops() as fc:
        model(ids).backward(tb.zeros(B, L, cfg.vocab_size, device=device))
    return counted(fc)


def closed_block(cfg, B: int, L: int, *, input_requires_grad: bool = True):
    return (acc.block_forward_flops(cfg, L, B), acc.block_forward_flops(cfg, L, B, matmul_only=False),
            acc.block_backward_flops(cfg, L, B, input_requires_grad=input_requires_grad),
            acc.block_backward_flops(cfg, L, B, matmul_only=False, input_requires_grad=input_requires_grad))


def closed_model(cfg, B: int, L: int):
    return (acc.model_forward_flops(cfg, L, B), acc.model_forward_flops(cfg, L, B, matmul_only=False),
            acc.model_backward_flops(cfg, L, B), acc.model_backward_flops(cfg, L, B, matmul_only=False))


SCALINGS = [(), ("linear", 4.0), ("llama3", 8.0, 1.0, 4.0, 16)]   # RoPE scaling: constant tables, free


@st.composite
def configs(draw, max_layers: int = 1):
    """Small configs over every variant field: norms (RMSNorm by 1 + w too), placements, FFNs (GeGLU too), biases,
    RoPE (scaled or not), masks, GQA, LoRA, QK-norm (RMSNorm configs), heads of d_model / n_heads or of their own
    head_dim, scaled embeddings."""
    n_kv, group, rope = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.booleans())
    d_head = draw(st.integers(1, 3)) * 2 if rope else draw(st.integers(1, 5))
    head_dim = draw(st.sampled_from([None, d_head]))                 # given: d_model is drawn on its own
    targets = draw(st.lists(st.sampled_from(PROJECTIONS), unique=True, max_size=4))
    norm = draw(st.sampled_from(list(NORMS)))
    return nn.BlockConfig(
        d_model=draw(st.integers(1, 12)) if head_dim else n_kv * group * d_head, head_dim=head_dim,
        n_heads=n_kv * group, n_kv_heads=n_kv, d_ff=draw(st.integers(1, 20)),
        norm=norm, layout=draw(st.sampled_from(["pre", "post", "parallel"])),
        ffn=draw(st.sampled_from(list(FFNS))), bias=draw(st.booleans()), scale_embeddings=draw(st.booleans()),
        rope=rope, causal=draw(st.booleans()), max_seq_len=8,
        vocab_size=draw(st.integers(1, 11)), n_layers=draw(st.integers(1, max_layers)),
        tie_embeddings=draw(st.booleans()), lora_rank=draw(st.integers(0, 3)) * bool(targets),
        lora_targets=tuple(targets) or ("q_proj", "v_proj"), qk_norm=norm == "rms" and draw(st.booleans()),
        rope_scaling=draw(st.sampled_from(SCALINGS)) if rope else ())


# ---------------------------------------------------------------- parameters
PUBLISHED = {"llama2-7b": 6_738_415_616, "llama2-13b": 13_015_864_320, "llama2-70b": 68_976_648_192,
             "llama3-8b": 8_030_261_248, "llama3-70b": 70_553_706_496, "mistral-7b": 7_241_732_096,
             "tinyllama-1.1b": 1_100_048_384, "smollm-135m": 134_515_008, "gpt2-small": 124_439_808}


@pytest.mark.parametrize("name", PUBLISHED)
def test_total_params_equal_the_published_counts_and_the_built_model(name):
    cfg = P[name]
    assert acc.total_params(cfg) == PUBLISHED[name]
    assert nn.LM(cfg, generator=tb.Generator(0), device="meta").num_parameters() == PUBLISHED[name]


def _row(name: str) -> str:
    """The breakdown row of a block parameter's dotted name."""
    if "lora_" in name:
        return "lora"
    if name.startswith("norm"):
        return "norms"
    if name.startswith(("attn.q_norm.", "attn.k_norm.")):
        return "qk_norms"
    if name.endswith("bias"):
        return "biases"
    proj = name.split(".")[1]
    return {"q_proj": "W_Q", "k_proj": "W_K", "v_proj": "W_V", "o_proj": "W_O", "gate_proj": "W_gate",
            "up_proj": "W_up", "down_proj": "W_down"}[proj]


def built_breakdown(cfg) -> dict[str, int]:
    rows = {}
    for name, p in nn.TransformerBlock(cfg, generator=tb.Generator(0), device="meta").named_parameters():
        rows[_row(name)] = rows.get(_row(name), 0) + p.size
    return rows


QWEN3ISH = P["llama3-8b"].with_(qk_norm=True, qkv_bias=True, rope_scaling=("llama3", 8.0, 1.0, 4.0, 8192),
                                name="llama3-8b+qk_norm")


@pytest.mark.parametrize("cfg", [*P.values(), P["gpt2-small"].with_(lora_rank=4, lora_targets=PROJECTIONS),
                                 P["tiny"].with_(norm="layer", ffn="relu", lora_rank=2), QWEN3ISH,
                                 P["tiny"].with_(qk_norm=True, lora_rank=2, name="tiny+qk_norm+lora")],
                         ids=lambda c: c.name)
def test_block_breakdown_rows_are_the_built_blocks_parameters_in_order(cfg):
    rows = acc.block_param_breakdown(cfg)
    assert rows == built_breakdown(cfg)
    order = ["W_Q", "W_K", "W_V", "W_O", "W_gate", "W_up", "W_down", "biases", "norms", "qk_norms", "lora"]
    assert list(rows) == [k for k in order if k in rows]
    assert acc.params_per_block(cfg) == sum(rows.values())


@settings(max_examples=200)
@given(configs(max_layers=2))
def test_breakdowns_match_built_modules_for_random_configs(cfg):
    rows = acc.block_param_breakdown(cfg)       # 'lora' stays, as 0, when no target is in this block
    assert {k: n for k, n in rows.items() if n} == built_breakdown(cfg)
    assert ("lora" in rows) == bool(cfg.lora_rank) and ("biases" in rows) == cfg.bias
    assert rows.get("qk_norms", 0) == 2 * cfg.d_head * cfg.qk_norm
    model = nn.LM(cfg, generator=tb.Generator(0), device="meta")
    assert acc.total_params(cfg) == model.num_parameters()
    rows = acc.model_param_breakdown(cfg)
    assert ("position_embedding" in rows) == (not cfg.rope)
    assert rows["lm_head"] == (0 if cfg.tie_embeddings else model.lm_head.weight.size)
    assert rows["final_norm"] == sum(p.size for p in model.norm.parameters())


def test_llama_block_formula():
    """2 d^2 + 2 d n_kv d_head + 3 d d_ff + 2 d (the usual space-complexity formula)."""
    for cfg in (P["llama2-7b"], P["llama2-70b"], P["llama3-8b"], P["tinyllama-1.1b"], P["smollm-135m"]):
        d, kv = cfg.d_model, cfg.n_kv_heads * cfg.d_head
        assert acc.params_per_block(cfg) == 2 * d * d + 2 * d * kv + 3 * d * cfg.d_ff + 2 * d


def test_gpt2_block_has_biases_and_layernorm_shifts():
    cfg, d = P["gpt2-small"], 768
    assert acc.block_param_breakdown(cfg) == {"W_Q": d * d, "W_K": d * d, "W_V": d * d, "W_O": d * d,
                                              "W_up": 4 * d * d, "W_down": 4 * d * d, "biases": 4 * d + 4 * d + d,
                                              "norms": 4 * d}
    assert acc.params_per_block(cfg) == 7_087_872
    assert acc.model_param_breakdown(cfg) == {"embedding": 50257 * d, "position_embedding": 1024 * d,
                                              "blocks": 12 * 7_087_872, "final_norm": 2 * d, "lm_head": 0}


def test_qk_norm_adds_two_head_gains_per_block_counted_as_attention():
    """Qwen3's q_norm and k_norm: d_head each per block, in the attention sublayer (the measured shares read the
    built block's 'attn' submodule); RoPE scaling adds no parameter."""
    cfg = P["llama3-8b"].with_(qk_norm=True)
    assert acc.params_per_block(cfg) - acc.params_per_block(P["llama3-8b"]) == 2 * 128
    assert acc.total_params(cfg) == 8_030_261_248 + 32 * 2 * 128
    assert acc.total_params(cfg.with_(rope_scaling=("llama3", 8.0, 1.0, 4.0, 8192))) == acc.total_params(cfg)
    block, _, submodules = measure.measured_params(cfg)
    assert block["qk_norms"] == [(128,), (128,)]
    attention, ffn = acc.attention_ffn_shares(cfg)
    per_block = sum(submodules.values())
    assert (attention, ffn) == (submodules["attn"] / per_block, submodules["ffn"] / per_block)
    assert submodules["attn"] == 2 * 4096 * 4096 + 2 * 4096 * 1024 + 2 * 128


def test_shares_of_a_block():
    attn, ffn = acc.attention_ffn_shares(P["llama2-7b"])
    assert (attn, ffn) == (67_108_864 / 202_383_360, 135_266_304 / 202_383_360)
    assert 1 - attn - ffn == pytest.approx(8192 / 202_383_360, rel=1e-9)                    # the two norms' gains
    attn, ffn = acc.attention_ffn_shares(P["gpt2-small"])          # biases go with their projections
    assert (attn, ffn) == ((4 * 768 * 768 + 4 * 768) / 7_087_872, (8 * 768 * 768 + 3072 + 768) / 7_087_872)


# ---------------------------------------------------------------- FLOPs: one block
@pytest.mark.parametrize("name", P)
@pytest.mark.parametrize("B, L", [(1, 1), (2, 7), (1, None)])
def test_block_counts_equal_the_closed_forms_for_every_preset(name, B, L):
    """None: the preset's full context (32k for Mistral; shapes only, so it costs no more than 7 tokens)."""
    cfg = P[name]
    L = L or cfg.max_seq_len
    fwd_mm, fwd, bwd_mm, bwd = count_block(cfg, B, L)
    assert (fwd_mm, fwd, bwd_mm, bwd) == closed_block(cfg, B, L)
    assert bwd_mm == 2 * fwd_mm
    assert count_block(cfg, B, L, input_requires_grad=False) == closed_block(cfg, B, L, input_requires_grad=False)


@pytest.mark.parametrize("name", ["llama2-7b", "gpt2-small", "bert-base", "tiny"])
def test_block_counts_with_lora_equal_the_closed_forms(name):
    for targets in (("q_proj", "v_proj"), PROJECTIONS, ("down_proj",)):
        cfg = P[name].with_(lora_rank=8, lora_targets=targets)
        for grad in (True, False):
            assert count_block(cfg, 2, 5, input_requires_grad=grad) == \
                closed_block(cfg, 2, 5, input_requires_grad=grad)


@settings(max_examples=200)
@given(configs(), st.integers(1, 3), st.integers(1, 8), st.booleans())
def test_block_counts_equal_the_closed_forms_for_random_configs(cfg, B, L, input_requires_grad):
    assert count_block(cfg, B, L, input_requires_grad=input_requires_grad) == \
        closed_block(cfg, B, L, input_requires_grad=input_requires_grad)


@given(configs(), st.integers(1, 3), st.integers(1, 8))
def test_backward_matmuls_are_twice_the_forward_when_everything_trains(cfg, B, L):
    cfg = cfg.with_(lora_rank=0)
    fwd_mm, _, bwd_mm, _ = count_block(cfg, B, L)
    assert bwd_mm == 2 * fwd_mm == 2 * acc.block_forward_flops(cfg, L, B)


def test_matmul_closed_form_by_hand():
    """2 B L (weights) + 4 B n_heads L^2 d_head, and which backward matmuls are skipped."""
    cfg, B, L = P["llama3-8b"], 2, 100
    d, kv, f, N = 4096, 1024, 14336, 200
    weights = 2 * d * d + 2 * d * kv + 3 * d * f
    fwd = 2 * N * weights + 4 * B * 32 * L * L * 128
    assert acc.block_forward_flops(cfg, L, B) == fwd
    assert acc.block_backward_flops(cfg, L, B, input_requires_grad=False) == 2 * fwd   # norm1's gain trains
    post = cfg.with_(layout="post")              # q, k, v read x directly: their dX is skipped
    assert acc.block_backward_flops(post, L, B, input_requires_grad=False) == 2 * fwd - 2 * N * d * (d + 2 * kv)
    lora = cfg.with_(lora_rank=8)                        # frozen W: no dW; adapters A (8, d) and B (d or kv, 8)
    adapters = 8 * (d + d) + 8 * (d + kv)
    assert acc.block_forward_flops(lora, L, B) == fwd + 2 * N * adapters
    assert acc.block_backward_flops(lora, L, B) == 2 * (fwd + 2 * N * adapters) - 2 * N * weights


@given(configs(), st.integers(1, 2), st.integers(1, 5), st.booleans())
def test_numpy_counts_equal_meta_counts(cfg, B, L, input_requires_grad):
    on_cpu = count_block(cfg, B, L, input_requires_grad=input_requires_grad, device="cpu")
    assert on_cpu == count_block(cfg, B, L, input_requires_grad=input_requires_grad)
    assert on_cpu == closed_block(cfg, B, L, input_requires_grad=input_requires_grad)


def test_elementwise_counts_by_hand_on_the_tiny_block():
    """One forward of `tiny` (RMSNorm, GQA 4/2, RoPE, causal, SwiGLU) at B=2, L=5, term by term."""
    B, L, d, H, d_kv, f, d_head = 2, 5, 64, 4, 32, 172, 16
    N, T, R = B * L, B * H * L * L, B * H * L
    rms = N * (d + (d - 1) + 4 + d + d)     # x*x, its sum, then /d +eps sqrt 1/ per row, x * rstd, * gain
    rope = N * (d + d_kv) * 3       # per pair (x1, x2): x1 c, x2 s, x2 c, x1 s, one difference, one sum: 3 per element
    scale = N * d                           # q / sqrt(d_head)
    mask = T                                # scores + mask (the mask itself is a constant: free)
    softmax = (T - R) + T + T + (T - R) + T     # row max, s - max, exp, row sum, division
    sigmoid = 7 * N * f                     # x >= 0, -x, where, exp, where, e + 1, division
    ffn = sigmoid + N * f + N * f           # silu's x * sigmoid(x), the gate's silu * up
    residuals = 2 * N * d                   # x + attn, h + ffn
    matmul = 2 * N * (2 * d * d + 2 * d * d_kv + 3 * d * f) + 4 * B * H * L * L * d_head
    by_hand = matmul + 2 * rms + rope + scale + mask + softmax + ffn + residuals
    assert acc.block_forward_flops(P["tiny"], L, B, matmul_only=False) == by_hand
    assert count_block(P["tiny"], B, L)[1] == by_hand


def test_qk_norm_counts_by_hand_on_the_tiny_block():
    """QK-norm on `tiny` at B=2, L=5: RMSNorm's rule per head row of d_head = 16, N H = 40 rows of q and
    N H_kv = 20 of k. Forward per row: x*x d, sum d - 1, /d +eps sqrt 1/ (4), x * rstd d, * gain d. Backward
    per row 8 d + 5 to x; each gain's gradient g * x_hat summed over its rows: 2 rows d - d. RoPE scaling
    changes no count."""
    B, L, d_head, H, H_kv = 2, 5, 16, 4, 2
    rows_q, rows_k = B * L * H, B * L * H_kv
    fwd = (rows_q + rows_k) * (d_head + (d_head - 1) + 4 + d_head + d_head)
    bwd = (rows_q + rows_k) * (8 * d_head + 5) + (2 * rows_q * d_head - d_head) + (2 * rows_k * d_head - d_head)
    plain, qk = closed_block(P["tiny"], B, L), closed_block(P["tiny"].with_(qk_norm=True), B, L)
    assert (qk[0] - plain[0], qk[1] - plain[1], qk[2] - plain[2], qk[3] - plain[3]) == (0, fwd, 0, bwd)
    for cfg in (P["tiny"].with_(qk_norm=True), P["tiny"].with_(qk_norm=True, rope_scaling=("linear", 2.0))):
        assert count_block(cfg, B, L) == qk
        assert count_block(cfg, B, L, device="cpu") == qk


@pytest.mark.parametrize("cfg", [QWEN3ISH, P["tiny"].with_(qk_norm=True, n_kv_heads=1, layout="post"),
                                 P["tiny"].with_(qk_norm=True, layout="parallel", n_experts=4, experts_top_k=2),
                                 P["tiny"].with_(qk_norm=True, layout="deep", n_layers=3)],
                         ids=lambda c: f"{c.name}-{c.layout}-{c.n_experts}")
def test_qk_norm_counts_equal_the_closed_forms(cfg):
    """Blocks, LoRA-frozen blocks and whole models with QK-norm, and a decode step with a KV cache."""
    for grad in (True, False):
        assert count_block(cfg, 2, 5, input_requires_grad=grad) == closed_block(cfg, 2, 5, input_requires_grad=grad)
    lora = cfg.with_(lora_rank=2, lora_targets=("k_proj", "o_proj"))
    assert count_block(lora, 2, 5, input_requires_grad=False) == closed_block(lora, 2, 5, input_requires_grad=False)
    assert count_model(cfg, 2, 3) == closed_model(cfg, 2, 3)
    prefill, decode = measure.generation_phases(cfg, 6, 2)
    assert (prefill.flops, decode.flops) == (acc.model_forward_flops(cfg, 6, 2, matmul_only=False),
                                             acc.decode_flops(cfg, 7, 2, matmul_only=False))


def test_elementwise_counts_by_hand_on_a_gpt2_shaped_block():
    """One forward of `tiny` made GPT-2-shaped (LayerNorm with shift, biases, MHA, no RoPE, causal, GELU-tanh)
    at B=2, L=5: the subtractions (x - mean, s - max, tanh's - 1) cost one op per element each."""
    cfg = P["tiny"].with_(n_kv_heads=4, norm="layer", bias=True, rope=False, ffn="gelu_tanh")
    B, L, d, H, f, d_head = 2, 5, 64, 4, 172, 16
    N, T, R = B * L, B * H * L * L, B * H * L
    layer = N * (d + d + d + d + 3 + d + d + d)    # mean (sum, /d), x - mean, c*c, mean, +eps sqrt 1/, c * rstd, *g, +b
    biases = N * (4 * d + f + d)            # + b after q, k, v, o, up, down
    scale, mask = N * d, T                  # q / sqrt(d_head); scores + mask
    softmax = (T - R) + T + T + (T - R) + T     # row max, s - max, exp, row sum, division
    z = 5 * N * f                           # x*x, *x, *0.044715, x +, *sqrt(2/pi)
    tanh = N * f + 7 * N * f + N * f + N * f    # 2z, sigmoid (7), *2, -1
    gelu = z + tanh + 3 * N * f             # + 1, x * 0.5, the product
    residuals = 2 * N * d
    matmul = 2 * N * (4 * d * d + 2 * d * f) + 4 * B * H * L * L * d_head
    by_hand = matmul + 2 * layer + biases + scale + mask + softmax + gelu + residuals
    assert acc.block_forward_flops(cfg, L, B, matmul_only=False) == by_hand
    assert count_block(cfg, B, L)[1] == by_hand


# ---------------------------------------------------------------- FLOPs: the composites' table
ROWS = [(3, 8), (2, 6)]     # two shapes of (rows, elements per row): together they pin both the per-element and
                            # the per-row rate; even widths, as RoPE's halves need


def run_composite(name: str, R: int, D: int, *, wants: str = "x", shift: bool = False) -> tuple[int, int]:
    """(forward, backward) FLOPs of composite `name` on x (R, D) under count_flops; `wants` names the one thing
    that asks for a gradient: 'x', or a norm's 'gain' or 'shift' (a LayerNorm has a shift with `shift`)."""
    g = tb.Generator(0)
    x = tb.randn(R, D, generator=g, requires_grad=wants == "x")
    cos, sin = tb.randn(R, D, generator=g), tb.randn(R, D, generator=g)     # RoPE's tables: constants
    norm = nn.RMSNorm(D) if name == "rmsnorm" else nn.LayerNorm(D, bias=shift)
    for key, p in norm.named_parameters():
        p.requires_grad = key == {"gain": "weight", "shift": "bias"}.get(wants)
    run = {"sigmoid": x.sigmoid, "silu": x.silu, "relu": x.relu, "gelu": x.gelu, "gelu_tanh": lambda: x.gelu("tanh"),
           "softmax": x.softmax, "rope": lambda: nn.attention.apply_rope(x, cos, sin), "rmsnorm": lambda: norm(x),
           "layernorm": lambda: norm(x)}[name]
    with count_flops() as fc:
        run().backward(tb.ones(R, D))
    return fc.total("forward"), fc.total("backward")


@pytest.mark.parametrize("name,part", [(n, p) for n, parts in acc.COMPOSITE_FLOPS.items() for p in parts])
def test_composite_flops_table_is_what_the_counter_counts(name, part):
    """Each entry of accounting.COMPOSITE_FLOPS, counted on two shapes: per element * R D + per row * R, and a
    parameter's gradient, summed over the R rows, D adds fewer."""
    per_element, per_row = acc.COMPOSITE_FLOPS[name][part]
    for R, D in ROWS:
        want = per_element * R * D + per_row * R
        if part == "forward":
            got = run_composite(name, R, D)[0]
        elif part == "backward":
            got = run_composite(name, R, D)[1]
        elif part == "shift forward":
            got = run_composite(name, R, D, shift=True)[0] - run_composite(name, R, D)[0]
        elif part in ("gain backward", "shift backward"):
            got, want = run_composite(name, R, D, wants=part.split()[0], shift=True)[1], want - D
        else:
            pytest.fail(f"{name}: no test runs the table's part {part!r}")
        assert got == want, f"{name} {part} on ({R}, {D}): counted {got}, the table gives {want}"
        assert acc.composite_flops(name, part, R * D, R) == per_element * R * D + per_row * R


# ---------------------------------------------------------------- FLOPs: whole models
@pytest.mark.parametrize("name", P)
def test_model_counts_equal_the_closed_forms_for_every_preset(name):
    for cfg in (P[name], P[name].with_(lora_rank=4)):
        assert count_model(cfg, 2, 3) == closed_model(cfg, 2, 3)


@settings(max_examples=200)
@given(configs(max_layers=2), st.integers(1, 3), st.integers(1, 8))
def test_model_counts_equal_the_closed_forms_for_random_configs(cfg, B, L):
    assert count_model(cfg, B, L) == closed_model(cfg, B, L)


def test_model_counts_on_numpy_equal_the_closed_forms():
    for cfg in (P["tiny"], P["tiny"].with_(rope=False, tie_embeddings=True, norm="layer", bias=True)):
        assert count_model(cfg, 2, 6, device="cpu") == closed_model(cfg, 2, 6)


def test_model_matmuls_are_the_blocks_plus_the_head():
    cfg, B, L = P["llama2-7b"], 1, 4096
    head = 2 * B * L * 4096 * 32000
    assert acc.model_forward_flops(cfg, L, B) == 32 * acc.block_forward_flops(cfg, L, B) + head
    assert acc.model_backward_flops(cfg, L, B) == 2 * acc.model_forward_flops(cfg, L, B)


def test_flops_per_token_times_tokens_is_the_block_forward():
    for cfg in (*P.values(), P["tiny"].with_(lora_rank=3)):
        per_token = acc.flops_per_token(cfg, 300)
        assert per_token["total"] == per_token["static"] + per_token["attention"]
        assert per_token["attention"] == 4 * 300 * cfg.d_model
        assert 2 * 300 * per_token["total"] == acc.block_forward_flops(cfg, 300, 2)


# ---------------------------------------------------------------- rules of thumb
def test_rules_of_thumb():
    assert acc.training_flops(70e9, 1.4e12) == 588 * 10 ** 21
    assert acc.chinchilla_tokens(70e9) == 1_400_000_000_000
    assert acc.training_days(86400 * 1e15, 10, 1e14, 0.5) == pytest.approx(2.0)
    assert acc.inference_tokens_per_second(1e9, 1e12, 0.5) == pytest.approx(250.0)


def test_kv_cache_and_training_memory_rows():
    cfg = P["llama2-70b"]
    assert acc.kv_cache_bytes(cfg, 4096) == 2 * 80 * 4096 * 8 * 128 * 2 == 1_342_177_280
    mem = acc.training_memory(cfg, 4096)
    assert mem["total"] == mem["parameters"] + mem["gradients"] + mem["optimizer"] + mem["activations"]
    assert mem["kv_cache"] == acc.kv_cache_bytes(cfg, 4096)      # shown, not added: K and V are activations
    fp32 = acc.training_memory(cfg, 4096, bytes_per_element=4)   # 16 = 4 weights + 4 grads + 4 m + 4 v
    assert fp32["parameters"] + fp32["gradients"] + fp32["optimizer"] == 16 * 68_976_648_192
    with pytest.raises(ValueError, match="optimizer_bytes_per_param=6"):
        acc.training_memory(cfg, 4096, bytes_per_element=4, optimizer_bytes_per_param=6)


def test_lora_trains_only_the_adapters_embedding_norm_and_head():
    cfg = P["llama2-7b"].with_(lora_rank=8)
    model = nn.LM(cfg, generator=tb.Generator(0), device="meta")
    trained = sum(p.size for p in model.parameters() if p.requires_grad)
    mem = acc.training_memory(cfg, 128)
    assert mem["gradients"] == 2 * trained and mem["optimizer"] == 12 * trained
    assert mem["parameters"] == 2 * model.num_parameters()


# ---------------------------------------------------------------- figures as commonly quoted, and the exact ones
def test_llama2_7b_block_params_and_static_flops_per_token():
    """Commonly quoted: ~202 M parameters per block; 4 * 33.5 M + 3 * 90 M ~ 404 M FLOPs per token."""
    cfg = P["llama2-7b"]
    assert acc.params_per_block(cfg) == 202_383_360
    assert acc.flops_per_token(cfg, 4096)["static"] == 404_750_336             # "about 404.75 M"
    assert acc.block_forward_flops(cfg, 1) - 4 * 4096 == 404_750_336          # one token attending to itself


def test_llama2_7b_ffn_share():
    """Commonly quoted: the FFN holds ~66.8 % (~67 %), attention ~33.2 % (~33 %) of parameters and FLOPs."""
    attn, ffn = acc.attention_ffn_shares(P["llama2-7b"])
    assert round(100 * ffn, 1) == 66.8 and round(100 * attn, 1) == 33.2


def test_llama3_70b_shares_are_not_25_75():
    """Llama-3-70B is often said to tilt to ~25 % / 75 %: it is 17.6 % / 82.4 % (d_ff = 3.5 d and GQA-8)."""
    attn, ffn = acc.attention_ffn_shares(P["llama3-70b"])
    assert (attn, ffn) == (150_994_944 / 855_654_400, 704_643_072 / 855_654_400)
    assert round(100 * attn, 1) == 17.6 and round(100 * ffn, 1) == 82.4


def test_block_counts_and_totals_beside_a_popular_configuration_table():
    """A popular table of configurations lists ~822 M per Llama-2-70B block (~856 M is right)
    and ~213 M per Llama-3-8B / Mistral-7B block; its totals (65.7 B, 6.8 B, 6.8 B) are 80 x 822 M and
    roughly 32 x 213 M, blocks only, so they inherit the slip and leave out embeddings and head."""
    assert acc.params_per_block(P["llama2-70b"]) == 855_654_400                   # the table: ~822 M
    assert acc.params_per_block(P["llama3-8b"]) == 218_112_000                    # the table: ~213 M
    assert acc.params_per_block(P["mistral-7b"]) == 218_112_000                   # the table: ~213 M
    assert acc.total_params(P["llama2-70b"]) == 68_976_648_192                    # the table: ~65.7 B
    assert acc.total_params(P["llama3-8b"]) == 8_030_261_248                      # the table: ~6.8 B
    assert acc.total_params(P["mistral-7b"]) == 7_241_732_096                     # the table: ~6.8 B
    assert acc.model_param_breakdown(P["llama2-7b"])["blocks"] == 6_476_267_520   # the table: ~6.5 B (and "~6.4 B")


def test_llama2_70b_parameters_matrix_by_matrix():
    """A layer-by-layer count: W_Q 67 M, W_K = W_V = d^2/8 = 8.4 M, each FFN matrix 235 M, norms 16 k, ~856 M per block;
    80 blocks ~68 B, embedding 262 M, head 262 M, ~69 B in all."""
    rows = acc.block_param_breakdown(P["llama2-70b"])
    assert rows == {"W_Q": 67_108_864, "W_K": 8_388_608, "W_V": 8_388_608, "W_O": 67_108_864,
                    "W_gate": 234_881_024, "W_up": 234_881_024, "W_down": 234_881_024, "norms": 16_384}
    model = acc.model_param_breakdown(P["llama2-70b"])
    assert model["blocks"] == 68_452_352_000 and model["embedding"] == model["lm_head"] == 262_144_000
    assert model["blocks"] // model["embedding"] == 261                          # quoted: "~250x"


def test_llama2_7b_embedding_blocks_and_total():
    """The usual derivation: embedding 131 M, per block 4 d^2 + 3 d d_ff = 67 M + 135 M ~ 202 M, body 6.5 B,
    total 6.7 B.     "Embedding + unembedding (~0.5 B)", as often quoted: they are 2 x 131 M = 0.26 B."""
    rows = acc.model_param_breakdown(P["llama2-7b"])
    assert rows["embedding"] == rows["lm_head"] == 131_072_000
    assert rows["embedding"] + rows["lm_head"] == 262_144_000                    # quoted: ~0.5 B
    assert rows["blocks"] + rows["embedding"] + rows["lm_head"] + rows["final_norm"] == 6_738_415_616


def test_32_llama2_7b_blocks_per_token():
    """Commonly quoted: "for 32 blocks, that's ~15 GFLOPs/token" and ~66k tokens/s on an H100 at 990 TFLOP/s. The
    weight matmuls alone are 12.95 G; 15.10 G holds with attention over a 4k context, and 66k tokens/s goes
    with that 15.10 G (the static 12.95 G would give 76k)."""
    cfg = P["llama2-7b"]
    static = 32 * acc.flops_per_token(cfg, 4096)["static"]
    with_attention = 32 * acc.flops_per_token(cfg, 4096)["total"]
    assert static == 12_952_010_752 and with_attention == 15_099_494_400
    assert round(H100_BF16 / with_attention) == 65_565 and round(H100_BF16 / static) == 76_436
    assert round(acc.inference_tokens_per_second(acc.total_params(cfg), H100_BF16)) == 73_459  # 2N bound


def test_static_flops_are_not_480m():
    """Commonly quoted: "for short context, per-token FLOPs are dominated by static-parameter matmuls (~480 M)":
    they are 404.75 M for Llama-2-7B (471.9 M with attention over 4k). At L ~ 32k, 4 d L = 0.54 G (the quoted
    "~0.5 G") is twice the FFN's 0.27 G, not merely "comparable"."""
    per_token = acc.flops_per_token(P["llama2-7b"], 32768)
    assert per_token["static"] == 404_750_336
    assert acc.flops_per_token(P["llama2-7b"], 4096)["total"] == 471_859_200
    assert per_token["attention"] == 536_870_912
    assert 2 * 3 * 4096 * 11008 == 270_532_608


def test_llama2_7b_forward_matmul_flops_at_2048_tokens_by_part():
    """A common account of the bottleneck, Llama-2-7B at B=1, L=2048: "attention projections ~2 x 2 x 2048 x
    4096^2 = 137 B" is two projections' worth: all four cost 275 B. The attention core (69 B) is right; the FFN
    is 554.05 B (quoted: 555 B). So the FFN has 61.7 % of the forward matmul FLOPs at this length, not ~67 %."""
    cfg, L = P["llama2-7b"], 2048
    projections = 2 * L * 4 * 4096 ** 2
    core = 4 * 32 * L ** 2 * 128
    ffn = 2 * L * 3 * 4096 * 11008
    assert (projections, core, ffn) == (274_877_906_944, 68_719_476_736, 554_050_781_184)
    assert acc.block_forward_flops(cfg, L) == projections + core + ffn == 897_648_164_864
    assert round(100 * ffn / acc.block_forward_flops(cfg, L), 1) == 61.7


def test_gqa_block_static_flops_per_token_in_units_of_d_squared():
    """A per-layer FLOPs table: QKV (2 + 2/g + 2/g) d^2 = 2.5 d^2 at g = 8, output 2 d^2, SwiGLU 6 d d_f ~ 16 d^2:
    "~24 d^2" in all. Those rows sum to 20.5 d^2; 24 d^2 is the MHA total. Llama-2-70B itself (d_f = 3.5 d) is
    25.5 d^2."""
    cfg, d = P["llama2-70b"], 8192
    assert acc.flops_per_token(cfg, 1)["static"] == 1_711_276_032 == 51 * d * d // 2
    gqa_at_8d_3 = P["llama2-70b"].with_(d_ff=8 * d // 3)                # 21845: 8d/3 rounded down
    assert acc.flops_per_token(gqa_at_8d_3, 1)["static"] == 2 * (2 * d * d + 2 * d * 1024 + 3 * d * 21845)
    assert round(acc.flops_per_token(gqa_at_8d_3, 1)["static"] / d ** 2, 2) == 20.5


def test_attention_crossover_for_llama2_70b():
    """Commonly said: "the attention N^2 d term catches up around N ~ 2d"; "at long context (N >= 32k for this
    model), attention dominates". Per token, 4 N d equals the FFN's 6 d d_f at N = 1.5 d_f = 43,008 and all
    the weight matmuls at N = 52,224; at 32k the FFN still does more (1.07 G vs 1.41 G)."""
    cfg = P["llama2-70b"]
    ffn = 6 * 8192 * 28672
    assert acc.flops_per_token(cfg, 43_008)["attention"] == ffn == 1_409_286_144
    assert acc.flops_per_token(cfg, 52_224)["attention"] == acc.flops_per_token(cfg, 1)["static"]
    assert acc.flops_per_token(cfg, 32_768)["attention"] == 1_073_741_824 < ffn
    assert acc.flops_per_token(cfg, 2 * 8192)["attention"] < ffn / 2


def test_activations_of_70b_at_4k_are_25_gib():
    """Commonly quoted: 80 layers x 4096 tokens x 80 KB = 25 GB: exactly 25 GiB with 10 d bytes (80 KiB) per token per
    layer in bf16."""
    cfg = P["llama2-70b"]
    assert acc.activation_bytes_per_token_per_layer(cfg) == 10 * 8192 == 80 * KiB
    assert acc.training_memory(cfg, 4096)["activations"] == 26_843_545_600 == 25 * GiB


def test_itemised_activation_rows_exceed_their_10d_subtotal():
    """The usual itemised rows (FlashAttention): x 2d, norm output 2d, Q/K 2d, attention output 2d, FFN hidden 2 d_f.
    Its "44 KB" hidden is 2 x 8d/3; Llama-2-70B's d_f = 28672 makes it 56 KiB. The rows sum to 120 KiB per
    token per layer (37.5 GiB at 4k), not the subtotal's 10 d = 80 KiB: the subtotal counts the hidden as 2d."""
    d, d_ff = 8192, 28672
    assert round(2 * 8 * d / 3) == 43_691                                       # quoted: "44 KB"
    rows = 2 * d + 2 * d + 2 * d + 2 * d + 2 * d_ff
    assert rows == 122_880 == 120 * KiB
    assert 80 * 4096 * rows == 40_265_318_400 == 75 * GiB // 2
    assert acc.activation_bytes_per_token_per_layer(P["llama2-70b"]) == 5 * (2 * d)


def test_adam_state_of_70b_is_1_1_tb():
    """Commonly quoted: "Adam ~16 bytes/param -> 1.1 TB for 70B". The 16 are bf16 weights 2 + gradients 2 + fp32 master,
    m and v 12; Adam's own state (the 12) is 0.83 TB. 16 x 70e9 = 1.12 TB; the exact count gives 1.10 TB."""
    cfg = P["llama2-70b"]
    mem = acc.training_memory(cfg, 4096)
    state = mem["parameters"] + mem["gradients"] + mem["optimizer"]
    assert state == 16 * 68_976_648_192 == 1_103_626_371_072
    assert round(state / 1e12, 1) == 1.1
    assert mem["optimizer"] == 12 * 68_976_648_192 == 827_719_778_304


def test_chinchilla_70b_in_6_weeks_on_1000_h100s_needs_16_4_percent_mfu():
    """The usual sanity check: D = 20 N = 1.4 T; 6 x 70e9 x 1.4e12 = 5.9e23; 1000 x 450 T x 86400 x 42 = 1.6e24 ->
    enough.     "The 6 weeks works at MFU 35% or so" does not follow: 6 weeks needs an MFU of 16.4 %; at 45 % it takes
    15.3 days."""
    tokens = acc.chinchilla_tokens(70e9)
    flops = acc.training_flops(70e9, tokens)
    assert tokens == 1.4e12 and flops == 588_000_000_000_000_000_000_000
    assert 1000 * 450e12 * 86400 * 42 == pytest.approx(1.63296e24)
    needed = flops / (1000 * H100_BF16 * 86400 * 42)
    assert round(100 * needed, 1) == 16.4
    assert acc.training_days(flops, 1000, H100_BF16, needed) == pytest.approx(42.0)
    assert round(acc.training_days(flops, 1000, H100_BF16, 0.45), 1) == 15.3


def test_tying_saves_vocab_times_d():
    """Commonly quoted: tying saves ~1.05 B for a 128k vocabulary at d = 8192 (right); a table's "1.6 B extra
    params" for untied embeddings matches no model here (it would need d ~ 12,500 at 128k)."""
    cfg = P["llama3-70b"]
    assert acc.total_params(cfg) - acc.total_params(cfg.with_(tie_embeddings=True)) == 1_050_673_152


def test_mha_kv_cache_of_70b():
    """Commonly quoted: with MHA, Llama-2-70B's KV cache "would require ~107 GB": at its 4k context, batch 1, bf16 it is
    10.7 GB (10 GiB); 107 GB needs ten such sequences. GQA-8 cuts it to 1.34 GB."""
    mha = P["llama2-70b"].with_(n_kv_heads=64)
    assert acc.kv_cache_bytes(mha, 4096) == 10_737_418_240 == 10 * GiB
    assert acc.kv_cache_bytes(mha, 4096, batch=10) == 107_374_182_400
    assert acc.kv_cache_bytes(P["llama2-70b"], 4096) == 10 * GiB // 8


def test_engine_conventions_beside_the_usual_complexity_table():
    """The usual complexity table counts RoPE 6 B h L d_k (3 per element of q and k), softmax 5 B h L^2, SiLU +
    gating 3 B L d_ff and RMSNorm ~2 B L d each. This engine counts every primitive: 3 per rotated element (as
    that table), softmax 5 T - 2 R (the table's 5 per score, less one per row for each of max and sum), 9 per FFN
    hidden element (the overflow-safe sigmoid is 7 ops), RMSNorm 4 d + 3 per token."""
    B, L, cfg = 1, 16, P["llama2-7b"]
    block = nn.TransformerBlock(cfg, generator=tb.Generator(0), device="meta")
    with count_flops() as fc:
        block(tb.zeros(B, L, 4096, device="meta"))
    by_scope = fc.by_scope("forward")
    assert by_scope["block.norm1"] == L * (4 * 4096 + 3)
    assert by_scope["block.ffn"] == 9 * L * 11008
    T, R = 32 * L * L, 32 * L
    matmuls = 4 * T * 128                   # q k^T and weights @ v (projections are scopes of their own)
    rope = 3 * L * (4096 + 4096)            # q and k, 3 per element
    scale, mask, softmax = L * 4096, T, 5 * T - 2 * R
    assert by_scope["block.attn"] == matmuls + rope + scale + mask + softmax
