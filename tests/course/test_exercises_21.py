"""Lesson 21's checkers (lessons/exercises/21.py), the capstone: the reference solution passes, the starter says
what is not written yet, and each usual slip is rejected with the reason (each check run alone, so that only the
tests that need it train a model)."""
import numpy as np
import pytest

import tinygrad_block as tb
from conftest import ROOT, course_module, solution
from tinygrad_block import manual, nn
from tinygrad_block.nn.decode import argmax

course = course_module()


def why(check: str, module) -> str | None:
    """What check `check` of lesson 21 says of `module`: None when it passes."""
    grader = course.exercises_module(21)
    try:
        dict(grader.CHECKS)[check](module)
    except grader.CheckFailed as e:
        return str(e)
    return None


def reference():
    return solution(21)



def test_the_starter_says_each_exercise_is_not_written_yet():
    starter = course.load_solution(ROOT / "lessons" / "exercises" / "starters" / "21.py", 21)
    results = dict(course.check(21, starter))
    assert list(results) == ["build_and_count", "block_backward_by_hand", "train_it", "generate_it"]
    assert all(r == "not written yet (it still raises NotImplementedError)" for r in results.values()), results


# ---------------------------------------------------------------- build and count
def test_llamas_own_block_is_not_a_variant():
    llama = nn.BlockConfig(d_model=32, n_heads=4, n_kv_heads=4, d_ff=64, n_layers=2, vocab_size=32, max_seq_len=32)
    message = why("build_and_count", solution(21, build=lambda: llama))
    assert "build() gave Llama's own block" in message and "change at least one of layout" in message


def test_a_model_too_large_to_train_in_seconds_is_refused():
    big = reference().build().with_(d_model=128)
    message = why("build_and_count", solution(21, build=lambda: big))
    assert "build() gave {'d_model': 128}" in message and "keep the model small" in message


def test_a_config_for_another_vocabulary_is_refused():
    other = reference().build().with_(vocab_size=50)
    assert "needs vocab_size=32" in why("train_it", solution(21, build=lambda: other))


def test_a_closed_form_without_the_norms_is_rejected():
    ref = reference()
    no_norms = lambda cfg: ref.count_params(cfg) - 4 * cfg.d_model                    # noqa: E731
    message = why("build_and_count", solution(21, count_params=no_norms))
    want = 15_432                                               # the block's parameters, as the library counts them
    assert message.startswith(f"count_params(d_model=48, n_heads=4, n_kv_heads=1, d_ff=96) = {want - 192:,}, fewer")
    assert "the two norms are missing" in message and f"{want:,}" not in message


def test_a_closed_form_with_full_width_k_and_v_is_rejected():
    ref = reference()
    full = lambda cfg: ref.count_params(cfg) + 2 * cfg.d_model * (cfg.d_model - cfg.d_head) + 2 * (  # noqa: E731
        cfg.d_model - cfg.d_head)
    message = why("build_and_count", solution(21, count_params=full))
    assert "more than the block built on the shape-only device holds" in message


def test_flops_counting_one_per_multiply_add_are_rejected():
    ref = reference()
    half = lambda cfg, L: ref.forward_flops(cfg, L) // 2                                # noqa: E731
    message = why("build_and_count", solution(21, forward_flops=half))
    cfg, L = ref.build(), 7
    d, ff = cfg.d_model, cfg.d_ff
    want = 2 * L * (2 * d * d + 2 * d * cfg.d_head + 2 * d * ff) + 4 * L * L * d      # the formula, by hand
    assert message.startswith(f"forward_flops(d_model=48, n_heads=4, n_kv_heads=1, d_ff=96, L=7) = {want // 2:,}")
    assert "exactly half: it counts one FLOP per multiply-add" in message


def test_flops_without_attentions_own_matmuls_are_rejected():
    ref = reference()
    no_square = lambda cfg, L: ref.forward_flops(cfg, L) - 4 * L * L * cfg.d_model       # noqa: E731
    assert "attention's own matmuls are missing" in why("build_and_count", solution(21, forward_flops=no_square))


