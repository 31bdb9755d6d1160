# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 15 — Variants
#
# Lesson 09 built the pre-norm block, and the lessons after it counted what it costs. Published models change
# that block in small ways: where the norm goes and which norm it is, whether the projections carry biases,
# whether attention and the FFN run one after the other or side by side. Two further changes go beyond the
# block: adapters that fine-tune a model (train an already trained model further, on new text or a new task) by
# training a small fraction of its weights, and mixtures of experts that store many FFNs but run only a few
# for each token. Each variant is a field of `nn.BlockConfig`, so this lesson builds each one and compares it
# with the plain block, and several of them are trained side by side.
#
# **What you will learn**
# - post-norm against pre-norm, trained at depth: at 8 blocks, post-norm gets stuck at the character frequencies
#   while pre-norm learns; at 2 blocks both learn (loss curves);
# - how deep post-norm goes without warmup, what 40 warmup steps change, and pre-norm learning at 24 blocks;
# - DeepNorm: post-norm with the residual weighted by $\alpha = (2N)^{1/4}$ and some weights started
#   $\beta = (8N)^{-1/4}$ times smaller, and how it gets the deep post-norm stack training again;
# - LayerNorm against RMSNorm: parameters and FLOPs;
# - biases: what they cost, why a key bias does nothing without RoPE (and something with it), and why a value
#   bias is the same as an output bias;
# - the parallel block: the same parameters and FLOPs, a different function;
# - LoRA: the $\alpha / r$ scale, $B$ starting at zero, the 128× saving at $d = k = 4096$, $r = 16$, and a
#   trained model fine-tuned to new text with LoRA, compared with full fine-tuning;
# - mixtures of experts: total against active parameters, with Mixtral-8x7B's shape.
#
# Run it as a script, `python -m tinygrad_block lesson 15`, or as a notebook,
# `python -m tinygrad_block lesson 15 --notebook --execute` (it lands beside this file).

# %%
import argparse
import inspect

import numpy as np

import tinygrad_block as tb
from tinygrad_block import accounting as acc
from tinygrad_block import nn
from tinygrad_block.counting import count_flops
from tinygrad_block.data import CharTokenizer, python_help_text, text_batch, text_splits
from tinygrad_block.pictures import figure
from tinygrad_block.train import Schedule, evaluate_lm, train

from course import out_dir, show

OUT = out_dir(15)         # lessons/out/15/: this lesson's pictures

# %% [markdown]
# ## 1. Post-norm against pre-norm, trained at depth
#
# Lesson 09 measured the gradient through stacks of untrained blocks. Post-norm multiplies it block after block,
# while pre-norm keeps an identity path around every sublayer. Here the two layouts are trained.
#
# **The setup.** The task is predicting the next character of text: the first 200,000 characters of Python's
# help pages (they ship with Python, so nothing is downloaded), 90% to train on and the last 10% held out.
# The model is a stack of 8 small blocks: $d_{model} = 32$, 2 heads, a SwiGLU FFN of width 64, RoPE and RMSNorm.
# It takes 80 AdamW steps on batches of 16 windows of 32 characters (a window is a run of consecutive
# characters cut from a random place in the text). The learning rate starts at its peak,
# $10^{-2}$, with no warmup, and decays along a cosine to $10^{-3}$ (`tinygrad_block.train.train`). Each run
# uses the same initial draw and the same batches. Only the layout changes.
#
# **Training, as lesson 14 ran it.** At every position the model gives a probability to each possible next
# character. The loss is the **cross-entropy**: $-\ln$ of the probability it gave the right one, averaged over
# positions, in **nats** (natural-log units). A model that spreads its guess evenly over $V$ characters scores
# $\ln V$. A training step computes the loss's gradient on one batch and moves every weight a little against
# it; AdamW (lesson 14's optimizer) decides how far, and the **learning rate** (with lesson 14's warmup and
# cosine, here without the warmup) sets the size of the step. The last 10%
# of the text is **held out**: the model never trains on it, so its loss there measures what carries over to
# new text. The **accuracy** is how often the model's top choice is the right character.
#
# **Two reference points.** A model that ignores the context entirely can at best learn how often each character
# appears. On the held-out text, the training text's character frequencies score a cross-entropy of about 3.54
# nats. Its best guess is a space, every time, which is right for 24% of the held-out characters. On the
# training text itself the frequencies score about 3.2 nats (their entropy): that is the dotted line in the
# pictures, which show the training loss.
#
# **What happens.** With 8 blocks, pre-norm reaches a held-out loss of about 2.7 nats. Post-norm stays at the
# character frequencies: its held-out loss is within 0.05 nats of theirs, and it predicts a space at every
# position. With 2 blocks, post-norm learns at least as well as pre-norm does (in this run, about 0.2 nats
# better). So what post-norm cannot handle here is depth. This is why recent open models are pre-norm.
# Post-norm can be trained deep, but it needs help: a long learning-rate warmup, or the reweighting of
# section 2.

# %%
TEXT = python_help_text()[:200_000]
CODE = inspect.getsource(argparse)                        # Python code: the new text of section 7
TOK = CharTokenizer.from_text(TEXT + CODE)
V = TOK.vocab_size
prose_train, prose_held = text_splits(TEXT, TOK)          # 1-D token ids: 90% and 10%
HELD = text_batch(prose_held, 64, 32, tb.Generator(99))   # 64 held-out windows: ids, targets (64, 32)
DEEP = nn.BlockConfig(d_model=32, n_heads=2, n_kv_heads=2, d_ff=64, n_layers=8, vocab_size=V, max_seq_len=64,
                      name="8 blocks")
STEPS, BATCH, SEQ = 80, 16, 32


def run(cfg: nn.BlockConfig, model: nn.LM | None = None, data: tb.Tensor = prose_train, steps: int = STEPS,
        warmup: int = 0):
    """Train a fresh model of `cfg` (or `model`) on windows of `data`, the learning rate warmed up for `warmup`
    steps; its losses and held-out metrics."""
    model = model or nn.LM(cfg, generator=tb.Generator(0))
    batches = tb.Generator(1)                             # the same batches for every run
    history = train(model, lambda: text_batch(data, BATCH, SEQ, batches),
                    Schedule(steps=steps, lr=1e-2, lr_min=1e-3, warmup=warmup), progress=False)
    with tb.no_grad():
        return model, history.losses, evaluate_lm(model, *HELD)


