"""Every lesson has the course's shape and runs, as a script and as a notebook: each cell prints and asserts its own
numbers, pictures land under lessons/out/NN/ and show under their cell. Its exercises exist, with a reference
solution, and it never sends the reader to documents they don't have.

A lesson runs once per test run, as an executed notebook (tests/conftest.py), and every check here reads
that run. Why that run and not the script's: a Jupyter kernel runs exactly the file's code cells, in order, so the
notebook's run shows all that the script's would (each cell runs without error, each printed line, each picture
written) and what a script's cannot (each cell's output under it, pictures inline); running both doubled the time
and added no check. What only a script run would prove is that `python lessons/NN_*.py` works outside a kernel, and
the two differ only in what can be read off the file, which the test named "the script is the notebook's cells"
reads: the notebook's cells are the file's own text (no magic hidden in a comment), the file uses nothing that only
a kernel defines (`display`, `get_ipython`, a `%` magic or a `!` shell line), and imports nothing from lessons/ but
`course` (the script's folder is on its sys.path; the kernel starts in lessons/, where `import course` resolves, but
the script's own folder is not otherwise the kernel's). That `python -m tinygrad_block lesson NN` runs the file as
`python` would, and that the notebook runs from its own folder as JupyterLab runs it, is tested in test_course.py."""
import ast
import re
from pathlib import Path

import pytest

from conftest import course_module

course = course_module()
ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted((ROOT / "lessons").glob("[0-9][0-9]_*.py"))
ids = [p.stem for p in LESSONS]
KERNEL_ONLY = {"display", "get_ipython", "In", "Out"}      # names a Jupyter kernel defines and `python` does not


def cells(path: Path) -> list[tuple[str, str]]:
    """(kind, text) of each cell of a jupytext percent file; kind is 'markdown' or 'code'."""
    parts = re.split(r"^# %%(.*)$", path.read_text(), flags=re.M)
    return [("markdown" if "[markdown]" in head else "code", body) for head, body in zip(parts[1::2], parts[2::2])]


def test_the_lessons_are_numbered_from_01_without_a_gap():
    numbers = [int(p.stem[:2]) for p in LESSONS]
    assert numbers == list(range(1, len(LESSONS) + 1)), numbers


@pytest.mark.parametrize("path", LESSONS, ids=ids)
def test_lesson_runs_and_its_pictures_are_there(path, lesson_run):
    run = lesson_run(path)
    assert run.returncode == 0 and "its cells have run" in run.stdout, run.stdout + run.stderr
    assert run.stderr == "", "no kernel chatter on the terminal"
    assert run.printed.strip(), "a lesson prints what it shows"
    for line in run.printed.splitlines():
        if line.startswith("picture: "):
            picture = ROOT / line.removeprefix("picture: ")
            head = picture.read_bytes()[:8]
            assert picture.parent == ROOT / "lessons" / "out" / path.stem[:2], line
            assert head == b"\x89PNG\r\n\x1a\n" or head.startswith(b"<?xml"), line
        if line.startswith("explorer: "):                          # a graph explorer page (explorer_page.py)
            page = ROOT / line.removeprefix("explorer: ")
            assert page.parent == ROOT / "lessons" / "out" / path.stem[:2], line
            assert page.read_text().startswith("<!DOCTYPE html>") and 'id="data"' in page.read_text(), line


@pytest.mark.parametrize("path", LESSONS, ids=ids)
def test_lesson_runs_as_an_executed_notebook(path, lesson_run):
    code = lesson_run(path).code_cells
    assert not any(o.get("output_type") == "error" for c in code for o in c["outputs"])
    printing = [c for c in code if "print(" in "".join(c["source"])]
    assert all(c["outputs"] for c in printing), "each printing cell shows its output under it"
    shown = sum(o.get("output_type") == "display_data" for c in code for o in c["outputs"])
    drawn = sum("show(" in "".join(c["source"]) for c in code)
    assert shown >= drawn, "each picture is shown inline"


@pytest.mark.parametrize("path", LESSONS, ids=ids)
def test_the_script_is_the_notebooks_cells_and_needs_no_kernel(path):
    import jupytext
    notebook = jupytext.read(path)
    assert [c.cell_type for c in notebook.cells] == [kind for kind, _ in cells(path)]
    ours = [body.strip("\n") for kind, body in cells(path) if kind == "code"]
    assert [c.source for c in notebook.cells if c.cell_type == "code"] == ours, "a magic or shell line in a comment"
    tree = ast.parse("\n".join(ours))
    unbound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in KERNEL_ONLY} - bound_names(tree)
    assert not unbound, f"only a kernel defines {sorted(unbound)}"
    beside = {p.stem for p in (ROOT / "lessons").iterdir()} - {"course"}
    assert "course" in imported_modules(tree), "a lesson draws through the course's out_dir and show"
    assert not imported_modules(tree) & beside, f"imports from lessons/ more than the course: {beside}"


def bound_names(tree: ast.AST) -> set[str]:
    """The names a program assigns, imports or defines."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def imported_modules(tree: ast.AST) -> set[str]:
    """The top-level modules a program imports (`import a.b` and `from a.b import c` both give 'a')."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


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
