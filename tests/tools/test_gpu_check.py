"""tools/gpu_check.py without a GPU: the one-line refusal (status 2), the CPU rehearsal of every part
(`--device cpu --quick`, whose compiled replays equal eager bit for bit, as on the CPU they must), a replay that
drifts from eager caught by the jit checks, a part that fails or runs past its budget, and the record: the machine
described (a stand-in CuPy says what a GPU would), written between its markers, atomically, when a part failed too."""
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from conftest import CUDA_MISSING
from tools import gpu_check

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gpu_check.py"
DOCS = ROOT / "docs" / "gpu.md"


def between_markers(text: str) -> str:
    return text[text.index(gpu_check.BEGIN) + len(gpu_check.BEGIN):text.index(gpu_check.END)]


def outside_markers(text: str) -> str:
    return text[:text.index(gpu_check.BEGIN)] + text[text.index(gpu_check.END):]


# ---------------------------------------------------------------- no GPU
@pytest.mark.skipif(CUDA_MISSING is None, reason="a GPU is here")
def test_without_a_gpu_it_says_why_in_one_line_and_exits_2():
    before = DOCS.read_text()
    result = subprocess.run([sys.executable, str(SCRIPT)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and result.stdout == "" and len(lines) == 1, result.stderr
    assert lines[0].startswith("gpu_check: no GPU here: ") and CUDA_MISSING in lines[0]
    assert "--device cpu --quick" in lines[0] and DOCS.read_text() == before


def test_a_machine_with_cupy_and_no_device_is_one_line_too(monkeypatch, capsys):
    why = "device 'cuda:0': CuPy is installed but this machine has no CUDA GPU"

    def no_device(name):
        raise RuntimeError(why)
    monkeypatch.setattr(gpu_check.tb, "get_backend", no_device)
    assert gpu_check.main(["--parts", "jit"]) == 2
    printed = capsys.readouterr()
    assert printed.out == "" and printed.err.splitlines() == [
        f"gpu_check: no GPU here: {why}; `python tools/gpu_check.py --device cpu --quick` rehearses every part on "
        "the CPU"]


# ---------------------------------------------------------------- the jit part
@pytest.mark.parametrize("got, want, expected", [
    ([[1.0, 2.0, 3.0]], [[1.0, 2.0, 4.0]], 0.25),                        # max |diff| 1 over max |want| 4
    ([[1.0], [10.0, -21.0]], [[1.0], [10.0, -20.0]], 0.05),              # the worst array: 1 / 20
    ([[0.0, 1e-3]], [[0.0, 0.0]], 1e-3),                                 # want all zero: the difference alone
    ([[np.nan, 2.0]], [[np.nan, 4.0]], 0.5),                             # NaN where eager has NaN: not counted
    ([[np.nan, 2.0]], [[1.0, 2.0]], np.inf),                             # a NaN eager does not have
    ([[1.0, 2.0]], [[1.0, 2.0, 3.0]], np.inf),                           # another shape
])
def test_relative_difference(got, want, expected):
    assert gpu_check.relative_difference(got, want) == pytest.approx(expected, rel=1e-12)


class Drifting:
    """tb.jit's stand-in: every call runs eagerly; from the third (a 'replay') its outputs are scaled by 1 + DRIFT."""
    DRIFT = 1e-2

    def __init__(self, fn, **_):
        self.fn, self.calls, self.replays = fn, 0, 0

    def __call__(self, *args):
        self.calls += 1
        out = self.fn(*args)
        if self.calls <= 2:
            return out
        self.replays += 1
        return tuple(o * (1 + self.DRIFT) for o in out) if isinstance(out, tuple) else out * (1 + self.DRIFT)


@pytest.mark.parametrize("check", [gpu_check.block_check, gpu_check.train_check])
def test_a_replay_that_drifts_from_eager_is_measured(monkeypatch, check):
    exact = check("cpu", "float32")
    got, want = exact.pop("got"), exact.pop("want")
    assert exact["replays"] > 0 and gpu_check.relative_difference(got, want) == 0.0   # the CPU's replays are exact
    monkeypatch.setattr(gpu_check.tb, "jit", Drifting)
    drifting = check("cpu", "float32")
    measured = gpu_check.relative_difference(drifting["got"], drifting["want"])
    assert drifting["replays"] > 0 and measured == pytest.approx(Drifting.DRIFT, rel=1e-3)
    assert measured > drifting["tolerance"]


def canned(replays: int, got: list, want: list):
    def check(device, dtype):
        return {"check": f"canned on {device}", "replays": replays, "got": got, "want": want, "tolerance": 1e-4}
    return check


@pytest.mark.parametrize("checks, status, results", [
    ([canned(3, [[1.0]], [[1.0]])] * 3, 0, ["ok"] * 6),
    ([canned(3, [[1.0]], [[1.0]]), canned(3, [[1.001]], [[1.0]]), canned(0, [[1.0]], [[1.0]])], 1,
     ["ok", "FAILED", "FAILED"] * 2),                                    # too far; never replayed
    ([canned(3, [[np.nan]], [[np.nan]])] * 3, 1, ["FAILED (eager's values are not all finite)"] * 6),
])
def test_the_jit_part_passes_only_when_every_check_replayed_within_its_tolerance(monkeypatch, capsys, checks,
                                                                                  status, results):
    for name, check in zip(("block_check", "train_check", "decode_check"), checks):
        monkeypatch.setattr(gpu_check, name, check)
    assert gpu_check.jit_checks("cpu") == status
    rows = capsys.readouterr().out.splitlines()[1:-1]
    assert [re.split(r"  (?:yes|no) +", row)[1] for row in rows] == results
    assert [row.split()[3] for row in rows] == ["float32"] * 3 + ["float16"] * 3


# ---------------------------------------------------------------- parts that fail or run too long
def alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_a_part_past_its_budget_is_stopped_with_what_it_started(capsys):
    started = "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; " \
              "time.sleep(120)']); print(p.pid, flush=True); time.sleep(120)"
    part = gpu_check.Part("block", "a part that sleeps", ["-c", started], budget=1)
    outcome = gpu_check.run_part(part, 1, 1)
    grandchild = int(outcome.lines[0])
    assert outcome.status is None and not outcome.ok and outcome.result == "stopped after its 1 s"
    assert 1 <= outcome.seconds < 30
    for _ in range(50):
        if not alive(grandchild):
            break
        __import__("time").sleep(0.1)
    assert not alive(grandchild)
    assert "[1/1] block: stopped after its 1 s in" in capsys.readouterr().out


def test_a_failing_part_fails_the_run_and_the_record_keeps_what_it_said(monkeypatch, tmp_path, capsys):
    said = "print('...F.'); print('FAILED tests/x.py::test_y - boom'); print('skipped 2: no GPU'); " \
           "print('1 failed, 3 passed, 2 skipped in 0.5s'); raise SystemExit(1)"
    failing = gpu_check.Part("tests", "a part that fails", ["-c", said], 60, keep="summary")
    passing = gpu_check.Part("block", "a part that passes", ["-c", "print('size dtype ms'); print('tiny f32 1.0')"],
                             60)
    monkeypatch.setattr(gpu_check, "parts", lambda device, quick, names: [failing, passing])
    out = tmp_path / "gpu.md"
    assert gpu_check.main(["--device", "cpu", "--out", str(out)]) == 1
    last = capsys.readouterr().out.splitlines()[-1]                    # its seconds: as the machine's load has it
    expected = rf"gpu_check: 1 of 2 parts passed in \d+ s; failed: tests; the record is in {re.escape(str(out))}"
    assert re.fullmatch(expected, last), last
    record = between_markers(out.read_text())
    assert "| tests | a part that fails | failed (exit status 1) |" in record
    assert "| block | a part that passes | passed |" in record
    assert "```text\nFAILED tests/x.py::test_y - boom\nskipped 2: no GPU\n1 failed, 3 passed, 2 skipped in 0.5s\n```" \
        in record                                                        # pytest's summary, not its dots
    assert "```text\nsize dtype ms\ntiny f32 1.0\n```" in record
    assert "1 of 2 parts passed" in record and "Compiled replays matched" not in record   # no jit part, no GPU


def test_on_the_cpu_no_record_is_written_unless_asked(monkeypatch, capsys):
    before = DOCS.read_text()
    monkeypatch.setattr(gpu_check, "parts", lambda *a: [gpu_check.Part("jit", "nothing", ["-c", "pass"], 30)])
    assert gpu_check.main(["--device", "cpu"]) == 0
    assert re.fullmatch(r"gpu_check: 1 of 1 parts passed in \d+ s", capsys.readouterr().out.splitlines()[-1])
    assert DOCS.read_text() == before


# ---------------------------------------------------------------- the record
def test_the_docs_hold_the_markers_once_and_a_gpus_record_between_them():
    text = DOCS.read_text()
    assert text.count(gpu_check.BEGIN) == 1 and text.count(gpu_check.END) == 1
    record = between_markers(text)
    assert record.startswith("\n## The record: NVIDIA ") and "| GPU | NVIDIA " in record
    assert re.search(r"\n\d+ passed, \d+ skipped in ", record) and "FAILED" not in record


def test_write_record_replaces_between_the_markers_and_nothing_else(tmp_path):
    path = tmp_path / "gpu.md"
    path.write_text(DOCS.read_text())
    section = f"{gpu_check.BEGIN}\n## The record: a test\n{gpu_check.END}"
    gpu_check.write_record(path, section)
    assert outside_markers(path.read_text()) == outside_markers(DOCS.read_text())
    assert between_markers(path.read_text()) == "\n## The record: a test\n"
    gpu_check.write_record(path, section.replace("a test", "another"))               # replaced, not added
    assert path.read_text().count(gpu_check.BEGIN) == 1 and "another" in path.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu.md"]                  # no temporary file left
    fresh = tmp_path / "new" / "record.md"
    gpu_check.write_record(fresh, section)
    assert fresh.read_text() == section + "\n"


def test_write_record_is_a_rename_a_reader_never_sees_half(tmp_path, monkeypatch):
    path = tmp_path / "gpu.md"
    path.write_text("old\n")
    renamed = []
    real = os.replace
    monkeypatch.setattr(gpu_check.os, "replace", lambda a, b: renamed.append((Path(a).read_text(), b)) or real(a, b))
    gpu_check.write_record(path, "new")
    assert renamed == [("old\n\nnew\n", path)] and path.read_text() == "old\n\nnew\n"


@pytest.fixture
def fake_gpu(monkeypatch):
    """CuPy as a GPU machine's would answer (an H100, CUDA 13.0 driver, 13.2 runtime), and nvidia-smi's driver."""
    runtime = types.SimpleNamespace(
        getDeviceProperties=lambda index: {"name": b"NVIDIA H100 80GB HBM3", "totalGlobalMem": 85_520_809_984},
        driverGetVersion=lambda: 13000, runtimeGetVersion=lambda: 13020)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime)))
    monkeypatch.setattr(gpu_check, "nvidia_smi_driver", lambda index: "driver 580.159.04")


