"""The course around the numbered lessons, kept with them: the lessons' own helpers (`out_dir`, `show`,
`PART_COLOURS`), and what the course commands of `python -m tinygrad_block` do: find and run a lesson, write it as a
notebook, hand out a lesson's exercises as a starter file, check a learner's solutions against the lesson's
checker, and load the site's builder.

A lesson is `lessons/NN_slug.py` (jupytext percent format: a script and a notebook at once) and imports this file as
`course` (`from course import out_dir, show`): the lessons folder is on sys.path wherever a lesson runs, as
`python lessons/NN_slug.py`, as a notebook beside it, in the site's build. Its exercises live beside it: the starter
a learner fills in, `exercises/starters/NN.py`, and the grader `exercises/NN.py`, a list of checks, each a function
that takes the learner's module and raises `CheckFailed` (exercises/common.py) saying precisely what is wrong.
Reference solutions are kept apart, in `solutions/NN.py`. The command line loads this file by path from a clone's
lessons/ folder (tinygrad_block/clone.py): the installed package holds none of the course, and says so.

Lessons draw their pictures through `out_dir`, `pictures.figure` and `show`: each picture is saved under
lessons/out/NN/, its path printed, and, when the lesson runs as a notebook, shown inline.
"""
from __future__ import annotations

import html
import importlib.util
import os
import runpy
import shlex
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from tinygrad_block.clone import load_file
from tinygrad_block.shell import command, from_here, program

LESSONS = Path(__file__).resolve().parent      # this file's folder: the lessons, their exercises and solutions
PACKAGE = "lesson_exercises"           # the name lessons/exercises/ is loaded under, its files as PACKAGE.NN


class CourseError(Exception):
    """A learner's mistake in using the course commands (a missing lesson or file): one line, status 2."""


def _in_repository(*parts: str) -> Path:
    """The folder LESSONS/parts, or a CourseError saying that the course is the repository's lessons/ folder."""
    folder = LESSONS.joinpath(*parts)
    if not folder.is_dir():
        raise CourseError(f"the course (lessons, exercises, solutions) lives in the repository's lessons/ folder, "
                          f"and {folder} is not there. Clone the repository, install it from there "
                          "(pip install -e '.[viz,notebook]') and run the course from its root")
    return folder


def lesson_path(number: int) -> Path:
    """lessons/NN_*.py for lesson `number`, or a CourseError naming the lessons there are."""
    found = sorted(LESSONS.glob(f"{number:02d}_*.py"))
    if not found:
        have = ", ".join(p.stem for p in sorted(LESSONS.glob("[0-9][0-9]_*.py")))
        raise CourseError(f"there is no lesson {number:02d}; the lessons are: {have}")
    return found[0]


def run_lesson(number: int) -> int:
    """Run a lesson as a script (through `run_script`, with this folder first on sys.path as `python` puts it),
    its output straight to the terminal; its exit status."""
    runner = "import sys; sys.path[0] = sys.argv.pop(1); import course; course.run_script()"
    return subprocess.run([sys.executable, "-c", runner, str(LESSONS), str(lesson_path(number))]).returncode


EXTRAS = {"matplotlib": "viz", "graphviz": "viz", "torch": "ref", "transformers": "ref", "cupy": "gpu"}  # its extra


def run_script() -> None:
    """Run the lesson at sys.argv[1] as `python lessons/NN_*.py` would, but where it stops for a package of an extra
    that is not installed (EXTRAS), or a CourseError, say so in one line, status 2, as the command line does."""
    path = Path(sys.argv[1])
    sys.argv, sys.path[0] = [str(path)], str(path.parent)            # as `python path` sets them
    try:
        runpy.run_path(str(path), run_name="__main__")
    except ModuleNotFoundError as e:
        extra = EXTRAS.get((e.name or "").partition(".")[0])
        if extra is None:
            raise
        _stop(f"{path.name} needs {e.name}: install the '{extra}' extra, pip install -e '.[{extra}]' from the "
              "repository's root")
    except CourseError as e:
        _stop(f"{path.name}: {e}")


