"""Runs you can trust (train.py, resume.py): a run stopped by Ctrl-C (a real SIGINT, at a step that is no multiple of
the save interval) and resumed ends bit for bit where the uninterrupted run ends, compiled (the default) and eager,
from Python and from the command line; a loss or gradient norm that stops being finite stops the run at that step,
naming it, the step undone and the last good checkpoint untouched, compiled and eager; a checkpoint is whole or not
pointed at; a checkpoint written before the optimizer kept its step count in a tensor still resumes."""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, msg

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block import train as train_mod
from tinygrad_block.data import induction_batch
from tinygrad_block.optim import AdamW, WarmupCosine
from tinygrad_block.safetensors_file import read_header
from tinygrad_block.resume import latest, load_checkpoint

CFG = nn.BlockConfig(d_model=32, n_heads=2, n_kv_heads=2, d_ff=64, n_layers=1, vocab_size=16, max_seq_len=32)
STEPS, EVERY = 23, 5


ENGINES = {"compiled": {}, "eager": {"jit": False}}          # train's keyword arguments


def run(folder: Path | None, *, resume: bool = False, interrupt_at: int | None = None, before_batch=None,
        **engine):
    """The same small run each time (seed 0): model, batches and generator made afresh, as a new process would.
    before_batch(call, model), when given, runs as each batch is drawn (call 1, 2, ...), before its step."""
    g = tb.Generator(0)
    model = nn.LM(CFG, generator=g)
    calls = [0]

    def batches():
        calls[0] += 1
        if interrupt_at is not None and calls[0] == interrupt_at:
            os.kill(os.getpid(), signal.SIGINT)                  # Ctrl-C, delivered while this step runs
        if before_batch is not None:
            before_batch(calls[0], model)
        return induction_batch(8, 5, CFG.vocab_size, g)
    history = train_mod.train(model, batches, train_mod.Schedule(steps=STEPS, lr=3e-3, warmup=3, lr_min=3e-4),
                              progress=False, checkpoints=folder, save_every=EVERY, resume=resume, generator=g,
                              evaluate=lambda m: {"loss": 1.0}, eval_every=10, **engine)
    return model, history


def poisoned_loss(monkeypatch) -> dict:
    """train's lm_loss made poisonable between steps, compiled or not: the loss times a 0-d switch "loss" (1; inf
    makes the loss infinite), plus the embedding's sum times a switch "grad" (0; 1e30 makes each element of the
    embedding's gradient about 1e30, so the global norm overflows float32 while the loss stays finite). The
    switches are tensors that live across steps, which a compiled step reads afresh at every replay: flipping one
    between steps poisons a replay as it poisons an eager step. At 1 and 0 they change no bit."""
    switch = {"loss": tb.tensor(1.0), "grad": tb.tensor(0.0)}
    real = train_mod.lm_loss

    def poisoned(model, ids, targets):
        w = model.embed.weight
        return real(model, ids, targets) * switch["loss"] + (w * switch["grad"]).sum()
    monkeypatch.setattr(train_mod, "lm_loss", poisoned)
    return switch


def flip(switch: dict, what: str) -> None:
    name, value = ("loss", float("inf")) if what == "the loss" else ("grad", 1e30)
    switch[name].data = tb.tensor(value).data


def weights(model) -> dict:
    return {n: p.numpy() for n, p in model.named_parameters()}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_run_stopped_by_ctrl_c_and_resumed_ends_bit_for_bit_as_the_uninterrupted_one(tmp_path, engine):
    whole, whole_history = run(tmp_path / "whole", **ENGINES[engine])
    with pytest.raises(train_mod.TrainingStopped) as stopped:
        run(tmp_path / "cut", interrupt_at=13, **ENGINES[engine])   # 13: no multiple of 5
    assert (stopped.value.step, stopped.value.steps) == (13, STEPS)
    assert stopped.value.path == tmp_path / "cut" / "step-000013"
    assert json.loads((tmp_path / "cut" / "latest.json").read_text()) == {"step": 13, "folder": "step-000013"}
    assert sorted(p.name for p in (tmp_path / "cut").glob("step-*")) == ["step-000010", "step-000013"]
    resumed, history = run(tmp_path / "cut", resume=True, **ENGINES[engine])
    assert history.engine == whole_history.engine == engine
    for name, w in weights(whole).items():
        assert np.array_equal(weights(resumed)[name], w), name
    assert history.losses == whole_history.losses and history.lrs == whole_history.lrs
    assert history.evals == whole_history.evals and len(history.losses) == STEPS
    assert history.tokens == whole_history.tokens