counts = np.bincount(prose_train.numpy(), minlength=V) + 1          # character counts (+1: none is impossible)
targets = HELD[1].numpy().ravel()                                   # (2048,) held-out next characters
unigram = float(-np.log(counts[targets] / counts.sum()).mean())     # cross-entropy of the frequencies alone
entropy = float(-(counts / counts.sum() * np.log(counts / counts.sum())).sum())   # on the training text
space = int(counts.argmax())
space_share = float((targets == space).mean())
print(f"{V} characters; chance: ln {V} = {np.log(V):.2f} nats; the character frequencies alone: {unigram:.3f} "
      f"nats on the held-out text ({entropy:.3f} on the training text), and always guessing {TOK.chars[space]!r} "
      f"is right {space_share:.1%} of the time")
assert TOK.chars[space] == " " and round(unigram, 2) == 3.54 and round(entropy, 1) == 3.2
assert len(TEXT) == 200_000 and round(prose_held.size / (prose_train.size + prose_held.size), 2) == 0.10
assert (DEEP.d_model, DEEP.n_heads, DEEP.d_ff, DEEP.n_layers, DEEP.ffn, DEEP.norm, DEEP.rope) == (
    32, 2, 64, 8, "swiglu", "rms", True)
assert round(space_share, 2) == 0.24

runs = {}
for layout in ("pre", "post"):
    for n in (2, 8):
        runs[f"{layout}-norm, {n} blocks"] = run(DEEP.with_(layout=layout, n_layers=n))
for name, (_, losses, held) in runs.items():
    print(f"{name:20} last 10 training batches {np.mean(losses[-10:]):.3f}   held out: loss {held['loss']:.3f}, "
          f"accuracy {held['accuracy']:.1%}")
post8 = runs["post-norm, 8 blocks"]
with tb.no_grad():
    guesses = post8[0](HELD[0]).numpy().argmax(-1)                  # (64, 32) its top character everywhere
print(f"post-norm, 8 blocks: {abs(post8[2]['loss'] - unigram):.3f} nats from the frequencies alone; "
      f"it guesses {TOK.chars[space]!r} at {(guesses == space).mean():.0%} of the positions")
assert abs(post8[2]["loss"] - unigram) < 0.05 and (guesses == space).mean() == 1.0
pre8_held = runs["pre-norm, 8 blocks"][2]["loss"]
assert pre8_held < unigram - 0.6 and abs(pre8_held - 2.7) < 0.1
assert all(runs[f"{lay}-norm, 2 blocks"][2]["loss"] < unigram - 0.6 for lay in ("pre", "post"))
post2_ahead = runs["pre-norm, 2 blocks"][2]["loss"] - runs["post-norm, 2 blocks"][2]["loss"]
print(f"2 blocks: post-norm's held-out loss is {post2_ahead:.3f} nats below pre-norm's")
assert round(post2_ahead, 1) == 0.2


def smooth(losses: list, width: int = 8) -> np.ndarray:
    """The running mean of the last `width` batches' losses (one batch is noisy)."""
    c = np.cumsum(np.insert(np.asarray(losses), 0, 0.0))
    return np.array([(c[i + 1] - c[max(0, i + 1 - width)]) / min(i + 1, width) for i in range(len(losses))])


def plot_runs(names: list, path, title: str, colors: list) -> None:
    """Training loss curves (running mean of 8 batches) of the named runs, with the two reference levels."""
    fig = figure(8, 4.4)
    ax = fig.subplots()
    for name, color in zip(names, colors):
        _, losses, held = runs[name]
        ls = "--" if "2 blocks" in name or "warmup" in name else "-"
        ax.plot(range(1, STEPS + 1), smooth(losses), ls, color=color, lw=1.8,
                label=f"{name}: held out {held['loss']:.2f}")
    ax.axhline(entropy, color="0.4", lw=0.8, ls=":", label="character frequencies alone (training text)")
    ax.set(xlabel="training step", ylabel="training loss (nats per character)", ylim=(2.2, 4.8), title=title)
    ax.legend(loc="upper right")
    show(fig, path)


plot_runs(list(runs), OUT / "pre_vs_post_norm_training.png", "Post-norm gets stuck at depth; pre-norm does not "
          "(8 blocks solid, 2 blocks dashed)", ["C0", "C0", "C3", "C3"])

# %% [markdown]
# **How deep, and what warmup changes.** It is often said that post-norm needs a learning-rate warmup to train
# past about 12 layers, and that pre-norm trains at 100 layers and more without one. The depth where post-norm
# stops learning is not a constant, though: it moves with the learning rate, the warmup and how long training
# runs. The cell below finds it for this lesson's runs (the same 80 steps, the same peak rate of $10^{-2}$):
# - without warmup, post-norm learns with 4 blocks and is stuck at the character frequencies from 6 blocks on,
#   already below the quoted dozen;
# - 40 warmup steps (the rate rising linearly over the first half of the run, lesson 14) get the 6-block stack
#   learning: about 3.1 nats held out against 3.56 without. At 8 blocks, 40 warmup steps are not enough within
#   80 steps: it stays stuck. Longer warmups over longer runs are how deep post-norm models were trained, at a
#   cost in steps this lesson cannot pay; section 2's DeepNorm gets 8 blocks learning within the same 80 steps;
# - pre-norm with 24 blocks, twice the quoted dozen and with no warmup, learns: about 3.2 nats held out, well
#   below the frequencies. A deep pre-norm stack learns more slowly in 80 steps than the 8-block one (2.7), but
#   it does learn.
#
# A 100-block stack is beyond this lesson: its 80 steps alone would take longer than the whole lesson does,
# and a stack that deep needs far more than 80 steps to show much. Published models show the pattern at full size:
# BERT-base (post-norm, `nn.preset("bert-base")`) has 12 blocks, Llama-2-70B (pre-norm) has 80.

# %%
for name, layout, n, warmup in (("post-norm, 4 blocks", "post", 4, 0), ("post-norm, 6 blocks", "post", 6, 0),
                                ("post-norm, 6 blocks, 40 warmup steps", "post", 6, 40),
                                ("post-norm, 8 blocks, 40 warmup steps", "post", 8, 40),
                                ("pre-norm, 24 blocks", "pre", 24, 0)):
    runs[name] = run(DEEP.with_(layout=layout, n_layers=n), warmup=warmup)
    print(f"{name:37} held out: loss {runs[name][2]['loss']:.3f} ({runs[name][2]['loss'] - unigram:+.3f} nats "
          f"against the frequencies alone)")
