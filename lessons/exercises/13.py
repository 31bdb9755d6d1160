"""Lesson 13's exercises: the forward FLOPs per token of a whole model, and the utilisation a training run needs.
Each check compares with an independent oracle (the model run on the shape-only device under count_flops, and
accounting.training_days) and says what is wrong, with the numbers, naming the usual slips when it sees one."""
from __future__ import annotations

import math
import numbers

from tinygrad_block import accounting, nn
from tinygrad_block.counting import count_flops
from tinygrad_block.measure import meta_ids, meta_lm

from .common import CheckFailed

def _counted_per_token(cfg: nn.BlockConfig, seq_len: int) -> int:
    """The oracle: the model's forward on ids (1, seq_len) run on meta, its matmul FLOPs per token."""
    with count_flops() as fc:
        meta_lm(cfg)(meta_ids(1, seq_len))                              # (1, seq_len, vocab_size)
    total = fc.total("forward", matmul_only=True)
    assert total % seq_len == 0
    return total // seq_len


FLOP_CASES = [("llama2-7b", nn.preset("llama2-7b"), 4096), ("llama2-70b", nn.preset("llama2-70b"), 4096),
              ("llama2-70b", nn.preset("llama2-70b"), 1), ("llama3-8b", nn.preset("llama3-8b"), 8192),
              ("smollm-135m (tied head)", nn.preset("smollm-135m"), 2048), ("tiny", nn.preset("tiny"), 100)]


def _flops_hint(cfg: nn.BlockConfig, L: int, got: int, want: int) -> str:
    """The usual slip that gives exactly `got`, if any."""
    d, V, n = cfg.d_model, cfg.vocab_size, cfg.n_layers
    d_kv = cfg.n_kv_heads * cfg.d_head
    slips = [(want - 2 * d * V, f"that leaves out the LM head: 2 x d_model x vocab_size = {2 * d * V:,} per token"),
             (want + 2 * d * V, "the embedding is a table lookup (a gather), not a matmul: it costs no FLOPs"),
             (want + n * 4 * d * (d - d_kv), f"under GQA W_K and W_V map d_model = {d:,} to n_kv_heads * d_head = "
                                             f"{d_kv:,} numbers, not to d_model"),
             (want - n * 2 * L * cfg.n_heads * cfg.d_head,
              "q k^T and weights @ V each cost 2 x seq_len x n_heads x d_head per token, 4 x seq_len x d_model in "
              "all; this engine computes the whole square, without halving it for the causal mask"),
             (want * L, "that is the whole sequence; divide by seq_len for the cost per token"),
             (3 * want, "that is training (forward and backward, 3 x the forward); the question is the forward"),
             (want // 2, "that is exactly half: it counts one FLOP per weight (and per product in attention); each "
                         "is a multiply and an add, 2 FLOPs")]
    return next((": " + why for value, why in slips if value != want and got == value), "")


def check_forward_flops_per_token(solution) -> None:
    """Each case against the model's forward counted on meta; the usual slips named."""
    for name, cfg, L in FLOP_CASES:
        want = _counted_per_token(cfg, L)
        got = solution.forward_flops_per_token(cfg, L)
        call = f"forward_flops_per_token({name}, seq_len={L})"
        if not isinstance(got, numbers.Integral) or isinstance(got, bool):
            raise CheckFailed(f"{call} returned {got!r}, a {type(got).__name__}; return an int (every term is a "
                              "whole number of FLOPs per token)")
        if got != want:
            hint = _flops_hint(cfg, L, got, want)
            if not hint and got == 2 * accounting.total_params(cfg):
                hint = (": that is the 2N rule of thumb; count the matmuls instead (no embedding, no norms, and "
                        "attention over the context)")
            side = "more" if got > want else "fewer"
            raise CheckFailed(f"{call} = {got:,}, {side} matmul FLOPs per token than the model's forward counted on "
                              f"the shape-only device{hint}")


MFU_CASES = [("70B on 1.4e12 tokens, 1,000 GPUs of 990 TFLOP/s, 42 days", (70e9, 1.4e12, 1000, 990e12, 42)),
             ("Llama-2-7B on 2e12 tokens, 2,048 GPUs of 312 TFLOP/s, 21 days",
              (6_738_415_616, 2e12, 2048, 312e12, 21)),
             ("124M on 1e10 tokens, 8 GPUs of 312 TFLOP/s, 1.5 days", (124e6, 1e10, 8, 312e12, 1.5))]


def check_mfu_needed(solution) -> None:
    """Each case: training at the returned utilisation must take exactly `days` by accounting.training_days."""
    for name, (N, D, gpus, peak, days) in MFU_CASES:
        got = solution.mfu_needed(N, D, gpus, peak, days)
        call = f"mfu_needed({name})"
        if not isinstance(got, numbers.Real) or isinstance(got, bool) or not math.isfinite(got) or got <= 0:
            raise CheckFailed(f"{call} returned {got!r}; return a positive float (the utilisation as a fraction)")
        want = accounting.training_flops(N, D) / (gpus * peak * days * 86400)           # the fraction of peak
        took = accounting.training_days(accounting.training_flops(N, D), gpus, peak, got)
        if math.isclose(took, days, rel_tol=1e-9):
            continue
        ratio = got / want
        hints = [(1 / 3, "2 N D counts only the forward pass; training costs 6 N D (2N forward and 4N backward "
                         "per token)"),
                 (86400, "peak_flops_per_gpu is per second: a day is 86,400 seconds"),
                 (24, "a day is 86,400 seconds (24 x 3,600), not 3,600"),
                 (1 / 2, "3 N D counts one FLOP per weight and token; a weight's multiply and add are 2 FLOPs, "
                         "so training costs 6 N D (2 N D forward, 4 N D backward)"),
                 (100, "that is a percentage; return the fraction (0.35 for 35 %)"),
                 (7, "days is in days, not weeks"), (1 / 7, "days is in days, not weeks")]
        hint = next((": " + why for r, why in hints if math.isclose(ratio, r, rel_tol=1e-6)),
                    ": the utilisation is the share of the GPUs' peak that the run's training FLOPs need to fit "
                    "in that many days")
        raise CheckFailed(f"{call} = {got!r}, but at that utilisation training takes {took:.4g} days, not "
                          f"{days:g}{hint}")


CHECKS = [("forward_flops_per_token", check_forward_flops_per_token), ("mfu_needed", check_mfu_needed)]
