# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 20 — Real models: a checkpoint folder, its tokenizer, a prompt
#
# Published models come as a folder of files: a `config.json` that gives the architecture and its sizes, the
# weights in one or more safetensors files, and a tokenizer. This lesson makes such a folder, looks inside it
# without loading it, loads it with the library's loader, feeds it a prompt through its own tokenizer and
# generates text. Then it checks the folder against the numbers the course derived for the same shape in
# lessons 12, 13 and 16: parameters, bytes, FLOPs per token and the KV cache.
#
# **What you will learn**
# - what a checkpoint folder holds, file by file: the same layout for 156,480 parameters as for 8 billion;
# - the safetensors format: an 8-byte length, a JSON header of names, dtypes, shapes and byte ranges, then raw
#   numbers; a header read without reading a single weight, and `python -m tinygrad_block inspect`;
# - what `LM.from_pretrained` checks before it makes any array: paths, config fields, size, names, shapes, dtypes;
# - the prompt through `tokenizer.json`: the BPE pieces, the ids, the BOS token (the one that marks where a text
#   begins) in front, and decoding back;
# - the loaded model on the prompt: the next-token probabilities, then greedy generation with the KV cache;
# - the course's closed forms on this folder: parameters, file bytes, forward FLOPs per token, KV-cache bytes
#   per token, and the same for Llama-3-8B's config, and for Qwen3-0.6B's, whose heads are wider than d / H;
# - a damaged folder refused, with the error a learner sees.
#
# Run it as a script, `python -m tinygrad_block lesson 20`, or as a notebook,
# `python -m tinygrad_block lesson 20 --notebook --execute` (it lands beside this file).

# %%
import contextlib
import importlib.util
import io
import json
import math
import shutil
import warnings

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

import tinygrad_block as tb
from tinygrad_block import accounting as acc
from tinygrad_block import cli, nn
from tinygrad_block.checkpoint_info import inspect_checkpoint
from tinygrad_block.counting import count_flops
from tinygrad_block.data import python_help_text, text_batch
from tinygrad_block.safetensors_file import read_header
from tinygrad_block.nn.cache import KVCache
from tinygrad_block.nn.hf_config import config_from_hf, config_to_hf
from tinygrad_block.nn.pretrained import hf_layout
from tinygrad_block.train import Schedule, train

from course import out_dir

OUT = out_dir(20)         # lessons/out/20/: the folder this lesson writes
FOLDER = OUT / "llama-demo"

# %% [markdown]
# ## 1. Making a folder the way a published one is laid out
#
# Nothing in the course downloads a model, so we make a small one with the same files as a Llama 3 folder on the
# Hugging Face hub (the website where most open models are published). Three pieces:
#
# **The tokenizer.** As in lesson 04: BPE over bytes, learned from Python's help pages, here with $V = 512$
# tokens. Two of them are **special tokens**, with Llama 3's names: `<|begin_of_text|>`, the **BOS** (beginning
# of sequence) token that starts every text the model reads, and `<|end_of_text|>`, the **EOS** token that marks
# the end of one. A **post-processor**, stored in the same file, puts BOS in front of every encoded text. Since
# the 256 single bytes are all in the vocabulary, any text at all can be spelled: no character is unknown.

