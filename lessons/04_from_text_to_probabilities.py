# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 04 — From text to next-token probabilities
#
# A language model takes text and returns, for the next piece of text, a probability for every piece it knows. This
# primer follows a short **prompt**, the text a model is given to continue, through the whole of a small model, with
# the shape of what flows at every stage. The blocks in the middle stay closed boxes here; lessons 05 to 09 open
# them one part at a time.
#
# **What you will learn**
# - text to tokens to token ids: a character tokenizer, and the subword (BPE) tokenizers real models use; BPE's
#   merges learned by hand on a tiny text, equal to the tokenizers library's;
# - ids to vectors: the embedding table, looked up as `weight[ids]`, and the (B, L, d) shape of a batch;
# - the residual stream: each block reads it and adds its output, and its shape never changes;
# - the final norm and the LM head: V scores per position, the logits, equal to `model(ids)` bit for bit;
# - softmax: the next-token probabilities at the last position, and why an untrained model's are close to
#   uniform (its entropy against $\ln V$).
#
# Run it as a script, `python -m tinygrad_block lesson 04`, or as a notebook,
# `python -m tinygrad_block lesson 04 --notebook --execute` (it lands beside this file).

# %%
import json
import math
from collections import Counter

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.counting import count_flops
from tinygrad_block.data import CharTokenizer, python_help_text
from tinygrad_block.pictures import figure
from tinygrad_block.tokenizer import bpe_encode, learn_bpe, load_tokenizer, merge_pair, pair_counts

from course import out_dir, show

OUT = out_dir(4)          # lessons/out/04/: this lesson's pictures

# %% [markdown]
# ## 1. Text to tokens to ids
#
# A model computes with numbers, not letters. A **tokenizer** cuts the text into **tokens**, pieces taken from
# a fixed list, the **vocabulary**, and replaces each piece by its place in that list, its **token id**: an
# integer from 0 to $V - 1$, where $V$ is the **vocabulary size**.
#
# The simplest tokenizer takes one token per character. `data.CharTokenizer.from_text` collects the distinct
# characters of a text, sorted, as its vocabulary. Our text is Python's own help pages, which ship with Python:
# about 465,000 characters written with about a hundred distinct ones (the exact count follows the Python
# version; the code prints it). The prompt `"The for loop"` becomes 12 ids, one per character, and decoding the
# ids gives the text back.

# %%
text = python_help_text()
tok = CharTokenizer.from_text(text)
V = tok.vocab_size
prompt = "The for loop"
ids = tok.encode(prompt)
print(f"{len(text):,} characters of text, V = {V} distinct ones, sorted; ids 30 to 59: {tok.chars[30:60]!r}")
print(f"{prompt!r} -> {len(ids)} tokens {[tok.chars[i] for i in ids]}")
print(f"  -> ids {ids} -> decoded {tok.decode(ids)!r}")
assert V == len(set(text)) and 90 <= V <= 120 and 400_000 < len(text) < 550_000
assert len(ids) == len(prompt) == 12 and tok.decode(ids) == prompt and all(0 <= i < V for i in ids)

# %% [markdown]
# Real models use **subword** tokenizers, mostly **BPE** (byte-pair encoding). BPE starts from single characters
# (or bytes) and, again and again, merges the most frequent pair of neighbouring tokens in a training text into
# one new token, until the vocabulary has the size asked for. Frequent words end up as one token each, rare
# words as a few pieces.
#
# Below, the `tokenizers` library learns a BPE vocabulary of 1,000 tokens from the same text. A published model
# comes as a **checkpoint**, a folder of files (its weights, its configuration, its tokenizer; lesson 20 loads
# one), and in the common Hugging Face layout the tokenizer runs on this library. Ours is saved as
# `tokenizer.json`, the file a checkpoint folder holds, and
# read back with `tinygrad_block.tokenizer.load_tokenizer`, as a real checkpoint's would be. The same prompt is
# now a handful of tokens instead of 12: `The` and ` for` are one token each (the space goes with the word after
# it), while a rarer word may take two pieces (the pages, and so the pieces, follow the Python version that
# runs the lesson; the cell prints them). The whole text is about 3 times shorter in tokens than
# in characters, so a model that reads a fixed number of tokens at a time sees about 3 times more text. Real
# vocabularies are larger: the code reads $V$ from the configurations of Llama 2, GPT-2 and Llama 3.
#
# The rest of the lesson uses the character tokenizer: its vocabulary is small enough to print.

