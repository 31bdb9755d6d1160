"""The course commands (lessons/course.py, loaded by path by the command line; lessons/exercises/): lessons found and
run, notebooks written and run where JupyterLab runs them, starters handed out, and each checker against its reference
solution (lessons/solutions/) and against typical wrong answers."""
import ast
import json
import os
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tinygrad_block import clone
from tinygrad_block.cli import main

from conftest import course_module, output_text, solution

course = course_module()
ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "lessons" / "solutions"
PACKAGE = ROOT / "tinygrad_block"


@pytest.mark.parametrize("path", sorted(SOLUTIONS.glob("[0-9][0-9].py")), ids=lambda p: p.stem)
def test_every_checker_accepts_its_reference_solution(path):
    number = int(path.stem)
    results = course.check(number, solution(number))           # run once: lesson 21's trains a model
    assert {name: why for name, why in results if why is not None} == {}
    assert [name for name, _ in results] == [name for name, _ in course.exercises(number).checks]


def test_every_lesson_with_exercises_has_a_reference_solution():
    numbers = sorted(int(p.stem) for p in (ROOT / "lessons" / "exercises").glob("[0-9][0-9].py"))
    assert numbers and all((SOLUTIONS / f"{n:02d}.py").is_file() for n in numbers)


def package_modules() -> dict[str, ast.Module]:
    """Every module of the package, parsed, by its path inside the package (`nn/block.py`)."""
    return {str(p.relative_to(PACKAGE)): ast.parse(p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))}


def path_parts(tree: ast.Module) -> set[str]:
    """The texts a module joins into paths: `x / "part"`, `Path("part")`, `x.joinpath("part")`, one folder each."""
    found = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div):
            found |= {x.value for x in (n.left, n.right) if isinstance(x, ast.Constant)}
        elif isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) in ("Path", "joinpath"):
            found |= {a.value for a in n.args if isinstance(a, ast.Constant)}
    return {part for text in found if isinstance(text, str) for part in text.split("/")}


def test_the_package_holds_no_course_code_and_names_the_lessons_folder_once():
    """The course (its code, exercises and site builder) lives in lessons/: no module of the package is course code,
    only clone.py names the lessons folder (a path part "lessons"), only the command line and the explorer's links
    ask it where that is, and no module imports `course`. No grader imports the course back."""
    modules = package_modules()
    assert not {"course.py", "curriculum.py"} & set(modules) and not (PACKAGE / "exercises").exists()
    naming = {name for name, tree in modules.items() if "lessons" in path_parts(tree)}
    assert naming == {"clone.py"}
    asking = {name for name, tree in modules.items() for n in ast.walk(tree)
              if isinstance(n, ast.ImportFrom) and (n.module == "clone" or "clone" in {a.name for a in n.names})}
    assert asking == {"cli.py", "explorer_page.py"}
    importing = {name for name, tree in modules.items() for n in ast.walk(tree)
                 if isinstance(n, ast.Import) and "course" in {a.name for a in n.names}
                 or isinstance(n, ast.ImportFrom) and not n.level and n.module == "course"}
    assert importing == set()
    assert clone.LESSONS == ROOT / "lessons" and Path(course.__file__) == clone.LESSONS / "course.py"
    for path in sorted((ROOT / "lessons" / "exercises").glob("*.py")):
        imported = {node.module for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ImportFrom)}
        assert not {m for m in imported if m and "course" in m}, f"{path.name} imports the course back"


@pytest.mark.parametrize("command", [["exercise", "05"], ["check", "05"], ["lesson", "05"], ["check", "--all"],
                                     ["site", "--out", "site"]])
def test_without_the_repository_the_course_says_where_it_lives(tmp_path, monkeypatch, capsys, command):
    monkeypatch.setattr(clone, "LESSONS", tmp_path / "lessons")            # the package installed on its own
    with pytest.raises(SystemExit) as stop:
        main(command)
    lines = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(lines) == 1
    assert "lives in the repository's lessons/ folder" in lines[0] and "Clone the repository" in lines[0]
    assert str(tmp_path / "lessons") in lines[0] and "the installed package does not hold it" in lines[0]


GRADED = sorted(int(p.stem) for p in (course.LESSONS / "exercises").glob("[0-9][0-9].py"))


def test_every_lesson_has_its_graded_exercises():
    assert GRADED == sorted(int(p.stem[:2]) for p in course.LESSONS.glob("[0-9][0-9]_*.py"))


