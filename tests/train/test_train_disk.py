"""When the disk says no (train.py, resume.py, files.py's writing room): a full disk, a file-size limit and a
read-only folder during a save each stop the run with one sentence naming the step and the last whole checkpoint
(SaveFailed, an OSError; status 1 from the command line), nothing half-written is left, and that checkpoint still
resumes, ending bit for bit where the uninterrupted run ends. One training at a time per folder: a second is
refused, naming the first's process; a killed one leaves no lock, and its temporaries are cleared away by the next.
A malformed state.json is refused in one line naming the field.

The disks are real: a tmpfs mounted small (this needs root with CAP_SYS_ADMIN: skipped, saying so, elsewhere), a
file-size limit set with setrlimit(RLIMIT_FSIZE) (SIGXFSZ ignored, so a write fails with EFBIG instead of killing
the process), and a read-only mount (root: chmod does not stop root) or a chmod 0o555 folder (anyone else)."""
from __future__ import annotations

import errno
import json
import os
import resource
import select
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block import train as train_mod
from tinygrad_block.data import induction_batch
from tinygrad_block.files import TEMPORARY, FolderInUse, hold_folder, remove_stale, temporary, write_text
from tinygrad_block.resume import latest

CFG = nn.BlockConfig(d_model=32, n_heads=2, n_kv_heads=2, d_ff=64, n_layers=1, vocab_size=16, max_seq_len=32)
STEPS, EVERY = 8, 2
CLI = [sys.executable, "-m", "tinygrad_block", "train", "induction", "--no-plots", "--steps", "6", "--save-every",
       "2"]
ENV = os.environ | {"PYTHONPATH": str(ROOT)}


# ---------------------------------------------------------------- helpers: runs, disks
def run(folder: Path, *, resume: bool = False, before_batch=None):
    """A small run (seed 0) saving every EVERY steps into `folder`; before_batch(call) runs as batch `call` (1, 2,
    ...) is drawn, before its step."""
    g = tb.Generator(0)
    model = nn.LM(CFG, generator=g)
    calls = [0]

    def batches():
        calls[0] += 1
        if before_batch is not None:
            before_batch(calls[0])
        return induction_batch(8, 5, CFG.vocab_size, g)
    history = train_mod.train(model, batches, train_mod.Schedule(steps=STEPS, lr=3e-3, warmup=2), progress=False,
                              checkpoints=folder, save_every=EVERY, resume=resume, generator=g, jit=False)
    return model, history


def weights(model) -> dict:
    return {n: p.numpy() for n, p in model.named_parameters()}


def leftovers(folder: Path) -> list[Path]:
    """Every temporary (.<name>.<pid>.tmp) anywhere under `folder`."""
    return [p for p in folder.rglob("*") if TEMPORARY.fullmatch(p.name)]


def mount_tmpfs(folder: Path, size: str) -> None:
    """A tmpfs of `size` mounted on `folder`, or a skip saying why it cannot be."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("a small filesystem is mounted with tmpfs, which needs root; this user is not")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs CAP_SYS_ADMIN): {done.stderr.strip()}")


def remount(folder: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(folder)], check=True, capture_output=True)


@pytest.fixture
def small_disk(tmp_path):
    """mount(size) -> a folder on a fresh tmpfs of that size, unmounted after the test."""
    mounted = []

    def mount(size: str) -> Path:
        folder = tmp_path / f"disk{len(mounted)}"
        mount_tmpfs(folder, size)
        mounted.append(folder)
        return folder
    yield mount
    for folder in mounted:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def last_line(err: str) -> str:
    return [line for line in err.replace("\r", "\n").splitlines() if line.strip()][-1]


def limit_file_size(limit: int):
    """preexec_fn: files written by the child stop at `limit` bytes with EFBIG (SIGXFSZ ignored, not fatal)."""
    def limit_it():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    return limit_it


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """The uninterrupted run: its weights and losses, the oracle a resumed run must equal bit for bit."""
    model, history = run(tmp_path_factory.mktemp("whole") / "checkpoints")
    return weights(model), history.losses


def assert_resumes_to_the_whole_run(folder: Path, whole) -> None:
    model, history = run(folder, resume=True)
    assert history.losses == whole[1]
    for name, w in whole[0].items():
        assert np.array_equal(weights(model)[name], w), name


# ---------------------------------------------------------------- a save that fails, from Python
def limit_files(limit: int):
    """This process's files stop at `limit` bytes (EFBIG; SIGXFSZ ignored); returns what puts the limits back."""
    before, handler = resource.getrlimit(resource.RLIMIT_FSIZE), signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, before[1]))

    def undo():
        resource.setrlimit(resource.RLIMIT_FSIZE, before)
        signal.signal(signal.SIGXFSZ, handler)
    return undo


