"""Hand-derived forward/backward pairs in plain array code (numpy or cupy; no Tensor, no autograd).

Every op is a pair `*_forward(...) -> (out, cache)` and `*_backward(dout, cache)`, with the derivation in
its docstring; each layer takes its own arrays (a projection as one `Linear(weight, bias, adapter)`, LoRA an
optional `Adapter` that only the linear pair reads). Only the block takes the parameter dict, and unpacks it
once. Read in lesson order: linear, norms, activations, ffn, rope, attention, block, pitfalls, fused.
"""
from . import pitfalls
from .activations import (gelu_backward, gelu_forward, gelu_tanh_backward, gelu_tanh_forward, relu_backward,
                          relu_forward, sigmoid, silu_backward, silu_forward, softmax_backward, softmax_forward)
from .attention import (attention_backward, attention_forward, causal_mask, merge_heads, repeat_kv,
                        repeat_kv_backward, sdpa_backward, sdpa_forward, split_heads)
from .block import block_backward, block_forward
from .common import erf, flatten, xp_of
from .ffn import ffn_backward, ffn_forward, swiglu_backward, swiglu_forward
from .fused import add_rmsnorm_traffic, fused_add_rmsnorm_backward, fused_add_rmsnorm_forward
from .linear import Adapter, Linear, linear_backward, linear_forward
from .norms import layernorm_backward, layernorm_forward, rmsnorm_backward, rmsnorm_forward
from .rope import rope_backward, rope_cos_sin, rope_forward, rotate_half

__all__ = [
    "Adapter", "Linear", "add_rmsnorm_traffic", "attention_backward", "attention_forward", "block_backward",
    "block_forward", "causal_mask", "erf", "ffn_backward", "ffn_forward", "flatten", "fused_add_rmsnorm_backward",
    "fused_add_rmsnorm_forward", "gelu_backward", "gelu_forward", "gelu_tanh_backward", "gelu_tanh_forward",
    "layernorm_backward", "layernorm_forward", "linear_backward", "linear_forward", "merge_heads", "pitfalls",
    "relu_backward", "relu_forward", "repeat_kv", "repeat_kv_backward", "rmsnorm_backward", "rmsnorm_forward",
    "rope_backward", "rope_cos_sin", "rope_forward", "rotate_half", "sdpa_backward", "sdpa_forward", "sigmoid",
    "silu_backward", "silu_forward", "softmax_backward", "softmax_forward", "split_heads", "swiglu_backward",
    "swiglu_forward", "xp_of",
]
