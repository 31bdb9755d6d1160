"""The counting commands (cli.py): each table and JSON against the closed forms of `accounting`, against the
engine's own counts, and against numbers worked by hand; bad arguments exit 2 with a message that helps."""
import dataclasses
import json
import os
from contextlib import contextmanager
from pathlib import Path
import re
import time

import numpy as np
import pytest

import tinygrad_block as tb
from tinygrad_block import accounting, cli, nn, report
from tinygrad_block.__main__ import main as package_main
from tinygrad_block.counting import count_flops, count_saved_bytes

from conftest import one_line_error

PHASES = ("forward_matmul", "forward_all", "backward_matmul", "backward_all")


def meta_model(cfg, dtype=tb.float32):
    return nn.LM(cfg, generator=tb.Generator(0), dtype=dtype, device="meta")


# ---------------------------------------------------------------- presets
def test_presets_json_totals_are_the_closed_form_and_the_built_model(command_line):
    data = command_line.json("presets")
    assert [p["name"] for p in data["presets"]] == list(nn.PRESETS)
    for p in data["presets"]:
        cfg = nn.preset(p["name"])
        assert p["total_params"] == accounting.total_params(cfg) == meta_model(cfg).num_parameters()
        assert (p["d_model"], p["n_heads"], p["n_kv_heads"], p["d_head"], p["d_ff"], p["n_layers"], p["vocab_size"],
                p["context"], p["tied"]) == (cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_head, cfg.d_ff,
                                             cfg.n_layers, cfg.vocab_size, cfg.max_seq_len, cfg.tie_embeddings)


def test_presets_table_reads_in_human_units(command_line):
    lines = command_line.out("presets").splitlines()
    llama = next(line for line in lines if line.split()[:1] == ["llama2-7b"])
    assert llama.split() == ["llama2-7b", "4,096", "32", "32", "128", "11,008", "32", "32,000", "4,096", "rms",
                             "(pre)", "swiglu", "no", "6.74", "B"]
    assert "134.52 M" in next(line for line in lines if line.split()[:1] == ["smollm-135m"])


def test_presets_runs_as_a_module(command_line):
    done = command_line.process("presets")
    assert done.returncode == 0, done.stderr
    assert "llama2-70b" in done.stdout and "68.98 B" in done.stdout


