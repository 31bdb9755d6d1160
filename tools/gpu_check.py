"""Ready for a GPU in one command: the `cuda` tests, tb.jit's compiled replays against eager on the GPU, the block,
training and decoding benchmarks, and the record of it all in docs/gpu.md.

    python tools/gpu_check.py                         # on an NVIDIA GPU with CuPy: about 4 minutes on an H100
    python tools/gpu_check.py --parts jit block       # some parts only
    python tools/gpu_check.py --device cpu --quick --out /tmp/gpu.md   # every part on the CPU, tiny: a rehearsal

Each part runs in a process of its own, under a time budget of its own (one that runs past it is stopped and
counted as failed), its output printed as it comes:
  tests     pytest -m gpu: every test marked `gpu` (the 'cuda' cases of the device-parametrised tests)
  jit       tb.jit against eager on the device (this file, --jit-only): the tiny block's forward and backward,
            AdamW training steps, decode steps over the static KV cache; float32 and float16; the maximum
            relative difference of every replay must stay within a tolerance, or for training within twice what
            eager differs from itself run to run (a GPU's atomic adds, in the embedding's backward, sum in any order)
  block     tools/bench_block.py: tiny to large, float32 and float16, eager (autograd), compiled and PyTorch;
            xl (a Llama-3-8B block) eager and PyTorch, as a compiled program at xl keeps more than a GPU holds
  train     tools/bench_train.py: training steps, compiled, eager and PyTorch
  generate  tools/bench_generate.py: greedy decoding, compiled, eager and transformers

The record (the machine, what each part found, the tables) replaces the part of docs/gpu.md between its two marker
lines, written to a temporary file and renamed into place; it is written when a part fails too. Exit status 0 when
every part passed, 1 when one failed, 2 when there is no GPU (one line says why: CuPy missing, or no device). A run
on the CPU writes a record only where --out says.

It runs from a plain checkout, not installed: the repository goes on sys.path here, and on PYTHONPATH for the
parts. It needs what the package needs (numpy, tqdm, tokenizers), CuPy for 'cuda', and torch and transformers for
the benchmarks' references; not graphviz.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import tinygrad_block as tb  # noqa: E402
from tinygrad_block import cuda, nn, optim  # noqa: E402

RECORD = ROOT / "docs" / "gpu.md"
BEGIN = "<!-- gpu_check.py: the record begins -->"
END = "<!-- gpu_check.py: the record ends -->"
MATCHED = "Compiled replays matched eager on this GPU: {}."      # the line cuda.REPLAY_CHECKED is set True after
PARTS = ("tests", "jit", "block", "train", "generate")
RESULT = "gpu_check result: "                                   # the jit part's last line, then its JSON


@dataclass
class Part:
    """One part: a command run with this Python from the repository root, under `budget` seconds."""
    name: str
    what: str
    argv: list[str]
    budget: float
    keep: str = "all"              # which lines go into the record: 'all', or 'summary' (pytest's)


@dataclass
class Outcome:
    part: Part
    status: int | None             # the exit status; None when it ran past its budget and was stopped
    seconds: float
    lines: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == 0

    @property
    def result(self) -> str:
        return "passed" if self.ok else f"stopped after its {self.part.budget:.0f} s" if self.status is None \
            else f"failed (exit status {self.status})"


# ---------------------------------------------------------------- the parts
def parts(device: str, quick: bool, names: list[str]) -> list[Part]:
    """The parts asked for, sized for a GPU (or, with `quick`, tiny: the rehearsal on the CPU runs these)."""
    block = [str(ROOT / "tools" / "bench_block.py"), "--device", device, "--dtypes", "float32", "float16",
             "--engines", "autograd", "compiled", "pytorch"]
    if quick:
        blocks = [Part("block", "the block, tiny: eager, compiled, PyTorch", block + ["--sizes", "tiny", "--rounds",
                                                                                  "1", "--phases", "both"], 150)]
        train = ["--model", "induction", "--rounds", "1", "--steps", "1", "--warmup", "3", "--batch", "4"]
        generate = ["--sizes", "32x1", "--new", "4", "--rounds", "1"]
    else:
        # xl in a process of its own, eager and PyTorch only: a compiled program keeps every array its run made
        # (no buffer is reused), and at xl the three engines together held more than an H200's 141 GB; an
        # out-of-memory there would still leave the other sizes' rows
        xl = [a for a in block if a != "compiled"]
        blocks = [Part("block", "the block, tiny to large: eager, compiled, PyTorch",
                       block + ["--sizes", "tiny", "small", "medium", "large", "--rounds", "3"], 120),
                  Part("block", "the block, xl (a Llama-3-8B block, batch 8 x 2048): eager, PyTorch",
                       xl + ["--sizes", "xl", "--rounds", "3", "--phases", "both"], 90)]
        train = ["--model", "text", "--rounds", "3", "--steps", "5", "--warmup", "5"]
        generate = ["--sizes", "64x2", "256x4", "512x8", "--new", "50", "--rounds", "3"]
    # pytest-xdist, where installed, spreads the tests (and CuPy's first compiles of their kernels) over 4 processes;
    # the quick rehearsal runs its one file in this process (`-n 0` overrides the project's own `-n auto`)
    workers = (["-n", "0" if quick else "4"]) if importlib.util.find_spec("xdist") else []
    every = [
        Part("tests", "the tests marked gpu (pytest -m gpu)", ["-m", "pytest", "-q", "-m", "gpu", "-p",
             "no:cacheprovider", *workers, "tests/engine/test_devices.py" if quick else "tests"], 150,
             keep="summary"),
        Part("jit", "tb.jit against eager: block, training step, decode step", [str(Path(__file__).resolve()),
             "--jit-only", "--device", device], 50),
        *blocks,
        Part("train", "training steps (tools/bench_train.py)",
             [str(ROOT / "tools" / "bench_train.py"), "--device", device, *train], 90),
        Part("generate", "greedy decoding (tools/bench_generate.py)",
             [str(ROOT / "tools" / "bench_generate.py"), "engines", "--device", device, *generate], 120),
    ]
    return [p for p in every if p.name in names]


def child_environment() -> dict:
    """This environment with the repository first on PYTHONPATH, so each part imports tinygrad_block from this
    checkout, and Python's output unbuffered, so it prints as it goes."""
    path = os.pathsep.join([str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    return os.environ | {"PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


def run_part(part: Part, number: int, total: int) -> Outcome:
    """Run one part, printing its output as it comes; stopped (with every process it started) past its budget."""
    print(f"[{number}/{total}] {part.name}: {part.what} (budget {part.budget:.0f} s)", flush=True)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *part.argv], cwd=ROOT, env=child_environment(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    outcome = Outcome(part, None, 0.0)
    reader = threading.Thread(target=echo, args=(proc.stdout, outcome.lines, part.name), daemon=True)
    reader.start()
    try:
        outcome.status = proc.wait(timeout=part.budget)
    except subprocess.TimeoutExpired:
        stop(proc)
    reader.join(timeout=10)
    outcome.seconds = time.perf_counter() - start
    print(f"[{number}/{total}] {part.name}: {outcome.result} in {outcome.seconds:.0f} s", flush=True)
    return outcome


def echo(stream, lines: list[str], name: str) -> None:
    for line in stream:
        lines.append(line.rstrip("\n"))
        print(f"  {name} | {lines[-1]}", flush=True)


def stop(proc: subprocess.Popen) -> None:
    """End the part's process group (its own session: the part and whatever it started), politely, then not."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


# ---------------------------------------------------------------- the jit part: compiled replays against eager
TOLERANCE = {"float32": 1e-4, "float16": 1e-2}      # max relative difference of a replay against eager
# training steps carry a difference in the last bits through AdamW's sign-like updates into the weights: more room
TRAIN_TOLERANCE = {"float32": 1e-3, "float16": 5e-2}
ADAMW_EPS = {"float32": 1e-8, "float16": 1e-4}      # 1e-8 is 0 in float16: a zero gradient would make 0 / 0 = NaN
TINY = nn.preset("tiny")
LM_CFG = TINY.with_(n_layers=2, vocab_size=64, max_seq_len=32)


def relative_difference(got: list, want: list) -> float:
    """max over the pairs of max|got - want| / max|want| (the difference alone where want is all zeros); inf where
    a value is not finite in one and finite in the other."""
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64)
        if g.shape != w.shape or not np.array_equal(np.isfinite(g), np.isfinite(w)):
            return float("inf")
        finite = np.isfinite(w)
        diff, scale = np.abs(g - w)[finite].max(initial=0.0), np.abs(w[finite]).max(initial=0.0)
        worst = max(worst, diff / scale if scale > 0 else diff)
    return float(worst)


def block_check(device: str, dtype: str, calls: int = 5) -> dict:
    """The tiny block's forward and backward, compiled against eager on `calls` new inputs: out, dx, every dW."""
    g = tb.Generator(0)
    block = nn.TransformerBlock(TINY, generator=g, dtype=dtype, device=device)

    def step(x, dout):
        out = block(x)
        out.backward(dout)
        return out

    def results(fn, x, dout) -> list:
        block.zero_grad()
        x = x.detach().requires_grad_()
        out = fn(x, dout)
        return [out.numpy(), x.grad.numpy()] + [p.grad.numpy() for p in block.parameters()]
    compiled, got, want = tb.jit(step), [], []
    for _ in range(calls):
        x, dout = (tb.randn(2, 16, TINY.d_model, generator=g, dtype=dtype, device=device) for _ in range(2))
        want += results(step, x, dout)
        got += results(compiled, x, dout)
    return {"check": "block forward+backward", "replays": compiled.replays, "got": got, "want": want,
            "tolerance": TOLERANCE[dtype]}


def train_check(device: str, dtype: str, steps: int = 6) -> dict:
    """`steps` AdamW training steps of a 2-layer model (train.training_step), compiled against eager from the same
    weights and batches: every step's loss and gradient norm, and the weights at the end."""
    from tinygrad_block.data import induction_batch
    from tinygrad_block.train import training_step

    def run(jit: bool):
        model = nn.LM(LM_CFG, generator=tb.Generator(0), dtype=dtype, device=device)
        opt = optim.AdamW(model.parameters(), 3e-3, eps=ADAMW_EPS[dtype])
        step = training_step(model, opt, 1.0)
        step = tb.jit(step, modules=[model, opt]) if jit else step
        g, values = tb.Generator(1), []
        for _ in range(steps):
            loss, norm = step(*induction_batch(4, 8, LM_CFG.vocab_size, g, device))
            values += [loss.numpy(), norm.numpy()]
        return values + [p.numpy() for p in model.parameters()], getattr(step, "replays", 0)
    want, _ = run(False)
    again, _ = run(False)
    got, replays = run(True)
    return {"check": f"training steps (AdamW, {steps})", "replays": replays, "got": got, "want": want,
            "tolerance": TRAIN_TOLERANCE[dtype], "noise": relative_difference(again, want)}


def decode_check(device: str, dtype: str, prompts: int = 3, steps: int = 6) -> dict:
    """Greedy decoding over the static KV cache, a compiled decoder against an eager one on one model: each
    prompt's prefill, then `steps` decode steps fed the eager decoder's tokens; the logits of every call."""
    from tinygrad_block.nn.decode import Decoder
    model = nn.LM(LM_CFG, generator=tb.Generator(0), dtype=dtype, device=device)
    eager, compiled = Decoder(model, 1, 16, jit=False), Decoder(model, 1, 16, jit=True)
    g, got, want = tb.Generator(1), [], []
    for _ in range(prompts):                                 # the third prompt's prefill is a replay too
        token = tb.randint(0, LM_CFG.vocab_size, (1, 4), generator=g, device=device)
        for i in range(steps + 1):
            run = (lambda d, t: d.prefill(t)) if i == 0 else (lambda d, t: d.step(t))
            new, logits = run(eager, token)
            want.append(logits.numpy())
            got.append(run(compiled, token)[1].numpy())
            token = new
    return {"check": "decode steps (greedy, static KV cache)", "replays": compiled.compiled.replays, "got": got,
            "want": want, "tolerance": TOLERANCE[dtype]}


def jit_checks(device: str) -> int:
    """Every check in float32 and float16, a line each; the results as JSON on the last line. 0 when every check
    replayed and stayed within its tolerance, else 1."""
    rows = []
    print(f"{'check':<40}{'dtype':<9}{'replays':>8}{'max rel diff':>14}{'tolerance':>11}{'eager again':>13}  "
          "identical  result")
    for dtype in ("float32", "float16"):
        for check in (block_check, train_check, decode_check):
            r = check(device, dtype)
            got, want = r.pop("got"), r.pop("want")
            r |= {"dtype": dtype, "max_rel_diff": relative_difference(got, want),
                  "identical": all(np.array_equal(a, b, equal_nan=True) for a, b in zip(got, want)),
                  "finite": all(np.isfinite(w).all() for w in want)}      # eager's NaNs would prove nothing
            noise = r.setdefault("noise", 0.0)        # eager against eager: what the device itself varies run to run
            r["ok"] = r["replays"] > 0 and r["finite"] and r["max_rel_diff"] <= max(r["tolerance"], 2 * noise)
            rows.append(r)
            print(f"{r['check']:<40}{dtype:<9}{r['replays']:>8}{r['max_rel_diff']:>14.3g}{r['tolerance']:>11.0e}"
                  f"{noise:>13.3g}  "
                  f"{'yes' if r['identical'] else 'no':<9}  {'ok' if r['ok'] else 'FAILED'}"
                  + ("" if r["finite"] else " (eager's values are not all finite)"), flush=True)
    print(RESULT + json.dumps(rows))
    return 0 if all(r["ok"] for r in rows) else 1


# ---------------------------------------------------------------- the machine and the record
def gpu_missing(device: str) -> str | None:
    """Why `device` cannot run here (CuPy missing, no GPU, no GPU of that number), or None."""
    try:
        tb.get_backend(device)
    except RuntimeError as e:
        return str(e)
    return None


def version(module: str) -> str:
    """The installed version of the distribution that provides `module`, without importing it."""
    names = importlib.metadata.packages_distributions().get(module)
    return importlib.metadata.version(names[0]) if names else "not installed"


def machine(device: str) -> list[tuple[str, str]]:
    """The machine as the record describes it: (what, value) rows."""
    rows = []
    if device.startswith("cuda"):
        import cupy
        index = int(device.partition(":")[2] or 0)
        props = cupy.cuda.runtime.getDeviceProperties(index)
        name, memory = props["name"].decode(errors="replace"), props["totalGlobalMem"] / 2 ** 30
        cuda_version = lambda v: f"{v // 1000}.{v % 1000 // 10}"  # noqa: E731
        driver = nvidia_smi_driver(index) or "version unknown (no nvidia-smi)"
        rows += [("GPU", f"{name}, {memory:.0f} GiB ({device})"),
                 ("driver", f"{driver}, CUDA {cuda_version(cupy.cuda.runtime.driverGetVersion())}; CUDA runtime "
                            f"{cuda_version(cupy.cuda.runtime.runtimeGetVersion())}")]
    else:
        rows.append(("device", f"{device}: no GPU (a rehearsal of every part at tiny sizes, not a GPU record)"))
    rows += [("software", f"Python {platform.python_version()}, numpy {np.__version__}, CuPy {version('cupy')}, "
                          f"torch {version('torch')}, transformers {version('transformers')}"),
             ("host", f"{os.cpu_count()} CPU cores, {platform.machine()}, {platform.system()} {platform.release()}"),
             ("tinygrad_block", f"{tb.__version__}, {commit()}"),
             ("date", datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"))]
    return rows


def nvidia_smi_driver(index: int) -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "-i", str(index), "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return f"driver {out.stdout.strip()}" if out.returncode == 0 and out.stdout.strip() else None


def commit() -> str:
    """The checkout's commit (and whether files differ from it), or what stands in for it without git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=30)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "commit unknown (no git)"
    if head.returncode != 0:
        return "commit unknown (not a git checkout)"
    return f"commit {head.stdout.strip()}" + (" with uncommitted changes" if dirty.stdout.strip() else "")


def kept_lines(outcome: Outcome, most: int = 120) -> list[str]:
    """What the record keeps of a part's output: pytest's summary (failures, skips by reason, the count line), the
    others' tables; the last lines of a part that failed."""
    lines = [line for line in outcome.lines if not line.startswith(RESULT) and "%|" not in line]   # no tqdm bars
    if outcome.part.keep == "summary":
        summary = [line for line in lines if re.match(r"(FAILED|ERROR) |skipped \d+: ", line)]
        last = [line for line in lines if re.search(r"\b(passed|failed|skipped|deselected|errors?)\b.* in [\d.]+s",
                                                    line)]
        lines = summary + last[-1:] if last else lines             # no count line: it stopped early, keep all
    return lines if len(lines) <= most else [f"... ({len(lines) - most} lines before these left out)"] + lines[-most:]


def jit_matched(outcomes: list[Outcome]) -> bool | None:
    """Whether the jit part ran and every replay matched eager; None when it did not run."""
    runs = [o for o in outcomes if o.part.name == "jit"]
    return None if not runs else all(o.ok for o in runs)


def record(outcomes: list[Outcome], device: str, argv: list[str], seconds: float) -> str:
    """The record as Markdown, between the two markers."""
    rows, gpu = machine(device), device.startswith("cuda")
    what = dict(rows)
    title = what["GPU"].split(",")[0] if gpu else "a CPU rehearsal, not a GPU record"
    command = " ".join(["python tools/gpu_check.py", *argv])
    lines = [BEGIN, f"## The record: {title}, {what['date'][:10]}", "",
             f"`{command}`: {sum(o.ok for o in outcomes)} of {len(outcomes)} parts passed in {seconds:.0f} s.", "",
             "| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows), "",
             "| part | what | result | seconds (budget) |", "|---|---|---|---|",
             *(f"| {o.part.name} | {o.part.what} | {o.result} | {o.seconds:.0f} ({o.part.budget:.0f}) |"
               for o in outcomes), ""]
    matched = jit_matched(outcomes)
    if gpu and matched is not None:
        lines += [MATCHED.format("yes" if matched else "no") + (
            " `REPLAY_CHECKED` in tinygrad_block/cuda.py may now be set True, in the commit that keeps this record."
            if matched and not cuda.REPLAY_CHECKED else ""), ""]
    for o in outcomes:
        lines += [f"### {o.part.name}: {o.part.what}, {o.result}", "", "```text", *kept_lines(o), "```", ""]
    return "\n".join(lines + [END])


def write_record(path: Path, section: str) -> None:
    """Put `section` in place of what lies between the markers in `path` (or at its end when they are missing),
    through a temporary file renamed into place: a reader sees the old file or the new, never half of one."""
    text = path.read_text() if path.exists() else ""
    start, end = text.find(BEGIN), text.find(END)
    if 0 <= start < end:
        text = text[:start] + section + text[end + len(END):]
    else:
        text = (text.rstrip("\n") + "\n\n" if text else "") + section + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(text)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


# ---------------------------------------------------------------- the command
def device_name(name: str) -> str:
    """argparse type: 'cpu', 'cuda' or 'cuda:N'."""
    if name == "cpu" or re.fullmatch(r"cuda(:\d+)?", name):
        return name
    raise argparse.ArgumentTypeError(f"{name!r}: the device is cpu, cuda or cuda:N")


def arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python tools/gpu_check.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", type=device_name, default="cuda", help="cuda (the default), cuda:N, or cpu")
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes and one round everywhere: a rehearsal of every part (a minute on the CPU)")
    p.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="the parts to run (default all)")
    p.add_argument("--out", type=Path, default=None,
                   help="the Markdown file whose record it replaces (default docs/gpu.md on a GPU; on the CPU, "
                        "none unless given)")
    p.add_argument("--jit-only", action="store_true", help=argparse.SUPPRESS)   # the jit part's own process
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    if args.device.startswith("cuda") and (why := gpu_missing(args.device)) is not None:
        print(f"gpu_check: no GPU here: {why}; `python tools/gpu_check.py --device cpu --quick` rehearses every "
              "part on the CPU", file=sys.stderr)
        return 2
    if args.jit_only:
        return jit_checks(args.device)
    todo = parts(args.device, args.quick, args.parts)
    start = time.perf_counter()
    outcomes = [run_part(part, i, len(todo)) for i, part in enumerate(todo, 1)]
    seconds = time.perf_counter() - start
    out = args.out or (RECORD if args.device.startswith("cuda") else None)
    if out is not None:
        write_record(out, record(outcomes, args.device, sys.argv[1:] if argv is None else argv, seconds))
    failed = [o.part.name for o in outcomes if not o.ok]
    print(f"gpu_check: {len(outcomes) - len(failed)} of {len(outcomes)} parts passed in {seconds:.0f} s"
          + (f"; failed: {', '.join(failed)}" if failed else "") + (f"; the record is in {out}" if out else ""))
    if args.device.startswith("cuda") and jit_matched(outcomes) and not cuda.REPLAY_CHECKED:
        print("gpu_check: compiled replays matched eager on this GPU: REPLAY_CHECKED in tinygrad_block/cuda.py may "
              "now be set True, in the commit that keeps the record")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
