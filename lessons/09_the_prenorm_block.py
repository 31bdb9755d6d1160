# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 09 — The pre-norm block
#
# Lessons 05 to 08 built the parts: the norms, attention, the positions, the FFN. This lesson wires them into
# the block that Llama, Mistral and GPT-2 repeat dozens of times. The wiring is only two residual adds, yet it
# decides what a model can be read for and how deep it can be trained.
#
# **What you will learn**
# - the pre-norm block in two lines, and the residual stream as a bus: after any number of blocks, the stream
#   is the input plus one contribution per sublayer, exactly;
# - why a block whose output projections are zero is exactly the identity, forward and backward, and why it
#   still learns;
# - how to read each sublayer's contribution through the unembedding, the LM head of lesson 04 (the idea behind
#   the logit lens), and
#   what it can and cannot show on an untrained model;
# - one token through the block, step by step: every shape, for the tiny preset and for Llama-2-7B;
# - why the values add up through the stack but the derivatives multiply: a stack's Jacobian is a product of one
#   factor per sublayer, checked on two small blocks;
# - pre-norm against post-norm: the gradient through stacks of 1 to 48 blocks, measured and plotted, and the
#   identity path that keeps the pre-norm gradient in check.
#
# Run it as a script, `python -m tinygrad_block lesson 09`, or as a notebook,
# `python -m tinygrad_block lesson 09 --notebook --execute` (it lands beside this file).

# %%
import functools

import numpy as np

import tinygrad_block as tb
from tinygrad_block import measure, nn
from tinygrad_block.pictures import figure

from course import out_dir, show

OUT = out_dir(9)          # lessons/out/09/: this lesson's pictures

# %% [markdown]
# ## 1. The block in two lines
#
# A pre-norm block (`nn.TransformerBlock`) is
#
# $$h = x + \mathrm{attn}(\mathrm{norm}_1(x)), \qquad \mathrm{out} = h + \mathrm{ffn}(\mathrm{norm}_2(h)).$$
#
# Each of the two sublayers reads a normalised copy of its input and adds what it computes. Neither replaces
# anything. Written out with the block's own modules, the two lines give exactly the array `block(x)` gives.
# Three properties follow from this layout, and the sections below take them one by one:
# - the input and output have the same shape, (B, L, $d_{model}$), so blocks stack: Llama-2-7B stacks 32,
#   Llama-2-70B 80;
# - everything a block does is **added** to its input, so the stream that runs through the stack is a sum
#   (sections 2 to 4);
# - the norms sit on the side branches, never on the stream itself, so the stream keeps a path from the
#   output back to the input that passes through nothing but additions (sections 3, 6 and 7).
#
# The examples use the `tiny` preset ($d_{model} = 64$, 4 query heads sharing 2 key/value heads,
# $d_{ff} = 172$, 2 layers) in float64, on a batch of 2 sequences of 8 tokens.

# %%
CFG = nn.preset("tiny")
B, L = 2, 8
g = tb.Generator(0)
block = nn.TransformerBlock(CFG, generator=g, dtype=tb.float64)
x = tb.randn(B, L, CFG.d_model, generator=g, dtype=tb.float64)

h = x + block.attn(block.norm1(x))                                # residual 1
out = h + block.ffn(block.norm2(h))                               # residual 2
print(f"x {x.shape} -> h {h.shape} -> out {out.shape}; the two lines equal block(x) bit for bit: "
      f"{np.array_equal(out.numpy(), block(x).numpy())}")
print(f"Llama-2-7B stacks {nn.preset('llama2-7b').n_layers} such blocks, "
      f"Llama-2-70B {nn.preset('llama2-70b').n_layers}")
assert np.array_equal(out.numpy(), block(x).numpy()) and out.shape == x.shape == (2, 8, 64)
assert (CFG.d_model, CFG.n_heads, CFG.n_kv_heads, CFG.d_ff, CFG.n_layers) == (64, 4, 2, 172, 2)
assert nn.preset("llama2-7b").n_layers == 32 and nn.preset("llama2-70b").n_layers == 80

# %% [markdown]
# ## 2. The residual stream is a bus
#
# Since every sublayer adds and nothing overwrites, the stream after $n$ blocks is the input plus one
# contribution per sublayer:
#
# $$x^{(n)} = x^{(0)} + \sum_{\ell=1}^{n}\big(\Delta^{(\ell)}_{attn} + \Delta^{(\ell)}_{ffn}\big).$$
#
# Think of the stream as a **bus**, the name for the shared wires in a computer that every part reads from and
# writes to. Every sublayer reads from the stream (through its norm) and writes to it (through its output
# projection, $W_O$ or $W_{down}$). This has consequences:
# - **A shared space.** Every $\Delta$ has the stream's shape, here (2, 8, 64). All sublayers of all layers
#   write into the same 64 coordinates, so a direction written by layer 1 can be read by layer 2, or by the
#   unembedding (the LM head, section 4) at the very end.
# - **A fixed width.** A sublayer can only change the stream within its $d_{model}$ coordinates. Whatever it
#   wants to pass on must fit there, alongside everything else that has been written.
# - **Decomposability.** "What did layer 1's FFN add?" has an exact answer: $\Delta^{(1)}_{ffn}$. The
#   non-linear parts (softmax, SiLU, the norms) live inside the sublayers; between them there are only sums.
#
# Below, the two blocks of the tiny preset run in sequence and each sublayer's write is kept. Added up in the
# same order, $x + \Delta_1 + \Delta_2 + \Delta_3 + \Delta_4$ equals the stack's output to the last bit. The
# writes are not small next to the stream: each one here is about two thirds the size of the input (in 2-norm,
# the square root of the sum of all the squared numbers).

