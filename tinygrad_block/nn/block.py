"""The feed-forward networks and the transformer block:  h = x + attn(norm1(x));  out = h + ffn(norm2(h)).
Beside that pre-norm layout, the others a config can ask for (post-norm, parallel, DeepNorm); `make_block(cfg)`
builds the one the config names."""
from __future__ import annotations

from ..dtypes import float32
from ..tensor import Tensor
from ..trace import step
from .attention import Attention
from .config import BlockConfig
from .layers import norm, projection
from .moe import MoE
from .module import Module


ACTIVATIONS = {"silu": Tensor.silu, "relu": Tensor.relu, "gelu": Tensor.gelu,      # cfg.activation -> the op
               "gelu_tanh": lambda h: h.gelu(approximate="tanh")}


class SwiGLU(Module):
    """down( act(gate(x)) * up(x) ): the gate decides, per hidden unit, how much of up(x) passes. act = SiLU
    (SwiGLU, Llama) or the tanh GELU (GeGLU, Gemma), as cfg.ffn says (config.FFNS)."""

    def __init__(self, cfg: BlockConfig, *, generator, dtype=float32, device="cpu"):
        d, d_ff, make = cfg.d_model, cfg.d_ff, dict(generator=generator, dtype=dtype, device=device)
        self.activation = cfg.activation
        self.gate_proj = projection(cfg, "gate_proj", d, d_ff, **make)
        self.up_proj = projection(cfg, "up_proj", d, d_ff, **make)
        self.down_proj = projection(cfg, "down_proj", d_ff, d, **make)

    def forward(self, x: Tensor) -> Tensor:                          # x: (B, L, d_model)
        with step("activation"):
            act = ACTIVATIONS[self.activation](self.gate_proj(x))   # (B, L, d_ff)
        with step("gate"):
            hidden = act * self.up_proj(x)                           # (B, L, d_ff)
        return self.down_proj(hidden)                                # (B, L, d_model)


class MLP(Module):
    """down( act(up(x)) ): the classic expand-and-contract FFN, act = GELU (erf or tanh form) or ReLU."""

    def __init__(self, cfg: BlockConfig, *, generator, dtype=float32, device="cpu"):
        self.activation, make = cfg.activation, dict(generator=generator, dtype=dtype, device=device)
        self.up_proj = projection(cfg, "up_proj", cfg.d_model, cfg.d_ff, **make)
        self.down_proj = projection(cfg, "down_proj", cfg.d_ff, cfg.d_model, **make)

    def forward(self, x: Tensor) -> Tensor:                          # x: (B, L, d_model)
        h = self.up_proj(x)                                          # (B, L, d_ff)
        with step("activation"):
            h = ACTIVATIONS[self.activation](h)
        return self.down_proj(h)


class Block(Module):
    """What every layout shares: norm1, attn, norm2 and ffn (SwiGLU, an MLP or a mixture of experts, as the config
    says); each layout below is one `forward`. With LoRA (cfg.lora_rank > 0) every base parameter is frozen: only
    the adapters' A and B train. Build one with `make_block(cfg, ...)` (or `TransformerBlock(cfg, ...)`)."""

    scope_name = "block"

    def __init__(self, cfg: BlockConfig, *, generator, dtype=float32, device="cpu"):
        self.cfg = cfg
        self.norm1 = norm(cfg, dtype=dtype, device=device)
        self.attn = Attention(cfg, generator=generator, dtype=dtype, device=device)
        self.norm2 = norm(cfg, dtype=dtype, device=device)
        ffn = MoE if cfg.n_experts > 1 else SwiGLU if cfg.gated else MLP
        self.ffn = ffn(cfg, generator=generator, dtype=dtype, device=device)
        if cfg.lora_rank:
            for name, p in self.named_parameters():
                p.requires_grad = name.endswith(("lora_A", "lora_B"))

    def __call__(self, x: Tensor, offset: int = 0, cache=None) -> Tensor:
        if x.ndim != 3 or x.shape[-1] != self.cfg.d_model:
            raise ValueError(f"TransformerBlock: expected input (B, L, d_model={self.cfg.d_model}), got {x.shape}")
        return super().__call__(x, offset, cache)


