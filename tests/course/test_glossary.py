"""The glossary (lessons/GLOSSARY.md, built by tools/glossary.py from each lesson's "Words from this lesson") and
the "Check yourself" questions: the page is what the generator writes; each term is defined where its entry says,
listed once, and used in no earlier lesson's prose without naming the lesson that teaches it; every lesson ends
with both cells. Each check is also run on a copy of the lessons with one fault planted, and must catch it."""
import functools
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools import glossary

ROOT = Path(__file__).resolve().parents[2]
LESSONS = ROOT / "lessons"
NAMED = re.compile(r"\blessons?\s+(\d\d(?:\s*(?:,|and|or|to|–|-)\s*\d\d)*)", flags=re.I)


def mentions(term: str, text: str) -> bool:
    """Whether `text` uses `term` as whole words; a plural or a hyphen for a space counts too. A term written in
    lower case matches in any case ("Softmax" at the start of a sentence); one spelled with capitals, an acronym
    or a name (RoPE, ZeRO, PyTorch), only as spelled, so that ZeRO is not the word "zero"."""
    return term_pattern(term).search(plain(text)) is not None


@functools.cache
def term_pattern(term: str) -> re.Pattern:
    """The regular expression `mentions` looks for (made once a term: every sentence of every lesson is searched
    for every later term)."""
    words = [re.escape(w) for w in re.split(r"[\s-]+", term.strip())]
    pattern = r"(?<![\w-])" + r"[\s-]+".join(words) + r"(?:s|es)?(?![\w])"
    return re.compile(pattern, flags=re.I if term == term.lower() else 0)


def plain(text: str) -> str:
    """Prose as `mentions` reads it: **bold** unmarked, and $d_{ff}$ as d_ff."""
    return re.sub(r"_\{(\w+)\}", r"_\1", text.replace("*", ""))


def sentences(text: str) -> list[str]:
    """The sentences of a lesson's prose: split at a paragraph, a list item or the end of a sentence."""
    parts = re.split(r"\n\s*\n|\n\s*(?=[-*] |\d+\. |\|)|(?<=[.!?])\s+", text)
    return [" ".join(part.split()) for part in parts if part.strip()]


def lessons_named(sentence: str) -> set[int]:
    """The lessons a sentence names: 'lesson 06', 'lessons 12 and 13', 'lessons 04 to 09' (a range)."""
    named = set()
    for group in NAMED.findall(sentence):
        numbers = [int(n) for n in re.findall(r"\d\d", group)]
        named.update(numbers)
        for low, high in re.findall(r"(\d\d)\s*(?:to|–)\s*(\d\d)", group):
            named.update(range(int(low), int(high) + 1))
    return named


def prose(path: Path) -> str:
    return "\n\n".join("\n".join(lines) for _, lines in glossary.markdown_cells(path))


def end_cell(path: Path, heading: str) -> str | None:
    """The markdown cell of a lesson that opens with `heading`, or None."""
    for _, lines in glossary.markdown_cells(path):
        if lines and lines[0].strip() == heading:
            return "\n".join(lines)
    return None


# the five checks, each a function of a lessons folder returning what is wrong ([] when all is well)

def stale_page(folder: Path) -> list[str]:
    page = folder / "GLOSSARY.md"
    text = glossary.render(glossary.entries(folder))
    return [] if page.exists() and page.read_text() == text else [f"{page} is not what tools/glossary.py writes"]


def undefined_in_section(folder: Path) -> list[str]:
    wrong = []
    for e in glossary.entries(folder):
        known = glossary.sections(e.path)
        if e.section not in known or not mentions(e.term, known[e.section][1]):
            wrong.append(f"{e.path.name}:{e.line}: {e.term!r} does not occur in §{e.section}")
    return wrong


def listed_twice(folder: Path) -> list[str]:
    seen, wrong = {}, []
    for path in glossary.lesson_files(folder):
        for _, text in glossary.word_lines(path):
            term = re.match(r"- \*\*([^*]+)\*\*", text)
            if term and term.group(1).lower() in seen:
                wrong.append(f"{term.group(1)!r} in {seen[term.group(1).lower()]} and {path.name}")
            elif term:
                seen[term.group(1).lower()] = path.name
    return wrong


