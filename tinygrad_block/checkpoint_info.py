"""What a checkpoint folder holds, read from its files alone: its parameters per component (embedding, attention,
ffn, norms, lm_head) and per stored dtype, counted from the safetensors headers without reading a tensor, beside
accounting's closed form for the config its config.json maps to. The `inspect` command prints it."""
from __future__ import annotations

import math
import re

from .accounting import total_params
from .files import shown, shown_list
from .nn import LM
from .nn.config import PRESETS
from .nn.hf_config import config_from_hf
from .nn.pretrained import BUFFERS, checkpoint_files, layout_shapes, read_headers


COMPONENTS = [("norms", r"norm|\.ln_|^ln_f\."), ("embedding", r"embed_tokens|wte|wpe"), ("lm_head", r"^lm_head\."),
              ("attention", r"self_attn|\.attn\."), ("ffn", r"\.mlp\.")]


def component(name: str) -> str:
    """Which part of the model an HF tensor belongs to: embedding, attention, ffn, norms, lm_head (or other)."""
    return next((part for part, pattern in COMPONENTS if re.search(pattern, name)), "other")


def inspect_checkpoint(path) -> dict:
    """Parameters of a checkpoint folder per component, from the safetensors headers alone (no tensor data is
    read), beside accounting's closed form for the BlockConfig its config.json maps to (and a preset it equals).
    A folder of config.json alone is counted from the tensors its architecture's layout would hold (on the
    shape-only model), `files` empty."""
    op = "inspect"
    folder, hf_config, files, weight_map = checkpoint_files(path, op, weights=False)
    names = hf_config.get("architectures") or [hf_config.get("model_type")]
    names = names if isinstance(names, list) else [names]
    info = {"path": str(folder), "files": [f.name for f in files], "architecture": ", ".join(map(str, names)),
            "dtypes": {}, "components": {}}
    try:
        arch, cfg = config_from_hf(hf_config, op)
        info |= {"config": cfg, "closed_form": total_params(cfg), "why_no_closed_form": None,
                 "preset": next((name for name, p in PRESETS.items() if p == cfg), None)}
    except ValueError as e:
        if not files:                                                   # nothing else to count
            raise
        cfg, info = None, info | {"config": None, "closed_form": None, "why_no_closed_form": str(e), "preset": None}
    shapes = _stored_shapes(files, weight_map, op) if files else \
        {n: (shape, "none: config.json alone") for n, shape in layout_shapes(LM, arch, cfg, op).items()}
    info["buffers_skipped"] = sorted(n for n in shapes if BUFFERS.search(n))
    counted = {n: entry for n, entry in shapes.items() if not BUFFERS.search(n)}
    if cfg is not None and cfg.tie_embeddings and "lm_head.weight" in counted:
        counted.pop("lm_head.weight")                                   # a stored copy of the tied embedding
        info["buffers_skipped"].append("lm_head.weight (a copy of the tied embedding)")
    for name, (shape, dtype) in counted.items():
        n = math.prod(shape)
        info["components"][component(name)] = info["components"].get(component(name), 0) + n
        info["dtypes"][dtype] = info["dtypes"].get(dtype, 0) + n
    order = ("embedding", "attention", "ffn", "norms", "lm_head", "other")
    info["components"] = {part: info["components"][part] for part in order if part in info["components"]}
    info["parameters"] = sum(info["components"].values())
    info["shares"] = {k: v / max(info["parameters"], 1) for k, v in info["components"].items()}
    info["matches"] = None if cfg is None else info["parameters"] == info["closed_form"]
    return info


def _stored_shapes(files, weight_map, op: str) -> dict[str, tuple]:
    """{tensor name: (shape, dtype)} from the safetensors headers alone."""
    return {n: (entry.shape, entry.dtype) for n, entry in read_headers(files, op, weight_map).items()}


def inspect_text(info: dict) -> list[str]:
    """inspect_checkpoint's dict as lines to print. The names it read from the checkpoint (its architecture, the
    tensors skipped) are shown escaped and the first ten at most (files.shown): a file can neither drive the
    terminal nor forge a line of the report."""
    files = f"{len(info['files'])} file(s)" if info["files"] else "config.json alone, no weights"
    dtypes = ", ".join(f"{k} {v:,}" for k, v in info["dtypes"].items()) if info["files"] else \
        "the tensors its layout holds"
    lines = [f"{info['path']}: {shown(info['architecture'])}, {files}, {info['parameters']:,} parameters ({dtypes})"]
    lines += [f"  {part:<10} {n:>15,}  {info['shares'][part]:6.1%}" for part, n in info["components"].items()]
    if info["buffers_skipped"]:
        lines.append(f"  skipped (not parameters): {shown_list(info['buffers_skipped'], show=shown)[1:-1]}")
    if info["config"] is None:
        lines.append(f"  no closed form: {info['why_no_closed_form']}")
    else:
        verdict = "matches" if info["matches"] else "DIFFERS from"
        preset = f" (preset {info['preset']})" if info["preset"] else ""
        counted = "the headers' count" if info["files"] else "the layout's count"
        lines.append(f"  {counted} {verdict} accounting.total_params{preset}: {info['closed_form']:,}")
    return lines
