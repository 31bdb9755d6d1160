"""Lesson 18 exercises. Fill in each function, then run:  python -m tinygrad_block check 18"""
import tinygrad_block as tb
from tinygrad_block import nn

# the primitives the kernel language computes (section 4 of the lesson)
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
    """The groups of primitives tb.jit computes in one generated kernel, by section 4's rule. instructions[i] = (op,
    ins, shape, module): op the primitive's name ('mul', 'sum', 'reshape', a comparison's own: 'less', ...), except
    'row_sum' for a sum over its input's last axis alone, which may end a group (section 4); ins what it reads, in
    order: an int j for the result of instructions[j] (j < i), or a str such as 'in3' for an array from outside the
    program (an argument, a weight, a constant); shape the shape of its result with its memory layout, (shape, strides
    along the axes longer than 1): two results of one shape laid out differently compare unequal, and in_rows(shape)
    says whether it lies in rows; module the module it ran in ('block.norm1'; '' outside any). The expands the compiler
    drops are already left out. kept: the instructions whose results outlive the call (returned, or written back as a
    gradient). Return the groups of two or more instructions, each a list of instruction numbers, in any order: for
    example [[2, 3, 4], [5, 7, 8]]."""
    raise NotImplementedError


def silu_in_one_kernel(x: tb.Tensor) -> tb.Tensor:
    """SiLU, x * sigmoid(x) = x / (1 + e^(-x)), written with Tensor ops so that tb.jit compiles it into one
    generated kernel (print(tb.jit(f).program) after two calls shows it). Same shape and dtype as x."""
    raise NotImplementedError


def make_sgd_step(model: nn.Module, loss_fn) -> object:
    """A compiled SGD step for `model`: return tb.jit(step), where step(x, y, lr) computes
    loss = loss_fn(model(x), y), runs loss.backward(), then replaces every parameter p by p - lr * p.grad and
    leaves p.grad empty (None) for the next call, and returns loss (its value before the update). lr is a 0-d
    float64 tensor, a different one at every call. Compute the new weights with Tensor ops under tb.no_grad() and
    rebind them, p.data = new.data, as tinygrad_block.optim does."""
    raise NotImplementedError
