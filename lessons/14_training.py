# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 14 — Training a small model
#
# Until now every model in the course had random weights. This lesson trains one. The task is small enough to
# learn in a few seconds on a CPU, yet it needs attention to do real work: a sequence of random tokens is
# followed by the same tokens again, and the model must predict the repeat. We write the training loop out,
# take an AdamW step by hand, draw the learning-rate schedule, watch the loss fall in one sudden drop, find the
# attention head that does the copying, and read the trained model layer by layer with the logit lens.
#
# **What you will learn**
# - the training loop: a batch, the loss, backward, clipping, an optimizer step, a schedule step;
# - AdamW, one parameter by hand, and why its first step moves every weight by the same amount;
# - the warmup + cosine learning-rate schedule, plotted;
# - the loss curve: where it starts (and why not at chance), the plateau, and the sudden drop;
# - the copying head, seen in its attention pattern, and what it really learned: a fixed distance back, not a match;
# - the logit lens: each layer's residual stream read through the final norm and the unembedding, showing
#   where in the model the right answer appears.
#
# Run it as a script, `python -m tinygrad_block lesson 14`, or as a notebook,
# `python -m tinygrad_block lesson 14 --notebook --execute` (it lands beside this file).

# %%
import math

import numpy as np

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.data import induction_batch
from tinygrad_block.optim import AdamW, WarmupCosine, clip_grad_norm, warmup_cosine
from tinygrad_block.pictures import figure
from tinygrad_block.train import (INDUCTION, Schedule, attention_weights, evaluate_lm, induction_scores, lm_loss,
                                  train)

from course import out_dir, show

OUT = out_dir(14)         # lessons/out/14/: this lesson's pictures

# %% [markdown]
# ## 1. The task: copy what came before
#
# Each training sequence is $n = 10$ random tokens from a vocabulary of 32, followed by the same 10 tokens
# again (`data.induction_batch`). The model reads the first 19 tokens and predicts the token after each one
# (the 20th token has nothing after it to predict, so it is never read).
# The loss is the **cross-entropy**: at each predicted position, $-\ln p$ of the probability $p$ that the
# model's softmax (lesson 04) gives the right next token, averaged over the positions, in nats. It is 0 for a
# sure and right model, and $\ln V$ for one that spreads its guess evenly over all $V$ tokens.
# The first half cannot be predicted: each of its tokens is a fresh random draw, so the best possible loss
# there is chance, $\ln 32 \approx 3.466$ nats. From position $n - 1 = 9$ on, the next token is a copy of the
# one $n - 1 = 9$ places back. Only attention can fetch it, since only attention moves information between
# positions. So the loss is taken on the second half only: `induction_batch` returns those 10 tokens as the
# targets, and `train.lm_loss` scores the logits of the last 10 positions against them.
#
# The model is `train.INDUCTION`: a Llama-style LM with 2 layers, $d_{model} = 64$, 4 heads, $d_{ff} = 128$,
# RoPE, and an untied head.

# %%
N, V = 10, INDUCTION.vocab_size
ids, targets = induction_batch(4, N, V, tb.Generator(1))                  # (4, 19), (4, 10)
a, t = ids.numpy(), targets.numpy()
print(f"ids {ids.shape}: {a[0].tolist()}")
print(f"targets {targets.shape}: {t[0].tolist()}  (the tokens after positions {N - 1} .. {2 * N - 2})")
print(f"chance: ln {V} = {math.log(V):.4f} nats; {INDUCTION.n_layers} layers, d_model {INDUCTION.d_model}, "
      f"{INDUCTION.n_heads} heads, d_ff {INDUCTION.d_ff}, "
      f"{sum(p.size for p in nn.LM(INDUCTION, generator=tb.Generator(0)).parameters()):,} parameters")
assert ids.shape == (4, 2 * N - 1) and targets.shape == (4, N) and V == 32
assert np.array_equal(a[:, N:], a[:, :N - 1]) and np.array_equal(t, a[:, :N])     # the second half repeats the first
assert abs(math.log(V) - 3.466) < 5e-4
assert (INDUCTION.n_layers, INDUCTION.d_model, INDUCTION.n_heads, INDUCTION.d_ff) == (2, 64, 4, 128)

