"""Every lesson has the course's shape and runs: as a script (each cell prints and asserts its own numbers,
pictures land under lessons/out/NN/) and as an executed notebook. Its exercises exist, with a reference
solution, and it never sends the reader to documents they don't have."""
import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tinygrad_block import course

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted((ROOT / "lessons").glob("[0-9][0-9]_*.py"))
ids = [p.stem for p in LESSONS]


def cells(path: Path) -> list[tuple[str, str]]:
    """(kind, text) of each cell of a jupytext percent file; kind is 'markdown' or 'code'."""
    parts = re.split(r"^# %%(.*)$", path.read_text(), flags=re.M)
    return [("markdown" if "[markdown]" in head else "code", body) for head, body in zip(parts[1::2], parts[2::2])]


def test_the_course_has_lessons_01_to_10_in_order():
    numbers = [int(p.stem[:2]) for p in LESSONS]
    assert numbers[:10] == list(range(1, 11)) and numbers == sorted(set(numbers))


@pytest.mark.parametrize("path", LESSONS, ids=ids)
def test_lesson_runs_as_a_script_and_its_pictures_are_there(path):
    result = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip(), "a lesson prints what it shows"
    for line in result.stdout.splitlines():
        if line.startswith("picture: "):
            picture = ROOT / line.removeprefix("picture: ")
            head = picture.read_bytes()[:8]
            assert picture.parent == ROOT / "lessons" / "out" / path.stem[:2], line
            assert head == b"\x89PNG\r\n\x1a\n" or head.startswith(b"<?xml"), line
        if line.startswith("explorer: "):                          # a graph explorer page (explore.py)
            page = ROOT / line.removeprefix("explorer: ")
            assert page.parent == ROOT / "lessons" / "out" / path.stem[:2], line
            assert page.read_text().startswith("<!DOCTYPE html>") and 'id="data"' in page.read_text(), line


@pytest.mark.parametrize("path", LESSONS, ids=ids)
def test_lesson_opens_with_what_you_learn_and_ends_with_its_exercises(path):
    number = int(path.stem[:2])
    kinds = cells(path)
    markdown = [text for kind, text in kinds if kind == "markdown"]
    assert markdown[0].lstrip().startswith(f"# # Lesson {number:02d} — ") and "What you will learn" in markdown[0]
    assert "Exercises" in markdown[-1].splitlines()[1] and f"exercise {number:02d}" in markdown[-1]
    assert f"check {number:02d}" in markdown[-1]
    checks = course.exercises(number).checks
    assert 2 <= len(checks) <= 4 and (ROOT / "lessons" / "solutions" / f"{number:02d}.py").is_file()
    assert all(f"`{name}`" in markdown[-1] for name, _ in checks), "the last cell names each exercise"


@pytest.mark.parametrize("path", LESSONS, ids=ids)
def test_each_cell_asserts_what_it_prints_at_top_level(path):
    text = path.read_text()
    assert "format_name: percent" in text
    assert "def main(" not in text and "__main__" not in text, "cells run at top level, not from a main()"
    for kind, body in cells(path):
        if kind == "code" and "print(" in body:
            tree = ast.parse(body)
            assert any(isinstance(node, ast.Assert) for node in ast.walk(tree)), f"prints, asserts nothing:{body}"


@pytest.mark.parametrize("path", LESSONS, ids=ids)
def test_lesson_never_cites_documents_the_reader_does_not_have(path):
    text = path.read_text()
    assert not re.search(r"(?<![\d,._])00[0-4](?![\d,_])|seeds/|_[0-9a-f]{16}\.txt|curriculum document", text)


@pytest.mark.slow
@pytest.mark.parametrize("path", LESSONS, ids=ids)
def test_lesson_runs_as_an_executed_notebook(path, tmp_path):
    import json
    out = course.write_notebook(int(path.stem[:2]), tmp_path, execute=True)
    notebook = json.loads(out.read_text())
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert not any(o.get("output_type") == "error" for c in code for o in c["outputs"])
    printing = [c for c in code if "print(" in "".join(c["source"])]
    assert all(c["outputs"] for c in printing), "each printing cell shows its output under it"
    shown = sum(o.get("output_type") == "display_data" for c in code for o in c["outputs"])
    drawn = sum("show(" in "".join(c["source"]) for c in code)
    assert shown >= drawn, "each picture is shown inline"


def _table_rows(text: str, heading: str) -> list[list[str]]:
    """The rows of every markdown table under `heading` (up to the next heading of the same level)."""
    level = heading.split(" ")[0]
    part = text.split(heading, 1)[1]
    part = re.split(rf"^{level} ", part, flags=re.M)[0]
    lines = part.splitlines()
    header = {i - 1 for i, line in enumerate(lines) if line.startswith("|") and set(line) <= set("|-: ")}
    return [[c.strip() for c in line.strip().strip("|").split("|")] for i, line in enumerate(lines)
            if line.startswith("|") and not set(line) <= set("|-: ") and i not in header]


def test_the_index_lists_every_lesson_file_and_the_planned_ones():
    text = (ROOT / "lessons" / "README.md").read_text()
    rows = _table_rows(text, "## The lessons")
    files = {p.name for p in LESSONS}
    listed = {re.search(r"`(\d\d_\w+\.py)`", row[1]).group(1) for row in rows if "`" in row[1]}
    assert listed == files, "the index names exactly the lesson files there are"
    planned = {int(row[0]) for row in rows if "`" not in row[1]}
    assert all(int(p.stem[:2]) not in planned for p in LESSONS)


def test_the_coverage_table_names_existing_or_planned_lessons():
    text = (ROOT / "lessons" / "README.md").read_text()
    index = {int(row[0]) for row in _table_rows(text, "## The lessons")}
    sections = text.split("## Coverage of the curriculum", 1)[1].split("### Claim by claim", 1)[0]
    coverage = _table_rows("## Coverage\n" + sections, "## Coverage")      # the section tables; claims: test_coverage
    assert len(coverage) >= 40, "every section of every curriculum document has a row"
    existing = {int(p.stem[:2]) for p in LESSONS}
    for section, lessons, *rest in coverage:
        numbers = {int(n) for n in re.findall(r"\b(\d\d)\b", lessons)}
        assert numbers and numbers <= index, f"{section!r} names lessons {sorted(numbers)} not in the index"
        later = numbers - existing
        assert not later or "planned" in " ".join(rest), f"{section!r}: lessons {sorted(later)} are not written yet"