# %%
g = tb.Generator(1)
blocks = [nn.TransformerBlock(CFG, generator=g, dtype=tb.float64) for _ in range(CFG.n_layers)]
x0 = tb.randn(B, L, CFG.d_model, generator=g, dtype=tb.float64)
stream, writes = x0, {}
for i, blk in enumerate(blocks):
    writes[f"attn {i}"] = blk.attn(blk.norm1(stream))                 # what attention writes
    stream = stream + writes[f"attn {i}"]
    writes[f"ffn {i}"] = blk.ffn(blk.norm2(stream))                   # what the FFN writes
    stream = stream + writes[f"ffn {i}"]
stacked = x0
for blk in blocks:
    stacked = blk(stacked)
total = x0
for w in writes.values():
    total = total + w
norm = lambda t: float(np.linalg.norm(t.numpy()))                     # noqa: E731
print(f"|x| = {norm(x0):.2f}; " + ", ".join(f"|{name}| = {norm(w):.2f} ({norm(w) / norm(x0):.2f} |x|)"
                                           for name, w in writes.items()))
print(f"x + the {len(writes)} writes == the stack's output, bit for bit: "
      f"{np.array_equal(total.numpy(), stacked.numpy())}")
assert np.array_equal(total.numpy(), stacked.numpy()) and len(writes) == 2 * CFG.n_layers == 4
assert all(w.shape == x0.shape == (2, 8, 64) for w in writes.values())
assert all(0.6 < norm(w) / norm(x0) < 0.72 for w in writes.values())

# %% [markdown]
# ## 3. Zero output weights: the block is the identity
#
# Set the two output projections to zero, $W_O = 0$ and $W_{down} = 0$. Then both sublayers write exactly 0,
# whatever they compute inside, and the block is the identity: $\mathrm{out} = x$. The backward pass is the
# identity too. The block's Jacobian is a **product** of two factors, one per residual add, each the identity
# plus the Jacobian of its sublayer (the norm before it included):
#
# $$\frac{\partial\,\mathrm{out}}{\partial x} = (I + J_{ffn})\,(I + J_{attn}).$$
#
# With both output projections at zero, $J_{attn} = J_{ffn} = 0$, the product is $I \cdot I = I$, and the
# gradient reaching the input equals the gradient arriving at the output, exactly. (Section 6 checks the product
# numerically, on a stack of two blocks whose weights are not zero.)
#
# Such a block still learns. Look at which weights get a gradient. $W_O$ and $W_{down}$ do: the gradient of
# $W_{down}$ is the upstream gradient times the hidden vector that reached it, and that hidden vector is not
# zero. Every weight before them gets exactly 0, because its only way to the output runs through a zero matrix.
# A first step of training moves $W_O$ and $W_{down}$ off zero, and after that the rest of the block gets
# gradient too. This is why a block can start as (or near) the identity: GPT-2 shrinks its output projections
# at initialisation (the random draw of the weights before training starts), and some schemes set them to zero.
#
# The same holds for a whole stack, block after block. It holds only for pre-norm: in a post-norm block
# (section 7) the norms sit on the stream itself, and the same zero weights give
# $\mathrm{norm}_2(\mathrm{norm}_1(x))$: every token rescaled to RMS 1 (just under, by $\varepsilon$), not $x$.
# On a stream of RMS about 3 that changes every number by a lot.

# %%
zeroed = nn.TransformerBlock(CFG, generator=tb.Generator(0), dtype=tb.float64)
zeroed.load_state_dict({name: tb.zeros_like(p) if name in ("attn.o_proj.weight", "ffn.down_proj.weight")
                        else p.detach() for name, p in zeroed.named_parameters()})
x = tb.randn(B, L, CFG.d_model, generator=tb.Generator(2), dtype=tb.float64, requires_grad=True)
dout = tb.randn(B, L, CFG.d_model, generator=tb.Generator(3), dtype=tb.float64)
y = zeroed(x)
y.backward(dout)
grad_norms = {name: float(np.abs(p.grad.numpy()).max()) for name, p in zeroed.named_parameters()}
print(f"|out - x| = {np.abs(y.numpy() - x.numpy()).max()}, |dx - dout| = {np.abs(x.grad.numpy() - dout.numpy()).max()}")
print("largest |gradient| per weight: " + ", ".join(f"{k} {v:.3g}" for k, v in grad_norms.items()))
assert np.array_equal(y.numpy(), x.numpy()) and np.array_equal(x.grad.numpy(), dout.numpy())
assert grad_norms["attn.o_proj.weight"] > 0.1 and grad_norms["ffn.down_proj.weight"] > 0.1
assert all(v == 0.0 for k, v in grad_norms.items() if k not in ("attn.o_proj.weight", "ffn.down_proj.weight"))

post = nn.TransformerBlock(CFG.with_(layout="post"), generator=tb.Generator(0), dtype=tb.float64)
post.load_state_dict({name: p.detach() for name, p in zeroed.named_parameters()})
x3 = x.detach() * 3.0                                              # a stream of RMS about 3
y_post, y_pre = post(x3).numpy(), zeroed(x3).numpy()
rms_post = np.sqrt((y_post ** 2).mean(-1))
print(f"a stream of RMS {np.sqrt((x3.numpy() ** 2).mean()):.2f}, zero output weights: pre-norm |out - x| = "
      f"{np.abs(y_pre - x3.numpy()).max()}, post-norm |out - x| = {np.abs(y_post - x3.numpy()).max():.2f}, "
      f"every token's RMS {rms_post.min():.6f}..{rms_post.max():.6f}")
