"""Computation graphs: the view of the recorded primitives (collapsed by depth, identical layers folded, the
residual highway named by the modules' steps), its DOT text (deterministic) and graphviz's rendering."""
import re
import statistics
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hostile import FINITE, NAMES, TITLE, hostile

import tinygrad_block as tb
from tinygrad_block import accounting, nn
from tinygrad_block.counting import count_flops
from tinygrad_block.graph import record_graph, render
from tinygrad_block.graph_view import LARGE

GOLDEN = Path(__file__).parent / "golden" / "tiny_computation.dot"
CALLS = ("op", "residual", "accumulate")          # the view's kinds for a primitive call
SVG = "{http://www.w3.org/2000/svg}"


def recorded_block(device="cpu", backward=True, block=nn.TransformerBlock, **changes):
    cfg = nn.preset("tiny").with_(**changes)
    g = tb.Generator(0)
    blk = block(cfg, generator=g, device=device)
    x = tb.randn(2, 8, cfg.d_model, generator=g, device=device, requires_grad=True)
    with record_graph(blk, x) as graph, count_flops() as fc:
        out = blk(x)
        if backward:
            out.backward(tb.ones(2, 8, cfg.d_model, device=device))
    return graph, fc


def recorded_model(name, backward=False, B=1, L=16, model=None):
    """nn.LM of a preset on the shape-only device, run on token ids (B, L) under the recorder and the counter."""
    cfg = nn.preset(name)
    model = model or nn.LM(cfg, generator=tb.Generator(0), device="meta")
    ids = tb.zeros(B, L, dtype=tb.int64, device="meta")
    with record_graph(model, ids) as graph, count_flops() as fc:
        out = model(ids)
        if backward:
            out.backward(tb.ones(*out.shape, device="meta"))
    return cfg, graph, fc


def calls(view):
    return [n for n in view.nodes if n.kind in CALLS]


def phase_calls(fc, phase, skip=lambda scope: False):
    return sum(n for (ph, scope, _, _), n in fc.calls.items() if ph == phase and not skip(scope))


def edge_set(view):
    return {(view.node(e.src).label, view.node(e.dst).label) for e in view.edges}


# ---------------------------------------------------------------- one block
@pytest.mark.parametrize("backward", [False, True])
def test_full_depth_draws_one_node_per_recorded_primitive_call(backward):
    graph, fc = recorded_block()
    phase = "backward" if backward else "forward"
    view = graph.view(backward=backward)
    assert len(graph.ops(phase)) == len(calls(view)) == phase_calls(fc, phase)
    assert sorted(i for n in calls(view) for i in n.members) == graph.ops(phase)
    assert len(re.findall(r'^  n\d+ \[label="[^"]*", shape=(?:box, style="rounded|circle)', graph.to_dot(
        backward=backward), re.M)) == len(calls(view))


def test_full_depth_edges_are_the_recorded_inputs():
    graph, _ = recorded_block()
    view = graph.view()
    assert all(len(n.members) == 1 for n in view.nodes)                 # every node stands for itself
    expected = {(j, i) for i in graph.ops("forward") for j in graph.nodes[i].inputs
                if graph.nodes[j].shape or graph.nodes[j].kind != "const"}   # scalars live in their op's label
    got = [(view.node(e.src).members[0], view.node(e.dst).members[0]) for e in view.edges]
    assert set(got) == expected and len(got) == len(expected)
    assert all(e.shape == graph.nodes[j].shape for e, (j, _) in zip(view.edges, got))


def test_every_module_and_named_step_is_a_cluster_at_full_depth():
    graph, _ = recorded_block(backward=False)
    clusters = set(re.findall(r'subgraph "cluster_([^"]+)"', graph.to_dot()))
    assert clusters == {"norm1", "attn", "attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.o_proj", "norm2", "ffn",
                        "ffn.gate_proj", "ffn.up_proj", "ffn.down_proj", "attn:rope", "attn:repeat kv",
                        "attn:scores", "attn:mask", "attn:softmax", "attn:weighted sum", "ffn:activation", "ffn:gate"}


