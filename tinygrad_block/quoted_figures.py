"""Where a figure commonly quoted for these models (in tables of configurations, slide decks, walk-throughs of the
block) differs from the exact value, and why. The command line prints these beside the numbers it measures; tests
pin every exact value. A note quotes the figure as commonly given, never by the text it comes from.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import accounting as acc
from .nn.config import preset


@dataclass(frozen=True)
class Note:
    command: str                  # the CLI command that prints it: 'params', 'flops' or 'memory'
    preset: str
    what: str
    quoted: str                   # the figure as commonly quoted
    exact: Callable[[], str]      # the exact value, computed
    why: str


def _block(name):
    return acc.params_per_block(preset(name))


def _per_token(name, L=0):
    """Forward matmul FLOPs per token of all blocks: weights only (L=0) or with attention over L tokens."""
    cfg = preset(name)
    return cfg.n_layers * (acc.flops_per_token(cfg, L)["total"] if L else acc.flops_per_token(cfg, 1)["static"])


def _six_weeks() -> str:
    """70B on 1.4T tokens (Chinchilla) on 1,000 H100s at 990 TFLOP/s."""
    flops = acc.training_flops(70e9, 1.4e12)
    mfu = flops / (1000 * 990e12 * 42 * 86400)
    return f"6 weeks need {mfu:.1%} MFU; at 45% it takes {acc.training_days(flops, 1000, 990e12, 0.45):.1f} days"


NOTES = [
    Note("params", "llama2-70b", "parameters per block", "about 822 M in a popular table of configurations",
         lambda: f"{_block('llama2-70b'):,}", "2d^2 + 2 d n_kv d_head + 3 d d_ff + 2d; the table's figure does "
         "not follow from its own formula (and its 80-layer 65.7 B carries the slip: exactly 68,452,352,000)"),
    Note("params", "llama2-70b", "a GQA + SwiGLU block, as a formula", "about 6 d^2 + 3 d d_ff in one summary",
         lambda: f"2.25 d^2 + 3 d d_ff + 2d = {_block('llama2-70b'):,}", "with 8 query heads per key/value head, W_K "
         "and W_V are d x d/8: attention holds 2.25 d^2 (the summary's own table says so), and the two norms add 2d; "
         "6 d^2 + 3 d d_ff would be 1,107,296,256"),
    Note("params", "llama3-8b", "parameters per block", "about 213 M in a popular table of configurations",
         lambda: f"{_block('llama3-8b'):,}", "the same formula with n_kv = 8, d_ff = 14336 (32 blocks: "
         "6,979,584,000, not about 6.8 B)"),
    Note("params", "mistral-7b", "parameters per block", "about 213 M in a popular table of configurations",
         lambda: f"{_block('mistral-7b'):,}", "Mistral-7B's block has Llama-3-8B's shape"),
    Note("params", "llama2-7b", "parameters of 32 blocks", "about 6.4 B",
         lambda: f"{32 * _block('llama2-7b'):,}", "32 x 202,383,360 rounds to 6.48 B"),
    Note("params", "llama2-7b", "embedding plus unembedding", "about 0.5 B",
         lambda: f"{2 * 32000 * 4096:,}", "2 x 32,000 x 4,096; the usual total of 6.7 B is right all the same"),
    Note("params", "llama3-70b", "attention / FFN share of a block", "about 25% / 75%",
         lambda: "{:.1%} / {:.1%}".format(*acc.attention_ffn_shares(preset("llama3-70b"))),
         "GQA shrinks K and V to n_kv d_head = 1,024 columns: attention holds 2.25 d^2 = 150,994,944 of the "
         "block's 855,654,400"),
    Note("flops", "llama2-7b", "forward FLOPs per token, 32 blocks", "about 15 G",
         lambda: f"{_per_token('llama2-7b'):,} from weight matmuls; {_per_token('llama2-7b', 4096):,} with "
         "attention over 4,096 tokens", "the figure is usually quoted without saying which; about 15 G is the second"),
    Note("flops", "llama2-7b", "static matmul FLOPs per token of a block", "about 480 M",
         lambda: f"{2 * (_block('llama2-7b') - 2 * 4096):,}", "2 x the block's matmul parameters (404.75 M); "
         "480 M is not reached even with 4k attention (471.9 M)"),
    Note("memory", "llama2-70b", "activation bytes per token per layer (bf16)", "about 10 d = 80 KiB",
         lambda: f"{acc.activation_bytes_per_token_per_layer(preset('llama2-70b')):,} (the subtotal, used for the "
         "25 GiB)", "the estimate's own rows (x, norm output, q/k, attention output, FFN hidden) sum to 8d + 2 d_ff = "
         "122,880 bytes (120 KiB, 37.5 GiB at 4k), not 10 d: the subtotal counts the FFN hidden as 2d"),
    Note("memory", "llama2-70b", "Chinchilla training time on 1,000 H100s", "6 weeks work at MFU ~35%",
         lambda: _six_weeks(),
         "6 x 70e9 x 1.4e12 = 5.9e23 FLOPs against 1,000 x 990 TFLOP/s"),
]


def notes_for(command: str, preset_name: str) -> list[dict]:
    """The notes a command prints for a preset: what, the figure as commonly quoted, the exact value, why."""
    return [{"what": n.what, "quoted": n.quoted, "exact": n.exact(), "why": n.why}
            for n in NOTES if n.command == command and n.preset == preset_name]
