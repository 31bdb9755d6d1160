"""nn/pretrained.py against transformers (the oracle; offline, no download): small random Llama, Mistral, Qwen2 and
GPT-2 models built from configs and saved by transformers (one file, sharded, bfloat16) load into nn.LM with the
same float64 logits (1e-10) and the same greedy generation; our save_pretrained loads back into transformers with
the same tensors and logits; inspect counts parameters from the headers alone; each bad input names its problem.

transformers' Llama-family modules keep float32 islands in float64 (RMSNorm, the RoPE tables): the oracle fixture
computes them in float64 with the same formulas, as tests/nn/test_nn_block_torch.py explains."""
from __future__ import annotations

import importlib
import json
import shutil

import numpy as np
import pytest
import torch
import transformers
from conftest import Float64Torch, msg, rel_err
from safetensors.numpy import load_file, save_file

import tinygrad_block as tb
from tinygrad_block import accounting, checkpoint_info, measure, nn, safetensors_file
from tinygrad_block.nn import pretrained

TOL = 1e-10
V, P = 101, 64                    # vocabulary, positions
SIZES = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=V, max_position_embeddings=P, bos_token_id=None, eos_token_id=None, pad_token_id=None)
CONFIGS = {   # GQA where it exists; non-default RoPE bases and scalings; Qwen2 tied; Mistral with a window of 32
    "llama": ("LlamaConfig", SIZES | dict(rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                                          rms_norm_eps=1e-5)),
    "mistral": ("MistralConfig", SIZES | dict(sliding_window=32, rms_norm_eps=1e-6)),
    "qwen2": ("Qwen2Config", SIZES | dict(rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                                          tie_word_embeddings=True)),
    "llama3": ("LlamaConfig", SIZES | dict(rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                                            "factor": 8.0, "low_freq_factor": 1.0,
                                                            "high_freq_factor": 4.0,
                                                            "original_max_position_embeddings": 16})),
    "linear": ("LlamaConfig", SIZES | dict(rope_parameters={"rope_type": "linear", "rope_theta": 10000.0,
                                                            "factor": 4.0})),
    "qwen3": ("Qwen3Config", SIZES | dict(head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
    "qwen3_wide": ("Qwen3Config", SIZES | dict(head_dim=24, tie_word_embeddings=True)),   # heads wider than 64 / 4
    "llama_narrow": ("LlamaConfig", SIZES | dict(head_dim=8)),                           # and narrower
    "gemma": ("GemmaConfig", SIZES | dict(head_dim=32, rms_norm_eps=1e-5)),     # tied, 1 + w, GeGLU, x sqrt(64)
    "gemma_256": ("GemmaConfig", SIZES | dict(hidden_size=48, num_attention_heads=2, num_key_value_heads=1)),  # the
    # default head_dim, 256: q is 48 -> 512; and x sqrt(48), not a float32 number
    "phi3": ("Phi3Config", SIZES | dict(rope_parameters={"rope_type": "default", "rope_theta": 1e4,
                                                         "partial_rotary_factor": 1.0})),   # qkv, gate_up stacked
    "gpt2": ("GPT2Config", dict(n_embd=64, n_head=4, n_layer=2, n_positions=P, vocab_size=V, bos_token_id=None,
                                eos_token_id=None, activation_function="gelu_new", layer_norm_epsilon=1e-5)),
}
ARCHS = list(CONFIGS)
SAVED_AS = {"llama": "LlamaForCausalLM", "mistral": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",   # our
            "llama3": "LlamaForCausalLM", "linear": "LlamaForCausalLM",           # save_pretrained's layout:
            "qwen3": "Qwen3ForCausalLM", "qwen3_wide": "Qwen3ForCausalLM", "llama_narrow": "LlamaForCausalLM",
            "gemma": "GemmaForCausalLM", "gemma_256": "GemmaForCausalLM",
            "phi3": "Phi3ForCausalLM",                                           # Phi-3 saved stacked again
            "gpt2": "GPT2LMHeadModel"}                                  # Mistral without its window is Llama


def hf_model(arch: str, seed: int = 0):
    """A transformers model of `arch`, float32, every parameter random and large enough that greedy generation
    does not just repeat a token: weights N(0, 1/4), norm gains 1 + 0.3 N(0, 1), biases 0.3 N(0, 1) (tied weights
    stay tied: one tensor)."""
    name, kwargs = CONFIGS[arch]
    model = transformers.AutoModelForCausalLM.from_config(getattr(transformers, name)(**kwargs))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g)
            p.copy_(r / 2 if p.ndim == 2 else 0.3 * r + (not n.endswith("bias")))
    return model.eval()


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """These models are tiny: torch's thread pool costs far more than it saves (and stalls on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """{(arch, how): folder} written by transformers' save_pretrained: 'single', 'sharded' (10 KB shards) and
    'bf16' (the model cast to bfloat16 first)."""
    folders = {}
    for arch in ARCHS:
        model = hf_model(arch)
        for how, kwargs in [("single", {}), ("sharded", dict(max_shard_size="10KB"))]:
            folders[arch, how] = tmp_path_factory.mktemp(f"{arch}-{how}")
            model.save_pretrained(folders[arch, how], **kwargs)
        folders[arch, "bf16"] = tmp_path_factory.mktemp(f"{arch}-bf16")
        model.to(torch.bfloat16).save_pretrained(folders[arch, "bf16"])
    return folders


def rms_norm64(self, hidden_states):          # LlamaRMSNorm.forward (and Mistral's, Qwen2's) without float32
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def gemma_rms_norm64(self, x):                # GemmaRMSNorm.forward without float32: x / rms(x) * (1 + w)
    return self._norm(x) * (1.0 + self.weight)


def rotary64(self, x, position_ids):          # LlamaRotaryEmbedding.forward (Qwen's, Mistral's) in float64
    angles = position_ids[..., None].double() * self.inv_freq.double()      # (B, L, d/2): inv_freq as transformers
    emb = torch.cat([angles, angles], dim=-1)                                # computed it (in float64, below)
    return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)


@pytest.fixture
def oracle(monkeypatch):
    """transformers offline, its Llama-family float32 islands computed in float64 (RMSNorm; RoPE's frequencies,
    scaled or not, by transformers' own functions with `torch.float` meaning float64); loads a folder in float64."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(importlib.import_module("transformers.modeling_rope_utils"), "torch", Float64Torch())
    for family, prefix in [("llama", "Llama"), ("mistral", "Mistral"), ("qwen2", "Qwen2"), ("qwen3", "Qwen3"),
                           ("gemma", "Gemma"), ("phi3", "Phi3")]:     # imported here: 3 s, for this fixture's tests
        module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
        monkeypatch.setattr(module, "torch", Float64Torch())
        monkeypatch.setattr(getattr(module, f"{prefix}RMSNorm"), "forward",
                            gemma_rms_norm64 if prefix == "Gemma" else rms_norm64)
        monkeypatch.setattr(getattr(module, f"{prefix}RotaryEmbedding"), "forward", rotary64)
    return lambda folder: transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64).eval()