class PreNormBlock(Block):
    """Pre-norm (Llama, GPT-2):  h = x + attn(norm1(x));  out = h + ffn(norm2(h))."""

    def forward(self, x: Tensor, offset: int = 0, cache=None) -> Tensor:   # x: (B, L, d_model); offset: first position
        with step("residual"):                                       # the block's own ops: the residual adds
            h = x + self.attn(self.norm1(x), offset, cache)          # cache: this layer's K, V (nn.cache.LayerCache)
            return h + self.ffn(self.norm2(h))


class PostNormBlock(Block):
    """Post-norm (BERT, the 2017 original):  h = norm1(x + attn(x));  out = norm2(h + ffn(h))."""

    def forward(self, x: Tensor, offset: int = 0, cache=None) -> Tensor:
        with step("residual"):
            h = self.norm1(x + self.attn(x, offset, cache))
            return self.norm2(h + self.ffn(h))


class ParallelBlock(Block):
    """Parallel (GPT-J, GPT-NeoX):  out = x + attn(norm1(x)) + ffn(norm2(x))."""

    def forward(self, x: Tensor, offset: int = 0, cache=None) -> Tensor:
        with step("residual"):
            return x + self.attn(self.norm1(x), offset, cache) + self.ffn(self.norm2(x))


class DeepNormBlock(Block):
    """DeepNorm (Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers"), post-norm with the residual
    up-weighted:  h = norm1(alpha x + attn(x));  out = norm2(alpha h + ffn(h)),  and the FFN's weights, v_proj
    and o_proj initialised beta times smaller. For a decoder-only (or encoder-only) model of N = n_layers blocks
    the paper's Figure 2 sets  alpha = (2N)^(1/4),  beta = (8N)^(-1/4)."""

    def __init__(self, cfg: BlockConfig, *, generator, dtype=float32, device="cpu"):
        super().__init__(cfg, generator=generator, dtype=dtype, device=device)
        self.alpha, self.beta = deepnorm_alpha_beta(cfg.n_layers)
        for name, p in self.named_parameters():
            if deepnorm_scaled(name):
                p.assign(p.detach() * self.beta)                     # N(0, beta^2 / fan_in)

    def forward(self, x: Tensor, offset: int = 0, cache=None) -> Tensor:
        with step("residual"):
            h = self.norm1(x * self.alpha + self.attn(x, offset, cache))
            return self.norm2(h * self.alpha + self.ffn(h))


def make_block(cfg: BlockConfig, *, generator, dtype=float32, device="cpu") -> Block:
    """The block in the layout the config names: cfg.layout 'pre', 'post', 'parallel' or 'deep' (LAYOUTS)."""
    return LAYOUTS[cfg.layout](cfg, generator=generator, dtype=dtype, device=device)


LAYOUTS = {"pre": PreNormBlock, "post": PostNormBlock, "parallel": ParallelBlock, "deep": DeepNormBlock}
TransformerBlock = make_block   # the name the lessons build blocks by: nn.TransformerBlock(cfg, generator=g)


def deepnorm_alpha_beta(n_layers: int) -> tuple[float, float]:
    """DeepNet's constants for a decoder-only model of N layers: alpha = (2N)^(1/4), beta = (8N)^(-1/4)."""
    return (2 * n_layers) ** 0.25, (8 * n_layers) ** -0.25


def deepnorm_scaled(name: str) -> bool:
    """Whether DeepNorm shrinks a block's parameter by beta at init: the FFN's weights (a mixture's experts, not
    its router), v_proj and o_proj; not q_proj, k_proj, the norms or LoRA adapters (DeepNet, Figure 2)."""
    ffn = name.startswith("ffn.") and name.endswith(("_proj.weight", "_proj")) and "router" not in name
    return ffn or name in ("attn.v_proj.weight", "attn.o_proj.weight")
