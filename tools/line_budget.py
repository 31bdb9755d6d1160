"""Count the engine core's lines of code: not blank, not comments, not docstrings (docs are free).

The core is what a learner reads in an evening: tensor, functions, the backends (numpy, the device table, the
GPU's, the strict one), autograd, the trace, indexing. CI fails when it grows past BUDGET (tests/engine/test_engine.py
runs this).

    python tools/line_budget.py
"""
from __future__ import annotations

import io
import tokenize
from pathlib import Path

CORE = ("tensor.py", "function.py", "backend.py", "dtypes.py", "generator.py", "autograd.py", "trace.py", "index.py",
        "device.py", "cuda.py", "strict.py")
# 1500 until cuda.py and strict.py (172 lines) joined the core; 1600 until int64 sums, exact int min and kthlargest;
# 1610 until PyTorch's habits (t.size(), view, argmax/argmin, no_grad as a decorator) and cuda's jit default;
# 1650 until the seam for generated kernels (ArrayBackend.generated, the CPU's backend in cpu_kernels.py);
# 1660 until the in-place row write (SetRows, backend.set_rows) that the static KV cache writes its positions with
# 1671 until the backends answered for what a replay calls (ufunc, reducer, lowers, generates) and ran MATH's exp/log
# 1695 until Tensor.assign named the one way a tensor takes new values (optimizers, caches, loading)
BUDGET = 1705
PACKAGE = Path(__file__).resolve().parent.parent / "tinygrad_block"


def code_lines(source: str) -> int:
    """Lines holding at least one token that is not a comment, a docstring or layout."""
    lines, prev = set(), tokenize.NEWLINE
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        is_docstring = tok.type == tokenize.STRING and prev in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
        if tok.type not in skip and not is_docstring:
            lines.update(range(tok.start[0], tok.end[0] + 1))
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            prev = tok.type
    return len(lines)


def count(package: Path = PACKAGE) -> dict[str, int]:
    return {name: code_lines((package / name).read_text()) for name in CORE}


def main() -> int:
    counts = count()
    for name, n in counts.items():
        print(f"{name:<14}{n:>6}")
    total = sum(counts.values())
    print(f"{'core total':<14}{total:>6}  (budget {BUDGET})")
    return 0 if total <= BUDGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
