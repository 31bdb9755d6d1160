"""nn/families.py: one record per architecture family, read by config.json's reader and writer, loading and
saving. Oracles: transformers' own config classes (their defaults, and what they make of the config.json a record
writes), the layout a record gives against the tensor names transformers' models hold, and the norm / feed-forward
tables against the modules and formulas written out by hand. Whole models of each family against transformers:
tests/checkpoints/test_pretrained.py."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import transformers
from safetensors.numpy import load_file
from conftest import msg, rel_err, rng, t64

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.nn import pretrained
from tinygrad_block.nn.config import FFNS, NORMS
from tinygrad_block.nn.families import FAMILIES, SAVE_ORDER, Family, family_of
from tinygrad_block.nn.hf_config import ARCHITECTURES, config_from_hf, config_to_hf

SMALL = dict(hidden_size=32, intermediate_size=40, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=17, max_position_embeddings=16)
CONFIG_CLASSES = {"LlamaForCausalLM": "LlamaConfig", "MistralForCausalLM": "MistralConfig",
                  "Qwen2ForCausalLM": "Qwen2Config", "Qwen3ForCausalLM": "Qwen3Config",
                  "GemmaForCausalLM": "GemmaConfig", "Phi3ForCausalLM": "Phi3Config", "GPT2LMHeadModel": "GPT2Config"}


def test_every_architecture_is_one_record():
    assert ARCHITECTURES == tuple(FAMILIES) == tuple(CONFIG_CLASSES)
    for arch, fam in FAMILIES.items():
        assert transformers.AutoConfig.for_model(fam.model_type).__class__.__name__ == CONFIG_CLASSES[arch]


@pytest.mark.parametrize("arch", list(FAMILIES))
def test_a_records_defaults_are_transformers_defaults(arch):
    """What a record assumes for a field config.json leaves out is what transformers' config class assumes."""
    fam, theirs = FAMILIES[arch], getattr(transformers, CONFIG_CLASSES[arch])()
    for key, value in fam.defaults.items():
        expected = value({"d_model": theirs.n_embd}) if callable(value) else value
        actual = getattr(theirs, key)
        assert (actual if key != "n_inner" or actual is not None else 4 * theirs.n_embd) == expected, key
    eps_key, eps = fam.eps
    assert getattr(theirs, eps_key) == eps
    act_key, table = fam.activation
    assert getattr(theirs, act_key) == next(iter(table))
    assert bool(theirs.tie_word_embeddings) == fam.defaults.get("tie_word_embeddings", False)


def hf_dict(arch: str, **changes) -> dict:
    """config.json as transformers writes it for a small model of `arch` (its to_dict, with the class name)."""
    sizes = SMALL if arch != "GPT2LMHeadModel" else dict(n_embd=32, n_head=4, n_layer=1, vocab_size=17, n_positions=16)
    config = getattr(transformers, CONFIG_CLASSES[arch])(**sizes | changes)
    return config.to_dict() | {"architectures": [arch]}


@pytest.mark.parametrize("arch", list(FAMILIES))
def test_config_json_round_trips_through_the_record_and_transformers(arch):
    """config.json (transformers') -> BlockConfig -> config.json (the record's) -> transformers' config class ->
    the same BlockConfig; the model transformers builds from the record's config.json has the tensors, and shapes,
    that the record's layout says."""
    _, cfg = config_from_hf(hf_dict(arch))
    assert cfg.name == arch and cfg.norm == FAMILIES[arch].norm
    written = config_to_hf(cfg, arch, tb.float32)
    theirs = getattr(transformers, CONFIG_CLASSES[arch]).from_dict(written)
    assert config_from_hf(theirs.to_dict() | {"architectures": [arch]})[1] == cfg
    model = transformers.AutoModelForCausalLM.from_config(theirs)
    stored = {n: tuple(p.shape) for n, p in model.state_dict().items() if not pretrained.BUFFERS.search(n)}
    if cfg.tie_embeddings:
        stored.pop("lm_head.weight", None)
    assert pretrained.layout_shapes(nn.LM, arch, cfg, "test") == stored


