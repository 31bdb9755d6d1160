"""Lesson 19's exercises: reading the explorer's data. Each check builds pages with tb.explore and compares the
learner's answer with an oracle that never saw the page: a second recording of the same call (record_graph: which
forward op each backward call differentiates, and the order the calls ran) and the FLOP counter (count_flops per
module scope). It names the usual slips when it sees one."""
from __future__ import annotations

import copy
import dataclasses
import random
import re

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.counting import count_flops
from tinygrad_block.graph import record_graph

from .common import CheckFailed


def _run(module, x) -> None:
    """module(x) and the backward of sum(out), as tb.explore runs them, with no gradients left from before."""
    for t in [*module.parameters(), x]:
        t.grad = None
    out = module(x)
    out.backward(tb.ones_like(out))


def _tiny(L: int = 8, seed: int = 0, **changes):
    g = tb.Generator(seed)
    cfg = dataclasses.replace(nn.preset("tiny"), **changes)
    block = nn.TransformerBlock(cfg, generator=g)
    return block, tb.randn(1, L, cfg.d_model, generator=g, requires_grad=True)


# ---------------------------------------------------------------- differentiating_ops
def _recorded(module, x):
    """The recorded Graph of the call, and {graph node index: page id}, named as the page names the nodes of its
    full-depth views (every primitive drawn once: no fold in a single block)."""
    with record_graph(module, x) as graph:
        _run(module, x)
    ids = {}
    for phase in ("forward", "backward"):
        for v in graph.view(backward=phase == "backward").nodes:
            if not v.name.startswith("g"):                  # a gradient's sink, drawn beside the op that made it
                ids.update({i: f"{phase[0]}{v.name}" for i in v.members})
    return graph, ids


def _without_links(data: dict, seed: int) -> dict:
    """The page's data as the exercise hands it over: no `grads` or `sums` lists, the nodes shuffled."""
    data = copy.deepcopy(data)
    for n in data["nodes"]:
        n.pop("grads", None)
        n.pop("sums", None)
    random.Random(seed).shuffle(data["nodes"])
    return data


def _differentiating_slips(data: dict, graph, ids: dict, want: list, fwd: int) -> list:
    """(wrong answer, hint) for the usual mistakes, each the right answer with one change; `data` as handed
    over (shuffled)."""
    by_id = {n["id"]: n for n in data["nodes"]}
    with_sums = [ids[i] for i in graph.ops("backward") if graph.nodes[i].source == fwd]
    listed = [n["id"] for n in data["nodes"] if n["id"] in want]
    return [(with_sums, "it includes the sums that gather this tensor's gradient from its several uses (origin "
                        "'accumulate'): they add gradients up, they differentiate nothing"),
            ([by_id[i]["label"] for i in want], "those are the ops' labels; return their ids ('bn140')"),
            (sorted(want), "the ids are sorted as strings ('bn10' < 'bn9'): sort by each op's `order`"),
            (want[::-1], "the order is reversed: the stepper reaches them in increasing `order`"),
            (listed, "they are in the order of data['nodes'], which is not autograd's: sort by `order`"),
            ([ids[fwd], *want], "the forward op itself is not one of the backward ops"),
            ([i for i in want if by_id[i]["flops"]], "the permutes and reshapes count too, though they cost no FLOPs")]


def _forward_picks(data: dict) -> dict:
    """Forward nodes worth asking about, found by what they are: {description: page id}."""
    fwd = [n for n in data["nodes"] if n["phase"] == "forward"]

    def first(label, path, kind="op"):
        return next(n["id"] for n in fwd if n["label"] == label and n["path"] == path and n["kind"] == kind)
    return {"the query projection's matmul": first("matmul", "block.attn.q_proj"),
            "RMSNorm's x * x": first("mul", "block.norm1"),
            "the SiLU's exp (its output is read twice)": first("exp", "block.ffn"),
            "the down projection's final reshape": [n["id"] for n in fwd if n["path"] == "block.ffn.down_proj"
                                                    and n["kind"] == "op"][-1],
            "the mask's expand (nothing to differentiate)": next(n["id"] for n in fwd if n["step"] == "mask"
                                                                 and n["label"] == "expand"),
            "the input x (a tensor read 4 times, not an op)": next(n["id"] for n in fwd if n["kind"] == "input"),
            "the second residual add": [n["id"] for n in fwd if n["kind"] == "residual"][-1]}


