"""Lesson 18's checkers (lessons/exercises/18.py) reject typical wrong answers, each with the reason."""
import pytest

import tinygrad_block as tb
from conftest import failures, solution
from tinygrad_block.compiled import Compiled


def _exercises():
    from conftest import course_module
    course = course_module()
    return course.exercises_module(18)


def test_the_graders_rule_with_nothing_switched_off_is_the_librarys():
    """The slips are variants of one rule; unchanged, it makes exactly the groups tb.jit made of every case."""
    grader = _exercises()
    for _, program in grader._cases():
        instructions, kept, groups = grader._instructions(program)
        assert grader.rule(instructions, kept) == groups


def test_the_cases_hold_the_groups_they_are_named_for_and_the_tiny_block_25_groups_of_86():
    """The tiny block's program: the 25 groups holding 86 primitives that lesson 18 counts."""
    grader = _exercises()
    found = {name: [len(g) for g in grader._instructions(program)[2]] for name, program in grader._cases()}
    block = found.pop("the tiny block, forward and backward")
    assert found == {"one chain": [6], "read twice": [3], "two readers": [2, 2], "kept": [2],
                     "shape change": [2, 2, 2], "in between": [2], "two branches": [4], "outside": [2],
                     "two modules": [2, 4, 2, 2], "sums": [4], "not in rows": [2, 2], "RMSNorm forward": [2, 4, 2],
                     "RMSNorm forward and backward": [2, 3, 5, 2, 6]}
    assert (len(block), sum(block)) == (25, 86)


def test_row_sums_reach_the_learner_as_row_sum_and_in_rows_tells_the_layouts_apart():
    grader = _exercises()
    cases = dict(grader._cases())
    instructions = grader._instructions(cases["sums"])[0]
    assert [op for op, *_ in instructions] == ["sub", "exp", "mul", "row_sum", "mul", "sum"]
    instructions = grader._instructions(cases["not in rows"])[0]
    assert [grader.in_rows(shape) for op, _, shape, _ in instructions if op == "mul"] == [False, True]
    assert solution(18).in_rows(((4, 8), (64, 8))) and not solution(18).in_rows(((8, 4), (8, 64)))


@pytest.mark.parametrize("switches, fragment", [
    (dict(chains=True), "a group is a tree, not a chain"),
    (dict(one_reader=False), "only if it has exactly one reader"),
    (dict(reads_are_readers=True), "count readers, not reads"),
    (dict(not_kept=False), "a result that is kept"),
    (dict(same_shape=False), "only a reader of its own shape"),
    (dict(same_module=False), "only a reader in its own module"),
    (dict(language=False), "only the ops the kernel language computes"),
    (dict(lone=True), "return only groups of two or more instructions"),
    (dict(row_sums=False), "an instruction whose one reader is a row sum"),
    (dict(rows=False), "a row sum takes in an instruction only if the instruction's result lies in rows"),
    (dict(any_sum=True), "only a row sum ends a group"),
    (dict(sum_joins=True), "a row sum ends its group"),
])
def test_each_slip_in_the_grouping_rule_gets_its_hint(switches, fragment):
    rule = _exercises().rule
    why = failures(18, solution(18, fused_groups=lambda code, kept: rule(code, kept, **switches)))["fused_groups"]
    assert why.startswith("fused_groups(") and "tb.jit made" in why and fragment in why


def test_fused_groups_in_any_order_pass():
    rule = _exercises().rule
    assert "fused_groups" not in failures(18, solution(18, fused_groups=lambda instructions, kept: [
        sorted(g, reverse=True) for g in reversed(rule(instructions, kept))]))


def test_fused_groups_returning_something_else_is_rejected():
    why = failures(18, solution(18, fused_groups=lambda instructions, kept: 3))["fused_groups"]
    assert "return a list of groups" in why


def _shared_exp(x):
    e = x.exp()
    return x * e / (1 + e)                                    # e is read by two ops