def test_stacked_tensors_are_named_by_the_record():
    """Phi-3 stores q, k, v as one qkv_proj and gate, up as one gate_up_proj; GPT-2 q, k, v as c_attn; the rest
    store each projection alone."""
    q, k, v, gate, up = ("layers.0.attn.q_proj.weight", "layers.0.attn.k_proj.weight", "layers.0.attn.v_proj.weight",
                         "layers.0.ffn.gate_proj.weight", "layers.0.ffn.up_proj.weight")
    assert FAMILIES["Phi3ForCausalLM"].stacked() == {"model.layers.0.self_attn.qkv_proj.weight": [q, k, v],
                                                   "model.layers.0.mlp.gate_up_proj.weight": [gate, up]}
    assert FAMILIES["GPT2LMHeadModel"].stacked() == {"transformer.h.0.attn.c_attn.weight": [q, k, v]}
    assert all(not fam.stacked() for arch, fam in FAMILIES.items()
               if arch not in ("Phi3ForCausalLM", "GPT2LMHeadModel"))



# where a checkpoint's tensors of several parameters are described: code, tests, docs and the lesson that loads one
STACKED_TEXTS = ["tinygrad_block/nn/families.py", "tinygrad_block/nn/pretrained.py", "tinygrad_block/nn/hf_config.py",
                 "tinygrad_block/checkpoint_info.py", "tinygrad_block/safetensors_file.py", "docs/checkpoints.md",
                 "docs/variants.md", "lessons/20_real_models.py", "tests/checkpoints/test_pretrained.py",
                 "tests/checkpoints/test_checkpoint_untrusted.py"]


@pytest.mark.parametrize("path", STACKED_TEXTS)
def test_a_tensor_holding_several_parameters_is_stacked_never_fused(path):
    """'Fused' names one idea, a kernel that does the work of several (tb.jit's chains, manual/fused.py); a
    checkpoint tensor holding several of our parameters (c_attn, qkv_proj, gate_up_proj) is stacked."""
    assert not hasattr(Family, "fused")
    text = (Path(__file__).resolve().parents[2] / path).read_text()
    assert re.findall(r"[^\n]*\bfus(?:e|ed|es|ing)\b[^\n]*", text, flags=re.IGNORECASE) == []

def test_phi3_splits_its_stacked_tensors_on_load_and_stacks_them_on_save(tmp_path):
    """The rows of qkv_proj are q's, then k's, then v's (H d_head, H_kv d_head, H_kv d_head); gate_up_proj's
    gate's then up's: read apart into our projections, written back as one tensor, bit for bit."""
    _, cfg = config_from_hf(hf_dict("Phi3ForCausalLM"))
    model = nn.LM(cfg, generator=tb.Generator(0))
    model.save_pretrained(tmp_path)
    stored = load_file(tmp_path / "model.safetensors")
    attn, ffn = model.layers[0].attn, model.layers[0].ffn
    qkv = stored["model.layers.0.self_attn.qkv_proj.weight"]
    assert qkv.shape == (4 * 8 + 2 * 2 * 8, 32)
    assert np.array_equal(qkv, np.concatenate([attn.q_proj.weight.numpy(), attn.k_proj.weight.numpy(),
                                               attn.v_proj.weight.numpy()]))
    assert np.array_equal(stored["model.layers.0.mlp.gate_up_proj.weight"],
                          np.concatenate([ffn.gate_proj.weight.numpy(), ffn.up_proj.weight.numpy()]))
    back = nn.LM.from_pretrained(tmp_path)
    for (n, p), (m, q) in zip(model.named_parameters(), back.named_parameters()):
        assert n == m and np.array_equal(p.numpy(), q.numpy()), n


