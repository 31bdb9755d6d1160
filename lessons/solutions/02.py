"""Lesson 02 exercises: reference solutions."""
import tinygrad_block as tb


def central_difference(f, x: float, h: float = 1e-3) -> float:
    """(f(x - 2h) - 8 f(x - h) + 8 f(x + h) - f(x + 2h)) / 12h: the h^2 error terms of two central differences,
    of widths h and 2h, cancel."""
    return (f(x - 2 * h) - 8 * f(x - h) + 8 * f(x + h) - f(x + 2 * h)) / (12 * h)


def topological_order(y: tb.Tensor) -> list:
    """A depth-first post-order from y's call (each call after the calls that made its inputs), reversed. An explicit
    stack instead of recursion: an entry (call, True) means 'all its inputs' calls are done, emit it'."""
    post, seen, stack = [], set(), [(y._ctx, False)]
    while stack:
        call, inputs_done = stack.pop()
        if inputs_done:
            post.append(call)
        elif call not in seen:
            seen.add(call)
            stack.append((call, True))
            stack += [(e, False) for e in call.edges if isinstance(e, tb.Function) and e not in seen]
    return post[::-1]


def backprop(y: tb.Tensor, leaves: list) -> list:
    """Pending gradients per call, summed as they arrive; each call runs once, in topological order, when all of
    its output's users have sent their shares. Leaves collect theirs in a dict keyed by the tensor itself."""
    pending, at_leaf = {y._ctx: y.ones_like()}, {}
    with tb.no_grad():
        for call in topological_order(y):
            for edge, g in zip(call.edges, call.backward(pending.pop(call))):
                if edge is None or g is None:
                    continue
                into = pending if isinstance(edge, tb.Function) else at_leaf
                into[edge] = into[edge] + g if edge in into else g
    return [at_leaf.get(leaf) for leaf in leaves]
