"""Lesson 15's checkers (lessons/exercises/15.py) reject typical wrong answers, each with the reason."""
import numpy as np

import tinygrad_block as tb
from conftest import failures, solution


def _lora(scale):
    def lora_forward(x, W, A, B, alpha):
        return x @ W.T + (x @ A.T) @ B.T * scale(alpha, A.shape[0])
    return lora_forward


def test_a_lora_scale_of_alpha_is_rejected():
    why = failures(15, solution(15, lora_forward=_lora(lambda alpha, r: alpha)))["lora_forward"]
    assert "scaled by alpha = 6" in why and "alpha / r = 6 / 3 = 2" in why


def test_an_unscaled_lora_update_is_rejected():
    why = failures(15, solution(15, lora_forward=_lora(lambda alpha, r: 1.0)))["lora_forward"]
    assert "not scaled" in why


def test_a_lora_scale_upside_down_is_rejected():
    why = failures(15, solution(15, lora_forward=_lora(lambda alpha, r: r / alpha)))["lora_forward"]
    assert "upside down: r / alpha = 0.5, not alpha / r = 2" in why


def test_the_lora_rank_from_b_is_rejected_with_the_reason():
    wrong = lambda x, W, A, B, alpha: x @ W.T + (x @ A.T) @ B.T * (alpha / B.shape[0])      # noqa: E731
    why = failures(15, solution(15, lora_forward=wrong))["lora_forward"]
    assert why.endswith(": the scale is alpha / 10, with r read from the wrong axis: 10 is d_out, B's rows; the rank "
                        "r = 3 is the axis that A and B share, A's rows and B's columns")


def test_the_lora_rank_from_the_columns_of_a_is_rejected_with_the_reason():
    wrong = lambda x, W, A, B, alpha: x @ W.T + (x @ A.T) @ B.T * (alpha / A.shape[1])      # noqa: E731
    why = failures(15, solution(15, lora_forward=wrong))["lora_forward"]
    assert "the scale is alpha / 14, with r read from the wrong axis: 14 is d_in, A's columns" in why


def test_the_lora_starter_leaves_the_rank_to_the_learner():
    from conftest import course_module
    course = course_module()
    starter = course.exercises(15).starter
    assert "A: (r, d_in)" in starter and "B: (d_out, r)" in starter and ".shape" not in starter


def test_the_moe_starter_states_the_task_not_the_counts():
    from conftest import course_module
    course = course_module()
    starter = course.exercises(15).starter
    task = starter[starter.index("def moe_params"):]
    assert "(total, active)" in task and "cfg.experts_top_k" in task
    for given in ("3 d_model x d_ff", "n_experts x d_model", "vocab_size x d_model", "two RMSNorm"):
        assert given not in task, given


def test_lora_with_the_wrong_gradient_of_b_is_rejected():
    def steep(x, W, A, B, alpha):
        return solution(15).lora_forward(x, W, A, B, alpha) + ((B - B.detach()) * 0.1).sum()   # right values
    assert "the gradient of B differs" in failures(15, solution(15, lora_forward=steep))["lora_forward"]


def test_lora_without_the_frozen_term_is_rejected():
    def update_only(x, W, A, B, alpha):
        return (x @ A.T) @ B.T * (alpha / A.shape[0])
    assert "frozen term x W^T is missing" in failures(15, solution(15, lora_forward=update_only))["lora_forward"]


def test_lora_outside_the_graph_is_rejected():
    def detached(x, W, A, B, alpha):
        return tb.tensor(solution(15).lora_forward(x, W, A, B, alpha).numpy(), dtype=tb.float64)
    assert "no gradient reaches A and B" in failures(15, solution(15, lora_forward=detached))["lora_forward"]


def test_an_adapter_counted_as_r_d_is_rejected():
    why = failures(15, solution(15, lora_saving=lambda d, k, r: d * k / (r * d)))["lora_saving"]
    assert "lora_saving(4096, 4096, 16) = 256" in why and "r (d + k) parameters, not r d" in why


def test_the_saving_upside_down_is_rejected():
    why = failures(15, solution(15, lora_saving=lambda d, k, r: r * (d + k) / (d * k)))["lora_saving"]
    assert "lora_saving(4096, 4096, 16)" in why and "128x" in why and "upside down" in why


def test_swapped_deepnorm_constants_are_rejected():
    def swapped(n):
        a, b = solution(15).deepnorm_alpha_beta(n)
        return b, a
    why = failures(15, solution(15, deepnorm_alpha_beta=swapped))["deepnorm_alpha_beta"]
    assert "deepnorm_alpha_beta(1)" in why and "swapped" in why


def test_roots_of_n_are_rejected():
    why = failures(15, solution(15, deepnorm_alpha_beta=lambda n: (n ** 0.25, n ** -0.25)))["deepnorm_alpha_beta"]
    assert "deepnorm_alpha_beta(1) = (1, 1)" in why and "not of N" in why


def test_square_roots_are_rejected():
    why = failures(15, solution(15, deepnorm_alpha_beta=lambda n: ((2 * n) ** 0.5, (8 * n) ** -0.5)))
    assert "square roots" in why["deepnorm_alpha_beta"]


def test_active_as_a_fraction_of_the_total_is_rejected():
    def fraction(cfg):
        total, _ = solution(15).moe_params(cfg)
        return total, total * cfg.experts_top_k // cfg.n_experts
    why = failures(15, solution(15, moe_params=fraction))["moe_params"]
    assert "top_k / n_experts of everything" in why and "3 blocks" in why


def test_idle_experts_of_one_block_only_are_rejected():
    def one_block(cfg):
        total, _ = solution(15).moe_params(cfg)
        return total, total - (cfg.n_experts - cfg.experts_top_k) * 3 * cfg.d_model * cfg.d_ff
    assert "one block only" in failures(15, solution(15, moe_params=one_block))["moe_params"]


def test_a_wrong_total_is_rejected():
    def untied(cfg):
        total, active = solution(15).moe_params(cfg.with_(tie_embeddings=False))
        return total, active
    why = failures(15, solution(15, moe_params=untied))["moe_params"]
    assert "moe_params total" in why and "one matrix counted once" in why and "more than the parameters" in why
    from tinygrad_block import nn
    first = nn.BlockConfig(d_model=16, n_heads=4, n_kv_heads=2, d_ff=24, n_layers=3, vocab_size=50, n_experts=4,
                           experts_top_k=2, max_seq_len=32)                # the checker's first config
    assert f"{solution(15).moe_params(first)[0]:,}" not in why             # the counted answer is not given away


def test_the_reference_mixtral_counts_are_the_published_ones():
    from tinygrad_block import nn
    assert solution(15).moe_params(nn.preset("mistral-7b").with_(n_experts=8, experts_top_k=2)) == \
        (46_702_792_704, 12_879_925_248)
    assert np.isclose(solution(15).lora_saving(4096, 4096, 16), 128.0)