@pytest.mark.parametrize("number", GRADED)
def test_each_starter_is_a_file_beside_its_grader_and_fails_every_check_as_not_written_yet(tmp_path, number):
    starter = course.LESSONS / "exercises" / "starters" / f"{number:02d}.py"
    path = course.write_starter(number, tmp_path / f"exercise_{number:02d}.py")
    assert path.read_text() == starter.read_text()
    results = course.check(number, course.load_solution(path, number))
    assert results and all(why == "not written yet (it still raises NotImplementedError)" for _, why in results)


# ---------------------------------------------------------------- the commands
def test_exercise_then_check_from_the_command_line(tmp_path, command_line):
    made = command_line.process("exercise", "1", cwd=tmp_path)
    assert made.returncode == 0 and (tmp_path / "exercise_01.py").is_file()
    printed = made.stdout.split("`")[1]                        # the check command, as the learner would paste it
    assert printed.startswith(f"{sys.executable} -m tinygrad_block check 01")   # this Python, not whatever is on PATH
    pasted = subprocess.run(printed, shell=True, cwd=tmp_path, capture_output=True, text=True)
    assert pasted.returncode == 1 and "exercises pass" in pasted.stdout
    spaced = command_line.process("exercise", "1", "--out", "my exercise.py", cwd=tmp_path).stdout.split("`")[1]
    pasted = subprocess.run(spaced, shell=True, cwd=tmp_path, capture_output=True, text=True)   # quoted for a shell
    assert pasted.returncode == 1 and "exercises pass" in pasted.stdout, pasted.stderr
    again = command_line.process("exercise", "01", cwd=tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr and "Traceback" not in again.stderr
    unfinished = command_line.process("check", "01", cwd=tmp_path)
    n = len(course.exercises(1).checks)
    assert unfinished.returncode == 1 and f"0 of {n} exercises pass" in unfinished.stdout
    (tmp_path / "mine.py").write_text((SOLUTIONS / "01.py").read_text())
    done = command_line.process("check", "1", "mine.py", cwd=tmp_path)
    assert done.returncode == 0 and f"{n} of {n} exercises pass" in done.stdout


@pytest.mark.parametrize("argv, fragments", [
    (["check", "1", "nope.py"], ["no file nope.py", "exercise 01"]),
    (["check", "42"], ["lesson 42 has no exercises yet", "01"]),
    (["lesson", "42"], ["there is no lesson 42", "01_tensors_and_the_graph"]),
    (["exercise", "x1"], ["a lesson number is 1 to 99"]),
    (["lesson", "1", "--execute"], ["--execute and --out-dir go with --notebook", "lesson 01 --notebook --execute"]),
    (["check", "2", "notes.txt"], ["notes.txt is not a Python file", "exercise_02.py"]),
    (["exercise", "1", "--out", "no_such_folder/ex.py"], ["cannot write no_such_folder/ex.py", "No such file"]),
    (["exercise", "1", "--out", ".", "--force"], ["is a folder", "exercise_01.py"]),
])
def test_course_mistakes_are_one_line(tmp_path, argv, fragments, command_line):
    (tmp_path / "notes.txt").write_text("def softplus(x):\n    return x\n")
    result = command_line.process(*argv, cwd=tmp_path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert all(f in lines[-1] for f in fragments), result.stderr


def test_a_solution_that_does_not_import_is_one_line(tmp_path, command_line):
    (tmp_path / "broken.py").write_text("def softplus(x):\n    return (\n")
    result = command_line.process("check", "1", "broken.py", cwd=tmp_path)
    assert result.returncode == 2 and "broken.py does not run: SyntaxError" in result.stderr


STAND_IN = """# %%
import sys
import course
print(__name__, __file__, sys.argv, sys.path[0], course.__file__)
assert {ok}, "the lesson's own check"
print("after the check")
"""


@pytest.mark.parametrize("ok", [True, False])
def test_lesson_runs_the_script_as_python_would(tmp_path, command_line, ok):
    """`lesson NN` prints, says and exits what `python lessons/NN_*.py` does: the same module name, file, argv
    and import folder (where `import course` finds the course beside the lesson), a failing check's traceback and
    status 1. Shown on a lesson of its own, in a course folder of its own that the command line is pointed at (the
    course's lessons run once each, in test_lessons.py)."""
    lessons = tmp_path / "lessons"
    lessons.mkdir()
    (lessons / "course.py").write_text((ROOT / "lessons" / "course.py").read_text())
    script = lessons / "01_stand_in.py"
    script.write_text(STAND_IN.format(ok=ok))
    python = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path)
    prelude = f"from pathlib import Path\nfrom tinygrad_block import clone\nclone.LESSONS = Path({str(lessons)!r})"
    lesson = command_line.process("lesson", "1", cwd=tmp_path, prelude=prelude)
    assert lesson.returncode == python.returncode == (0 if ok else 1), lesson.stderr
    assert lesson.stdout == python.stdout and python.stdout.startswith(f"__main__ {script} ")
    assert python.stdout.splitlines()[0].endswith(f" {lessons} {lessons / 'course.py'}")
    assert ("after the check" in lesson.stdout) == ok
    assert ("AssertionError: the lesson's own check" in lesson.stderr) == (not ok), lesson.stderr


def test_lesson_notebook_holds_the_scripts_cells(tmp_path, capsys):
    assert main(["lesson", "1", "--notebook", "--out-dir", str(tmp_path)]) == 0
    path = tmp_path / "01_tensors_and_the_graph.ipynb"
    notebook = json.loads(path.read_text())
    script = (ROOT / "lessons" / "01_tensors_and_the_graph.py").read_text()
    kinds = [c["cell_type"] for c in notebook["cells"]]
    assert kinds.count("code") == script.count("\n# %%\n") + script.startswith("# %%\n")
    assert kinds.count("markdown") == script.count("# %% [markdown]")
    printed = capsys.readouterr().out
    assert f"wrote {path}" in printed


def a_course_of(folder: Path, monkeypatch, *names: str) -> Path:
    """folder/lessons/, a course of these lessons and the course's code, copied; the command line pointed at it (as
    at a clone's lessons/) for the rest of the test."""
    lessons = folder / "lessons"
    lessons.mkdir()
    for name in ("course.py", *names):
        (lessons / name).write_text((ROOT / "lessons" / name).read_text())
    monkeypatch.setattr(clone, "LESSONS", lessons)
    monkeypatch.delitem(sys.modules, "course", raising=False)      # loaded from the copy; the course's again after
    return lessons


def test_the_notebook_written_beside_its_lesson_runs_where_jupyterlab_starts_its_kernel(tmp_path, monkeypatch):
    """JupyterLab starts a notebook's kernel in the notebook's own folder. The notebook `lesson 01 --notebook`
    writes lies beside its lesson, so run from its own folder (nbclient's working folder, as JupyterLab's) its
    `import course` finds the course, and the pictures land in the course's out/01/, as the script's do."""
    import nbclient
    import nbformat
    lessons = a_course_of(tmp_path, monkeypatch, "01_tensors_and_the_graph.py")
    assert main(["lesson", "1", "--notebook"]) == 0
    path = lessons / "01_tensors_and_the_graph.ipynb"
    notebook = nbformat.read(path, as_version=4)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    outputs = [output_text(o) for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    assert any("dy/dx = 7" in text for text in outputs)
    pictures = [line.removeprefix("picture: ") for text in outputs for line in text.splitlines()
                if line.startswith("picture: ")]
    assert pictures and all((tmp_path / p).is_file() and Path(p).parent == Path("lessons/out/01") for p in pictures)


def jupyter_lab_get(command: list[str], cwd: Path, paths: list[str]) -> list[tuple[int, dict | None]]:
    """Run `command` (a printed `jupyter lab ...`) in `cwd` with no browser, a free port and a token added, and GET
    api/contents/PATH for each of `paths` once it answers: (HTTP status, the JSON served or None) for each."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    as_root = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    server = subprocess.Popen(command + as_root + ["--no-browser", f"--port={port}", "--IdentityProvider.token=t"],
                              cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def get(path: str) -> tuple[int, dict | None]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents/{path}?token=t", timeout=5) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as e:
            return e.code, None
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token=t", timeout=2).close()
                break
            except (urllib.error.URLError, OSError):
                assert server.poll() is None, "jupyter lab stopped"
                time.sleep(0.1)
        else:
            raise AssertionError("jupyter lab did not answer within a minute")
        return [get(path) for path in paths]
    finally:
        server.terminate()
        server.wait(timeout=30)


def cells_of(path: Path) -> list[str]:
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in json.loads(path.read_text())["cells"]]


AS_ROOT = " (as root, JupyterLab also wants --allow-root)"


@pytest.mark.slow
@pytest.mark.parametrize("where", ["lessons", "out-dir"])
def test_lesson_notebook_says_how_to_open_it_and_that_command_serves_it(tmp_path, monkeypatch, command_line, where):
    """The printed command is this environment's JupyterLab on the notebook; run as printed (with no browser, a
    port and a token added), the server hands out the notebook the lesson wrote. Written beside its lesson (the
    default), JupyterLab is rooted at the lessons folder: the other lessons are served too, the command's paths
    typed relative to the folder it was printed in. With --out-dir elsewhere it is rooted at that folder."""
    pytest.importorskip("jupyterlab", reason="JupyterLab is missing: pip install -e '.[notebook]'")
    lessons = a_course_of(tmp_path, monkeypatch, "01_tensors_and_the_graph.py", "02_backpropagation.py")
    monkeypatch.chdir(tmp_path)
    elsewhere = ["--out-dir", tmp_path / "notes"] if where == "out-dir" else []
    out = command_line.out("lesson", "1", "--notebook", *elsewhere)
    path = (tmp_path / "notes" if elsewhere else lessons) / "01_tensors_and_the_graph.ipynb"
    opening = out.splitlines()[1].strip()
    assert opening.startswith("open it with: ") and opening.endswith(AS_ROOT)
    command = shlex.split(opening.removeprefix("open it with: ").removesuffix(AS_ROOT))
    assert Path(command[0]).parent == Path(sys.executable).parent and command[1] == "lab"
    if where == "lessons":
        assert command[2:] == ["--ServerApp.root_dir=lessons", "lessons/01_tensors_and_the_graph.ipynb"]
        paths = ["01_tensors_and_the_graph.ipynb", "02_backpropagation.py"]
    else:
        assert command[2:] == ["--ServerApp.root_dir=notes", "notes/01_tensors_and_the_graph.ipynb"]
        paths = ["01_tensors_and_the_graph.ipynb"]
    served = jupyter_lab_get(command, tmp_path, paths)
    assert [status for status, _ in served] == [200] * len(paths)
    notebook = served[0][1]
    assert notebook["type"] == "notebook" and notebook["name"] == path.name
    assert [c["source"] for c in notebook["content"]["cells"]] == cells_of(path)
    if where == "lessons":                                 # another lesson, opened as a notebook (jupytext's)
        import jupytext
        other = served[1][1]
        assert other["type"] == "notebook" and [c["source"] for c in other["content"]["cells"]] == \
            [c.source for c in jupytext.read(lessons / "02_backpropagation.py").cells]


def test_lesson_notebook_without_jupyterlab_says_what_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(course, "notebook_viewer", lambda path: None)
    assert main(["lesson", "1", "--notebook", "--out-dir", str(tmp_path)]) == 0
    assert "to open it, install JupyterLab, the 'notebook' extra: pip install -e '.[notebook]'" in \
        capsys.readouterr().out


def test_lesson_notebook_executed_from_the_command_line_holds_outputs_and_pictures(tmp_path, lesson_run):
    """`python -m tinygrad_block lesson 01 --notebook --execute`, a process of its own run in a folder of its own
    (the lessons' runs in tests/conftest.py call the same command in the test's process); after lesson 01's own
    run, so that no other run writes lessons/out/01/ meanwhile."""
    lesson_run(course.lesson_path(1))
    result = subprocess.run([sys.executable, "-m", "tinygrad_block", "lesson", "01", "--notebook", "--execute",
                             "--out-dir", str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0 and "its cells have run" in result.stdout, result.stdout + result.stderr
    assert result.stderr == "", "no kernel chatter on the terminal"
    notebook = json.loads((tmp_path / "01_tensors_and_the_graph.ipynb").read_text())
    outputs = [o for c in notebook["cells"] if c["cell_type"] == "code" for o in c["outputs"]]
    assert any("dy/dx = 7" in output_text(o) for o in outputs)
    assert any("image/png" in o.get("data", {}) for o in outputs), "the graph drawing is shown inline"


def test_a_lesson_cell_that_fails_as_a_notebook_is_one_line_naming_it(tmp_path, monkeypatch):
    (tmp_path / "07_broken.py").write_text("# %%\nx = 1\n\n# %%\nassert x == 2, 'x is not 2'\n")
    monkeypatch.setattr(course, "LESSONS", tmp_path)
    with pytest.raises(course.CourseError, match=r"^07_broken.py failed as a notebook: AssertionError: x is not 2$"):
        course.write_notebook(7, tmp_path, execute=True)


def test_a_printed_command_runs_from_where_it_was_printed(command_line):
    """From the repository root, the commands printed name this Python by a path that works from there (a
    virtual environment below the root by its relative path), so pasting them needs no activated environment."""
    result = command_line.process("lesson", "1", "--execute")              # cwd: the repository root
    printed = result.stderr.strip().split(": ")[-1]                         # ... --notebook: <command>
    python = Path(shlex.split(printed.split(" -m tinygrad_block ")[0])[0])
    assert python == (Path(sys.executable).relative_to(ROOT) if Path(sys.executable).is_relative_to(ROOT)
                      else Path(sys.executable))
    helped = subprocess.run(f"{shlex.quote(str(python))} -m tinygrad_block lesson --help", shell=True, cwd=ROOT,
                            capture_output=True, text=True)
    assert helped.returncode == 0 and "lesson" in helped.stdout