assert type(post) is nn.PostNormBlock and np.array_equal(y_pre, x3.numpy())
assert np.abs(y_post - x3.numpy()).max() > 2
assert np.abs(rms_post - 1).max() < 1e-5

# %% [markdown]
# ## 4. Reading each sublayer through the unembedding
#
# A language model (`nn.LM`) ends with a final norm and an unembedding (the LM head, $W_U$, a
# $V \times d_{model}$ matrix): $\mathrm{logits} = W_U\,\mathrm{norm}(x^{(n)})$. Because the final stream is a
# sum, we can ask how much each part of that sum pushes towards each token.
#
# The final norm is not linear: $\mathrm{norm}(a + b) \ne \mathrm{norm}(a) + \mathrm{norm}(b)$. But RMSNorm
# only multiplies each token's vector by one number, $r = 1/\mathrm{rms}(x^{(n)})$, and then by the gain $g$.
# Hold $r$ at the value the whole stream gives, and the map from stream to logits is linear. The logits then
# split exactly into one term per part:
#
# $$\mathrm{logits} = \sum_{c \,\in\, \{\text{embedding},\ \Delta_1, \dots, \Delta_{2n}\}} W_U\,(g \odot r\,c).$$
#
# This is **direct logit attribution**. Its cousin, the **logit lens**, applies the final norm and the
# unembedding to the partial sums instead (the stream after the embedding, after the first sublayer, and so on)
# and asks what the model would predict if it stopped there.
#
# Below, the tiny preset as a whole model (vocabulary 256, 2 layers) reads a sequence of 8 tokens. The final
# stream equals the embedding plus the four writes to $10^{-15}$, the five attributions add up to the model's
# logits to $10^{-13}$, and the logit lens at the last stage gives the model's own logits. Pushing each part
# through the whole norm on its own ($W_U\,\mathrm{norm}(c)$) does not add up to the logits: the scale must
# come from the whole stream. The picture takes the model's top token at the last position and shows each part's
# term in its logit (left), and where the logit lens ranks that token after each stage (right).
#
# **What this shows, and what it does not.** This model is untrained. Its token ids stand for nothing, and
# which part "votes" for which token is an accident of the random weights. The point here is the mechanism:
# the attribution is exact, because between the sublayers there is only addition. On a trained model the same
# sums say which layer writes the evidence for a prediction. Lesson 14 trains a small model and reads its residual
# stream layer by layer (the logit lens, its section 7).

# %%
lm = nn.LM(CFG, generator=tb.Generator(4), dtype=tb.float64)
ids = tb.randint(0, CFG.vocab_size, (1, 8), generator=tb.Generator(5))
parts = {"embedding": lm.embed(ids)}                                   # (1, 8, 64)
stream = parts["embedding"]
stages = [stream]                                                       # the partial sums, for the logit lens
for i, blk in enumerate(lm.layers):
    parts[f"attn {i}"] = blk.attn(blk.norm1(stream))
    stream = stream + parts[f"attn {i}"]
    stages.append(stream)
    parts[f"ffn {i}"] = blk.ffn(blk.norm2(stream))
    stream = stream + parts[f"ffn {i}"]
    stages.append(stream)
logits = lm(ids).numpy()                                                # (1, 8, 256)
final = stream.numpy()
summed = sum(p.numpy() for p in parts.values())
r = 1 / np.sqrt((final ** 2).mean(-1, keepdims=True) + CFG.norm_eps)   # the final norm's scale, per token
gain, W_U = lm.norm.weight.numpy(), lm.lm_head.weight.numpy()           # (64,), (256, 64)
attribution = {name: (p.numpy() * r * gain) @ W_U.T for name, p in parts.items()}   # each (1, 8, 256)
whole_norm_each = sum(lm.lm_head(lm.norm(p)).numpy() for p in parts.values())
lens = [lm.lm_head(lm.norm(s)).numpy() for s in stages]                 # 5 stages, each (1, 8, 256)
print(f"final stream vs the sum of the 5 parts: {np.abs(final - summed).max():.1e}")
print(f"the 5 attributions summed vs the model's logits: {np.abs(sum(attribution.values()) - logits).max():.1e}; "
      f"each part through the whole norm on its own: off by {np.abs(whole_norm_each - logits).max():.2f}")
print(f"the logit lens at the last stage vs the model's logits: {np.abs(lens[-1] - logits).max():.1e}")
assert np.abs(final - summed).max() <= 1e-15
assert np.abs(sum(attribution.values()) - logits).max() < 1e-13 and np.abs(lens[-1] - logits).max() < 1e-13
assert np.abs(whole_norm_each - logits).max() > 0.5 and CFG.vocab_size == 256 and logits.shape == (1, 8, 256)

top = int(logits[0, -1].argmax())                                       # the model's top token at position 7
votes = {name: float(a[0, -1, top]) for name, a in attribution.items()}
lens_top = [int(s[0, -1].argmax()) for s in lens]
print(f"position 7: the model's top token is {top}, logit {logits[0, -1, top]:.3f} = "
      + " + ".join(f"{v:.3f} ({name})" for name, v in votes.items()))
print(f"the logit lens's top token after each stage: {lens_top}")
assert abs(sum(votes.values()) - logits[0, -1, top]) < 1e-13 and lens_top[-1] == top