def _stop(message: str) -> None:
    print(f"python -m tinygrad_block lesson: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def write_notebook(number: int, out_dir: Path | None = None, execute: bool = False) -> Path:
    """The lesson as a .ipynb beside it by default, lessons/NN_slug.ipynb (where a Jupyter kernel, which starts in
    the notebook's own folder, imports `course` as the script does): its cells as in the script, and with
    `execute` their outputs too (every cell run in order by a Jupyter kernel, pictures inline). Written to a
    temporary name, then renamed into place."""
    try:
        import jupytext
    except ImportError:
        raise CourseError("writing a notebook needs jupytext: install the 'notebook' extra, "
                          "pip install -e '.[notebook]' from the repository's root") from None
    path = lesson_path(number)
    out = (out_dir or LESSONS) / f"{path.stem}.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    notebook = jupytext.read(path)
    if execute:
        notebook = _execute(notebook, path)
    _write_atomically(out, jupytext.writes(notebook, fmt="ipynb"))
    return out


def _write_atomically(path: Path, text: str) -> None:
    """`text` into `path`: written to a temporary file beside it, then renamed over it."""
    handle, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


def notebook_viewer(path: Path) -> str | None:
    """The command that opens the notebook at `path` in JupyterLab, with the `jupyter` of this Python's environment
    (a virtual environment need not be activated); None when JupyterLab is not installed there.
    JupyterLab roots its file browser at the lessons folder when the notebook lies in it (beside its lesson, by
    default), so every lesson and notebook is a click away; at the notebook's own folder otherwise (--out-dir
    elsewhere: JupyterLab opens no file outside its root)."""
    jupyter = Path(sys.executable).parent / ("jupyter.exe" if sys.platform == "win32" else "jupyter")
    if importlib.util.find_spec("jupyterlab") is None or not jupyter.exists():
        return None
    path, lessons = Path(path).resolve(), LESSONS.resolve()
    root = lessons if path.is_relative_to(lessons) else path.parent
    return shlex.join([program(jupyter), "lab", f"--ServerApp.root_dir={from_here(root)}", from_here(path)])


def _execute(notebook, path: Path):
    """Run every cell of `notebook` in a fresh kernel started in the lessons folder, as JupyterLab starts one for
    the notebook beside its lesson (`import course` resolves there); a failing cell is a CourseError naming the
    lesson and the error."""
    try:
        import nbclient
    except ImportError:
        raise CourseError("executing a notebook needs nbclient and ipykernel: install the 'notebook' extra, "
                          "pip install -e '.[notebook]' from the repository's root") from None
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                     extra_arguments=["--IPKernelApp.log_level=ERROR"],   # no start-up chatter
                                     resources={"metadata": {"path": str(LESSONS)}})
    try:
        client.execute(stderr=subprocess.DEVNULL)    # the kernel's own stderr (zmq's shutdown asserts): not ours
    except nbclient.exceptions.CellExecutionError as e:
        raise CourseError(f"{path.name} failed as a notebook: {e.ename}: {e.evalue}") from None
    return notebook


def site_module() -> ModuleType:
    """lessons/site.py, the builder of the course's website (`python -m tinygrad_block site`), loaded by path."""
    return load_file("lesson_site", LESSONS / "site.py")


# ---------------------------------------------------------------- pictures, saved and shown
# One colour per kind of parameter, so that every lesson's chart of where the parameters are reads the same way.
PART_COLOURS = {"embeddings": "#4C72B0", "attention": "#DD8452", "FFN": "#55A868", "norms": "#8C8C8C",
                "LM head": "#8172B3"}


def out_dir(number: int) -> Path:
    """lessons/out/NN/, created: where lesson `number` keeps its pictures and drawings."""
    path = LESSONS / "out" / f"{number:02d}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def show(picture, path: Path | None = None, dpi: int = 120) -> None:
    """Save a matplotlib Figure to `path` (or take an image or explorer page already written at `picture`),
    print where it is, and show it inline when the lesson runs as a notebook."""
    if path is not None:
        picture.savefig(path, dpi=dpi)
    else:
        path = Path(picture)
    shown = path.relative_to(LESSONS.parent) if path.is_relative_to(LESSONS.parent) else path
    print(f"{'explorer' if path.suffix == '.html' else 'picture'}: {shown}")
    if "ipykernel" in sys.modules:                                   # running as a notebook
        from IPython.display import HTML, SVG, Image, display
        if path.suffix == ".html":                                    # an explorer page, in a frame of its own
            page = html.escape(path.read_text())                     # the page inside: nothing to fetch
            with warnings.catch_warnings():          # IPython's advice, IFrame, takes a URL: not a page held inline
                warnings.filterwarnings("ignore", "Consider using IPython.display.IFrame", UserWarning)
                display(HTML(f'<iframe sandbox="allow-scripts" srcdoc="{page}" '
                             'style="width:100%;height:720px;border:1px solid #ccc"></iframe>'))
        else:
            display(SVG(filename=str(path)) if path.suffix == ".svg" else Image(filename=str(path)))


# ---------------------------------------------------------------- exercises, loaded by path from lessons/exercises/
def _checkers_common() -> ModuleType:
    """lessons/exercises/common.py (CheckFailed and the checkers' shared helpers), with lessons/exercises/ loaded
    as the package PACKAGE first, so that each lesson's `from .common import ...` finds this same module."""
    folder = _in_repository("exercises")
    load_file(PACKAGE, folder / "__init__.py", package_folder=folder)
    return load_file(f"{PACKAGE}.common", folder / "common.py")


