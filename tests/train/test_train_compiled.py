"""train.py's step compiled by tb.jit (the default) against the same step run eagerly (`jit=False`), on the
induction demo's model and data: unfused (train's default), 20 steps agree bit for bit (losses, learning rates,
weights, and AdamW's m, v and step counts as each run's checkpoint holds them); fused, to a stated tolerance. The
oracle is the eager run, itself held to torch.optim by tests/nn/test_optim.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from conftest import rel_err

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.data import induction_batch
from tinygrad_block.train import INDUCTION, train

STEPS = 20


def demo_steps(folder: Path, **engine):
    """STEPS steps of the induction demo (its model, batches of 32, n = 10, lr 3e-3 warmed up over 5 steps then a
    cosine to 3e-4), its state saved at the end; `engine`: train's jit and fuse. (history, weights, folder)."""
    g = tb.Generator(0)
    model = nn.LM(INDUCTION, generator=g)
    history = train(model, lambda: induction_batch(32, 10, INDUCTION.vocab_size, g), steps=STEPS, lr=3e-3, warmup=5,
                    lr_min=3e-4, progress=False, checkpoints=folder, save_every=STEPS, generator=g, **engine)
    return history, {n: p.numpy() for n, p in model.named_parameters()}, folder / f"step-{STEPS:06d}"


def test_compiled_training_equals_eager_bit_for_bit(tmp_path):
    eager, eager_weights, eager_saved = demo_steps(tmp_path / "eager", jit=False)
    done, weights, saved = demo_steps(tmp_path / "compiled")                   # train's default: jit, unfused
    assert (done.engine, done.replayed, eager.engine, eager.replayed) == ("compiled", STEPS - 3, "eager", 0)
    assert done.losses == eager.losses and done.lrs == eager.lrs
    assert all(np.array_equal(weights[n], w) for n, w in eager_weights.items())
    assert (saved / "optimizer.safetensors").read_bytes() == (eager_saved / "optimizer.safetensors").read_bytes()
    assert (saved / "state.json").read_text().split('"history"')[0] == \
        (eager_saved / "state.json").read_text().split('"history"')[0]            # step counts, lr, schedule


LOSS_TOL, WEIGHT_TOL = 1e-5, 1e-4     # relative: ten times what a 1-ulp nudge of every initial weight makes of 20 steps


def test_compiled_training_with_fusion_stays_close_to_eager(tmp_path):
    """Fused kernels may round differently from the primitives one by one (another exp, another order of a sum).
    How far a rounding difference travels in 20 steps of this run: every initial weight moved by 1 ulp moves the
    losses by at most 6e-7 and each weight tensor by 1e-5 (relative, measured here), so the bounds are ten times
    that."""
    eager, eager_weights, _ = demo_steps(tmp_path / "eager", jit=False)
    done, weights, _ = demo_steps(tmp_path / "compiled", fuse=True)
    assert done.engine == "compiled" and done.replayed == STEPS - 3 and done.lrs == eager.lrs
    assert max(abs(a - b) / abs(b) for a, b in zip(done.losses, eager.losses)) <= LOSS_TOL
    for name, w in eager_weights.items():
        assert rel_err(weights[name], w) <= WEIGHT_TOL, name
