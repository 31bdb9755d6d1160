"""One record per architecture family, as its Hugging Face checkpoints hold it: config.json's names for our
fields and transformers' defaults for them, the BlockConfig fields every model of the family has (norm,
feed-forward, biases, QK-norm, scaled embeddings), how its tensors are named, which are stored transposed and which
stacked under one name, and its attention window. config.json's reader and writer (hf_config.py), loading and saving
(pretrained.py), `inspect` and the command line read these records: a new family is one record here, and its tests.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

LLAMA_HEADS = ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim")  # config.json's names of
GPT2_HEADS = ("n_embd", "n_head", None, None)                  # d_model, n_heads, n_kv_heads, head_dim (None: none)
LLAMA_SIZES = {"d_model": "hidden_size", "d_ff": "intermediate_size", "n_layers": "num_hidden_layers",
               "vocab_size": "vocab_size", "max_seq_len": "max_position_embeddings"}
LLAMA_NAMES = ((r"^embed\.", "model.embed_tokens."), (r"^layers\.", "model.layers."), (r"^norm\.", "model.norm."),
               (r"\.norm1\.", ".input_layernorm."), (r"\.norm2\.", ".post_attention_layernorm."),
               (r"\.attn\.", ".self_attn."), (r"\.ffn\.", ".mlp."))
PLAIN = {"rope": True, "qkv_bias": False, "qk_norm": False, "scale_embeddings": False}   # Llama's block, RoPE on


@dataclass(frozen=True)
class Family:
    """An architecture family's record. `names`: (regex, replacement) pairs, applied in order, turn our parameter
    names into the checkpoint's; several of ours renamed to one name are stored stacked along the output axis (a
    stacked tensor, split on load and stacked again on save)."""
    hf_class: str                    # config.json's architectures[0]: 'Qwen3ForCausalLM'
    model_type: str                  # config.json's model_type: 'qwen3'
    label: str                       # how messages and docs name it: 'Qwen3'
    fixed: dict                      # BlockConfig fields every model of the family has
    norm: str = "rms"                # cfg.norm (config.NORMS)
    activation: tuple = ("hidden_act", {"silu": "swiglu"})   # config.json's key, {its value: cfg.ffn} (FFNS)
    eps: tuple = ("rms_norm_eps", 1e-6)                       # config.json's key for norm_eps, and its default
    sizes: dict = field(default_factory=lambda: LLAMA_SIZES)  # BlockConfig field -> config.json's key
    heads: tuple = LLAMA_HEADS
    defaults: dict = field(default_factory=dict)  # config.json key -> transformers' value when it is left out (or a
                                                  # function of the sizes read before it)
    bias_keys: tuple = ()            # config.json's keys that all give cfg.bias (Llama: attention_bias, mlp_bias)
    window: str = ""                 # '': none; 'every': sliding_window on every layer; 'qwen': use_sliding_window
    names: tuple = LLAMA_NAMES
    transposed: bool = False         # block matrices stored (in, out), as GPT-2's Conv1D holds them
    prefix: str = ""                 # a prefix some of its checkpoints leave out of every name (GPT-2's transformer.)
    checks: tuple = ()               # (config.json key, the only value implemented, why): anything else refused
    saves: bool = True               # save_pretrained may write this layout (a Mistral without window is a Llama)

    def fits(self, cfg) -> bool:
        """Whether a config's model is one of this family's (save_pretrained's question)."""
        heads_ok = (self.heads[2] or cfg.n_kv_heads == cfg.n_heads) and (self.heads[3] or cfg.head_dim is None)
        sequential = cfg.layout == "pre" and cfg.causal and cfg.n_experts == 1
        biases_ok = bool(self.bias_keys) or cfg.bias == self.fixed.get("bias", False)   # no key: what fixed says
        return (sequential and heads_ok and biases_ok and cfg.norm == self.norm
                and cfg.ffn in self.activation[1].values() and all(getattr(cfg, k) == v for k, v in self.fixed.items()))

    def stacked(self) -> dict[str, list[str]]:
        """{the checkpoint's name of a stacked tensor: our parameters stacked in it}, for one block (docs, tests)."""
        ours = ["layers.0.attn.q_proj.weight", "layers.0.attn.k_proj.weight", "layers.0.attn.v_proj.weight",
                "layers.0.ffn.gate_proj.weight", "layers.0.ffn.up_proj.weight"]
        found = {}
        for name in ours:
            hf = name
            for pattern, new in self.names:
                hf = re.sub(pattern, new, hf)
            found.setdefault(hf, []).append(name)
        return {hf: names for hf, names in found.items() if len(names) > 1}


FAMILIES = {f.hf_class: f for f in [
    Family("LlamaForCausalLM", "llama", "Llama", PLAIN, bias_keys=("attention_bias", "mlp_bias")),
    Family("MistralForCausalLM", "mistral", "Mistral", PLAIN | {"bias": False}, window="every",
           defaults={"sliding_window": 4096}, saves=False),
    Family("Qwen2ForCausalLM", "qwen2", "Qwen2", PLAIN | {"bias": False, "qkv_bias": True}, window="qwen"),
    Family("Qwen3ForCausalLM", "qwen3", "Qwen3", PLAIN | {"bias": False, "qk_norm": True}, window="qwen",
           defaults={"head_dim": 128}, bias_keys=("attention_bias",)),
    Family("GemmaForCausalLM", "gemma", "Gemma", PLAIN | {"bias": False, "scale_embeddings": True}, norm="rms1p",
           activation=("hidden_act", {"gelu_pytorch_tanh": "geglu_tanh", "gelu": "geglu_tanh"}),
           defaults={"head_dim": 256, "tie_word_embeddings": True}, bias_keys=("attention_bias",),
           checks=(("use_bidirectional_attention", None, "a decoder-only LM attends to earlier tokens only"),)),
    Family("Phi3ForCausalLM", "phi3", "Phi-3", PLAIN | {"bias": False}, eps=("rms_norm_eps", 1e-5), window="every",
           defaults={"sliding_window": None},
           names=LLAMA_NAMES + ((r"\.self_attn\.[qkv]_proj\.", ".self_attn.qkv_proj."),
                                (r"\.mlp\.(gate|up)_proj\.", ".mlp.gate_up_proj."))),
    Family("GPT2LMHeadModel", "gpt2", "GPT-2", {"rope": False, "bias": True, "qkv_bias": False, "qk_norm": False,
                                                "scale_embeddings": False}, norm="layer",
           activation=("activation_function", {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                                               "gelu": "gelu", "relu": "relu"}),
           eps=("layer_norm_epsilon", 1e-5), heads=GPT2_HEADS,
           sizes={"d_model": "n_embd", "d_ff": "n_inner", "n_layers": "n_layer", "vocab_size": "vocab_size",
                  "max_seq_len": "n_positions"},
           defaults={"n_inner": lambda sizes: 4 * sizes["d_model"], "tie_word_embeddings": True}, transposed=True,
           prefix="transformer.",
           names=((r"^embed\.", "transformer.wte."), (r"^pos_embed\.", "transformer.wpe."),
                  (r"^layers\.", "transformer.h."), (r"^norm\.", "transformer.ln_f."), (r"\.norm1\.", ".ln_1."),
                  (r"\.norm2\.", ".ln_2."), (r"\.attn\.[qkv]_proj\.", ".attn.c_attn."), (r"\.o_proj\.", ".c_proj."),
                  (r"\.ffn\.up_proj\.", ".mlp.c_fc."), (r"\.ffn\.down_proj\.", ".mlp.c_proj.")),
           checks=(("scale_attn_weights", True, "scores are q k^T / sqrt(d_head)"),
                   ("scale_attn_by_inverse_layer_idx", False, "scores are q k^T / sqrt(d_head) alone"),
                   ("add_cross_attention", False, "a decoder-only LM attends to its own tokens"))),
]}
MODEL_TYPES = {f.model_type: f.hf_class for f in FAMILIES.values()}
SAVE_ORDER = [f for f in FAMILIES.values() if f.saves]    # the first that fits a config is the layout it is saved in


def family_of(cfg) -> Family:
    """The family whose layout save_pretrained writes a config's model in: the one its name says (a loaded model
    keeps its family: a Phi-3 is saved stacked again), if it fits, else the first of SAVE_ORDER that does."""
    named = FAMILIES.get(cfg.name)
    if named is not None and named.saves and named.fits(cfg):
        return named
    fitting = [f for f in SAVE_ORDER if f.fits(cfg)]
    if not fitting:
        raise ValueError(f"save_pretrained: no Hugging Face layout fits {cfg}: each of "
                         f"{', '.join(f.label for f in SAVE_ORDER)} is pre-norm, sequential, causal and dense, with "
                         "its own norm, feed-forward and biases (docs/checkpoints.md lists them)")
    return fitting[0]
