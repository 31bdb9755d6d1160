"""Where a clone of the repository keeps the course: its lessons/ folder, beside this package when the package is
installed from the clone (pip install -e .). A wheel installs the package alone, with no lessons/ beside it; what
reads this (the course commands of the command line, the explorer page's links to the lessons) says so or does
without. The one place the package names that folder."""
from __future__ import annotations

from pathlib import Path

LESSONS = Path(__file__).resolve().parent.parent / "lessons"
