"""The explorer page (explorer_page.py) in a real browser: headless Chromium driven by Playwright opens each page from a
file:// URL and clicks, hovers, types and steps through it. Every number the page shows is checked against an
independent recording of the same computation (record_graph, count_flops, num_parameters, numpy).

Skipped, saying why, where playwright or chromium is missing. Screenshots go to each test's tmp_path and to
/tmp/explorer_shots/ for a person to look at."""
import re
import shutil
import statistics
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import tinygrad_block as tb
from conftest import block_program
from tinygrad_block import cpu_kernels, cuda_kernels, nn
from tinygrad_block.kernels import comment
from tinygrad_block.counting import count_flops
from tinygrad_block.clone import LESSONS
from tinygrad_block.explorer_page import explore
from tinygrad_block.fuse import kernel_instructions
from tinygrad_block.graph import record_graph
from hostile import FINITE, NAMES, ROOT, TITLE, Affine, hostile

SHOTS = Path("/tmp/explorer_shots")
VIEWPORT = {"width": 1600, "height": 1000}
READY_S = 20                                    # a generous limit on loading; the benchmark measures it
CALLS = ("op", "residual", "accumulate")        # a view's kinds for a primitive call (data-kind "op" on the page)
MAX_BYTES = 5_000_000


# ---------------------------------------------------------------- the browser, the pages and their oracles
class Recorded:
    """An independent recording of module(*inputs), forward and backward: the Graph and the FLOP counter."""

    def __init__(self, module, *inputs):
        self.module = module
        with record_graph(module, *inputs) as self.graph, count_flops() as self.fc:
            out = module(*inputs)
            out.backward(tb.ones(*out.shape, dtype=out.dtype, device=out.device))

    def ops(self, phase: str) -> list:
        return [self.graph.nodes[i] for i in self.graph.ops(phase)]

    def index(self, phase: str, label: str) -> int:
        """The graph index of the first op of a phase with this label."""
        return next(i for i in self.graph.ops(phase) if self.graph.nodes[i].label == label)


def tiny_block():
    return nn.TransformerBlock(nn.preset("tiny"), generator=tb.Generator(0))


def tiny_x():
    return tb.randn(2, 8, 64, generator=tb.Generator(1), requires_grad=True)


def tiny_lm():
    return nn.LM(nn.preset("tiny"), generator=tb.Generator(0))


def llama_7b():
    return nn.LM(nn.preset("llama2-7b"), generator=tb.Generator(0), device="meta")


def meta_ids():
    return tb.zeros(1, 16, dtype=tb.int64, device="meta")


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict:
    """The pages, written once: the tiny block at depth 1 (no values), the same with values, the tiny LM on token
    ids, Llama-2-7B on the shape-only device (its 32 identical layers folded into one box), the tiny block with
    its compiled program, a model of hostile names and values (tests/graph/hostile.py) and that page shown as a
    notebook shows it, in the inline frame of `_repr_html_`, and a model of hostile names whose compiled program
    generates a kernel naming them all."""
    out = tmp_path_factory.mktemp("explorer")
    hostile_page = explore(*hostile(), title=TITLE, values=True)
    notebook = out / "notebook.html"
    notebook.write_text(f'<!DOCTYPE html><html><body data-ready="true">{hostile_page._repr_html_()}</body></html>')
    return {"hostile": hostile_page.save(out / "hostile.html"), "notebook": notebook,
            "block": explore(tiny_block(), tiny_x(), depth=1, values=False).save(out / "block.html"),
            "values": explore(tiny_block(), tiny_x(), values=True).save(out / "values.html"),
            "lm": explore(tiny_lm(), tb.zeros(1, 8, dtype=tb.int64)).save(out / "lm.html"),
            "model": explore(llama_7b(), meta_ids(), values=False).save(out / "model.html"),
            "compiled": explore(tiny_block(), tiny_x(), compiled=True).save(out / "compiled.html"),
            "hostile_compiled": explore(*hostile(Affine), title=TITLE, compiled=True).save(out / "kernels.html")}


@pytest.fixture(scope="module")
def block():
    return Recorded(tiny_block(), tiny_x())


@pytest.fixture(scope="module")
def lm():
    return Recorded(tiny_lm(), tb.zeros(1, 8, dtype=tb.int64))


@pytest.fixture(scope="module")
def model():
    return Recorded(llama_7b(), meta_ids())


@pytest.fixture(scope="module")
def program():
    """The program tb.jit makes of the tiny block's forward and backward, compiled on its own (compiled.Program)."""
    return block_program(tiny_block(), tiny_x())


