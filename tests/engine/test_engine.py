"""The engine's shape: one backend seam, a closed set of primitives (forward, backward, FLOP rule each),
the line budget, and the command line."""
import ast
import importlib.util
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CUDA_MISSING

import tinygrad_block as tb
from tinygrad_block import function as F
from tinygrad_block import nn

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tinygrad_block"
# the only files that may touch numpy: the backends (the seam, the GPU's, the strict arrays) and host-side
# checking (finite differences, the tour's comparison tables)
# (checkpoint files are read and written as host arrays: nn/pretrained.py, safetensors_file.py)
NUMPY_ALLOWED = {"backend.py", "dtypes.py", "generator.py", "device.py", "cuda.py", "strict.py", "cpu_kernels.py",
                 "cuda_kernels.py", "gradcheck.py", "tour.py", "nn/pretrained.py",
                 "safetensors_file.py"}
PRIMITIVES = {"neg", "exp", "log", "sqrt", "reciprocal", "sin", "cos", "erf", "pow", "cast", "transfer", "add",
              "sub", "mul", "div", "maximum", "compare", "where", "sum", "max", "kthlargest", "reshape", "permute",
              "expand", "slice", "pad", "concat", "gather", "setrows", "scatteradd", "matmul"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", [p for p in sorted(PACKAGE.rglob("*.py")) if str(p.relative_to(PACKAGE))
                                  not in NUMPY_ALLOWED], ids=lambda p: str(p.relative_to(PACKAGE)))
def test_array_work_goes_through_the_backend_seam(path):
    """Every file but the backends and the host-side checks (NUMPY_ALLOWED) works on Tensors, never arrays."""
    assert not {"numpy", "cupy"} & imported_modules(path), f"{path.name} imports numpy/cupy directly"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_reference_oracles_are_never_imported_by_the_package(path):
    """No oracle inside the engine, and no environment variables: `os` only in files.py, the one room that talks
    to the system's files (fsync, atomic rename, a folder's lock), and no os.environ or getenv even there."""
    banned = {"torch", "transformers"} | ({"os"} if path.relative_to(PACKAGE) != Path("files.py") else set())
    assert not banned & imported_modules(path)
    assert not re.search(r"\benviron\b|\bgetenv\b", path.read_text())


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


# movement and conversion: they copy or re-view values and compute nothing, so they cost 0 FLOPs
ZERO_FLOP = {"cast", "transfer", "reshape", "permute", "expand", "slice", "pad", "concat", "gather", "setrows"}
ALIASES = {"permute", "expand", "slice"}        # a view of the input's memory on every device
MAY_ALIAS = ALIASES | {"reshape"}               # a view of a contiguous input, a copy of a transposed one


def flop_rule(cls) -> str | None:
    """Where `cls` gets its FLOP rule: its own `flops`, a shared rule (Elementwise, Reduce), or Movement's 0
    (the zero-FLOP ops above); None when it has none (it would inherit Function's 0 silently)."""
    if "flops" in vars(cls):
        return "own"
    if issubclass(cls, (F.Elementwise, F.Reduce)):
        return "shared"
    return "zero" if issubclass(cls, F.Movement) else None


@pytest.mark.parametrize("cls", all_primitives(), ids=lambda c: c.name)
def test_each_primitive_declares_forward_backward_and_flops_together(cls):
    assert cls.__doc__ and len(cls.__doc__.strip()) > 10, "a one-line math/shape docstring"
    assert "forward" in vars(cls)
    assert cls.name == "compare" or hasattr(cls, "backward"), "every float primitive has a backward"
    rule = flop_rule(cls)
    assert rule is not None, f"{cls.name}: no FLOP rule (override flops, or derive it from Movement)"
    assert (rule == "zero") == (cls.name in ZERO_FLOP), f"{cls.name}: listed as zero-FLOP but has a rule"
    params = inspect.signature(cls.flops).parameters
    assert "out_shape" in params, "a FLOP rule taking the output and input shapes"
    n_inputs = 1 if any(p.kind is p.VAR_POSITIONAL for p in params.values()) else len(params) - 2
    flops = cls.flops(None, (2, 1), *[(2, 3)] * n_inputs)      # self unused; a reduction-like shape pair
    assert (flops == 0) == (rule == "zero"), f"{cls.name}: a {rule} rule gives {flops} FLOPs"


def test_movement_primitives_say_so_on_the_class():
    movement = {c.name for c in all_primitives() if issubclass(c, F.Movement)}
    assert movement == ZERO_FLOP
    assert {c.name for c in all_primitives() if issubclass(c, F.Movement) and c.aliases} == ALIASES
    assert {c.name for c in all_primitives() if issubclass(c, F.Movement) and c.may_alias} == MAY_ALIAS


def test_a_primitive_is_found_by_its_name():
    assert {name: F.primitive(name) for name in PRIMITIVES} == {c.name: c for c in all_primitives()}
    assert F.primitive("reshape") is F.Reshape and F.primitive("slice").aliases
    for other in ("attn", "input", "const", "movement", "elementwise", "tiledattention", "∂ output"):
        assert F.primitive(other) is None, other


def test_engine_core_stays_within_its_line_budget():
    spec = importlib.util.spec_from_file_location("line_budget", ROOT / "tools" / "line_budget.py")
    budget = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(budget)
    counts = budget.count()
    assert set(counts) == {"tensor.py", "function.py", "backend.py", "dtypes.py", "generator.py", "autograd.py",
                           "trace.py", "index.py", "device.py", "cuda.py", "strict.py"}
    assert 500 < sum(counts.values()) <= budget.BUDGET == 1705, counts


def test_line_counter_ignores_comments_blanks_and_docstrings():
    spec = importlib.util.spec_from_file_location("line_budget", ROOT / "tools" / "line_budget.py")
    budget = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(budget)
    source = '"""module doc"""\n\n# comment\ndef f(x):\n    """doc\n    more doc"""\n    return (x +\n            1)\n'
    assert budget.code_lines(source) == 3  # def, return, continuation


def test_tour_runs_and_checks_itself(tmp_path, command_line):
    result = command_line.process("tour", "--out-dir", str(tmp_path))
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
def test_tour_on_a_device_it_cannot_use_says_why_in_one_line(device, fragments, command_line):
    result = command_line.process("tour", "--device", device)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("python -m tinygrad_block tour: error: argument --device:")
    assert all(f in error for f in fragments), error
    if device == "cuda:7" and CUDA_MISSING:
        assert CUDA_MISSING.replace("cuda:0", "cuda:7").split(";")[0] in error


def test_cli_without_a_command_prints_help_and_fails(command_line):
    result = command_line.process()
    assert result.returncode == 2 and "tour" in result.stdout
    assert command_line.process("--help").returncode == 0
    assert command_line.process("nonsense").returncode == 2


def test_ruff_is_clean():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "."], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout
