"""The architecture calculator, `calc` (cli.py): any shape, counted on the meta device, equal to the preset
commands (`params`, `flops`, `memory`), to accounting's closed forms and to counts derived here by hand; the
training-time sanity check; every bad argument exits 2 with a message, never a traceback."""
import math

import pytest

from tinygrad_block import accounting, cli, nn

PHASES = ("forward_matmul", "forward_all", "backward_matmul", "backward_all")
LLAMA2_7B = ["--d-model", "4096", "--n-layers", "32", "--n-heads", "32", "--n-kv-heads", "32", "--d-ff", "11008",
             "--vocab", "32000"]


def llama_params_by_hand(d: int, layers: int, d_kv: int, d_ff: int, V: int, tied: bool) -> int:
    """W_Q, W_O d^2; W_K, W_V d d_kv; gate, up, down d d_ff; two RMSNorm gains; embedding, final norm, head."""
    block = 2 * d * d + 2 * d * d_kv + 3 * d * d_ff + 2 * d
    return layers * block + V * d + d + (0 if tied else V * d)


def test_calc_of_llama2_7b_numbers_equals_the_preset_commands_and_the_closed_forms(command_line):
    cfg, L, B = nn.preset("llama2-7b"), 512, 2
    calc = command_line.json("calc", *LLAMA2_7B, "--seq-len", str(L), "--batch", str(B), "--dtype", "fp32")
    params = command_line.json("params", "--preset", "llama2-7b")
    flops = command_line.json("flops", "--preset", "llama2-7b", "--seq-len", str(L), "--batch", str(B))
    memory = command_line.json("memory", "--preset", "llama2-7b", "--seq-len", str(L), "--batch", str(B),
                      "--dtype", "fp32")
    p = calc["parameters"]
    assert p["total"] == params["total"] == accounting.total_params(cfg) == 6_738_415_616
    assert p["total"] == llama_params_by_hand(4096, 32, 4096, 11008, 32000, tied=False)
    assert p["per_block"] == params["per_block"] == accounting.params_per_block(cfg)
    assert p["difference"] == {"total": 0, "per_block": 0}
    assert calc["flops"]["measured"] == flops["model"] and calc["flops"]["closed_form"] == flops["closed_form"]["model"]
    assert calc["flops"]["difference"] == dict.fromkeys(PHASES, 0)
    m = calc["memory"]
    assert m["estimate"] == memory["estimate"] and m["kv_cache"] == memory["kv_cache"]
    assert m["measured_activations"] == memory["measured_activations"]
    assert m["kv_cache"] == 2 * 32 * B * L * 4096 * 4                       # K and V, every layer, fp32
    N = p["total"]
    assert calc["per_token"]["two_n"] == 2 * N and calc["per_token"]["six_n"] == 6 * N
    assert calc["training"]["tokens"] == 20 * N and calc["training"]["chinchilla"] is True
    assert calc["training"]["flops"]["six_n"] == 120 * N * N
    assert calc["preset"] == "custom" and calc["from_preset"] is None


def test_calc_of_a_preset_without_changes_keeps_its_name(command_line):
    data = command_line.json("calc", "--preset", "llama2-7b", "--seq-len", "128")
    assert data["preset"] == "llama2-7b" and data["config"]["context"] == 4096


