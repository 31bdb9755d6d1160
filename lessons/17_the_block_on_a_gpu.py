# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Lesson 17 — The same block on a GPU
#
# Lesson 13 counted what a block costs: FLOPs per token, bytes of memory. This lesson sets those counts against
# a clock. It runs the same block on a GPU through CuPy, times it honestly, and asks what fraction of the
# card's peak it reaches. It then times the two phases of generation, prefill and decode, and shows why one
# runs near the peak and the other far below it. Last, it goes beyond one device: a 70B model fits on no
# single GPU, so we count what tensor parallelism and ZeRO-3 put on each device.
#
# **What you will learn**
# - how to time work on a GPU, which returns before the work is done: wait for the device, warm up, take the
#   median;
# - achieved FLOP/s against the FLOP count and the peak, and why a small block reaches almost nothing of it;
# - prefill against decode, measured: one reuses each weight for many tokens, the other reads every weight for
#   one token, and batching is what lifts decode;
# - tensor parallelism (Megatron): Q, K, V and the FFN's first two matrices split by columns, $W_O$ and
#   $W_{down}$ by rows, one all-reduce after each; shown equal to the block, then counted per device for
#   Llama-2-70B;
# - ZeRO-3: weights, gradients and Adam's state each divided by the number of devices, counted, and what it
#   costs in communication.
#
# Without a GPU the lesson runs on the CPU and says so: the counts are the same, the timings are the CPU's.
#
# Run it as a script, `python -m tinygrad_block lesson 17`, or as a notebook,
# `python -m tinygrad_block lesson 17 --notebook --execute` (it lands beside this file).

# %%
import math
import os
import statistics
import time

import numpy as np

import tinygrad_block as tb
from tinygrad_block import accounting as acc
from tinygrad_block import nn
from tinygrad_block.counting import count_flops
from tinygrad_block.device import get_backend
from tinygrad_block.measure import generation_phases, meta_ids, meta_lm
from tinygrad_block.pictures import figure

from course import out_dir, show

OUT = out_dir(17)         # lessons/out/17/: this lesson's pictures
GB, GiB, MiB = 10**9, 2**30, 2**20

# %% [markdown]
# ## 1. Which device this lesson runs on
#
# `get_backend("cuda")` imports CuPy and looks for a GPU. It raises a `RuntimeError` that says what is missing
# when there is no CuPy or no GPU. The lesson then runs everything on `"cpu"` (numpy) and the text below still
# holds, with these differences:
#
# | | on a GPU (`"cuda"`) | on the CPU (`"cpu"`) |
# |---|---|---|
# | when an op returns | at once: the kernel is queued and runs later | when its result is ready |
# | timing | must wait for the device before reading the clock | the clock can be read at once |
# | dtype | float16 on the tensor cores (matmul units), summing in float32 | float32 (numpy: no fast float16 matmul) |
# | sizes | up to a Llama-3-8B block on 8 sequences of 2,048 tokens | small enough to run in seconds |
# | the peak | the card's datasheet figure for dense float16 matmuls | a ceiling: CPUs × 6.5 GHz × 64 FLOPs per cycle |
#
# An H100 SXM's dense float16 peak is commonly quoted as 990 TFLOP/s; NVIDIA's exact figure is 989.4, which
# 990 rounds. Its datasheet prints twice that, 1,979, "with sparsity": a rate only matrices with two zeros in
# every four can use. The PCIe and NVL cards are slower; the table below knows them by name. On a card the
# lesson does not know, the peak is the large matmul measured in section 2.
#
# The CPU's "peak" is no datasheet figure. It is a bound that no CPU core of today exceeds in float32: at most two
# 512-bit fused multiply-add units (each computes $a \cdot b + c$ on 16 float32 numbers at once: 32 FLOPs, so 64 per
# cycle for the two) at a clock below 6.5 GHz. Fractions of it are small by construction. What carries over from the CPU
# to the GPU is the *shape* of the results: which phase wins, what grows with size. The numbers do not.

# %%
try:
    get_backend("cuda")
    DEVICE, WHY = "cuda", None
except RuntimeError as e:
    DEVICE, WHY = "cpu", str(e)
ON_GPU = DEVICE == "cuda"
DTYPE = tb.float16 if ON_GPU else tb.float32
BACKEND = get_backend(DEVICE)
DATASHEET = {"H100 PCIe": 756.5e12, "H100 NVL": 835.5e12, "H200 NVL": 835.5e12,     # dense float16 FLOP/s;
             "H100": 989.4e12, "H200": 989.4e12, "A100": 312e12}                # the first name found wins


def wait() -> None:
    """Block until the device has run everything queued so far (a GPU runs asynchronously; numpy does not)."""
    if ON_GPU:
        BACKEND.active.synchronize()


def card_name() -> str:
    return BACKEND.xp.cuda.runtime.getDeviceProperties(BACKEND.active.id)["name"].decode() if ON_GPU else "CPU"


if ON_GPU:
    PEAK = next((v for k, v in DATASHEET.items() if k in card_name()), None)
    PEAK_WHAT = "datasheet, dense float16" if PEAK else "unknown card: the measured 8192^3 GEMM below"
else:
    PEAK = os.cpu_count() * 6.5e9 * 64
    PEAK_WHAT = f"ceiling, {os.cpu_count()} CPUs x 6.5 GHz x 64 float32 FLOPs per cycle"
    print(f"no GPU here ({WHY.split(';')[0]}): this lesson runs on the CPU, in float32")
print(f"device {BACKEND.name} ({card_name()}), dtype {DTYPE}; peak " +
      (f"{PEAK / 1e12:.3g} TFLOP/s ({PEAK_WHAT})" if PEAK else PEAK_WHAT))