def token_ids(B: int = 2, L: int = 12, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, V, (B, L))


def hf_logits(model, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(ids)).logits.numpy()


# ---------------------------------------------------------------- loading: logits and generation
@pytest.mark.parametrize("how", ["single", "sharded", "bf16"])
@pytest.mark.parametrize("arch", ARCHS)
def test_from_pretrained_logits_equal_transformers(arch, how, saved, oracle):
    folder = saved[arch, how]
    if how == "sharded":
        assert len(list(folder.glob("model-*-of-*.safetensors"))) > 3
    ours = nn.LM.from_pretrained(folder, dtype=tb.float64)
    assert ours.cfg == pretrained.config_from_hf(json.loads((folder / "config.json").read_text()))[1]
    ids = token_ids()
    expected = hf_logits(oracle(folder), ids)           # bf16: the bf16 values, converted to float64 by torch
    assert rel_err(ours(tb.tensor(ids)).numpy(), expected) < TOL


def test_bfloat16_values_are_read_exactly(saved):
    """Our bits-shifted-up-16 reading of BF16 equals torch's bfloat16 -> float32 conversion, value for value."""
    model = hf_model("llama").to(torch.bfloat16)
    ours = dict(nn.LM.from_pretrained(saved["llama", "bf16"], dtype=tb.float32).named_parameters())
    assert np.array_equal(ours["layers.1.attn.k_proj.weight"].numpy(),
                          model.model.layers[1].self_attn.k_proj.weight.float().detach().numpy())


