"""What lessons 02, 08, 09, 12, 13, 14 and 20 say, held to what the code does: a primitive's forward takes tensors,
a stack's Jacobian is a product, the quoted figures sit in one box with a cell that checks them, the rule of where
attention overtakes the FFN stands apart from its readings, one colour per kind of parameter, the copying head
attends a fixed distance back, and the tiny model's continuation is what lesson 20 says it is."""
import re
from pathlib import Path

import numpy as np
import pytest

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.data import python_help_text
from tools import glossary

from conftest import course_module

course = course_module()
ROOT = Path(__file__).resolve().parents[2]
QUOTING = re.compile(r"(commonly|often|usually) quoted|circulat|popular table|often said|sometimes given", re.I)
OUTSIDE = re.compile(r"et al\.|https?://|\bpaper\b|\bblog\b|data sheet|model card", re.I)


def markdown(number: int) -> list[str]:
    """The text of each markdown cell of lesson `number`, without the leading '# '."""
    return ["\n".join(lines) for _, lines in glossary.markdown_cells(course.lesson_path(number))]


def cells(number: int) -> list[tuple[str, str]]:
    """(kind, text) of each cell of lesson `number`, kind 'markdown' or 'code'."""
    parts = re.split(r"^# %%(.*)$", course.lesson_path(number).read_text(), flags=re.M)
    return [("markdown" if "[markdown]" in head else "code", body) for head, body in zip(parts[1::2], parts[2::2])]


def section(number: int, n: int) -> tuple[str, str]:
    """(title, text) of section n of lesson `number`."""
    return glossary.sections(course.lesson_path(number))[n]


def one_line(text: str) -> str:
    return " ".join(line.removeprefix("#").strip() for line in text.splitlines())


# ---------------------------------------------------------------- lesson 02: what a primitive's forward takes

def test_a_primitives_forward_takes_tensors_and_returns_an_array_as_lesson_02_says():
    seen = []

    class Probe(tb.Function):
        def forward(self, a):
            out = self.backend.mul(a.data, a.data)
            seen.append((a, out))
            return out

    t = tb.tensor([1.0, -2.0, 3.0], dtype=tb.float64)
    result = Probe.apply(t)
    (given, returned), = seen
    assert isinstance(given, tb.Tensor) and given is t
    assert isinstance(returned, np.ndarray) and not isinstance(returned, tb.Tensor)
    np.testing.assert_array_equal(result.numpy(), [1.0, 4.0, 9.0])
    text = one_line("\n".join(markdown(2)))
    assert "a `forward` that takes the input tensors and returns the output as a plain array" in text
    assert "a `forward` on arrays" not in text


# ---------------------------------------------------------------- lesson 09: the Jacobian is a product