held = {name: r[2]["loss"] for name, r in runs.items()}
assert held["post-norm, 4 blocks"] < unigram - 0.5                                   # learns
assert abs(held["post-norm, 6 blocks"] - unigram) < 0.05                             # stuck without warmup
assert held["post-norm, 6 blocks, 40 warmup steps"] < held["post-norm, 6 blocks"] - 0.3   # warmup: learns
assert abs(held["post-norm, 8 blocks, 40 warmup steps"] - unigram) < 0.05            # still stuck
assert held["pre-norm, 24 blocks"] < unigram - 0.25 and abs(held["pre-norm, 24 blocks"] - 3.2) < 0.1
assert abs(held["post-norm, 6 blocks, 40 warmup steps"] - 3.1) < 0.1
bert, llama70 = nn.preset("bert-base"), nn.preset("llama2-70b")
print(f"bert-base: {bert.layout}-norm, {bert.n_layers} blocks; llama2-70b: {llama70.layout}-norm, "
      f"{llama70.n_layers} blocks")
assert (bert.layout, bert.n_layers, llama70.layout, llama70.n_layers) == ("post", 12, "pre", 80)
plot_runs(["post-norm, 4 blocks", "post-norm, 6 blocks", "post-norm, 6 blocks, 40 warmup steps",
           "post-norm, 8 blocks, 40 warmup steps", "pre-norm, 24 blocks"], OUT / "depth_and_warmup.png",
          "Post-norm: stuck from 6 blocks; warmup (dashed) rescues 6, not 8. Pre-norm learns at 24",
          ["C1", "C3", "C2", "C4", "C0"])

# %% [markdown]
# ## 2. DeepNorm
#
# DeepNorm (`layout="deep"`, `nn.DeepNormBlock`) keeps the norm after the add, as post-norm does, but
# weights the residual up and starts some weights smaller:
#
# $$h = \mathrm{norm}_1(\alpha\,x + \mathrm{attn}(x)), \qquad \mathrm{out} = \mathrm{norm}_2(\alpha\,h +
# \mathrm{ffn}(h)), \qquad \alpha = (2N)^{1/4}, \quad \beta = (8N)^{-1/4}$$
#
# for a decoder of $N$ blocks. Here $\beta$ multiplies the initial weights of the FFN, $W_V$ and $W_O$; $W_Q$,
# $W_K$ and the norms keep their usual start. With a larger $\alpha$, the stream carried through each add
# outweighs what the sublayer adds, so one training step changes the output of the deep stack by a bounded
# amount. That is the argument of the paper that introduced DeepNorm and trained 1,000 layers with it. At
# $N = 8$ the constants are round: $\alpha = 16^{1/4} = 2$ and $\beta = 64^{-1/4} = 1/(2\sqrt 2) \approx 0.354$.
# At 1,000 blocks, $\alpha \approx 6.69$ and $\beta \approx 0.106$.
#
# Trained like the post-norm stack of section 1, with the same 8 blocks, DeepNorm learns. It reaches about
# 2.4 nats on the held-out text, well below the frequencies that post-norm is stuck at. (In this short run it is
# even ahead of pre-norm. Which of the working layouts is ahead after 80 steps says little about where each
# would end.)

# %%
print(f"{'N blocks':>9} {'alpha = (2N)^(1/4)':>19} {'beta = (8N)^(-1/4)':>19}")
for n in (1, 8, 12, 100, 1000):
    a, b = nn.deepnorm_alpha_beta(n)
    print(f"{n:>9} {a:>19.4f} {b:>19.4f}")
alpha, beta = nn.deepnorm_alpha_beta(8)
assert alpha == 2.0 and abs(beta - 1 / (2 * 2 ** 0.5)) < 1e-15
a1000, b1000 = nn.deepnorm_alpha_beta(1000)
assert round(a1000, 2) == 6.69 and round(b1000, 3) == 0.106

deep = nn.TransformerBlock(DEEP.with_(layout="deep"), generator=tb.Generator(3), dtype=tb.float64)
post = nn.TransformerBlock(DEEP.with_(layout="post"), generator=tb.Generator(3), dtype=tb.float64)
post_w = dict(post.named_parameters())
ratios = {name: float(np.median(p.numpy() / post_w[name].numpy())) for name, p in deep.named_parameters()
          if name.endswith("weight") and "norm" not in name}
print(f"{type(deep).__name__}: its initial weights over post-norm's, drawn from the same generator: "
      + ", ".join(f"{name.split('.')[1]} {r:.4f}" for name, r in ratios.items()))
shrunk = {name for name, r in ratios.items() if abs(r - beta) < 1e-12}
assert shrunk == {"attn.v_proj.weight", "attn.o_proj.weight", "ffn.gate_proj.weight", "ffn.up_proj.weight",
                  "ffn.down_proj.weight"}
assert all(r == 1.0 for name, r in ratios.items() if name not in shrunk)

runs["DeepNorm, 8 blocks"] = run(DEEP.with_(layout="deep"))
held_deep = runs["DeepNorm, 8 blocks"][2]["loss"]
print(f"DeepNorm, 8 blocks: held-out loss {held_deep:.3f}, against post-norm's {post8[2]['loss']:.3f} and "
      f"pre-norm's {runs['pre-norm, 8 blocks'][2]['loss']:.3f}")
assert held_deep < unigram - 0.6 and held_deep < post8[2]["loss"] - 0.6 and abs(held_deep - 2.4) < 0.1
assert held_deep < runs["pre-norm, 8 blocks"][2]["loss"]                  # ahead of pre-norm, in this short run
plot_runs(["pre-norm, 8 blocks", "post-norm, 8 blocks", "DeepNorm, 8 blocks"], OUT / "deepnorm_training.png",
          "DeepNorm: post-norm with alpha x on the residual trains at 8 blocks", ["C0", "C3", "C2"])

# %% [markdown]
# ## 3. LayerNorm against RMSNorm
#
# Lesson 05 compared the two norms on single vectors: LayerNorm subtracts the mean, then divides by the standard
# deviation; RMSNorm only divides by the root mean square. RMSNorm therefore needs one statistic instead of two.
# When a shift is used, LayerNorm also carries $d$ more parameters. Counted on one token at $d = 4096$, by
# running both norms under `count_flops`:
# - RMSNorm costs 16,387 FLOPs and holds 4,096 parameters;
# - LayerNorm costs 28,675 FLOPs and holds 8,192 parameters (with its shift).
#
# Next to a block's matmuls either cost is small: a Llama-2-7B block's two RMSNorms are 0.008% of its
# 404,750,336 matmul FLOPs per token (lesson 13), and two LayerNorms would be 0.014%. The saving that counts
# on a GPU is in memory traffic (the bytes read from and written to the GPU's memory, which lesson 16 shows
# often limit the speed more than the FLOPs do): one pass over the data to compute a statistic instead of two.
# Dropping the
# centring was found to cost no quality in comparisons far longer than the runs of this lesson, which is why
# the cheaper norm won.

