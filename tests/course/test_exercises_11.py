"""Lesson 11's checkers (lessons/exercises/11.py) reject typical wrong answers, each with the reason."""
from collections import Counter

from conftest import failures, solution


# ---------------------------------------------------------------- predict_meetings
def _meetings(*, every_read: bool = False, distinct: bool = False, minus_one: bool = True):
    def predict(graph):
        reads = Counter()
        for i in graph.ops("forward"):
            call = graph.nodes[i]
            if every_read or call.tensor.requires_grad:
                inputs = set(call.inputs) if distinct else call.inputs
                reads.update(j for j in inputs if graph.nodes[j].tensor.requires_grad)
        return sum(k - 1 if minus_one else k for k in reads.values() if k > 1)
    return predict


def test_counting_reads_that_send_no_gradient_is_rejected():
    why = failures(11, solution(11, predict_meetings=_meetings(every_read=True)))["predict_meetings"]
    assert "y = sum(softmax(x) * x): got 3, but backward() made 2 additions" in why and "row max" in why


def test_counting_each_reading_call_once_is_rejected():
    """A view draws one arrow for x * x; the graph's inputs list x twice, and backward sends two gradients."""
    why = failures(11, solution(11, predict_meetings=_meetings(distinct=True)))["predict_meetings"]
    assert "y = x * x + x * 3: got 1, but backward() made 2" in why and "reads x twice" in why


def test_k_additions_for_k_reads_is_rejected():
    why = failures(11, solution(11, predict_meetings=_meetings(minus_one=False)))["predict_meetings"]
    assert "got 3, but backward() made 2" in why and "k - 1 additions" in why


def test_a_prediction_that_is_not_an_int_is_rejected():
    why = failures(11, solution(11, predict_meetings=lambda graph: "19"))["predict_meetings"]
    assert "must return an int; got str" in why


# ---------------------------------------------------------------- box_free_path
def _follow_the_flags(view):
    """Follows the edges flagged highway: backward, the last step into ∂ input carries no flag."""
    start = next(n.name for n in view.nodes if all(e.dst != n.name for e in view.edges))
    path = [start]
    while True:
        nxt = [e.dst for e in view.edges if e.src == path[-1] and e.highway]
        if not nxt:
            return path if len(path) > 1 else None
        path.append(nxt[0])


def test_following_the_highway_flags_alone_is_rejected():
    why = failures(11, solution(11, box_free_path=_follow_the_flags))["box_free_path"]
    assert "pre-norm block, backward" in why and "'∂ input'" in why
    assert "one step short" in why and "not the flag" in why


def test_labels_in_place_of_names_are_rejected():
    labels = lambda view: [view.node(name).label for name in solution(11).box_free_path(view)]   # noqa: E731
    why = failures(11, solution(11, box_free_path=labels))["box_free_path"]
    assert "'input' is not a node of the view" in why and "DOT names" in why


def test_a_path_through_a_box_is_rejected_for_post_norm():
    """Any path from start to end, boxes allowed: post-norm's runs through a norm."""
    def any_path(view):
        start = next(n.name for n in view.nodes if all(e.dst != n.name for e in view.edges))
        path = [start]
        while view.successors(path[-1]):
            path.append(view.successors(path[-1])[-1].name)
        return path
    why = failures(11, solution(11, box_free_path=any_path))["box_free_path"]
    assert "passes through the box" in why and "norms sit on the stream" in why and "None" in why


def test_none_where_the_highway_exists_is_rejected():
    why = failures(11, solution(11, box_free_path=lambda view: None))["box_free_path"]
    assert "pre-norm block, forward: got None, but there is a path" in why


# ---------------------------------------------------------------- kv_group_sums
COPIES = "backward of expand: copies add up"


def test_group_sums_looked_for_at_depth_1_are_rejected():
    at_depth_1 = lambda graph: [(n.shape, n.flops) for n in graph.view(depth=1, backward=True).nodes   # noqa: E731
                                if n.note == COPIES]
    why = failures(11, solution(11, kv_group_sums=at_depth_1))["kv_group_sums"]
    assert "got [], expected [((2, 2, 1, 6, 8), 192), ((2, 2, 1, 6, 8), 192)]" in why and "depth=2" in why


def test_every_sum_that_undoes_a_broadcast_is_rejected():
    every = lambda graph: [(n.shape, n.flops) for n in graph.view(depth=2, backward=True).nodes   # noqa: E731
                           if n.note == COPIES]
    why = failures(11, solution(11, kv_group_sums=every))["kv_group_sums"]
    assert "other broadcasts" in why and "'repeat kv'" in why


def test_group_sums_that_count_g_additions_per_entry_are_rejected():
    """Groups of G = 2 in the first block checked: G additions per entry is twice the G - 1 = 1."""
    g_per_entry = lambda graph: [(shape, 2 * flops) for shape, flops in solution(11).kv_group_sums(graph)]  # noqa: E731
    why = failures(11, solution(11, kv_group_sums=g_per_entry))["kv_group_sums"]
    assert "groups of 2" in why and "the FLOPs are not" in why and "G - 1 additions" in why


def test_group_sums_that_are_not_pairs_are_rejected():
    why = failures(11, solution(11, kv_group_sums=lambda graph: 2))["kv_group_sums"]
    assert "must return a list of (shape, flops) pairs; got int" in why