def test_each_step_cluster_holds_the_ops_of_that_step():
    """softmax(s) = exp(s - max s) / sum exp(s - max s): max, broadcast, sub, exp, sum, broadcast, div."""
    graph, fc = recorded_block(backward=False)
    view = graph.view()
    dot = view.to_dot()
    for step in ("rope", "scores", "mask", "softmax", "weighted sum"):
        inside = re.search(rf'subgraph "cluster_attn:{step}" {{[^\n]*\n(.*?)\n  }}', dot, re.S).group(1)
        names = re.findall(r"^\s+(n\d+) \[", inside, re.M)
        assert names == [n.name for n in view.find(step=step)]
        ops = [n for n in view.find(step=step) if n.kind == "op"]
        assert len(ops) == sum(c for (ph, scope, st, _), c in fc.calls.items() if st == step and scope == "block.attn")
    assert [n.label for n in view.find(step="softmax")] == ["max", "expand", "sub", "exp", "sum", "expand", "div"]
    assert [(n.kind, n.label, n.shape) for n in view.find(step="mask")] == [
        ("op", "expand", (2, 4, 8, 8)), ("const", "const", (8, 8)), ("op", "add", (2, 4, 8, 8))]
    assert [n.label for n in view.find(step="weighted sum")] == ["matmul"]


def test_depth_1_is_the_block_equation_with_a_residual_highway():
    graph, _ = recorded_block(backward=False)
    view = graph.view(depth=1)
    assert [(n.kind, n.label) for n in view.nodes] == [
        ("box", "norm1"), ("input", "input"), ("box", "attn"), ("residual", "add"), ("box", "norm2"),
        ("box", "ffn"), ("residual", "add")]
    x, (h, out) = view.find(kind="input")[0].name, [n.name for n in view.find(kind="residual")]
    box = {n.label: n.name for n in view.find(kind="box")}
    assert {(e.src, e.dst) for e in view.edges} == {
        (x, box["norm1"]), (box["norm1"], box["attn"]), (box["attn"], h), (x, h), (h, box["norm2"]),
        (box["norm2"], box["ffn"]), (box["ffn"], out), (h, out)}
    assert len(view.edges) == 8 and {e.shape for e in view.edges} == {(2, 8, 64)}
    assert [(e.src, e.dst) for e in view.edges if e.highway] == [(x, h), (h, out)]
    assert re.findall(r"^  (\w+) -> (\w+) \[penwidth=3", view.to_dot(), re.M) == [(x, h), (h, out)]


@pytest.mark.parametrize("layout, adds, highway", [
    (nn.PostNormBlock, 2, [("input", "add")]),                       # the stream passes through the norms
    (nn.ParallelBlock, 2, [("input", "add"), ("add", "add")])])
def test_residual_adds_are_the_adds_of_the_residual_step_in_every_layout(layout, adds, highway):
    graph, _ = recorded_block(backward=False, block=layout)
    view = graph.view(depth=1)
    residual = [i for i in graph.ops("forward") if graph.nodes[i].step == "residual"]
    assert [n.members for n in view.find(kind="residual")] == [[i] for i in residual] and len(residual) == adds
    assert [(view.node(e.src).label, view.node(e.dst).label) for e in view.edges if e.highway] == highway


def test_depth_2_opens_attention_and_ffn_into_their_projections():
    graph, _ = recorded_block(backward=False)
    view = graph.view(depth=2)
    assert [n.scope for n in view.find(kind="box")] == [("block", "attn", p) for p in ("q_proj", "k_proj", "v_proj",
                                                        "o_proj")] + [("block", "ffn", p) for p in
                                                                      ("gate_proj", "up_proj", "down_proj")]
    labels = [n.label for n in view.nodes]
    assert "softmax" not in labels and "exp" in labels and "matmul" in labels   # attention's own primitives
    assert len(view.find(kind="residual")) == 2
    assert sum(n.flops for n in view.nodes) == sum(graph.nodes[i].flops for i in graph.ops("forward"))