def fill(disk: Path, leave: int):
    """Fill the disk but `leave` bytes with a ballast file, as another program could; returns what frees it."""
    ballast = disk / "ballast"
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    ballast.write_bytes(b"\0" * (free - leave))
    return ballast.unlink


def read_only(disk: Path, folder: Path):
    """Writing in `folder` refused from now on; returns the undo. Root writes through permissions, so for root the
    disk it lies on is remounted read-only; anyone else gets chmod 0o555."""
    if os.geteuid() == 0:
        remount(disk, "ro")
        return lambda: remount(disk, "rw")
    folder.chmod(0o555)
    return lambda: folder.chmod(0o755)


def saying_no(how: str, tmp_path: Path, small_disk) -> tuple[Path, object]:
    """(the checkpoints folder, say_no): after say_no(), writing there fails `how`; say_no() returns the undo.
    Sizes: the weights are 45 kB, AdamW's moments 90 kB."""
    if how == "a full disk":
        disk = small_disk("4m")
        return disk / "checkpoints", lambda: fill(disk, leave=60_000)
    if how == "a file-size limit":
        return tmp_path / "checkpoints", lambda: limit_files(60_000)
    disk = small_disk("4m") if os.geteuid() == 0 else tmp_path
    return disk / "checkpoints", lambda: read_only(disk, disk / "checkpoints")


@pytest.mark.parametrize("how, code", [("a full disk", errno.ENOSPC), ("a file-size limit", errno.EFBIG),
                                       ("a read-only folder", errno.EROFS if os.geteuid() == 0 else errno.EACCES)])
def test_a_save_that_fails_stops_the_run_naming_the_step_and_the_last_whole_checkpoint(tmp_path, small_disk, whole,
                                                                                       how, code):
    """Saves every 2 steps; the disk says no from step 5 on, so the save of step 6 fails; step 4's resumes."""
    folder, say_no = saying_no(how, tmp_path, small_disk)
    undo = []
    try:
        with pytest.raises(train_mod.SaveFailed) as failed:
            run(folder, before_batch=lambda call: undo.append(say_no()) if call == 5 else None)
    finally:
        for put_back in undo:
            put_back()
    said = str(failed.value)
    assert isinstance(failed.value, OSError) and failed.value.errno == code, said
    assert said.startswith(f"train: step 6: cannot save the checkpoint: {os.strerror(code)} ({folder / 'step-000006'}")
    assert said.endswith(f"the run stopped; the last whole checkpoint, step 4, is {folder / 'step-000004'}")
    assert failed.value.kept == folder / "step-000004"
    assert latest(folder) == folder / "step-000004" and not (folder / "step-000006").exists()
    assert leftovers(folder) == []                                     # the half-written step 6 is gone
    assert_resumes_to_the_whole_run(folder, whole)


# ---------------------------------------------------------------- the command line
@pytest.mark.slow
def test_the_command_line_says_one_line_and_status_1_when_the_disk_fills(small_disk, tmp_path):
    """`train induction` on a 1.6 MB disk: step 2's checkpoint (1 MB) fits, step 4's does not. Space made, --resume
    ends on the same weights as a run on a roomy disk."""
    disk = small_disk("1600k")
    full = subprocess.run(CLI + ["--out", str(disk / "run")], env=ENV, capture_output=True, text=True)
    line = last_line(full.stderr)
    assert full.returncode == 1 and "Traceback" not in full.stderr, full.stderr
    assert line.startswith("python -m tinygrad_block train: step 4: cannot save the checkpoint: No space left on "
                           f"device ({disk / 'run' / 'checkpoints' / 'step-000004' / 'optimizer.safetensors'})")
    assert f"the last whole checkpoint, step 2, is {disk / 'run' / 'checkpoints' / 'step-000002'}" in line
    assert line.endswith("--resume") and leftovers(disk) == []
    remount(disk, "size=8m")
    again = subprocess.run(CLI + ["--out", str(disk / "run"), "--resume"], env=ENV, capture_output=True, text=True)
    roomy = subprocess.run(CLI + ["--out", str(tmp_path / "roomy")], env=ENV, capture_output=True, text=True)
    assert again.returncode == roomy.returncode == 1, again.stderr    # 1: 6 steps miss the 99 % threshold
    assert (disk / "run" / "checkpoint" / "model.safetensors").read_bytes() == \
        (tmp_path / "roomy" / "checkpoint" / "model.safetensors").read_bytes()


