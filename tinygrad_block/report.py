"""What each command computes, as one JSON-able dict (fields: docs/cli.md): the counts measured on the engine
(measure.py) beside the closed forms (accounting.py), and the runs that write files: a drawn graph, a training
demonstration, tokens generated from a checkpoint. tables.py prints these dicts; cli.py parses and dispatches.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

from . import accounting, checkpoint_info, measure, recordings
from .cuda import jit_by_default
from .dtypes import int64
from .explorer_page import explore, page_of
from .fuse import fused_chains
from .generator import Generator
from .graph import render
from .files import write_text
from .measure import PHASES, STORAGE_BYTES
from .nn import LM, PRESETS, BlockConfig, TransformerBlock
from .nn.hf_config import config_from_hf
from .nn.pretrained import checkpoint_files
from .tensor import randn, tensor

GRAPH_FORMATS = ("svg", "png", "pdf", "dot", "html")        # html: the explorer page (explorer_page.py)


# ---------------------------------------------------------------- presets and parameters
def presets_data() -> dict:
    """Every preset's config numbers and its closed-form total of parameters."""
    rows = []
    for name, cfg in PRESETS.items():
        rows.append({"name": name, "d_model": cfg.d_model, "n_heads": cfg.n_heads, "n_kv_heads": cfg.n_kv_heads,
                     "d_head": cfg.d_head, "d_ff": cfg.d_ff, "n_layers": cfg.n_layers, "vocab_size": cfg.vocab_size,
                     "context": cfg.max_seq_len, "norm": cfg.norm, "layout": cfg.layout,
                     "ffn": cfg.ffn, "tied": cfg.tie_embeddings, "total_params": accounting.total_params(cfg)})
    return {"command": "presets", "presets": rows}


BLOCK_ORDER = ("W_Q", "W_K", "W_V", "W_O", "W_gate", "W_up", "W_down", "biases", "norms", "qk_norms", "lora")
MODEL_ORDER = ("embedding", "position_embedding", "blocks", "final_norm", "lm_head")


def _rows(shapes: dict, closed: dict, order: tuple) -> dict:
    """{row: shapes, measured, closed form}, in `order`; a row neither side has is left out (the LM head of a
    tied model is kept: it shows that the head reuses the embedding)."""
    names = [k for k in order if k in shapes or k in closed or k == "lm_head"]
    names += [k for k in list(closed) + list(shapes) if k not in names]
    return {k: {"shapes": [list(s) for s in shapes.get(k, [])], "measured": sum(map(math.prod, shapes.get(k, []))),
                "closed_form": int(closed.get(k, 0))} for k in names}


def params_data(cfg: BlockConfig) -> dict:
    """Parameters per component row, counted on nn.LM(meta) and from accounting's breakdowns."""
    block_shapes, model_shapes, submodules = measure.measured_params(cfg)
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


# ---------------------------------------------------------------- FLOPs, the walk, memory
def closed_flops(block_or_model: str, cfg: BlockConfig, L: int, B: int) -> dict:
    """accounting's forward and backward FLOPs (PHASES) of a block (input wanting a gradient) or of the model."""
    fwd = getattr(accounting, f"{block_or_model}_forward_flops")
    bwd = getattr(accounting, f"{block_or_model}_backward_flops")
    return {"forward_matmul": fwd(cfg, L, B, matmul_only=True), "forward_all": fwd(cfg, L, B, matmul_only=False),
            "backward_matmul": bwd(cfg, L, B, matmul_only=True), "backward_all": bwd(cfg, L, B, matmul_only=False)}


def flops_data(cfg: BlockConfig, L: int, B: int = 1) -> dict:
    """FLOPs per module and phase of the model's forward and backward, beside the closed forms."""
    start = time.perf_counter()
    modules = measure.flops_by_module(cfg, B, L)
    seconds = time.perf_counter() - start
    closed = {"per_block": closed_flops("block", cfg, L, B), "model": closed_flops("model", cfg, L, B)}
    measured = {"per_block": modules["block"], "model": modules["model"]}
    return {"command": "flops", "preset": cfg.name, "seq_len": L, "batch": B, "n_layers": cfg.n_layers,
            "seconds": round(seconds, 3), "modules": modules, **measured, "closed_form": closed,
            "difference": {k: {p: measured[k][p] - closed[k][p] for p in PHASES} for k in closed}}


