"""trace.py: the events observers receive (op, inputs, output, phase, scope, step, origin, flops), and the
named steps the modules mark where they happen.

Oracles: the hand-listed primitive calls of small expressions, the order of attention's equations
(rope, repeat kv, scores, mask, softmax, weighted sum), the FLOP rule written out (2 M N K for a matmul), and
the forward events themselves (each backward event names a forward op of the same scope and step).
"""
import pytest
from conftest import LLAMA, random_block, t64

import tinygrad_block as tb

ATTENTION_STEPS = ["rope", "repeat kv", "scores", "mask", "softmax", "weighted sum"]


def block_events(cfg, B=2, L=3):
    """Every event of one forward and backward pass of a random block of layout `cfg`."""
    blk, events = random_block(cfg), []
    x = t64(tb.randn(B, L, cfg.d_model, generator=tb.Generator(1), dtype=tb.float64).numpy(), requires_grad=True)
    with tb.observe(events.append):
        blk(x).sum().backward()
    return events


def steps_in_order(events, phase, scope):
    """The named steps of `scope`'s own events in `phase`, in the order each first occurs."""
    seen = []
    for e in events:
        if e.phase == phase and e.scope == scope and e.step and e.step not in seen:
            seen.append(e.step)
    return seen


def test_observers_see_every_primitive_forward_and_backward():
    seen = []
    x = tb.tensor([1.0, 2.0], requires_grad=True)
    with tb.observe(lambda e: seen.append((e.op.name, e.phase, e.output.shape))):
        (x.exp() * x).sum().backward()
    forward = [s for s in seen if s[1] == "forward"]
    backward = [s for s in seen if s[1] == "backward"]
    assert [name for name, _, _ in forward] == ["exp", "mul", "sum"]
    # sum -> reshape (to keepdims) and expand; mul -> one mul per input; exp -> mul by its output;
    # x is used twice -> add
    assert sorted(name for name, _, _ in backward) == ["add", "expand", "mul", "mul", "mul", "reshape"]
    assert [shape for name, _, shape in backward if name != "reshape"] == [(2,)] * 5


@pytest.mark.parametrize("n_kv_heads", [2, 4], ids=["gqa", "mha"])
def test_one_attention_call_runs_its_steps_in_the_order_of_the_equations(n_kv_heads):
    events = block_events(LLAMA.with_(n_kv_heads=n_kv_heads))
    expected = [s for s in ATTENTION_STEPS if n_kv_heads < LLAMA.n_heads or s != "repeat kv"]
    assert steps_in_order(events, "forward", ("block", "attn")) == expected
    own = [(e.step, e.op.name) for e in events if e.phase == "forward" and e.scope == ("block", "attn") and e.step]
    assert [step for step, _ in own] == sorted((s for s, _ in own), key=expected.index)   # each step contiguous
    ops = {step: [name for s, name in own if s == step] for step in expected}
    assert ops["mask"].count("add") == 1 and ops["weighted sum"] == ["matmul"] and ops["scores"].count("matmul") == 1
    assert ops["softmax"].count("exp") == 1


def test_modules_reset_the_step_and_blocks_name_their_residual_adds():
    events = block_events(LLAMA)
    forward = [e for e in events if e.phase == "forward"]
    assert all(e.step == "" for e in forward if e.scope and e.scope[-1].endswith(("_proj", "norm1", "norm2")))
    assert [e.op.name for e in forward if e.step == "residual"] == ["add", "add"]
    assert all(e.scope == ("block",) for e in forward if e.step == "residual")
    assert steps_in_order(events, "forward", ("block", "ffn")) == ["activation", "gate"]
    assert all(e.origin == "" for e in forward)


def test_backward_events_carry_the_scope_and_step_of_the_op_they_differentiate():
    events = block_events(LLAMA)
    made = {(e.scope, e.step, e.op.name) for e in events if e.phase == "forward"}
    backward = [e for e in events if e.phase == "backward"]
    assert backward and all(e.origin for e in backward)
    for e in backward:
        if e.origin == "accumulate":                   # where the gradients of a tensor used twice meet
            assert e.step == "" and e.op.name == "add", e
        else:
            assert (e.scope, e.step, e.origin) in made, (e.scope, e.step, e.origin)
    # the sweep starts at attention's last step and ends at its first; the mask add passes its gradient on
    # unchanged (no op), and v's path reaches 'repeat kv' before q's and k's reach 'softmax'
    assert steps_in_order(events, "backward", ("block", "attn")) == ["weighted sum", "repeat kv", "softmax",
                                                                     "scores", "rope"]


def test_each_event_carries_the_flops_of_its_op_rule():
    events = block_events(LLAMA, B=2, L=3)
    (e,) = [e for e in events if e.phase == "forward" and e.step == "weighted sum"]
    B, H, L, d_head = 2, LLAMA.n_heads, 3, LLAMA.d_head
    assert e.output.shape == (B, H, L, d_head) and e.flops == 2 * B * H * L * L * d_head
    (mask,) = [e for e in events if e.phase == "forward" and e.step == "mask" and e.op.name == "add"]
    assert mask.flops == B * H * L * L
    assert all(e.flops == 0 for e in events if e.op.name in ("reshape", "permute", "expand"))