# %% [markdown]
# ## 2. One step, and AdamW by hand
#
# A training step is five lines:
#
# ```python
# loss = lm_loss(model, ids, targets)          # cross-entropy of the predicted half
# opt.zero_grad()                              # forget the last step's gradients
# loss.backward()                              # fill p.grad for every parameter
# clip_grad_norm(model.parameters(), 1.0)      # if the gradients' global norm is above 1, scale them down to 1
# opt.step()                                   # AdamW: move every parameter
# ```
#
# Clipping (`optim.clip_grad_norm`) looks at all the gradients together as one long vector. If its length, the
# **global norm**, is above 1.0, every gradient is multiplied by the same factor to bring it down to 1.0, so one
# unlucky batch cannot throw the weights far; the direction of the step is kept.
#
# AdamW (`optim.AdamW`) keeps two running averages per weight: $m$ of the gradient and $v$ of its square. At
# step $t = 1, 2, \dots$, with $\beta_1 = 0.9$, $\beta_2 = 0.999$, $\epsilon = 10^{-8}$:
#
# $$m \leftarrow \beta_1 m + (1-\beta_1) g, \quad v \leftarrow \beta_2 v + (1-\beta_2) g^2, \quad
# \hat m = \frac{m}{1-\beta_1^t}, \quad \hat v = \frac{v}{1-\beta_2^t}, \quad
# p \leftarrow p(1 - \eta\lambda) - \eta\,\frac{\hat m}{\sqrt{\hat v} + \epsilon}.$$
#
# Both averages start at zero, so early on they are too small; dividing by $1 - \beta^t$ corrects that bias.
# The **weight decay** $\lambda$ (0.01 here) pulls every weight towards zero, by the fraction $\eta\lambda$ at
# each step. In AdamW it is **decoupled**: it shrinks $p$ directly, instead of being added to the gradient as
# $\lambda p$ (the "L2" penalty of plain Adam), where Adam's division would rescale it. That is the "W" in AdamW.
#
# Below, one parameter of a float64 copy of the model is updated by hand in numpy for two steps, and compared with
# what `AdamW.step()` did to it. The **learning rate**, the step size $\eta$ of the formula, is $\eta = 1.5 \times
# 10^{-4}$, the first one that the schedule of section 3 uses. They agree to $10^{-16}$, the rounding of float64
# (the library groups the same arithmetic a little differently).
#
# **The first step is a sign step.** At $t = 1$, $\hat m = g$ and $\hat v = g^2$, so the update is
# $\eta\,g / (|g| + \epsilon)$: every weight moves by $\eta$, up or down, whatever the size of its gradient
# (as long as $|g| \gg \epsilon$). In the matrix below the gradients differ by a factor of over 1,000, yet
# every weight moves by 98 % to 100 % of $\eta$ (the 98 % is the smallest gradient, only about 60 times
# $\epsilon$). A gradient estimated from one batch thus moves every weight by the full step size. This is one
# reason to start with a small learning rate and warm it up (section 3).

# %%
model64 = nn.LM(INDUCTION, generator=tb.Generator(0), dtype=tb.float64)
opt64 = AdamW(model64.parameters(), lr=1.5e-4, weight_decay=0.01)
NAME = "layers.1.attn.q_proj.weight"
p = dict(model64.named_parameters())[NAME]
b1, b2, eps, wd, lr = 0.9, 0.999, 1e-8, 0.01, opt64.lr
assert math.isclose(lr, warmup_cosine(0, 3e-3, 20, 150, 3e-4))              # section 3's first rate
w, m, v = p.numpy().copy(), np.zeros(p.shape), np.zeros(p.shape)
gen = tb.Generator(2)
for t in (1, 2):
    loss = lm_loss(model64, *induction_batch(32, N, V, gen))
    opt64.zero_grad()
    loss.backward()
    norm = clip_grad_norm(model64.parameters(), 1.0).item()
    g = p.grad.numpy()                                                    # after clipping
    before = w.copy()
    m = b1 * m + (1 - b1) * g                                             # by hand
    v = b2 * v + (1 - b2) * g * g
    w = w * (1 - lr * wd) - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    opt64.step()                                                          # the library
    gap = np.abs(p.numpy() - w).max()
    print(f"step {t}: loss {loss.item():.4f}, gradient norm {norm:.3f} before clipping, {NAME} {p.shape}: "
          f"by hand vs AdamW.step() differ by {gap:.1e}")
    assert gap < 1e-16 and norm > 1.0                                    # the clip was active
    if t == 1:
        moved = np.abs(w - before * (1 - lr * wd))                       # the move, decay aside
        print(f"  step 1 moved every weight by {moved.min() / lr:.4f} .. {moved.max() / lr:.4f} x lr "
              f"(|g| from {np.abs(g).min():.1e} to {np.abs(g).max():.1e})")
        assert np.abs(moved / lr - np.abs(g) / (np.abs(g) + eps)).max() < 1e-9      # eta |g| / (|g| + eps)
        assert moved.min() / lr > 0.98 and moved.max() / lr <= 1 and np.abs(g).max() / np.abs(g).min() > 1000
        assert 50 < np.abs(g).min() / eps < 70