stage_names = ["embedding", "+ attn 0", "+ ffn 0", "+ attn 1", "+ ffn 1"]
rank = [int((s[0, -1] > s[0, -1, top]).sum()) + 1 for s in lens]       # where token `top` ranks at each stage
fig = figure(11, 4)
left, right = fig.subplots(1, 2)
names = list(votes)
left.bar(names, list(votes.values()), color=["C2", "C0", "C3", "C0", "C3"])
left.axhline(0, color="black", lw=0.6)
left.bar(["total = logit"], [logits[0, -1, top]], color="0.3")
for i, v in enumerate([*votes.values(), logits[0, -1, top]]):
    left.annotate(f"{v:.2f}", (i, v), textcoords="offset points", xytext=(0, 3), ha="center")
left.set(ylim=(min(0, *votes.values()) * 1.15, 1.12 * logits[0, -1, top]),
         ylabel=f"contribution to the logit of token {top}",
         title=f"Direct logit attribution: token {top} at position 7\n(untrained model: the mechanism, not a meaning)")
left.tick_params(axis="x", labelrotation=20)
right.plot(stage_names, rank, "o-", color="C1")
for i, k in enumerate(rank):
    right.annotate(f"{k}", (i, k), textcoords="offset points", xytext=(0, 8), ha="center")
right.set(yscale="log", ylabel=f"rank of token {top} among 256 (1 = top)", ylim=(400, 0.6),
          title=f"Logit lens: where token {top} ranks after each stage")
right.set_yticks([1, 3, 10, 30, 100, 256], ["1", "3", "10", "30", "100", "256"])
right.minorticks_off()
right.tick_params(axis="x", labelrotation=20)
show(fig, OUT / "logit_attribution.png")

# %% [markdown]
# ## 5. One token through the block
#
# `measure.walk` runs one block on the shape-only device under `tb.observe`. Every primitive call reports its
# module, its named step and its output, and consecutive calls of the same step are grouped. Its table is the
# block's forward pass step by step. Below it is run for a batch of one sequence of $L = 16$ tokens on the tiny
# preset and on Llama-2-7B (which builds in no time, because nothing is computed).
#
# The shapes follow the configuration: the projections give $n_{heads}$ query heads and $n_{kv}$ key/value
# heads of $d_{head}$ each (the walk counts the reshape that splits the heads as part of its projection and the
# merge as part of the weighted sum, and the RoPE row shows k, which is rotated last); GQA copies the key/value
# heads to match the query heads (the tiny preset has 2 for 4; Llama-2-7B has one per query head, so the step is
# absent); the scores are $L \times L$ per head; the FFN widens to $d_{ff}$; every residual add is back at
# $d_{model}$.
#
# The last column is what **one token** sees: drop the batch axis and the token axis. This is the per-token
# walk that Llama-2-7B is often described with: a 4096-vector, 32 query heads of 128, one row of $L$ scores per
# head, a hidden vector of 11008, and back to 4096. Lesson 13 adds the FLOPs of each step.

# %%
def token_shape(shape: tuple) -> tuple:
    """One token's part of a (1, L, ...) or (1, heads, L, ...) shape: the batch and token axes dropped."""
    return shape[2:] if len(shape) == 3 else (shape[1], *shape[3:])


def expected_shapes(cfg: nn.BlockConfig, Ln: int) -> dict:
    """The output shape of each step, from the configuration's numbers alone."""
    d, H, H_kv, dh = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_head
    return {"RMSNorm (norm1)": (1, Ln, d), "Q projection": (1, H, Ln, dh), "K projection": (1, H_kv, Ln, dh),
            "V projection": (1, H_kv, Ln, dh), "RoPE on q, k": (1, H_kv, Ln, dh),
            "repeat K, V heads (GQA)": (1, H, Ln, dh), "scores q k^T / sqrt(d_head)": (1, H, Ln, Ln),
            "causal mask": (1, H, Ln, Ln), "softmax": (1, H, Ln, Ln), "weights @ V": (1, Ln, d),
            "O projection": (1, Ln, d), "residual add": (1, Ln, d), "RMSNorm (norm2)": (1, Ln, d),
            "gate projection": (1, Ln, cfg.d_ff), "SiLU(gate)": (1, Ln, cfg.d_ff), "up projection": (1, Ln, cfg.d_ff),
            "SiLU(gate) * up": (1, Ln, cfg.d_ff), "down projection": (1, Ln, d)}


LW = 16
walks = {name: measure.walk(nn.preset(name), B=1, L=LW) for name in ("tiny", "llama2-7b")}
rows, big = [], iter(walks["llama2-7b"])
nxt = next(big)
for s in walks["tiny"]:
    if nxt is not None and nxt.operation == s.operation:
        rows.append((s.operation, s.shape, nxt.shape))
        nxt = next(big, None)
    else:
        rows.append((s.operation, s.shape, None))
print(f"{'step':30} {'tiny, B=1, L=16':>18} {'llama2-7b, B=1, L=16':>22} {'one llama2-7b token':>20}")
for op, tiny_shape, big_shape in rows:
    print(f"{op:30} {str(tiny_shape):>18} {str(big_shape or '(no step)'):>22} "
          f"{str(token_shape(big_shape)) if big_shape else '':>20}")
assert nxt is None and len(rows) == len(walks["tiny"]) == len(walks["llama2-7b"]) + 1
for name, walk in walks.items():
    want = expected_shapes(nn.preset(name), LW)
    assert all(s.shape == want[s.operation] for s in walk), name