def check_differentiating_ops(solution) -> None:
    """The ops of two blocks (grouped-query and multi-head attention) against the recorded graph's `source`."""
    for seed, (name, changes) in enumerate([("the tiny block", {}), ("a multi-head block", {"n_kv_heads": 4})]):
        block, x = _tiny(**changes)
        page = tb.explore(block, x, values=False)
        graph, ids = _recorded(block, x)
        index = {v: k for k, v in ids.items() if graph.nodes[k].phase == "forward"}     # page id -> graph node
        for what, fid in _forward_picks(page.data).items():
            fwd = index[fid]
            want = [ids[i] for i in graph.ops("backward")
                    if graph.nodes[i].source == fwd and graph.nodes[i].origin != "accumulate"]
            data = _without_links(page.data, seed)
            given = copy.deepcopy(data)
            call = f"differentiating_ops(data, {fid!r}) for {what}, in {name}"
            got = solution.differentiating_ops(given, fid)
            if not isinstance(got, (list, tuple)):
                raise CheckFailed(f"{call} must return a list of ids; got {type(got).__name__}")
            got = list(got)
            if got == want:
                continue
            hint = next((h for wrong, h in _differentiating_slips(data, graph, ids, want, fwd)
                         if got == wrong and wrong != want), "")
            if not hint and sorted(map(str, got)) == sorted(want):
                hint = "the right ops in the wrong order: the stepper reaches them in increasing `order`"
            raise CheckFailed(f"{call} returned {got}; the recorded graph says {want}" + (f": {hint}" if hint else ""))


# ---------------------------------------------------------------- heaviest_module
def _module_paths(module, depth: int) -> list[str]:
    """The dotted scopes of the modules `depth` levels below the root, as the page names them."""
    level = [((module.scope_name or type(module).__name__.lower(),), module)]
    for _ in range(depth):
        level = [((*s, name), child) for s, m in level for name, child in m.named_children()]
    return [".".join(s) for s, _ in level]


def _fold(flops: dict) -> dict:
    """Numbered siblings (model.layers.0, model.layers.1, ...: identical layers) summed into the first, which is
    the box the page draws for all of them."""
    out: dict = {}
    for path, n in flops.items():
        key = re.sub(r"\.(\d+)$", ".0", path) if re.search(r"\.layers\.\d+$", path) else path
        out[key] = out.get(key, 0) + n
    return out


def _heaviest_oracle(module, x, phase: str, depth: int) -> tuple[str, int]:
    with count_flops() as fc:
        _run(module, x)
    flops = _fold({p: fc.total(phase, scope=p, matmul_only=False) for p in _module_paths(module, depth)})
    best = max(flops.values())
    winners = [p for p, n in flops.items() if n == best]
    assert len(winners) == 1, f"a tie in the checker's case: {winners}"
    return winners[0], best


