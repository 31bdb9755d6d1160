"""explore.py: what the explorer page holds, against independent oracles — the recorded Graph (ops, their order,
the op each backward call differentiates), count_flops (FLOPs per module), the modules' own parameter counts and
accounting's closed forms (a folded 70B model). The page itself is driven in a real browser in
test_explorer_browser.py."""
from __future__ import annotations

import json
import math
import re

import pytest

import tinygrad_block as tb
from conftest import block_program
from tinygrad_block import accounting, nn
from tinygrad_block.counting import count_flops
from tinygrad_block.explore import Explorer, explorer
from tinygrad_block.graph import record_graph

CFG = nn.preset("tiny")


@pytest.fixture(scope="module")
def tiny():
    """The tiny block and its input, the page of its forward and backward, and an independent recording."""
    g = tb.Generator(0)
    block = nn.TransformerBlock(CFG, generator=g)
    x = tb.randn(2, 8, CFG.d_model, generator=g, requires_grad=True)
    page = tb.explore(block, x, depth=2)
    with record_graph(block, x) as graph, count_flops() as fc:
        out = block(x)
        out.backward(tb.ones_like(out))
    return block, x, page, graph, fc


def ops(page, phase):
    return [n for n in page.data["nodes"] if n["phase"] == phase and n["data_kind"] == "op"]


def test_every_primitive_call_is_on_the_page_with_its_shapes_and_flops(tiny):
    _, _, page, graph, _ = tiny
    for phase in ("forward", "backward"):
        recorded = [graph.nodes[i] for i in graph.ops(phase)]
        shown = sorted(ops(page, phase), key=lambda n: int(n["id"][2:]))
        assert [n["label"] for n in shown] == [r.label for r in recorded]
        assert [tuple(n["shape"]) for n in shown] == [r.shape for r in recorded]
        assert [n["flops"] for n in shown] == [r.flops for r in recorded]
        assert [[tuple(s) for s, _ in n["inputs"]] for n in shown] == \
            [[graph.nodes[j].shape for j in r.inputs] for r in recorded]


def test_bytes_read_and_written_follow_the_shapes(tiny):
    _, _, page, _, _ = tiny
    matmul = next(n for n in ops(page, "forward") if n["path"] == "block.attn.q_proj" and n["label"] == "matmul")
    assert matmul["bytes_read"] == 4 * (16 * 64 + 64 * 64) and matmul["bytes_written"] == 4 * 16 * 64
    assert matmul["matmul_flops"] == matmul["flops"] == 2 * 16 * 64 * 64
    views = [n for n in ops(page, "forward") if n["label"] in ("permute", "expand", "slice")]
    assert views and all(n["bytes_read"] == n["bytes_written"] == 0 for n in views)


def test_modules_sum_what_they_hold(tiny):
    block, _, page, _, fc = tiny
    modules = page.data["modules"]
    for path, module in [("block", block), ("block.attn", block.attn), ("block.ffn", block.ffn),
                         ("block.attn.q_proj", block.attn.q_proj), ("block.norm1", block.norm1)]:
        total = modules[path]["total"]
        assert total["parameters"] == module.num_parameters(), path
        for phase in ("forward", "backward"):
            assert total["flops"][phase] == fc.total(phase, scope=path, matmul_only=False), (path, phase)
            assert total["matmul_flops"][phase] == fc.total(phase, scope=path, matmul_only=True), (path, phase)
    assert modules["block.attn"]["parent"] == "block" and modules["block"]["depth"] == 0


def test_partial_sums_are_drawn_as_one_meeting_as_graph_view_draws_them(tiny):
    _, _, page, graph, _ = tiny
    meetings = {n.get("merge", n["id"]) for n in ops(page, "backward") if n["kind"] == "accumulate"}
    drawn = graph.view(1, backward=True).find(kind="accumulate")
    inside = [n for n in ops(page, "backward") if n["kind"] == "accumulate" and len(n["scope"]) == 1]
    assert len({n.get("merge", n["id"]) for n in inside}) == len(drawn) == 2
    assert len(meetings) < len([n for n in ops(page, "backward") if n["kind"] == "accumulate"])


def test_backward_ops_know_the_forward_op_they_differentiate_and_run_in_autograd_order(tiny):
    _, _, page, graph, _ = tiny
    by_id = {n["id"]: n for n in page.data["nodes"]}
    backward = sorted(ops(page, "backward"), key=lambda n: n["order"])
    assert [n["label"] for n in backward] == [graph.nodes[i].label for i in graph.ops("backward")]
    for n in backward:
        source = by_id[n["source"]]
        if n["origin"] == "accumulate":                      # whose gradient the sum is: an op, or a leaf
            assert source["phase"] == "forward"
        else:
            assert source["label"] == n["origin"] and source["phase"] == "forward" and n["id"] in source["grads"]
    matmul = next(n for n in ops(page, "forward") if n["label"] == "matmul")
    assert sorted(by_id[i]["origin"] for i in matmul["grads"]) == ["matmul"] * len(matmul["grads"])


