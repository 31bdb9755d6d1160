"""Modules for building transformer blocks from the engine's ops."""
from .attention import Attention, apply_rope, causal_mask, repeat_kv, rope_frequencies, rope_tables, sdpa
from .block import (MLP, Block, DeepNormBlock, ParallelBlock, PostNormBlock, PreNormBlock, SwiGLU, TransformerBlock,
                    deepnorm_alpha_beta, make_block)
from .cache import KVCache
from .config import PRESETS, BlockConfig, preset
from .layers import Embedding, LayerNorm, Linear, RMSNorm
from .model import LM
from .moe import MoE, top_k_indices
from .module import Module, Parameter
from .tiled import plain_attention, tiled_attention

__all__ = ["LM", "MLP", "PRESETS", "Attention", "Block", "BlockConfig", "DeepNormBlock", "Embedding", "KVCache",
           "LayerNorm", "Linear", "MoE", "Module", "ParallelBlock", "Parameter", "PostNormBlock", "PreNormBlock",
           "RMSNorm", "SwiGLU", "TransformerBlock", "apply_rope", "causal_mask", "deepnorm_alpha_beta", "make_block",
           "plain_attention", "preset", "repeat_kv", "rope_frequencies", "rope_tables", "sdpa", "tiled_attention",
           "top_k_indices"]
