"""Lesson 21's exercises, the capstone: a block variant of the learner's choice (`build()`), counted in closed form,
differentiated by hand, trained, and run with a KV cache. Each check compares with an independent oracle (the
library's block on the shape-only device, its parameters and matmul FLOPs counted; autograd and finite differences
in float64; a held-out batch of the copying task; generation recomputed without a cache), says what is wrong, with
the numbers, and names the usual slips when it sees one. It never shows the learner's code back."""
from __future__ import annotations

import math
import numbers
import sys
import time
from contextlib import contextmanager

import numpy as np

import tinygrad_block as tb
from tinygrad_block import accounting, nn
from tinygrad_block.counting import count_flops
from tinygrad_block.data import induction_batch
from tinygrad_block.gradcheck import central_difference, rel_err
from tinygrad_block.manual import attention_backward
from tinygrad_block.manual import block as manual_block
from tinygrad_block.measure import meta_lm
from tinygrad_block.nn.decode import Decoder, argmax
from tinygrad_block.tensor import zeros
from tinygrad_block.train import evaluate_lm

from .common import CheckFailed

BASELINE = {"norm": "rms", "layout": "pre", "ffn": "swiglu", "bias": False, "qkv_bias": False, "qk_norm": False,
            "rope": True, "tie_embeddings": False, "scale_embeddings": False}    # Llama's block, as lesson 09 built it
LIMITS = {"d_model": 64, "d_ff": 256, "n_layers": 2, "max_seq_len": 64}          # small: trains in seconds
N, V = 10, 32                          # the copying task of lesson 14: 10 random tokens of 32, then the same again
LOSS_BAR, SECONDS = 0.25, 60.0         # the held-out loss to reach (chance is ln 32 = 3.47 nats), the time allowed


# ---------------------------------------------------------------- the learner's variant
def variant(solution) -> nn.BlockConfig:
    """build()'s config, once it is small, causal, dense and a variant of Llama's block; CheckFailed otherwise.
    Every check starts here, so a build() that is not right yet is the first thing each one says."""
    cfg = solution.build()
    if not isinstance(cfg, nn.BlockConfig):
        raise CheckFailed(f"build() must return an nn.BlockConfig; got {type(cfg).__name__}")
    if cfg.vocab_size != V or cfg.max_seq_len < 2 * N - 1:
        raise CheckFailed(f"build() gave vocab_size={cfg.vocab_size}, max_seq_len={cfg.max_seq_len}; the copying task "
                          f"of lesson 14 needs vocab_size={V} and at least {2 * N - 1} positions")
    big = {key: getattr(cfg, key) for key, most in LIMITS.items() if getattr(cfg, key) > most}
    if big:
        raise CheckFailed(f"build() gave {big}: keep the model small, at most {LIMITS}, so that it trains in seconds")
    if cfg.n_experts > 1 or cfg.lora_rank or not cfg.causal:
        raise CheckFailed(f"build() gave n_experts={cfg.n_experts}, lora_rank={cfg.lora_rank}, causal={cfg.causal}: "
                          "the capstone's block is one dense, causal block that trains all its weights (no mixture of "
                          "experts, no LoRA), so that its counts are exact and it can generate")
    if not changes(cfg):
        raise CheckFailed("build() gave Llama's own block (pre-norm, RMSNorm, SwiGLU, RoPE, no biases, every query "
                          "head with its own K and V): change at least one of layout, norm, ffn, bias, qkv_bias, "
                          "qk_norm, rope, n_kv_heads, tie_embeddings or scale_embeddings")
    return cfg


def changes(cfg: nn.BlockConfig) -> dict:
    """What sets the config apart from Llama's block: each field that differs, and GQA or MQA."""
    found = {key: getattr(cfg, key) for key, value in BASELINE.items() if getattr(cfg, key) != value}
    if cfg.n_kv_heads < cfg.n_heads:
        found["n_kv_heads"] = cfg.n_kv_heads
    return found