def test_a_folded_model_is_stored_once_and_sums_to_the_closed_form():
    cfg = nn.preset("llama2-7b")
    model = nn.LM(cfg, generator=tb.Generator(0), device="meta")
    ids = tb.zeros(1, 16, dtype=tb.int64, device="meta")
    page = tb.explore(model, ids)
    layer, whole = page.data["modules"]["model.layers.0"], page.data["modules"]["model"]["total"]
    assert layer["repeat"] == 32 and layer["label"] == "layers.0–31"
    assert layer["total"]["parameters"] == 32 * accounting.params_per_block(cfg) == 6_476_267_520   # every layer
    assert layer["total"]["flops"]["forward"] == 32 * accounting.block_forward_flops(cfg, 16, 1, matmul_only=False)
    assert page.data["modules"]["model.layers.0.attn"]["total"]["parameters"] == accounting.params_per_block(
        cfg) - 2 * cfg.d_model - 3 * cfg.d_model * cfg.d_ff                                      # one layer's
    assert not any(n["path"].startswith("model.layers.1") for n in page.data["nodes"])
    assert whole["parameters"] == accounting.total_params(cfg) == 6_738_415_616
    assert whole["flops"]["forward"] == accounting.model_forward_flops(cfg, 16, 1, matmul_only=False)
    assert whole["matmul_flops"]["backward"] == accounting.model_backward_flops(cfg, 16, 1, matmul_only=True)
    assert page.data["values"] is False and len(page.html) < 5 * 2**20


def test_values_give_statistics_and_a_histogram(tiny):
    block, x, _, _, _ = tiny
    page = tb.explore(block, x, values=True)
    matmul = next(n for n in ops(page, "forward") if n["label"] == "matmul")
    with record_graph(block, x) as graph:
        block(x)
    out = next(graph.nodes[i] for i in graph.ops("forward") if graph.nodes[i].label == "matmul").tensor.numpy()
    stats = matmul["value"]
    assert abs(stats["mean"] - out.mean()) < 1e-6 and abs(stats["std"] - out.std()) < 1e-6
    assert (stats["min"], stats["max"]) == (float(out.min()), float(out.max()))
    assert sum(stats["hist"]) == out.size and len(stats["hist"]) == 24
    assert "grad" in matmul                                  # retained for the page


def test_the_callers_gradients_are_left_as_they_were(tiny):
    block, x, _, _, _ = tiny
    before = block.attn.q_proj.weight.grad
    x.grad = None
    tb.explore(block, x)
    assert block.attn.q_proj.weight.grad is before and x.grad is None


def test_the_page_is_one_self_contained_file(tiny, tmp_path):
    _, _, page, _, _ = tiny
    text = page.html
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=|@import", text)
    assert text.count("<script") == 3 and "/*DATA*/" not in text and "/*TITLE*/" not in text
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', text, re.S).group(1))
    assert data == page.data
    saved = page.save(tmp_path / "sub" / "page.html")
    assert saved.read_text() == text and sorted(p.name for p in saved.parent.iterdir()) == ["page.html"]
    assert '<iframe srcdoc="' in page._repr_html_() and isinstance(page, Explorer)
    with pytest.raises(ValueError, match="must end in .html"):
        page.save(tmp_path / "page.svg")
    with pytest.raises(ValueError, match="depth must be an int >= 0"):
        explorer(None, depth=-1)


def test_the_graph_command_writes_the_explorer(tmp_path, command_line):
    out = tmp_path / "model.html"
    data = command_line.json("graph", "--preset", "llama2-70b", "--model", "--out", out)
    assert data["format"] == "html" and data["bytes"] == out.stat().st_size < 5 * 2**20
    page = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', out.read_text(),
                                re.S).group(1))
    assert page["modules"]["model.layers.0"]["repeat"] == 80 and page["show"] == ["forward", "backward"]
    assert page["modules"]["model"]["total"]["parameters"] == accounting.total_params(nn.preset("llama2-70b"))
    wrote = command_line.out("graph", "--preset", "tiny", "--backward", "--depth", "2", "--out", out)
    assert "wrote the explorer" in wrote
    page = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', out.read_text(),
                                re.S).group(1))
    assert page["show"] == ["backward"] and page["depth"] == 2


# ---------------------------------------------------------------- the compiled pane
@pytest.fixture(scope="module")
def compiled_tiny():
    """The tiny block's page with its compiled program, beside a FLOP count of the same call run eagerly and the
    program tb.jit makes on its own (compiled.Program)."""
    g = tb.Generator(0)
    block = nn.TransformerBlock(CFG, generator=g)
    x = tb.randn(2, 8, CFG.d_model, generator=g, requires_grad=True)
    page = tb.explore(block, x, compiled=True)
    with count_flops() as fc:
        out = block(x)
        out.backward(tb.ones_like(out))
    return block, page, fc, block_program(block, x)


def kernels(page):
    return [n for n in page.data["nodes"] if n["phase"] == "compiled"]