# %%
text = python_help_text()
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
bpe = Tokenizer(models.BPE())
bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)          # bytes, as GPT-2 and Llama 3
bpe.decoder = decoders.ByteLevel()
bpe.train_from_iterator([text], trainers.BpeTrainer(vocab_size=512, special_tokens=[BOS, EOS], show_progress=False,
                                                     initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
bpe.post_processor = processors.Sequence([                                   # BOS in front of every text
    processors.ByteLevel(trim_offsets=False),
    processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B:1",
                                  special_tokens=[(BOS, bpe.token_to_id(BOS))])])
ids = bpe.encode(text, add_special_tokens=False).ids                         # the whole text, no BOS
print(f"BPE: {bpe.get_vocab_size()} tokens, {BOS} = {bpe.token_to_id(BOS)}, {EOS} = {bpe.token_to_id(EOS)}; "
      f"{len(text):,} characters -> {len(ids):,} tokens")
assert bpe.get_vocab_size() == 512 and (bpe.token_to_id(BOS), bpe.token_to_id(EOS)) == (0, 1)
byte_pieces = pre_tokenizers.ByteLevel.alphabet()                            # one printable character a byte
assert len(byte_pieces) == 256 and set(byte_pieces) <= set(bpe.get_vocab())

# %% [markdown]
# **The model.** The `tiny` preset's shape (RMSNorm, SwiGLU, RoPE, $d_{model} = 64$, 4 query heads sharing 2
# KV heads, $d_{ff} = 172$, 2 layers, an untied head) with the tokenizer's 512 tokens, a context of 256 and Llama
# 3's RoPE base θ = 500,000 (lesson 07). It is trained with `train.train` (lesson 14) for 200 steps of 32 windows
# of 32 tokens (stretches of text at random places, as in lesson 15), cut from the help pages once the tokenizer
# has turned them into ids. That takes a few seconds and brings the loss from above $\ln 512 \approx 6.2$ nats
# (lesson 14 says why it starts above) down to below 4: enough for its text to look a little like English.

# %%
cfg = nn.preset("tiny").with_(vocab_size=512, max_seq_len=256, rope_theta=500000.0, name="llama-demo")
gen = tb.Generator(0)
trained = nn.LM(cfg, generator=gen)
data = tb.tensor(ids, dtype=tb.int64)
history = train(trained, lambda: text_batch(data, 32, 32, gen), Schedule(steps=200, lr=1e-2, warmup=20, lr_min=1e-3),
                progress=False)
print(f"trained {trained.num_parameters():,} parameters for {len(history.losses)} steps in {history.seconds:.1f} s: "
      f"loss {history.losses[0]:.2f} -> {np.mean(history.losses[-10:]):.2f} (the last 10 steps' mean); "
      f"ln {cfg.vocab_size} = {math.log(cfg.vocab_size):.2f}")
assert (cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_ff, cfg.n_layers) == (64, 4, 2, 172, 2)
assert not cfg.tie_embeddings and history.tokens == 200 * 32 * 32 and round(math.log(512), 1) == 6.2
assert math.log(512) < history.losses[0] < math.log(512) + 1 and np.mean(history.losses[-10:]) < 4

# %% [markdown]
# **The files.** `save_pretrained` writes `config.json` and `model.safetensors` in the layout that
# `LlamaForCausalLM` reads: the Llama class of `transformers`, Hugging Face's Python library for running
# published models. The engine does not know which ids the tokenizer gave BOS and EOS, so it writes
# them as `null`; a published `config.json` has them, and so we fill them in. The tokenizer goes into
# `tokenizer.json` (the vocabulary, the merges, the pre-tokenizer that prepares the bytes for BPE (section 4),
# the post-processor, the special tokens: everything needed to run it), and `tokenizer_config.json` names the
# special tokens and the tokenizer class for the `transformers` library.

# %%
shutil.rmtree(FOLDER, ignore_errors=True)
trained.save_pretrained(FOLDER)
config = json.loads((FOLDER / "config.json").read_text())
config |= {"bos_token_id": bpe.token_to_id(BOS), "eos_token_id": bpe.token_to_id(EOS)}
(FOLDER / "config.json").write_text(json.dumps(config, indent=2) + "\n")
bpe.save(str(FOLDER / "tokenizer.json"))
(FOLDER / "tokenizer_config.json").write_text(json.dumps({
    "bos_token": BOS, "eos_token": EOS, "clean_up_tokenization_spaces": False, "model_max_length": cfg.max_seq_len,
    "tokenizer_class": "PreTrainedTokenizerFast"}, indent=2) + "\n")
files = {p.name: p.stat().st_size for p in sorted(FOLDER.iterdir())}
print(f"{FOLDER.name}/")
for name, size in files.items():
    print(f"  {name:<24} {size:>9,} bytes")
assert list(files) == ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]

