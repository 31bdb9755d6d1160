"""Modules for building transformer blocks from the engine's ops."""
from .attention import Attention, apply_rope, causal_mask, repeat_kv, rope_frequencies, rope_tables
from .block import MLP, DeepNormBlock, ParallelBlock, PostNormBlock, SwiGLU, TransformerBlock, deepnorm_alpha_beta
from .cache import KVCache
from .config import PRESETS, BlockConfig, preset
from .layers import Embedding, LayerNorm, Linear, RMSNorm
from .model import LM
from .moe import MoE, top_k_indices
from .module import Module, Parameter
from .tiled import plain_attention, tiled_attention

__all__ = ["LM", "MLP", "PRESETS", "Attention", "BlockConfig", "DeepNormBlock", "Embedding", "KVCache", "LayerNorm",
           "Linear", "MoE", "Module", "ParallelBlock", "Parameter", "PostNormBlock", "RMSNorm", "SwiGLU",
           "TransformerBlock", "apply_rope", "causal_mask", "deepnorm_alpha_beta", "plain_attention", "preset",
           "repeat_kv", "rope_frequencies", "rope_tables", "tiled_attention", "top_k_indices"]