state = opt64.state[[id(q) for q in opt64.params].index(id(p))]       # p's m, v and step count
print(f"AdamW keeps m and v for each weight: {opt64.state_bytes():,} bytes of state for "
      f"{sum(q.nbytes for q in model64.parameters()):,} bytes of float64 weights; "
      f"step counter {state['step'].item():.0f}")
assert np.abs(state["m"].numpy() - m).max() < 1e-18 and np.abs(state["v"].numpy() - v).max() < 1e-20
assert opt64.state_bytes() == 2 * sum(q.nbytes for q in model64.parameters()) and state["step"].item() == 2

# %% [markdown]
# ## 3. The learning-rate schedule: warmup, then a half cosine
#
# The learning rate $\eta$ is not held fixed. `optim.warmup_cosine` rises linearly for the first `warmup`
# steps, then follows half a cosine down to `lr_min` at the last step:
#
# $$\eta(s) = \eta_{max}\,\frac{s + 1}{\text{warmup}} \ \ (s < \text{warmup}), \qquad
# \eta(s) = \eta_{min} + (\eta_{max} - \eta_{min})\,\frac{1 + \cos\big(\pi\,\frac{s - \text{warmup}}{\text{total}
# - \text{warmup}}\big)}{2} \ \ (s \ge \text{warmup}).$$
#
# Warmup keeps the first steps small while Adam's $v$ is still an average of very few gradients (and, as
# section 2 showed, every weight moves by the full $\eta$ at step 1). The slow decay at the end takes smaller
# and smaller steps, which lets the weights settle instead of bouncing around a minimum at full step size.
#
# Here: $\eta_{max} = 3 \times 10^{-3}$, 20 warmup steps, 150 steps in all, $\eta_{min} = 3 \times 10^{-4}$.
# The rate starts at $\eta_{max} / 20 = 1.5 \times 10^{-4}$, reaches $\eta_{max}$ at step 19, is exactly halfway,
# $(\eta_{max} + \eta_{min}) / 2 = 1.65 \times 10^{-3}$, at step 85 (halfway through the cosine), and would be
# $\eta_{min}$ at step 150, one past the last. `WarmupCosine` drives an optimizer's `lr` by it, stepped
# after each optimizer step.

# %%
LR, WARMUP, STEPS, LR_MIN = 3e-3, 20, 150, 3e-4
lrs = [warmup_cosine(s, LR, WARMUP, STEPS, LR_MIN) for s in range(STEPS + 1)]
print(f"lr at step 0: {lrs[0]:.3g}, 19: {lrs[19]:.3g}, 20: {lrs[20]:.3g}, 85: {lrs[85]:.4g}, "
      f"149: {lrs[149]:.4g}, 150: {lrs[150]:.3g}")
assert math.isclose(lrs[0], LR / WARMUP) and math.isclose(lrs[0], 1.5e-4)
assert lrs[19] == lrs[20] == LR and max(lrs) == LR
assert math.isclose(lrs[85], (LR + LR_MIN) / 2) and math.isclose(lrs[85], 1.65e-3)
assert lrs[150] == LR_MIN and LR_MIN < lrs[149] < 1.01 * LR_MIN
dummy = AdamW([tb.zeros(1, requires_grad=True)], lr=1.0)
driven = WarmupCosine(dummy, LR, WARMUP, STEPS, LR_MIN)
followed = [dummy.lr] + [driven.step() for _ in range(STEPS - 1)]
assert followed == lrs[:STEPS]                                            # the scheduler gives the same rates

