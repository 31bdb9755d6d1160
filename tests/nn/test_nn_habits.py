"""PyTorch's habits on modules: `print(model)` (the tree, checked against named_parameters and num_parameters),
`train()` / `eval()`, `nn.Linear(3, 4)` without a generator (tb.Generator(0), written out), `model.generate(ids, n)`
greedy by default (the argmax of the model's own logits, step by step, in numpy), and "did you mean" for a preset."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.accounting import total_params

from conftest import msg

TINY = nn.preset("tiny")
ROW = re.compile(r"^(?P<pad> *)(?:\((?P<name>[\w.-]+)\): )?(?:(?P<times>\d+) x )?(?P<kind>\w+)\((?P<own>.*)$")


def parsed(model: nn.Module) -> list[dict]:
    """print(model)'s module rows as dicts (indent, name, times, kind, own parameters, count), each with `path`: the
    module's dotted name in named_modules() (for a folded run `(layers): 3 x`, its first one, layers.0)."""
    rows, stack = [], []
    for line in repr(model).splitlines():
        if line.strip() == ")":
            continue
        text, _, count = line.partition("  # ")
        m = ROW.match(text.rstrip())
        assert m and count, line
        row = m.groupdict() | {"count": count.removesuffix(" parameters"), "own": m["own"].removesuffix(")")}
        depth = len(row["pad"]) // 2
        name = row["name"] or ""
        if row["times"]:
            base, _, index = name.partition(".")
            name = f"{base}.{index.split('-')[0] or 0}"
        del stack[depth:]
        row["path"] = ".".join(stack[1:] + [name]) if depth else ""
        stack.append(name)
        rows.append(row)
    return rows


def lines(model: nn.Module) -> list[str]:
    """print(model)'s lines with the padding before the count column cut to two spaces."""
    return [re.sub(r"(?<=\S) {2,}#", "  #", line) for line in repr(model).splitlines()]


def number(count: str) -> int:
    """'12,288' -> 12288; '2 x 45,440' -> 90880."""
    return int(np.prod([int(p.replace(",", "")) for p in count.split(" x ")]))


# ---------------------------------------------------------------- print(model)
def test_print_model_is_the_tree_with_every_modules_count_from_the_model_itself():
    cfg = TINY.with_(n_layers=3)
    model = nn.LM(cfg, generator=tb.Generator(0))
    rows, modules = parsed(model), dict(model.named_modules())
    shapes = {name: p.shape for name, p in model.named_parameters()}
    assert rows[0]["kind"] == "LM" and number(rows[0]["count"]) == model.num_parameters() == total_params(cfg)
    assert repr(model).splitlines()[0].endswith(f"# {model.num_parameters():,} parameters")
    top = [r for r in rows if len(r["pad"]) == 2]
    assert [r["name"] for r in top] == ["embed", "layers", "norm", "lm_head"]
    assert sum(number(r["count"]) for r in top) == model.num_parameters()          # the children add up
    assert (top[1]["times"], top[1]["kind"]) == ("3", type(model.layers[0]).__name__)
    assert number(top[1]["count"]) == sum(block.num_parameters() for block in model.layers)
    assert len(rows) == 1 + 4 + 11                                      # LM, its 4 children, one block's 11 modules
    for row in rows:
        module = modules[row["path"]]
        assert row["kind"] == type(module).__name__
        assert number(row["count"]) == module.num_parameters() * int(row["times"] or 1), row
        for name, shape in re.findall(r"(\w+) (\([\d, ]*\))", row["own"]):
            assert shape == str(shapes[f"{row['path']}.{name}"]), (row["path"], name)


def test_print_model_lists_every_parameter_shape_of_an_unfolded_model():
    """Layers that differ are not folded: every parameter of named_parameters() appears, with its shape."""
    model = nn.LM(TINY, generator=tb.Generator(0))
    model.layers[1].attn.q_proj.weight.requires_grad = False            # now layers.1 differs from layers.0
    text = repr(model)
    assert "(layers.0): PreNormBlock(" in text and "(layers.1): PreNormBlock(" in text and " x " not in text
    listed = re.findall(r"(\w+) (\([\d, ]*\))", text)
    assert sorted((n.rsplit(".", 1)[1], str(p.shape)) for n, p in model.named_parameters()) == sorted(listed)
    assert "(q_proj): Linear(weight (64, 64) frozen)" in text


def test_a_run_inside_a_longer_list_is_folded_by_its_indices():
    class Stack(nn.Module):
        def __init__(self):
            g = tb.Generator(0)
            self.layers = [nn.Linear(4, 4, generator=g), nn.Linear(4, 4, generator=g), nn.Linear(4, 2, generator=g)]
    assert lines(Stack()) == [
        "Stack(  # 40 parameters",
        "  (layers.0-1): 2 x Linear(weight (4, 4))  # 2 x 16",
        "  (layers.2): Linear(weight (2, 4))  # 8",
        ")"]