def test_resuming_checks_what_it_resumes(tmp_path):
    with pytest.raises(FileNotFoundError, match=msg("train", "nothing to resume", "holds no checkpoint")):
        run(tmp_path / "empty", resume=True)
    run(tmp_path / "done")
    g = tb.Generator(1)                                          # another seed: another run
    with pytest.raises(ValueError, match=msg("resume", "seed 0, not 1")):
        train_mod.train(nn.LM(CFG, generator=g), lambda: induction_batch(8, 5, 16, g),
                        train_mod.Schedule(steps=STEPS, lr=3e-3, warmup=3, lr_min=3e-4), progress=False,
                        checkpoints=tmp_path / "done", resume=True, generator=g)
    g = tb.Generator(0)
    with pytest.raises(ValueError, match=msg("resume", "steps: 23 then, 30 now")):
        train_mod.train(nn.LM(CFG, generator=g), lambda: induction_batch(8, 5, 16, g),
                        train_mod.Schedule(steps=30, lr=3e-3, warmup=3, lr_min=3e-4), progress=False,
                        checkpoints=tmp_path / "done", resume=True, generator=g)


@pytest.mark.filterwarnings("error::RuntimeWarning")             # train silences numpy's: it says which step
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("what", ["the loss", "the gradient norm"])
def test_a_diverging_run_stops_at_that_step_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch, what, engine):
    switch, before = poisoned_loss(monkeypatch), {}

    def poison_step_12(call, model):
        if call == 12:                                           # step 12 goes wrong (a replay, compiled)
            before.update(model=model, weights=weights(model))
            flip(switch, what)
    folder = tmp_path / "run"
    with pytest.raises(train_mod.TrainingDiverged) as diverged:
        run(folder, before_batch=poison_step_12, **ENGINES[engine])
    said = str(diverged.value)
    assert f"step 12: {what} is inf at learning rate 0.00" in said
    for name, w in weights(before["model"]).items():             # the step undone: step 11's weights
        assert np.array_equal(w, before["weights"][name]), name
    assert f"the last good checkpoint, step 10, is {folder / 'step-000010'}" in said
    assert latest(folder) == folder / "step-000010"             # nothing written over it
    good = nn.LM.from_pretrained(folder / "step-000010")
    assert all(np.isfinite(p.numpy()).all() for p in good.parameters())


def test_the_saved_format_is_unchanged_so_older_checkpoints_resume(tmp_path):
    """AdamW's step counts are saved as ints in state.json and its moments in optimizer.safetensors, as before the
    optimizer held its counts in 0-d tensors, so a checkpoint from then loads. Loading makes the step tensors
    again, and rebinds (does not replace) the state tensors an optimizer already has: a compiled step keeps them."""
    run(tmp_path / "run")
    here = latest(tmp_path / "run")
    state = json.loads((here / "state.json").read_text())
    counts = state["optimizer"]["counts"]
    assert len(counts) == len(list(nn.LM(CFG, generator=tb.Generator(0)).parameters()))
    assert all(k.startswith("step.") and type(v) is int and v == STEPS for k, v in counts.items())
    assert {k.split(".", 1)[0] for k in read_header(here / "optimizer.safetensors", "test")} == {"m", "v"}
    g = tb.Generator(0)
    model = nn.LM(CFG, generator=g)
    opt = AdamW(model.parameters(), 3e-3)
    model(induction_batch(8, 5, CFG.vocab_size, g)[0]).sum().backward()
    opt.step()                                                   # the state tensors exist
    made = [dict(s) for s in opt.state]
    load_checkpoint(here, model, opt, WarmupCosine(opt, 3e-3, 3, STEPS, 3e-4), g, train_mod.History(),
                    state["settings"])
    assert all(s[k] is t for s, m in zip(opt.state, made) for k, t in m.items())
    assert all(s["step"].item() == STEPS and s["step"].dtype == np.float64 for s in opt.state)


