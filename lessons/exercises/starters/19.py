"""Lesson 19 exercises. Fill in each function, then run:  python -m tinygrad_block check 19"""


def differentiating_ops(data: dict, forward_id: str) -> list:
    """The ids of the backward ops that differentiate the forward node `forward_id` (an id of data['nodes'], such
    as 'fn15'), in the order the page's stepper reaches them: the ops that clicking it lights up in the backward
    pane, but not the sums that gather its gradient from several uses. `data` is an explorer page's data
    (tb.explore(...).data) without the forward nodes' `grads` and `sums` lists, and with its nodes in a shuffled
    order: rebuild the answer from the backward ops. A node with nothing to differentiate gives []."""
    raise NotImplementedError


def heaviest_module(data: dict, phase: str, depth: int) -> tuple:
    """The module at `depth` of the page's module tree (0: the root; 1: the boxes the page opens with) that costs
    the most FLOPs in `phase` ('forward' or 'backward'), and those FLOPs, as its box's card shows them: return
    (its path, such as 'block.ffn', its FLOPs as an int). A box of folded identical layers stands for all of
    them."""
    raise NotImplementedError
