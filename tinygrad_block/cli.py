"""The counting and drawing commands of `python -m tinygrad_block`: presets, params, flops, walk, memory, graph.

Each one measures with the engine (a model built on the shape-only 'meta' device, counted through the one
choke point every primitive passes) and prints the closed form of `accounting` beside it. `--json` prints
the same numbers for machines; docs/cli.md documents every field.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import time
from collections import Counter
from pathlib import Path

from . import accounting
from .backend import Generator, float16, float32, int64
from .device import get_backend
from .counting import FlopCounter, count_flops, count_saved_bytes
from .curriculum import notes_for
from .accounting import params_per_block, total_params
from .trace import observe
from .graph import record_graph, render
from .nn import LM, PRESETS, BlockConfig, TransformerBlock, preset
from .tensor import Tensor, ones_like, randn, zeros

DTYPES = {"bf16": 2, "fp16": 2, "fp32": 4}  # bytes per element; the engine stands in float16 for both 2-byte ones
PHASES = ("forward_matmul", "forward_all", "backward_matmul", "backward_all")


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


# ---------------------------------------------------------------- models on the meta device
def meta_lm(cfg: BlockConfig, dtype=float32) -> LM:
    """The whole model with shapes only: building even a 70B model takes milliseconds and no memory."""
    return LM(cfg, generator=Generator(0), dtype=dtype, device="meta")


def meta_ids(B: int, L: int) -> Tensor:
    """Token ids of shape (B, L) on meta: their values never matter for counting."""
    return zeros(B, L, dtype=int64, device="meta")                  # (B, L) token ids


# ---------------------------------------------------------------- presets
def presets_data(args: argparse.Namespace) -> dict:
    """Every preset's config numbers and its closed-form total of parameters."""
    rows = []
    for name, cfg in PRESETS.items():
        rows.append({"name": name, "d_model": cfg.d_model, "n_heads": cfg.n_heads, "n_kv_heads": cfg.n_kv_heads,
                     "d_head": cfg.d_head, "d_ff": cfg.d_ff, "n_layers": cfg.n_layers, "vocab_size": cfg.vocab_size,
                     "context": cfg.max_seq_len, "norm": cfg.norm, "norm_position": cfg.norm_position,
                     "ffn": cfg.ffn, "tied": cfg.tie_embeddings, "total_params": accounting.total_params(cfg)})
    return {"command": "presets", "presets": rows}


def presets_text(data: dict) -> list[str]:
    """The presets as one aligned table."""
    keys = ["name", "d_model", "n_heads", "n_kv_heads", "d_head", "d_ff", "n_layers", "vocab_size", "context"]
    rows = [[p[k] for k in keys] + [f"{p['norm']} ({p['norm_position']})", p["ffn"], "yes" if p["tied"] else "no",
                                    human(p["total_params"])] for p in data["presets"]]
    head = ["preset", "d_model", "heads", "kv heads", "d_head", "d_ff", "layers", "vocab", "context", "norm", "FFN",
            "tied", "params"]
    return ["presets: the named architectures (python -m tinygrad_block <command> --preset NAME)",
            *table(head, rows, left=(0, 9, 10, 11)),
            "  params: accounting.total_params(cfg); `params --preset NAME` counts them on the built model"]


# ---------------------------------------------------------------- params
PROJECTION_ROWS = {"q_proj": "W_Q", "k_proj": "W_K", "v_proj": "W_V", "o_proj": "W_O", "gate_proj": "W_gate",
                   "up_proj": "W_up", "down_proj": "W_down"}
MODEL_ROWS = {"embed": "embedding", "pos_embed": "position_embedding", "norm": "final_norm", "lm_head": "lm_head"}
LABELS = {"position_embedding": "position embedding", "final_norm": "final norm", "lm_head": "LM head",
          "biases": "biases (projections)", "norms": "norms (norm1, norm2)", "lora": "LoRA adapters (A, B)",
          "optimizer": "optimizer (Adam)", "activations": "activations (estimate)", "kv_cache": "KV cache",
          "parameters": "parameters", "gradients": "gradients", "total": "total"}


def block_row(name: str) -> str:
    """A block's parameter name ('attn.q_proj.weight', 'norm1.weight', ...) -> its component row."""
    parts = name.split(".")
    if parts[-1] in ("lora_A", "lora_B"):
        return "lora"
    if parts[0] in ("norm1", "norm2"):
        return "norms"
    return "biases" if parts[-1] == "bias" else PROJECTION_ROWS[parts[-2]]