def test_mistral_window_caps_the_context(saved):
    """Policy: up to sliding_window tokens, windowed attention is full causal attention; longer is refused."""
    ours = nn.LM.from_pretrained(saved["mistral", "single"], dtype=tb.float64)
    assert ours.cfg.max_seq_len == 32 < P
    with pytest.raises(ValueError, match=msg("LM", "max_seq_len=32")):
        ours(tb.tensor(token_ids(1, 33)))


MODEL_TYPE = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3"}
WINDOWS = [   # (arch, config.json's window fields): whether transformers windows the attention is the oracle
    ("llama", dict(sliding_window=4)),                                       # LlamaConfig has no window
    ("llama", dict(sliding_window=4, layer_types=["sliding_attention"] * 2)),
    ("mistral", dict(sliding_window=4)),
    ("mistral", dict(sliding_window=None)),
    ("mistral", dict(sliding_window=4, layer_types=["full_attention"] * 2)),  # Mistral ignores layer_types
    ("qwen2", dict(sliding_window=4)),                                       # use_sliding_window is false
    ("qwen2", dict(sliding_window=4, use_sliding_window=True)),              # max_window_layers 28: no layer
    ("qwen2", dict(sliding_window=4, use_sliding_window=True, max_window_layers=1)),    # layer 1 windowed
    ("qwen3", dict(sliding_window=4, use_sliding_window=True, layer_types=["sliding_attention", "full_attention"])),
    ("qwen3", dict(sliding_window=4, use_sliding_window=True, layer_types=["full_attention"] * 2)),
    ("qwen3", dict(sliding_window=None, use_sliding_window=True, max_window_layers=0)),
]


def windowed_in_transformers(hf: dict, arch: str) -> bool:
    """Whether transformers' model for config.json `hf` attends through a window: its logits for 12 tokens differ
    from those of the same weights with every window switched off."""
    config_class = getattr(transformers, CONFIGS[arch][0])
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config_class.from_dict(hf)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape) / 2)
    full = hf | {"sliding_window": None, "use_sliding_window": False, "layer_types": None}
    unwindowed = transformers.AutoModelForCausalLM.from_config(config_class.from_dict(full)).eval()
    unwindowed.load_state_dict(model.state_dict())
    ids = token_ids(1, 12)
    return not np.allclose(hf_logits(model, ids), hf_logits(unwindowed, ids), rtol=0, atol=1e-5)


@pytest.mark.parametrize("arch, fields", WINDOWS)
def test_a_sliding_window_caps_the_context_exactly_where_transformers_windows(arch, fields, tmp_path):
    """A window of 4 over 64 positions: the context is 4 when transformers windows any layer, else all 64, read
    from the config.json as written by hand and as transformers writes it back."""
    hf = CONFIGS[arch][1] | {"architectures": [SAVED_AS[arch] if arch != "mistral" else "MistralForCausalLM"],
                             "model_type": MODEL_TYPE[arch]} | fields
    expected = 4 if windowed_in_transformers(hf, arch) else P
    assert pretrained.config_from_hf(hf)[1].max_seq_len == expected
    getattr(transformers, CONFIGS[arch][0]).from_dict(hf).save_pretrained(tmp_path)
    assert pretrained.config_from_hf(json.loads((tmp_path / "config.json").read_text()))[1].max_seq_len == expected


