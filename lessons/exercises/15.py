"""Lesson 15's exercises: the LoRA layer by hand, LoRA's parameter saving, DeepNorm's constants, and the total and
active parameters of a mixture of experts. Each check compares with an independent oracle (nn.Linear with LoRA
and manual.linear_forward with an Adapter; the parameters of real modules; the DeepNet formula; a model built on
the shape-only device) and says what is wrong, with the numbers, naming the usual slips."""
from __future__ import annotations

import numpy as np

import tinygrad_block as tb
from tinygrad_block import manual, nn

from .common import CheckFailed, tensor_result

# ---------------------------------------------------------------- lora_forward
def check_lora_forward(solution) -> None:
    """Against nn.Linear holding the same W, A, B (float64), and numpy; then the gradient reaching A and B."""
    r = np.random.default_rng(13)
    N, d_in, d_out, rank, alpha = 5, 14, 10, 3, 6.0
    W, A, B = r.standard_normal((d_out, d_in)), r.standard_normal((rank, d_in)), r.standard_normal((d_out, rank))
    xn = r.standard_normal((N, d_in))
    layer = nn.Linear(d_in, d_out, generator=tb.Generator(0), dtype=tb.float64, lora_rank=rank, lora_alpha=alpha)
    layer.load_state_dict({"weight": tb.tensor(W, dtype=tb.float64), "lora_A": tb.tensor(A, dtype=tb.float64),
                           "lora_B": tb.tensor(B, dtype=tb.float64)})
    want = layer(tb.tensor(xn, dtype=tb.float64)).numpy()

    def lora(W=W, scale=alpha / rank):                                          # manual's linear with an adapter
        return manual.linear_forward(xn, W, adapter=manual.Adapter(A, B, scale), frozen=True)
    y, cache = lora()
    assert np.abs(want - y).max() < 1e-12                                       # the oracles agree
    x, Wt, At, Bt = (tb.tensor(a, dtype=tb.float64, requires_grad=True) for a in (xn, W, A, B))
    got = tensor_result(solution.lora_forward(x, Wt, At, Bt, alpha), "lora_forward", (N, d_out))
    err = np.abs(got - want).max()
    if err > 1e-10:
        slips = [(lora(scale=alpha), f"the update is scaled by alpha = {alpha:g}; the scale is alpha / r = "
                                     f"{alpha:g} / {rank} = {alpha / rank:g}"),
                 (lora(scale=rank / alpha), f"the scale is upside down: r / alpha = {rank / alpha:g}, not "
                                            f"alpha / r = {alpha / rank:g}"),
                 (lora(scale=1.0), f"the update is not scaled: multiply (x A^T) B^T by alpha / r = {alpha / rank:g}"),
                 (lora(W=np.zeros_like(W)), "the frozen term x W^T is missing: LoRA adds to the layer's output")]
        slips += [(lora(scale=alpha / n), f"the scale is alpha / {n}, with r read from the wrong axis: {n} is "
                                          f"{what}; the rank r = {rank} is the axis that A and B share, A's rows "
                                          "and B's columns")
                  for n, what in ((d_out, "d_out, B's rows"), (d_in, "d_in, A's columns"))]
        hint = next((h for (value, _), h in slips if np.abs(got - value).max() < 1e-10), "")
        raise CheckFailed(f"lora_forward is off by up to {err:.3g} from nn.Linear with the same W, A, B "
                          f"(d_in {d_in}, d_out {d_out}, r {rank}, alpha {alpha:g})" + (f": {hint}" if hint else ""))
    out = solution.lora_forward(x, Wt, At, Bt, alpha)
    if not out.requires_grad:
        raise CheckFailed("no gradient reaches A and B: compute with Tensor ops on the arguments, not numpy arrays")
    out.backward(tb.ones_like(out))
    if At.grad is None or Bt.grad is None:
        raise CheckFailed("no gradient reaches A and B: compute with Tensor ops on the arguments, not numpy arrays")
    dB = manual.linear_backward(np.ones((N, d_out)), cache)[1]["lora_B"]       # (alpha / r) dy^T (x A^T): (d_out, r)
    if np.abs(Bt.grad.numpy() - dB).max() > 1e-9:
        raise CheckFailed("the gradient of B differs from (alpha / r) dy^T (x A^T)")


