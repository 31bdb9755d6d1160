"""Lesson 17's exercises: parameters per device under tensor parallelism, training state per device under ZeRO,
and the utilisation of a training step. Each check compares with an independent oracle (the model split on the
shape-only device, the ZeRO stages itemised byte by byte, a training step counted on the shape-only device) and
says what is wrong, with the numbers, naming the usual slips when it sees one."""
from __future__ import annotations

import math
import numbers

from tinygrad_block import accounting, nn
from tinygrad_block.measure import count_model, meta_lm

from .common import CheckFailed

# ---------------------------------------------------------------- tensor parallelism
COLUMN = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")      # split by outputs: rows of W (out, in)
ROW = ("o_proj", "down_proj")                                         # split by inputs: columns of W


def _split_on_meta(cfg: nn.BlockConfig, t: int) -> int:
    """The oracle: every parameter of the model built on meta, sliced as Megatron does (device 0's slice),
    and the slices' sizes added up."""
    total = 0
    for name, p in meta_lm(cfg).named_parameters():
        kind = name.split(".")[-2]
        if kind in COLUMN or kind in ("embed", "lm_head"):            # (out, in) or (vocab, d): split axis 0
            assert p.shape[0] % t == 0, (name, p.shape, t)
            total += p[: p.shape[0] // t].size
        elif kind in ROW:                                             # split axis 1
            assert p.shape[1] % t == 0, (name, p.shape, t)
            total += p[:, : p.shape[1] // t].size
        else:                                                         # norms: whole on every device
            total += p.size
    return total


TP_CASES = [("llama2-7b", 2), ("llama2-7b", 8), ("llama2-70b", 8), ("llama3-8b", 4), ("smollm-135m (tied)", 3),
            ("tiny", 2), ("tiny", 1)]


def _preset(name: str) -> nn.BlockConfig:
    return nn.preset(name.split(" ")[0])


def _tp_hint(cfg: nn.BlockConfig, t: int, got: int, want: int) -> str:
    d, V, n = cfg.d_model, cfg.vocab_size, cfg.n_layers
    norms = (2 * n + 1) * d
    d_kv = cfg.n_kv_heads * cfg.d_head
    slips = [(want - norms + norms // t, "the norms are not split: every device holds them whole (each device "
                                         "normalises the whole d_model-wide stream)"),
             (want + V * d - V * d // t, "the embedding is split too, by vocabulary rows, and so is an untied LM "
                                         "head, by its vocabulary outputs: vocab_size / t of each per device"),
             (want + 2 * (V * d - V * d // t), "the embedding (by vocabulary rows) and the LM head (by its "
                                               "vocabulary outputs) are split too: vocab_size / t of each"),
             (want + 2 * n * d * (d - d_kv) // t, f"under GQA W_K and W_V map d_model = {d:,} to n_kv_heads * "
                                                  f"d_head = {d_kv:,} outputs, not to d_model"),
             (want + cfg.tie_embeddings * V * d // t, "a tied head is the embedding: hold its slice once"),
             (accounting.total_params(cfg), "that is the whole model; each device holds a 1/t share of the matrices")]
    return next((": " + why for value, why in slips if value != want and got == value), "")


def check_tp_params_per_device(solution) -> None:
    """Each case against the model split on the shape-only device; the usual slips named."""
    for name, t in TP_CASES:
        cfg = _preset(name)
        want = _split_on_meta(cfg, t)
        got = solution.tp_params_per_device(cfg, t)
        call = f"tp_params_per_device({name}, t={t})"
        if not isinstance(got, numbers.Integral) or isinstance(got, bool):
            raise CheckFailed(f"{call} returned {got!r}, a {type(got).__name__}; return an int (t divides every "
                              "split dimension, so each share is a whole number)")
        if got != want:
            raise CheckFailed(f"{call} = {got:,}, but splitting the model on the shape-only device leaves "
                              f"{want:,} parameters on each device (off by {got - want:+,})"
                              f"{_tp_hint(cfg, t, got, want)}")


# ---------------------------------------------------------------- ZeRO
PARTS = {"bf16 weights": 2, "bf16 gradients": 2, "fp32 master weights and Adam's two moments": 12}
SHARDED = {0: (), 1: ("fp32 master weights and Adam's two moments",),
           2: ("fp32 master weights and Adam's two moments", "bf16 gradients"), 3: tuple(PARTS)}


def _zero_oracle(n_params: int, n_devices: int, stage: int) -> float:
    """The stage's state, part by part: a sharded part's bytes are divided by the devices."""
    return sum(n_params * size / (n_devices if part in SHARDED[stage] else 1) for part, size in PARTS.items())


ZERO_CASES = [(68_976_648_192, 64), (68_976_648_192, 8), (6_738_415_616, 16), (124_000_000, 1)]


def check_zero_bytes_per_device(solution) -> None:
    """Every stage for each case against the state itemised part by part; wrong stages named."""
    for N, t in ZERO_CASES:
        answers = {stage: _zero_oracle(N, t, stage) for stage in SHARDED}
        for stage, want in answers.items():
            got = solution.zero_bytes_per_device(N, t, stage)
            call = f"zero_bytes_per_device({N:,}, {t}, stage={stage})"
            if not isinstance(got, numbers.Real) or isinstance(got, bool) or not math.isfinite(got):
                raise CheckFailed(f"{call} returned {got!r}; return a number of bytes")
            if math.isclose(got, want, rel_tol=1e-9):
                continue
            parts = ", ".join(SHARDED[stage]) or "nothing"
            whole = ", ".join(part for part in PARTS if part not in SHARDED[stage])
            hint = next((f": that is stage {s}'s answer" for s, v in answers.items()
                         if s != stage and math.isclose(got, v, rel_tol=1e-9) and t > 1), "")
            if stage in (1, 2) and math.isclose(got, 16 * N / t, rel_tol=1e-9):
                hint = f": only stage 3 divides everything; stage {stage} keeps the {whole} whole on every device"
            if not hint and math.isclose(got * 16 / 12, want, rel_tol=1e-9):
                hint = ": 16 bytes per parameter in all: 2 (weights) + 2 (gradients) + 12 (Adam's fp32 state)"
            raise CheckFailed(f"{call} = {got:,.0f}, but stage {stage} divides {parts} by the {t} devices: "
                              f"{want:,.0f} bytes per device{hint}")


# ---------------------------------------------------------------- utilisation of a training step
MFU_CASES = [("llama2-7b", 4, 4096, 0.1, 8, 989.4e12), ("tiny", 8, 128, 0.01, 1, 1e12),
             ("smollm-135m (tied)", 16, 2048, 0.05, 2, 312e12)]


def check_training_mfu(solution) -> None:
    """Each case against the training step counted on the shape-only device (forward + backward, matmuls)."""
    for name, B, L, seconds, devices, peak in MFU_CASES:
        cfg = _preset(name)
        flops = count_model(cfg, B, L).total(matmul_only=True)
        want = flops / (devices * peak * seconds)
        got = solution.training_mfu(cfg, B, L, seconds, devices, peak)
        call = f"training_mfu({name}, batch={B}, seq_len={L}, step_seconds={seconds}, n_devices={devices}, " \
               f"peak_flops={peak:g})"
        if not isinstance(got, numbers.Real) or isinstance(got, bool) or not math.isfinite(got):
            raise CheckFailed(f"{call} returned {got!r}; return the utilisation as a float")
        if math.isclose(got, want, rel_tol=1e-9):
            continue
        six_n = 6 * accounting.total_params(cfg) * B * L / (devices * peak * seconds)
        ratios = [(1 / 3, "that counts the forward only; a training step is forward + backward, 3 x the forward's "
                          "matmuls"),
                  (1 / 2, "that is exactly half: one FLOP per weight and token; each is a multiply and an add, "
                          "2 FLOPs"),
                  (devices, "the step runs on n_devices devices: divide by all of their peaks"),
                  (1 / B, "the step trains batch sequences, not one"),
                  (100, "that is a percentage; return the fraction")]
        hint = next((": " + why for r, why in ratios if r != 1 and math.isclose(got, want * r, rel_tol=1e-6)), "")
        if not hint and math.isclose(got, six_n, rel_tol=1e-9):
            hint = (": that is 6 N per token, the rule of thumb; count the matmuls instead (no embedding lookup, "
                    "and attention over the context)")
        raise CheckFailed(f"{call} = {got!r}, but the step counted on the shape-only device has {flops:,} matmul "
                          f"FLOPs, so the utilisation is {want!r}{hint}")


CHECKS = [("tp_params_per_device", check_tp_params_per_device),
          ("zero_bytes_per_device", check_zero_bytes_per_device), ("training_mfu", check_training_mfu)]