# %% [markdown]
# ## 2. Inside the folder, without loading it
#
# **config.json** is a handful of numbers under Hugging Face's names: `hidden_size` is $d_{model}$,
# `num_attention_heads` and `num_key_value_heads` the query and KV heads, `intermediate_size` is $d_{ff}$,
# `num_hidden_layers` the number of blocks, `max_position_embeddings` the context, `tie_word_embeddings` whether
# the head reuses the embedding. A config without `num_key_value_heads` has one KV head per query head (no GQA).
#
# **model.safetensors** starts with 8 bytes, a little-endian integer $n$ (its lowest byte first): the length of
# the header that follows. The header is $n$ bytes of JSON: for every tensor, its dtype (`F32` here), its shape,
# and `data_offsets`, the byte range of its numbers, counted from the end of the header; one more entry,
# `__metadata__`, may hold free-form strings (here `"format": "pt"`, for PyTorch). Then come the numbers
# themselves, tensor after tensor, with nothing in between. So the file holds exactly $8 + n + 4N$ bytes for $N$
# float32 parameters, and the header alone tells every name, shape and size, however many gigabytes the weights
# take.
# `safetensors_file.read_header` reads it that way: the 8 bytes, the header, and no weight. It checks every entry
# against the format as it goes (section 7). Its byte ranges are absolute, from the start of the file.

# %%
print(json.dumps({k: config[k] for k in ("architectures", "hidden_size", "num_attention_heads",
                                         "num_key_value_heads", "intermediate_size", "num_hidden_layers",
                                         "vocab_size", "max_position_embeddings", "tie_word_embeddings",
                                         "rope_theta", "bos_token_id", "eos_token_id")}, indent=1))
raw = (FOLDER / "model.safetensors").read_bytes()
n = int.from_bytes(raw[:8], "little")
header = json.loads(raw[8:8 + n])
entries = read_header(FOLDER / "model.safetensors", "lesson 20")           # {name: TensorEntry}
N = sum(math.prod(e.shape) for e in entries.values())
print(f"model.safetensors: {len(raw):,} bytes = 8 + a header of {n:,} + {N:,} parameters x 4 bytes; "
      f"{len(entries)} tensors, metadata {header['__metadata__']}")
for name in list(entries)[:4] + list(entries)[-2:]:
    e = entries[name]
    print(f"  {name:<44} {e.dtype} {str(e.shape):<11} bytes {e.begin:>7,} .. {e.end:>7,}")
e = entries["model.embed_tokens.weight"]
assert len(raw) == 8 + n + 4 * N and len(entries) == len(header) - 1 == 9 * cfg.n_layers + 3
assert header[e.name]["data_offsets"] == [e.begin - 8 - n, e.end - 8 - n] and e.shape == (512, 64)
assert np.array_equal(np.frombuffer(raw[e.begin:e.end], "<f4").reshape(e.shape), trained.embed.weight.numpy())

# %% [markdown]
# `python -m tinygrad_block inspect FOLDER` counts the parameters from the headers alone and sets the count
# beside the course's closed form, `accounting.total_params`, computed from config.json (lesson 12). Its
# function, `checkpoint_info.inspect_checkpoint`, returns the same numbers as a dict.

# %%
status = cli.main(["inspect", str(FOLDER)])
info = inspect_checkpoint(FOLDER)
assert status == 0 and info["parameters"] == info["closed_form"] == N and info["matches"]
assert info["components"]["embedding"] == info["components"]["lm_head"] == 512 * 64

# %% [markdown]
# ## 3. Loading it
#
# `nn.LM.from_pretrained(FOLDER)` treats the folder as **untrusted input**: written by someone else, carelessly
# or with intent. Before it makes any array it checks, in order:
#
# - **paths**: every file it opens is a plain name whose real path lies inside the folder (no `..`, no link out);
# - **config.json**: valid JSON; each field has its type and range (an integer is an integer, not `"64"` or
#   `64.0`; the KV heads divide the query heads); an architecture it computes exactly; any field that would
#   change the computation and is not implemented is refused by name. The fields become a `BlockConfig`
#   (`config_from_hf`);
# - **size before memory**: the model is first built on the shape-only device (lesson 12), where its bytes are
#   counted without being allocated, and refused if they exceed the free memory;
# - **the headers**: each one as above, the tensors tiling the data exactly;
# - **names, shapes, dtypes**: every tensor the model needs is there with its shape, none is extra, each a float.
#
# Only then is each tensor read, straight from the file into its parameter. Hugging Face names differ from
# ours (`model.layers.0.self_attn.k_proj.weight` is our `layers.0.attn.k_proj.weight`); `hf_layout` lists
# the pairs. The loaded weights are the trained ones bit for bit, and the folder's tokenizer comes along as
# `model.tokenizer`.

