"""Lesson 11's exercises: predict from a forward graph where backward's gradients will meet; find a path through
a block's drawing that passes no sublayer (the highway, if there is one); find the GQA group sums in the backward
drawing. Each check compares with an independent oracle (the additions tb.observe sees backward() make, a search
over the raw recording, the closed form of the group sum) and says what is wrong, naming the usual slips."""
from __future__ import annotations

from collections import Counter

import numpy as np

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.graph import record_graph

from .common import CheckFailed

def _call(function, what: str, *args):
    """The learner's function on one case; an error it raises is reported with the case it failed on."""
    try:
        return function(*args)
    except NotImplementedError:
        raise
    except Exception as e:  # the learner's code: say on which graph it failed
        raise CheckFailed(f"{function.__name__} raised {type(e).__name__}: {e} (on {what})") from None


# ---------------------------------------------------------------- predict_meetings
def _reads(graph, *, only_grad_outputs: bool = True, distinct: bool = False) -> Counter:
    """For each tensor that needs a gradient: how many forward calls read it (each read counted, or each
    reading call once with `distinct`), counting only calls whose output needs a gradient unless told not to."""
    reads = Counter()
    for i in graph.ops("forward"):
        call = graph.nodes[i]
        if only_grad_outputs and not call.tensor.requires_grad:
            continue
        inputs = set(call.inputs) if distinct else call.inputs
        reads.update(j for j in inputs if graph.nodes[j].tensor.requires_grad)
    return reads


def _meeting_slips(graph) -> list[tuple[int, str]]:
    """(answer, hint) of the usual mistakes on this graph."""
    meets = lambda reads: sum(k - 1 for k in reads.values())                                   # noqa: E731
    every_read = _reads(graph, only_grad_outputs=False)
    return [(meets(every_read), "you counted reads by calls whose output needs no gradient (softmax's row max, "
                                "SiLU's sign test): they send no gradient back, so nothing meets there"),
            (meets(_reads(graph, distinct=True)), "you counted each reading call once, as a drawing does (one arrow "
                                                  "for x * x); x * x reads x twice and sends it two gradients"),
            (sum(k for k in _reads(graph).values() if k > 1), "a tensor read k times gets k gradients, and adding "
                                                               "k gradients takes k - 1 additions, not k"),
            (sum(_reads(graph).values()), "that is the number of gradients sent; they meet with one addition fewer "
                                          "per tensor (k - 1 for k reads)")]


def _meeting_cases() -> list:
    """(what, module, input) for each graph the check records; fresh modules and leaves (a leaf whose .grad
    already holds a gradient would get one more addition)."""
    cfg = nn.BlockConfig(d_model=32, n_heads=4, n_kv_heads=2, d_ff=48, max_seq_len=16)
    square = tb.tensor(np.linspace(0.5, 1.5, 6).reshape(2, 3), dtype=tb.float64, requires_grad=True)

    def rows(n: int, width: int, seed: int) -> tb.Tensor:
        return tb.randn(2, n, width, generator=tb.Generator(seed), dtype=tb.float64, requires_grad=True)

    def block(c):
        return nn.TransformerBlock(c, generator=tb.Generator(1), dtype=tb.float64)

    def lm(tied: bool):
        c = cfg.with_(vocab_size=40, n_layers=2, tie_embeddings=tied)
        return nn.LM(c, generator=tb.Generator(2), dtype=tb.float64)
    ids = tb.tensor([[3, 1, 4, 1, 5, 9], [2, 6, 5, 3, 5, 8]])
    return [("y = x * x + x * 3", lambda t: t * t + t * 3.0, square),
            ("y = sum(softmax(x) * x)", lambda t: (t.softmax(axis=-1) * t).sum(), rows(4, 5, 3)),
            ("a pre-norm block (RMSNorm, SwiGLU)", block(cfg), rows(6, 32, 4)),
            ("a block with LayerNorm, GELU and biases", block(cfg.with_(norm="layer", ffn="gelu", bias=True)),
             rows(6, 32, 5)),
            ("a 2-layer model, untied head", lm(False), ids),
            ("a 2-layer model whose head reuses the embedding matrix (tied)", lm(True), ids)]


def check_predict_meetings(solution) -> None:
    """Each prediction against the additions with origin 'accumulate' that tb.observe sees backward() make."""
    for what, module, x in _meeting_cases():
        with record_graph(module if isinstance(module, nn.Module) else None, x) as graph:
            out = module(x)
        got = _call(solution.predict_meetings, what, graph)
        events = []
        with tb.observe(events.append):
            out.backward(tb.ones_like(out) if out.ndim else None)
        want = sum(e.origin == "accumulate" for e in events)
        if isinstance(got, np.integer):
            got = int(got)
        if not isinstance(got, int) or isinstance(got, bool):
            raise CheckFailed(f"predict_meetings must return an int; got {type(got).__name__} for {what}")
        if got != want:
            hint = next((h for value, h in _meeting_slips(graph) if value == got and value != want), "")
            raise CheckFailed(f"predict_meetings for {what}: got {got}, but backward() made {want} additions where "
                              "gradients meet" + (f": {hint}" if hint else ""))


