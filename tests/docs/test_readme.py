"""The README: every python block runs on its own (own imports, own generator, a fresh namespace) and prints
what its comments claim; CI runs exactly the test command the README gives."""
from pathlib import Path

from conftest import needs_gpu
from doc_examples import Block, claims, python_blocks, run_and_check

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def readme_python_blocks(gpu: bool) -> list[Block]:
    """The README's python blocks, in order: those that run on a GPU (device="cuda"), or the others."""
    return [b for b in python_blocks(README) if ('device="cuda"' in b.text) == gpu]


def test_readme_examples_each_run_alone_and_print_what_they_claim(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = readme_python_blocks(gpu=False)
    assert len(blocks) >= 4
    for block in blocks:
        assert claims(block), f"README.md:{block.line}: an example that shows nothing it prints"
        run_and_check(block, {}, str(README))


@needs_gpu
def test_readme_gpu_example_runs_alone_and_prints_what_it_claims():
    blocks = readme_python_blocks(gpu=True)
    assert len(blocks) == 1
    run_and_check(blocks[0], {}, str(README))


def test_ci_runs_exactly_the_readme_test_command():
    readme = README.read_text()
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci.endswith("python -m pytest") and f"\n{ci}\n" in readme
