"""Lesson 02 exercises. Fill in each function, then run:  python -m tinygrad_block check 02"""
import tinygrad_block as tb


def central_difference(f, x: float, h: float = 1e-3) -> float:
    """df/dx at x from f at the four points x - 2h, x - h, x + h, x + 2h, with an error of order h^4
    (a two-point difference has an error of order h^2: at h = 1e-3 that is a million times larger)."""
    raise NotImplementedError


def topological_order(y: tb.Tensor) -> list:
    """The primitive calls of the graph behind y, in an order the backward pass can run them: y._ctx (the call
    that made y) first, and every call before the calls that made its inputs, so that when a call's turn comes,
    every call that used its output has already sent its share of the gradient. Each call once.
    A call's .edges holds, for each input, the call that made it (a tb.Function), a leaf tensor, or None; only
    the calls go in the list. Graphs can be thousands of calls deep: no recursion. (Write it yourself rather
    than calling the library's own sort, tinygrad_block.autograd.toposort.)"""
    raise NotImplementedError


def backprop(y: tb.Tensor, leaves: list) -> list:
    """d y / d leaf for each tensor in `leaves`, for a one-element y, by running the backward pass yourself
    (without y.backward()). y._ctx receives the gradient y.ones_like(). Take the calls in topological order;
    each call's call.backward(g), run under tb.no_grad(), turns the gradient g of its output into one gradient
    per input (None where none is needed); send each along call.edges: to the call that made that input (it
    waits there for that call's turn), to a leaf tensor, or nowhere (None). Whatever arrives at the same call or
    leaf along several edges adds up. Returns the gradient of each leaf, a Tensor of the leaf's shape, in order."""
    raise NotImplementedError