# ---------------------------------------------------------------- box_free_path
BOX_FREE_CFG = nn.BlockConfig(d_model=16, n_heads=4, n_kv_heads=2, d_ff=24, max_seq_len=16)


def _raw_path_exists(graph, backward: bool, x) -> bool:
    """The oracle, on the raw recording rather than the view: can the start reach the end through the block's
    own calls alone (scope ('block',): the residual adds, the sums where the block's gradients meet)?"""
    phase = "backward" if backward else "forward"
    ops = graph.ops(phase)
    if backward:
        start = next(i for i, n in enumerate(graph.nodes) if n.kind == "input" and n.phase == "backward")
        end = graph.grad_of(x.grad)
    else:
        start = next(i for i, n in enumerate(graph.nodes) if n.kind == "input" and n.phase == "forward")
        end = ops[-1]                                       # the block's output is its last forward call
    readers: dict = {}
    for i in ops:
        for j in graph.nodes[i].inputs:
            readers.setdefault(j, []).append(i)
    stack, seen = [start], {start}
    while stack:
        j = stack.pop()
        if j == end:
            return True
        for i in readers.get(j, []):
            if graph.nodes[i].scope == ("block",) and i not in seen:
                seen.add(i)
                stack.append(i)
    return False


def _describe(view, name: str) -> str:
    n = view.node(name)
    return f"{name} ({n.label!r}, kind {n.kind!r})"


def _check_one_path(got, view, what: str, exists: bool) -> None:
    """The learner's path for one view: well formed, from start to end along edges, through no box; and found
    exactly when the oracle says there is one."""
    start = next(n.name for n in view.nodes if all(e.dst != n.name for e in view.edges))
    end = next(n.name for n in view.nodes if all(e.src != n.name for e in view.edges))
    if got is None:
        if exists:
            stream = "the gradient's highway" if view.phase == "backward" else "the residual stream"
            raise CheckFailed(f"box_free_path for {what}: got None, but there is a path from "
                              f"{_describe(view, start)} to {_describe(view, end)} through no box: {stream} runs "
                              "past the sublayers")
        return
    if not isinstance(got, (list, tuple)) or not all(isinstance(name, str) for name in got):
        raise CheckFailed(f"box_free_path must return a list of node names (str) or None; got "
                          f"{type(got).__name__} for {what}")
    names = {n.name for n in view.nodes}
    unknown = [name for name in got if name not in names]
    if unknown:
        labels = {n.label for n in view.nodes}
        hint = (": return the DOT names (node.name, like 'n3'), not the labels" if unknown[0] in labels else "")
        raise CheckFailed(f"box_free_path for {what}: {unknown[0]!r} is not a node of the view{hint}")
    edges = {(e.src, e.dst) for e in view.edges}
    if not got or got[0] != start or got[-1] != end:
        short = got and got[-1] != end and (got[-1], end) in edges and not any(
            e.highway for e in view.edges if (e.src, e.dst) == (got[-1], end))
        raise CheckFailed(f"box_free_path for {what}: the path must run from {_describe(view, start)} to "
                          f"{_describe(view, end)}; yours runs from "
                          + (f"{_describe(view, got[0])} to {_describe(view, got[-1])}" if got else "nowhere (empty)")
                          + (" (one step short: the last edge is not flagged highway; follow the edges, not the flag)"
                             if short else "")
                          + ("; here no path reaches the end without a box (the norms sit on the stream itself): "
                             "return None" if not exists else ""))
    for a, b in zip(got, got[1:]):
        if (a, b) not in edges:
            raise CheckFailed(f"box_free_path for {what}: no edge leads from {_describe(view, a)} to "
                              f"{_describe(view, b)}")
    boxes = [name for name in got if view.node(name).kind == "box"]
    if boxes:
        raise CheckFailed(f"box_free_path for {what}: your path passes through the box {_describe(view, boxes[0])}"
                          + ("; in this layout every path does (the norms sit on the stream itself), so the answer "
                             "is None" if not exists else "; another path avoids every box"))
    if not exists:                                          # cannot happen if the oracle is right
        raise CheckFailed(f"box_free_path for {what}: the raw recording has no such path, yet yours checks out")