def test_mistral_without_sliding_window_has_transformers_default():
    """config.json without the key: transformers' MistralConfig windows at 4096 (with the key null: no window)."""
    hf = CONFIGS["mistral"][1] | {"architectures": ["MistralForCausalLM"], "max_position_embeddings": 8192}
    del hf["sliding_window"]
    assert transformers.MistralConfig.from_dict(hf).sliding_window == 4096
    assert pretrained.config_from_hf(hf)[1].max_seq_len == 4096
    assert pretrained.config_from_hf(hf | {"sliding_window": None})[1].max_seq_len == 8192


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_generate_equals_transformers(arch, saved, oracle):
    folder = saved[arch, "single"]
    ids = token_ids(2, 5, seed=1)
    theirs = oracle(folder).generate(torch.tensor(ids), max_new_tokens=12, do_sample=False, eos_token_id=None,
                                     pad_token_id=0).numpy()
    ours = nn.LM.from_pretrained(folder, dtype=tb.float64).generate(tb.tensor(ids), 12, temperature=0).numpy()
    assert len(np.unique(theirs[:, 5:])) > 3                # not a degenerate repetition of one token
    assert np.array_equal(ours, theirs)


def test_published_gpt2_names_and_buffers_load(saved, oracle, tmp_path):
    """GPT-2 as OpenAI's checkpoint names it: no `transformer.` prefix, the causal mask stored as `h.N.attn.bias`
    (a constant, skipped), lm_head.weight stored beside the tied embedding (checked equal, skipped)."""
    tensors = load_file(saved["gpt2", "single"] / "model.safetensors")
    tensors = {n.removeprefix("transformer."): a for n, a in tensors.items()}
    tensors |= {f"h.{i}.attn.bias": np.tril(np.ones((1, 1, P, P), np.float32)) for i in range(2)}
    tensors["lm_head.weight"] = tensors["wte.weight"]
    shutil.copy(saved["gpt2", "single"] / "config.json", tmp_path / "config.json")
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    ours = nn.LM.from_pretrained(tmp_path, dtype=tb.float64)
    ids = token_ids()
    assert rel_err(ours(tb.tensor(ids)).numpy(), hf_logits(oracle(saved["gpt2", "single"]), ids)) < TOL
    tensors["lm_head.weight"] = tensors["wte.weight"] + 1
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=msg("from_pretrained", "lm_head.weight differs from the embedding")):
        nn.LM.from_pretrained(tmp_path)


def test_a_gpt2_tensor_under_both_its_names_loads_only_when_the_two_agree(saved, oracle, tmp_path):
    """wte.weight and transformer.wte.weight are one tensor to GPT-2: both stored and equal, it loads; different,
    which is meant is unknowable, and both are named."""
    tensors = load_file(saved["gpt2", "single"] / "model.safetensors")
    shutil.copy(saved["gpt2", "single"] / "config.json", tmp_path / "config.json")
    for name in ("wte.weight", "h.1.mlp.c_fc.bias"):
        twin = tensors | {name: tensors["transformer." + name].copy()}
        save_file(twin, tmp_path / "model.safetensors", metadata={"format": "pt"})
        ours = nn.LM.from_pretrained(tmp_path, dtype=tb.float64)
        ids = token_ids()
        assert rel_err(ours(tb.tensor(ids)).numpy(), hf_logits(oracle(saved["gpt2", "single"]), ids)) < TOL
        twin[name] = twin[name] + 1
        save_file(twin, tmp_path / "model.safetensors", metadata={"format": "pt"})
        with pytest.raises(ValueError, match=msg("from_pretrained", "two names of one GPT-2 tensor", "different values",
                                                 *sorted([name, "transformer." + name]))):
            nn.LM.from_pretrained(tmp_path)


