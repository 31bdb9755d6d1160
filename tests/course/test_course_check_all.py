"""`check --all`: the learner's progress through the course, run as a learner runs it, in a folder of their own
where `exercise NN` wrote some starters: one line a lesson (how many exercises pass, why a file does not run, or
not started), then the total; each lesson's count is the one `check NN` prints for the same file."""
import re
from pathlib import Path

import pytest

from conftest import ROOT, course_module

course = course_module()
SOLUTIONS = ROOT / "lessons" / "solutions"
LESSONS = sorted(int(p.stem) for p in (ROOT / "lessons" / "exercises").glob("[0-9][0-9].py"))
WRONG_ATTENTION = """

def attention(q, k, v, causal):
    return v * 1.0                                                        # the values, read by nobody
"""


@pytest.fixture
def learner(tmp_path, command_line) -> Path:
    """A learner's folder: lesson 01 solved, 02 as `exercise 02` wrote it, 06 solved but for attention, 05 a
    file that does not run, 07 one whose error spans two lines; the rest not started."""
    (tmp_path / "exercise_01.py").write_text((SOLUTIONS / "01.py").read_text())
    assert command_line.process("exercise", "02", cwd=tmp_path).returncode == 0
    (tmp_path / "exercise_06.py").write_text((SOLUTIONS / "06.py").read_text() + WRONG_ATTENTION)
    (tmp_path / "exercise_05.py").write_text("def masked_batchnorm(x, mask, eps=1e-5):\n    return (\n")
    (tmp_path / "exercise_07.py").write_text("raise ValueError('first line\\nsecond line')\n")
    return tmp_path


def _passing(command_line, folder: Path, number: int) -> tuple[int, int]:
    """(passed, exercises) as `check NN` says for the learner's file of lesson `number`."""
    out = command_line.process("check", f"{number:02d}", cwd=folder).stdout
    passed, total = re.search(rf"check {number:02d}: (\d+) of (\d+) exercises pass", out).groups()
    return int(passed), int(total)


def test_check_all_shows_each_lesson_and_the_total(learner, command_line):
    result = command_line.process("check", "--all", cwd=learner)
    assert result.returncode == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert len(lines) == len(LESSONS) + 1 == 22
    by_lesson = dict(zip(LESSONS, lines))
    counts = {n: _passing(command_line, learner, n) for n in (1, 2, 6)}
    assert counts[1][0] == counts[1][1] and counts[2][0] == 0 and counts[6] == (2, 3)
    assert by_lesson[1] == f"  lesson 01: {counts[1][1]} of {counts[1][1]} exercises pass (exercise_01.py)"
    assert by_lesson[2] == (f"  lesson 02: 0 of {counts[2][1]} exercises pass (exercise_02.py); not yet: "
                            "central_difference, topological_order, backprop")
    assert by_lesson[6] == "  lesson 06: 2 of 3 exercises pass (exercise_06.py); not yet: attention"
    assert re.fullmatch(r"  lesson 05: exercise_05\.py does not run: SyntaxError: .*\(exercise_05\.py, line 2\)",
                        by_lesson[5]), by_lesson[5]
    assert by_lesson[7] == "  lesson 07: exercise_07.py does not run: ValueError: first line second line"
    assert all(by_lesson[n] == f"  lesson {n:02d}: not started" for n in LESSONS if n not in (1, 2, 5, 6, 7))
    total = sum(len(course.exercises(n).checks) for n in LESSONS)
    passed = counts[1][0] + counts[6][0]
    done, next_step = lines[-1].split("; next: ")
    n = len(LESSONS)
    assert done == (f"check --all: {passed} of {total} exercises pass; 1 of {n} lessons done, 4 under way, "
                    f"{n - 5} not started")
    assert next_step.endswith(" -m tinygrad_block check 02") and Path(next_step.split()[0]).name.startswith("python")


def test_check_all_in_an_empty_folder_points_to_the_first_lesson(tmp_path, command_line):
    result = command_line.process("check", "--all", cwd=tmp_path)
    assert result.returncode == 0
    *lessons, last = result.stdout.splitlines()
    assert lessons == [f"  lesson {n:02d}: not started" for n in LESSONS]
    assert re.fullmatch(rf"check --all: 0 of \d+ exercises pass; 0 of {len(LESSONS)} lessons done, 0 under way, "
                        rf"{len(LESSONS)} not started; "
                        r"next: .* -m tinygrad_block exercise 01", last), last


def test_check_all_when_every_lesson_passes_names_no_next_step(tmp_path, command_line, monkeypatch):
    """Every file solved (each lesson's checker replaced by one check that passes, to keep the test short)."""
    monkeypatch.chdir(tmp_path)
    for n in LESSONS:
        (tmp_path / f"exercise_{n:02d}.py").write_text("done = True\n")
    monkeypatch.setattr(course, "exercises", lambda n: course.Exercises(n, "", [("done", lambda m: m.done)]))
    last = command_line.out("check", "--all").splitlines()[-1]
    n = len(LESSONS)
    assert last == f"check --all: {n} of {n} exercises pass; {n} of {n} lessons done, 0 under way, 0 not started"


@pytest.mark.parametrize("argv, fragment", [
    (["check", "--all", "02"],
     "--all checks every lesson's exercise_NN.py in this folder: give it no lesson number or file"),
    (["check"], "give the lesson whose exercises to check, like `check 02`, or --all for every lesson"),
])
def test_check_all_mistakes_are_one_line(tmp_path, command_line, argv, fragment):
    result = command_line.process(*argv, cwd=tmp_path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and lines == [f"python -m tinygrad_block check: error: {fragment}"], result.stderr
