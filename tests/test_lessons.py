"""Every lesson runs as a script and asserts every number it states."""
import subprocess
import sys
from pathlib import Path

import pytest

LESSONS = sorted((Path(__file__).resolve().parent.parent / "lessons").glob("[0-9][0-9]_*.py"))


def test_there_are_lessons():
    assert LESSONS


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_lesson_runs_and_its_assertions_hold(path):
    result = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip(), "a lesson prints what it shows"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_lesson_is_in_jupytext_percent_format_with_a_main(path):
    text = path.read_text()
    assert "format_name: percent" in text and "# %%" in text
    assert "\ndef main():" in text and 'if __name__ == "__main__":\n    main()' in text