# ---------------------------------------------------------------- saving: transformers loads it back
@pytest.mark.parametrize("arch", ARCHS)
def test_save_pretrained_round_trips_through_transformers(arch, saved, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = saved[arch, "single"]
    nn.LM.from_pretrained(folder).save_pretrained(tmp_path)                  # float32 in, float32 out
    original = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(back).__name__ == SAVED_AS[arch]
    theirs, ours = original.state_dict(), back.state_dict()
    assert set(theirs) == set(ours)
    for name in theirs:
        assert torch.equal(theirs[name], ours[name]), name
    ids = token_ids(2, 20)
    assert np.array_equal(hf_logits(back, ids), hf_logits(original, ids))


def test_save_pretrained_round_trips_through_ourselves(saved, tmp_path):
    """float64 and float16 models write F64 and F16 tensors, read back unchanged."""
    for dtype in (tb.float64, tb.float16):
        model = nn.LM.from_pretrained(saved["qwen2", "single"], dtype=dtype)
        model.save_pretrained(tmp_path / str(dtype))
        back = nn.LM.from_pretrained(tmp_path / str(dtype), dtype=dtype)
        assert back.cfg == model.cfg
        for (n, p), (m, q) in zip(model.named_parameters(), back.named_parameters()):
            assert n == m and q.dtype == dtype and np.array_equal(p.numpy(), q.numpy()), n


def test_save_pretrained_refuses_what_no_layout_holds(tmp_path):
    gen = tb.Generator(0)
    bert = nn.LM(nn.preset("bert-base").with_(d_model=16, n_heads=2, n_kv_heads=2, d_ff=32, n_layers=1,
                                               vocab_size=11), generator=gen)
    with pytest.raises(ValueError, match=msg("save_pretrained", "no Hugging Face layout", "layout='post'")):
        bert.save_pretrained(tmp_path / "bert")
    lora = nn.LM(nn.preset("tiny").with_(lora_rank=2, n_layers=1), generator=gen)
    with pytest.raises(ValueError, match=msg("save_pretrained", "LoRA", "merge")):
        lora.save_pretrained(tmp_path / "lora")
    assert not (tmp_path / "bert").exists() and not (tmp_path / "lora").exists()


# ---------------------------------------------------------------- inspect: the headers alone
@pytest.mark.parametrize("arch", ARCHS)
def test_inspect_counts_parameters_from_headers_alone(arch, saved, monkeypatch):
    folder = saved[arch, "sharded"]

    def no_read(entry, *args):
        raise AssertionError(f"inspect read the values of {entry.name}")

    monkeypatch.setattr(pretrained, "read_array", no_read)
    monkeypatch.setattr(safetensors_file, "read_array", no_read)
    info = checkpoint_info.inspect_checkpoint(folder)
    model = hf_model(arch)
    n = sum(p.numel() for p in model.parameters())       # tied weights counted once
    assert info["parameters"] == info["closed_form"] == n and info["matches"]
    assert sum(info["components"].values()) == n and abs(sum(info["shares"].values()) - 1) < 1e-12
    d, gpt2 = CONFIGS[arch][1].get("hidden_size", 64), arch == "gpt2"
    assert info["components"]["embedding"] == V * d + gpt2 * P * d
    tied = gpt2 or arch in ("qwen2", "qwen3_wide", "gemma", "gemma_256")
    assert info["components"].get("lm_head", 0) == (0 if tied else V * d)
    ffn = sum(p.numel() for n, p in model.named_parameters() if ".mlp." in n)
    assert info["components"]["ffn"] == ffn
    text = "\n".join(checkpoint_info.inspect_text(info))
    assert f"{n:,} parameters" in text and "matches accounting.total_params" in text


@pytest.mark.parametrize("arch", ARCHS)
def test_params_flops_and_inspect_read_a_config_json_alone(arch, saved, tmp_path, command_line):
    """A folder holding config.json alone (or the file itself): params and inspect count transformers' own
    parameters, flops counts the model it describes equal to the closed forms."""
    folder = tmp_path / "config-only"
    folder.mkdir()
    shutil.copy(saved[arch, "single"] / "config.json", folder / "config.json")
    n = sum(p.numel() for p in hf_model(arch).parameters())
    params = command_line.json("params", "--preset", folder)
    assert params["total"] == params["closed_form"]["total"] == n
    assert command_line.json("params", "--preset", folder / "config.json")["total"] == n
    flops = command_line.json("flops", "--preset", folder, "--seq-len", 5, "--batch", 2)
    assert set(flops["difference"]["model"].values()) == {0} and set(flops["difference"]["per_block"].values()) == {0}
    cfg = pretrained.read_config(folder, "test")[1]
    assert flops["model"]["forward_all"] == accounting.model_forward_flops(cfg, 5, 2, matmul_only=False)
    info = command_line.json("inspect", folder)
    assert info["files"] == [] and info["parameters"] == info["closed_form"] == n and info["matches"]
    assert info["components"] == checkpoint_info.inspect_checkpoint(saved[arch, "single"])["components"]
    assert "config.json alone, no weights" in command_line.out("inspect", folder)
    drawn = command_line.json("graph", "--preset", folder, "--model", "--out", tmp_path / "model.dot")
    assert drawn["nodes"] > 0 and (tmp_path / "model.dot").read_text().startswith("digraph")


def test_a_config_json_that_cannot_be_read_is_one_line(tmp_path, command_line):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 64}))
    err = command_line.mistake("params", "--preset", tmp_path)
    assert "config.json has no 'intermediate_size'" in err and err.count("\n") == 1
    with pytest.raises(ValueError, match=msg("inspect", "intermediate_size")):
        checkpoint_info.inspect_checkpoint(tmp_path)


