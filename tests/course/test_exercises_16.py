"""Lesson 16's checkers (lessons/exercises/16.py) reject typical wrong answers, each with the reason."""
import tinygrad_block as tb
from conftest import failures, solution


def _merge(rescale_acc=True, rescale_l=True, sign=1, normalise=False, common_max=True):
    """merge_softmax_states with one slip."""
    def merge_softmax_states(m1, l1, acc1, m2, l2, acc2):
        m = tb.maximum(m1, m2) if common_max else m1
        e1, e2 = (sign * (m1 - m)).exp(), (sign * (m2 - m)).exp()
        ell = e1 * l1 + e2 * l2 if rescale_l else l1 + l2
        acc = e1 * acc1 + e2 * acc2 if rescale_acc else acc1 + acc2
        return (m, tb.ones_like(ell), acc / ell) if normalise else (m, ell, acc)
    return merge_softmax_states


def _merge_failure(**slip) -> str:
    return failures(16, solution(16, merge_softmax_states=_merge(**slip)))["merge_softmax_states"]


def test_merge_without_rescaling_acc_is_rejected():
    why = _merge_failure(rescale_acc=False)
    assert "merge_softmax_states(scores around 0, R=6, d=3): acc is off" in why and "rescaled like l" in why


def test_merge_without_rescaling_l_is_rejected():
    assert "l must be rescaled" in _merge_failure(rescale_l=False)


def test_merge_without_any_rescaling_is_rejected():
    assert "against its own maximum" in _merge_failure(rescale_acc=False, rescale_l=False)


def test_merge_with_the_wrong_sign_is_rejected():
    assert "the rescaling's sign" in _merge_failure(sign=-1)


def test_merge_returning_the_normalised_output_is_rejected():
    assert "return acc itself, not acc / l" in _merge_failure(normalise=True)


def test_merge_keeping_the_first_max_is_rejected():
    assert "m is" in _merge_failure(common_max=False) and "the larger of m1 and m2" in _merge_failure(common_max=False)


def test_merge_through_exp_of_the_scores_overflows_and_is_rejected():
    def merge_softmax_states(m1, l1, acc1, m2, l2, acc2):             # exp(m) itself: inf at scores around 700
        m = tb.maximum(m1, m2)
        return m, (l1 * m1.exp() + l2 * m2.exp()) / m.exp(), (acc1 * m1.exp() + acc2 * m2.exp()) / m.exp()
    why = failures(16, solution(16, merge_softmax_states=merge_softmax_states))["merge_softmax_states"]
    assert "scores around 720" in why and "nan" in why


def test_merge_returning_a_list_is_rejected():
    as_list = lambda *args: list(_merge()(*args))                                       # noqa: E731
    assert "return a tuple of three Tensors" in failures(16, solution(16, merge_softmax_states=as_list))[
        "merge_softmax_states"]


def _counts(kv_heads=True, cache_batch=True, weights_batch=False, flops_batch=True, cache=True, attention=True,
            embedding=False):
    """(FLOPs, numbers read) of a decode step with one slip."""
    def flops_and_numbers(cfg, n, batch):
        d, d_kv = cfg.d_model, (cfg.n_kv_heads if kv_heads else cfg.n_heads) * cfg.d_head
        layer = 2 * d * d + 2 * d * cfg.n_kv_heads * cfg.d_head + 3 * d * cfg.d_ff
        weights = cfg.n_layers * layer + d * cfg.vocab_size
        flops = 2 * weights + attention * cfg.n_layers * 4 * n * cfg.n_heads * cfg.d_head
        numbers = weights * (batch if weights_batch else 1) + embedding * d * cfg.vocab_size
        numbers += cache * 2 * cfg.n_layers * (batch if cache_batch else 1) * n * d_kv
        return flops * (batch if flops_batch else 1), numbers
    return flops_and_numbers


def _intensity_failure(**slip) -> str:
    counts = _counts(**slip)

    def decode_intensity(cfg, n, batch, b):
        flops, numbers = counts(cfg, n, batch)
        return flops / (numbers * b)
    return failures(16, solution(16, decode_intensity=decode_intensity))["decode_intensity"]


def test_intensity_with_a_cache_of_n_heads_is_rejected():
    why = _intensity_failure(kv_heads=False)
    assert "decode_intensity(llama2-70b, context_len=4096, batch=64" in why and "n_kv_heads = 8" in why


def test_intensity_with_one_cache_for_the_batch_is_rejected():
    assert "every sequence has its own cache" in _intensity_failure(cache_batch=False)


def test_intensity_reading_the_weights_per_sequence_is_rejected():
    assert "read once for the whole batch" in _intensity_failure(weights_batch=True)


def test_intensity_with_flops_of_one_sequence_is_rejected():
    assert "multiply them by batch" in _intensity_failure(flops_batch=False)


def test_intensity_without_the_cache_is_rejected():
    why = _intensity_failure(cache=False)
    assert "decode_intensity(llama2-7b, context_len=1001, batch=1, bytes_per_element=2) = 1.03" in why
    assert ": 1 FLOPs per byte" in why and "reads the whole KV cache" in why


def test_intensity_without_attention_is_rejected():
    assert "the weighted sum of V over context_len keys" in _intensity_failure(attention=False)


def test_intensity_reading_the_embedding_is_rejected():
    assert "lookup of one row per token" in _intensity_failure(embedding=True)


def test_intensity_with_one_flop_per_weight_is_rejected():
    half = lambda cfg, n, batch, b: solution(16).decode_intensity(cfg, n, batch, b) / 2        # noqa: E731
    why = failures(16, solution(16, decode_intensity=half))["decode_intensity"]
    assert why.startswith("decode_intensity(llama2-7b, context_len=1001, batch=1, bytes_per_element=2) = 0.5")
    assert why.endswith("FLOPs per byte: half the FLOPs: one FLOP per weight (and per product in attention); each is "
                        "a multiply and an add, 2 FLOPs")


def _speed(combine=max, tokens="batch"):
    counts = _counts()

    def decode_tokens_per_second(cfg, n, batch, peak, bandwidth, b):
        flops, numbers = counts(cfg, n, batch)
        compute, memory = flops / peak, numbers * b / bandwidth
        step = compute + memory if combine is sum else combine(compute, memory)
        return (batch if tokens == "batch" else 1) / step
    return decode_tokens_per_second


def _speed_failure(**slip) -> str:
    return failures(16, solution(16, decode_tokens_per_second=_speed(**slip)))["decode_tokens_per_second"]


def test_speed_adding_the_two_times_is_rejected():
    assert "not their sum" in _speed_failure(combine=sum)


def test_speed_with_the_shorter_time_is_rejected():
    assert "take the longer time, not the shorter" in _speed_failure(combine=min)


def test_speed_assuming_memory_bound_is_rejected():
    counts = _counts()

    def decode_tokens_per_second(cfg, n, batch, peak, bandwidth, b):      # the bytes' time only
        return batch / (counts(cfg, n, batch)[1] * b / bandwidth)
    why = failures(16, solution(16, decode_tokens_per_second=decode_tokens_per_second))["decode_tokens_per_second"]
    assert "llama2-70b, context_len=1001, batch=1024" in why and "the step is compute-bound" in why


def test_speed_of_one_token_per_step_is_rejected():
    assert "batch tokens, not one" in _speed_failure(tokens="one")