# ---------------------------------------------------------------- lora_saving
def check_lora_saving(solution) -> None:
    """On square and non-square weights, against the parameter counts of a real nn.Linear with LoRA (meta)."""
    for d, k, r in ((4096, 4096, 16), (4096, 11008, 8), (768, 3072, 4), (64, 48, 2)):
        layer = nn.Linear(k, d, generator=tb.Generator(0), device="meta", lora_rank=r)   # weight (d, k)
        want = layer.weight.size / (layer.lora_A.size + layer.lora_B.size)
        got = solution.lora_saving(d, k, r)
        if isinstance(got, tb.Tensor) and got.size == 1:
            got = got.item()
        if not isinstance(got, (float, int, np.floating, np.integer)) or isinstance(got, bool):
            raise CheckFailed(f"lora_saving must return a number; got {type(got).__name__}")
        if abs(got - want) <= 1e-9 * want:
            continue
        slips = [(1 / want, "that is upside down: the adapter's parameters over the weight's"),
                 (d * k / (r * d), "the adapter has two factors, B (d x r) and A (r x k): r (d + k) parameters, "
                                   "not r d"),
                 (d * k / (r * k), "the adapter has two factors, B (d x r) and A (r x k): r (d + k) parameters, "
                                   "not r k"),
                 (d * k / (r * r), "the adapter has r (d + k) parameters, not r x r"),
                 (d * k - r * (d + k), "that is the difference in parameters; the saving is the ratio d k / "
                                       "(r (d + k))")]
        hint = next((h for value, h in slips if abs(got - value) <= 1e-9 * abs(value)), "")
        raise CheckFailed(f"lora_saving({d}, {k}, {r}) = {got:g}, but the {d} x {k} weight has {layer.weight.size:,} "
                          f"parameters and its adapter {layer.lora_A.size + layer.lora_B.size:,}: {want:g}x"
                          + (f"; {hint}" if hint else ""))


# ---------------------------------------------------------------- deepnorm_alpha_beta
def check_deepnorm_alpha_beta(solution) -> None:
    """For N = 1, 6, 8, 100, 1000 against DeepNet's formulas (and nn.deepnorm_alpha_beta)."""
    for n in (1, 6, 8, 100, 1000):
        want = ((2 * n) ** 0.25, (8 * n) ** -0.25)
        assert np.allclose(want, nn.deepnorm_alpha_beta(n), rtol=1e-15)
        got = solution.deepnorm_alpha_beta(n)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise CheckFailed(f"deepnorm_alpha_beta must return a pair (alpha, beta); got {got!r}")
        a, b = (float(v.item() if isinstance(v, tb.Tensor) else v) for v in got)
        if abs(a - want[0]) <= 1e-12 * want[0] and abs(b - want[1]) <= 1e-12 * want[1]:
            continue
        slips = [((want[1], want[0]), "alpha and beta are swapped: alpha = (2N)^(1/4) > 1 weights the residual, "
                                      "beta = (8N)^(-1/4) < 1 shrinks the initial weights"),
                 ((n ** 0.25, n ** -0.25), "the 4th roots are of 2N and of 8N, not of N"),
                 (((2 * n) ** 0.5, (8 * n) ** -0.5), "those are square roots; DeepNorm takes 4th roots"),
                 ((want[0], (8 * n) ** 0.25), "beta = (8N)^(-1/4), a negative power: it is below 1")]
        hint = next((h for (sa, sb), h in slips if abs(a - sa) <= 1e-12 * sa and abs(b - sb) <= 1e-12 * sb), "")
        raise CheckFailed(f"deepnorm_alpha_beta({n}) = ({a:.6g}, {b:.6g}), but (2N)^(1/4) = {want[0]:.6g} and "
                          f"(8N)^(-1/4) = {want[1]:.6g}" + (f": {hint}" if hint else ""))


