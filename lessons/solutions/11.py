"""Lesson 11 exercises: reference solutions."""
from collections import Counter


def predict_meetings(graph) -> int:
    """A call whose output needs a gradient sends one gradient back along each read of an input that needs one;
    a tensor read k times that way gets k gradients and sums them with k - 1 additions."""
    reads = Counter()
    for i in graph.ops("forward"):
        call = graph.nodes[i]
        if call.tensor.requires_grad:
            reads.update(j for j in call.inputs if graph.nodes[j].tensor.requires_grad)
    return sum(k - 1 for k in reads.values())


def box_free_path(view) -> list | None:
    """Depth-first from the start, never stepping onto a box; each node's predecessor remembered, so the path
    can be read back from the end."""
    start = next(n.name for n in view.nodes if all(e.dst != n.name for e in view.edges))
    end = next(n.name for n in view.nodes if all(e.src != n.name for e in view.edges))
    came_from, stack = {start: None}, [start]
    while stack:
        name = stack.pop()
        if name == end:
            path = [name]
            while came_from[path[-1]] is not None:
                path.append(came_from[path[-1]])
            return path[::-1]
        for nxt in view.successors(name):
            if nxt.kind != "box" and nxt.name not in came_from:
                came_from[nxt.name] = name
                stack.append(nxt.name)
    return None


def kv_group_sums(graph) -> list:
    """At depth 2 attention is open; a group sum is the backward of repeat kv's expand: a sum in that step."""
    view = graph.view(depth=2, backward=True)
    return [(n.shape, n.flops) for n in view.find(step="repeat kv") if n.note == "backward of expand: copies add up"]
