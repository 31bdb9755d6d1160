"""Closed-form accounting for a block and the LM around it: parameters, FLOPs (exactly what `count_flops`
measures, forward and backward, matmuls alone or every op), and the curriculum's back-of-envelope rules
(2N per token, 6N per trained token, Chinchilla's 20 tokens per parameter, KV cache, training memory).

Names: d_model, n_heads, n_kv_heads, d_head, d_ff, vocab V; B sequences of L tokens, N = B*L token rows;
T = B*n_heads*L*L attention scores and R = B*n_heads*L score rows. Python ints throughout: nothing overflows.
Every count is derived by hand from the math each piece computes, one FLOP per elementwise operation (a - b is
one, like a + b), n - 1 per reduction of n; a constant such as the causal mask or the RoPE tables costs nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

from .nn.config import BlockConfig

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
FFN = ("gate_proj", "up_proj", "down_proj")

# FLOPs of the composites (Tensor methods and nn pieces written in primitives) as count_flops counts them, each
# part as (per element, per row): softmax and the norms reduce each row (their last axis) once. 'backward' is
# the gradient to the input; a norm's gain and shift gradients are summed over the rows as well, one add fewer
# per parameter (n - 1 of n). Derived by hand in _activation, _rope, _softmax and _norm below; each entry is
# tested against the counter (tests/measure/test_accounting.py::test_composite_flops_table_is_what_the_counter_counts).
COMPOSITE_FLOPS = {
    "sigmoid": {"forward": (7, 0), "backward": (12, 0)},
    "silu": {"forward": (8, 0), "backward": (15, 0)},
    "relu": {"forward": (2, 0), "backward": (1, 0)},
    "gelu": {"forward": (5, 0), "backward": (10, 0)},                   # the erf form
    "gelu_tanh": {"forward": (18, 0), "backward": (27, 0)},
    "rope": {"forward": (3, 0), "backward": (4.5, 0)},
    "softmax": {"forward": (5, -2), "backward": (8, -1)},
    "rmsnorm": {"forward": (4, 3), "backward": (8, 5), "gain backward": (2, 0)},
    "layernorm": {"forward": (6, 3), "backward": (11, 5), "gain backward": (2, 0), "shift forward": (1, 0),
                  "shift backward": (1, 0)},
}


def composite_flops(name: str, part: str, elements: int, rows: int = 0) -> int:
    """COMPOSITE_FLOPS[name][part] on `elements` elements in `rows` rows: per element * elements + per row * rows
    (exact: RoPE's 4.5 per element is 9/2)."""
    per_element, per_row = COMPOSITE_FLOPS[name][part]
    return int(Fraction(per_element) * elements) + per_row * rows


# ---------------------------------------------------------------- parameters
def _shapes(cfg: BlockConfig) -> dict[str, tuple[int, int]]:
    """(d_in, d_out) of each projection of a block, in the order the block builds them."""
    d, d_q, d_kv, d_ff = cfg.d_model, cfg.n_heads * cfg.d_head, cfg.n_kv_heads * cfg.d_head, cfg.d_ff
    shapes = {"q_proj": (d, d_q), "k_proj": (d, d_kv), "v_proj": (d, d_kv), "o_proj": (d_q, d)}
    if cfg.gated:                                           # SwiGLU, GeGLU: a gate beside up
        shapes["gate_proj"] = (d, d_ff)
    return shapes | {"up_proj": (d, d_ff), "down_proj": (d_ff, d)}


def _rank(cfg: BlockConfig, name: str) -> int:
    """LoRA rank of projection `name` (0: no adapter)."""
    return cfg.lora_rank if name in cfg.lora_targets else 0


def _has_bias(cfg: BlockConfig, name: str) -> bool:
    """Whether projection `name` adds a bias: all of them with cfg.bias, q/k/v alone with cfg.qkv_bias (Qwen2)."""
    return cfg.bias or (cfg.qkv_bias and name in ATTENTION[:3])


def _projection_params(cfg: BlockConfig, names: tuple) -> int:
    """Weights, biases and LoRA adapters of the projections `names`:  sum of d_in*d_out (+ d_out) (+ r*(d_in+d_out))."""
    shapes = _shapes(cfg)
    return sum((i * o + _has_bias(cfg, n) * o + _rank(cfg, n) * (i + o)) * _copies(cfg, n)
               for n, (i, o) in shapes.items() if n in names)


def _copies(cfg: BlockConfig, name: str) -> int:
    """How many of projection `name` a block holds: n_experts of each FFN matrix in a mixture, else one."""
    return cfg.n_experts if name in FFN else 1


def _norm_params(cfg: BlockConfig) -> int:
    """One norm: a gain of d_model, plus a shift of d_model for LayerNorm with biases."""
    return cfg.d_model * (1 + (cfg.norm == "layer" and cfg.bias))


def block_param_breakdown(cfg: BlockConfig) -> dict[str, int]:
    """Rows W_Q, W_K, W_V, W_O, [W_gate], W_up, W_down, [biases: all, or q/k/v's alone with qkv_bias], norms,
    [qk_norms], [lora]; they sum to params_per_block.

    Llama: W_Q = W_O = d_model * n_heads * d_head (d_model^2 when d_head = d_model / n_heads, the default),
    W_K = W_V = d_model * n_kv_heads * d_head, each FFN matrix d_model * d_ff,
    norms 2 d_model (the block's two, norm1 and norm2). qk_norms: QK-norm's gains, q_norm and k_norm, 2 d_head
    (Qwen3); they live in the attention sublayer, so attention_ffn_shares counts them as attention. LoRA of
    rank r adds r * (d_in + d_out) per targeted projection."""
    label = {"q_proj": "W_Q", "k_proj": "W_K", "v_proj": "W_V", "o_proj": "W_O", "gate_proj": "W_gate",
             "up_proj": "W_up", "down_proj": "W_down"}
    shapes = _shapes(cfg)
    rows = {label[n]: i * o * _copies(cfg, n) for n, (i, o) in shapes.items()}
    if cfg.n_experts > 1:
        rows["W_router"] = cfg.n_experts * cfg.d_model
    if cfg.bias or cfg.qkv_bias:
        rows["biases"] = sum(o for n, (_, o) in shapes.items() if _has_bias(cfg, n))
    rows["norms"] = 2 * _norm_params(cfg)
    if cfg.qk_norm:
        rows["qk_norms"] = 2 * cfg.d_head
    if cfg.lora_rank:
        rows["lora"] = sum(_rank(cfg, n) * (i + o) for n, (i, o) in shapes.items())
    return rows


def params_per_block(cfg: BlockConfig) -> int:
    """Llama family: 2 d_model n_heads d_head + 2 d_model n_kv_heads d_head + 3 d_model d_ff + 2 d_model (the first
    term 2 d_model^2 unless head_dim sets the heads' width); GPT-2 and BERT add a bias per projection output and a
    LayerNorm shift: 4 d^2 + 2 d d_ff + (4 d + d_ff + d) + 4 d; Qwen2 adds q, k and v's biases to Llama's:
    (n_heads + 2 n_kv_heads) d_head; QK-norm (Qwen3) 2 d_head."""
    return sum(block_param_breakdown(cfg).values())


def active_params_per_block(cfg: BlockConfig) -> int:
    """Parameters one token's forward pass uses in a block: all of them, except in a mixture of experts,
    where only experts_top_k of the n_experts FFNs run (the router always does):
    params_per_block - (n_experts - experts_top_k) * 3 d_model d_ff."""
    idle = cfg.n_experts - cfg.experts_top_k if cfg.n_experts > 1 else 0
    return params_per_block(cfg) - idle * 3 * cfg.d_model * cfg.d_ff


def active_params(cfg: BlockConfig) -> int:
    """Parameters one token's forward pass uses in nn.LM(cfg): total_params less every block's idle experts
    (equal to total_params without a mixture). The embedding is counted whole, as in total_params."""
    return total_params(cfg) - cfg.n_layers * (params_per_block(cfg) - active_params_per_block(cfg))


def model_param_breakdown(cfg: BlockConfig) -> dict[str, int]:
    """embedding V*d_model, [position_embedding max_seq_len*d_model without RoPE], blocks, final_norm and
    lm_head (V*d_model; 0 when tied to the embedding)."""
    d = cfg.d_model
    rows = {"embedding": cfg.vocab_size * d}
    if not cfg.rope:
        rows["position_embedding"] = cfg.max_seq_len * d
    rows |= {"blocks": cfg.n_layers * params_per_block(cfg), "final_norm": _norm_params(cfg),
             "lm_head": 0 if cfg.tie_embeddings else cfg.vocab_size * d}
    return rows


def total_params(cfg: BlockConfig) -> int:
    """Everything nn.LM(cfg) holds: the sum of model_param_breakdown (equals LM.num_parameters())."""
    return sum(model_param_breakdown(cfg).values())


class Shares(NamedTuple):
    """(attention, ffn) fractions; a plain tuple that also reads as .attention and .ffn."""
    attention: float
    ffn: float


def attention_ffn_shares(cfg: BlockConfig) -> Shares:
    """(attention, ffn): the fractions of a block's parameters in its attention sublayer (Q, K, V, O, and
    QK-norm's gains) and in the FFN (biases and LoRA adapters go with their projection; the two norms' small
    rest makes the two sum to just under 1)."""
    total = params_per_block(cfg)
    attention = _projection_params(cfg, ATTENTION) + 2 * cfg.d_head * cfg.qk_norm
    return Shares(attention / total, _projection_params(cfg, FFN) / total)


# ---------------------------------------------------------------- FLOPs: the pieces
@dataclass(frozen=True)
class Cost:
    """FLOPs of one piece of the graph: forward and backward, matmuls and every other op (elementwise,
    reductions, scatter-adds), by the rules of function.py."""
    fwd_matmul: int = 0
    fwd_other: int = 0
    bwd_matmul: int = 0
    bwd_other: int = 0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.fwd_matmul + other.fwd_matmul, self.fwd_other + other.fwd_other,
                    self.bwd_matmul + other.bwd_matmul, self.bwd_other + other.bwd_other)

    def __mul__(self, n: int) -> Cost:
        return Cost(self.fwd_matmul * n, self.fwd_other * n, self.bwd_matmul * n, self.bwd_other * n)

    def forward(self, matmul_only: bool) -> int:
        return self.fwd_matmul + (0 if matmul_only else self.fwd_other)

    def backward(self, matmul_only: bool) -> int:
        return self.bwd_matmul + (0 if matmul_only else self.bwd_other)


