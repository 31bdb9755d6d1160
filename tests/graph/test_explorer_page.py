"""explorer_page.py: what the explorer page holds, against independent oracles — the recorded Graph (ops, their order,
the op each backward call differentiates), count_flops (FLOPs per module), the modules' own parameter counts and
accounting's closed forms (a folded 70B model). The page itself is driven in a real browser in
test_explorer_browser.py."""
from __future__ import annotations

import html
import json
import math
import os
import re
import statistics
from pathlib import Path

import numpy as np
import pytest
from hostile import FINITE, NAMES, ROOT, TITLE, Affine, Scale, hostile

import tinygrad_block as tb
from conftest import block_program
from tinygrad_block import accounting, cpu_kernels, cuda_kernels, nn
from tinygrad_block.kernels import comment
from tinygrad_block.counting import count_flops
from tinygrad_block.clone import LESSONS
from tinygrad_block.explorer_page import ASSETS, LESSON_FILES, MODULE_LESSONS, OP_LESSONS, Explorer, page_of
from tinygrad_block.fuse import kernel_instructions
from tinygrad_block.compiled import program_of, recapture
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
    root = Path(os.path.relpath(LESSONS, saved.parent)).as_posix() + "/"        # its lesson links, from its folder
    assert saved.read_text() == text.replace('"lesson_root":"lessons/"', f'"lesson_root":"{root}"', 1)
    assert sorted(p.name for p in saved.parent.iterdir()) == ["page.html"]
    frame = re.fullmatch(r'<iframe sandbox="allow-scripts" srcdoc="([^"]*)" [^<>]*></iframe>', page._repr_html_())
    assert html.unescape(frame.group(1)) == text and isinstance(page, Explorer)     # the page, in a sandbox
    with pytest.raises(ValueError, match="must end in .html"):
        page.save(tmp_path / "page.svg")
    with pytest.raises(ValueError, match="depth must be an int >= 0"):
        page_of(None, depth=-1)


# ---------------------------------------------------------------- hostile names, titles and values
def embedded(text: str) -> dict:
    """The page's data, parsed as a browser does: strict JSON (no NaN, no Infinity)."""
    data = re.search(r'<script id="data" type="application/json">(.*?)</script>', text, re.S).group(1)
    return json.loads(data, parse_constant=lambda c: pytest.fail(f"{c} in the page's JSON: no browser parses it"))


@pytest.fixture(scope="module")
def hostile_page():
    model, x = hostile()
    return tb.explore(model, x, title=TITLE, values=True)


def test_a_title_holding_every_placeholder_is_shown_as_written_and_fills_nothing(hostile_page):
    text = hostile_page.html
    title = re.search(r"<title>(.*?)</title>", text, re.S).group(1)
    h1 = re.search(r"<h1>(.*?)</h1>", text, re.S).group(1)
    assert html.unescape(title) == html.unescape(h1) == TITLE and "<" not in title + h1
    scripts = re.findall(r"<script[^>]*>(.*?)</script>", text, re.S)
    assert len(scripts) == 3 and text.count("<script") == 3                     # no script but the page's own
    assert scripts[1] == (ASSETS / "viz-global.js").read_text() and scripts[2] == (ASSETS / "explorer.js").read_text()
    assert embedded(text) == hostile_page.data and hostile_page.data["title"] == TITLE


def test_names_reach_the_data_as_written_and_no_markup_reaches_the_html(hostile_page):
    data = re.search(r'<script id="data" type="application/json">(.*?)</script>', hostile_page.html, re.S).group(1)
    assert not re.search(r"[<>&]", data)                         # no </script>, no <!--: \u003c, \u003e, \u0026
    modules = embedded(hostile_page.html)["modules"]
    assert sorted(modules) == sorted([ROOT, *(f"{ROOT}.{name}" for name in NAMES)])
    assert [modules[f"{ROOT}.{name}"]["label"] for name in NAMES] == list(NAMES)


