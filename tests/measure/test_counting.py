"""The FLOP rule of every primitive (by hand), module scopes forward and backward, and saved-activation bytes."""
import numpy as np
import pytest

import tinygrad_block as tb
from tinygrad_block import function as F
from tinygrad_block import nn
from tinygrad_block.counting import count_flops, count_saved_bytes


def flops_of(fn):
    """{op name: FLOPs} of the primitives that `fn()` runs (forward only)."""
    with count_flops() as fc:
        fn()
    return fc.by_op("forward")


def t(*shape, grad=False):
    return tb.tensor(np.random.default_rng(0).standard_normal(shape) + 3.0, requires_grad=grad)


# ---------------------------------------------------------------- the rule of each primitive, by hand
@pytest.mark.parametrize("name, run, expected", [
    ("neg", lambda: -t(2, 3), {"neg": 6}),
    ("exp", lambda: t(2, 3).exp(), {"exp": 6}),
    ("log", lambda: t(4).log(), {"log": 4}),
    ("sqrt", lambda: t(5).sqrt(), {"sqrt": 5}),
    ("reciprocal", lambda: t(5).reciprocal(), {"reciprocal": 5}),
    ("sin", lambda: t(3).sin(), {"sin": 3}),
    ("cos", lambda: t(3).cos(), {"cos": 3}),
    ("erf", lambda: t(3).erf(), {"erf": 3}),
    ("pow", lambda: t(7) ** 3, {"pow": 7}),
    ("add", lambda: t(2, 3) + t(2, 3), {"add": 6}),
    ("sub", lambda: t(2, 3) - t(2, 3), {"sub": 6}),
    ("sub from a number", lambda: 1.0 - t(4), {"sub": 4}),
    ("mul by a number", lambda: t(2, 3) * 2.0, {"mul": 6}),
    ("div", lambda: t(4) / t(4), {"div": 4}),
    ("maximum", lambda: t(4).maximum(t(4)), {"maximum": 4}),
    ("compare", lambda: t(2, 2) < 0.5, {"compare": 4}),
    ("where", lambda: tb.where(t(3) > 0, t(3), 0.0), {"compare": 3, "where": 3}),
    ("sum: n - 1 per output", lambda: t(4, 5).sum(axis=1), {"sum": 4 * 4}),
    ("sum of all", lambda: t(4, 5).sum(), {"sum": 19}),
    ("max", lambda: t(4, 5).max(axis=0, keepdims=True), {"max": 15}),
    ("kthlargest: n - 1 per row, as max", lambda: F.KthLargest.apply(t(4, 5), k=2), {"kthlargest": 16}),
    ("broadcast add: expand is free", lambda: t(3, 1) + t(1, 4), {"expand": 0, "add": 12}),
    ("movement is free", lambda: t(2, 3).reshape(3, 2).T[1:, ::2].pad(((1, 1), (0, 0))),
     {"reshape": 0, "permute": 0, "slice": 0, "gather": 0, "pad": 0}),
    ("concat and cast are free", lambda: tb.concat([t(2), t(3)]).to(tb.float32), {"concat": 0, "cast": 0}),
    ("matmul 2 M N K", lambda: t(5, 7) @ t(7, 3), {"matmul": 2 * 5 * 3 * 7}),
    ("batched matmul", lambda: t(4, 5, 7) @ t(4, 7, 3), {"matmul": 4 * 2 * 5 * 3 * 7}),
])
def test_flop_rule_of_each_primitive(name, run, expected):
    assert flops_of(run) == expected


def test_subtraction_is_one_op_and_its_backward_negates_only_the_subtrahend():
    """d(a - b) = (g, -g): the minuend's gradient is g itself (free), the subtrahend's one negation per element."""
    a, b = t(2, 3, grad=True), t(2, 3, grad=True)
    with count_flops() as fc:
        (a - b).backward(tb.ones(2, 3, dtype=tb.float64))
    assert fc.by_op("forward") == {"sub": 6} and fc.by_op("backward") == {"neg": 6}
    np.testing.assert_array_equal(a.grad.numpy(), np.ones((2, 3)))
    np.testing.assert_array_equal(b.grad.numpy(), -np.ones((2, 3)))


def test_causal_mask_costs_one_add_per_score_and_nothing_to_build():
    """The mask is a constant of L alone: each call adds it to the B H L^2 scores, and nothing else in
    attention compares or selects."""
    cfg, block = tiny_block()
    B, L = 2, 8
    for _ in range(2):                                 # the second call reuses the mask: the same count
        fc, _ = run_block(block, cfg, B=B, L=L)
        assert fc.by_step("forward", scope="block.attn")["mask"] == B * cfg.n_heads * L * L
        assert fc.by_op("backward", scope="block.attn").keys().isdisjoint({"compare", "where"})
        assert fc.by_op("forward", scope="block.attn").keys().isdisjoint({"compare", "where"})


def test_scatter_add_costs_one_add_per_source_element():
    x = t(6, 4, grad=True)
    with count_flops() as fc:
        x[[0, 2, 2, 5, 1]].sum().backward()
    assert fc.by_op("backward")["scatteradd"] == 5 * 4


def test_counts_are_python_ints():
    with count_flops() as fc:
        (t(8, 8) @ t(8, 8)).exp()
    assert all(type(n) is int for n in fc.flops.values()) and type(fc.total()) is int


