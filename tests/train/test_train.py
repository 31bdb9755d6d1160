"""The training loop and its demonstrations (train.py, data.py, `train` in cli.py). Oracles: numpy's
log-softmax and argmax for the loss and the accuracy, the schedule's formula written out here, the text itself
for the batches and the unigram entropy, the safetensors file read back with the safetensors package, and a
second run with the same seed for reproducibility."""
import json
import math
from collections import Counter

import numpy as np
import pytest
from safetensors.numpy import load_file

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.data import CharTokenizer, induction_batch, python_help_text, text_batch, text_splits
from tinygrad_block.nn.attention import apply_rope
from tinygrad_block.train import (INDUCTION_THRESHOLD, Schedule, attention_weights, evaluate_lm, generate_long,
                                  induction_demo, induction_scores, lm_loss, text_demo, train)

SMALL = nn.BlockConfig(d_model=32, n_heads=4, n_kv_heads=2, d_ff=64, n_layers=2, vocab_size=16, max_seq_len=32)


def small_model(seed: int = 0, dtype=tb.float32) -> nn.LM:
    return nn.LM(SMALL, generator=tb.Generator(seed), dtype=dtype)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


# ---------------------------------------------------------------- data
def test_induction_batch_repeats_the_first_half():
    ids, targets = induction_batch(5, 7, 16, tb.Generator(3))
    ids, targets = ids.numpy(), targets.numpy()
    assert ids.shape == (5, 13) and targets.shape == (5, 7) and ids.dtype == np.int64
    assert (targets == ids[:, :7]).all()                        # the second half is the first again
    assert (ids[:, 7:] == targets[:, :6]).all()                 # the ids hold all but the last repeated token
    assert ids.min() >= 0 and ids.max() < 16


def test_text_batches_are_windows_of_the_text_shifted_by_one():
    text = "the quick brown fox jumps over the lazy dog; " * 3
    tok = CharTokenizer.from_text(text)
    train_ids, val_ids = text_splits(text, tok, holdout=0.25)
    assert tok.decode(train_ids) + tok.decode(val_ids) == text
    assert val_ids.shape[0] == len(text) - int(len(text) * 0.75)
    ids, targets = text_batch(train_ids, 6, 10, tb.Generator(0))
    assert ids.shape == targets.shape == (6, 10)
    for row_ids, row_targets in zip(ids.numpy(), targets.numpy()):
        window = tok.decode(row_ids) + tok.decode(row_targets[-1:])
        assert window in tok.decode(train_ids)                  # 11 consecutive characters of the text
        assert (row_ids[1:] == row_targets[:-1]).all()


def test_char_tokenizer_round_trips_and_names_what_it_cannot_encode(tmp_path):
    tok = CharTokenizer.from_text("hello, world")
    assert tok.chars == " ,dehlorw" and tok.decode(tok.encode("world, hello")) == "world, hello"
    tok.save(tmp_path / "vocab.json")
    assert json.loads((tmp_path / "vocab.json").read_text()) == {c: i for i, c in enumerate(tok.chars)}
    assert CharTokenizer.load(tmp_path / "vocab.json").chars == tok.chars
    with pytest.raises(ValueError, match="characters not in the vocabulary: 'XZ'"):
        tok.encode("hello Xw Z")
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 9\), got 9"):
        tok.decode([0, 9])


def test_data_errors_say_what_was_expected():
    with pytest.raises(ValueError, match="induction_batch: n must be a positive int, got 0"):
        induction_batch(2, 0, 8, tb.Generator(0))
    with pytest.raises(ValueError, match=r"text_batch: data must be 1-D token ids longer than seq_len=10"):
        text_batch(tb.arange(10), 2, 10, tb.Generator(0))
    with pytest.raises(ValueError, match=r"text_splits: holdout .* in \(0, 1\); got 1.5"):
        text_splits("abc", CharTokenizer("abc"), holdout=1.5)


