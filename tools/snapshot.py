"""Before and after a change: every lesson's numbers and every command's output, saved from one tree, compared.

    python tools/snapshot.py save DIR [--root TREE] [--only NAME ...]   # NAME: lesson_05, params_tiny, lesson_1*
    python tools/snapshot.py compare BEFORE AFTER [--only NAME ...]

`save` runs, in TREE (default: this repository) with TREE alone on PYTHONPATH (so its package, not the installed
one, is imported; meta.json says which file was), each on one thread, two processes at a time: every lesson as a
script (matplotlib's Agg backend) and the command lines in COMMANDS. It writes what each printed, as printed, to
DIR/<name>.txt, and DIR/index.json (command, status, seconds) and DIR/meta.json (the paths to mask). `--only`
runs those names again and keeps the rest.

`compare` masks what changes from run to run: each snapshot's own paths (its tree, interpreter and scratch folder),
a table's timed columns, and MASKS (timings, speeds, ratios of timings, progress bars, temporary paths, process ids,
dates, free memory). Then a command's text must be identical (else a unified diff), and every number a lesson
printed before must still be printed after, as often (a number that vanished is listed with its line, and so is a
line whose numbers changed; lines that are only new, or only reworded, are counted). A status that changed
differs too. Exit status 0 when nothing differs, 1 otherwise; `--only` compares those names.
"""
from __future__ import annotations

import argparse
import difflib
import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKERS = 2                   # the machine this was written for has two cores, shared
TIMEOUT_S = 900
CLI = "python -m tinygrad_block"

# name -> command lines of `python -m tinygrad_block`, run in order in a scratch folder of their own ({tmp}).
# Each exists, with these options, from the first commit compared on; all are deterministic and take seconds.
COMMANDS: dict[str, tuple[str, ...]] = {
    "version": ("--version",),
    "presets": ("presets",),
    "presets_json": ("presets --json",),
    "params_tiny": ("params --preset tiny",),
    "params_llama2-7b": ("params --preset llama2-7b",),
    "params_llama2-70b_json": ("params --preset llama2-70b --json",),
    "params_gpt2-small": ("params --preset gpt2-small",),
    "params_bert-base_json": ("params --preset bert-base --json",),
    "flops_tiny": ("flops --preset tiny --seq-len 16 --batch 2",),
    "flops_llama2-70b": ("flops --preset llama2-70b --seq-len 4096",),
    "flops_smollm_json": ("flops --preset smollm-135m --seq-len 512 --json",),
    "walk_llama2-7b": ("walk --preset llama2-7b",),
    "walk_gpt2-small_json": ("walk --preset gpt2-small --json",),
    "memory_llama2-7b": ("memory --preset llama2-7b --seq-len 4096",),
    "memory_llama2-70b_fp32_json": ("memory --preset llama2-70b --seq-len 2048 --batch 2 --dtype fp32 --json",),
    "calc_llama2-70b": ("calc --preset llama2-70b --seq-len 4096 --gpus 1000 --mfu 0.164",),
    "calc_custom_json": ("calc --d-model 1024 --n-layers 28 --n-heads 16 --n-kv-heads 8 --head-dim 128 --d-ff 3072 "
                         "--vocab 151936 --tied --seq-len 2048 --tokens 1.4e12 --json",),
    "graph_tiny_dot": ("graph --preset tiny --out {tmp}/g.dot --depth 2",),
    "graph_llama2-70b_model_json": ("graph --preset llama2-70b --model --depth 1 --out {tmp}/m.dot --json",),
    "graph_tiny_values": ("graph --preset tiny --values --backward --out {tmp}/v.dot",),
    "graph_tiny_compiled": ("graph --preset tiny --compiled --backward --out {tmp}/c.dot --json",),
    "graph_tiny_explorer": ("graph --preset tiny --backward --out {tmp}/e.html",),
    "tour": ("tour --out-dir {tmp}/tour",),
    "exercise_check": ("exercise 03 --out {tmp}/ex.py", "check 03 {tmp}/ex.py", "check 02 lessons/solutions/02.py",
                       "check 12 lessons/solutions/12.py"),
    "train_generate_inspect": ("train induction --steps 20 --seed 0 --out {tmp}/run --no-plots",
                               "generate {tmp}/run --ids '1 2 3' --max-new-tokens 8 --temperature 0.8 --seed 1",
                               "generate {tmp}/run --ids '4 5 6 7' --max-new-tokens 6 --eager --json",
                               "inspect {tmp}/run --json"),
    "mistake_preset": ("params --preset lama2-7b",),
    "mistake_seq_len": ("flops --preset tiny --seq-len 0", "memory --preset llama2-7b --seq-len 4097",
                        "calc --preset tiny --seq-len 8 --mfu 1.5"),
    "mistake_heads": ("calc --d-model 4096 --n-layers 2 --n-heads 30 --d-ff 100 --vocab 10 --seq-len 8",),
    "mistake_files": ("generate {tmp}/nowhere --ids 1", "graph --preset tiny --out {tmp}/g.txt", "lesson 99"),
}