def _matmul(M: int, K: int, N: int, *, da: bool, db: bool) -> Cost:
    """(M, K) @ (K, N): 2 M K N forward; backward dA = g B^T and dB = A^T g, 2 M K N each, where wanted."""
    return Cost(fwd_matmul=2 * M * K * N, bwd_matmul=2 * M * K * N * (da + db))


def _fan_out(size: int, uses: int, wanted: bool) -> Cost:
    """A tensor read by `uses` ops gets `uses` gradients in backward: (uses - 1) * size adds, if it wants one."""
    return Cost(bwd_other=(uses - 1) * size if wanted else 0)


def _linear(N: int, d_in: int, d_out: int, *, dx: bool, train: bool, bias: bool, rank: int) -> tuple[Cost, bool]:
    """y = x W^T (+ b) (+ s (x A^T) B^T) on N rows: the matmuls; the bias add (N d_out) and its gradient, a sum
    over the rows (N d_out - d_out); LoRA's scale and add (2 N d_out), the scale's backward (N d_out) and x
    read twice. `dx`: x wants a gradient; `train`: W and b do. Returns the cost and whether y wants one."""
    cost = _matmul(N, d_in, d_out, da=dx, db=train)
    if bias:
        cost += Cost(fwd_other=N * d_out, bwd_other=N * d_out - d_out if train else 0)
    if rank:
        cost += _matmul(N, d_in, rank, da=dx, db=True) + _matmul(N, rank, d_out, da=True, db=True)
        cost += Cost(fwd_other=2 * N * d_out, bwd_other=N * d_out) + _fan_out(N * d_in, 2, dx)
    return cost, dx or train or bool(rank)


