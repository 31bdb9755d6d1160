"""Choosing the next token from the logits (argmax, top-k, top-p, the Gumbel-max draw), and the Decoder that generation
runs: the prompt once into a StaticKVCache (prefill), then one token per decode step, each step of the same
shapes, compiled with tb.jit so that every step after the first two replays its recorded kernels."""
from __future__ import annotations

import math
import numbers

from ..dtypes import float64
from ..function import KthLargest
from ..generator import Generator
from ..tensor import Tensor, arange, rand, where
from .cache import StaticKVCache


def argmax(x: Tensor) -> Tensor:
    """(B, V) -> (B,) int64: the index of each row's largest value (the first one, on ties). Tensor.argmax(-1) gives
    the same for finite logits; this one, run at every decode step, leaves out its NaN check (two elementwise ops)."""
    V = x.shape[-1]
    is_max = x == x.max(axis=-1, keepdims=True)                                 # (B, V)
    countdown = arange(V, 0, -1, device=x.backend)                              # V - j at index j: largest first
    return V - where(is_max, countdown, 0).max(axis=-1)                         # (B,)


def keep_top_k(logits: Tensor, k: int) -> Tensor:
    """(B, V): every logit below its row's k-th largest becomes -inf (ties with the k-th stay, as in Hugging Face's
    TopKLogitsWarper). The k-th largest is found in one selection pass over each row, whatever k is."""
    kth = KthLargest.apply(logits, k=k)                                          # (B, 1)
    return where(logits < kth, float("-inf"), logits)


def keep_top_p(logits: Tensor, p: float, halvings: int = 64) -> Tensor:
    """(B, V): every logit outside its row's nucleus becomes -inf. The nucleus (top-p) is the smallest set of the
    likeliest tokens whose softmax probabilities sum to >= p, as in Hugging Face's TopPLogitsWarper; tokens tied with
    its least likely one stay, as top-k's ties do; p = 1 keeps every token. It is found without a sort, so a compiled
    step stays one program of fixed shapes: the cut s, the largest with mass(logits >= s) >= p, is bisected
    `halvings` times between the row's smallest finite logit and its largest + 1 (exact unless two logits lie closer
    than that range / 2**halvings at the nucleus' edge)."""
    if not (isinstance(p, numbers.Real) and not isinstance(p, bool) and 0 < p <= 1):
        raise ValueError(f"keep_top_p: p must be a number in (0, 1] (1 keeps every token), got {p!r}")
    if p == 1:
        return logits
    prob = logits.softmax(axis=-1)                                               # (B, V): 0 at -inf
    top = logits.max(axis=-1, keepdims=True)                                     # (B, 1)
    lo = where(logits > -math.inf, logits, top).min(axis=-1, keepdims=True)      # mass(>= lo) = 1 >= p
    hi = top + 1                                                                 # mass(>= hi) = 0 < p
    for _ in range(halvings):
        mid = (lo + hi) / 2                                                      # (B, 1)
        enough = where(logits >= mid, prob, 0.0).sum(axis=-1, keepdims=True) >= p
        lo, hi = where(enough, mid, lo), where(enough, hi, mid)
    return where(logits < lo, -math.inf, logits)


def sampled_logits(logits: Tensor, temperature: float, top_k: int | None, top_p: float | None = None) -> Tensor:
    """(B, V) logits -> (B, V) float64 logits / temperature, -inf outside the top_k largest, then outside the
    nucleus top_p of what is left (the order of transformers' warpers: temperature, top-k, top-p). A sampled token
    is drawn from their softmax (temperature > 0)."""
    if top_k is not None:
        logits = keep_top_k(logits, top_k)
    scaled = logits.to(float64) / temperature
    return scaled if top_p is None else keep_top_p(scaled, top_p)


def sampling_probabilities(logits: Tensor, temperature: float, top_k: int | None = None,
                           top_p: float | None = None) -> Tensor:
    """(B, V) logits -> (B, V) float64: the probability with which `choose` picks each token: softmax of
    `sampled_logits`; at temperature 0, 1 at the argmax (the first on ties) and 0 elsewhere."""
    if temperature == 0:
        V = logits.shape[-1]
        return (argmax(logits).reshape(-1, 1) == arange(V, device=logits.backend)).to(float64)     # (B, V)
    return sampled_logits(logits, temperature, top_k, top_p).softmax(axis=-1)


def choose(logits: Tensor, temperature: float, top_k: int | None, uniform: Tensor | None = None,
           top_p: float | None = None) -> Tensor:
    """(B, V) logits -> (B,) token ids. Temperature 0: argmax (top_k and top_p change nothing then). Else a draw
    from softmax(logits / T) over the top_k largest and then the nucleus top_p (`sampled_logits`) by the Gumbel-max
    trick: argmax(logits / T + G), G = -log(-log U), with `uniform` (B, V) float64 draws U in [0, 1), made by the
    caller (a float32 U could round to 1)."""
    if temperature == 0:
        return argmax(logits)
    gumbel = -(-uniform.log()).log()
    return argmax(sampled_logits(logits, temperature, top_k, top_p) + gumbel)


def next_token(logits: Tensor, temperature: float, top_k: int | None, generator: Generator | None,
               top_p: float | None = None) -> Tensor:
    """(B, V) logits -> (B,) token ids: argmax at temperature 0, else the Gumbel-max draw (`choose`) with
    uniform draws U ~ [0, 1) from `generator`, float64, one per logit."""
    if temperature == 0:
        return argmax(logits)
    return choose(logits, temperature, top_k, rand(*logits.shape, generator=generator, dtype=float64,
                                                   device=logits.backend), top_p)


