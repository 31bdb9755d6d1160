"""The package as a user installs it without -e: the sdist built from a copy of the repository, a wheel built from
that sdist (so the sdist holds all a build needs), installed into a fresh virtual environment outside the
repository, and run there from a folder outside it: --version, the tour, `graph --out x.html` and
`tb.explore(...).save(...)`, each page opened in headless Chromium.

Nothing is downloaded: the wheel is built without build isolation (this environment's setuptools) and installed
without its dependencies, which the fresh environment sees through a .pth file naming this environment's
site-packages (a plain path: the .pth files there, this repository's editable install among them, are not run)."""
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow

EXPLORER = ("template.html", "explorer.js", "explorer.css", "viz-global.js")
NOTICES = ("LICENSE", "THIRD_PARTY_NOTICES.md")
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
                                    ".ruff_cache", ".hypothesis", "out", "tinygrad_block_tour")
SNIPPET = """
import sys
import tinygrad_block as tb
from tinygrad_block import nn
block = nn.TransformerBlock(nn.preset("tiny"), generator=tb.Generator(0), dtype=tb.float64)
x = tb.randn(2, 8, 64, generator=tb.Generator(1), dtype=tb.float64)
print(tb.explore(block, x).save(sys.argv[1]))
"""


def run(*argv, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    """A child process with no PYTHONPATH (nothing of the repository's on its path)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


def checked(*argv, cwd: Path, timeout: int = 300) -> str:
    result = run(*argv, cwd=cwd, timeout=timeout)
    assert result.returncode == 0, f"{argv}: status {result.returncode}\n{result.stdout[-2000:]}{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """The sdist of a copy of the repository, and two wheels: one from the sdist, one from the copy."""
    tmp = tmp_path_factory.mktemp("packaging")
    source, dist = tmp / "source", tmp / "dist"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
    dist.mkdir()
    name = checked(sys.executable, "-c", "import setuptools.build_meta as b, sys; print(b.build_sdist(sys.argv[1]))",
                   dist, cwd=source).splitlines()[-1]
    with tarfile.open(dist / name) as sdist:
        sdist.extractall(tmp / "unpacked", filter="data")
    wheels = {}
    for origin, folder in [("sdist", tmp / "unpacked" / name.removesuffix(".tar.gz")), ("tree", source)]:
        out = tmp / f"wheel-from-{origin}"
        checked(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", out, folder,
                cwd=tmp)
        wheels[origin] = next(out.glob("*.whl"))
    return {"sdist": dist / name, "wheels": wheels, "tmp": tmp}


@pytest.fixture(scope="module")
def installed(built) -> dict:
    """A fresh virtual environment outside the repository with the wheel (built from the sdist) installed, its
    dependencies seen through a .pth file; and a folder outside the repository to run from."""
    tmp = built["tmp"]
    venv, work = tmp / "venv", tmp / "work"
    checked(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp)
    python = venv / "bin" / "python"
    checked(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index",
            built["wheels"]["sdist"], cwd=tmp)
    site = Path(checked(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp).strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work.mkdir()
    return {"venv": venv, "python": python, "work": work}


def test_the_sdist_holds_the_notices_the_changelog_and_the_explorer(built):
    with tarfile.open(built["sdist"]) as sdist:
        names = {n.split("/", 1)[1]: n for n in sdist.getnames() if "/" in n}
        for file in (*NOTICES, "CHANGELOG.md", *(f"tinygrad_block/explorer/{a}" for a in EXPLORER)):
            assert file in names, f"the sdist lacks {file}"
            assert sdist.extractfile(names[file]).read() == (ROOT / file).read_bytes()


@pytest.mark.parametrize("origin", ["sdist", "tree"])
def test_each_wheel_holds_the_notices_and_the_explorer(built, origin):
    with zipfile.ZipFile(built["wheels"][origin]) as wheel:
        for asset in (f"tinygrad_block/explorer/{a}" for a in EXPLORER):
            assert wheel.read(asset) == (ROOT / asset).read_bytes()
        for notice in NOTICES:
            assert wheel.read(f"tinygrad_block-{VERSION}.dist-info/licenses/{notice}") == (ROOT / notice).read_bytes()
    with zipfile.ZipFile(built["wheels"]["sdist"]) as a, zipfile.ZipFile(built["wheels"]["tree"]) as b:
        assert sorted(a.namelist()) == sorted(b.namelist())           # the sdist held all the tree's build needs


def test_the_wheel_holds_no_course_and_prints_the_quoted_figures_there(built, installed):
    """The course (lessons/course.py, the exercises, the site's builder) stays in the repository; what the package
    needs of it on its own, the quoted figures the params command prints beside the exact ones, is in the wheel."""
    with zipfile.ZipFile(built["wheels"]["sdist"]) as wheel:
        names = wheel.namelist()
    assert "tinygrad_block/quoted_figures.py" in names and "tinygrad_block/clone.py" in names
    assert not [n for n in names if n.startswith("lessons/") or n.rsplit("/", 1)[-1] in ("course.py", "site.py")]
    text = checked(installed["python"], "-m", "tinygrad_block", "params", "--preset", "llama2-7b",
                   cwd=installed["work"])
    assert "where commonly quoted figures differ" in text and "262,144,000" in text


def test_the_installed_package_is_the_wheels_not_the_repositorys(installed):
    where = checked(installed["python"], "-c", "import tinygrad_block; print(tinygrad_block.__file__)",
                    cwd=installed["work"]).strip()
    assert Path(where).is_relative_to(installed["venv"]) and not Path(where).is_relative_to(ROOT)


def test_version_there(installed):
    expected = f"tinygrad_block {VERSION}\n"
    assert checked(installed["python"], "-m", "tinygrad_block", "--version", cwd=installed["work"]) == expected
    assert checked(installed["venv"] / "bin" / "tinygrad-block", "--version", cwd=installed["work"]) == expected


@pytest.fixture(scope="module")
def pages(installed) -> dict:
    """The explorer pages the installed package writes: the tour's, graph --out x.html's and tb.explore's."""
    python, work = installed["python"], installed["work"]
    tour = checked(python, "-m", "tinygrad_block", "tour", "--out-dir", "tour", cwd=work)
    checked(python, "-m", "tinygrad_block", "graph", "--preset", "tiny", "--out", "x.html", cwd=work)
    checked(python, "-c", SNIPPET, "snippet.html", cwd=work)
    return {"tour_output": tour, "tour": work / "tour" / "tiny_block_explorer.html", "graph": work / "x.html",
            "snippet": work / "snippet.html"}


def test_the_tour_runs_there_and_says_where_the_course_lives(installed, pages):
    lines = pages["tour_output"].splitlines()
    assert "autograd, hand-derived and finite differences agree" in pages["tour_output"]
    assert (installed["work"] / "tour" / "tiny_block_forward_depth2.svg").read_bytes().startswith(b"<?xml")
    assert "repository's lessons/ folder" in lines[-1] and "-m tinygrad_block lesson" not in lines[-1]
    lesson = run(installed["python"], "-m", "tinygrad_block", "lesson", "01", cwd=installed["work"])
    assert lesson.returncode == 2 and "Traceback" not in lesson.stderr          # as the tour said: not here
    assert "lives in the repository's lessons/ folder" in lesson.stderr and len(lesson.stderr.splitlines()) == 1


@pytest.mark.parametrize("name", ["tour", "graph", "snippet"])
def test_each_page_written_there_draws_in_chromium(pages, tabs, name):
    errors = []
    page = tabs.open({"width": 1600, "height": 1000},
                     {"console": lambda m: m.type == "error" and errors.append(f"console: {m.text}"),
                      "pageerror": lambda e: errors.append(f"page error: {e}")})
    try:
        page.goto(pages[name].as_uri())
        page.wait_for_selector("body[data-ready=true]", state="attached", timeout=20_000)
        drawn = page.eval_on_selector_all("#panes g.node", "gs => gs.map(g => g.dataset.phase)")
    finally:
        tabs.done(page)
    assert errors == []
    assert drawn.count("forward") > 0 and drawn.count("backward") > 0, drawn