def test_backward_view_shows_where_the_gradient_splits_and_meets():
    graph, _ = recorded_block()
    view = graph.view(depth=1, backward=True)
    meets = view.find(kind="accumulate")
    assert len(meets) == 2                                            # one per residual
    seed = view.find(label="∂ output")
    assert len(seed) == 1 and seed[0].kind == "grad"
    after_seed = view.successors(seed[0].name)
    assert [n.label for n in after_seed] == ["ffn", "add"]           # the split: into ffn' and straight to the sum
    assert [n.name for n in after_seed][1] == meets[0].name
    assert [n.label for n in view.successors(meets[1].name)] == ["∂ input"]
    assert {n.label for n in view.find(kind="box")} == {"ffn", "norm2", "attn", "norm1"}
    highway = [(e.src, e.dst) for e in view.edges if e.highway]
    assert highway == [(seed[0].name, meets[0].name), (meets[0].name, meets[1].name)]
    assert "ffn′ (backward)" in view.to_dot()


def test_a_node_looked_up_by_anything_but_its_name_is_a_clear_error():
    view = recorded_block()[0].view(depth=1, backward=True)
    first = view.nodes[0]
    assert view.node(first.name) is first
    with pytest.raises(KeyError, match=r"GraphView.node: no node named 'n999' in this backward view; .*n\d"):
        view.node("n999")
    with pytest.raises(KeyError, match="no node named a ViewNode"):
        view.node(view.successors(first.name)[0])        # successors gives nodes, not names


def test_gradient_sums_at_a_block_add_up_where_the_paths_meet():
    """x feeds norm1 three times (x*x twice, x*rstd) and the residual add: 4 gradients, 3 adds in one circle."""
    graph, _ = recorded_block()
    meet = graph.view(depth=1, backward=True).find(kind="accumulate")[1]
    assert len(meet.members) == 3 and meet.flops == 3 * 2 * 8 * 64
    assert all(graph.nodes[i].origin == "accumulate" and graph.nodes[i].scope == ("block",) for i in meet.members)


def test_backward_view_at_depth_2_shows_the_gqa_group_sum():
    graph, _ = recorded_block()
    view = graph.view(depth=2, backward=True)
    group_sums = [n for n in view.find(label="sum") if n.note == "backward of expand: copies add up"
                  and n.shape == (2, 2, 1, 8, 16)]
    assert len(group_sums) == 2                               # K and V: each KV head's 2 query heads summed
    assert all(n.flops == 2 * 2 * 8 * 16 and n.step == "repeat kv" for n in group_sums)
    sinks = {n.label: n.shape for n in view.find(kind="grad")}
    assert sinks["∂ block.norm1.weight"] == (64,) and "∂ block.attn.q_proj.weight" not in sinks


def test_parameter_gradients_come_out_of_the_backward_at_full_depth():
    graph, _ = recorded_block()
    sinks = {n.label for n in graph.view(backward=True).find(kind="grad")}
    params = {f"∂ block.{name}" for name, _ in nn.TransformerBlock(nn.preset("tiny"), generator=tb.Generator(0))
              .named_parameters()}
    assert sinks == params | {"∂ input", "∂ output"}


def test_dot_is_deterministic_and_matches_the_golden_file():
    def tiny():
        x = tb.tensor([[1.0, -2.0], [0.5, 3.0]], requires_grad=True)
        w = nn.Linear(2, 3, generator=tb.Generator(0))
        with record_graph(w, x) as graph:
            w(x).relu().sum().backward()
        return graph.to_dot(title="tiny") + graph.to_dot(backward=True, title="tiny backward")
    first, second = tiny(), tiny()
    assert first == second
    assert first == GOLDEN.read_text(), "regenerate with: python tests/graph/golden/make_golden.py"


