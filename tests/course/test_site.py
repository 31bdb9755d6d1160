"""The course as a website (lessons/site.py, `python -m tinygrad_block site`): lessons 01 and 19 built once, over an
older site, and read in headless Chromium from file:// URLs, as a reader opens the folder: every page loads with no
console error and fetches nothing from the network, every picture is drawn (one for each `picture:` line the lesson
printed), every local link leads to a file, the search page finds a lesson's word, and the explorer embedded in
lesson 19 answers a click with the card of the op clicked. The mistakes (an --out that is a file or a folder of
other files, an unknown lesson, the extra missing, a lesson that fails) are one line and leave nothing behind.

Skipped, saying why, without the 'site' extra, playwright or chromium. Screenshots go to /tmp/site_shots/."""
import fcntl
import html
import json
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

import tinygrad_block as tb
from conftest import ROOT, course_module
from tinygrad_block import nn

course = course_module()

SHOTS = Path("/tmp/site_shots")
BUILT = ["01_tensors_and_the_graph", "19_the_explorer"]
MARK = ".tinygrad_block_site"
DATA = re.compile(r'<script id="data" type="application/json">.*?</script>', re.S)


@pytest.fixture(scope="module")
def site_module():
    pytest.importorskip("sphinx", reason="the 'site' extra is missing: pip install -e '.[site]'")
    return course.site_module()


def build_over_an_older_site(folder: Path) -> dict:
    """`site --out FOLDER/site --lessons 01 19` run as a reader runs it, over a site an earlier build left there:
    its status, what it printed, and the files beside the site and in it afterwards."""
    out = folder / "site"
    out.mkdir()
    (out / MARK).write_text("an older build\n")
    (out / "stale.html").write_text("<p>from an older build</p>")
    result = subprocess.run([sys.executable, "-m", "tinygrad_block", "site", "--out", str(out), "--lessons", "01",
                             "19"], capture_output=True, text=True, timeout=600, cwd=folder)
    return {"out": str(out), "returncode": result.returncode, "stdout": result.stdout, "stderr": result.stderr,
            "beside": sorted(p.name for p in folder.iterdir() if p.name != "run.json"),
            "inside": sorted(p.name for p in out.iterdir())}


@pytest.fixture(scope="module")
def site_run(tmp_path_factory, pytestconfig, lesson_run, site_module) -> dict:
    """The one build of this test run (`build_over_an_older_site`), shared by pytest-xdist's workers as the lesson
    runs are (tests/conftest.py): whichever worker first needs it builds it, behind a lock. The two lessons' own
    test runs go first: after them no other run writes lessons/out/01 or 19 while this build does."""
    for stem in BUILT:
        lesson_run(ROOT / "lessons" / f"{stem}.py")
    base = tmp_path_factory.getbasetemp()
    if hasattr(pytestconfig, "workerinput"):
        base = base.parent
    folder, record = base / "site-build", base / "site-build" / "run.json"
    with open(base / "site-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not record.is_file():
            folder.mkdir(exist_ok=True)
            record.write_text(json.dumps(build_over_an_older_site(folder)))
    return json.loads(record.read_text())


@pytest.fixture(scope="module")
def site(site_run) -> Path:
    assert site_run["returncode"] == 0, site_run["stdout"] + site_run["stderr"]
    return Path(site_run["out"])


def test_the_build_says_a_line_a_lesson_and_replaces_the_older_site_only_then(site_run):
    assert site_run["returncode"] == 0 and site_run["stderr"] == "", "no kernel chatter on the terminal"
    lines = site_run["stdout"].splitlines()
    progress = [line for line in lines if re.match(r"  \[\d/2\] ", line)]
    assert [line.split()[1].rstrip(":") for line in progress] == BUILT           # one line a lesson, in order
    assert all(re.fullmatch(r"  \[\d/2\] \w+: run in \d+\.\d s", line) for line in progress), progress
    assert lines[-1].startswith(f"site: {Path(site_run['out']) / 'index.html'} (2 lessons, built in ")
    assert "warning" not in site_run["stdout"]
    assert "stale.html" not in site_run["inside"] and MARK in site_run["inside"]   # the old site replaced
    assert site_run["beside"] == ["site"]                      # no temporary folder, no executed notebooks left


def pages(site: Path) -> list[Path]:
    return sorted(site.glob("*.html")) + sorted(site.glob("_explorers/*/*.html"))


class Opened:
    """A page of the site open in the browser, with every console error, page error and request off the machine."""

    def __init__(self, tabs, path: Path, query: str = ""):
        self.problems = []
        self.page = tabs.open({"width": 1400, "height": 1000}, {
            "console": lambda m: m.type == "error" and self.problems.append(f"console: {m.text}"),
            "pageerror": lambda e: self.problems.append(f"page error: {e}"),
            "requestfailed": lambda r: self.problems.append(f"failed: {r.url}"),
            "request": lambda r: urlparse(r.url).scheme in ("file", "data", "about", "blob")
            or self.problems.append(f"fetched from the network: {r.url}")})
        self.tabs = tabs
        self.page.set_default_timeout(20_000)
        self.page.goto(path.as_uri() + query, wait_until="load")
        if "_explorers" in path.parts:                               # an explorer: laid out and drawn
            self.page.wait_for_selector("body[data-ready=true]", state="attached")
        elif path.name[:2].isdigit():                                # a lesson: its math typeset by MathJax
            self.page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise")
            self.page.evaluate("MathJax.startup.promise")

    def close(self) -> None:
        self.tabs.done(self.page)

    def shot(self, name: str) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=SHOTS / f"{name}.png", caret="initial")    # as test_explorer_browser's shots


