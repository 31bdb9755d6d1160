"""The command line, `python -m tinygrad_block <command>`: one parser for the tour and the counting and drawing
commands (presets, params, flops, walk, memory, calc, graph). The commands only parse, call the library (`measure`,
`accounting`, `tour`) and print: a table, or the same numbers as JSON with `--json` (fields: docs/cli.md).
A user's mistake ends in one line on stderr and exit status 2, never a traceback.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from . import accounting
from .counting import FlopCounter
from .curriculum import notes_for
from .device import get_backend
from .graph import PNG_DPI, render
from .measure import DTYPES, count_model, measured_activations, measured_params, record, record_bytes, walk
from .nn import PRESETS, BlockConfig, preset

PROG = "python -m tinygrad_block"
PHASES = ("forward_matmul", "forward_all", "backward_matmul", "backward_all")


class CommandError(Exception):
    """A user's mistake found while a command runs: printed as one line, exit status 2."""


# ---------------------------------------------------------------- formatting
def human(n: float, units=("", " K", " M", " B", " T", " P", " E"), base: int = 1000) -> str:
    """6738415616 -> '6.74 B'; with binary units, 26843545600 -> '25.00 GiB'."""
    i = 0
    while abs(n) >= base and i < len(units) - 1:
        n, i = n / base, i + 1
    return f"{n:,.0f}{units[0]}" if i == 0 else f"{n:,.2f}{units[i]}"


def human_bytes(n: int) -> str:
    """26843545600 -> '25.00 GiB'."""
    return human(n, (" B", " KiB", " MiB", " GiB", " TiB", " PiB"), 1024)


