"""The checkpoint commands (cli.py): `inspect` counts what the model holds, `generate` writes exactly what
LM.generate writes from the same checkpoint, prompt and seed, with or without the cache; mistakes are one line."""
import json

import pytest

import tinygrad_block as tb
from tinygrad_block import accounting, cli, nn
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


def run(capsys, *argv) -> str:
    assert cli.main(list(argv)) == 0
    return capsys.readouterr().out


def test_inspect_counts_the_checkpoint_as_the_model_and_the_closed_form(capsys, checkpoint):
    data = json.loads(run(capsys, "inspect", str(checkpoint), "--json"))
    model = nn.LM(nn.preset("tiny"), generator=tb.Generator(0))
    assert data["parameters"] == model.num_parameters() == accounting.total_params(nn.preset("tiny")) == 123_712
    assert data["matches"] is True and data["architecture"] == "LlamaForCausalLM"
    text = run(capsys, "inspect", str(checkpoint))
    assert "123,712 parameters" in text and "matches accounting.total_params" in text


def test_inspect_reads_a_train_run_from_its_checkpoint_folder(capsys, run_folder):
    data = json.loads(run(capsys, "inspect", str(run_folder), "--json"))
    cfg = nn.preset("tiny").with_(vocab_size=len(CHARS))
    assert data["parameters"] == accounting.total_params(cfg) and data["path"].endswith("checkpoint")


@pytest.mark.parametrize("extra", [[], ["--no-cache"]])
@pytest.mark.parametrize("temperature, top_k", [(0.0, None), (0.8, None), (1.3, 5)])
def test_generate_writes_what_lm_generate_writes(capsys, checkpoint, extra, temperature, top_k):
    argv = ["generate", str(checkpoint), "--ids", "5, 17 3", "--max-new-tokens", "12", "--temperature",
            str(temperature), "--seed", "7", *(["--top-k", str(top_k)] if top_k else []), *extra, "--json"]
    data = json.loads(run(capsys, *argv))
    model = nn.LM.from_pretrained(checkpoint)
    want = model.generate(tb.tensor([[5, 17, 3]]), 12, temperature=temperature, top_k=top_k,
                          generator=tb.Generator(7)).numpy()[0].tolist()
    assert data["ids"] == want and len(want) == 15 and data["cache"] == (not extra)
    assert data["text"] is None and data["decode_tokens_per_s"] > 0


def test_generate_from_a_train_run_continues_text(capsys, run_folder):
    data = json.loads(run(capsys, "generate", str(run_folder), "--prompt", "abc", "--max-new-tokens", "20",
                          "--json"))
    tokenizer = CharTokenizer.load(run_folder / "checkpoint" / "vocab.json")
    model = nn.LM.from_pretrained(run_folder / "checkpoint")
    want = model.generate(tb.tensor([tokenizer.encode("abc")]), 20, temperature=0.8, generator=tb.Generator(0))
    assert data["text"] == tokenizer.decode(want.numpy()[0]) and data["text"].startswith("abc")
    assert len(data["text"]) == 23 and data["checkpoint"] == str(run_folder / "checkpoint")
    shown = run(capsys, "generate", str(run_folder), "--prompt", "abc", "--max-new-tokens", "20")
    assert shown.startswith(data["text"]) and "3 prompt tokens + 20 new" in shown


@pytest.mark.parametrize("argv, fragment", [
    (["generate", "{ck}"], "give a prompt: --prompt TEXT"),
    (["generate", "{ck}", "--prompt", "hi"], "has no vocab.json to turn --prompt into tokens"),
    (["generate", "{ck}", "--ids", "1 999"], "token id 999 is outside the vocabulary of 256"),
    (["generate", "{ck}", "--ids", "1", "--max-new-tokens", "200"], "exceed the context length max_seq_len=128"),
    (["generate", "{ck}", "--ids", "a b"], "token ids are integers >= 0"),
    (["generate", "{ck}", "--ids", "1", "--temperature", "-1"], "a temperature is a number >= 0"),
    (["generate", "{run}", "--prompt", "xyz"], "characters not in the vocabulary: 'xyz'"),
    (["generate", "{ck}/nope", "--ids", "1"], "does not exist"),
    (["inspect", "{ck}/.."], "has no config.json"),
])
def test_checkpoint_mistakes_are_one_line(capsys, checkpoint, run_folder, argv, fragment):
    argv = [a.format(ck=checkpoint, run=run_folder) for a in argv]
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and fragment in err.strip().splitlines()[-1] and "Traceback" not in err
