"""A training run's state on disk, so a long run can stop and go on where it stopped, bit for bit: the weights
(the Hugging Face layout, loadable by `generate`), the optimizer's tensors (AdamW's moments, in safetensors) and
step counts (ints in state.json; the optimizer holds them in 0-d tensors), the schedule's position, the
generator's state (which fixes the data order from here on), the history, and the settings the run was started
with.

    checkpoints/step-000120/   model.safetensors, config.json, optimizer.safetensors, state.json
    checkpoints/latest.json    {"step": 120, "folder": "step-000120"}: renamed into place after the folder is whole

A checkpoint is written whole under a temporary name (.step-000120.<pid>.tmp) and renamed into place, so a kill at
any moment leaves `latest.json` naming a complete checkpoint (or no checkpoint yet), and a failed save (a full
disk) leaves nothing half-written; what a killed writer left is removed by the next save. The two newest folders
are kept, older ones removed. Reading one back, state.json is checked whole (types, keys, sizes) before any of it
is used.
"""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from .files import inside, read_json_object, readable, remove_stale, rename_folder, temporary, write_text
from .safetensors_file import read_array, read_header, write_safetensors
from .tensor import Tensor

KEEP = 2                     # checkpoints kept: the newest and the one before (in case the newest is being read)
COUNTS = ("step",)           # optimizer state kept as ints in state.json (0-d float64 tensors in the optimizer)
STATE_KEYS = {"AdamW": {"m", "v", "step"}}    # what each parameter's state holds after its first update