def test_inspect_names_a_matching_preset_and_explains_a_missing_closed_form(tmp_path):
    cfg = nn.preset("tiny")
    nn.LM(cfg, generator=tb.Generator(0)).save_pretrained(tmp_path / "tiny")
    info = checkpoint_info.inspect_checkpoint(tmp_path / "tiny")
    assert info["preset"] == "tiny" and info["parameters"] == accounting.total_params(cfg)
    hf = json.loads((tmp_path / "tiny" / "config.json").read_text())
    (tmp_path / "tiny" / "config.json").write_text(json.dumps(hf | {"rope_scaling": {"rope_type": "yarn"}}))
    info = checkpoint_info.inspect_checkpoint(tmp_path / "tiny")
    assert info["closed_form"] is None and "yarn" in info["why_no_closed_form"]
    assert info["parameters"] == accounting.total_params(cfg)
    assert any("no closed form" in line for line in checkpoint_info.inspect_text(info))



def test_measuring_a_model_and_reading_a_folder_are_two_rooms():
    """measure.py measures models on the shape-only device and reads no folder: importing it loads none of the
    checkpoint readers; inspect lives in checkpoint_info.py, which runs no model and needs nothing of measure."""
    import subprocess
    import sys
    probe = ("import sys, importlib; importlib.import_module(sys.argv[1]); "
             "print(' '.join(sorted(m for m in sys.modules if m.startswith('tinygrad_block'))))")

    def loaded(module: str) -> set[str]:
        out = subprocess.run([sys.executable, "-c", probe, module], capture_output=True, text=True, check=True)
        return set(out.stdout.split())
    readers = {"tinygrad_block.checkpoint_info", "tinygrad_block.safetensors_file", "tinygrad_block.nn.pretrained",
               "tinygrad_block.nn.hf_config", "tinygrad_block.nn.families"}
    assert loaded("tinygrad_block.measure") & readers == set()
    assert "tinygrad_block.measure" not in loaded("tinygrad_block.checkpoint_info")
    assert not hasattr(measure, "inspect_checkpoint") and not hasattr(measure, "inspect_text")

