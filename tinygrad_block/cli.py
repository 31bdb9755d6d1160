"""The command line, `python -m tinygrad_block <command>`: one table of commands (COMMANDS), each with its help,
its arguments, what it computes (report.py, tour.py, and the course's own lessons/course.py, loaded by path from a
clone) and how that prints (tables.py), and one place that runs them (`run`): the command's dict printed as lines,
or as JSON with `--json` (fields: docs/cli.md). A user's mistake ends in one line on stderr and exit status 2, never
a traceback.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from . import __version__, clone, report, tables
from .checkpoint_info import inspect_text
from .cuda import jit_by_default
from .device import get_backend
from .explorer_page import MissingAsset
from .graph import PNG_DPI
from .measure import STORAGE_BYTES
from .recordings import record_bytes
from .nn import PRESETS, BlockConfig, preset
from .nn.config import check_heads
from .nn.pretrained import read_config
from .quoted_figures import notes_for
from .shell import command as shell_command
from .units import human_bytes

PROG = "python -m tinygrad_block"
VALUES_LIMIT = 2 * 2**30  # bytes: --values runs the model for real, and the recording keeps every tensor it saw


class CommandError(Exception):
    """A user's mistake found while a command runs: printed as one line, exit status 2."""


class CommandStopped(Exception):
    """A command that ends early through no mistake of the user's (a training run diverged, or Ctrl-C): printed as
    one line, with its own exit status."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


# ---------------------------------------------------------------- argument types
def _integer(parse: Callable[[str], int | None], ok: Callable[[int], bool], expected: str):
    """An argparse type: the integer `parse` reads from the text, if ok(value), else an error saying what was
    `expected`."""
    def convert(text: str) -> int:
        value = parse(text)
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"{expected}, got {text!r}")
        return value
    return convert


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _digits(text: str) -> int | None:
    return _int_or_none(text) if text.isdigit() else None            # '-1', '+1', ' 1' are refused


_positive = _integer(_int_or_none, lambda v: v >= 1, "must be a positive integer")
_depth = _integer(_digits, lambda v: True, "must be an integer >= 0")
_seed = _integer(_digits, lambda v: True, "a seed is an integer >= 0")
_lesson_number = _integer(_digits, lambda v: 1 <= v <= 99, "a lesson number is 1 to 99 (e.g. 01)")


def _real(ok: Callable[[float], bool], expected: str):
    """An argparse type: a finite number for which ok(value) holds, else an error saying what was `expected`."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and ok(value)):
            raise argparse.ArgumentTypeError(f"{expected}, got {text!r}")
        return value
    return parse


_fraction = _real(lambda v: 0 < v <= 1, "must be a number in (0, 1] (0.4 is 40 %)")     # a utilisation
_positive_number = _real(lambda v: v > 0, "must be a number > 0")
_temperature = _real(lambda v: v >= 0, "a temperature is a number >= 0 (0: greedy)")
_top_p = _real(lambda v: 0 < v <= 1, "top-p is a probability in (0, 1] (1: every token)")


def _count(text: str) -> int:
    """argparse type: a whole number >= 1, written 1400000000000, 1_400_000_000_000 or 1.4e12."""
    try:
        value = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            number = 0.0
        value = int(number) if math.isfinite(number) and number == int(number) else 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1 (1.4e12 is accepted), got {text!r}")
    return value


def _token_ids(text: str) -> list[int]:
    """argparse type: token ids, separated by spaces or commas."""
    parts = text.replace(",", " ").split()
    if not parts or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"token ids are integers >= 0 separated by spaces or commas, got {text!r}")
    return [int(p) for p in parts]


def _preset(name: str) -> BlockConfig:
    """argparse type: a preset's config, or the config of a checkpoint's config.json (the file, or a folder holding
    it: no weights needed), or an error that lists the presets or says what is wrong with the file."""
    try:
        if name in PRESETS or not Path(name).exists():
            return preset(name)
        return read_config(name, "--preset")[1]
    except (ValueError, OSError) as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--preset: ")) from None


