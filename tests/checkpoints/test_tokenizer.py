"""tokenizer.py: text in, text out, for real checkpoints' tokenizer.json and our character vocab.json, and every
file in a tokenizer folder treated as untrusted input. Oracle: transformers' AutoTokenizer (offline) on folders
built here with `tokenizers` and written by transformers' save_pretrained: a Llama 2 folder (byte-fallback BPE,
BOS added), the same without BOS, a Llama 3 folder (byte-level BPE, BOS added by a TemplateProcessing
post-processor), a GPT-2 folder (byte-level BPE, no BOS), and a BPE without byte fallback (unknown characters)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, msg
from tokenizers import Tokenizer as RustTokenizer
from tokenizers import decoders, models, pre_tokenizers, processors, trainers

from tinygrad_block import tokenizer as tokenizer_module
from tinygrad_block.tokenizer import CharTokenizer, HFTokenizer, Tokenizer, load_tokenizer

SENTENCES = ["The quick brown fox jumps over the lazy dog.", "Hello, world! Hello again, world.",
             "A tokenizer turns text into ids, and ids back into text.", "Café au lait, naïve façade.",
             "  an indented line\nand the next line"]
TEXTS = ["Hello world", "The quick brown fox.", "Café au lait, naïve façade", "emoji 😀 and ✓ and 多语言",
         "line one\nline two\n", "  two leading spaces", " one leading space", "tabs\tand trailing  ",
         "Hello , world . don 't"]
FOLDERS = ["llama", "llama_without_bos", "llama_config_says_no_bos", "llama3", "gpt2"]
BOS = {"llama": "<s>", "llama_config_says_no_bos": "<s>", "llama3": "<|begin_of_text|>"}   # the others add none


# ---------------------------------------------------------------- the folders, as transformers writes them
def metaspace_bpe() -> tuple[dict, list]:
    """Llama 2's layout: <unk> <s> </s>, the 256 byte tokens <0x00>..<0xFF>, then BPE pieces over '▁'-words."""
    tok = RustTokenizer(models.BPE(byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.train_from_iterator(SENTENCES, trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>", "<s>", "</s>"]))
    trained = json.loads(tok.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"<0x{b:02X}>": 3 + b for b in range(256)}
    for piece in sorted(trained["vocab"], key=trained["vocab"].get):
        vocab.setdefault(piece, len(vocab))
    return vocab, [tuple(m) for m in trained["merges"]]


def byte_level_bpe(specials: list[str]) -> RustTokenizer:
    """GPT-2's and Llama 3's layout: BPE over bytes, so no character is ever unknown."""
    tok = RustTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(SENTENCES, trainers.BpeTrainer(vocab_size=320, special_tokens=specials,
                                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def edit_json(file: Path, **changes) -> None:
    file.write_text(json.dumps(json.loads(file.read_text()) | changes))


@pytest.fixture(scope="module")
def transformers():
    """transformers, with the hub forced offline (nothing here downloads) and its warnings quiet."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        transformers = pytest.importorskip("transformers")
        transformers.utils.logging.set_verbosity_error()
        yield transformers


@pytest.fixture(scope="module")
def folders(transformers, tmp_path_factory) -> dict[str, Path]:
    """Every tokenizer folder of the oracle tests, by name, each written by transformers' save_pretrained."""
    root, t = tmp_path_factory.mktemp("tokenizers"), transformers
    vocab, merges = metaspace_bpe()
    t.LlamaTokenizerFast(vocab=vocab, merges=merges, add_bos_token=True).save_pretrained(root / "llama")
    t.LlamaTokenizerFast(vocab=vocab, merges=merges, add_bos_token=False).save_pretrained(root / "llama_without_bos")
    shutil.copytree(root / "llama", root / "llama_config_says_no_bos")       # tokenizer.json still adds <s>
    edit_json(root / "llama_config_says_no_bos" / "tokenizer_config.json", add_bos_token=False, add_eos_token=False)
    tok = byte_level_bpe(["<|begin_of_text|>", "<|end_of_text|>"])
    bos = ("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))
    tok.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False), processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1", special_tokens=[bos])])
    t.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>",
                              eos_token="<|end_of_text|>").save_pretrained(root / "llama3")
    tok = byte_level_bpe(["<|endoftext|>"])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    t.GPT2TokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                        unk_token="<|endoftext|>").save_pretrained(root / "gpt2")
    tok = RustTokenizer(models.BPE(unk_token="[UNK]"))                    # no byte fallback: some text is unknown
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(["hello world, the quick brown fox"],
                            trainers.BpeTrainer(vocab_size=60, special_tokens=["[UNK]"]))
    t.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(root / "with_unk")
    return {p.name: p for p in root.iterdir()}


def char_folder(path: Path, chars: str = " ,dehlorw") -> Path:
    path.mkdir(exist_ok=True)
    CharTokenizer(chars).save(path / "vocab.json")
    return path


# ---------------------------------------------------------------- against transformers
@pytest.mark.parametrize("name", FOLDERS)
def test_ids_and_text_equal_transformers(name, folders, transformers):
    oracle, ours = transformers.AutoTokenizer.from_pretrained(folders[name]), load_tokenizer(folders[name])
    assert isinstance(ours, HFTokenizer) and isinstance(ours, Tokenizer)
    for text in TEXTS:
        ids = oracle(text)["input_ids"]
        assert ours.encode(text) == ids, text
        assert ours.decode(ids) == oracle.decode(ids, skip_special_tokens=True), text
    assert ours.vocab_size == len(oracle) and max(ours.encode(TEXTS[3])) < ours.vocab_size


@pytest.mark.parametrize("name", FOLDERS)
def test_bos_is_added_where_tokenizer_json_says_so(name, folders, transformers):
    """transformers 5 follows tokenizer.json's post-processor and ignores tokenizer_config.json's add_bos_token
    whenever a tokenizer.json exists: 'llama_config_says_no_bos' still starts with <s>, in both."""
    oracle, ours = transformers.AutoTokenizer.from_pretrained(folders[name]), load_tokenizer(folders[name])
    first = oracle.convert_ids_to_tokens(ours.encode("Hello world"))[0]
    if name in BOS:
        assert first == BOS[name] == oracle.convert_ids_to_tokens(oracle("Hello world")["input_ids"])[0]
    else:
        assert first not in oracle.all_special_tokens
    assert oracle.convert_ids_to_tokens(ours.encode("Hello world"))[-1] not in oracle.all_special_tokens  # no EOS


@pytest.mark.parametrize("name", FOLDERS)
def test_decode_gives_back_the_text(name, folders):
    """Byte-level BPE gives back every text; Llama's Metaspace loses one of the leading spaces (so does
    transformers: the decoder strips the space that encoding prepends, even when the text brought its own)."""
    ours = load_tokenizer(folders[name])
    for text in TEXTS:
        if name.startswith("llama") and name != "llama3" and text.startswith(" "):
            assert ours.decode(ours.encode(text)) == text[1:]
        else:
            assert ours.decode(ours.encode(text)) == text


def test_a_llama_folder_from_transformers_4_matches_on_text_without_leading_spaces(folders, transformers):
    """Llama 2 checkpoints on the hub: tokenizer.json prepends '▁' with a normalizer (no pre-tokenizer), and
    tokenizer_config.json says add_bos_token. transformers 5 rebuilds the pipeline with a Metaspace pre-tokenizer,
    which differs from the file on text that starts with a space; elsewhere the ids agree."""
    folder = folders["llama"].parent / "llama_v4"
    shutil.copytree(folders["llama"], folder)
    edit_json(folder / "tokenizer.json", pre_tokenizer=None, normalizer={"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]})
    edit_json(folder / "tokenizer_config.json", add_bos_token=True, add_eos_token=False, legacy=True)
    oracle, ours = transformers.AutoTokenizer.from_pretrained(folder), load_tokenizer(folder)
    for text in [t for t in TEXTS if not t.startswith(" ")]:
        assert ours.encode(text) == oracle(text)["input_ids"], text
        assert ours.decode(ours.encode(text)) == text


def test_a_prompt_is_never_truncated_or_padded_whatever_tokenizer_json_says(folders, transformers, tmp_path):
    folder = shutil.copytree(folders["gpt2"], tmp_path / "gpt2")
    edit_json(folder / "tokenizer.json",
              truncation={"direction": "Right", "max_length": 3, "strategy": "LongestFirst", "stride": 0},
              padding={"strategy": {"Fixed": 50}, "direction": "Right", "pad_to_multiple_of": None, "pad_id": 0,
                       "pad_type_id": 0, "pad_token": "<|endoftext|>"})
    text = "Hello world, the quick brown fox"
    ids = transformers.AutoTokenizer.from_pretrained(folder)(text)["input_ids"]
    assert load_tokenizer(folder).encode(text) == ids and 3 < len(ids) < 50


def test_characters_that_become_the_unknown_token_are_named(folders, transformers):
    oracle, ours = transformers.AutoTokenizer.from_pretrained(folders["with_unk"]), load_tokenizer(folders["with_unk"])
    known = "hello world, the quick brown fox"
    assert ours.encode(known) == oracle(known)["input_ids"] and ours.decode(ours.encode(known)) == oracle.decode(
        oracle(known)["input_ids"], skip_special_tokens=True)
    text = "hello Zürich ✓ fox"
    out = oracle(text, return_offsets_mapping=True)
    lost = {c for i, (a, b) in zip(out["input_ids"], out["offset_mapping"]) if i == oracle.unk_token_id
            for c in text[a:b]}
    assert lost == set("Zü✓")                                           # the oracle's unknown characters
    named = f"characters not in the vocabulary: {''.join(sorted(lost))!r}"
    with pytest.raises(ValueError, match=msg(None, "HFTokenizer", named, "the unknown token '[UNK]'")):
        ours.encode(text)
    assert ours.encode("hello [UNK]") == oracle("hello [UNK]")["input_ids"]   # the token typed out is no loss


def test_hf_tokenizer_refuses_an_empty_prompt_and_ids_outside_its_vocabulary(folders):
    ours = load_tokenizer(folders["llama"])
    with pytest.raises(ValueError, match=msg(None, "HFTokenizer.encode", "the prompt is empty")):
        ours.encode("")
    with pytest.raises(TypeError, match=msg(None, "HFTokenizer.encode", "must be a str, got list")):
        ours.encode([1, 2])
    with pytest.raises(ValueError, match=msg(None, f"ids must lie in [0, {ours.vocab_size}), got {ours.vocab_size}")):
        ours.decode([1, ours.vocab_size])
    with pytest.raises(ValueError, match=msg(None, "ids must lie in", "got -1")):
        ours.decode([-1])
    with pytest.raises(TypeError, match=msg(None, "ids must be ints, got 2.0")):
        ours.decode([1, 2.0])


# ---------------------------------------------------------------- our character vocabularies
def test_a_char_vocab_loads_through_the_same_interface(tmp_path):
    tok = load_tokenizer(char_folder(tmp_path))
    assert isinstance(tok, CharTokenizer) and isinstance(tok, Tokenizer)
    assert tok.vocab_size == 9 and tok.name == "CharTokenizer (9 characters)"
    assert tok.encode("hello, world") == [" ,dehlorw".index(c) for c in "hello, world"]
    assert tok.decode(tok.encode("hello, world")) == "hello, world"
    with pytest.raises(ValueError, match=msg(None, "characters not in the vocabulary: 'XZ'")):
        tok.encode("hello Xw Z")
    with pytest.raises(ValueError, match=msg(None, "CharTokenizer.encode", "the prompt is empty")):
        tok.encode("")
    with pytest.raises(ValueError, match=msg(None, "ids must lie in [0, 9), got 9")):
        tok.decode([0, 9])


def test_a_folder_without_tokenizer_files_has_no_tokenizer(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert load_tokenizer(tmp_path) is None


def test_tokenizer_json_wins_over_vocab_json(folders, tmp_path):
    folder = shutil.copytree(folders["gpt2"], tmp_path / "both")
    char_folder(folder)
    assert isinstance(load_tokenizer(folder), HFTokenizer)


# ---------------------------------------------------------------- hostile and malformed files
def folder_with(tmp_path: Path, name: str, content: str | bytes) -> Path:
    folder = tmp_path / "folder"
    folder.mkdir(exist_ok=True)
    (folder / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    return folder


@pytest.mark.parametrize("content, expected", [
    ("this is not json", "is not valid JSON"),
    ("[1, 2, 3]", "holds a JSON list; expected an object"),
    ('{"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0', "is not valid JSON"),        # truncated
    ('{"version": "1.0"}', "has no 'model' object"),
    ('{"version": "1.0", "model": {"type": "BPE", "vocab": "oops", "merges": []}}', "tokenizers library can read"),
    ("[" * 100_000 + "]" * 100_000, "nests"),
    (b"\xff\xfe\x00garbage", "is not valid JSON"),
])
def test_a_malformed_tokenizer_json_is_one_value_error_naming_it(tmp_path, content, expected):
    folder = folder_with(tmp_path, "tokenizer.json", content)
    with pytest.raises(ValueError, match=msg(None, "load_tokenizer", str(folder / "tokenizer.json"), expected)):
        load_tokenizer(folder)


def test_an_unknown_token_missing_from_the_vocabulary_is_refused(folders, tmp_path):
    folder = shutil.copytree(folders["with_unk"], tmp_path / "with_unk")
    spec = json.loads((folder / "tokenizer.json").read_text())
    edit_json(folder / "tokenizer.json", model=spec["model"] | {"unk_token": "<nope>"})
    with pytest.raises(ValueError, match=msg(None, str(folder / "tokenizer.json"), "unknown token '<nope>'",
                                             "vocabulary lacks")):
        load_tokenizer(folder)


def test_a_truncated_real_tokenizer_json_is_refused(folders, tmp_path):
    text = (folders["llama3"] / "tokenizer.json").read_text()
    folder = folder_with(tmp_path, "tokenizer.json", text[: len(text) // 2])
    with pytest.raises(ValueError, match=msg(None, "tokenizer.json", "is not valid JSON")):
        load_tokenizer(folder)


def test_a_tokenizer_file_over_the_size_cap_is_refused_before_it_is_read(folders, tmp_path, monkeypatch):
    folder = shutil.copytree(folders["gpt2"], tmp_path / "gpt2")
    size = (folder / "tokenizer.json").stat().st_size
    monkeypatch.setattr(tokenizer_module, "MAX_BYTES", size - 1)
    with pytest.raises(ValueError, match=msg(None, "tokenizer.json", f"{size:,} bytes", f"at most {size - 1:,}")):
        load_tokenizer(folder)
    monkeypatch.setattr(tokenizer_module, "MAX_BYTES", size)
    assert isinstance(load_tokenizer(folder), HFTokenizer)


@pytest.mark.parametrize("name", ["tokenizer.json", "vocab.json", "merges.txt"])
def test_a_symlink_leading_out_of_the_folder_is_refused_naming_it(tmp_path, name):
    outside = char_folder(tmp_path / "elsewhere")
    folder = char_folder(tmp_path / "folder") if name == "merges.txt" else tmp_path / "folder"
    folder.mkdir(exist_ok=True)
    os.symlink(outside / "vocab.json", folder / name)
    with pytest.raises(ValueError, match=msg(None, str(folder / name), "outside the folder")):
        load_tokenizer(folder)


def test_a_symlink_inside_the_folder_is_followed(tmp_path):
    folder = char_folder(tmp_path / "folder")
    (folder / "vocab.json").rename(folder / "real_vocab.json")
    os.symlink("real_vocab.json", folder / "vocab.json")
    assert load_tokenizer(folder).encode("hello") == CharTokenizer(" ,dehlorw").encode("hello")


@pytest.mark.parametrize("name", ["tokenizer.json", "vocab.json"])
def test_a_folder_where_a_file_should_be_cannot_be_read(tmp_path, name):
    (tmp_path / name).mkdir()
    with pytest.raises(OSError, match=msg(None, "cannot read", str(tmp_path / name))):
        load_tokenizer(tmp_path)


@pytest.mark.parametrize("vocab, expected", [
    ('{"a": 0, "b": 0}', "id 0 is given to several characters"),
    ('{"a": 0, "b": 2}', "id 2 is out of range"),
    ('{"a": 0, "ab": 1}', "maps 'ab' to an id; expected one character per key"),
    ('{"a": 0, "b": "1"}', "maps 'b' to '1'; expected an int id"),
    ('{"a": 0, "b": 1.0}', "maps 'b' to 1.0; expected an int id"),
    ('{"a": false, "b": true}', "maps 'a' to False; expected an int id"),
    ('["a", "b"]', "holds a JSON list; expected an object"),
    ('{"a": 0, "a": 1}', "appears twice"),
    ('{"a": 0, "b": 1', "is not valid JSON"),
])
def test_a_malformed_vocab_json_is_one_value_error_naming_it(tmp_path, vocab, expected):
    folder = folder_with(tmp_path, "vocab.json", vocab)
    with pytest.raises(ValueError, match=msg(None, str(folder / "vocab.json"), expected)):
        load_tokenizer(folder)
    with pytest.raises(ValueError, match=msg(None, "CharTokenizer.load", str(folder / "vocab.json"), expected)):
        CharTokenizer.load(folder / "vocab.json")


def test_a_bpe_vocab_json_with_merges_and_no_tokenizer_json_is_refused(tmp_path):
    folder = folder_with(tmp_path, "vocab.json", json.dumps({"a": 0, "b": 1, "ab": 2, "Ġthe": 3}))
    (folder / "merges.txt").write_text("#version: 0.2\na b\n")
    with pytest.raises(ValueError, match=msg(None, "load_tokenizer", "merges.txt", "BPE", "no", "tokenizer.json",
                                             "AutoTokenizer.from_pretrained(folder).save_pretrained(folder)")):
        load_tokenizer(folder)
    (folder / "vocab.json").write_text(json.dumps({"a": 0, "b": 1}))        # one character a key: still BPE
    with pytest.raises(ValueError, match=msg(None, "merges.txt", "tokenizer.json")):
        load_tokenizer(folder)
    (folder / "merges.txt").unlink()                                        # no merges: multi-char keys say BPE
    (folder / "vocab.json").write_text(json.dumps({"a": 0, "b": 1, "Ġthe": 2}))
    with pytest.raises(ValueError, match=msg(None, "'Ġthe'", "one character per key", "BPE", "tokenizer.json")):
        load_tokenizer(folder)


# ---------------------------------------------------------------- a tokenizer.json that makes the library panic
CATASTROPHIC = r"(a|a)*\d"      # on 'aaa...' with no digit: 2^n ways to fail, past Oniguruma's retry limit: a panic
HOSTILE = {   # where the regex runs: splitting a prompt (encode), or cleaning a token's text (decode)
    "encode": {"pre_tokenizer": {"type": "Split", "pattern": {"Regex": CATASTROPHIC}, "behavior": "Isolated",
                                 "invert": False}},
    "decode": {"decoder": {"type": "Replace", "pattern": {"Regex": CATASTROPHIC}, "content": ""}},
}


def hostile_tokenizer(folder: Path, where: str) -> Path:
    """A word-level tokenizer.json (token 0 is thirty a's) whose regex makes the tokenizers library panic."""
    spec = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": None, "post_processor": None, "decoder": None,
            "model": {"type": "WordLevel", "vocab": {"a" * 30: 0, "b": 1, "[UNK]": 2}, "unk_token": "[UNK]"}}
    folder.mkdir(exist_ok=True)
    (folder / "tokenizer.json").write_text(json.dumps(spec | HOSTILE[where]))
    return folder / "tokenizer.json"


@pytest.mark.parametrize("where", HOSTILE)
def test_a_tokenizer_json_that_makes_the_library_panic_is_one_value_error(where, tmp_path, capfd):
    file = hostile_tokenizer(tmp_path, where)
    run = {"encode": lambda t: t.encode("a" * 30), "decode": lambda t: t.decode([0])}[where]
    with pytest.raises(BaseException) as raw:                          # the oracle: the library itself panics
        run(RustTokenizer.from_file(str(file)))
    assert not isinstance(raw.value, Exception) and "retry-limit" in str(raw.value)
    assert "panicked" in capfd.readouterr().err                        # and Rust printed it, lines of it
    tok = load_tokenizer(tmp_path)
    with pytest.raises(ValueError, match=msg(f"HFTokenizer.{where}", str(file), "broken or hostile", "panicked",
                                             "retry-limit-in-match over")):
        run(tok)
    assert capfd.readouterr().err == ""                                # what Rust printed: held back


@pytest.mark.parametrize("where", HOSTILE)
def test_generate_with_a_panicking_tokenizer_is_one_line(where, tmp_path, command_line):
    """The command line in a fresh interpreter, as a user runs it: one line on stderr (no traceback, no Rust
    panic message), status 2, naming the tokenizer.json."""
    from tinygrad_block import nn
    import tinygrad_block as tb
    nn.LM(nn.preset("tiny").with_(n_layers=1, vocab_size=40), generator=tb.Generator(0)).save_pretrained(tmp_path)
    file = hostile_tokenizer(tmp_path, where)
    given = ["--prompt", "a" * 30] if where == "encode" else ["--ids", "0 1", "--max-new-tokens", "1"]
    result = command_line.process("generate", tmp_path, *given, "--temperature", "0")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert str(file) in lines[0] and "panicked" in lines[0], lines[0]


def test_what_the_library_prints_without_failing_is_passed_on(capfd):
    """library_call holds stderr back only to drop a panic's message: a call that succeeds prints as it would."""
    with tokenizer_module.library_call("never raised"):
        os.write(2, b"a warning from Rust\n")
    assert capfd.readouterr().err == "a warning from Rust\n"
    with pytest.raises(ValueError, match=msg(None, "it failed", "RuntimeError: the reason")):
        with tokenizer_module.library_call("it failed"):
            os.write(2, b"noise\n")
            raise RuntimeError("the reason")
    assert capfd.readouterr().err == ""
    with pytest.raises(KeyboardInterrupt):                            # Ctrl-C is never turned into a ValueError
        with tokenizer_module.library_call("interrupted"):
            raise KeyboardInterrupt


def test_a_process_without_stderr_still_tokenizes(folders):
    """library_call holds stderr back only where there is one: a process whose stderr is closed encodes as usual."""
    code = ("import os, sys\nos.close(2)\nsys.stderr = None\nfrom tinygrad_block.tokenizer import load_tokenizer\n"
            f"print(load_tokenizer({str(folders['gpt2'])!r}).encode('Hello world'))")
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert child.returncode == 0 and child.stdout.strip() == str(load_tokenizer(folders["gpt2"]).encode("Hello world"))


def test_threads_tokenizing_at_once_with_panics_among_them_leave_stderr_where_it_was(tmp_path):
    """The held stderr is the whole process's file descriptor 2: four threads encoding at once, half of them with a
    tokenizer that panics, each get their own answer, and afterwards stderr still reaches the terminal (a child
    process here, so that its stderr can be read)."""
    good, bad = tmp_path / "good", tmp_path / "bad"
    hostile_tokenizer(good, "decode")                                   # encodes fine: its regex runs on decode
    hostile_tokenizer(bad, "encode")
    code = f"""
import sys, threading
from tinygrad_block.tokenizer import load_tokenizer
good, bad = load_tokenizer({str(good)!r}), load_tokenizer({str(bad)!r})
results, barrier = [], threading.Barrier(4)
def work(i):
    barrier.wait()
    for _ in range(6):                  # a panic takes about 0.1 s: the four threads overlap throughout
        try:
            results.append((good if i % 2 else bad).encode("a" * 30))
        except ValueError as e:
            results.append("panicked" in str(e))
threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
[t.start() for t in threads]; [t.join() for t in threads]
print(sorted(map(str, set(map(str, results)))))
print("stderr still here", file=sys.stderr)
"""
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == str(sorted({"True", str(load_tokenizer(good).encode("a" * 30))}))
    assert child.stderr == "stderr still here\n"