@pytest.mark.slow
def test_the_command_line_says_one_line_when_a_file_would_pass_the_size_limit(tmp_path):
    """RLIMIT_FSIZE of 500 kB: the weights (347 kB) fit, AdamW's moments (695 kB) do not, at the first save."""
    out = tmp_path / "run"
    done = subprocess.run(CLI + ["--out", str(out)], env=ENV, capture_output=True, text=True,
                          preexec_fn=limit_file_size(500_000))
    line = last_line(done.stderr)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert line == (f"python -m tinygrad_block train: step 2: cannot save the checkpoint: File too large "
                    f"({out / 'checkpoints' / 'step-000002' / 'optimizer.safetensors'}); the run stopped; no "
                    "checkpoint was saved before it")
    assert latest(out / "checkpoints") is None and leftovers(out) == []
    assert list((out / "checkpoints").glob("step-*")) == []


# ---------------------------------------------------------------- one writer per folder; what a killed one left
MID_SAVE = """
import sys, time
from tinygrad_block import cli, safetensors_file
real = safetensors_file.write_atomic

def held(path, write):
    if path.name == "optimizer.safetensors" and path.parent.name.startswith(".step-000004."):
        def write_and_wait(f):
            write(f)
            f.flush()
            print("saving step 4", flush=True)
            time.sleep(600)
        return real(path, write_and_wait)
    return real(path, write)
safetensors_file.write_atomic = held
sys.exit(cli.main(sys.argv[1:]))
"""


def wait_for(stream, text: str, timeout: float = 120) -> None:
    ready, _, _ = select.select([stream], [], [], timeout)
    assert ready and text in stream.readline(), f"no {text!r} within {timeout} s"


@pytest.mark.slow
def test_a_second_training_is_refused_while_the_first_holds_the_folder_and_a_killed_one_is_cleared_away(tmp_path):
    """The first run is held in the middle of saving step 4 (its moments written to a temporary, not yet renamed);
    a second on the same --out is refused naming the first's pid; kill -9 the first: no stale lock, and the next
    run (--resume, from step 2) removes the killed save's temporaries and ends as an uninterrupted run."""
    out = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-c", MID_SAVE, *CLI[3:], "--out", str(out)], env=ENV, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        wait_for(first.stdout, "saving step 4")
        killed_save = temporary(out / "checkpoints" / "step-000004", first.pid)
        moments = temporary(killed_save / "optimizer.safetensors", first.pid)
        assert moments.stat().st_size > 600_000                        # model-sized, on disk
        second = subprocess.run(CLI + ["--out", str(out)], env=ENV, capture_output=True, text=True, timeout=300)
        assert second.returncode == 2 and second.stderr.count("\n") == 1 and "Traceback" not in second.stderr
        assert second.stderr == (f"python -m tinygrad_block train: error: --out {out}: another training run "
                                 f"(process {first.pid}) is writing there; wait for it to end, or choose another "
                                 "--out\n")
    finally:
        first.kill()
        first.wait()
    assert killed_save.is_dir() and latest(out / "checkpoints") == out / "checkpoints" / "step-000002"
    again = subprocess.run(CLI + ["--out", str(out), "--resume"], env=ENV, capture_output=True, text=True)
    uninterrupted = subprocess.run(CLI + ["--out", str(tmp_path / "whole")], env=ENV, capture_output=True, text=True)
    assert again.returncode == uninterrupted.returncode == 1, again.stderr   # 1: 6 steps miss the threshold
    assert leftovers(out) == [] and not killed_save.exists()
    assert (out / "checkpoint" / "model.safetensors").read_bytes() == \
        (tmp_path / "whole" / "checkpoint" / "model.safetensors").read_bytes()


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()                                                       # gone, and reaped
    return child.pid