# %%
model = nn.LM.from_pretrained(FOLDER)
arch, loaded_cfg = config_from_hf(config)
print(f"{arch}: d_model {loaded_cfg.d_model}, heads {loaded_cfg.n_heads}, KV heads {loaded_cfg.n_kv_heads}, "
      f"d_head {loaded_cfg.d_head}, d_ff {loaded_cfg.d_ff}, layers {loaded_cfg.n_layers}, V {loaded_cfg.vocab_size}, "
      f"context {loaded_cfg.max_seq_len}, theta {loaded_cfg.rope_theta:,.0f}")
layout = hf_layout(model, arch)                   # {HF name: (stored transposed?, [our names])}
params = dict(model.named_parameters())
for hf in ("model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
           "model.layers.0.self_attn.k_proj.weight", "model.layers.0.mlp.gate_proj.weight", "lm_head.weight"):
    ours = layout[hf][1][0]
    print(f"  {hf:<40} -> {ours:<30} {params[ours].shape} {params[ours].dtype}")
print(f"tokenizer: {model.tokenizer.name}")
same = all(np.array_equal(p.numpy(), q.numpy()) for p, q in zip(model.parameters(), trained.parameters()))
print(f"{model.num_parameters():,} parameters, all equal to the trained model's bit for bit: {same}")
assert loaded_cfg == model.cfg == cfg.with_(name="LlamaForCausalLM") and same
assert params["layers.0.attn.k_proj.weight"].shape == (cfg.n_kv_heads * cfg.d_head, cfg.d_model) == (32, 64)
assert params["layers.0.attn.q_proj.weight"].shape == (64, 64) and model.parameters()[0].dtype == tb.float32
assert model.tokenizer.vocab_size == cfg.vocab_size

# %% [markdown]
# ## 4. A prompt through the tokenizer
#
# `model.tokenizer.encode` runs `tokenizer.json` on the prompt "The assert statement": the byte-level
# pre-tokenizer writes each byte as one printable character (a space becomes `Ġ`), BPE cuts the text into
# pieces of its vocabulary (a word frequent in the help pages is one piece, a rarer one several), and the
# post-processor puts BOS (id 0) in front. `decode` turns the ids back into the text, leaving the special
# tokens out.

# %%
tok = model.tokenizer
PROMPT = "The assert statement"
prompt_ids = tok.encode(PROMPT)
pieces = tok.hf_tokenizer.encode(PROMPT).tokens
print(f"{PROMPT!r} -> {len(prompt_ids)} tokens {pieces}")
print(f"  ids {prompt_ids} -> decoded {tok.decode(prompt_ids)!r}")
assert prompt_ids[0] == tok.hf_tokenizer.token_to_id(BOS) == 0 and pieces[0] == BOS and 0 not in prompt_ids[1:]
assert tok.decode(prompt_ids) == PROMPT and "".join(pieces[1:]).replace("Ġ", " ") == PROMPT

# %% [markdown]
# ## 5. The model on the prompt, and a continuation
#
# The ids go in as a (1, L) tensor and come out as logits (1, L, V): at every position, a score for every token
# that could come next (lesson 04). The softmax of the last position's scores is the model's guess for the token
# after the prompt.
#
# `model.generate(ids, 40, temperature=0)` continues the prompt greedily (`temperature=0` means no random
# draw): 40 times, it takes the most likely token and appends it. It runs the prompt once into a KV cache (the
# prefill), then one token per step against the cached keys and values (lesson 16). The first new token is the
# most likely one printed above, and recomputing the whole sequence at every step (`use_cache=False`) gives the same 40
# tokens. The text has the help pages' short words and punctuation, but its longer words are pieces of real ones
# glued into non-words: 156,480 parameters trained for a few seconds.

# %%
x = tb.tensor([prompt_ids])                                                   # (1, L)
with tb.no_grad():
    logits = model(x)                                                         # (1, L, V)
probs = logits[0, -1].softmax(axis=-1).numpy()
top = np.argsort(-probs)[:5]
print(f"logits {logits.shape}; after {PROMPT!r} the model expects: "
      + ", ".join(f"{tok.decode([int(i)])!r} {probs[i]:.3f}" for i in top))