assert DEVICE in ("cuda", "cpu") and (ON_GPU or WHY)
assert DTYPE == (tb.float16 if ON_GPU else tb.float32) and round(DATASHEET["H100"] / 1e13) * 10 == 990
assert round(2 * DATASHEET["H100"] / 1e12) == 1979                  # the datasheet's "with sparsity"

# %% [markdown]
# ## 2. Timing work on a device
#
# On a GPU, `block(x)` returns as soon as its kernels (lesson 16, section 4: one program each) are *queued*. Reading the
# clock then measures Python and the **launches** (the calls that hand each kernel to the device), not the work. So a
# timer must wait for the device before it starts and before it stops. The first calls are slower too: CuPy compiles
# each elementwise kernel the first time it meets it, and on the CPU the first touch of fresh memory and the start of
# the threads of BLAS (the library numpy calls for its matrix products) cost time. So we run the work twice before
# timing, then take the median of five runs, which one slow run cannot move.
#
# The "peak" a GPU is sold with is the rate of its largest matmuls. We also measure it ourselves: one large
# square GEMM (general matrix multiply: a matmul, in the name of the BLAS libraries that do them) through the
# engine's own matmul (cuBLAS, NVIDIA's BLAS, on the GPU; numpy's BLAS on the CPU), its best of ten
# runs. That is about the best this engine can hope for, and it stays below the stated peak.