def measured_params(cfg: BlockConfig) -> tuple[dict, dict, Counter]:
    """From named_parameters() of the model built on meta: {row: [shapes]} of one block (layers.0), of the
    model, and the block's parameter count per submodule ('attn', 'ffn', 'norm1', 'norm2')."""
    block, model, submodules = {}, {}, Counter()
    for name, p in meta_lm(cfg).named_parameters():
        top, rest = name.split(".", 1)
        if top == "layers":
            index, rest = rest.split(".", 1)
            model.setdefault("blocks", []).append(p.shape)
            if index == "0":
                block.setdefault(block_row(rest), []).append(p.shape)
                submodules[rest.split(".")[0]] += p.size
        else:
            model.setdefault(MODEL_ROWS[top], []).append(p.shape)
    return block, model, submodules


BLOCK_ORDER = ("W_Q", "W_K", "W_V", "W_O", "W_gate", "W_up", "W_down", "biases", "norms", "lora")
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
def count_model(cfg: BlockConfig, B: int, L: int) -> FlopCounter:
    """Forward and backward of the whole model on meta under count_flops; upstream gradient of zeros."""
    model = meta_lm(cfg)
    with count_flops() as fc:
        logits = model(meta_ids(B, L))                               # (B, L, vocab_size)
        logits.backward(zeros(*logits.shape, dtype=logits.dtype, device="meta"))
    return fc


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
WALK_PROJECTIONS = {"q_proj": "Q projection", "k_proj": "K projection", "v_proj": "V projection",
                    "o_proj": "O projection", "gate_proj": "gate projection", "up_proj": "up projection",
                    "down_proj": "down projection"}
MOVEMENT = {"reshape", "permute", "expand"}


class Walker:
    """Observer that groups a block's forward primitive calls into readable steps: consecutive calls with the
    same label form one step. Labels come from the module scope and op; the attention's own ops are told
    apart by the two matmuls (scores q k^T, then weights @ V) that split them into before, between, after."""

    def __init__(self, cfg: BlockConfig):
        self.cfg, self.steps, self.attn_matmuls, self.seen_max, self.last_ffn_proj = cfg, [], 0, False, None

    def label(self, scope: tuple, op: str, out_shape: tuple, in_shapes: list) -> str | None:
        """The step a call belongs to; None joins it to the step before (head split, head merge, views)."""
        where = scope[1:]                                            # drop 'block'
        if not where:
            return "residual add"
        if where[0] in ("norm1", "norm2"):
            return f"{'RMSNorm' if self.cfg.norm == 'rms' else 'LayerNorm'} ({where[0]})"
        if len(where) > 1:
            if where[0] == "ffn":
                self.last_ffn_proj = where[1]
            return WALK_PROJECTIONS[where[1]]
        if where[0] == "ffn":
            return self.ffn_label()
        return self.attn_label(op, out_shape, in_shapes)

    def ffn_label(self) -> str:
        """The FFN's own ops: the activation (and SwiGLU's product)."""
        if self.cfg.ffn == "swiglu":
            return "SiLU(gate)" if self.last_ffn_proj == "gate_proj" else "SiLU(gate) * up"
        return {"relu": "ReLU", "gelu": "GELU (erf)", "gelu_tanh": "GELU (tanh)"}[self.cfg.ffn]

    def attn_label(self, op: str, out_shape: tuple, in_shapes: list) -> str | None:
        """The attention's own ops, told apart by how many of its two matmuls have run."""
        if op == "matmul":
            self.attn_matmuls += 1
            return "scores q k^T / sqrt(d_head)" if self.attn_matmuls == 1 else "weights @ V"
        if self.attn_matmuls == 1:                                   # between the two matmuls
            self.seen_max |= op == "max"
            return "softmax" if self.seen_max else "causal mask"
        if self.attn_matmuls == 0:                                   # before the scores
            if len(out_shape) == 5 or any(len(s) == 5 for s in in_shapes):
                return "repeat K, V heads (GQA)"
            if op == "div":
                return "scores q k^T / sqrt(d_head)"
            if op in ("slice", "concat", "neg", "mul", "add"):
                return "RoPE on q, k"
        return None if op in MOVEMENT else f"attention {op}"

    def __call__(self, event):
        fn, out, in_shapes = event.op, event.output, [t.shape for t in event.inputs]
        label = self.label(event.scope, fn.name, out.shape, in_shapes)
        if self.steps and (label is None or label == self.steps[-1]["operation"]):
            step = self.steps[-1]
        else:
            step = {"operation": label, "scope": ".".join(event.scope), "ops": Counter(), "matmul_flops": 0,
                    "flops": 0}
            self.steps.append(step)
        flops = event.flops
        step["ops"][fn.name] += 1
        step["flops"] += flops
        step["matmul_flops"] += flops if fn.name == "matmul" else 0
        step["shape"] = list(out.shape)