def read_dot(label: str) -> str:
    """What graphviz draws for a DOT string's text (the oracle, written apart from graph_dot): \\n a line break,
    \\" a quote, \\\\ a backslash, then &amp; an ampersand. A quote, line break or control character left raw
    fails."""
    assert not re.search(r'[\x00-\x08\x0a-\x1f\x7f]', label), f"a raw line break or control character in {label!r}"
    out, i = [], 0
    while i < len(label):
        c = label[i]
        assert c != '"', f"an unescaped quote in {label!r}"
        if c == "\\":
            nxt = label[i + 1]
            out.append({"n": "\n", '"': '"', "\\": "\\"}.get(nxt, "\\" + nxt))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out).replace("&amp;", "&")


def as_drawn(name: str) -> str:
    """A name as the drawing shows it: a control character (no SVG may hold it) as its code, \\x07."""
    return re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", lambda m: f"\\x{ord(m[0]):02x}", name)


def test_every_label_the_page_draws_comes_in_its_data_as_dot_text(hostile_page):
    """The page's script only joins statements: each node's label, each module's box (per phase) and frame, and
    each arrow's shape come from Python as DOT text, every name in them drawn as written."""
    data = hostile_page.data
    for name in NAMES:
        m = data["modules"][f"{ROOT}.{name}"]
        assert read_dot(m["frame"]) == as_drawn(name) + "  [−]"
        assert read_dot(m["dot"]["forward"]).startswith(as_drawn(name) + "\n")
        assert read_dot(m["dot"]["backward"]).startswith(as_drawn(name) + "′\n")
    for n in data["nodes"]:
        lines = read_dot(n["dot"]).split("\n")
        shape = "(" + ", ".join(map(str, n["shape"])) + ("," if len(n["shape"]) == 1 else "") + ")"
        if n["kind"] == "op":
            assert lines[0] == as_drawn(n["label"]) + (" (with a scalar)" if n["scalar"] else "")
            assert f"{shape} {n['dtype']}" in lines
        elif n["kind"] not in ("residual", "accumulate"):
            assert lines == [*as_drawn(n["label"]).split("\n"), shape]
    arrows = [e for edges in data["edges"].values() for e in edges]
    assert arrows and all(read_dot(e[4]) == "(" + ", ".join(map(str, e[2])) + ("," if len(e[2]) == 1 else "") + ")"
                          for e in arrows)
    assert set(data["style"]) >= {"op", "box", "kernel", "fused", "check"} and data["dot"]["highway"]


def test_each_kernel_runs_the_ops_recorded_for_its_instructions():
    """A graph recorded while recapture runs the call names each op's instruction (Node.call); the oracle is the
    capture's own record of which instruction made each output array. A kernel's `runs` are then the page's ops
    of its instructions, in order; the token ids' bounds check (a derived instruction, no op) runs in no kernel's
    list and shifts nothing."""
    lm, ids = nn.LM(CFG.with_(n_layers=2), generator=tb.Generator(0)), tb.tensor([[1, 5, 2, 7]])
    program = program_of(lm, ids)
    with record_graph(lm, ids) as graph:
        rec = recapture(program, lm, ids)
    calls = {g: graph.nodes[g].call for g in graph.ops()}
    assert calls == {g: rec.produced[id(graph.nodes[g].tensor.data)] for g in graph.ops()}
    derived = [k for k, s in enumerate(program.instructions) if s.op.name == "derived"]
    assert derived and not set(derived) & set(calls.values())
    page = page_of(graph, fold=False, program=program)
    page_id = {g: f"{phase[0]}{n.name}" for phase in ("forward", "backward")
               for n in graph.view(None, backward=phase == "backward", fold=False).nodes
               if not n.name.startswith("g") for g in n.members}              # g...: a gradient's sink, not an op
    node_of = {k: g for g, k in calls.items()}
    for i, kernel in enumerate(program.kernels):
        want = [page_id[node_of[s.out]] for s in kernel_instructions(kernel) if s.out in node_of]
        assert next(n for n in page.data["nodes"] if n["id"] == f"c{i}")["runs"] == want


def test_a_graph_recorded_apart_from_the_program_is_refused_with_a_reason():
    lm, ids = nn.LM(CFG, generator=tb.Generator(0)), tb.tensor([[1, 5, 2, 7]])
    program = program_of(lm, ids)
    with record_graph(lm, ids) as graph:                     # an eager run of its own: no op names an instruction
        lm(ids).backward(tb.ones(1, 4, CFG.vocab_size))
    with pytest.raises(ValueError, match=r"not recorded alongside a capture of the compiled program"):
        page_of(graph, program=program)