def device_arg(name: str) -> str:
    """argparse type: a device the engine can run on here ('cpu', 'cuda', 'cuda:N', 'strict'), or an error that
    says why not (an unknown name, CuPy or a GPU missing)."""
    try:
        backend = get_backend(name)
    except (ValueError, RuntimeError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if backend.name == "meta":
        raise argparse.ArgumentTypeError("'meta' holds shapes but no values; choose cpu, cuda or cuda:N")
    return name


# ---------------------------------------------------------------- arguments, added to a command's parser
def preset_option(p) -> None:
    p.add_argument("--preset", type=_preset, required=True, metavar="NAME",
                   help=f"one of: {', '.join(PRESETS)}; or a checkpoint's config.json (the file, or its folder)")


def size_options(p) -> None:
    p.add_argument("--seq-len", type=_positive, required=True, metavar="L", help="tokens per sequence")
    p.add_argument("--batch", type=_positive, default=1, metavar="B", help="sequences (default 1)")


def dtype_option(p) -> None:
    p.add_argument("--dtype", choices=list(STORAGE_BYTES), default="bf16", help="element type (default bf16)")


def json_option(p) -> None:
    p.add_argument("--json", action="store_true", help="print JSON (fields: docs/cli.md)")


def results_json_option(p) -> None:
    p.add_argument("--json", action="store_true", help="print the results as JSON (fields: docs/cli.md)")


def device_option(p, where: str = "") -> None:
    p.add_argument("--device", type=device_arg, default="cpu", metavar="DEVICE",
                   help=f"{where}cpu (default), cuda, cuda:N")


def checkpoint_path(p) -> None:
    p.add_argument("path", metavar="PATH", help="a checkpoint folder (config.json + *.safetensors), or a train run")


def lesson_number(p) -> None:
    p.add_argument("number", type=_lesson_number, metavar="NN")


def graph_options(p) -> None:
    p.add_argument("--out", required=True, metavar="FILE",
                   help="output file: .svg, .png, .pdf or .dot; .html: the interactive explorer (forward and "
                        "backward, modules opened and closed with a click)")
    p.add_argument("--depth", type=_depth, default=None, metavar="N",
                   help="collapse modules below this depth into boxes (default: every primitive)")
    p.add_argument("--backward", action="store_true", help="draw the gradient flow instead of the forward")
    p.add_argument("--model", action="store_true", help="the whole model, not one block")
    p.add_argument("--seq-len", type=_positive, default=16, metavar="L", help="tokens (default 16)")
    p.add_argument("--batch", type=_positive, default=1, metavar="B", help="sequences (default 1)")
    p.add_argument("--values", action="store_true", help="value and gradient summaries on the nodes (runs the "
                   f"model for real: refused above {human_bytes(VALUES_LIMIT)})")
    device_option(p, "where --values runs: ")
    p.add_argument("--all-layers", action="store_true",
                   help="with --model: draw every layer, not identical layers once with their count")
    p.add_argument("--dpi", type=_positive, default=None, metavar="N",
                   help=f"pixels per inch of a .png (default {PNG_DPI})")
    p.add_argument("--compiled", action="store_true",
                   help="draw the program tb.jit makes of it (kernels; a fused chain is one box) instead of the "
                        "primitives; with an .html explorer, a pane of kernels beside the forward and backward ones; "
                        "runs it for real on the CPU (docs/compiled.md)")
    p.add_argument("--check", action="store_true",
                   help="with an .html explorer of a block: colour each backward op by how far autograd is from the "
                        "hand-derived backward (manual/) of the module around it, in float64 (runs the block for "
                        "real on the CPU; lesson 10)")


SHAPE_OPTIONS = {"d_model": "--d-model", "n_layers": "--n-layers", "n_heads": "--n-heads",
                 "n_kv_heads": "--n-kv-heads", "head_dim": "--head-dim", "d_ff": "--d-ff", "vocab_size": "--vocab"}
SHAPE_HELP = {"d_model": "the residual stream's width", "n_layers": "blocks", "n_heads": "query heads",
              "n_kv_heads": "key/value heads (GQA; default: --n-heads)",
              "head_dim": "each head's width (default: the preset's, else --d-model / --n-heads)",
              "d_ff": "the FFN's hidden width", "vocab_size": "tokens in the vocabulary"}
OPTIONAL_SHAPE = ("n_kv_heads", "head_dim")          # calc's shape options that have a default without a preset


def calc_options(p) -> None:
    """The architecture, field by field (over a preset, or over Llama's defaults), and the training run."""
    p.add_argument("--preset", type=_preset, default=None, metavar="NAME",
                   help=f"start from a preset and change the fields given (one of: {', '.join(PRESETS)}; or a "
                        "checkpoint's config.json, the file or its folder); without "
                        "it: RMSNorm, pre-norm, SwiGLU, RoPE, no biases (the Llama family)")
    for key, flag in SHAPE_OPTIONS.items():
        p.add_argument(flag, dest=key, type=_positive, default=None, metavar="N", help=SHAPE_HELP[key])
    p.add_argument("--tied", action=argparse.BooleanOptionalAction, default=None,
                   help="the LM head reuses the embedding (default: the preset's, else untied)")
    p.add_argument("--seq-len", type=_positive, required=True, metavar="L",
                   help="tokens per sequence; any length (the context becomes at least L)")
    p.add_argument("--batch", type=_positive, default=1, metavar="B", help="sequences (default 1)")
    p.add_argument("--gpus", type=_positive, default=1, metavar="G", help="GPUs training together (default 1)")
    p.add_argument("--mfu", type=_fraction, default=0.4, metavar="M",
                   help="model FLOPs utilisation, the fraction of peak achieved (default 0.4)")
    p.add_argument("--peak-tflops", type=_positive_number, default=990.0, metavar="P",
                   help="peak TFLOP/s per GPU (default 990: H100 bf16 dense)")
    p.add_argument("--tokens", type=_count, default=None, metavar="T",
                   help="training tokens (default: Chinchilla's 20 per parameter)")


def tour_options(p) -> None:
    p.add_argument("--out-dir", default="tinygrad_block_tour", metavar="DIR",
                   help="where the graph drawings go (default: ./tinygrad_block_tour)")
    device_option(p, "where the block runs: ")


def lesson_options(p) -> None:
    p.add_argument("--notebook", action="store_true", help="write the lesson as a .ipynb (the 'notebook' extra)")
    p.add_argument("--execute", action="store_true",
                   help="with --notebook: run every cell too, so the notebook holds its outputs and pictures")
    p.add_argument("--out-dir", default=None, metavar="DIR",
                   help="where the notebook goes (default: beside its lesson, lessons/NN_slug.ipynb)")


def site_options(p) -> None:
    p.add_argument("--out", required=True, metavar="DIR",
                   help="the folder the site goes in: new, empty, or a site this command built (replaced only once "
                        "the new one is built)")
    p.add_argument("--lessons", type=_lesson_number, nargs="+", default=None, metavar="NN",
                   help="build these lessons only, like --lessons 01 19 (default: every lesson)")


def exercise_options(p) -> None:
    p.add_argument("--out", default=None, metavar="FILE", help="the file to write (default exercise_NN.py)")
    p.add_argument("--force", action="store_true", help="replace the file if it exists")


def check_options(p) -> None:
    p.add_argument("number", type=_lesson_number, nargs="?", default=None, metavar="NN")
    p.add_argument("file", nargs="?", default=None, metavar="FILE", help="your solutions (default exercise_NN.py)")
    p.add_argument("--all", action="store_true", help="your progress through the course instead: every lesson's "
                   "exercise_NN.py in this folder checked, one line a lesson")


def train_options(p) -> None:
    p.add_argument("demo", choices=("induction", "text"),
                   help="induction: n random tokens then the same again, 2 layers, until >= 99%% accuracy on the "
                        "repeat; text: a character model of Python's help pages")
    p.add_argument("--steps", type=_positive, default=None, metavar="N",
                   help="optimizer steps (default: induction 300, text 600)")
    p.add_argument("--seed", type=_seed, default=0, metavar="S", help="one seed: weights, data, samples (default 0)")
    p.add_argument("--out", default=None, metavar="DIR", help="where the run goes (default out/<demo>)")
    device_option(p)
    p.add_argument("--text-file", default=None, metavar="FILE",
                   help="text: train on this UTF-8 text file instead of Python's help pages")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG pictures (they need matplotlib)")
    p.add_argument("--save-every", type=_positive, default=None, metavar="N",
                   help="save the run's state (DIR/checkpoints/) every N steps (default: every minute, and at "
                        "the end); Ctrl-C saves and stops")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its newest checkpoint, with the same demo, seed and steps")
    engine_options(p, "each step", "the step's kernels recorded once, then replayed")


def engine_options(p, what: str, how: str) -> None:
    """--eager or --compiled: how `what` runs, where it is not the device's default (compiled; on a GPU eager while
    compiled replays are not checked against eager there, cuda.REPLAY_CHECKED)."""
    engine = p.add_mutually_exclusive_group()
    engine.add_argument("--eager", action="store_true",
                        help=f"run {what} eagerly, op by op, instead of compiled (tb.jit: {how}), to compare")
    engine.add_argument("--compiled", action="store_true",
                        help=f"run {what} compiled (the default; on a GPU whose compiled replays are not checked "
                             "against eager, docs/gpu.md, the default is eager)")


def generate_options(p) -> None:
    prompt = p.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", metavar="TEXT",
                        help="text to continue, through the checkpoint's tokenizer.json (or a train run's vocab.json)")
    prompt.add_argument("--ids", type=_token_ids, metavar="IDS", help="token ids to continue, e.g. '1 15 27'")
    p.add_argument("--max-new-tokens", type=_positive, default=100, metavar="N", help="tokens to add (default 100)")
    p.add_argument("--temperature", type=_temperature, default=0.0, metavar="T",
                   help="0 (the default): greedy, the likeliest token each time; > 0: sample, e.g. 0.8")
    p.add_argument("--top-k", type=_positive, default=None, metavar="K", help="sample among the K likeliest only")
    p.add_argument("--top-p", type=_top_p, default=None, metavar="P",
                   help="sample among the fewest likeliest tokens whose probabilities sum to >= P (after --top-k)")
    p.add_argument("--seed", type=_seed, default=0, metavar="S",
                   help="the sampling generator's seed, when --temperature > 0 (default 0)")
    p.add_argument("--no-cache", action="store_true", help="recompute the whole sequence for every token")
    engine_options(p, "the prefill and each decode step", "each one's kernels recorded once, then replayed")
    device_option(p)