def used_before_taught(folder: Path) -> list[str]:
    wrong, found = [], glossary.entries(folder)
    for path in glossary.lesson_files(folder):
        number = int(path.name[:2])
        later = [e for e in found if e.lesson > number]
        for sentence in sentences(prose(path)):
            text = plain(sentence)
            for e in later:
                if term_pattern(e.term).search(text) and e.lesson not in lessons_named(sentence):
                    wrong.append(f"{path.name}: {e.term!r} (lesson {e.lesson:02d}) in {sentence[:100]!r}")
    return wrong


def missing_end_cells(folder: Path) -> list[str]:
    wrong = []
    for path in glossary.lesson_files(folder):
        check, words = end_cell(path, "## Check yourself"), end_cell(path, "## Words from this lesson")
        questions = re.findall(r"^\d+\. \S", check or "", flags=re.M)
        answers = re.findall(r"<details><summary>Answer</summary>\n\n.*?\S.*?\n\s*</details>", check or "", flags=re.S)
        if check is None or words is None or not 3 <= len(questions) <= 4 or len(answers) != len(questions):
            wrong.append(f"{path.name}: {len(questions)} questions, {len(answers)} answers, words cell "
                         f"{'present' if words else 'missing'}")
        elif not glossary.word_lines(path):
            wrong.append(f"{path.name}: the words cell lists no term")
    return wrong


CHECKS = [stale_page, undefined_in_section, listed_twice, used_before_taught, missing_end_cells]


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
def test_the_lessons_pass(check):
    assert check(LESSONS) == []


def test_every_numbered_lesson_has_both_end_cells_and_they_come_just_before_the_exercises():
    for path in glossary.lesson_files(LESSONS):
        headings = [lines[0].strip() for _, lines in glossary.markdown_cells(path) if lines]
        assert headings[-3:] == ["## Check yourself", "## Words from this lesson", "## Exercises"], path.name


# each check made to fail: a copy of the lessons with one fault planted

@pytest.fixture
def copy(tmp_path) -> Path:
    folder = tmp_path / "lessons"
    folder.mkdir()
    for path in [*glossary.lesson_files(LESSONS), LESSONS / "GLOSSARY.md"]:
        shutil.copy(path, folder / path.name)
    return folder


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path.name, old)
    path.write_text(text.replace(old, new, 1))


def first_entry(folder: Path, number: int) -> glossary.Entry:
    return next(e for e in glossary.entries(folder) if e.lesson == number)


def test_a_stale_page_is_caught(copy):
    edit(copy / "GLOSSARY.md", "**", "**x")
    assert stale_page(copy)
    (copy / "GLOSSARY.md").unlink()
    assert stale_page(copy)


def test_a_term_its_section_does_not_use_is_caught(copy):
    e = first_entry(copy, 1)
    edit(e.path, f"- **{e.term}**:", "- **zebra crossing**:")
    assert [w for w in undefined_in_section(copy) if "'zebra crossing' does not occur in §" in w]


def test_a_term_listed_twice_is_caught(copy):
    e = first_entry(copy, 1)
    later = first_entry(copy, 3)
    edit(later.path, f"- **{later.term}**:", f"- **{e.term.upper()}**:")
    assert listed_twice(copy)


def test_a_term_used_in_an_earlier_lesson_is_caught_unless_the_sentence_names_its_lesson(copy):
    e = first_entry(copy, 6)
    earlier = glossary.lesson_files(copy)[2]
    edit(earlier, "# ## 1. ", f"# Here is the {e.term} again.\n#\n# ## 1. ")
    assert [w for w in used_before_taught(copy) if earlier.name in w and repr(e.term) in w]
    edit(earlier, f"the {e.term} again.", f"the {e.term} again (lesson 06).")
    assert not [w for w in used_before_taught(copy) if earlier.name in w]


def test_a_lesson_without_its_end_cells_or_with_an_answer_missing_is_caught(copy):
    path = glossary.lesson_files(copy)[3]
    edit(path, "#    <details><summary>Answer</summary>", "#    (no answer)")
    assert [w for w in missing_end_cells(copy) if path.name in w]
    path = glossary.lesson_files(copy)[4]
    edit(path, "# ## Words from this lesson", "# ## Words")
    assert [w for w in missing_end_cells(copy) if path.name in w]


def test_the_matcher_takes_plurals_and_hyphens_and_whole_words_only():
    assert mentions("KV cache", "the KV-caches grow") and mentions("token", "two Tokens")
    assert not mentions("token", "a tokenizer") and not mentions("norm", "pre-norm") and not mentions("head", "ahead")
    assert mentions("softmax", "Softmax turns") and mentions("ZeRO", "ZeRO-3") and not mentions("ZeRO", "at zero")
    assert lessons_named("as lessons 04 to 09 show") == set(range(4, 10))
    assert lessons_named("lessons 12 and 13; Lesson 20") == {12, 13, 20}