# %%
bpe = Tokenizer(models.BPE())
bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)      # work on bytes, as GPT-2 and Llama 3 do
bpe.decoder = decoders.ByteLevel()
bpe.train_from_iterator([text], trainers.BpeTrainer(vocab_size=1000, show_progress=False,
                                                     initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
(OUT / "bpe").mkdir(exist_ok=True)
bpe.save(str(OUT / "bpe" / "tokenizer.json"))
sub = load_tokenizer(OUT / "bpe")                                          # an HFTokenizer, as for a checkpoint
sub_ids = sub.encode(prompt)
ratio = len(text) / len(sub.encode(text))
print(f"{sub.name}")
print(f"{prompt!r} -> {len(sub_ids)} tokens {[sub.decode([i]) for i in sub_ids]} -> ids {sub_ids}")
print(f"the whole text: {len(text):,} characters, {len(sub.encode(text)):,} BPE tokens, "
      f"{ratio:.2f} characters per token")
real = {name: nn.preset(name).vocab_size for name in ("llama2-7b", "gpt2-small", "llama3-8b")}
print("V of real models: " + ", ".join(f"{name} {v:,}" for name, v in real.items()))
pieces = [sub.decode([i]) for i in sub_ids]
assert sub.vocab_size == 1000 and pieces[:2] == ["The", " for"] and 3 <= len(pieces) <= 5 and "".join(pieces) == prompt
assert sub.decode(sub_ids) == prompt
assert 2.5 < ratio < 3.5 and real == {"llama2-7b": 32_000, "gpt2-small": 50_257, "llama3-8b": 128_256}

# %% [markdown]
# **BPE by hand.** The training is a short loop, written out in `tinygrad_block.tokenizer` in a few lines
# (`pair_counts`, `merge_pair`, `learn_bpe`, `bpe_encode`). Take a tiny text of four words, *low* 5 times,
# *lower* 2, *newest* 6 and *widest* 3, each word cut into its characters:
# 1. count every pair of neighbouring tokens, each word as often as it occurs: `e s` and `s t` occur 9 times
#    (6 in newest, 3 in widest), `w e` 8, `l o` and `o w` 7;
# 2. merge the most frequent pair into one new token, everywhere it occurs. On a tie the pair whose tokens came
#    first in the vocabulary wins (the library's rule), so `e s` becomes `es`;
# 3. count again and repeat: `es t` (9) becomes `est`, `l o` (7) `lo`, `lo w` (7) `low`, `e w` (6) `ew`.
#
# Five merges give a vocabulary of the 10 characters and 5 new tokens. To encode a word, start from its characters
# and apply the merges in the order they were learned: *lowest*, which the text never held, becomes `low` `est`,
# and *newer* becomes `n` `ew` `e` `r`.
#
# The `tokenizers` library learns the same merges and encodes the same, when it is set up as the same algorithm:
# its `BpeTrainer` with `vocab_size` 15 (10 characters + 5 merges) and the `WhitespaceSplit` pre-tokenizer, which
# cuts the text into words at whitespace as `str.split` does. The byte-level setup above would start from 256
# bytes instead of the text's characters, and mark the spaces.

# %%
corpus = "low " * 5 + "lower " * 2 + "newest " * 6 + "widest " * 3
words = Counter(tuple(word) for word in corpus.split())                   # each word as characters -> how often
first = pair_counts(words)
print("pairs at the start: " + ", ".join(f"{a} {b}: {n}" for (a, b), n in first.most_common(5)))
vocab, merges = learn_bpe(corpus, 5)
for i, pair in enumerate(merges, 1):
    count = pair_counts(words)[pair]
    words = Counter({merge_pair(word, pair): n for word, n in words.items()})
    print(f"merge {i}: {pair[0]} {pair[1]} ({count} times) -> {pair[0] + pair[1]!r}; words now "
          + ", ".join(" ".join(word) for word in words))
encoded = {word: bpe_encode(word, merges) for word in ("lowest", "newer")}
print(f"vocabulary ({len(vocab)}): {vocab}; " + "; ".join(f"{w} -> {t}" for w, t in encoded.items()))

library = Tokenizer(models.BPE())
library.pre_tokenizer = pre_tokenizers.WhitespaceSplit()                  # words at whitespace, as str.split
library.train_from_iterator([corpus], trainers.BpeTrainer(vocab_size=15, show_progress=False))
library_model = json.loads(library.to_str())["model"]
library_merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in library_model["merges"]]
library_vocab = sorted(library_model["vocab"], key=library_model["vocab"].get)   # tokens by id
print(f"tokenizers' BpeTrainer: the same merges {library_merges == merges}, the same vocabulary "
      f"{library_vocab == vocab}, the same encodings {all(library.encode(w).tokens == t for w, t in encoded.items())}")
assert first.most_common(5) == [(("e", "s"), 9), (("s", "t"), 9), (("w", "e"), 8), (("l", "o"), 7), (("o", "w"), 7)]
assert merges == [("e", "s"), ("es", "t"), ("l", "o"), ("lo", "w"), ("e", "w")]
assert vocab == [*"deilnorstw", "es", "est", "lo", "low", "ew"]
assert encoded == {"lowest": ["low", "est"], "newer": ["n", "ew", "e", "r"]}
assert library_merges == merges and library_vocab == vocab
assert all(library.encode(w).tokens == t for w, t in encoded.items())

# %% [markdown]
# ## 2. Ids to vectors: the embedding
#
# The model is `nn.LM`, built here from the `tiny` preset (a **preset** is a named set of a model's sizes: its
# width, its number of blocks, its vocabulary size and so on) with the vocabulary made to match our tokenizer:
# `nn.preset("tiny").with_(vocab_size=V)`. Its width is $d = d_{model} = 64$: every token will be a vector of 64
# numbers.
#
# The model's first layer, the **embedding** (`model.embed`), is a table of $V$ rows of $d$ numbers, one row
# per token id. Turning an id into its vector is a row lookup: `weight[ids]`. The rows are weights the model
# learns; before training they are random, drawn with standard deviation $1/\sqrt d$, so each row has a length
# of about 1.
#
# Models read several sequences at once. Two prompts of $L = 12$ characters make ids of shape (B, L) = (2, 12):
# the **batch axis** B counts the sequences, the **sequence axis** L the positions in each. The lookup gives
# (B, L, d) = (2, 12, 64): one vector per token.
#
# The lookup is a matrix product in disguise. A **one-hot** vector of length $V$ is all zeros but a 1 at the
# token's id; multiplied by the table, it picks out that row. So the embedding is a `Linear` layer from $V$ to
# $d$ without a bias (lesson 03; its weight is the table, transposed) fed one-hot vectors. Libraries look the
# row up instead: the product spends $2Vd$ FLOPs per token, counted below, nearly all of them on zeros, and the
# lookup none.

# %%
cfg = nn.preset("tiny").with_(vocab_size=V)
model = nn.LM(cfg, generator=tb.Generator(0))
batch = tb.tensor([tok.encode("The for loop"), tok.encode("A list is an")])   # (B, L) = (2, 12)
W = model.embed.weight                                                        # (V, d)
x = model.embed(batch)                                                        # (B, L, d)
one_hot = np.eye(V, dtype=np.float32)[batch.numpy()]                          # (B, L, V)
lengths = np.linalg.norm(W.numpy(), axis=1)
print(f"d_model = {cfg.d_model}, {cfg.n_layers} blocks; the table {W.shape} holds {W.size:,} numbers; "
      f"row lengths {lengths.min():.2f} .. {lengths.max():.2f}")
print(f"ids {batch.shape} {batch.dtype} -> embed -> {x.shape}")
with count_flops() as lookup:
    model.embed(batch)
with count_flops() as product:
    tb.tensor(one_hot) @ W
print(f"embed(ids) == weight[ids]: {np.array_equal(x.numpy(), W.numpy()[batch.numpy()])}; "
      f"== one_hot {one_hot.shape} @ weight: {np.array_equal(x.numpy(), one_hot @ W.numpy())}")
print(f"FLOPs for the {batch.size} tokens: lookup {lookup.total()}, one-hot product {product.total():,} "
      f"= 2 V d per token")
assert cfg.d_model == 64 and cfg.vocab_size == V and W.shape == (V, 64) and W.size == 64 * V
assert batch.shape == (2, 12) and x.shape == (2, 12, 64) and 0.6 < lengths.min() < lengths.max() < 1.4
assert np.array_equal(x.numpy(), W.numpy()[batch.numpy()]) and np.array_equal(x.numpy(), one_hot @ W.numpy())
assert lookup.total() == 0 and product.total() == 24 * 2 * V * 64

# %% [markdown]
# ## 3. The residual stream through the blocks
#
# The vectors now pass through a stack of **blocks**, 2 here (32 in Llama-2-7B). A block reads every token's
# vector and **adds** its output to it; nothing is overwritten. The tensor that runs from block to block is
# therefore called the **residual stream**, and its shape stays (B, L, d) = (2, 12, 64) all the way.
#
# What a block computes is for the next lessons. It rescales each vector it reads to a fixed size (lesson 05).
# It lets each token gather information from the tokens before it, with attention, the only part of the model
# where positions exchange anything (lesson 06), told where each token sits by a position encoding (lesson 07).
# It transforms every token on its own with a feed-forward network (lesson 08). Lesson 09 wires these
# together. Here a block is a box: `block(x)` returns the stream with the block's contribution added, so
# `block(x) - x` is what it wrote.
#
# For the last token of the first prompt, the `p` of `loop`, the printout gives the vector's length after each
# stage. The blocks write more than the embedding holds, so the stream grows.

# %%
stream = [x]                                                                  # after the embedding
for block in model.layers:
    stream.append(block(stream[-1]))                                          # (B, L, d) -> (B, L, d)
for i, (before, after) in enumerate(zip(stream, stream[1:])):
    write = after - before
    print(f"block {i}: reads {before.shape}, writes {write.shape}, |write| for 'p' "
          f"{np.linalg.norm(write.numpy()[0, -1]):.2f}")
size = [float(np.linalg.norm(s.numpy()[0, -1])) for s in stream]
print("|stream| for 'p': " + " -> ".join(f"{s:.2f}" for s in size))
assert len(model.layers) == cfg.n_layers == 2 and nn.preset("llama2-7b").n_layers == 32
assert all(s.shape == (2, 12, 64) for s in stream) and size[0] < size[1] < size[2]
assert all(np.linalg.norm((b - a).numpy()[0, -1]) > size[0] for a, b in zip(stream, stream[1:]))

# %% [markdown]
# ## 4. The final norm and the LM head: logits
#
# After the last block, a final normalisation (`model.norm`, an RMSNorm, lesson 05) rescales every token's vector,
# here to length $\sqrt d = 8$ (it then multiplies each **feature**, one of the $d$ numbers of a vector, by a
# learned **gain**, and the gains are all 1 before training). Then the **LM head** (`model.lm_head`, a `Linear` from
# $d$ to $V$ without bias) turns each vector into $V$ numbers, one score per token of the vocabulary: the
# **logits**, of shape (B, L, V) = (2, 12, V). A higher logit means a more likely next token.
#
# These are all the steps `LM.forward` takes: embed, the blocks, the norm, the head. Done one by one, they give
# exactly what `model(ids)` gives, bit for bit.
#
# **Which position predicts what.** The logits at position $i$ score the candidates for token $i + 1$, and
# attention lets position $i$ see only tokens $0 \dots i$ (lesson 06 shows how). So one pass gives a
# prediction at every position, which is what training uses (lesson 14), and the prediction for the token
# after the prompt is the one at the **last** position. Changing the last character of a prompt leaves the
# logits at the other 11 positions as they were.

# %%
normed = model.norm(stream[-1])                                               # (B, L, d)
logits = model.lm_head(normed)                                                # (B, L, V)
whole = model(batch)
print(f"norm {normed.shape}, length of 'p' {np.linalg.norm(normed.numpy()[0, -1]):.4f}; "
      f"lm_head {model.lm_head.weight.shape} -> logits {logits.shape}")
print(f"step by step == model(ids), bit for bit: {np.array_equal(logits.numpy(), whole.numpy())}")
changed = model(tb.tensor([tok.encode("The for loot"), tok.encode("A list is an")])).numpy()
moved = np.abs(changed - whole.numpy()).max(axis=-1)[0]                       # per position of prompt 0
print(f"'loop' -> 'loot': the logits move at positions {np.flatnonzero(moved).tolist()} only")
assert normed.shape == (2, 12, 64) and abs(np.linalg.norm(normed.numpy()[0, -1]) - 8) < 1e-3
assert logits.shape == whole.shape == (2, 12, V) and np.array_equal(logits.numpy(), whole.numpy())
assert np.flatnonzero(moved).tolist() == [11]

# %% [markdown]
# ## 5. Softmax: the next-token probabilities
#
# Logits are scores, not probabilities: any real numbers. **Softmax**, the composite of lesson 01, turns the $V$
# logits $z$ of a position into probabilities, positive and summing to 1:
#
# $$p_v = \frac{e^{z_v - m}}{\sum_u e^{z_u - m}}, \qquad m = \max_u z_u.$$
#
# Subtracting the largest logit $m$ changes nothing in the ratio, but keeps every exponent at or below 0. Without
# it, logits of about 1,000 overflow: $e^{1000}$ is infinite in floating point, and infinity over infinity is
# `nan`. Taken at the last position, the probabilities have shape (B, V): one distribution over the next token
# per prompt.
#
# **An untrained model is unsure.** The **entropy** $H = -\sum_v p_v \ln p_v$ (in nats, the unit that comes with the
# natural logarithm) measures how spread a distribution is. It is largest, $\ln V$, for the uniform one,
# $p_v = 1/V$, and 0 when one token gets everything. Here both prompts' $H$ lie within 15 % of $\ln V$ (the code prints
# both). $e^H$ is the number of characters a uniform choice would need to be as unsure: more than half of the $V$
# characters. The random weights make the logits vary by about 1 around their mean, so the distribution is not quite
# flat: the most likely character gets several times $1/V$, yet far less than half. Either way it says nothing about
# the text. Training (lesson 14) is what makes these probabilities useful.

# %%
probs = logits[:, -1].softmax(axis=-1)                                        # (B, V)
p = probs.numpy().astype(np.float64)
H = -(p * np.log(p)).sum(axis=-1)
print(f"probabilities {probs.shape}, each row sums to {p.sum(axis=-1).round(6).tolist()}")
print(f"entropy {H.round(3).tolist()} nats; ln V = {math.log(V):.3f}; e^H = {np.exp(H).round(1).tolist()} "
      f"of {V}; largest p {p.max(axis=-1).round(3).tolist()} (uniform: 1/V = {1 / V:.4f})")
print("the logits' spread (standard deviation) at the last position: "
      + ", ".join(f"{v:.2f}" for v in logits.numpy()[:, -1].std(axis=-1)))
with np.errstate(over="ignore", invalid="ignore"):
    big = tb.tensor([1000.0, 999.0, 990.0])
    naive = (big.exp() / big.exp().sum()).numpy()
print(f"logits [1000, 999, 990]: without the max {naive.tolist()}, "
      f"softmax [{', '.join(f'{v:.4f}' for v in big.softmax(axis=-1).numpy())}]")
assert np.abs(p.sum(axis=-1) - 1).max() < 1e-5 and np.all(H < math.log(V)) and np.all(H > 0.85 * math.log(V))
assert np.all(np.exp(H) > V / 2) and np.all(p.max(axis=-1) > 3 / V) and np.all(p.max(axis=-1) < 0.5)
assert np.all(np.abs(logits.numpy()[:, -1].std(axis=-1) - 1) < 0.3)
assert np.all(np.isnan(naive)) and abs(big.softmax(axis=-1).numpy()[0] - 1 / (1 + math.exp(-1))) < 1e-4

# %% [markdown]
# The picture follows the `p` of `"The for loop"` through the model: its 64 numbers after the embedding, after
# each block and after the final norm (one row each, on one colour scale, so the small embedding looks pale),
# then its 10 most likely next characters. The dashed line is the uniform $1/V$.

# %%
rows = [s.numpy()[0, -1] for s in stream] + [normed.numpy()[0, -1]]          # 4 x (d,)
names = ["embedding", "after block 0", "after block 1", "final norm"]
top = np.argsort(-p[0])[:10]
label = lambda c: {" ": "space", "\n": "newline"}.get(c, c)                   # noqa: E731
fig = figure(12, 3.4)
left, right = fig.subplots(1, 2, width_ratios=[2, 1])
vmax = np.abs(np.stack(rows)).max()
image = left.imshow(np.stack(rows), aspect="auto", cmap="RdBu_r", vmin=-vmax, vmax=vmax)
left.set_yticks(range(4), [f"{n}  |x| = {np.linalg.norm(r):.1f}" for n, r in zip(names, rows)])
left.set(xlabel="feature (d = 64)", title="the vector of 'p' in 'The for loop', stage by stage")
fig.colorbar(image, ax=left, fraction=0.03)
right.bar(range(10), p[0, top], color="C0")
right.axhline(1 / V, color="0.4", ls="--", lw=0.8, label=f"uniform, 1/{V}")
right.set_xticks(range(10), [label(tok.chars[i]) for i in top])
right.legend(loc="upper right")
right.set(ylabel="probability", title="top 10 next characters (untrained)")
print("top 10 after 'The for loop': " + ", ".join(f"{tok.chars[i]!r} {p[0, i]:.3f}" for i in top))
assert len(rows) == 4 and all(r.shape == (64,) for r in rows) and p[0, top[0]] == p[0].max()
show(fig, OUT / "one_token.png")

# %% [markdown]
# ## Check yourself
#
# 1. What does a tokenizer turn the text `"The for loop"` into, with the character tokenizer and with BPE?
#
#    <details><summary>Answer</summary>
#
#    A list of token ids, integers from 0 to $V - 1$. The character tokenizer gives 12 ids, one per character; the
#    BPE tokenizer gives a handful, since `The` and ` for` are one token each. Over the whole text BPE needs about 3
#    times fewer tokens than characters.
#
#    </details>
#
# 2. Why is the embedding lookup `weight[ids]` the same as a linear layer fed one-hot vectors, and why do libraries
#    look the row up instead?
#
#    <details><summary>Answer</summary>
#
#    A one-hot vector times the table picks out the row at the token's id, so the product and the lookup give the
#    same vector. The product spends $2Vd$ FLOPs per token, nearly all on zeros; the lookup spends none.
#
#    </details>
#
# 3. Which position's logits give the prediction for the token after the prompt, and why can one pass predict at
#    every position?
#
#    <details><summary>Answer</summary>
#
#    The last position's. The logits at position $i$ score the candidates for token $i + 1$, and position $i$ sees
#    only tokens $0 \dots i$, so every position makes its own prediction in the same pass.
#
#    </details>
#
# 4. An untrained model's next-token entropy lies within 15 % of $\ln V$. What does that say?
#
#    <details><summary>Answer</summary>
#
#    $\ln V$ is the entropy of the uniform distribution, the largest there is. The untrained model spreads its
#    probability almost evenly over the vocabulary, so it says nothing about the text yet.
#
#    </details>

# %% [markdown]
# ## Words from this lesson
#
# - **prompt**: the text a model is given to continue (§1)
# - **tokenizer**: what cuts a text into tokens and replaces each by its token id (§1)
# - **token**: one piece of a text taken from a fixed list, a character or a subword (§1)
# - **vocabulary**: the fixed list of tokens a tokenizer knows (§1)
# - **token id**: a token's place in the vocabulary, an integer from 0 to $V - 1$ (§1)
# - **vocabulary size**: the number of tokens in the vocabulary, $V$ (§1)
# - **subword**: a piece of a word that a tokenizer keeps as one token, so that frequent words are one token and
#   rare ones a few (§1)
# - **BPE**: byte-pair encoding, a tokenizer trained by merging the most frequent pair of neighbouring tokens again
#   and again (§1)
# - **pre-tokenizer**: the step before BPE that cuts a text into words, at whitespace for example, or writes its
#   bytes as characters (§1)
# - **preset**: a named set of a model's sizes, such as `tiny` (§2)
# - **d_model**: the model's width, the number of features of every token's vector (§2)
# - **embedding**: the model's first layer, a table of one learned vector per token id, read with `weight[ids]` (§2)
# - **batch axis**: the axis B of a (B, L, d) tensor, which counts the sequences (§2)
# - **sequence axis**: the axis L of a (B, L, d) tensor, which counts the positions of each sequence (§2)
# - **one-hot**: a vector of zeros with a single 1, at a token's id (§2)
# - **residual stream**: the (B, L, d) tensor that runs from block to block, to which each block adds its output
#   (§3)
# - **feature**: one of the $d$ numbers of a token's vector (§4)
# - **gain**: a learned factor per feature that a norm multiplies its output by (§4)
# - **LM head**: the last layer, a linear map from $d$ to $V$ that gives every position one score per token of the
#   vocabulary (§4)
# - **logit**: one of those scores; a higher logit means a more likely next token (§4)
# - **entropy**: $H = -\sum_v p_v \ln p_v$, how spread a distribution is: $\ln V$ for the uniform one, 0 when one
#   token gets everything (§5)
# - **nat**: the unit of entropy and of losses measured with the natural logarithm (§5)

# %% [markdown]
# ## Exercises
#
# 1. `embed`: `embed(weight, ids)` looks up the vectors of token ids (B, L) in a table (V, d), by a one-hot
#    product or by indexing, built from Tensor operations so that the gradient reaches the table (section 2).
#    The checker compares it with `nn.Embedding`, forward and backward (a token that appears twice collects
#    both gradients), and names the usual slips: the transposed table, ids off by one.
# 2. `next_token_probs`: `next_token_probs(logits)` turns logits (B, L, V) into the probabilities of the next
#    token after the last position, (B, V), with exp, max and sum (section 5). The checker compares it with
#    numpy's softmax in float64 and with the library's, on logits near 1,000 too, and names the usual slips:
#    softmax over the wrong axis, the first position, no max subtracted.
# 3. `most_likely_next`: `most_likely_next(model, tokenizer, text, k)` runs the whole path of this lesson and
#    returns the k most likely next characters with their probabilities, most likely first. The checker
#    recomputes them from the model's logits in numpy.
#
# `python -m tinygrad_block exercise 04` writes `exercise_04.py` with the three functions to fill in;
# `python -m tinygrad_block check 04` checks them and says what is wrong.
