"""Where the course states how many lessons it has without the lessons at hand (the installed package's tour), the
number is that of the lesson files in lessons/."""
from pathlib import Path

from tinygrad_block import cli

ROOT = Path(__file__).resolve().parents[2]
WORDS = {20: "twenty", 21: "twenty-one", 22: "twenty-two", 23: "twenty-three", 24: "twenty-four"}


def test_the_installed_packages_tour_counts_the_lessons_there_are():
    n = len(list((ROOT / "lessons").glob("[0-9][0-9]_*.py")))
    text = cli.tour_text({"lessons": None})[0]
    assert f"the course: {WORDS[n]} lessons with exercises" in text, text