def test_package_main_keeps_tour_and_adds_the_counting_commands(capsys):
    with pytest.raises(SystemExit) as exit_:
        package_main(["--help"])
    assert exit_.value.code == 0
    helptext = capsys.readouterr().out
    assert all(name in helptext for name in ("tour", "presets", "params", "flops", "walk", "memory"))
    assert package_main(["params", "--preset", "tiny", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == accounting.total_params(nn.preset("tiny"))


# ---------------------------------------------------------------- params
@pytest.mark.parametrize("name", ["llama2-7b", "llama2-70b", "smollm-135m", "gpt2-small", "bert-base"])
def test_params_rows_equal_the_closed_form_and_the_built_model(name, command_line):
    cfg = nn.preset(name)
    data = command_line.json("params", "--preset", name)
    block = nn.TransformerBlock(cfg, generator=tb.Generator(0), device="meta")
    assert data["per_block"] == accounting.params_per_block(cfg) == block.num_parameters()
    assert data["total"] == accounting.total_params(cfg) == meta_model(cfg).num_parameters()
    assert data["closed_form"] == {"per_block": data["per_block"], "total": data["total"]}
    for part, closed in (("block", accounting.block_param_breakdown(cfg)),
                         ("model", accounting.model_param_breakdown(cfg))):
        assert {k: r["measured"] for k, r in data[part].items()} == closed
    shares = accounting.attention_ffn_shares(cfg)
    assert data["shares"]["measured"] == pytest.approx({"attention": shares.attention, "ffn": shares.ffn})


def test_params_llama2_7b_by_hand(command_line):
    """The usual parameter budget per block: 4 d^2 + 3 d d_ff + 2 d, about 202 M; the model 6.74 B."""
    d, d_ff, V = 4096, 11008, 32000
    data = command_line.json("params", "--preset", "llama2-7b")
    assert data["per_block"] == 4 * d * d + 3 * d * d_ff + 2 * d == 202_383_360
    assert data["total"] == 32 * data["per_block"] + 2 * V * d + d
    assert data["block"]["W_gate"]["shapes"] == [[d_ff, d]]
    assert data["block"]["norms"]["shapes"] == [[d], [d]]
    text = command_line.out("params", "--preset", "llama2-7b")
    assert "202,383,360" in text and "6,738,415,616" in text and "6.74 B" in text and "202.38 M" in text
    assert "attention (Q, K, V, O) 33.16%, FFN 66.84%" in text


def test_params_groups_biases_and_lora(command_line):
    cfg = nn.preset("gpt2-small").with_(lora_rank=8)
    data = report.params_data(cfg)
    assert {k: r["measured"] for k, r in data["block"].items()} == accounting.block_param_breakdown(cfg)
    assert data["block"]["lora"]["measured"] == 2 * 8 * (768 + 768)           # q_proj and v_proj, A and B
    assert data["block"]["biases"]["measured"] == 4 * 768 + 3072 + 768
    tied = command_line.out("params", "--preset", "gpt2-small")
    assert "tied: reuses the embedding" in tied


# ---------------------------------------------------------------- flops
def engine_flops(cfg, L, B):
    """The engine's own count, independently of the CLI: forward, then backward from zeros on the logits."""
    model = meta_model(cfg)                                   # built outside: its RoPE tables are not the run
    with count_flops() as fc:
        logits = model(tb.zeros(B, L, dtype=tb.int64, device="meta"))
        logits.backward(tb.zeros(*logits.shape, device="meta"))
    return {scope: {f"{ph}_{kind}": fc.total(ph, scope=scope, matmul_only=kind == "matmul")
                    for ph in ("forward", "backward") for kind in ("matmul", "all")}
            for scope in ("model.layers.0", "")}


@pytest.mark.parametrize("name, L, B", [("tiny", 16, 2), ("llama3-8b", 6, 2), ("smollm-135m", 5, 3),
                                        ("gpt2-small", 7, 2), ("bert-base", 9, 1)])
def test_flops_equal_the_closed_form_and_the_engine(name, L, B, command_line):
    cfg = nn.preset(name)
    data = command_line.json("flops", "--preset", name, "--seq-len", str(L), "--batch", str(B))
    closed = {"per_block": {p: getattr(accounting, f"block_{p.split('_')[0]}_flops")(
        cfg, L, B, matmul_only=p.endswith("matmul")) for p in PHASES},
        "model": {p: getattr(accounting, f"model_{p.split('_')[0]}_flops")(
            cfg, L, B, matmul_only=p.endswith("matmul")) for p in PHASES}}
    engine = engine_flops(cfg, L, B)
    assert data["per_block"] == closed["per_block"] == engine["model.layers.0"]
    assert data["model"] == closed["model"] == engine[""]
    assert data["closed_form"] == closed
    assert all(v == 0 for part in data["difference"].values() for v in part.values())
    disjoint = [k for k in data["modules"] if k not in ("model", "block") and not k.startswith("block.")]
    for p in PHASES:
        assert sum(data["modules"][k][p] for k in disjoint) == data["model"][p]
        assert sum(data["modules"][k][p] for k in data["modules"] if k.startswith("block.")) == data["per_block"][p]
        assert data["per_block"][p] > 0 and data["model"][p] >= data["modules"]["blocks"][p]
    # every block costs the same: gradient sums where a tensor forks count where the paths meet (a block sums
    # the gradients of its own input's residual fork)
    for p in PHASES:
        assert data["modules"]["blocks"][p] == cfg.n_layers * data["per_block"][p]


def test_flops_table_shows_every_module_and_zero_differences(command_line):
    lines = command_line.out("flops", "--preset", "gpt2-small", "--seq-len", "8").splitlines()
    text = "\n".join(lines)
    for label in ("embedding", "position embedding", "norm1", "attn", "norm2", "ffn", "residual adds",
                  "block 0 total", "all 12 blocks", "final norm", "LM head",
                  "model's own ops (position add, tied gradients summed)", "model total"):
        assert label in text
    compare = [line for line in lines if line.strip().startswith(("one block,", "model,"))]
    assert len(compare) == 8 and all(line.split()[-1] == "0" for line in compare)


def test_flops_llama2_70b_at_4096_is_fast_and_matches_the_rule(command_line):
    """Matmuls of one block forward: 2 L (matmul parameters) + 4 L^2 d_model (scores and weights @ V)."""
    d, d_kv, d_ff, L = 8192, 1024, 28672, 4096
    start = time.perf_counter()
    data = command_line.json("flops", "--preset", "llama2-70b", "--seq-len", str(L))
    assert time.perf_counter() - start < 5.0
    weights = 2 * d * d + 2 * d * d_kv + 3 * d * d_ff
    assert data["per_block"]["forward_matmul"] == 2 * L * weights + 4 * L * L * d
    assert data["per_block"]["backward_matmul"] == 2 * data["per_block"]["forward_matmul"]
    assert data["model"]["forward_matmul"] == 80 * data["per_block"]["forward_matmul"] + 2 * L * d * 32000
    assert data["difference"]["model"] == dict.fromkeys(PHASES, 0)


# ---------------------------------------------------------------- walk
WALK_NAMES = {"input x", "RMSNorm (norm1)", "RMSNorm (norm2)", "LayerNorm (norm1)", "LayerNorm (norm2)",
              "Q projection", "K projection", "V projection", "O projection", "RoPE on q, k",
              "repeat K, V heads (GQA)", "scores q k^T / sqrt(d_head)", "causal mask", "softmax", "weights @ V",
              "residual add", "gate projection", "up projection", "down projection", "SiLU(gate)",
              "SiLU(gate) * up", "GELU (erf)", "GELU (tanh)", "ReLU"}
LLAMA_STEPS = ["input x", "RMSNorm (norm1)", "Q projection", "K projection", "V projection", "RoPE on q, k",
               "scores q k^T / sqrt(d_head)", "causal mask", "softmax", "weights @ V", "O projection", "residual add",
               "RMSNorm (norm2)", "gate projection", "SiLU(gate)", "up projection", "SiLU(gate) * up",
               "down projection", "residual add"]


def test_walk_llama2_7b_is_the_usual_table_by_hand(command_line):
    """The block walked through: 2 d^2 per attention projection, 2 d d_ff per FFN projection, 404 M in all."""
    d, d_ff = 4096, 11008
    data = command_line.json("walk", "--preset", "llama2-7b")
    steps = {s["operation"]: s for s in data["steps"]}
    assert [s["operation"] for s in data["steps"]] == LLAMA_STEPS
    assert [s["step"] for s in data["steps"]] == list(range(len(LLAMA_STEPS)))
    for name in ("Q projection", "K projection", "V projection", "O projection"):
        assert steps[name]["matmul_flops"] == steps[name]["flops"] == 2 * d * d == 33_554_432
    for name in ("gate projection", "up projection", "down projection"):
        assert steps[name]["matmul_flops"] == 2 * d * d_ff == 90_177_536
    assert steps["Q projection"]["shape"] == [1, 32, 1, 128] and steps["up projection"]["shape"] == [1, 1, d_ff]
    assert steps["residual add"]["shape"] == [1, 1, d] and steps["residual add"]["flops"] == d
    assert steps["weights @ V"]["shape"] == [1, 1, d]                   # heads merged back
    assert data["total"]["matmul"] == 4 * 2 * d * d + 3 * 2 * d * d_ff + 4 * d == 404_766_720
    text = command_line.out("walk", "--preset", "llama2-7b")
    assert "33.55 M" in text and "90.18 M" in text and "404.77 M" in text and "(1, 32, 1, 128)" in text


@pytest.mark.parametrize("name", list(nn.PRESETS))
def test_walk_totals_equal_the_closed_form_and_the_engine(name, command_line):
    cfg = nn.preset(name)
    data = command_line.json("walk", "--preset", name)
    block = nn.TransformerBlock(cfg, generator=tb.Generator(0), device="meta")
    with count_flops() as fc:
        block(tb.zeros(1, 1, cfg.d_model, device="meta"))
    assert data["total"] == {"matmul": fc.total("forward", matmul_only=True), "all": fc.total("forward")}
    assert data["closed_form"] == {"matmul": accounting.block_forward_flops(cfg, 1, 1, matmul_only=True),
                                   "all": accounting.block_forward_flops(cfg, 1, 1, matmul_only=False)}
    assert data["difference"] == {"matmul": 0, "all": 0}
    assert sum(s["ops"].get("matmul", 0) for s in data["steps"]) == 7 + 2 - (cfg.ffn != "swiglu")


def test_walk_gqa_and_post_norm(command_line):
    llama70 = [s for s in command_line.json("walk", "--preset", "llama2-70b")["steps"]]
    by_name = {s["operation"]: s for s in llama70}
    assert by_name["K projection"]["shape"] == [1, 8, 1, 128]             # 8 KV heads
    assert by_name["repeat K, V heads (GQA)"]["shape"] == [1, 64, 1, 128]  # shared by groups of 8 query heads
    assert by_name["repeat K, V heads (GQA)"]["flops"] == 0
    bert = [s["operation"] for s in command_line.json("walk", "--preset", "bert-base")["steps"]]
    assert bert == ["input x", "Q projection", "K projection", "V projection", "scores q k^T / sqrt(d_head)",
                    "softmax", "weights @ V", "O projection", "residual add", "LayerNorm (norm1)", "up projection",
                    "GELU (erf)", "down projection", "residual add", "LayerNorm (norm2)"]


# ---------------------------------------------------------------- memory
def test_memory_llama2_70b_beside_the_usual_estimate(command_line):
    """The quoted 25 GB of activations for Llama-2-70B at 4096 tokens in bf16, beside the engine's measurement."""
    cfg = nn.preset("llama2-70b")
    data = command_line.json("memory", "--preset", "llama2-70b", "--seq-len", "4096", "--batch", "1")
    assert data["estimate"] == accounting.training_memory(cfg, 4096, 1, bytes_per_element=2)
    assert data["estimate"]["activations"] == 25 * 2**30
    assert data["kv_cache"] == accounting.kv_cache_bytes(cfg, 4096, 1, 2) == 2 * 80 * 4096 * 8 * 128 * 2
    probabilities = 64 * 4096 * 4096 * 2                                   # the L x L softmax output, per layer
    assert data["measured_activations"]["per_layer"] > probabilities
    assert data["measured_over_estimate"] > 10
    text = command_line.out("memory", "--preset", "llama2-70b", "--seq-len", "4096", "--batch", "1")
    assert "25.00 GiB" in text and "FlashAttention" in text and "L x L attention probabilities" in text


@pytest.mark.parametrize("name, L, B", [("tiny", 32, 2), ("gpt2-small", 16, 1), ("smollm-135m", 8, 3)])
def test_memory_measures_the_engine_in_each_dtype(name, L, B, command_line):
    cfg = nn.preset(name)
    got = {dtype: command_line.json("memory", "--preset", name, "--seq-len", str(L), "--batch", str(B),
                           "--dtype", dtype) for dtype in ("bf16", "fp16", "fp32")}
    scopes = {}
    for dtype, data in got.items():
        size = data["bytes_per_element"]
        assert size == (4 if dtype == "fp32" else 2)
        assert data["estimate"] == accounting.training_memory(cfg, L, B, bytes_per_element=size)
        assert data["kv_cache"] == accounting.kv_cache_bytes(cfg, L, B, size)
        assert data["activation_estimate"]["per_layer"] == accounting.activation_bytes_per_token_per_layer(
            cfg, size) * B * L
        model = meta_model(cfg, tb.float32 if size == 4 else tb.float16)
        with count_saved_bytes() as saved:
            model(tb.zeros(B, L, dtype=tb.int64, device="meta"))
        measured = data["measured_activations"]
        assert measured["per_layer"] == saved.total("model.layers.0")
        assert measured["layers"] == cfg.n_layers * measured["per_layer"]
        assert measured["model"] == saved.total() > measured["layers"] - measured["per_layer"]
        scopes[dtype] = saved.bytes
    assert got["bf16"]["measured_activations"] == got["fp16"]["measured_activations"]
    assert scopes["fp32"].keys() == scopes["fp16"].keys()
    for scope, n32 in scopes["fp32"].items():   # half the bytes in float16, except the norms' float32 statistics
        if scope.split(".")[-1].startswith("norm"):
            assert scopes["fp16"][scope] > n32 // 2, scope
        else:
            assert n32 == 2 * scopes["fp16"][scope], scope


def test_memory_scales_with_the_batch(command_line):
    one, two = (command_line.json("memory", "--preset", "tiny", "--seq-len", "24", "--batch", b) for b in "12")
    assert two["measured_activations"]["per_layer"] == 2 * one["measured_activations"]["per_layer"]
    assert two["estimate"]["activations"] == 2 * one["estimate"]["activations"]


# ---------------------------------------------------------------- bad arguments
@pytest.mark.parametrize("argv, message", [
    (["params", "--preset", "llama9"], "unknown preset 'llama9'; expected one of llama2-7b, llama2-13b"),
    (["walk"], "the following arguments are required: --preset"),
    (["flops", "--preset", "tiny"], "the following arguments are required: --seq-len"),
    (["flops", "--preset", "tiny", "--seq-len", "0"], "--seq-len: must be a positive integer, got '0'"),
    (["flops", "--preset", "tiny", "--seq-len", "-4"], "--seq-len: must be a positive integer, got '-4'"),
    (["flops", "--preset", "tiny", "--seq-len", "ten"], "--seq-len: must be a positive integer, got 'ten'"),
    (["flops", "--preset", "tiny", "--seq-len", "8", "--batch", "0"], "--batch: must be a positive integer"),
    (["flops", "--preset", "llama2-7b", "--seq-len", "4097"],
     "--seq-len 4,097 exceeds the context of llama2-7b: 4,096 tokens"),
    (["memory", "--preset", "tiny", "--seq-len", "129"], "--seq-len 129 exceeds the context of tiny: 128 tokens"),
    (["memory", "--preset", "tiny", "--seq-len", "8", "--dtype", "int8"], "invalid choice: 'int8'"),
    (["nonsense"], "invalid choice: 'nonsense'"),
])
def test_bad_arguments_exit_2_with_a_helpful_message(command_line, argv, message):
    assert message in command_line.mistake(*argv)


@pytest.mark.parametrize("cfg, expected", [
    (nn.preset("tiny").with_(layout="parallel"), "SiLU(gate) * up"),
    (nn.preset("tiny").with_(lora_rank=4), "Q projection"),
    (nn.preset("gpt2-small").with_(ffn="relu", n_kv_heads=4), "ReLU"),
])
def test_walk_variants_beyond_the_presets(cfg, expected):
    data = report.walk_data(cfg)
    assert data["difference"] == {"matmul": 0, "all": 0}
    assert expected in [s["operation"] for s in data["steps"]]
    assert {s["operation"] for s in data["steps"]} <= WALK_NAMES          # every op belongs to a named step


def test_walk_steps_cost_what_a_hand_derivation_says(command_line):
    """One token of llama2-7b (H = H_kv = 32, d_head = 128): RoPE rotates q and k, 3 FLOPs per element
    (x1 cos - x2 sin, x2 cos + x1 sin); the mask adds once per score (H scores); softmax over one score per
    head costs 5T - 2R with T = R = H (max, subtract, exp, sum, divide)."""
    H, d_head = 32, 128
    steps = {s["operation"]: s for s in command_line.json("walk", "--preset", "llama2-7b")["steps"]}
    assert steps["RoPE on q, k"]["flops"] == 3 * (H + H) * d_head
    assert steps["causal mask"]["flops"] == H and steps["causal mask"]["ops"]["add"] == 1
    assert steps["softmax"]["flops"] == 5 * H - 2 * H
    assert steps["scores q k^T / sqrt(d_head)"]["matmul_flops"] == 2 * H * d_head


# ---------------------------------------------------------------- graph
@pytest.mark.parametrize("fmt, magic", [("svg", b"<?xml"), ("png", b"\x89PNG"), ("pdf", b"%PDF"), ("dot", b"digraph")])
def test_graph_writes_each_format(tmp_path, fmt, magic, command_line):
    out = tmp_path / f"block.{fmt}"
    data = json.loads(command_line.out("graph", "--preset", "tiny", "--depth", "1", "--out", str(out), "--json"))
    assert out.read_bytes().startswith(magic) and data["path"] == str(out) and data["format"] == fmt
    assert data["nodes"] == 7 and data["edges"] == 8     # input, norm1, attn, +, norm2, ffn, +; the block's edges


def test_graph_of_a_70b_block_at_full_depth_goes_through_the_shape_only_device(tmp_path, command_line):
    from tinygrad_block.graph import record_graph
    out = tmp_path / "block.dot"
    data = json.loads(command_line.out("graph", "--preset", "llama2-70b", "--backward", "--out", str(out), "--json"))
    cfg = nn.preset("llama2-70b")
    blk = nn.TransformerBlock(cfg, generator=tb.Generator(0), device="meta")
    x = tb.randn(1, 16, cfg.d_model, generator=tb.Generator(0), device="meta", requires_grad=True)
    with record_graph(blk, x) as graph:
        out_t = blk(x)
        out_t.backward(tb.ones_like(out_t))
    assert data["backward"] and out.read_text().count(' [label="') >= len(graph.ops("backward"))


def test_graph_of_the_whole_model_at_depth_1_draws_the_identical_layers_once(tmp_path, command_line):
    out = tmp_path / "model.dot"
    data = json.loads(command_line.out("graph", "--preset", "llama2-7b", "--model", "--depth", "1", "--out", str(out),
                          "--json"))
    text = out.read_text()
    assert 'label="layers.0–31  × 32' in text and 'label="lm_head\\n' in text and "layers.1\\n" not in text
    assert data["nodes"] == 5                                 # token ids, embed, the 32 layers as one, norm, head


def test_graph_all_layers_draws_every_layer(tmp_path, command_line):
    out = tmp_path / "model.dot"
    data = json.loads(command_line.out("graph", "--preset", "llama2-7b", "--model", "--depth", "1", "--all-layers",
                          "--out", str(out), "--json"))
    text = out.read_text()
    assert data["nodes"] == 4 + 32 and "×" not in text
    assert all(f'label="layers.{i}\\n' in text for i in range(32))


def png_width(path) -> int:
    return int.from_bytes(path.read_bytes()[16:20], "big")          # the IHDR chunk: width, then height


def test_graph_dpi_scales_a_png_and_is_refused_for_vector_drawings(tmp_path, command_line):
    widths = {}
    for dpi in (100, 300):
        out = tmp_path / f"{dpi}.png"
        command_line.out("graph", "--preset", "tiny", "--depth", "1", "--dpi", str(dpi), "--out", str(out))
        widths[dpi] = png_width(tmp_path / f"{dpi}.png")
    assert 2.9 < widths[300] / widths[100] < 3.1
    result = command_line.process("graph", "--preset", "tiny", "--dpi", "100", "--out", tmp_path / "x.svg")
    error = one_line_error(result, "--dpi 100", "only a .png has pixels")
    assert "svg" in error and not (tmp_path / "x.svg").exists()


def test_graph_values_on_every_device_draw_the_same_numbers(tmp_path, device, command_line):
    """--values runs the block on --device: the same drawing, and the same value summaries as on
    the CPU up to float32 rounding (a GPU sums in another order; a summary has three significant digits)."""
    dots = {}
    for d in ("cpu", device):
        out = tmp_path / f"{d}.dot"
        command_line.out("graph", "--preset", "tiny", "--values", "--device", d, "--out", str(out))
        dots[d] = out.read_text()
    number = r"-?\d+(?:\.\d+)?(?:e[-+]\d+)?"
    assert dots["cpu"].count("value mean") > 100
    assert re.sub(number, "#", dots[device]) == re.sub(number, "#", dots["cpu"])
    np.testing.assert_allclose([float(v) for v in re.findall(number, dots[device])],
                               [float(v) for v in re.findall(number, dots["cpu"])], rtol=2e-2, atol=1e-5)


@pytest.mark.parametrize("argv, message", [
    (["--preset", "tiny", "--values", "--device", "tpu", "--out", "x.dot"], "unknown device 'tpu'"),
    (["--preset", "tiny", "--out", "x.gif"], "extension must be one of svg, png, pdf, dot"),
    (["--preset", "tiny", "--depth", "-1", "--out", "x.svg"], "must be an integer >= 0"),
])
def test_graph_rejects_bad_arguments(command_line, argv, message):
    assert message in command_line.mistake("graph", *argv)


# ---------------------------------------------------------------- a user's mistakes: one line, status 2
@pytest.mark.parametrize("argv, fragments", [
    (["walk", "--preset", "tiny", "--batch", "2"],
     ["python -m tinygrad_block: error: unrecognized arguments: --batch 2", "(see python -m tinygrad_block --help)"]),
    (["memory", "--preset", "tiny", "--seq-len", "8", "--dtype", "int3"],
     ["memory: error: argument --dtype: invalid choice: 'int3'", "(see python -m tinygrad_block memory --help)"]),
    (["params"], ["params: error: the following arguments are required: --preset", "params --help)"]),
    (["nope"], ["error: argument <command>: invalid choice: 'nope'", "(see python -m tinygrad_block --help)"]),
    (["train", "text", "--steps", "-1"], ["train: error: argument --steps: must be a positive integer, got '-1'"]),
])
def test_argument_mistakes_are_one_line_that_points_to_the_help(argv, fragments, command_line):
    one_line_error(command_line.process(*argv), *fragments)


def test_the_one_parser_serves_every_command(capsys):
    assert package_main is cli.main
    assert cli.main([]) == 2                                            # no command: the help, status 2
    helptext = capsys.readouterr().out
    assert all(name in helptext for name in ("tour", *cli.COMMANDS))
    for name in ("tour", *cli.COMMANDS):
        with pytest.raises(SystemExit) as exit_:
            cli.main([name, "--help"])
        assert exit_.value.code == 0 and f"python -m tinygrad_block {name}" in capsys.readouterr().out


@pytest.fixture
def file_in_the_way(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    return blocker


def test_graph_out_under_a_file_says_so(file_in_the_way, command_line):
    out = file_in_the_way / "sub" / "block.dot"
    result = command_line.process("graph", "--preset", "tiny", "--out", str(out))
    one_line_error(result, "graph: error: --out", str(file_in_the_way / "sub"), "a file is in the way")


def test_graph_out_that_is_a_folder_says_so(tmp_path, command_line):
    (tmp_path / "block.svg").mkdir()
    result = command_line.process("graph", "--preset", "tiny", "--out", str(tmp_path / "block.svg"))
    one_line_error(result, "--out", "is a folder")


def refuses_writes(folder) -> bool:
    try:
        (folder / "probe").touch()
    except OSError:
        return True
    (folder / "probe").unlink()
    return False


@contextmanager
def read_only(folder):
    """A folder this user cannot write in: `folder` made read-only (chmod 0o500, undone after), or where that
    does not bind (root), /sys, which refuses new files even to root; a skip only where neither refuses."""
    folder.mkdir(exist_ok=True)
    folder.chmod(0o500)
    try:
        if refuses_writes(folder):
            yield folder
            return
    finally:
        folder.chmod(0o700)
    if not (Path("/sys").is_dir() and refuses_writes(Path("/sys"))):
        pytest.skip("no folder here refuses this user's writes (root, without /sys): the refusal cannot happen")
    yield Path("/sys")


def test_graph_out_in_a_read_only_folder_says_so(tmp_path, command_line):
    with read_only(tmp_path / "locked") as folder:
        result = command_line.process("graph", "--preset", "tiny", "--out", str(folder / "block.dot"))
    error = one_line_error(result, "--out", str(folder))
    assert "Permission denied" in error or "not permitted" in error     # EACCES from a chmod, EPERM from /sys


def test_tour_out_dir_under_a_file_or_read_only_says_so(file_in_the_way, tmp_path, command_line):
    result = command_line.process("tour", "--out-dir", str(file_in_the_way / "graphs"))
    one_line_error(result, "tour: error: --out-dir", "a file is in the way")
    with read_only(tmp_path / "locked") as folder:
        result = command_line.process("tour", "--out-dir", str(folder / "graphs"))
    error = one_line_error(result, "tour: error: --out-dir", str(folder))
    assert "Permission denied" in error or "not permitted" in error


def test_graph_without_the_dot_program_says_what_to_install(tmp_path, command_line):
    env = {**os.environ, "PATH": str(tmp_path)}                         # a PATH with no `dot` on it
    result = command_line.process("graph", "--preset", "tiny", "--depth", "1", "--out", tmp_path / "block.svg", env=env)
    one_line_error(result, "graph: error: --out", "`dot` program was not found", "apt-get install graphviz")
    assert not (tmp_path / "block.svg").exists()
    result = command_line.process("graph", "--preset", "tiny", "--depth", "1", "--out", tmp_path / "block.dot", env=env)
    assert result.returncode == 0 and (tmp_path / "block.dot").read_text().startswith("digraph")


def test_graph_without_the_graphviz_package_says_what_to_install(tmp_path, command_line):
    hide = "sys.modules['graphviz'] = None"                             # `import graphviz` fails
    result = command_line.process("graph", "--preset", "tiny", "--out", str(tmp_path / "block.png"), prelude=hide)
    one_line_error(result, "graph: error: --out", "graphviz Python package is missing", "pip install -e '.[viz]'")
    result = command_line.process("graph", "--preset", "tiny", "--out", str(tmp_path / "block.dot"), prelude=hide)
    assert result.returncode == 0 and (tmp_path / "block.dot").exists()


def test_graph_values_refuses_a_run_too_big_for_memory_with_the_estimate(tmp_path, command_line):
    """TinyLlama's block at B=8, L=2048 in float32: the scores alone are B H L^2 x 4 bytes = 4 GiB (and the
    softmax keeps as many again); the refusal names an estimate at least that, and writes nothing."""
    cfg = nn.preset("tinyllama-1.1b")
    argv = ["graph", "--preset", "tinyllama-1.1b", "--values", "--seq-len", "2048", "--batch", "8"]
    result = command_line.process(*argv, "--out", tmp_path / "g.dot")
    error = one_line_error(result, "--values", "over the limit of 2.00 GiB")
    estimate = float(re.search(r"about ([\d.,]+) GiB", error).group(1).replace(",", ""))
    assert estimate >= 2 * 8 * cfg.n_heads * 2048**2 * 4 / 2**30
    assert not (tmp_path / "g.dot").exists() and "lower --seq-len and --batch" in error


def test_graph_values_on_a_model_too_big_at_any_length_says_to_choose_a_smaller_preset(tmp_path, command_line):
    """Llama-2-70B's parameters alone are 68,976,648,192 x 4 bytes = 257 GiB: fewer tokens cannot help."""
    error = one_line_error(command_line.process("graph", "--preset", "llama2-70b", "--model", "--values", "--out",
                                   str(tmp_path / "g.dot")), "choose a smaller preset", "even at B=1, L=1")
    assert "lower --seq-len" not in error
    at_one = float(re.search(r"it needs ([\d.,]+) GiB", error).group(1).replace(",", ""))
    assert at_one >= 68_976_648_192 * 4 / 2**30


def test_record_bytes_is_what_the_recording_holds():
    """The estimate behind the refusal, against the memory a real recording holds (numpy reports its
    allocations to tracemalloc): within 20 %, never below it by more than 5 %."""
    import tracemalloc

    from tinygrad_block.recordings import record, record_bytes
    for name, model, B, L in (("tiny", True, 2, 32), ("gpt2-small", False, 1, 16)):
        cfg = nn.preset(name)
        estimate = record_bytes(cfg, whole_model=model, B=B, L=L, backward=True)
        tracemalloc.start()
        graph = record(cfg, whole_model=model, B=B, L=L, backward=True, values=True)
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert graph.nodes and 0.95 * held <= estimate <= 1.2 * held, (name, estimate, held)


def test_graph_values_still_draws_a_small_preset(tmp_path, command_line):
    out = tmp_path / "tiny.dot"
    command_line.out("graph", "--preset", "tiny", "--model", "--values", "--backward", "--out", str(out))
    assert out.read_text().count("value mean") > 300                    # every op of the gradient flow


def test_graph_prints_the_views_warnings_as_one_line_each(capsys, tmp_path, monkeypatch):
    from tinygrad_block import graph_view
    monkeypatch.setattr(graph_view, "LARGE", 100)                       # the tiny block's 131 nodes count as huge
    assert cli.main(["graph", "--preset", "tiny", "--out", str(tmp_path / "b.dot"), "--json"]) == 0
    printed = capsys.readouterr()
    data, warnings = json.loads(printed.out), printed.err.strip().splitlines()
    assert data["nodes"] > 100 and len(warnings) == 1
    assert warnings[0].startswith("python -m tinygrad_block graph: warning: ")
    assert f"{data['nodes']:,} nodes" in warnings[0]
    assert (tmp_path / "b.dot").exists()


def test_graph_compiled_draws_the_program_of_kernels(tmp_path, command_line):
    from tinygrad_block import recordings
    data = command_line.json("graph", "--preset", "tiny", "--compiled", "--backward", "--out", tmp_path / "p.dot")
    program = recordings.compiled_program(nn.preset("tiny"), whole_model=False, B=1, L=16, backward=True)
    assert (data["kernels"], data["primitives"]) == (len(program.kernels), len(program.plain)) == (206, 282)
    dot = (tmp_path / "p.dot").read_text()
    assert dot.startswith("digraph program") and dot.count("[label=") == data["kernels"]
    assert data["fused_chains"] == 25 and "forward and backward, compiled" in dot
    for extra, named in ((["--depth", "1"], "--depth"), (["--values"], "--values")):
        err = command_line.mistake("graph", "--preset", "tiny", "--compiled", *extra, "--out", tmp_path / "q.svg")
        assert "--compiled draws the program's kernels" in err and named in err
        assert "an .html explorer does" in err and not (tmp_path / "q.svg").exists()


def test_graph_compiled_html_writes_the_explorer_with_a_pane_of_kernels(tmp_path, command_line):
    from tinygrad_block import recordings
    out = command_line.out("graph", "--preset", "tiny", "--compiled", "--depth", "2", "--out", tmp_path / "c.html")
    program = recordings.compiled_program(nn.preset("tiny"), whole_model=False, B=1, L=16, backward=True)
    assert out.startswith(f"graph: tiny, one block, forward and backward, compiled: wrote the explorer "
                          f"{tmp_path / 'c.html'} ({len(program.kernels)} kernels for {len(program.plain)} primitives")
    text = (tmp_path / "c.html").read_text()
    data = json.loads(text.split('<script id="data" type="application/json">')[1].split("</script>")[0])
    assert data["phases"] == data["show"] == ["forward", "backward", "compiled"]     # kernels beside what they run
    assert data["depth"] == 2 and data["program"]["kernels"] == len(program.kernels)
    assert len([n for n in data["nodes"] if n["phase"] == "compiled"]) == len(program.kernels)
    info = command_line.json("graph", "--preset", "tiny", "--model", "--compiled", "--out", tmp_path / "m.html")
    model = recordings.compiled_program(nn.preset("tiny"), whole_model=True, B=1, L=16, backward=True)
    assert (info["kernels"], info["primitives"], info["format"]) == (len(model.kernels), len(model.plain), "html")


def test_graph_check_writes_the_explorer_with_the_gradient_check_and_refuses_what_it_cannot_colour(tmp_path,
                                                                                                     command_line):
    """`graph --check`: the page of one block with each module's backward against its hand-derived pair, equal
    to what tb.explore(block, x, check=True) computes for the same block and input (float64 round-off here); a
    drawing that is not an explorer page, or the whole model, is one line and status 2."""
    out = command_line.out("graph", "--preset", "tiny", "--check", "--out", tmp_path / "k.html")
    text = (tmp_path / "k.html").read_text()
    data = json.loads(text.split('<script id="data" type="application/json">')[1].split("</script>")[0])
    g = tb.Generator(0)
    block = nn.TransformerBlock(nn.preset("tiny"), generator=g)
    want = tb.explore(block, tb.randn(1, 16, 64, generator=g), check=True).data["check"]
    assert data["check"].keys() == want.keys() and len(want) > 5
    assert all(data["check"][k]["max"] == want[k]["max"] <= 1e-10 for k in want)
    assert out.startswith("graph: tiny, one block, forward and backward, with the gradient check") and \
        f"differs by {want['']['max']:.1e}" in out
    assert "--out must end in .html" in command_line.mistake("graph", "--preset", "tiny", "--check", "--out",
                                                             tmp_path / "k.svg")
    assert "drop --model" in command_line.mistake("graph", "--preset", "tiny", "--check", "--model", "--out",
                                                  tmp_path / "m.html")


# ---------------------------------------------------------------- one prefix per line
SMALLEST_ARGV = {"tour": [], "presets": [], "params": ["--preset", "tiny"], "walk": ["--preset", "tiny"],
                 "flops": ["--preset", "tiny", "--seq-len", "8"], "memory": ["--preset", "tiny", "--seq-len", "8"],
                 "calc": ["--preset", "tiny", "--seq-len", "8"], "graph": ["--preset", "tiny", "--out", "x.svg"],
                 "lesson": ["01"], "exercise": ["01"], "check": ["01"], "train": ["induction"],
                 "generate": ["PATH", "--ids", "1"], "inspect": ["PATH"], "site": ["--out", "site"]}


def test_every_command_has_a_smallest_command_line_here():
    assert set(SMALLEST_ARGV) == set(cli.COMMANDS)


@pytest.mark.parametrize("name", list(SMALLEST_ARGV))
@pytest.mark.parametrize("raised, shown", [
    (lambda name: cli.CommandError(f"{name}: the ids do not fit"), "{name}: error: the ids do not fit"),
    (lambda name: cli.CommandStopped(f"{name}: stopped after 5 of 50 tokens", 130),
     "{name}: stopped after 5 of 50 tokens"),
], ids=["mistake", "stopped"])
def test_a_message_that_names_its_command_is_not_prefixed_twice(name, raised, shown, monkeypatch, command_line):
    """Errors raised by the library name their op (`generate: ...`); the line already names the command, once."""
    def fails(args):
        raise raised(name)
    monkeypatch.setitem(cli.COMMANDS, name, dataclasses.replace(cli.COMMANDS[name], data=fails))
    status, out, err = command_line.status(name, *SMALLEST_ARGV[name])
    assert err == f"python -m tinygrad_block {shown.format(name=name)}\n" and status in (2, 130)
    assert err.count(f"{name}:") == 1 and out == ""


def test_a_library_mistake_named_after_its_op_is_shown_once(monkeypatch, command_line):
    """The command's own `mistakes` (a ValueError from LM.generate) go through the same one place."""
    def fails(args):
        raise ValueError("generate: the prompt's 3 tokens + max_new_tokens=200 exceed the context length")
    monkeypatch.setitem(cli.COMMANDS, "generate", dataclasses.replace(cli.COMMANDS["generate"], data=fails))
    err = command_line.mistake("generate", "PATH", "--ids", "1 2 3")
    assert err == ("python -m tinygrad_block generate: error: the prompt's 3 tokens + max_new_tokens=200 exceed the "
                   "context length\n")


@pytest.mark.parametrize("name", ["generate", "inspect"])
def test_a_folder_without_a_config_says_so_once(name, tmp_path, command_line):
    """The checkpoint room names its op; before, the line read `inspect: error: inspect: ...`."""
    err = command_line.mistake(name, tmp_path, *(["--ids", "1"] if name == "generate" else []))
    assert err.startswith(f"python -m tinygrad_block {name}: error: {tmp_path} has no config.json"), err
    assert err.count(f"{name}:") == 1