fig = figure(6.4, 3.2)
ax = fig.add_subplot()
ax.plot(range(STEPS), lrs[:STEPS], color="C0")
ax.axvline(WARMUP - 0.5, color="0.6", ls=":", lw=1)
ax.annotate("warmup", (WARMUP / 2, LR * 0.5), ha="center", color="0.3")
ax.annotate("half cosine", (85, lrs[85]), xytext=(95, lrs[85] * 1.25), color="0.3")
ax.axhline(LR_MIN, color="C3", ls="--", lw=0.8)
ax.annotate(r"$\eta_{min}$", (60, LR_MIN * 1.15), color="C3")
ax.set(xlabel="step", ylabel="learning rate", title=f"warmup_cosine: {WARMUP} warmup steps, {STEPS} in all",
       xlim=(0, STEPS), ylim=(0, LR * 1.08))
show(fig, OUT / "schedule.png")

# %% [markdown]
# ## 4. The loop
#
# Put the step inside a loop, draw a fresh batch each time, and step the schedule after the optimizer. This is
# the whole of `train.train`, which also records every loss and learning rate, runs an evaluation every so
# often (under `no_grad`, so no graph is kept), and shows a progress bar. It takes the run's numbers as one
# record, `Schedule(steps, lr, warmup, lr_min)`: the same ones our loop uses, kept with a run's checkpoints.
#
# To see that it is the same loop, we run ten steps of our own, then `train` from the same seed. One
# `tb.Generator(0)` draws the initial weights, then 256 held-out sequences (kept apart, never trained on, to
# measure what the model does on sequences it has not seen), then every batch, so the two runs
# see the same numbers, and their first ten losses are equal bit for bit. Then `train` carries on to 150 steps
# of 32 sequences, evaluating the held-out sequences every 10 steps.

# %%
def fresh(seed: int = 0):
    """The model and the held-out sequences, drawn from one generator that then draws every batch."""
    gen = tb.Generator(seed)
    return nn.LM(INDUCTION, generator=gen), induction_batch(256, N, V, gen), gen


model, held_out, gen = fresh()
opt = AdamW(model.parameters(), lr=LR, weight_decay=0.01)
schedule = WarmupCosine(opt, LR, WARMUP, STEPS, LR_MIN)
mine = []
for _ in range(10):
    ids, targets = induction_batch(32, N, V, gen)                         # (32, 19), (32, 10)
    loss = lm_loss(model, ids, targets)
    opt.zero_grad()
    loss.backward()
    clip_grad_norm(model.parameters(), 1.0)
    opt.step()
    schedule.step()
    mine.append(loss.item())

model, held_out, gen = fresh()
history = train(model, lambda: induction_batch(32, N, V, gen),
                Schedule(steps=STEPS, lr=LR, warmup=WARMUP, lr_min=LR_MIN),
                evaluate=lambda m: evaluate_lm(m, *held_out), eval_every=10, progress=False)
print(f"our loop's 10 losses equal train's first 10 bit for bit: {history.losses[:10] == mine}")
print(f"train: {STEPS} steps, {history.tokens:,} tokens in {history.seconds:.1f} s "
      f"({history.tokens_per_s:,.0f} tokens/s); the learning rates follow warmup_cosine: {history.lrs == lrs[:STEPS]}")
assert history.losses[:10] == mine and history.lrs == lrs[:STEPS]
assert history.tokens == STEPS * 32 * (2 * N - 1) and len(history.evals) == STEPS // 10

# %% [markdown]
# ## 5. The loss curve
#
# **Where it starts.** Not at chance, $\ln 32$, but above it. A random LM head gives logits with a spread of
# about $\sigma = 1$ across the vocabulary, and a model that is wrong with some confidence pays for it: for
# logits drawn independently with standard deviation $\sigma$, the expected cross-entropy is close to
# $\ln V + \sigma^2 / 2$. The measured spread of the initial logits gives that estimate to within 0.05 of the
# first batch's loss.
#
# **The plateau and the drop.** For dozens of steps the held-out loss creeps down and the **accuracy** (the
# fraction of the 2,560 held-out targets that are the model's top choice) stays low. Then, within at most 30 steps,
# the accuracy jumps from under a half to over 99 %. Copying pays off only once layer 1's heads have found the
# right key and put nearly all their weight on it (section 6): a head that spreads its weight over many keys
# averages many tokens and predicts none of them. Such sudden drops are typical of induction-like **circuits** in
# language models, heads in different layers that work together to copy earlier text (section 6 says what an
# induction head is).
#
# At the end the held-out loss is under 0.05 nats, and the accuracy is at least 99 %.