class Loaded:
    """One page open in the browser, with the console errors, page errors and dialogs it raised and its load time."""

    def __init__(self, tabs, path: Path, shots: Path):
        self.tabs, self.shots, self.errors = tabs, shots, []
        self.page = tabs.open(VIEWPORT, {
            "console": lambda m: m.type == "error" and self.errors.append(f"console: {m.text}"),
            "pageerror": lambda e: self.errors.append(f"page error: {e}"),
            "dialog": lambda d: (self.errors.append(f"dialog: {d.message}"), d.dismiss())})
        self.page.set_default_timeout(10_000)
        start = time.perf_counter()
        self.page.goto(path.as_uri())
        self.page.wait_for_selector("body[data-ready=true]", state="attached", timeout=READY_S * 1000)
        self.seconds = time.perf_counter() - start

    def nodes(self, phase: str | None = None, kind: str | None = None, marked: str | None = None) -> list[dict]:
        """The drawn g.node elements: id, data-path, data-kind, data-phase, data-collapsed, the first line of the
        label (`text`) and its first word (`label`: the op or module name), classes; of one phase and data-kind when
        given, and only those of the class `marked` when given (read in the page: fewer to send back)."""
        found = self.page.eval_on_selector_all("#panes g.node" + (f".{marked}" if marked else ""),
                                               """els => els.map(g => ({id: g.id,
            path: g.dataset.path, kind: g.dataset.kind, phase: g.dataset.phase, collapsed: g.dataset.collapsed,
            text: (g.querySelector('text') || {}).textContent || '', classes: [...g.classList]}))""")
        found = [n | {"label": n["text"].split()[0] if n["text"].split() else ""} for n in found]
        return [n for n in found if phase in (None, n["phase"]) and kind in (None, n["kind"])]

    def node(self, phase: str, kind: str, path: str, label: str | None = None) -> dict:
        """The one drawn node of a phase, data-kind and module path (and first label line, when given)."""
        found = [n for n in self.nodes(phase, kind) if n["path"] == path and label in (None, n["label"])]
        assert len(found) == 1, f"expected one {phase} {kind} {label or ''} in {path!r}, drawn: {found}"
        return found[0]

    def hover(self, node: dict) -> None:
        self.page.hover(f'#panes g.node[id="{node["id"]}"]')

    def click(self, node: dict) -> None:
        self.page.click(f'#panes g.node[id="{node["id"]}"]')

    def card(self) -> dict:
        """The hover card's rows, {first cell: second cell} (rows without a name are left out)."""
        rows = self.page.eval_on_selector_all("#card tr", "rs => rs.map(r => [...r.cells].map(c => c.textContent))")
        return {r[0]: r[1] for r in rows if len(r) == 2 and r[0]}

    def shot(self, name: str) -> Path:
        """A screenshot of the viewport, in tmp_path and in /tmp/explorer_shots/. The text caret is left as it is
        (`caret="initial"`): hiding it, playwright's default, adds a style sheet to the page and takes it away again,
        and each time the browser works out the style of every drawn box anew, which on these pages cost more CPU
        than everything else the screenshots do (about 40 of the module's 140 CPU-seconds)."""
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=path, caret="initial")
        SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, SHOTS / path.name)
        return path


@pytest.fixture
def visit(tabs, pages, tmp_path):
    """visit('block') -> the page loaded; given back (conftest.Tabs) after the test."""
    opened = []

    def _visit(name: str) -> Loaded:
        opened.append(Loaded(tabs, pages[name], tmp_path))
        return opened[-1]
    yield _visit
    for loaded in opened:
        tabs.done(loaded.page)


def number(text: str) -> int:
    """The number a card row starts with: '434,560 (matmul 393,216)' -> 434560."""
    return int(text.split()[0].replace(",", ""))


def inside(path: str, scope: str) -> bool:
    return path == scope or path.startswith(scope + ".")


def drawn_ops(recorded: Recorded, phase: str, depth: int | None) -> list:
    """The primitive calls Python's own view draws (fold included), and the module boxes, at a depth."""
    view = recorded.graph.view(depth, backward=phase == "backward")
    return [n for n in view.nodes if n.kind in CALLS], sorted(".".join(n.scope) for n in view.find(kind="box"))


# ---------------------------------------------------------------- loading
@pytest.mark.parametrize("name", ["block", "values", "lm", "model"])
def test_each_page_loads_without_errors_and_draws_both_phases(visit, name):
    loaded = visit(name)
    loaded.shot(f"{name}_loaded")
    assert loaded.page.eval_on_selector_all("section.pane", "ps => ps.map(p => p.dataset.phase)") == \
        ["forward", "backward"]
    assert all(loaded.nodes(phase) for phase in ("forward", "backward"))       # no empty pane
    assert "kernel" not in loaded.page.inner_text("p.help")                  # no compiled pane, no word of one
    assert loaded.errors == []


@pytest.mark.parametrize("button, panes", [("forward", ["forward"]), ("backward", ["backward"]),
                                           ("both", ["forward", "backward"])])
def test_phase_buttons_show_one_pane_or_both(visit, button, panes):
    page = visit("block")
    page.page.click(f"#phase-{button}")
    assert page.page.eval_on_selector_all("section.pane", "ps => ps.map(p => p.dataset.phase)") == panes
    assert {n["phase"] for n in page.nodes()} == set(panes)
    assert page.errors == []


def test_colouring_by_flops_reddens_the_costliest_box_most(visit, block):
    view = block.graph.view(1)
    costliest = max(view.nodes, key=lambda n: n.flops)
    page = visit("block")
    page.page.select_option("#colour", "flops")
    page.shot("block_colour_flops")
    fills = page.page.eval_on_selector_all("#panes section[data-phase=forward] g.node", """gs => gs.map(g =>
        [g.dataset.path, g.querySelector('polygon, ellipse, path').getAttribute('fill')])""")
    assert all(re.fullmatch(r"#ff([0-9a-f]{2})\1", fill) for _, fill in fills)     # every node white to red
    reddest = min(fills, key=lambda f: int(f[1][3:5], 16))
    assert costliest.kind == "box" and reddest[0] == ".".join(costliest.scope)
    page.page.select_option("#colour", "bytes")
    page.page.select_option("#colour", "none")
    assert page.errors == []