@pytest.fixture
def open_page(tabs):
    """open_page(path, query) -> the page opened; given back (conftest.Tabs) after the test."""
    opened = []

    def _open(path: Path, query: str = "") -> Opened:
        opened.append(Opened(tabs, path, query))
        return opened[-1]
    yield _open
    for page in opened:
        page.close()


# ---------------------------------------------------------------- in the browser
def local_targets(page) -> list[str]:
    """Every link and every file a page loads (a href, link href, script, img and iframe src), as written."""
    return page.page.evaluate("""() => [
        ...[...document.querySelectorAll('a[href], link[href]')].map(e => e.getAttribute('href')),
        ...[...document.querySelectorAll('script[src], img[src], iframe[src]')].map(e => e.getAttribute('src'))]""")


def test_every_page_loads_offline_without_console_errors_its_math_typeset_and_its_local_links_lead_to_files(
        site, open_page):
    """Each page opened once: no console error, nothing fetched from the network, MathJax's output on a lesson,
    and every link and file it loads as its scripts leave it (`local_targets`) a file of the site."""
    found = pages(site)
    names = {p.relative_to(site).as_posix() for p in found}
    assert {"index.html", "GLOSSARY.html", "search.html", *(f"{s}.html" for s in BUILT),
            "_explorers/19_the_explorer/block.html", "_explorers/19_the_explorer/block_compiled.html"} <= names
    for path in found:
        page = open_page(path)
        assert page.problems == [], path
        if path.name == "01_tensors_and_the_graph.html":               # $2^{30}$ and more, typeset offline
            assert page.page.locator("mjx-container").count() > 10
            page.shot("lesson_01")
        for target in local_targets(page):
            url = urlparse(target)
            if url.scheme in ("http", "https", "mailto") or not url.path:      # elsewhere, or on this same page
                continue
            assert not url.scheme and (path.parent / unquote(url.path)).resolve().is_file(), (path, target)
        page.close()


@pytest.mark.parametrize("stem", BUILT)
def test_every_picture_a_lesson_showed_is_drawn(site, open_page, lesson_run, stem):
    """As many pictures under the lesson's cells as `picture:` lines it printed, each loaded and of some width."""
    printed = lesson_run(ROOT / "lessons" / f"{stem}.py").printed
    page = open_page(site / f"{stem}.html")
    widths = page.page.eval_on_selector_all(".cell_output img", "is => is.map(i => i.complete && i.naturalWidth)")
    assert len(widths) == printed.count("\npicture: ") + printed.startswith("picture: ")
    assert widths or stem == "19_the_explorer"                       # lesson 19 shows explorers, no pictures
    assert all(w > 0 for w in widths), widths
    everywhere = page.page.eval_on_selector_all("img", "is => is.map(i => i.naturalWidth)")
    assert all(w > 0 for w in everywhere) and page.problems == []
    assert page.page.locator(".cell_output .stderr").all_inner_texts() == []     # no warning under a cell


