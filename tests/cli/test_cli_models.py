"""The checkpoint commands (cli.py): `inspect` counts what the model holds, `generate` writes exactly what
LM.generate writes from the same checkpoint, prompt and seed, with or without the cache, compiled or eager (and
says which); mistakes are one line."""
import json

import numpy as np
import pytest

import tinygrad_block as tb
from tinygrad_block import accounting, nn, report
from tinygrad_block.data import CharTokenizer

CHARS = "abcdefghij .,\n"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny Llama-layout checkpoint, ids only (no vocab.json)."""
    folder = tmp_path_factory.mktemp("tiny")
    nn.LM(nn.preset("tiny"), generator=tb.Generator(0)).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    """A folder laid out as `train` writes it: checkpoint/ with config.json, model.safetensors and vocab.json."""
    folder = tmp_path_factory.mktemp("run")
    cfg = nn.preset("tiny").with_(vocab_size=len(CHARS), name="chars")
    nn.LM(cfg, generator=tb.Generator(1)).save_pretrained(folder / "checkpoint")
    CharTokenizer(CHARS).save(folder / "checkpoint" / "vocab.json")
    return folder


def test_inspect_counts_the_checkpoint_as_the_model_and_the_closed_form(checkpoint, command_line):
    data = json.loads(command_line.out("inspect", str(checkpoint), "--json"))
    model = nn.LM(nn.preset("tiny"), generator=tb.Generator(0))
    assert data["parameters"] == model.num_parameters() == accounting.total_params(nn.preset("tiny")) == 123_712
    assert data["matches"] is True and data["architecture"] == "LlamaForCausalLM"
    text = command_line.out("inspect", str(checkpoint))
    assert "123,712 parameters" in text and "matches accounting.total_params" in text


def test_inspect_reads_a_train_run_from_its_checkpoint_folder(run_folder, command_line):
    data = json.loads(command_line.out("inspect", str(run_folder), "--json"))
    cfg = nn.preset("tiny").with_(vocab_size=len(CHARS))
    assert data["parameters"] == accounting.total_params(cfg) and data["path"].endswith("checkpoint")


@pytest.mark.parametrize("extra", [[], ["--eager"], ["--no-cache"]])
@pytest.mark.parametrize("temperature, top_k", [(0.0, None), (0.8, None), (1.3, 5)])
def test_generate_writes_what_lm_generate_writes(checkpoint, extra, temperature, top_k, command_line):
    argv = ["generate", str(checkpoint), "--ids", "5, 17 3", "--max-new-tokens", "12", "--temperature",
            str(temperature), "--seed", "7", *(["--top-k", str(top_k)] if top_k else []), *extra, "--json"]
    data = json.loads(command_line.out(*argv))
    model = nn.LM.from_pretrained(checkpoint)
    want = model.generate(tb.tensor([[5, 17, 3]]), 12, temperature=temperature, top_k=top_k,
                          generator=tb.Generator(7), jit=False).numpy()[0].tolist()
    assert data["ids"] == want and len(want) == 15 and data["cache"] == ("--no-cache" not in extra)
    assert data["compiled"] == (not extra) and data["text"] is None and data["decode_tokens_per_s"] > 0
    assert (data["captured"], data["replayed"]) == ((3, 9) if not extra else (0, 0))   # prefill + 11 decode steps


@pytest.mark.parametrize("extra, says", [([], "static KV cache, compiled: 3 calls captured, 9 replayed"),
                                         (["--eager"], "static KV cache, eager"),
                                         (["--no-cache"], "recomputing every token, eager")])
def test_generate_says_how_it_decoded(checkpoint, extra, says, command_line):
    shown = command_line.out("generate", str(checkpoint), "--ids", "5 17 3", "--max-new-tokens", "12", *extra)
    assert says in shown.splitlines()[-1] and "decode" in shown


def test_generate_from_a_train_run_continues_text(run_folder, command_line):
    data = json.loads(command_line.out("generate", str(run_folder), "--prompt", "abc", "--max-new-tokens", "20",
                          "--json"))
    tokenizer = CharTokenizer.load(run_folder / "checkpoint" / "vocab.json")
    model = nn.LM.from_pretrained(run_folder / "checkpoint")
    want = model.generate(tb.tensor([tokenizer.encode("abc")]), 20)        # both greedy by default
    assert data["text"] == tokenizer.decode(want.numpy()[0]) and data["text"].startswith("abc")
    assert data["temperature"] == 0
    assert len(data["text"]) == 23 and data["checkpoint"] == str(run_folder / "checkpoint")
    shown = command_line.out("generate", str(run_folder), "--prompt", "abc", "--max-new-tokens", "20")
    assert shown.startswith(data["text"]) and "3 prompt tokens + 20 new" in shown


def test_from_pretrained_opens_a_train_run_as_the_command_line_does(run_folder):
    """One door: the run folder itself (its checkpoint/ inside), with its character tokenizer."""
    model = nn.LM.from_pretrained(run_folder)
    direct = nn.LM.from_pretrained(run_folder / "checkpoint")
    assert all(np.array_equal(p.numpy(), q.numpy()) for p, q in zip(model.parameters(), direct.parameters()))
    assert isinstance(model.tokenizer, CharTokenizer) and model.tokenizer.encode("abc") == [0, 1, 2]


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory):
    """A Llama-3-shaped folder written by transformers: byte-level BPE tokenizer.json adding <|begin_of_text|>,
    llama3 RoPE scaling, random weights (tools/make_llama_folder.py, no training)."""
    from tools.make_llama_folder import write_llama_folder
    torch = pytest.importorskip("torch")
    with torch.random.fork_rng():
        return write_llama_folder(tmp_path_factory.mktemp("llama3"), steps=0)


def test_a_text_prompt_on_a_transformers_folder(llama_folder, monkeypatch, command_line):
    """--prompt goes through the folder's tokenizer.json: the ids AutoTokenizer gives (BOS first), continued as
    LM.generate continues them, decoded as AutoTokenizer decodes them. (Greedy tokens equal to transformers' are
    tested in float64, with the llama3 scaling, in test_pretrained.py.)"""
    import transformers
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    prompt = "The assert statement, then café ☕"
    data = json.loads(command_line.out("generate", str(llama_folder), "--prompt", prompt, "--max-new-tokens", "12",
                          "--temperature", "0", "--json"))
    auto = transformers.AutoTokenizer.from_pretrained(llama_folder)
    ids = auto(prompt)["input_ids"]
    assert ids[0] == auto.bos_token_id and data["ids"][:len(ids)] == ids and data["prompt_tokens"] == len(ids)
    model = nn.LM.from_pretrained(llama_folder)
    assert model.cfg.rope_scaling[0] == "llama3" and model.tokenizer.encode(prompt) == ids
    want = model.generate(tb.tensor([ids]), 12, temperature=0).numpy()[0].tolist()
    assert data["ids"] == want
    assert data["text"] == auto.decode(want, skip_special_tokens=True) and data["text"].startswith(prompt)
    shown = command_line.out("generate", str(llama_folder), "--prompt", prompt, "--max-new-tokens", "5")
    assert shown.startswith(prompt) and f"{len(ids)} prompt tokens + 5 new" in shown


@pytest.mark.parametrize("argv, fragment", [
    (["generate", "{ck}"], "give a prompt: --prompt TEXT"),
    (["generate", "{ck}", "--prompt", "hi"], "has no tokenizer.json (nor the vocab.json that `train` writes)"),
    (["generate", "{ck}", "--ids", "1 999"], "token id 999 is outside the vocabulary of 256"),
    (["generate", "{ck}", "--ids", "1", "--max-new-tokens", "200"],
     "the prompt's 1 tokens + --max-new-tokens 200 exceed the model's context of 128 tokens; ask for at most 127"),
    (["generate", "{run}", "--prompt", ""], "the prompt is empty"),
    (["generate", "{ck}", "--ids", "a b"], "token ids are integers >= 0"),
    (["generate", "{ck}", "--ids", "1", "--temperature", "-1"], "a temperature is a number >= 0"),
    (["generate", "{run}", "--prompt", "xyz"], "characters not in the vocabulary: 'xyz'"),
    (["generate", "{ck}/nope", "--ids", "1"], "does not exist"),
    (["inspect", "{ck}/.."], "has no config.json"),
])
def test_checkpoint_mistakes_are_one_line(checkpoint, run_folder, argv, fragment, command_line):
    argv = [a.format(ck=checkpoint, run=run_folder) for a in argv]
    assert fragment in command_line.mistake(*argv).strip().splitlines()[-1]


def test_ids_beyond_the_tokenizer_are_shown_not_dropped():
    """A model's embedding can have more rows than its tokenizer has tokens (Qwen2: 151,936 vs 151,665)."""
    tokenizer = CharTokenizer("abc")
    assert report.shown_text(tokenizer, [0, 1, 5, 2, 2, 7]) == "ab<id 5>cc<id 7>"
    assert report.shown_text(tokenizer, [2, 1, 0]) == tokenizer.decode([2, 1, 0]) == "cba"