# ---------------------------------------------------------------- modules open and close in place
def test_opening_a_box_draws_its_ops_and_closing_its_frame_brings_the_box_back(visit, block):
    page = visit("block")
    ops, boxes = drawn_ops(block, "forward", depth=2)           # attn open: its own ops, its projections boxed
    ops = [n for n in ops if n.scope[:2] == ("block", "attn")]
    boxes = [b for b in boxes if inside(b, "block.attn") and b != "block.attn"]
    assert ops and boxes == ["block.attn.k_proj", "block.attn.o_proj", "block.attn.q_proj", "block.attn.v_proj"]

    page.click(page.node("forward", "module", "block.attn"))
    page.shot("block_attn_open")
    assert [n for n in page.nodes("forward", "module") if n["path"] == "block.attn"] == []    # the box is gone
    assert page.page.locator('#panes g.cluster[data-phase=forward][data-path="block.attn"]').count() == 1
    attn_ops = [n for n in page.nodes("forward", "op") if inside(n["path"], "block.attn")]
    assert Counter(n["label"] for n in attn_ops) == Counter(n.label if n.kind == "op" else "+" for n in ops)
    assert sorted(n["path"] for n in page.nodes("forward", "module") if inside(n["path"], "block.attn")) == boxes
    assert page.page.locator("#panes g.cluster[data-phase=forward][data-path='block.attn'] > text").first.is_visible()

    page.page.click("#panes g.cluster[data-phase=forward][data-path='block.attn'] > text")
    page.shot("block_attn_closed")
    assert page.node("forward", "module", "block.attn")["collapsed"] == "true"
    assert [n for n in page.nodes("forward", "op") if inside(n["path"], "block.attn")] == []
    assert page.page.locator('#panes g.cluster[data-phase=forward][data-path="block.attn"]').count() == 0
    assert page.errors == []


@pytest.mark.parametrize("name", ["block", "lm"])
def test_expand_all_draws_every_primitive_and_collapse_all_only_the_top_level(visit, request, name):
    recorded = request.getfixturevalue(name)
    page = visit(name)
    page.page.click("#expand-all")
    page.shot(f"{name}_expanded")
    for phase in ("forward", "backward"):
        # a depth below every module opens them all, and draws each chain of partial sums as one meeting, as the
        # page does; a fold still draws its first layer only
        ops, boxes = drawn_ops(recorded, phase, depth=99)
        assert boxes == [] and [n for n in page.nodes(phase) if n["collapsed"] == "true"] == []
        assert len(page.nodes(phase, "op")) == len(ops)
        if name == "block":                                     # nothing folded: one node per call, or per meeting
            merged = sum(len(n.members) - 1 for n in ops if n.kind == "accumulate")
            assert len(ops) + merged == len(recorded.graph.ops(phase))
    page.page.click("#collapse-all")
    page.shot(f"{name}_collapsed")
    for phase in ("forward", "backward"):
        ops, boxes = drawn_ops(recorded, phase, depth=1)        # Python's view at depth 1: the same drawing
        assert sorted(n["path"] for n in page.nodes(phase, "module")) == boxes
        root_ops = [n for n in ops if len(n.scope) <= 1]
        assert len(page.nodes(phase, "op")) == len(root_ops)
        assert page.page.locator(f"#panes g.cluster[data-phase={phase}]").count() == 0
    assert page.errors == []


# ---------------------------------------------------------------- the hover card
def test_hovering_an_op_shows_its_output_shape_and_the_flops_counted(visit, block):
    i = block.index("forward", "matmul")                        # the first matmul ran: the query projection
    op, (a, w) = block.graph.nodes[i], [block.graph.nodes[j].shape for j in block.graph.nodes[i].inputs]
    path = ".".join(op.scope)
    assert path == "block.attn.q_proj" and op.flops == 2 * a[0] * a[1] * w[1]          # 2 M K N
    assert block.fc.total("forward", scope=path, matmul_only=True) == op.flops

    page = visit("block")
    page.page.click("#expand-all")
    page.hover(page.node("forward", "op", path, "matmul"))
    page.shot("block_hover_matmul")
    assert page.page.text_content("#card span.shape") == str(tuple(op.shape))
    assert page.page.text_content("#card span.flops") == f"{op.flops:,}"
    assert page.card()["module"] == path
    assert page.page.locator("#card svg.hist").count() == 0                     # a page without values
    assert page.errors == []


@pytest.mark.parametrize("name, scope", [("block", "block.attn"), ("block", "block.ffn"), ("lm", "model.embed")])
def test_hovering_a_module_box_shows_its_parameters_and_flops(visit, request, name, scope):
    recorded = request.getfixturevalue(name)
    module = recorded.module
    for part in scope.split(".")[1:]:
        module = getattr(module, part)
    page = visit(name)
    page.hover(page.node("forward", "module", scope))
    page.shot(f"{name}_hover_{scope.split('.')[-1]}")
    card = page.card()
    assert number(card["parameters"]) == module.num_parameters()
    for phase in ("forward", "backward"):
        flops = sum(n for s, n in recorded.fc.by_scope(phase).items() if inside(s, scope))
        assert number(card[f"FLOPs {phase}"]) == flops == recorded.fc.total(phase, scope=scope)
    assert page.errors == []


def test_values_page_shows_a_histogram_and_the_mean_of_an_op_output(visit, block):
    op = block.graph.nodes[block.index("forward", "matmul")]
    value = op.tensor.numpy().astype(np.float64)
    page = visit("values")
    page.page.click("#expand-all")
    page.hover(page.node("forward", "op", ".".join(op.scope), "matmul"))
    page.shot("values_hover_matmul")
    assert page.page.locator("#card svg.hist").count() == 2                     # the value and its gradient
    assert page.page.locator("#card svg.hist").first.locator("rect").count() > 1
    mean = float(re.match(r"mean (\S+),", page.card()["value"]).group(1))
    assert mean == pytest.approx(value.mean(), rel=5e-3, abs=1e-6)
    assert page.errors == []


