"""train.py's step compiled by tb.jit (the default) against the same step run eagerly (`jit=False`), on the
induction demo's model and data: fused (train's default) and unfused, 20 steps agree bit for bit (losses, learning
rates, weights, and AdamW's m, v and step counts as each run's checkpoint holds them). The oracle is the eager run,
itself held to torch.optim by tests/nn/test_optim.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.data import induction_batch
from tinygrad_block.train import INDUCTION, Schedule, train

STEPS = 20


def demo_steps(folder: Path, **engine):
    """STEPS steps of the induction demo (its model, batches of 32, n = 10, lr 3e-3 warmed up over 5 steps then a
    cosine to 3e-4), its state saved at the end; `engine`: train's jit and fuse. (history, weights, folder)."""
    g = tb.Generator(0)
    model = nn.LM(INDUCTION, generator=g)
    history = train(model, lambda: induction_batch(32, 10, INDUCTION.vocab_size, g),
                    Schedule(steps=STEPS, lr=3e-3, warmup=5, lr_min=3e-4), progress=False, checkpoints=folder,
                    save_every=STEPS, generator=g, **engine)
    return history, {n: p.numpy() for n, p in model.named_parameters()}, folder / f"step-{STEPS:06d}"


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_compiled_training_equals_eager_bit_for_bit(tmp_path, fuse):
    eager, eager_weights, eager_saved = demo_steps(tmp_path / "eager", jit=False)
    done, weights, saved = demo_steps(tmp_path / "compiled", fuse=fuse)        # train's default: jit, fused
    assert (done.engine, done.replayed, eager.engine, eager.replayed) == ("compiled", STEPS - 3, "eager", 0)
    assert done.losses == eager.losses and done.lrs == eager.lrs
    assert all(np.array_equal(weights[n], w) for n, w in eager_weights.items())
    assert (saved / "optimizer.safetensors").read_bytes() == (eager_saved / "optimizer.safetensors").read_bytes()
    assert (saved / "state.json").read_text().split('"history"')[0] == \
        (eager_saved / "state.json").read_text().split('"history"')[0]            # step counts, lr, schedule