# ---------------------------------------------------------------- refusals before anything runs
def within_context(args: argparse.Namespace) -> BlockConfig:
    """The preset, when --seq-len fits its context."""
    if args.seq_len > args.preset.max_seq_len:
        raise CommandError(f"--seq-len {args.seq_len:,} exceeds the context of {args.preset.name}: "
                           f"{args.preset.max_seq_len:,} tokens")
    return args.preset


def writable_folder(folder: Path, option: str) -> None:
    """Make `folder` and its parents, or say in a CommandError why the command cannot write there."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise CommandError(f"{option}: cannot make the folder {folder}: a file is in the way") from None
    except OSError as e:
        raise CommandError(f"{option}: cannot make the folder {folder}: {e.strerror}") from None
    try:
        tempfile.TemporaryFile(dir=folder).close()                  # made and removed: the folder takes files
    except OSError as e:
        raise CommandError(f"{option}: cannot write in the folder {folder}: {e.strerror}") from None


def writable_target(path: Path, fmt: str) -> None:
    """--out FILE: its folder takes files, and FILE is a name the system accepts for a regular file (or for none
    yet); a folder, a FIFO or a device there is refused by its name alone, never opened."""
    from .files import check_target
    writable_folder(path.parent, "--out")
    try:
        check_target(path)
    except IsADirectoryError:
        raise CommandError(f"--out {path}: is a folder; give a file name ending in .{fmt}") from None
    except OSError as e:                                             # a FIFO, a device; a name too long
        raise CommandError(f"--out {path}: {e.strerror}") from None


def check_values_memory(args: argparse.Namespace, option: str = "--values") -> None:
    """--values (and --compiled) run the block (or model) on a real device: refuse when the recording would hold
    more than VALUES_LIMIT bytes, as measured by recording the same run on the shape-only device."""
    need = record_bytes(args.preset, whole_model=args.model, B=args.batch, L=args.seq_len, backward=args.backward)
    if need > VALUES_LIMIT:
        what = "the model" if args.model else "one block"
        at_one = record_bytes(args.preset, whole_model=args.model, B=1, L=1, backward=args.backward)
        smaller = "lower --seq-len and --batch" if at_one <= VALUES_LIMIT else \
            f"choose a smaller preset (even at B=1, L=1 it needs {human_bytes(at_one)})"
        raise CommandError(f"{option} runs {what} of {args.preset.name} at B={args.batch}, L={args.seq_len:,} on "
                           f"{args.device} in float32 and would hold about {human_bytes(need)} (parameters, every "
                           f"intermediate{' and gradient' if args.backward else ''}), over the limit of "
                           f"{human_bytes(VALUES_LIMIT)}; drop {option} to draw on the shape-only device, or {smaller}")


def calc_config(args: argparse.Namespace) -> BlockConfig:
    """The preset (or BlockConfig's Llama defaults) with the given fields over it and a context of at least
    --seq-len; a shape that cannot be built is a CommandError naming the options."""
    base = args.preset
    fields = {k: getattr(args, k) for k in SHAPE_OPTIONS if getattr(args, k) is not None}
    if args.tied is not None:
        fields["tie_embeddings"] = args.tied
    if base is None:
        missing = [flag for k, flag in SHAPE_OPTIONS.items() if k not in fields and k not in OPTIONAL_SHAPE]
        if missing:
            raise CommandError(f"give the architecture ({', '.join(missing)} missing), or start from --preset NAME")
        fields.setdefault("n_kv_heads", fields["n_heads"])
    shape = ({k: getattr(base, k) for k in SHAPE_OPTIONS} if base else {}) | fields
    try:
        check_heads(shape["d_model"], shape["n_heads"], shape["n_kv_heads"], shape.get("head_dim"),
                    base is None or base.rope, SHAPE_OPTIONS, sep=" ")
    except ValueError as e:
        raise CommandError(str(e)) from None
    context = max(args.seq_len, base.max_seq_len if base else 0)
    changed = base is None or base.with_(**fields) != base       # a field given as the preset has it changes nothing
    name = "custom" if changed else base.name
    return base.with_(**fields, max_seq_len=context, name=name) if base else \
        BlockConfig(**fields, max_seq_len=context, name=name)


# ---------------------------------------------------------------- what the commands compute, from their arguments
def calc_data(args: argparse.Namespace) -> dict:
    return report.calc_data(calc_config(args), args.seq_len, args.batch, args.dtype, gpus=args.gpus, mfu=args.mfu,
                            peak_tflops=args.peak_tflops, tokens=args.tokens,
                            from_preset=args.preset.name if args.preset else None)


def graph_data(args: argparse.Namespace) -> dict:
    """Refuse what cannot be drawn or written before recording anything; then record and write the graph."""
    cfg, path = within_context(args), Path(args.out)
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in report.GRAPH_FORMATS:
        raise CommandError(f"--out {path}: the extension must be one of {', '.join(report.GRAPH_FORMATS)}")
    writable_target(path, fmt)
    if args.dpi is not None and fmt != "png":
        raise CommandError(f"--dpi {args.dpi}: only a .png has pixels; {path.name} is a vector drawing ({fmt})")
    if args.compiled and fmt != "html":
        clash = [o for o, given in (("--values", args.values), ("--depth", args.depth is not None),
                                    ("--all-layers", args.all_layers)) if given]
        if clash:
            raise CommandError(f"--compiled draws the program's kernels, one box each, as svg/png/pdf/dot; it does "
                               f"not take {', '.join(clash)} (an .html explorer does)")
    if args.check and (fmt != "html" or args.model):
        raise CommandError("--check colours an explorer page of one block: --out must end in .html" if fmt != "html"
                           else "--check compares one block's backward with the hand-derived one (manual/); "
                                "drop --model")
    if args.values or args.compiled or args.check:
        check_values_memory(args, "--values" if args.values else "--compiled" if args.compiled else "--check")
    try:
        return report.graph_data(cfg, path, model=args.model, depth=args.depth, backward=args.backward,
                                 seq_len=args.seq_len, batch=args.batch, values=args.values, device=args.device,
                                 all_layers=args.all_layers, dpi=args.dpi, compiled=args.compiled,
                                 check=args.check, warn=lambda w: print(f"{PROG} graph: warning: {w}", file=sys.stderr))
    except MissingAsset as e:                                        # the explorer's own files, not --out's
        raise CommandError(str(e)) from None
    except RuntimeError as e:                                        # graphviz (package or `dot`) missing
        raise CommandError(f"--out {path}: {e}") from None
    except OSError as e:
        raise CommandError(f"--out {path}: cannot write it: {e.strerror}") from None


def train_data(args: argparse.Namespace) -> dict:
    """Check the folder, the pictures' matplotlib and --text-file; run the demonstration. A run that diverges, that
    Ctrl-C stops (saved, with the command that goes on) or that cannot save (a full disk, a file-size limit, a
    read-only folder) ends in one line; so does a folder that another training run holds."""
    from .files import FolderInUse
    from .train import SaveFailed, TrainingDiverged, TrainingStopped
    folder = Path(args.out or f"out/{args.demo}")
    writable_folder(folder, "--out")
    if not args.no_plots:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise CommandError("the loss curve and attention pictures need matplotlib: install the 'viz' extra "
                               "(pip install -e '.[viz]' from the repository's root), or pass --no-plots") from None
    text = None if args.text_file is None else read_text_file(args.text_file, args.demo)
    try:
        return report.train_data(args.demo, folder, steps=args.steps, text=text, source=args.text_file,
                                 seed=args.seed, device=args.device, pictures=not args.no_plots, resume=args.resume,
                                 save_every=args.save_every, jit=compiled_or_not(args, "train"))
    except FolderInUse as e:
        who = f" (process {e.pid})" if e.pid is not None else ""
        raise CommandError(f"--out {folder}: another training run{who} is writing there; wait for it to end, or "
                           "choose another --out") from None
    except TrainingDiverged as e:
        raise CommandStopped(str(e), 1) from None
    except SaveFailed as e:
        again = f"; free space (or make room) and continue with: {resume_command(args, folder)}" if e.kept else ""
        raise CommandStopped(str(e) + again, 1) from None
    except TrainingStopped as e:
        raise CommandStopped(f"{e}; continue with: {resume_command(args, folder)}", 130) from None


def resume_command(args: argparse.Namespace, folder: Path) -> str:
    """The command that takes this run up from its newest checkpoint."""
    again = (["train", args.demo, "--out", str(folder), "--seed", str(args.seed)]
             + (["--steps", str(args.steps)] if args.steps else [])
             + (["--text-file", args.text_file] if args.text_file else [])
             + (["--eager"] if args.eager else []) + (["--compiled"] if args.compiled else []) + ["--resume"])
    return shell_command(*again)


def read_text_file(path: str, demo: str) -> str:
    """--text-file: a readable UTF-8 file, for the text demonstration only."""
    if demo != "text":
        raise CommandError(f"--text-file is for `train text`; `train {demo}` makes its own data")
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CommandError(f"--text-file {path}: cannot read it as UTF-8 text ({getattr(e, 'strerror', None) or e})")\
            from None


def compiled_or_not(args: argparse.Namespace, command: str) -> bool:
    """Whether `command` runs its steps compiled: as --compiled or --eager ask; else the device's default, with one
    line on stderr saying why it is eager on a GPU."""
    if args.compiled or args.eager:
        return args.compiled
    if jit_by_default(args.device):
        return True
    print(f"{PROG} {command}: on {args.device} the steps run eagerly: compiled replays have not yet been checked "
          "against eager on a GPU (tools/gpu_check.py, docs/gpu.md); --compiled runs them compiled", file=sys.stderr)
    return False


def generate_data(args: argparse.Namespace) -> dict:
    """Generate; Ctrl-C prints what was generated so far (the text, or --json's dict) and one line, status 130."""
    try:
        return report.generate_data(args.path, prompt=args.prompt, ids=args.ids, max_new_tokens=args.max_new_tokens,
                                    temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                                    use_cache=not args.no_cache, jit=compiled_or_not(args, "generate"),
                                    device=args.device)
    except report.GenerationStopped as e:
        print(json.dumps(e.data, indent=2) if args.json else tables.generate_text(e.data)[0], flush=True)
        raise CommandStopped(str(e), 130) from None


def tour_data(args: argparse.Namespace) -> dict:
    """The tour (tour.py) prints as it goes; whether its own checks passed."""
    from .tour import run as tour                                    # numpy-side tables: loaded for the tour only
    writable_folder(Path(args.out_dir), "--out-dir")
    try:
        ok = tour(out_dir=args.out_dir, device=args.device)["ok"]
    except MissingAsset as e:                                        # an install without the explorer's files
        raise CommandError(str(e)) from None
    lessons = clone.LESSONS if clone.LESSONS.is_dir() else None      # None: installed without the repository
    return {"command": "tour", "ok": ok, "lessons": None if lessons is None else str(lessons)}


# ---------------------------------------------------------------- the course, loaded from a clone's lessons/
def load_course() -> ModuleType:
    """lessons/course.py of the clone this package was installed from (clone.LESSONS), loaded by path as the module
    `course`, the name the lessons and lessons/site.py import it by; a CommandError saying where the course lives
    when the package was installed without it."""
    path = clone.LESSONS / "course.py"
    if not path.is_file():
        missing = path if clone.LESSONS.is_dir() else clone.LESSONS
        raise CommandError(f"the course (lessons, exercises, solutions) lives in the repository's lessons/ folder, "
                           f"and {missing} is not there: the installed package does not hold it. Clone the "
                           "repository, install it from there (pip install -e '.[viz,notebook]') and run the "
                           "course from its root")
    return clone.load_file("course", path)


def with_course(compute: Callable[[ModuleType, argparse.Namespace], dict]) -> Callable[[argparse.Namespace], dict]:
    """A course command's `data`: compute(course, args) with lessons/course.py loaded (`load_course`); a
    CourseError, the course's word for a learner's mistake, becomes one line, status 2."""
    def data(args: argparse.Namespace) -> dict:
        course = load_course()
        try:
            return compute(course, args)
        except course.CourseError as e:
            raise CommandError(str(e)) from None
    return data


def lesson_data(course: ModuleType, args: argparse.Namespace) -> dict:
    """Run the lesson as a script (its status), or write it as a notebook."""
    if not args.notebook:
        if args.execute or args.out_dir:
            raise CommandError("--execute and --out-dir go with --notebook: "
                               + shell_command("lesson", f"{args.number:02d}", "--notebook", "--execute"))
        return {"command": "lesson", "number": args.number, "status": course.run_lesson(args.number)}
    path = course.write_notebook(args.number, Path(args.out_dir) if args.out_dir else None, args.execute)
    return {"command": "lesson", "number": args.number, "path": str(path), "executed": args.execute,
            "open_with": course.notebook_viewer(path)}


def exercise_data(course: ModuleType, args: argparse.Namespace) -> dict:
    default = course.learner_file(args.number)
    path = course.write_starter(args.number, Path(args.out) if args.out else default, args.force)
    return {"command": "exercise", "number": args.number, "path": str(path), "named": path != default}


def check_data(course: ModuleType, args: argparse.Namespace) -> dict:
    if args.all:
        if args.number is not None or args.file is not None:
            raise CommandError("--all checks every lesson's exercise_NN.py in this folder: give it no lesson "
                               "number or file")
        return {"command": "check", "all": True, "lessons": course.progress()}
    if args.number is None:
        raise CommandError("give the lesson whose exercises to check, like `check 02`, or --all for every lesson")
    path = Path(args.file) if args.file else course.learner_file(args.number)
    results = course.check(args.number, course.load_solution(path, args.number))
    return {"command": "check", "number": args.number, "path": str(path),
            "results": [{"name": name, "why": why} for name, why in results]}


# ---------------------------------------------------------------- how the tour and the course print
def tour_text(data: dict) -> list[str]:
    """The next step: the first lesson, where the repository's lessons are at hand; else where they live."""
    if data["lessons"] is None:
        return ["next, the course: twenty-one lessons with exercises, in the repository's lessons/ folder (this "
                "installed package does not hold them); clone the repository, pip install -e '.[viz,notebook]' at its "
                "root, and take lesson 01 from there"]
    return [f"next, the course, one lesson at a time: {shell_command('lesson', '01')} (add --notebook --execute "
            "for a notebook); lessons/README.md lists them all"]


def site_text(data: dict) -> list[str]:
    """Where the site is, how it opens, and what it lacks (the glossary page, where the course has none yet)."""
    lines = [f"site: {data['index']} ({len(data['lessons'])} lessons, built in {data['seconds']} s); open it in any "
             "browser, straight from the folder: nothing is fetched"]
    if not data["glossary"]:
        lines.append("  built without a glossary page: lessons/GLOSSARY.md is not there (python tools/glossary.py "
                     "writes it)")
    return lines + [f"  warning: {w}" for w in data["warnings"]]


def lesson_text(data: dict) -> list[str]:
    if "path" not in data:                                           # the script printed its own output
        return []
    how = "its cells have run" if data["executed"] else "its cells have not run yet: run them in order"
    opening = (f"open it with: {data['open_with']} (as root, JupyterLab also wants --allow-root)"
               if data["open_with"] else
               "to open it, install JupyterLab, the 'notebook' extra: pip install -e '.[notebook]' in the "
               "repository (or any notebook viewer)")
    return [f"lesson {data['number']:02d}: wrote {data['path']} ({how})", f"  {opening}"]


def exercise_text(data: dict) -> list[str]:
    check = shell_command("check", f"{data['number']:02d}", *([data["path"]] if data["named"] else []))
    return [f"exercise {data['number']:02d}: wrote {data['path']}; fill in each function, then run `{check}`"]


def check_text(data: dict) -> list[str]:
    if data.get("all"):
        return progress_text(data["lessons"])
    results = data["results"]
    lines = [f"  {'ok  ' if r['why'] is None else 'FAIL'} {r['name']}" + ("" if r["why"] is None else f": {r['why']}")
             for r in results]
    passed = sum(r["why"] is None for r in results)
    return lines + [f"check {data['number']:02d}: {passed} of {len(results)} exercises pass ({data['path']})"]


def progress_text(lessons: list[dict]) -> list[str]:
    """One line a lesson (how many exercises pass, why its file does not run, or not started), then the total and
    the command for the first lesson not done."""
    lines = [f"  lesson {lesson['number']:02d}: " + lesson_progress_text(lesson) for lesson in lessons]
    started = [lesson for lesson in lessons if lesson["passed"] is not None]
    done = [lesson for lesson in started if not lesson["failing"]]
    passed = sum(lesson["passed"] or 0 for lesson in lessons)
    total = sum(len(lesson["exercises"]) for lesson in lessons)
    todo = next((lesson for lesson in lessons if lesson["failing"]), None)
    after = "" if todo is None else "; next: " + shell_command(
        "check" if todo["passed"] is not None else "exercise", f"{todo['number']:02d}")
    return lines + [f"check --all: {passed} of {total} exercises pass; {len(done)} of {len(lessons)} lessons done, "
                    f"{len(started) - len(done)} under way, {len(lessons) - len(started)} not started{after}"]


def lesson_progress_text(lesson: dict) -> str:
    if lesson["passed"] is None:
        return "not started"
    if lesson["problem"] is not None:
        return lesson["problem"]
    failing = f"; not yet: {', '.join(lesson['failing'])}" if lesson["failing"] else ""
    return f"{lesson['passed']} of {len(lesson['exercises'])} exercises pass ({lesson['path']}){failing}"


# ---------------------------------------------------------------- the command table
@dataclass(frozen=True)
class Command:
    """One command: its help, the arguments it takes, what it computes (a JSON-able dict) and how that prints."""
    name: str
    help: str
    arguments: tuple[Callable[[argparse.ArgumentParser], None], ...]   # each adds some arguments to the parser
    data: Callable[[argparse.Namespace], dict]
    text: Callable[[dict], list[str]]
    description: str = ""                        # the --help heading, where it says more than `help`
    mistakes: tuple[type[Exception], ...] = ()   # what `data` raises for a user's mistake: one line, status 2
    status: Callable[[dict], int] = lambda data: 0   # the exit status, from what was computed


TOUR_HELP = "the tiny block forward and backward: autograd vs hand-derived vs finite differences, its FLOPs and graphs"
CALC_HELP = ("an architecture calculator: any shape (or a preset with fields changed) -> parameters, FLOPs per "
             "token, Chinchilla tokens, training days, training memory, KV cache, counted on meta beside the closed "
             "forms")
TRAIN_HELP = "train a small model on a demonstration task: induction (copying) or characters of text"
GENERATE_HELP = "continue a prompt with a checkpoint (a Hugging Face folder, or a folder that `train` wrote)"
INSPECT_HELP = "count a checkpoint's parameters from its safetensors headers alone, beside the closed form"
SITE_HELP = ("the course as a static website: every lesson run, with its outputs, pictures and explorer pages, "
             "the glossary, and search; it opens from the folder, offline (the 'site' extra)")
CHECKPOINT_MISTAKES = (ValueError, TypeError, OSError)  # a missing file, a malformed one, a prompt that does not fit

COMMANDS = {c.name: c for c in [
    Command("tour", TOUR_HELP, (tour_options,), tour_data, tour_text, status=lambda data: 0 if data["ok"] else 1),
    Command("presets", "every preset: its shape numbers and total parameters", (json_option,),
            lambda args: report.presets_data(), tables.presets_text),
    Command("params", "parameters per component, per block and in total, counted on the model and in closed form",
            (preset_option, json_option), lambda args: report.params_data(args.preset), tables.params_text),
    Command("flops", "FLOPs per module and phase of a forward and backward, counted and in closed form",
            (preset_option, size_options, json_option),
            lambda args: report.flops_data(within_context(args), args.seq_len, args.batch), tables.flops_text),
    Command("walk", "one token through one block, step by step: shapes and FLOPs", (preset_option, json_option),
            lambda args: report.walk_data(args.preset), tables.walk_text),
    Command("memory", "training memory: parameters, gradients, Adam, activations (estimated and measured), KV cache",
            (preset_option, size_options, dtype_option, json_option),
            lambda args: report.memory_data(within_context(args), args.seq_len, args.batch, args.dtype),
            tables.memory_text),
    Command("graph", "draw the computation graph of a block (or the model), forward or backward, as svg/png/pdf/dot",
            (preset_option, graph_options, json_option), graph_data, tables.graph_text),
    Command("calc", CALC_HELP, (calc_options, dtype_option, json_option), calc_data, tables.calc_text,
            description=CALC_HELP + " (docs/cli.md)"),
    Command("lesson", "run a numbered lesson, or write it as a notebook", (lesson_number, lesson_options),
            with_course(lesson_data), lesson_text, status=lambda data: data.get("status", 0),
            description="Run lessons/NN_*.py as a script, or with --notebook write it as a .ipynb."),
    Command("exercise", "write a lesson's exercises as a starter file to fill in", (lesson_number, exercise_options),
            with_course(exercise_data), exercise_text,
            description="Write exercise_NN.py: a lesson's exercises, each a function to write."),
    Command("check", "check your solutions to a lesson's exercises", (check_options,), with_course(check_data),
            check_text,
            status=lambda data: 0 if data.get("all") or all(r["why"] is None for r in data["results"]) else 1,
            description="Run the lesson's checker on your file; each exercise passes or says why not. With --all, "
                        "your progress through the course: one line a lesson, then the total."),
    Command("site", SITE_HELP, (site_options,),
            with_course(lambda course, args: course.site_module().build(Path(args.out), args.lessons)),
            site_text, description=SITE_HELP + " (docs/site.md)"),
    Command("train", TRAIN_HELP, (train_options, results_json_option), train_data, tables.train_text,
            description=TRAIN_HELP + " (docs/training.md)", mistakes=(ValueError, FileNotFoundError),
            status=lambda data: 0 if data.get("passed", True) else 1),   # the induction model missed its threshold
    Command("generate", GENERATE_HELP, (checkpoint_path, generate_options, results_json_option), generate_data,
            tables.generate_text, description=GENERATE_HELP + " (docs/generation.md)", mistakes=CHECKPOINT_MISTAKES),
    Command("inspect", INSPECT_HELP, (checkpoint_path, results_json_option),
            lambda args: report.inspect_data(args.path), inspect_text,
            description=INSPECT_HELP + " (docs/checkpoints.md)", mistakes=CHECKPOINT_MISTAKES),
]}


# ---------------------------------------------------------------- parsing and dispatch
class Parser(argparse.ArgumentParser):
    def error(self, message: str):
        """A mistake in the arguments: one line, as every mistake is (the usage is one --help away)."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parser() -> Parser:
    """The one parser of every command in COMMANDS."""
    top = Parser(prog=PROG, description="Learn how a transformer block computes by running it.")
    top.add_argument("--version", action="version", version=f"tinygrad_block {__version__}")
    commands = top.add_subparsers(dest="command", metavar="<command>")
    for command in COMMANDS.values():
        p = commands.add_parser(command.name, help=command.help, description=command.description or command.help)
        for add in command.arguments:
            add(p)
    return top


def run(command: Command, args: argparse.Namespace) -> int:
    """Compute the command's dict and print it: its lines (with the quoted figures' notes on the preset), or JSON with
    --json. Its exit status."""
    try:
        data = command.data(args)
    except command.mistakes as e:
        raise CommandError(str(e)) from None
    cfg = getattr(args, "preset", None)
    notes = notes_for(command.name, cfg.name) if isinstance(cfg, BlockConfig) else []
    if notes:
        data["curriculum"] = notes
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, default=str))
    elif lines := command.text(data) + tables.quoted_text(notes):
        print("\n".join(lines))
    return command.status(data)


def unprefixed(error: Exception, command: str) -> str:
    """The error's text without the `generate: ` it may begin with (LM.generate's errors name their op): the line
    that shows it already says `python -m tinygrad_block generate: error: `."""
    return str(error).removeprefix(f"{command}: ")


def main(argv: list[str] | None = None) -> int:
    """Parse and run one command (`python -m tinygrad_block`, the `tinygrad-block` script, the tests). No command:
    the help, status 2. A user's mistake: one line on stderr, status 2 (SystemExit, as argparse's own)."""
    top = parser()
    args = top.parse_args(argv)
    if args.command is None:
        top.print_help()
        return 2
    try:
        return run(COMMANDS[args.command], args)
    except CommandError as e:
        top.exit(2, f"{top.prog} {args.command}: error: {unprefixed(e, args.command)}\n")
    except CommandStopped as e:
        print(f"{PROG} {args.command}: {unprefixed(e, args.command)}", file=sys.stderr)
        return e.status
    except KeyboardInterrupt:                                        # Ctrl-C where no command catches it
        print(f"{PROG} {args.command}: stopped (Ctrl-C)", file=sys.stderr)
        return 130
    except BrokenPipeError:                                          # the reader stopped early (`| head`)
        sys.stdout = None                                            # nothing left to flush at exit
        return 0