def central_jacobian(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """(outputs, inputs) Jacobian of f at x by central differences: no autograd involved."""
    columns = []
    for j in range(x.size):
        step = np.zeros(x.size)
        step[j] = h
        columns.append((f(x + step.reshape(x.shape)) - f(x - step.reshape(x.shape))).ravel() / (2 * h))
    return np.stack(columns, axis=1)


def test_a_pre_norm_stacks_jacobian_is_the_product_of_one_factor_per_sublayer_as_lesson_09_writes():
    cfg = nn.preset("tiny").with_(d_model=8, n_heads=2, n_kv_heads=1, d_ff=16)
    g = tb.Generator(11)
    pair = [nn.TransformerBlock(cfg, generator=g, dtype=tb.float64) for _ in range(2)]
    x = np.random.default_rng(0).standard_normal((1, 3, 8))
    run = lambda f: (lambda a: f(tb.tensor(a, dtype=tb.float64)).numpy())           # noqa: E731
    whole = central_jacobian(run(lambda t: pair[1](pair[0](t))), x)
    eye, product, summed, stream = np.eye(x.size), np.eye(x.size), np.eye(x.size), x
    for b in pair:
        for sub in (lambda t, b=b: b.attn(b.norm1(t)), lambda t, b=b: b.ffn(b.norm2(t))):
            J = central_jacobian(run(sub), stream)
            product, summed = (eye + J) @ product, summed + J
            stream = stream + run(sub)(stream)
    assert np.abs(product - whole).max() < 1e-6
    assert np.abs(summed - whole).max() > 0.5                                         # a sum it is not
    one_block = one_line(section(9, 3)[1])
    assert r"(I + J_{ffn})\,(I + J_{attn})" in one_block and "the sublayers' Jacobians}) = I" not in one_block
    title, text = section(9, 6)
    assert "product" in title and r"(I + J_{2n}) \cdots (I + J_2)\,(I + J_1)" in one_line(text)


def test_lesson_09_names_the_pre_norm_families_without_claiming_every_model():
    text = one_line("\n".join(markdown(9)))
    assert "every recent open model" not in text
    assert "The Llama, Mistral, Qwen and Gemma families are all pre-norm" in text and "Gemma 2" in text


def test_lesson_09s_pre_against_post_norm_opens_with_its_message_in_short_paragraphs():
    title, text = section(9, 7)
    paragraphs = [p for p in re.split(r"\n\s*\n", text) if p.strip() and not p.startswith("## ")]
    assert "post-norm" in title and paragraphs[0].startswith("**The message.**")
    assert max(len(p.splitlines()) for p in paragraphs) <= 8, "no paragraph longer than 8 lines"


# ---------------------------------------------------------------- lessons 12 and 13: one box of quoted figures

@pytest.mark.parametrize("number", [12, 13])
def test_quoted_figures_sit_in_one_box_with_a_cell_under_it_that_checks_them(number):
    kinds = cells(number)
    heads = [i for i, (kind, text) in enumerate(kinds) if kind == "markdown" and
             text.lstrip("\n").startswith("# ## Figures you will see quoted")]
    assert len(heads) == 1
    box, (kind, code) = kinds[heads[0]][1], kinds[heads[0] + 1]
    rows = [line for line in box.splitlines() if line.startswith("# |") and not set(line) <= set("#|-: ")]
    assert kind == "code" and code.count("assert ") >= len(rows) - 1 >= 8
    assert rows[0] == "# | figure | commonly quoted | counted | why they differ |"
    assert all(len([c for c in row[3:].strip("|").split("|") if c.strip()]) == 4 for row in rows[1:])
    later = [text.splitlines()[1] for kind, text in kinds[heads[0] + 1:] if kind == "markdown"]
    assert later == ["# ## Check yourself", "# ## Words from this lesson", "# ## Exercises"]
    assert not OUTSIDE.search(box), "the box names no outside document"
    elsewhere = [text for i, (kind, text) in enumerate(kinds) if kind == "markdown" and i != heads[0]]
    assert not [m.group(0) for text in elsewhere for m in QUOTING.finditer(text)], "quoted figures outside the box"


def test_lesson_13_states_the_rule_in_one_section_and_reads_it_for_two_models_in_the_next():
    rule_title, rule = section(13, 4)
    reading_title, reading = section(13, 5)
    assert "**The rule.**" in rule and r"L = \frac{6\,d\,d_{ff} - \text{projections}}{4d}" in rule
    assert not re.search(r"8,320|16,512|33,792", rule), "the rule's section holds no model's reading"
    assert "Llama-2-7B" in reading_title and "Llama-2-70B" in reading_title
    assert all(n in reading for n in ("8,320", "16,512", "33,792"))
    assert "attention_vs_ffn.png" in next(text for kind, text in cells(13)
                                          if kind == "code" and "def per_token_costs" in text)


# ---------------------------------------------------------------- lessons 08 and 12: one colour per kind

def test_one_colour_per_kind_of_parameter_and_lessons_08_and_12_draw_with_it():
    from matplotlib.colors import is_color_like
    colours = course.PART_COLOURS
    assert set(colours) == {"embeddings", "attention", "FFN", "norms", "LM head"}
    assert len(set(colours.values())) == 5 and all(is_color_like(c) for c in colours.values())
    for number in (8, 12):
        code = "\n".join(text for kind, text in cells(number) if kind == "code")
        assert "PART_COLOURS" in code and ".barh(" in code
        assert not re.search(r"\{\s*\"(attention|embeddings)\": \"(C\d|#)", code), "a colour table of its own"


# ---------------------------------------------------------------- lesson 14: a fixed distance back

def test_lesson_14_says_the_copying_head_attends_a_fixed_distance_back():
    text = one_line("\n".join(markdown(14)))
    assert "what it really learned: a fixed distance back, not a match" in text
    assert "RoPE makes a fixed distance back easy to attend to" in text
    assert "offset" not in text.replace("offset points", "")                 # the answers included


# ---------------------------------------------------------------- lesson 20: what the continuation looks like

def test_lesson_20s_continuation_has_the_help_pages_short_words_and_non_words(lesson_run):
    run = lesson_run(course.lesson_path(20))
    line = next(x for x in run.printed.splitlines() if x.startswith("greedy, 40 new tokens: "))
    continuation = line.removeprefix("greedy, 40 new tokens: ").strip("'\"").removeprefix("The assert statement")
    words = re.findall(r"[a-z]+", continuation.lower())
    known = set(re.findall(r"[a-z]+", python_help_text().lower()))
    short, long = [w for w in words if len(w) <= 3], [w for w in words if len(w) >= 7]
    assert len(short) >= 5 and sum(w in known for w in short) >= 0.75 * len(short), short
    assert long and sum(w not in known for w in long) > len(long) / 2, f"the long words are real ones: {long}"
    text = one_line("\n".join(markdown(20)))
    assert "pieces of real ones glued into non-words" in text and "only in its words" not in text
