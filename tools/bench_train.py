"""Training speed: tokens per second of full training steps (forward, cross-entropy, backward,
clip_grad_norm, an AdamW step) of a demo's model (train.TEXT or train.INDUCTION, float32), three engines in the same
run from the same initial weights: ours compiled (train.training_step through tb.jit, fused, as `train` runs it;
`--unfused` replays primitive by primitive), ours eager (the same step, op by op: `train --eager`), and the same model,
loss and optimizer in PyTorch eager (tools/torch_block.py), on the CPU or, with `--device cuda`, on a GPU (every
engine's step ends in a read of its loss, which waits for the device).

Every engine trains on the same few batches (drawn once by the demo's data function, then cycled), so the timing is
the step alone. Each engine runs in a process of its own (PyTorch's steps change how glibc's allocator serves
numpy's next big arrays, which sped our eager steps up by half when the engines shared a process). After a warm-up
(which also lets the compiled step finish capturing) each round runs `--steps` steps of each engine, one engine at
a time, the order rotating from round to round; the table gives each engine's median tokens/s with its spread over
the rounds (min-max), and the median ratios of the rounds with their spread, each ratio taken within one round.

    python tools/bench_train.py [--model text|induction] [--rounds 9] [--steps 10] [--batch 32] [--seq-len 64]
                                [--unfused] [--device cpu|cuda]

One thread for each engine: on a busy 2-core machine PyTorch's OpenMP threads, OpenBLAS's (numpy's) and numexpr's
spin against each other. So torch.set_num_threads(1) is set in each engine's process, and the script starts itself
again with OPENBLAS_NUM_THREADS, NUMEXPR_NUM_THREADS and OMP_NUM_THREADS set to 1 when the environment does not set
them (they must be set before numpy starts; the engines' processes inherit them).
"""
from __future__ import annotations

import argparse
import importlib.metadata
import multiprocessing
import os
import statistics
import sys
import time
from typing import TYPE_CHECKING

import tinygrad_block as tb
from tinygrad_block.data import CharTokenizer, induction_batch, python_help_text, text_batch, text_splits
from tinygrad_block.nn import LM, BlockConfig
from tinygrad_block.optim import AdamW
from tinygrad_block.train import INDUCTION, TEXT, training_step

if TYPE_CHECKING:
    import torch

LR, WEIGHT_DECAY, MAX_GRAD_NORM = 3e-3, 0.01, 1.0     # the demos' peak learning rate and train()'s defaults
BATCHES = 4                                           # distinct batches, cycled
THREADS = ("OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS", "OMP_NUM_THREADS")
ENGINES = ("compiled", "eager", "torch")


def pin_threads() -> None:
    """Start this script again with one thread for BLAS, numexpr and OpenMP, unless the environment says."""
    missing = {name: "1" for name in THREADS if name not in os.environ}
    if missing:
        os.execve(sys.executable, [sys.executable, *sys.argv], os.environ | missing)


def ours(model: LM, jit: bool, fuse: bool = False):
    """train.py's training step on `model` (no schedule), compiled by tb.jit (fused or not) or eager:
    step(ids, targets) -> loss."""
    opt = AdamW(model.parameters(), LR, weight_decay=WEIGHT_DECAY)
    run = training_step(model, opt, MAX_GRAD_NORM)
    run = tb.jit(run, fuse=fuse, modules=[model, opt]) if jit else run

    def step(ids: tb.Tensor, targets: tb.Tensor) -> float:
        loss, _ = run(ids, targets)
        return loss.item()
    step.compiled = run if jit else None
    return step


def torch_device(device: str) -> str:
    """PyTorch's name of our device: 'cuda' for 'cuda' and 'cuda:N', else 'cpu'."""
    return device if device.startswith("cuda") else "cpu"