def _projection(cfg: BlockConfig, name: str, N: int, dx: bool) -> tuple[Cost, bool]:
    d_in, d_out = _shapes(cfg)[name]
    return _linear(N, d_in, d_out, dx=dx, train=not cfg.lora_rank, bias=_has_bias(cfg, name), rank=_rank(cfg, name))


NORM_FLOPS = {"rms": "rmsnorm", "rms1p": "rmsnorm", "layer": "layernorm"}   # cfg.norm -> its COMPOSITE_FLOPS row


def _norm(cfg: BlockConfig, N: int, *, dx: bool, train: bool, d: int = 0, kind: str = "") -> tuple[Cost, bool]:
    """N rows of d of the norm `kind` (cfg.norm unless given; d = d_model unless given: QK-norm's rows are heads
    of d_head, normed by plain RMSNorm).
    RMSNorm  x * rsqrt(mean(x*x) + eps) * g:  forward x*x d, sum d - 1, /d, +eps, sqrt, 1/ (4), x * rstd d,
    * g d: 4 N d + 3 N.  Backward to x 8 N d + 5 N: g * gain d; g * rstd and g * x d each, the latter summed
    d - 1; back through 1/ 3 (-g out^2), sqrt 2 (g / 2 out), /d 1; x*x's two products 2 d; x read three times,
    2 d of adds.  To g: g * x_hat, summed over the rows: 2 N d - d.
    LayerNorm  c = x - mean(x);  c * rsqrt(mean(c*c) + eps) * g (+ b):  forward mean d, x - mean d, then RMSNorm's
    4 d + 3 on c (+ b d): 6 N d + 3 N (+ N d).  Backward to x 11 N d + 5 N: RMSNorm's 8 d + 5 on c, and 3 d for
    the mean: -g d (the subtrahend's gradient), summed d - 1, /d 1, x read twice d.  To g 2 N d - d, b N d - d.
    RMSNorm by 1 + w (Gemma): RMSNorm's, and d forward for 1 + w (its gradient passes the add unchanged)."""
    d, kind = d or cfg.d_model, kind or cfg.norm
    name = NORM_FLOPS[kind]
    fwd, to_x = composite_flops(name, "forward", N * d, N), composite_flops(name, "backward", N * d, N)
    to_params = composite_flops(name, "gain backward", N * d) - d                 # summed over the N rows
    fwd += d if kind == "rms1p" else 0
    if kind == "layer" and cfg.bias:
        fwd += composite_flops(name, "shift forward", N * d)
        to_params += composite_flops(name, "shift backward", N * d) - d
    return Cost(fwd_other=fwd, bwd_other=to_x * dx + to_params * train), dx or train


