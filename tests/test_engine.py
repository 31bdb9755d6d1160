"""The engine's shape: one backend seam, a closed set of primitives (forward, backward, FLOP rule each),
the line budget, and the command line."""
import ast
import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CUDA_MISSING, needs_gpu

import tinygrad_block as tb
from tinygrad_block import function as F
from tinygrad_block import nn

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tinygrad_block"
# the only files that may touch numpy: the backends (the seam, the GPU's, the strict arrays) and host-side
# checking (finite differences, the tour's comparison tables)
NUMPY_ALLOWED = {"backend.py", "device.py", "cuda.py", "strict.py", "gradcheck.py", "tour.py"}
PRIMITIVES = {"neg", "exp", "log", "sqrt", "reciprocal", "sin", "cos", "erf", "pow", "cast", "transfer", "add",
              "sub", "mul", "div", "maximum", "compare", "where", "sum", "max", "reshape", "permute", "expand", "slice",
              "pad", "concat", "gather", "scatteradd", "matmul"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_array_work_goes_through_the_backend_seam(path):
    if str(path.relative_to(PACKAGE)) in NUMPY_ALLOWED:
        return
    assert not {"numpy", "cupy"} & imported_modules(path), f"{path.name} imports numpy/cupy directly"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_reference_oracles_are_never_imported_by_the_package(path):
    assert not {"torch", "transformers", "os"} & imported_modules(path)


def all_primitives():
    found, todo = [], [F.Function]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if "forward" in vars(sub):
                found.append(sub)
    return [c for c in found if c.__module__ == F.__name__]


def test_the_primitive_set_is_closed_and_documented():
    assert {c.name for c in all_primitives()} == PRIMITIVES


@pytest.mark.parametrize("cls", all_primitives(), ids=lambda c: c.name)
def test_each_primitive_declares_forward_backward_and_flops_together(cls):
    assert cls.__doc__ and len(cls.__doc__.strip()) > 10, "a one-line math/shape docstring"
    assert "forward" in vars(cls)
    assert cls.name == "compare" or hasattr(cls, "backward"), "every float primitive has a backward"
    flops = cls.flops
    assert inspect.signature(flops).parameters, "a FLOP rule taking the output and input shapes"


def test_engine_core_stays_within_its_line_budget():
    spec = importlib.util.spec_from_file_location("line_budget", ROOT / "tools" / "line_budget.py")
    budget = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(budget)
    counts = budget.count()
    assert set(counts) == {"tensor.py", "function.py", "backend.py", "autograd.py", "trace.py", "index.py", "device.py"}
    assert 500 < sum(counts.values()) <= budget.BUDGET == 1500, counts


def test_line_counter_ignores_comments_blanks_and_docstrings():
    spec = importlib.util.spec_from_file_location("line_budget", ROOT / "tools" / "line_budget.py")
    budget = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(budget)
    source = '"""module doc"""\n\n# comment\ndef f(x):\n    """doc\n    more doc"""\n    return (x +\n            1)\n'
    assert budget.code_lines(source) == 3  # def, return, continuation


def test_observers_see_every_primitive_forward_and_backward():
    seen = []
    x = tb.tensor([1.0, 2.0], requires_grad=True)
    with tb.observe(lambda e: seen.append((e.op.name, e.phase, e.output.shape))):
        (x.exp() * x).sum().backward()
    forward = [s for s in seen if s[1] == "forward"]
    backward = [s for s in seen if s[1] == "backward"]
    assert [name for name, _, _ in forward] == ["exp", "mul", "sum"]
    # sum -> reshape (to keepdims) and expand; mul -> one mul per input; exp -> mul by its output;
    # x is used twice -> add
    assert sorted(name for name, _, _ in backward) == ["add", "expand", "mul", "mul", "mul", "reshape"]
    assert [shape for name, _, shape in backward if name != "reshape"] == [(2,)] * 5


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "tinygrad_block", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_tour_runs_and_checks_itself(tmp_path):
    result = run_cli("tour", "--out-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "autograd, hand-derived and finite differences agree" in result.stdout
    assert "ffn.down_proj.weight" in result.stdout and "backward:" in result.stdout
    assert "counted FLOPs equal the closed forms (difference 0)" in result.stdout
    for name in ("tiny_block_forward_depth2.svg", "tiny_block_backward.svg"):
        assert f"{tmp_path / name}" in result.stdout and (tmp_path / name).read_bytes().startswith(b"<?xml")


def test_tour_numbers(tmp_path, device):
    from tinygrad_block import accounting
    from tinygrad_block.tour import run
    lines = []
    numbers = run(out=lines.append, out_dir=tmp_path, device=device)
    assert lines[0].endswith(f"float64, on {tb.get_backend(device).name}")
    cfg, fc = nn.preset("tiny"), numbers["flops"]
    assert fc.total("forward", scope="block") == accounting.block_forward_flops(cfg, 8, 2, matmul_only=False)
    assert fc.total("backward", scope="block", matmul_only=True) == 2 * fc.total("forward", matmul_only=True)
    assert f"{fc.total('forward', scope='block'):,}" in "\n".join(lines)
    assert numbers["ok"] and numbers["worst"]["manual"] < 1e-13 and numbers["worst"]["fd"] < 1e-10
    # q, k, v, o projections, scores, weights @ v, gate, up, down: 9 matmuls; each needs 2 in backward
    assert numbers["calls"]["forward"]["matmul"] == 9
    assert numbers["calls"]["backward"]["matmul"] == 18
    assert len([line for line in lines if "proj.weight" in line]) == 7


@pytest.mark.parametrize("device, fragments", [("tpu", ["unknown device 'tpu'", "'cuda:N'"]),
                                               ("meta", ["'meta' holds shapes but no values"]),
                                               ("cuda:7", ["'cuda:7'"])])
def test_tour_on_a_device_it_cannot_use_says_why_in_one_line(device, fragments):
    result = run_cli("tour", "--device", device)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("python -m tinygrad_block tour: error: argument --device:")
    assert all(f in error for f in fragments), error
    if device == "cuda:7" and CUDA_MISSING:
        assert CUDA_MISSING.replace("cuda:0", "cuda:7").split(";")[0] in error


def test_cli_without_a_command_prints_help_and_fails():
    result = run_cli()
    assert result.returncode == 2 and "tour" in result.stdout
    assert run_cli("--help").returncode == 0
    assert run_cli("nonsense").returncode == 2


def readme_python_blocks(gpu: bool) -> list[str]:
    """The README's python blocks, in order: those that run on a GPU (device="cuda"), or the others."""
    import re
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    return [code for code in blocks if ('device="cuda"' in code) == gpu]


def run_and_check_prints(blocks: list[str], capsys) -> None:
    """Run the blocks in order, in one namespace; each print's output is what its comment starts with."""
    import re
    namespace = {}
    for code in blocks:
        exec(compile(code, "README.md", "exec"), namespace)
        printed = capsys.readouterr().out.splitlines()
        claimed = re.findall(r"print\(.*?\)\s*# (.*)", code)
        assert claimed and len(printed) == len(claimed)
        for out, claim in zip(printed, claimed):
            assert claim.startswith(out), (out, claim)


def test_readme_examples_run_and_print_what_they_claim(capsys):
    blocks = readme_python_blocks(gpu=False)
    assert len(blocks) >= 2
    run_and_check_prints(blocks, capsys)


@needs_gpu
def test_readme_gpu_example_runs_and_prints_what_it_claims(capsys):
    blocks = readme_python_blocks(gpu=True)
    assert len(blocks) == 1
    run_and_check_prints(blocks, capsys)


def test_ruff_is_clean():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "."], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci.endswith("python -m pytest") and f"\n{ci}\n" in readme
