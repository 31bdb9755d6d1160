"""How each command's dict (report.py) prints: aligned tables and lines in human units (6.74 B parameters, 7.57 T
FLOPs, 25.00 GiB), one `*_text(data) -> lines` function per command. cli.py prints them, or the dict as JSON.
"""
from __future__ import annotations

import unicodedata
from collections import Counter

from .measure import PHASES, block_scope
from .units import human, human_bytes


# ---------------------------------------------------------------- formatting
def table(headers: list[str], rows: list[list], indent: str = "  ", left: tuple = (0,)) -> list[str]:
    """Aligned columns: text columns (`left`) left-aligned, numbers right-aligned with thousands separators."""
    cells = [[f"{c:,}" if isinstance(c, int) else str(c) for c in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return [indent + "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
            .rstrip() for row in cells]


def shape_text(shapes: list[tuple]) -> str:
    """[(768,), (768,), (3072,)] -> '2 x (768,), (3072,)'."""
    return ", ".join(f"{n} x {s}" if n > 1 else str(s) for s, n in Counter(shapes).items())


LABELS = {"position_embedding": "position embedding", "final_norm": "final norm", "lm_head": "LM head",
          "biases": "biases (projections)", "norms": "norms (norm1, norm2)",
          "qk_norms": "QK norms (q_norm, k_norm)", "lora": "LoRA adapters (A, B)",
          "optimizer": "optimizer (Adam)", "activations": "activations (estimate)", "kv_cache": "KV cache",
          "parameters": "parameters", "gradients": "gradients", "total": "total"}


# ---------------------------------------------------------------- presets and parameters
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


# ---------------------------------------------------------------- FLOPs, the walk, memory
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
            rows.append([f"block 0 ({block_scope()}):", "", "", "", ""])
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
            "steps cost 2 n_heads d_head L FLOPs each (2 d_model L when d_head = d_model / n_heads)"]


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


def quoted_text(notes: list[dict]) -> list[str]:
    """Where a commonly quoted figure differs from the exact value: both, and why."""
    lines = ["  where commonly quoted figures differ:"] if notes else []
    for n in notes:
        lines += [f"    {n['what']}: quoted as {n['quoted']}; exact: {n['exact']}", f"      ({n['why']})"]
    return lines


# ---------------------------------------------------------------- the calculator
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


# ---------------------------------------------------------------- graph, train, generate
def graph_text(data: dict) -> list[str]:
    """One line: what was drawn, where, and how big."""
    what = "the model" if data["model"] else "one block"
    if "check" in data:
        return [f"graph: {data['preset']}, one block, forward and backward, with the gradient check (autograd against "
                f"the hand-derived backward of each module, float64; the whole block differs by "
                f"{data['check']:.1e}): wrote the explorer {data['path']} ({data['bytes'] / 2**20:.1f} MiB, "
                f"{data['seconds']:.2f} s); colour by 'gradient check' in a browser"]
    if data.get("compiled") and data["format"] == "html":
        return [f"graph: {data['preset']}, {what}, forward and backward, compiled: wrote the explorer {data['path']} "
                f"({data['kernels']:,} kernels for {data['primitives']:,} primitives, {data['fused_chains']} fused "
                f"chains, beside them; {data['bytes'] / 2**20:.1f} MiB, {data['seconds']:.2f} s); open it in a "
                "browser"]
    if data.get("compiled"):
        phases = "forward and backward" if data["backward"] else "forward"
        return [f"graph: {data['preset']}, {what}, {phases}, compiled: wrote {data['path']} ({data['kernels']:,} "
                f"kernels for {data['primitives']:,} primitives, {data['fused_chains']} fused chains, "
                f"{data['seconds']:.2f} s)"]
    view = "backward (the gradient flow)" if data["backward"] else "forward"
    depth = "every primitive" if data["depth"] is None else f"depth {data['depth']}"
    if data["format"] == "html":
        return [f"graph: {data['preset']}, {what}, forward and backward, opened at depth {data['depth'] or 1}: "
                f"wrote the explorer {data['path']} ({data['nodes']:,} nodes, {data['edges']:,} edges, "
                f"{data['bytes'] / 2**20:.1f} MiB, {data['seconds']:.2f} s); open it in a browser"]
    return [f"graph: {data['preset']}, {what}, {view}, {depth}: wrote {data['path']} "
            f"({data['nodes']:,} nodes, {data['edges']:,} edges, {data['seconds']:.2f} s)"]


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
    how = (f"compiled: {data['replayed']} of {data['steps']} steps replayed, the others captured eagerly"
           if data["engine"] == "compiled" else "eager, op by op")
    lines.append(f"  trained in {data['seconds']:.1f} s, {data['tokens_per_s']:,.0f} tokens/s ({how})")
    lines += [f"  {name.replace('_', ' ')}: {path}" for name, path in data["paths"].items()]
    return lines


JOINERS = "\u200c\u200d"             # zero-width (non-)joiners: format characters that emoji and scripts need


def terminal_text(text: str) -> str:
    """Text a checkpoint's tokenizer produced, for the terminal: each control character but newline and tab (ESC,
    which starts an escape sequence; a bidi override; a line separator) written as its Python escape, \\x1b, so the
    tokens cannot drive the terminal; every other character, of any script, as it is."""
    def safe(c: str) -> str:
        hidden = unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") and c not in "\n\t" + JOINERS
        return repr(c)[1:-1] if hidden else c
    return "".join(map(safe, text))


def generate_text(data: dict) -> list[str]:
    """The text (or the ids), then how fast the prefill and the decode ran."""
    shown = terminal_text(data["text"]) if data["text"] is not None else " ".join(map(str, data["ids"]))
    how = "recomputing every token, eager" if not data["cache"] else \
        f"static KV cache, compiled: {data['captured']} calls captured, {data['replayed']} replayed" \
        if data["compiled"] else "static KV cache, eager"
    return [shown, "", f"generate: {data['prompt_tokens']} prompt tokens + {data['new_tokens']} new from "
            f"{data['checkpoint']} ({how}); prefill {data['prefill_s'] * 1000:.1f} ms, decode "
            f"{data['decode_tokens_per_s']:,.1f} tokens/s"]