# ---------------------------------------------------------------- the loss, the evaluation, the loop
def test_lm_loss_and_evaluation_equal_numpy_on_the_last_t_positions():
    model = small_model(dtype=tb.float64)
    ids, targets = induction_batch(4, 6, SMALL.vocab_size, tb.Generator(1))              # (4, 11), (4, 6)
    logp = log_softmax(model(ids).numpy())[:, 5:]                                        # positions 5 .. 10
    picked = np.take_along_axis(logp, targets.numpy()[..., None], axis=-1)[..., 0]
    assert abs(lm_loss(model, ids, targets).item() - (-picked.mean())) < 1e-12
    metrics = evaluate_lm(model, ids, targets)
    assert abs(metrics["loss"] + picked.mean()) < 1e-12
    assert metrics["accuracy"] == (logp.argmax(-1) == targets.numpy()).mean()
    with pytest.raises(ValueError, match=r"lm_loss: targets must be \(B, T\) with T <= L"):
        lm_loss(model, ids[:, :3], targets)


def run_small(seed: int, steps: int):
    g = tb.Generator(seed)
    model = nn.LM(SMALL, generator=g)
    history = train(model, lambda: induction_batch(16, 5, SMALL.vocab_size, g),
                    Schedule(steps=steps, lr=1e-2, warmup=5, lr_min=1e-3), progress=False)
    return model, history


def test_the_loop_lowers_the_loss_and_one_seed_repeats_it_exactly():
    _, first = run_small(seed=0, steps=80)
    _, again = run_small(seed=0, steps=80)
    _, other = run_small(seed=1, steps=5)
    assert first.losses == again.losses                           # bit for bit
    assert other.losses != first.losses[:5]
    assert len(first.losses) == 80 and first.tokens == 80 * 16 * 9
    assert np.mean(first.losses[:5]) > 0.9 * math.log(16)         # it starts near chance, ln(vocab) ...
    assert np.mean(first.losses[-5:]) < 0.1 * math.log(16)        # ... and learns to copy
    for step, lr in enumerate(first.lrs):                         # warmup 5 steps, then a half cosine to 1e-3
        want = 1e-2 * (step + 1) / 5 if step < 5 else 1e-3 + 9e-3 * (1 + math.cos(math.pi * (step - 5) / 75)) / 2
        assert abs(lr - want) < 1e-15


def test_train_evaluates_every_so_often_and_after_the_last_step():
    g = tb.Generator(0)
    model = small_model()
    seen = []
    history = train(model, lambda: induction_batch(4, 5, SMALL.vocab_size, g), Schedule(steps=7, lr=1e-3), eval_every=3,
                    evaluate=lambda m: seen.append(tb.trace.STATE.get().grad_enabled) or {"loss": 1.0}, progress=False)
    assert [s for s, _ in history.evals] == [3, 6, 7] and seen == [False] * 3     # under no_grad
    with pytest.raises(ValueError, match="Schedule: steps must be a positive int, got 0"):
        train(model, lambda: None, Schedule(steps=0, lr=1e-3))
    with pytest.raises(TypeError, match=r"train: the third argument is a Schedule\(steps=..., lr=...\), got dict"):
        train(model, lambda: None, {"steps": 7, "lr": 1e-3})