@pytest.mark.parametrize("stem", BUILT)
def test_a_lesson_page_shows_the_lessons_own_code_cells_and_not_the_one_that_finds_the_course(site, stem):
    """The build runs each lesson with a first cell of its own, which puts lessons/ on the kernel's path so that
    `import course` resolves: run, not shown. The page shows the lesson's code cells, as many as the file has."""
    page = (site / f"{stem}.html").read_text()
    code_cells = len(re.findall(r"^# %%$", (ROOT / "lessons" / f"{stem}.py").read_text(), flags=re.M))
    assert page.count('class="cell docutils container"') == code_cells
    assert "sys.path.insert" not in page and "from course import" in html.unescape(re.sub(r"<[^>]+>", "", page))


def test_the_glossary_links_each_term_to_its_lesson_page_when_built(site, open_page):
    """Each [..](NN_slug.py) of lessons/GLOSSARY.md is a link to the page where that lesson is built; the other
    lessons' stay text."""
    text = (ROOT / "lessons" / "GLOSSARY.md").read_text()
    page = open_page(site / "GLOSSARY.html")
    hrefs = page.page.eval_on_selector_all("article a[href]", "as => as.map(a => a.getAttribute('href'))")
    for stem in BUILT:
        assert sum(h.split("#")[0] == f"{stem}.html" for h in hrefs) == text.count(f"]({stem}.py)") > 0
    assert not [h for h in hrefs if h.endswith(".py")]


def test_the_home_page_is_the_course_table_with_a_link_to_each_lesson_built(site, open_page):
    page = open_page(site / "index.html")
    hrefs = page.page.eval_on_selector_all("article a[href]", "as => as.map(a => a.getAttribute('href'))")
    text = page.page.inner_text("article")
    every = sorted(p.stem for p in (ROOT / "lessons").glob("[0-9][0-9]_*.py"))
    assert f"This site holds 2 of the {len(every)} lessons" in text
    for stem in every:                                                # the table names each lesson's file
        assert f"{stem}.py" in text
        assert (f"{stem}.html" in hrefs) == (stem in BUILT), stem
    page.shot("home")


def test_the_search_page_finds_a_word_of_a_lesson(site, open_page):
    """RMSNorm is in lesson 19's text and not in lesson 01's: the offline search lists the one and not the other."""
    sources = {stem: (ROOT / "lessons" / f"{stem}.py").read_text() for stem in BUILT}
    assert "RMSNorm" in sources["19_the_explorer"] and "rmsnorm" not in sources["01_tensors_and_the_graph"].lower()
    page = open_page(site / "search.html", "?q=RMSNorm")
    page.page.wait_for_selector("#search-results .search-summary")
    found = page.page.eval_on_selector_all("#search-results ul.search li a",
                                           "as => as.map(a => a.getAttribute('href').split('?')[0].split('#')[0])")
    page.shot("search_rmsnorm")
    assert "19_the_explorer.html" in found and "01_tensors_and_the_graph.html" not in found
    assert page.problems == []


def test_the_explorer_embedded_in_lesson_19_shows_the_card_of_an_op_clicked(site, open_page):
    """In the frame of lesson 19's first explorer: every box opened, the query projection's matmul clicked; its
    card shows its output shape and 2MKN FLOPs (the tiny preset's d_model = 64 in, n_heads · head_dim out)."""
    page = open_page(site / "19_the_explorer.html")
    iframe = page.page.locator("iframe.explorer").first
    assert iframe.get_attribute("src") == "_explorers/19_the_explorer/block.html"
    iframe.scroll_into_view_if_needed()
    frame = page.page.frame_locator("iframe.explorer").first
    frame.locator("body[data-ready=true]").wait_for(state="attached")
    frame.locator("#expand-all").click()
    node = frame.locator('#panes section[data-phase=forward] g.node[data-path="block.attn.q_proj"][data-kind=op]')
    node.filter(has_text="matmul").first.click()
    shape = tuple(int(n) for n in re.findall(r"\d+", frame.locator("#card span.shape").text_content()))
    cfg = nn.preset("tiny")
    assert shape[-1] == cfg.n_heads * cfg.d_head
    rows = 1
    for n in shape[:-1]:
        rows *= n
    assert int(frame.locator("#card span.flops").text_content().replace(",", "")) == 2 * rows * cfg.d_model * shape[-1]
    page.shot("lesson_19_explorer_clicked")
    assert page.problems == []


