"""Models measured by running them on the shape-only 'meta' device, where even a 70B model takes milliseconds and
no memory: parameters from named_parameters(), FLOPs per module (found by the scope the model gives it) and the
bytes the forward keeps for backward, from observers at the choke point; the walk of one token through a block,
named step by named step; and generation's two phases (prefill, decode), what each computes and reads. What a
checkpoint folder holds, read from its files, is checkpoint_info.py's."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .dtypes import float16, float32, int64
from .generator import Generator
from .counting import FlopCounter, count_flops, count_saved_bytes
from .graph import is_movement
from .nn import LM, BlockConfig, Module, TransformerBlock
from .tensor import Tensor, zeros
from .nn.cache import KVCache
from .nn.config import PRESETS
from .trace import no_grad, observe

STORAGE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}   # the commands' --dtype words: bytes per element


def stand_in(dtype: str):
    """The engine's dtype that measures `dtype`: float32, or float16 for both 2-byte ones (no bfloat16 in numpy)."""
    return float32 if STORAGE_BYTES[dtype] == 4 else float16


# ---------------------------------------------------------------- models on the meta device
def meta_lm(cfg: BlockConfig, dtype=float32) -> LM:
    """The whole model with shapes only: building even a 70B model takes milliseconds and no memory."""
    return LM(cfg, generator=Generator(0), dtype=dtype, device="meta")


def meta_ids(B: int, L: int) -> Tensor:
    """Token ids of shape (B, L) on meta: their values never matter for counting."""
    return zeros(B, L, dtype=int64, device="meta")                  # (B, L) token ids


# ---------------------------------------------------------------- parameters
PROJECTION_ROWS = {"q_proj": "W_Q", "k_proj": "W_K", "v_proj": "W_V", "o_proj": "W_O", "gate_proj": "W_gate",
                   "up_proj": "W_up", "down_proj": "W_down"}
MODEL_ROWS = {"embed": "embedding", "pos_embed": "position_embedding", "norm": "final_norm", "lm_head": "lm_head"}


def block_row(name: str) -> str:
    """A block's parameter name ('attn.q_proj.weight', 'norm1.weight', ...) -> its component row (the rows of
    accounting.block_param_breakdown)."""
    parts = name.split(".")
    if parts[-1] in ("lora_A", "lora_B"):
        return "lora"
    if parts[0] in ("norm1", "norm2"):
        return "norms"
    if parts[-2] in ("q_norm", "k_norm"):                            # QK-norm's gains (Qwen3)
        return "qk_norms"
    if parts[-1] in PROJECTION_ROWS:                                 # a mixture's experts, stacked (E, out, in)
        return PROJECTION_ROWS[parts[-1]]
    if parts[-2] == "router":
        return "W_router"
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


# ---------------------------------------------------------------- where a module counts
def scope_of(model: Module, module: Module) -> str:
    """The scope that `module`'s primitives run in when `model` runs ('model.layers.0'): the model's own scope
    name, then the attribute path down to `module`."""
    path = next(name for name, m in model.named_modules() if m is module)
    return ".".join(filter(None, (model.scope_name, path)))


def block_scope() -> str:
    """Where the first block of every nn.LM counts ('model.layers.0'), read from a small model on meta."""
    model = meta_lm(PRESETS["tiny"])
    return scope_of(model, model.layers[0])


# ---------------------------------------------------------------- FLOPs and activation bytes
PHASES = ("forward_matmul", "forward_all", "backward_matmul", "backward_all")   # the four numbers of a module


def count_model(cfg: BlockConfig, B: int, L: int) -> FlopCounter:
    """Forward and backward of the whole model on meta under count_flops; upstream gradient of zeros."""
    return _count_flops(meta_lm(cfg), B, L)


def _count_flops(model: LM, B: int, L: int) -> FlopCounter:
    with count_flops() as fc:
        logits = model(meta_ids(B, L))                               # (B, L, vocab_size)
        logits.backward(zeros(*logits.shape, dtype=logits.dtype, device="meta"))
    return fc