# ---------------------------------------------------------------- across the phases
def test_stepping_with_the_arrow_key_visits_backward_ops_in_autograds_order(visit, block):
    expected = [(n.label, ".".join(n.scope) or "—") for n in block.ops("backward")]
    page = visit("block")
    seen, current = [], []
    for _ in range(15):
        page.page.keyboard.press("ArrowRight")
        text = page.page.text_content("#step-text")
        k, total, label, path = re.fullmatch(r"op (\d+) of (\d+): (\S+) .* in (\S+)", text).groups()
        assert (int(k), int(total)) == (len(seen) + 1, len(expected))
        seen.append((label, path))
        [node] = page.nodes("backward", marked="current")
        current.append((node["label"], node["path"] or "—"))
    page.shot("block_step_15")
    assert seen == current == expected[:15]
    page.page.keyboard.press("ArrowLeft")
    assert page.page.text_content("#step-text").startswith(f"op 14 of {len(expected)}: {expected[13][0]} ")
    assert page.errors == []


def test_stepping_backward_marks_the_forward_op_being_differentiated(visit, block):
    """At each step, the forward op whose backward runs (autograd's `source`) is marked, and nothing else."""
    g = block.graph
    forward_ops = set(g.ops("forward"))
    expected = [(g.nodes[n.source].label, ".".join(g.nodes[n.source].scope)) if n.source in forward_ops else None
                for n in block.ops("backward")]
    page = visit("block")
    for k in range(25):
        page.page.click("#step-next")
        marked = [(n["label"], n["path"]) for n in page.nodes("forward", marked="source")]
        assert marked == ([expected[k]] if expected[k] else [])
        assert page.nodes("forward", marked="current") == []
        if k == 20:
            page.shot("block_step_21_source")
    assert [n for n in expected[:25] if n] and page.errors == []


def test_a_drawing_is_laid_out_once_and_each_step_after_that_reuses_it(visit):
    """Stepping on the expanded compiled page changes the marks, not the drawing: graphviz is not asked again (each
    layout there takes about a second), until the drawing itself changes."""
    page = visit("compiled")
    page.page.click("#phase-all")
    page.page.click("#expand-all")
    page.page.click("#step-next")                     # the first step may show another phase: a new drawing
    page.page.evaluate("""() => { window.layouts = 0; const draw = viz.renderString.bind(viz);
        viz.renderString = (text, options) => { window.layouts += 1; return draw(text, options); }; }""")
    said = []
    for _ in range(4):
        page.page.click("#step-next")
        said.append(page.page.text_content("#step-text"))
    assert page.page.evaluate("window.layouts") == 0
    assert len(set(said)) == 4 and said[0].startswith("op 2 of ")               # each step moved on
    assert len(page.nodes("backward", marked="current")) == 1                   # and marks its op
    colours = page.page.eval_on_selector_all("#colour option", "os => os.map(o => o.value)")
    page.page.select_option("#colour", colours[1])    # other fills: another drawing of each of the three panes
    assert page.page.evaluate("window.layouts") == 3
    page.page.select_option("#colour", colours[0])    # the drawings of before: kept, not laid out again
    page.page.click("#collapse-all")                  # the drawings the page opened with: kept as well
    assert page.page.evaluate("window.layouts") == 3 and page.errors == []


def test_clicking_a_forward_op_highlights_the_backward_ops_that_differentiate_it(visit, block):
    i = block.index("forward", "matmul")
    grads = Counter((n.label, ".".join(n.scope)) for n in block.ops("backward") if n.source == i)
    assert grads == {("permute", "block.attn.q_proj"): 2, ("matmul", "block.attn.q_proj"): 2}
    page = visit("block")
    page.page.click("#phase-both")
    page.page.click("#expand-all")
    page.click(page.node("forward", "op", ".".join(block.graph.nodes[i].scope), "matmul"))
    page.shot("block_click_matmul")
    assert [n["label"] for n in page.nodes("forward") if "hl" in n["classes"]] == ["matmul"]
    assert Counter((n["label"], n["path"]) for n in page.nodes("backward") if "hl" in n["classes"]) == grads
    assert page.errors == []


def test_backward_ops_inside_a_closed_box_highlight_the_box(visit, block):
    """norm1's output op: two of the ops that sum its gradient run in attn (closed), its own backward in norm1."""
    g = block.graph
    [i] = {j for k in g.ops("forward") if g.nodes[k].scope[:2] == ("block", "attn") for j in g.nodes[k].inputs
           if g.nodes[j].scope == ("block", "norm1")}          # the op of norm1 that attn reads
    grads = [g.nodes[j] for j in g.ops("backward") if g.nodes[j].source == i]
    expected = Counter(("module", "block.attn") if n.scope[:2] == ("block", "attn") else ("op", ".".join(n.scope))
                       for n in grads)
    assert set(expected) == {("module", "block.attn"), ("op", "block.norm1")}

    page = visit("block")
    page.click(page.node("forward", "module", "block.norm1"))
    into_attn = page.page.eval_on_selector_all("#panes section[data-phase=forward] g.edge > title",
                                               "ts => ts.map(t => t.textContent.split('->'))")
    attn = page.node("forward", "module", "block.attn")["id"]
    [[src, _]] = [e for e in into_attn if e[1] == attn and e[0].startswith("f")]
    page.page.click(f'#panes g.node[id="{src}"]')
    page.shot("block_click_norm1_output")
    hl = Counter((n["kind"], n["path"]) for n in page.nodes("backward") if "hl" in n["classes"])
    assert set(hl) == set(expected) and hl[("op", "block.norm1")] == expected[("op", "block.norm1")]
    assert page.errors == []


