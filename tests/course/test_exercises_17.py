"""Lesson 17's checkers (lessons/exercises/17.py) reject typical wrong answers, each with the reason."""
from conftest import failures, solution

from tinygrad_block import accounting


def _tp(split_norms=False, split_vocab=True, gqa=True, tied_twice=False):
    """tp_params_per_device with one slip: norms divided by t, embedding and head kept whole, W_K and W_V
    d x d under GQA, a tied head counted as a second matrix."""
    def tp_params_per_device(cfg, t):
        d = cfg.d_model
        d_kv = cfg.n_kv_heads * cfg.d_head if gqa else d
        matrices = cfg.n_layers * (2 * d * d + 2 * d * d_kv + 3 * d * cfg.d_ff)
        norms = (2 * cfg.n_layers + 1) * d
        vocab = (1 if cfg.tie_embeddings and not tied_twice else 2) * cfg.vocab_size * d
        split = matrices + (vocab if split_vocab else 0) + (norms if split_norms else 0)
        return split // t + (0 if split_vocab else vocab) + (0 if split_norms else norms)
    return tp_params_per_device


def test_tp_with_the_norms_divided_is_rejected():
    why = failures(17, solution(17, tp_params_per_device=_tp(split_norms=True)))["tp_params_per_device"]
    assert "tp_params_per_device(llama2-7b, t=2)" in why and "the norms are not split" in why


def test_tp_with_the_vocabulary_whole_is_rejected():
    why = failures(17, solution(17, tp_params_per_device=_tp(split_vocab=False)))["tp_params_per_device"]
    assert "are split too" in why and "vocab_size / t" in why


def test_tp_with_full_k_and_v_under_gqa_is_rejected():
    why = failures(17, solution(17, tp_params_per_device=_tp(gqa=False)))["tp_params_per_device"]
    assert "llama2-70b" in why and "n_kv_heads * d_head = 1,024" in why


def test_tp_counting_a_tied_head_twice_is_rejected():
    why = failures(17, solution(17, tp_params_per_device=_tp(tied_twice=True)))["tp_params_per_device"]
    assert "smollm-135m (tied), t=3" in why and "hold its slice once" in why


def test_tp_dividing_everything_is_rejected():
    everything = lambda cfg, t: accounting.total_params(cfg) // t                        # noqa: E731
    why = failures(17, solution(17, tp_params_per_device=everything))["tp_params_per_device"]
    assert "tp_params_per_device(llama2-7b, t=2)" in why and "every device holds them whole" in why


def test_tp_as_a_float_is_rejected():
    as_float = lambda cfg, t: float(_tp()(cfg, t))                                      # noqa: E731
    assert "return an int" in failures(17, solution(17, tp_params_per_device=as_float))["tp_params_per_device"]


def _zero(shift=0, everything=False, per_param=16):
    """zero_bytes_per_device with one slip: stages numbered one off, every stage dividing everything, or 12
    bytes per parameter (Adam's state alone)."""
    def zero_bytes_per_device(n_params, n_devices, stage):
        stage = min(3, max(0, stage + shift))
        if everything and stage:
            return per_param * n_params / n_devices
        sizes = {"w": 2, "g": 2, "a": 12} if per_param == 16 else {"w": 0, "g": 0, "a": 12}
        t = n_devices
        return sizes["w"] * n_params / (t if stage >= 3 else 1) + sizes["g"] * n_params / (t if stage >= 2 else 1) \
            + sizes["a"] * n_params / (t if stage >= 1 else 1)
    return zero_bytes_per_device


def test_zero_with_stages_one_off_is_rejected():
    why = failures(17, solution(17, zero_bytes_per_device=_zero(shift=1)))["zero_bytes_per_device"]
    assert "stage=0" in why and "that is stage 1's answer" in why


def test_zero_dividing_everything_from_stage_one_is_rejected():
    why = failures(17, solution(17, zero_bytes_per_device=_zero(everything=True)))["zero_bytes_per_device"]
    assert "stage=1" in why and "only stage 3 divides everything" in why and "keeps the bf16 weights" in why


def test_zero_with_twelve_bytes_is_rejected():
    why = failures(17, solution(17, zero_bytes_per_device=_zero(per_param=12)))["zero_bytes_per_device"]
    assert "stage=0" in why and "16 bytes per parameter in all" in why


def _mfu(scale=1.0, six_n=False):
    def training_mfu(cfg, batch, seq_len, step_seconds, n_devices, peak_flops):
        if six_n:
            flops = 6 * accounting.total_params(cfg) * batch * seq_len
        else:
            flops = accounting.model_forward_flops(cfg, seq_len, batch) + \
                accounting.model_backward_flops(cfg, seq_len, batch)
        return scale * flops / (n_devices * peak_flops * step_seconds)
    return training_mfu


def test_mfu_forward_only_is_rejected():
    why = failures(17, solution(17, training_mfu=_mfu(scale=1 / 3)))["training_mfu"]
    assert "training_mfu(llama2-7b, batch=4, seq_len=4096" in why and "forward only" in why


def test_mfu_with_one_flop_per_weight_is_rejected():
    why = failures(17, solution(17, training_mfu=_mfu(scale=1 / 2)))["training_mfu"]
    assert "training_mfu(llama2-7b, batch=4, seq_len=4096" in why and "exactly half: one FLOP per weight" in why


def test_mfu_on_one_device_is_rejected():
    why = failures(17, solution(17, training_mfu=_mfu(scale=8)))["training_mfu"]
    assert "divide by all of their peaks" in why


def test_mfu_as_a_percentage_is_rejected():
    assert "percentage" in failures(17, solution(17, training_mfu=_mfu(scale=100)))["training_mfu"]


def test_mfu_by_six_n_is_rejected():
    why = failures(17, solution(17, training_mfu=_mfu(six_n=True)))["training_mfu"]
    assert "6 N per token" in why and "matmul FLOPs" in why