def test_same_graph_on_every_device_and_on_meta(device):
    ran, _ = recorded_block(device)
    meta, _ = recorded_block("meta")
    for depth in (None, 1, 2):
        for backward in (False, True):
            assert ran.to_dot(depth, backward=backward) == meta.to_dot(depth, backward=backward)


def test_value_and_gradient_summaries_after_backward():
    cfg = nn.preset("tiny")
    g = tb.Generator(0)
    block = nn.TransformerBlock(cfg, generator=g)
    x = tb.randn(2, 8, cfg.d_model, generator=g, requires_grad=True)
    with record_graph(block, x, retain_grads=True) as graph:
        block(x).sum().backward()
    view = graph.view(values=True)
    assert all(n.summary.startswith("value mean") for n in calls(view))
    with_grad = [i for i in graph.ops("forward") if graph.nodes[i].tensor.requires_grad]
    assert sum("grad mean" in n.summary for n in calls(view)) == len(with_grad) > 90
    softmax = view.find(step="softmax")[-1]                  # each row of probabilities sums to 1: mean 1/8
    assert softmax.summary.startswith(f"value mean {1 / 8:.3g} ")
    assert view.to_dot().count("value mean") == len(graph.ops("forward"))


# ---------------------------------------------------------------- the model
def test_identical_layers_are_drawn_once_with_their_count():
    cfg, graph, fc = recorded_model("llama2-70b")
    view = graph.view(depth=1)
    assert [(n.kind, n.label, n.repeat) for n in view.nodes] == [
        ("box", "embed", 1), ("input", "input ids", 1), ("box", "layers.0", 80), ("box", "norm", 1),
        ("box", "lm_head", 1)]
    ids, embed, layers, norm, head = [n.name for n in view.nodes][1], *[n.name for n in view.find(kind="box")]
    assert [(e.src, e.dst, e.highway) for e in view.edges] == [
        (ids, embed, False), (embed, layers, True), (layers, norm, True), (norm, head, True)]
    assert view.node(ids).shape == (1, 16) and view.node(ids).dtype == "int64"
    assert view.folds == {("model", "layers.0"): (0, 79)}
    layer = view.node(layers)
    assert layer.flops == accounting.block_forward_flops(cfg, 16, 1, matmul_only=False)
    assert sum(n.flops * n.repeat for n in view.nodes) == fc.total("forward") == \
        accounting.model_forward_flops(cfg, 16, 1, matmul_only=False)
    assert [view.runs(n) for n in view.nodes] == [1, 1, 80, 1, 1]
    dot = view.to_dot()
    assert "layers.0–79  × 80" in dot and len(re.findall(r"^  \w+ \[label=", dot, re.M)) == 5 and view.warnings == []


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("name", ["tiny", "gpt2-small", "llama2-70b"])
def test_model_views_at_every_depth_add_up_to_the_count(name, backward):
    cfg, graph, fc = recorded_model(name, backward)
    phase = "backward" if backward else "forward"
    closed = (accounting.model_backward_flops if backward else accounting.model_forward_flops)(
        cfg, 16, 1, matmul_only=False)
    for depth in (0, 1, 2, None):
        view = graph.view(depth, backward=backward)
        assert sum(n.flops * view.runs(n) for n in view.nodes) == fc.total(phase) == closed
        assert view.folds == {("model", "layers.0"): (0, cfg.n_layers - 1)}
        assert view.warnings == [] and len(view.nodes) < LARGE
    other_layers = lambda scope: re.match(r"model\.layers\.[1-9]", scope) is not None    # noqa: E731
    assert len(calls(graph.view(backward=backward))) == phase_calls(fc, phase, other_layers)
    assert [n.label for n in graph.view(0, backward=backward).find(kind="box")] == ["model"]


