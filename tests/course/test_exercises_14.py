"""Lesson 14's checkers (lessons/exercises/14.py) reject typical wrong answers, each with the reason."""
import math

import numpy as np

from conftest import failures, solution

REF = solution(14)


def _adamw(correct=True, l2=False, inside=False, decay_after=False, t_shift=0, keep_m=False):
    """AdamW with one slip switched on."""
    def step(p, g, m, v, t, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        b1, b2 = betas
        if l2:
            g = g + weight_decay * p
        m1, v1 = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        tc = t + t_shift
        mh, vh = (m1 / (1 - b1 ** tc), v1 / (1 - b2 ** tc)) if correct else (m1, v1)
        root = np.sqrt(vh + eps) if inside else np.sqrt(vh) + eps
        decay = 0.0 if l2 else lr * weight_decay
        new = (p - lr * mh / root) * (1 - decay) if decay_after else p * (1 - decay) - lr * mh / root
        return new, (m if keep_m else m1), v1
    return step


def test_the_reference_adamw_equals_the_library_step():
    assert "adamw_step" not in failures(14, REF)


def test_adamw_without_bias_correction_is_rejected():
    why = failures(14, solution(14, adamw_step=_adamw(correct=False)))["adamw_step"]
    assert "t=1" in why and "no bias correction" in why


def test_adam_with_l2_in_place_of_decoupled_decay_is_rejected():
    why = failures(14, solution(14, adamw_step=_adamw(l2=True)))["adamw_step"]
    assert "L2" in why and "decouples" in why


def test_eps_inside_the_square_root_is_rejected():
    why = failures(14, solution(14, adamw_step=_adamw(inside=True)))["adamw_step"]
    assert "eps=1e-08" in why and "inside the square root" in why


def test_decay_of_the_updated_weights_is_rejected():
    why = failures(14, solution(14, adamw_step=_adamw(decay_after=True)))["adamw_step"]
    assert "already-updated" in why


def test_steps_counted_from_zero_are_rejected():
    why = failures(14, solution(14, adamw_step=_adamw(t_shift=-1)))["adamw_step"]
    assert "t=1" in why and "not finite" in why


def test_returning_the_old_m_is_rejected():
    why = failures(14, solution(14, adamw_step=_adamw(keep_m=True)))["adamw_step"]
    assert "the returned m" in why and "return the updated one" in why


def _lr(warmup_from_zero=False, over_total=False, no_clamp=False, to_zero=False, full=False, one_short=False):
    def lr_at(step, lr_max, warmup, total, lr_min=0.0):
        if step < warmup:
            return lr_max * (step if warmup_from_zero else step + 1) / warmup
        if step >= total and not no_clamp:
            return lr_min
        x = (step - warmup) / (total if over_total else total - warmup - one_short)
        low = 0.0 if to_zero else lr_min
        return low + (lr_max - low) * (1 + math.cos((2 if full else 1) * math.pi * x)) / 2
    return lr_at


def test_a_warmup_that_starts_at_zero_is_rejected():
    why = failures(14, solution(14, lr_at=_lr(warmup_from_zero=True)))["lr_at"]
    assert "step=0" in why and "(step + 1) / warmup" in why


def test_a_cosine_over_all_the_steps_is_rejected():
    why = failures(14, solution(14, lr_at=_lr(over_total=True)))["lr_at"]
    assert "step=21" in why and "total - warmup steps, not total" in why


def test_a_cosine_that_ends_one_step_early_is_rejected():
    why = failures(14, solution(14, lr_at=_lr(one_short=True)))["lr_at"]
    assert "step=21" in why and "not at total - 1" in why and "0.002999599684" in why


def test_a_cosine_that_does_not_stop_at_total_is_rejected():
    why = failures(14, solution(14, lr_at=_lr(no_clamp=True)))["lr_at"]
    assert "step=151" in why and "must stop" in why


def test_a_decay_to_zero_is_rejected():
    assert "not to lr_min" in failures(14, solution(14, lr_at=_lr(to_zero=True)))["lr_at"]


def test_a_full_cosine_period_is_rejected():
    assert "full cosine period" in failures(14, solution(14, lr_at=_lr(full=True)))["lr_at"]


def test_a_lens_without_the_final_norm_is_rejected():
    def no_norm(model, ids):
        stream = model.embed(ids)
        out = [model.lm_head(stream)]
        for block in model.layers:
            stream = block(stream)
            out.append(model.lm_head(stream))
        return out
    why = failures(14, solution(14, logit_lens=no_norm))["logit_lens"]
    assert "stage 0" in why and "final norm is missing" in why


def test_a_lens_through_each_blocks_norm_is_rejected():
    def block_norm(model, ids):
        stream = model.embed(ids)
        out = [model.lm_head(model.layers[0].norm1(stream))]
        for i, block in enumerate(model.layers):
            stream = block(stream)
            out.append(model.lm_head(model.layers[min(i + 1, len(model.layers) - 1)].norm1(stream)))
        return out
    assert "not a block's norm1" in failures(14, solution(14, logit_lens=block_norm))["logit_lens"]


def test_a_lens_after_each_sublayer_is_rejected():
    def sublayers(model, ids):
        stream = model.embed(ids)
        out = [model.lm_head(model.norm(stream))]
        for b in model.layers:
            stream = stream + b.attn(b.norm1(stream))
            out.append(model.lm_head(model.norm(stream)))
            stream = stream + b.ffn(b.norm2(stream))
            out.append(model.lm_head(model.norm(stream)))
        return out
    why = failures(14, solution(14, logit_lens=sublayers))["logit_lens"]
    assert "7 stages" in why and "not after each sublayer" in why


def test_a_lens_without_the_embedding_stage_is_rejected():
    skip = lambda model, ids: REF.logit_lens(model, ids)[1:]                              # noqa: E731
    why = failures(14, solution(14, logit_lens=skip))["logit_lens"]
    assert "expected n_layers + 1 = 4" in why and "embedding comes first" in why


def test_a_lens_of_probabilities_is_rejected():
    probs = lambda model, ids: [s.softmax(axis=-1) for s in REF.logit_lens(model, ids)]   # noqa: E731
    assert "probabilities" in failures(14, solution(14, logit_lens=probs))["logit_lens"]


def test_a_lens_of_streams_is_rejected():
    def streams(model, ids):
        stream = model.embed(ids)
        out = [stream]
        for block in model.layers:
            stream = block(stream)
            out.append(stream)
        return out
    why = failures(14, solution(14, logit_lens=streams))["logit_lens"]
    assert "(2, 7, 16)" in why and "model.lm_head" in why