out = model.generate(x, 40, temperature=0)                                   # (1, L + 40), with the KV cache
recomputed = model.generate(x, 40, temperature=0, use_cache=False)
new = out.numpy()[0, len(prompt_ids):]
print(f"greedy, 40 new tokens: {tok.decode(out.numpy()[0])!r}")
assert out.shape == (1, len(prompt_ids) + 40) and new[0] == top[0]
assert np.array_equal(out.numpy(), recomputed.numpy()) and tok.decode(out.numpy()[0]).startswith(PROMPT)

# %% [markdown]
# If the `transformers` library is installed (it is optional here), the same folder loads into its own
# `LlamaForCausalLM` and `AutoTokenizer`, written by other people from the same published layout. Their ids,
# logits and greedy tokens are ours: the folder means the same thing to both.

# %%
if importlib.util.find_spec("transformers") and importlib.util.find_spec("torch"):
    with warnings.catch_warnings():                                         # tqdm's note on notebook widgets
        warnings.simplefilter("ignore")
        import torch
        import transformers
    transformers.logging.disable_progress_bar()                            # no bar on stderr
    hf_model = transformers.LlamaForCausalLM.from_pretrained(FOLDER).eval()
    hf_ids = transformers.AutoTokenizer.from_pretrained(FOLDER)(PROMPT)["input_ids"]
    with torch.no_grad():
        hf_logits = hf_model(torch.tensor([prompt_ids])).logits.numpy()
        hf_out = hf_model.generate(torch.tensor([prompt_ids]), max_new_tokens=40, do_sample=False,
                                   pad_token_id=config["eos_token_id"]).numpy()
    gap = np.abs(hf_logits - logits.numpy()).max()
    print(f"transformers {transformers.__version__}: ids equal {hf_ids == prompt_ids}, logits differ by at most "
          f"{gap:.1e}, greedy tokens equal {np.array_equal(hf_out, out.numpy())}")
    assert hf_ids == prompt_ids and gap < 1e-4 and np.array_equal(hf_out, out.numpy())
else:
    print("transformers is not installed: the comparison is skipped")
    assert importlib.util.find_spec("transformers") is None or importlib.util.find_spec("torch") is None

# %% [markdown]
# ## 6. The course's numbers, on a real folder
#
# Every closed form of lessons 12, 13 and 16 takes a `BlockConfig`, and config.json gives one. So they apply to
# the folder as it is, and each can be checked against the loaded model.
#
# - **Parameters.** The embedding $Vd$, per block $2d^2 + 2\,d\,n_{kv}\,d_{head} + 3\,d\,d_{ff} + 2d$, the final
#   norm $d$ and the head $Vd$: `accounting.total_params`, equal to the tensors the loaded model holds.
# - **Bytes.** The file is the weights at 4 bytes each (float32), plus 8 bytes and the header. Published
#   checkpoints mostly store bfloat16, 2 bytes each: half the size.
# - **Forward FLOPs per token.** `count_flops` counts every matmul of the forward pass on the prompt's $L$ tokens.
#   Divided by $L$, that is 2 FLOPs per weight of every projection and of the head, plus $4\,L\,n_{heads}\,d_{head}$
#   per layer for the scores and the weighted sum of V (lesson 13): `accounting.model_forward_flops(cfg, L) / L`.
#   The embedding is a lookup and costs no FLOPs.
# - **KV-cache bytes per token.** Each layer keeps K and V for each KV head: $2 \times n_{layers} \times n_{kv}
#   \times d_{head} \times$ bytes per element. A `KVCache` filled by the prompt holds exactly that per token.

# %%
L = len(prompt_ids)
d, V, H, H_kv, d_head = cfg.d_model, cfg.vocab_size, cfg.n_heads, cfg.n_kv_heads, cfg.d_head
by_hand = 2 * V * d + cfg.n_layers * (2 * d * d + 2 * d * H_kv * d_head + 3 * d * cfg.d_ff + 2 * d) + d
with tb.no_grad(), count_flops() as fc:
    model(x)