def test_model_depth_2_opens_one_layer_for_all_and_keeps_the_highway():
    cfg, graph, _ = recorded_model("llama2-70b")
    view = graph.view(depth=2)
    inside = [n for n in view.nodes if n.scope[:2] == ("model", "layers.0")]
    assert [(n.kind, n.label) for n in inside] == [("box", "norm1"), ("box", "attn"), ("residual", "add"),
                                                  ("box", "norm2"), ("box", "ffn"), ("residual", "add")]
    assert not [n for n in view.nodes if re.match(r"layers\.[1-9]", ".".join(n.scope[1:2]))]
    h, out = [n.name for n in view.find(kind="residual")]
    gather, ids = view.find(label="gather")[0], view.find(kind="input")[0]
    assert ids.label == "input ids" and [n.name for n in view.successors(ids.name)] == [gather.name]
    highway = [(view.node(e.src).label, view.node(e.dst).label) for e in view.edges if e.highway]
    assert highway == [("gather", "add"), ("add", "add"), ("add", "mul"), ("mul", "reshape")]
    assert (h, out) in {(e.src, e.dst) for e in view.edges if e.highway}
    per_layer = accounting.block_forward_flops(cfg, 16, 1, matmul_only=False)
    dot = view.to_dot()
    assert 'subgraph "cluster_layers.0" { label="layers.0–79";' in dot
    assert f'label="× 80\\lidentical layers,\\ldrawn once\\l{per_layer / 1e9:.2f} GFLOPs each\\l' \
           f'{80 * per_layer / 1e12:.2f} TFLOPs in all\\l", shape=note' in dot


def test_layers_that_differ_are_not_folded_together():
    cfg = nn.preset("tiny").with_(n_layers=4)
    model = nn.LM(cfg, generator=tb.Generator(0), device="meta")
    model.layers[2] = nn.TransformerBlock(cfg.with_(d_ff=100), generator=tb.Generator(0), device="meta")
    model.layers[2].scope_name = "layers.2"
    cfg, graph, fc = recorded_model("tiny", model=model)
    view = graph.view(depth=1)
    assert [(n.label, n.repeat) for n in view.find(kind="box")] == [
        ("embed", 1), ("layers.0", 2), ("layers.2", 1), ("layers.3", 1), ("norm", 1), ("lm_head", 1)]
    assert sum(n.flops * n.repeat for n in view.nodes) == fc.total("forward")
    assert "layers.0–1  × 2" in view.to_dot()


def test_fold_false_draws_every_layer_and_a_huge_view_warns():
    _, graph, fc = recorded_model("llama2-70b")
    boxes = graph.view(depth=1, fold=False).find(kind="box")
    assert [n.label for n in boxes] == ["embed", *[f"layers.{i}" for i in range(80)], "norm", "lm_head"]
    assert len({n.flops for n in boxes[1:-2]}) == 1
    full = graph.view(fold=False)
    assert len(calls(full)) == phase_calls(fc, "forward") > LARGE
    assert len(full.warnings) == 1 and f"{len(full.nodes):,} nodes" in full.warnings[0]


def test_gpt2_position_embedding_add_is_no_residual():
    """An add in the model's own scope (token + position embeddings) is not a residual add: only the block's
    'residual' step is."""
    _, graph, _ = recorded_model("gpt2-small")
    view = graph.view(depth=1)
    assert [(n.kind, n.label) for n in view.nodes if n.kind in CALLS] == [("op", "expand"), ("op", "add")]
    index = graph.view(depth=None).find(label="index")
    assert [(n.kind, n.shape, n.scope) for n in index] == [("const", (16,), ("model", "pos_embed"))]


