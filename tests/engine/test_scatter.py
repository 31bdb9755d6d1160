"""ScatterAdd on the CPU: from SORTED_SCATTER indices on, the rows are summed after a stable sort (one
add.reduceat per run of equal indices) instead of np.add.at's row-at-a-time loop. Checked against np.add.at
(exactly where every sum is exact, to rounding elsewhere), against finite differences through an embedding, and
in the compiled replay against eager."""
from __future__ import annotations

import numpy as np
import pytest

import tinygrad_block as tb
from tinygrad_block.backend import SORTED_SCATTER


def add_at(g: np.ndarray, idx: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros((size,) + g.shape[idx.ndim:], g.dtype)
    np.add.at(out, idx, g)
    return out


def scatter(g: np.ndarray, idx: np.ndarray, size: int) -> np.ndarray:
    x = tb.Tensor(g)
    return x.backend.scatter_add(x.data, idx, 0, size)


@pytest.mark.parametrize("shape, vocab", [((32, 19, 64), 32), ((4, 50, 3, 5), 7), ((SORTED_SCATTER, 2), 1000)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sums_of_whole_numbers_equal_add_at_exactly(shape, vocab, dtype):
    """Whole numbers below 2^24 add exactly in any order: the sorted sums must equal add.at's bit for bit."""
    rng = np.random.default_rng(0)
    g = rng.integers(-1000, 1000, shape).astype(dtype)
    idx = rng.integers(0, vocab, shape[:2 if len(shape) > 2 else 1])
    out = scatter(g, idx, vocab)
    assert out.dtype == g.dtype and out.shape == (vocab,) + g.shape[idx.ndim:]
    assert np.array_equal(out, add_at(g, idx, vocab))
    unused = np.setdiff1d(np.arange(vocab), idx)
    assert not out[unused].any()                                  # rows no index names stay zero


def test_rounded_sums_agree_with_add_at_to_rounding():
    rng = np.random.default_rng(1)
    g = rng.standard_normal((32, 64, 96)) * rng.choice([1e-3, 1.0, 1e3], (32, 64, 96))
    idx = rng.integers(0, 100, (32, 64))
    np.testing.assert_allclose(scatter(g, idx, 100), add_at(g, idx, 100), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(scatter(g.astype("float32"), idx, 100), add_at(g, idx, 100), rtol=2e-5, atol=2e-3)


def test_few_indices_still_go_through_add_at():
    """Below SORTED_SCATTER indices the result is add.at's own (the sort would cost more than it saves)."""
    rng = np.random.default_rng(2)
    g, idx = rng.standard_normal((SORTED_SCATTER - 1, 8)), rng.integers(0, 5, SORTED_SCATTER - 1)
    assert np.array_equal(scatter(g, idx, 5), add_at(g, idx, 5))


def test_an_embedding_gradient_through_the_sorted_sums_matches_finite_differences():
    g = tb.Generator(0)
    weight = tb.randn(6, 3, generator=g, dtype="float64", requires_grad=True)
    ids = tb.Tensor(np.random.default_rng(3).integers(0, 6, (4, 40)))           # 160 >= SORTED_SCATTER
    scale = tb.randn(4, 40, 3, generator=g, dtype="float64")
    assert ids.size >= SORTED_SCATTER
    assert tb.gradcheck(lambda w: (w[ids] * scale).sum(), weight)


def test_compiled_training_step_equals_eager_with_the_sorted_sums():
    """An LM's embedding gradient (2 x 64 ids) replayed equals the eager one bit for bit."""
    cfg = tb.nn.preset("tiny").with_(n_layers=1, vocab_size=50)
    ids = [tb.Tensor(np.random.default_rng(i).integers(0, 50, (2, 64))) for i in range(5)]
    grads = []
    for compiled in (False, True):
        model = tb.nn.LM(cfg, generator=tb.Generator(0))

        def step(x, model=model):
            model.zero_grad()
            model(x).sum().backward()
            return model.embed.weight.grad
        run = tb.jit(step, modules=[model]) if compiled else step
        grads.append([run(x).numpy().copy() for x in ids])
    assert run.replays >= 2                                       # captured, then replayed
    assert all(np.array_equal(a, b) for a, b in zip(*grads))