def _rope(size: int, wanted: bool) -> Cost:
    """(x1 cos - x2 sin, x2 cos + x1 sin) on `size` elements (pairs of halves): four products and a
    difference and a sum on half the elements each, 3 per element forward. Backward 4.5 per element: the four
    products' gradients (g1 c, -g1 s, g2 c, g2 s: 2), the negation -g1 (0.5), the sums where x1 and x2 each
    meet their two uses (1), and x's two halves, each padded back to full width, added (1)."""
    return Cost(fwd_other=composite_flops("rope", "forward", size),
                bwd_other=composite_flops("rope", "backward", size) if wanted else 0)


def _softmax(T: int, R: int, wanted: bool) -> Cost:
    """e = exp(s - m), m = max s per row (a constant: the result does not depend on it); e / sum e. Forward:
    max T - R, s - m T, exp T, sum T - R, division T: 5 T - 2 R. Backward 8 T - R: the division 5 T (g / b,
    and -(g a) / (b b)), its b-gradient summed over the row T - R, e read twice T, exp T (g e); s - m passes g."""
    return Cost(fwd_other=composite_flops("softmax", "forward", T, R),
                bwd_other=composite_flops("softmax", "backward", T, R) if wanted else 0)


def _attention(cfg: BlockConfig, B: int, L: int, dx: bool) -> tuple[Cost, bool]:
    """Projections; with qk_norm, RMSNorm on each head of q and k (N n_heads and N n_kv_heads rows of d_head,
    gains trained unless LoRA freezes them); RoPE on q and k; q / sqrt(d_head) (N n_heads d_head each way);
    GQA's expand of k and v (0 forward; backward sums each group: B L d_head (n_heads - n_kv_heads) each); scores
    q k^T and weights @ v (2 B n_heads L^2 d_head each); the causal mask, a constant of the length alone (0 on
    and below the diagonal, -inf above), added to the scores: T, its gradient g itself; softmax; o_proj. x feeds
    q, k, v. RoPE's tables, scaled or not, are constants: they cost nothing."""
    N, d, H, d_head = B * L, cfg.d_model, cfg.n_heads, cfg.d_head
    T, R, d_q, d_kv = B * H * L * L, B * H * L, H * d_head, cfg.n_kv_heads * d_head
    q, q_grad = _projection(cfg, "q_proj", N, dx)
    k, k_grad = _projection(cfg, "k_proj", N, dx)
    v, v_grad = _projection(cfg, "v_proj", N, dx)
    cost = q + k + v + _fan_out(N * d, 3, dx)
    if cfg.qk_norm:
        q_norm, q_grad = _norm(cfg, N * H, dx=q_grad, train=not cfg.lora_rank, d=d_head, kind="rms")
        k_norm, k_grad = _norm(cfg, N * cfg.n_kv_heads, dx=k_grad, train=not cfg.lora_rank, d=d_head, kind="rms")
        cost += q_norm + k_norm
    if cfg.rope:
        cost += _rope(N * d_q, q_grad) + _rope(N * d_kv, k_grad)
    cost += Cost(fwd_other=N * d_q, bwd_other=N * d_q if q_grad else 0)                   # q / sqrt(d_head)
    repeat = B * L * d_head * (H - cfg.n_kv_heads)
    cost += Cost(bwd_other=repeat * k_grad + repeat * v_grad)                             # GQA expand
    cost += _matmul(B * H * L, d_head, L, da=q_grad, db=k_grad)                           # q k^T
    scores_grad = q_grad or k_grad
    if cfg.causal:
        cost += Cost(fwd_other=T)
    cost += _softmax(T, R, scores_grad) + _matmul(B * H * L, L, d_head, da=scores_grad, db=v_grad)
    o, o_grad = _projection(cfg, "o_proj", N, scores_grad or v_grad)
    return cost + o, o_grad