def walk_data(args: argparse.Namespace) -> dict:
    """One token through one block on meta, its primitive calls grouped into steps by a Walker."""
    cfg = args.preset
    block = TransformerBlock(cfg, generator=Generator(0), device="meta")
    x = zeros(1, 1, cfg.d_model, device="meta")                      # (B, L, d_model) = one token
    with observe(Walker(cfg)) as walker:
        block(x)
    steps = [{"step": 0, "operation": "input x", "scope": "block", "shape": list(x.shape), "matmul_flops": 0,
              "flops": 0, "ops": {}}]
    for i, s in enumerate(walker.steps, 1):
        steps.append({"step": i, "operation": s["operation"], "scope": s["scope"], "shape": s["shape"],
                      "matmul_flops": s["matmul_flops"], "flops": s["flops"], "ops": dict(s["ops"])})
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
            "  (steps grouped from the primitive calls an observer saw)",
            *table(["step", "operation", "shape after", "matmul FLOPs", "all FLOPs", "primitives"], rows, left=(1, 5)),
            f"  total: {t['matmul']:,} matmul FLOPs, {t['all']:,} FLOPs in all ops",
            f"  closed form, accounting.block_forward_flops(cfg, 1): {c['matmul']:,} and {c['all']:,} "
            f"(difference {d['matmul']:,} and {d['all']:,})",
            "  at L=1 the token attends only to itself; with a context of L tokens the scores and weights @ V "
            "steps cost 2 d_model L FLOPs each"]


# ---------------------------------------------------------------- memory
def measured_activations(cfg: BlockConfig, B: int, L: int, dtype: str) -> dict:
    """Bytes that the forward keeps for backward, measured on meta in the engine's dtype: per block (the
    scope of layers.0 inside the model, whose input is the embedding's output) and for the whole model."""
    model = meta_lm(cfg, float32 if DTYPES[dtype] == 4 else float16)
    with count_saved_bytes() as saved:
        model(meta_ids(B, L))
    per_layer = saved.total("model.layers.0")
    return {"per_layer": per_layer, "layers": per_layer * cfg.n_layers, "model": saved.total()}


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


# ---------------------------------------------------------------- graph
GRAPH_FORMATS = ("svg", "png", "pdf", "dot")
VALUES_LIMIT = 50_000_000  # parameters: value summaries need real numbers, so a model this small runs on the CPU


def record(cfg: BlockConfig, *, whole_model: bool, B: int, L: int, backward: bool, values: bool,
           device: str = "cpu"):
    """Run one block (or the whole model) forward (and backward) under record_graph; shape-only unless values
    are asked for, then on `device`."""
    device = device if values else "meta"
    g = Generator(0)
    module = LM(cfg, generator=g, device=device) if whole_model else TransformerBlock(cfg, generator=g, device=device)
    x = zeros(B, L, dtype=int64, device=device) if whole_model else \
        randn(B, L, cfg.d_model, generator=g, device=device, requires_grad=True)
    with record_graph(module, x, retain_grads=values) as graph:
        out = module(x)
        if backward:
            out.backward(ones_like(out))
    return graph


def graph_data(args: argparse.Namespace) -> dict:
    cfg, path = args.preset, Path(args.out)
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in GRAPH_FORMATS:
        args.parser.error(f"--out {path}: the extension must be one of {', '.join(GRAPH_FORMATS)}")
    size = total_params(cfg) if args.model else params_per_block(cfg)
    if args.values and size > VALUES_LIMIT:
        args.parser.error(f"--values needs real numbers, but {cfg.name} has {size:,} parameters "
                          f"(more than {VALUES_LIMIT:,}); drop --values to draw it on the shape-only device")
    start = time.perf_counter()
    graph = record(cfg, whole_model=args.model, B=args.batch, L=args.seq_len, backward=args.backward,
                   values=args.values, device=args.device)
    title = (f"{cfg.name} {'model' if args.model else 'block'}, x {(args.batch, args.seq_len)}"
             f"{', backward' if args.backward else ''}{f', depth {args.depth}' if args.depth is not None else ''}")
    dot = graph.to_dot(args.depth, backward=args.backward, values=args.values, title=title)
    if fmt == "dot":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dot)
    else:
        render(dot, path)
    return {"command": "graph", "preset": cfg.name, "model": args.model, "depth": args.depth,
            "backward": args.backward, "seq_len": args.seq_len, "batch": args.batch, "path": str(path),
            "format": fmt, "nodes": len(re.findall(r"^  \w+ \[label=", dot, re.M)),
            "edges": len(re.findall(r"^  \w+ -> ", dot, re.M)),
            "seconds": round(time.perf_counter() - start, 3)}