# %%
def norm_cost(norm: nn.Module, d: int) -> int:
    """FLOPs of one norm on one token of width d, counted on the shape-only device."""
    with count_flops() as fc:
        norm(tb.zeros(1, 1, d, device="meta"))
    return fc.total()


d = 4096
rms, ln = nn.RMSNorm(d, device="meta"), nn.LayerNorm(d, device="meta")
costs = {"RMSNorm": (norm_cost(rms, d), rms.num_parameters()), "LayerNorm": (norm_cost(ln, d), ln.num_parameters())}
for name, (flops, params) in costs.items():
    print(f"{name:9} at d = {d}: {flops:,} FLOPs per token ({flops / d:.2f} per element), {params:,} parameters")
assert costs["RMSNorm"] == (16_387, 4_096) and costs["LayerNorm"] == (28_675, 8_192)
block7 = acc.flops_per_token(nn.preset("llama2-7b"), 1)["static"]             # a Llama-2-7B block's matmuls
shares = {name: 2 * flops / block7 for name, (flops, _) in costs.items()}
print(f"two norms against a Llama-2-7B block's {block7:,} matmul FLOPs per token: "
      + ", ".join(f"{name} {share:.3%}" for name, share in shares.items()))
assert block7 == 404_750_336 and round(shares["RMSNorm"], 5) == 0.00008 and round(shares["LayerNorm"], 5) == 0.00014

# %% [markdown]
# ## 4. Biases
#
# GPT-2 and BERT add a bias to every projection; Llama, Mistral and most recent models add none. The parameters
# are not the reason to drop them. Llama-2-7B with a bias on every projection would hold 1,359,872 more
# parameters, 0.02% of its 6.74 billion. What decides it is that some of those biases can do nothing at all.
#
# **A bias on the keys cancels, without RoPE.** Query $i$ scores key $j$ by $q_i \cdot (k_j + b) = q_i \cdot k_j
# + q_i \cdot b$. The second term is the same for every key $j$, and softmax ignores a constant added to all of
# its inputs. So the attention weights, and the output, do not depend on $b$: a random key bias changes the
# output of a GPT-2-style attention layer (no RoPE) by under $10^{-15}$, which is rounding. With RoPE the key is
# rotated after the bias is added, and the rotated bias $R_j b$ depends on $j$, so the term $q_i \cdot R_j b$ is
# no longer a constant. The same bias then changes the output by 0.8. Qwen2, a RoPE model, keeps biases
# on $q$, $k$ and $v$ alone (`qkv_bias=True`).
#
# **A bias on the values is an output bias.** The attention weights of each query sum to 1, so
# $\sum_j w_{ij} (v_j + b_V) = \sum_j w_{ij} v_j + b_V$. The value bias comes out as a constant, and $W_O$ turns
# it into the constant $W_O b_V$. A value bias of $b_V$ and an output bias of $W_O b_V$ give the same layer,
# to rounding. One of the two is redundant.

# %%
llama7 = nn.preset("llama2-7b")
extra = acc.total_params(llama7.with_(bias=True)) - acc.total_params(llama7)
print(f"Llama-2-7B with a bias on every projection: {extra:,} more parameters, "
      f"{extra / acc.total_params(llama7):.3%} of {acc.total_params(llama7):,}")
assert extra == 1_359_872 and round(extra / acc.total_params(llama7), 4) == 0.0002
assert round(acc.total_params(llama7) / 1e9, 2) == 6.74

MHA = nn.BlockConfig(d_model=16, n_heads=4, n_kv_heads=4, d_ff=24, bias=True, max_seq_len=16)
x = tb.randn(2, 6, 16, generator=tb.Generator(4), dtype=tb.float64)                # (B, L, d_model)
r = np.random.default_rng(5)


def attention_with(cfg: nn.BlockConfig, **biases) -> np.ndarray:
    """The attention layer of `cfg` (seed 6) on x, with some of its biases set: {'k_proj': array, ...}."""
    attn = nn.Attention(cfg, generator=tb.Generator(6), dtype=tb.float64)
    state = {name: p.detach() for name, p in attn.named_parameters()}
    for proj, value in biases.items():
        state[f"{proj}.bias"] = tb.tensor(value, dtype=tb.float64)
    attn.load_state_dict(state)
    return attn(x).numpy()


b_k = r.standard_normal(16)
for cfg, label in ((MHA.with_(rope=False), "no RoPE (GPT-2)"), (MHA, "RoPE")):
    change = np.abs(attention_with(cfg, k_proj=b_k) - attention_with(cfg)).max()
    print(f"{label:16} a random key bias changes the output by {change:.1e}")
    assert (change < 1e-15) if not cfg.rope else (round(change, 1) == 0.8)

b_v = r.standard_normal(16)
W_O = nn.Attention(MHA, generator=tb.Generator(6), dtype=tb.float64).o_proj.weight.numpy()   # (d_model, d_model)
as_value = attention_with(MHA, v_proj=b_v)
as_output = attention_with(MHA, o_proj=W_O @ b_v)
print(f"value bias b_V against output bias W_O b_V: they differ by {np.abs(as_value - as_output).max():.1e}")
assert np.abs(as_value - as_output).max() < 1e-14

# %% [markdown]
# ## 5. The parallel block
#
# GPT-J, GPT-NeoX and PaLM run the two sublayers side by side (`layout="parallel"`, `nn.ParallelBlock`):
#
# $$\mathrm{out} = x + \mathrm{attn}(\mathrm{norm}_1(x)) + \mathrm{ffn}(\mathrm{norm}_2(x)).$$
#
# Both sublayers read the block's input, so the FFN no longer waits for attention. When the two norms are one
# (GPT-J shares it), the projections that read the normalised input ($W_Q$, $W_K$, $W_V$, $W_{gate}$, $W_{up}$)
# can run as a single wider matmul, which is where the speed-up at scale comes from. The parameters are the
# same as the sequential block's, and so is the work: counted on the shape-only device, the two blocks cost
# exactly the same FLOPs. The function is different, though. The FFN no longer sees what attention wrote in the
# same block. The same weights therefore give a different output, and information from other positions reaches
# an FFN only one block later.
#
# Trained like section 1 (8 blocks), the parallel block learns as the sequential pre-norm block does: about 2.4
# nats on the held-out text against 2.7, both far below the character frequencies. (As with DeepNorm, being
# ahead after 80 steps says little about where each would end.)