def test_pytorch_prints_the_same_tree_shape():
    """The tree's structure, loosely against PyTorch's: one line per module, '(name): Kind(' nesting, folded runs
    'N x Kind', the same attribute names, in the same order."""
    torch_model = torch.nn.Sequential()
    torch_model.add_module("embed", torch.nn.Embedding(256, 64))
    torch_model.add_module("layers", torch.nn.ModuleList([torch.nn.Linear(64, 64, bias=False) for _ in range(2)]))
    torch_model.add_module("lm_head", torch.nn.Linear(64, 256, bias=False))

    class Ours(nn.Module):
        def __init__(self):
            g = tb.Generator(0)
            self.embed = nn.Embedding(256, 64, generator=g)
            self.layers = [nn.Linear(64, 64, generator=g) for _ in range(2)]
            self.lm_head = nn.Linear(64, 256, generator=g)
    theirs = [re.match(r" *\(([\w-]+)\)", line).group(1) for line in repr(torch_model).splitlines()[1:-1]
              if line.startswith("  (") and not line.startswith("   ")]
    ours = [r["name"] for r in parsed(Ours()) if len(r["pad"]) == 2]
    assert theirs == ours == ["embed", "layers", "lm_head"]
    assert "2 x Linear" in repr(torch_model) and "2 x Linear" in repr(Ours())
    assert sum(p.numel() for p in torch_model.parameters()) == Ours().num_parameters() == 2 * 16_384 + 2 * 4_096


def test_a_module_held_twice_is_shown_once_and_a_mixture_shows_its_own_parameters():
    g = tb.Generator(0)
    shared = nn.Linear(2, 2, generator=g)

    class Twice(nn.Module):
        def __init__(self):
            self.a, self.b = shared, shared
    assert lines(Twice()) == ["Twice(  # 4 parameters", "  (a): Linear(weight (2, 2))  # 4",
                              "  (b): the module a, again", ")"]
    moe = nn.MoE(TINY.with_(n_experts=4, experts_top_k=2), generator=g)
    text = repr(moe)
    assert "(gate_proj): Parameter (4, 172, 64)" in text and "# 44,032" in text
    assert text.splitlines()[0].endswith(f"# {moe.num_parameters():,} parameters")


def test_a_meta_model_of_70b_prints_quickly_and_folds_its_80_layers():
    model = nn.LM(nn.preset("llama2-70b"), device="meta")
    lines = repr(model).splitlines()
    assert lines[0].endswith("# 68,976,648,192 parameters") and len(lines) < 30
    assert any("(layers): 80 x PreNormBlock(" in line for line in lines)


# ---------------------------------------------------------------- train() and eval()
def test_train_and_eval_set_the_flag_on_every_module_and_change_nothing_else():
    model = nn.LM(TINY, generator=tb.Generator(0))
    ids = tb.tensor([[1, 2, 3, 4]])
    before = model(ids).numpy()
    assert model.eval() is model
    assert all(m.training is False for _, m in model.named_modules())
    np.testing.assert_array_equal(model(ids).numpy(), before)         # no dropout, no batch norm: the same
    assert all(p.requires_grad for p in model.parameters())          # eval is no no_grad (as in PyTorch)
    assert model.train() is model and all(m.training is True for _, m in model.named_modules())
    assert nn.Linear(2, 2).training is True                           # a new module trains, as in PyTorch
    model.layers[0].train(False)                                      # a part alone
    assert [m.training for _, m in model.named_modules()].count(False) == len(dict(model.layers[0].named_modules()))


def test_train_refuses_a_mode_that_is_not_a_bool():
    with pytest.raises(TypeError, match=msg("train", "True", "False", "'eval'")):
        nn.Linear(2, 2).train("eval")


def test_a_module_of_your_own_reads_training_as_in_pytorch():
    class Noisy(nn.Module):
        def forward(self, x):
            return x * 2.0 if self.training else x

    class Outer(nn.Module):
        def __init__(self):
            self.inner = Noisy()
    outer = Outer()
    x = tb.ones(2)
    assert outer.inner(x).tolist() == [2.0, 2.0]
    assert outer.eval().inner(x).tolist() == [1.0, 1.0]


# ---------------------------------------------------------------- the default generator
def draws(seed: int, *shape) -> np.ndarray:
    """numpy's PCG64 standard normals, float64: what tb.Generator(seed) draws."""
    return np.random.default_rng(seed).standard_normal(shape)


