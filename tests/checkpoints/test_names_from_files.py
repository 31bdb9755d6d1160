"""Names read from a checkpoint's files (tensors, shards, architectures, tokens) reach the terminal escaped, never
raw: an escape sequence, a newline or a bidi override in a name cannot clear the screen or forge a line of an error or
of inspect's report (files.shown, used by every message and report line that shows one); a list of 20,000 names
is ten and a count. The generated text of `generate` has its control characters escaped too (tables.terminal_text)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import msg
from safetensors.numpy import load_file, save_file

import numpy as np
import tinygrad_block as tb
from tinygrad_block import checkpoint_info, nn
from tinygrad_block.files import shown, shown_list
from tinygrad_block.tables import generate_text, terminal_text

TINY = nn.preset("tiny").with_(n_layers=1, vocab_size=40, name="tiny1")
LOAD = "from_pretrained"
CLEAR = "\x1b[2J\x1b[H"                         # clear the screen, cursor home
FORGED = "\nfrom_pretrained: loaded, all checks passed"
HOSTILE = f"evil\u202e{CLEAR}{FORGED}"              # a right-to-left override, and the two above


@pytest.fixture
def ckpt(tmp_path) -> Path:
    folder = tmp_path / "ckpt"
    nn.LM(TINY, generator=tb.Generator(0)).save_pretrained(folder)
    return folder


def add_tensors(folder: Path, names) -> None:
    tensors = load_file(folder / "model.safetensors")
    save_file(tensors | {n: np.zeros(0, np.float32) for n in names}, folder / "model.safetensors")


def assert_escaped(text: str) -> None:
    """No character that a terminal obeys: no ESC, no newline, no bidi override; their escapes are there instead."""
    assert not any(c in text for c in "\x1b\n\u202e"), repr(text)
    assert "\\x1b[2J" in text and "\\n" in text and "\\u202e" in text, text


# ---------------------------------------------------------------- the helper, against hand-written literals
@pytest.mark.parametrize("name, plain, quoted", [
    ("model.embed_tokens.weight", "model.embed_tokens.weight", "'model.embed_tokens.weight'"),
    ("Gewichte.Äpfel.权重.😀", "Gewichte.Äpfel.权重.😀", "'Gewichte.Äpfel.权重.😀'"),           # readable unicode
    ("a\x1b[2Jb", "'a\\x1b[2Jb'", "'a\\x1b[2Jb'"),
    ("one\ntwo\r", "'one\\ntwo\\r'", "'one\\ntwo\\r'"),
    ("abc\u202edef\u2066", "'abc\\u202edef\\u2066'", "'abc\\u202edef\\u2066'"),                 # bidi controls: Cf
    ("zero\u200bwidth\xa0space", "'zero\\u200bwidth\\xa0space'", "'zero\\u200bwidth\\xa0space'"),
    ("back\\slash", "'back\\\\slash'", "'back\\\\slash'"),      # a backslash is escaped too: \x1b is never ambiguous
    ("it's", "it's", '"it\'s"'),
    (123, "123", "123"), (["a\x1b"], "['a\\x1b']", "['a\\x1b']"),       # not a string: its literal, escaped by repr
])
def test_shown_escapes_what_a_terminal_obeys_and_keeps_the_rest(name, plain, quoted):
    assert shown(name) == plain and shown(name, quote=True) == quoted


def test_shown_cuts_a_long_name_and_a_long_list():
    assert shown("x" * 1000, limit=5) == "xxxxx... (1,000 characters)"
    assert shown("\x1b" * 1000, limit=2) == "'\\x1b\\x1b'... (1,000 characters)"
    names = [f"n{i}" for i in range(200_000)]
    assert shown_list(names) == "['n0', 'n1', 'n2', 'n3', 'n4', 'n5', 'n6', 'n7', 'n8', 'n9', ... and 199,990 more]"
    assert shown_list(names[:3]) == "['n0', 'n1', 'n2']" and shown_list([]) == "[]"


def test_terminal_text_escapes_controls_but_keeps_lines_and_scripts():
    text = "Grüße 多语言 👨‍👩‍👧\n\tindented" + CLEAR + "\u202eevil\u2028"
    assert terminal_text(text) == "Grüße 多语言 👨‍👩‍👧\n\tindented\\x1b[2J\\x1b[H\\u202eevil\\u2028"
    data = {"text": "tokens" + CLEAR, "ids": [1], "cache": False, "prompt_tokens": 1, "new_tokens": 0,
            "checkpoint": "ckpt", "prefill_s": 0.0, "decode_tokens_per_s": 0.0}
    assert generate_text(data)[0] == "tokens\\x1b[2J\\x1b[H"                        # what generate prints


# ---------------------------------------------------------------- every message that shows a name
def test_an_unexpected_tensor_name_is_shown_escaped(ckpt):
    add_tensors(ckpt, [HOSTILE])
    with pytest.raises(ValueError, match=msg(LOAD, "unexpected [")) as e:
        nn.LM.from_pretrained(ckpt)
    assert_escaped(str(e.value))


def test_twenty_thousand_unexpected_names_are_ten_and_a_count(ckpt):
    names = [f"model.extra.{i:06d}.weight" for i in range(20_000)]
    add_tensors(ckpt, names)
    with pytest.raises(ValueError, match=msg(LOAD, "'model.extra.000009.weight', ... and 19,990 more]")) as e:
        nn.LM.from_pretrained(ckpt)
    assert len(str(e.value)) < 1000 and "model.extra.000010.weight" not in str(e.value)


@pytest.mark.parametrize("where", ["header entry", "index", "architecture", "shard", "model_type", "rope",
                                   "unknown token"])
def test_each_message_that_names_something_from_a_file_escapes_it(ckpt, where):
    raw = (ckpt / "model.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    config = json.loads((ckpt / "config.json").read_text())
    if where == "header entry":                                        # a malformed entry, named
        header[HOSTILE] = {"dtype": "F32", "shape": [1]}
        text = json.dumps(header).encode()
        (ckpt / "model.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + data)
    elif where in ("index", "shard"):                                  # a tensor the index lists, held nowhere
        weight_map = dict.fromkeys((k for k in header if k != "__metadata__"), "model.safetensors")
        (ckpt / "model.safetensors").rename(ckpt / "weights.safetensors")
        shard = "weights.safetensors" if where == "index" else f"w{CLEAR}{FORGED}\u202e.safetensors"
        weight_map = {k: "weights.safetensors" for k in weight_map} | {HOSTILE: shard}
        (ckpt / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    elif where == "architecture":
        config["architectures"] = [HOSTILE]
    elif where == "model_type":
        config["model_type"] = HOSTILE
    elif where == "rope":
        config["rope_scaling"] = {"rope_type": HOSTILE, "factor": 2.0}
    else:
        (ckpt / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordLevel", "vocab": {"a": 0},
                                                                   "unk_token": HOSTILE}}))
    (ckpt / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError) as e:
        nn.LM.from_pretrained(ckpt)
    assert_escaped(str(e.value))


# ---------------------------------------------------------------- the command line
def test_inspect_shows_names_escaped_and_lists_cut(ckpt, command_line):
    """inspect prints what it read, status 0: the architecture and the skipped buffers escaped, the buffers ten
    and a count; nothing a checkpoint writes adds a line to the report."""
    config = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps(config | {"architectures": [HOSTILE]}))
    add_tensors(ckpt, [f"layers.{i}{CLEAR}{FORGED}.attn.bias" for i in range(20_000)])    # buffers: skipped
    out = command_line.out("inspect", ckpt)
    assert "\x1b" not in out and "\u202e" not in out
    lines = out.splitlines()
    assert lines[0].startswith(f"{ckpt}: 'evil\\u202e\\x1b[2J\\x1b[H\\nfrom_pretrained: loaded"), lines[0]
    skipped = next(line for line in lines if "skipped (not parameters)" in line)
    assert skipped.endswith(", ... and 19,990 more") and len(skipped) < 1200, skipped
    assert not any(line.startswith("from_pretrained") for line in lines)                  # no forged line
    assert len(lines) == len(checkpoint_info.inspect_text(checkpoint_info.inspect_checkpoint(ckpt)))
    assert sum("\\nfrom_pretrained: loaded" in line for line in lines) >= 2        # in the head and the skipped


def test_generate_says_a_hostile_name_in_one_escaped_line(ckpt, command_line):
    add_tensors(ckpt, [HOSTILE])
    result = command_line.process("generate", ckpt, "--ids", "1 2")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert_escaped(lines[0])