# the generator's errors, on lessons written for the purpose

LESSON = """# %% [markdown]
# # Lesson 0{n} — A test
#
# ## 1. Tensors
#
# A tensor holds numbers.

# %% [markdown]
# ## 2. Shapes
#
# A shape is a tuple.

# %% [markdown]
# ## Words from this lesson
#
{words}

# %% [markdown]
# ## Exercises
"""


def lessons_with(tmp_path: Path, *word_cells: str) -> Path:
    for n, words in enumerate(word_cells, start=1):
        (tmp_path / f"0{n}_test.py").write_text(LESSON.format(n=n, words=words))
    return tmp_path


def test_the_generator_reads_entries_and_renders_each_with_its_link(tmp_path):
    folder = lessons_with(tmp_path, "# - **tensor**: an array of numbers with a shape\n#   and a dtype (§1)",
                          "# - **Shape**: the size of each axis (§2)")
    found = glossary.entries(folder)
    assert [(e.term, e.sentence, e.lesson, e.section, e.title, e.path.name) for e in found] == [
        ("tensor", "an array of numbers with a shape and a dtype", 1, 1, "Tensors", "01_test.py"),
        ("Shape", "the size of each axis", 2, 2, "Shapes", "02_test.py")]
    page = glossary.render(found)
    assert page.index("**Shape**") < page.index("**tensor**")                # alphabetical, whatever the case
    assert "- **tensor**: an array of numbers with a shape and a dtype. — [lesson 01 §1, Tensors](01_test.py)" in page
    assert "## S" in page and "## T" in page


@pytest.mark.parametrize("line, says", [
    ("# - tensor: no bold (§1)", "01_test.py:16: expected '- **term**: one sentence, no full stop (§N)'"),
    ("# - **tensor**: ends with a stop. (§1)", "01_test.py:16: expected"),
    ("# - **tensor**: no section", "01_test.py:16: expected"),
    ("# - **tensor**: names a section that is not there (§3)", "01_test.py:16: 'tensor' names §3, but the lesson's "
     "sections are [1, 2]")])
def test_a_malformed_entry_is_an_error_naming_the_file_and_line(tmp_path, line, says):
    folder = lessons_with(tmp_path, line)
    with pytest.raises(glossary.GlossaryError, match=re.escape(says)):
        glossary.entries(folder)


def test_a_duplicate_term_is_an_error_naming_both_places(tmp_path):
    folder = lessons_with(tmp_path, "# - **tensor**: an array (§1)", "# - **Tensor**: again (§2)")
    with pytest.raises(glossary.GlossaryError, match=r"02_test.py:16: 'Tensor' is already listed in 01_test.py:16"):
        glossary.entries(folder)


def test_the_command_writes_the_page_checks_it_and_refuses_bad_lessons_in_one_line(tmp_path):
    folder = lessons_with(tmp_path, "# - **tensor**: an array (§1)")
    run = [sys.executable, str(ROOT / "tools" / "glossary.py"), "--lessons", str(folder)]
    stale = subprocess.run([*run, "--check"], capture_output=True, text=True)
    assert stale.returncode == 1 and "GLOSSARY.md is missing" in stale.stderr
    wrote = subprocess.run(run, capture_output=True, text=True)
    assert wrote.returncode == 0 and (folder / "GLOSSARY.md").read_text() == glossary.render(glossary.entries(folder))
    assert not list(folder.glob("*.partial"))
    assert subprocess.run([*run, "--check"], capture_output=True, text=True).returncode == 0
    edit(folder / "01_test.py", "an array", "an array of numbers")
    stale = subprocess.run([*run, "--check"], capture_output=True, text=True)
    assert stale.returncode == 1 and "is stale: 1 change(s), the first at line" in stale.stderr
    edit(folder / "01_test.py", "(§1)", "(§9)")
    bad = subprocess.run(run, capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and len(bad.stderr.splitlines()) == 1


def test_every_heading_of_the_page_names_its_initial():
    """A heading of '#' alone would be an empty heading in Markdown: terms that start with a digit go under 0-9."""
    page = (Path(__file__).resolve().parents[2] / "lessons" / "GLOSSARY.md").read_text()
    heads = re.findall(r"^## (.*)$", page, flags=re.M)
    assert heads[0] == "0-9" and all(h.strip("# ") for h in heads) and heads[1:] == sorted(heads[1:])
