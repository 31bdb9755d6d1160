"""A decoder-only language model from a preset: embedding, n_layers blocks, final norm, LM head; and text
generation, one token at a time, with a KV cache (prefill the prompt, then decode) or by full recomputation."""
from __future__ import annotations

import math
import numbers

from ..dtypes import float32, float64

from ..generator import Generator
from ..trace import no_grad, scope
from ..tensor import Tensor, arange, concat, rand, where
from .block import make_block
from .cache import KVCache
from .config import BlockConfig
from .layers import Embedding, Linear, norm
from .module import Module


class LM(Module):
    """logits = head(norm(blocks(embed(ids)))). The head is tied to the embedding (logits = h E^T) when
    cfg.tie_embeddings; models without RoPE (GPT-2) add learned position embeddings to the token embeddings."""

    scope_name = "model"

    def __init__(self, cfg: BlockConfig, *, generator, dtype=float32, device="cpu"):
        self.cfg = cfg
        self.tokenizer = None          # text <-> token ids: from_pretrained sets the checkpoint folder's own
        make = dict(generator=generator, dtype=dtype, device=device)
        self.embed = Embedding(cfg.vocab_size, cfg.d_model, **make)
        if not cfg.rope:
            self.pos_embed = Embedding(cfg.max_seq_len, cfg.d_model, **make)
        self.layers = [make_block(cfg, **make) for _ in range(cfg.n_layers)]
        self.norm = norm(cfg, dtype=dtype, device=device)
        if not cfg.tie_embeddings:
            self.lm_head = Linear(cfg.d_model, cfg.vocab_size, generator=generator, dtype=dtype, device=device)

    def forward(self, ids: Tensor, cache: KVCache | None = None) -> Tensor:   # ids: (B, L) integers
        """Logits (B, L, vocab_size) for positions offset .. offset + L - 1, where offset = cache.length
        (0 without a cache). With a cache (KVCache(model, B)) the blocks attend to its keys and values and
        append this call's: the prompt in one call (prefill), then one token per call (decode)."""
        if ids.ndim != 2:
            raise ValueError(f"LM: expected token ids of shape (B, L), got {ids.shape}")
        B, L = ids.shape
        offset = self._check_cache(cache, B)
        if offset + L > self.cfg.max_seq_len:
            raise ValueError(f"LM: positions {offset}..{offset + L - 1} ({L} tokens after {offset} cached) exceed "
                             f"the context length max_seq_len={self.cfg.max_seq_len}")
        h = self.embed(ids)                                          # (B, L, d_model)
        if not self.cfg.rope:
            positions = arange(offset, offset + L, device=ids.backend)
            h = h + self.pos_embed(positions)                        # (L, d_model), broadcast over B
        for i, block in enumerate(self.layers):
            h = block(h, offset, None if cache is None else cache.layers[i])
        h = self.norm(h)
        if self.cfg.tie_embeddings:
            with scope("lm_head"):
                return h @ self.embed.weight.T                       # (B, L, vocab_size)
        return self.lm_head(h)                                       # (B, L, vocab_size)

    def _check_cache(self, cache, B: int) -> int:
        """The cache's length (the first position of this call), once it is known to be this model's, for B rows."""
        if cache is None:
            return 0
        if not isinstance(cache, KVCache):
            raise TypeError(f"LM: cache must be a KVCache (KVCache(model, batch)), got {type(cache).__name__}")
        if cache.model is not self:
            raise ValueError("LM: this KVCache was made for another model; make one with KVCache(model, batch)")
        if cache.batch != B:
            raise ValueError(f"LM: the KVCache holds {cache.batch} sequences, but ids has B={B} rows")
        return cache.length

    def generate(self, ids: Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 generator: Generator | None = None, use_cache: bool = True, on_token=None) -> Tensor:
        """ids (B, L) -> (B, L + max_new_tokens): the prompt followed by tokens chosen one at a time from the
        last position's logits: argmax at temperature 0, else drawn from softmax(logits / temperature) over the
        top_k largest (all when None), from `generator`. With use_cache (the default) the prompt runs once and
        fills a KVCache (prefill), then each step runs only the newest token (decode); without, each step
        recomputes the whole sequence. Runs under no_grad. `on_token(i, new)`, when given, is called as each new
        token is chosen (i = 0, 1, ...; new: (B,) ids), so a caller can show or time the tokens as they come."""
        self._check_generate(ids, max_new_tokens, temperature, top_k, generator)
        B = ids.shape[0]
        with no_grad():
            cache = KVCache(self, B) if use_cache else None
            tokens, new = ids, ids
            for _ in range(max_new_tokens):
                logits = self(new if use_cache else tokens, cache=cache)[:, -1]    # (B, vocab_size)
                new = next_token(logits, temperature, top_k, generator).reshape(B, 1)
                tokens = concat([tokens, new], axis=1)                            # (B, L + steps so far)
                if on_token is not None:
                    on_token(tokens.shape[1] - ids.shape[1] - 1, new.reshape(B))
        return tokens

    def _check_generate(self, ids, max_new_tokens, temperature, top_k, generator) -> None:
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
        if temperature > 0 and not isinstance(generator, Generator):
            raise TypeError(f"generate: sampling at temperature {temperature} draws from an explicit generator: pass "
                            f"generator=tb.Generator(seed) (or temperature=0 for greedy), got {generator!r}")

    @classmethod
    def from_pretrained(cls, path, dtype=float32, device="cpu") -> LM:
        """A Hugging Face checkpoint folder (config.json and *.safetensors) of Llama (Llama 3's RoPE scaling
        included), Mistral, Qwen2, Qwen3 or GPT-2, or a folder that `train` wrote, as an LM of `dtype` on `device`,
        with the folder's tokenizer as `model.tokenizer` (None without one): see nn/pretrained.py and
        docs/checkpoints.md. The folder is untrusted input: anything malformed is one ValueError (OSError for the
        file system) naming the file and what was expected, before any array is made."""
        from .pretrained import load_pretrained
        return load_pretrained(cls, path, dtype=dtype, device=device)

    def save_pretrained(self, path) -> None:
        """Write config.json and model.safetensors in the Hugging Face layout of this model's architecture (Llama,
        Qwen2, Qwen3 or GPT-2), which transformers' from_pretrained loads: each file written to a temporary name and
        renamed into place, a sharded checkpoint already in the folder removed. See nn/pretrained.py."""
        from .pretrained import save_pretrained
        save_pretrained(self, path)