def exercises_module(number: int) -> ModuleType:
    """lessons/exercises/NN.py (CHECKS and the checkers' helpers), loaded by path, or a CourseError
    naming the lessons that have exercises."""
    folder = Path(_checkers_common().__file__).parent
    path = folder / f"{number:02d}.py"
    if not path.is_file():
        have = ", ".join(p.stem for p in sorted(folder.glob("[0-9][0-9].py")))
        raise CourseError(f"lesson {number:02d} has no exercises yet; lessons with exercises: {have}")
    return load_file(f"{PACKAGE}.{number:02d}", path)


@dataclass
class Exercises:
    """One lesson's exercises: the starter text and the checks (name, function of the learner's module)."""
    number: int
    starter: str
    checks: list


def exercises(number: int) -> Exercises:
    """The exercises of lesson `number`: the starter, lessons/exercises/starters/NN.py, and the grader's CHECKS;
    or a CourseError naming the lessons that have some."""
    module = exercises_module(number)
    starter = Path(module.__file__).parent / "starters" / f"{number:02d}.py"
    return Exercises(number, starter.read_text(), module.CHECKS)


def write_starter(number: int, path: Path, force: bool = False) -> Path:
    """Write the starter file of lesson `number`'s exercises; never over a file already there, unless `force`."""
    text = exercises(number).starter
    if path.is_dir():
        raise CourseError(f"{path} is a folder; --out takes a file name, like {path / f'exercise_{number:02d}.py'}")
    if path.exists() and not force:
        raise CourseError(f"{path} already exists (your work?); pass --force to replace it, or --out another file")
    try:
        path.write_text(text)
    except OSError as e:
        raise CourseError(f"cannot write {path}: {e.strerror}") from None
    return path


def load_solution(path: Path, number: int):
    """The learner's file for lesson `number` as a module; a CourseError if it is missing or does not import."""
    exercises(number)                                                # a lesson without exercises says so first
    if not path.is_file():
        raise CourseError(f"no file {path}; write the starter with `{command('exercise', f'{number:02d}')}`, fill "
                          "it in, then check it")
    spec = importlib.util.spec_from_file_location(f"solution_{path.stem}", path)
    if spec is None:
        raise CourseError(f"{path} is not a Python file: check {number:02d} expects a .py file, like the starter "
                          f"exercise_{number:02d}.py")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the learner's own code: report it in one line
        raise CourseError(f"{path} does not run: {type(e).__name__}: {e}") from None
    return module


def check(number: int, module, names=None) -> list[tuple[str, str | None]]:
    """Run every check of lesson `number` on the learner's module, or those named in `names`: (name, None if it
    passed, else why not). numpy's overflow and invalid-value warnings are silenced: a check that cares names the
    value itself."""
    results, checks = [], exercises(number).checks
    check_failed = _checkers_common().CheckFailed
    for name, run in checks:
        if names is not None and name not in names:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                run(module)
            results.append((name, None))
        except check_failed as e:
            results.append((name, str(e)))
        except NotImplementedError:
            results.append((name, "not written yet (it still raises NotImplementedError)"))
        except Exception as e:  # the learner's code failed inside the check
            results.append((name, f"raised {type(e).__name__}: {e}"))
    return results


# ---------------------------------------------------------------- the learner's progress through the course
def learner_file(number: int, folder: Path = Path()) -> Path:
    """exercise_NN.py in `folder`: where `exercise NN` writes lesson `number`'s starter by default, and where
    `check NN` and `progress` look for the learner's work."""
    return folder / f"exercise_{number:02d}.py"


def lessons_with_exercises() -> list[int]:
    """The numbers of the lessons that have a checker, lessons/exercises/NN.py, in order."""
    return [int(p.stem) for p in sorted(_in_repository("exercises").glob("[0-9][0-9].py"))]


def progress(folder: Path = Path()) -> list[dict]:
    """Each lesson with exercises, as far as the learner's files in `folder` go (`learner_file`): its number, the
    file, the names of its exercises, and `passed`, how many of them pass: None when there is no file yet, 0 when
    the file does not run (`problem` says why, in one line); `failing` names the others."""
    return [_lesson_progress(number, learner_file(number, folder)) for number in lessons_with_exercises()]


def _lesson_progress(number: int, path: Path) -> dict:
    names = [name for name, _ in exercises(number).checks]
    lesson = {"number": number, "path": str(path), "exercises": names, "passed": None, "failing": names,
              "problem": None}
    if path.is_file():
        try:
            results = check(number, load_solution(path, number))
            lesson["failing"] = [name for name, why in results if why is not None]
        except CourseError as e:
            lesson["problem"] = " ".join(str(e).split())                      # one line, whatever the error said
        lesson["passed"] = len(names) - len(lesson["failing"])
    return lesson
