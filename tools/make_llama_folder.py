"""Write a small Llama-3-shaped checkpoint folder the way a published one is laid out, with transformers and
tokenizers alone (nothing is downloaded): a byte-level BPE tokenizer.json whose post-processor adds
<|begin_of_text|>, tokenizer_config.json, config.json with Llama 3.1's `llama3` RoPE scaling, and model.safetensors.
The model is trained in PyTorch (--steps, 1000 by default) on Python's own help pages, so a prompt gets an answer
that reads like them. docs/checkpoints.md runs `generate` on it; the tests use `write_llama_folder(steps=0)`.

    python tools/make_llama_folder.py [--out /tmp/llama-demo] [--steps 1000] [--seed 0]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from tinygrad_block.data import python_help_text

if TYPE_CHECKING:           # torch and transformers (the 'ref' extra) are imported where a folder is written, so
    import torch            # that --help needs neither
    import transformers

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
CONFIG = dict(hidden_size=128, intermediate_size=344, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False,
              rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 32})


def train_tokenizer(text: str, vocab_size: int) -> transformers.PreTrainedTokenizerFast:
    """Llama 3's kind of tokenizer: BPE over bytes (no character is ever unknown), BOS added to every prompt."""
    import transformers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([text], trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[BOS, EOS],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B:1",
                                      special_tokens=[(BOS, tok.token_to_id(BOS))])])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS)


def train(model, ids: torch.Tensor, steps: int, seed: int, seq_len: int = 64, batch: int = 16) -> float:
    """Next-token prediction on random windows of `ids`, AdamW; returns the last loss."""
    import torch
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    loss = torch.tensor(float("nan"))
    for step in range(steps):
        starts = torch.randint(0, len(ids) - seq_len - 1, (batch, 1), generator=g)
        window = ids[starts + torch.arange(seq_len + 1)]                       # (batch, seq_len + 1)
        loss = model(window[:, :-1], labels=window[:, :-1].clone()).loss     # transformers shifts the labels
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0 or step == steps - 1:
            print(f"  step {step:4d}  loss {loss.item():.3f}", flush=True)
    return loss.item()


def write_llama_folder(out: Path, steps: int = 1000, seed: int = 0, vocab_size: int = 512) -> Path:
    """The folder (config.json, model.safetensors, tokenizer.json, tokenizer_config.json, ...), float32."""
    import torch
    import transformers
    text = python_help_text()
    tokenizer = train_tokenizer(text, vocab_size)
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                                      eos_token_id=tokenizer.eos_token_id, pad_token_id=None, **CONFIG)
    model = transformers.LlamaForCausalLM(config)
    if steps:
        ids = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"])
        train(model, ids, steps, seed)
    model.eval().save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])     # the first paragraph, whole
    parser.add_argument("--out", type=Path, default=Path("/tmp/llama-demo"), help="the folder (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=1000, help="training steps (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="the seed of the weights and the batches (default: 0)")
    args = parser.parse_args()
    try:
        import torch
        import transformers  # noqa: F401 (imported here to say in one line that it is missing)
    except ImportError as missing:               # run without the 'ref' extra: one line, as the command line says
        print(f"make_llama_folder.py: error: needs {missing.name or missing}, of the 'ref' extra: pip install "
              "torch==2.13.0 (the CPU build), then pip install -e '.[ref]' from the repository's root",
              file=sys.stderr)
        sys.exit(2)
    torch.set_num_threads(1)
    start = time.perf_counter()
    write_llama_folder(args.out, args.steps, args.seed)
    print(f"wrote {args.out} in {time.perf_counter() - start:.0f} s: "
          f"{', '.join(sorted(p.name for p in args.out.iterdir()))}")


if __name__ == "__main__":
    main()