flops = fc.total("forward", matmul_only=True)
cache = KVCache(model, batch=1)
with tb.no_grad():
    model(x, cache=cache)                                                     # the prefill fills the cache
kv_per_token = 2 * cfg.n_layers * H_kv * d_head * 4
print(f"parameters: loaded {model.num_parameters():,}, closed form {acc.total_params(loaded_cfg):,}, "
      f"by hand {by_hand:,}, in the headers {N:,}")
print(f"file: {len(raw):,} bytes = 4 x {N:,} + 8 + {n:,}; in bfloat16 the weights would take {2 * N:,}")
print(f"forward on {L} tokens: {flops:,} matmul FLOPs = {flops // L:,} per token "
      f"(2 x {(flops // L - cfg.n_layers * 4 * L * H * d_head) // 2:,} weights + {cfg.n_layers} x 4 x {L} x {H} x "
      f"{d_head} for attention)")
print(f"KV cache after the prompt: {cache.nbytes:,} bytes = {cache.nbytes // L:,} per token "
      f"= 2 x {cfg.n_layers} layers x {H_kv} KV heads x {d_head} x 4 bytes")
assert model.num_parameters() == acc.total_params(loaded_cfg) == by_hand == N == 156_480
assert len(raw) == 4 * N + 8 + n and files["model.safetensors"] == len(raw)
assert flops == acc.model_forward_flops(loaded_cfg, L) == L * (cfg.n_layers * acc.flops_per_token(loaded_cfg, L)
                                                               ["total"] + 2 * d * V)
assert flops // L == 2 * (N - V * d - (2 * cfg.n_layers + 1) * d) + cfg.n_layers * 4 * L * H * d_head
assert cache.nbytes == L * kv_per_token == acc.kv_cache_bytes(loaded_cfg, L, 1, 4) and kv_per_token == 512

# %% [markdown]
# The same forms hold for a real model's config. Llama-3-8B's `config.json` (written here by `config_to_hf` from
# the course's preset, with the sizes the published one has) gives 8,030,261,248 parameters: 16.06 GB of
# bfloat16 weights, about the size of its download. A token of context costs 131,072 bytes of KV cache in bfloat16
# (128 KiB: 32 layers × 8 KV heads × 128 × 2 bytes, twice), 4 times less than without GQA. A forward pass over
# one token costs 2 FLOPs per multiplied weight, plus attention: 15.0 G, 93.5 % of the $2N$ often quoted, since
# the 525 M weights of the embedding are looked up, not multiplied.

# %%
cfg8 = config_from_hf(config_to_hf(nn.preset("llama3-8b"), "LlamaForCausalLM", tb.float32))[1]
N8 = acc.total_params(cfg8)
kv8 = acc.kv_cache_bytes(cfg8, 1, 1, 2)
flops8 = acc.model_forward_flops(cfg8, 1)
weights8 = N8 - cfg8.vocab_size * cfg8.d_model - (2 * cfg8.n_layers + 1) * cfg8.d_model   # less embedding, norms
print(f"Llama-3-8B: {N8:,} parameters, {2 * N8 / 1e9:.2f} GB in bfloat16; KV cache {kv8:,} bytes per token "
      f"({kv8 // 1024} KiB), {acc.kv_cache_bytes(cfg8.with_(n_kv_heads=32), 1, 1, 2) // kv8}x that without GQA")
print(f"  forward over one token: {flops8:,} FLOPs = 2 x {weights8:,} multiplied weights + "
      f"{flops8 - 2 * weights8:,} for attention; 2N would be {2 * N8:,}")
assert N8 == 8_030_261_248 and round(2 * N8 / 1e9, 2) == 16.06 and kv8 == 131_072 == 2 * 32 * 8 * 128 * 2
assert kv8 == 128 * 1024 and acc.kv_cache_bytes(cfg8.with_(n_kv_heads=32), 1, 1, 2) == 4 * kv8
assert flops8 == 2 * weights8 + 32 * 4 * 1 * 32 * 128 and round(flops8 / 1e9, 1) == 15.0
assert round(100 * flops8 / (2 * N8), 1) == 93.5 and round(cfg8.vocab_size * cfg8.d_model / 1e6) == 525