assert [op for op, _, b in rows if b is None] == ["repeat K, V heads (GQA)"]
per_token = {op: token_shape(b) for op, _, b in rows if b is not None}
assert per_token["RMSNorm (norm1)"] == (4096,) and per_token["Q projection"] == (32, 128)
assert per_token["softmax"] == (32, LW) and per_token["gate projection"] == (11008,)
assert per_token["down projection"] == per_token["residual add"] == (4096,)

# %% [markdown]
# ## 6. A stack's Jacobian is a product
#
# Section 2 showed that the *values* add up: the stream is the input plus one write per sublayer. The
# *derivatives* do not add up. A residual add $y = x + f(x)$ has the Jacobian $I + J_f$, and the chain rule
# (lesson 02) multiplies the Jacobians of steps taken one after the other. So the Jacobian of a stack of $n$
# pre-norm blocks is the product of one factor per sublayer, the last sublayer's on the left:
#
# $$\frac{\partial x^{(n)}}{\partial x^{(0)}} = (I + J_{2n}) \cdots (I + J_2)\,(I + J_1),$$
#
# where $J_\ell$ is the Jacobian of sublayer $\ell$ (its norm included) at the stream it read. Multiply the
# product out and its first term is $I$: one path that carries the gradient from the top of the stack to the
# bottom untouched, through nothing but the residual adds. This is the **identity path**. The other terms are
# the paths through one sublayer, through two, and so on.
#
# The cell checks this on a stack of two pre-norm blocks small enough to write out every Jacobian: $d_{model}$ = 8,
# a sequence of 3 tokens, so 24 numbers in and 24 out, in float64. Each Jacobian is read off autograd one row at a
# time (a backward pass from each output number). The product of the four factors equals the stack's Jacobian to
# $10^{-14}$. The sum $I + J_1 + J_2 + J_3 + J_4$, which would hold if derivatives added like the writes, is off by
# more than 1.

# %%
def jacobian(f, at: tb.Tensor) -> np.ndarray:
    """The Jacobian of f at `at`, (outputs, inputs), one row per backward pass from one output number."""
    rows = []
    for i in range(at.size):
        x = tb.tensor(at.numpy(), dtype=tb.float64, requires_grad=True)
        y = f(x)
        one = np.zeros(y.size)
        one[i] = 1.0
        y.backward(tb.tensor(one.reshape(y.shape), dtype=tb.float64))
        rows.append(x.grad.numpy().ravel())
    return np.array(rows)


def sublayers(blocks: list) -> list:
    """Each sublayer of `blocks` in order, attention then FFN, its norm included: a function of the stream."""
    return [f for b in blocks for f in (lambda x, b=b: b.attn(b.norm1(x)), lambda x, b=b: b.ffn(b.norm2(x)))]


SMALL = CFG.with_(d_model=8, n_heads=2, n_kv_heads=1, d_ff=16)
g = tb.Generator(6)
pair = [nn.TransformerBlock(SMALL, generator=g, dtype=tb.float64) for _ in range(2)]
x_small = tb.randn(1, 3, SMALL.d_model, generator=g, dtype=tb.float64)               # (1, 3, 8): 24 numbers
whole = jacobian(lambda x: pair[1](pair[0](x)), x_small)                              # (24, 24)
eye = np.eye(x_small.size)
product, summed, stream = eye, eye, x_small
for f in sublayers(pair):
    J = jacobian(f, stream)                                                            # this sublayer, at its input
    product, summed = (eye + J) @ product, summed + J                                  # the new factor on the left
    stream = stream + f(stream)
off = {"product": np.abs(product - whole).max(), "sum": np.abs(summed - whole).max()}
print(f"the stack's Jacobian {whole.shape}: the product of the 4 factors is off by {off['product']:.1e}, "
      f"the sum I + J1 + J2 + J3 + J4 by {off['sum']:.2f}")
assert off["product"] < 1e-14 and off["sum"] > 1 and len(sublayers(pair)) == 4
assert np.array_equal(stream.numpy(), pair[1](pair[0](x_small)).numpy())

# %% [markdown]
# ## 7. Pre-norm against post-norm
#
# **The message.** In a pre-norm stack the identity path of section 6 carries the gradient down the stack, so
# the gradient at every layer stays close to the one at the top, in size and in direction. A post-norm stack
# has no such path: every block multiplies the gradient by a factor of its own, and the factors compound with
# depth. The measurements below show both, on stacks of random tiny blocks of 1 to 48 layers.
#
# **The two layouts.** The original transformer of 2017 (lesson 08), and BERT after it, put the norm *after*
# the residual add (`nn.PostNormBlock`):
#
# $$\text{post-norm:}\quad h = \mathrm{norm}_1(x + \mathrm{attn}(x)), \quad \mathrm{out} = \mathrm{norm}_2(h +
# \mathrm{ffn}(h)); \qquad \text{pre-norm:}\quad h = x + \mathrm{attn}(\mathrm{norm}_1(x)), \quad \mathrm{out} =
# h + \mathrm{ffn}(\mathrm{norm}_2(h)).$$
#
# Deep post-norm models are commonly said to need small steps at the start of training, a warmup of the learning
# rate (lesson 14), to train past about a dozen layers, while pre-norm models train at 100 layers and more. The
# Llama, Mistral, Qwen and Gemma families are all pre-norm. Some add norms of their own on top: Gemma 2 also
# normalises each sublayer's output before the add, which still leaves the stream itself un-normalised. (Lesson 15
# trains both layouts and finds the depth where post-norm gets stuck in its runs.)
#
# **Why.** Through $n$ post-norm blocks the Jacobian is again a product, but now a norm's Jacobian $N_\ell$
# sits in every factor:
#
# $$\text{pre-norm:}\ \prod_{\ell} \big(I + J_\ell\big) \qquad\text{against}\qquad \text{post-norm:}\
# \prod_{\ell} N_\ell\,\big(I + J_\ell\big).$$
#
# Every route from the output to the input passes through every norm's backward. No term of the product is
# $I$, and each block scales the gradient by a factor of its own. In pre-norm, each $J_\ell$ starts with the norm
# before its sublayer, which divides by the stream's RMS: as the stream grows (it is never normalised), the later
# sublayers' terms shrink and the identity term dominates.
#
# **The experiment.** Stacks of tiny-preset blocks in float64, 3 random seeds each, a random gradient at the
# top, and the gradient measured at every layer's input. First, the stream itself: post-norm holds every token
# at RMS 1, while pre-norm's stream grows from 1 at the input to about 7 after 48 blocks.