# ---------------------------------------------------------------- attention, generation
def test_attention_weights_are_the_softmax_of_the_first_layer_recomputed():
    model = small_model(dtype=tb.float64)
    ids, _ = induction_batch(2, 6, SMALL.vocab_size, tb.Generator(2))
    weights = attention_weights(model, ids)
    assert [w.shape for w in weights] == [(2, 4, 11, 11)] * 2
    attn, (B, L) = model.layers[0].attn, ids.shape                  # recompute layer 0 by hand, as numpy
    x = model.layers[0].norm1(model.embed(ids))
    q = attn.q_proj(x).reshape(B, L, 4, 8).transpose(1, 2)
    k = attn.k_proj(x).reshape(B, L, 2, 8).transpose(1, 2)
    q, k = apply_rope(q, attn.rope_cos[:L], attn.rope_sin[:L]).numpy(), apply_rope(k, attn.rope_cos[:L],
                                                                                   attn.rope_sin[:L]).numpy()
    scores = q @ np.repeat(k, 2, axis=1).swapaxes(-1, -2) / math.sqrt(8) + np.triu(np.full((L, L), -np.inf), 1)
    assert np.abs(weights[0].numpy() - np.exp(log_softmax(scores))).max() < 1e-14
    stripe = [[np.mean([w.numpy()[:, h, q, q - 5] for q in range(5, 11)]) for h in range(4)] for w in weights]
    assert np.allclose(induction_scores(weights, 6), stripe, rtol=1e-14)


def test_generate_long_goes_past_the_context_and_begins_as_generate():
    model = small_model()
    prompt = tb.tensor([[1, 2, 3]])
    long = generate_long(model, prompt, 40, window=16, temperature=0.0)
    assert long.shape == (1, 43) and long.shape[1] > SMALL.max_seq_len
    assert long[:, :11].tolist() == model.generate(prompt, 8, temperature=0.0).tolist()   # the first window // 2
    sampled = [generate_long(model, prompt, 20, window=16, generator=tb.Generator(5)).tolist() for _ in range(2)]
    assert sampled[0] == sampled[1]


# ---------------------------------------------------------------- the demonstrations
@pytest.mark.slow
def test_induction_demo_passes_its_threshold_with_an_induction_stripe(tmp_path):
    result = induction_demo(tmp_path, steps=120, seed=0, progress=False)
    assert result["accuracy"] >= INDUCTION_THRESHOLD == 0.99 and result["passed"]
    assert result["induction_head"]["stripe_weight"] > 0.9            # attention on the token n - 1 back
    for name in ("loss_curve", "attention"):
        assert open(result["paths"][name], "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    saved = json.loads((tmp_path / "history.json").read_text())
    assert saved["losses"] == result["history"].losses and saved["results"]["accuracy"] == result["accuracy"]


def test_checkpoint_is_safetensors_that_loads_back_to_the_same_weights(tmp_path):
    result = induction_demo(tmp_path, steps=3, seed=1, progress=False, pictures=False)
    folder = tmp_path / "checkpoint"
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]   # no pickle
    arrays = load_file(folder / "model.safetensors")
    model = result["model"]
    assert sum(a.size for a in arrays.values()) == model.num_parameters()
    loaded = nn.LM.from_pretrained(folder)
    mine, back = model.state_dict(), loaded.state_dict()
    assert mine.keys() == back.keys()
    assert all(np.array_equal(mine[k].numpy(), back[k].numpy()) for k in mine)


TEXT_LOSS = 2.2   # nats per character after 150 steps; the text's unigram entropy is about 3.25


@pytest.mark.slow
def test_text_demo_loss_falls_below_its_stated_value(tmp_path):
    result = text_demo(tmp_path, steps=150, seed=0, progress=False, pictures=False, sample_len=40)
    text = python_help_text()
    counts = Counter(text[:int(len(text) * 0.9)])
    unigram = -sum(c / sum(counts.values()) * math.log(c / sum(counts.values())) for c in counts.values())
    assert result["loss"] < TEXT_LOSS < unigram - 1.0               # it uses the context, by a nat per character
    assert abs(result["bits_per_char"] - result["loss"] / math.log(2)) < 1e-12
    assert len(result["sample"]) == 44 and result["sample"].startswith("The ")
    tok = CharTokenizer.load(tmp_path / "checkpoint" / "vocab.json")
    assert tok.chars == result["tokenizer"].chars and (tmp_path / "sample.txt").read_text() == result["sample"]


