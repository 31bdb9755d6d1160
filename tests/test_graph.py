"""Computation graphs: DOT from the recorded primitives, collapsed by depth, deterministic, rendered by dot."""
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.counting import count_flops
from tinygrad_block.graph import record_graph, render

GOLDEN = Path(__file__).parent / "golden" / "tiny_computation.dot"


def recorded_block(device="cpu", backward=True, **changes):
    cfg = nn.preset("tiny").with_(**changes)
    g = tb.Generator(0)
    block = nn.TransformerBlock(cfg, generator=g, device=device)
    x = tb.randn(2, 8, cfg.d_model, generator=g, device=device, requires_grad=True)
    with record_graph(block, x) as graph, count_flops() as fc:
        out = block(x)
        if backward:
            out.backward(tb.ones(2, 8, cfg.d_model, device=device))
    return graph, fc


def nodes(dot):
    """{name: label} of the nodes a DOT text declares."""
    return dict(re.findall(r'^\s+([nbg]\d+) \[label="([^"]*)"', dot, re.M))


def edges(dot):
    return re.findall(r"^\s+([nbg]\d+) -> ([nbg]\d+)", dot, re.M)


def by_label(dot):
    return {label.split("\\n")[0]: name for name, label in nodes(dot).items()}


def op_nodes(dot):
    """Nodes drawn as primitive calls: rounded boxes, and the circles of residual adds and gradient sums."""
    return re.findall(r'^\s+(n\d+) \[label="[^"]*", shape=(?:box, style="rounded|circle)', dot, re.M)


@pytest.mark.parametrize("backward", [False, True])
def test_full_depth_draws_one_node_per_recorded_primitive_call(backward):
    graph, fc = recorded_block()
    phase = "backward" if backward else "forward"
    calls = sum(n for (ph, _, _, _), n in fc.calls.items() if ph == phase)
    assert len(graph.ops(phase)) == calls
    assert len(op_nodes(graph.to_dot(backward=backward))) == calls


def test_full_depth_edges_are_the_recorded_inputs():
    graph, _ = recorded_block()
    dot = graph.to_dot()
    expected = {(i, j) for i in graph.ops("forward") for j in graph.nodes[i].inputs
                if graph.nodes[j].shape or graph.nodes[j].kind != "const"}   # scalars live in their op's label
    assert len(edges(dot)) == len(set(edges(dot))) == len(expected)


def test_every_scope_is_a_cluster_at_full_depth():
    graph, _ = recorded_block(backward=False)
    dot = graph.to_dot()
    clusters = set(re.findall(r'subgraph "cluster_([^"]+)"', dot))
    assert clusters == {"norm1", "attn", "attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.o_proj", "norm2", "ffn",
                        "ffn.gate_proj", "ffn.up_proj", "ffn.down_proj"}


def test_depth_1_is_the_block_equation_with_a_residual_highway():
    graph, _ = recorded_block(backward=False)
    dot = graph.to_dot(depth=1)
    names = by_label(dot)
    assert set(names) == {"input", "norm1", "attn", "norm2", "ffn", "+"}
    adds = [n for n, label in nodes(dot).items() if label.startswith("+\\nresidual")]
    assert len(adds) == 2
    first, second = adds
    expected = {(names["input"], names["norm1"]), (names["norm1"], names["attn"]), (names["attn"], first),
                (names["input"], first), (first, names["norm2"]), (names["norm2"], names["ffn"]),
                (names["ffn"], second), (first, second)}
    assert set(edges(dot)) == expected and len(edges(dot)) == 8
    highway = re.findall(r"^\s+(\w+) -> (\w+) \[penwidth=3", dot, re.M)
    assert set(highway) == {(names["input"], first), (first, second)}