def argmax(x: Tensor) -> Tensor:
    """(B, V) -> (B,) int64: the index of each row's largest value (the first one, on ties)."""
    V = x.shape[-1]
    is_max = x == x.max(axis=-1, keepdims=True)                                 # (B, V)
    return where(is_max, arange(V, device=x.backend), V).min(axis=-1)          # (B,)


def keep_top_k(logits: Tensor, k: int) -> Tensor:
    """(B, V): every logit below its row's k-th largest becomes -inf (ties with the k-th stay, as in Hugging Face's
    TopKLogitsWarper). The k-th largest is found by setting the largest to -inf k - 1 times, one index at a time."""
    V = logits.shape[-1]
    rest = logits
    for _ in range(k - 1):
        largest = argmax(rest).unsqueeze(1) == arange(V, device=logits.backend)   # (B, V): one True per row
        rest = where(largest, float("-inf"), rest)
    kth = rest.max(axis=-1, keepdims=True)                                        # (B, 1)
    return where(logits < kth, float("-inf"), logits)


def next_token(logits: Tensor, temperature: float, top_k: int | None, generator: Generator | None) -> Tensor:
    """(B, V) logits -> (B,) token ids. Temperature 0: argmax. Else a draw from softmax(logits / T) by the
    Gumbel-max trick: argmax(logits / T + G), G = -log(-log U), U ~ uniform[0, 1) from `generator`, one per
    logit; the noise is made in float64 (a float32 U could round to 1, whose G is +inf)."""
    if top_k is not None:
        logits = keep_top_k(logits, top_k)
    if temperature == 0:
        return argmax(logits)
    u = rand(*logits.shape, generator=generator, dtype=float64, device=logits.backend)   # (B, V)
    gumbel = -(-u.log()).log()
    return argmax(logits.to(float64) / temperature + gumbel)