# %%
seq_cfg = nn.preset("tiny")
counted = {}
for label, cfg in (("sequential", seq_cfg), ("parallel", seq_cfg.with_(layout="parallel"))):
    blk = nn.TransformerBlock(cfg, generator=tb.Generator(0), device="meta")
    with count_flops() as fc:
        blk(tb.zeros(1, 16, cfg.d_model, device="meta"))
    counted[label] = (blk.num_parameters(), fc.total(matmul_only=True), fc.total(), type(blk).__name__)
    print(f"{label:10} ({counted[label][3]}): {counted[label][0]:,} parameters, forward at L = 16: "
          f"{counted[label][1]:,} matmul FLOPs, {counted[label][2]:,} FLOPs in all")
assert counted["sequential"][:3] == counted["parallel"][:3] and counted["parallel"][3] == "ParallelBlock"

g = tb.Generator(7)
seq_block = nn.TransformerBlock(seq_cfg, generator=g, dtype=tb.float64)
par_block = nn.TransformerBlock(seq_cfg.with_(layout="parallel"), generator=tb.Generator(0), dtype=tb.float64)
par_block.load_state_dict(seq_block.state_dict())
x = tb.randn(1, 8, seq_cfg.d_model, generator=g, dtype=tb.float64)
gap = np.abs(seq_block(x).numpy() - par_block(x).numpy()).max()
print(f"the same weights, sequential against parallel: outputs differ by up to {gap:.3f}")
assert gap > 0.1

runs["parallel, 8 blocks"] = run(DEEP.with_(layout="parallel"))
held_par, held_pre = runs["parallel, 8 blocks"][2]["loss"], runs["pre-norm, 8 blocks"][2]["loss"]
print(f"8 parallel blocks: held-out loss {held_par:.3f}, sequential pre-norm {held_pre:.3f}")
assert abs(held_par - 2.4) < 0.1 and abs(held_pre - 2.7) < 0.1 and held_par < unigram - 0.6
plot_runs(["pre-norm, 8 blocks", "parallel, 8 blocks"], OUT / "parallel_training.png",
          "The parallel block against the sequential pre-norm block, 8 blocks", ["C0", "C4"])

# %% [markdown]
# ## 6. LoRA: a low-rank update to a frozen weight
#
# Fine-tuning every weight of a 7B model needs gradients and Adam's state for 7 billion parameters. LoRA
# (low-rank adaptation) freezes each weight $W$ (out × in) and learns a correction of rank $r$ instead:
#
# $$y = x W^\top + \frac{\alpha}{r}\,(x A^\top) B^\top, \qquad A: r \times \mathrm{in}, \quad B: \mathrm{out}
# \times r.$$
#
# The pieces of that formula:
# - **$B$ starts at zero, $A$ at random.** At the start $BA = 0$, so the adapted model is exactly the trained
#   one. It also fixes which gradient comes first. $B$ gets one at once (it is $x A^\top$ times the gradient
#   arriving from above), while $A$'s gradient runs through $B = 0$ and is exactly zero until $B$ moves, as with
#   the zero output weights of lesson 09. Had both started at zero, neither would ever get a gradient.
# - **The scale is $\alpha / r$.** The original LoRA paper's reason: with the learning rate held fixed, the
#   update $\frac{\alpha}{r} BA$ should then stay of a similar size when you change the rank, so that trying
#   another $r$ needs no new learning rate. That is a rationale, not a law. Later work on rank-stabilised LoRA
#   (Kalajdzievski, 2023) finds that dividing by $r$ over-corrects: at large ranks the updates shrink and learning
#   slows, and scaling by $\alpha / \sqrt r$ keeps it stable across ranks. The library uses the original
#   $\alpha / r$, as most LoRA code does. (`lora_alpha=16` with `lora_rank=4` gives a scale of 4.)
# - **The saving.** One $d \times k$ weight has $dk$ parameters; its adapter has $r(d + k)$. At $d = k = 4096$
#   and $r = 16$, that is 16,777,216 against 131,072, exactly **128×** fewer. (The 16.7M often quoted for
#   $4096^2$ is 16,777,216 cut short; rounded, it is 16.8M.) Put on $W_Q$ and $W_V$ of every Llama-2-7B block
#   (`lora_targets`, the library's default), adapters of rank 16 train 8,388,608 parameters, 0.12% of the
#   model.
#
# Below, `nn.Linear` with `lora_rank=4`, in float64: at the start it equals the frozen layer exactly; its
# first gradient reaches $B$ and not $A$; with $B$ set to random values, the output minus $x W^\top$ is exactly
# $\frac{\alpha}{r} (x A^\top) B^\top$.

# %%
g = tb.Generator(8)
plain = nn.Linear(64, 64, generator=tb.Generator(9), dtype=tb.float64)
lora = nn.Linear(64, 64, generator=tb.Generator(9), dtype=tb.float64, lora_rank=4, lora_alpha=16.0)
lora.weight.requires_grad = False                                           # W frozen: only A and B train
x = tb.randn(3, 64, generator=g, dtype=tb.float64)                          # (N, in)
y = lora(x)
print(f"scale alpha / r = {lora.lora_scale}; at the start |lora(x) - x W^T| = "
      f"{np.abs(y.numpy() - plain(x).numpy()).max()}")
assert lora.lora_scale == 4.0 and np.array_equal(y.numpy(), plain(x).numpy())

y.backward(tb.randn(3, 64, generator=g, dtype=tb.float64))
grad_A, grad_B = np.abs(lora.lora_A.grad.numpy()).max(), np.abs(lora.lora_B.grad.numpy()).max()
print(f"the first gradient: largest |dA| = {grad_A}, largest |dB| = {grad_B:.3f}; W gets "
      f"{'none' if lora.weight.grad is None else 'one'}")
assert grad_A == 0.0 and grad_B > 0.1 and lora.weight.grad is None

