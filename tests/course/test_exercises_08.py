"""Lesson 08's checkers (lessons/exercises/08.py) reject typical wrong answers, each with the reason."""
import math

from tinygrad_block import nn
from conftest import course_module, failures, solution

course = course_module()


def test_swiglu_with_silu_on_the_up_projection_is_rejected():
    wrong = lambda x, wg, wu, wd: ((x @ wg.mT) * (x @ wu.mT).silu()) @ wd.mT            # noqa: E731
    why = failures(8, solution(8, swiglu=wrong))["swiglu"]
    assert "worked example" in why and "SiLU went on the up projection" in why


def test_glu_instead_of_swiglu_is_rejected():
    glu = lambda x, wg, wu, wd: ((x @ wg.mT).sigmoid() * (x @ wu.mT)) @ wd.mT           # noqa: E731
    assert "that is GLU" in failures(8, solution(8, swiglu=glu))["swiglu"]


def test_swiglu_without_the_gate_is_rejected():
    ungated = lambda x, wg, wu, wd: (x @ wu.mT) @ wd.mT                                 # noqa: E731
    assert "the gate is missing" in failures(8, solution(8, swiglu=ungated))["swiglu"]


def test_swiglu_with_another_activation_shows_the_hidden_vector():
    relu = lambda x, wg, wu, wd: ((x @ wg.mT).relu() * (x @ wu.mT)) @ wd.mT            # noqa: E731
    why = failures(8, solution(8, swiglu=relu))["swiglu"]
    assert "expected [0.236482, 0.059746, -0.057338, -0.293513]" in why
    assert "the hidden vector SiLU(gate) * up should be [0.2943, 0.0019, -0.1156]" in why


def test_swiglu_with_untransposed_weights_is_rejected_with_the_layout():
    untransposed = lambda x, wg, wu, wd: ((x @ wg).silu() * (x @ wu)) @ wd              # noqa: E731
    why = failures(8, solution(8, swiglu=untransposed))["swiglu"]
    assert "stored (out, in)" in why and "turned round" in why and ".mT" not in why


def test_swiglu_outside_the_graph_is_rejected():
    import tinygrad_block as tb
    detached = lambda *a: tb.tensor(solution(8).swiglu(*a).numpy())                     # noqa: E731
    assert "no gradient reaches" in failures(8, solution(8, swiglu=detached))["swiglu"]


def test_swiglu_with_the_wrong_gradient_is_rejected():
    def leaky(x, wg, wu, wd):
        return solution(8).swiglu(x, wg, wu, wd) + (x - x.detach()) * 0.1    # right values, a gradient too many
    why = failures(8, solution(8, swiglu=leaky))["swiglu"]
    assert "the gradient of x is off by" in why and "hand-derived backward" in why


def test_width_rounded_to_the_nearest_multiple_is_rejected():
    def nearest(d_model, multiple_of, multiplier=None):
        hidden = 8 * d_model // 3
        hidden = int(multiplier * hidden) if multiplier else hidden
        return multiple_of * round(hidden / multiple_of)
    why = failures(8, solution(8, swiglu_width=nearest))["swiglu_width"]
    assert why.startswith("swiglu_width(5120, 256) = 13568, below llama2-13b's published width: that is the "
                          "multiple of 256 below 13653 (the nearest one, too); Meta's code rounds UP, to the first "
                          "multiple of 256 at or above the width")
    assert "13824" not in why and "//" not in why                   # neither the answer nor the code


def test_width_without_the_multiplier_is_rejected():
    plain = lambda d_model, multiple_of, multiplier=None: multiple_of * math.ceil(8 * d_model // 3 / multiple_of)  # noqa: E731
    why = failures(8, solution(8, swiglu_width=plain))["swiglu_width"]
    assert why == ("swiglu_width(8192, 4096, 1.3) = 24576, below llama2-70b's published width: the multiplier was "
                   "left out")


def test_width_as_a_float_is_rejected():
    as_float = lambda *a: float(solution(8).swiglu_width(*a))                          # noqa: E731
    assert "is a float" in failures(8, solution(8, swiglu_width=as_float))["swiglu_width"]


def test_the_ffn_share_starter_states_the_task_not_the_counts():
    starter = course.exercises(8).starter
    task = starter[starter.index("def ffn_share"):]
    assert "all the parameters of nn.LM(cfg)" in task and "Llama-2-7B: more than 0.6" in task
    for given in ("three matrices", "d_model x d_ff", "max_seq_len x d_model", "n_kv_heads * d_head", "cfg.bias",
                  "cfg.tie_embeddings", "LM head", "norms"):
        assert given not in task, given


def test_ffn_share_with_two_matrices_for_swiglu_is_rejected():
    """The typical wrong answer: 2 d d_ff per FFN, as in the classic FFN. Llama-2-7B then seems to have 54.5 % of
    its parameters in the FFNs, and the claim 'more than 60 %' would look false."""
    def two_matrices(cfg):
        d, ffn = cfg.d_model, 2 * cfg.d_model * cfg.d_ff
        block = 4 * d * d + ffn + 2 * d
        return cfg.n_layers * ffn / (cfg.n_layers * block + d + 2 * cfg.vocab_size * d)
    why = failures(8, solution(8, ffn_share=two_matrices))["ffn_share"]
    assert "ffn_share(preset('llama2-7b')) = 0.544923" in why and "SwiGLU has three" in why
    assert "less than the share counted on the model" in why and "0.6424" not in why    # the answer is not given


def test_ffn_share_of_one_block_is_rejected():
    from tinygrad_block import accounting as acc
    per_block = lambda cfg: acc.attention_ffn_shares(cfg).ffn                          # noqa: E731
    assert "share of ONE BLOCK" in failures(8, solution(8, ffn_share=per_block))["ffn_share"]


def test_ffn_share_that_counts_a_tied_head_twice_is_rejected():
    def untied(cfg):
        return solution(8).ffn_share(cfg.with_(tie_embeddings=False))
    why = failures(8, solution(8, ffn_share=untied))["ffn_share"]
    assert "smollm-135m" in why and "counted once" in why


def test_ffn_share_without_the_biases_is_rejected():
    def no_bias(cfg):
        return solution(8).ffn_share(cfg.with_(bias=False)) if cfg.bias else solution(8).ffn_share(cfg)
    why = failures(8, solution(8, ffn_share=no_bias))["ffn_share"]
    assert "gpt2-small" in why and "biases are missing" in why


def test_ffn_share_without_the_attention_biases_names_the_missing_count():
    """A slip with no name of its own: the FFN's biases counted, attention's not. The message gives the size of
    the gap, per block."""
    _counted = course.exercises_module(8)._counted         # the checker's own count, loaded by path

    def no_attention_bias(cfg):
        n = _counted(cfg)                                     # the right FFN count and total, from the model
        missing = cfg.n_layers * cfg.bias * (cfg.n_heads * cfg.d_head + 2 * cfg.n_kv_heads * cfg.d_head + cfg.d_model)
        return n["ffn"] / (n["total"] - missing)
    why = failures(8, solution(8, ffn_share=no_attention_bias))["ffn_share"]
    assert "gpt2-small" in why and "36,864 parameters too few (12 blocks x 3,072)" in why


def test_the_reference_share_of_llama2_7b_is_above_sixty_percent():
    share = solution(8).ffn_share(nn.preset("llama2-7b"))
    assert share > 0.6 and round(share, 4) == 0.6424
