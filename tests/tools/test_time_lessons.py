"""tools/time_lessons.py runs a lesson both ways a reader does, as `python lessons/NN_slug.py` and as an executed
notebook (`lesson NN --notebook --execute`), and prints the seconds each took. Shown on lesson 01, after its own
test run (tests/conftest.py), so that no other run writes lessons/out/01/ meanwhile."""
import re
import subprocess
import sys

from conftest import ROOT


def test_time_lessons_runs_a_lesson_as_a_script_and_as_a_notebook(tmp_path, lesson_run):
    lesson_run(ROOT / "lessons" / "01_tensors_and_the_graph.py")
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "time_lessons.py"), "--notebook", "--lessons", "1"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and re.fullmatch(r"01_tensors_and_the_graph +script +\d+\.\d\d s  notebook +\d+\.\d\d s",
                                            lines[0]), lines
    script, notebook = (float(x) for x in re.findall(r"(\d+\.\d\d) s", lines[0]))
    assert lines[1].startswith("all lessons") and f"script {script:6.2f} s  notebook {notebook:6.2f} s" in lines[1]
    missing = subprocess.run([sys.executable, str(ROOT / "tools" / "time_lessons.py"), "--lessons", "42"],
                             capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert missing.returncode == 2 and "--lessons: no lesson 42" in missing.stderr
