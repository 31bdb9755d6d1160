"""Lesson 18 exercises: reference solutions."""
import tinygrad_block as tb
from tinygrad_block import nn

ELEMENTWISE = {"add", "sub", "mul", "div", "maximum", "neg", "exp", "log", "sqrt", "reciprocal", "sin", "cos"}


def fused_chains(steps: list, kept: set) -> list:
    """In program order: an elementwise step joins the open chain if it reads the chain's last result once, is
    that result's only reader, the result is not kept, and the shapes (with their layouts) agree; else it starts a
    new chain. Any
    other step closes the open chain."""
    readers = {}
    for i, (_, ins, _) in enumerate(steps):
        for k in set(ins):
            readers.setdefault(k, []).append(i)
    chains, chain = [], None
    for i, (op, ins, shape) in enumerate(steps):
        if op not in ELEMENTWISE:
            chain = None
            continue
        if chain is not None:
            last = chain[-1]
            if ins.count(last) == 1 and readers[last] == [i] and last not in kept and shape == steps[chain[0]][2]:
                chain.append(i)
                continue
        chain = [i]
        chains.append(chain)
    return [c for c in chains if len(c) > 1]


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
