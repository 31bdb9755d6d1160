"""Lesson 12's checkers (lessons/exercises/12.py) reject typical wrong answers, each with the reason."""
from conftest import failures, solution


def _params(norms=True, final_norm=True, gqa=True, tied_counts=False):
    """llama_params with one slip: no norms, no final norm, W_K and W_V d x d under GQA, a tied head counted."""
    def llama_params(cfg):
        d = cfg.d_model
        d_kv = cfg.n_kv_heads * cfg.d_head if gqa else d
        block = 2 * d * d + 2 * d * d_kv + 3 * d * cfg.d_ff + (2 * d if norms else 0)
        head = 0 if cfg.tie_embeddings and not tied_counts else cfg.vocab_size * d
        return cfg.vocab_size * d + cfg.n_layers * block + (d if final_norm and norms else 0) + head
    return llama_params


def test_llama_params_without_the_norms_is_rejected():
    why = failures(12, solution(12, llama_params=_params(norms=False)))["llama_params"]
    assert "llama_params(llama2-7b) = 6,738,149,376" in why and "leaves out every norm" in why


def test_llama_params_without_the_final_norm_is_rejected():
    why = failures(12, solution(12, llama_params=_params(final_norm=False)))["llama_params"]
    assert "off by -4,096" in why and "final RMSNorm" in why


def test_llama_params_with_full_k_and_v_under_gqa_is_rejected():
    why = failures(12, solution(12, llama_params=_params(gqa=False)))["llama_params"]
    assert "llama_params(llama2-70b)" in why and "8,192 x 1,024" in why and "n_kv_heads = 8" in why


def test_llama_params_counting_a_tied_head_is_rejected():
    why = failures(12, solution(12, llama_params=_params(tied_counts=True)))["llama_params"]
    assert "smollm-135m (tied)" in why and "counted once" in why


def test_llama_params_as_a_float_is_rejected():
    as_float = lambda cfg: float(_params()(cfg))                                          # noqa: E731
    assert "return an int" in failures(12, solution(12, llama_params=as_float))["llama_params"]


def test_tied_saving_of_both_matrices_is_rejected():
    both = lambda cfg: (2 * cfg.vocab_size * cfg.d_model, 0.0)                            # noqa: E731
    why = failures(12, solution(12, tied_saving=both))["tied_saving"]
    assert "saved = 2,101,346,304" in why and "one matrix, not two" in why


def test_tied_saving_over_the_tied_model_is_rejected():
    def over_tied(cfg):
        saved = cfg.vocab_size * cfg.d_model
        return saved, saved / (_params()(cfg.with_(tie_embeddings=False)) - saved)
    assert "divides by the tied model's count" in failures(12, solution(12, tied_saving=over_tied))["tied_saving"]


def test_tied_saving_as_a_percentage_is_rejected():
    def percent(cfg):
        saved = cfg.vocab_size * cfg.d_model
        return saved, 100 * saved / _params()(cfg.with_(tie_embeddings=False))
    assert "that is a percentage" in failures(12, solution(12, tied_saving=percent))["tied_saving"]


def test_tied_saving_of_an_already_tied_model_as_zero_is_rejected():
    def zero_if_tied(cfg):
        saved = 0 if cfg.tie_embeddings else cfg.vocab_size * cfg.d_model
        return saved, saved / _params()(cfg.with_(tie_embeddings=False))
    assert "already tied" in failures(12, solution(12, tied_saving=zero_if_tied))["tied_saving"]


def test_tied_saving_as_one_number_is_rejected():
    one = lambda cfg: cfg.vocab_size * cfg.d_model                                        # noqa: E731
    assert "return a pair (saved, fraction)" in failures(12, solution(12, tied_saving=one))["tied_saving"]