def test_the_compiled_pane_holds_the_programs_kernels_in_order(compiled_tiny):
    _, page, _, program = compiled_tiny
    assert page.data["phases"] == ["forward", "backward", "compiled"]
    assert page.data["show"] == ["forward", "backward"]                    # the eager panes open first
    shown = kernels(page)
    described = str(program).splitlines()[1:]                             # '  12  div > add > sqrt  fused ...'
    assert len(shown) == len(program.kernels) == page.data["program"]["kernels"] == len(described)
    assert [n["label"] for n in shown] == [line.split()[1] if "fused" not in line else
                                           line.split("fused")[0].split(None, 1)[1].strip() for line in described]
    assert page.data["program"] == {"kernels": len(program.kernels), "primitives": len(program.plain),
                                    "fused": sum(n["kind"] == "fused" for n in shown)}


def test_kernel_flops_add_up_to_the_eager_counts_per_module(compiled_tiny):
    block, page, fc, _ = compiled_tiny
    modules = page.data["modules"]
    for path in ("block", "block.attn", "block.ffn", "block.norm1", "block.attn.q_proj"):
        total = modules[path]["total"]
        assert total["flops"]["compiled"] == fc.total("forward", scope=path, matmul_only=False) + \
            fc.total("backward", scope=path, matmul_only=False), path
    assert sum(n["flops"] for n in kernels(page)) == fc.total("forward", matmul_only=False) + \
        fc.total("backward", matmul_only=False)


def test_each_primitive_names_the_kernel_that_runs_it_and_each_kernel_its_primitives(compiled_tiny):
    _, page, _, _ = compiled_tiny
    by_id = {n["id"]: n for n in page.data["nodes"]}
    calls = [n for n in page.data["nodes"] if n["phase"] != "compiled" and n["data_kind"] == "op"]
    runs = [i for k in kernels(page) for i in k["runs"]]
    assert len(runs) == len(set(runs))                                    # each primitive in one kernel at most
    for n in calls:
        if "kernel" in n:
            assert n["id"] in by_id[n["kernel"]]["runs"]
        else:                                                             # dropped: broadcast on the fly
            assert n["label"] == "expand" and n["id"] not in runs
    assert {by_id[i]["label"] for k in kernels(page) for i in k["runs"]} <= {n["label"] for n in calls}
    assert sum(len(k["runs"]) for k in kernels(page)) == len([n for n in calls if "kernel" in n])


def test_a_fused_kernel_lists_its_chain_and_the_bytes_it_never_writes(compiled_tiny):
    _, page, _, _ = compiled_tiny
    by_id = {n["id"]: n for n in page.data["nodes"]}
    fused = [k for k in kernels(page) if k["kind"] == "fused"]
    assert fused
    for k in fused:
        chain = [by_id[i] for i in k["runs"]]
        assert len(chain) == len(k["ops"]) >= 2 and [c["label"] for c in chain] == k["ops"]
        assert all(c["shape"] == k["shape"] and c["dtype"] == k["dtype"] for c in chain)
        assert k["bytes_saved"] == (len(chain) - 1) * math.prod(k["shape"]) * 4       # float32 intermediates
        assert k["bytes_written"] == math.prod(k["shape"]) * 4
    matmul = next(k for k in kernels(page) if k["label"] == "matmul" and k["path"] == "block.attn.q_proj")
    assert matmul["flops"] == matmul["matmul_flops"] == 2 * 16 * 64 * 64
    assert matmul["bytes_read"] == 4 * (16 * 64 + 64 * 64) and matmul["bytes_written"] == 4 * 16 * 64


def test_compiled_arrows_join_kernels_that_hand_arrays_on(compiled_tiny):
    _, page, _, program = compiled_tiny
    ids = {k["id"] for k in kernels(page)}
    arrows = page.data["edges"]["compiled"]
    assert arrows and all(a in ids and b in ids and a != b for a, b, *_ in arrows)
    assert all(int(a[1:]) < int(b[1:]) for a, b, *_ in arrows)           # a kernel reads what ran before it


def test_a_folded_model_draws_one_layers_kernels_and_counts_every_layer():
    cfg = CFG.with_(n_layers=3)
    lm = nn.LM(cfg, generator=tb.Generator(0))
    ids = tb.zeros(2, 8, dtype=tb.int64)
    page = tb.explore(lm, ids, compiled=True)
    unfolded = tb.explore(lm, ids, compiled=True, fold=False)
    total = page.data["modules"]["model"]["total"]
    assert total["flops"]["compiled"] == total["flops"]["forward"] + total["flops"]["backward"]
    outside = [k for k in kernels(page) if not k["scope"]]                 # the token ids' bounds check
    assert [k["kind"] for k in outside] == ["check"]
    assert total["ops"]["compiled"] + len(outside) == page.data["program"]["kernels"] == len(kernels(unfolded))
    layer_paths = {k["path"].split(".")[1] for k in kernels(page) if k["path"].startswith("model.layers.")}
    assert layer_paths == {"layers"} and all(not k["path"].startswith(("model.layers.1", "model.layers.2"))
                                             for k in kernels(page))
    assert {k["path"] for k in kernels(unfolded)} >= {"model.layers.2.attn.q_proj"}