def test_statistics_of_values_near_the_float64_limit_are_finite_and_exact(hostile_page):
    """The finite values (1e300, -1e300, 1, 2, 3, 4) of 8: std about 5.8e299 (oracle: the statistics module, exact
    in fractions), not inf; a histogram over [-1e300, 1e300] (hand-derived: 1, 2, 3 and 4 land in the middle bar,
    12 of 24); inf and nan counted as left out."""
    muls = [n for n in ops(hostile_page, "forward") if n["label"] == "mul"]
    assert len(muls) == len(NAMES)
    for n in muls:
        value = n["value"]
        assert value["mean"] == pytest.approx(statistics.fmean(FINITE), rel=1e-12)
        assert value["std"] == pytest.approx(statistics.pstdev(FINITE), rel=1e-12)
        assert (value["min"], value["max"], value["count"], value["not_finite"]) == (-1e300, 1e300, 8, 2)
        assert value["hist"] == [1] + [0] * 11 + [4] + [0] * 10 + [1]
        assert n["grad"] == {"mean": 1.0, "std": 0.0, "min": 1.0, "max": 1.0, "hist": [8], "count": 8,
                             "not_finite": 0}


@pytest.mark.parametrize("values, stats", [
    ([1.7e308, -1.7e308, 0.0], {"mean": 0.0, "min": -1.7e308, "max": 1.7e308, "count": 3, "not_finite": 0,
                                "hist": [1] + [0] * 11 + [1] + [0] * 10 + [1]}),      # max - min overflows
    ([float("inf"), float("nan"), -float("inf")], {"count": 3, "not_finite": 3}),      # nothing finite to show
])
def test_statistics_at_the_ends_of_float64(values, stats):
    x = tb.tensor(np.array(values), requires_grad=True)
    [n] = ops(tb.explore(Scale(len(values)), x, values=True, backward=False), "forward")      # x * weight
    finite = [v for v in values if math.isfinite(v)]
    assert n["value"] == stats | ({"std": pytest.approx(statistics.pstdev(finite), rel=1e-12)} if finite else {})


def test_a_phase_to_show_that_the_page_lacks_is_an_error_naming_it(tiny):
    _, _, _, graph, _ = tiny
    with pytest.raises(ValueError, match=r"show=\['forward', 'compiled'\] names 'compiled', not a phase of this "
                                         r"page; expected some of 'forward', 'backward'"):
        page_of(graph, show=["forward", "compiled"])
    with pytest.raises(TypeError, match="show must be a list of phases, got str 'forward'"):
        page_of(graph, show="forward")
    with pytest.raises(TypeError, match="title must be a str, got int 7"):
        page_of(graph, title=7)


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
    assert page.data["show"] == ["forward", "backward", "compiled"]        # the kernels beside what they run
    shown = kernels(page)
    described = str(program).splitlines()[2:]                             # '  12  div > add > sqrt  fused ...'
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
        inner, last = chain[:-1], chain[-1]                     # a row sum's inner values have its input's shape
        shape = inner[0]["shape"] if last["label"] == "sum" else k["shape"]
        assert all(c["shape"] == shape for c in inner) and last["shape"] == k["shape"]
        assert all(c["dtype"] == k["dtype"] for c in chain)
        assert k["bytes_saved"] == len(inner) * math.prod(shape) * 4                   # float32 intermediates
        assert k["bytes_written"] == math.prod(k["shape"]) * 4
    assert {k["label"] for k in fused} >= {"mul > sum", "mul > neg > mul > div > sum"}     # row sums among them
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
    assert outside[0]["code"] == "numpy's: an index's bounds check, a Python function on the arrays"
    drawn = [k for k in kernels(unfolded) if not k["path"].startswith(("model.layers.1", "model.layers.2"))]
    assert [k.get("source") for k in kernels(page)] == [k.get("source") for k in drawn]    # only drawn kernels'
    assert 0 < sum("source" in k for k in kernels(page)) < sum("source" in k for k in kernels(unfolded))


