"""The course as a static website, `python -m tinygrad_block site --out DIR`: a home page (lessons/README.md), every
lesson run and shown with its printed outputs and pictures, the glossary, the explorer pages embedded, and search.

Sphinx with myst-nb reads each lesson's jupytext text as a notebook, runs it in a Jupyter kernel and writes its page;
MathJax is served from the site itself (sphinx-mathjax-offline) and the search index is a script beside the pages,
so the site opens from a folder (file://) with nothing fetched. Lives with the course, loaded by path
(course.site_module), like the exercises: the installed package holds none of it.

Sphinx reads copies of the lessons in a folder of its own, and myst-nb runs each in a kernel started there; a first
cell, run but not shown, puts the lessons folder first on the kernel's sys.path, as `python lessons/NN_slug.py`
puts it, so that `import course` finds this course and the pictures land in lessons/out/NN/ as they always do.
"""
from __future__ import annotations

import html
import importlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from io import StringIO
from pathlib import Path

from course import LESSONS, CourseError, lesson_path

HERE = Path(__file__).resolve().parent / "site"                   # the site's stylesheet
MARK = ".tinygrad_block_site"                   # the file that says a folder is a site this builds (safe to replace)
EXTENSIONS = ["myst_nb", "sphinx-mathjax-offline"]      # the second, a folder named so, holds MathJax 3 itself
NEEDS = ("sphinx", *EXTENSIONS, "jupytext", "furo")      # what the 'site' extra installs
LESSON_LINK = re.compile(r"\[([^\]]*)\]\((\d\d_\w+)\.py\)")              # [text](NN_slug.py), in markdown
LESSON_NAME = re.compile(r"`(\d\d_\w+)\.py`")                            # `NN_slug.py`, in the home page's table
FRAME = re.compile(r'<iframe sandbox="allow-scripts" srcdoc="([^"]*)"')  # an explorer shown inline by course.show
EXPLORER_LINE = re.compile(r"^explorer: (\S+\.html)$", re.M)            # the line course.show prints before it
DATA = re.compile(r'(<script id="data" type="application/json">)(.*?)(</script>)', re.S)


# ---------------------------------------------------------------- what to build, checked first
def check_tools() -> None:
    """A CourseError naming the 'site' extra when Sphinx, myst-nb, jupytext, the theme or the offline MathJax does
    not import."""
    missing = []
    for name in NEEDS:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise CourseError(f"building the site needs {', '.join(missing)}: install the 'site' extra, "
                          "pip install -e '.[site]' from the repository's root")


def check_out(out: Path) -> None:
    """A CourseError when `out` is a file, or a folder that holds anything but a site this command built (replacing
    the site would delete it)."""
    if out.exists() and not out.is_dir():
        raise CourseError(f"--out {out} is a file; --out takes a folder for the site, like site/")
    if out.is_dir() and any(out.iterdir()) and not (out / MARK).is_file():
        raise CourseError(f"--out {out} is a folder that holds other files, not a site this command built; the "
                          "build replaces the folder, so give an empty or new one")


def lessons_to_build(numbers: list[int] | None) -> list[Path]:
    """lessons/NN_slug.py for each number (every lesson when None), in order, once; a CourseError for a lesson
    there is not."""
    if numbers is None:
        return sorted(LESSONS.glob("[0-9][0-9]_*.py"))
    return [lesson_path(n) for n in sorted(set(numbers))]


# ---------------------------------------------------------------- the source folder Sphinx reads
def unlinked(text: str, built: set[str]) -> str:
    """Markdown with each [text](NN_slug.py) link to a lesson not in this build written as its text alone."""
    return LESSON_LINK.sub(lambda m: m[0] if m[2] in built else m[1], text)


def home_page(readme: str, built: list[str], glossary: bool) -> str:
    """lessons/README.md with each built lesson's `NN_slug.py` a link to its page, then the (hidden) table of
    contents that orders the pages."""
    text = LESSON_NAME.sub(lambda m: f"[`{m[1]}.py`]({m[1]}.py)" if m[1] in built else m[0], readme)
    pages = built + (["GLOSSARY"] if glossary else [])
    toc = "\n".join(["```{toctree}", ":hidden:", ":maxdepth: 1", "", *pages, "```"])
    every = len(list(LESSONS.glob("[0-9][0-9]_*.py")))
    held = f"all {every} lessons" if len(built) == every else f"{len(built)} of the {every} lessons"
    words = " Every term the course teaches is in the [glossary](GLOSSARY.md)." if glossary else ""
    intro = f"This site holds {held}, each run with its printed outputs and pictures under its cells.{words}\n\n"
    title, _, rest = text.partition("\n")
    return f"{title}\n\n{intro}{rest}\n\n{toc}\n"


