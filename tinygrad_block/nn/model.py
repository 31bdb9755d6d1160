"""A decoder-only language model from a preset: embedding, n_layers blocks, final norm, LM head."""
from __future__ import annotations

from ..backend import float32
from ..trace import scope
from ..tensor import Tensor, arange
from .block import TransformerBlock
from .config import BlockConfig
from .layers import Embedding, Linear, norm
from .module import Module


class LM(Module):
    """logits = head(norm(blocks(embed(ids)))). The head is tied to the embedding (logits = h E^T) when
    cfg.tie_embeddings; models without RoPE (GPT-2) add learned position embeddings to the token embeddings."""

    scope_name = "model"

    def __init__(self, cfg: BlockConfig, *, generator, dtype=float32, device="cpu"):
        self.cfg = cfg
        make = dict(generator=generator, dtype=dtype, device=device)
        self.embed = Embedding(cfg.vocab_size, cfg.d_model, **make)
        if not cfg.rope:
            self.pos_embed = Embedding(cfg.max_seq_len, cfg.d_model, **make)
        self.layers = [TransformerBlock(cfg, **make) for _ in range(cfg.n_layers)]
        self.norm = norm(cfg, dtype=dtype, device=device)
        if not cfg.tie_embeddings:
            self.lm_head = Linear(cfg.d_model, cfg.vocab_size, generator=generator, dtype=dtype, device=device)

    def forward(self, ids: Tensor) -> Tensor:                        # ids: (B, L) integers
        if ids.ndim != 2:
            raise ValueError(f"LM: expected token ids of shape (B, L), got {ids.shape}")
        B, L = ids.shape
        if L > self.cfg.max_seq_len:
            raise ValueError(f"LM: {L} tokens exceed the context length max_seq_len={self.cfg.max_seq_len}")
        h = self.embed(ids)                                          # (B, L, d_model)
        if not self.cfg.rope:
            h = h + self.pos_embed(arange(L, device=ids.backend))   # (L, d_model), broadcast over B
        for block in self.layers:
            h = block(h)
        h = self.norm(h)
        if self.cfg.tie_embeddings:
            with scope("lm_head"):
                return h @ self.embed.weight.T                       # (B, L, vocab_size)
        return self.lm_head(h)                                       # (B, L, vocab_size)
