"""Reverse-mode autograd: an iterative topological sort of the graph of Functions, then one backward sweep.

The graph's nodes are Functions; `fn.edges[i]` is where the gradient of input i goes: the Function that made
that input, the input itself if it is a leaf that requires grad, or None. Intermediate tensors are not held by
the graph, only what each Function saved for its backward.
"""
from __future__ import annotations

from . import trace
from .function import Function

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
        _deliver(root, grad, (), {}, None)
        return
    grads, meets = {root._ctx: grad}, ({} if trace.STATE.get().observers else None)
    with trace.no_grad():
        for fn in toposort(root._ctx):               # each Function after every op that used its output
            g = grads.pop(fn)                        # d(root)/d(its output), all paths summed
            if fn.retained is not None and fn.retained() is not None:
                _deliver(fn.retained(), g, (), {}, None)
            with trace.differentiating(fn):
                input_grads = fn.backward(g)         # the chain rule, one op
            for edge, eg in zip(fn.edges, input_grads):
                if edge is not None and eg is not None:
                    _deliver(edge, eg, fn.scope, grads, meets)
            if not retain_graph:
                fn.release()


def _deliver(edge, g, scope: tuple, grads: dict, meets: dict | None) -> None:
    """Send gradient `g` (from an op in module `scope`) to an edge: pending for a Function, `.grad` for a leaf.
    A tensor that fed several ops receives the sum of their gradients, counted and drawn where the paths
    meet: the innermost module holding all those ops (a block, for its input's residual fork), which
    `meets` tracks per edge while someone observes."""
    if meets is not None:
        meets[edge] = scope = _common(meets.get(edge, scope), scope)
    if isinstance(edge, Function):
        grads[edge] = g if edge not in grads else _sum(grads[edge], g, scope, edge)
    else:
        edge.grad = g if edge.grad is None else _sum(edge.grad, g, scope, edge)


def _sum(a, b, scope: tuple, edge):
    with trace.accumulating(scope, edge):
        return a + b


def _common(a: tuple, b: tuple) -> tuple:
    """The innermost scope containing both: ('block', 'norm2') and ('block',) -> ('block',)."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]