def test_a_held_folder_refuses_another_holder_and_is_free_again_after(tmp_path):
    with hold_folder(tmp_path, "train"):
        with pytest.raises(FolderInUse) as busy, hold_folder(tmp_path, "train"):
            pass
        assert busy.value.pid == os.getpid() and busy.value.errno == errno.EBUSY
        assert str(busy.value) == (f"train: {tmp_path} is in use by process {os.getpid()}, which is writing there; "
                                   "wait for it to end, or choose another folder")
    with hold_folder(tmp_path, "train"):                               # let go: taken again
        assert (tmp_path / ".lock").read_text() == f"{os.getpid()}\n"


def test_only_a_dead_writers_temporaries_are_removed(tmp_path):
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])   # a live writer, not this one
    try:
        only_the_dead_go(tmp_path, gone=dead_pid(), alive=writer.pid)
    finally:
        writer.kill()
        writer.wait()


def only_the_dead_go(tmp_path: Path, gone: int, alive: int) -> None:
    (tmp_path / "run").mkdir()
    dead_file = temporary(tmp_path / "run" / "history.json", gone)
    live_file = temporary(tmp_path / "run" / "history.json", alive)
    dead_folder = temporary(tmp_path / "run" / "step-000004", gone)
    dead_other = temporary(tmp_path / "run" / "sample.txt", gone)
    for f in (dead_file, live_file, dead_other):
        f.write_bytes(b"x" * 1000)
    dead_folder.mkdir()
    (dead_folder / "model.safetensors").write_bytes(b"x")
    write_text(tmp_path / "run" / "history.json", "{}")                # a write clears its own file's dead ones
    assert not dead_file.exists() and live_file.exists() and dead_other.exists() and dead_folder.exists()
    with hold_folder(tmp_path, "train"):                               # a start clears the folder's (and its folders')
        assert not dead_other.exists() and not dead_folder.exists() and live_file.exists()
    assert remove_stale(tmp_path / "run") == [] and live_file.exists()


def test_a_temporary_name_fits_the_system_limit_and_names_its_writer(tmp_path):
    long = tmp_path / ("é" * 127 + ".dot")                             # 258 bytes: over the limit already
    name = temporary(long, 4_194_304).name
    assert len(os.fsencode(name)) <= 255 and name.endswith(".4194304.tmp") and name.startswith(".éé")
    assert TEMPORARY.fullmatch(name)["pid"] == "4194304"


# ---------------------------------------------------------------- a malformed state.json
def corrupt(state: dict, change: str) -> None:
    if change == "no history":
        del state["history"]
    elif change == "a loss short":
        state["history"]["losses"].pop()
    elif change == "a string for the step":
        state["step"] = "4"
    elif change == "a count that is no parameter's":
        state["optimizer"]["counts"]["step.nothing"] = 4
    elif change == "a count without its parameter":
        state["optimizer"]["counts"] = {"step": 4}
    elif change == "an evaluation after the step":
        state["history"]["evals"] = [[9, {"loss": 1.0}]]


@pytest.mark.parametrize("change, said", [
    ("no history", "has no history; expected an object"),
    ("a loss short", "history.losses is [")  ,
    ("a string for the step", "step is '4'; expected an int >= 1"),
    ("a count that is no parameter's", "state.json's optimizer.counts holds 'step.nothing'; expected "
                                       "<state>.<parameter name>"),
    ("a count without its parameter", "optimizer.counts holds 'step'"),
    ("an evaluation after the step", "history.evals is [[9, {'loss': 1.0}]]; expected a list of [step <= 4"),
])
def test_a_malformed_state_json_is_refused_in_one_line_naming_the_file_and_what_was_expected(tmp_path, command_line,
                                                                                           change, said):
    out = tmp_path / "run"
    argv = ("train", "induction", "--steps", "4", "--save-every", "4", "--no-plots", "--eager", "--out", out)
    status, _, _ = command_line.status(*argv)
    assert status == 1                                                 # 4 steps miss the threshold
    path = out / "checkpoints" / "step-000004" / "state.json"
    state = json.loads(path.read_text())
    corrupt(state, change)
    path.write_text(json.dumps(state))
    err = command_line.mistake(*argv, "--resume")
    assert err.count("\n") == 1 and err.startswith("python -m tinygrad_block train: error: resume: ")
    assert str(path.parent) in err and said in err, err
    if change == "a loss short":
        assert "expected a list of 4 finite numbers (one per step)" in err