def save_checkpoint(folder: Path, step: int, model, optimizer, schedule, generator, history, settings: dict) -> Path:
    """Write step-<step>/ whole under a temporary name, rename it into place, then point latest.json at it; returns
    the checkpoint's folder. A failure (a full disk, a file-size limit, a read-only folder) removes what it had
    written and raises the OSError, the folder as it was; the temporaries of writers that died go first."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    remove_stale(folder)
    here, tmp = folder / f"step-{step:06d}", temporary(folder / f"step-{step:06d}")
    try:
        _write_state(tmp, step, model, optimizer, schedule, generator, history, settings)
        rename_folder(tmp, here)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_text(folder / "latest.json", json.dumps({"step": step, "folder": here.name}))
    for old in sorted(p for p in folder.glob("step-*") if p.is_dir() and p != here)[:-(KEEP - 1) or None]:
        shutil.rmtree(old, ignore_errors=True)
    return here


def _write_state(here: Path, step: int, model, optimizer, schedule, generator, history, settings: dict) -> None:
    """The checkpoint's four files: the weights, the optimizer's tensors, and state.json."""
    shutil.rmtree(here, ignore_errors=True)
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
    """Put the run in `here` back: weights, optimizer state, schedule, generator, history. state.json is checked
    whole first (checked_state), and the settings it was started with must be these (a different schedule or batch
    would not continue the same run). Returns its step."""
    from .nn import LM
    state = checked_state(here / "state.json")
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
    values = _optimizer_values(here, model, optimizer, state["optimizer"])
    if generator is not None:
        _set_generator(here / "state.json", generator, state["generator"])
    model.load_state_dict(saved.state_dict())
    for slot, tensors in zip(optimizer.state, values):
        _rebind_state(slot, tensors)
    schedule.t, optimizer.lr = state["schedule_t"], state["lr"]
    history.restore(state["history"])
    return state["step"]


# ---------------------------------------------------------------- state.json, checked
def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _field(path: Path, where: dict, key: str, ok, expected: str, name: str | None = None):
    """where[key], if ok(it); else a ValueError naming the file, the field and what was `expected`."""
    name = name or key
    if key not in where:
        raise ValueError(f"resume: {path} has no {name}; expected {expected} (state.json as `train` writes it)")
    if not ok(where[key]):
        raise ValueError(f"resume: {path}: {name} is {where[key]!r:.80}; expected {expected}")
    return where[key]


def checked_state(path: Path) -> dict:
    """state.json, every field checked before any is used: its types, its ranges, and the sizes that follow from
    its step (a loss and a learning rate per step, the schedule at that step). A file that is not what `train`
    writes is a ValueError naming the file, the field and what was expected."""
    state = read_json_object(path, "resume")
    step = _field(path, state, "step", lambda v: _is_count(v) and v >= 1, "an int >= 1")
    _field(path, state, "settings", lambda v: isinstance(v, dict), "an object: the run's settings")
    opt = _field(path, state, "optimizer", lambda v: isinstance(v, dict), "an object {type, counts}")
    _field(path, opt, "type", lambda v: isinstance(v, str), "the optimizer's class name", "optimizer.type")
    _field(path, opt, "counts", lambda v: isinstance(v, dict) and all(map(_is_count, v.values())),
           "an object of ints >= 0 (AdamW's step counts)", "optimizer.counts")
    _field(path, state, "schedule_t", lambda v: v == step and _is_count(v), f"the step, {step}")
    _field(path, state, "lr", _is_number, "a finite number >= 0")
    _field(path, state, "generator", lambda v: v is None or (isinstance(v, dict) and _is_count(v.get("seed"))
                                                             and isinstance(v.get("bit_generator"), dict)),
           "null or {seed: an int >= 0, bit_generator: {...}}")
    _checked_history(path, _field(path, state, "history", lambda v: isinstance(v, dict), "an object"), step)
    return state


def _checked_history(path: Path, history: dict, step: int) -> None:
    """A loss and a learning rate per step, evaluations as [step, {metric: number}] pairs, the totals >= 0."""
    per_step = f"a list of {step} finite numbers (one per step)"
    for key in ("losses", "lrs"):
        _field(path, history, key, lambda v: isinstance(v, list) and len(v) == step and
               all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v),
               per_step, f"history.{key}")
    _field(path, history, "evals", lambda v: isinstance(v, list) and all(
        isinstance(e, list) and len(e) == 2 and _is_count(e[0]) and e[0] <= step and isinstance(e[1], dict)
        for e in v), f"a list of [step <= {step}, {{metric: value}}] pairs", "history.evals")
    _field(path, history, "tokens", _is_count, "an int >= 0", "history.tokens")
    _field(path, history, "seconds", _is_number, "a finite number >= 0", "history.seconds")
    if "replayed" in history:                                        # absent from checkpoints older than jit
        _field(path, history, "replayed", lambda v: _is_count(v) and v <= step, f"an int 0..{step}",
               "history.replayed")


def _set_generator(path: Path, generator, saved: dict) -> None:
    try:
        generator.state = saved
    except ValueError:
        raise ValueError(f"resume: {path}: generator.bit_generator is {saved['bit_generator']!r:.80}; expected "
                         "the state of numpy's PCG64, as Generator.state gives it") from None


# ---------------------------------------------------------------- the optimizer's state
def _split(here: Path, key: str, names: set, where: str) -> tuple[str, str]:
    """'m.blocks.0.attn.q_proj.weight' -> ('m', 'blocks.0.attn.q_proj.weight'), the parameter one of `names`."""
    kind, _, name = key.partition(".")
    if name not in names:
        raise ValueError(f"resume: {here}: {where} holds {key!r:.80}; expected <state>.<parameter name>, the "
                         "parameter one of the model's")
    return kind, name


def _optimizer_values(here: Path, model, optimizer, saved: dict) -> list[dict]:
    """Per parameter, its optimizer state as tensors {key: Tensor}, from optimizer.safetensors (the tensors) and
    state.json's counts; each shape checked against its parameter, and (for the optimizers in STATE_KEYS) every
    parameter holding the whole state. Nothing is put in the optimizer here."""
    if saved["type"] != type(optimizer).__name__:
        raise ValueError(f"resume: {here} holds the state of {saved['type']}, not {type(optimizer).__name__}")
    params = dict(model.named_parameters())
    values = {name: {} for name in params}
    for key, entry in read_header(here / "optimizer.safetensors", "resume").items():
        kind, name = _split(here, key, set(params), "optimizer.safetensors")
        p = params[name]
        if entry.shape != p.shape:
            raise ValueError(f"resume: {here}: {kind} of {name} is {entry.shape}, the parameter {p.shape}")
        values[name][kind] = Tensor(read_array(entry, p.dtype, "resume"), dtype=p.dtype, device=p.device)
    for key, count in saved["counts"].items():
        kind, name = _split(here, key, set(params), "state.json's optimizer.counts")
        if kind not in COUNTS:
            raise ValueError(f"resume: {here}: the count {key!r:.80}; expected {', '.join(COUNTS)}.<parameter>")
        values[name][kind] = optimizer.scalar(count)
    need = STATE_KEYS.get(saved["type"])
    for name, got in values.items():
        if need is not None and set(got) != need:
            raise ValueError(f"resume: {here}: the optimizer state of {name} holds {sorted(got)}; {saved['type']} "
                             f"keeps {sorted(need)} for every parameter")
    return list(values.values())


def _rebind_state(state: dict, values: dict) -> None:
    """state holds `values`: a tensor it had already is kept and rebound (a compiled step keeps reading it)."""
    for key in [k for k in state if k not in values]:
        del state[key]
    for key, value in values.items():
        if isinstance(state.get(key), Tensor):
            state[key].assign(value)
        else:
            state[key] = value