def on_the_lessons_path(text: str) -> str:
    """A lesson's jupytext text with a first code cell, tagged so that the page leaves it out, that puts the lessons
    folder first on sys.path: the kernel runs the copy in Sphinx's source folder, and `import course` must find
    the course beside the lessons."""
    first = text.index("# %%")
    cell = f'# %% tags=["remove-cell"]\nimport sys\nsys.path.insert(0, {str(LESSONS)!r})\n\n'
    return text[:first] + cell + text[first:]


def stage(src: Path, lessons: list[Path]) -> bool:
    """Write the pages' sources into `src`: index.md, the lessons, and GLOSSARY.md when the course has one (its
    presence is returned). Links to lessons left out of the build become plain text."""
    built = [p.stem for p in lessons]
    for path in lessons:
        (src / path.name).write_text(on_the_lessons_path(unlinked(path.read_text(), set(built))))
    glossary = (LESSONS / "GLOSSARY.md").is_file()
    if glossary:
        (src / "GLOSSARY.md").write_text(unlinked((LESSONS / "GLOSSARY.md").read_text(), set(built)))
    (src / "index.md").write_text(home_page((LESSONS / "README.md").read_text(), built, glossary))
    return glossary


def settings() -> dict:
    """Sphinx's configuration (no conf.py): myst-nb runs each lesson's jupytext text, raising on a failing cell."""
    return {"project": "tinygrad_block: the course", "extensions": EXTENSIONS, "root_doc": "index",
            "nb_custom_formats": {".py": ["jupytext.reads", {"fmt": "py:percent"}]},
            "nb_execution_mode": "force", "nb_execution_timeout": 900, "nb_execution_raise_on_error": True,
            "nb_execution_show_tb": False, "nb_merge_streams": True,
            "myst_enable_extensions": ["dollarmath"], "myst_heading_anchors": 2,
            "exclude_patterns": [], "html_theme": "furo", "html_title": "tinygrad_block: the course",
            "html_static_path": [str(HERE)], "html_css_files": ["site.css"], "html_copy_source": False,
            "html_show_sourcelink": False, "html_show_copyright": False,
            "html_show_search_summary": False}       # the summaries are fetched, which a page opened as file:// may not


# ---------------------------------------------------------------- the explorer pages, in frames of their own
def explorer_page(page: str, built: set[str]) -> str:
    """An explorer page moved into the site's _explorers/DOC/ folder: its cards link to the lesson pages built
    (../../NN_slug.html); a lesson not built loses its link."""
    def move(m: re.Match) -> str:
        data = json.loads(m[2])
        lessons = data.get("lessons", {})
        data["lessons"] = {key: [f"{Path(v[0]).stem}.html", *v[1:]] for key, v in lessons.items()
                           if Path(v[0]).stem in built}
        data["lesson_root"] = "../../"
        text = json.dumps(data, separators=(",", ":"), allow_nan=False)
        return m[1] + text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026") + m[3]
    return DATA.sub(move, page, count=1)


def embed_explorers(app, doctree, built: set[str]) -> None:
    """Each explorer a lesson showed inline (an iframe whose srcdoc holds the page) becomes a page of the site,
    _explorers/DOC/NAME.html, named as the `explorer:` line printed before it, and a frame that opens it."""
    from docutils import nodes
    doc = app.env.docname
    printed = "\n".join(n.astext() for n in doctree.findall(nodes.literal_block))
    names = [Path(p).stem for p in EXPLORER_LINE.findall(printed)]
    frames = [n for n in doctree.findall(nodes.raw) if FRAME.search(n.astext())]
    if len(names) != len(frames) or len(set(names)) != len(names):
        names = [f"explorer_{k + 1}" for k in range(len(frames))]
    for node, name in zip(frames, names):
        page = html.unescape(FRAME.search(node.astext())[1])
        target = Path(app.outdir) / "_explorers" / doc / f"{name}.html"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(explorer_page(page, built))
        href = f"_explorers/{doc}/{name}.html"
        frame = (f'<iframe class="explorer" src="{href}" title="explorer: {name}"></iframe>\n'
                 f'<p class="explorer-link"><a href="{href}">open the explorer {name} on a page of its own</a></p>')
        node.replace_self(nodes.raw("", frame, format="html"))