def test_a_checkpoint_is_pointed_at_only_once_it_is_whole(tmp_path, monkeypatch):
    run(tmp_path / "run")                                        # ends with step 23 saved
    from tinygrad_block import resume

    def broken(path, tensors, metadata):
        raise OSError("disk full")
    monkeypatch.setattr(resume, "write_safetensors", broken)
    g = tb.Generator(0)
    model = nn.LM(CFG, generator=g)
    opt = AdamW(model.parameters(), 1e-3)
    with pytest.raises(OSError, match="disk full"):
        resume.save_checkpoint(tmp_path / "run", 99, model, opt, WarmupCosine(opt, 1e-3, 0, 10), g,
                               train_mod.History(), {})
    assert latest(tmp_path / "run") == tmp_path / "run" / "step-000023"


@pytest.mark.slow
def test_ctrl_c_from_the_command_line_saves_says_one_line_and_resume_ends_identically(tmp_path):
    """A real SIGINT to a `train` subprocess at whatever step it has reached; --resume finishes; the final
    checkpoint is byte for byte the uninterrupted run's."""
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    base = [sys.executable, "-m", "tinygrad_block", "train", "induction", "--steps", "40", "--save-every", "7",
            "--no-plots"]
    whole_run = subprocess.run(base + ["--out", str(tmp_path / "whole")], env=env, capture_output=True, text=True)
    assert whole_run.returncode in (0, 1), whole_run.stderr        # 1: 40 steps miss the 99 % threshold
    child = subprocess.Popen(base + ["--out", str(tmp_path / "cut")], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not (tmp_path / "cut" / "checkpoints" / "latest.json").exists() and time.time() < deadline:
        time.sleep(0.05)                                         # the first save (step 7): it is training
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 130, err
    last = [line for line in err.replace("\r", "\n").splitlines() if line.strip()][-1]
    assert "Traceback" not in err and last.startswith("python -m tinygrad_block train: stopped at step ")
    assert "; saved to " in last and "--resume" in last
    again_printed = shlex.split(last.split("continue with: ")[1])         # to paste: this very Python, by its path
    assert Path(again_printed[0]).resolve() == Path(sys.executable).resolve()
    assert again_printed[1:5] == ["-m", "tinygrad_block", "train", "induction"] and again_printed[-1] == "--resume"
    step = int(last.split("stopped at step ")[1].split()[0])
    assert 7 <= step < 40
    again = subprocess.run(base + ["--out", str(tmp_path / "cut"), "--resume"], env=env, capture_output=True,
                           text=True)
    assert again.returncode == whole_run.returncode, again.stderr
    assert (tmp_path / "cut" / "checkpoint" / "model.safetensors").read_bytes() == \
        (tmp_path / "whole" / "checkpoint" / "model.safetensors").read_bytes()
    whole = json.loads((tmp_path / "whole" / "history.json").read_text())
    cut = json.loads((tmp_path / "cut" / "history.json").read_text())
    assert cut["losses"] == whole["losses"] and len(cut["losses"]) == 40 and cut["evals"] == whole["evals"]


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("engine", [[], ["--eager"]])
def test_the_command_line_says_one_line_when_a_run_diverges(tmp_path, monkeypatch, command_line, engine):
    switch, real, calls = poisoned_loss(monkeypatch), train_mod.induction_batch, [0]

    def batch(*args):                                            # call 1: the held-out set; call k + 1: step k
        calls[0] += 1
        if calls[0] == 10:
            flip(switch, "the loss")
        return real(*args)
    monkeypatch.setattr(train_mod, "induction_batch", batch)
    status, _, err = command_line.status("train", "induction", "--steps", "20", "--save-every", "4", "--no-plots",
                                         "--out", tmp_path / "run", *engine)
    last = [line for line in err.replace("\r", "\n").splitlines() if line.strip()][-1]
    assert status == 1 and "Traceback" not in err
    assert last.startswith("python -m tinygrad_block train: step 9: the loss is inf at learning rate ")
    assert f"the last good checkpoint, step 8, is {tmp_path / 'run' / 'checkpoints' / 'step-000008'}" in last
    assert not (tmp_path / "run" / "checkpoint").exists()          # no final model written from a diverged run
