"""The curriculum's differing figures: each exact value pinned (by hand arithmetic), and printed by the CLI."""
import re

import pytest

from tinygrad_block import cli, curriculum

EXACT = {  # (preset, what) -> exact value, worked out by hand from the published shapes
    ("llama2-70b", "parameters per block"): f"{2 * 8192**2 + 2 * 8192 * 8 * 128 + 3 * 8192 * 28672 + 2 * 8192:,}",
    ("llama2-70b", "a GQA + SwiGLU block, as a formula"):
        f"2.25 d^2 + 3 d d_ff + 2d = {2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192:,}",
    ("llama3-8b", "parameters per block"): f"{2 * 4096**2 + 2 * 4096 * 8 * 128 + 3 * 4096 * 14336 + 2 * 4096:,}",
    ("mistral-7b", "parameters per block"): "218,112,000",
    ("llama2-7b", "parameters of 32 blocks"): f"{32 * (4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096):,}",
    ("llama2-7b", "embedding plus unembedding"): "262,144,000",
    ("llama3-70b", "attention / FFN share of a block"): "17.6% / 82.4%",
    ("llama2-7b", "forward FLOPs per token, 32 blocks"):
        f"{32 * 2 * (4 * 4096**2 + 3 * 4096 * 11008):,} from weight matmuls; "
        f"{32 * (2 * (4 * 4096**2 + 3 * 4096 * 11008) + 4 * 4096 * 4096):,} with attention over 4,096 tokens",
    ("llama2-7b", "static matmul FLOPs per token of a block"): "404,750,336",
    ("llama2-70b", "activation bytes per token per layer (bf16)"):
        f"{10 * 8192:,} (the subtotal, used for the 25 GiB)",
    ("llama2-70b", "Chinchilla training time on 1,000 H100s"): "6 weeks need 16.4% MFU; at 45% it takes 15.3 days",
}


def test_every_note_is_pinned_and_exact():
    assert {(n.preset, n.what) for n in curriculum.NOTES} == set(EXACT)
    for n in curriculum.NOTES:
        assert n.exact() == EXACT[(n.preset, n.what)], n.what
        assert n.quoted and n.why and n.command in cli.COMMANDS


def test_the_hand_values_are_the_known_ones():
    assert EXACT[("llama2-70b", "parameters per block")] == "855,654,400"
    assert EXACT[("llama3-8b", "parameters per block")] == "218,112,000"
    assert EXACT[("llama2-7b", "parameters of 32 blocks")] == "6,476,267,520"
    assert EXACT[("llama2-7b", "forward FLOPs per token, 32 blocks")].startswith("12,952,010,752")
    assert (6 * 70e9 * 1.4e12) / (1000 * 990e12 * 42 * 86400) == pytest.approx(0.1637, abs=1e-4)


@pytest.mark.parametrize("note", curriculum.NOTES, ids=lambda n: f"{n.preset}-{n.what}")
def test_the_command_prints_the_note(command_line, note):
    argv = [note.command, "--preset", note.preset] + (["--seq-len", "16"] if note.command != "params" else [])
    text = command_line.out(*argv)
    assert "where commonly quoted figures differ" in text and note.quoted in text and note.exact() in text
    data = command_line.json(*argv)
    assert {"what": note.what, "quoted": note.quoted, "exact": note.exact(), "why": note.why} in data["curriculum"]


def test_no_note_sends_the_reader_to_a_text_they_do_not_have():
    """Figures are quoted as commonly given; the texts they come from are not the reader's."""
    for n in curriculum.NOTES:
        assert not re.search(r"(?<![\d,._])00[0-4](?![\d,_])|document|deck", f"{n.quoted} {n.why}"), n.what