def _activation(kind: str, n: int, wanted: bool) -> Cost:
    """An FFN activation on n elements, forward / backward per element.
    sigmoid, overflow-safe: p = x >= 0, e = exp(where(p, -x, x)), where(p, 1, e) / (e + 1): compare, -x, where,
    exp, where, +1, division: 7. Backward 12: the division 5, the wheres 1 + 2, e read twice 1, exp 1, -x 1, x
    read twice 1.  SiLU x sigmoid(x): 8 / 15 (the product 1 / 2, x read three times: one add more).
    ReLU where(x > 0, x, 0): compare, where 2 / where 1.  GELU x/2 (erf(x / sqrt 2) + 1): x/2, x / sqrt 2, erf,
    +1, product 5 / 10 (the product 2, x/2 1, erf' = 2/sqrt(pi) e^(-a^2) 5, x / sqrt 2 1, x read twice 1).
    GELU-tanh x/2 (tanh(z) + 1), z = sqrt(2/pi) (x + 0.044715 x^3), tanh z = 2 sigmoid(2z) - 1: z 5 (x*x, *x,
    *0.044715, x +, *sqrt(2/pi)), tanh 10 (2z, sigmoid 7, *2, -1), x/2, +1, product 3: 18.  Backward 27: the
    product 2, x/2 1, *2 1, sigmoid 12, 2z 1, z 6 (*sqrt(2/pi) 1, *0.044715 1, x*x*x's two products 4), x read
    five times 4; the sums (x +, -1, +1) pass g on."""
    return Cost(fwd_other=composite_flops(kind, "forward", n),
                bwd_other=composite_flops(kind, "backward", n) if wanted else 0)


def _ffn(cfg: BlockConfig, N: int, dx: bool) -> tuple[Cost, bool]:
    """Gated (SwiGLU, GeGLU) down(act(gate(x)) * up(x)): x feeds gate and up; the product is N d_ff forward and
    N d_ff per wanted factor backward. MLP down(act(up(x)))."""
    if cfg.n_experts > 1:
        return _moe(cfg, N, dx)
    n = N * cfg.d_ff
    up, up_grad = _projection(cfg, "up_proj", N, dx)
    if cfg.gated:
        gate, gate_grad = _projection(cfg, "gate_proj", N, dx)
        cost = gate + up + _fan_out(N * cfg.d_model, 2, dx) + _activation(cfg.activation, n, gate_grad)
        cost += Cost(fwd_other=n, bwd_other=n * gate_grad + n * up_grad)
        hidden_grad = gate_grad or up_grad
    else:
        cost, hidden_grad = up + _activation(cfg.activation, n, up_grad), up_grad
    down, out_grad = _projection(cfg, "down_proj", N, hidden_grad)
    return cost + down, out_grad


