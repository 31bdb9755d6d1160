"""Mixture of experts (Shazeer et al. 2017; Mixtral 2024): n_experts SwiGLU FFNs and a router that sends each
token to its top k of them.  out = sum over the kept experts i of gate_i(x) * expert_i(x).

Every shape is fixed by (N tokens, k): each token gathers the weights of its k experts and multiplies them
itself, so the matmuls cost exactly the active experts' 6 d_model d_ff per token, on numpy, meta and cuda alike,
with no read back to the host. (A fast kernel would sort the tokens by expert instead; same FLOPs.)
"""
from __future__ import annotations

from ..dtypes import float32, int64
from ..function import Gather
from ..tensor import Tensor, arange, where
from ..trace import constant, step
from .config import BlockConfig
from .layers import Linear
from .module import Module, init_weight


def top_k_indices(logits: Tensor, k: int) -> Tensor:
    """(N, E) scores -> (N, k) int64 indices of each row's k largest, largest first; equal scores go to the
    lower index (as a stable sort would). Built from comparisons, so every shape is static:
    rank[n, e] = #{j : l_j > l_e, or l_j = l_e and j < e};  idx[n, r] = the e whose rank is r."""
    N, E = logits.shape
    l_e, l_j = logits.unsqueeze(2), logits.unsqueeze(1)                  # (N, E, 1), (N, 1, E)
    beats = where(_lower_index(E, logits.device), l_j >= l_e, l_j > l_e)    # (N, E, E): expert j ranks above e
    rank = beats.to(int64).sum(axis=-1)                                  # (N, E): 0 for the largest
    is_rank_r = rank.unsqueeze(2) == arange(k, device=logits.device)     # (N, E, k): rank[n, e] == r
    experts = arange(E, device=logits.device).unsqueeze(1)               # (E, 1)
    return (is_rank_r.to(int64) * experts).sum(axis=1)                   # (N, k)


def _lower_index(E: int, device) -> Tensor:
    """(E, E) booleans [e, j] = j < e: the tie-break table. A constant, like the causal mask: built under
    `constant()`, so no op is recorded, counted or drawn."""
    with constant():
        experts = arange(E, device=device)
        return experts.reshape(1, E) < experts.reshape(E, 1)               # (E, E): [e, j] = j < e


def take_along_rows(a: Tensor, idx: Tensor) -> Tensor:
    """out[n, r] = a[n, idx[n, r]] for a (N, E) and idx (N, k): a gather on the flattened rows. The indices come
    from top_k_indices, in range by construction: no bounds check, so nothing is read back from a GPU."""
    N, E = a.shape
    flat = arange(0, N * E, E, device=a.device).unsqueeze(1) + idx       # (N, k): n * E + idx[n, r]
    return Gather.apply(a.reshape(N * E), idx=flat.data, axis=0)         # (N, k)


class MoE(Module):
    """A mixture of n_experts SwiGLU experts, each token routed to experts_top_k of them (Mixtral's router):
    logits = x W_r^T;  p = softmax(logits) over the experts;  keep the top k;  gates = p_kept / sum(p_kept);
    out = sum_kept gate_i * down_i( silu(gate_proj_i x) * up_proj_i x ).

    The experts' weights are stacked: gate_proj, up_proj (n_experts, d_ff, d_model), down_proj (n_experts,
    d_model, d_ff), expert i's matrices being [i] of each, stored (out, in) like a Linear's."""

    def __init__(self, cfg: BlockConfig, *, generator, dtype=float32, device="cpu"):
        self.cfg = cfg
        E, d, d_ff, make = cfg.n_experts, cfg.d_model, cfg.d_ff, (generator, dtype, device)
        self.router = Linear(d, E, generator=generator, dtype=dtype, device=device)   # W_r: (E, d_model)
        self.gate_proj = init_weight((E, d_ff, d), *make)
        self.up_proj = init_weight((E, d_ff, d), *make)
        self.down_proj = init_weight((E, d, d_ff), *make)

    def forward(self, x: Tensor) -> Tensor:                          # x: (B, L, d_model)
        B, L, d = x.shape
        x = x.reshape(B * L, d)                                      # (N, d_model): each token routed alone
        idx, gates = self.route(x)                                   # (N, k) expert ids, (N, k) gates
        y = self.experts(x, idx)                                     # (N, k, d_model): expert_i(x), kept i
        with step("combine"):
            out = (gates.unsqueeze(2) * y).sum(axis=1)               # (N, d_model): sum_i gate_i expert_i(x)
        return out.reshape(B, L, d)

    def route(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x (N, d_model) -> the top-k experts of each token (N, k), largest first, and their gates (N, k), the
        kept softmax probabilities renormalised to sum to 1. The choice itself has no gradient; the gates do."""
        logits = self.router(x)                                      # (N, E): x W_r^T
        with step("route"):
            probs = logits.softmax(axis=-1)                          # (N, E)
            idx = top_k_indices(logits, self.cfg.experts_top_k)      # (N, k)
            kept = take_along_rows(probs, idx)                       # (N, k)
            return idx, kept / kept.sum(axis=-1, keepdims=True)

    def experts(self, x: Tensor, idx: Tensor) -> Tensor:
        """Each token through each of its k experts: x (N, d_model), idx (N, k) -> (N, k, d_model)."""
        N, d = x.shape
        k = idx.shape[1]
        w_gate = Gather.apply(self.gate_proj, idx=idx.data, axis=0)  # (N, k, d_ff, d_model): its experts' W_gate
        w_up = Gather.apply(self.up_proj, idx=idx.data, axis=0)      # (N, k, d_ff, d_model)
        w_down = Gather.apply(self.down_proj, idx=idx.data, axis=0)  # (N, k, d_model, d_ff)
        xs = x.reshape(N, 1, d, 1).expand(N, k, d, 1)                # (N, k, d_model, 1): x as a column, k times
        with step("activation"):
            act = (w_gate @ xs).silu()                               # (N, k, d_ff, 1)
        with step("gate"):
            hidden = act * (w_up @ xs)                               # (N, k, d_ff, 1)
        return (w_down @ hidden).reshape(N, k, d)                    # (N, k, d_model)