@pytest.mark.parametrize("silu, fragment", [
    (lambda x: x.silu(), "the comparison is read by two wheres"),
    (lambda x: x * x.sigmoid(), "the comparison is read by two wheres"),
    (_shared_exp, "give each intermediate one reader"),
    (lambda x: x * (1 + (-x).exp()) ** -1, "outside the kernel language"),
    (lambda x: x / (1 + x.exp()), "the exponent is -x"),
    (lambda x: 1 / (1 + (-x).exp()), "the sigmoid alone"),
    (lambda x: x * (1 + (-x).exp()), "x times the sigmoid"),
])
def test_silu_slips_are_named(silu, fragment):
    why = failures(18, solution(18, silu_in_one_kernel=silu))["silu_in_one_kernel"]
    assert why.startswith("silu_in_one_kernel(float64 (4, 16))") and fragment in why


def test_silu_in_several_kernels_shows_the_program():
    why = failures(18, solution(18, silu_in_one_kernel=lambda x: x.silu()))["silu_in_one_kernel"]
    assert "compiles to 3 kernels" in why and "program: 3 kernels for 8 primitives" in why


def test_silu_changing_the_dtype_is_rejected():
    why = failures(18, solution(18, silu_in_one_kernel=lambda x: x.to(tb.float64) / (1 + (-x.to(tb.float64)).exp())))
    assert "keep the input's dtype, float32" in why["silu_in_one_kernel"]


def _sgd(sign=-1, clear=True, read_lr=False, numpy_update=False, compiled=True, fixed_lr=None):
    """make_sgd_step with one slip."""
    def make_sgd_step(model, loss_fn):
        def instruction(x, y, lr):
            loss = loss_fn(model(x), y)
            loss.backward()
            rate = lr.item() if read_lr else (fixed_lr if fixed_lr is not None else lr)
            with tb.no_grad():
                for p in model.parameters():
                    if numpy_update:
                        p.data = p.data - rate.data * p.grad.data
                    else:
                        p.data = (p + sign * rate * p.grad).data
                    if clear:
                        p.grad = None
            return loss
        return tb.jit(instruction) if compiled else instruction
    return make_sgd_step


def _sgd_failure(**slip) -> str:
    return failures(18, solution(18, make_sgd_step=_sgd(**slip)))["make_sgd_step"]


def test_sgd_going_uphill_is_rejected():
    why = _sgd_failure(sign=+1)
    assert "make_sgd_step(nn.Linear(8, 4)): call 2" in why and "returned the loss" in why


def test_sgd_keeping_the_gradients_is_rejected():
    why = _sgd_failure(clear=False)
    assert "call 2 raised JitError" in why and "set p.grad = None" in why


def test_sgd_reading_the_learning_rate_is_rejected():
    assert "do not read a value inside the step" in _sgd_failure(read_lr=True)


def test_sgd_updating_in_numpy_is_rejected():
    assert "numpy arithmetic on p.data is not recorded" in _sgd_failure(numpy_update=True)


def test_sgd_not_compiled_is_rejected():
    assert "return the step compiled: tb.jit(step)" in _sgd_failure(compiled=False)


def test_sgd_with_a_fixed_learning_rate_is_rejected():
    why = _sgd_failure(fixed_lr=0.02)
    assert "each call must update with its own lr" in why or "returned the loss" in why


def test_sgd_with_the_learning_rate_as_a_changing_python_number_is_rejected():
    schedule = iter([0.02 / (1 + i) for i in range(100)])

    def make_sgd_step(model, loss_fn):
        def step(x, y, lr):
            loss = loss_fn(model(x), y)
            loss.backward()
            rate = next(schedule)                                         # a new Python number at every call
            with tb.no_grad():
                for p in model.parameters():
                    p.data = (p - rate * p.grad).data
                    p.grad = None
            return loss
        return tb.jit(step)
    why = failures(18, solution(18, make_sgd_step=make_sgd_step))["make_sgd_step"]
    assert "call 3 raised JitError" in why and "the learning rate must enter the step as the tensor" in why


def test_the_reference_sgd_step_replays():
    from tinygrad_block import nn
    make = solution(18).make_sgd_step
    step = make(nn.Linear(8, 4, generator=tb.Generator(0), dtype=tb.float64), lambda p, y: ((p - y) ** 2).sum())
    g = tb.Generator(0)
    x, y = tb.randn(16, 8, generator=g, dtype=tb.float64), tb.randn(16, 4, generator=g, dtype=tb.float64)
    for i in range(5):
        step(x, y, tb.tensor(0.01 / (1 + i), dtype=tb.float64))
    assert isinstance(step, Compiled) and (step.captures, step.replays) == (2, 3)