FAMILY_CONFIGS = {"gemma": ("GemmaConfig", dict(head_dim=32)),              # each family a record (nn/families.py)
                  "phi3": ("Phi3Config", {}), "qwen3_wide": ("Qwen3Config", dict(head_dim=24))}


@pytest.mark.parametrize("family", list(FAMILY_CONFIGS))
def test_a_text_prompt_on_a_gemma_phi3_and_wide_qwen3_folder(family, llama_folder, tmp_path, monkeypatch,
                                                              command_line):
    """The Llama folder's tokenizer beside a random Gemma, Phi-3 or Qwen3 (heads of 24 in 64) written by
    transformers: --prompt gives AutoTokenizer's ids, continued greedily as transformers' own generate continues
    them (float32 both)."""
    import shutil

    import torch
    import transformers
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    auto = transformers.AutoTokenizer.from_pretrained(llama_folder)
    name, fields = FAMILY_CONFIGS[family]
    config = getattr(transformers, name)(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, vocab_size=len(auto),
                                         max_position_embeddings=64, bos_token_id=auto.bos_token_id,
                                         eos_token_id=None, pad_token_id=None, **fields)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape) / 2 if p.ndim == 2 else 1 + 0.3 * torch.randn(p.shape))
    folder = tmp_path / family
    model.save_pretrained(folder)
    for file in llama_folder.iterdir():
        if file.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(file, folder / file.name)
    prompt = "The assert statement"
    data = json.loads(command_line.out("generate", folder, "--prompt", prompt, "--max-new-tokens", "8", "--json"))
    ids = auto(prompt)["input_ids"]
    with torch.no_grad():                      # BOS is id 0 = pad_token_id: unmasked, or transformers drops it
        theirs = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)[0].tolist()
    assert len(set(theirs[len(ids):])) > 3                     # not one token repeated
    assert data["ids"] == theirs and data["text"] == auto.decode(theirs, skip_special_tokens=True)
    assert nn.LM.from_pretrained(folder).cfg.name == model.config.architectures[0]