# ---------------------------------------------------------------- the explorer pages' links, moved into the site
def test_an_explorer_page_moved_into_the_site_links_its_cards_to_the_lesson_pages_built(site_module, tmp_path):
    block = nn.TransformerBlock(nn.preset("tiny"), generator=tb.Generator(0))
    page = tb.explore(block, tb.randn(1, 4, 64, generator=tb.Generator(1), requires_grad=True))
    before = page.data["lessons"]
    built = {"02_backpropagation", "06_attention"}
    moved = site_module.explorer_page(page.html, built)
    data = json.loads(moved.split('<script id="data" type="application/json">')[1].split("</script>")[0])
    assert data["lesson_root"] == "../../"
    assert data["lessons"] == {k: [Path(v[0]).stem + ".html", *v[1:]] for k, v in before.items()
                               if Path(v[0]).stem in built}
    assert {Path(v[0]).stem for v in before.values()} > built         # some lessons not built: their links gone
    for file, *_ in data["lessons"].values():                          # from _explorers/DOC/ to the site's root
        assert (tmp_path / "_explorers" / "doc" / data["lesson_root"] / file).resolve() == tmp_path / file
    assert DATA.sub("", moved) == DATA.sub("", page.html)                # nothing else changed


# ---------------------------------------------------------------- mistakes: one line, nothing built
@pytest.mark.parametrize("case", ["a file", "a folder of other files", "an unknown lesson", "not a number"])
def test_a_mistake_is_one_line_and_leaves_everything_as_it_was(tmp_path, command_line, case):
    out = tmp_path / "out"
    argv, said = {"a file": ([], "is a file; --out takes a folder"),
                  "a folder of other files": ([], "not a site this command built"),
                  "an unknown lesson": (["--lessons", "01", "42"], "there is no lesson 42; the lessons are: 01_"),
                  "not a number": (["--lessons", "1x"], "a lesson number is 1 to 99 (e.g. 01), got '1x'")}[case]
    if case == "a file":
        out.write_text("notes")
    elif case == "a folder of other files":
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    err = command_line.mistake("site", "--out", out, *argv)
    assert err.startswith("python -m tinygrad_block site: error: ") and said in err and err.count("\n") == 1
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_without_the_site_extra_the_command_names_it(tmp_path, command_line, monkeypatch):
    monkeypatch.setitem(sys.modules, "myst_nb", None)                 # `import myst_nb` now fails, as uninstalled
    err = command_line.mistake("site", "--out", tmp_path / "site")
    assert "needs myst_nb: install the 'site' extra, pip install -e '.[site]'" in err
    assert list(tmp_path.iterdir()) == []


def test_a_lesson_that_fails_leaves_the_older_site_in_place(site_module, tmp_path):
    """A cell that raises: one line naming the lesson and its error; the site there before is untouched."""
    lesson = tmp_path / "lessons" / "07_broken.py"
    lesson.parent.mkdir()
    lesson.write_text("# %% [markdown]\n# # Lesson 07 — Broken\n\n# %%\nx = 1\nassert x == 2, 'x is 1, not 2'\n")
    out = tmp_path / "site"
    out.mkdir()
    (out / MARK).write_text("an older build\n")
    (out / "index.html").write_text("<p>the older site</p>")
    with pytest.raises(course.CourseError) as error:
        site_module.build_lessons(out, [lesson], say=lambda line: None)
    assert str(error.value) == "the site was not built: 07_broken.py failed as it ran: AssertionError: x is 1, not 2"
    assert (out / "index.html").read_text() == "<p>the older site</p>"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lessons", "site"]