def check_box_free_path(solution) -> None:
    """Pre-norm, post-norm and parallel blocks, forward and backward, each path validated against the view's own
    edges and its existence against a search over the raw recording."""
    for layout, cfg in (("pre-norm", BOX_FREE_CFG), ("post-norm", BOX_FREE_CFG.with_(layout="post")),
                        ("parallel", BOX_FREE_CFG.with_(layout="parallel"))):
        block = nn.TransformerBlock(cfg, generator=tb.Generator(0), dtype=tb.float64)
        x = tb.randn(2, 5, cfg.d_model, generator=tb.Generator(1), dtype=tb.float64, requires_grad=True)
        with record_graph(block, x) as graph:
            block(x).backward(tb.ones(2, 5, cfg.d_model, dtype=tb.float64))
        for backward in (False, True):
            view = graph.view(depth=1, backward=backward)
            what = f"the {layout} block, {'backward' if backward else 'forward'}"
            got = _call(solution.box_free_path, what, view)
            _check_one_path(got, view, what, _raw_path_exists(graph, backward, x))


# ---------------------------------------------------------------- kv_group_sums
def _group_sums_by_hand(cfg, B: int, L: int) -> list[tuple[tuple, int]]:
    """The closed form: with G = n_heads / n_kv_heads > 1, K and V are each expanded to G copies, and their
    gradients are summed back over the copies: (G - 1) additions for each of the B * n_kv_heads * L * d_head
    entries, written in the shape (B, n_kv_heads, 1, L, d_head). With G = 1 nothing is expanded."""
    G = cfg.n_heads // cfg.n_kv_heads
    one = ((B, cfg.n_kv_heads, 1, L, cfg.d_head), (G - 1) * B * cfg.n_kv_heads * L * cfg.d_head)
    return [one, one] if G > 1 else []


def _as_pairs(got, what: str) -> list[tuple[tuple, int]]:
    """The learner's answer as (shape tuple, int) pairs, or CheckFailed saying what it should be."""
    if not isinstance(got, (list, tuple)):
        raise CheckFailed(f"kv_group_sums must return a list of (shape, flops) pairs; got {type(got).__name__} "
                          f"for {what}")
    pairs = []
    for item in got:
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], (list, tuple))
                and isinstance(item[1], (int, np.integer)) and not isinstance(item[1], bool)):
            raise CheckFailed(f"kv_group_sums for {what}: each item must be a pair (shape tuple, FLOPs int); got "
                              f"{item!r}")
        pairs.append((tuple(int(s) for s in item[0]), int(item[1])))
    return pairs


def check_kv_group_sums(solution) -> None:
    """Grouped-query, multi-query and multi-head attention, against the closed form of the group sum."""
    base = nn.BlockConfig(d_model=32, n_heads=4, n_kv_heads=2, d_ff=48, max_seq_len=16)
    B, L = 2, 6
    for cfg in (base, base.with_(n_kv_heads=1), base.with_(n_heads=8, n_kv_heads=2), base.with_(n_kv_heads=4)):
        G = cfg.n_heads // cfg.n_kv_heads
        what = (f"{cfg.n_heads} query heads sharing {cfg.n_kv_heads} KV heads (groups of {G}), B={B}, L={L}, "
                f"d_head={cfg.d_head}")
        block = nn.TransformerBlock(cfg, generator=tb.Generator(0))
        x = tb.randn(B, L, cfg.d_model, generator=tb.Generator(1), requires_grad=True)
        with record_graph(block, x) as graph:
            block(x).backward(tb.ones(B, L, cfg.d_model))
        got, want = _as_pairs(_call(solution.kv_group_sums, what, graph), what), _group_sums_by_hand(cfg, B, L)
        if sorted(got) == sorted(want):
            continue
        want_shapes = {shape for shape, _ in want}
        if want and not got:
            hint = ("at depth 1 attention is a single box and hides them: open it, graph.view(depth=2, "
                    "backward=True)")
        elif not want:
            hint = "with one KV head per query head nothing is expanded, so nothing is summed over a group"
        elif len(got) > len(want) and want_shapes <= {shape for shape, _ in got}:
            hint = ("you also counted sums that undo other broadcasts (the norm gains, 1/rms, softmax's "
                    "denominator); a group sum sits in the step 'repeat kv' and writes (B, n_kv_heads, 1, L, d_head)")
        elif sorted(shape for shape, _ in got) == sorted(shape for shape, _ in want):
            hint = "the shapes are right but the FLOPs are not: adding G copies takes G - 1 additions per entry"
        else:
            hint = "a group sum writes the shape before the expand, (B, n_kv_heads, 1, L, d_head)"
        raise CheckFailed(f"kv_group_sums for {what}: got {sorted(got)}, expected {sorted(want)}: {hint}")


CHECKS = [("predict_meetings", check_predict_meetings), ("box_free_path", check_box_free_path),
          ("kv_group_sums", check_kv_group_sums)]