# %% [markdown]
# ### Heads of their own width: Qwen3-0.6B
#
# Llama's heads split $d$: $d_{head} = d / n_{heads}$, so $W_Q$ and $W_O$ are $d \times d$. Some families give
# `head_dim` its own value instead. Qwen3-0.6B has $d = 1024$ and 16 query heads of $d_{head} = 128$: its queries
# are $16 \times 128 = 2048$ wide, twice the residual stream. So $W_Q$ is $(2048, 1024)$ and $W_O$ $(1024, 2048)$,
# and the block's attention holds $2\,d\,n_{heads}\,d_{head} + 2\,d\,n_{kv}\,d_{head}$ weights, not
# $2d^2 + 2\,d\,n_{kv}\,d_{head}$. Each head also has an RMSNorm on its q and k (QK-norm): $2\,d_{head}$ gains
# per block. The published count, 596,049,920 parameters, follows from its `config.json` alone (the fields below
# are the published ones); the attention term per token and layer is $4\,L\,n_{heads}\,d_{head}$, and the KV cache
# $2 \times n_{layers} \times n_{kv} \times d_{head}$ numbers per token.

# %%
qwen3_config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024,
                "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072,
                "num_hidden_layers": 28, "vocab_size": 151936, "max_position_embeddings": 40960,
                "rms_norm_eps": 1e-6, "rope_theta": 1000000, "tie_word_embeddings": True}
_, qcfg = config_from_hf(qwen3_config)
qd, qH, qH_kv, qd_head, qd_ff, qV, qn = (qcfg.d_model, qcfg.n_heads, qcfg.n_kv_heads, qcfg.d_head, qcfg.d_ff,
                                         qcfg.vocab_size, qcfg.n_layers)
q_block = 2 * qd * qH * qd_head + 2 * qd * qH_kv * qd_head + 3 * qd * qd_ff + 2 * qd + 2 * qd_head
q_by_hand = qV * qd + qn * q_block + qd                                          # tied: no head of its own
q_model = nn.LM(qcfg, generator=tb.Generator(0), device="meta")                   # shapes only, no memory
q_shapes = {n: p.shape for n, p in q_model.named_parameters()}
q_kv = acc.kv_cache_bytes(qcfg, 1, 1, 2)
print(f"Qwen3-0.6B: d_head {qd_head} x {qH} heads = {qH * qd_head} wide queries in d_model {qd}; "
      f"W_Q {q_shapes['layers.0.attn.q_proj.weight']}, W_O {q_shapes['layers.0.attn.o_proj.weight']}")
print(f"  parameters: closed form {acc.total_params(qcfg):,}, by hand {q_by_hand:,}, on the shape-only model "
      f"{q_model.num_parameters():,}; per block {acc.params_per_block(qcfg):,}")
print(f"  attention per token and layer at L = 4096: {acc.flops_per_token(qcfg, 4096)['attention']:,} FLOPs "
      f"= 4 x 4096 x {qH} x {qd_head}; KV cache {q_kv:,} bytes per token in bfloat16")
assert acc.total_params(qcfg) == q_by_hand == q_model.num_parameters() == 596_049_920
assert q_shapes["layers.0.attn.q_proj.weight"] == (2048, 1024) == q_shapes["layers.0.attn.o_proj.weight"][::-1]
assert acc.params_per_block(qcfg) == q_block == 15_730_944
assert acc.flops_per_token(qcfg, 4096)["attention"] == 4 * 4096 * qH * qd_head == 2 * 4 * 4096 * qd
assert q_kv == 2 * qn * qH_kv * qd_head * 2 == 114_688

# %% [markdown]
# ## 7. A folder that lies
#
# A download that stopped early leaves a file shorter than its header says. Below, a copy of the folder loses
# the last 100 bytes of `model.safetensors`. Its header still promises every tensor, but the last one now
# extends past the end of the file. `from_pretrained` refuses it while reading the header, before any weight,
# with one `ValueError` that names the file and gives both sizes. The command line says the same in one line
# and exits with status 2, the status of a user's mistake.

# %%
broken = OUT / "llama-demo-truncated"
shutil.rmtree(broken, ignore_errors=True)
shutil.copytree(FOLDER, broken)
with open(broken / "model.safetensors", "r+b") as f:
    f.truncate(len(raw) - 100)
try:
    nn.LM.from_pretrained(broken)
    refusal = None
