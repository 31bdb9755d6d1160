"""The commands the command line prints for the reader to paste (the next lesson, a check, a resumed run): this very
Python, by a path that works from the current folder, and every word quoted for a shell."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path


def from_here(path: Path) -> str:
    """`path` as a command printed here is best typed: relative to the current folder when it lies below it (a
    virtual environment's `.venv/bin/python`, which needs no activating), else in full."""
    path, here = Path(path).absolute(), Path.cwd()
    return str(path.relative_to(here) if path.is_relative_to(here) else path)


def program(path: Path) -> str:
    """The program at `path` as `from_here` types it, `./x` for a bare `x` (which a shell would search PATH for)."""
    typed = from_here(path)
    return typed if "/" in typed else f"./{typed}"


def this_python() -> str:
    """This interpreter as a shell word, for the commands printed (see `from_here`)."""
    return shlex.quote(program(Path(sys.executable)))


def command(*words: str) -> str:
    """The shell command that runs `python -m tinygrad_block WORDS...` with this very interpreter, quoted."""
    return f"{this_python()} -m tinygrad_block {shlex.join(words)}"
