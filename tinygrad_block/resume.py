"""A training run's state on disk, so a long run can stop and go on where it stopped, bit for bit: the weights
(the Hugging Face layout, loadable by `generate`), the optimizer's tensors (AdamW's moments, in safetensors) and
step counts (ints in state.json, though the optimizer now holds them in 0-d tensors: the format is unchanged, so
older checkpoints load), the schedule's position, the generator's state (which fixes the data order from here on),
the history, and the settings the run was started with.

    checkpoints/step-000120/   model.safetensors, config.json, optimizer.safetensors, state.json
    checkpoints/latest.json    {"step": 120, "folder": "step-000120"}: renamed into place after the folder is whole

A kill at any moment leaves `latest.json` naming a complete checkpoint (or no checkpoint yet); the two newest
folders are kept, older ones removed.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from .hf_folder import inside, read_array, read_header, read_json_object, readable, write_safetensors, write_text
from .tensor import Tensor

KEEP = 2                     # checkpoints kept: the newest and the one before (in case the newest is being read)
COUNTS = ("step",)           # optimizer state kept as ints in state.json (0-d float64 tensors in the optimizer)


def save_checkpoint(folder: Path, step: int, model, optimizer, schedule, generator, history, settings: dict) -> Path:
    """Write step-<step>/ whole, then point latest.json at it; returns the checkpoint's folder."""
    folder = Path(folder)
    here = folder / f"step-{step:06d}"
    if here.exists():
        shutil.rmtree(here)
    model.save_pretrained(here)
    names = [n for n, _ in model.named_parameters()]
    tensors, counts = {}, {}
    for name, state in zip(names, optimizer.state):
        for key, value in state.items():
            if key in COUNTS:
                counts[f"{key}.{name}"] = int(value.item())  # AdamW's step: a 0-d tensor, saved as an int
            else:
                tensors[f"{key}.{name}"] = value.numpy()     # made contiguous as it is written
    write_safetensors(here / "optimizer.safetensors", tensors, {"format": "tinygrad_block"})
    state = {"step": step, "settings": settings, "optimizer": {"type": type(optimizer).__name__, "counts": counts},
             "schedule_t": schedule.t, "lr": optimizer.lr, "generator": generator.state if generator else None,
             "history": history.as_dict()}
    write_text(here / "state.json", json.dumps(state))
    write_text(folder / "latest.json", json.dumps({"step": step, "folder": here.name}))
    for old in sorted(p for p in folder.glob("step-*") if p.is_dir() and p != here)[:-(KEEP - 1) or None]:
        shutil.rmtree(old, ignore_errors=True)
    return here


def latest(folder: Path) -> Path | None:
    """The newest whole checkpoint in `folder` (None: there is none yet)."""
    folder = Path(folder)
    pointer = folder / "latest.json"
    if not folder.is_dir() or not readable(pointer, "resume"):
        return None
    entry = read_json_object(pointer, "resume")
    here = inside(folder, entry.get("folder"), "resume", "latest.json")
    if not (here / "state.json").is_file():
        raise FileNotFoundError(f"resume: {pointer} names {here.name}, which holds no state.json")
    return here


def load_checkpoint(here: Path, model, optimizer, schedule, generator, history, settings: dict) -> int:
    """Put the run in `here` back: weights, optimizer state, schedule, generator, history. The settings it was
    started with must be these (a different schedule or batch would not continue the same run). Returns its step."""
    from .nn import LM
    state = read_json_object(here / "state.json", "resume")
    differ = {k: (state["settings"].get(k), v) for k, v in settings.items() if state["settings"].get(k) != v}
    if differ:
        said = ", ".join(f"{k}: {old!r} then, {new!r} now" for k, (old, new) in differ.items())
        raise ValueError(f"resume: {here} was saved by a run with other settings ({said}); resume with the same "
                         "ones, or start a new run in another folder")
    if generator is not None and (state["generator"] or {}).get("seed") != generator.seed:
        raise ValueError(f"resume: {here} was saved by a run with seed {(state['generator'] or {}).get('seed')}, "
                         f"not {generator.seed}; resume with the same seed")
    saved = LM.from_pretrained(here, dtype=model.parameters()[0].dtype, device=model.parameters()[0].device)
    if saved.cfg != model.cfg:
        raise ValueError(f"resume: {here} holds a model of another shape ({saved.cfg}); expected {model.cfg}")
    model.load_state_dict(saved.state_dict())
    _load_optimizer(here, model, optimizer, state["optimizer"])
    schedule.t, optimizer.lr = state["schedule_t"], state["lr"]
    if generator is not None:
        generator.state = state["generator"]
    history.restore(state["history"])
    return state["step"]


def _load_optimizer(here: Path, model, optimizer, saved: dict) -> None:
    if saved["type"] != type(optimizer).__name__:
        raise ValueError(f"resume: {here} holds the state of {saved['type']}, not {type(optimizer).__name__}")
    entries = read_header(here / "optimizer.safetensors", "resume")
    for (name, p), state in zip(model.named_parameters(), optimizer.state):
        values = {}
        for key, entry in ((k.split(".", 1)[0], e) for k, e in entries.items() if k.split(".", 1)[1] == name):
            if entry.shape != p.shape:
                raise ValueError(f"resume: {here}: {key} of {name} is {entry.shape}, the parameter {p.shape}")
            values[key] = Tensor(read_array(entry, p.dtype, "resume"), dtype=p.dtype, device=p.device)
        for key, count in ((k.split(".", 1)[0], v) for k, v in saved["counts"].items() if k.split(".", 1)[1] == name):
            if key not in COUNTS or not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise ValueError(f"resume: {here}: the count {key} of {name} is {count!r}; expected step, an int >= 0")
            values[key] = optimizer.scalar(count)
        _rebind_state(state, values)


def _rebind_state(state: dict, values: dict) -> None:
    """state holds `values`: a tensor it had already is kept and rebound (a compiled step keeps reading it)."""
    for key in [k for k in state if k not in values]:
        del state[key]
    for key, value in values.items():
        if isinstance(state.get(key), Tensor):
            state[key].data = value.data
        else:
            state[key] = value
