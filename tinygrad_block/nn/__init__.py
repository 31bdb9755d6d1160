"""Modules for building transformer blocks from the engine's ops."""
from .attention import Attention, apply_rope, repeat_kv, rope_tables
from .block import MLP, SwiGLU, TransformerBlock
from .config import PRESETS, BlockConfig, preset
from .layers import Embedding, LayerNorm, Linear, RMSNorm
from .model import LM
from .module import Module, Parameter

__all__ = ["LM", "MLP", "PRESETS", "Attention", "BlockConfig", "Embedding", "LayerNorm", "Linear", "Module",
           "Parameter", "RMSNorm", "SwiGLU", "TransformerBlock", "apply_rope", "preset", "repeat_kv", "rope_tables"]