def torch_loss(p: dict, cfg: BlockConfig, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """embed -> blocks (torch_block.block_forward) -> norm -> head -> mean cross-entropy of the last T positions
    against targets (B, T), as train.lm_loss."""
    import torch.nn.functional as F

    import torch_block
    h = p["embed.weight"][ids]                                                        # (B, L, d_model)
    cos, sin = torch_block.rope_cos_sin(ids.shape[1], cfg.d_head, cfg.rope_theta, h.dtype, h.device)
    for i in range(cfg.n_layers):
        prefix = f"layers.{i}."
        h = torch_block.block_forward(h, {k[len(prefix):]: v for k, v in p.items() if k.startswith(prefix)},
                                      cfg, cos, sin)
    logits = torch_block.linear(p, cfg, "lm_head", torch_block.norm(p, cfg, "norm", h))   # (B, L, vocab)
    T = targets.shape[1]
    return F.cross_entropy(logits[:, -T:].reshape(-1, cfg.vocab_size), targets.reshape(-1))


def theirs(model: LM, device: str = "cpu"):
    """The same step in PyTorch eager on `device`, starting from a copy of our model's weights. PyTorch is imported
    here, by the torch engine's process alone: the help, the main process and our engines' processes never load it."""
    import torch
    p = {n: torch.tensor(w.numpy().copy(), device=device, requires_grad=True) for n, w in model.named_parameters()}
    opt = torch.optim.AdamW(p.values(), lr=LR, weight_decay=WEIGHT_DECAY)

    def step(ids: torch.Tensor, targets: torch.Tensor) -> float:
        loss = torch_loss(p, model.cfg, ids, targets)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(p.values(), MAX_GRAD_NORM)
        opt.step()
        return loss.item()
    return step


def demo_data(name: str, batch: int, seq_len: int, g: tb.Generator, device: str = "cpu") -> tuple[BlockConfig, list]:
    """The demo's config and BATCHES of its (ids, targets) on `device`: text windows of seq_len characters of
    Python's help pages, or induction sequences (10 random tokens, then the same again; targets the predictable
    half)."""
    if name == "induction":
        return INDUCTION, [induction_batch(batch, 10, INDUCTION.vocab_size, g, device) for _ in range(BATCHES)]
    text = python_help_text()
    tok = CharTokenizer.from_text(text)
    train_ids, _ = text_splits(text, tok, device=device)
    cfg = TEXT.with_(vocab_size=tok.vocab_size, max_seq_len=max(TEXT.max_seq_len, seq_len))
    return cfg, [text_batch(train_ids, batch, seq_len, g) for _ in range(BATCHES)]


def tokens_per_s(step, batches: list, steps: int, start: int = 0) -> float:
    """Run `steps` steps on the batches cycled from index `start`; tokens (ids) per second of wall time."""
    t0 = time.perf_counter()
    for i in range(start, start + steps):
        step(*batches[i % len(batches)])
    B, L = batches[0][0].shape
    return steps * B * L / (time.perf_counter() - t0)


def spread(values: list[float], fmt: str) -> str:
    return f"{format(statistics.median(values), fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def engine_process(engine: str, args: argparse.Namespace, conn) -> None:
    """One engine in a process of its own (so that no engine's memory allocations change another's speed: PyTorch's
    steps leave glibc's allocator in a state that makes numpy's next big arrays cheaper). It builds the same data
    and model as the others, takes the first step and the warm-up, then runs a round of `args.steps` steps each
    time the main process asks, answering with its tokens/s."""
    cfg, batches = demo_data(args.model, args.batch, args.seq_len, tb.Generator(0), args.device)
    model = LM(cfg, generator=tb.Generator(1), dtype="float32", device=args.device)
    if engine == "torch":
        import torch
        torch.set_num_threads(1)
        dev = torch_device(args.device)
        step, batches = theirs(model, dev), [tuple(torch.tensor(t.numpy(), device=dev) for t in b) for b in batches]
    else:
        step = ours(model, jit=engine == "compiled", fuse=not args.unfused)
    conn.send({"loss": step(*batches[0]), "parameters": model.num_parameters(), "cfg": cfg,
               "shape": tuple(batches[0][0].shape)})
    tokens_per_s(step, batches, args.warmup, start=1)
    done = 1 + args.warmup
    while conn.recv() == "round":
        conn.send(tokens_per_s(step, batches, args.steps, start=done))
        done += args.steps
    compiled = getattr(step, "compiled", None)
    conn.send((compiled.captures, compiled.replays) if compiled else None)


def main() -> None:
    pin_threads()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=("text", "induction"), default="text", help="the demo whose model trains")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--steps", type=int, default=10, help="steps per engine per round")
    ap.add_argument("--warmup", type=int, default=10, help="steps per engine before the rounds (>= 3: jit captures)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=64, help="text only: characters per window")
    ap.add_argument("--unfused", action="store_true", help="compile without fusion (tb.jit(..., fuse=False)); "
                    "train's default fuses")
    ap.add_argument("--device", default="cpu", help="where every engine runs: cpu, or cuda (CuPy and PyTorch's CUDA)")
    args = ap.parse_args()
    try:
        torch_version = importlib.metadata.version("torch")     # the reference engine's; loaded by its process only
    except importlib.metadata.PackageNotFoundError:
        sys.exit("bench_train.py: error: the reference engine needs torch: pip install torch==2.13.0 (the CPU build)")
    spawn = multiprocessing.get_context("spawn")
    pipes, workers = {}, []
    for engine in ENGINES:
        pipes[engine], theirs_end = spawn.Pipe()
        workers.append(spawn.Process(target=engine_process, args=(engine, args, theirs_end), daemon=True))
        workers[-1].start()
    first = {engine: pipes[engine].recv() for engine in ENGINES}
    cfg, (B, L) = first["eager"]["cfg"], first["eager"]["shape"]
    threads = ", ".join(f"{name}={os.environ.get(name)}" for name in THREADS)
    print(f"{cfg.name}: d_model {cfg.d_model}, {cfg.n_layers} layers, {cfg.n_heads} heads, d_ff {cfg.d_ff}, "
          f"vocab {cfg.vocab_size}, {first['eager']['parameters']:,} parameters; batch {B} x {L} tokens, "
          f"float32 on {args.device}; torch {torch_version} on 1 thread; {threads}; one process per engine")
    loss = {engine: first[engine]["loss"] for engine in ENGINES}
    print("first step's loss: " + "  ".join(f"{engine} {loss[engine]:.7f}" for engine in ENGINES))
    assert loss["compiled"] == loss["eager"], f"a capture runs eagerly: the losses must agree, {loss}"
    assert abs(loss["eager"] - loss["torch"]) <= 1e-5 * abs(loss["torch"]), f"the losses differ: {loss}"

    speed = {engine: [] for engine in ENGINES}
    for r in range(args.rounds):
        for engine in ENGINES[r % 3:] + ENGINES[:r % 3]:                # one engine at a time, the order rotating
            pipes[engine].send("round")
            speed[engine].append(pipes[engine].recv())
        print(f"  round {r + 1}/{args.rounds}: " + ", ".join(f"{e} {speed[e][-1]:,.0f}" for e in ENGINES)
              + " tok/s", flush=True)
    for engine in ENGINES:
        pipes[engine].send("stop")
    captures, replays = pipes["compiled"].recv()
    for engine in ("eager", "torch"):
        pipes[engine].recv()
    for w in workers:
        w.join()
    assert replays > 0, f"the compiled step never replayed ({captures} captures)"
    ratio = {f"{a} / {b}": [x / y for x, y in zip(speed[a], speed[b])]
             for a, b in (("compiled", "torch"), ("eager", "torch"), ("compiled", "eager"))}

    how = "compiled, fused" if not args.unfused else "compiled, unfused"
    print(f"\n{args.model} model, {args.rounds} rounds x {args.steps} steps per engine ({how}: {captures} captures, "
          f"then {replays} replays); medians (min-max) over the rounds")
    print(f"{'engine':<26} {'tokens/s':>24}")
    names = {"compiled": "tinygrad_block compiled", "eager": "tinygrad_block eager", "torch": "torch eager"}
    for engine in ENGINES:
        print(f"{names[engine]:<26} {spread(speed[engine], ',.0f'):>24}")
    for name, values in ratio.items():
        print(f"{name:<26} {spread(values, '.3f'):>24}")


if __name__ == "__main__":
    main()