# ---------------------------------------------------------------- moe_params
def _counted(cfg: nn.BlockConfig) -> tuple[int, int]:
    """(total, active) from the model built on the shape-only device: every parameter's size, less each block's
    idle experts ((n_experts - top_k) / n_experts of its stacked expert tensors)."""
    model = nn.LM(cfg, generator=tb.Generator(0), device="meta")
    total = sum(p.size for p in model.parameters())
    experts = sum(p.size for name, p in model.named_parameters() if name.endswith(("ffn.gate_proj", "ffn.up_proj",
                                                                                   "ffn.down_proj")))
    return total, total - experts * (cfg.n_experts - cfg.experts_top_k) // cfg.n_experts


def check_moe_params(solution) -> None:
    """Small mixtures (MHA and GQA, tied and untied) and Mixtral-8x7B's shape, against the modules' own sizes."""
    configs = [nn.BlockConfig(d_model=16, n_heads=4, n_kv_heads=2, d_ff=24, n_layers=3, vocab_size=50,
                              n_experts=4, experts_top_k=2, max_seq_len=32),
               nn.BlockConfig(d_model=24, n_heads=4, n_kv_heads=4, d_ff=40, n_layers=2, vocab_size=30,
                              n_experts=6, experts_top_k=1, tie_embeddings=True, max_seq_len=32),
               nn.preset("mistral-7b").with_(n_experts=8, experts_top_k=2)]
    for cfg in configs:
        want = _counted(cfg)
        got = solution.moe_params(cfg)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise CheckFailed(f"moe_params must return a pair (total, active); got {got!r}")
        got = tuple(int(v) for v in got)
        if got == want:
            continue
        where = (f"d_model {cfg.d_model}, {cfg.n_layers} blocks, {cfg.n_experts} experts, top {cfg.experts_top_k}"
                 f"{', tied' if cfg.tie_embeddings else ''}")
        if got[0] != want[0]:
            head = cfg.vocab_size * cfg.d_model
            hint = ("" if got[0] != want[0] + head or not cfg.tie_embeddings else
                    ": the LM head is tied to the embedding (cfg.tie_embeddings), one matrix counted once")
            raise CheckFailed(f"moe_params total = {got[0]:,}, {'more' if got[0] > want[0] else 'fewer'} than the "
                              f"parameters the model holds ({where}){hint}")
        idle_one_block = (cfg.n_experts - cfg.experts_top_k) * 3 * cfg.d_model * cfg.d_ff
        slips = [(want[0] * cfg.experts_top_k // cfg.n_experts, "that is top_k / n_experts of everything; only the "
                  "experts are idle: attention, norms, router, embedding and head run for every token"),
                 (want[0] - idle_one_block, "the idle experts were left out of one block only: every block has "
                                            "its own"),
                 (want[0], "that is the total: leave out the n_experts - top_k idle experts of every block"),
                 (want[1] - cfg.n_layers * cfg.n_experts * cfg.d_model, "the router runs for every token: its "
                  "parameters are active")]
        hint = next((h for value, h in slips if got[1] == value), "")
        raise CheckFailed(f"moe_params active = {got[1]:,}, {'more' if got[1] > want[1] else 'fewer'} than the "
                          f"parameters one token uses ({where})" + (f": {hint}" if hint else ""))


CHECKS = [("lora_forward", check_lora_forward), ("lora_saving", check_lora_saving),
          ("deepnorm_alpha_beta", check_deepnorm_alpha_beta), ("moe_params", check_moe_params)]