def _moe(cfg: BlockConfig, N: int, dx: bool) -> tuple[Cost, bool]:
    """nn.MoE on N tokens, E = n_experts, k = experts_top_k (per token, all N-fold):
    router x W_r^T 2 d E; softmax over E 5 E - 2; top-k ranks: two comparisons and a select over E x E, the sum
    E (E - 1), rank == r E k, times e E k, summed over e k (E - 1); the flat gather index k; the kept gates'
    renormalisation k - 1 + k. Experts: the k gathered W_gate, W_up, W_down matmuls 6 k d d_ff, SiLU 8 k d_ff,
    the gate product k d_ff; combine k d + d (k - 1).  Matmuls: 2 d E + 6 k d d_ff, the active experts only.
    Backward: every matmul twice (once for the weights, once for the input, each where wanted), each gathered
    weight scatter-added back (k d d_ff each), SiLU 15 and the product 2 per hidden unit; x's k copies read
    twice and summed (2 k d - d); the combine's two products and the gates' sum over d (2 k d + k d - k); the
    renormalisation (division 5 k, its sum k - 1, kept read twice k); the probabilities' gather scatter-added
    k; the softmax 8 E - 1; x read by router and experts d. Under LoRA the experts and router are frozen."""
    d, d_ff, E, k, train = cfg.d_model, cfg.d_ff, cfg.n_experts, cfg.experts_top_k, not cfg.lora_rank
    wanted = dx or train                                    # the router's logits and the hidden units want one
    softmax_fwd, softmax_bwd = (composite_flops("softmax", part, E, 1) for part in ("forward", "backward"))
    silu_fwd, silu_bwd = (composite_flops("silu", part, k * d_ff) for part in ("forward", "backward"))
    route = softmax_fwd + 3 * E * E + E * (E - 1) + 2 * E * k + k * (E - 1) + k + (k - 1) + k
    experts = silu_fwd + k * d_ff + k * d + d * (k - 1)
    bwd = (3 * k * d * d_ff) * train + (silu_bwd + 2 * k * d_ff + 3 * k * d - k + 5 * k + (k - 1) + 2 * k
                                        + softmax_bwd) * wanted
    bwd += (2 * k * d - d + d) * dx
    cost = Cost(fwd_other=N * (route + experts), bwd_other=N * bwd)
    cost += _matmul(N, d, E, da=dx, db=train) + _matmul(N * k, d, 2 * d_ff, da=dx, db=train)
    return cost + _matmul(N * k, d_ff, d, da=wanted, db=train), wanted


def _block(cfg: BlockConfig, B: int, L: int, dx: bool) -> tuple[Cost, bool]:
    """One TransformerBlock: two residual adds (2 N d_model) and the gradient adds where the stream forks.
    Under LoRA every base weight and norm gain is frozen."""
    N, d, train = B * L, cfg.d_model, not cfg.lora_rank
    residuals = Cost(fwd_other=2 * N * d)
    if cfg.layout == "parallel":                          # x + attn(norm1(x)) + ffn(norm2(x))
        n1, n1_grad = _norm(cfg, N, dx=dx, train=train)
        attn, attn_grad = _attention(cfg, B, L, n1_grad)
        n2, n2_grad = _norm(cfg, N, dx=dx, train=train)
        ffn, ffn_grad = _ffn(cfg, N, n2_grad)
        return residuals + _fan_out(N * d, 3, dx) + n1 + attn + n2 + ffn, dx or attn_grad or ffn_grad
    if cfg.layout in ("post", "deep"):     # h = norm1(x + attn(x)); norm2(h + ffn(h))
        attn, attn_grad = _attention(cfg, B, L, dx)
        n1, h_grad = _norm(cfg, N, dx=dx or attn_grad, train=train)
        ffn, ffn_grad = _ffn(cfg, N, h_grad)
        n2, out_grad = _norm(cfg, N, dx=h_grad or ffn_grad, train=train)
        cost = residuals + _fan_out(N * d, 2, dx) + _fan_out(N * d, 2, h_grad) + attn + n1 + ffn + n2
        if cfg.layout == "deep":           # DeepNorm's alpha x and alpha h: N d each, and their gradients
            cost += Cost(fwd_other=2 * N * d, bwd_other=N * d * dx + N * d * h_grad)
        return cost, out_grad
    n1, n1_grad = _norm(cfg, N, dx=dx, train=train)   # h = x + attn(norm1(x)); h + ffn(norm2(h))
    attn, attn_grad = _attention(cfg, B, L, n1_grad)
    h_grad = dx or attn_grad
    n2, n2_grad = _norm(cfg, N, dx=h_grad, train=train)
    ffn, ffn_grad = _ffn(cfg, N, n2_grad)
    return residuals + _fan_out(N * d, 2, dx) + _fan_out(N * d, 2, h_grad) + n1 + attn + n2 + ffn, h_grad or ffn_grad


def _model(cfg: BlockConfig, B: int, L: int) -> Cost:
    """nn.LM: the embedding gather (0; backward scatter-adds N d_model); without RoPE, + position embeddings
    (N d forward; backward sums over the batch, (B - 1) L d, and scatter-adds L d); n_layers blocks; the final
    norm; the head, 2 N d_model V each way. A tied head's gradient adds into the embedding's (V d_model).
    Scaled embeddings (Gemma): times sqrt(d_model), N d each way."""
    N, d, V = B * L, cfg.d_model, cfg.vocab_size
    cost = Cost(bwd_other=N * d) + Cost(fwd_other=N * d, bwd_other=N * d) * cfg.scale_embeddings
    if not cfg.rope:
        cost += Cost(fwd_other=N * d, bwd_other=(B - 1) * L * d + L * d)
    cost += _block(cfg, B, L, True)[0] * cfg.n_layers + _norm(cfg, N, dx=True, train=True)[0]
    cost += _matmul(N, d, V, da=True, db=True)
    if cfg.tie_embeddings:
        cost += Cost(bwd_other=V * d)
    return cost