def _heaviest_slips(data: dict, phase: str, depth: int, want: tuple) -> list:
    """(wrong answer, hint) for the usual mistakes, each the right answer with one change."""
    modules = data["modules"]

    def best(key=lambda p: modules[p]["total"]["flops"][phase], at=depth):
        paths = [p for p in modules if modules[p]["depth"] == at]
        return (max(paths, key=key), key(max(paths, key=key))) if paths else None
    own = {}
    for n in data["nodes"]:
        if n["phase"] == phase and n["data_kind"] == "op":
            own[n["path"]] = own.get(n["path"], 0) + n["flops"]
    drawn = {}
    for n in data["nodes"]:
        if n["phase"] == phase and n["data_kind"] == "op" and len(n["scope"]) > depth:
            path = ".".join(n["scope"][:depth + 1])
            drawn[path] = drawn.get(path, 0) + n["flops"]
    other = "backward" if phase == "forward" else "forward"
    path = want[0]
    folds = [m for m in modules.values() if m["repeat"] > 1 and m["depth"] == depth]
    fold = (f"that counts one layer of the box {folds[0]['label']}, which stands for {folds[0]['repeat']} identical "
            "layers (its `repeat`): the page draws one layer's ops, but the box's total counts them all"
            if folds else "")
    slips = [(best(lambda p: modules[p]["total"]["matmul_flops"][phase]),
              "those are its matmul FLOPs only; the card's FLOPs count every op"),
             (best(lambda p: modules[p]["total"]["flops"][phase] // modules[p]["repeat"]), fold),
             (max(drawn.items(), key=lambda kv: kv[1]) if drawn else None, fold),
             (best(lambda p: own.get(p, 0)), "that counts only the ops directly in the module, not those of the "
                                             "modules inside it: a box sums everything it holds"),
             (best(lambda p: modules[p]["total"]["flops"][other]), f"that is the {other} pass's heaviest"),
             (best(at=depth + 1), "that is one level too deep: depth 0 is the root, 1 the boxes the page opens with"),
             (best(at=depth - 1) if depth else None, "that is one level too shallow: depth 0 is the root"),
             ((modules[path]["label"], want[1]), f"return the module's path ('{path}'), not its label")]
    return [(tuple(w), h) for w, h in slips if w is not None and h and tuple(w) != tuple(want)]


def _lm():
    cfg = dataclasses.replace(nn.preset("tiny"), n_layers=2, vocab_size=1024)
    model = nn.LM(cfg, generator=tb.Generator(0), device="meta")
    return model, tb.zeros(1, 8, dtype=tb.int64, device="meta")


def _meta_block(L: int, **changes):
    cfg = dataclasses.replace(nn.preset("tiny"), **changes)
    return nn.TransformerBlock(cfg, generator=tb.Generator(0), device="meta"), \
        tb.zeros(1, L, cfg.d_model, device="meta", requires_grad=True)


HEAVY_CASES = [("the tiny block, 8 tokens", lambda: _meta_block(8), [("forward", 1), ("backward", 1),
                                                                      ("forward", 0)]),
               ("a block with d_ff 64, 128 tokens", lambda: _meta_block(128, d_ff=64), [("forward", 1),
                                                                                       ("backward", 1)]),
               ("a two-layer LM, vocabulary 1024", _lm, [("forward", 1), ("backward", 1), ("backward", 0)])]


def check_heaviest_module(solution) -> None:
    """Blocks and a folded two-layer model on the shape-only device, against count_flops per module scope."""
    for name, build, asks in HEAVY_CASES:
        module, x = build()
        data = tb.explore(module, x).data
        for phase, depth in asks:
            want = _heaviest_oracle(module, x, phase, depth)
            call = f"heaviest_module(data, {phase!r}, {depth}) for {name}"
            got = solution.heaviest_module(copy.deepcopy(data), phase, depth)
            if not isinstance(got, (tuple, list)) or len(got) != 2:
                raise CheckFailed(f"{call} must return a tuple (path, FLOPs); got {got!r}")
            got = (got[0], got[1])
            if got == want:
                continue
            hint = next((h for wrong, h in _heaviest_slips(data, phase, depth, want) if got == wrong), "")
            raise CheckFailed(f"{call} returned {got}; count_flops says {want[0]!r} with {want[1]:,} FLOPs" +
                              (f": {hint}" if hint else ""))


CHECKS = [("differentiating_ops", check_differentiating_ops), ("heaviest_module", check_heaviest_module)]