def test_the_layout_a_model_is_saved_in():
    """A loaded model keeps its family (its name); any other config takes the first family that fits it; a
    Mistral is saved as a Llama (its window is the context); what fits none is refused naming the families."""
    tiny = nn.preset("tiny")
    assert family_of(tiny).hf_class == "LlamaForCausalLM"
    assert family_of(tiny.with_(name="Phi3ForCausalLM")).hf_class == "Phi3ForCausalLM"
    assert family_of(tiny.with_(name="MistralForCausalLM")).hf_class == "LlamaForCausalLM"
    gemma = tiny.with_(norm="rms1p", ffn="geglu_tanh", scale_embeddings=True, head_dim=32)
    assert family_of(gemma).hf_class == "GemmaForCausalLM"
    assert family_of(tiny.with_(qk_norm=True)).hf_class == "Qwen3ForCausalLM"
    assert family_of(nn.preset("gpt2-small")).hf_class == "GPT2LMHeadModel"
    assert [f.label for f in SAVE_ORDER] == ["Llama", "Qwen2", "Qwen3", "Gemma", "Phi-3", "GPT-2"]
    with pytest.raises(ValueError, match=msg("save_pretrained", "no Hugging Face layout", "Gemma", "GPT-2")):
        family_of(gemma.with_(scale_embeddings=False))
    with pytest.raises(ValueError, match=msg("save_pretrained", "no Hugging Face layout")):
        family_of(nn.preset("gpt2-small").with_(head_dim=128))


def test_norms_and_feed_forwards_come_from_small_tables():
    """config.NORMS and FFNS name every variant; each builds its module and each counts in closed form."""
    assert set(NORMS) == {"rms", "layer", "rms1p"} and set(nn.layers.NORMS) == set(NORMS)
    assert FFNS["geglu_tanh"] == ("gelu_tanh", True) and FFNS["swiglu"] == ("silu", True)
    cfg = nn.preset("tiny").with_(norm="rms1p", ffn="geglu_tanh", n_layers=1)
    assert cfg.gated and cfg.activation == "gelu_tanh"
    block = nn.TransformerBlock(cfg, generator=tb.Generator(0))
    assert isinstance(block.ffn, nn.SwiGLU) and block.norm1.unit_offset
    assert np.array_equal(block.norm1.weight.numpy(), np.zeros(64, np.float32))    # 1 + w starts at one


def test_rms1p_geglu_and_scaled_embeddings_by_hand():
    """RMSNorm by 1 + w, GeGLU with the tanh GELU, embeddings times sqrt(d_model): the formulas in numpy."""
    r = rng(0)
    x, w = r.standard_normal((2, 3, 8)), r.standard_normal(8)
    norm = nn.RMSNorm(8, 1e-6, unit_offset=True, dtype=tb.float64)
    norm.weight = t64(w)
    want = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * (1 + w)
    assert rel_err(norm(t64(x)).numpy(), want) < 1e-14
    cfg = nn.BlockConfig(8, 2, 1, 6, ffn="geglu_tanh", norm="rms1p", scale_embeddings=True, vocab_size=5, n_layers=1,
                         max_seq_len=8)
    ffn = nn.SwiGLU(cfg, generator=tb.Generator(1), dtype=tb.float64)
    gate, up, down = (getattr(ffn, n).weight.numpy() for n in ("gate_proj", "up_proj", "down_proj"))
    g = x @ gate.T
    gelu = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))
    assert rel_err(ffn(t64(x)).numpy(), (gelu * (x @ up.T)) @ down.T) < 1e-13
    model = nn.LM(cfg, generator=tb.Generator(2), dtype=tb.float64)
    plain = nn.LM(cfg.with_(scale_embeddings=False), generator=tb.Generator(2), dtype=tb.float64)
    plain.load_state_dict({n: p.detach() for n, p in model.named_parameters()}
                          | {"embed.weight": (model.embed.weight * 8 ** 0.5).detach()})    # the table scaled instead
    ids = tb.tensor([[1, 4, 2]])
    assert rel_err(model(ids).numpy(), plain(ids).numpy()) < 1e-14