# ---------------------------------------------------------------- the kernels' generated source
def planned(program) -> dict:
    """kernel number -> its generated plan: program.plans names each after its kernel (k12: the kernel numbered 12)."""
    return {int(plan.name[1:]): plan for plan in program.plans}


def test_a_generated_kernel_carries_its_c_and_cuda_functions_and_no_other_kernel_carries_source(compiled_tiny):
    _, page, _, program = compiled_tiny
    plans = planned(program)
    assert len(plans) == 25
    for k in kernels(page):
        plan = plans.get(int(k["id"][1:]))
        if plan is None:
            assert "source" not in k
        else:
            assert k["source"] == {"c": cpu_kernels.function(plan), "cuda": cuda_kernels.function(plan)}
            assert k["code"] == "generated C, compiled once, run at every replay"
    sources = [k["source"] for k in kernels(page) if "source" in k]
    c_file = program.source("c")          # a kernel whose code is an earlier one's: there, a call of that one
    calling = [s["c"] for s in sources if s["c"] not in c_file]
    assert c_file.startswith(cpu_kernels.PRELUDE) and len(calling) < len(sources)
    assert all(re.search(rf"^void {re.escape(c.split()[1].rstrip(':'))}\(.*\n  k\d+\(.*// k\d+'s code$", c_file, re.M)
               for c in calling)
    assert program.source("cuda") == cuda_kernels.PRELUDE + "\n" + "\n".join(s["cuda"] for s in sources)


def test_a_kernel_without_generated_source_says_why_in_a_line(compiled_tiny):
    _, page, _, program = compiled_tiny
    plans, chains = planned(program), []
    for k in kernels(page):
        i = int(k["id"][1:])
        group = kernel_instructions(program.kernels[i])
        if i in plans:
            continue
        if len(group) == 1:
            assert k["code"] == f"runs numpy's function ({group[0].op.name}): source is generated for fused chains only"
        else:
            chains.append([s.op.name for s in group])
    assert chains == []                                          # every group of two or more instructions is generated
    assert all("\n" not in k["code"] for k in kernels(page))


class Waves(nn.Module):
    """2 cos(sin(x)): cos, which the kernel language has no line for, read only by the product."""
    def forward(self, x):
        return x.sin().cos() * 2.0


def test_a_chain_of_ops_outside_the_kernel_language_says_which_op_keeps_it_numpys():
    x = tb.randn(4, 8, generator=tb.Generator(0), requires_grad=True)
    page = tb.explore(Waves(), x, compiled=True)
    [chain] = [k for k in kernels(page) if k["kind"] == "fused" and "cos" in k["ops"]]
    assert chain["label"] == "cos > mul" and "source" not in chain
    assert chain["code"] == ("a chain with cos stays numpy's: the kernel language has no cos (a generated kernel "
                             "computes what eager does, bit for bit)")


def test_without_a_c_compiler_a_planned_kernel_shows_its_source_and_says_numpy_runs_it(monkeypatch):
    monkeypatch.setattr(cpu_kernels, "compiler", lambda: None)             # a system without cc, gcc or clang
    g = tb.Generator(0)
    block = nn.TransformerBlock(CFG, generator=g)
    x = tb.randn(2, 8, CFG.d_model, generator=g, requires_grad=True)
    page, program = tb.explore(block, x, compiled=True), block_program(block, x)
    plans = planned(program)
    assert len(plans) == 24 and all(type(program.kernels[i]).__name__ == "Chain" for i in plans)
    shown = [k for k in kernels(page) if "source" in k]
    assert [int(k["id"][1:]) for k in shown] == sorted(plans)
    assert all(k["code"] == "generated, but numpy's functions run it: the compiler was missing or refused this "
               "program" and k["source"]["c"] == cpu_kernels.function(plans[int(k["id"][1:])]) for k in shown)


class RowMax(nn.Module):
    """max over the last axis of 2x, which no gradient passes (so nothing keeps 2x: its group ends in the row max),
    plus x's row sums."""
    def forward(self, x):
        return (x.detach() * 2.0).max(-1) + x.sum(-1)


