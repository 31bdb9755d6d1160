"""Lesson 13's checkers (lessons/exercises/13.py) reject typical wrong answers, each with the reason."""
from conftest import failures, solution


def _flops(head=True, embedding=False, gqa=True, l_matmuls=2, per_sequence=False):
    """forward_flops_per_token with one slip: no head, the embedding charged as a matmul, W_K and W_V d x d under
    GQA, one L-dependent matmul instead of two, the whole sequence instead of one token."""
    def forward_flops_per_token(cfg, seq_len):
        d = cfg.d_model
        d_kv = cfg.n_kv_heads * cfg.d_head if gqa else d
        weights = 2 * d * d + 2 * d * d_kv + 3 * d * cfg.d_ff
        per_token = cfg.n_layers * (2 * weights + l_matmuls * 2 * seq_len * d)
        per_token += 2 * d * cfg.vocab_size * (head + embedding)
        return per_token * (seq_len if per_sequence else 1)
    return forward_flops_per_token


def test_flops_without_the_head_is_rejected():
    why = failures(13, solution(13, forward_flops_per_token=_flops(head=False)))["forward_flops_per_token"]
    assert "forward_flops_per_token(llama2-7b, seq_len=4096) = 15,099,494,400" in why
    assert "fewer matmul FLOPs per token than the model's forward" in why and "leaves out the LM head" in why
    assert "15,361,638,400" not in why                                  # the counted answer is not given away


def test_flops_charging_the_embedding_is_rejected():
    why = failures(13, solution(13, forward_flops_per_token=_flops(embedding=True)))["forward_flops_per_token"]
    assert "table lookup" in why


def test_flops_with_full_k_and_v_under_gqa_is_rejected():
    why = failures(13, solution(13, forward_flops_per_token=_flops(gqa=False)))["forward_flops_per_token"]
    assert "llama2-70b" in why and "n_kv_heads * d_head = 1,024" in why


def test_flops_with_one_l_dependent_matmul_is_rejected():
    why = failures(13, solution(13, forward_flops_per_token=_flops(l_matmuls=1)))["forward_flops_per_token"]
    assert "q k^T and weights @ V each cost" in why and "without halving it" in why


def test_flops_per_sequence_is_rejected():
    why = failures(13, solution(13, forward_flops_per_token=_flops(per_sequence=True)))["forward_flops_per_token"]
    assert "that is the whole sequence" in why


def test_flops_with_one_flop_per_weight_is_rejected():
    half = lambda cfg, seq_len: _flops()(cfg, seq_len) // 2                                 # noqa: E731
    why = failures(13, solution(13, forward_flops_per_token=half))["forward_flops_per_token"]
    assert "forward_flops_per_token(llama2-7b, seq_len=4096) = 7,680,819,200" in why
    assert "exactly half: it counts one FLOP per weight" in why and "2 FLOPs" in why


def test_flops_as_two_n_is_rejected():
    from tinygrad_block import accounting
    two_n = lambda cfg, seq_len: 2 * accounting.total_params(cfg)                          # noqa: E731
    why = failures(13, solution(13, forward_flops_per_token=two_n))["forward_flops_per_token"]
    assert "2N rule of thumb" in why


def test_flops_as_a_float_is_rejected():
    as_float = lambda cfg, seq_len: float(_flops()(cfg, seq_len))                         # noqa: E731
    assert "return an int" in failures(13, solution(13, forward_flops_per_token=as_float))["forward_flops_per_token"]


def _mfu(flops_per_param_token=6, seconds_per_day=86400, scale=1.0):
    def mfu_needed(n_params, n_tokens, n_gpus, peak, days):
        return scale * flops_per_param_token * n_params * n_tokens / (n_gpus * peak * days * seconds_per_day)
    return mfu_needed


def test_mfu_with_two_n_d_is_rejected():
    why = failures(13, solution(13, mfu_needed=_mfu(flops_per_param_token=2)))["mfu_needed"]
    assert why.startswith("mfu_needed(70B on 1.4e12 tokens, 1,000 GPUs of 990 TFLOP/s, 42 days) = 0.0545579249282952"
                          "95, but at that utilisation training takes 126 days, not 42: 2 N D counts only the forward")
    assert "0.1636737747848859" not in why and "expected" not in why and "/ (n_gpus" not in why   # no answer, no code


def test_mfu_with_one_flop_per_weight_is_rejected():
    why = failures(13, solution(13, mfu_needed=_mfu(flops_per_param_token=3)))["mfu_needed"]
    assert "training takes 84 days, not 42: 3 N D counts one FLOP per weight and token" in why
    assert "0.1636737747848859" not in why


def test_mfu_off_otherwise_names_the_idea_not_the_answer():
    why = failures(13, solution(13, mfu_needed=_mfu(scale=1.1)))["mfu_needed"]
    assert why.endswith("training takes 38.18 days, not 42: the utilisation is the share of the GPUs' peak that the "
                        "run's training FLOPs need to fit in that many days")
    assert "0.1636737747848859" not in why


def test_mfu_without_seconds_per_day_is_rejected():
    assert "86,400 seconds" in failures(13, solution(13, mfu_needed=_mfu(seconds_per_day=1)))["mfu_needed"]


def test_mfu_in_hours_is_rejected():
    assert "not 3,600" in failures(13, solution(13, mfu_needed=_mfu(seconds_per_day=3600)))["mfu_needed"]


def test_mfu_as_a_percentage_is_rejected():
    assert "that is a percentage" in failures(13, solution(13, mfu_needed=_mfu(scale=100)))["mfu_needed"]


def test_the_flops_starter_states_the_task_not_the_sum():
    from conftest import course_module
    course = course_module()
    starter = course.exercises(13).starter
    task = starter[starter.index("def forward_flops_per_token"):starter.index("def mfu_needed")]
    assert "seq_len" in task and "causal mask" in task
    for given in ("W_Q", "2 FLOPs per weight", "2 M K N", "LM head"):
        assert given not in task, given
