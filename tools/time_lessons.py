"""Time every lesson as a script (and, with --notebook, as an executed notebook): the numbers in lessons/README.md.

    python tools/time_lessons.py [--notebook] [--repeat N] [--lessons NN ...]

Each lesson runs in a fresh interpreter, as `python lessons/NN_*.py > /dev/null` would (its folder on its path, so
`import course` finds lessons/course.py); as a notebook, through `python -m tinygrad_block lesson NN --notebook
--execute`, in a kernel started in lessons/. The median of N runs is printed per lesson, then the total. The
course's budget is 3 minutes for all lessons together on a 2-core machine.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET_S = 180.0


def seconds(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", action="store_true", help="also time each lesson as an executed notebook")
    parser.add_argument("--repeat", type=int, default=1, help="runs per lesson; the median is printed")
    parser.add_argument("--lessons", nargs="+", type=int, default=None, metavar="NN",
                        help="these lessons only (default: all)")
    args = parser.parse_args()
    lessons = sorted((ROOT / "lessons").glob("[0-9][0-9]_*.py"))
    if args.lessons is not None:
        wanted = {f"{n:02d}" for n in args.lessons}
        lessons = [p for p in lessons if p.stem[:2] in wanted]
        if len(lessons) != len(wanted):
            parser.error(f"--lessons: no lesson {', '.join(sorted(wanted - {p.stem[:2] for p in lessons}))}")
    totals = {"script": 0.0, "notebook": 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        for path in lessons:
            runs = {"script": [sys.executable, str(path)]}
            if args.notebook:
                runs["notebook"] = [sys.executable, "-m", "tinygrad_block", "lesson", path.stem[:2], "--notebook",
                                    "--execute", "--out-dir", tmp]
            line = f"{path.stem:34s}"
            for kind, argv in runs.items():
                median = statistics.median(seconds(argv) for _ in range(args.repeat))
                totals[kind] += median
                line += f"  {kind} {median:6.2f} s"
            print(line, flush=True)
    print(f"{'all lessons':34s}  script {totals['script']:6.2f} s" +
          (f"  notebook {totals['notebook']:6.2f} s" if args.notebook else "") +
          f"   (budget {BUDGET_S:.0f} s for the scripts together)")
    return 0 if totals["script"] <= BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
