"""How the tests read the examples of a markdown page (README.md, docs/*.md): its fenced blocks; the python ones
run with each print's output held against the comment after it; the `$ ` command lines with the output shown under
them.

The conventions a page keeps:
- `print(x)  # SHOWN`: the print writes SHOWN; the rest of the comment explains it (`# (32, 64): 2 KV heads of
  d_head 16`). `...` in SHOWN stands for text left out (`# program: 236 kernels for 282 primitives (...`).
- A python block whose first line is `# needs a GPU` runs only where there is one.
- In a plain or `console` block, `$ COMMAND` is a command and the lines under it, up to the next `$` or the
  block's end, what it prints (stdout, then stderr). A line `...` stands for lines left out, `...` within a line
  for text left out, and a number with a unit of time or speed (`3.9 ms`, `139.6 tokens/s`) is a measurement:
  any number matches it. In an `sh` block every line is a command, shown without its output.
"""
from __future__ import annotations

import builtins
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^( *)```(\w*)[^\n]*\n(.*?)^\1```", re.S | re.M)
CLAIM = re.compile(r"^\s*print\(.*\)\s*# (.*)$")
NEEDS_GPU = "# needs a GPU"
MEASURED = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?= (?:s|ms|µs|us|ns|tokens/s|tok/s|steps?/s)\b)")
ELIDED = "..."


@dataclass
class Block:
    """One fenced block: its language ('' when none), its text (its indentation removed) and the file's line
    number of its first line."""
    lang: str
    text: str
    line: int


@dataclass
class Command:
    """A command a page shows: its words (shell-split, the comment dropped), the lines shown as its output (None
    in an `sh` block, which shows none) and its line in the file."""
    argv: list[str]
    shown: list[str] | None
    line: int

    def __str__(self) -> str:
        return f"line {self.line}: $ {shlex.join(self.argv)}"


def blocks(path: Path) -> list[Block]:
    """Every fenced block of the page, in order."""
    text = path.read_text()
    found = []
    for m in FENCE.finditer(text):
        indent = len(m.group(1))
        body = "".join(line[indent:] if line.startswith(" " * indent) else line
                       for line in m.group(3).splitlines(keepends=True))
        found.append(Block(m.group(2), body, text.count("\n", 0, m.start(3)) + 1))
    return found


def python_blocks(path: Path) -> list[Block]:
    return [b for b in blocks(path) if b.lang == "python"]


def needs_gpu(block: Block) -> bool:
    return block.text.startswith(NEEDS_GPU)


# ---------------------------------------------------------------- matching what is printed against what is shown
def pattern(shown: str) -> str:
    """The regex a shown text stands for: `...` any text (the spaces around it too), a measured number any
    number, the rest itself."""
    parts = []
    pieces = shown.split(ELIDED)
    for i, piece in enumerate(pieces):
        piece = piece.lstrip() if i else piece                         # "statement ..." matches "statement:"
        piece = piece.rstrip() if i < len(pieces) - 1 else piece
        at = 0
        for m in MEASURED.finditer(piece):
            parts.append(re.escape(piece[at:m.start()]) + r"\d[\d,]*(?:\.\d+)?")
            at = m.end()
        parts.append(re.escape(piece[at:]))
        parts.append(".*")
    return "".join(parts[:-1])


def line_matches(shown: str, printed: str) -> bool:
    return re.fullmatch(pattern(shown.rstrip()), printed.rstrip(), re.S) is not None


def claim_matches(claim: str, printed: str) -> bool:
    """A print's output against the comment after it: the comment starts with the output (and goes on to explain
    it), or, where the comment leaves text out with `...`, the output is what the comment shows up to the end of
    its last `...`."""
    if claim.startswith(printed):
        return True
    return ELIDED in claim and line_matches(claim[:claim.rindex(ELIDED) + len(ELIDED)], printed)


def lines_match(shown: list[str], printed: list[str]) -> bool:
    """The printed lines against the shown ones, a shown line `...` standing for any number of lines."""
    if not shown:
        return not printed
    if shown[0].strip() == ELIDED:
        return any(lines_match(shown[1:], printed[i:]) for i in range(len(printed) + 1))
    return bool(printed) and line_matches(shown[0], printed[0]) and lines_match(shown[1:], printed[1:])


def trimmed(lines: list[str]) -> list[str]:
    """The lines with their trailing spaces and the blank lines at the end removed."""
    lines = [line.rstrip() for line in lines]
    while lines and not lines[-1]:
        lines.pop()
    return lines


# ---------------------------------------------------------------- python blocks
class Prints:
    """The `print` a block runs with: it keeps the text of each call made from the block's own code, with the
    line it was made on."""

    def __init__(self, filename: str):
        self.filename, self.calls = filename, []

    def __call__(self, *args, sep: str = " ", end: str = "\n", file=None, flush: bool = False) -> None:
        if file not in (None, sys.stdout):
            return builtins.print(*args, sep=sep, end=end, file=file, flush=flush)
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename != self.filename:
            frame = frame.f_back
        self.calls.append((frame.f_lineno if frame else None, sep.join(map(str, args))))


def run_block(block: Block, namespace: dict, filename: str) -> list[tuple[int, str]]:
    """Run one python block in `namespace` (tracebacks give the page's own line numbers); the (line, text) of
    each print."""
    prints = namespace["print"] = Prints(filename)
    exec(compile("\n" * (block.line - 1) + block.text, filename, "exec"), namespace)
    return prints.calls


def claims(block: Block) -> dict[int, str]:
    """{line in the file: the comment after the print on it}."""
    return {block.line + i: m.group(1) for i, text in enumerate(block.text.splitlines())
            if (m := CLAIM.match(text))}


def check_prints(block: Block, prints: list[tuple[int, str]], filename: str) -> None:
    """Every print of the block writes what the comment after it shows, and every such comment is printed."""
    claimed = claims(block)
    for line, text in prints:
        assert line in claimed, f"{filename}:{line}: a print without a comment showing its output: {text!r}"
        assert claim_matches(claimed[line], text), f"{filename}:{line}: printed {text!r}, shown {claimed[line]!r}"
    unprinted = sorted(set(claimed) - {line for line, _ in prints})
    assert not unprinted, f"{filename}: lines {unprinted} show an output that was never printed"


def run_and_check(block: Block, namespace: dict, filename: str) -> None:
    check_prints(block, run_block(block, namespace, filename), filename)


# ---------------------------------------------------------------- commands
def commands(path: Path) -> list[Command]:
    """Every command the page's plain, `console` and `sh` blocks show, in order."""
    found = []
    for block in blocks(path):
        lines = block.text.splitlines()
        if block.lang in ("sh", "bash", "shell"):
            found += [Command(shlex.split(text, comments=True), None, block.line + i) for i, text in enumerate(lines)
                      if text.strip() and not text.lstrip().startswith("#")]
        elif block.lang in ("", "console"):
            starts = [i for i, text in enumerate(lines) if text == "$" or text.startswith("$ ")]
            for i, end in zip(starts, starts[1:] + [len(lines)]):
                found.append(Command(shlex.split(lines[i][1:], comments=True), trimmed(lines[i + 1:end]),
                                     block.line + i))
    return found