# ---------------------------------------------------------------- scopes and phases
def tiny_block(device="cpu", **changes):
    cfg = nn.preset("tiny").with_(**changes)
    return cfg, nn.TransformerBlock(cfg, generator=tb.Generator(0), device=device)


def run_block(block, cfg, device="cpu", B=2, L=8, x_grad=True):
    x = tb.zeros(B, L, cfg.d_model, device=device, requires_grad=x_grad)
    with count_flops() as fc, count_saved_bytes() as sb:
        out = block(x)
        out.backward(tb.zeros(B, L, cfg.d_model, device=device))
    return fc, sb


def test_module_scopes_are_nested_names_and_backward_follows_the_forward_scope():
    cfg, block = tiny_block()
    fc, _ = run_block(block, cfg)
    scopes = set(fc.by_scope())
    assert {"block.norm1", "block.attn", "block.attn.q_proj", "block.attn.k_proj", "block.attn.v_proj",
            "block.attn.o_proj", "block.norm2", "block.ffn.gate_proj", "block.ffn.up_proj", "block.ffn.down_proj",
            "block"} <= scopes
    B, L, d = 2, 8, cfg.d_model
    q_fwd = fc.total("forward", scope="block.attn.q_proj", matmul_only=True)
    assert q_fwd == 2 * B * L * d * d
    assert fc.total("backward", scope="block.attn.q_proj", matmul_only=True) == 2 * q_fwd   # dX and dW
    assert fc.total("forward", scope="block.attn.k_proj", matmul_only=True) == 2 * B * L * d * 32


def test_backward_matmuls_skip_the_input_gradient_when_the_input_needs_none():
    # post-norm: x feeds the q, k, v projections directly (pre-norm would need their dX for norm1's gain)
    cfg, block = tiny_block(layout="post")
    with_grad, _ = run_block(block, cfg, x_grad=True)
    without, _ = run_block(block, cfg, x_grad=False)
    B, L, d = 2, 8, cfg.d_model
    skipped = 2 * B * L * d * (d + 32 + 32)            # dX of the q, k and v projections
    assert with_grad.total("backward", matmul_only=True) - without.total("backward", matmul_only=True) == skipped
    assert with_grad.total("forward") == without.total("forward")


def test_by_scope_depth_sums_subtrees_and_totals_agree():
    cfg, block = tiny_block()
    fc, _ = run_block(block, cfg)
    deep, shallow = fc.by_scope("forward"), fc.by_scope("forward", depth=2)
    assert shallow["block.attn"] == sum(n for s, n in deep.items() if s == "block.attn" or s.startswith("block.attn."))
    assert sum(shallow.values()) == sum(deep.values()) == fc.total("forward")
    assert fc.total() == fc.total("forward") + fc.total("backward")


@pytest.mark.parametrize("changes", [{}, {"norm": "layer", "bias": True, "ffn": "gelu"}, {"layout": "parallel"},
                                     {"lora_rank": 2}, {"layout": "post", "causal": False, "rope": False}])
def test_counts_are_the_same_on_every_device_and_on_meta(changes, device):
    cfg, block = tiny_block(device, **changes)
    _, meta = tiny_block("meta", **changes)
    fc, sb = run_block(block, cfg, device)
    fc_meta, sb_meta = run_block(meta, cfg, "meta")
    assert fc.flops == fc_meta.flops and fc.calls == fc_meta.calls
    assert sb.bytes == sb_meta.bytes


# ---------------------------------------------------------------- saved activations
def test_saved_bytes_count_activations_not_parameters_inputs_or_views():
    g = tb.Generator(0)
    lin = nn.Linear(8, 5, generator=g)
    x = tb.randn(3, 8, generator=g)                    # an input: not an activation
    with count_saved_bytes() as sb:
        lin(x)
    assert sb.total() == 0                             # W^T is a view of a parameter; x is an input
    with count_saved_bytes() as sb:
        h = lin(x).exp()                               # exp keeps its output: 3 x 5 float32
        h.reshape(15).sin()                            # sin keeps its input: a view of the same buffer
    assert sb.total() == 3 * 5 * 4


def test_saved_bytes_count_a_tensor_saved_by_several_ops_once():
    g = tb.Generator(0)
    w1, w2 = (nn.Linear(8, 8, generator=g) for _ in range(2))
    x = tb.randn(4, 8, generator=g, requires_grad=True)
    with count_saved_bytes() as sb:
        h = (x * 2.0).sin()                            # sin saves x*2 (an activation, 4 x 8)
        w1(h) + w2(h)                                  # both matmuls save h rows: a view of one buffer
    assert sb.total() == 2 * 4 * 8 * 4


def test_block_saved_bytes_are_linear_in_tokens_plus_two_attention_matrices():
    """saved(L) = a L + b L^2 exactly, and b is two float32 (H, L, L) tensors: softmax's exponentials and the
    probabilities that weight V. Doubling L: saved(2L) - 2 saved(L) = 2 b L^2."""
    cfg, block = tiny_block("meta")
    saved = {}
    for L in (8, 16, 32):
        _, sb = run_block(block, cfg, "meta", B=1, L=L)
        saved[L] = sb.total()
    b = 2 * cfg.n_heads * 4
    assert saved[16] - 2 * saved[8] == 2 * b * 8 ** 2
    assert saved[32] - 2 * saved[16] == 2 * b * 16 ** 2