# %%
def seconds(fn, warmup: int = 2, repeats: int = 5, pick=statistics.median) -> float:
    """Wall-clock seconds of fn() (the median of `repeats` runs, or `pick` of them), waiting for the device
    around each run, after `warmup` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        wait()
        start = time.perf_counter()
        fn()
        wait()
        times.append(time.perf_counter() - start)
    return pick(times)


n = 8192 if ON_GPU else 1024
square = tb.randn(n, n, generator=tb.Generator(0), dtype=DTYPE, device=DEVICE)         # (n, n)
gemm_time = seconds(lambda: square @ square, warmup=3, repeats=10, pick=min)          # a peak: the best run
GEMM = 2 * n**3 / gemm_time                                         # (n, n) @ (n, n): 2 n^3 FLOPs
PEAK = PEAK or GEMM
print(f"{n} x {n} GEMM: {gemm_time * 1e3:.2f} ms, {GEMM / 1e12:.3g} TFLOP/s = {GEMM / PEAK:.1%} of the peak")
assert gemm_time > 0 and 0 < GEMM <= PEAK

# %% [markdown]
# ## 3. One block: the FLOP count against the clock
#
# The block's FLOPs are counted on the shape-only device, forward and backward, and they equal the closed forms
# of `accounting` (lesson 13) exactly. Dividing the matmul FLOPs by the measured time gives the **achieved
# FLOP/s**; dividing that by the peak gives the fraction of the hardware the block uses. Over a training run
# that fraction is the MFU, the *model FLOPs utilisation*.
#
# Only matmul FLOPs count, as in lesson 13: the elementwise ops and reductions are under 2 % of the FLOPs here,
# but far more of the time, since each one reads and writes its whole tensor, and a GPU's peak is a rate of
# matmuls. Lesson 16's memory traffic, and the GPU record in `docs/gpu.md`, say where the rest of the time goes.
#
# Below: a Llama-3-8B block (8 sequences of 2,048 tokens) on the GPU, or a block of $d_{model} = 512$ on 2
# sequences of 256 tokens on the CPU.

# %%
SIZES = {  # B, L, d_model, n_heads, n_kv_heads, d_ff
    "tiny": (2, 16, 64, 4, 2, 172), "small": (4, 128, 256, 8, 4, 688), "medium": (2, 256, 512, 8, 2, 1376),
    "large": (1, 512, 1024, 16, 4, 2752), "xl": (8, 2048, 4096, 32, 8, 14336),   # xl: a Llama-3-8B block
}
RUN = ["tiny", "small", "medium", "large", "xl"] if ON_GPU else ["tiny", "small", "medium"]


def config(size: str) -> tuple[nn.BlockConfig, int, int]:
    """(the block's config, B, L) of a named size."""
    B, L, d, H, H_kv, d_ff = SIZES[size]
    return nn.BlockConfig(d, H, H_kv, d_ff, max_seq_len=L), B, L


def counted(cfg: nn.BlockConfig, B: int, L: int, dtype=DTYPE) -> tuple[int, int, int]:
    """(matmul FLOPs, all FLOPs, primitive calls) of one forward + backward, counted on meta."""
    block = nn.TransformerBlock(cfg, generator=tb.Generator(0), dtype=dtype, device="meta")
    x = tb.zeros(B, L, cfg.d_model, dtype=dtype, device="meta", requires_grad=True)     # (B, L, d_model)
    with count_flops() as fc:
        out = block(x)
        out.backward(tb.ones_like(out))
    return fc.total(matmul_only=True), fc.total(), sum(fc.calls.values())


def time_block(cfg: nn.BlockConfig, B: int, L: int) -> float:
    """Median seconds of one forward + backward of the block on DEVICE."""
    g = tb.Generator(0)
    block = nn.TransformerBlock(cfg, generator=g, dtype=DTYPE, device=DEVICE)
    x = tb.randn(B, L, cfg.d_model, generator=g, dtype=DTYPE, device=DEVICE)              # (B, L, d_model)

    def step():
        out = block(x.detach().requires_grad_())
        out.backward(tb.ones_like(out))
        block.zero_grad()
    return seconds(step)


results = {}
for size in RUN:
    cfg, B, L = config(size)
    mm, every, calls = counted(cfg, B, L)
    assert mm == acc.block_forward_flops(cfg, L, B) + acc.block_backward_flops(cfg, L, B)
    assert every == acc.block_forward_flops(cfg, L, B, matmul_only=False) + \
        acc.block_backward_flops(cfg, L, B, matmul_only=False)
    results[size] = dict(flops=mm, other=every - mm, calls=calls, time=time_block(cfg, B, L))
main = RUN[-1]
r = results[main]
print(f"{main} block (B, L, d_model, heads, kv heads, d_ff = {SIZES[main]}), {DTYPE}, forward + backward:")
print(f"  counted: {r['flops']:,} matmul FLOPs + {r['other']:,} others, in {r['calls']} primitive calls "
      f"(equal to accounting's closed forms)")
print(f"  timed: {r['time'] * 1e3:.2f} ms -> {r['flops'] / r['time'] / 1e12:.4g} TFLOP/s = "
      f"{r['flops'] / r['time'] / PEAK:.2%} of the peak, {r['flops'] / r['time'] / GEMM:.1%} of the measured GEMM")
assert r["time"] > 0 and 0 < r["flops"] / r["time"] < PEAK
assert r["other"] < 0.02 * r["flops"]

# %% [markdown]
# ## 4. Small blocks are bound by launches, large ones by arithmetic
#
# Every primitive call costs a fixed overhead: Python, the engine's bookkeeping, and on a GPU a kernel launch,
# some microseconds in all. A block's forward and backward make 280 primitive calls at every size (288 in
# float16, whose norms add casts to take their statistics in float32). The tiny block does almost no
# arithmetic in them, so its time is that overhead and its FLOP rate is a sliver of the peak. As the block
# grows, its matmuls grow as $B L d^2$ while the number of calls stays the same, and the rate climbs towards
# the GEMM's. Counted in float32, a call of the tiny block does 32,475 matmul FLOPs on average, a call of the
# medium one 33,254,838: a thousand times more work for the same overhead. The last column, time per call,
# shows it from the clock's side: at the small sizes it is the fixed overhead, at the large ones the
# arithmetic inside each call. (On a busy machine the timings scatter: run the lesson again.)

# %%
print(f"{'size':8} {'matmul FLOPs':>18} {'calls':>6} {'ms':>10} {'TFLOP/s':>10} {'of peak':>9} {'us per call':>12}")
for size, r in results.items():
    rate = r["flops"] / r["time"]
    print(f"{size:8} {r['flops']:>18,} {r['calls']:>6} {r['time'] * 1e3:>10.3f} {rate / 1e12:>10.4g} "
          f"{rate / PEAK:>9.3%} {r['time'] / r['calls'] * 1e6:>12.1f}")
rates = [r["flops"] / r["time"] for r in results.values()]
per_call = {size: r["flops"] // r["calls"] for size, r in results.items()}
print("matmul FLOPs per primitive call: " + ", ".join(f"{size} {v:,}" for size, v in per_call.items()))
per_call32 = {size: mm // calls for size in ("tiny", "medium") for mm, _, calls in [counted(*config(size), tb.float32)]}
calls16 = {counted(*config(size), tb.float16)[2] for size in ("tiny", "xl")}    # on meta: any size, any machine
if not rates[-1] > rates[0]:
    print("note: the largest block ran no faster than the smallest: this machine was busy; run the lesson again")
assert all(r["time"] > 0 for r in results.values()) and max(rates) < PEAK
assert {r["calls"] for r in results.values()} == {288 if DTYPE == tb.float16 else 280}   # one program, all sizes
assert calls16 == {288}
assert per_call32 == {"tiny": 32_475, "medium": 33_254_838} and 1000 < per_call32["medium"] / per_call32["tiny"] < 1100

fig = figure(7.5, 4.2)
ax = fig.add_subplot()
flops = [r["flops"] for r in results.values()]
ax.plot(flops, rates, "o-", color="C0", label=f"the block, forward + backward ({DTYPE})")
for size, x, y in zip(results, flops, rates):
    ax.annotate(size, (x, y), xytext=(5, -12), textcoords="offset points", fontsize=9)
ax.axhline(PEAK, color="C3", ls="--", lw=1.2, label=f"peak ({PEAK_WHAT.split(':')[0].split(',')[0]})")
ax.axhline(GEMM, color="0.4", ls=":", lw=1.2, label=f"measured {n}$^3$ GEMM")
ax.set(xscale="log", yscale="log", xlabel="matmul FLOPs per forward + backward",
       ylabel="achieved FLOP/s (matmul FLOPs / time)", ylim=(min(rates) / 3, PEAK * 3),
       title=f"One block on {card_name()}: the FLOP rate by size")
ax.legend(loc="lower right", fontsize=8.5)
show(fig, OUT / "rate_by_size.png")

# %% [markdown]
# ## 5. Prefill and decode, timed
#
# Generation runs a model in two phases (lesson 16). **Prefill** reads the prompt in one call: every weight is
# read once from memory and used for every prompt token. **Decode** makes one token per call: every weight is
# read for that one token, and the KV cache on top. The *arithmetic intensity*, FLOPs per byte read, tells them
# apart. `measure.generation_phases` counts both on the shape-only device: the FLOPs (equal to
# `accounting.model_forward_flops` and `accounting.decode_flops`) and the bytes of weights and cache read.
#
# A weight used once costs 2 FLOPs (a multiply and an add) for the bytes it takes to read it: 2 in float16, 4 in
# float32. So decode does about one FLOP per byte in float16 and a half in float32, and a prompt of 256 tokens
# does over a hundred. A device does far more FLOPs per second than it reads bytes: an H100 does 989.4 TFLOP/s
# and reads 3.35 TB/s, about 295 FLOPs per byte. So, on the hardware, prefill is bound by arithmetic and decode
# by memory: its achieved FLOP/s collapses (section 6 shows what this engine adds to that on a GPU). Below, a
# model of 4 layers ($d_{model} = 512$, 20 M parameters) on the CPU, or of 8 layers ($d_{model} = 2048$,
# 0.49 B parameters) on the GPU, prefills 256 tokens, then decodes.

# %%
GEN_GPU = nn.BlockConfig(2048, 16, 4, 5504, n_layers=8, vocab_size=32000, max_seq_len=512)
GEN_CPU = nn.BlockConfig(512, 8, 4, 1376, n_layers=4, vocab_size=8192, max_seq_len=512)
GEN = GEN_GPU if ON_GPU else GEN_CPU
P = 256
model = nn.LM(GEN, generator=tb.Generator(0), dtype=DTYPE, device=DEVICE)
ids = tb.tensor(np.random.default_rng(0).integers(0, GEN.vocab_size, (1, P + 8)), device=DEVICE)   # (1, P + 8)
prefill, decode = generation_phases(GEN, P, dtype="fp16" if ON_GPU else "fp32")
assert prefill.flops == acc.model_forward_flops(GEN, P, matmul_only=False)
assert decode.flops == acc.decode_flops(GEN, P + 1, matmul_only=False)


def run_prefill() -> nn.KVCache:
    cache = nn.KVCache(model, 1)
    with tb.no_grad():
        model(ids[:, :P], cache=cache)                              # (1, P, vocab_size)
    return cache


def run_decode(cache: nn.KVCache, steps: int = 5) -> float:
    """Median seconds of one decode step, the cache growing from P to P + steps."""
    times = []
    with tb.no_grad():
        for i in range(steps):
            wait()
            start = time.perf_counter()
            model(ids[:, P + i:P + i + 1], cache=cache)              # (1, 1, vocab_size)
            wait()
            times.append(time.perf_counter() - start)
    return statistics.median(times)


prefill_time = seconds(run_prefill, warmup=1, repeats=3)
run_decode(run_prefill(), steps=2)                                  # warm-up
decode_time = run_decode(run_prefill())
weights = acc.total_params(GEN) * DTYPE.itemsize
timed = {"prefill": (prefill, prefill_time), "decode": (decode, decode_time)}
print(f"model: {acc.total_params(GEN):,} parameters ({weights / MiB:.0f} MiB in {DTYPE}); prompt {P} tokens")
print(f"{'phase':8} {'FLOPs':>16} {'bytes read':>14} {'FLOPs/byte':>11} {'ms':>9} {'TFLOP/s':>9} {'of peak':>8} "
      f"{'GB/s read':>10}")
for name, (phase, t) in timed.items():
    read = phase.weight_bytes + phase.cache_bytes
    print(f"{name:8} {phase.flops:>16,} {read:>14,} {phase.intensity:>11.2f} {t * 1e3:>9.2f} "
          f"{phase.flops / t / 1e12:>9.4f} {phase.flops / t / PEAK:>8.3%} {read / t / GB:>10.2f}")
prefill_rate, decode_rate = prefill.flops / prefill_time, decode.flops / decode_time
print(f"prefill runs {prefill_rate / decode_rate:.0f} x as many FLOPs per second as decode, "
      f"and does {prefill.intensity / decode.intensity:.0f} x as many FLOPs per byte read")
if not prefill_rate > decode_rate:
    print("note: prefill ran no faster than decode: this machine was busy; run the lesson again")
assert prefill_time > 0 and decode_time > 0 and prefill_rate < PEAK
assert round(acc.total_params(GEN_CPU) / 1e6) == 20 and round(acc.total_params(GEN_GPU) / 1e9, 2) == 0.49
assert prefill.intensity > 100 and 0.9 < decode.intensity / (2 / DTYPE.itemsize) < 1.2   # 2 FLOPs per weight read
assert round(989.4e12 / 3.35e12) == 295

# %% [markdown]
# ## 6. Batching lifts decode
#
# A decode step reads every weight whatever the batch, and uses each for every sequence in it. So decoding
# $B$ sequences at once multiplies the FLOPs by $B$ and the bytes read only a little (each sequence has its own
# cache). Counted on the shape-only device for the model above, the intensity of a decode step grows almost in
# proportion to $B$ until the cache, which grows with $B$ too, takes over. The picture puts these counted
# intensities beside the measured phases on a *roofline*: a device can do no more than its peak, and no more
# than (bytes it can read per second) × intensity. For the bandwidth we time a large elementwise multiply,
# which reads and writes every byte once.
#
# The measured points sit below their bounds, because a step costs more than its FLOPs and its bytes: every
# primitive call costs Python and, on a GPU, a kernel launch (section 4). A decode step of the GPU's model
# makes 1,009 primitive calls (counted on meta) and reads 844 MB, which an H100 reads in 0.25 ms at 3.35 TB/s:
# 0.25 µs per call. Each of this engine's calls takes microseconds in Python alone (the tiny block's time per
# call in section 4). So on a GPU this engine's decode is bound by its launches, not by memory, and its
# measured point lies far below the roofline; an engine reaches the roof with fewer, fused kernels (lesson 16,
# section 4). The two lines printed before the picture make the same comparison on this machine.

# %%
big = tb.randn(2**28 if ON_GPU else 2**24, generator=tb.Generator(1), device=DEVICE)   # float32: 1 GiB or 64 MiB
copy_time = seconds(lambda: big * 2.0, warmup=1, repeats=5)
BANDWIDTH = 2 * big.nbytes / copy_time                                                  # read once, write once
batches = [1, 4, 16, 64, 256]
decodes = [generation_phases(GEN, P, batch=b, dtype="fp16" if ON_GPU else "fp32")[1] for b in batches]
print(f"measured bandwidth: {BANDWIDTH / GB:.1f} GB/s; the device's balance point: {PEAK / BANDWIDTH:,.0f} "
      f"FLOPs per byte (peak / bandwidth)")
for b, phase in zip(batches, decodes):
    bound = min(PEAK, BANDWIDTH * phase.intensity)
    print(f"  decode, batch {b:>3}: {phase.intensity:7.2f} FLOPs per byte; bound {bound / 1e12:.4g} TFLOP/s")
intensities = [p.intensity for p in decodes]
assert copy_time > 0 and all(a < b for a, b in zip(intensities, intensities[1:]))
assert intensities[1] > 3.5 * intensities[0] and intensities[-1] < batches[-1] * intensities[0]


def decode_calls(cfg: nn.BlockConfig, dtype) -> int:
    """Primitive calls of one decode step of nn.LM(cfg) after a prompt of P tokens, counted on meta."""
    lm = meta_lm(cfg, dtype)
    cache = nn.KVCache(lm, 1)
    with tb.no_grad():
        lm(meta_ids(1, P), cache=cache)                                 # prefill: (1, P)
        with count_flops() as fc:
            lm(meta_ids(1, 1), cache=cache)                             # decode: (1, 1)
    return sum(fc.calls.values())


gpu_decode, gpu_calls = generation_phases(GEN_GPU, P, dtype="fp16")[1], decode_calls(GEN_GPU, tb.float16)
gpu_read = gpu_decode.weight_bytes + gpu_decode.cache_bytes
here_calls, here_read = decode_calls(GEN, DTYPE), decode.weight_bytes + decode.cache_bytes
print(f"GPU model's decode step: {gpu_calls:,} calls, {gpu_read / GB:.3f} GB: {gpu_read / 3.35e12 * 1e3:.2f} ms at "
      f"3.35 TB/s, {gpu_read / 3.35e12 / gpu_calls * 1e6:.2f} us per call")
print(f"here: the decode step took {decode_time * 1e3:.2f} ms in {here_calls:,} calls "
      f"({decode_time / here_calls * 1e6:.1f} us each); its bytes at the measured bandwidth need "
      f"{here_read / BANDWIDTH * 1e3:.2f} ms ({here_read / BANDWIDTH / here_calls * 1e6:.2f} us per call)")
assert gpu_calls == 1009 and round(gpu_read / 1e6) == 844 and round(gpu_read / 3.35e12 * 1e3, 2) == 0.25
assert round(gpu_read / 3.35e12 / gpu_calls * 1e6, 2) == 0.25

fig = figure(7.5, 4.4)
ax = fig.add_subplot()
x = np.logspace(-2, 4, 200)
ax.plot(x, np.minimum(PEAK, BANDWIDTH * x), color="0.3", lw=1.5, label="roofline: min(peak, bandwidth x intensity)")
ax.plot(intensities, [min(PEAK, BANDWIDTH * i) for i in intensities], "s", mfc="none", color="C2",
        label="decode at batch 1 to 256: its bound (counted)")
for k, (b, i) in enumerate(zip(batches, intensities)):
    ax.annotate(f"B={b}", (i, min(PEAK, BANDWIDTH * i)), xytext=(-34, 2) if k % 2 else (6, -10),
                textcoords="offset points", fontsize=8)
for (name, (phase, t)), color in zip(timed.items(), ("C0", "C1")):
    ax.plot(phase.intensity, phase.flops / t, "o", color=color, ms=8, label=f"{name}, measured (batch 1)")
ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOPs per byte read)", ylabel="FLOP/s",
       title=f"Prefill and decode on {card_name()}", ylim=(decode_rate / 10, PEAK * 3), xlim=(0.1, 3e3))
ax.legend(loc="lower right", fontsize=8)
show(fig, OUT / "roofline.png")

# %% [markdown]
# ## 7. Tensor parallelism: one block split over devices
#
# A block's work is mostly matmuls, and a matmul splits cleanly. The tensor parallelism of Megatron-LM (NVIDIA's
# code, and paper, for training large transformers) splits each block over $t$ devices in two steps, each ending in
# one sum over the devices:
#
# - **attention**: $W_Q$, $W_K$ and $W_V$ are split by output columns, so device $r$ computes the queries,
#   keys and values of its own $H/t$ heads (and its $H_{kv}/t$ key/value heads). Attention is per head, so each
#   device attends on its own. $W_O$ is split by *input* rows: device $r$ multiplies its heads' outputs by its
#   slice of $W_O$ and gets a **partial sum** of the full output. Adding the $t$ partial sums, an
#   **all-reduce**, gives attention's output on every device;
# - **FFN**: $W_{gate}$ and $W_{up}$ split by columns ($d_{ff}/t$ hidden units each; SiLU and the product are
#   per unit), $W_{down}$ by rows, then a second all-reduce.
#
# The norms and the residual adds are done whole on every device. The usual one-line summary, "tensor
# parallelism splits heads across GPUs", is the smaller half of it: the FFN holds most of a block's weights
# (67 % in Llama-2-7B, 82 % in Llama-2-70B), and it is split by hidden units.
#
# Below, each device's share is an ordinary `nn.Attention` with $H/t$ heads and an `nn.SwiGLU` of width
# $d_{ff}/t$, whose weights are slices of the block's. For the tiny block split over $t = 2$ devices, in
# float64, norm → parts → sum → residual reproduces the block's output to rounding (below $10^{-12}$).

# %%
def megatron_part(block: nn.TransformerBlock, t: int, r: int) -> tuple[nn.Attention, nn.SwiGLU]:
    """Device r of t: attention over heads r H/t .. (r+1) H/t - 1 (W_Q, W_K, W_V: their rows, i.e. output
    columns; W_O: their input columns) and a SwiGLU over hidden units r d_ff/t .. (W_gate, W_up: rows; W_down:
    columns). Each returns a partial sum of its sublayer's output (B, L, d_model)."""
    cfg, W = block.cfg, dict(block.named_parameters())
    part = cfg.with_(d_model=cfg.d_model // t, n_heads=cfg.n_heads // t, n_kv_heads=cfg.n_kv_heads // t,
                     d_ff=cfg.d_ff // t)                             # the same d_head; heads and units / t
    like = W["attn.q_proj.weight"]
    make = dict(generator=tb.Generator(0), dtype=like.dtype, device=like.device)
    d, q, kv, f = cfg.d_model, part.d_model, part.n_kv_heads * part.d_head, part.d_ff
    attn, ffn = nn.Attention(part, **make), nn.SwiGLU(part, **make)
    attn.q_proj, attn.k_proj, attn.v_proj = nn.Linear(d, q, **make), nn.Linear(d, kv, **make), nn.Linear(d, kv, **make)
    attn.o_proj = nn.Linear(q, d, **make)                           # its heads in, all d_model out
    ffn.gate_proj, ffn.up_proj, ffn.down_proj = nn.Linear(d, f, **make), nn.Linear(d, f, **make), \
        nn.Linear(f, d, **make)
    mine = lambda size: slice(r * size, (r + 1) * size)            # noqa: E731  this device's rows or columns
    with tb.no_grad():                                              # weights are (out, in): rows = outputs
        attn.load_state_dict({"q_proj.weight": W["attn.q_proj.weight"][mine(q)],
                              "k_proj.weight": W["attn.k_proj.weight"][mine(kv)],
                              "v_proj.weight": W["attn.v_proj.weight"][mine(kv)],
                              "o_proj.weight": W["attn.o_proj.weight"][:, mine(q)]})
        ffn.load_state_dict({"gate_proj.weight": W["ffn.gate_proj.weight"][mine(f)],
                             "up_proj.weight": W["ffn.up_proj.weight"][mine(f)],
                             "down_proj.weight": W["ffn.down_proj.weight"][:, mine(f)]})
    return attn, ffn


def all_reduce(partials: list[tb.Tensor]) -> tb.Tensor:
    """What every device holds after an all-reduce: the sum of all devices' partial sums."""
    total = partials[0]
    for p in partials[1:]:
        total = total + p
    return total


tiny = nn.preset("tiny")
block = nn.TransformerBlock(tiny, generator=tb.Generator(0), dtype=tb.float64)
g2 = tb.Generator(2)
with tb.no_grad():
    for _, p in block.named_parameters():                          # random gains too, so nothing is trivial
        p.data = (p + 0.1 * tb.randn(*p.shape, generator=g2, dtype=tb.float64)).data
x = tb.randn(2, 8, tiny.d_model, generator=tb.Generator(1), dtype=tb.float64)          # (B, L, d_model)
parts = [megatron_part(block, 2, r) for r in range(2)]
h = x + all_reduce([attn(block.norm1(x)) for attn, _ in parts])    # all-reduce 1, after W_O
out = h + all_reduce([ffn(block.norm2(h)) for _, ffn in parts])    # all-reduce 2, after W_down
err = np.abs(out.numpy() - block(x).numpy()).max()
shares = [attn.num_parameters() + ffn.num_parameters() for attn, ffn in parts]
print(f"tiny block over t = 2: max |split - whole| = {err:.1e}; parameters per device {shares} + the norms "
      f"{2 * tiny.d_model} (whole block {block.num_parameters():,})")
assert err < 1e-12
assert sum(shares) + 2 * tiny.d_model == block.num_parameters() == acc.params_per_block(tiny)
assert [attn.cfg.n_heads for attn, _ in parts] == [tiny.n_heads // 2] * 2
assert [round(100 * acc.attention_ffn_shares(nn.preset(m)).ffn) for m in ("llama2-7b", "llama2-70b")] == [67, 82]

# %% [markdown]
# ## 8. Tensor parallelism, counted for Llama-2-70B
#
# Built on the shape-only device, the same split of one Llama-2-70B block over $t = 8$ devices costs no memory
# and gives exact counts. Per device:
#
# - **parameters**: each device holds $1/t$ of every matrix and a whole copy of the two norms:
#   $(P_{block} - 2d)/t + 2d$ = 106,971,136 of the block's 855,654,400 (204 MiB in bf16). The same rule on
#   the whole model, with the embedding split by vocabulary rows and the LM head by its output columns, is the
#   first exercise;
# - **FLOPs**: exactly $1/t$ of the block's matmul FLOPs, the scores and the weighted sum included, since
#   each device attends with its own heads;
# - **communication**: each all-reduce sums a $(B, L, d_{model})$ tensor: at $L = 4096$ in bf16 that is
#   64 MiB. A forward pass makes two per block; training makes four (the backward's gradient with respect to
#   each sublayer's input is a sum over devices too). A ring all-reduce (the devices stand in a ring; each
#   passes pieces of the tensor to its neighbour, which adds its own, until every piece is summed, then the sums
#   go round once more) sends and receives $2(t-1)/t$ times the tensor per device: 112 MiB at $t = 8$. For 80
#   blocks, one training step of one sequence moves 35 GiB per device, which is why tensor parallelism stays
#   inside one server, on its fast links.
#
# Llama-2-70B has 8 key/value heads, so $t = 8$ is as far as it splits without copying KV heads.

# %%
cfg70 = nn.preset("llama2-70b")
d70, t, L = cfg70.d_model, 8, 4096
meta_block = nn.TransformerBlock(cfg70, generator=tb.Generator(0), dtype=tb.float16, device="meta")
attn, ffn = megatron_part(meta_block, t, 3)                        # any device: all hold the same shapes
xm = tb.zeros(1, L, d70, dtype=tb.float16, device="meta")           # (B, L, d_model), bf16 stands as float16
with count_flops() as fc:
    partial_attn, partial_ffn = attn(meta_block.norm1(xm)), ffn(meta_block.norm2(xm))
per_device = attn.num_parameters() + ffn.num_parameters() + 2 * d70
block_params = meta_block.num_parameters()
message = partial_attn.nbytes                                       # one all-reduce's tensor
ring = 2 * (t - 1) * message // t
step_bytes = 4 * ring * cfg70.n_layers
print(f"Llama-2-70B block over t = {t}: {per_device:,} parameters per device of {block_params:,} "
      f"({per_device * 2 / MiB:.0f} MiB in bf16)")
print(f"  matmul FLOPs per device at L = {L}: {fc.total(matmul_only=True):,} x {t} = "
      f"{fc.total(matmul_only=True) * t:,} (the whole block: {acc.block_forward_flops(cfg70, L):,})")
print(f"  all-reduce of {partial_attn.shape}: {message / MiB:.0f} MiB; ring: {ring / MiB:.0f} MiB sent per device; "
      f"4 per block per training step, 80 blocks: {step_bytes / GiB:.0f} GiB")
assert per_device == (acc.params_per_block(cfg70) - 2 * d70) // t + 2 * d70 == 106_971_136
assert block_params == 855_654_400 and round(per_device * 2 / MiB) == 204
assert fc.total(matmul_only=True) * t == acc.block_forward_flops(cfg70, L)
assert partial_attn.shape == partial_ffn.shape == (1, L, d70) and message == 64 * MiB and ring == 112 * MiB
assert step_bytes == 35 * GiB and cfg70.n_kv_heads == t

# %% [markdown]
# ## 9. ZeRO-3: weights, gradients and Adam's state divided by the devices
#
# Tensor parallelism divides the model; data parallelism copies it. With plain data parallelism each of $t$
# devices trains on its own share of the batch and keeps a whole copy of the training state: 16 bytes per
# parameter (lesson 13), 1.1 TB for Llama-2-70B. ZeRO (the "zero redundancy optimizer") removes the copies in
# three stages:
#
# | stage | divided by $t$ | bytes per parameter per device |
# |---|---|---|
# | data parallel | nothing | $2 + 2 + 12 = 16$ |
# | ZeRO-1 | Adam's fp32 master weights and two moments | $2 + 2 + 12/t$ |
# | ZeRO-2 | and the gradients | $2 + 14/t$ |
# | ZeRO-3 | and the bf16 weights | $16/t$ |
#
# Under ZeRO-3 every device holds one $t$-th of a flat buffer of all the parameters. Counted on the
# shape-only device (all 68,976,648,192 parameters of Llama-2-70B, flattened and cut in $t$ pieces), at
# $t = 64$ that is 17.2 GB per device, against 1,103.6 GB with plain data parallelism. ZeRO-3 fits the state on
# 80 GB cards from 14 devices on (13.8 would be exact), before any activation. Activations are not divided:
# each device keeps those of its own sequences.
#
# The price is communication. Before each block runs, its weights are gathered from all devices (once for the
# forward, once again for the backward, since they were dropped in between), and the gradients are summed and
# scattered back. In bf16 each of the three moves about $2N$ bytes per device ($2N (t-1)/t$ exactly), so a step
# moves $3 \times 2N$ = 414 GB for Llama-2-70B, against $2 \times 2N$ = 276 GB for plain data parallelism,
# whose one all-reduce of the gradients costs two of those moves. ZeRO-3 moves 1.5 times as much.

# %%
N70 = acc.total_params(cfg70)
model70 = meta_lm(cfg70)                                             # shape only: no memory
flat = tb.concat([p.reshape(-1) for p in model70.parameters()])      # (N,): every parameter, one buffer
pieces = {t: flat[: math.ceil(flat.size / t)] for t in (8, 64, 512)}  # device 0's piece (the last may be short)
state = 16                                                           # bytes per parameter: 2 + 2 + 12
stages = {"data parallel": lambda t: 16 * N70, "ZeRO-1": lambda t: 4 * N70 + 12 * N70 / t,
          "ZeRO-2": lambda t: 2 * N70 + 14 * N70 / t, "ZeRO-3": lambda t: 16 * N70 / t}
print(f"Llama-2-70B: {flat.size:,} parameters in one flat buffer (counted on meta)")
print(f"{'devices':>8} " + " ".join(f"{s:>14}" for s in stages) + "   ZeRO-3 counted")
for t, piece in pieces.items():
    print(f"{t:>8} " + " ".join(f"{f(t) / GB:>11,.1f} GB" for f in stages.values()) +
          f"   {state * piece.size / GB:,.1f} GB")
fits = math.ceil(16 * N70 / 80e9)
print(f"ZeRO-3 fits 16 bytes per parameter on 80 GB cards from {fits} devices ({16 * N70 / 80e9:.1f} exactly); "
      f"communication per step: {3 * 2 * N70 / GB:,.0f} GB against {2 * 2 * N70 / GB:,.0f} GB (x 1.5)")
assert flat.size == N70 == 68_976_648_192 and flat.device == "meta"
assert all(piece.size == math.ceil(N70 / t) and 0 <= state * piece.size - stages["ZeRO-3"](t) < state
           for t, piece in pieces.items())
assert round(stages["ZeRO-3"](64) / GB, 1) == 17.2 and round(16 * N70 / GB, 1) == 1103.6
assert fits == 14 and round(16 * N70 / 80e9, 1) == 13.8
assert (3 * 2 * N70) / (2 * 2 * N70) == 1.5 and [round(k * 2 * N70 / GB) for k in (3, 2)] == [414, 276]

fig = figure(7.5, 4.4)
ax = fig.add_subplot()
ts = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024])
for (name, f), color in zip(stages.items(), ("0.4", "C1", "C2", "C0")):
    ax.plot(ts, [f(t) / GB for t in ts], "o-", ms=3.5, color=color, label=name)
ax.axhline(80, color="C3", ls=":", lw=1.2)
ax.text(1.1, 80 * 1.15, "one 80 GB GPU", color="C3", fontsize=8.5)
ax.axvline(fits, color="C0", ls=":", lw=1)
ax.annotate(f"ZeRO-3 fits from\n{fits} devices", (fits, 80), xytext=(90, 40), textcoords="data", va="center",
            fontsize=8.5, arrowprops=dict(arrowstyle="->", color="0.4"))       # in the clear, under the 80 GB line
ax.set(xscale="log", yscale="log", xlabel="devices t", ylabel="training state per device (GB)",
       title="Llama-2-70B, 16 bytes per parameter: what each device holds")
ax.xaxis.set_major_formatter("{x:.0f}")
ax.legend(loc="lower left", fontsize=8.5)
show(fig, OUT / "zero_stages.png")

# %% [markdown]
# ## Check yourself
#
# 1. Why must a timer wait for the GPU before reading the clock, and why is the work run twice first?
#
#    <details><summary>Answer</summary>
#
#    A GPU call returns as soon as its kernels are queued, so the clock alone measures Python and the launches, not
#    the work. The first calls are slower (CuPy compiles each elementwise kernel the first time, threads and fresh
#    memory start up), so the lesson warms up twice and takes the median of five runs.
#
#    </details>
#
# 2. Why does the tiny block reach only a sliver of the peak FLOP/s while a large one approaches the GEMM's rate?
#
#    <details><summary>Answer</summary>
#
#    A block's forward and backward make the same 280 primitive calls at every size, each with a fixed overhead. The
#    tiny block does almost no arithmetic per call, so its time is that overhead; a large block's matmuls grow as
#    $B L d^2$ for the same number of calls.
#
#    </details>
#
# 3. In Megatron's tensor parallelism, why is $W_O$ split by rows, and what does that cost?
#
#    <details><summary>Answer</summary>
#
#    Each device holds its own heads' outputs, so it multiplies them by its rows of $W_O$ and gets a partial sum of
#    attention's output. Adding the partial sums is an all-reduce: for Llama-2-70B at 4,096 tokens in bf16, a
#    (B, L, $d_{model}$) tensor of 64 MiB, two per block in a forward pass.
#
#    </details>
#
# 4. How many bytes per parameter does each device hold under ZeRO-3 with $t$ devices, and what does that give for
#    Llama-2-70B?
#
#    <details><summary>Answer</summary>
#
#    $16/t$: the bf16 weights, the gradients and Adam's fp32 state are all divided. At $t = 64$ that is 17.2 GB per
#    device against 1,103.6 GB with plain data parallelism, and the state fits 80 GB cards from 14 devices on.
#
#    </details>

# %% [markdown]
# ## Words from this lesson
#
# - **tensor core**: a GPU's unit for matmuls, which runs float16 products summed in float32 (§1)
# - **launch**: handing one kernel to the device, a fixed cost of some microseconds on every call (§2)
# - **GEMM**: general matrix multiply, the BLAS name for a matmul (§2)
# - **BLAS**: the library of matrix products that numpy (on the CPU) and cuBLAS (on the GPU) call (§2)
# - **achieved FLOP/s**: a step's matmul FLOPs divided by its measured time (§3)
# - **tensor parallelism**: splitting each matrix of a block over several devices, each computing part of every
#   matmul (§7)
# - **all-reduce**: summing a tensor across devices so that every device holds the sum (§7)
# - **ring all-reduce**: an all-reduce in which the devices stand in a ring and pass pieces of the tensor to their
#   neighbours (§8)
# - **data parallelism**: every device keeping a whole copy of the model and training on its own share of the batch
#   (§9)
# - **ZeRO**: the zero redundancy optimizer, which divides the training state over the devices in three stages,
#   ZeRO-3 dividing the weights too (§9)

# %% [markdown]
# ## Exercises
#
# 1. `tp_params_per_device`: `tp_params_per_device(cfg, t)` returns the parameters one device holds when the
#    whole model `cfg` is split over `t` devices by Megatron's tensor parallelism: each block's seven matrices
#    divided by `t` (section 7), the norms whole on every device, the embedding split by vocabulary rows and
#    the LM head by its vocabulary outputs (a tied head shares the embedding's slice). The checker splits the
#    model on the shape-only device, and names the usual slips: dividing the norms, leaving the embedding or
#    the head whole, giving $W_K$ and $W_V$ the full width, counting a tied head twice.
# 2. `zero_bytes_per_device`: `zero_bytes_per_device(n_params, n_devices, stage)` returns the training-state
#    bytes per device at 16 bytes per parameter, for `stage` 0 (plain data parallelism), 1, 2 or 3 (section 9).
# 3. `training_mfu`: `training_mfu(cfg, batch, seq_len, step_seconds, n_devices, peak_flops)` returns the model
#    FLOPs utilisation of a training step: the matmul FLOPs of the whole model's forward and backward on
#    `batch` sequences of `seq_len` tokens, over what `n_devices` devices at `peak_flops` each could do in
#    `step_seconds`. The checker counts the step on the shape-only device.
#
# `python -m tinygrad_block exercise 17` writes `exercise_17.py` with the three functions to fill in;
# `python -m tinygrad_block check 17` checks them and says what is wrong.
