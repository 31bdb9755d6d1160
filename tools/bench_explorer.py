"""How heavy the explorer page is and how fast it opens: Llama-2-70B on the shape-only device (80 layers folded
into one box) and the tiny block at depth 2 with values, each written once by tb.explore and opened ROUNDS times
in headless Chromium (Playwright), from a file:// URL, a fresh tab each round.

    python tools/bench_explorer.py [--rounds 5] [--seq 16] [--chromium /usr/bin/chromium]

ready: from goto() until <body data-ready="true"> (graphviz compiled, the first layout drawn), wall clock seen by
Python. expand all: the click's handler, timed inside the page (performance.now), every module opened and laid out.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.explorer_page import explore

EXPAND_ALL = """() => { const t = performance.now(); document.getElementById('expand-all').click();
                        return performance.now() - t; }"""


def pages(seq: int) -> dict:
    """{name: (explorer page, seconds to record and build it)}."""
    out = {}
    t = time.perf_counter()
    model = nn.LM(nn.preset("llama2-70b"), generator=tb.Generator(0), device="meta")
    page = explore(model, tb.zeros(1, seq, dtype=tb.int64, device="meta"), values=False)
    out[f"llama2-70b, shape-only, (1, {seq}) ids, depth 1"] = (page, time.perf_counter() - t)
    t = time.perf_counter()
    block = nn.TransformerBlock(nn.preset("tiny"), generator=tb.Generator(0))
    x = tb.randn(2, 8, 64, generator=tb.Generator(1), requires_grad=True)
    page = explore(block, x, depth=2, values=True)
    out["tiny block, (2, 8, 64), depth 2, values"] = (page, time.perf_counter() - t)
    return out


def measure(browser, path: Path, rounds: int) -> tuple[list, list, list]:
    """Seconds to data-ready and milliseconds of expand all, per round; errors the page reported."""
    ready, expand, errors = [], [], []
    for _ in range(rounds):
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.on("pageerror", lambda e: errors.append(str(e)))
        t = time.perf_counter()
        page.goto(path.as_uri())
        page.wait_for_selector("body[data-ready=true]", state="attached", timeout=120_000)
        ready.append(time.perf_counter() - t)
        expand.append(page.evaluate(EXPAND_ALL))
        page.close()
    return ready, expand, errors


def spread(values: list, fmt: str) -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seq", type=int, default=16, help="sequence length of the 70B model's token ids (default 16: "
                                                        "the page is the same at any length, only shapes differ)")
    p.add_argument("--chromium", default="/usr/bin/chromium" if Path("/usr/bin/chromium").exists()
                   else shutil.which("chromium"))
    args = p.parse_args(argv)
    from playwright.sync_api import sync_playwright
    if not args.chromium:
        raise SystemExit("bench_explorer: no chromium found; pass --chromium PATH")
    built = pages(args.seq)
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"], headless=True)
        print(f"Chromium {browser.version} ({args.chromium}), headless, Playwright sync API, viewport 1600x1000, "
              f"{args.rounds} rounds (a fresh tab each), {os.cpu_count()} CPUs")
        print(f"{'page':<46} {'build s':>8} {'bytes':>11} {'ready s: median (min-max)':>27} "
              f"{'expand all ms: median (min-max)':>33}")
        for name, (page, build_s) in built.items():
            path = page.save(Path(tmp) / "page.html")
            ready, expand, errors = measure(browser, path, args.rounds)
            print(f"{name:<46} {build_s:>8.2f} {path.stat().st_size:>11,} {spread(ready, '.3f'):>27} "
                  f"{spread(expand, '.0f'):>33}" + (f"   ERRORS: {errors[:3]}" if errors else ""))
        browser.close()


if __name__ == "__main__":
    main()
