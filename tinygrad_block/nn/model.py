"""A decoder-only language model from a preset: embedding, n_layers blocks, final norm, LM head; and text
generation, one token at a time, with a KV cache (prefill the prompt, then decode) or by full recomputation."""
from __future__ import annotations

import math
import numbers

from ..cuda import jit_by_default
from ..dtypes import float32

from ..generator import Generator
from ..trace import no_grad, scope
from ..tensor import Tensor, arange, concat
from .block import make_block
from .cache import KVCache, StaticKVCache
from .decode import Decoder, next_token
from .config import BlockConfig
from .layers import Embedding, Linear, norm
from .module import Module, default_generator


class LM(Module):
    """logits = head(norm(blocks(embed(ids)))). The head is tied to the embedding (logits = h E^T) when
    cfg.tie_embeddings; models without RoPE (GPT-2) add learned position embeddings to the token embeddings;
    with cfg.scale_embeddings (Gemma) the embeddings are multiplied by sqrt(d_model) first.
    Every weight is drawn, in order, from `generator` (None: a fresh tb.Generator(0), so LM(cfg) is the same model
    every time)."""

    scope_name = "model"

    def __init__(self, cfg: BlockConfig, *, generator: Generator | None = None, dtype=float32, device="cpu"):
        self.cfg = cfg
        self.tokenizer = None          # text <-> token ids: from_pretrained sets the checkpoint folder's own
        generator = default_generator(generator, "LM")
        make = dict(generator=generator, dtype=dtype, device=device)
        self.embed = Embedding(cfg.vocab_size, cfg.d_model, **make)
        if not cfg.rope:
            self.pos_embed = Embedding(cfg.max_seq_len, cfg.d_model, **make)
        self.layers = [make_block(cfg, **make) for _ in range(cfg.n_layers)]
        self.norm = norm(cfg, dtype=dtype, device=device)
        if not cfg.tie_embeddings:
            self.lm_head = Linear(cfg.d_model, cfg.vocab_size, generator=generator, dtype=dtype, device=device)

    def forward(self, ids: Tensor, cache: KVCache | StaticKVCache | None = None) -> Tensor:   # ids: (B, L) integers
        """Logits (B, L, vocab_size) for positions offset .. offset + L - 1, where offset = cache.length
        (0 without a cache). With a cache (KVCache(model, B)) the blocks attend to its keys and values and
        append this call's: the prompt in one call (prefill), then one token per call (decode). A StaticKVCache
        holds its position as a tensor: the blocks get the tensor of the L positions instead of an int offset."""
        if ids.ndim != 2:
            raise ValueError(f"LM: expected token ids of shape (B, L), got {ids.shape}")
        B, L = ids.shape
        offset = self._check_cache(cache, B, L)
        if not isinstance(offset, Tensor) and offset + L > self.cfg.max_seq_len:
            raise ValueError(f"LM: positions {offset}..{offset + L - 1} ({L} tokens after {offset} cached) exceed "
                             f"the context length max_seq_len={self.cfg.max_seq_len}")
        h = self.embed(ids)                                          # (B, L, d_model)
        if self.cfg.scale_embeddings:
            h = h * math.sqrt(self.cfg.d_model)                      # Gemma: rows of about unit length scaled up
        if not self.cfg.rope:
            positions = offset if isinstance(offset, Tensor) else arange(offset, offset + L, device=ids.backend)
            h = h + self.pos_embed(positions)                        # (L, d_model), broadcast over B
        for i, block in enumerate(self.layers):
            h = block(h, offset, None if cache is None else cache.layers[i])
        h = self.norm(h)
        if self.cfg.tie_embeddings:
            with scope("lm_head"):
                return h @ self.embed.weight.T                       # (B, L, vocab_size)
        return self.lm_head(h)                                       # (B, L, vocab_size)

    def _check_cache(self, cache, B: int, L: int) -> int | Tensor:
        """The first position of this call, once the cache is known to be this model's, for B rows: a KVCache's
        length, or the tensor of the L positions a StaticKVCache starts (StaticKVCache.start)."""
        if cache is None:
            return 0
        kind = type(cache).__name__
        if not isinstance(cache, (KVCache, StaticKVCache)):
            raise TypeError(f"LM: cache must be a KVCache (KVCache(model, batch)) or a StaticKVCache, got {kind}")
        if cache.model is not self:
            make = "KVCache(model, batch)" if isinstance(cache, KVCache) else "StaticKVCache(model, batch, max_len)"
            raise ValueError(f"LM: this {kind} was made for another model; make one with {make}")
        if cache.batch != B:
            raise ValueError(f"LM: the {kind} holds {cache.batch} sequences, but ids has B={B} rows")
        return cache.start(L) if isinstance(cache, StaticKVCache) else cache.length

    def generate(self, ids: Tensor, max_new_tokens: int, temperature: float = 0.0, top_k: int | None = None,
                 generator: Generator | None = None, use_cache: bool = True, on_token=None,
                 jit: bool | None = None, top_p: float | None = None) -> Tensor:
        """ids (B, L) -> (B, L + max_new_tokens): the prompt followed by tokens chosen one at a time from the
        last position's logits: greedy by default, as in transformers (temperature 0: the argmax, the first one on
        ties; nothing is drawn, so top_k, top_p and generator are not used); at a temperature > 0, drawn from
        softmax(logits / temperature) over the top_k largest (all when None), then over the nucleus of probability
        top_p of those (the smallest set of the likeliest whose probabilities sum to >= top_p; all when None),
        from `generator`, which sampling needs (nn/decode.py: sampled_logits). With use_cache (the default) the
        prompt runs once into a StaticKVCache of L + max_new_tokens positions (prefill), then each step runs only
        the newest token (decode): compiled with tb.jit when `jit` (the first two steps run eagerly while they are
        captured, the rest replay), eagerly otherwise; by default compiled everywhere but on a GPU whose replays
        have not been checked against eager yet (cuda.jit_by_default). Without use_cache each step recomputes the
        whole sequence. Runs under no_grad. `on_token(i, new)`, when given, is called as each new token is chosen
        (i = 0, 1, ...; new: (B,) ids), so a caller can show or time the tokens as they come."""
        self._check_generate(ids, max_new_tokens, temperature, top_k, generator, top_p)
        B, L = ids.shape
        if max_new_tokens == 0:
            return ids
        jit = jit_by_default(self.embed.weight.device) if jit is None else jit
        with no_grad():
            if not use_cache:
                return self._recompute(ids, max_new_tokens, temperature, top_k, top_p, generator, on_token)
            decoder = self.decoder(B, L + max_new_tokens, temperature, top_k, top_p=top_p, jit=jit)
            new = decoder.tokens(ids, max_new_tokens, on_token, generator)        # (B, 1) each
            return concat([ids, *new], axis=1)                                    # (B, L + max_new_tokens)

    def decoder(self, batch: int, max_len: int, temperature: float = 0.0, top_k: int | None = None, *,
                top_p: float | None = None, jit: bool = True, fuse: bool = True) -> Decoder:
        """A Decoder for these settings (nn/decode.py): the one made last, if it has them (its compiled step
        reused, so a second generate replays from its first step), else a new one, then kept. Generations from
        several threads share it safely: each runs in a cache of its own."""
        want = (batch, max_len, temperature, top_k, top_p, jit, fuse if jit else None)
        kept = getattr(self, "last_decoder", None)
        weight = self.embed.weight
        if kept is None or kept.settings != want or kept.made_for != (weight.dtype, weight.backend):
            kept = self.last_decoder = Decoder(self, batch, max_len, temperature, top_k, top_p=top_p, jit=jit,
                                               fuse=fuse)
        return kept

    def _recompute(self, ids, max_new_tokens, temperature, top_k, top_p, generator, on_token) -> Tensor:
        """generate without a cache: every step runs the whole sequence so far."""
        B, tokens = ids.shape[0], ids
        for i in range(max_new_tokens):
            logits = self(tokens)[:, -1]                                          # (B, vocab_size)
            new = next_token(logits, temperature, top_k, generator, top_p)        # (B,)
            tokens = concat([tokens, new.reshape(B, 1)], axis=1)                  # (B, L + i + 1)
            if on_token is not None:
                on_token(i, new)
        return tokens

    def _check_generate(self, ids, max_new_tokens, temperature, top_k, generator, top_p) -> None:
        if not isinstance(ids, Tensor) or ids.ndim != 2 or ids.dtype.kind not in "iu":
            what = f"{ids.dtype} {ids.shape}" if isinstance(ids, Tensor) else type(ids).__name__
            raise TypeError(f"generate: ids must be a Tensor of integer token ids of shape (B, L), got {what}")
        if ids.shape[1] == 0 or ids.shape[0] == 0:
            raise ValueError(f"generate: the prompt must hold at least one token per row, got ids {ids.shape}")
        if not isinstance(max_new_tokens, numbers.Integral) or isinstance(max_new_tokens, bool) or max_new_tokens < 0:
            raise ValueError(f"generate: max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        if ids.shape[1] + max_new_tokens > self.cfg.max_seq_len:
            raise ValueError(f"generate: the prompt's {ids.shape[1]} tokens + max_new_tokens={max_new_tokens} exceed "
                             f"the context length max_seq_len={self.cfg.max_seq_len}")
        real = isinstance(temperature, numbers.Real) and not isinstance(temperature, bool)
        if not (real and math.isfinite(temperature) and temperature >= 0):
            raise ValueError(f"generate: temperature must be a finite number >= 0 (0: greedy), got {temperature!r}")
        V = self.cfg.vocab_size
        if top_k is not None and not (isinstance(top_k, numbers.Integral) and not isinstance(top_k, bool)
                                      and 1 <= top_k <= V):
            raise ValueError(f"generate: top_k must be None or an int in 1..vocab_size={V}, got {top_k!r}")
        if top_p is not None and not (isinstance(top_p, numbers.Real) and not isinstance(top_p, bool)
                                      and 0 < top_p <= 1):
            raise ValueError(f"generate: top_p must be None or a number in (0, 1] (1: every token), got {top_p!r}")
        if temperature > 0 and not isinstance(generator, Generator):
            raise TypeError(f"generate: sampling at temperature {temperature} draws from an explicit generator: pass "
                            f"generator=tb.Generator(seed) (or temperature=0 for greedy), got {generator!r}")

    @classmethod
    def from_pretrained(cls, path, dtype=float32, device="cpu") -> LM:
        """A Hugging Face checkpoint folder (config.json and *.safetensors) of Llama (Llama 3's RoPE scaling
        included), Mistral, Qwen2, Qwen3, Gemma, Phi-3 or GPT-2 (nn/families.py), or a folder that `train` wrote,
        as an LM of `dtype` on `device`, with the folder's tokenizer as `model.tokenizer` (None without one): see
        nn/pretrained.py and docs/checkpoints.md. The folder is untrusted input: anything malformed is one
        ValueError (OSError for the file system) naming the file and what was expected, before any array is made."""
        from .pretrained import load_pretrained
        return load_pretrained(cls, path, dtype=dtype, device=device)

    def save_pretrained(self, path) -> None:
        """Write config.json and model.safetensors in the Hugging Face layout of this model's architecture (Llama,
        Qwen2, Qwen3, Gemma, Phi-3 or GPT-2), which transformers' from_pretrained loads: each file written to a
        temporary name and renamed into place, a sharded checkpoint already in the folder removed. See
        nn/pretrained.py."""
        from .pretrained import save_pretrained
        save_pretrained(self, path)