def test_a_row_max_whose_ties_numpy_keeps_in_no_order_found_shows_its_source_and_says_numpy_runs_it(monkeypatch):
    x = tb.randn(4, 8, generator=tb.Generator(0), requires_grad=True)
    [before] = [k for k in kernels(tb.explore(RowMax(), x, compiled=True)) if "source" in k]
    assert before["code"] == "generated C, compiled once, run at every replay" and "_max(" in before["source"]["c"]
    monkeypatch.setattr(cpu_kernels, "max_lanes", lambda dtype: None)      # as on a machine whose max is not found
    [shown] = [k for k in kernels(tb.explore(RowMax(), x, compiled=True)) if "source" in k]
    assert shown["code"] == ("generated, but numpy's functions run it: which of two equal values numpy keeps on "
                             "this machine (the sign of a zero) was not found, and a replay computes what eager does")


def test_hostile_names_in_a_generated_kernels_source_reach_the_data_as_written_and_no_markup_the_html():
    page = tb.explore(*hostile(Affine), title=TITLE, compiled=True)
    program = block_program(*hostile(Affine))
    shown = [k for k in kernels(page) if "source" in k]
    assert [int(k["id"][1:]) for k in shown] == sorted(planned(program))
    assert [k["source"]["c"] for k in shown] == [cpu_kernels.function(plan) for plan in program.plans]
    assert all(any(comment(f"{ROOT}.{name}") in k["source"][language] for k in shown)   # as comments show names
               for name in NAMES for language in ("c", "cuda"))
    assert [k["code"].startswith("generated C,") for k in shown] == \
        [type(program.kernels[int(k["id"][1:])]).__name__ == "Generated" for k in shown]     # as the C compiler said
    data = re.search(r'<script id="data" type="application/json">(.*?)</script>', page.html, re.S).group(1)
    assert not re.search(r"[<>&]", data) and embedded(page.html) == page.data


# ---------------------------------------------------------------- the lesson that teaches each op and module
def subclasses(cls) -> list:
    return [s for c in cls.__subclasses__() for s in (c, *subclasses(c))]


@pytest.mark.parametrize("key, lesson", sorted((OP_LESSONS | MODULE_LESSONS).items()))
def test_each_lesson_link_names_a_heading_of_its_lesson(key, lesson):
    number, section = lesson
    path = LESSONS / f"{LESSON_FILES[number]}.py"
    assert path.name.startswith(f"{number:02d}_")
    headings = re.findall(r"^# #{2,3} (.+)$", path.read_text(encoding="utf-8"), flags=re.M)
    assert section in headings, f"{key}: no heading {section!r} in {path.name}"


def test_every_primitive_and_every_module_class_has_a_lesson():
    from tinygrad_block.function import Elementwise, Function, Movement, Reduce
    from tinygrad_block.nn.block import Block
    from tinygrad_block.nn.module import Module
    bases = {Elementwise, Movement, Reduce}
    assert {c.name for c in subclasses(Function) if c not in bases} <= set(OP_LESSONS)
    assert {c.__name__ for c in subclasses(Module) if c is not Block and c.__module__.startswith("tinygrad_block.nn")
            } == set(MODULE_LESSONS)


def test_each_op_and_module_of_the_page_names_its_lesson(tiny):
    block, _, page, graph, _ = tiny
    data = page.data
    ops = [n for n in data["nodes"] if n["data_kind"] == "op"]
    assert ops and all(n["teach"] == (n["kind"] if n["kind"] in ("residual", "accumulate") else n["label"])
                       for n in ops)
    assert {path: m.get("teach") for path, m in data["modules"].items()} == \
        {"block": "PreNormBlock", "block.norm1": "RMSNorm", "block.norm2": "RMSNorm", "block.attn": "Attention",
         "block.ffn": "SwiGLU", **{f"block.{s}.{p}": "Linear" for s, ps in (("attn", "qkvo"), ("ffn", "gud"))
                                   for p in [{"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj",
                                              "g": "gate_proj", "u": "up_proj", "d": "down_proj"}[c] for c in ps]}}
    used = {n["teach"] for n in ops} | {m["teach"] for m in data["modules"].values()}
    assert data["lessons"] == {k: [f"{LESSON_FILES[v[0]]}.py", *v] for k, v in (OP_LESSONS | MODULE_LESSONS).items()
                               if k in used}