# ---------------------------------------------------------------- the card docked, zoom, fit and the legend
def test_the_card_is_docked_beside_the_panes_and_covers_no_node(visit, program):
    """Whatever the card shows (a kernel's source widens it), each node drawn in view takes its own clicks."""
    page = visit("compiled")
    page.page.click("#expand-all")
    page.click({"id": "c" + program.plans[0].name[1:]})         # a generated kernel: the card at its widest
    assert source_shown(page)
    page.shot("compiled_card_docked")
    card = page.page.locator("#card").bounding_box()
    for pane in page.page.locator("section.pane").all():
        box = pane.bounding_box()
        assert box["x"] + box["width"] <= card["x"]             # the panes end where the card begins
    covered = page.page.evaluate("""() => [...document.querySelectorAll('#panes g.node')].filter(g => {
        const r = g.getBoundingClientRect(), x = r.x + r.width / 2, y = r.y + r.height / 2;
        if (x < 0 || y < 0 || x >= innerWidth || y >= innerHeight) return false;
        const pane = g.closest('section').getBoundingClientRect();
        if (x < pane.left || x > pane.right || y < pane.top || y > pane.bottom) return false;   // scrolled away
        return !g.contains(document.elementFromPoint(x, y)); }).map(g => g.id)""")
    assert covered == []
    assert page.errors == []


def zooms(page: Loaded) -> dict:
    """phase -> (the pane's zoom, its drawing's width in pixels)."""
    return {p["phase"]: (float(p["zoom"]), p["width"]) for p in page.page.eval_on_selector_all(
        "section.pane", "ps => ps.map(p => ({phase: p.dataset.phase, zoom: p.dataset.zoom, "
        "width: p.querySelector('svg').getBoundingClientRect().width}))")}


def test_zoom_buttons_scale_every_pane_and_fit_shows_each_graph_whole(visit):
    page = visit("block")
    page.page.click("#expand-all")
    start = zooms(page)
    page.page.click("#zoom-in")
    page.page.click("#zoom-in")
    assert {p: z for p, (z, _) in zooms(page).items()} == pytest.approx({p: z * 1.5625 for p, (z, _) in start.items()},
                                                                          rel=2e-3)
    assert all(w == pytest.approx(start[p][1] * 1.5625, rel=2e-3, abs=1) for p, (_, w) in zooms(page).items())
    page.page.click("#zoom-out")
    assert all(w == pytest.approx(start[p][1] * 1.25, rel=2e-3, abs=1) for p, (_, w) in zooms(page).items())
    page.page.click("#zoom-fit")
    page.shot("block_fit")
    fits = page.page.eval_on_selector_all("section.pane", """ps => ps.map(p => {
        const s = p.querySelector('svg').getBoundingClientRect(), r = p.getBoundingClientRect();
        return [s.left >= r.left - 1, s.right <= r.right + 1, s.top >= r.top - 1, s.bottom <= r.bottom + 1,
                p.scrollHeight <= p.clientHeight + 1]; })""")
    assert fits == [[True] * 5, [True] * 5]
    assert all(z < start[p][0] for p, (z, _) in zooms(page).items())        # expanded, the block needs shrinking
    assert re.fullmatch(r"\d+% · \d+%", page.page.text_content("#zoom-text"))
    page.page.click("#collapse-all")                            # a new drawing keeps the zoom chosen
    assert {p: z for p, (z, _) in zooms(page).items()} == {p: z for p, (z, _) in zooms(page).items()}
    assert page.errors == []


def test_control_and_the_wheel_zoom_the_pane_under_the_mouse_only(visit):
    page = visit("block")
    start = zooms(page)
    box = page.page.locator("section.pane[data-phase=backward]").bounding_box()
    page.page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.page.keyboard.down("Control")
    page.page.mouse.wheel(0, -100)
    page.page.keyboard.up("Control")
    page.page.wait_for_function(f"document.querySelector('section.pane[data-phase=backward]').dataset.zoom "
                                f"!= '{start['backward'][0]:.3f}'")
    now = zooms(page)
    assert now["backward"][0] == pytest.approx(start["backward"][0] * 1.1, rel=2e-3)
    assert now["forward"] == start["forward"]
    assert page.errors == []


def test_the_legend_names_the_kinds_drawn_and_the_range_coloured_by(visit, block):
    page = visit("block")
    page.shot("block_legend_kind")
    drawn = {n["kind"] for n in page.nodes()}
    kinds = set(page.page.eval_on_selector_all("#legend [data-kind]", "ss => ss.map(s => s.dataset.kind)"))
    view = {p: block.graph.view(1, backward=p == "backward") for p in ("forward", "backward")}
    assert kinds == {n.kind for v in view.values() for n in v.nodes} and "box" in kinds and "module" in drawn
    fills = page.page.eval_on_selector_all("#legend [data-kind] .swatch", "ss => ss.map(s => s.style.background)")
    assert len(set(fills)) >= 4                                 # each kind its own colour, as graphviz draws it
    page.page.select_option("#colour", "flops")
    page.shot("block_legend_flops")
    largest = {p: max(n.flops for n in v.nodes) for p, v in view.items()}
    text = page.page.inner_text("#legend")
    mega = {p: f"{n / 1e6:.2f} MFLOPs" for p, n in largest.items()}
    assert min(largest.values()) >= 1e6 and "log scale" in text
    assert f"the largest drawn: forward {mega['forward']}, backward {mega['backward']}" in text
    assert page.page.locator("#legend .ramp").count() == 1
    assert page.errors == []


def test_each_card_links_to_the_lesson_and_section_that_teach_it(visit, pages):
    """The attention box, a matmul in it and the gradients' meeting, each to its lesson's file beside the page's
    folder (tmp_path here: the link climbs to the repository's lessons/)."""
    page = visit("block")
    checks = [("module", "block.attn", None, "06_attention.py", "6. Heads, and attention shape by shape"),
              ("op", "block", "+", "02_backpropagation.py", "3. Gradients add up where a tensor is reused")]
    for kind, path, label, file, section in checks:
        found = [n for n in page.nodes(None, kind) if n["path"] == path and label in (None, n["label"])]
        page.hover(found[-1])
        link = page.page.locator("#card a.lesson")
        href = link.get_attribute("href")
        assert (pages["block"].parent / href).resolve() == LESSONS.resolve() / file
        assert page.card()["lesson"] == f"lesson {int(file[:2])}, {section}"
    page.shot("block_card_lesson")
    page.page.click("#expand-all")
    page.hover(page.node("forward", "op", "block.attn.q_proj", "matmul"))
    assert page.card()["lesson"] == "lesson 3, 3. A matmul costs $2MNK$ FLOPs"
    assert page.errors == []


