"""Training a language model: the loop (a batch in, cross-entropy out, backward, clip, an AdamW step on a
warmup + cosine schedule), its evaluation, the loss curve, the attention pictures, the checkpoints; and the
two demonstrations that use them, `induction_demo` and `text_demo` (`python -m tinygrad_block train ...`).

One seed makes a run: a `tb.Generator(seed)` draws the initial weights, then the evaluation data, then every
training batch, so two runs with one seed compute the same losses, bit for bit.

A step runs compiled by default (`train(model, batches, Schedule(steps, lr), jit=True)`, compiled.py): its
first calls run eagerly while every primitive is recorded, later ones replay the recorded kernels straight on the
arrays; `jit=False` runs it eagerly. On a GPU the same, since compiled replays were checked against eager there
(cuda.jit_by_default, docs/gpu.md).
"""
from __future__ import annotations

import functools
import json
import math
import signal
import threading
import time
import warnings
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from collections.abc import Callable

from tqdm import tqdm

from . import compiled
from .cuda import jit_by_default
from .generator import Generator
from .data import CharTokenizer, induction_batch, python_help_text, text_batch, text_splits
from .nn import LM, BlockConfig
from .files import hold_folder, stands_for, write_atomic, write_text
from .optim import AdamW, Optimizer, WarmupCosine, clip_grad_norm
from .pictures import figure
from .resume import latest, load_checkpoint, save_checkpoint
from .tensor import Tensor, arange, concat
from .trace import no_grad, observe

Batches = Callable[[], tuple[Tensor, Tensor]]     # each call: ids (B, L), targets (B, T), T <= L
FLOAT_WARNINGS = "(overflow|invalid value|divide by zero) encountered"   # numpy's, on a diverging step


# ---------------------------------------------------------------- the loop
def lm_loss(model: LM, ids: Tensor, targets: Tensor) -> Tensor:
    """mean over b, t of -log softmax(logits[b, L - T + t])[targets[b, t]]: the targets (B, T) are the next
    tokens after the last T positions of ids (B, L); T = L for text, the predictable half for induction."""
    if targets.ndim != 2 or targets.shape[0] != ids.shape[0] or targets.shape[1] > ids.shape[1]:
        raise ValueError(f"lm_loss: targets must be (B, T) with T <= L for ids (B, L) = {ids.shape}; "
                         f"got {targets.shape}")
    L, T = ids.shape[1], targets.shape[1]
    return model(ids)[:, L - T:].cross_entropy(targets)            # logits (B, T, vocab) vs targets (B, T)


