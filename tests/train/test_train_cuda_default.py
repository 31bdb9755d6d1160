"""train(..., jit=None), the default, asks cuda.jit_by_default about the model's device: compiled where it says so
(the CPU), eagerly where it does not (a GPU whose replays are unchecked, here stood in for by a stub, as no GPU is
needed); jit=True and jit=False are obeyed whatever it says."""
import pytest

import tinygrad_block as tb
from tinygrad_block import nn, train as training
from tinygrad_block.data import induction_batch

CFG = nn.preset("tiny").with_(n_layers=1, vocab_size=16, max_seq_len=16)


def run(**engine) -> training.History:
    g = tb.Generator(0)
    model = nn.LM(CFG, generator=g)
    return training.train(model, lambda: induction_batch(2, 4, CFG.vocab_size, g), training.Schedule(steps=4, lr=1e-3),
                          progress=False, **engine)


@pytest.mark.parametrize("by_default, engine", [(True, "compiled"), (False, "eager")])
def test_without_jit_the_device_decides(monkeypatch, by_default, engine):
    asked = []
    monkeypatch.setattr(training, "jit_by_default", lambda device: asked.append(device) or by_default)
    history = run()
    assert asked == ["cpu"] and history.engine == engine and (history.replayed > 0) is by_default


@pytest.mark.parametrize("jit, engine", [(True, "compiled"), (False, "eager")])
def test_jit_given_is_obeyed(monkeypatch, jit, engine):
    monkeypatch.setattr(training, "jit_by_default", lambda device: pytest.fail("asked though jit was given"))
    assert run(jit=jit).engine == engine


def test_on_the_cpu_the_default_compiles():
    history = run()
    assert history.engine == "compiled" and history.replayed == 4 - 3     # three captures, then replays