GREEN, GREY, WHITE = "#a5d6a7", "#e0e0e0", "#ffffff"        # round-off; no pair of its own; not checked


def fills(page: Loaded, phase: str) -> list:
    """(id, data-path, data-kind, fill) of each drawn node of a phase."""
    return page.page.eval_on_selector_all(f"#panes section[data-phase={phase}] g.node", """gs => gs.map(g =>
        [g.id, g.dataset.path, g.dataset.kind, g.querySelector('polygon, ellipse, path').getAttribute('fill')])""")


def test_the_gradient_check_colours_a_planted_bug_where_it_lives(tabs, tmp_path, monkeypatch):
    """A bug planted in swiglu's hand-derived backward reddens the FFN's own backward ops, and only them; the
    Linear modules inside it (linear's pair) and every other module stay round-off green."""
    from test_explorer_page import planted
    planted(monkeypatch, "swiglu")
    page = Loaded(tabs, explore(tiny_block(), tiny_x(), check=True).save(tmp_path / "check.html"), tmp_path)
    try:
        page.page.select_option("#colour", "check")
        page.shot("check_planted_depth1")
        boxes = {path: fill for _, path, kind, fill in fills(page, "backward") if kind == "module"}
        assert boxes.pop("block.ffn") not in (GREEN, GREY, WHITE) and set(boxes.values()) == {GREEN}
        assert {fill for _, _, _, fill in fills(page, "forward")} == {WHITE}          # only backward is checked
        whole = re.search(r"the whole block, block_backward: (\S+)", page.page.inner_text("#legend"))[1]
        assert float(whole) > 0.25                                  # all of it: the bug flows on downstream
        page.page.click("#expand-all")
        page.shot("check_planted_expanded")
        ops = [(path, fill) for _, path, kind, fill in fills(page, "backward") if kind == "op"]
        red = {fill for path, fill in ops if path == "block.ffn"}
        assert len(red) == 1 and red.isdisjoint({GREEN, GREY, WHITE})
        assert {fill for path, fill in ops if path != "block.ffn"} == {GREEN, GREY}
        assert {path for path, fill in ops if fill == GREY} == {"block"}             # the residual adds, meetings
        page.hover(next({"id": i} for i, path, _, _ in fills(page, "backward") if path == "block.ffn"))
        assert page.card()["gradient check"].startswith("block.ffn: max |autograd − swiglu_backward| 2.5e-1 "
                                                        "(they disagree)")
        page.shot("check_planted_card")
        assert page.errors == []
    finally:
        tabs.done(page.page)


def test_without_a_bug_the_gradient_check_is_green_everywhere_it_looks(tabs, tmp_path):
    page = Loaded(tabs, explore(tiny_block(), tiny_x(), check=True).save(tmp_path / "check.html"), tmp_path)
    try:
        page.page.select_option("#colour", "check")
        page.page.click("#expand-all")
        page.shot("check_expanded")
        ops = {path: fill for _, path, kind, fill in fills(page, "backward") if kind == "op"}
        assert {fill for path, fill in ops.items() if path != "block"} == {GREEN}
        legend = page.page.inner_text("#legend")
        assert "≤ 1.0e-10 round-off" in legend and "no pair of its own" in legend
        assert page.errors == []
    finally:
        tabs.done(page.page)


# ---------------------------------------------------------------- search
def test_search_marks_matches_dims_the_rest_and_enter_reveals_the_first(visit, block):
    g = block.graph
    boxes = {(n.phase, ".".join(n.scope[:2])) for n in g.nodes if "softmax" in n.step}   # at depth 1: boxed
    first = g.nodes[next(i for i in g.ops("forward") if g.nodes[i].step == "softmax")]
    page = visit("block")
    page.page.fill("#search", "softmax")
    page.shot("block_search_softmax")
    nodes = page.nodes()
    assert {(n["phase"], n["path"]) for n in nodes if "match" in n["classes"]} == boxes
    assert all(("match" in n["classes"]) != ("dim" in n["classes"]) for n in nodes)

    page.page.press("#search", "Enter")
    page.shot("block_search_enter")
    [found] = [n for n in page.nodes("forward", "op") if "hl" in n["classes"]]
    assert (found["label"], found["path"]) == (first.label, ".".join(first.scope))
    assert page.page.locator(f'#panes g.node[id="{found["id"]}"]').is_visible()
    assert page.card()["step"] == "softmax"
    assert page.errors == []


# ---------------------------------------------------------------- a 7B model, folded
def test_model_page_folds_its_layers_into_one_box_and_loads_quickly(visit, pages, model):
    size = pages["model"].stat().st_size
    page = visit("model")
    print(f"\nllama2-7b page (L=16, shape-only): {size:,} bytes, data-ready {page.seconds:.2f} s after goto")
    page.shot("model_loaded")
    assert size < MAX_BYTES
    [layers] = [n for n in page.nodes("forward", "module") if "layers" in n["path"]]
    assert layers["path"].endswith("layers.0") and "× 32" in layers["text"]
    assert page.errors == []