def test_a_count_as_a_float_is_rejected():
    ref = reference()
    as_float = lambda cfg: float(ref.count_params(cfg))                                  # noqa: E731
    assert "return an int" in why("build_and_count", solution(21, count_params=as_float))


# ---------------------------------------------------------------- the backward by hand
def _parallel_backward(dout, cache, identity=True):
    """manual's parallel-block backward, its identity term optional."""
    c, cfg = cache, cache["cfg"]
    d_a, g_attn = manual.attention_backward(dout, c["attn"])
    d_f, g_ffn = manual.block.ffn_sublayer_backward(dout, c["ffn"], cfg)
    dx_attn, g_norm1 = manual.block.norm_backward(d_a, c["norm1"], cfg)
    dx_ffn, g_norm2 = manual.block.norm_backward(d_f, c["norm2"], cfg)
    grads = manual.flatten({"norm1": g_norm1, "attn": g_attn, "norm2": g_norm2, "ffn": g_ffn})
    return (dout if identity else 0.0) + dx_attn + dx_ffn, grads


def test_a_backward_missing_the_residuals_identity_path_is_rejected():
    def by_hand(x, params, cfg, dout):
        return _parallel_backward(dout, manual.block_forward(x, params, cfg)[1], identity=False)
    message = why("block_backward_by_hand", solution(21, block_backward_by_hand=by_hand))
    assert message.startswith("block_backward_by_hand(x (2, 5, 48), params, cfg, dout): dx off by")
    assert "16 of 17 right" in message and "dx misses a residual's identity path" in message


def test_the_pieces_put_together_pass():
    def by_hand(x, params, cfg, dout):
        return _parallel_backward(dout, manual.block_forward(x, params, cfg)[1])
    assert why("block_backward_by_hand", solution(21, block_backward_by_hand=by_hand)) is None


def test_manuals_whole_block_backward_is_not_the_exercise():
    def whole(x, params, cfg, dout):
        return manual.block_backward(dout, manual.block_forward(x, params, cfg)[1])
    message = why("block_backward_by_hand", solution(21, block_backward_by_hand=whole))
    assert "called manual's block_backward: put the block's backward together yourself" in message


def test_autograd_is_not_a_backward_by_hand():
    def autograd(x, params, cfg, dout):
        block = nn.make_block(cfg, generator=tb.Generator(0), dtype=tb.float64)
        block.load_state_dict({k: tb.tensor(v) for k, v in params.items()})
        xt = tb.tensor(x, requires_grad=True)
        block(xt).backward(tb.tensor(dout))
        return xt.grad.numpy(), {k: p.grad.numpy() for k, p in block.named_parameters()}
    assert "called autograd (Tensor.backward)" in why("block_backward_by_hand",
                                                      solution(21, block_backward_by_hand=autograd))


def test_a_missing_gradient_and_a_transposed_one_are_named():
    ref = reference()

    def missing(x, params, cfg, dout):
        dx, grads = ref.block_backward_by_hand(x, params, cfg, dout)
        return dx, {k: g for k, g in grads.items() if k != "norm2.bias"}

    def turned(x, params, cfg, dout):
        dx, grads = ref.block_backward_by_hand(x, params, cfg, dout)
        return dx, {**grads, "attn.k_proj.weight": grads["attn.k_proj.weight"].T}
    assert "missing ['norm2.bias']" in why("block_backward_by_hand", solution(21, block_backward_by_hand=missing))
    message = why("block_backward_by_hand", solution(21, block_backward_by_hand=turned))
    assert "grads['attn.k_proj.weight']" in message
    assert "must have shape (12, 48); got (48, 12) (the transpose" in message


# ---------------------------------------------------------------- training
def test_an_untrained_model_is_rejected():
    untrained = lambda cfg: nn.LM(cfg, generator=tb.Generator(0))                       # noqa: E731
    message = why("train_it", solution(21, train_it=untrained))
    assert message.startswith("train_it(cfg): the held-out loss on 256 fresh copying sequences is ")
    loss = float(message.split(" is ")[1].split(" nats")[0])
    assert loss > 3.0 and "above the bar of 0.25" in message and "has not found the copy yet" in message