# %%
@functools.cache                 # the sweep over depths below asks for the 48-block stacks again
def stack_gradients(layout: str, depth: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A stack of `depth` tiny blocks of `layout`, a random gradient at the top: per layer (input first), the
    gradient's norm over the top's, its cosine with the top's, and the stream's RMS."""
    cfg = CFG.with_(layout=layout)
    g = tb.Generator(seed)
    stack = [nn.TransformerBlock(cfg, generator=g, dtype=tb.float64) for _ in range(depth)]
    x = tb.randn(B, L, cfg.d_model, generator=g, dtype=tb.float64, requires_grad=True)
    streams = [x]
    for blk in stack:
        streams.append(blk(streams[-1]).retain_grad())               # keep every layer's gradient
    top = tb.randn(B, L, cfg.d_model, generator=tb.Generator(100 + seed), dtype=tb.float64)
    streams[-1].backward(top)
    t = top.numpy().ravel()
    grads = [s.grad.numpy().ravel() for s in streams]
    norms = np.array([np.linalg.norm(v) / np.linalg.norm(t) for v in grads])
    cosines = np.array([v @ t / (np.linalg.norm(v) * np.linalg.norm(t)) for v in grads])
    rms = np.array([np.sqrt((s.numpy() ** 2).mean()) for s in streams])
    return norms, cosines, rms


SEEDS, DEEP = (0, 1, 2), 48
per_layer = {lay: [stack_gradients(lay, DEEP, s) for s in SEEDS] for lay in ("pre", "post")}
geo = {lay: np.exp(np.mean([np.log(r[0]) for r in runs], axis=0)) for lay, runs in per_layer.items()}   # (49,)
cos = {lay: np.mean([r[1] for r in runs], axis=0) for lay, runs in per_layer.items()}
rms = {lay: np.mean([r[2] for r in runs], axis=0) for lay, runs in per_layer.items()}
for lay in ("pre", "post"):
    print(f"{lay + '-norm':9}, 48 blocks: stream RMS at layers 0, 12, 24, 48: {rms[lay][[0, 12, 24, 48]].round(3)}")
assert abs(rms["pre"][0] - 1) < 0.1 and 6.5 < rms["pre"][-1] < 8 and np.all(np.diff(rms["pre"]) > 0)
assert np.abs(rms["post"][1:] - 1).max() < 1e-5

# %% [markdown]
# **The gradient at each layer of a 48-block stack,** as a multiple of the gradient at the top. In pre-norm it
# changes smoothly: it stays within a factor of 2.3 of the top from layer 12 up and reaches about 14 at the input,
# most of that growth in the first blocks, where the stream is still small. In post-norm it is multiplied by
# about 1.12 per block on the way down, to more than 100 at the input.

# %%
for lay in ("pre", "post"):
    print(f"{lay + '-norm':9}: gradient / top at layers 0, 12, 24, 36: {geo[lay][[0, 12, 24, 36]].round(2)}")
post_factor = np.exp(-np.polyfit(np.arange(DEEP + 1), np.log(geo["post"]), 1)[0])     # per block, fitted
print(f"post-norm: the gradient is multiplied by about {post_factor:.2f} per block, down the stack")
assert geo["pre"][12:].max() < 2.3 and 10 < geo["pre"][0] < 20 and np.all(np.diff(geo["pre"]) < 0)
assert round(geo["pre"][0]) == 14
assert 1.08 < post_factor < 1.16 and round(post_factor, 2) == 1.12
assert geo["post"][0] > 100 and min(r[0][0] for r in per_layer["post"]) > 50

# %% [markdown]
# **Its direction** tells the same story. In pre-norm the gradient at a layer still points largely along the
# gradient at the top: its cosine with it stays above 0.5 down to layer 15, 33 blocks below the top, because the
# identity path carries it down. In post-norm the cosine falls below 0.25 within 3 blocks of the top, and the
# direction is scrambled.

# %%
for lay in ("pre", "post"):
    print(f"{lay + '-norm':9}: cosine with the top at layers 0, 15, 45: {cos[lay][[0, 15, 45]].round(2)}")
assert cos["pre"][15:].min() > 0.5 and np.abs(cos["post"][:46]).max() < 0.25             # layer 45: 3 below the top

# %% [markdown]
# **The gradient reaching the input, $\lVert \nabla x \rVert / \lVert \nabla\,\mathrm{out} \rVert$, for stacks
# of 1 to 48 blocks.** At 3 blocks pre-norm's is in fact the larger, about 2.8 against 1.9: its first blocks read
# a stream of RMS 1 and add writes of a similar size (section 2). But it grows only like a power of the depth,
# about $n^{0.6}$, because later blocks change a grown stream less and less. Post-norm's compounds: it overtakes
# between 12 and 24 blocks, and at 48 it is above 100, against about 14 for pre-norm. The picture draws the three
# measurements.

# %%
DEPTHS = (1, 2, 3, 6, 12, 24, 48)
at_input = {lay: np.array([[stack_gradients(lay, n, s)[0][0] for s in SEEDS] for n in DEPTHS])
            for lay in ("pre", "post")}                                  # (depths, seeds)
mean_in = {lay: np.exp(np.log(at_input[lay]).mean(axis=1)) for lay in at_input}   # (depths,): geometric means
print(f"{'blocks':>6} {'pre-norm |dx|/|dout|':>22} {'post-norm':>10}   (geometric mean of 3 seeds)")
for i, n in enumerate(DEPTHS):
    print(f"{n:>6} {mean_in['pre'][i]:>22.2f} {mean_in['post'][i]:>10.2f}")
power = np.polyfit(np.log(DEPTHS), np.log(mean_in["pre"]), 1)[0]                  # pre-norm ~ n^power
print(f"pre-norm's input gradient grows like n^{power:.2f}")
assert round(mean_in["pre"][2], 1) == 2.8 and round(mean_in["post"][2], 1) == 1.9 and DEPTHS[2] == 3
assert all(mean_in["pre"][:5] > mean_in["post"][:5]) and all(mean_in["pre"][5:] < mean_in["post"][5:])
assert round(power, 1) == 0.6 and mean_in["post"][-1] > 100 and round(mean_in["pre"][-1]) == 14

fig = figure(14, 4.3)
a, b, c = fig.subplots(1, 3)
layers = np.arange(DEEP + 1)
for lay, color in (("pre", "C0"), ("post", "C3")):
    for norms, cosines, _ in per_layer[lay]:
        a.plot(layers, norms, color=color, lw=0.6, alpha=0.4)
        b.plot(layers, cosines, color=color, lw=0.6, alpha=0.4)
    a.plot(layers, geo[lay], color=color, lw=2.2, label=f"{lay}-norm")
    b.plot(layers, cos[lay], color=color, lw=2.2, label=f"{lay}-norm")
    for s in range(len(SEEDS)):
        c.plot(DEPTHS, at_input[lay][:, s], "o", color=color, ms=3, alpha=0.5)
    c.plot(DEPTHS, mean_in[lay], "-", color=color, lw=2.2, label=f"{lay}-norm")
a.set(yscale="log", xlabel="layer (0 = the stack's input, 48 = its output)",
      ylabel="|gradient| / |gradient at the top|", title="Gradient at each layer of a 48-block stack")
b.axhline(0, color="black", lw=0.5)
b.set(xlabel="layer (0 = the stack's input, 48 = its output)", ylabel="cosine with the gradient at the top",
      title="...and its direction")
c.set(xscale="log", yscale="log", xlabel="number of blocks in the stack (log scale)",
      ylabel="|dL/dx| / |dL/dout| at the input", title="Gradient reaching the input vs depth")
c.set_xticks(DEPTHS, [str(n) for n in DEPTHS])
for ax in (a, b, c):
    ax.legend()
fig.suptitle("Pre-norm keeps an identity path; post-norm multiplies the gradient block after block "
             "(tiny blocks, random init, 3 seeds: thin lines and dots; bold: the mean)")
show(fig, OUT / "pre_vs_post_norm_gradients.png")

# %% [markdown]
# **A factor near 1 is enough.** Whether a post-norm block makes the gradient grow or shrink depends on its
# weights; either way the factors multiply. Even 0.99 per block leaves $0.99^{80}$ = 0.4475 of the gradient after
# 80 blocks.

# %%
compound = 0.99 ** 80                                                   # a factor just under 1, 80 blocks deep
print(f"a factor of 0.99 per block, 80 blocks: 0.99^80 = {compound:.4f}")
assert round(compound, 4) == 0.4475

# %% [markdown]
# **Without the residual adds** every path runs through every sublayer, and nothing is left of the identity path.
# The cell runs the same pre-norm blocks as $\mathrm{ffn}(\mathrm{norm}_2(\mathrm{attn}(\mathrm{norm}_1(x))))$:
# the gradient at the input is 2.4 times the top's at 3 blocks and about 780 times at 24, more than 70 times
# pre-norm's 10.6 at 24. That is why networks without residual connections were hard to train beyond about 20
# layers, and why every block since has its residual adds.

# %%
def without_residuals(depth: int, seed: int) -> float:
    """The same pre-norm blocks (same draws) with their two residual adds taken out, ffn(norm2(attn(norm1(x)))):
    the gradient reaching the input over the gradient at the top."""
    g = tb.Generator(seed)
    stack = [nn.TransformerBlock(CFG, generator=g, dtype=tb.float64) for _ in range(depth)]
    x = tb.randn(B, L, CFG.d_model, generator=g, dtype=tb.float64, requires_grad=True)
    h = x
    for blk in stack:
        h = blk.ffn(blk.norm2(blk.attn(blk.norm1(h))))
    top = tb.randn(B, L, CFG.d_model, generator=tb.Generator(100 + seed), dtype=tb.float64)
    h.backward(top)
    return float(np.linalg.norm(x.grad.numpy()) / np.linalg.norm(top.numpy()))


bare = {n: float(np.exp(np.mean([np.log(without_residuals(n, s)) for s in SEEDS]))) for n in (3, 24)}
pre24 = mean_in["pre"][DEPTHS.index(24)]
print(f"without the residual adds, gradient at the input / at the top: {bare[3]:.1f} at 3 blocks, "
      f"{bare[24]:,.0f} at 24 (with them, pre-norm: {pre24:.1f} at 24)")
assert round(bare[3], 1) == 2.4 and round(bare[24], -1) == 780 and round(pre24, 1) == 10.6
assert bare[24] > 70 * pre24 and bare[24] > 100 * bare[3]

# %% [markdown]
# **What this does not show.** The per-block factor of 1.12 comes from this random initialisation; with other
# initial weights the gradient can shrink through each block instead. What does not change is the shape of the
# product: post-norm's gradient passes through every norm, with no path around them. A deep post-norm stack
# therefore needs small steps until training has balanced those factors, which is what the warmup of the
# learning rate provides (lesson 14). And these blocks are random, not trained: lesson 15 trains both layouts
# and compares them.

# %% [markdown]
# ## Check yourself
#
# 1. Why is a pre-norm block whose two output projections are zero exactly the identity, forward and backward,
#    when a post-norm block with the same weights is not?
#
#    <details><summary>Answer</summary>
#
#    Both sublayers then write 0, so $\mathrm{out} = x$, and the Jacobian $(I + J_{ffn})(I + J_{attn})$ is
#    $I \cdot I = I$. In post-norm the norms sit on the stream itself, so the block returns
#    $\mathrm{norm}_2(\mathrm{norm}_1(x))$: every token rescaled to RMS 1.
#
#    </details>
#
# 2. The stream after $n$ blocks is the input plus the sum of the sublayers' writes. Is the stack's Jacobian the
#    identity plus the sum of the sublayers' Jacobians?
#
#    <details><summary>Answer</summary>
#
#    No. The chain rule multiplies the Jacobians of steps taken in turn, so it is the product
#    $(I + J_{2n}) \cdots (I + J_1)$. On the two small blocks of section 6 the product matches the stack's
#    Jacobian to $10^{-14}$, and the sum is off by more than 1.
#
#    </details>
#
# 3. The final norm is not linear. How can direct logit attribution still split the logits exactly into one term
#    per sublayer?
#
#    <details><summary>Answer</summary>
#
#    RMSNorm multiplies each token's vector by one number, $1/\mathrm{rms}$ of the whole stream, and by the gain.
#    With that number held at the whole stream's value, the map from stream to logits is linear, so the sum of the
#    parts maps to the sum of their terms.
#
#    </details>
#
# 4. Why does the gradient stay in check through a deep pre-norm stack but compound through a post-norm one?
#
#    <details><summary>Answer</summary>
#
#    The pre-norm product $\prod (I + J_\ell)$ contains the identity path, which carries the gradient down
#    untouched. In post-norm a norm's Jacobian sits in every factor, so every route passes through every norm, and
#    the blocks' factors multiply: through 48 random tiny blocks the gradient at the input was about 14 times the
#    top's in pre-norm and more than 100 times in post-norm.
#
#    </details>

# %% [markdown]
# ## Words from this lesson
#
# - **pre-norm**: the block layout in which each sublayer reads a normalised copy of the stream and adds its
#   output to the stream, which no norm touches (§1)
# - **direct logit attribution**: splitting the logits exactly into one term per part of the final stream, with
#   the final norm's scale held at the value the whole stream gives (§4)
# - **logit lens**: reading a partial sum of the stream through the final norm and the unembedding, to see what
#   the model would predict if it stopped there (§4)
# - **identity path**: the term $I$ of a pre-norm stack's Jacobian, the route on which the gradient passes from the
#   top of the stack to the bottom through the residual adds alone (§6)
# - **post-norm**: the layout of the original transformer, which normalises the stream itself after each residual
#   add (§7)

# %% [markdown]
# ## Exercises
#
# 1. `post_norm_block`: the post-norm layout, written with a block's own modules. Given any block (it has
#    `norm1`, `attn`, `norm2`, `ffn`), `post_norm_block(block, x)` returns
#    $\mathrm{norm}_2(h + \mathrm{ffn}(h))$ with $h = \mathrm{norm}_1(x + \mathrm{attn}(x))$. The checker compares
#    with `nn.PostNormBlock` holding the same weights and with the hand-derived forward pass in numpy. It
#    recognises the pre-norm layout, the norm applied to the sublayer's output before the add, and the two norms
#    swapped.
# 2. `input_grad_ratio`: compare gradient norms across 3 blocks, pre-norm against post-norm.
#    `input_grad_ratio(blocks, x, dout)` runs x through the blocks in order, backpropagates `dout` from the
#    output, and returns $\lVert \nabla x \rVert / \lVert \mathrm{dout} \rVert$. It is checked against the
#    hand-derived backward passes (`tinygrad_block.manual`) for a pre-norm and a post-norm stack of 3 blocks.
#    Then run it on both layouts yourself, at 3 blocks and at 24: the difference grows with depth.
# 3. `sublayer_writes`: `sublayer_writes(blocks, x)` returns the list of what each sublayer adds to the stream
#    (attention of block 0, FFN of block 0, attention of block 1, ...), each of shape (B, L, $d_{model}$), so
#    that $x$ plus their sum is the stack's output (section 2). The checker recognises sublayers fed the
#    original input instead of the running stream, and partial sums returned instead of writes.
#
# `python -m tinygrad_block exercise 09` writes `exercise_09.py` with the three functions to fill in;
# `python -m tinygrad_block check 09` checks them and says what is wrong.