# %%
init_model, init_held, _ = fresh()
with tb.no_grad():
    sigma = float(init_model(init_held[0]).numpy().std())                 # spread of the initial logits
estimate = math.log(V) + sigma ** 2 / 2
evals = {s: e for s, e in history.evals}
low = max(s for s, e in evals.items() if e["accuracy"] < 0.5)             # the last evaluation under 50 %
high = min(s for s, e in evals.items() if e["accuracy"] >= 0.99)         # the first at 99 % or more
print(f"first batch's loss {history.losses[0]:.3f}; chance ln {V} = {math.log(V):.3f}; initial logits' spread "
      f"sigma = {sigma:.3f}, ln V + sigma^2 / 2 = {estimate:.3f}")
print("step  held-out loss  accuracy")
for s, e in evals.items():
    print(f"{s:4d}  {e['loss']:13.4f}  {e['accuracy']:8.2%}")
print(f"under 50 % at step {low}, at 99 % or more from step {high}: {high - low} steps; "
      f"final loss {evals[STEPS]['loss']:.4f}, accuracy {evals[STEPS]['accuracy']:.2%}")
assert history.losses[0] > math.log(V) and abs(history.losses[0] - estimate) < 0.05 and abs(sigma - 1) < 0.1
assert low >= 30 and high - low <= 30
assert evals[STEPS]["loss"] < 0.05 and evals[STEPS]["accuracy"] >= 0.99 and held_out[1].size == 2_560

fig = figure(10, 3.6)
left, right = fig.subplots(1, 2)
left.plot(range(1, STEPS + 1), history.losses, lw=0.8, alpha=0.7, label="training batch")
left.plot(list(evals), [e["loss"] for e in evals.values()], "o-", ms=3, label="held out")
left.axhline(math.log(V), color="0.4", ls="--", lw=0.8)
left.annotate(f"chance, ln {V}", (STEPS * 0.98, math.log(V) * 1.1), ha="right", color="0.3")
left.set(yscale="log", xlabel="step", ylabel="cross-entropy (nats per token)", title="loss")
left.legend(loc="lower left")
right.plot(list(evals), [e["accuracy"] for e in evals.values()], "s-", ms=3, color="C2")
right.axhline(1 / V, color="0.4", ls="--", lw=0.8)
right.annotate(f"chance, 1/{V}", (STEPS * 0.98, 1 / V + 0.03), ha="right", color="0.3")
right.axvspan(low, high, color="C2", alpha=0.12)
right.set(xlabel="step", ylabel="held-out accuracy", ylim=(0, 1.04), xlim=(0, STEPS),
          title=f"accuracy: from under 50 % to 99 % in steps {low}-{high}")
show(fig, OUT / "loss_curve.png")

# %% [markdown]
# ## 6. The copying head
#
# Which part of the model does the copying? `train.attention_weights` records each layer's softmax weights,
# (B, H, L, L), as the model runs (an observer, `tb.observe`, reads them; the model is unchanged).
# `train.induction_scores` averages, per head, the weight that the second half's queries put on the key
# $n - 1 = 9$ places back, where the token they must predict sits: the **stripe**.
#
# In layer 1 every head puts over 85 % of its weight on the stripe, and its best head over 95 %. Layer 0 does
# something else: each head puts more than half of its weight on the query's own position, the diagonal, and
# under 20 % on the stripe. In the picture, the stripe is the diagonal line 9 below the main one in the
# lower-left block: it runs from query 9, key 0 to query 18, key 9, where the second half's queries read the
# first half's keys.
#
# **What it learned, honestly.** With $n$ fixed at 10, "the token 9 back" is always at the same *relative*
# position, and RoPE makes a fixed distance back easy to attend to. So this head copies **by position**. The
# induction head found in trained language models works **by content**: a previous-token head in one layer
# writes "the token before me was A" into each position, and a head in the next layer looks for the earlier
# position whose previous token matches the current one, wherever it is. That circuit copies at any distance.
# Ours does not, and we can show it. On sequences with $n = 6, 8, 12, 16$, the trained model's accuracy is
# at chance, about $1/32$ (under $2/32$ at every $n$), and its loss is worse than a uniform guess, $\ln 32$:
# it confidently copies the wrong token. On $n = 7$, layer 1 still looks 9 places back, not 6. Training on a
# different $n$ for each batch forces the content-based circuit, but it takes far more steps than this lesson
# can spend (`docs/training.md`).