def test_depth_2_opens_attention_and_ffn_into_their_projections():
    graph, _ = recorded_block(backward=False)
    dot = graph.to_dot(depth=2)
    boxes = [label.split("\\n")[0] for name, label in nodes(dot).items() if name.startswith("b")]
    assert boxes == ["attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.o_proj", "ffn.gate_proj", "ffn.up_proj",
                     "ffn.down_proj"]
    labels = [label.split("\\n")[0] for label in nodes(dot).values()]
    assert "softmax" not in labels and "exp" in labels and "matmul" in labels   # attention's own primitives
    assert labels.count("+") == 2 and sum(1 for v in nodes(dot).values() if "residual" in v) == 2


def test_backward_view_shows_where_the_gradient_splits_and_meets():
    graph, _ = recorded_block()
    dot = graph.to_dot(depth=1, backward=True)
    labels = nodes(dot)
    meets = [n for n, label in labels.items() if label.startswith("+\\npaths meet")]
    assert len(meets) == 2                                   # one per residual
    seed = [n for n, label in labels.items() if label.startswith("∂ output")]
    assert len(seed) == 1
    out_edges = [dst for src, dst in edges(dot) if src == seed[0]]
    assert len(out_edges) == 2 and meets[0] in out_edges     # the split: into ffn' and straight to the sum
    assert any(label.startswith("∂ input") for label in labels.values())
    boxes = {label.split("\\n")[0] for name, label in labels.items() if name.startswith("b")}
    assert boxes == {"ffn′ (backward)", "norm2′ (backward)", "attn′ (backward)", "norm1′ (backward)"}


def test_backward_view_at_depth_2_shows_the_gqa_group_sum():
    graph, _ = recorded_block()
    dot = graph.to_dot(depth=2, backward=True)
    group_sums = [label for label in nodes(dot).values()
                  if label.startswith("sum") and "backward of expand: copies add up" in label and "(2, 2, 1, 8, 16)"
                  in label]
    assert len(group_sums) == 2                               # K and V: each KV head's 2 query heads summed
    sinks = [label for label in nodes(dot).values() if label.startswith("∂ block.")]
    assert "∂ block.norm1.weight\\n(64,)" in sinks and "∂ block.attn.q_proj.weight\\n(64, 64)" not in sinks


def test_parameter_gradients_come_out_of_the_backward_at_full_depth():
    graph, _ = recorded_block()
    dot = graph.to_dot(backward=True)
    sinks = {label.split("\\n")[0] for label in nodes(dot).values() if label.startswith("∂ ")}
    params = {f"∂ block.{name}" for name, _ in nn.TransformerBlock(nn.preset("tiny"), generator=tb.Generator(0))
              .named_parameters()}
    assert params | {"∂ input"} <= sinks | {"∂ output"}


def test_dot_is_deterministic_and_matches_the_golden_file():
    def tiny():
        x = tb.tensor([[1.0, -2.0], [0.5, 3.0]], requires_grad=True)
        w = nn.Linear(2, 3, generator=tb.Generator(0))
        with record_graph(w, x) as graph:
            w(x).relu().sum().backward()
        return graph.to_dot(title="tiny") + graph.to_dot(backward=True, title="tiny backward")
    first, second = tiny(), tiny()
    assert first == second
    assert first == GOLDEN.read_text(), "regenerate with: python tests/golden/make_golden.py"


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
    dot = graph.to_dot(values=True)
    assert dot.count("value mean") == len(graph.ops("forward"))
    with_grad = [i for i in graph.ops("forward") if graph.nodes[i].tensor.requires_grad]
    assert dot.count("grad mean") == len(with_grad) > 90


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
        assert set(nodes(graph.to_dot(depth=1))) <= titles and {"attn", "ffn", "norm1", "norm2"} <= texts


def test_render_rejects_unknown_formats(tmp_path):
    with pytest.raises(ValueError, match="unsupported format 'gif'"):
        render("digraph {}", tmp_path / "x.gif")


def test_missing_dot_gives_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(RuntimeError, match="apt-get install graphviz"):
        render("digraph { a -> b }", tmp_path / "x.svg")
