"""Peak memory and time of `LM.from_pretrained`: how many bytes above the loaded weights does loading a checkpoint
need? The aim: peak <= 1.3 x the loaded weights' bytes + 200 MB (one copy of the weights, never two).

A checkpoint of SmolLM-135M's shape (134.5 M parameters, Llama layout, tied) is written once by transformers, in
bfloat16 (the way most checkpoints are published) and in float32. Each load runs in a fresh Python process, which
reports the growth of its peak resident memory (VmHWM) across the call, beside the bytes of the parameters it
holds after. transformers' own from_pretrained of the same folder, in the same process setup, is the reference.
Rounds alternate the engines; the table gives medians with their spread (min-max).

    python tools/bench_load.py [--rounds 3] [--folder /tmp/bench_load] [--threads 1]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMOLLM = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
              num_key_value_heads=3, vocab_size=49152, max_position_embeddings=2048, tie_word_embeddings=True,
              rope_theta=10000.0, bos_token_id=None, eos_token_id=None, pad_token_id=None)

CHILD = """
import json, sys, time
def peak_rss():   # VmHWM: this process's peak resident memory (ru_maxrss would carry the parent's over exec)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
engine, folder, dtype = sys.argv[1:4]
if engine == "tinygrad_block":
    import tinygrad_block as tb
    from tinygrad_block import nn
    load = lambda: nn.LM.from_pretrained(folder, dtype=getattr(tb, dtype))
    nbytes = lambda m: sum(p.nbytes for p in m.parameters())
else:
    import torch, transformers
    load = lambda: transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
    nbytes = lambda m: sum(p.numel() * p.element_size() for p in m.parameters())
before = peak_rss()
start = time.perf_counter()
model = load()
seconds = time.perf_counter() - start
peak = peak_rss()
print(json.dumps({"grew": peak - before, "weights": nbytes(model), "seconds": seconds}))
"""


def write_checkpoints(folder: Path) -> dict[str, Path]:
    """The SmolLM-shaped model, random, saved by transformers in bfloat16 and float32 (once; reused after)."""
    out = {"bf16": folder / "bf16", "f32": folder / "f32"}
    if all((p / "model.safetensors").is_file() for p in out.values()):
        return out
    import torch
    import transformers
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMOLLM))
    model.save_pretrained(out["f32"])
    model.to(torch.bfloat16).save_pretrained(out["bf16"])
    return out


def measure(engine: str, folder: Path, dtype: str, threads: int) -> dict:
    env = os.environ | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads),
                        "OPENBLAS_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run([sys.executable, "-c", CHILD, engine, str(folder), dtype], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/bench_load"))
    parser.add_argument("--threads", type=int, default=1, help="BLAS and OpenMP threads of each process")
    args = parser.parse_args()
    folders = write_checkpoints(args.folder)
    cases = [("bf16", "float32"), ("f32", "float32")]
    engines = ["tinygrad_block", "transformers"]
    results = {(c, e): [] for c in cases for e in engines}
    for r in range(args.rounds):
        for case in cases:
            for engine in engines if r % 2 == 0 else engines[::-1]:
                results[case, engine].append(measure(engine, folders[case[0]], case[1], args.threads))
    print(f"LM.from_pretrained vs transformers, SmolLM-135M shape, {args.rounds} rounds, a fresh process each, "
          f"{args.threads} thread(s); peak = growth of the peak resident memory across the call")
    print(f"{'file -> model':<18}{'engine':<16}{'weights MB':>11}{'peak MB':>9}{'peak / weights':>22}"
          f"{'aim (1.3 w + 200 MB)':>22}{'seconds':>16}")
    for case in cases:
        for engine in engines:
            runs = results[case, engine]
            weights = runs[0]["weights"]
            ratios = [x["grew"] / x["weights"] for x in runs]
            peak = statistics.median(x["grew"] for x in runs)
            secs = [x["seconds"] for x in runs]
            aim = 1.3 * weights + 200e6
            verdict = "met" if max(x["grew"] for x in runs) <= aim else "MISSED"
            print(f"{case[0] + ' -> ' + case[1]:<18}{engine:<16}{weights / 1e6:>11.1f}{peak / 1e6:>9.1f}"
                  f"{statistics.median(ratios):>9.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
                  f"{aim / 1e6:>14.1f} {verdict:<7}{statistics.median(secs):>8.2f} ({min(secs):.2f}-{max(secs):.2f})")


if __name__ == "__main__":
    main()