def _scaled(cfg: nn.BlockConfig) -> list[nn.BlockConfig]:
    """The variant and two resized copies (wider; more query heads per K/V head), so a number that fits one size
    only is caught; a resize the config refuses is left out."""
    cases = [cfg]
    for change in ({"d_model": 2 * cfg.d_model, "d_ff": 3 * cfg.d_ff},
                   {"d_model": 2 * cfg.d_model, "n_heads": 2 * cfg.n_heads, "d_ff": cfg.d_ff + 8}):
        try:
            cases.append(cfg.with_(**change))
        except ValueError:
            pass
    return cases


# ---------------------------------------------------------------- 1. the closed forms
def counted_params(cfg: nn.BlockConfig) -> int:
    """The oracle: one block built on the shape-only device, its parameters added up."""
    return sum(p.size for p in meta_lm(cfg).layers[0].parameters())


def counted_flops(cfg: nn.BlockConfig, L: int) -> int:
    """The oracle: one block's forward on one sequence of L tokens on the shape-only device, its matmul FLOPs."""
    block = meta_lm(cfg).layers[0]
    with count_flops() as fc:
        block(zeros(1, L, cfg.d_model, device="meta"))                   # (1, L, d_model)
    return fc.total("forward", matmul_only=True)


def _params_hint(cfg: nn.BlockConfig, got: int, want: int) -> str:
    rows = accounting.block_param_breakdown(cfg)
    d, d_q, d_kv, d_ff = cfg.d_model, cfg.n_heads * cfg.d_head, cfg.n_kv_heads * cfg.d_head, cfg.d_ff
    gains = "a gain (LayerNorm with bias=True a shift too)" if cfg.norm == "layer" else "a gain"
    slips = [(want - rows["norms"], f"the two norms are missing: each holds {gains} of d_model numbers, and they are "
                                    "parameters like any weight"),
             (want - rows["norms"] // 2, "only one norm is counted: the block has two, norm1 and norm2"),
             (want - rows.get("biases", 0), "the biases are missing: one of each projection's output width"),
             (want - rows.get("qk_norms", 0), "QK-norm's two gains of d_head are missing"),
             (want + 2 * d * (d_q - d_kv), f"W_K and W_V map d_model to n_kv_heads * d_head = {d_kv} numbers, not "
                                           f"to {d_q}: the K/V heads are shared"),
             (want + (d * d_ff if not cfg.gated else -d * d_ff),
              "a gated FFN has three matrices (gate, up, down), a plain MLP two (up, down)"),
             (accounting.total_params(cfg), "that is the whole model; count one block")]
    return next((": " + why for value, why in slips if value != want and got == value), "")


def _flops_hint(cfg: nn.BlockConfig, L: int, got: int, want: int) -> str:
    d, d_q, d_kv = cfg.d_model, cfg.n_heads * cfg.d_head, cfg.n_kv_heads * cfg.d_head
    square = 4 * L * L * d_q                                              # q k^T and weights @ V
    slips = [(want // 2, "that is exactly half: it counts one FLOP per multiply-add; a multiply and an add are "
                         "2 FLOPs, so a matmul (M, K) @ (K, N) costs 2 M K N"),
             (want - square, "attention's own matmuls are missing: q k^T and weights @ V cost 2 L^2 d_head per head "
                             "each, and they grow with L^2"),
             (want - square // 2, "this engine computes the whole L x L square of scores, without halving it for the "
                                  "causal mask"),
             (want + 4 * L * d * (d_q - d_kv), f"W_K and W_V produce n_kv_heads * d_head = {d_kv} numbers per token, "
                                               f"not {d_q}"),
             (want + (2 * L * d * cfg.d_ff if not cfg.gated else -2 * L * d * cfg.d_ff),
              "a gated FFN has three matmuls (gate, up, down), a plain MLP two"),
             (2 * L * counted_params(cfg), "that is 2 x parameters x L: the norms and biases are no matmuls, and "
                                           "attention adds matmuls that have no weights, growing with L^2")]
    if want % L == 0:
        slips.append((want // L, "that is per token; return the FLOPs of the whole sequence of L tokens"))
    return next((": " + why for value, why in slips if value != want and got == value), "")


def _integer(got, call: str) -> int:
    if not isinstance(got, numbers.Integral) or isinstance(got, bool):
        raise CheckFailed(f"{call} returned {got!r}, a {type(got).__name__}; return an int (a count is whole)")
    return int(got)


def check_build_and_count(solution) -> None:
    """build() gives a small variant; count_params and forward_flops equal what the library counts, at its size
    and two others, at two lengths."""
    for cfg in _scaled(variant(solution)):
        size = f"d_model={cfg.d_model}, n_heads={cfg.n_heads}, n_kv_heads={cfg.n_kv_heads}, d_ff={cfg.d_ff}"
        got, want = _integer(solution.count_params(cfg), f"count_params({size})"), counted_params(cfg)
        if got != want:
            side = "more" if got > want else "fewer"
            raise CheckFailed(f"count_params({size}) = {got:,}, {side} than the block built on the shape-only device "
                              f"holds{_params_hint(cfg, got, want)}")
        for L in (7, 2 * N - 1):
            call = f"forward_flops({size}, L={L})"
            got, want = _integer(solution.forward_flops(cfg, L), call), counted_flops(cfg, L)
            if got != want:
                side = "more" if got > want else "fewer"
                raise CheckFailed(f"{call} = {got:,}, {side} matmul FLOPs than the block's forward counted on the "
                                  f"shape-only device{_flops_hint(cfg, L, got, want)}")


# ---------------------------------------------------------------- 2. the backward by hand
WHOLE_BLOCK = {f.__code__: f"manual's {f.__name__}" for f in (
    manual_block.block_backward, manual_block.pre_norm_backward, manual_block.post_norm_backward,
    manual_block.parallel_backward)}
AUTOGRAD = {tb.Tensor.backward.__code__: "autograd (Tensor.backward)"}


@contextmanager
def watching(codes: dict):
    """The names (codes' values) of the functions in `codes` that run inside the block, in the order first called."""
    seen = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code in codes and codes[frame.f_code] not in seen:
            seen.append(codes[frame.f_code])
    old = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(old)


def random_block(cfg: nn.BlockConfig, seed: int) -> nn.Block:
    """A float64 block whose every parameter is random, norm gains and biases included, so each one's gradient
    shows."""
    block = nn.make_block(cfg, generator=tb.Generator(seed), dtype=tb.float64)
    r = np.random.default_rng(seed)
    for name, p in block.named_parameters():
        if p.ndim > 1:                                                     # a weight: N(0, 1 / fan_in)
            value = r.standard_normal(p.shape) / np.sqrt(p.shape[-1])
        else:                                                              # a gain about 1; a bias about 0
            value = (1.0 if "norm" in name and name.endswith("weight") else 0.0) + 0.3 * r.standard_normal(p.shape)
        p.data = tb.tensor(value, dtype=tb.float64).data
    return block


def autograd_grads(block: nn.Block, x: np.ndarray, dout: np.ndarray) -> tuple[np.ndarray, dict]:
    """(dx, {name: grad}) of sum(block(x) * dout) by the engine's autograd."""
    block.zero_grad()
    xt = tb.tensor(x, dtype=tb.float64, requires_grad=True)
    block(xt).backward(tb.tensor(dout, dtype=tb.float64))
    return xt.grad.numpy(), {name: p.grad.numpy() for name, p in block.named_parameters()}


def _agree_with_differences(block: nn.Block, x, dout, want_dx, want) -> None:
    """The second oracle: autograd's gradients equal central differences of the block's forward at a few entries
    of x and of two parameters."""
    r = np.random.default_rng(21)

    def loss_of_x(v):
        with tb.no_grad():
            return float((block(tb.tensor(v, dtype=tb.float64)).numpy() * dout).sum())
    entries = [tuple(int(j) for j in r.integers(x.shape)) for _ in range(4)]
    fd = central_difference(loss_of_x, x.copy(), elements=entries)
    assert rel_err([want_dx[e] for e in entries], [fd[e] for e in entries]) < 1e-8
    params = dict(block.named_parameters())
    for name in ("norm1.weight", "attn.q_proj.weight"):
        p, saved = params[name], params[name].numpy().copy()

        def loss_of_p(v, p=p):
            p.data = tb.tensor(v, dtype=tb.float64).data
            return loss_of_x(x)
        entries = [tuple(int(j) for j in r.integers(saved.shape)) for _ in range(3)]
        fd = central_difference(loss_of_p, saved.copy(), elements=entries)
        p.data = tb.tensor(saved, dtype=tb.float64).data
        assert rel_err([want[name][e] for e in entries], [fd[e] for e in entries]) < 1e-8, name


def identity_dropped(x, params: dict, cfg: nn.BlockConfig, dout) -> list[np.ndarray]:
    """dx as a backward would give it that forgets the identity path of one residual add, one per add, from manual's
    sublayer pairs; [] for a layout manual's block does not build (DeepNorm)."""
    try:
        _, c = manual_block.block_forward(x, params, cfg)
    except (ValueError, KeyError):
        return []
    mb = manual_block
    if cfg.layout == "parallel":
        return [mb.block_backward(dout, c)[0] - dout]
    slips = []
    for keep_second, keep_first in ((False, True), (True, False)):
        if cfg.layout == "pre":                                            # h = x + attn(...); out = h + ffn(...)
            d_f, _ = mb.ffn_sublayer_backward(dout, c["ffn"], cfg)
            dh = (dout if keep_second else 0.0) + mb.norm_backward(d_f, c["norm2"], cfg)[0]
            d_a, _ = attention_backward(dh, c["attn"])
            slips.append((dh if keep_first else 0.0) + mb.norm_backward(d_a, c["norm1"], cfg)[0])
        else:                                                              # post-norm: the adds inside the norms
            d_r2, _ = mb.norm_backward(dout, c["norm2"], cfg)
            dh_ffn, _ = mb.ffn_sublayer_backward(d_r2, c["ffn"], cfg)
            d_r1, _ = mb.norm_backward((d_r2 if keep_second else 0.0) + dh_ffn, c["norm1"], cfg)
            slips.append((d_r1 if keep_first else 0.0) + attention_backward(d_r1, c["attn"])[0])
    return slips


def _array(got, what: str, shape: tuple) -> np.ndarray:
    """The learner's result as a float64 numpy array of `shape`, or CheckFailed saying what came back instead."""
    if isinstance(got, tb.Tensor):
        raise CheckFailed(f"{what} must be a numpy array; got a Tensor. The backward is by hand: numpy only")
    try:
        arr = np.asarray(got, dtype=np.float64)
    except (TypeError, ValueError):
        raise CheckFailed(f"{what} must be a numpy array of shape {shape}; got {type(got).__name__}") from None
    if arr.shape != shape:
        turned = " (the transpose: a weight stored (out, in) gets dW = dout^T x, of shape (out, in))" \
            if len(shape) == 2 and arr.shape == shape[::-1] else ""
        raise CheckFailed(f"{what} must have shape {shape}; got {arr.shape}{turned}")
    return arr


def _learner_grads(solution, cfg, x, params, dout, call: str) -> tuple[np.ndarray, dict]:
    """The learner's (dx, grads), run while watching for the whole-block backward and autograd; checked in form."""
    with watching({**WHOLE_BLOCK, **AUTOGRAD}) as seen:
        got = solution.block_backward_by_hand(x.copy(), {k: v.copy() for k, v in params.items()}, cfg, dout.copy())
    if seen:
        raise CheckFailed(f"{call} called {seen[0]}: put the block's backward together yourself, from the "
                          "sublayers' hand-derived pairs (manual's norms, attention, FFN) or your own, in numpy")
    if not isinstance(got, (tuple, list)) or len(got) != 2 or not isinstance(got[1], dict):
        raise CheckFailed(f"{call} must return a tuple (dx, grads), grads a dict keyed like the params; got "
                          f"{type(got).__name__}")
    dx, grads = got
    missing, extra = sorted(set(params) - set(grads)), sorted(set(grads) - set(params))
    if missing or extra:
        raise CheckFailed(f"{call}: grads must have one entry per parameter, keyed like params; "
                          + (f"missing {missing}" if missing else "") + (" and " if missing and extra else "")
                          + (f"unknown {extra}" if extra else ""))
    return (_array(dx, f"dx of {call}", x.shape),
            {k: _array(g, f"grads[{k!r}] of {call}", params[k].shape) for k, g in grads.items()})


def check_block_backward_by_hand(solution) -> None:
    """dx and every parameter's gradient against autograd and finite differences (float64, which agree), at two
    batch shapes; a dropped identity path named."""
    cfg = variant(solution)
    for seed, (B, L) in ((0, (2, 5)), (1, (1, 7))):
        block, r = random_block(cfg, 210 + seed), np.random.default_rng(seed)
        x, dout = r.standard_normal((B, L, cfg.d_model)), r.standard_normal((B, L, cfg.d_model))
        params = {name: p.numpy() for name, p in block.named_parameters()}
        want_dx, want = autograd_grads(block, x, dout)
        _agree_with_differences(block, x, dout, want_dx, want)
        call = f"block_backward_by_hand(x {x.shape}, params, cfg, dout)"
        dx, grads = _learner_grads(solution, cfg, x, params, dout, call)
        errs = {"dx": rel_err(dx, want_dx), **{k: rel_err(grads[k], want[k]) for k in params}}
        bad = [k for k, e in errs.items() if e > 1e-8]
        if not bad:
            continue
        hint = ""
        if "dx" in bad and any(rel_err(dx, slip) < 1e-8 for slip in identity_dropped(x, params, cfg, dout)):
            hint = (": dx misses a residual's identity path. At h = x + f(x) the gradient reaches x twice, through "
                    "f and straight through the add, so dx = dh + f'(dh): the identity's term is dh itself")
        shown = ", ".join(f"{k} off by {errs[k]:.3g}" for k in bad[:4]) + (", ..." if len(bad) > 4 else "")
        raise CheckFailed(f"{call}: {shown} (relative error against autograd and finite differences; "
                          f"{len(errs) - len(bad)} of {len(errs)} right){hint}")


# ---------------------------------------------------------------- 3. training
def check_train_it(solution) -> None:
    """A model of the variant, trained within SECONDS of processor time (the wall clock of a shared machine says
    little), whose loss on 256 fresh copying sequences is below LOSS_BAR."""
    cfg = variant(solution)
    start = time.process_time()
    model = solution.train_it(cfg)
    seconds = time.process_time() - start
    if not isinstance(model, nn.LM) or model.cfg != cfg:
        got = type(model).__name__ if not isinstance(model, nn.LM) else f"an nn.LM of another config ({model.cfg})"
        raise CheckFailed(f"train_it(cfg) must return the nn.LM of build()'s config it trained; got {got}")
    with tb.no_grad():
        result = evaluate_lm(model, *induction_batch(256, N, V, tb.Generator(2121)))
    loss, chance = result["loss"], math.log(V)
    where = f"train_it(cfg): the held-out loss on 256 fresh copying sequences is {loss:.4f} nats"
    if not math.isfinite(loss):
        raise CheckFailed(f"{where}: training diverged; lower the learning rate or add warmup")
    if loss > LOSS_BAR:
        hint = ("; the model has not found the copy yet: lesson 14 crossed the drop after about 100 steps of 32 "
                "sequences at lr 3e-3. Train longer, and take the loss on the second half (train.lm_loss with "
                "induction_batch's targets)") if loss > 0.8 * chance else ""
        raise CheckFailed(f"{where}, above the bar of {LOSS_BAR} (chance: {chance:.3f}){hint}")
    if seconds > SECONDS:
        raise CheckFailed(f"train_it(cfg) reached a loss of {loss:.4f} but took {seconds:.0f} s of processor time; "
                          f"keep it under {SECONDS:.0f} s (about 10 s is enough: a few hundred steps of a small model)")


# ---------------------------------------------------------------- 4. generation with the KV cache
def cached_logits(model: nn.LM, ids: tb.Tensor, cache: nn.KVCache, offset: int) -> tb.Tensor:
    """The model's forward for ids at positions cache.length ..., every block with its layer cache: what LM.forward
    does with a cache, written out. Without RoPE the position embedding is read from `offset` on, so the grader
    can run it with positions that do not advance."""
    cfg, L, first = model.cfg, ids.shape[1], cache.length                 # first: where this call's tokens go
    h = model.embed(ids)                                                    # (B, L, d_model)
    if cfg.scale_embeddings:
        h = h * math.sqrt(cfg.d_model)
    if not cfg.rope:
        h = h + model.pos_embed(tb.arange(offset, offset + L))             # (L, d_model), broadcast over B
    for block, layer in zip(model.layers, cache.layers):
        h = block(h, first, layer)                                         # a block refuses any other offset
    h = model.norm(h)
    return h @ model.embed.weight.T if cfg.tie_embeddings else model.lm_head(h)    # (B, L, vocab_size)


def cached_loop(model: nn.LM, ids: tb.Tensor, n: int, advance: bool = True, keep: bool = True) -> np.ndarray:
    """Greedy tokens (B, L + n) from the cached loop; advance=False reads every step's position embedding at
    position 0 again (without RoPE, the positions never advance; a block itself refuses an offset other than its
    cache's length); keep=False runs each new token without the earlier keys and values."""
    B, tokens, new, cache = ids.shape[0], ids, ids, nn.KVCache(model, ids.shape[0])
    with tb.no_grad():
        for _ in range(n):
            if not keep:
                cache = nn.KVCache(model, B)
            logits = cached_logits(model, new, cache, cache.length if advance else 0)
            new = argmax(logits[:, -1]).reshape(B, 1)                       # (B, 1)
            tokens = tb.concat([tokens, new], axis=1)
    return tokens.numpy()


def random_lm(cfg: nn.BlockConfig, seed: int) -> nn.LM:
    """A float64 LM of the variant with every weight random and large enough that its logits are far apart (no
    near-ties for the argmax to break differently)."""
    model = nn.LM(cfg, generator=tb.Generator(seed), dtype=tb.float64)
    r = np.random.default_rng(seed)
    for name, p in model.named_parameters():
        scale = 2.0 / np.sqrt(p.shape[-1]) if p.ndim > 1 else 0.3
        p.data = tb.tensor((1.0 if "norm" in name and name.endswith("weight") else 0.0)
                           + scale * r.standard_normal(p.shape), dtype=tb.float64).data
    return model


MODEL_RUNS = {f.__code__: name for f, name in ((nn.LM.forward, "the model itself, model(ids)"),
                                               (nn.LM.generate, "model.generate"), (Decoder.tokens, "a Decoder"))}
GENERATE_CASES = [(2, 5, 8, 0), (1, 3, 10, 1)]               # B, prompt length, new tokens, seed


def check_generate_it(solution) -> None:
    """Greedy tokens with the KV cache equal to those of model.generate recomputing the whole sequence each step;
    each step after the prompt runs one new token (its matmul FLOPs at most those of prefill + n single steps)."""
    cfg = variant(solution)
    for B, L, n, seed in GENERATE_CASES:
        model = random_lm(cfg, 2100 + seed)
        ids = tb.randint(0, V, (B, L), generator=tb.Generator(seed))
        want = model.generate(ids, n, use_cache=False).numpy()                # recomputed: the oracle
        assert np.array_equal(cached_loop(model, ids, n), want)
        with count_flops() as most:
            cached_loop(model, ids, n + 1)                                   # one step more than needed
        call = f"generate_it(model, ids {ids.shape}, n={n})"
        with watching(MODEL_RUNS) as seen, count_flops() as fc:
            got = _generated(solution, model, ids, n, call)
        if seen:
            raise CheckFailed(f"{call} called {seen[0]}: write the loop yourself, over the model's pieces (embed, "
                              "each block with its offset and layer cache, norm, head)")
        if not isinstance(got, tb.Tensor) or got.shape != (B, L + n):
            shape = got.shape if isinstance(got, tb.Tensor) else type(got).__name__
            raise CheckFailed(f"{call} must return a Tensor of shape {(B, L + n)}, the prompt then n tokens; got "
                              f"{shape}")
        tokens = got.numpy()
        if not np.array_equal(tokens, want):
            _wrong_tokens(call, tokens, want, model, ids, n)
        if fc.total("forward", matmul_only=True) > most.total("forward", matmul_only=True):
            raise CheckFailed(f"{call} gave the right tokens, but with {fc.total('forward', matmul_only=True):,} "
                              f"matmul FLOPs, more than the prompt once and {n + 1} single tokens need "
                              f"({most.total('forward', matmul_only=True):,}): it recomputes earlier positions. Once "
                              "the prompt is in the cache, run each new token alone")


def _generated(solution, model: nn.LM, ids: tb.Tensor, n: int, call: str):
    """The learner's generate_it(model, ids, n); a block's refusal of an offset that is not its cache's length
    named as the slip it is."""
    try:
        return solution.generate_it(model, ids, n)
    except ValueError as e:
        if "the offset must equal the cached length" not in str(e):
            raise
        raise CheckFailed(f"{call}: the positions do not advance ({e}). Each step must run at offset = cache.length "
                          "(the prompt's length, then one more per token), so RoPE or the position embedding sees each "
                          "token's true position") from None


def _wrong_tokens(call: str, tokens: np.ndarray, want: np.ndarray, model: nn.LM, ids: tb.Tensor, n: int) -> None:
    """CheckFailed at the first token that differs from recomputing, naming the slip its tokens match."""
    L = ids.shape[1]
    if not np.array_equal(tokens[:, :L], want[:, :L]):
        raise CheckFailed(f"{call}: the first {L} tokens must be the prompt itself")
    b, i = [int(j[0]) for j in np.nonzero(tokens != want)]
    hint = ""
    if np.array_equal(tokens, cached_loop(model, ids, n, advance=False)):
        hint = (": the positions do not advance. Each step must run at offset = cache.length (the prompt's length, "
                "then one more per token), so RoPE or the position embedding sees each token's true position")
    elif np.array_equal(tokens, cached_loop(model, ids, n, keep=False)):
        hint = (": each step ran the new token without the earlier keys and values; pass every block its own layer "
                "cache (cache.layers[i]) and keep the one cache for the whole generation")
    raise CheckFailed(f"{call}: token {i} of sequence {b} is {tokens[b, i]}, where recomputing the whole sequence "
                      f"gives {want[b, i]}{hint}")


CHECKS = [("build_and_count", check_build_and_count), ("block_backward_by_hand", check_block_backward_by_hand),
          ("train_it", check_train_it), ("generate_it", check_generate_it)]