def phase_flops(fc: FlopCounter, scope: str, own: bool = False) -> dict[str, int]:
    """The four numbers (PHASES) of one module scope: its subtree's FLOPs, or with `own` only its own ops."""
    return {key: fc.total(key.split("_")[0], scope=scope, matmul_only=key.endswith("matmul"), own=own)
            for key in PHASES}


def flops_by_module(cfg: BlockConfig, B: int, L: int) -> dict[str, dict[str, int]]:
    """FLOPs (PHASES) of the model's forward and backward on meta (as count_model), per part: 'embedding',
    ['position_embedding'], the first block's 'block.norm1', 'block.attn', 'block.norm2', 'block.ffn' and
    'block.residual' (the block's own ops), 'block', all 'blocks', 'final_norm', 'lm_head', ['model_own',
    'outside': ops of the model itself, and outside every module, when there are any], and the whole 'model'."""
    model = meta_lm(cfg)
    fc = _count_flops(model, B, L)

    def of(module: Module, own: bool = False) -> dict[str, int]:
        return phase_flops(fc, scope_of(model, module), own)
    block = model.layers[0]
    rows = {"embedding": of(model.embed)}
    if not cfg.rope:
        rows["position_embedding"] = of(model.pos_embed)
    rows |= {f"block.{part}": of(getattr(block, part)) for part in ("norm1", "attn", "norm2", "ffn")}
    rows |= {"block.residual": of(block, own=True), "block": of(block),
             "blocks": phase_flops(fc, scope_of(model, block).rsplit(".", 1)[0]),   # 'model.layers': every block
             "final_norm": of(model.norm),
             "lm_head": phase_flops(fc, f"{model.scope_name}.lm_head")}   # a tied head runs in scope('lm_head') too
    for key, where in (("model_own", model.scope_name), ("outside", "")):   # the position add, a tied head's grads
        own = phase_flops(fc, where, own=True)
        if any(own.values()):
            rows[key] = own
    rows["model"] = phase_flops(fc, "")
    return rows


def measured_activations(cfg: BlockConfig, B: int, L: int, dtype: str) -> dict:
    """Bytes that the forward keeps for backward, measured on meta in the engine's dtype for `dtype` (a name
    in STORAGE_BYTES): per block (layers.0 inside the model, whose input is the embedding's output) and in all."""
    model = meta_lm(cfg, stand_in(dtype))
    with count_saved_bytes() as saved:
        model(meta_ids(B, L))
    per_layer = saved.total(scope_of(model, model.layers[0]))
    return {"per_layer": per_layer, "layers": per_layer * cfg.n_layers, "model": saved.total()}


# ---------------------------------------------------------------- the walk
PROJECTIONS = {"q_proj": "Q projection", "k_proj": "K projection", "v_proj": "V projection",
               "o_proj": "O projection", "gate_proj": "gate projection", "up_proj": "up projection",
               "down_proj": "down projection"}
NORMS = {"rms": "RMSNorm", "layer": "LayerNorm", "rms1p": "RMSNorm (1 + w)"}
ACTIVATIONS = {"swiglu": "SiLU(gate)", "geglu_tanh": "GELU-tanh(gate)", "relu": "ReLU", "gelu": "GELU (erf)",
               "gelu_tanh": "GELU (tanh)"}
STEPS = {("", "residual"): "residual add", ("attn", "rope"): "RoPE on q, k",
         ("attn", "repeat kv"): "repeat K, V heads (GQA)", ("attn", "scores"): "scores q k^T / sqrt(d_head)",
         ("attn", "mask"): "causal mask", ("attn", "softmax"): "softmax", ("attn", "weighted sum"): "weights @ V"}


@dataclass
class Step:
    """Consecutive primitive calls of one named step: what they compute, where, and what they cost."""
    operation: str                  # 'RMSNorm (norm1)', 'Q projection', 'RoPE on q, k', 'softmax', ...
    scope: str                      # the module of its first call: 'block.attn', 'block.attn.q_proj', ...
    shape: tuple = ()               # the output of its last call
    ops: Counter = field(default_factory=Counter)   # primitive name -> calls
    matmul_flops: int = 0
    flops: int = 0