except ValueError as e:
    refusal = str(e)
print(f"from_pretrained: ValueError: {refusal}")
err = io.StringIO()
with contextlib.redirect_stderr(err):
    try:
        status = cli.main(["generate", str(broken), "--prompt", PROMPT])
    except SystemExit as stop:                                                # how argparse ends a command
        status = stop.code
print(f"the command line, exit status {status}: {err.getvalue().strip()}")
assert refusal is not None and "truncated" in refusal and f"{len(raw):,} bytes" in refusal
assert f"has {len(raw) - 100:,}" in refusal and status == 2 and refusal in err.getvalue()

# %% [markdown]
# ## Check yourself
#
# 1. What does a model folder in Hugging Face's layout hold, and which file can be read without loading any
#    weight?
#
#    <details><summary>Answer</summary>
#
#    A `config.json` with the architecture and its sizes, the weights in safetensors files, and the tokenizer
#    (`tokenizer.json` and `tokenizer_config.json`). A safetensors file starts with an 8-byte length and a JSON
#    header of names, dtypes, shapes and byte ranges, so the parameters can be counted from the headers alone.
#
#    </details>
#
# 2. Why does `from_pretrained` build the model on the shape-only device before it allocates anything?
#
#    <details><summary>Answer</summary>
#
#    The folder is untrusted input. On the shape-only device the model's bytes are counted without being
#    allocated, so a config that asks for more than the free memory is refused before any array is made.
#
#    </details>
#
# 3. A download stopped early and `model.safetensors` lost its last 100 bytes. What happens on loading?
#
#    <details><summary>Answer</summary>
#
#    The header still promises every tensor, but the last one now ends past the end of the file. `from_pretrained`
#    refuses it while reading the header, before any weight, with one `ValueError` that names the file and gives
#    both sizes; the command line says it in one line and exits with status 2.
#
#    </details>
#
# 4. What does the BOS token do, and who puts it there?
#
#    <details><summary>Answer</summary>
#
#    It marks the beginning of every text the model reads. The tokenizer's post-processor, stored in
#    `tokenizer.json`, puts it in front of every encoded text (id 0 here), and decoding leaves it out.
#
#    </details>

# %% [markdown]
# ## Words from this lesson
#
# - **special tokens**: tokens with a role rather than a piece of text, such as the beginning and end of a sequence
#   (§1)
# - **BOS**: the beginning-of-sequence token that starts every text the model reads (§1)
# - **EOS**: the end-of-sequence token that marks the end of a text (§1)
# - **post-processor**: the part of a tokenizer that adds special tokens, such as BOS, to every encoded text (§1)
# - **untrusted input**: a file written by someone else, carelessly or with intent, which is checked before
#   anything is built from it (§3)
# - **QK-norm**: an RMSNorm on each head's queries and keys, as in Qwen3 (§6)

# %% [markdown]
# ## Exercises
#
# 1. `params_from_config`: `params_from_config(config)` returns the parameter count of a Llama-shaped model from
#    its config.json, a dict with Hugging Face's field names. Mind the fields a config may leave out. The
#    checker compares it with the model built on the shape-only device from the same config, for GQA and MHA,
#    tied and untied, and names the usual slips: a tied head counted twice, K and V at full width under GQA,
#    the final norm left out.
# 2. `kv_cache_bytes`: `kv_cache_bytes(config, tokens, bytes_per_element)` returns the bytes of the KV cache
#    that `tokens` tokens of one sequence fill, from the same kind of dict. It is checked against a `KVCache`
#    filled by a real model and against `accounting.kv_cache_bytes`, and names the slips: forgetting V, using
#    the query heads instead of the KV heads, leaving out the layers.
# 3. `read_tensor`: `read_tensor(path, name)` reads one tensor from a safetensors file by hand (section 2) and
#    returns it as a numpy array of its stored dtype and shape. The checker compares it with the library's
#    reader on a file of float32, float16 and float64 tensors, and names the slips: offsets counted from the
#    start of the file, or from the start of the header, and every tensor read as float32.
#
# `python -m tinygrad_block exercise 20` writes `exercise_20.py` with the three functions to fill in;
# `python -m tinygrad_block check 20` checks them and says what is wrong.