# %%
weights = attention_weights(model, held_out[0][:64])                      # 2 x (64, 4, 19, 19)
scores = induction_scores(weights, N)                                     # 2 x 4 stripe weights
w0 = weights[0].numpy()
Lq = w0.shape[-1]
diagonal = w0[:, :, np.arange(Lq), np.arange(Lq)].mean(axis=(0, 2))       # (4,) weight on the query itself
print("stripe weight per head: " + "; ".join(f"layer {i}: " + ", ".join(f"{s:.3f}" for s in row)
                                             for i, row in enumerate(scores)))
print("layer 0, weight on the query's own position: " + ", ".join(f"{d:.3f}" for d in diagonal))
assert min(scores[1]) > 0.85 and max(scores[1]) > 0.95 and max(scores[0]) < 0.2 and diagonal.min() > 0.5

other_n = {}
for n_test in (6, 8, 12, 16):
    with tb.no_grad():
        other_n[n_test] = evaluate_lm(model, *induction_batch(256, n_test, V, tb.Generator(n_test)))
print("accuracy at another n: " + ", ".join(f"n = {k}: {e['accuracy']:.1%} (loss {e['loss']:.2f})"
                                           for k, e in other_n.items()) + f"; chance {1 / V:.1%}")
assert all(e["accuracy"] < 2 / V and e["loss"] > math.log(V) for e in other_n.values())
ids7, _ = induction_batch(64, 7, V, tb.Generator(7))
w7 = attention_weights(model, ids7)[1].numpy()                            # (64, 4, 13, 13)
at = {back: float(np.mean([w7[:, :, q, q - back].mean() for q in range(back, ids7.shape[1])])) for back in (6, 9)}
print(f"n = 7, layer 1: weight on the key 6 back (the right one) {at[6]:.4f}, on the key 9 back {at[9]:.3f}")
assert at[9] > 0.8 and at[6] < 0.01

fig = figure(10, 5.4)
axes = fig.subplots(2, INDUCTION.n_heads)
for i, w in enumerate(weights):
    for h in range(INDUCTION.n_heads):
        ax = axes[i, h]
        ax.imshow(w[0, h].numpy(), cmap="Blues", vmin=0, vmax=1)
        ax.set_title(f"layer {i}, head {h}: stripe {scores[i][h]:.2f}", fontsize=9)
        ax.set_xticks([0, N - 1, 2 * N - 2]), ax.set_yticks([0, N - 1, 2 * N - 2])
        ax.axhline(N - 1.5, color="C3", lw=0.5, ls=":")
        if i == 1:
            ax.set_xlabel("key position")
        if h == 0:
            ax.set_ylabel("query position")
fig.suptitle(f"Attention on one held-out sequence ({N} tokens, then the same {N}); below the red line the "
             f"queries predict the repeat", fontsize=10)
show(fig, OUT / "attention.png")

# %% [markdown]
# ## 7. The logit lens
#
# The model ends with a final norm and the unembedding: $\mathrm{logits} = W_U\,\mathrm{norm}(x^{(n)})$. The
# **logit lens** applies the same two steps to the residual stream at an earlier point and asks: if the model
# stopped here, what would it predict? Lesson 09 did this on an untrained model, where it could only show the
# mechanism. Now the model has learned something, and the lens shows where.
#
# We read the stream at five points: after the embedding, after each of the four sublayers (the last one is
# the model's own output). For every predicted position of the held-out sequences, we take the right token's
# probability and its rank among the 32.
#
# Until layer 1's attention, the right token is at chance: a probability near $1/32$ and a rank near the
# middle. This is as it must be. The token to predict sits 9 positions back, and until layer 1's attention
# nothing brings it to the current position (layer 0's heads look mostly at the position itself, section 6).
# Layer 1's attention writes it in, and the lens's top choice is right at almost every position (a mean
# probability above 0.9). Layer 1's FFN then sharpens it further. The lens is not always so clear: an
# intermediate stream was never trained to be read by the final norm and head, and in deep models the early
# layers often read as noise through it. The tuned lens learns a small map per layer to fix that.