def step_label(cfg: BlockConfig, scope: tuple, step: str, op: str) -> str | None:
    """The walk's name for a call in module `scope` (a block's, e.g. ('block', 'attn')) and named step `step`;
    None for movement in no named step (the head split and merge), which joins the step before."""
    where = scope[1:]                                                # drop 'block'
    if where and where[0] in ("norm1", "norm2"):
        return f"{NORMS[cfg.norm]} ({where[0]})"
    if len(where) > 1 and where[1] in ("q_norm", "k_norm"):         # QK-norm: RMSNorm over each head
        return f"RMSNorm ({where[1]})"
    if len(where) > 1:
        return PROJECTIONS[where[1]]
    module = where[0] if where else ""
    if (module, step) == ("ffn", "activation"):
        return ACTIVATIONS[cfg.ffn]
    if (module, step) == ("ffn", "gate"):
        return f"{ACTIVATIONS[cfg.ffn]} * up"
    if (module, step) in STEPS:
        return STEPS[module, step]
    return None if is_movement(op) else f"{'.'.join(scope)} {step or op}"


def walk(cfg: BlockConfig, B: int = 1, L: int = 1) -> list[Step]:
    """Run one block's forward on meta for x of shape (B, L, d_model); its primitive calls, grouped into steps
    by the names the modules give them (consecutive calls with the same label form one step)."""
    block = TransformerBlock(cfg, generator=Generator(0), device="meta")
    steps: list[Step] = []

    def observer(event):
        label = step_label(cfg, event.scope, event.step, event.op.name)
        if not steps or (label is not None and label != steps[-1].operation):
            steps.append(Step(label or event.op.name, ".".join(event.scope)))
        step, flops = steps[-1], event.flops
        step.ops[event.op.name] += 1
        step.flops += flops
        step.matmul_flops += flops if event.op.name == "matmul" else 0
        step.shape = event.output.shape

    with observe(observer):
        block(zeros(B, L, cfg.d_model, device="meta"))               # (B, L, d_model)
    return steps


# ---------------------------------------------------------------- generation: prefill and decode
@dataclass
class Phase:
    """One model call while generating: its FLOPs (counted by running) and the bytes it reads from memory."""
    name: str               # 'prefill' (the prompt, in one call) or 'decode' (one new token)
    tokens: int             # positions this call runs, per sequence
    context: int            # keys its last position attends to (the cache's length after the call)
    flops: int              # every op
    matmul_flops: int
    weight_bytes: int       # parameters read: whole, or the rows a gather looks up
    cache_bytes: int        # K and V the attention reads: the whole cache after this call's append

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOPs per byte of weights and cache read."""
        return self.flops / (self.weight_bytes + self.cache_bytes)


def generation_phases(cfg: BlockConfig, prompt_len: int, batch: int = 1, dtype: str = "fp32") -> tuple[Phase, Phase]:
    """Prefill of prompt_len tokens into a KVCache, then one decode step (context prompt_len + 1), run on meta.
    Prefill reuses each weight for B prompt_len tokens; decode reads every weight and the whole cache for B."""
    model = meta_lm(cfg, stand_in(dtype))
    cache = KVCache(model, batch)
    return _phase("prefill", model, meta_ids(batch, prompt_len), cache), _phase("decode", model, meta_ids(batch, 1),
                                                                               cache)


def _phase(name: str, model: LM, ids: Tensor, cache: KVCache) -> Phase:
    """Run model(ids, cache=cache) once, counting FLOPs and noting each parameter an op reads (a gather: the
    bytes of the rows it returns; any other op: the whole parameter)."""
    params = {id(p): p for p in model.parameters()}
    whole, gathered = set(), Counter()

    def weights_read(event):
        for t in event.inputs:
            if id(t) in params and event.op.name == "gather":
                gathered[id(t)] += event.output.nbytes
            elif id(t) in params:
                whole.add(id(t))

    with no_grad(), count_flops() as fc, observe(weights_read):
        model(ids, cache=cache)
    weight_bytes = sum(params[i].nbytes for i in whole) + sum(n for i, n in gathered.items() if i not in whole)
    return Phase(name, ids.shape[1], cache.length, fc.total(), fc.total(matmul_only=True), weight_bytes,
                 cache.nbytes)