# ---------------------------------------------------------------- FLOPs: the public counts
def block_forward_flops(cfg: BlockConfig, seq_len: int, batch: int = 1, *, matmul_only: bool = True) -> int:
    """FLOPs count_flops measures for one TransformerBlock forward on x (batch, seq_len, d_model).
    Matmuls: 2 B L (matmul weights, LoRA adapters included) + 4 B n_heads L^2 d_head."""
    return _block(cfg, batch, seq_len, True)[0].forward(matmul_only)


def block_backward_flops(cfg: BlockConfig, seq_len: int, batch: int = 1, *, matmul_only: bool = True,
                         input_requires_grad: bool = True) -> int:
    """FLOPs count_flops measures for one block's backward from a gradient on its output. Matmuls: twice the
    forward, less the dX matmuls nobody needs (input without grad, post-norm: q, k, v read x directly) and the
    dW of frozen weights (LoRA). 0 when nothing in the block wants a gradient."""
    cost, out_grad = _block(cfg, batch, seq_len, input_requires_grad)
    return cost.backward(matmul_only) if out_grad else 0


def model_forward_flops(cfg: BlockConfig, seq_len: int, batch: int = 1, *, matmul_only: bool = True) -> int:
    """FLOPs count_flops measures for nn.LM(cfg) on ids (batch, seq_len): blocks, final norm, the head's
    2 B L d_model V (position-embedding add without RoPE; the gather costs 0)."""
    return _model(cfg, batch, seq_len).forward(matmul_only)


def model_backward_flops(cfg: BlockConfig, seq_len: int, batch: int = 1, *, matmul_only: bool = True) -> int:
    """FLOPs count_flops measures for nn.LM's backward from a gradient on the logits, embeddings trained."""
    return _model(cfg, batch, seq_len).backward(matmul_only)


def flops_per_token(cfg: BlockConfig, seq_len: int) -> dict[str, int]:
    """Forward FLOPs per block per token: 'static' = 2 x the block's matmul parameters (weights and LoRA
    adapters; in a mixture of experts the router and the experts_top_k active experts only), 'attention' =
    4 seq_len n_heads d_head (scores and weights @ V over a context of seq_len; 4 seq_len d_model for the usual
    d_model = n_heads d_head), 'total'. B L 'total' = the forward matmuls."""
    shapes = _shapes(cfg)
    static = 2 * sum((i * o + _rank(cfg, n) * (i + o)) * _active_copies(cfg, n) for n, (i, o) in shapes.items())
    if cfg.n_experts > 1:                                   # a mixture: the router's d_model x n_experts too
        static += 2 * cfg.d_model * cfg.n_experts
    attention = 4 * seq_len * cfg.n_heads * cfg.d_head
    return {"static": static, "attention": attention, "total": static + attention}


def _active_copies(cfg: BlockConfig, name: str) -> int:
    """How many of projection `name` one token runs through: experts_top_k of each FFN matrix in a mixture."""
    return cfg.experts_top_k if cfg.n_experts > 1 and name in FFN else 1


def decode_flops(cfg: BlockConfig, context_len: int, batch: int = 1, *, matmul_only: bool = True) -> int:
    """FLOPs count_flops measures for one decode step of nn.LM with a KV cache: one new token per sequence,
    attending to context_len keys (context_len - 1 cached and its own). Matmuls: n_layers (2 x the block's
    matmul parameters + 4 context_len n_heads d_head) + 2 d_model V for the head, i.e. 2 x the matmul
    parameters + the attention term at this length (flops_per_token per layer, plus the head). All ops: the
    forward at L = 1 (model_forward_flops), plus per layer, per extra key beyond the first, per head: the
    scores' and weights @ V's 4 d_head, the causal mask's add 1 and the softmax's 5 (max, -, exp, sum, /)."""
    if not isinstance(context_len, int) or context_len < 1:
        raise ValueError(f"decode_flops: context_len counts the keys the new token sees, an int >= 1, got "
                         f"{context_len!r}")
    extra_keys = cfg.n_layers * batch * cfg.n_heads * (context_len - 1)
    per_key = 4 * cfg.d_head + (0 if matmul_only else 1 + COMPOSITE_FLOPS["softmax"]["forward"][0])
    return model_forward_flops(cfg, 1, batch, matmul_only=matmul_only) + extra_keys * per_key