# ---------------------------------------------------------------- the build
class Progress:
    """One line per lesson as Sphinx finishes reading (running) it: its name and the seconds it took."""

    def __init__(self, say: Callable[[str], None], total: int):
        self.say, self.total, self.done, self.started = say, total, 0, 0.0

    def start(self, app, docname: str, source) -> None:
        self.started = time.perf_counter()

    def finish(self, app, doctree) -> None:
        if re.match(r"\d\d_", app.env.docname):
            self.done += 1
            self.say(f"  [{self.done}/{self.total}] {app.env.docname}: run in "
                     f"{time.perf_counter() - self.started:.1f} s")


@contextmanager
def kernel_chatter_to(path: Path) -> Iterator[None]:
    """Standard error, file descriptor 2, sent to `path` for a while: the Jupyter kernels that run the lessons
    inherit it, and their start-up warnings are no news to the reader (a failing cell is reported on its own)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "wb") as log:
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def run_sphinx(src: Path, out: Path, built: list[str], say: Callable[[str], None]) -> list[str]:
    """Build the HTML site from `src` into `out`; Sphinx's warnings, one a line (paths shown from `src`)."""
    from myst_nb.core.execute.base import ExecutionError
    from sphinx.application import Sphinx
    from sphinx.errors import SphinxError
    warnings, progress = StringIO(), Progress(say, len(built))
    with kernel_chatter_to(src / "kernels.log"):
        app = Sphinx(str(src), None, str(out), str(src / ".doctrees"), "html", confoverrides=settings(),
                     status=None, warning=warnings, freshenv=True, keep_going=True)
        app.connect("source-read", progress.start)
        app.connect("doctree-read", progress.finish)
        app.connect("doctree-read", lambda a, d: embed_explorers(a, d, set(built)))
        try:
            app.build(force_all=True)
        except ExecutionError as e:                                      # a lesson's cell raised
            raise CourseError(f"the site was not built: {failure(e)}") from None
        except SphinxError as e:
            raise CourseError(f"the site was not built: {' '.join(str(e).split())[:400]}") from None
    return [line.replace(f"{src}/", "") for line in warnings.getvalue().splitlines() if line.strip()]


def failure(error: Exception) -> str:
    """A lesson that failed as it ran, in one line: its file, then the cell's error (myst-nb's ExecutionError
    names the file, and the nbclient error it was raised from names the exception)."""
    cell = error.__cause__
    name, value = getattr(cell, "ename", type(cell).__name__), getattr(cell, "evalue", str(cell))
    return f"{Path(str(error)).name} failed as it ran: {name}: {' '.join(str(value).split())[:400]}"


def replace(out: Path, built_in: Path) -> None:
    """Put the finished site `built_in` at `out`, replacing an older site there only now that this one is built."""
    old = None
    if out.exists():
        old = out.with_name(f"{out.name}.old-{time.time_ns()}")
        out.rename(old)
    built_in.rename(out)
    if old is not None:
        shutil.rmtree(old)


def build(out: Path, numbers: list[int] | None = None, say: Callable[[str], None] = print) -> dict:
    """Build the site at `out` (the lessons `numbers`, or all): checked first, built beside `out` in a temporary
    folder, then renamed into place. What was built: the folder, the lessons, the glossary's presence, the
    seconds it took and Sphinx's warnings."""
    check_tools()
    out = Path(out).absolute()
    check_out(out)
    return build_lessons(out, lessons_to_build(numbers), say)


def build_lessons(out: Path, lessons: list[Path], say: Callable[[str], None]) -> dict:
    """`build` of these lesson files, `out` checked."""
    built = [p.stem for p in lessons]
    start = time.perf_counter()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        temporary = Path(tempfile.mkdtemp(prefix=f"{out.name}.tmp-", dir=out.parent))
    except OSError as e:
        raise CourseError(f"cannot write the site beside {out}: {e.strerror}") from None
    try:
        pages = temporary / "html"              # myst-nb writes the executed notebooks beside it: in `temporary`
        with tempfile.TemporaryDirectory(prefix="tinygrad_block_site_") as src:
            glossary = stage(Path(src), lessons)
            say(f"building the site of {len(lessons)} lessons in {pages}")
            warnings = run_sphinx(Path(src), pages, built, say)
        (pages / MARK).write_text("built by python -m tinygrad_block site; replaced by the next build\n")
        replace(out, pages)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return {"out": str(out), "index": str(out / "index.html"), "lessons": built, "glossary": glossary,
            "seconds": round(time.perf_counter() - start, 1), "warnings": warnings}
