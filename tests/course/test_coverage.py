"""The curriculum's claims, row by row: lessons/README.md's "Claim by claim" table names, for every fact, figure or
formula of the texts the course follows, the lesson, section and code cell that computes and asserts it. Each row
is checked here: the cell exists, it asserts, and the exact value the row gives is in its code or in what the
lesson prints (read from the lesson's one run in this test run, `lesson_run` in tests/conftest.py, only if a value
is not in the cell's code)."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "lessons" / "README.md"
WHERE = re.compile(r"^(\d{2}) §(\d+), cell (\d+)$")
NUMBER = re.compile(r"[0-9][0-9,]*(?:\.[0-9]+)?")


def claim_rows() -> list[dict]:
    """The rows of the "### Claim by claim" table, as {column header: cell text}."""
    text = README.read_text()
    section = text.split("### Claim by claim", 1)[1]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    split = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines]
    header, rows = split[0], [r for r in split[2:]]
    assert all(len(r) == len(header) for r in rows), "every row has one cell per column"
    return [dict(zip(header, r)) for r in rows]


def lesson_path(number: str) -> Path:
    found = sorted((ROOT / "lessons").glob(f"{number}_*.py"))
    assert len(found) == 1, f"lesson {number}: {found}"
    return found[0]


def code_cells(path: Path) -> dict[int, list[str]]:
    """Section number -> the source of its code cells in order (section 0: the cells before the first heading)."""
    parts = re.split(r"^# %%(.*)$", path.read_text(), flags=re.M)
    sections: dict[int, list[str]] = {0: []}
    current = 0
    for head, body in zip(parts[1::2], parts[2::2]):
        if "[markdown]" in head:
            heading = re.search(r"^# ## (\d+)\. ", body, flags=re.M)
            if heading:
                current = int(heading.group(1))
                sections.setdefault(current, [])
        else:
            sections[current].append(body)
    return sections


def plain(text: str) -> str:
    """Digit-group separators dropped: 6_738_415_616 and 6,738,415,616 both read 6738415616."""
    return re.sub(r"(?<=[0-9])[,_](?=[0-9]{3}(?![0-9]))", "", text)


def numbers(value: str) -> list[str]:
    """The numbers an exact value states, commas dropped: '16,387 (4d + 3)' -> ['16387', '4', '3']."""
    return [n.replace(",", "") for n in NUMBER.findall(value)]


def shows(number: str, text: str) -> bool:
    """The number stands whole in the text (a decimal may be printed with more zeros: 16.125 as 16.1250)."""
    zeros = "0*" if "." in number else ""
    return re.search(rf"(?<![0-9.]){re.escape(number)}{zeros}(?![0-9])", text) is not None


ROWS = claim_rows()


@pytest.fixture
def printed(lesson_run):
    """printed(NN): what lesson NN prints, digit groups dropped (`plain`)."""
    return lambda number: plain(lesson_run(lesson_path(number)).printed)


def test_the_table_covers_every_text_and_the_differing_figures():
    from tinygrad_block import quoted_figures

    assert len(ROWS) >= 50 and {r["text"] for r in ROWS} == {"anatomy", "forward pass", "formulas", "deep dive"}
    quoted = [r for r in ROWS if r["as commonly quoted"]]
    exact = " ".join(plain(r["exact value"]) for r in quoted)
    for note in quoted_figures.NOTES:                      # each figure the course notes as differing has its row
        first = numbers(note.exact())[0]
        assert shows(first, exact), f"{note.preset}, {note.what}: {note.exact()}"


@pytest.mark.parametrize("row", ROWS, ids=[f"{i + 1:03d}" for i in range(len(ROWS))])
def test_the_claim_is_asserted_where_the_table_says(row, printed):
    where = WHERE.match(row["where"])
    assert where, f"where should read 'NN §S, cell C': {row['where']!r}"
    number, section, cell = where.group(1), int(where.group(2)), int(where.group(3))
    sections = code_cells(lesson_path(number))
    assert section in sections, f"lesson {number} has no section {section}"
    assert len(sections[section]) >= cell, f"{number} §{section} has {len(sections[section])} code cells"
    source = plain(sections[section][cell - 1])
    assert re.search(r"^\s*assert\b", source, flags=re.M), f"{row['where']} asserts nothing"
    missing = [n for n in numbers(row["exact value"]) if not shows(n, source)]
    missing = [n for n in missing if not shows(n, printed(number))] if missing else []
    assert not missing, f"{row['claim']}: {missing} neither in {row['where']}'s code nor in what lesson {number} prints"