def test_linear_without_a_generator_draws_from_generator_0_with_a_zero_bias():
    layer = nn.Linear(3, 4, bias=True, dtype=tb.float64)
    np.testing.assert_allclose(layer.weight.numpy(), draws(0, 4, 3) / np.sqrt(3), rtol=1e-15)   # N(0, 1/fan_in)
    np.testing.assert_array_equal(layer.bias.numpy(), np.zeros(4))
    np.testing.assert_array_equal(nn.Linear(3, 4).weight.numpy(), nn.Linear(3, 4).weight.numpy())  # the same each time


def test_embedding_without_a_generator_draws_from_generator_0():
    np.testing.assert_allclose(nn.Embedding(10, 4, dtype=tb.float64).weight.numpy(), draws(0, 10, 4) / 2.0, rtol=1e-15)


def test_an_lm_without_a_generator_draws_its_layers_from_one_generator_0():
    """LM(cfg) is LM(cfg, generator=tb.Generator(0)): one stream for every weight, so no two layers are alike."""
    default, given = nn.LM(TINY), nn.LM(TINY, generator=tb.Generator(0))
    for (name, p), q in zip(default.named_parameters(), given.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy(), err_msg=name)
    q0, q1 = (block.attn.q_proj.weight.numpy() for block in default.layers)
    k0 = default.layers[0].attn.k_proj.weight.numpy()
    assert not np.allclose(q0, q1) and not np.allclose(q0[:32], k0)


def test_pytorchs_init_differs_as_documented():
    """PyTorch: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias (variance 1/(3 fan_in)); here N(0, 1/fan_in) and
    a zero bias. The documented difference, measured on a wide layer."""
    fan_in = 4096
    theirs = torch.nn.Linear(fan_in, 256)
    ours = nn.Linear(fan_in, 256, bias=True)
    assert theirs.weight.detach().var().item() * fan_in == pytest.approx(1 / 3, rel=0.02)
    assert ours.weight.numpy().var() * fan_in == pytest.approx(1.0, rel=0.02)
    assert theirs.bias.detach().abs().max().item() > 0 and not ours.bias.numpy().any()


def test_a_block_given_none_is_refused_since_its_projections_would_draw_alike():
    with pytest.raises(TypeError, match=msg("q_proj", "one explicit generator", "tb.Generator(seed)", "None")):
        nn.TransformerBlock(TINY, generator=None)


# ---------------------------------------------------------------- generate is greedy by default
def greedy_by_hand(model: nn.LM, ids: np.ndarray, n: int) -> np.ndarray:
    """n tokens, each numpy's argmax of the model's last logits over the whole sequence so far."""
    for _ in range(n):
        logits = model(tb.tensor(ids)).numpy()[:, -1]                 # (B, V)
        ids = np.concatenate([ids, logits.argmax(-1)[:, None]], axis=1)
    return ids


@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_without_a_generator_is_greedy(use_cache):
    model = nn.LM(TINY, generator=tb.Generator(3), dtype=tb.float64)
    ids = np.array([[5, 17, 3], [9, 9, 200]])
    out = model.generate(tb.tensor(ids), 6, use_cache=use_cache).numpy()
    np.testing.assert_array_equal(out, greedy_by_hand(model, ids, 6))
    np.testing.assert_array_equal(out, model.generate(tb.tensor(ids), 6, temperature=0, use_cache=use_cache).numpy())


def test_greedy_ignores_a_generator_as_it_ignores_top_k():
    """Temperature 0 draws nothing: a generator passed along changes no token, and is not advanced."""
    model = nn.LM(TINY, generator=tb.Generator(3), dtype=tb.float64)
    ids, g = tb.tensor([[5, 17, 3]]), tb.Generator(1)
    plain = model.generate(ids, 5).numpy()
    np.testing.assert_array_equal(model.generate(ids, 5, top_k=3, generator=g).numpy(), plain)
    assert g.state == tb.Generator(1).state


# ---------------------------------------------------------------- did you mean
@pytest.mark.parametrize("typed, meant", [("lama2-7b", "'llama2-7b'"), ("Tiny", "'tiny'"), ("gpt2", "'gpt2-small'"),
                                          ("llama3-7b", "'llama3-70b' or 'llama3-8b'")])
def test_a_mistyped_preset_says_which_one_was_meant(typed, meant, command_line):
    with pytest.raises(ValueError, match=msg(None, f"unknown preset {typed!r}", "expected one of", "tiny",
                                             f"did you mean {meant}")):
        nn.preset(typed)
    err = command_line.mistake("params", "--preset", typed)
    assert f"did you mean {meant}" in err and err.count("\n") == 1


def test_a_name_like_no_preset_gets_the_list_alone():
    with pytest.raises(ValueError, match="expected one of") as e:
        nn.preset("resnet")
    assert "did you mean" not in str(e.value)