def test_a_folded_box_counts_every_layer_it_stands_for(visit, model):
    """The box of layers.0–31 stands for 32 layers: its card and label count all of them, and one layer 'each'."""
    layer = model.module.layers[0].num_parameters()
    flops = {phase: model.fc.total(phase, scope="model.layers") for phase in ("forward", "backward")}
    assert flops["forward"] == 32 * model.fc.total("forward", scope="model.layers.0")
    page = visit("model")
    box = page.node("forward", "module", "model.layers.0")
    page.hover(box)
    page.shot("model_hover_layers")
    card = page.card()
    assert number(card["parameters"]) == 32 * layer
    assert {phase: number(card[f"FLOPs {phase}"]) for phase in flops} == flops
    assert number(card["each layer"]) == flops["forward"] // 32
    label = page.page.text_content(f'#panes g.node[id="{box["id"]}"]')
    assert f"= {flops['forward'] / 1e9:.2f} GFLOPs" in label
    assert page.errors == []


# ---------------------------------------------------------------- the compiled program's pane
def kernels_of(program, kind: str | None = None) -> list:
    """(kernel index, its instructions) for every kernel of the program; of fused chains only with kind='fused'."""
    found = [(i, kernel_instructions(k)) for i, k in enumerate(program.kernels)]
    return [(i, group) for i, group in found if kind is None or len(group) > 1]


def test_the_compiled_pane_draws_every_kernel_of_the_program(visit, program):
    page = visit("compiled")
    page.shot("compiled_loaded")
    assert page.page.eval_on_selector_all("section.pane", "ps => ps.map(p => p.dataset.phase)") == \
        ["forward", "backward", "compiled"]                         # the kernels beside what they run
    assert all(page.nodes(phase) for phase in ("forward", "backward", "compiled"))
    assert page.page.get_attribute("#phase-all", "class") == "on"
    page.page.click("#phase-compiled")
    assert page.page.eval_on_selector_all("section.pane", "ps => ps.map(p => p.dataset.phase)") == ["compiled"]
    title = page.page.inner_text("section.pane h2")
    assert f"{len(program.kernels)} kernels for {len(program.plain)} primitives, " \
           f"{len(kernels_of(program, 'fused'))} of them fused chains" in title
    page.shot("compiled_depth1")
    assert "click a kernel for the primitives it runs" in page.page.inner_text("p.help")
    page.page.click("#expand-all")
    page.shot("compiled_expanded")
    drawn = page.nodes("compiled", "op")
    assert len(drawn) == len(program.kernels)
    assert sorted(n["id"] for n in drawn) == sorted(f"c{i}" for i in range(len(program.kernels)))
    assert sum(n["text"].startswith("fused:") for n in drawn) == len(kernels_of(program, "fused"))
    assert page.errors == []


def test_clicking_a_fused_kernel_highlights_the_primitives_it_runs(visit, program):
    i, group = next((i, group) for i, group in kernels_of(program, "fused")
                    if all(s.phase == "forward" for s in group))
    page = visit("compiled")
    page.page.click("#phase-all")
    page.page.click("#expand-all")
    page.click({"id": f"c{i}"})
    page.shot("compiled_click_fused")
    assert Counter((n["label"], n["path"]) for n in page.nodes("forward") if "hl" in n["classes"]) == \
        Counter((s.op.name, ".".join(s.scope)) for s in group)
    assert [n for n in page.nodes("backward") if "hl" in n["classes"]] == []
    assert page.page.inner_text("#card h3") == "fused kernel"
    card = page.card()
    assert card["runs"].split("(")[0].strip() == group[0].op.name
    assert number(card["FLOPs"]) == sum(s.flops for s in group)
    assert card["output"].startswith(str(tuple(group[-1].shape)).replace(",)", ")")[:-1])
    assert page.errors == []


def test_clicking_a_forward_op_highlights_the_kernels_that_run_it_and_its_gradient(visit, program, block):
    """The query projection's matmul: its kernel, and the kernels of the four backward ops that differentiate it
    (the recording's calls are the program's instructions, in the order both ran)."""
    calls = [s for s in program.instructions if s.op.name != "derived"]
    instruction_of = dict(zip(block.graph.ops(), map(id, calls)))      # graph node -> the program's instruction
    kernel_of = {id(s): i for i, group in kernels_of(program) for s in group}
    i = block.index("forward", "matmul")
    grads = [j for j in block.graph.ops("backward") if block.graph.nodes[j].source == i]
    assert len(grads) == 4
    page = visit("compiled")
    page.page.click("#phase-all")
    page.page.click("#expand-all")
    page.click(page.node("forward", "op", ".".join(block.graph.nodes[i].scope), "matmul"))
    page.shot("compiled_click_matmul")
    assert sorted(n["id"] for n in page.nodes("compiled") if "hl" in n["classes"]) == \
        sorted({f"c{kernel_of[instruction_of[j]]}" for j in [i, *grads]})
    assert page.card()["compiled"] == "run by its own kernel"
    said = []
    for expand in (n for n in page.nodes("forward", "op") if n["label"] == "expand"):
        page.hover(expand)
        said.append(page.card()["compiled"])
    elided = [k for k in program.alias if program.instructions[k].phase == "forward"]    # broadcast on the fly
    assert elided and said.count("no kernel: the compiled program broadcasts on the fly") == len(elided)
    assert said.count("run by its own kernel") == len(said) - len(elided)
    assert page.errors == []


def source_shown(page: Loaded) -> str:
    """The text of the generated source the card shows (none: '')."""
    return page.page.evaluate("(document.querySelector('#card pre.source') || {}).textContent || ''")


def test_clicking_a_generated_kernel_shows_its_c_function_and_the_toggle_its_cuda_one(visit, program):
    plan = program.plans[0]                                     # RMSNorm's div > add > sqrt, k2: kernel 2
    page = visit("compiled")
    page.page.click("#phase-compiled")
    page.page.click("#expand-all")
    page.click({"id": "c" + plan.name[1:]})
    assert source_shown(page) == cpu_kernels.function(plan)
    assert page.card()["code"] == "generated C, compiled once, run at every replay"
    assert page.page.eval_on_selector_all("#card button.on", "bs => bs.map(b => b.textContent)") == ["C"]
    page.shot("compiled_source_c")
    page.page.click("#card button[data-language=cuda]")
    assert source_shown(page) == cuda_kernels.function(plan)
    page.shot("compiled_source_cuda")
    page.click({"id": "c" + program.plans[1].name[1:]})                 # the language chosen stays
    assert source_shown(page) == cuda_kernels.function(program.plans[1])
    page.page.click("#card button[data-language=c]")
    assert source_shown(page) == cpu_kernels.function(program.plans[1])
    assert page.errors == []


