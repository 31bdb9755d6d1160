"""Lesson 12's exercises: the parameter count of a Llama-style model from its config, and what tying the LM head to
the embedding saves. Each check compares with the model itself, built on the shape-only device and counted
(num_parameters), and says what is wrong, with the numbers, naming the usual slips when it sees one."""
from __future__ import annotations

import math
import numbers

from tinygrad_block import nn
from tinygrad_block.measure import meta_lm

from .common import CheckFailed

def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _counted(cfg: nn.BlockConfig) -> int:
    """The oracle: the model built on the shape-only device, its parameters added up."""
    return meta_lm(cfg).num_parameters()


LLAMA_CASES = [("llama2-7b", nn.preset("llama2-7b")), ("llama2-70b", nn.preset("llama2-70b")),
               ("llama3-8b", nn.preset("llama3-8b")), ("tinyllama-1.1b", nn.preset("tinyllama-1.1b")),
               ("smollm-135m (tied)", nn.preset("smollm-135m")), ("tiny", nn.preset("tiny")),
               ("llama3-70b tied", nn.preset("llama3-70b").with_(tie_embeddings=True))]


def _llama_hint(cfg: nn.BlockConfig, got: int, want: int) -> str:
    """The usual slip that gives exactly `got`, if any."""
    d, L, V = cfg.d_model, cfg.n_layers, cfg.vocab_size
    full_kv = 2 * L * d * (d - cfg.n_kv_heads * cfg.d_head)
    slips = [(want - (2 * L + 1) * d, "that leaves out every norm: each block has two RMSNorm gains of d_model, "
                                      "and there is a final norm of d_model"),
             (want - 2 * L * d, f"that leaves out the blocks' norms: 2 x d_model = {2 * d:,} per block"),
             (want - d, f"that leaves out the final RMSNorm, d_model = {d:,} parameters"),
             (want + full_kv, f"under GQA W_K and W_V are d_model x (n_kv_heads * d_head) = {d:,} x "
                              f"{cfg.n_kv_heads * cfg.d_head:,}, not d_model x d_model: only n_kv_heads = "
                              f"{cfg.n_kv_heads} key/value heads"),
             (want + V * d if cfg.tie_embeddings else None,
              "the head is tied to the embedding (cfg.tie_embeddings): the two are one matrix, counted once"),
             (want - V * d if not cfg.tie_embeddings else None,
              f"that leaves out the LM head, vocab_size x d_model = {V * d:,} (this model does not tie it)")]
    return next((": " + why for value, why in slips if value is not None and value != want and got == value), "")


def check_llama_params(solution) -> None:
    """Each case against the model built on meta: MHA and GQA, tied and untied heads."""
    for name, cfg in LLAMA_CASES:
        want = _counted(cfg)
        got = solution.llama_params(cfg)
        call = f"llama_params({name})"
        if not _is_int(got):
            raise CheckFailed(f"{call} returned {got!r}, a {type(got).__name__}; return an int (a count of "
                              "parameters is a whole number: no division is needed)")
        if got != want:
            raise CheckFailed(f"{call} = {got:,}, but the model built on the shape-only device has {want:,} "
                              f"(off by {got - want:+,}){_llama_hint(cfg, got, want)}")


TIED_CASES = [("llama3-70b", nn.preset("llama3-70b")), ("llama3-8b", nn.preset("llama3-8b")),
              ("llama2-7b", nn.preset("llama2-7b")), ("smollm-135m (already tied)", nn.preset("smollm-135m"))]


def check_tied_saving(solution) -> None:
    """Each case against the untied and the tied model built on meta: the difference of their counts, and that
    difference over the untied count."""
    for name, cfg in TIED_CASES:
        untied, tied = _counted(cfg.with_(tie_embeddings=False)), _counted(cfg.with_(tie_embeddings=True))
        want_saved, want_fraction = untied - tied, (untied - tied) / untied
        got = solution.tied_saving(cfg)
        call = f"tied_saving({name})"
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise CheckFailed(f"{call} returned {got!r}; return a pair (saved, fraction)")
        saved, fraction = got
        if not _is_int(saved):
            raise CheckFailed(f"{call}: saved = {saved!r}, a {type(saved).__name__}; return it as an int")
        if saved != want_saved:
            hint = ""
            if saved == 2 * want_saved:
                hint = (": tying removes one matrix, not two. The embedding stays and the head becomes the same "
                        "matrix, so the saving is one vocab_size x d_model")
            elif saved == 0 and cfg.tie_embeddings:
                hint = (": this cfg is already tied, but the question is what tying saves for its architecture, "
                        "i.e. the untied model minus the tied one")
            raise CheckFailed(f"{call}: saved = {saved:,}, but the untied model has {untied:,} parameters and the "
                              f"tied one {tied:,}: {want_saved:,} fewer{hint}")
        if not isinstance(fraction, numbers.Real) or isinstance(fraction, bool) or not math.isfinite(fraction):
            raise CheckFailed(f"{call}: fraction = {fraction!r}; return a float between 0 and 1")
        if abs(fraction - want_fraction) > 1e-12 * want_fraction:
            hint = ""
            if abs(fraction - want_saved / tied) < 1e-12:
                hint = ": that divides by the tied model's count; the fraction is of the untied model"
            elif abs(fraction - 100 * want_fraction) < 1e-9:
                hint = ": that is a percentage; return the fraction (between 0 and 1)"
            raise CheckFailed(f"{call}: fraction = {fraction!r}, expected {want_saved:,} / {untied:,} = "
                              f"{want_fraction!r}{hint}")


CHECKS = [("llama_params", check_llama_params), ("tied_saving", check_tied_saving)]