def graph_text(data: dict) -> list[str]:
    what = "the model" if data["model"] else "one block"
    view = "backward (the gradient flow)" if data["backward"] else "forward"
    depth = "every primitive" if data["depth"] is None else f"depth {data['depth']}"
    return [f"graph: {data['preset']}, {what}, {view}, {depth}: wrote {data['path']} "
            f"({data['nodes']:,} nodes, {data['edges']:,} edges, {data['seconds']:.2f} s)"]


def _depth(text: str) -> int:
    """argparse type: an integer >= 0."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return int(text)


# ---------------------------------------------------------------- argument parsing
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


def add_commands(commands) -> None:
    """Register the counting commands on an argparse subparsers object."""
    for name, (help_text, _, _) in COMMANDS.items():
        p = commands.add_parser(name, help=help_text, description=help_text)
        if name != "presets":
            p.add_argument("--preset", type=_preset, required=True, metavar="NAME",
                           help=f"one of: {', '.join(PRESETS)}")
        if name in ("flops", "memory"):
            p.add_argument("--seq-len", type=_positive, required=True, metavar="L", help="tokens per sequence")
            p.add_argument("--batch", type=_positive, default=1, metavar="B", help="sequences (default 1)")
        if name == "memory":
            p.add_argument("--dtype", choices=list(DTYPES), default="bf16", help="element type (default bf16)")
        if name == "graph":
            p.add_argument("--out", required=True, metavar="FILE", help="output file: .svg, .png, .pdf or .dot")
            p.add_argument("--depth", type=_depth, default=None, metavar="N",
                           help="collapse modules below this depth into boxes (default: every primitive)")
            p.add_argument("--backward", action="store_true", help="draw the gradient flow instead of the forward")
            p.add_argument("--model", action="store_true", help="the whole model, not one block")
            p.add_argument("--seq-len", type=_positive, default=16, metavar="L", help="tokens (default 16)")
            p.add_argument("--batch", type=_positive, default=1, metavar="B", help="sequences (default 1)")
            p.add_argument("--values", action="store_true",
                           help="value and gradient summaries on the nodes (runs the model: small presets)")
            p.add_argument("--device", type=device_arg, default="cpu", metavar="DEVICE",
                           help="where --values runs: cpu (default), cuda, cuda:N")
        p.add_argument("--json", action="store_true", help="print JSON (fields: docs/cli.md)")
        p.set_defaults(parser=p)


def run(args: argparse.Namespace, out=print) -> int:
    """Run a parsed counting command: print its table, or its JSON with --json."""
    if getattr(args, "seq_len", None) and args.seq_len > args.preset.max_seq_len:
        args.parser.error(f"--seq-len {args.seq_len:,} exceeds the context of {args.preset.name}: "
                          f"{args.preset.max_seq_len:,} tokens")
    _, collect, render = COMMANDS[args.command]
    data = collect(args)
    notes = notes_for(args.command, args.preset.name) if hasattr(args, "preset") else []
    if notes:
        data["curriculum"] = notes
    out(json.dumps(data, indent=2) if args.json else "\n".join(render(data) + curriculum_text(notes)))
    return 0


def curriculum_text(notes: list[dict]) -> list[str]:
    """Where a curriculum document states another figure: both, and why."""
    lines = ["  where the curriculum's documents differ:"] if notes else []
    for n in notes:
        lines += [f"    {n['what']}: {n['document']}; exact: {n['exact']}", f"      ({n['why']})"]
    return lines


def main(argv: list[str] | None = None) -> int:
    """The counting commands alone (`python -m tinygrad_block` adds them beside `tour`)."""
    parser = argparse.ArgumentParser(prog="python -m tinygrad_block")
    add_commands(parser.add_subparsers(dest="command", metavar="<command>", required=True))
    return run(parser.parse_args(argv))
