"""Build lessons/GLOSSARY.md from the "Words from this lesson" cell at the end of every lesson.

Each lesson lists the terms it teaches first, one a line: `- **term**: one sentence (§N)`, N naming the section
of that lesson that defines it. This reads them all, checks each line and section, and writes the glossary in
alphabetical order, each term linked to the lesson that teaches it.

    python tools/glossary.py            # write lessons/GLOSSARY.md
    python tools/glossary.py --check    # exit 1, with a one-line summary, when the file is stale
"""
from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

LESSONS = Path(__file__).resolve().parent.parent / "lessons"
WORDS = "## Words from this lesson"
ENTRY = re.compile(r"- \*\*(?P<term>[^*]+?)\*\*: (?P<sentence>\S.*?[^.\s]) \(§(?P<section>\d+)\)")
SECTION = re.compile(r"## (\d+)\. (.+)")
INTRO = """# Glossary

Every term the course teaches, in alphabetical order, with the lesson and section that teach it first. Each lesson
ends with the words it teaches ("Words from this lesson") and a few questions to check yourself; this page is
built from those lists by `python tools/glossary.py`, so edit a lesson, never this page.
"""


class GlossaryError(ValueError):
    """A lesson's word list that cannot be read: names the file, the line and what was expected."""


@dataclass(frozen=True)
class Entry:
    term: str
    sentence: str
    lesson: int
    section: int
    title: str          # the section's title, as its heading gives it
    path: Path          # the lesson file
    line: int           # the line of the file where the entry starts


def lesson_files(lessons_dir: Path) -> list[Path]:
    """The numbered lessons, NN_slug.py, in order."""
    return sorted(Path(lessons_dir).glob("[0-9][0-9]_*.py"))


def markdown_cells(path: Path) -> list[tuple[int, list[str]]]:
    """(line number of the cell's first text line, its lines without the leading '# ') of each markdown cell."""
    cells, current = [], None
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if line.startswith("# %%"):
            current = [] if "[markdown]" in line else None
            if current is not None:
                cells.append((number + 1, current))
        elif current is not None:
            current.append(line[2:] if line.startswith("# ") else line.lstrip("#"))
    return cells


def sections(path: Path) -> dict[int, tuple[str, str]]:
    """Section number -> (title, its markdown text), from its `## N. Title` heading up to the next `## ` heading."""
    found, current = {}, None
    for _, lines in markdown_cells(path):
        for line in lines:
            if line.startswith("## "):
                heading = SECTION.fullmatch(line)
                current = int(heading.group(1)) if heading else None
                if heading:
                    found[current] = (heading.group(2).strip(), "")
            if current is not None:
                title, text = found[current]
                found[current] = (title, text + line + "\n")
    return found


def word_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of each entry of the lesson's word cell, continuation lines joined; [] without one."""
    for start, lines in markdown_cells(path):
        if lines and lines[0].strip() == WORDS:
            entries = []
            for offset, line in enumerate(lines[1:], start=1):
                if line.startswith("  ") and entries:
                    entries[-1] = (entries[-1][0], entries[-1][1] + " " + line.strip())
                elif line.strip():
                    entries.append((start + offset, line.strip()))
            return entries
    return []


def lesson_entries(path: Path) -> list[Entry]:
    """The entries of one lesson, each checked: the line's shape and the section it names."""
    known, number, result = sections(path), int(path.name[:2]), []
    for line_number, text in word_lines(path):
        match = ENTRY.fullmatch(text)
        if not match:
            raise GlossaryError(f"{path.name}:{line_number}: expected '- **term**: one sentence, no full stop (§N)', "
                                f"got {text!r}")
        section = int(match.group("section"))
        if section not in known:
            raise GlossaryError(f"{path.name}:{line_number}: {match.group('term')!r} names §{section}, but the "
                                f"lesson's sections are {sorted(known)}")
        result.append(Entry(match.group("term").strip(), match.group("sentence"), number, section,
                            known[section][0], path, line_number))
    return result


def entries(lessons_dir: Path = LESSONS) -> list[Entry]:
    """Every lesson's entries, in lesson order; a term listed twice (any case) is an error naming both places."""
    seen, result = {}, []
    for path in lesson_files(lessons_dir):
        for entry in lesson_entries(path):
            key = entry.term.lower()
            if key in seen:
                first = seen[key]
                raise GlossaryError(f"{path.name}:{entry.line}: {entry.term!r} is already listed in "
                                    f"{first.path.name}:{first.line}; a term belongs to the first lesson that "
                                    f"teaches it")
            seen[key] = entry
            result.append(entry)
    return result


def render(found: list[Entry]) -> str:
    """The glossary page: the intro, then a heading per initial and one line per term, sorted without case."""
    lines, letter = [INTRO], None
    for e in sorted(found, key=lambda e: (e.term.lower(), e.term)):
        initial = e.term[0].upper() if e.term[0].isalpha() else "0-9"              # "## #" would be an empty heading
        if initial != letter:
            letter = initial
            lines += [f"## {initial}", ""]
        lines.append(f"- **{e.term}**: {e.sentence}. — [lesson {e.lesson:02d} §{e.section}, {e.title}]"
                     f"({e.path.name})")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def write(path: Path, text: str) -> None:
    """Write under a temporary name, then rename it into place, so a reader never sees half a file."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


def stale(path: Path, text: str) -> str | None:
    """None when the file holds exactly `text`; else one line saying how it differs."""
    old = path.read_text().splitlines() if path.exists() else None
    if old is None:
        return f"{path} is missing; run python tools/glossary.py"
    new = text.splitlines()
    changed = [op for op in difflib.SequenceMatcher(None, old, new).get_opcodes() if op[0] != "equal"]
    if not changed:
        return None
    return (f"{path} is stale: {len(changed)} change(s), the first at line {changed[0][1] + 1}; "
            f"run python tools/glossary.py")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build lessons/GLOSSARY.md from the lessons' word lists.")
    parser.add_argument("--check", action="store_true", help="exit 1 when GLOSSARY.md is not what would be written")
    parser.add_argument("--lessons", type=Path, default=LESSONS, help="the folder of the lessons (default: lessons/)")
    args = parser.parse_args(argv)
    try:
        text = render(entries(args.lessons))
    except GlossaryError as error:
        print(f"glossary: {error}", file=sys.stderr)
        return 2
    target = args.lessons / "GLOSSARY.md"
    if args.check:
        summary = stale(target, text)
        print(summary or f"{target} is up to date", file=sys.stderr if summary else sys.stdout)
        return 1 if summary else 0
    write(target, text)
    print(f"wrote {target}: {text.count('- **')} terms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