def test_a_saved_page_links_from_its_folder_to_the_lesson_files(tiny, tmp_path):
    _, _, page, _, _ = tiny
    path = page.save(tmp_path / "deep" / "er" / "page.html")
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', path.read_text(),
                                flags=re.S)[1])
    assert (path.parent / data["lesson_root"]).resolve() == LESSONS.resolve()
    assert all((path.parent / data["lesson_root"] / f).is_file() for f, _, _ in data["lessons"].values())
    assert page.data["lesson_root"] == "lessons/"              # unsaved (a notebook's frame): from the root


# ---------------------------------------------------------------- the gradient check
def planted(monkeypatch, where: str) -> None:
    """A bug of +0.25 on the input gradient of one hand-derived pair: swiglu's (the block's FFN) or linear's."""
    from tinygrad_block.manual import block as mb, linear
    module, name = (mb, "swiglu_backward") if where == "swiglu" else (linear, "linear_backward")
    right = getattr(module, name)
    monkeypatch.setattr(module, name, lambda dout, cache: (lambda dx, g: (dx + 0.25, g))(*right(dout, cache)))


def innermost(scope: list, paths) -> str | None:
    """The innermost module path of a scope among `paths` (the hand derivation of which check an op shows)."""
    found = [".".join(scope[:k]) for k in range(1, len(scope) + 1) if ".".join(scope[:k]) in paths]
    return found[-1] if found else None


@pytest.fixture(scope="module")
def block_and_x():
    g = tb.Generator(0)
    return nn.TransformerBlock(CFG, generator=g), tb.randn(2, 8, CFG.d_model, generator=g, requires_grad=True)


CHECKED = {"block.norm1": "rmsnorm", "block.attn": "attention", "block.norm2": "rmsnorm", "block.ffn": "swiglu",
           **{f"block.attn.{p}_proj": "linear" for p in "qkvo"},
           **{f"block.ffn.{p}_proj": "linear" for p in ("gate", "up", "down")}}


def test_without_a_bug_every_module_agrees_with_its_hand_derived_pair_to_float64_round_off(block_and_x):
    block, x = block_and_x
    page = tb.explore(block, x, check=True)
    checks = page.data["check"]
    assert {p: c["pair"] for p, c in checks.items() if p} == CHECKED and checks[""]["pair"] == "block"
    assert all(c["max"] < 1e-13 for c in checks.values()) and page.data["round_off"] == 1e-10
    assert set(checks["block.attn"]["parts"]) == {"dx", *(f"{p}_proj.weight" for p in "qkvo")}
    assert checks["block.norm1"]["max"] == max(checks["block.norm1"]["parts"].values())
    for n in page.data["nodes"]:                                 # each backward op: the innermost checked module
        expected = innermost(n["scope"], CHECKED) if n["phase"] == "backward" and n["data_kind"] == "op" else None
        assert n.get("check") == expected
    assert {n["check"] for n in page.data["nodes"] if n.get("check")} == set(CHECKED)
    assert x.grad is None and all(p.grad is None for p in block.parameters())     # the caller's, untouched


@pytest.mark.parametrize("where, lit", [("swiglu", {"block.ffn"}), ("linear", {p for p in CHECKED if "proj" in p})])
def test_a_planted_bug_lights_up_exactly_the_modules_of_its_pair(block_and_x, monkeypatch, where, lit):
    block, x = block_and_x
    planted(monkeypatch, where)
    checks = tb.explore(block, x, check=True).data["check"]
    assert {p for p, c in checks.items() if p and c["max"] > 1e-10} == lit
    for p in lit:
        assert checks[p]["parts"]["dx"] == pytest.approx(0.25, abs=1e-12)            # the bug, and nothing else
        assert all(v < 1e-13 for k, v in checks[p]["parts"].items() if k != "dx")
    assert checks[""]["max"] > 0.1 if where == "swiglu" else checks[""]["max"] < 1e-13  # the whole block's pair


def test_check_refuses_a_model_that_is_not_a_block_and_names_it():
    lm = nn.LM(CFG, generator=tb.Generator(0))
    with pytest.raises(ValueError, match="check=True compares a transformer block's backward.*got LM"):
        tb.explore(lm, tb.zeros(1, 8, dtype=tb.int64), check=True)