def walk_data(cfg: BlockConfig) -> dict:
    """One token through one block on meta, step by step (measure.walk), beside the closed form."""
    steps = [{"step": 0, "operation": "input x", "scope": "block", "shape": [1, 1, cfg.d_model], "matmul_flops": 0,
              "flops": 0, "ops": {}}]
    for i, s in enumerate(measure.walk(cfg), 1):
        steps.append({"step": i, "operation": s.operation, "scope": s.scope, "shape": list(s.shape),
                      "matmul_flops": s.matmul_flops, "flops": s.flops, "ops": dict(s.ops)})
    total = {"matmul": sum(s["matmul_flops"] for s in steps), "all": sum(s["flops"] for s in steps)}
    closed = {"matmul": accounting.block_forward_flops(cfg, 1, 1, matmul_only=True),
              "all": accounting.block_forward_flops(cfg, 1, 1, matmul_only=False)}
    return {"command": "walk", "preset": cfg.name, "batch": 1, "seq_len": 1, "steps": steps, "total": total,
            "closed_form": closed, "difference": {k: total[k] - closed[k] for k in total}}


def memory_data(cfg: BlockConfig, L: int, B: int = 1, dtype: str = "bf16") -> dict:
    """accounting's training memory and KV cache, and the activation bytes measured on the engine."""
    size = STORAGE_BYTES[dtype]
    estimate = {k: int(v) for k, v in accounting.training_memory(cfg, L, B, bytes_per_element=size).items()}
    measured = measure.measured_activations(cfg, B, L, dtype)
    per_token = accounting.activation_bytes_per_token_per_layer(cfg, bytes_per_element=size)
    return {"command": "memory", "preset": cfg.name, "seq_len": L, "batch": B, "dtype": dtype,
            "bytes_per_element": size, "n_layers": cfg.n_layers, "estimate": estimate,
            "kv_cache": accounting.kv_cache_bytes(cfg, L, B, bytes_per_element=size),
            "activation_estimate": {"per_token_per_layer": per_token, "per_layer": per_token * B * L},
            "measured_activations": measured,
            "measured_over_estimate": measured["layers"] / estimate["activations"]}


