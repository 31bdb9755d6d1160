"""Shared test settings: a hypothesis profile sized for CI on a 2-core machine, the devices every device-aware
test runs on, and the helpers tests share.

A test that takes a `device` argument runs on 'cpu' (numpy), on 'strict' (numpy arrays that refuse every
implicit read back to the host, so code that would stall or fail on a GPU fails here, on the CPU) and on
'cuda' (marked `gpu`; skipped, with the reason, where CuPy or a GPU is missing).

The oracles, each written once: finite differences and `rel_err` (tinygrad_block.gradcheck), the hand-derived
pairs (tinygrad_block.manual), the block in PyTorch (tools/torch_block.py, shared with the benchmarks; the
repository root is put on sys.path so tests import it as `tools.torch_block`) and Hugging Face's Llama layer.

Each lesson runs once per test run, and every test that reads what it printed, drew or showed reads that run
(`lesson_run`, at the end).

pytest-xdist runs one worker per core; each worker, and every process it starts (a lesson's kernel, the command
line), computes on one thread (`pytest_configure`), so that the workers' thread pools never spin against each
other for the same cores."""
import contextlib
import fcntl
import gc
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.gradcheck import rel_err  # noqa: F401  (tests import it from here)

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))



class CommandLine:
    """The one way tests run the command line: in this process, `out(*argv)` (status 0 asserted; its stdout),
    `json(*argv)` (the same with --json, parsed), `status(*argv)` (status, stdout, stderr) and `mistake(*argv)`
    (status 2 asserted; its stderr), or, where a fresh interpreter is the point (exit status, no
    traceback, a hidden package, another folder), `process(*argv)`: `python -m tinygrad_block ARGV`."""

    def __init__(self, capsys):
        self.capsys = capsys

    def out(self, *argv) -> str:
        from tinygrad_block import cli
        assert cli.main([str(a) for a in argv]) == 0
        return self.capsys.readouterr().out

    def json(self, *argv) -> dict:
        return json.loads(self.out(*argv, "--json"))

    def status(self, *argv) -> tuple[int, str, str]:
        """(exit status, stdout, stderr) of a run in this process, whatever the status."""
        from tinygrad_block import cli
        try:
            code = cli.main([str(a) for a in argv])
        except SystemExit as stop:
            code = stop.code
        printed = self.capsys.readouterr()
        return code, printed.out, printed.err

    def mistake(self, *argv) -> str:
        """A user's mistake, run in this process: status 2 and no traceback asserted; stderr back."""
        code, _, err = self.status(*argv)
        assert code == 2 and "Traceback" not in err, (code, err)
        return err

    @staticmethod
    def process(*argv, cwd=ROOT, env=None, prelude: str = "", timeout: int = 300) -> subprocess.CompletedProcess:
        """`prelude` (Python) runs first in the child, e.g. to hide a package from it."""
        start = ["-c", f"import sys\n{prelude}\nfrom tinygrad_block.cli import main\nsys.exit(main(sys.argv[1:]))"] \
            if prelude else ["-m", "tinygrad_block"]
        return subprocess.run([sys.executable, *start, *map(str, argv)], capture_output=True, text=True, cwd=cwd,
                              env=env, timeout=timeout)


@pytest.fixture
def command_line(capsys) -> CommandLine:
    return CommandLine(capsys)