@dataclass(frozen=True)
class Mask:
    """One rule: what matches `pattern` (applied line by line, in MASKS' order) becomes `placeholder`."""
    name: str
    pattern: re.Pattern
    placeholder: str


NUMBER = r"\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?"
MASKS = (
    Mask("progress", re.compile(r"^.*\d+%\|.*$"), "<progress>"),                    # a tqdm bar, each update
    Mask("json-time", re.compile(r"""(["']\w*(?:seconds|_s)["']):\s*-?""" + NUMBER), r"\1: <time>"),
    Mask("rate", re.compile(NUMBER + r"\s*[A-Za-zµ]*/s(?![A-Za-z])|" + NUMBER + r"[\w ]*? per second"), "<rate>"),
    Mask("timed-ratio", re.compile(                                   # a timing over a timing, or over a peak
        NUMBER + r"% of (?:the )?(?:peak|measured\b[\w ]*|eager call)|" + NUMBER + r"(?= x (?:eager|PyTorch))|"
        r"(?:(?<=balance point: )|(?<=np\.add = ))" + NUMBER), "<ratio>"),
    Mask("took", re.compile(r"\btook\s+" + NUMBER + r"(?:\s*[a-zµ]+\b)?"), "took <time>"),
    Mask("time", re.compile(NUMBER + r"\s?(?:s|ms|µs|us|ns|sec|seconds?)(?![\w/])"), "<time>"),
    Mask("temp-path", re.compile(r"/tmp/[^\s/'\",;:)]+"), "<tmp>"),
    Mask("pid", re.compile(r"\b(process|pid|PID) \d+"), r"\1 <pid>"),
    Mask("pid-in-name", re.compile(r"\.\d+\.tmp\b"), ".<pid>.tmp"),                # a temporary's .NAME.<pid>.tmp
    Mask("date", re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?"), "<date>"),
    Mask("address", re.compile(r"\b0x[0-9a-fA-F]{6,}\b"), "<address>"),
    Mask("free-memory", re.compile(NUMBER + r"\s*[KMGT]i?B (?:free|available)|(?:free|available):? " + NUMBER
                                   + r"\s*[KMGT]i?B"), "<free memory>"),
)


TIMED_HEADER = re.compile(r"\S\s{2,}(?:ms|s|µs|us|[kMGT]?FLOP/s|[kMGT]?B/s)(?=\s|$)")
TABLE_CELLS = re.compile(r"(?:\s+-?[\d.,]+(?:[eE][-+]?\d+)?%?)+\s*")


def mask_timed_columns(lines: list[str]) -> list[str]:
    """Rule 'timed-columns': in a table whose header names a timing column (ms, TFLOP/s, GB/s, ...), the rows keep
    their cells before that column; the cells from it on, measured on this machine, become <timed>."""
    masked, keep = [], None
    for line in lines:
        if keep and line[:keep].strip() and TABLE_CELLS.fullmatch(line[keep:]):
            masked.append(line[:keep] + " <timed>")
            continue
        header = TIMED_HEADER.search(line)
        keep = header.start() + 1 if header and len(re.findall(r"\S\s{2,}\S", line)) >= 2 else None
        masked.append(line)
    return masked


def mask(text: str, paths: list[tuple[str, str]] = ()) -> str:
    """`text` with the run's own paths (path, placeholder; in order), the timed columns of a table and every
    MASKS match replaced."""
    for path, placeholder in paths:
        text = text.replace(path, placeholder)
    lines = mask_timed_columns(text.split("\n"))
    for rule in MASKS:
        lines = [rule.pattern.sub(rule.placeholder, line) for line in lines]
    return "\n".join(line for i, line in enumerate(lines)            # a bar's updates, however many: one line
                     if not (line == "<progress>" and i and lines[i - 1] == line))


NUMBER_TOKEN = re.compile(r"(?<![\w.])-?" + r"\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?|(?<=\w)\d+(?:\.\d+)?")


def numbers(line: str) -> list[str]:
    """The numbers a line prints, as printed: `1,234`, `6.48`, `-0.5`, `1e-8`, and the 2 of `d^2` or `W2`."""
    return NUMBER_TOKEN.findall(line)


def skeleton(line: str) -> str:
    """The line with each number replaced by '#': what two printings of one statement share."""
    return NUMBER_TOKEN.sub("#", line)


# ---------------------------------------------------------------------------------------------------- comparing

@dataclass
class LessonDiff:
    """What became of one lesson's printed numbers: `vanished` (number, a line it was on before), `changed`
    (before line, after line), and counts of lines only new or only reworded."""
    vanished: list[tuple[str, str]]
    changed: list[tuple[str, str]]
    new: int
    reworded: int

    @property
    def differs(self) -> bool:
        return bool(self.vanished or self.changed)


def pair_lines(before: list[str], after: list[str]) -> list[tuple[int, int]]:
    """Pairs (i, j) of a replaced block's lines that print the same statement: the closest skeletons, in order."""
    pairs, start = [], 0
    for i, line in enumerate(before):
        scores = [(difflib.SequenceMatcher(None, skeleton(line), skeleton(after[j])).ratio(), j)
                  for j in range(start, len(after))]
        best = max(scores, default=(0.0, -1))
        if best[0] >= 0.6:
            pairs.append((i, best[1]))
            start = best[1] + 1
    return pairs


def compare_lesson(before: str, after: str) -> LessonDiff:
    """Every number printed `before` must be printed `after` (as a multiset); lines are matched by difflib."""
    old, new = before.splitlines(), after.splitlines()
    gone = Counter(n for line in old for n in numbers(line)) - Counter(n for line in new for n in numbers(line))
    diff, touched_old = LessonDiff([], [], 0, 0), []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        touched_old += old[i1:i2]
        pairs = pair_lines(old[i1:i2], new[j1:j2])
        diff.new += (j2 - j1) - len(pairs)
        for i, j in pairs:
            if numbers(old[i1 + i]) != numbers(new[j1 + j]):
                diff.changed.append((old[i1 + i], new[j1 + j]))
            else:
                diff.reworded += 1
    diff.vanished = blame(gone, touched_old + old)
    return diff


def blame(gone: Counter, lines: list[str]) -> list[tuple[str, str]]:
    """(number, line) for each printing of a number in `gone`, on the first of `lines` that printed it and is not
    yet blamed for as many printings."""
    left, blamed = gone.copy(), []
    for line in lines:
        for number in numbers(line):
            if left[number] > 0:
                left[number] -= 1
                blamed.append((number, line))
    return blamed


def compare_command(before: str, after: str) -> list[str]:
    """A unified diff of two masked command outputs; empty when identical."""
    return list(difflib.unified_diff(before.splitlines(), after.splitlines(), "before", "after", lineterm=""))


# ---------------------------------------------------------------------------------------------------- saving

def lessons(tree: Path) -> dict[str, str]:
    """name -> command line of every lesson in `tree`, by number: 'lesson_05' -> 'python lessons/05_....py'."""
    return {f"lesson_{path.name[:2]}": f"python lessons/{path.name}"
            for path in sorted((tree / "lessons").glob("[0-9][0-9]_*.py"))}


def is_lesson(name: str) -> bool:
    return name.startswith("lesson_")


def chosen(name: str, only: list[str]) -> bool:
    """Whether `name` is among the glob patterns `only` (all are, without any)."""
    return not only or any(fnmatch.fnmatch(name, pattern) for pattern in only)


def child_env(tree: Path) -> dict[str, str]:
    """The environment of every process a snapshot starts: `tree` alone on PYTHONPATH, one thread, no display."""
    env = dict(os.environ, PYTHONPATH=str(tree), MPLBACKEND="Agg", PYTHONHASHSEED="0", COLUMNS="120")
    env.update({name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
    return env


def argv(line: str, scratch: Path) -> list[str]:
    """A command line as the process's arguments: `python` is this interpreter, {tmp} the scratch folder; a line
    of COMMANDS is `python -m tinygrad_block` with it."""
    words = shlex.split(line.format(tmp=scratch))
    if words[0] != "python":
        words = shlex.split(CLI) + words
    return [sys.executable] + words[1:]


def run_one(name: str, lines: tuple[str, ...], tree: Path, scratch: Path, env: dict[str, str]) -> dict:
    """Runs `lines` in order in `tree`. A lesson's text is what it printed on stdout; a command's is each line
    (`$ line`), its stdout, its stderr and its status."""
    folder = scratch / name
    folder.mkdir(parents=True, exist_ok=True)
    text, status, err, start = "", 0, "", time.perf_counter()
    for line in lines:
        out, err, status = run_line(argv(line, folder), tree, env)
        text += out if is_lesson(name) else f"$ {line}\n{out}" + (f"[stderr]\n{err}" if err else "") + \
            f"[status {status}]\n"
    return {"name": name, "command": list(lines), "status": status, "text": text, "stderr": err,
            "seconds": round(time.perf_counter() - start, 2)}


def run_line(words: list[str], tree: Path, env: dict[str, str]) -> tuple[str, str, int]:
    """stdout, stderr and status of one process; one that runs past TIMEOUT_S is stopped, status 124."""
    try:
        done = subprocess.run(words, cwd=tree, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        return done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as stopped:
        return (stopped.stdout or b"").decode(), f"stopped after {TIMEOUT_S} s\n", 124


def package_file(tree: Path, env: dict[str, str]) -> str:
    """Which tinygrad_block the snapshot's processes import; refused unless it is `tree`'s."""
    done = subprocess.run([sys.executable, "-c", "import tinygrad_block; print(tinygrad_block.__file__)"], cwd=tree,
                          env=env, capture_output=True, text=True)
    found = done.stdout.strip() or f"nowhere ({(done.stderr.strip().splitlines() or ['no output'])[-1]})"
    if not found.startswith(str(tree) + os.sep):
        raise SystemExit(f"snapshot: the processes import tinygrad_block from {found}, not from {tree}")
    return found


def git_state(tree: Path) -> dict[str, object]:
    """The commit `tree` is at, and how many tracked files differ from it (read only)."""
    head = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout
    return {"commit": head.strip(), "modified_files": len(dirty.splitlines())}


def write_text(path: Path, text: str) -> None:
    """Writes `path` whole: to a temporary beside it, then renamed into place."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    temporary.replace(path)


def save(out: Path, tree: Path, only: list[str]) -> int:
    """Runs every lesson and command (or those `only` names) in `tree`; writes their outputs and the index."""
    tree, out, env = tree.resolve(), out.resolve(), child_env(tree.resolve())
    jobs = {**{name: (line,) for name, line in lessons(tree).items()}, **COMMANDS}
    jobs = {name: lines for name, lines in jobs.items() if chosen(name, only)}
    out.mkdir(parents=True, exist_ok=True)
    index = json.loads((out / "index.json").read_text()) if only and (out / "index.json").exists() else {}
    scratch = out / "scratch"                        # the same path on a rerun, so one mask serves every file
    meta = {"root": str(tree), "package": package_file(tree, env), "python": sys.executable,
            "scratch": str(scratch), **git_state(tree)}
    try:
        with ThreadPoolExecutor(WORKERS) as pool:
            for result in pool.map(lambda job: run_one(*job, tree, scratch, env), jobs.items()):
                record(out, result, index)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    write_text(out / "meta.json", json.dumps(meta, indent=1) + "\n")
    write_text(out / "index.json", json.dumps(dict(sorted(index.items())), indent=1) + "\n")
    return 0


def record(out: Path, result: dict, index: dict) -> None:
    """Saves one job's text (and a lesson's stderr when it failed) and its index row; prints a line of progress."""
    name = result["name"]
    write_text(out / f"{name}.txt", result["text"])
    if is_lesson(name) and result["status"]:
        write_text(out / f"{name}.stderr.txt", result["stderr"])
    index[name] = {"command": result["command"], "status": result["status"], "seconds": result["seconds"]}
    print(f"{name:34s} status {result['status']:3d}  {result['seconds']:7.1f} s", flush=True)


# ---------------------------------------------------------------------------------------------------- reporting

def own_paths(snapshot: Path) -> list[tuple[str, str]]:
    """(path, placeholder) of one snapshot's own paths: its interpreter (as a command prints it for you to run:
    by its path, or from the repository root), its scratch folder, its tree."""
    meta = json.loads((snapshot / "meta.json").read_text())
    return [(meta["python"], "<python>"), (".venv/bin/python", "<python>"), (meta["scratch"], "<tmp>"),
            (meta["root"], "<root>")]


def read(snapshot: Path, name: str) -> str:
    return mask((snapshot / f"{name}.txt").read_text(), own_paths(snapshot))


def report_lesson(name: str, diff: LessonDiff) -> list[str]:
    lines = [f"{name}: {len(diff.vanished)} numbers vanished, {len(diff.changed)} lines changed, "
             f"{diff.new} lines new, {diff.reworded} reworded"]
    by_line: dict[str, Counter] = {}
    for number, line in diff.vanished:
        by_line.setdefault(line, Counter())[number] += 1
    for line, gone in by_line.items():
        counts = ", ".join(number + (f" (x{count})" if count > 1 else "") for number, count in gone.items())
        lines += [f"    vanished {counts}", f"             before: {line.strip()}"]
    for old, new in diff.changed:
        lines += [f"    changed  before: {old.strip()}", f"             after:  {new.strip()}"]
    return lines


def compare(before: Path, after: Path, only: list[str] = ()) -> int:
    """Prints what differs between two snapshots (or their `only` names); status 0 when nothing vanished, changed
    or broke."""
    index_before, index_after = ({name: row for name, row in json.loads((s / "index.json").read_text()).items()
                                  if chosen(name, only)} for s in (before, after))
    differing, lines = [], []
    for name, row in index_before.items():
        if name not in index_after:
            differing.append(name)
            lines.append(f"{name}: missing after")
            continue
        status = (row["status"], index_after[name]["status"])
        differs, found = judge(name, read(before, name), read(after, name), status)
        differing += [name] if differs else []
        lines += found
    only_after = sorted(set(index_after) - set(index_before))
    print("\n".join(lines + [""]), end="")
    print(f"compared {len(index_before)} ({sum(is_lesson(n) for n in index_before)} lessons, "
          f"{sum(not is_lesson(n) for n in index_before)} commands): "
          + (f"{len(differing)} differ: {', '.join(differing)}" if differing else "nothing differs")
          + (f"; only after: {', '.join(only_after)}" if only_after else ""))
    return 1 if differing else 0


def judge(name: str, before: str, after: str, status: tuple[int, int]) -> tuple[bool, list[str]]:
    """Whether one job differs, and its report lines (a lesson that only gained or reworded lines says so)."""
    found = [f"{name}: status {status[0]} before, {status[1]} after"] if status[0] != status[1] else []
    if is_lesson(name):
        diff = compare_lesson(before, after)
        if diff.differs:
            return True, found + report_lesson(name, diff)
        kept = f"{name}: same numbers ({diff.new} lines new, {diff.reworded} reworded)"
        return bool(found), found + ([kept] if found or diff.new or diff.reworded else [])
    patch = compare_command(before, after)
    return bool(found or patch), found + ([f"{name}: differs"] + [f"    {line}" for line in patch] if patch else [])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    saving = commands.add_parser("save", help="run every lesson and command; save what each printed")
    saving.add_argument("dir", type=Path)
    saving.add_argument("--root", type=Path, default=ROOT, help="the tree to run (default: this repository)")
    saving.add_argument("--only", nargs="+", default=[], metavar="NAME", help="run these again (glob patterns)")
    comparing = commands.add_parser("compare", help="what differs between two snapshots")
    comparing.add_argument("before", type=Path)
    comparing.add_argument("after", type=Path)
    comparing.add_argument("--only", nargs="+", default=[], metavar="NAME", help="compare these (glob patterns)")
    args = parser.parse_args()
    if args.command == "save":
        return save(args.dir, args.root, args.only)
    return compare(args.before, args.after, args.only)


if __name__ == "__main__":
    sys.exit(main())
