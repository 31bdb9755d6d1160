"""Generation speed with and without the KV cache: tokens per second of `LM.generate` from a short prompt up to
several total lengths, the speed-up the cache gives at each, and a PNG of both curves.

Without the cache, step t recomputes all t positions (work growing like t, and t^2 in attention); with it, step t
runs one token against t cached keys. So the speed-up grows with the length. Each round runs both, in
alternating order, at every length; the table gives medians over the rounds with their spread (min-max), the
speed-up taken within each round. Then prefill and decode apart, from the engine's own counts (measure.py).

    OPENBLAS_NUM_THREADS=1 python tools/bench_generate.py [--lengths 16 32 ... 1024] [--rounds 3]
        [--out out/bench_generate.png] [--d-model 64] [--layers 2] [--dtype float32] [--device cpu]

One BLAS thread: on a 2-core machine that is busy with anything else, OpenBLAS's threads spin against each other
once the matrices pass its threading cut-off, and the recomputing runs turn ten times slower at random.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import tinygrad_block as tb
from tinygrad_block import measure, nn

PROMPT = 4


def config(d_model: int, n_layers: int, max_len: int) -> nn.BlockConfig:
    """The tiny preset's shape (4 query heads, 2 KV heads, d_ff = 8/3 d_model), resized."""
    return nn.preset("tiny").with_(d_model=d_model, d_ff=(8 * d_model // 3 + 3) // 4 * 4, n_layers=n_layers,
                                   max_seq_len=max_len, name=f"d{d_model}-l{n_layers}")


def seconds(model: nn.LM, prompt: tb.Tensor, new: int, use_cache: bool) -> float:
    start = time.perf_counter()
    out = model.generate(prompt, new, temperature=0, use_cache=use_cache)
    out.numpy()                                                       # the tokens are back on the host
    return time.perf_counter() - start


def run(model: nn.LM, lengths: list[int], rounds: int) -> dict[int, dict[str, list[float]]]:
    """{length: {'cached': [tokens/s per round], 'uncached': [...], 'speedup': [...]}}"""
    device = model.embed.weight.device
    prompt = tb.randint(0, model.cfg.vocab_size, (1, PROMPT), generator=tb.Generator(1), device=device)
    seconds(model, prompt, 2, True)                                  # warm up
    results = {n: {"cached": [], "uncached": [], "speedup": []} for n in lengths}
    for r in range(rounds):
        for n in lengths:
            new = n - PROMPT
            order = (True, False) if r % 2 == 0 else (False, True)
            t = {use: seconds(model, prompt, new, use) for use in order}
            results[n]["cached"].append(new / t[True])
            results[n]["uncached"].append(new / t[False])
            results[n]["speedup"].append(t[False] / t[True])
        print(f"  round {r + 1}/{rounds} done", flush=True)
    return results


def spread(values: list[float], fmt: str) -> str:
    return f"{format(statistics.median(values), fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def report(results: dict, cfg: nn.BlockConfig) -> None:
    print(f"\ngreedy generation from a {PROMPT}-token prompt, batch 1; medians (min-max) over the rounds")
    print(f"{'length':>7} {'new':>5} {'cached tok/s':>24} {'uncached tok/s':>24} {'speed-up':>22}")
    for n, r in results.items():
        print(f"{n:>7} {n - PROMPT:>5} {spread(r['cached'], '.0f'):>24} {spread(r['uncached'], '.0f'):>24} "
              f"{spread(r['speedup'], '.2f'):>22}")
    n = max(results)
    prefill, decode = measure.generation_phases(cfg, n - 1)
    print(f"\nprefill of {n - 1} tokens vs one decode step at context {n} (float32, counted on meta):")
    for p in (prefill, decode):
        print(f"  {p.name:<8} {p.tokens:>5} tokens  {p.flops:>14,} FLOPs  weights {p.weight_bytes:>10,} B  "
              f"cache {p.cache_bytes:>10,} B  intensity {p.intensity:8.2f} FLOP/B")


def plot(results: dict, path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = list(results)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for key, label in (("cached", "with KV cache"), ("uncached", "recomputing")):
        med = [statistics.median(results[n][key]) for n in lengths]
        err = [[m - min(results[n][key]) for m, n in zip(med, lengths)],
               [max(results[n][key]) - m for m, n in zip(med, lengths)]]
        ax1.errorbar(lengths, med, yerr=err, marker="o", capsize=3, label=label)
    ax1.set(xscale="log", yscale="log", xlabel="total length (tokens)", ylabel="tokens / s", title=title)
    ax1.legend()
    med = [statistics.median(results[n]["speedup"]) for n in lengths]
    err = [[m - min(results[n]["speedup"]) for m, n in zip(med, lengths)],
           [max(results[n]["speedup"]) - m for m, n in zip(med, lengths)]]
    ax2.errorbar(lengths, med, yerr=err, marker="o", capsize=3, color="C2")
    ax2.set(xscale="log", xlabel="total length (tokens)", ylabel="speed-up (x)", title="cache speed-up")
    for ax in (ax1, ax2):
        ax.set_xticks(lengths, [str(n) for n in lengths])
        ax.minorticks_off()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"\nsaved {path.resolve()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64, 128, 256, 512, 1024])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, default=Path("out/bench_generate.png"))
    args = ap.parse_args()
    if min(args.lengths) <= PROMPT:
        ap.error(f"--lengths must exceed the {PROMPT}-token prompt")
    cfg = config(args.d_model, args.layers, max(args.lengths))
    model = nn.LM(cfg, generator=tb.Generator(0), dtype=args.dtype, device=args.device)
    print(f"{cfg.name}: d_model {cfg.d_model}, {cfg.n_layers} layers, {cfg.n_heads} heads / {cfg.n_kv_heads} KV heads, "
          f"vocab {cfg.vocab_size}, {model.num_parameters():,} parameters, {args.dtype} on {args.device}")
    results = run(model, sorted(args.lengths), args.rounds)
    report(results, cfg)
    plot(results, args.out, f"{cfg.name}, {args.dtype}, {args.device}")


if __name__ == "__main__":
    main()
