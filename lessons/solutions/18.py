"""Lesson 18 exercises: reference solutions."""
import tinygrad_block as tb
from tinygrad_block import nn

LANGUAGE = {"add", "sub", "mul", "div", "neg", "reciprocal", "sqrt", "maximum", "exp", "log", "where",
            "less", "less_equal", "equal", "not_equal", "greater", "greater_equal"}


def in_rows(shape: tuple) -> bool:
    """Whether an instruction's (shape, layout) lies in rows, C order, as a new numpy array of that shape does (every
    program the check hands over is float64: 8 bytes a number)."""
    dims, layout = shape
    strides, stride = [], 8
    for n in reversed(dims):
        strides.insert(0, stride)
        stride *= n
    return tuple(st for n, st in zip(dims, strides) if n > 1) == tuple(layout)


def fused_groups(instructions: list, kept: set) -> list:
    """Each instruction of the language joins its reader's kernel when it has exactly one reader (which may read it
    twice), that reader is of the language too, with the same shape (and layout) and module, and the instruction's
    result is not kept; or when that one reader is a row sum of the same module and the instruction's result lies in
    rows (the sum ends the group). A group is a reader with everything that joined it, following joins to the end."""
    readers = {}
    for i, (_, ins, _, _) in enumerate(instructions):
        for k in set(ins):
            readers.setdefault(k, []).append(i)
    into = {}
    for i, (op, _, shape, module) in enumerate(instructions):
        if op in LANGUAGE and len(readers.get(i, [])) == 1 and i not in kept:
            r_op, _, r_shape, r_module = instructions[readers[i][0]]
            if r_module == module and (r_op in LANGUAGE and r_shape == shape or r_op == "row_sum" and in_rows(shape)):
                into[i] = readers[i][0]
    groups = {}
    for i in into:
        root = i
        while root in into:
            root = into[root]
        groups.setdefault(root, [root]).append(i)
    return [sorted(g) for g in groups.values()]


def silu_in_one_kernel(x: tb.Tensor) -> tb.Tensor:
    """neg > exp > add > div: each op reads the one before, once."""
    return x / (1 + (-x).exp())


def make_sgd_step(model: nn.Module, loss_fn) -> object:
    """lr is an argument (a 0-d tensor), so each replay reads the new one; the gradients are cleared at the end."""
    def step(x: tb.Tensor, y: tb.Tensor, lr: tb.Tensor) -> tb.Tensor:
        loss = loss_fn(model(x), y)
        loss.backward()
        with tb.no_grad():
            for p in model.parameters():
                p.data = (p - lr * p.grad).data
                p.grad = None
        return loss
    return tb.jit(step)