B_rand = tb.randn(64, 4, generator=g, dtype=tb.float64)                     # (out, r)
lora.load_state_dict({"weight": lora.weight.detach(), "lora_A": lora.lora_A.detach(), "lora_B": B_rand})
A, W = lora.lora_A.numpy(), lora.weight.numpy()
delta = lora(x).numpy() - x.numpy() @ W.T
by_hand = (16.0 / 4) * (x.numpy() @ A.T) @ B_rand.numpy().T
print(f"with B random: lora(x) - x W^T against (alpha / r) (x A^T) B^T: {np.abs(delta - by_hand).max():.1e}")
assert np.abs(delta - by_hand).max() < 1e-12

big = nn.Linear(4096, 4096, generator=tb.Generator(0), device="meta", lora_rank=16)
full_count, adapter_count = big.weight.size, big.lora_A.size + big.lora_B.size
print(f"d = k = 4096, r = 16: the weight {full_count:,}, the adapter {adapter_count:,}, "
      f"{full_count / adapter_count:g}x fewer")
print(f"the weight in millions: {full_count / 1e6:.6f}, cut short {int(full_count / 1e5) / 10}M, "
      f"rounded {full_count / 1e6:.1f}M")
assert (full_count, adapter_count, full_count / adapter_count) == (16_777_216, 131_072, 128.0)
assert int(full_count / 1e5) / 10 == 16.7 and round(full_count / 1e6, 1) == 16.8
lora7 = llama7.with_(lora_rank=16)
adapters7 = llama7.n_layers * acc.block_param_breakdown(lora7)["lora"]
print(f"Llama-2-7B, rank 16 on W_Q and W_V of all {llama7.n_layers} blocks: {adapters7:,} adapter parameters, "
      f"{adapters7 / acc.total_params(llama7):.2%} of the model")
assert adapters7 == 8_388_608 and round(adapters7 / acc.total_params(llama7), 4) == 0.0012

# %% [markdown]
# ## 7. Fine-tuning the trained model with LoRA
#
# The 8-block pre-norm model of section 1 has learned some English prose about Python. Now it meets a
# different text: the source code of Python's `argparse` module, 90% to train on and 10% held out. It is
# fine-tuned for 50 steps in two ways, and each time we measure the held-out loss on both texts:
# - **LoRA**: adapters of rank 4 ($\alpha = 8$) on $W_Q$ and $W_V$ of every block; everything else frozen,
#   including the embedding and the head. That is 4,096 trained parameters, 4.6% of the model's 89,120.
# - **Full fine-tuning**: all 89,120 parameters train.
#
# Before the first step the LoRA model is the trained model, to the bit. After 50 steps, both have learned
# from the code. Full fine-tuning, with 22 times the trained parameters, learns more: about 2.0 nats on
# held-out code against LoRA's 2.4, from 2.6. It also forgets more of the prose: its prose loss rises by
# about half a nat, while LoRA's rises by under 0.1. This trade is the usual picture of LoRA at small rank:
# it learns less and forgets less. What LoRA really buys is memory. Only the adapters need gradients and
# Adam's state, so fine-tuning fits where full training does not, and one frozen model can carry many small
# adapters, one per task.

# %%
code_train, code_held = text_splits(CODE, TOK)
CODE_HELD = text_batch(code_held, 64, 32, tb.Generator(98))
base, _, _ = runs["pre-norm, 8 blocks"]


def both_texts(model: nn.LM) -> dict:
    """Held-out loss on the code and on the prose."""
    with tb.no_grad():
        return {"code": evaluate_lm(model, *CODE_HELD)["loss"], "prose": evaluate_lm(model, *HELD)["loss"]}


def fine_tuned(cfg: nn.BlockConfig) -> nn.LM:
    """A model of cfg holding the base model's trained weights (its own LoRA adapters: B = 0, A random)."""
    model = nn.LM(cfg, generator=tb.Generator(5))
    model.load_state_dict({**model.state_dict(), **base.state_dict()})
    if cfg.lora_rank:
        for part in (model.embed, model.norm, model.lm_head):
            part.freeze()                                           # the blocks' base weights froze themselves
    return model


before = both_texts(base)
tuned = {"LoRA": fine_tuned(DEEP.with_(lora_rank=4, lora_alpha=8.0)), "full": fine_tuned(DEEP)}
with tb.no_grad():
    same = np.array_equal(tuned["LoRA"](CODE_HELD[0]).numpy(), base(CODE_HELD[0]).numpy())
trained = {name: sum(p.size for p in m.parameters() if p.requires_grad) for name, m in tuned.items()}
print(f"trained parameters: LoRA {trained['LoRA']:,} ({trained['LoRA'] / trained['full']:.1%}), full "
      f"{trained['full']:,}; before any step the LoRA model equals the trained model bit for bit: {same}")
assert same and trained == {"LoRA": 4_096, "full": 89_120} and base.num_parameters() == 89_120
assert round(trained["LoRA"] / trained["full"], 3) == 0.046 and round(trained["full"] / trained["LoRA"]) == 22

curves, after = {}, {}
for name, model in tuned.items():
    _, curves[name], _ = run(DEEP, model=model, data=code_train, steps=50)
    after[name] = both_texts(model)
print(f"{'held-out loss':22} {'code':>7} {'prose':>7}")
for name, losses in (("the trained model", before), *((f"after 50 steps, {k}", v) for k, v in after.items())):
    print(f"{name:22} {losses['code']:>7.3f} {losses['prose']:>7.3f}")
assert after["LoRA"]["code"] < before["code"] - 0.1 and after["full"]["code"] < after["LoRA"]["code"] - 0.2
forgot = {name: a["prose"] - before["prose"] for name, a in after.items()}
assert 0 < forgot["LoRA"] < 0.1 and 0.4 < forgot["full"] < 0.6
assert abs(before["code"] - 2.6) < 0.1 and abs(after["LoRA"]["code"] - 2.4) < 0.1
assert abs(after["full"]["code"] - 2.0) < 0.1

fig = figure(11, 4)
left, right = fig.subplots(1, 2)
for (name, losses), color in zip(curves.items(), ("C2", "C3")):
    left.plot(range(1, 51), smooth(losses), color=color, lw=1.8, label=f"{name} ({trained[name]:,} trained)")
left.set(xlabel="fine-tuning step", ylabel="training loss on code (nats per character)",
         title="Fine-tuning on Python code")
