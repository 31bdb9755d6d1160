"""Generation speed, two ways.

`engines` (the default): greedy decoding tokens/s of LM.generate compiled (tb.jit replaying each decode step over
the static KV cache), the same decoder run eagerly, and transformers' `generate` with its own (dynamic) cache,
from the same random Llama weights (our save_pretrained, transformers' from_pretrained) and the same prompt, at
several sizes. The three must write the same tokens (compiled and eager exactly; transformers is reported). Each
round times one generate call of every engine, the order rotating; the table gives tokens/s, medians (min-max)
over the rounds, and the ratios taken within each round, medians (min-max). Then the memory-bandwidth bound: a
decode step reads every weight once (and the cache), so tokens/s <= bandwidth / bytes per token, the bandwidth
measured here as one thread's matrix-vector product over a float32 matrix far larger than the caches. With
`--device cuda` the three engines run on the GPU (transformers through PyTorch's CUDA) and the CPU's bound and
floors are left out.

`topk`: sampled decoding at temperature 0.8 with top_k from 1 to the whole vocabulary, compiled: tokens/s and the
peak memory of one generate call (numpy's allocations, through tracemalloc) at each k, and the ratio of each k's
time to k = 1's within each round. The k-th largest logit is one selection pass over each row, so neither should
grow with k.

`cache`: with and without the KV cache, from a short prompt up to several total lengths (the speed-up grows with
the length), and a PNG of both curves; then prefill and decode apart, from the engine's own counts (measure.py).

    python tools/bench_generate.py [engines] [--sizes 64x2 256x4 512x8] [--new 100] [--rounds 7] [--unfused]
        [--device cpu|cuda]
    python tools/bench_generate.py topk [--vocab 8192] [--ks 1 16 256 1024 8192] [--new 50] [--rounds 5]
    python tools/bench_generate.py cache [--lengths 16 32 ... 1024] [--rounds 3] [--d-model 64] [--layers 2]
        [--out out/bench_generate.png] [--dtype float32] [--device cpu]

One thread for each engine: the script starts itself again with OPENBLAS_NUM_THREADS, OMP_NUM_THREADS and
NUMEXPR_NUM_THREADS set to 1 unless the environment sets them, and calls torch.set_num_threads(1). On a 2-core
machine that is busy with anything else, BLAS threads spin against each other and the timings turn erratic.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import tinygrad_block as tb
from tinygrad_block import accounting, measure, nn

THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMEXPR_NUM_THREADS")
ENGINES = ("compiled", "eager", "transformers")
FLOORS = ("numpy matvecs", "torch matvecs")
PROMPT = 4


def config(d_model: int, n_layers: int, max_len: int) -> nn.BlockConfig:
    """The tiny preset's shape (4 query heads, 2 KV heads, d_ff = 8/3 d_model), resized."""
    return nn.preset("tiny").with_(d_model=d_model, d_ff=(8 * d_model // 3 + 3) // 4 * 4, n_layers=n_layers,
                                   max_seq_len=max_len, name=f"d{d_model}-l{n_layers}")


def seconds(model: nn.LM, prompt: tb.Tensor, new: int, use_cache: bool) -> float:
    """One eager generate call (jit=False: the cache's own effect, not the compiler's)."""
    start = time.perf_counter()
    out = model.generate(prompt, new, temperature=0, use_cache=use_cache, jit=False)
    out.numpy()                                                       # the tokens are back on the host
    return time.perf_counter() - start


def run_cache(model: nn.LM, lengths: list[int], rounds: int) -> dict[int, dict[str, list[float]]]:
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


def report_cache(results: dict, cfg: nn.BlockConfig) -> None:
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


# ---------------------------------------------------------------- engines: compiled, eager, transformers
def pin_threads() -> None:
    """Start this script again with one thread for BLAS, OpenMP and numexpr, unless the environment says."""
    missing = {name: "1" for name in THREADS if name not in os.environ}
    if missing:
        os.execve(sys.executable, [sys.executable, *sys.argv], os.environ | missing)


def size(text: str) -> tuple[int, int]:
    """'256x4' -> (d_model 256, 4 layers)."""
    d_model, layers = text.lower().split("x")
    return int(d_model), int(layers)


def engines(d_model: int, n_layers: int, new: int, folder: Path, fuse: bool,
            device: str = "cpu") -> tuple[nn.BlockConfig, dict]:
    """{engine: generate() -> the ids as a list}: our model compiled and eager, and transformers' LlamaForCausalLM
    loaded from the same weights, written to `folder` by our save_pretrained, all on `device`; on the CPU, the
    matrix-vector floors too."""
    import torch
    import transformers

    cfg = config(d_model, n_layers, PROMPT + new)
    model = nn.LM(cfg, generator=tb.Generator(0))
    model.save_pretrained(folder)
    dev = device if device.startswith("cuda") else "cpu"                # PyTorch's name of it
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval().to(dev)
    model.to(device)
    prompt = tb.randint(0, cfg.vocab_size, (1, PROMPT), generator=tb.Generator(1), device=device)
    theirs = torch.tensor(prompt.numpy(), device=dev)

    def ours(jit: bool):
        return lambda: model.generate(prompt, new, temperature=0, jit=jit).numpy()[0].tolist()

    def transformers_generate():
        with torch.inference_mode():
            out = hf.generate(theirs, max_new_tokens=new, min_new_tokens=new, do_sample=False, eos_token_id=None,
                              pad_token_id=0)
        return out[0].tolist()
    model.decoder(1, PROMPT + new, jit=True, fuse=fuse)             # kept by the model: generate(jit=True) uses it
    return cfg, {"compiled": ours(True), "eager": ours(False), "transformers": transformers_generate,
                 **(matvec_floors(model, new) if dev == "cpu" else {})}


def matvec_floors(model: nn.LM, new: int) -> dict:
    """{name: run()}: `new` passes of the matrix-vector products of one decode step alone, one per weight matrix it
    reads (every 2-D parameter but the gathered embedding, which a tied head reads whole), in numpy (x @ W.T, as
    our Linear) and in torch (F.linear, as transformers'): what each BLAS allows, nothing else."""
    import numpy as np
    import torch

    cfg = model.cfg
    weights = [p.numpy() for n, p in model.named_parameters() if p.ndim == 2 and n != "embed.weight"]
    weights += [model.embed.weight.numpy()] if cfg.tie_embeddings else []
    x = np.ones((1, cfg.d_model), dtype=np.float32)
    inputs = {w.shape[1]: np.ones((1, w.shape[1]), dtype=np.float32) for w in weights} | {cfg.d_model: x}
    tweights, tinputs = [torch.tensor(w) for w in weights], {n: torch.tensor(a) for n, a in inputs.items()}

    def numpy_floor():
        for _ in range(new):
            for w in weights:
                inputs[w.shape[1]] @ w.T
        return None

    def torch_floor():
        with torch.inference_mode():
            for _ in range(new):
                for w in tweights:
                    torch.nn.functional.linear(tinputs[w.shape[1]], w)
        return None
    return {"numpy matvecs": numpy_floor, "torch matvecs": torch_floor}


def timed(run) -> tuple[float, list]:
    start = time.perf_counter()
    ids = run()
    return time.perf_counter() - start, ids


def compare(d_model: int, n_layers: int, new: int, rounds: int, fuse: bool, device: str = "cpu") -> dict:
    """Tokens/s of every engine per round (order rotating), the ratios within each round, and the tokens."""
    with tempfile.TemporaryDirectory() as folder:
        cfg, run = engines(d_model, n_layers, new, Path(folder), fuse, device)
        tokens = {engine: run[engine]() for engine in run}              # warm-up; compiled captures its steps here
        run["compiled"]()                                               # ... and its prefill's second capture here
        speed = {engine: [] for engine in run}
        for r in range(rounds):                                         # compiled and transformers side by side
            pair = ENGINES[:3:2] if r % 2 == 0 else ENGINES[2::-2]
            for engine in (*pair, "eager", *(f for f in FLOORS if f in run)):
                seconds, ids = timed(run[engine])
                assert ids == tokens[engine], f"{engine} wrote other tokens on round {r + 1}"
                speed[engine].append(new / seconds)
        print(f"  {cfg.name} done", flush=True)
    assert tokens["compiled"] == tokens["eager"], "compiled and eager generation wrote different tokens"
    ratios = {f"{a} / {b}": [x / y for x, y in zip(speed[a], speed[b])]
              for a, b in (("compiled", "transformers"), ("eager", "transformers"), ("compiled", "eager"))}
    same = next((i for i, (a, b) in enumerate(zip(tokens["compiled"], tokens["transformers"])) if a != b), None)
    return {"cfg": cfg, "speed": speed, "ratios": ratios, "first_difference": same}


def bandwidth(megabytes: int = 256, repeats: int = 5) -> float:
    """Bytes per second that one thread streams through a matrix-vector product (float32, numpy's BLAS) over a
    matrix of `megabytes`, far larger than the caches: the best of `repeats`."""
    import numpy as np
    n = int((megabytes * 2 ** 20 / 4) ** 0.5)
    W, x = np.ones((n, n), dtype=np.float32), np.ones(n, dtype=np.float32)
    best = min(timed(lambda: W @ x)[0] for _ in range(repeats))
    return W.nbytes / best


def bytes_per_token(cfg: nn.BlockConfig, max_len: int) -> int:
    """What one decode step reads: every weight (the embedding only for its looked-up row) and the static cache."""
    decode = measure.generation_phases(cfg, max_len - 1)[1]
    return decode.weight_bytes + accounting.kv_cache_bytes(cfg, max_len, 1, 4)


def report_engines(results: list[dict], new: int, rounds: int, bytes_per_s: float | None) -> None:
    """The tokens/s table and the ratios; with `bytes_per_s` (the CPU's), the bound and each engine's share."""
    print(f"\ngreedy generation of {new} tokens after a {PROMPT}-token prompt, batch 1, float32; {rounds} rounds, "
          "medians (min-max)")
    print(f"{'model':<10} {'params':>11} {'compiled tok/s':>20} {'eager tok/s':>18} {'transformers tok/s':>20}")
    for r in results:
        cfg, sp = r["cfg"], r["speed"]
        print(f"{cfg.name:<10} {accounting.total_params(cfg):>11,} " + " ".join(
            f"{spread(sp[e], ',.0f'):>{w}}" for e, w in zip(ENGINES, (20, 18, 20))))
    names = " ".join(f"{name:>22}" for name in results[0]["ratios"])
    print(f"\n{'model':<10} {names}   same tokens as transformers")
    for r in results:
        same = "all" if r["first_difference"] is None else f"up to token {r['first_difference']}"
        print(f"{r['cfg'].name:<10} " + " ".join(f"{spread(v, '.2f'):>22}" for v in r["ratios"].values())
              + f"   {same}")
    if bytes_per_s is None:
        return
    print(f"\nmemory bandwidth, one thread (float32 matrix-vector product over 256 MB): {bytes_per_s / 1e9:.1f} GB/s.\n"
          "A decode step reads every weight once: tokens/s <= bandwidth / bytes per token (the bound). The matvec\n"
          "floors time a step's matrix-vector products alone, in numpy and in torch (tokens/s, medians). Each\n"
          "engine's share of the bound / of its own BLAS's floor:")
    print(f"{'model':<10} {'bytes/token':>12} {'bound tok/s':>12} {'numpy matvecs':>14} {'torch matvecs':>14} "
          f"{'compiled':>16} {'transformers':>16}")
    for r in results:
        read = bytes_per_token(r["cfg"], PROMPT + new)
        bound = bytes_per_s / read
        med = {e: statistics.median(v) for e, v in r["speed"].items()}
        shares = [f"{med[e] / bound:.0%} / {med[e] / med[floor]:.0%}"
                  for e, floor in (("compiled", "numpy matvecs"), ("transformers", "torch matvecs"))]
        print(f"{r['cfg'].name:<10} {read:>12,} {bound:>12,.0f} {med['numpy matvecs']:>14,.0f} "
              f"{med['torch matvecs']:>14,.0f} {shares[0]:>16} {shares[1]:>16}")


# ---------------------------------------------------------------- top-k: time and memory at each k
def run_topk(vocab: int, ks: list[int], new: int, rounds: int) -> dict:
    """{k: {'tok/s': [per round], 'vs k=ks[0]': [time ratio per round], 'peak MB': one traced call}}."""
    import tracemalloc
    cfg = config(64, 2, PROMPT + new).with_(vocab_size=vocab)
    model = nn.LM(cfg, generator=tb.Generator(0))
    prompt = tb.randint(0, vocab, (1, PROMPT), generator=tb.Generator(1))

    def run(k: int) -> None:
        model.generate(prompt, new, temperature=0.8, top_k=k, generator=tb.Generator(2)).numpy()
    results = {k: {"tok/s": [], f"vs k={ks[0]}": []} for k in ks}
    for k in ks:                                                      # capture each k's decoder, then trace one call
        run(k), run(k)
        tracemalloc.start()
        run(k)
        results[k]["peak MB"] = tracemalloc.get_traced_memory()[1] / 1e6
        tracemalloc.stop()
    for r in range(rounds):
        t = {}
        for k in ks if r % 2 == 0 else ks[::-1]:
            run(k)                                                    # the decoder for k made again: replays
            t[k] = timed(lambda k=k: run(k))[0]
        for k in ks:
            results[k]["tok/s"].append(new / t[k])
            results[k][f"vs k={ks[0]}"].append(t[k] / t[ks[0]])
    return {"cfg": cfg, "results": results}


def report_topk(out: dict, new: int, rounds: int) -> None:
    cfg = out["cfg"]
    print(f"\nsampled generation (temperature 0.8, top_k) of {new} tokens, vocabulary {cfg.vocab_size:,}, "
          f"d_model {cfg.d_model}, {cfg.n_layers} layers, compiled; {rounds} rounds, medians (min-max)")
    first = next(iter(out["results"]))
    print(f"{'k':>7} {'tok/s':>22} {f'time / k={first}':>20} {'peak MB, one call':>18}")
    for k, r in out["results"].items():
        print(f"{k:>7,} {spread(r['tok/s'], ',.0f'):>22} {spread(r[f'vs k={first}'], '.2f'):>20} "
              f"{r['peak MB']:>18.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", nargs="?", choices=("engines", "topk", "cache"), default="engines")
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default: engines 7, cache 3)")
    ap.add_argument("--sizes", type=size, nargs="+", default=[(64, 2), (256, 4), (512, 8)],
                    help="engines: d_model x layers of each model (the tiny preset's shape, resized)")
    ap.add_argument("--new", type=int, default=100, help="engines, topk: tokens generated per call")
    ap.add_argument("--unfused", action="store_true", help="engines: compile without fusion")
    ap.add_argument("--vocab", type=int, default=8192, help="topk: the vocabulary")
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 16, 256, 1024, 8192], help="topk: the values of top_k")
    ap.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64, 128, 256, 512, 1024],
                    help="cache: total lengths")
    ap.add_argument("--d-model", type=int, default=64, help="cache: the model's width")
    ap.add_argument("--layers", type=int, default=2, help="cache: the model's depth")
    ap.add_argument("--dtype", default="float32", help="cache: the model's dtype")
    ap.add_argument("--device", default="cpu", help="engines, cache: where the models run (cpu or cuda)")
    ap.add_argument("--out", type=Path, default=Path("out/bench_generate.png"), help="cache: the PNG")
    args = ap.parse_args()
    pin_threads()
    threads = ", ".join(f"{name}={os.environ.get(name)}" for name in THREADS)
    if args.mode == "engines":
        import torch
        import transformers
        torch.set_num_threads(1)
        print(f"torch {torch.__version__} on {torch.get_num_threads()} thread, transformers "
              f"{transformers.__version__}; {threads}; on {args.device}")
        rounds = args.rounds or 7
        results = [compare(d, n, args.new, rounds, not args.unfused, args.device) for d, n in args.sizes]
        report_engines(results, args.new, rounds, None if args.device.startswith("cuda") else bandwidth())
        return
    if args.mode == "topk":
        print(f"tinygrad_block on numpy; {threads}")
        rounds = args.rounds or 5
        report_topk(run_topk(args.vocab, args.ks, args.new, rounds), args.new, rounds)
        return
    if min(args.lengths) <= PROMPT:
        ap.error(f"--lengths must exceed the {PROMPT}-token prompt")
    cfg = config(args.d_model, args.layers, max(args.lengths))
    model = nn.LM(cfg, generator=tb.Generator(0), dtype=args.dtype, device=args.device)
    print(f"{cfg.name}: d_model {cfg.d_model}, {cfg.n_layers} layers, {cfg.n_heads} heads / {cfg.n_kv_heads} KV heads, "
          f"vocab {cfg.vocab_size}, {model.num_parameters():,} parameters, {args.dtype} on {args.device}; {threads}")
    results = run_cache(model, sorted(args.lengths), args.rounds or 3)
    report_cache(results, cfg)
    plot(results, args.out, f"{cfg.name}, {args.dtype}, {args.device}")


if __name__ == "__main__":
    main()
