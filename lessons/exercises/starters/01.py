"""Lesson 01 exercises. Fill in each function, then run:  python -m tinygrad_block check 01"""
import tinygrad_block as tb


def softplus(x: tb.Tensor) -> tb.Tensor:
    """log(1 + e^x) elementwise, written with Tensor ops so that autograd differentiates it.
    It must stay finite and exact for large |x| (try x = 1000 and x = -1000): e^1000 overflows."""
    raise NotImplementedError


def count_ops(y: tb.Tensor) -> int:
    """How many primitive calls the recorded graph behind y holds: follow y._ctx (the call that made y) and each
    call's .edges (the call that made each input, or a leaf tensor, or None); count each call once, however many
    paths reach it. Graphs can be thousands of calls deep."""
    raise NotImplementedError