# %%
ids, targets = held_out                                                   # (256, 19), (256, 10)
stages, names = [], ["embedding"]
with tb.no_grad():
    stream = model.embed(ids)                                             # (256, 19, 64)
    stages.append(stream)
    for i, block in enumerate(model.layers):
        stream = stream + block.attn(block.norm1(stream))
        stages.append(stream)
        stream = stream + block.ffn(block.norm2(stream))
        stages.append(stream)
        names += [f"+ attn {i}", f"+ ffn {i}"]
    lens = [model.lm_head(model.norm(s)).numpy()[:, N - 1:] for s in stages]   # 5 x (256, 10, 32): predicted half
    logits = model(ids).numpy()[:, N - 1:]
tg = targets.numpy()


def prob_and_rank(lg: np.ndarray):
    """The right token's probability and rank (1 = top) at every predicted position."""
    p = np.exp(lg - lg.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    right = np.take_along_axis(lg, tg[..., None], -1)                     # (256, 10, 1)
    return np.take_along_axis(p, tg[..., None], -1)[..., 0], (lg > right).sum(-1) + 1


probs, ranks = zip(*(prob_and_rank(lg) for lg in lens))
print(f"{'stage':12} {'P(right)':>9} {'mean rank':>10} {'top-1':>7}")
for name, p, r in zip(names, probs, ranks):
    print(f"{name:12} {p.mean():9.4f} {r.mean():10.2f} {(r == 1).mean():7.1%}")
print(f"the last stage vs the model's logits: {np.abs(lens[-1] - logits).max():.1e}")
assert np.abs(lens[-1] - logits).max() < 1e-5
assert all(abs(p.mean() - 1 / V) < 0.01 and 12 < r.mean() < 21 and (r == 1).mean() < 0.1
           for p, r in zip(probs[:3], ranks[:3]))                          # before layer 1's attention: chance
assert probs[3].mean() > 0.9 and (ranks[3] == 1).mean() > 0.99 and probs[4].mean() > probs[3].mean()

b, t = 0, 3                                                               # one position: sequence 0, target 3
pos, right = N - 1 + t, int(tg[b, t])
print(f"sequence 0, position {pos} (token {int(ids.numpy()[b, pos])}); the right next token is {right}, "
      f"copied from position {pos - (N - 1)}")
for name, lg in zip(names, lens):
    p = np.exp(lg[b, t] - lg[b, t].max())
    p /= p.sum()
    top = np.argsort(-p)[:3]
    print(f"  {name:10} top 3: " + ", ".join(f"{k} ({p[k]:.2f})" for k in top)
          + f";  token {right}: rank {int((lg[b, t] > lg[b, t, right]).sum()) + 1}, P = {p[right]:.3f}")
assert int(ids.numpy()[b, pos - (N - 1)]) == right and int(lens[3][b, t].argmax()) == right

fig = figure(10, 3.4)
left, mid = fig.subplots(1, 2)
left.bar(names, [p.mean() for p in probs], color=["C2", "C0", "C3", "C0", "C3"])
left.axhline(1 / V, color="0.4", ls="--", lw=0.8, label=f"chance, 1/{V}")
left.legend(loc="upper left")
for i, p in enumerate(probs):
    left.annotate(f"{p.mean():.3f}", (i, p.mean()), textcoords="offset points", xytext=(0, 3), ha="center")
left.set(ylim=(0, 1.1), ylabel="mean P(right token)", title="logit lens: the right token's probability")
mid.bar(names, [r.mean() for r in ranks], color=["C2", "C0", "C3", "C0", "C3"])
for i, r in enumerate(ranks):
    mid.annotate(f"{r.mean():.1f}", (i, r.mean()), textcoords="offset points", xytext=(0, 3), ha="center")
mid.set(ylim=(0, V * 0.7), ylabel=f"mean rank among {V} (1 = top)", title="logit lens: the right token's rank")
for ax in (left, mid):
    ax.tick_params(axis="x", labelrotation=20)
show(fig, OUT / "logit_lens.png")

# %% [markdown]
# ## Check yourself
#
# 1. Why does the loss count only the second half of each sequence?
#
#    <details><summary>Answer</summary>
#
#    The first half is random tokens: nothing can predict them, and the best loss there is chance, $\ln 32 \approx
#    3.466$ nats. From position 9 on, the next token is a copy of the one 9 places back, which only attention can
#    fetch, so that half measures what the model learns.
#
#    </details>
#
# 2. Why does AdamW's first step move every weight by about the same amount, and what does that suggest?
#
#    <details><summary>Answer</summary>
#
#    At $t = 1$, $\hat m = g$ and $\hat v = g^2$, so the update is $\eta\,g / (|g| + \epsilon)$: every weight moves
#    by $\eta$, up or down, whatever the size of its gradient. A gradient from one batch thus moves every weight by
#    the full step, one reason to start with a small learning rate and warm it up.
#
#    </details>
#
# 3. With $\eta_{max} = 3 \times 10^{-3}$, 20 warmup steps, 150 steps and $\eta_{min} = 3 \times 10^{-4}$, what is
#    the learning rate at the first step, and at step 85?
#
#    <details><summary>Answer</summary>
#
#    $\eta_{max} / 20 = 1.5 \times 10^{-4}$ at step 0, rising linearly to $\eta_{max}$ at step 19. Step 85 is halfway
#    through the cosine, so the rate is halfway between the two: $(\eta_{max} + \eta_{min}) / 2 = 1.65 \times
#    10^{-3}$.
#
#    </details>
#
# 4. The trained model copies the token 9 places back. Does it work like an induction head found in trained
#    language models?
#
#    <details><summary>Answer</summary>
#
#    No. With $n$ fixed at 10 the token to copy is always 9 back, and RoPE makes a fixed distance back easy to
#    find, so its head copies by position. An induction head copies by content, at any distance; on sequences
#    with other $n$ this model's accuracy falls to chance.
#
#    </details>

# %% [markdown]
# ## Words from this lesson
#
# - **cross-entropy**: the loss $-\ln p$ of the probability a model gives the right next token, averaged over the
#   predicted positions (§1)
# - **training step**: one batch through the model, the loss's backward pass, gradient clipping and one optimizer
#   update (§2)
# - **global norm**: the length of all the gradients of a model taken together as one long vector (§2)
# - **clipping**: scaling every gradient down by one factor when their global norm is above a limit, so that one
#   unlucky batch cannot throw the weights far (§2)
# - **AdamW**: the optimizer that divides a running average of each weight's gradient by the root of a running
#   average of its square, with weight decay decoupled from the gradient (§2)
# - **weight decay**: pulling every weight towards zero by the fraction $\eta\lambda$ at each step (§2)
# - **learning rate**: the step size $\eta$ of an optimizer's update (§2)
# - **warmup**: the first steps of training, in which the learning rate rises linearly from a small value (§3)
# - **learning-rate schedule**: how the learning rate changes over training; here it rises through the warmup,
#   then follows half a cosine down to a minimum at the last step (§3)
# - **held-out**: said of examples kept apart and never trained on, to measure what a model does on data it has
#   not seen (§4)
# - **accuracy**: the fraction of targets that are the model's top choice (§5)
# - **circuit**: heads in different layers that work together on one task, such as copying earlier text (§5)
# - **induction head**: a head that finds the earlier position whose previous token matches the current one and
#   copies the token after it, by content, at any distance (§6)

# %% [markdown]
# ## Exercises
#
# 1. `adamw_step`: `adamw_step(p, g, m, v, t, lr, betas, eps, weight_decay)` takes numpy arrays (the weights,
#    their gradient, and the two averages after step $t - 1$) and returns `(p, m, v)` after AdamW's step $t$
#    (section 2). The checker compares it with `optim.AdamW` and names the usual slips: no bias correction,
#    weight decay added to the gradient (Adam with L2, not AdamW), $\epsilon$ inside the square root, or the
#    step counted from 0.
# 2. `lr_at`: `lr_at(step, lr_max, warmup, total, lr_min)` returns the warmup + cosine learning rate at a step
#    (section 3), checked against `optim.warmup_cosine` at the edges of both phases.
# 3. `logit_lens`: `logit_lens(model, ids)` returns the logits read from the residual stream after the
#    embedding and after each whole block, not each sublayer (`n_layers + 1` tensors, the last equal to
#    `model(ids)`), section 7. The checker recomputes the stream with the hand-derived numpy blocks of
#    lesson 10.
#
# `python -m tinygrad_block exercise 14` writes `exercise_14.py` with the three functions to fill in;
# `python -m tinygrad_block check 14` checks them and says what is wrong.