def table(headers: list[str], rows: list[list], indent: str = "  ", left: tuple = (0,)) -> list[str]:
    """Aligned columns: text columns (`left`) left-aligned, numbers right-aligned with thousands separators."""
    cells = [[f"{c:,}" if isinstance(c, int) else str(c) for c in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return [indent + "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
            .rstrip() for row in cells]


def shape_text(shapes: list[tuple]) -> str:
    """[(768,), (768,), (3072,)] -> '2 x (768,), (3072,)'."""
    return ", ".join(f"{n} x {s}" if n > 1 else str(s) for s, n in Counter(shapes).items())


# ---------------------------------------------------------------- presets
def presets_data(args: argparse.Namespace) -> dict:
    """Every preset's config numbers and its closed-form total of parameters."""
    rows = []
    for name, cfg in PRESETS.items():
        rows.append({"name": name, "d_model": cfg.d_model, "n_heads": cfg.n_heads, "n_kv_heads": cfg.n_kv_heads,
                     "d_head": cfg.d_head, "d_ff": cfg.d_ff, "n_layers": cfg.n_layers, "vocab_size": cfg.vocab_size,
                     "context": cfg.max_seq_len, "norm": cfg.norm, "layout": cfg.layout,
                     "ffn": cfg.ffn, "tied": cfg.tie_embeddings, "total_params": accounting.total_params(cfg)})
    return {"command": "presets", "presets": rows}


def presets_text(data: dict) -> list[str]:
    """The presets as one aligned table."""
    keys = ["name", "d_model", "n_heads", "n_kv_heads", "d_head", "d_ff", "n_layers", "vocab_size", "context"]
    rows = [[p[k] for k in keys] + [f"{p['norm']} ({p['layout']})", p["ffn"], "yes" if p["tied"] else "no",
                                    human(p["total_params"])] for p in data["presets"]]
    head = ["preset", "d_model", "heads", "kv heads", "d_head", "d_ff", "layers", "vocab", "context", "norm", "FFN",
            "tied", "params"]
    return ["presets: the named architectures (python -m tinygrad_block <command> --preset NAME)",
            *table(head, rows, left=(0, 9, 10, 11)),
            "  params: accounting.total_params(cfg); `params --preset NAME` counts them on the built model"]


# ---------------------------------------------------------------- params
LABELS = {"position_embedding": "position embedding", "final_norm": "final norm", "lm_head": "LM head",
          "biases": "biases (projections)", "norms": "norms (norm1, norm2)",
          "qk_norms": "QK norms (q_norm, k_norm)", "lora": "LoRA adapters (A, B)",
          "optimizer": "optimizer (Adam)", "activations": "activations (estimate)", "kv_cache": "KV cache",
          "parameters": "parameters", "gradients": "gradients", "total": "total"}


BLOCK_ORDER = ("W_Q", "W_K", "W_V", "W_O", "W_gate", "W_up", "W_down", "biases", "norms", "qk_norms", "lora")
MODEL_ORDER = ("embedding", "position_embedding", "blocks", "final_norm", "lm_head")


def _rows(shapes: dict, closed: dict, order: tuple) -> dict:
    """{row: shapes, measured, closed form}, in `order`; a row neither side has is left out (the LM head of a
    tied model is kept: it shows that the head reuses the embedding)."""
    names = [k for k in order if k in shapes or k in closed or k == "lm_head"]
    names += [k for k in list(closed) + list(shapes) if k not in names]
    return {k: {"shapes": [list(s) for s in shapes.get(k, [])], "measured": sum(map(math.prod, shapes.get(k, []))),
                "closed_form": int(closed.get(k, 0))} for k in names}


def params_data(args: argparse.Namespace) -> dict:
    """Parameters per component row, counted on nn.LM(meta) and from accounting's breakdowns."""
    cfg = args.preset
    block_shapes, model_shapes, submodules = measured_params(cfg)
    block = _rows(block_shapes, accounting.block_param_breakdown(cfg), BLOCK_ORDER)
    model = _rows(model_shapes, accounting.model_param_breakdown(cfg), MODEL_ORDER)
    per_block = sum(r["measured"] for r in block.values())
    closed_shares = accounting.attention_ffn_shares(cfg)
    return {"command": "params", "preset": cfg.name, "n_layers": cfg.n_layers, "tied": cfg.tie_embeddings,
            "per_block": per_block, "total": sum(r["measured"] for r in model.values()),
            "closed_form": {"per_block": accounting.params_per_block(cfg), "total": accounting.total_params(cfg)},
            "block": block, "model": model,
            "shares": {"measured": {"attention": submodules["attn"] / per_block, "ffn": submodules["ffn"] / per_block},
                       "closed_form": {"attention": closed_shares.attention, "ffn": closed_shares.ffn}}}


def _param_line(label: str, row: dict) -> list:
    """One table row: label, shapes, measured, closed form, difference, human units."""
    shapes = [tuple(s) for s in row["shapes"]]
    return [label, shape_text(shapes) if shapes else "-", row["measured"], row["closed_form"],
            row["measured"] - row["closed_form"], human(row["measured"])]


def params_text(data: dict) -> list[str]:
    """Two tables, one block and the model, then the attention and FFN shares."""
    head = ["component", "shape", "measured", "closed form", "difference", ""]
    block = [_param_line(LABELS.get(k, k), r) for k, r in data["block"].items()]
    per_block, total = data["per_block"], data["total"]
    block.append(["per block", "", per_block, data["closed_form"]["per_block"],
                  per_block - data["closed_form"]["per_block"], human(per_block)])
    model = []
    for k, r in data["model"].items():
        label = f"{data['n_layers']} blocks" if k == "blocks" else LABELS.get(k, k)
        line = _param_line(label, r)
        if k == "lm_head" and data["tied"]:
            line[1] = "tied: reuses the embedding"
        if k == "blocks":
            line[1] = f"{data['n_layers']} x block"
        model.append(line)
    model.append(["total", "", total, data["closed_form"]["total"], total - data["closed_form"]["total"],
                  human(total)])
    m, c = data["shares"]["measured"], data["shares"]["closed_form"]
    return [f"params: {data['preset']}, measured from named_parameters() of nn.LM built on the meta device, "
            "beside accounting's closed form",
            "  one block", *table(head, block, "    ", left=(0, 1)),
            "  the model", *table(head, model, "    ", left=(0, 1)),
            f"  of a block's parameters: attention (Q, K, V, O) {m['attention']:.2%}, FFN {m['ffn']:.2%}, norms the "
            f"rest (closed form {c['attention']:.2%} / {c['ffn']:.2%})"]


# ---------------------------------------------------------------- flops
def _phases(fc: FlopCounter, scope: str, own: bool = False) -> dict:
    """The four numbers of one module: its subtree's FLOPs, or with `own` only the ops of the scope itself."""
    out = {}
    for key in PHASES:
        phase, kind = key.split("_")
        if own:
            out[key] = fc.total(phase, scope=scope, matmul_only=kind == "matmul", own=True)
        else:
            out[key] = fc.total(phase, scope=scope, matmul_only=kind == "matmul")
    return out


def _closed_flops(block_or_model: str, cfg: BlockConfig, L: int, B: int) -> dict:
    """accounting's forward and backward FLOPs of a block (input wanting a gradient) or of the model."""
    fwd = getattr(accounting, f"{block_or_model}_forward_flops")
    bwd = getattr(accounting, f"{block_or_model}_backward_flops")
    return {"forward_matmul": fwd(cfg, L, B, matmul_only=True), "forward_all": fwd(cfg, L, B, matmul_only=False),
            "backward_matmul": bwd(cfg, L, B, matmul_only=True), "backward_all": bwd(cfg, L, B, matmul_only=False)}


def flops_data(args: argparse.Namespace) -> dict:
    """FLOPs per module and phase of the model's forward and backward, beside the closed forms."""
    cfg, L, B = args.preset, args.seq_len, args.batch
    start = time.perf_counter()
    fc = count_model(cfg, B, L)
    seconds = time.perf_counter() - start
    b0 = "model.layers.0"
    modules = {"embedding": _phases(fc, "model.embed")}
    if not cfg.rope:
        modules["position_embedding"] = _phases(fc, "model.pos_embed")
    modules.update({f"block.{m}": _phases(fc, f"{b0}.{m}") for m in ("norm1", "attn", "norm2", "ffn")})
    modules["block.residual"] = _phases(fc, b0, own=True)
    modules.update({"block": _phases(fc, b0), "blocks": _phases(fc, "model.layers"),
                    "final_norm": _phases(fc, "model.norm"), "lm_head": _phases(fc, "model.lm_head")})
    for key, scope in (("model_own", "model"), ("outside", "")):   # the position add, a tied head's grad sum
        own = _phases(fc, scope, own=True)
        if any(own.values()):
            modules[key] = own
    modules["model"] = _phases(fc, "")
    closed = {"per_block": _closed_flops("block", cfg, L, B), "model": _closed_flops("model", cfg, L, B)}
    measured = {"per_block": modules["block"], "model": modules["model"]}
    return {"command": "flops", "preset": cfg.name, "seq_len": L, "batch": B, "n_layers": cfg.n_layers,
            "seconds": round(seconds, 3), "modules": modules, **measured, "closed_form": closed,
            "difference": {k: {p: measured[k][p] - closed[k][p] for p in PHASES} for k in closed}}


FLOP_LABELS = {"embedding": "embedding", "position_embedding": "position embedding", "block.norm1": "  norm1",
               "block.attn": "  attn", "block.norm2": "  norm2", "block.ffn": "  ffn",
               "block.residual": "  residual adds", "block": "  block 0 total", "final_norm": "final norm",
               "lm_head": "LM head", "model_own": "model's own ops (position add, tied gradients summed)",
               "outside": "outside every module", "model": "model total"}


def flops_text(data: dict) -> list[str]:
    """The per-module table in human units, then measured vs closed form to the last FLOP."""
    head = ["module", "forward matmul", "forward all", "backward matmul", "backward all"]
    rows = []
    for key, m in data["modules"].items():
        label = f"all {data['n_layers']} blocks" if key == "blocks" else FLOP_LABELS[key]
        if key == "block.norm1":
            rows.append(["block 0 (model.layers.0):", "", "", "", ""])
        rows.append([label, *(human(m[p]) for p in PHASES)])
    compare = []
    for part, label in (("per_block", "one block"), ("model", "model")):
        for p in PHASES:
            measured, closed = data[part][p], data["closed_form"][part][p]
            compare.append([f"{label}, {p.replace('_', ' ')}", measured, closed, measured - closed])
    return [f"flops: {data['preset']}, B={data['batch']}, L={data['seq_len']:,}: nn.LM forward and backward on the "
            "meta device under count_flops",
            f"  (upstream gradient: zeros on the logits; counted in {data['seconds']:.2f} s)",
            *table(head, rows),
            "  backward: where a tensor feeds several ops, the sum of their gradients counts in the innermost module",
            "  holding those ops (a block's input forks into its residual and its norm1: the block sums them)",
            "  measured vs closed form (accounting.block_/model_forward_flops, block_/model_backward_flops)",
            *table(["", "measured", "closed form", "difference"], compare)]


# ---------------------------------------------------------------- walk
def walk_data(args: argparse.Namespace) -> dict:
    """One token through one block on meta, step by step (measure.walk), beside the closed form."""
    cfg = args.preset
    steps = [{"step": 0, "operation": "input x", "scope": "block", "shape": [1, 1, cfg.d_model], "matmul_flops": 0,
              "flops": 0, "ops": {}}]
    for i, s in enumerate(walk(cfg), 1):
        steps.append({"step": i, "operation": s.operation, "scope": s.scope, "shape": list(s.shape),
                      "matmul_flops": s.matmul_flops, "flops": s.flops, "ops": dict(s.ops)})
    total = {"matmul": sum(s["matmul_flops"] for s in steps), "all": sum(s["flops"] for s in steps)}
    closed = {"matmul": accounting.block_forward_flops(cfg, 1, 1, matmul_only=True),
              "all": accounting.block_forward_flops(cfg, 1, 1, matmul_only=False)}
    return {"command": "walk", "preset": cfg.name, "batch": 1, "seq_len": 1, "steps": steps, "total": total,
            "closed_form": closed, "difference": {k: total[k] - closed[k] for k in total}}


def walk_text(data: dict) -> list[str]:
    """The steps as a table, and the totals beside the closed form."""
    rows = [[s["step"], s["operation"], str(tuple(s["shape"])), human(s["matmul_flops"]) if s["ops"] else "",
             human(s["flops"]) if s["ops"] else "",
             ", ".join(f"{n} {op}" if n > 1 else op for op, n in s["ops"].items())] for s in data["steps"]]
    t, c, d = data["total"], data["closed_form"], data["difference"]
    rows.append(["", "total", "", human(t["matmul"]), human(t["all"]), ""])
    return [f"walk: one token (B=1, L=1) through one {data['preset']} block on the meta device",
            "  (the primitive calls an observer saw, grouped by the steps the modules name)",
            *table(["step", "operation", "shape after", "matmul FLOPs", "all FLOPs", "primitives"], rows, left=(1, 5)),
            f"  total: {t['matmul']:,} matmul FLOPs, {t['all']:,} FLOPs in all ops",
            f"  closed form, accounting.block_forward_flops(cfg, 1): {c['matmul']:,} and {c['all']:,} "
            f"(difference {d['matmul']:,} and {d['all']:,})",
            "  at L=1 the token attends only to itself; with a context of L tokens the scores and weights @ V "
            "steps cost 2 d_model L FLOPs each"]


# ---------------------------------------------------------------- memory
def memory_data(args: argparse.Namespace) -> dict:
    """accounting's training memory and KV cache, and the activation bytes measured on the engine."""
    cfg, L, B, dtype = args.preset, args.seq_len, args.batch, args.dtype
    size = DTYPES[dtype]
    estimate = {k: int(v) for k, v in accounting.training_memory(cfg, L, B, bytes_per_element=size).items()}
    measured = measured_activations(cfg, B, L, dtype)
    per_token = accounting.activation_bytes_per_token_per_layer(cfg, bytes_per_element=size)
    return {"command": "memory", "preset": cfg.name, "seq_len": L, "batch": B, "dtype": dtype,
            "bytes_per_element": size, "n_layers": cfg.n_layers, "estimate": estimate,
            "kv_cache": accounting.kv_cache_bytes(cfg, L, B, bytes_per_element=size),
            "activation_estimate": {"per_token_per_layer": per_token, "per_layer": per_token * B * L},
            "measured_activations": measured,
            "measured_over_estimate": measured["layers"] / estimate["activations"]}


def memory_text(data: dict) -> list[str]:
    """The estimate's rows, then the activations estimated and measured, with the reason they differ."""
    e, m = data["estimate"], data["measured_activations"]
    rows = [[LABELS[k], e[k], human_bytes(e[k])] for k in ("parameters", "gradients", "optimizer", "activations",
                                                            "total", "kv_cache")]
    rows[-1][0] = "KV cache (inference at this length; not in the total)"
    per_layer_estimate = data["activation_estimate"]["per_layer"]
    engine = "float32" if data["bytes_per_element"] == 4 else "float16"
    act = [["estimate (accounting)", per_layer_estimate, e["activations"], human_bytes(e["activations"]), "1.00 x"],
           ["measured (this engine)", m["per_layer"], m["layers"], human_bytes(m["layers"]),
            f"{data['measured_over_estimate']:,.2f} x"]]
    return [f"memory: {data['preset']}, B={data['batch']}, L={data['seq_len']:,}, {data['dtype']} "
            f"({data['bytes_per_element']} bytes per element), Adam; accounting.training_memory",
            *table(["", "bytes", ""], rows),
            f"  activations kept for backward: measured with count_saved_bytes on one block of nn.LM on meta "
            f"({engine}), times {data['n_layers']} layers",
            *table(["activations", "per layer", "all layers", "", "vs estimate"], act),
            "  why: this engine keeps every intermediate and the full L x L attention probabilities; the estimate "
            "assumes FlashAttention and fused kernels"]


# ---------------------------------------------------------------- calc
CALC_HELP = ("an architecture calculator: any shape (or a preset with fields changed) -> parameters, FLOPs per "
             "token, Chinchilla tokens, training days, training memory, KV cache, counted on meta beside the closed "
             "forms")
SHAPE_OPTIONS = {"d_model": "--d-model", "n_layers": "--n-layers", "n_heads": "--n-heads",
                 "n_kv_heads": "--n-kv-heads", "d_ff": "--d-ff", "vocab_size": "--vocab"}
SHAPE_HELP = {"d_model": "the residual stream's width", "n_layers": "blocks", "n_heads": "query heads",
              "n_kv_heads": "key/value heads (GQA; default: --n-heads)", "d_ff": "the FFN's hidden width",
              "vocab_size": "tokens in the vocabulary"}


def _real(ok, expected: str):
    """An argparse type: a finite number for which ok(value) holds, else an error saying what was `expected`."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and ok(value)):
            raise argparse.ArgumentTypeError(f"{expected}, got {text!r}")
        return value
    return parse


_fraction = _real(lambda v: 0 < v <= 1, "must be a number in (0, 1] (0.4 is 40 %)")     # a utilisation
_positive_number = _real(lambda v: v > 0, "must be a number > 0")


def _count(text: str) -> int:
    """argparse type: a whole number >= 1, written 1400000000000, 1_400_000_000_000 or 1.4e12."""
    try:
        value = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            number = 0.0
        value = int(number) if math.isfinite(number) and number == int(number) else 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1 (1.4e12 is accepted), got {text!r}")
    return value


def add_calc_command(commands) -> None:
    """calc: the architecture is given field by field (over a preset, or over Llama's defaults)."""
    p = commands.add_parser("calc", help=CALC_HELP, description=CALC_HELP + " (docs/cli.md)")
    p.add_argument("--preset", type=_preset, default=None, metavar="NAME",
                   help=f"start from a preset and change the fields given (one of: {', '.join(PRESETS)}); without "
                        "it: RMSNorm, pre-norm, SwiGLU, RoPE, no biases (the Llama family)")
    for key, flag in SHAPE_OPTIONS.items():
        p.add_argument(flag, dest=key, type=_positive, default=None, metavar="N",
                       help=SHAPE_HELP[key])
    p.add_argument("--tied", action=argparse.BooleanOptionalAction, default=None,
                   help="the LM head reuses the embedding (default: the preset's, else untied)")
    p.add_argument("--seq-len", type=_positive, required=True, metavar="L",
                   help="tokens per sequence; any length (the context becomes at least L)")
    p.add_argument("--batch", type=_positive, default=1, metavar="B", help="sequences (default 1)")
    p.add_argument("--gpus", type=_positive, default=1, metavar="G", help="GPUs training together (default 1)")
    p.add_argument("--mfu", type=_fraction, default=0.4, metavar="M",
                   help="model FLOPs utilisation, the fraction of peak achieved (default 0.4)")
    p.add_argument("--peak-tflops", type=_positive_number, default=990.0, metavar="P",
                   help="peak TFLOP/s per GPU (default 990: H100 bf16 dense)")
    p.add_argument("--tokens", type=_count, default=None, metavar="T",
                   help="training tokens (default: Chinchilla's 20 per parameter)")
    p.add_argument("--dtype", choices=list(DTYPES), default="bf16", help="element type (default bf16)")
    p.add_argument("--json", action="store_true", help="print JSON (fields: docs/cli.md)")


def calc_config(args: argparse.Namespace) -> BlockConfig:
    """The preset (or BlockConfig's Llama defaults) with the given fields over it and a context of at least
    --seq-len; a shape that cannot be built is a CommandError naming the options."""
    base = args.preset
    fields = {k: getattr(args, k) for k in SHAPE_OPTIONS if getattr(args, k) is not None}
    if args.tied is not None:
        fields["tie_embeddings"] = args.tied
    if base is None:
        missing = [flag for k, flag in SHAPE_OPTIONS.items() if k not in fields and k != "n_kv_heads"]
        if missing:
            raise CommandError(f"give the architecture ({', '.join(missing)} missing), or start from --preset NAME")
        fields.setdefault("n_kv_heads", fields["n_heads"])
    shape = ({k: getattr(base, k) for k in SHAPE_OPTIONS} if base else {}) | fields
    d, H, H_kv = shape["d_model"], shape["n_heads"], shape["n_kv_heads"]
    if d % H:
        raise CommandError(f"--n-heads {H} does not divide --d-model {d}: each head takes d_model / n_heads dimensions")
    if H % H_kv:
        raise CommandError(f"--n-kv-heads {H_kv} does not divide --n-heads {H}: each key/value head serves an equal "
                           "group of query heads")
    if (base is None or base.rope) and (d // H) % 2:
        raise CommandError(f"d_head = --d-model {d} / --n-heads {H} = {d // H} is odd, but RoPE rotates pairs of "
                           "dimensions")
    context = max(args.seq_len, base.max_seq_len if base else 0)
    changed = base is None or any(v != getattr(base, k) for k, v in fields.items())
    name = "custom" if changed else base.name
    return base.with_(**fields, max_seq_len=context, name=name) if base else \
        BlockConfig(**fields, max_seq_len=context, name=name)


def calc_data(args: argparse.Namespace) -> dict:
    """Parameters, FLOPs, training compute and time, memory: measured on nn.LM(meta), beside accounting."""
    cfg = calc_config(args)
    L, B, dtype, size = args.seq_len, args.batch, args.dtype, DTYPES[args.dtype]
    block_shapes, model_shapes, _ = measured_params(cfg)
    total = sum(math.prod(s) for shapes in model_shapes.values() for s in shapes)
    per_block = sum(math.prod(s) for shapes in block_shapes.values() for s in shapes)
    closed_params = {"total": accounting.total_params(cfg), "per_block": accounting.params_per_block(cfg)}
    fc = count_model(cfg, B, L)
    flops, closed_flops = _phases(fc, ""), _closed_flops("model", cfg, L, B)
    N = total
    tokens = args.tokens or accounting.chinchilla_tokens(N)
    peak = args.peak_tflops * 1e12
    per_token = {"forward_matmul": flops["forward_matmul"] / (B * L), "forward_all": flops["forward_all"] / (B * L),
                 "training_matmul": (flops["forward_matmul"] + flops["backward_matmul"]) / (B * L),
                 "training_all": (flops["forward_all"] + flops["backward_all"]) / (B * L), "two_n": 2 * N,
                 "six_n": 6 * N}
    compute = {"six_n": accounting.training_flops(N, tokens),
               "counted": (flops["forward_matmul"] + flops["backward_matmul"]) * tokens // (B * L)}
    days = {k: accounting.training_days(c, args.gpus, peak, args.mfu) for k, c in compute.items()}
    memory = {k: int(v) for k, v in accounting.training_memory(cfg, L, B, bytes_per_element=size).items()}
    measured = measured_activations(cfg, B, L, dtype)
    return {"command": "calc", "preset": cfg.name, "from_preset": args.preset.name if args.preset else None,
            "config": {"d_model": cfg.d_model, "n_layers": cfg.n_layers, "n_heads": cfg.n_heads,
                       "n_kv_heads": cfg.n_kv_heads, "d_head": cfg.d_head, "d_ff": cfg.d_ff,
                       "vocab_size": cfg.vocab_size, "tied": cfg.tie_embeddings, "context": cfg.max_seq_len,
                       "norm": cfg.norm, "layout": cfg.layout, "ffn": cfg.ffn, "rope": cfg.rope},
            "seq_len": L, "batch": B, "dtype": dtype, "bytes_per_element": size,
            "parameters": {"total": total, "per_block": per_block, "closed_form": closed_params,
                           "difference": {"total": total - closed_params["total"],
                                          "per_block": per_block - closed_params["per_block"]}},
            "flops": {"measured": flops, "closed_form": closed_flops,
                      "difference": {p: flops[p] - closed_flops[p] for p in PHASES}},
            "per_token": per_token,
            "training": {"tokens": tokens, "chinchilla": args.tokens is None, "gpus": args.gpus, "mfu": args.mfu,
                         "peak_tflops": args.peak_tflops, "flops": compute,
                         "days": days},
            "memory": {"estimate": memory, "kv_cache": memory["kv_cache"], "measured_activations": measured,
                       "measured_over_estimate": measured["layers"] / memory["activations"]}}


def calc_text(data: dict) -> list[str]:
    """The architecture in one line, then counts beside closed forms, the training time, and memory."""
    c, p, f, t, m = data["config"], data["parameters"], data["flops"], data["training"], data["memory"]
    tied = "tied" if c["tied"] else "untied"
    rows = [["parameters", p["total"], p["closed_form"]["total"], p["difference"]["total"], human(p["total"])],
            ["  per block", p["per_block"], p["closed_form"]["per_block"], p["difference"]["per_block"],
             human(p["per_block"])]]
    rows += [[f"FLOPs, {k.replace('_', ' ')}", f["measured"][k], f["closed_form"][k], f["difference"][k],
              human(f["measured"][k])] for k in PHASES]
    pt, n_tokens = data["per_token"], data["batch"] * data["seq_len"]
    rule = "Chinchilla: 20 N" if t["chinchilla"] else "--tokens"
    e = m["estimate"]
    mem = [[LABELS[k], e[k], human_bytes(e[k])] for k in ("parameters", "gradients", "optimizer", "activations",
                                                          "total")]
    mem += [["activations (measured, this engine)", m["measured_activations"]["layers"],
             human_bytes(m["measured_activations"]["layers"])],
            ["KV cache (inference at this length)", m["kv_cache"], human_bytes(m["kv_cache"])]]
    origin = f" (from {data['from_preset']})" if data["from_preset"] not in (None, data["preset"]) else ""
    return [f"calc: {data['preset']}{origin}: d_model {c['d_model']:,}, {c['n_layers']} layers, "
            f"{c['n_heads']} heads ({c['n_kv_heads']} KV), d_head {c['d_head']}, d_ff {c['d_ff']:,}, vocab "
            f"{c['vocab_size']:,}, {tied}; B={data['batch']}, L={data['seq_len']:,}, {data['dtype']}",
            "  nn.LM built on the meta device (context = L at least) and counted, beside accounting's closed forms",
            *table(["", "measured", "closed form", "difference", ""], rows),
            f"  per token (the counts / B L = {n_tokens:,} tokens), matmuls: forward {human(pt['forward_matmul'])} "
            f"(2N = {human(pt['two_n'])}), training {human(pt['training_matmul'])} (6N = {human(pt['six_n'])})",
            f"    all ops: forward {human(pt['forward_all'])}, training {human(pt['training_all'])}",
            f"  training on {t['tokens']:,} tokens ({rule}): 6 N T = {t['flops']['six_n']:.3g} FLOPs; counted at "
            f"this L: {t['flops']['counted']:.3g}",
            f"  on {t['gpus']:,} GPU{'s' if t['gpus'] > 1 else ''} of {t['peak_tflops']:g} TFLOP/s at {t['mfu']:.1%} "
            f"MFU: {t['days']['six_n']:,.1f} "
            f"days (6 N T), {t['days']['counted']:,.1f} days (counted FLOPs)",
            f"  memory to train with Adam ({data['bytes_per_element']} bytes per element; accounting.training_memory)",
            *table(["", "bytes", ""], mem),
            "  the estimate assumes FlashAttention and fused kernels; this engine keeps every intermediate and the "
            f"L x L probabilities ({m['measured_over_estimate']:,.2f} x the estimate)"]


def run_calc(args: argparse.Namespace, out=print) -> int:
    """calc: print its table, or its JSON with --json."""
    data = calc_data(args)
    out(json.dumps(data, indent=2) if args.json else "\n".join(calc_text(data)))
    return 0


# ---------------------------------------------------------------- graph
GRAPH_FORMATS = ("svg", "png", "pdf", "dot", "html")        # html: the explorer page (explore.py)
VALUES_LIMIT = 2 * 2**30  # bytes: --values runs the model for real, and the recording keeps every tensor it saw


def writable_folder(folder: Path, option: str) -> None:
    """Make `folder` and its parents, or say in a CommandError why the command cannot write there."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise CommandError(f"{option}: cannot make the folder {folder}: a file is in the way") from None
    except OSError as e:
        raise CommandError(f"{option}: cannot make the folder {folder}: {e.strerror}") from None
    try:
        tempfile.TemporaryFile(dir=folder).close()                  # made and removed: the folder takes files
    except OSError as e:
        raise CommandError(f"{option}: cannot write in the folder {folder}: {e.strerror}") from None


def check_values_memory(args: argparse.Namespace) -> None:
    """--values runs the block (or model) on a real device: refuse when the recording would hold more than
    VALUES_LIMIT bytes, as measured by recording the same run on the shape-only device."""
    need = record_bytes(args.preset, whole_model=args.model, B=args.batch, L=args.seq_len, backward=args.backward)
    if need > VALUES_LIMIT:
        what = "the model" if args.model else "one block"
        at_one = record_bytes(args.preset, whole_model=args.model, B=1, L=1, backward=args.backward)
        smaller = "lower --seq-len and --batch" if at_one <= VALUES_LIMIT else \
            f"choose a smaller preset (even at B=1, L=1 it needs {human_bytes(at_one)})"
        raise CommandError(f"--values runs {what} of {args.preset.name} at B={args.batch}, L={args.seq_len:,} on "
                           f"{args.device} in float32 and would hold about {human_bytes(need)} (parameters, every "
                           f"intermediate{' and gradient' if args.backward else ''}), over the limit of "
                           f"{human_bytes(VALUES_LIMIT)}; drop --values to draw on the shape-only device, or {smaller}")


def write_graph(dot: str, path: Path, fmt: str, dpi: int | None = None) -> None:
    """DOT text as is, or rendered by graphviz; a missing graphviz or an unwritable path is a CommandError."""
    try:
        if fmt == "dot":
            path.write_text(dot)
        else:
            render(dot, path, dpi=dpi)
    except RuntimeError as e:                                        # graphviz (package or `dot`) missing
        raise CommandError(f"--out {path}: {e}") from None
    except OSError as e:
        raise CommandError(f"--out {path}: cannot write it: {e.strerror}") from None


def graph_data(args: argparse.Namespace) -> dict:
    """Record one block (or the model) and write its graph; every refusal comes before the recording."""
    cfg, path = args.preset, Path(args.out)
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in GRAPH_FORMATS:
        raise CommandError(f"--out {path}: the extension must be one of {', '.join(GRAPH_FORMATS)}")
    if path.is_dir():
        raise CommandError(f"--out {path}: is a folder; give a file name ending in .{fmt}")
    writable_folder(path.parent, "--out")
    if args.dpi is not None and fmt != "png":
        raise CommandError(f"--dpi {args.dpi}: only a .png has pixels; {path.name} is a vector drawing ({fmt})")
    if args.values:
        check_values_memory(args)
    start = time.perf_counter()
    graph = record(cfg, whole_model=args.model, B=args.batch, L=args.seq_len, backward=args.backward or fmt == "html",
                   values=args.values, device=args.device)
    title = (f"{cfg.name} {'model' if args.model else 'block'}, x {(args.batch, args.seq_len)}"
             f"{', backward' if args.backward else ''}{f', depth {args.depth}' if args.depth is not None else ''}")
    if fmt == "html":
        return explorer_page(args, graph, path, title, start)
    view = graph.view(args.depth, backward=args.backward, values=args.values, fold=not args.all_layers)
    for warning in view.warnings:                                    # e.g. a drawing too big to read
        print(f"{PROG} graph: warning: {warning}", file=sys.stderr)
    write_graph(view.to_dot(title), path, fmt, args.dpi)
    return {"command": "graph", "preset": cfg.name, "model": args.model, "depth": args.depth,
            "backward": args.backward, "seq_len": args.seq_len, "batch": args.batch, "path": str(path),
            "format": fmt, "nodes": len(view.nodes), "edges": len(view.edges),
            "seconds": round(time.perf_counter() - start, 3)}


def explorer_page(args: argparse.Namespace, graph, path: Path, title: str, start: float) -> dict:
    """--out FILE.html: the explorer, both phases recorded, opened at --depth (default 1) on the forward and
    backward side by side (--backward: the backward alone)."""
    from .explore import explorer
    title = title.replace(", backward", "")
    page = explorer(graph, title=title, depth=1 if args.depth is None else args.depth, fold=not args.all_layers,
                    values=args.values, show=["backward"] if args.backward else None)
    try:
        page.save(path)
    except OSError as e:
        raise CommandError(f"--out {path}: cannot write it: {e.strerror}") from None
    return {"command": "graph", "preset": args.preset.name, "model": args.model, "depth": args.depth,
            "backward": args.backward, "seq_len": args.seq_len, "batch": args.batch, "path": str(path),
            "format": "html", "nodes": len(page.data["nodes"]), "edges": sum(map(len, page.data["edges"].values())),
            "bytes": path.stat().st_size, "seconds": round(time.perf_counter() - start, 3)}


def graph_text(data: dict) -> list[str]:
    """One line: what was drawn, where, and how big."""
    what = "the model" if data["model"] else "one block"
    view = "backward (the gradient flow)" if data["backward"] else "forward"
    depth = "every primitive" if data["depth"] is None else f"depth {data['depth']}"
    if data["format"] == "html":
        return [f"graph: {data['preset']}, {what}, forward and backward, opened at depth {data['depth'] or 1}: "
                f"wrote the explorer {data['path']} ({data['nodes']:,} nodes, {data['edges']:,} edges, "
                f"{data['bytes'] / 2**20:.1f} MiB, {data['seconds']:.2f} s); open it in a browser"]
    return [f"graph: {data['preset']}, {what}, {view}, {depth}: wrote {data['path']} "
            f"({data['nodes']:,} nodes, {data['edges']:,} edges, {data['seconds']:.2f} s)"]


# ---------------------------------------------------------------- argument parsing
def _depth(text: str) -> int:
    """argparse type: an integer >= 0."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return int(text)


def _preset(name: str) -> BlockConfig:
    """argparse type: a preset's config, or an error that lists the presets."""
    try:
        return preset(name)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def device_arg(name: str) -> str:
    """argparse type: a device the engine can run on here ('cpu', 'cuda', 'cuda:N', 'strict'), or an error that
    says why not (an unknown name, CuPy or a GPU missing)."""
    try:
        backend = get_backend(name)
    except (ValueError, RuntimeError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if backend.name == "meta":
        raise argparse.ArgumentTypeError("'meta' holds shapes but no values; choose cpu, cuda or cuda:N")
    return name


def _positive(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


COMMANDS = {
    "presets": ("every preset: its shape numbers and total parameters", presets_data, presets_text),
    "params": ("parameters per component, per block and in total, counted on the model and in closed form",
               params_data, params_text),
    "flops": ("FLOPs per module and phase of a forward and backward, counted and in closed form", flops_data,
              flops_text),
    "walk": ("one token through one block, step by step: shapes and FLOPs", walk_data, walk_text),
    "memory": ("training memory: parameters, gradients, Adam, activations (estimated and measured), KV cache",
               memory_data, memory_text),
    "graph": ("draw the computation graph of a block (or the model), forward or backward, as svg/png/pdf/dot",
              graph_data, graph_text),
}


def add_counting_command(commands, name: str) -> None:
    """Register one counting command and its arguments on an argparse subparsers object."""
    help_text = COMMANDS[name][0]
    p = commands.add_parser(name, help=help_text, description=help_text)
    if name != "presets":
        p.add_argument("--preset", type=_preset, required=True, metavar="NAME", help=f"one of: {', '.join(PRESETS)}")
    if name in ("flops", "memory"):
        p.add_argument("--seq-len", type=_positive, required=True, metavar="L", help="tokens per sequence")
        p.add_argument("--batch", type=_positive, default=1, metavar="B", help="sequences (default 1)")
    if name == "memory":
        p.add_argument("--dtype", choices=list(DTYPES), default="bf16", help="element type (default bf16)")
    if name == "graph":
        p.add_argument("--out", required=True, metavar="FILE",
                       help="output file: .svg, .png, .pdf or .dot; .html: the interactive explorer (forward and "
                            "backward, modules opened and closed with a click)")
        p.add_argument("--depth", type=_depth, default=None, metavar="N",
                       help="collapse modules below this depth into boxes (default: every primitive)")
        p.add_argument("--backward", action="store_true", help="draw the gradient flow instead of the forward")
        p.add_argument("--model", action="store_true", help="the whole model, not one block")
        p.add_argument("--seq-len", type=_positive, default=16, metavar="L", help="tokens (default 16)")
        p.add_argument("--batch", type=_positive, default=1, metavar="B", help="sequences (default 1)")
        p.add_argument("--values", action="store_true", help="value and gradient summaries on the nodes (runs the "
                       f"model for real: refused above {human_bytes(VALUES_LIMIT)})")
        p.add_argument("--device", type=device_arg, default="cpu", metavar="DEVICE",
                       help="where --values runs: cpu (default), cuda, cuda:N")
        p.add_argument("--all-layers", action="store_true",
                       help="with --model: draw every layer, not identical layers once with their count")
        p.add_argument("--dpi", type=_positive, default=None, metavar="N",
                       help=f"pixels per inch of a .png (default {PNG_DPI})")
    p.add_argument("--json", action="store_true", help="print JSON (fields: docs/cli.md)")


TOUR_HELP = "the tiny block forward and backward: autograd vs hand-derived vs finite differences, its FLOPs and graphs"


def parser() -> argparse.ArgumentParser:
    """The one parser of every command: `tour` and the counting and drawing commands."""
    top = argparse.ArgumentParser(prog=PROG,
                                  description="Learn how a transformer block computes by running it.")
    commands = top.add_subparsers(dest="command", metavar="<command>")
    tour = commands.add_parser("tour", help=TOUR_HELP, description=TOUR_HELP)
    tour.add_argument("--out-dir", default="tinygrad_block_tour", metavar="DIR",
                      help="where the graph drawings go (default: ./tinygrad_block_tour)")
    tour.add_argument("--device", type=device_arg, default="cpu", metavar="DEVICE",
                      help="where the block runs: cpu (default), cuda, cuda:N")
    for name in COMMANDS:
        add_counting_command(commands, name)
    add_calc_command(commands)
    add_course_commands(commands)
    add_train_command(commands)
    add_model_commands(commands)
    return top


def _lesson_number(text: str) -> int:
    """argparse type: a lesson number, 1 or 01."""
    if not text.isdigit() or not 1 <= int(text) <= 99:
        raise argparse.ArgumentTypeError(f"a lesson number is 1 to 99 (e.g. 01), got {text!r}")
    return int(text)


def add_course_commands(commands) -> None:
    """lesson, exercise and check: the course's commands (course.py)."""
    p = commands.add_parser("lesson", help="run a numbered lesson, or write it as a notebook",
                            description="Run lessons/NN_*.py as a script, or with --notebook write it as a .ipynb.")
    p.add_argument("number", type=_lesson_number, metavar="NN")
    p.add_argument("--notebook", action="store_true", help="write the lesson as a .ipynb (the 'notebook' extra)")
    p.add_argument("--execute", action="store_true",
                   help="with --notebook: run every cell too, so the notebook holds its outputs and pictures")
    p.add_argument("--out-dir", default=None, metavar="DIR", help="where the notebook goes (default lessons/out/NN)")
    p = commands.add_parser("exercise", help="write a lesson's exercises as a starter file to fill in",
                            description="Write exercise_NN.py: a lesson's exercises, each a function to write.")
    p.add_argument("number", type=_lesson_number, metavar="NN")
    p.add_argument("--out", default=None, metavar="FILE", help="the file to write (default exercise_NN.py)")
    p.add_argument("--force", action="store_true", help="replace the file if it exists")
    p = commands.add_parser("check", help="check your solutions to a lesson's exercises",
                            description="Run the lesson's checker on your file; each exercise passes or says why not.")
    p.add_argument("number", type=_lesson_number, metavar="NN")
    p.add_argument("file", nargs="?", default=None, metavar="FILE", help="your solutions (default exercise_NN.py)")


def run_course(args: argparse.Namespace, out=print) -> int:
    """The course's commands; a course mistake (no such lesson, no file) becomes one line, status 2."""
    from . import course
    try:
        if args.command == "lesson" and not args.notebook:
            if args.execute or args.out_dir:
                raise course.CourseError("--execute and --out-dir go with --notebook: "
                                         f"{PROG} lesson {args.number:02d} --notebook --execute")
            return course.run_lesson(args.number)
        if args.command == "lesson":
            path = course.write_notebook(args.number, Path(args.out_dir) if args.out_dir else None, args.execute)
            how = "its cells have run: open it with Jupyter" if args.execute else \
                "open it with Jupyter; run its cells in order"
            out(f"lesson {args.number:02d}: wrote {path} ({how})")
            return 0
        default = Path(f"exercise_{args.number:02d}.py")
        if args.command == "exercise":
            path = course.write_starter(args.number, Path(args.out) if args.out else default, args.force)
            out(f"exercise {args.number:02d}: wrote {path}; fill in each function, then run "
                f"`{PROG} check {args.number:02d}{'' if path == default else ' ' + str(path)}`")
            return 0
        path = Path(args.file) if args.file else default
        results = course.check(args.number, course.load_solution(path, args.number))
    except course.CourseError as e:
        raise CommandError(str(e)) from None
    for name, why in results:
        out(f"  {'ok  ' if why is None else 'FAIL'} {name}" + ("" if why is None else f": {why}"))
    passed = sum(why is None for _, why in results)
    out(f"check {args.number:02d}: {passed} of {len(results)} exercises pass ({path})")
    return 0 if passed == len(results) else 1


# ---------------------------------------------------------------- train
TRAIN_HELP = "train a small model on a demonstration task: induction (copying) or characters of text"


def _seed(text: str) -> int:
    """argparse type: a seed, an integer >= 0."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"a seed is an integer >= 0, got {text!r}")
    return int(text)


def add_train_command(commands) -> None:
    """train: the two demonstrations of train.py, with their checkpoint, loss curve and pictures."""
    p = commands.add_parser("train", help=TRAIN_HELP, description=TRAIN_HELP + " (docs/training.md)")
    p.add_argument("demo", choices=("induction", "text"),
                   help="induction: n random tokens then the same again, 2 layers, until >= 99%% accuracy on the "
                        "repeat; text: a character model of Python's help pages")
    p.add_argument("--steps", type=_positive, default=None, metavar="N",
                   help="optimizer steps (default: induction 300, text 600)")
    p.add_argument("--seed", type=_seed, default=0, metavar="S", help="one seed: weights, data, samples (default 0)")
    p.add_argument("--out", default=None, metavar="DIR", help="where the run goes (default out/<demo>)")
    p.add_argument("--device", type=device_arg, default="cpu", metavar="DEVICE", help="cpu (default), cuda, cuda:N")
    p.add_argument("--text-file", default=None, metavar="FILE",
                   help="text: train on this UTF-8 text file instead of Python's help pages")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG pictures (they need matplotlib)")
    p.add_argument("--save-every", type=_positive, default=None, metavar="N",
                   help="save the run's state (DIR/checkpoints/) every N steps (default: every minute, and at "
                        "the end); Ctrl-C saves and stops")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its newest checkpoint, with the same demo, seed and steps")
    p.add_argument("--json", action="store_true", help="print the results as JSON (fields: docs/cli.md)")


def train_text(data: dict) -> list[str]:
    """What a demonstration reached, and where its files went."""
    if data["demo"] == "induction":
        head = data["induction_head"]
        lines = [f"train induction: {data['steps']} steps, seed {data['seed']}; {data['n']} random tokens, then the "
                 "same again; a 2-layer model",
                 f"  accuracy on the predictable half of 512 held-out sequences: {data['accuracy']:.2%} (threshold "
                 f"{data['threshold']:.0%}: {'passed' if data['passed'] else 'NOT reached'}); loss "
                 f"{data['loss']:.4f} nats",
                 f"  induction head: layer {head['layer']} head {head['head']}, {head['stripe_weight']:.3f} of its "
                 f"attention on the token {data['n'] - 1} back"]
    else:
        lines = [f"train text: {data['steps']} steps, seed {data['seed']}; characters of {data['source']} "
                 f"({data['train_chars']:,} to train on, {data['held_out_chars']:,} held out, "
                 f"{data['vocab_size']} characters)",
                 f"  held-out loss {data['loss']:.3f} nats per character ({data['bits_per_char']:.2f} bits), "
                 f"next-character accuracy {data['accuracy']:.1%}",
                 f"  a sample, continuing {data['prompt']!r} at temperature 0.8:",
                 *("    | " + line for line in data["sample"].splitlines())]
    lines.append(f"  trained in {data['seconds']:.1f} s, {data['tokens_per_s']:,.0f} tokens/s")
    lines += [f"  {name.replace('_', ' ')}: {path}" for name, path in data["paths"].items()]
    return lines


def read_text_file(path: str, demo: str) -> str:
    """--text-file: a readable UTF-8 file, for the text demonstration only."""
    if demo != "text":
        raise CommandError(f"--text-file is for `train text`; `train {demo}` makes its own data")
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CommandError(f"--text-file {path}: cannot read it as UTF-8 text ({getattr(e, 'strerror', None) or e})")\
            from None


def run_train(args: argparse.Namespace, out=print) -> int:
    """Run a demonstration; status 1 if the induction model misses its threshold."""
    from . import train                                             # tqdm and the data: loaded for training only
    folder = Path(args.out or f"out/{args.demo}")
    writable_folder(folder, "--out")
    if not args.no_plots:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise CommandError("the loss curve and attention pictures need matplotlib: install the 'viz' extra "
                               "(pip install 'tinygrad_block[viz]'), or pass --no-plots") from None
    demo = train.induction_demo if args.demo == "induction" else train.text_demo
    kwargs = {"steps": args.steps} if args.steps else {}
    if args.text_file is not None:
        kwargs |= {"text": read_text_file(args.text_file, args.demo), "source": args.text_file}
    try:
        result = demo(folder, seed=args.seed, device=args.device, pictures=not args.no_plots, resume=args.resume,
                      save_every=args.save_every, **kwargs)
    except (ValueError, FileNotFoundError) as e:                     # a text too short; nothing to resume
        raise CommandError(str(e)) from None
    except train.TrainingDiverged as e:                               # one line, status 1: not a user's mistake
        print(f"{PROG} train: {str(e).removeprefix('train: ')}", file=sys.stderr)
        return 1
    except train.TrainingStopped as e:                                # Ctrl-C: saved, and how to go on
        again = " ".join(["train", args.demo, "--out", str(folder), "--seed", str(args.seed)]
                         + (["--steps", str(args.steps)] if args.steps else [])
                         + (["--text-file", args.text_file] if args.text_file else []) + ["--resume"])
        print(f"{PROG} train: {e}; continue with: {PROG} {again}", file=sys.stderr)
        return 130
    data = {"command": "train", **{k: v for k, v in result.items() if k not in ("model", "history", "tokenizer")}}
    out(json.dumps(data, indent=2) if args.json else "\n".join(train_text(data)))
    return 0 if data.get("passed", True) else 1


# ---------------------------------------------------------------- generate and inspect
GENERATE_HELP = "continue a prompt with a checkpoint (a Hugging Face folder, or a folder that `train` wrote)"
INSPECT_HELP = "count a checkpoint's parameters from its safetensors headers alone, beside the closed form"


def _token_ids(text: str) -> list[int]:
    """argparse type: token ids, separated by spaces or commas."""
    parts = text.replace(",", " ").split()
    if not parts or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"token ids are integers >= 0 separated by spaces or commas, got {text!r}")
    return [int(p) for p in parts]


_temperature = _real(lambda v: v >= 0, "a temperature is a number >= 0 (0: greedy)")


def add_model_commands(commands) -> None:
    """generate and inspect: what a checkpoint holds, and what it writes."""
    p = commands.add_parser("generate", help=GENERATE_HELP, description=GENERATE_HELP + " (docs/generation.md)")
    p.add_argument("path", metavar="PATH", help="a checkpoint folder (config.json + *.safetensors), or a train run")
    prompt = p.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", metavar="TEXT",
                        help="text to continue, through the checkpoint's tokenizer.json (or a train run's vocab.json)")
    prompt.add_argument("--ids", type=_token_ids, metavar="IDS", help="token ids to continue, e.g. '1 15 27'")
    p.add_argument("--max-new-tokens", type=_positive, default=100, metavar="N", help="tokens to add (default 100)")
    p.add_argument("--temperature", type=_temperature, default=0.8, metavar="T", help="0: greedy (default 0.8)")
    p.add_argument("--top-k", type=_positive, default=None, metavar="K", help="draw among the K likeliest only")
    p.add_argument("--seed", type=_seed, default=0, metavar="S", help="the sampling generator's seed (default 0)")
    p.add_argument("--no-cache", action="store_true", help="recompute the whole sequence for every token")
    p.add_argument("--device", type=device_arg, default="cpu", metavar="DEVICE", help="cpu (default), cuda, cuda:N")
    p.add_argument("--json", action="store_true", help="print the results as JSON (fields: docs/cli.md)")
    p = commands.add_parser("inspect", help=INSPECT_HELP, description=INSPECT_HELP + " (docs/checkpoints.md)")
    p.add_argument("path", metavar="PATH", help="a checkpoint folder (config.json + *.safetensors), or a train run")
    p.add_argument("--json", action="store_true", help="print the results as JSON (fields: docs/cli.md)")


def prompt_ids(args: argparse.Namespace, tokenizer, cfg, folder: Path) -> list[int]:
    """--prompt through the checkpoint's tokenizer, or --ids; checked against the vocabulary and the context
    before any weight is read."""
    if args.prompt is None and args.ids is None:
        raise ValueError("give a prompt: --prompt TEXT (with the checkpoint's tokenizer) or --ids '1 2 3'")
    if args.prompt is not None and tokenizer is None:
        raise ValueError(f"{folder} has no tokenizer.json (nor the vocab.json that `train` writes) to turn --prompt "
                         "into tokens; give token ids with --ids")
    ids = tokenizer.encode(args.prompt) if args.prompt is not None else args.ids
    if not ids:
        raise ValueError(f"the prompt {args.prompt!r} is empty; give at least one character or token id")
    if max(ids) >= cfg.vocab_size:
        raise ValueError(f"token id {max(ids)} is outside the vocabulary of {cfg.vocab_size} (ids 0.."
                         f"{cfg.vocab_size - 1})")
    room = cfg.max_seq_len - len(ids)
    if args.max_new_tokens > room:
        raise ValueError(f"the prompt's {len(ids)} tokens + --max-new-tokens {args.max_new_tokens} exceed the "
                         f"model's context of {cfg.max_seq_len} tokens; ask for at most {max(room, 0)} new tokens"
                         + ("" if room > 0 else " (shorten the prompt)"))
    return ids


def shown_text(tokenizer, ids: list[int]) -> str:
    """The ids as text. A model's vocabulary can be larger than its tokenizer's (rows kept for padding, as in Qwen2):
    an id the tokenizer lacks is shown as <id N>, never dropped."""
    pieces, run = [], []
    for i in ids + [None]:
        if i is not None and i < tokenizer.vocab_size:
            run.append(i)
            continue
        pieces += [tokenizer.decode(run)] if run else []
        pieces += [f"<id {i}>"] if i is not None else []
        run = []
    return "".join(pieces)


def generate_data(args: argparse.Namespace) -> dict:
    """Check the config, tokenizer and prompt; load the weights; LM.generate the tokens (prefill, then one token at
    a time), timing each as it arrives."""
    import tinygrad_block as tb
    from tqdm import tqdm

    from .nn import LM
    from .nn.hf_config import config_from_hf
    from .nn.pretrained import checkpoint_files
    from .tokenizer import load_tokenizer
    folder, hf_config, _, _ = checkpoint_files(args.path, "generate")
    cfg = config_from_hf(hf_config, "generate")[1]
    tokenizer = load_tokenizer(folder)
    ids = prompt_ids(args, tokenizer, cfg, folder)
    model = LM.from_pretrained(folder, device=args.device)
    prompt = tb.tensor([ids], dtype=tb.int64, device=args.device)
    bar = tqdm(total=args.max_new_tokens, desc="decode", unit="token", leave=False, disable=None)
    times = []                                                       # when each new token was chosen

    def arrived(i, new):
        new.numpy()                                                  # the token is on the host: its time is real
        times.append(time.perf_counter())
        bar.update(i > 0)                                            # token 0 comes with the prefill
    start = time.perf_counter()
    tokens = model.generate(prompt, args.max_new_tokens, args.temperature, args.top_k, tb.Generator(args.seed),
                            use_cache=not args.no_cache, on_token=arrived).numpy()[0].tolist()
    bar.close()
    prefill_s, decode_s = times[0] - start, times[-1] - times[0] if len(times) > 1 else 0.0
    return {"command": "generate", "checkpoint": str(folder), "prompt_tokens": len(ids),
            "new_tokens": args.max_new_tokens, "cache": not args.no_cache, "temperature": args.temperature,
            "top_k": args.top_k, "seed": args.seed, "ids": tokens,
            "tokenizer": tokenizer.name if tokenizer else None,
            "text": shown_text(tokenizer, tokens) if tokenizer else None,
            "prefill_s": prefill_s, "decode_s": decode_s,
            "decode_tokens_per_s": (len(times) - 1) / decode_s if decode_s else 0.0}


def generate_text(data: dict) -> list[str]:
    shown = data["text"] if data["text"] is not None else " ".join(map(str, data["ids"]))
    how = "with the KV cache" if data["cache"] else "recomputing every token"
    return [shown, "", f"generate: {data['prompt_tokens']} prompt tokens + {data['new_tokens']} new from "
            f"{data['checkpoint']} ({how}); prefill {data['prefill_s'] * 1000:.1f} ms, decode "
            f"{data['decode_tokens_per_s']:,.1f} tokens/s"]


def run_models(args: argparse.Namespace, out=print) -> int:
    """generate or inspect; a checkpoint's problem (a missing file, a tensor that does not fit) is one line."""
    from .measure import inspect_checkpoint, inspect_text
    try:
        if args.command == "inspect":
            data = {"command": "inspect", **inspect_checkpoint(args.path)}
            text = inspect_text(data)
        else:
            data = generate_data(args)
            text = generate_text(data)
    except (ValueError, TypeError, FileNotFoundError, FileExistsError, OSError) as e:
        raise CommandError(str(e)) from None
    out(json.dumps(data, indent=2, default=str) if args.json else "\n".join(text))
    return 0


def run_tour(args: argparse.Namespace) -> int:
    """The tour (tour.py); status 1 if its own checks fail."""
    from .tour import run as tour                                    # numpy-side tables: loaded for the tour only
    writable_folder(Path(args.out_dir), "--out-dir")
    ok = tour(out_dir=args.out_dir, device=args.device)["ok"]
    print(f"next, the course, one lesson at a time: {PROG} lesson 01 (add --notebook --execute for a notebook); "
          "lessons/README.md lists them all")
    return 0 if ok else 1


def run(args: argparse.Namespace, out=print) -> int:
    """Run a parsed counting command: print its table, or its JSON with --json."""
    if getattr(args, "seq_len", None) and args.seq_len > args.preset.max_seq_len:
        raise CommandError(f"--seq-len {args.seq_len:,} exceeds the context of {args.preset.name}: "
                           f"{args.preset.max_seq_len:,} tokens")
    _, collect, text = COMMANDS[args.command]
    data = collect(args)
    notes = notes_for(args.command, args.preset.name) if hasattr(args, "preset") else []
    if notes:
        data["curriculum"] = notes
    out(json.dumps(data, indent=2) if args.json else "\n".join(text(data) + curriculum_text(notes)))
    return 0


def curriculum_text(notes: list[dict]) -> list[str]:
    """Where a commonly quoted figure differs from the exact value: both, and why."""
    lines = ["  where commonly quoted figures differ:"] if notes else []
    for n in notes:
        lines += [f"    {n['what']}: quoted as {n['quoted']}; exact: {n['exact']}", f"      ({n['why']})"]
    return lines


def main(argv: list[str] | None = None) -> int:
    """Parse and run one command (`python -m tinygrad_block`, the `tinygrad-block` script, the tests). No command:
    the help, status 2. A user's mistake: one line on stderr, status 2 (SystemExit, as argparse's own)."""
    top = parser()
    args = top.parse_args(argv)
    if args.command is None:
        top.print_help()
        return 2
    try:
        if args.command in ("lesson", "exercise", "check"):
            return run_course(args)
        if args.command == "calc":
            return run_calc(args)
        if args.command == "train":
            return run_train(args)
        if args.command in ("generate", "inspect"):
            return run_models(args)
        return run_tour(args) if args.command == "tour" else run(args)
    except CommandError as e:
        top.exit(2, f"{top.prog} {args.command}: error: {e}\n")
    except BrokenPipeError:                                          # the reader stopped early (`| head`)
        sys.stdout = None                                            # nothing left to flush at exit
        return 0