left.legend()
labels, width = ["the trained model", "LoRA", "full"], 0.38
points = [before, after["LoRA"], after["full"]]
xs = np.arange(3)
for i, (text, color) in enumerate((("code", "C0"), ("prose", "C1"))):
    vals = [p[text] for p in points]
    right.bar(xs + (i - 0.5) * width, vals, width, color=color, label=f"held-out {text}")
    for xi, v in zip(xs, vals):
        right.annotate(f"{v:.2f}", (xi + (i - 0.5) * width, v), textcoords="offset points", xytext=(0, 2),
                       ha="center", fontsize=8)
right.set_xticks(xs, ["before", "after LoRA", "after full"])
right.set(ylim=(1.5, 3.5), ylabel="held-out loss (nats per character)", title="LoRA learns less and forgets less")
right.legend(loc="upper left")
show(fig, OUT / "lora_fine_tuning.png")

# %% [markdown]
# ## 8. Mixture of experts: total against active parameters
#
# A mixture of experts (`n_experts`, `experts_top_k`, `nn.MoE`) replaces the FFN with $E$ FFNs, the experts,
# and a router. The router scores every expert for each token, keeps the top $k$, and gates their outputs by
# the kept softmax probabilities, renormalised to sum to 1 (docs/variants.md has the formulas). Each token
# therefore runs through $k$ experts, and the other $E - k$ sit idle for that token. A mixture has two sizes:
# - **total parameters:** what must be stored and loaded;
# - **active parameters:** what one token computes with; they set the FLOPs per token.
#
# Mixtral-8x7B has Mistral-7B's shape with 8 experts, of which each token uses 2. It stores **46.7 billion**
# parameters, 46,702,792,704, and each token uses **12.9 billion**, 12,879,925,248. The name suggests
# 8 × 7B = 56B, or 57.9B with Mistral-7B's exact 7.24B, but only the FFNs are copied. Attention, the norms,
# the embedding and the head exist once, and each block gains a router of $8 \times d_{model}$ weights. So
# Mixtral has 6.4 times Mistral-7B's parameters while each token costs 1.8 times Mistral-7B's matmul FLOPs.
#
# The block's weights shift towards the FFN. In Mistral-7B the FFN holds 81% of a block. In Mixtral it holds
# 97% of what is stored but only 89% of what one token uses.
#
# A tiny mixture checks the counts on a live model. Its parameters, counted from the module, equal the closed
# forms. On the shape-only device, its matmuls per token cost exactly $k$ dense FFNs plus the router,
# $2\,d_{model} E$; the idle experts cost nothing.

# %%
mistral = nn.preset("mistral-7b")
mixtral = mistral.with_(n_experts=8, experts_top_k=2)
total, active, dense = acc.total_params(mixtral), acc.active_params(mixtral), acc.total_params(mistral)
d_model, d_ff, n_layers = mistral.d_model, mistral.d_ff, mistral.n_layers
print(f"Mixtral-8x7B: {total:,} parameters stored, {active:,} active per token "
      f"(commonly quoted: {total / 1e9:.1f}B and {active / 1e9:.1f}B)")
print(f"Mistral-7B: {dense:,}; the name's 8 x 7B = {8 * 7}B, 8 x Mistral-7B's exact count = {8 * dense / 1e9:.1f}B; "
      f"Mixtral / Mistral: {total / dense:.1f}x stored, "
      f"FLOPs per token {acc.flops_per_token(mixtral, 1)['static'] / acc.flops_per_token(mistral, 1)['static']:.1f}x")
assert (total, active) == (46_702_792_704, 12_879_925_248) and round(dense / 1e9, 2) == 7.24
assert (round(total / 1e9, 1), round(active / 1e9, 1), round(8 * dense / 1e9, 1)) == (46.7, 12.9, 57.9)
assert total == dense + n_layers * (7 * 3 * d_model * d_ff + 8 * d_model)          # 7 more FFNs, and a router
assert active == total - n_layers * 6 * 3 * d_model * d_ff                           # 6 idle experts per block
assert round(total / dense, 1) == 6.4 and round(acc.flops_per_token(mixtral, 1)["static"]
                                                / acc.flops_per_token(mistral, 1)["static"], 1) == 1.8

ffn_dense = acc.attention_ffn_shares(mistral).ffn
ffn_stored = acc.attention_ffn_shares(mixtral).ffn
ffn_used = 2 * 3 * d_model * d_ff / acc.active_params_per_block(mixtral)
print(f"the FFN's share of a block: Mistral-7B {ffn_dense:.0%}; Mixtral {ffn_stored:.0%} of what is stored, "
      f"{ffn_used:.0%} of what one token uses")
assert (round(ffn_dense, 2), round(ffn_stored, 2), round(ffn_used, 2)) == (0.81, 0.97, 0.89)

tiny_moe = nn.BlockConfig(d_model=16, n_heads=4, n_kv_heads=2, d_ff=24, n_layers=2, vocab_size=64,
                          max_seq_len=32, n_experts=8, experts_top_k=2)
model = nn.LM(tiny_moe, generator=tb.Generator(10), device="meta")
print(f"a tiny mixture (8 experts, top 2): {model.num_parameters():,} parameters counted from the module = "
      f"{acc.total_params(tiny_moe):,}; active {acc.active_params(tiny_moe):,}")
assert model.num_parameters() == acc.total_params(tiny_moe)
assert acc.total_params(tiny_moe) - acc.active_params(tiny_moe) == 2 * 6 * 3 * 16 * 24


def ffn_matmul_flops(cfg: nn.BlockConfig, N: int) -> int:
    """Matmul FLOPs of one block's FFN (dense or mixture) on N tokens, counted on the shape-only device."""
    ffn = nn.TransformerBlock(cfg, generator=tb.Generator(0), device="meta").ffn
    with count_flops() as fc:
        ffn(tb.zeros(1, N, cfg.d_model, device="meta"))
    return fc.total(matmul_only=True)


N = 10
dense_cfg = tiny_moe.with_(n_experts=1, experts_top_k=1)                  # one expert: the dense SwiGLU FFN
moe_flops, dense_flops = ffn_matmul_flops(tiny_moe, N), ffn_matmul_flops(dense_cfg, N)
print(f"FFN matmuls on {N} tokens: the mixture {moe_flops:,}; one dense expert {dense_flops:,}; "
      f"2 experts + the router = {2 * dense_flops + N * 2 * tiny_moe.d_model * tiny_moe.n_experts:,}")
assert moe_flops == 2 * dense_flops + N * 2 * tiny_moe.d_model * tiny_moe.n_experts