# ---------------------------------------------------------------- rendering
@pytest.mark.parametrize("fmt", ["svg", "png", "pdf"])
def test_render_writes_each_format(tmp_path, fmt):
    graph, _ = recorded_block(backward=False)
    path = graph.render(tmp_path / f"block.{fmt}", depth=1)
    data = path.read_bytes()
    assert data[:4] in {b"<?xm", b"\x89PNG", b"%PDF"} and len(data) > 1000
    if fmt == "svg":
        root = ET.fromstring(data)
        titles = {el.text for el in root.iter("{http://www.w3.org/2000/svg}title")}
        texts = {el.text for el in root.iter("{http://www.w3.org/2000/svg}text")}
        assert {n.name for n in graph.view(depth=1).nodes} <= titles and {"attn", "ffn", "norm1", "norm2"} <= texts


def png_size(path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    return struct.unpack(">II", Path(path).read_bytes()[16:24])


def test_png_resolution_follows_dpi_and_defaults_to_slides(tmp_path):
    graph, _ = recorded_block(backward=False)
    view = graph.view(depth=1)
    w100, h100 = png_size(render(view, tmp_path / "a.png", dpi=100))
    w200, h200 = png_size(render(view, tmp_path / "b.png", dpi=200))
    assert abs(w200 - 2 * w100) <= 2 and abs(h200 - 2 * h100) <= 2
    assert png_size(graph.render(tmp_path / "c.png", depth=1)) == (w200, h200)     # default: 200 dpi
    svg = render(view, tmp_path / "d.svg").read_text()
    assert "dpi" not in view.to_dot() and svg == render(view.to_dot(), tmp_path / "e.svg").read_text()


def test_render_rejects_unknown_formats_and_bad_dpi(tmp_path):
    with pytest.raises(ValueError, match="unsupported format 'gif'"):
        render("digraph {}", tmp_path / "x.gif")
    with pytest.raises(ValueError, match="dpi must be a positive int, got 0"):
        render("digraph {}", tmp_path / "x.png", dpi=0)


def test_missing_dot_gives_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(RuntimeError, match="apt-get install graphviz"):
        render("digraph { a -> b }", tmp_path / "x.svg")


@pytest.mark.parametrize("depth, backward", [(None, False), (None, True), (1, False), (1, True)])
def test_any_name_is_drawn_as_written(tmp_path, depth, backward):
    """Quotes, backslashes (graphviz reads \\N), HTML entities, markup, newlines and control characters in module
    names and the title: the DOT text stays valid, graphviz draws each name as it is (a line break where it has
    one, a control character as its code) and every node of the view."""
    model, x = hostile()
    with record_graph(model, x) as graph:
        model(x).backward(tb.ones(2, 4, dtype=tb.float64))
    view = graph.view(depth, backward=backward)
    svg = ET.fromstring(render(view.to_dot(TITLE), tmp_path / "hostile.svg").read_bytes())
    texts = [el.text for el in svg.iter(f"{SVG}text")]
    nodes = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "node"]
    assert len(nodes) == len(view.nodes) and texts[0] == TITLE
    mark = "′ (backward)" if backward and depth == 1 else ""          # a box of the backward view
    for name in NAMES:
        *head, last = name.replace("\x07", "\\x07").split("\n")
        assert [*head, last + mark] == texts[texts.index(head[0] if head else last + mark):][:len(head) + 1]


def test_value_summaries_of_values_near_the_float64_limit_do_not_overflow():
    """std of (1e300, -1e300, 1, 2, 3, 4) is about 5.8e299, not the inf that squaring 1e300 gives; inf and nan left
    out. Oracle: the statistics module, exact in fractions."""
    model, x = hostile()
    with record_graph(model, x, retain_grads=True) as graph:
        model(x).backward(tb.ones(2, 4, dtype=tb.float64))
    muls = graph.view(values=True).find(label="mul")
    value = f"value mean {statistics.fmean(FINITE):.3g} std {statistics.pstdev(FINITE):.3g}"
    assert len(muls) == len(NAMES) and {n.summary for n in muls} == {f"{value}\ngrad mean 1 std 0"}
