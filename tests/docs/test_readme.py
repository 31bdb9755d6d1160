"""The README: every python block runs on its own (own imports, own generator, a fresh namespace) and prints
what its comments claim; CI runs exactly the test command the README gives."""
import re
from pathlib import Path

from conftest import needs_gpu

ROOT = Path(__file__).resolve().parents[2]


def readme_python_blocks(gpu: bool) -> list[str]:
    """The README's python blocks, in order: those that run on a GPU (device="cuda"), or the others."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    return [code for code in blocks if ('device="cuda"' in code) == gpu]


def run_and_check_prints(code: str, capsys) -> None:
    """Run one block in a fresh namespace; each print's output is what its comment starts with."""
    exec(compile(code, "README.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    claimed = re.findall(r"print\(.*?\)\s*# (.*)", code)
    assert claimed and len(printed) == len(claimed), (printed, claimed)
    for out, claim in zip(printed, claimed):
        assert claim.startswith(out), (out, claim)


def test_readme_examples_each_run_alone_and_print_what_they_claim(capsys):
    blocks = readme_python_blocks(gpu=False)
    assert len(blocks) >= 4
    for code in blocks:
        run_and_check_prints(code, capsys)


@needs_gpu
def test_readme_gpu_example_runs_alone_and_prints_what_it_claims(capsys):
    blocks = readme_python_blocks(gpu=True)
    assert len(blocks) == 1
    run_and_check_prints(blocks[0], capsys)


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci.endswith("python -m pytest") and f"\n{ci}\n" in readme