def test_a_model_of_another_config_is_rejected():
    other = lambda cfg: nn.LM(cfg.with_(d_ff=64), generator=tb.Generator(0))            # noqa: E731
    assert "must return the nn.LM of build()'s config it trained" in why("train_it", solution(21, train_it=other))


# ---------------------------------------------------------------- generation
def _loop(offset_of, keep=True, recompute=False):
    """generate_it as the reference writes it, with a slip: the offset each step uses, a fresh cache per step, or
    the whole sequence recomputed each step (right tokens, no saving)."""
    def generate_it(model, ids, n):
        B, tokens, new, cache = ids.shape[0], ids, ids, nn.KVCache(model, ids.shape[0])
        with tb.no_grad():
            for _ in range(n):
                if recompute or not keep:
                    cache = nn.KVCache(model, B)
                h = model.embed(tokens if recompute else new)
                offset = offset_of(cache)
                for block, layer in zip(model.layers, cache.layers):
                    h = block(h, offset, layer)
                new = argmax(model.lm_head(model.norm(h))[:, -1]).reshape(B, 1)
                tokens = tb.concat([tokens, new], axis=1)
        return tokens
    return generate_it


def test_the_loop_written_out_passes():
    assert why("generate_it", solution(21, generate_it=_loop(lambda cache: cache.length))) is None


def test_a_cache_whose_positions_do_not_advance_is_rejected():
    message = why("generate_it", solution(21, generate_it=_loop(lambda cache: 0)))
    assert message.startswith("generate_it(model, ids (2, 5), n=8): the positions do not advance (Attention: the KV "
                              "cache holds 5 positions, but this call starts at offset 0")
    assert "offset = cache.length" in message


def test_position_embeddings_that_do_not_advance_are_rejected():
    """Without RoPE, a learned position embedding read at 0 .. L - 1 on every step: right offsets for the blocks,
    wrong positions for the tokens."""
    learned = reference().build().with_(rope=False)

    def generate_it(model, ids, n):
        B, tokens, new, cache = ids.shape[0], ids, ids, nn.KVCache(model, ids.shape[0])
        with tb.no_grad():
            for _ in range(n):
                h, offset = model.embed(new) + model.pos_embed(tb.arange(0, new.shape[1])), cache.length  # stuck
                for block, layer in zip(model.layers, cache.layers):
                    h = block(h, offset, layer)
                new = argmax(model.lm_head(model.norm(h))[:, -1]).reshape(B, 1)
                tokens = tb.concat([tokens, new], axis=1)
        return tokens
    message = why("generate_it", solution(21, build=lambda: learned, generate_it=generate_it))
    assert message.startswith("generate_it(model, ids (2, 5), n=8): token ")
    assert "where recomputing the whole sequence gives" in message and "the positions do not advance" in message


def test_steps_without_the_earlier_keys_and_values_are_rejected():
    message = why("generate_it", solution(21, generate_it=_loop(lambda cache: cache.length, keep=False)))
    assert "each step ran the new token without the earlier keys and values" in message


def test_recomputing_the_whole_sequence_is_rejected_though_its_tokens_are_right():
    message = why("generate_it", solution(21, generate_it=_loop(lambda cache: 0, recompute=True)))
    assert "gave the right tokens, but with" in message and "it recomputes earlier positions" in message


@pytest.mark.parametrize("call", ["generate", "model"])
def test_the_models_own_generation_is_not_the_exercise(call):
    if call == "generate":
        run = lambda model, ids, n: model.generate(ids, n)                               # noqa: E731
    else:
        run = _loop(lambda cache: cache.length)
        inner = run
        run = lambda model, ids, n: (model(ids), inner(model, ids, n))[1]                # noqa: E731
    message = why("generate_it", solution(21, generate_it=run))
    assert "write the loop yourself" in message
    assert ("model.generate" if call == "generate" else "model(ids)") in message


def test_the_oracle_is_generation_recomputed():
    """The grader's written-out cached loop equals model.generate without a cache, and the reference equals both."""
    grader, ref = course.exercises_module(21), reference()
    model = grader.random_lm(ref.build(), 5)
    ids = tb.randint(0, 32, (2, 4), generator=tb.Generator(5))
    want = model.generate(ids, 6, use_cache=False).numpy()
    assert np.array_equal(grader.cached_loop(model, ids, 6), want)
    assert np.array_equal(ref.generate_it(model, ids, 6).numpy(), want)
    assert not np.array_equal(grader.cached_loop(model, ids, 6, keep=False), want)