def outcome(name: str, status: int | None):
    return gpu_check.Outcome(gpu_check.Part(name, f"the {name} part", [], 50), status, 12.3, ["a line"])


@pytest.mark.parametrize("jit_status, says", [
    (0, "Compiled replays matched eager on this GPU: yes. `REPLAY_CHECKED` in tinygrad_block/cuda.py may now be "
        "set True, in the commit that keeps this record."),
    (1, "Compiled replays matched eager on this GPU: no."),
    (None, "Compiled replays matched eager on this GPU: no."),           # stopped past its budget
])
def test_a_gpu_record_describes_the_machine_and_says_whether_replays_matched(fake_gpu, monkeypatch, jit_status, says):
    monkeypatch.setattr(gpu_check.cuda, "REPLAY_CHECKED", False)       # as before the first record
    text = gpu_check.record([outcome("tests", 0), outcome("jit", jit_status)], "cuda", ["--parts", "tests", "jit"],
                            61.2)
    lines = text.splitlines()
    assert lines[0] == gpu_check.BEGIN and lines[-1] == gpu_check.END
    assert re.fullmatch(r"## The record: NVIDIA H100 80GB HBM3, \d{4}-\d\d-\d\d", lines[1])
    passed = 1 + (jit_status == 0)
    assert f"`python tools/gpu_check.py --parts tests jit`: {passed} of 2 parts passed in 61 s." in lines
    assert "| GPU | NVIDIA H100 80GB HBM3, 80 GiB (cuda) |" in lines                 # 85,520,809,984 B / 2^30
    assert "| driver | driver 580.159.04, CUDA 13.0; CUDA runtime 13.2 |" in lines
    assert any(re.fullmatch(r"\| software \| Python [\d.]+, numpy [\d.]+, CuPy .*, torch .*, transformers .* \|", line)
               for line in lines)
    assert says in lines
    assert "| tests | the tests part | passed | 12 (50) |" in lines


