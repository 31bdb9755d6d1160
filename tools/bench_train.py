"""Training speed on the CPU: tokens per second of full training steps (forward, cross-entropy, backward,
clip_grad_norm, an AdamW step) of the text demo's model (train.TEXT, float32), ours against the same model,
loss and optimizer in PyTorch eager (tools/torch_block.py), in the same run, from the same initial weights.

Both engines train on the same few batches (drawn once by data.text_batch, then cycled), so the timing is the
step alone. After a warm-up each round runs `--steps` steps of each engine, the order alternating per round;
the table gives each engine's median tokens/s with its spread over the rounds (min-max), and the median ratio
(ours / torch) of the rounds with its spread, the ratio taken within each round.

    OPENBLAS_NUM_THREADS=1 python tools/bench_train.py [--rounds 5] [--steps 10] [--batch 32] [--seq-len 64]

One thread for each engine: on a busy 2-core machine PyTorch's OpenMP threads and OpenBLAS's (numpy's) spin
against each other when the two alternate in one process; torch.set_num_threads(1) is set here, and
OPENBLAS_NUM_THREADS must be set before numpy starts.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import tinygrad_block as tb
import torch_block
from tinygrad_block.data import CharTokenizer, python_help_text, text_batch, text_splits
from tinygrad_block.nn import LM, BlockConfig
from tinygrad_block.optim import AdamW, clip_grad_norm
from tinygrad_block.train import TEXT, lm_loss

LR, WEIGHT_DECAY, MAX_GRAD_NORM = 3e-3, 0.01, 1.0     # the text demo's peak learning rate and train()'s defaults
BATCHES = 4                                           # distinct batches, cycled


def ours(model: LM):
    """One training step of our engine as train.train runs it (no schedule): returns step(ids, targets) -> loss."""
    opt = AdamW(model.parameters(), LR, weight_decay=WEIGHT_DECAY)

    def step(ids: tb.Tensor, targets: tb.Tensor) -> float:
        loss = lm_loss(model, ids, targets)
        opt.zero_grad()
        loss.backward()
        clip_grad_norm(model.parameters(), MAX_GRAD_NORM)
        opt.step()
        return loss.item()
    return step


def torch_loss(p: dict, cfg: BlockConfig, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """embed -> blocks (torch_block.block_forward) -> norm -> head -> mean cross-entropy over (B, L)."""
    h = p["embed.weight"][ids]                                                        # (B, L, d_model)
    cos, sin = torch_block.rope_cos_sin(ids.shape[1], cfg.d_head, cfg.rope_theta, h.dtype)
    for i in range(cfg.n_layers):
        prefix = f"layers.{i}."
        h = torch_block.block_forward(h, {k[len(prefix):]: v for k, v in p.items() if k.startswith(prefix)},
                                      cfg, cos, sin)
    logits = torch_block.linear(p, cfg, "lm_head", torch_block.norm(p, cfg, "norm", h))   # (B, L, vocab)
    return F.cross_entropy(logits.reshape(-1, cfg.vocab_size), targets.reshape(-1))


def theirs(model: LM):
    """The same step in PyTorch eager, starting from a copy of our model's weights."""
    p = {n: torch.tensor(w.numpy().copy(), requires_grad=True) for n, w in model.named_parameters()}
    opt = torch.optim.AdamW(p.values(), lr=LR, weight_decay=WEIGHT_DECAY)

    def step(ids: torch.Tensor, targets: torch.Tensor) -> float:
        loss = torch_loss(p, model.cfg, ids, targets)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(p.values(), MAX_GRAD_NORM)
        opt.step()
        return loss.item()
    return step


def tokens_per_s(step, batches: list, steps: int, start: int = 0) -> float:
    """Run `steps` steps on the batches cycled from index `start`; tokens per second of wall time."""
    t0 = time.perf_counter()
    for i in range(start, start + steps):
        step(*batches[i % len(batches)])
    B, L = batches[0][0].shape
    return steps * B * L / (time.perf_counter() - t0)


def spread(values: list[float], fmt: str) -> str:
    return f"{format(statistics.median(values), fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10, help="steps per engine per round")
    ap.add_argument("--warmup", type=int, default=3, help="steps per engine before the rounds")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(1)
    text = python_help_text()
    tok = CharTokenizer.from_text(text)
    cfg = TEXT.with_(vocab_size=tok.vocab_size, max_seq_len=max(TEXT.max_seq_len, args.seq_len))
    g = tb.Generator(0)
    model = LM(cfg, generator=g, dtype="float32")
    train_ids, _ = text_splits(text, tok)
    batches = {"ours": [text_batch(train_ids, args.batch, args.seq_len, g) for _ in range(BATCHES)]}
    batches["torch"] = [tuple(torch.tensor(t.numpy()) for t in b) for b in batches["ours"]]
    print(f"{cfg.name}: d_model {cfg.d_model}, {cfg.n_layers} layers, {cfg.n_heads} heads, d_ff {cfg.d_ff}, "
          f"vocab {cfg.vocab_size}, {model.num_parameters():,} parameters; batch {args.batch} x {args.seq_len} "
          f"tokens, float32, torch {torch.__version__} on {torch.get_num_threads()} thread")

    steps = {"torch": theirs(model), "ours": ours(model)}     # torch copies the weights before we train
    first = {name: steps[name](*batches[name][0]) for name in steps}
    print(f"first step's loss: ours {first['ours']:.7f}  torch {first['torch']:.7f}")
    assert abs(first["ours"] - first["torch"]) <= 1e-5 * abs(first["torch"]), f"the losses differ: {first}"
    for name in steps:
        tokens_per_s(steps[name], batches[name], args.warmup, start=1)

    done = 1 + args.warmup
    speed = {"ours": [], "torch": []}
    for r in range(args.rounds):
        for name in ("ours", "torch") if r % 2 == 0 else ("torch", "ours"):
            speed[name].append(tokens_per_s(steps[name], batches[name], args.steps, start=done))
        done += args.steps
        print(f"  round {r + 1}/{args.rounds}: ours {speed['ours'][-1]:,.0f} tok/s, "
              f"torch {speed['torch'][-1]:,.0f} tok/s", flush=True)
    ratios = [a / b for a, b in zip(speed["ours"], speed["torch"])]

    print(f"\ntraining steps, {args.rounds} rounds x {args.steps} steps per engine; medians (min-max) over the rounds")
    print(f"{'engine':<16} {'tokens/s':>24}")
    print(f"{'tinygrad_block':<16} {spread(speed['ours'], ',.0f'):>24}")
    print(f"{'torch eager':<16} {spread(speed['torch'], ',.0f'):>24}")
    print(f"{'ours / torch':<16} {spread(ratios, '.3f'):>24}")


if __name__ == "__main__":
    main()