def training_step(model: LM, opt: Optimizer, max_grad_norm: float) -> Callable:
    """One step as a function of the batch: step(ids, targets) -> (loss, gradient norm before clipping), two 0-d
    tensors, the weights updated by `opt`. It reads no value (train reads the two it returns), and every value that
    changes between steps is a tensor that lives across them (weights, the optimizer's state and lr), so tb.jit
    can compile it."""
    params = model.parameters()

    def step(ids: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        opt.zero_grad()
        loss = lm_loss(model, ids, targets)
        loss.backward()
        norm = clip_grad_norm(params, max_grad_norm)
        opt.step()
        return loss, norm
    return step


@dataclass
class History:
    """What a run measured: the loss and learning rate of every step, and each evaluation as (step, metrics);
    how the steps ran: engine 'compiled' (`replayed` of them replays, the others captured eagerly) or 'eager'."""
    losses: list = field(default_factory=list)
    lrs: list = field(default_factory=list)
    evals: list = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
    engine: str = "eager"
    replayed: int = 0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict:
        return asdict(self)

    def restore(self, saved: dict) -> None:
        """Take up a saved history (resume.py), so a resumed run's history covers the whole run."""
        self.losses, self.lrs = list(saved["losses"]), list(saved["lrs"])
        self.evals = [(step, metrics) for step, metrics in saved["evals"]]
        self.tokens, self.seconds = saved["tokens"], saved["seconds"]
        self.replayed = saved.get("replayed", 0)                   # absent from checkpoints older than jit


class TrainingDiverged(RuntimeError):
    """The loss or the gradient norm stopped being finite: the run stopped before the weights took the step."""


class SaveFailed(OSError):
    """Writing the run's files failed (a full disk, a file-size limit, a read-only folder): the run stopped. What
    was on disk stays whole; `kept` is the last whole checkpoint (None: none yet); errno, strerror and filename are
    the failed write's."""

    def __init__(self, message: str, kept: Path | None, cause: OSError):
        super().__init__(cause.errno, cause.strerror, cause.filename)
        self.message, self.kept = message, kept

    def __str__(self) -> str:
        return self.message


class TrainingStopped(Exception):
    """Ctrl-C (SIGINT): the run stopped after a whole step, saved where `path` says (None: no checkpoint folder)."""

    def __init__(self, step: int, steps: int, path: Path | None):
        self.step, self.steps, self.path = step, steps, path
        where = f"saved to {path}" if path else "not saved (no checkpoint folder)"
        super().__init__(f"stopped at step {step} of {steps}; {where}")


@contextmanager
def stop_requests():
    """While training: the first Ctrl-C asks the loop to stop after the step it is in (a second one stops at once).
    Only the main thread receives signals, so elsewhere nothing changes."""
    asked = {"stop": False}
    if threading.current_thread() is not threading.main_thread():
        yield asked
        return

    def ask(signum, frame):
        if asked["stop"]:
            raise KeyboardInterrupt
        asked["stop"] = True
    previous = signal.signal(signal.SIGINT, ask)
    try:
        yield asked
    finally:
        signal.signal(signal.SIGINT, previous)


@dataclass(frozen=True)
class Schedule:
    """How a run steps, kept with its checkpoints (a run resumes only with the same): `steps` AdamW steps whose
    learning rate rises linearly to `lr` over `warmup` steps, then falls to `lr_min` along a half cosine; the
    weight decay; gradients clipped to a global norm of `max_grad_norm`."""
    steps: int
    lr: float
    warmup: int = 0
    lr_min: float = 0.0
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0

    def __post_init__(self):
        if not isinstance(self.steps, int) or isinstance(self.steps, bool) or self.steps < 1:
            raise ValueError(f"Schedule: steps must be a positive int, got {self.steps!r}")


def train(model: LM, batches: Batches, schedule: Schedule, *, evaluate: Callable | None = None, eval_every: int = 100,
          progress: bool = True, checkpoints: Path | None = None, save_every: int | None = None,
          save_seconds: float = 60.0, resume: bool = False, generator: Generator | None = None,
          jit: bool | None = None, fuse: bool = True) -> History:
    """`schedule.steps` AdamW steps on lm_loss of `batches()` as the Schedule says (warmup, then a half cosine;
    gradients clipped). Every `eval_every` steps and after the last, `evaluate(model)` (a dict of numbers) runs
    under no_grad. The step (training_step) runs compiled by tb.jit, or eagerly with jit=False; jit=None (the
    default) compiles except on a GPU whose replays are not yet checked (cuda.jit_by_default); history.engine says
    which; `fuse` is tb.jit's. A replay, fused or not, is the eager step bit for bit, so a resumed run (whose first
    steps are eager captures again) ends exactly where the uninterrupted one does.

    With a `checkpoints` folder, the run's whole state (resume.py) is saved every `save_every` steps (None: every
    `save_seconds` of training) and at the end; `resume` takes up the newest there and ends bit for bit where the
    run would have ended uninterrupted (`generator` is the one `batches` draws from: its state is saved too).
    A loss or gradient norm that is not finite raises TrainingDiverged, the step undone (the weights and the
    optimizer's state put back); Ctrl-C finishes the step, saves, and raises TrainingStopped."""
    if not isinstance(schedule, Schedule):
        raise TypeError(f"train: the third argument is a Schedule(steps=..., lr=...), got {type(schedule).__name__}")
    steps = schedule.steps
    if jit is None:
        jit = jit_by_default(model.parameters()[0].device)
    opt = AdamW(model.parameters(), schedule.lr, weight_decay=schedule.weight_decay)
    lrs = WarmupCosine(opt, schedule.lr, min(schedule.warmup, steps), steps, schedule.lr_min)
    history = History(engine="compiled" if jit else "eager")
    run = (model, opt, lrs, generator, history, asdict(schedule))
    held = hold_folder(checkpoints, "train") if checkpoints is not None else nullcontext()   # one writer at a time
    with held, stop_requests() as asked, warnings.catch_warnings():
        warnings.filterwarnings("ignore", FLOAT_WARNINGS, RuntimeWarning)     # the loop checks, and says which step
        first = _resume(checkpoints, run) if resume else 0
        step_fn = training_step(model, opt, schedule.max_grad_norm)
        run_step = compiled.jit(step_fn, fuse=fuse, modules=[model, opt]) if jit else step_fn
        bar = tqdm(range(first, steps), desc="train", unit="step", disable=not progress, dynamic_ncols=True,
                   initial=first, total=steps)
        start, before, saved = time.perf_counter(), history.seconds, (first, time.perf_counter())
        for step in bar:
            ids, targets = batches()                               # (B, L), (B, T)
            undo, replays = opt.snapshot(), getattr(run_step, "replays", 0)
            loss, norm = (t.item() for t in run_step(ids, targets))   # read here, outside the compiled step
            _finite(loss, norm, step, opt, undo, checkpoints)
            history.replayed += getattr(run_step, "replays", 0) - replays
            history.losses.append(loss)
            history.lrs.append(opt.lr)
            lrs.step()
            history.tokens += ids.size
            history.seconds = before + time.perf_counter() - start
            if evaluate is not None and ((step + 1) % eval_every == 0 or step + 1 == steps):
                with no_grad():
                    history.evals.append((step + 1, evaluate(model)))
            bar.set_postfix(loss=f"{history.losses[-1]:.4f}", tok_s=f"{history.tokens_per_s:,.0f}", refresh=False)
            due = (step + 1) % save_every == 0 if save_every else time.perf_counter() - saved[1] >= save_seconds
            if checkpoints is not None and (due or asked["stop"] or step + 1 == steps):
                with saving(step + 1, checkpoints, "the checkpoint"):
                    path = save_checkpoint(checkpoints, step + 1, *run)
                saved = (step + 1, time.perf_counter())
            if asked["stop"] and step + 1 < steps:
                bar.close()
                raise TrainingStopped(step + 1, steps, path if checkpoints is not None else None)
    return history


def _resume(checkpoints: Path | None, run: tuple) -> int:
    """The step the newest checkpoint in `checkpoints` reached, its state put back into `run`."""
    if checkpoints is None:
        raise ValueError("train: resume=True needs the checkpoints folder to resume from")
    here = latest(checkpoints)
    if here is None:
        raise FileNotFoundError(f"train: nothing to resume: {checkpoints} holds no checkpoint yet")
    return load_checkpoint(here, *run)


def _finite(loss: float, norm: float, step: int, opt: Optimizer, undo: tuple, checkpoints: Path | None) -> None:
    """Stop a diverging run: a loss or gradient norm that is not finite undoes the step (the weights and the
    optimizer's state put back as opt.snapshot() kept them) and raises TrainingDiverged, saying where the last
    good checkpoint is."""
    what, value = ("the loss", loss) if not math.isfinite(loss) else ("the gradient norm", norm)
    if math.isfinite(value):
        return
    opt.restore(undo)
    here = latest(checkpoints) if checkpoints is not None else None          # checkpoints/step-000120
    raise TrainingDiverged(f"train: step {step + 1}: {what} is {value} at learning rate {opt.lr:.3g}; stopped "
                           f"before the weights took the step; {_kept(here, 'good')}")


def _kept(here: Path | None, whole: str = "whole") -> str:
    """Where the last checkpoint is, in words."""
    return f"the last {whole} checkpoint, step {int(here.name.removeprefix('step-'))}, is {here}" if here else \
        "no checkpoint was saved before it"


@contextmanager
def saving(step: int, checkpoints: Path | None, what: str):
    """Writing `what` after `step`: an OSError (a full disk, a file-size limit, a read-only folder) becomes
    SaveFailed, one sentence naming the step, the error, the file and the last whole checkpoint."""
    try:
        yield
    except SaveFailed:
        raise
    except OSError as e:
        here = latest(checkpoints) if checkpoints is not None else None
        file = f" ({stands_for(e.filename)})" if e.filename else ""
        raise SaveFailed(f"train: step {step}: cannot save {what}: {e.strerror or e}{file}; the run stopped; "
                         f"{_kept(here)}", here, e) from e


# ---------------------------------------------------------------- evaluation
def evaluate_lm(model: LM, ids: Tensor, targets: Tensor) -> dict:
    """The loss (lm_loss) and the accuracy: the fraction of targets that are the argmax of their logits."""
    L, T = ids.shape[1], targets.shape[1]
    logp = model(ids)[:, L - T:].log_softmax(axis=-1)              # (B, T, vocab)
    flat = logp.reshape(-1, logp.shape[-1])                        # (B*T, vocab)
    at_target = flat[arange(flat.shape[0], device=flat.device), targets.reshape(-1)]   # (B*T,)
    correct = at_target >= flat.max(axis=-1)                       # (B*T,) True where the target wins
    return {"loss": -at_target.mean().item(), "accuracy": correct.to(logp.dtype).mean().item()}


def attention_weights(model: LM, ids: Tensor) -> list[Tensor]:
    """Each layer's attention weights softmax(q k^T / sqrt(d_head) + mask), (B, H, L, L), read as the model
    runs: an observer keeps the last output of every attention module's 'softmax' step (the division)."""
    seen = {}

    def keep(event):
        if event.step == "softmax" and event.scope[-1:] == ("attn",):
            seen[event.scope] = event.output
    with no_grad(), observe(keep):
        model(ids)
    return list(seen.values())


def induction_scores(weights: list[Tensor], n: int) -> list[list[float]]:
    """Per layer and head: the mean attention that the queries at positions n - 1 .. 2n - 2 pay to the key
    n - 1 positions back, where the token they must predict sits (the stripe of an induction head)."""
    scores = []
    for w in weights:                                               # (B, H, L, L), L = 2n - 1
        q = arange(n - 1, 2 * n - 1, device=w.device)               # (n,) queries of the second half
        stripe = w[:, :, q, q - (n - 1)]                            # (B, H, n): weight on the key n - 1 back
        scores.append(stripe.mean(axis=(0, 2)).tolist())            # (H,)
    return scores


def generate_long(model: LM, ids: Tensor, new_tokens: int, window: int, **sampling) -> Tensor:
    """ids (B, P) continued by new_tokens, beyond any context length: each call of model.generate continues the
    last window // 2 tokens by window // 2 more, so every token is chosen seeing window // 2 to window tokens
    (the lengths the model trained at). `sampling`: temperature, top_k, generator, as LM.generate."""
    half = window // 2
    tokens = ids
    while tokens.shape[1] < ids.shape[1] + new_tokens:
        step = min(half, ids.shape[1] + new_tokens - tokens.shape[1])
        context = tokens[:, -half:]                                 # (B, <= window // 2)
        more = model.generate(context, step, **sampling)[:, context.shape[1]:]   # (B, step)
        tokens = concat([tokens, more], axis=1)
    return tokens


# ---------------------------------------------------------------- pictures and checkpoints
def plot_history(history: History, path: Path, title: str) -> Path:
    """The loss of every step and each evaluation's loss (and accuracy, when measured), on a log scale."""
    fig = figure(6.4, 4.0)
    ax = fig.add_subplot()
    ax.plot(range(1, len(history.losses) + 1), history.losses, lw=0.8, alpha=0.7, label="training batch")
    if history.evals:
        steps = [s for s, _ in history.evals]
        ax.plot(steps, [m["loss"] for _, m in history.evals], "o-", label="evaluation")
    ax.set(yscale="log", xlabel="step", ylabel="cross-entropy (nats per token)", title=title)
    ax.legend(loc="lower left")
    if history.evals and "accuracy" in history.evals[0][1]:
        acc = ax.twinx()
        acc.plot(steps, [m["accuracy"] for _, m in history.evals], "s--", color="tab:green", ms=4)
        acc.set(ylim=(0, 1), ylabel="evaluation accuracy (green)")
    write_atomic(Path(path), lambda f: fig.savefig(f, format="png", dpi=120))
    return Path(path)


def plot_attention(weights: list[Tensor], scores: list[list[float]], path: Path, title: str) -> Path:
    """Every head of every layer for one sequence (the first of the batch): rows are queries, columns keys."""
    layers, heads = len(weights), weights[0].shape[1]
    fig = figure(2.2 * heads, 2.4 * layers)
    best = max((s, i, h) for i, row in enumerate(scores) for h, s in enumerate(row))
    for i, w in enumerate(weights):
        for h in range(heads):
            ax = fig.add_subplot(layers, heads, i * heads + h + 1)
            ax.imshow(w[0, h].numpy(), cmap="Blues", vmin=0, vmax=1)
            star = "  <- induction" if (i, h) == best[1:] else ""
            ax.set_title(f"layer {i} head {h}: {scores[i][h]:.2f}{star}", fontsize=8)
            ax.set_xticks([]), ax.set_yticks([])
    fig.suptitle(title, fontsize=9)
    write_atomic(Path(path), lambda f: fig.savefig(f, format="png", dpi=120))
    return Path(path)


def holds_out(demo: Callable) -> Callable:
    """A demonstration holds its `out` folder while it runs (hold_folder): a second run into the same folder is
    refused, naming the process that holds it, and what a killed run left behind there is cleared away."""
    @functools.wraps(demo)
    def held(out: Path, **settings) -> dict:
        with hold_folder(Path(out), "train"):
            return demo(Path(out), **settings)
    return held


def save_run(model: LM, history: History, out: Path, results: dict) -> dict:
    """checkpoint/ (config.json + model.safetensors, the Hugging Face layout: never pickle), history.json and
    loss.png in `out`; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out / "checkpoint")
    write_text(out / "history.json", json.dumps({**asdict(history), "results": results}, indent=1))
    return {"checkpoint": str(out / "checkpoint"), "history": str(out / "history.json")}


# ---------------------------------------------------------------- demonstration 1: induction
INDUCTION = BlockConfig(d_model=64, n_heads=4, n_kv_heads=4, d_ff=128, n_layers=2, vocab_size=32, max_seq_len=64,
                        name="induction")
INDUCTION_THRESHOLD = 0.99     # accuracy on the predictable second half


@holds_out
def induction_demo(out: Path, *, steps: int = 300, seed: int = 0, n: int = 10, batch: int = 32,
                   device: str = "cpu", progress: bool = True, pictures: bool = True, resume: bool = False,
                   save_every: int | None = None, jit: bool | None = None) -> dict:
    """Train a 2-layer model on induction_batch (n random tokens, then the same again) and measure its accuracy
    on the predictable second half of 512 sequences it never trained on; draw the attention of every head.
    The run's state goes to out/checkpoints/ (train's checkpoints, save_every); `resume` takes it up. `jit`: the
    steps run compiled (True), eagerly (False) or as the device's default (None), as train's."""
    g = Generator(seed)
    model = LM(INDUCTION, generator=g, device=device)
    held_out = induction_batch(512, n, INDUCTION.vocab_size, g, device)
    history = train(model, lambda: induction_batch(batch, n, INDUCTION.vocab_size, g, device),
                    Schedule(steps=steps, lr=3e-3, warmup=20, lr_min=3e-4),
                    evaluate=lambda m: evaluate_lm(m, *held_out), eval_every=25, progress=progress,
                    checkpoints=Path(out) / "checkpoints", save_every=save_every, resume=resume, generator=g, jit=jit)
    weights = attention_weights(model, held_out[0][:8])
    scores = induction_scores(weights, n)
    score, layer, head = max((s, i, h) for i, row in enumerate(scores) for h, s in enumerate(row))
    results = {"demo": "induction", "seed": seed, "steps": steps, "n": n, **history.evals[-1][1],
               "threshold": INDUCTION_THRESHOLD, "passed": history.evals[-1][1]["accuracy"] >= INDUCTION_THRESHOLD,
               "induction_head": {"layer": layer, "head": head, "stripe_weight": score}, "stripe_weights": scores,
               "seconds": history.seconds, "tokens_per_s": history.tokens_per_s, "engine": history.engine,
               "replayed": history.replayed}
    with saving(steps, out / "checkpoints", "the run's results"):
        paths = save_run(model, history, out, results)
        if pictures:
            paths["loss_curve"] = str(plot_history(history, out / "loss.png", f"induction, n = {n}, seed {seed}"))
            paths["attention"] = str(plot_attention(weights, scores, out / "attention.png",
                                                    f"attention on a held-out sequence of {n} tokens repeated; "
                                                    f"stripe = key n - 1 = {n - 1} back"))
    return {**results, "paths": paths, "model": model, "history": history}


# ---------------------------------------------------------------- demonstration 2: characters of text
TEXT = BlockConfig(d_model=96, n_heads=4, n_kv_heads=4, d_ff=256, n_layers=2, vocab_size=128, max_seq_len=128,
                   name="text")


@holds_out
def text_demo(out: Path, *, steps: int = 600, seed: int = 0, seq_len: int = 64, batch: int = 32,
              device: str = "cpu", progress: bool = True, pictures: bool = True, sample_len: int = 300,
              prompt: str | None = None, text: str | None = None, source: str = "Python's help pages",
              resume: bool = False, save_every: int | None = None, jit: bool | None = None) -> dict:
    """Train a character-level model on `text` (by default Python's help pages, data.python_help_text; `source`
    names it), evaluate on the last 10% it never trained on, and write a sample: `prompt` continued at
    temperature 0.8 (by default "The ", or the text's first four characters when it lacks those). `jit`: the
    steps run compiled (True), eagerly (False) or as the device's default (None), as train's."""
    text = python_help_text() if text is None else text
    if len(text) < 20 * (seq_len + 1):
        raise ValueError(f"text_demo: {source} has {len(text):,} characters; training windows of {seq_len + 1} "
                         f"need at least {20 * (seq_len + 1):,} (a tenth is held out)")
    tok = CharTokenizer.from_text(text)
    if prompt is None:
        prompt = "The " if set("The ") <= set(text) else text[:4]
    tok.encode(prompt)                                              # a prompt it cannot read: say so before training
    g = Generator(seed)
    model = LM(TEXT.with_(vocab_size=tok.vocab_size), generator=g, device=device)
    train_ids, val_ids = text_splits(text, tok, device=device)
    held_out = text_batch(val_ids, 64, seq_len, g)
    history = train(model, lambda: text_batch(train_ids, batch, seq_len, g),
                    Schedule(steps=steps, lr=3e-3, warmup=30, lr_min=3e-4),
                    evaluate=lambda m: evaluate_lm(m, *held_out), eval_every=100, progress=progress,
                    checkpoints=Path(out) / "checkpoints", save_every=save_every, resume=resume, generator=g, jit=jit)
    ids = Tensor([tok.encode(prompt)], device=device)
    sample = tok.decode(generate_long(model, ids, sample_len, seq_len, temperature=0.8, generator=g)[0])
    results = {"demo": "text", "source": source, "prompt": prompt, "seed": seed, "steps": steps,
               "train_chars": train_ids.shape[0], "held_out_chars": val_ids.shape[0], "vocab_size": tok.vocab_size,
               **history.evals[-1][1],
               "bits_per_char": history.evals[-1][1]["loss"] / math.log(2), "sample": sample,
               "seconds": history.seconds, "tokens_per_s": history.tokens_per_s, "engine": history.engine,
               "replayed": history.replayed}
    with saving(steps, out / "checkpoints", "the run's results"):
        paths = save_run(model, history, out, results)
        tok.save(out / "checkpoint" / "vocab.json")
        paths["vocab"] = str(out / "checkpoint" / "vocab.json")
        write_text(out / "sample.txt", sample)
        paths["sample"] = str(out / "sample.txt")
        if pictures:
            paths["loss_curve"] = str(plot_history(history, out / "loss.png", f"characters of {source}, seed {seed}"))
    return {**results, "paths": paths, "model": model, "history": history, "tokenizer": tok}