# ---------------------------------------------------------------- other variants than the reference's
VARIANTS = {"post-norm, GQA, no RoPE, tied": dict(layout="post", n_kv_heads=2, rope=False, tie_embeddings=True),
            "pre-norm, Gemma's norm and GeGLU": dict(norm="rms1p", ffn="geglu_tanh", scale_embeddings=True),
            "pre-norm, ReLU MLP, q/k/v biases": dict(ffn="relu", qkv_bias=True)}


def _pieces_backward(identity: bool = True):
    """A pre- or post-norm block's backward from manual's sublayer pairs (the layout's own functions, written out),
    the second residual's identity path optional."""
    mb = manual.block

    def block_backward_by_hand(x, params, cfg, dout):
        _, c = mb.block_forward(x, params, cfg)
        keep = dout if identity else 0.0
        if cfg.layout == "pre":
            d_f, g_ffn = mb.ffn_sublayer_backward(dout, c["ffn"], cfg)
            dh_ffn, g_norm2 = mb.norm_backward(d_f, c["norm2"], cfg)
            dh = keep + dh_ffn
            d_a, g_attn = manual.attention_backward(dh, c["attn"])
            dx_attn, g_norm1 = mb.norm_backward(d_a, c["norm1"], cfg)
            dx = dh + dx_attn
        else:
            d_r2, g_norm2 = mb.norm_backward(dout, c["norm2"], cfg)
            dh_ffn, g_ffn = mb.ffn_sublayer_backward(d_r2, c["ffn"], cfg)
            d_r1, g_norm1 = mb.norm_backward((d_r2 if identity else 0.0) + dh_ffn, c["norm1"], cfg)
            dx_attn, g_attn = manual.attention_backward(d_r1, c["attn"])
            dx = d_r1 + dx_attn
        return dx, manual.flatten({"norm1": g_norm1, "attn": g_attn, "norm2": g_norm2, "ffn": g_ffn})
    return block_backward_by_hand


def _pieces_generate(model, ids, n):
    """The cached loop over the model's pieces, for any variant: scaled embeddings, learned positions, a tied head."""
    cfg, B = model.cfg, ids.shape[0]
    tokens, new, cache = ids, ids, nn.KVCache(model, B)
    with tb.no_grad():
        for _ in range(n):
            offset, h = cache.length, model.embed(new)
            h = h * cfg.d_model ** 0.5 if cfg.scale_embeddings else h
            h = h if cfg.rope else h + model.pos_embed(tb.arange(offset, offset + new.shape[1]))
            for block, layer in zip(model.layers, cache.layers):
                h = block(h, offset, layer)
            h = model.norm(h)
            logits = h @ model.embed.weight.T if cfg.tie_embeddings else model.lm_head(h)
            new = argmax(logits[:, -1]).reshape(B, 1)
            tokens = tb.concat([tokens, new], axis=1)
    return tokens


@pytest.mark.parametrize("name", VARIANTS)
def test_other_variants_are_graded_too(name):
    """Counting, the backward and generation of other variants: right ones pass, a dropped identity is named."""
    from tinygrad_block import accounting
    cfg = nn.BlockConfig(d_model=32, n_heads=4, n_kv_heads=4, d_ff=64, n_layers=2, vocab_size=32, max_seq_len=32)
    cfg = cfg.with_(**VARIANTS[name])
    right = solution(21, build=lambda: cfg, count_params=accounting.params_per_block,
                     forward_flops=lambda c, L: accounting.block_forward_flops(c, L),
                     block_backward_by_hand=_pieces_backward(), generate_it=_pieces_generate)
    for check in ("build_and_count", "block_backward_by_hand", "generate_it"):
        assert why(check, right) is None, (check, why(check, right))
    wrong = solution(21, build=lambda: cfg, block_backward_by_hand=_pieces_backward(identity=False))
    assert "dx misses a residual's identity path" in why("block_backward_by_hand", wrong)
