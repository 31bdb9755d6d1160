"""What the command line says where an optional extra is missing (the package is not on an index: from a clone it
is `pip install -e '.[EXTRA]'`), `--version`, and the tour's last line with and without the repository's lessons.

Each missing extra is a real child process whose packages are hidden by a sitecustomize.py on its PYTHONPATH (so a
lesson's own child process, two levels down, misses them too): status 2, one line on stderr, no traceback."""
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import tinygrad_block as tb
from conftest import ROOT, one_line_error

HIDE = '''import sys

class Hidden:
    """Import nothing named in HIDDEN, as if it were not installed."""
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

'''


def without(tmp_path: Path, *packages: str) -> dict:
    """The environment of a child process in which `packages` cannot be imported."""
    folder = tmp_path / "hide"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(f"{HIDE}HIDDEN = {set(packages)!r}\nsys.meta_path.insert(0, Hidden())\n")
    return os.environ | {"PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}


def test_no_message_names_a_package_that_no_index_has():
    """`pip install 'tinygrad_block[viz]'` fails (the package is not published): every hint says what works."""
    wrong = re.compile(r"pip install '?tinygrad_block\[")
    files = [*(ROOT / "tinygrad_block").rglob("*.py"), *(ROOT / "lessons").rglob("*.py"),
             *(ROOT / "tools").glob("*.py")]
    assert len(files) > 80
    assert [str(f) for f in files if wrong.search(f.read_text())] == []


@pytest.mark.parametrize("lesson, needs", [("05", "matplotlib"), ("16", "matplotlib")])
def test_a_lesson_without_the_viz_extra_is_one_line(tmp_path, command_line, lesson, needs):
    """05 draws through pictures.figure, 16 imports matplotlib itself: a ModuleNotFoundError each."""
    result = command_line.process("lesson", lesson, cwd=tmp_path, env=without(tmp_path, "matplotlib"))
    one_line_error(result, f"lesson: error: {lesson}_", needs, "pip install -e '.[viz]'")


def test_train_pictures_without_matplotlib_is_one_line(tmp_path, command_line):
    result = command_line.process("train", "induction", "--steps", "1", "--out", tmp_path / "run", cwd=tmp_path,
                                  env=without(tmp_path, "matplotlib"))
    one_line_error(result, "train: error:", "matplotlib", "pip install -e '.[viz]'", "--no-plots")
    assert not (tmp_path / "run" / "model.safetensors").exists()


def test_graph_svg_without_graphviz_is_one_line(tmp_path, command_line):
    result = command_line.process("graph", "--preset", "tiny", "--out", tmp_path / "x.svg", cwd=tmp_path,
                                  env=without(tmp_path, "graphviz"))
    one_line_error(result, "graph: error:", "graphviz", "pip install -e '.[viz]'")
    assert not (tmp_path / "x.svg").exists()


@pytest.mark.parametrize("hidden", ["torch", "transformers"])
def test_make_llama_folder_without_the_ref_extra_is_one_line(tmp_path, hidden):
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "make_llama_folder.py"), "--out", tmp_path / "f"],
                            capture_output=True, text=True, cwd=tmp_path, env=without(tmp_path, hidden), timeout=120)
    line = one_line_error(result, "make_llama_folder.py: error:", "'.[ref]'", "torch==2.13.0")
    assert f"needs {hidden}" in line and not (tmp_path / "f").exists()


def test_make_llama_folder_help_holds_its_whole_first_paragraph():
    tool = ROOT / "tools" / "make_llama_folder.py"
    first = tool.read_text().split('"""')[1].split("\n\n")[0]
    result = subprocess.run([sys.executable, str(tool), "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    squeezed = "".join(result.stdout.split())                        # argparse wraps the lines its own way
    assert "".join(first.split()) in squeezed and first.rstrip().endswith("`write_llama_folder(steps=0)`.")
    assert all(f"--{o}" in result.stdout for o in ("out", "steps", "seed"))


def test_version_is_the_projects(command_line, tmp_path):
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    result = command_line.process("--version", cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (0, f"tinygrad_block {version}\n", "")
    assert tb.__version__ == version


def test_the_tour_ends_at_the_first_lesson_where_the_lessons_are(tmp_path, command_line, monkeypatch):
    from tinygrad_block import clone, shell
    last = command_line.out("tour", "--out-dir", tmp_path / "a").splitlines()[-1]
    assert shell.command("lesson", "01") in last and "lessons/README.md" in last
    monkeypatch.setattr(clone, "LESSONS", tmp_path / "no-lessons")   # installed from a wheel: no lessons/ beside it
    last = command_line.out("tour", "--out-dir", tmp_path / "b").splitlines()[-1]
    assert "repository's lessons/ folder" in last and "installed package does not hold them" in last
    assert "-m tinygrad_block lesson" not in last and "pip install -e '.[viz,notebook]'" in last


# ---------------------------------------------------------------- generate --top-p
@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    from tinygrad_block import nn
    folder = tmp_path_factory.mktemp("tiny")
    nn.LM(nn.preset("tiny"), generator=tb.Generator(0)).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("extra", [[], ["--eager"], ["--no-cache"]])
@pytest.mark.parametrize("top_k, top_p", [(None, 0.5), (30, 0.9)])
def test_generate_top_p_writes_what_lm_generate_writes(tiny_checkpoint, extra, top_k, top_p, command_line):
    from tinygrad_block import nn
    argv = ["generate", tiny_checkpoint, "--ids", "5 17 3", "--max-new-tokens", "10", "--temperature", "1.1",
            "--seed", "4", "--top-p", str(top_p), *(["--top-k", str(top_k)] if top_k else []), *extra]
    data = command_line.json(*argv)
    model = nn.LM.from_pretrained(tiny_checkpoint)
    ids = tb.tensor([[5, 17, 3]])
    want = model.generate(ids, 10, temperature=1.1, top_k=top_k, top_p=top_p, generator=tb.Generator(4), jit=False)
    plain = model.generate(ids, 10, temperature=1.1, top_k=top_k, generator=tb.Generator(4), jit=False)
    assert data["ids"] == want.numpy()[0].tolist() != plain.numpy()[0].tolist()
    assert (data["top_p"], data["top_k"]) == (top_p, top_k)


@pytest.mark.parametrize("value", ["0", "1.5", "-0.2", "nan", "half"])
def test_generate_refuses_a_top_p_outside_0_1_in_one_line(tiny_checkpoint, value, command_line):
    err = command_line.mistake("generate", tiny_checkpoint, "--ids", "5", "--temperature", "1", "--top-p", value)
    assert "--top-p" in err and "(0, 1]" in err and repr(value) in err and len(err.strip().splitlines()) == 1