def test_qwen2_biases_in_the_closed_forms():
    """BlockConfig.qkv_bias: biases on q, k, v only, counted by accounting's parameters and FLOPs."""
    cfg = nn.preset("tiny").with_(qkv_bias=True)
    model = nn.LM(cfg, generator=tb.Generator(0))
    biases = [n for n, _ in model.named_parameters() if n.endswith("bias")]
    assert biases == [f"layers.{i}.attn.{p}_proj.bias" for i in range(2) for p in "qkv"]
    assert model.num_parameters() == accounting.total_params(cfg) == accounting.total_params(cfg.with_(
        qkv_bias=False)) + 2 * (cfg.d_model + 2 * cfg.n_kv_heads * cfg.d_head)
    fc = measure.count_model(cfg, 2, 5)
    for phase, closed in [("forward", accounting.model_forward_flops), ("backward", accounting.model_backward_flops)]:
        assert fc.total(phase, matmul_only=False) == closed(cfg, 5, 2, matmul_only=False)
    with pytest.raises(ValueError, match=msg("BlockConfig", "qkv_bias", "True or False")):
        cfg.with_(qkv_bias=1)


# ---------------------------------------------------------------- bad input, each named
def copy_of(saved, arch: str, tmp_path, how: str = "single"):
    folder = tmp_path / "ckpt"
    shutil.copytree(saved[arch, how], folder)
    return folder


def edit_config(folder, **changes):
    hf = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(hf | changes))


def edit_tensors(folder, edit):
    tensors = load_file(folder / "model.safetensors")
    edit(tensors)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def test_missing_folder_file_config_and_shard(saved, tmp_path):
    with pytest.raises(FileNotFoundError, match=msg("from_pretrained", "nowhere", "does not exist")):
        nn.LM.from_pretrained(tmp_path / "nowhere")
    (tmp_path / "a_file").write_text("")
    with pytest.raises(FileNotFoundError, match=msg("from_pretrained", "is a file, not a folder")):
        nn.LM.from_pretrained(tmp_path / "a_file")
    folder = copy_of(saved, "llama", tmp_path, "sharded")
    shard = sorted(folder.glob("model-*.safetensors"))[2]
    shard.unlink()
    with pytest.raises(FileNotFoundError, match=msg("from_pretrained", f"the shard {shard.name}")):
        nn.LM.from_pretrained(folder)
    (folder / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match=msg("inspect", "has no config.json")):
        checkpoint_info.inspect_checkpoint(folder)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=msg("from_pretrained", "no model.safetensors")):
        nn.LM.from_pretrained(empty)
    (empty / "config.json").write_text("{'single': 'quotes'}")
    with pytest.raises(ValueError, match=msg("from_pretrained", "config.json is not valid JSON")):
        nn.LM.from_pretrained(empty)


def test_pickle_checkpoints_are_refused_unread(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"never opened")
    with pytest.raises(ValueError, match=msg("from_pretrained", "pytorch_model.bin", "pickle", "runs whatever code",
                                             "Convert it to safetensors")):
        nn.LM.from_pretrained(tmp_path)


