"""Lesson 11 exercises. Fill in each function, then run:  python -m tinygrad_block check 11"""
import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.graph import record_graph


def predict_meetings(graph) -> int:
    """`graph` was recorded around a forward pass only:  with record_graph(module, x) as graph: out = module(x).
    Return how many additions backward() will make where gradients meet (the 'paths meet' sums of lesson 11,
    section 5), before it runs.

    Work it out from the recording: graph.ops("forward") lists the indices of the primitive calls;
    graph.nodes[i].inputs lists the indices of the nodes call i read (as often as it read them);
    graph.nodes[i].tensor is the tensor node i stands for, and tensor.requires_grad says whether any gradient
    is ever computed for it."""
    raise NotImplementedError


def box_free_path(view) -> list | None:
    """`view` is a depth-1 view of one block, forward (graph.view(depth=1)) or backward
    (graph.view(depth=1, backward=True)). Start at the one node that no edge enters (the input, or ∂ output)
    and end at the one node that no edge leaves (the block's output, or ∂ input). Return the DOT names
    (node.name, like 'n3') of the nodes along a path from start to end that passes through no box (no node of
    kind 'box'), start and end included; or None if every path passes through a box.
    view.nodes, view.edges (e.src, e.dst), view.successors(name) (the nodes an edge from `name` enters, not
    their names) and view.node(name) are all you need."""
    raise NotImplementedError


def kv_group_sums(graph) -> list:
    """`graph` was recorded around a block's forward and backward pass. Return, for each node of the backward
    pass that sums a K or V gradient over the group of query heads sharing that KV head, the pair
    (shape, flops): the shape it writes, as a tuple, and its FLOPs. An empty list if there are none."""
    raise NotImplementedError