# ---------------------------------------------------------------- compute rules of thumb
def training_flops(n_params: int, tokens: int) -> int:
    """The 6N rule: 6 N D (2 N forward + 4 N backward per token)."""
    return 6 * int(n_params) * int(tokens)


def chinchilla_tokens(n_params: int) -> int:
    """Compute-optimal data for N parameters (Hoffmann et al. 2022): D = 20 N."""
    return 20 * int(n_params)


def training_days(total_flops: float, n_gpus: int, peak_flops_per_gpu: float, utilization: float) -> float:
    """Wall-clock days = FLOPs / (n_gpus * peak * utilization * 86400 s)."""
    return total_flops / (n_gpus * peak_flops_per_gpu * utilization * 86400)


def inference_tokens_per_second(n_params: int, peak_flops: float, utilization: float = 1.0) -> float:
    """Upper bound for one accelerator: peak * utilization / 2N (2N FLOPs per token; attention and memory
    bandwidth ignored)."""
    return peak_flops * utilization / (2 * n_params)


# ---------------------------------------------------------------- memory
def kv_cache_bytes(cfg: BlockConfig, seq_len: int, batch: int = 1, bytes_per_element: int = 2) -> int:
    """K and V of every layer: 2 n_layers B L n_kv_heads d_head bytes_per_element."""
    return 2 * cfg.n_layers * batch * seq_len * cfg.n_kv_heads * cfg.d_head * bytes_per_element


def activation_bytes_per_token_per_layer(cfg: BlockConfig, bytes_per_element: int = 2) -> int:
    """The curriculum's estimate ("Memory accounting for training"), with FlashAttention and a fused SwiGLU:
    5 d_model elements per token per layer, i.e. 10 d_model bytes in bf16 (80 KiB at d_model = 8192):
    residual x, norm output, Q and K, attention output, FFN hidden, each taken as 2 d_model bytes.

    The estimate's own rows do not add up to that subtotal: they list the FFN hidden as 2 d_ff bytes (its "44 KB" is
    2 * 8/3 * 8192; Llama-2-70B's d_ff = 28672 gives 56 KiB), so the rows sum to 8 d_model + 2 d_ff bytes
    (109 KB at d_ff = 8d/3; 120 KiB for Llama-2-70B), not 10 d_model. The 25 GB figure uses 10 d_model."""
    return 5 * cfg.d_model * bytes_per_element


def _trainable_params(cfg: BlockConfig) -> int:
    """Parameters nn.LM trains: all of them, or under LoRA all but the blocks' frozen base weights."""
    if not cfg.lora_rank:
        return total_params(cfg)
    frozen = params_per_block(cfg) - block_param_breakdown(cfg)["lora"]
    return total_params(cfg) - cfg.n_layers * frozen


def training_memory(cfg: BlockConfig, seq_len: int, batch: int = 1, bytes_per_element: int = 2,
                    optimizer_bytes_per_param: int = 16) -> dict[str, int]:
    """Bytes to train nn.LM(cfg) with Adam, the curriculum's convention: 16 bytes per trained parameter in all: the
    weights (2, bf16) + their gradients (2) + Adam's fp32 master copy, first and second moments (4 + 4 + 4).
    So 'parameters' = P bytes_per_element, 'gradients' and 'optimizer' = the rest of the 16 (12 bytes: the
    "Adam state" proper), per trained parameter; the three together are 16 P (1.1 TB for 70B).
    'activations' = activation_bytes_per_token_per_layer * B L n_layers. 'total' = those four. 'kv_cache'
    (kv_cache_bytes) is what inference at this length holds, for comparison: training keeps K and V among
    the activations, so it is not part of 'total'."""
    extra = optimizer_bytes_per_param - 2 * bytes_per_element
    if extra < 0:
        raise ValueError(f"training_memory: optimizer_bytes_per_param={optimizer_bytes_per_param} counts weights, "
                         f"gradients and optimizer state, so it must be at least 2 * bytes_per_element "
                         f"= {2 * bytes_per_element}")
    trained = _trainable_params(cfg)
    rows = {"parameters": total_params(cfg) * bytes_per_element, "gradients": trained * bytes_per_element,
            "optimizer": trained * extra,
            "activations": activation_bytes_per_token_per_layer(cfg, bytes_per_element) * batch * seq_len
            * cfg.n_layers}
    return rows | {"kv_cache": kv_cache_bytes(cfg, seq_len, batch, bytes_per_element), "total": sum(rows.values())}