def test_clicking_a_kernel_without_generated_source_says_why_in_one_line(visit, program):
    lone = next(i for i, group in kernels_of(program) if group[0].op.name == "compare")
    matmul = next(i for i, group in kernels_of(program) if group[0].op.name == "matmul")
    page = visit("compiled")
    page.page.click("#phase-compiled")
    page.page.click("#expand-all")
    page.click({"id": f"c{matmul}"})
    assert page.card()["code"] == "runs numpy's function (matmul): source is generated for fused chains only"
    assert source_shown(page) == "" and page.page.query_selector("#card button") is None
    page.click({"id": f"c{lone}"})
    page.shot("compiled_no_source")
    assert page.card()["code"] == "runs numpy's function (compare): source is generated for fused chains only"
    assert source_shown(page) == ""
    assert page.errors == []


# ---------------------------------------------------------------- hostile names, titles and values
def drawn_name(name: str) -> str:
    """A name as a drawn label's first line shows it: up to its first line break, a control character as its code."""
    return name.replace("\x07", "\\x07").split("\n")[0]


def test_a_page_of_hostile_names_runs_none_of_them_and_draws_every_module(visit):
    model, x = hostile()
    recorded = Recorded(model, x)
    page = visit("hostile")
    page.shot("hostile_loaded")
    assert page.errors == []                                 # no dialog, no console error, no page error
    assert page.page.evaluate("document.title") == page.page.text_content("h1") == TITLE
    assert page.page.evaluate("""[document.querySelectorAll('img, iframe, [onerror]').length,
                                  document.querySelectorAll('script').length]""") == [0, 3]
    for phase in ("forward", "backward"):
        _, boxes = drawn_ops(recorded, phase, depth=1)
        drawn = page.nodes(phase, "module")
        assert sorted(n["path"] for n in drawn) == boxes == sorted(f"{ROOT}.{name}" for name in NAMES)
        mark = "′" if phase == "backward" else ""
        assert sorted(n["text"] for n in drawn) == sorted(drawn_name(name + mark) for name in NAMES)
    page.hover(page.node("forward", "module", f"{ROOT}.{NAMES[5]}"))
    assert page.page.text_content("#card h3") == NAMES[5] and page.card()["module"] == f"{ROOT}.{NAMES[5]}"
    assert page.errors == []


def test_clicking_an_op_of_each_hostile_module_shows_its_name_and_honest_statistics(visit):
    model, x = hostile()
    recorded = Recorded(model, x)
    page = visit("hostile")
    page.page.click("#expand-all")
    for phase in ("forward", "backward"):
        ops, _ = drawn_ops(recorded, phase, depth=99)
        assert len(page.nodes(phase, "op")) == len(ops)
    for name in NAMES:
        page.click(page.node("forward", "op", f"{ROOT}.{name}", "mul"))
        assert page.page.text_content("#card h3") == "mul" and page.card()["module"] == f"{ROOT}.{name}"
    page.shot("hostile_click")
    mean, std = re.fullmatch(r"mean (\S+), std (\S+)", page.card()["value"]).groups()
    assert float(mean) == pytest.approx(statistics.fmean(FINITE), rel=5e-3)
    assert float(std) == pytest.approx(statistics.pstdev(FINITE), rel=5e-3)        # about 5.8e299, not inf
    assert "2 of 8 values not finite (nan, ±inf), left out" in page.page.inner_text("#card")
    assert page.errors == []


def test_a_hostile_page_in_a_notebooks_frame_draws_and_runs_none_of_its_names(visit):
    """Inside the sandboxed frame of `_repr_html_`, the page draws what it draws alone."""
    page = visit("notebook")
    frame = page.page.frames[1]
    frame.wait_for_selector("body[data-ready=true]", state="attached", timeout=READY_S * 1000)
    page.shot("hostile_notebook")
    drawn = frame.eval_on_selector_all("#panes g.node", "gs => gs.map(g => g.dataset.path + ' ' + g.id)")
    assert drawn == [n["path"] + " " + n["id"] for n in visit("hostile").nodes()]      # as the page alone draws
    assert frame.evaluate("document.querySelectorAll('img, iframe, [onerror]').length") == 0
    assert frame.text_content("h1") == TITLE and page.errors == []


def test_a_generated_kernel_naming_hostile_modules_shows_its_source_as_text_and_runs_none_of_it(visit):
    program = block_program(*hostile(Affine))
    page = visit("hostile_compiled")
    page.page.click("#phase-compiled")
    page.page.click("#expand-all")
    named = set()
    for plan in program.plans:
        page.click({"id": "c" + plan.name[1:]})
        assert source_shown(page) == cpu_kernels.function(plan)
        named |= {name for name in NAMES if comment(f"{ROOT}.{name}") in source_shown(page)}   # as comments show
        page.page.click("#card button[data-language=cuda]")
        assert source_shown(page) == cuda_kernels.function(plan)
        page.page.click("#card button[data-language=c]")
    page.shot("hostile_compiled_source")
    assert named == set(NAMES)                                  # each module's kernel, each name in its comments
    assert page.page.evaluate("""[document.querySelectorAll('img, iframe, [onerror]').length,
                                  document.querySelectorAll('script').length]""") == [0, 3]
    assert page.errors == []