# ---------------------------------------------------------------- the command
def test_train_command_prints_where_the_run_went(tmp_path, command_line):
    data = command_line.json("train", "induction", "--steps", "120", "--out", tmp_path, "--no-plots")
    assert data["command"] == "train" and data["passed"] and data["accuracy"] >= 0.99
    assert (tmp_path / "checkpoint" / "model.safetensors").exists() and "loss_curve" not in data["paths"]
    assert data["engine"] == "compiled" and data["replayed"] == 117     # 3 eager captures, then replays
    status, text, _ = command_line.status("train", "induction", "--steps", "5", "--seed", "3", "--out", tmp_path,
                                          "--no-plots")
    assert status == 1                                                   # too few steps: threshold missed
    assert "threshold 99%: NOT reached" in text and f"checkpoint: {tmp_path / 'checkpoint'}" in text
    assert "tokens/s (compiled: 2 of 5 steps replayed, the others captured eagerly)" in text
    status, text, _ = command_line.status("train", "induction", "--steps", "2", "--out", tmp_path, "--no-plots",
                                          "--eager")
    assert status == 1 and "tokens/s (eager, op by op)" in text
    assert json.loads((tmp_path / "history.json").read_text())["engine"] == "eager"


@pytest.mark.parametrize("argv, message", [
    (["train", "poetry"], "invalid choice: 'poetry'"),
    (["train", "induction", "--steps", "0"], "must be a positive integer, got '0'"),
    (["train", "text", "--seed", "-1"], "a seed is an integer >= 0, got '-1'"),
    (["train", "text", "--device", "meta"], "'meta' holds shapes but no values"),
])
def test_train_command_refuses_bad_arguments(command_line, argv, message):
    assert message in command_line.mistake(*argv)


def test_train_command_mistakes_found_later_are_one_line(tmp_path, monkeypatch, command_line):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    err = command_line.mistake("train", "induction", "--out", blocker / "run").strip().splitlines()
    assert len(err) == 1 and "a file is in the way" in err[0]
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)        # as if matplotlib were missing
    err = command_line.mistake("train", "induction", "--out", tmp_path / "run").strip().splitlines()
    assert len(err) == 1 and "install the 'viz' extra" in err[0] and "--no-plots" in err[0]


def test_train_text_on_a_file_of_your_own(tmp_path, command_line):
    """--text-file: the vocabulary is that text's characters, the prompt falls back to its first four characters
    when it lacks "The ", and the checkpoint continues exactly what was trained."""
    words = "a cat sat on a mat; a dog ran to a park. " * 60                    # no 'T': the prompt falls back
    source = tmp_path / "mine.txt"
    source.write_text(words, encoding="utf-8")
    data = command_line.json("train", "text", "--text-file", source, "--steps", "20", "--out", tmp_path / "run",
                             "--no-plots")
    assert data["source"] == str(source) and data["prompt"] == "a ca" and data["sample"].startswith("a ca")
    assert data["vocab_size"] == len(set(words)) == 15 and data["train_chars"] + data["held_out_chars"] == len(words)
    tok = CharTokenizer.load(tmp_path / "run" / "checkpoint" / "vocab.json")
    assert tok.chars == "".join(sorted(set(words))) and set(data["sample"]) <= set(words)


@pytest.mark.parametrize("content, argv, message", [
    ("short", ["text"], "has 5 characters; training windows of 65 need at least 1,300"),
    (None, ["text"], "cannot read it as UTF-8 text (No such file or directory)"),
    (b"\xda\xff\xfe", ["text"], "cannot read it as UTF-8 text ('utf-8' codec can't decode"),
    ("x" * 2000, ["induction"], "--text-file is for `train text`; `train induction` makes its own data"),
])
def test_train_text_file_mistakes_are_one_line(tmp_path, content, argv, message, command_line):
    source = tmp_path / "mine.txt"
    if isinstance(content, str):
        source.write_text(content)
    elif content is not None:
        source.write_bytes(content)
    err = command_line.mistake("train", *argv, "--text-file", source, "--out", tmp_path / "run", "--no-plots")
    err = err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