def test_a_non_preset_architecture_counts_equal_the_closed_forms_and_the_hand_derivation(command_line):
    d, layers, H, H_kv, d_ff, V, L = 5120, 48, 40, 8, 13824, 100_000, 1024
    data = command_line.json("calc", "--d-model", str(d), "--n-layers", str(layers), "--n-heads", str(H),
                    "--n-kv-heads", str(H_kv), "--d-ff", str(d_ff), "--vocab", str(V), "--seq-len", str(L))
    cfg = nn.BlockConfig(d_model=d, n_heads=H, n_kv_heads=H_kv, d_ff=d_ff, n_layers=layers, vocab_size=V,
                         max_seq_len=L)
    N = llama_params_by_hand(d, layers, H_kv * (d // H), d_ff, V, tied=False)
    assert data["parameters"]["total"] == accounting.total_params(cfg) == N
    assert data["flops"]["closed_form"] == {p: (accounting.model_forward_flops if p.startswith("forward") else
                                                accounting.model_backward_flops)(cfg, L, matmul_only="matmul" in p)
                                            for p in PHASES}
    assert data["flops"]["difference"] == dict.fromkeys(PHASES, 0)
    # forward matmuls per token: 2 x the block's weights per layer, attention 4 L d per layer, the head 2 d V
    weights = 2 * d * d + 2 * d * H_kv * (d // H) + 3 * d * d_ff
    assert data["per_token"]["forward_matmul"] == layers * (2 * weights + 4 * L * d) + 2 * d * V
    assert data["per_token"]["training_matmul"] == 3 * data["per_token"]["forward_matmul"]
    assert data["memory"]["kv_cache"] == 2 * layers * L * H_kv * (d // H) * 2


def test_head_dim_of_its_own_counts_by_hand(command_line):
    """Qwen3-0.6B's shape without its QK-norm: 16 heads of 128 in a d_model of 1024, so W_Q and W_O are
    1024 x 2048, not 1024^2; per token the attention term is 4 L H d_head, the KV cache 2 n_layers L H_kv d_head."""
    d, layers, H, H_kv, d_head, d_ff, V, L = 1024, 28, 16, 8, 128, 3072, 151936, 64
    data = command_line.json("calc", "--d-model", d, "--n-layers", layers, "--n-heads", H, "--n-kv-heads", H_kv,
                             "--head-dim", d_head, "--d-ff", d_ff, "--vocab", V, "--tied", "--seq-len", L)
    weights = 2 * d * H * d_head + 2 * d * H_kv * d_head + 3 * d * d_ff
    assert data["parameters"]["total"] == data["parameters"]["closed_form"]["total"] == \
        V * d + layers * (weights + 2 * d) + d == 596_049_920 - layers * 2 * d_head     # published, less QK-norm
    assert data["config"]["d_head"] == d_head and data["flops"]["difference"] == dict.fromkeys(PHASES, 0)
    assert data["per_token"]["forward_matmul"] == layers * (2 * weights + 4 * L * H * d_head) + 2 * d * V
    assert data["memory"]["kv_cache"] == 2 * layers * L * H_kv * d_head * 2
    preset = command_line.json("calc", "--preset", "llama2-7b", "--head-dim", 128, "--seq-len", L)
    assert preset["preset"] == "llama2-7b"                      # 4096 / 32 already: nothing changed
    wider = command_line.json("calc", "--preset", "llama2-7b", "--head-dim", 256, "--seq-len", L)
    assert wider["preset"] == "custom" and wider["config"]["d_head"] == 256


def test_calc_changes_fields_of_a_preset(command_line):
    data = command_line.json("calc", "--preset", "llama2-70b", "--n-kv-heads", "64", "--seq-len", "64")
    mha = nn.preset("llama2-70b").with_(n_kv_heads=64)
    assert data["preset"] == "custom" and data["from_preset"] == "llama2-70b"
    assert data["parameters"]["total"] == accounting.total_params(mha) == \
        llama_params_by_hand(8192, 80, 8192, 28672, 32000, tied=False)
    tied = command_line.json("calc", "--preset", "smollm-135m", "--seq-len", "64")["parameters"]["total"]
    untied = command_line.json("calc", "--preset", "smollm-135m", "--no-tied", "--seq-len", "64")["parameters"]["total"]
    assert untied - tied == 49152 * 576                                       # the head's own V x d_model


def test_a_seq_len_beyond_every_presets_context_works(command_line):
    L = 2 * max(cfg.max_seq_len for cfg in nn.PRESETS.values())
    command_line.mistake("flops", "--preset", "mistral-7b", "--seq-len", L)    # the preset commands refuse it
    data = command_line.json("calc", "--preset", "mistral-7b", "--seq-len", str(L))
    cfg = nn.preset("mistral-7b").with_(max_seq_len=L)
    assert data["seq_len"] == data["config"]["context"] == L
    assert data["flops"]["measured"]["forward_matmul"] == accounting.model_forward_flops(cfg, L)
    assert data["flops"]["difference"] == dict.fromkeys(PHASES, 0)
    assert data["memory"]["kv_cache"] == 2 * 32 * L * 8 * 128 * 2


def test_70b_on_1000_gpus_at_16_4_percent_takes_six_weeks(command_line):
    data = command_line.json("calc", "--preset", "llama2-70b", "--seq-len", "4096", "--gpus", "1000", "--mfu", "0.164")
    N, t = data["parameters"]["total"], data["training"]
    seconds_per_day = 86400
    days = t["days"]["six_n"]
    assert t["tokens"] == 20 * N and t["flops"]["six_n"] == 6 * N * t["tokens"]
    assert math.isclose(days, 6 * N * 20 * N / (1000 * 990e12 * 0.164 * seconds_per_day), rel_tol=1e-12)
    # the curriculum's round figures, 70e9 parameters and 1.4e12 tokens, give the six weeks (42 days); the
    # exact N = 68.98e9 and its 20 N = 1.38e12 tokens scale that by their ratio
    round_figures = days * (70e9 * 1.4e12) / (N * t["tokens"])
    assert abs(round_figures - 42) < 0.1 and days < 42
    counted = data["flops"]["measured"]["forward_matmul"] + data["flops"]["measured"]["backward_matmul"]
    assert t["flops"]["counted"] == counted * t["tokens"] // 4096
    assert math.isclose(t["days"]["counted"], t["flops"]["counted"] / (1000 * 990e12 * 0.164 * seconds_per_day),
                        rel_tol=1e-12)
    given = command_line.json("calc", "--preset", "llama2-70b", "--seq-len", "4096", "--gpus", "1000", "--mfu",
                     "0.164", "--tokens", "1.4e12", "--peak-tflops", "495")["training"]
    assert given["tokens"] == 1_400_000_000_000 and given["chinchilla"] is False
    assert math.isclose(given["days"]["six_n"], 6 * N * 1.4e12 / (1000 * 495e12 * 0.164 * seconds_per_day),
                        rel_tol=1e-12)


def test_json_fields_and_the_table(capsys, command_line):
    argv = ["calc", "--preset", "tiny", "--seq-len", "16", "--batch", "3", "--gpus", "8", "--mfu", "0.5"]
    data = command_line.json(*argv)
    assert set(data) == {"command", "preset", "from_preset", "config", "seq_len", "batch", "dtype",
                         "bytes_per_element", "parameters", "flops", "per_token", "training", "memory"}
    assert set(data["config"]) == {"d_model", "n_layers", "n_heads", "n_kv_heads", "d_head", "d_ff", "vocab_size",
                                   "tied", "context", "norm", "layout", "ffn", "rope"}
    assert set(data["per_token"]) == {"forward_matmul", "forward_all", "training_matmul", "training_all", "two_n",
                                      "six_n"}
    assert set(data["training"]) == {"tokens", "chinchilla", "gpus", "mfu", "peak_tflops", "flops", "days"}
    assert set(data["memory"]) == {"estimate", "kv_cache", "measured_activations", "measured_over_estimate"}
    assert (data["command"], data["batch"], data["dtype"], data["training"]["gpus"]) == ("calc", 3, "bf16", 8)
    assert data["per_token"]["forward_all"] == data["flops"]["measured"]["forward_all"] / 48
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    total = data["parameters"]["total"]
    assert text.startswith("calc: tiny: d_model 64, 2 layers, 4 heads (2 KV)")
    row = next(line for line in text.splitlines() if line.split()[:1] == ["parameters"])
    assert row.split()[:4] == ["parameters", f"{total:,}", f"{total:,}", "0"]
    assert "on 8 GPUs of 990 TFLOP/s at 50.0% MFU" in text


@pytest.mark.parametrize("argv, message", [
    (["--d-model", "0"], "--d-model: must be a positive integer, got '0'"),
    (["--n-layers", "-1"], "--n-layers: must be a positive integer, got '-1'"),
    (["--vocab", "lots"], "--vocab: must be a positive integer, got 'lots'"),
    (["--mfu", "0"], "--mfu: must be a number in (0, 1]"),
    (["--mfu", "1.5"], "--mfu: must be a number in (0, 1]"),
    (["--mfu", "nan"], "--mfu: must be a number in (0, 1]"),
    (["--gpus", "0"], "--gpus: must be a positive integer, got '0'"),
    (["--peak-tflops", "-990"], "--peak-tflops: must be a number > 0"),
    (["--peak-tflops", "inf"], "--peak-tflops: must be a number > 0"),
    (["--tokens", "0"], "--tokens: must be a whole number >= 1"),
    (["--tokens", "1.5"], "--tokens: must be a whole number >= 1"),
    (["--dtype", "int8"], "invalid choice: 'int8'"),
    (["--preset", "llama9"], "unknown preset 'llama9'"),
    (["--batch", "0"], "--batch: must be a positive integer"),
])
def test_bad_arguments_are_one_line_pointing_to_the_usage_and_exit_2(command_line, argv, message):
    err = command_line.mistake("calc", *LLAMA2_7B, "--seq-len", "64", *argv)
    assert err.startswith("python -m tinygrad_block calc: error: ") and message in err and err.count("\n") == 1
    assert err.rstrip().endswith("(see python -m tinygrad_block calc --help)")


@pytest.mark.parametrize("argv, message", [
    (["--d-model", "4096", "--n-layers", "2", "--d-ff", "8", "--vocab", "8"],
     "give the architecture (--n-heads missing), or start from --preset NAME"),
    ([*LLAMA2_7B, "--n-heads", "30"], "--d-model 4096 is not divisible by --n-heads 30"),
    ([*LLAMA2_7B, "--n-kv-heads", "5"], "--n-heads 32 is not divisible by --n-kv-heads 5"),
    ([*LLAMA2_7B, "--n-heads", "4096", "--n-kv-heads", "4096"],
     "d_head = 4096 / 4096 = 1 (--d-model / --n-heads) is odd, but RoPE rotates pairs"),
    ([*LLAMA2_7B, "--head-dim", "65"], "--head-dim 65 is odd, but RoPE rotates pairs"),
    (["--preset", "llama2-70b", "--n-kv-heads", "128"], "--n-heads 64 is not divisible by --n-kv-heads 128"),
])
def test_shapes_that_cannot_be_built_are_one_line_and_exit_2(command_line, argv, message):
    err = command_line.mistake("calc", *argv, "--seq-len", "64")
    assert err.startswith(f"python -m tinygrad_block calc: error: {message}")
    assert err.count("\n") == 1


def test_a_bad_shape_as_a_module_is_one_line_and_no_traceback(command_line):
    done = command_line.process("calc", *LLAMA2_7B, "--n-heads", "30", "--seq-len", "64")
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