def test_a_gpu_record_without_the_jit_part_says_nothing_of_replays(fake_gpu):
    assert "Compiled replays" not in gpu_check.record([outcome("block", 0)], "cuda", [], 1.0)


# ---------------------------------------------------------------- every part, rehearsed on the CPU
@pytest.mark.slow
def test_the_cpu_rehearsal_runs_every_part_and_writes_their_tables(tmp_path):
    out = tmp_path / "gpu.md"
    out.write_text(DOCS.read_text())
    result = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--out", str(out)], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    progress = [line for line in result.stdout.splitlines() if re.match(r"\[\d/5\] ", line)]
    assert [line.split(":")[0] for line in progress[1::2]] == \
        ["[1/5] tests", "[2/5] jit", "[3/5] block", "[4/5] train", "[5/5] generate"]
    assert all(": passed in " in line for line in progress[1::2])
    text = out.read_text()
    assert outside_markers(text) == outside_markers(DOCS.read_text())
    record = between_markers(text)
    assert "5 of 5 parts passed" in record and "| device | cpu: no GPU" in record
    assert re.search(r"\n32 skipped, \d+ deselected in ", record)            # the cuda tests of test_devices.py
    checks = re.findall(r"\n(block forward\+backward|training steps \(AdamW, 6\)|decode steps \(greedy, static KV "
                        r"cache\)) +(float\d\d) +(\d+) +(\S+) +\de-0\d +0 +(yes|no) +(\S+)(?=\n)", record)
    assert len(checks) == 6 and {c[1] for c in checks} == {"float32", "float16"}
    assert all(int(replays) > 0 and (diff, same, ok) == ("0", "yes", "ok") for _, _, replays, diff, same, ok in checks)
    for engine in ("autograd", "compiled", "pytorch"):
        for dtype in ("float32", "float16"):
            assert re.search(rf"\ntiny +{dtype} both +{engine} +[\d.]+", record), (engine, dtype)
    loss = re.search(r"first step's loss: compiled ([\d.]+)  eager ([\d.]+)  torch ([\d.]+)", record)
    assert loss and loss[1] == loss[2] and abs(float(loss[2]) - float(loss[3])) < 1e-5
    assert re.search(r"\nd32-l1 .* all\n", record)                             # the same tokens as transformers
    assert "%|" not in record                                                   # no progress bars