parts = {}
for label, cfg in (("Mistral-7B", mistral), ("Mixtral, stored", mixtral), ("Mixtral, per token", mixtral)):
    rows = acc.model_param_breakdown(cfg)
    per_block = acc.block_param_breakdown(cfg)
    ffn = sum(per_block[k] for k in ("W_gate", "W_up", "W_down")) * cfg.n_layers
    used = ffn * cfg.experts_top_k // cfg.n_experts
    parts[label] = {"embedding and head": rows["embedding"] + rows["lm_head"],
                    "attention, norms, router": rows["blocks"] + rows["final_norm"] - ffn,
                    "FFN: used per token": used,
                    "FFN: idle experts": 0 if "per token" in label else ffn - used}
assert sum(parts["Mixtral, stored"].values()) == total and sum(parts["Mixtral, per token"].values()) == active
assert sum(parts["Mistral-7B"].values()) == dense
fig = figure(8, 4)
ax = fig.subplots()
bottom = np.zeros(3)
for part, color in zip(parts["Mixtral, stored"], ("0.6", "C0", "C2", "C2")):
    vals = np.array([parts[label][part] for label in parts]) / 1e9
    ax.barh(list(parts), vals, left=bottom, color=color, alpha=0.35 if "idle" in part else 1.0, label=part)
    bottom += vals
for i, v in enumerate(bottom):
    ax.annotate(f"{v:.1f}B", (v, i), textcoords="offset points", xytext=(4, -4))
ax.invert_yaxis()
ax.set(xlabel="parameters (billions)", xlim=(0, 53), title="A mixture stores 8 FFNs per block and uses 2 per token")
ax.legend(loc="lower right")
show(fig, OUT / "moe_parameters.png")

# %% [markdown]
# ## Check yourself
#
# 1. What does DeepNorm change in a post-norm block, and what are its constants at 8 blocks?
#
#    <details><summary>Answer</summary>
#
#    It keeps the norm after the add but weights the residual by $\alpha = (2N)^{1/4}$ and starts the FFN, $W_V$
#    and $W_O$ smaller by $\beta = (8N)^{-1/4}$. At $N = 8$, $\alpha = 2$ and $\beta \approx 0.354$, and the 8-block
#    stack that post-norm could not train learns.
#
#    </details>
#
# 2. Why does a bias on the keys do nothing in attention without RoPE?
#
#    <details><summary>Answer</summary>
#
#    It adds $q_i \cdot b$ to every score of query $i$, the same for every key, and softmax ignores a constant added
#    to all its inputs: the output moves by under $10^{-15}$. With RoPE the bias is rotated by each key's position,
#    so the term differs from key to key and the bias matters.
#
#    </details>
#
# 3. Why does LoRA start $B$ at zero and $A$ at random, and what does it save on one 4096 × 4096 weight at rank 16?
#
#    <details><summary>Answer</summary>
#
#    With $B = 0$ the adapted model equals the trained one exactly, and $B$ still gets a gradient at once; had both
#    been zero, neither would ever get one. The adapter trains $r(d + k)$ = 131,072 parameters against the weight's
#    16,777,216: 128 times fewer.
#
#    </details>
#
# 4. Mixtral-8x7B stores 46.7 billion parameters. Why is that not 8 × 7B, and what does each token compute with?
#
#    <details><summary>Answer</summary>
#
#    Only the FFNs are copied into 8 experts; attention, the norms, the embedding and the head exist once. Each token
#    runs through 2 experts, so its active parameters are 12.9 billion: the FLOPs per token follow those, the memory
#    the 46.7 billion.
#
#    </details>

# %% [markdown]
# ## Words from this lesson
#
# - **DeepNorm**: post-norm with the residual weighted by $\alpha = (2N)^{1/4}$ and some initial weights scaled by
#   $\beta = (8N)^{-1/4}$, which lets deep post-norm stacks train (§2)
# - **parallel block**: a block whose attention and FFN both read the block's input and add to it side by side,
#   $x + \mathrm{attn}(\mathrm{norm}_1(x)) + \mathrm{ffn}(\mathrm{norm}_2(x))$ (§5)
# - **LoRA**: low-rank adaptation, which freezes a weight $W$ and trains a correction $\frac{\alpha}{r} BA$ of rank
#   $r$ beside it (§6)
# - **adapter**: the small trained matrices that LoRA adds beside a frozen weight (§7)
# - **full fine-tuning**: fine-tuning in which every parameter of the model trains (§7)
# - **mixture of experts**: a layer that replaces the FFN with several FFNs, the experts, and a router that sends
#   each token through a few of them (§8)
# - **expert**: one of the FFNs of a mixture of experts (§8)
# - **router**: the part of a mixture of experts that scores every expert for each token and keeps the top $k$ (§8)
# - **total parameters**: all the parameters a mixture of experts stores and must load (§8)
# - **active parameters**: the parameters one token computes with, which set the FLOPs per token (§8)

# %% [markdown]
# ## Exercises
#
# 1. `lora_forward`: the LoRA layer by hand. `lora_forward(x, W, A, B, alpha)` returns
#    $x W^\top + \frac{\alpha}{r} (x A^\top) B^\top$ with $r$ the adapter's rank. The checker compares it with
#    `nn.Linear` holding the same matrices and with numpy. It recognises a scale of $\alpha$ instead of
#    $\alpha / r$, the scale upside down, a missing frozen term, a missing scale, and the rank read from the
#    wrong axis of $A$ or $B$.
# 2. `lora_saving`: `lora_saving(d, k, r)` returns how many times fewer parameters a rank-$r$ adapter has than
#    the $d \times k$ weight it adapts: count both from the shapes. It is checked on square and non-square
#    weights against the parameters of a real `nn.Linear` with LoRA.
# 3. `deepnorm_alpha_beta`: DeepNorm's constants for a decoder of $N$ blocks, `(alpha, beta)`, from the rule
#    in section 2. The checker recognises the two swapped, a root of the wrong count of sublayers, and a
#    square root in place of the 4th.
# 4. `moe_params`: the total and active parameters of a model config with a mixture of experts, from the
#    config's numbers. The checker counts the parameters of the model built on the shape-only device. It
#    recognises active parameters taken as $k/E$ of the total, idle experts counted for one block only, the
#    router counted as idle, and a tied LM head counted twice.
#
# `python -m tinygrad_block exercise 15` writes `exercise_15.py` with the four functions to fill in;
# `python -m tinygrad_block check 15` checks them and says what is wrong.