def one_line_error(result: subprocess.CompletedProcess, *fragments) -> str:
    """A user's mistake: status 2, exactly one line on stderr holding every fragment, and no traceback."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert all(f in lines[0] for f in fragments), lines[0]
    return lines[0]


settings.register_profile("ci", max_examples=40, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci")


ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# A test process holds over half a million objects that Python's cyclic garbage collector tracks (torch,
# transformers, hypothesis, every collected test), and the graphs the tests build make new ones by the million.
# At Python's thresholds (700, 10, 10) the collector ran 12,500 times in tests/engine, nn, measure and cli (one
# process), 15 s of their 160, 12 s of it walking every object; at these, 1,900 times and 5 s. Nothing here relies
# on when the collector runs: reference counting frees what the engine drops, and a test that looks for a cycle
# turns the collector off (test_memory_is_flat_over_a_training_loop) or calls gc.collect() itself.
GC_THRESHOLDS = (20_000, 20, 20)


def pytest_configure(config):
    """The run itself, before any worker starts: the repository's Python compiled to bytecode once (see
    `compile_once`). Each test process: the cyclic garbage collector run less often (see `GC_THRESHOLDS`). An
    xdist worker beside others: its BLAS and PyTorch on one thread, and so every process it starts."""
    if not hasattr(config, "workerinput"):
        compile_once()
    gc.set_threshold(*GC_THRESHOLDS)
    if int(getattr(config, "workerinput", {}).get("workercount", 1)) > 1:
        from threadpoolctl import threadpool_limits
        os.environ.update(ONE_THREAD)
        threadpool_limits(1)
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(1)


def compile_once() -> None:
    """Byte-compile the package, the tools and the course (each file's __pycache__, as Python itself would) once
    per run. The suite starts over a hundred Python processes (the workers, every lesson's kernel, the command
    line as a process, the tools); where PYTHONDONTWRITEBYTECODE is set, as on many CI machines, none of them
    keeps what it compiled, so each would compile every module it imports again (a quarter of a second for the
    package alone; two minutes of CPU over the suite). Python reads bytecode whatever that variable says, and
    checks it against each file's source."""
    import compileall
    for folder in ("tinygrad_block", "tools", "lessons"):
        compileall.compile_dir(ROOT / folder, quiet=1, workers=0)


def pytest_terminal_summary(terminalreporter):
    """Skips summed by reason, one line each (a machine without a GPU skips the same way hundreds of times)."""
    skipped = terminalreporter.stats.get("skipped", [])
    reasons = Counter(str(r.longrepr[2]).removeprefix("Skipped: ") if isinstance(r.longrepr, tuple) else str(r.longrepr)
                      for r in skipped)
    for reason, n in reasons.most_common():
        terminalreporter.write_line(f"skipped {n}: {reason}")


def cuda_missing() -> str | None:
    """Why device 'cuda' cannot run here (CuPy or a GPU missing), or None when it can."""
    try:
        tb.get_backend("cuda")
    except RuntimeError as e:
        return str(e)
    return None


CUDA_MISSING = cuda_missing()
GPU = [pytest.mark.gpu, pytest.mark.skipif(CUDA_MISSING is not None,
                                           reason=f"no GPU here: {(CUDA_MISSING or '').split(';')[0]}")]
DEVICES = ["cpu", "strict", pytest.param("cuda", marks=GPU)]


def needs_gpu(test):
    """Mark a test `gpu` and skip it, saying why, where CuPy or a GPU is missing."""
    for mark in GPU:
        test = mark(test)
    return test


LESSON_RUNS = "tests/course/test_lessons.py::test_lesson_runs_and_its_pictures_are_there["


def pytest_collection_modifyitems(items):
    """The order the tests are handed out in. pytest-xdist (`--dist worksteal`, pyproject.toml) gives the first
    half of this order to one worker and the second half to the other, and a worker whose queue runs out takes the
    back half of the other's, so both end together whatever the tests cost. Each lesson's run comes first
    (`lesson_run`, at the end of this file): at the front of a queue, it is never taken away and runs as early as
    it can; then the modules with a slow test, then the rest, and last the tests that read a lesson's run, which
    by then is made (else they would wait for it, or make it themselves). Otherwise the tests keep their order, so
    a module's tests stay together and its module-scoped fixtures are made once (twice where the module is split
    between the workers)."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}

    def group(item) -> int:
        if item.nodeid.startswith(LESSON_RUNS):
            return 0
        return 3 if "lesson_run" in item.fixturenames else 1 if item.path in slow else 2
    items.sort(key=group)


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames and not any(m.name == "parametrize" and "device" in m.args[0]
                                                      for m in metafunc.definition.iter_markers()):
        metafunc.parametrize("device", DEVICES)


CHROMIUM = "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else shutil.which("chromium")


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium (Debian's: the package's own download is never used), one per test module that asks; skipped,
    with the reason, without playwright or chromium."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is missing: pip install playwright",
                                   exc_type=ImportError)
    if CHROMIUM is None:
        pytest.skip("chromium is missing (Debian/Ubuntu: apt-get install chromium)")
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


class Tabs:
    """The browser's pages of one test module, each used again by the next test that opens one: `open(viewport,
    handlers)` gives a page showing about:blank, of that size, listening with `handlers` ({'console': f, ...});
    `done(page)` takes it back (a second time does nothing), its handlers removed, the mouse moved to the corner
    and the page blank again. A test still loads its page anew (a new document: nothing of the last test's page is
    left in it). What is kept is the page's renderer process, where Chromium keeps the scripts and graphviz's
    WebAssembly it has compiled: an explorer page loads in a new page for about 1.6 CPU-seconds, in a page used
    before for about 0.6."""

    def __init__(self, browser):
        self.browser, self.idle, self.handlers = browser, [], {}

    def open(self, viewport: dict, handlers: dict):
        page = self.idle.pop() if self.idle else self.browser.new_page()
        page.set_viewport_size(viewport)
        for event, handler in handlers.items():
            page.on(event, handler)
        self.handlers[page] = handlers
        return page

    def done(self, page) -> None:
        if page in self.idle or page.is_closed():               # given back already
            return
        for event, handler in self.handlers.pop(page, {}).items():
            page.remove_listener(event, handler)
        try:
            page.mouse.move(0, 0)
            page.goto("about:blank")
        except Exception:                # a page that crashed or hangs is not used again
            page.close()
            return
        self.idle.append(page)


@pytest.fixture(scope="module")
def tabs(browser) -> Tabs:
    return Tabs(browser)


@pytest.fixture
def gen():
    """A fresh seeded generator per test."""
    return tb.Generator(0)


# ---------------------------------------------------------------- bad inputs, shared by tests/engine/test_errors_*.py
def f32(*shape) -> tb.Tensor:
    return tb.zeros(*shape, dtype=tb.float32)


def f64(*shape) -> tb.Tensor:
    return tb.zeros(*shape, dtype=tb.float64)


def meta(*shape, dtype=tb.float32) -> tb.Tensor:
    return tb.zeros(*shape, dtype=dtype, device="meta")


JOINING_OPS = {          # ops that join two tensors: each refuses mixed dtypes and mixed devices alike
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "maximum": lambda a, b: a.maximum(b),
    "lt": lambda a, b: a < b,
    "matmul": lambda a, b: a @ b.T,
    "concat": lambda a, b: tb.concat([a, b]),
    "stack": lambda a, b: tb.stack([a, b]),
    "where": lambda a, b: tb.where(a > 0, a, b),
}


# ---------------------------------------------------------------- tiny blocks, shared by the nn tests
F64 = tb.float64
D, H, H_KV, D_FF = 16, 4, 2, 24          # d_head = 4: the default tiny block (GQA, 2 query heads per KV head)
LLAMA = nn.BlockConfig(D, H, H_KV, D_FF, max_seq_len=64)
GPT2 = nn.BlockConfig(D, H, H, D_FF, norm="layer", ffn="gelu_tanh", bias=True, rope=False, max_seq_len=64)
BERT = GPT2.with_(layout="post", ffn="gelu", causal=False, norm_eps=1e-12)
PARALLEL = LLAMA.with_(layout="parallel", ffn="relu")


def msg(op: str | None, *fragments: str) -> str:
    """A `match=` regex that requires the op name (as a word, unless None) and every literal fragment, in any
    order."""
    parts = ([rf"\b{re.escape(op)}\b"] if op else []) + [re.escape(f) for f in fragments]
    return "(?s)" + "".join(f"(?=.*{p})" for p in parts)


class Float64Torch:
    """torch, except that `torch.float` (float32) names float64. transformers builds RoPE frequencies and tables
    with `dtype=torch.float`; with this in place of `torch` in its modules it runs the same code in float64
    (float32 alone leaves ~1e-7 errors, far above the float64 tolerances of the tests)."""

    def __getattr__(self, name):
        import torch
        return torch.float64 if name == "float" else getattr(torch, name)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def t64(a, requires_grad: bool = False) -> tb.Tensor:
    return tb.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


def block(cfg, seed: int = 0, dtype=F64) -> nn.TransformerBlock:
    """The block of layout `cfg` as initialised (gains one, biases and LoRA B zero)."""
    return nn.TransformerBlock(cfg, generator=tb.Generator(seed), dtype=dtype)


def randomize(module, seed: int = 0) -> dict:
    """Give every parameter of `module` a random value so that no term of its forward pass is trivially zero or
    one: weights ~ N(0, 1 / fan_in), biases and LoRA B ~ 0.3 N(0, 1) (they start at zero), norm gains
    ~ 1 + 0.3 N(0, 1) (they start at one). Returns the values as numpy arrays, keyed by name."""
    r, values = rng(seed + 1000), {}
    for name, p in module.named_parameters():
        if name.endswith((".bias", ".lora_B")) or name in ("bias", "lora_B"):
            values[name] = 0.3 * r.standard_normal(p.shape)
        elif p.ndim == 1:                                     # a norm's gain
            values[name] = 1.0 + 0.3 * r.standard_normal(p.shape)
        else:
            values[name] = r.standard_normal(p.shape) / np.sqrt(p.shape[-1])
    dtype = module.parameters()[0].dtype
    module.load_state_dict({k: tb.tensor(v, dtype=dtype) for k, v in values.items()})
    return values


def random_block(cfg, seed: int = 0, device: str = "cpu", dtype=F64) -> nn.TransformerBlock:
    """A block of layout `cfg` whose every parameter is random (`randomize`), built on the CPU and moved to
    `device`."""
    blk = block(cfg, seed, dtype)
    randomize(blk, seed)
    return blk.to(device)


def block_program(block, x):
    """The program tb.jit makes of block(x) and its backward from ones, compiled here on its own (not through
    the library's compiled.program_of, which the explorer uses): captured until it replays."""
    import tinygrad_block as tb

    def run(x):
        out = block(x)
        out.backward(tb.ones_like(out))
        return out
    f = tb.jit(run, modules=[block])
    while f.replays == 0:
        block.zero_grad()
        f(x.detach().requires_grad_())
    return f.program


# ---------------------------------------------------------------- the course and its exercises
def course_module():
    """lessons/course.py, loaded as the command line loads it (`cli.load_course`: by path, as the module `course`)."""
    from tinygrad_block.cli import load_course
    return load_course()


def solution(number: int, **replaced):
    """The reference solution of lesson `number` (lessons/solutions/NN.py), with some functions replaced by
    wrong ones."""
    module = course_module().load_solution(ROOT / "lessons" / "solutions" / f"{number:02d}.py", number)
    for name, function in replaced.items():
        setattr(module, name, function)
    return module


class Failures(Mapping):
    """{exercise name: what the checker says is wrong} for the exercises `module` fails, each check run when its
    exercise is first asked about: `failures(13, module)["mfu_needed"]` and `"embed" not in failures(4, module)`
    run that exercise's checker only (some checkers count whole models on the shape-only device: a test of one
    slip need not run them all), and iterating runs every one. A name the lesson has no exercise of is an error,
    not an exercise passed."""

    def __init__(self, number: int, module):
        self.number, self.module, self.seen = number, module, {}
        self.names = [name for name, _ in course_module().exercises(number).checks]

    def _why(self, name: str) -> str | None:
        if name not in self.seen:
            assert name in self.names, f"lesson {self.number} has no exercise {name!r}: {self.names}"
            self.seen |= dict(course_module().check(self.number, self.module, [name]))
        return self.seen[name]

    def __getitem__(self, name: str) -> str:
        why = self._why(name)
        if why is None:
            raise KeyError(f"{name} passed")
        return why

    def __iter__(self):
        return (name for name in self.names if self._why(name) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def failures(number: int, module) -> Failures:
    """What the checkers of lesson `number` say is wrong with `module` (`Failures`)."""
    return Failures(number, module)


# ---------------------------------------------------------------- the lessons, each run once per test run
# A lesson runs as a reader who wants a notebook runs it, `python -m tinygrad_block lesson NN --notebook --execute`:
# a Jupyter kernel started in lessons/ runs the cells of lessons/NN_*.py in order, the pictures land under
# lessons/out/NN/, and the executed notebook (written into a folder of the test run's) keeps each cell's output
# under it (tests/course/test_lessons.py says why this run, and not the script's, is the one kept). Every test
# that reads what a lesson printed, drew or showed asks `lesson_run(path)`.
# The command runs in the test's own process (`cli.main` with those arguments, what it prints and warns kept): a
# fresh interpreter for each of the 21 lessons would add its start and its imports (Jupyter's take two seconds)
# to every run and check nothing more; each lesson's kernel is a fresh process either way. The command run as a
# process of its own is tested once, on lesson 01 (tests/course/test_course.py).
# pytest-xdist's workers share no fixture, so the runs are kept as files in the test run's temporary folder, which
# the workers share, one folder per lesson named after a hash of its text, behind a lock: whichever worker first
# needs a lesson runs it, and the others wait for it and read its record.
@dataclass(frozen=True)
class LessonRun:
    """One run of a lesson through the command: its exit status, what the command printed, and the notebook."""
    returncode: int
    stdout: str
    stderr: str
    notebook: dict | None              # nbformat JSON with every cell's outputs; None when the run failed

    @property
    def code_cells(self) -> list[dict]:
        assert self.returncode == 0 and self.notebook is not None, self.stdout + self.stderr
        return [c for c in self.notebook["cells"] if c["cell_type"] == "code"]

    @property
    def printed(self) -> str:
        """What the lesson's cells printed, in order: what `python lessons/NN_*.py` prints."""
        return "".join(output_text(o) for c in self.code_cells for o in c["outputs"]
                       if o.get("output_type") == "stream" and o.get("name") == "stdout")


def output_text(output: dict) -> str:
    """A notebook output's text (nbformat keeps it as one string or as a list of lines)."""
    value = output.get("text", "")
    return value if isinstance(value, str) else "".join(value)


def run_lesson(path: Path, folder: Path) -> LessonRun:
    """Run the lesson at `path` as an executed notebook written into `folder`: the command, in this process, with
    what it printed and (as a process's stderr would show them) its warnings."""
    from tinygrad_block import cli
    printed, errors = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(errors), \
            warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        try:
            code = cli.main(["lesson", path.stem[:2], "--notebook", "--execute", "--out-dir", str(folder)])
        except SystemExit as stop:
            code = stop.code
    stderr = errors.getvalue() + "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno)
                                         for w in warned)
    written = folder / f"{path.stem}.ipynb"
    notebook = json.loads(written.read_text()) if code == 0 and written.is_file() else None
    return LessonRun(code, printed.getvalue(), stderr, notebook)


def kept_run(path: Path, runs: Path) -> LessonRun:
    """The run of the lesson at `path` kept under `runs`, made first if no worker has made it yet."""
    folder = runs / f"{path.stem}-{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}"
    record = folder / "run.json"
    with open(runs / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)                   # one worker runs the lesson; the others wait for it
        if not record.is_file():
            folder.mkdir(exist_ok=True)
            run = run_lesson(path, folder)
            partial = record.with_suffix(".partial")
            partial.write_text(json.dumps(run.__dict__))
            partial.rename(record)
    return LessonRun(**json.loads(record.read_text()))


@pytest.fixture(scope="session")
def lesson_run(tmp_path_factory, pytestconfig):
    """`lesson_run(path)`: the one run of the lesson at `path` in this test run (see the module's docstring)."""
    base = tmp_path_factory.getbasetemp()
    if hasattr(pytestconfig, "workerinput"):               # an xdist worker: its folder is one of the run's
        base = base.parent
    runs = base / "lesson-runs"
    runs.mkdir(exist_ok=True)
    seen: dict[Path, LessonRun] = {}

    def run(path: Path) -> LessonRun:
        if path not in seen:
            seen[path] = kept_run(path, runs)
        return seen[path]
    return run
