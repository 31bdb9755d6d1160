"""The quoted figures (tinygrad_block/quoted_figures.py): each commonly quoted figure's exact value pinned (by hand
arithmetic), each parameter count also held by the model built on the shape-only device, and each printed by the
CLI (its JSON under the key "curriculum")."""
import re

import pytest

import tinygrad_block as tb
from tinygrad_block import cli, nn, quoted_figures
from tinygrad_block.nn.config import preset

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
    ("llama2-70b", "Chinchilla training time on 1,000 H100s"):     # 6 N D FLOPs over 1,000 x 990 TFLOP/s
        f"6 weeks need {6 * 70e9 * 1.4e12 / (1000 * 990e12 * 42 * 86400):.1%} MFU; "
        f"at 45% it takes {6 * 70e9 * 1.4e12 / (1000 * 990e12 * 0.45 * 86400):.1f} days",
}


def test_every_note_is_pinned_and_exact():
    assert {(n.preset, n.what) for n in quoted_figures.NOTES} == set(EXACT)
    for n in quoted_figures.NOTES:
        assert n.exact() == EXACT[(n.preset, n.what)], n.what
        assert n.quoted and n.why and n.command in cli.COMMANDS


@pytest.mark.parametrize("name, what, part", [
    ("llama2-70b", "parameters per block", "layers.0."), ("llama3-8b", "parameters per block", "layers.0."),
    ("mistral-7b", "parameters per block", "layers.0."), ("llama2-7b", "parameters of 32 blocks", "layers."),
    ("llama2-7b", "embedding plus unembedding", ("embed.", "lm_head."))], ids=str)
def test_the_hand_counts_are_what_the_model_holds(name, what, part):
    """A third count beside the hand arithmetic and the closed forms: the parameters of the model built on the
    shape-only device (it takes no memory), summed tensor by tensor."""
    model = nn.LM(preset(name), generator=tb.Generator(0), device="meta")
    held = sum(p.size for n, p in model.named_parameters() if n.startswith(part))
    assert f"{held:,}" == EXACT[(name, what)]


@pytest.mark.parametrize("note", quoted_figures.NOTES, ids=lambda n: f"{n.preset}-{n.what}")
def test_the_command_prints_the_note(command_line, note):
    argv = [note.command, "--preset", note.preset] + (["--seq-len", "16"] if note.command != "params" else [])
    text = command_line.out(*argv)
    assert "where commonly quoted figures differ" in text and note.quoted in text and note.exact() in text
    data = command_line.json(*argv)
    assert {"what": note.what, "quoted": note.quoted, "exact": note.exact(), "why": note.why} in data["curriculum"]


def test_no_note_sends_the_reader_to_a_text_they_do_not_have():
    """Figures are quoted as commonly given; the texts they come from are not the reader's."""
    for n in quoted_figures.NOTES:
        assert not re.search(r"(?<![\d,._])00[0-4](?![\d,_])|document|deck", f"{n.quoted} {n.why}"), n.what
