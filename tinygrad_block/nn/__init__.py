"""Modules for building transformer blocks from the engine's ops."""
from .attention import Attention, apply_rope, causal_mask, repeat_kv, rope_tables
from .block import MLP, ParallelBlock, PostNormBlock, SwiGLU, TransformerBlock
from .cache import KVCache
from .config import PRESETS, BlockConfig, preset
from .layers import Embedding, LayerNorm, Linear, RMSNorm
from .model import LM
from .module import Module, Parameter

__all__ = ["LM", "MLP", "PRESETS", "Attention", "BlockConfig", "Embedding", "KVCache", "LayerNorm", "Linear",
           "Module", "ParallelBlock", "Parameter", "PostNormBlock", "RMSNorm", "SwiGLU", "TransformerBlock",
           "apply_rope", "causal_mask", "preset", "repeat_kv", "rope_tables"]