# ---------------------------------------------------------------- the calculator
def calc_data(cfg: BlockConfig, L: int, B: int = 1, dtype: str = "bf16", *, gpus: int = 1, mfu: float = 0.4,
              peak_tflops: float = 990.0, tokens: int | None = None, from_preset: str | None = None) -> dict:
    """Parameters, FLOPs, training compute and time (on `gpus` of `peak_tflops` at `mfu`, for `tokens`, by
    default Chinchilla's 20 per parameter), memory: measured on nn.LM(meta), beside accounting."""
    size = STORAGE_BYTES[dtype]
    block_shapes, model_shapes, _ = measure.measured_params(cfg)
    total = sum(math.prod(s) for shapes in model_shapes.values() for s in shapes)
    per_block = sum(math.prod(s) for shapes in block_shapes.values() for s in shapes)
    closed_params = {"total": accounting.total_params(cfg), "per_block": accounting.params_per_block(cfg)}
    flops = measure.phase_flops(measure.count_model(cfg, B, L), "")
    closed = closed_flops("model", cfg, L, B)
    N = total
    T = tokens or accounting.chinchilla_tokens(N)
    per_token = {"forward_matmul": flops["forward_matmul"] / (B * L), "forward_all": flops["forward_all"] / (B * L),
                 "training_matmul": (flops["forward_matmul"] + flops["backward_matmul"]) / (B * L),
                 "training_all": (flops["forward_all"] + flops["backward_all"]) / (B * L), "two_n": 2 * N,
                 "six_n": 6 * N}
    compute = {"six_n": accounting.training_flops(N, T),
               "counted": (flops["forward_matmul"] + flops["backward_matmul"]) * T // (B * L)}
    days = {k: accounting.training_days(c, gpus, peak_tflops * 1e12, mfu) for k, c in compute.items()}
    memory = {k: int(v) for k, v in accounting.training_memory(cfg, L, B, bytes_per_element=size).items()}
    measured = measure.measured_activations(cfg, B, L, dtype)
    return {"command": "calc", "preset": cfg.name, "from_preset": from_preset,
            "config": {"d_model": cfg.d_model, "n_layers": cfg.n_layers, "n_heads": cfg.n_heads,
                       "n_kv_heads": cfg.n_kv_heads, "d_head": cfg.d_head, "d_ff": cfg.d_ff,
                       "vocab_size": cfg.vocab_size, "tied": cfg.tie_embeddings, "context": cfg.max_seq_len,
                       "norm": cfg.norm, "layout": cfg.layout, "ffn": cfg.ffn, "rope": cfg.rope},
            "seq_len": L, "batch": B, "dtype": dtype, "bytes_per_element": size,
            "parameters": {"total": total, "per_block": per_block, "closed_form": closed_params,
                           "difference": {"total": total - closed_params["total"],
                                          "per_block": per_block - closed_params["per_block"]}},
            "flops": {"measured": flops, "closed_form": closed,
                      "difference": {p: flops[p] - closed[p] for p in PHASES}},
            "per_token": per_token,
            "training": {"tokens": T, "chinchilla": tokens is None, "gpus": gpus, "mfu": mfu,
                         "peak_tflops": peak_tflops, "flops": compute, "days": days},
            "memory": {"estimate": memory, "kv_cache": memory["kv_cache"], "measured_activations": measured,
                       "measured_over_estimate": measured["layers"] / memory["activations"]}}


# ---------------------------------------------------------------- graph
def graph_data(cfg: BlockConfig, path: Path, *, model: bool = False, depth: int | None = None,
               backward: bool = False, seq_len: int = 16, batch: int = 1, values: bool = False, device: str = "cpu",
               all_layers: bool = False, dpi: int | None = None, compiled: bool = False, check: bool = False,
               warn: Callable[[str], None] = print) -> dict:
    """Record one block (or the model) and write its graph to `path`, whose extension (GRAPH_FORMATS) says how:
    DOT text, a drawing by graphviz (a RuntimeError when it is missing), or the explorer page; `check`: the page of
    a block run on the CPU, with the gradient check (explore.gradient_check). The view's warnings (a drawing too
    big to read) go to `warn`."""
    fmt = path.suffix.lstrip(".").lower()
    start = time.perf_counter()
    if compiled and fmt != "html":
        return compiled_graph(cfg, path, fmt, model=model, backward=backward, seq_len=seq_len, batch=batch, dpi=dpi)
    if check:
        return checked_graph(cfg, path, depth=depth, seq_len=seq_len, batch=batch, values=values, compiled=compiled,
                             all_layers=all_layers, start=start)
    graph, program = recordings.compiled_recording(cfg, whole_model=model, B=batch, L=seq_len, values=values) \
        if compiled else (recordings.record(cfg, whole_model=model, B=batch, L=seq_len,
                                            backward=backward or fmt == "html", values=values, device=device), None)
    title = (f"{cfg.name} {'model' if model else 'block'}, x {(batch, seq_len)}"
             f"{', backward' if backward else ''}{f', depth {depth}' if depth is not None else ''}")
    shown = {"command": "graph", "preset": cfg.name, "model": model, "depth": depth, "backward": backward,
             "seq_len": seq_len, "batch": batch, "path": str(path), "format": fmt}
    if fmt == "html":
        page = page_of(graph, title=title.replace(", backward", "") + (", compiled" if compiled else ""),
                        depth=1 if depth is None else depth, fold=not all_layers, values=values,
                        show=["backward"] if backward and not compiled else None, program=program)  # compiled: all
        page.save(path)
        return shown | {"nodes": len(page.data["nodes"]), "edges": sum(map(len, page.data["edges"].values())),
                        "bytes": path.stat().st_size, "seconds": round(time.perf_counter() - start, 3)} | \
            ({"compiled": True, "kernels": page.data["program"]["kernels"],
              "primitives": page.data["program"]["primitives"], "fused_chains": page.data["program"]["fused"]}
             if compiled else {})
    view = graph.view(depth, backward=backward, values=values, fold=not all_layers)
    for warning in view.warnings:
        warn(warning)
    if fmt == "dot":
        write_text(path, view.to_dot(title))
    else:
        render(view.to_dot(title), path, dpi=dpi)
    return shown | {"nodes": len(view.nodes), "edges": len(view.edges),
                    "seconds": round(time.perf_counter() - start, 3)}


def checked_graph(cfg: BlockConfig, path: Path, *, depth: int | None, seq_len: int, batch: int, values: bool,
                  compiled: bool, all_layers: bool, start: float) -> dict:
    """The explorer page of one block run on the CPU, forward and backward, with the gradient check: each module's
    backward against manual/'s hand-derived pair, in float64 (explore.gradient_check)."""
    g = Generator(0)
    block = TransformerBlock(cfg, generator=g)
    x = randn(batch, seq_len, cfg.d_model, generator=g)
    title = f"{cfg.name} block, x {(batch, seq_len)}, gradient check" + (", compiled" if compiled else "")
    page = explore(block, x, depth=1 if depth is None else depth, fold=not all_layers, values=values, title=title,
                   compiled=compiled, check=True)
    page.save(path)
    whole = page.data["check"][""]["max"]
    return {"command": "graph", "preset": cfg.name, "model": False, "depth": depth, "backward": True,
            "seq_len": seq_len, "batch": batch, "path": str(path), "format": "html", "check": whole,
            "nodes": len(page.data["nodes"]), "edges": sum(map(len, page.data["edges"].values())),
            "bytes": path.stat().st_size, "seconds": round(time.perf_counter() - start, 3)}


def compiled_graph(cfg: BlockConfig, path: Path, fmt: str, *, model: bool, backward: bool, seq_len: int, batch: int,
                   dpi: int | None) -> dict:
    """The program tb.jit makes of one block (or the model), forward or forward and backward, drawn to `path`."""
    start = time.perf_counter()
    program = recordings.compiled_program(cfg, whole_model=model, B=batch, L=seq_len, backward=backward)
    title = f"{cfg.name} {'model' if model else 'block'}, x {(batch, seq_len)}, " \
            f"{'forward and backward' if backward else 'forward'}, compiled"
    dot = program.to_dot(title)
    if fmt == "dot":
        write_text(path, dot)
    else:
        render(dot, path, dpi=dpi)
    return {"command": "graph", "preset": cfg.name, "model": model, "backward": backward, "compiled": True,
            "seq_len": seq_len, "batch": batch, "path": str(path), "format": fmt, "kernels": len(program.kernels),
            "primitives": len(program.plain), "fused_chains": fused_chains(program), "edges": dot.count("->"),
            "seconds": round(time.perf_counter() - start, 3)}


# ---------------------------------------------------------------- train, generate, inspect
def train_data(demo: str, folder: Path, *, steps: int | None = None, text: str | None = None,
               source: str | None = None, **settings) -> dict:
    """Run a demonstration of train.py, 'induction' or 'text' (on `text`, read from `source`, when given), with
    `settings` (seed, device, pictures, resume, save_every, jit); what it reached and where its files went."""
    from . import train                                             # tqdm and the data: loaded for training only
    demo_run = train.induction_demo if demo == "induction" else train.text_demo
    kwargs = {"steps": steps} if steps else {}
    if text is not None:
        kwargs |= {"text": text, "source": source}
    result = demo_run(folder, **settings, **kwargs)
    return {"command": "train", **{k: v for k, v in result.items() if k not in ("model", "history", "tokenizer")}}


def prompt_ids(prompt: str | None, ids: list[int] | None, max_new_tokens: int, tokenizer, cfg: BlockConfig,
               folder: Path) -> list[int]:
    """`prompt` through the checkpoint's tokenizer, or `ids`; checked against the vocabulary and the context
    before any weight is read (a ValueError that names generate's options)."""
    if prompt is None and ids is None:
        raise ValueError("give a prompt: --prompt TEXT (with the checkpoint's tokenizer) or --ids '1 2 3'")
    if prompt is not None and tokenizer is None:
        raise ValueError(f"{folder} has no tokenizer.json (nor the vocab.json that `train` writes) to turn --prompt "
                         "into tokens; give token ids with --ids")
    ids = tokenizer.encode(prompt) if prompt is not None else ids
    if not ids:
        raise ValueError(f"the prompt {prompt!r} is empty; give at least one character or token id")
    if max(ids) >= cfg.vocab_size:
        raise ValueError(f"token id {max(ids)} is outside the vocabulary of {cfg.vocab_size} (ids 0.."
                         f"{cfg.vocab_size - 1})")
    room = cfg.max_seq_len - len(ids)
    if max_new_tokens > room:
        raise ValueError(f"the prompt's {len(ids)} tokens + --max-new-tokens {max_new_tokens} exceed the "
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


class GenerationStopped(Exception):
    """Ctrl-C while generate ran: `data` is generate_data's dict for the tokens chosen before it (`stopped`: True,
    `asked`: the tokens asked for)."""

    def __init__(self, data: dict):
        super().__init__(f"stopped after {data['new_tokens']} of {data['asked']} tokens")
        self.data = data


def generate_data(path, *, prompt: str | None = None, ids: list[int] | None = None, max_new_tokens: int = 100,
                  temperature: float = 0.0, top_k: int | None = None, seed: int = 0, use_cache: bool = True,
                  jit: bool | None = None, device: str = "cpu", top_p: float | None = None) -> dict:
    """Check the checkpoint's config, tokenizer and prompt; load the weights; LM.generate the tokens (prefill,
    then one token at a time: compiled with tb.jit when `jit` is True, eagerly when False; None: compiled except on
    a GPU whose replays are not yet checked, cuda.jit_by_default), timing each as it arrives. Ctrl-C while it runs
    raises GenerationStopped, holding the same dict for the tokens chosen so far."""
    jit = jit_by_default(device) if jit is None else jit
    from tqdm import tqdm                                           # loaded for generating only

    from .tokenizer import load_tokenizer
    folder, hf_config, _, _ = checkpoint_files(path, "generate")
    cfg = config_from_hf(hf_config, "generate")[1]
    tokenizer = load_tokenizer(folder)
    ids = prompt_ids(prompt, ids, max_new_tokens, tokenizer, cfg, folder)
    bar = tqdm(total=max_new_tokens, desc="decode", unit="token", leave=False, disable=None)
    chosen, times = [], []                                           # each new token, and when it was chosen
    run = {"folder": folder, "ids": ids, "tokenizer": tokenizer, "asked": max_new_tokens, "cache": use_cache,
           "jit": jit, "temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed, "times": times}

    def arrived(i, new):
        chosen.append(int(new.numpy()[0]))                           # the token is on the host: its time is real
        times.append(time.perf_counter())
        bar.update(i > 0)                                            # token 0 comes with the prefill
    model = None
    try:
        model = LM.from_pretrained(folder, device=device)
        run["start"] = time.perf_counter()
        model.generate(tensor([ids], dtype=int64, device=device), max_new_tokens, temperature, top_k,
                       Generator(seed), use_cache=use_cache, on_token=arrived, jit=jit, top_p=top_p)
    except KeyboardInterrupt:
        bar.close()
        raise GenerationStopped(_generated(run, model, chosen) | {"stopped": True}) from None
    bar.close()
    return _generated(run, model, chosen)


def _generated(run: dict, model: LM | None, chosen: list[int]) -> dict:
    """generate's dict: the prompt and the tokens chosen, as ids and text, how they ran, and how fast."""
    tokens, times, tokenizer = run["ids"] + chosen, run["times"], run["tokenizer"]
    compiled = run["cache"] and run["jit"] and run["asked"] > 0      # prefill and decode steps through tb.jit
    calls = getattr(getattr(model, "last_decoder", None), "compiled", None) if compiled else None
    prefill_s = times[0] - run["start"] if times else 0.0
    decode_s = times[-1] - times[0] if len(times) > 1 else 0.0
    return {"command": "generate", "checkpoint": str(run["folder"]), "prompt_tokens": len(run["ids"]),
            "new_tokens": len(chosen), "asked": run["asked"], "stopped": False, "cache": run["cache"],
            "compiled": compiled, "captured": calls.captures if calls else 0,
            "replayed": calls.replays if calls else 0, "temperature": run["temperature"], "top_k": run["top_k"],
            "top_p": run["top_p"], "seed": run["seed"], "ids": tokens,
            "tokenizer": tokenizer.name if tokenizer else None,
            "text": shown_text(tokenizer, tokens) if tokenizer else None,
            "prefill_s": prefill_s, "decode_s": decode_s,
            "decode_tokens_per_s": (len(times) - 1) / decode_s if decode_s else 0.0}


def inspect_data(path) -> dict:
    """A checkpoint's parameters counted from its safetensors headers (checkpoint_info.inspect_checkpoint)."""
    return {"command": "inspect", **checkpoint_info.inspect_checkpoint(path)}