class Decoder:
    """Decodes `batch` sequences of up to `max_len` positions from `model` (an nn.LM) with a StaticKVCache:
    `tokens(ids, n)` runs the prompt (prefill) and n - 1 decode steps in a cache of its own, so any number of
    threads may generate with one decoder at once; by hand, `prefill(ids)` once, then `step(token)` per new token,
    in the decoder's own `cache`, each returning (the next tokens (B, 1), the logits they were chosen from
    (B, vocab_size)). The choice (temperature, top_k, top_p) is fixed for a decoder. A sampled choice draws its uniform
    numbers from a generator outside the step and passes them in as a tensor, so a compiled step reads them as
    data. jit=True runs the prefill and each decode step through tb.jit (one compiled function, a program per
    shape, shared by every cache: the cache's tensors are an argument; fuse: merge elementwise chains);
    jit=False runs the very same function eagerly."""

    def __init__(self, model, batch: int, max_len: int, temperature: float = 0.0, top_k: int | None = None, *,
                 top_p: float | None = None, jit: bool = True, fuse: bool = True):
        self.model, self.temperature, self.top_k, self.top_p = model, temperature, top_k, top_p
        self.batch, self.max_len = StaticKVCache.check(model, batch, max_len)
        weight = model.embed.weight
        self.made_for = weight.dtype, weight.backend               # the model's, when this decoder was made
        self._cache = None                                         # prefill and step's; tokens() makes its own
        self.generator: Generator | None = None                    # prefill and step's draws, when sampling
        self.jit, self.fuse = jit, fuse
        self.compiled, self.model_seen = None, None
        self.check_model()

    @property
    def cache(self) -> StaticKVCache:
        """The cache that `prefill` and `step` fill, made at the first prefill."""
        if self._cache is None:
            self._cache = StaticKVCache(self.model, self.batch, self.max_len)
        return self._cache

    @property
    def settings(self) -> tuple:
        """What a decoder is made for: (batch, max_len, temperature, top_k, top_p, compiled or not, fused or not)."""
        return (self.batch, self.max_len, self.temperature, self.top_k, self.top_p, self.jit,
                self.fuse if self.jit else None)

    def check_model(self) -> None:
        """tb.jit guards a program with a fingerprint of the modules it uses (their tensors by identity, their
        flags), taken at every call. The decoder takes the model's where Python outside the step could have
        changed it: before a generation, after each `on_token` call, and in `step` (called by hand); so a decode
        step inside `tokens` costs only its kernels. A changed model gets a new compiled step (captured again)."""
        if not self.jit:
            return
        from ..compiled import fingerprint, jit       # the compiler loads with the first compiled decoder
        seen = fingerprint([self.model])
        if seen != self.model_seen:
            self.compiled, self.model_seen = jit(self.forward, fuse=self.fuse, modules=[]), seen

    def forward(self, ids: Tensor, state: tuple[Tensor, ...], uniform: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The function a step runs (ids: (B, L)): the model on ids in the cache whose tensors are `state`
        (StaticKVCache.state), at its position, then the choice from the last position's logits. Returns (next
        tokens (B, 1), ready to be the next step's ids; logits (B, vocab_size))."""
        cache = StaticKVCache(self.model, self.batch, self.max_len, state)
        logits = self.model(ids, cache=cache)[:, -1]                             # (B, vocab_size)
        return choose(logits, self.temperature, self.top_k, uniform, self.top_p).reshape(-1, 1), logits

    def tokens(self, ids: Tensor, n: int, on_token=None, generator: Generator | None = None) -> list[Tensor]:
        """n new tokens after the prompt ids (B, L), (B, 1) each, in a new cache: the prefill chooses the first,
        then one decode step per token; a sampled choice draws from `generator`. `on_token(i, new)` (new: (B,))
        is called as each is chosen."""
        self.check_model()
        cache = StaticKVCache(self.model, self.batch, self.max_len)
        new, _ = self._run(ids, cache, generator)
        chosen = [new]
        for i in range(n):
            if i > 0:
                new, _ = self._run(new, cache, generator)                        # (B, 1)
                chosen.append(new)
            if on_token is not None:
                on_token(i, new.reshape(self.batch))
                self.check_model()
        return chosen

    def prefill(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """Empty the decoder's cache, run the prompt ids (B, L) and choose the first new tokens: the same function
        as a step, at the prompt's shape (compiled: captured by the first two calls with this prompt length, then
        replayed)."""
        self.cache.reset()
        return self._run(ids, self.cache, self.generator)

    def step(self, token: Tensor) -> tuple[Tensor, Tensor]:
        """Run the newest tokens (B, 1) at the next position of the decoder's cache: compiled (replayed after two
        captures) or eagerly."""
        self.check_model()
        return self._run(token, self.cache, self.generator)

    def _run(self, token: Tensor, cache: StaticKVCache, generator: Generator | None) -> tuple[Tensor, Tensor]:
        run = self.compiled if self.compiled is not None else self.forward
        if self.temperature == 0:
            return run(token, cache.state)
        V = self.model.cfg.vocab_size
        return run(token, cache.state, rand(self.batch, V, generator=generator, dtype=float64,
                                            device=cache.position.device))