@pytest.mark.parametrize("arch, change, fragments", [
    ("llama", dict(architectures=["BertForMaskedLM"]), ["unsupported architecture ['BertForMaskedLM']",
                                                        "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                                                        "GPT2LMHeadModel"]),
    ("llama", dict(rope_parameters={"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0}),
     ["RoPE scaling 'llama3' needs a factor", "low_freq_factor"]),
    ("llama", dict(rope_scaling={"type": "dynamic", "factor": 2.0}),
     ["RoPE scaling 'dynamic'", "'linear' and 'llama3'"]),
    ("llama", dict(rope_parameters={"rope_type": "yarn", "rope_theta": 5e5, "factor": 4.0}), ["RoPE scaling 'yarn'"]),
    ("llama", dict(head_dim=31), ["head_dim=31 is odd", "RoPE rotates pairs"]),
    ("llama", dict(hidden_act="gelu"), ["hidden_act='gelu'", "Llama's feed-forward here uses one of ['silu']"]),
    ("llama", dict(attention_bias=True), ["attention_bias=True with mlp_bias=False"]),
    ("llama", dict(hidden_size=None), ["config.json has no 'hidden_size'"]),
    ("gpt2", dict(activation_function="swish"), ["activation_function='swish'"]),
    ("gpt2", dict(scale_attn_by_inverse_layer_idx=True), ["scale_attn_by_inverse_layer_idx=True",
                                                          "q k^T / sqrt(d_head) alone"]),
    ("gpt2", dict(layer_norm_epsilon=2.0), ["'layer_norm_epsilon' is 2.0 (float); expected a finite number > 0 "
                                            "and < 1"]),
    ("gpt2", dict(model_type="llama"), ["architectures ['GPT2LMHeadModel'] and model_type 'llama'", "ambiguous"]),
    ("qwen2", dict(use_sliding_window=True, sliding_window=4, layer_types=["full_attention"]),
     ["'layer_types' is ['full_attention']; expected a list of 2 (num_hidden_layers) entries"]),
    ("qwen3", dict(use_sliding_window=True, sliding_window=4, layer_types=["full_attention", "chunked_attention"]),
     ["'layer_types'", "each 'full_attention' or 'sliding_attention'"]),
    ("gemma", dict(attn_logit_softcapping=50.0), ["attn_logit_softcapping=50.0", "capped attention scores (Gemma 2)"]),
    ("gemma", dict(final_logit_softcapping=30.0), ["final_logit_softcapping=30.0", "capped logits (Gemma 2)"]),
    ("gemma", dict(query_pre_attn_scalar=256), ["query_pre_attn_scalar=256", "Gemma 2"]),
    ("gemma", dict(sliding_window_pattern=2), ["sliding_window_pattern=2", "alternating layers"]),
    ("gemma", dict(architectures=["Gemma2ForCausalLM"], model_type="gemma2"),
     ["unsupported architecture ['Gemma2ForCausalLM']", "GemmaForCausalLM", "Phi3ForCausalLM"]),
    ("gemma", dict(use_bidirectional_attention=True), ["use_bidirectional_attention=True", "earlier tokens"]),
    ("gemma", dict(hidden_act="relu"), ["hidden_act='relu'", "Gemma's feed-forward", "gelu_pytorch_tanh"]),
    ("gemma", dict(attention_bias=True), ["attention_bias=True in Gemma"]),
    ("phi3", dict(rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}),
     ["partial_rotary_factor=0.5", "RoPE on part of each head"]),
    ("phi3", dict(rope_parameters={"rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0] * 8}),
     ["RoPE settings ['short_factor']"]),
])
def test_unsupported_configs_are_refused_saying_what(arch, change, fragments, saved, tmp_path):
    folder = copy_of(saved, arch, tmp_path)
    edit_config(folder, **change)
    with pytest.raises(ValueError, match=msg("from_pretrained", *fragments)):
        nn.LM.from_pretrained(folder)


def test_missing_unexpected_and_misshaped_tensors_are_named(saved, tmp_path):
    folder = copy_of(saved, "llama", tmp_path)
    q = "model.layers.1.self_attn.q_proj.weight"

    def edit(tensors):
        del tensors["model.norm.weight"]
        tensors["model.layers.0.self_attn.q_proj.bias"] = np.zeros(64, np.float32)
        tensors[q] = tensors[q][:, :32].copy()

    edit_tensors(folder, edit)
    with pytest.raises(ValueError, match=msg("from_pretrained", "missing ['model.norm.weight']",
                                             "unexpected ['model.layers.0.self_attn.q_proj.bias']",
                                             f"{q} is (64, 32), expected (64, 64)")):
        nn.LM.from_pretrained(folder)


def test_unsupported_tensor_dtype_is_named(saved, tmp_path):
    folder = copy_of(saved, "llama", tmp_path)
    edit_tensors(folder, lambda t: t.update({"model.norm.weight": np.ones(64, np.int32)}))
    with pytest.raises(ValueError, match=msg("from_pretrained", "model.norm.weight", "is I32",
                                             "expected F64, F32, F16 or BF16")):
        nn.LM.from_pretrained(folder)
