"""Reverse-mode autograd: an iterative topological sort of the graph of Functions, then one backward sweep.

The graph's nodes are Functions; `fn.edges[i]` is where the gradient of input i goes: the Function that made
that input, the input itself if it is a leaf that requires grad, or None. Intermediate tensors are not held by
the graph, only what each Function saved for its backward.
"""
from __future__ import annotations

from .function import STATE, Function, no_grad, phase

FREED = ("backward: this graph was already freed by an earlier backward(); call backward(retain_graph=True) "
         "the first time to backpropagate through the same graph again")


def toposort(root: Function) -> list[Function]:
    """Functions ordered so that each comes before the Functions that made its inputs: a depth-first
    post-order, reversed. Iterative, so graphs of any depth work; deterministic, since edges are visited
    in input order."""
    order, seen, stack = [], set(), [(root, False)]
    while stack:
        fn, done = stack.pop()
        if done:
            order.append(fn)
        elif fn not in seen:
            if fn.edges is None:
                raise RuntimeError(FREED)
            seen.add(fn)
            stack.append((fn, True))
            stack += [(e, False) for e in fn.edges[::-1] if isinstance(e, Function) and e not in seen]
    return order[::-1]


def backward(root, grad, retain_graph: bool = False) -> None:
    """Accumulate d(root)/d(leaf) * grad into `.grad` of every leaf that requires grad.

    Gradients of a tensor used twice add up. Each Function's saved tensors and edges are released once it has
    run, unless `retain_graph`; a second backward through a released graph raises RuntimeError."""
    if root._ctx is None:  # a leaf: its gradient is `grad` itself
        _accumulate(root, grad)
        return
    order = toposort(root._ctx)
    grads = {root._ctx: grad}
    meet = {}  # edge -> the innermost module scope holding every op whose gradient flowed into it so far
    outer = STATE.scope, STATE.origin
    try:
        with no_grad(), phase("backward"):
            for fn in order:
                # the ops of this backward belong to the module, and the op, whose forward they differentiate
                STATE.scope, STATE.origin = fn.scope, fn.name
                g = grads.pop(fn)
                if fn.retained is not None and fn.retained() is not None:
                    _accumulate(fn.retained(), g)
                for edge, eg in zip(fn.edges, fn.backward(g)):
                    if edge is None or eg is None:
                        continue
                    meet[edge] = where = _common(meet.get(edge, fn.scope), fn.scope)
                    if isinstance(edge, Function):
                        grads[edge] = eg if edge not in grads else _sum_paths(grads[edge], eg, where)
                    else:
                        _accumulate(edge, eg, where)
                if not retain_graph:
                    fn.release()
    finally:
        STATE.scope, STATE.origin = outer


def _common(a: tuple, b: tuple) -> tuple:
    """The innermost scope containing both: ('block', 'norm2') and ('block',) -> ('block',)."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def _sum_paths(a, b, scope: tuple = ()):
    """A tensor that fed several ops receives the sum of their gradients: where the paths meet (counted and
    drawn in the innermost module holding those ops: a block, for its input's residual fork)."""
    prev, (STATE.origin, STATE.scope) = (STATE.origin, STATE.scope), ("accumulate", scope)
    try:
        return a + b
    finally:
        STATE.origin, STATE.scope = prev


def _accumulate(t, g, scope: tuple = ()) -> None:
    t.grad = g if t.grad is None else _sum_paths(t.grad, g, scope)
