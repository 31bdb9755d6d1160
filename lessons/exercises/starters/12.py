"""Lesson 12 exercises. Fill in each function, then run:  python -m tinygrad_block check 12"""
from tinygrad_block import nn


def llama_params(cfg: nn.BlockConfig) -> int:
    """Parameters of the whole Llama-style model cfg (RMSNorm, SwiGLU FFN, no biases, RoPE): the embedding
    (vocab_size x d_model), n_layers blocks, the final RMSNorm, and the LM head (vocab_size x d_model), which is
    absent when cfg.tie_embeddings is true (the head reuses the embedding). A block: W_Q and W_O are
    d_model x d_model, W_K and W_V d_model x (n_kv_heads * d_head), the FFN's gate, up and down matrices
    d_model x d_ff each, and two RMSNorm gains of d_model. Fields: cfg.d_model, n_heads, n_kv_heads, d_head,
    d_ff, n_layers, vocab_size, tie_embeddings."""
    raise NotImplementedError


def tied_saving(cfg: nn.BlockConfig) -> tuple[int, float]:
    """(saved, fraction): how many parameters tying the LM head to the embedding saves for the architecture cfg
    (whatever cfg.tie_embeddings says), and what fraction of the untied model's parameters that is."""
    raise NotImplementedError
