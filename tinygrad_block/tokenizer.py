"""Text in, text out: one interface, `Tokenizer`, for our character models (`CharTokenizer`, saved as vocab.json)
and for real checkpoints (`HFTokenizer`, a Hugging Face tokenizer.json run by the `tokenizers` library), and
`load_tokenizer(folder)`, which reads whichever a folder holds. Its files are untrusted input, checked by
files.py (inside the folder, size, valid JSON) and here (types, ids) before anything uses them."""
from __future__ import annotations

import json
import numbers
from abc import ABC, abstractmethod
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import tokenizers

from .files import HeldStderr, inside, read_json_object, readable, shown, write_text

MAX_BYTES = 64 * 2**20       # the largest tokenizer file read (Llama 3's tokenizer.json is 9 MB)
BPE_HELP = ("transformers writes one where you trust the folder: "
            "AutoTokenizer.from_pretrained(folder).save_pretrained(folder)")


class Tokenizer(ABC):
    """Text <-> token ids. `name` says what it is (for messages); the ids are 0 .. vocab_size - 1."""
    name: str
    vocab_size: int

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """text -> ids, with the special tokens the tokenizer's files say to add (Llama's BOS, say)."""

    @abstractmethod
    def decode(self, ids) -> str:
        """ids (a list, numpy array or Tensor) -> text, special tokens left out."""

    def _check_text(self, text) -> str:
        op = f"{type(self).__name__}.encode"
        if not isinstance(text, str):
            raise TypeError(f"{op}: the prompt must be a str, got {type(text).__name__}")
        if not text:
            raise ValueError(f"{op}: the prompt is empty; give at least one character of text")
        return text

    def _check_ids(self, ids) -> list[int]:
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        for i in ids:
            if not isinstance(i, numbers.Integral) or isinstance(i, bool):
                raise TypeError(f"{type(self).__name__}: ids must be ints, got {i!r}")
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"{type(self).__name__}: ids must lie in [0, {self.vocab_size}), got {i}")
        return [int(i) for i in ids]


class CharTokenizer(Tokenizer):
    """One token per character: the sorted characters of a text are the vocabulary, ids their positions."""

    def __init__(self, chars: str):
        if not chars or len(set(chars)) != len(chars):
            raise ValueError(f"CharTokenizer: chars must be a non-empty string of distinct characters, got "
                             f"{len(chars)} characters with {len(chars) - len(set(chars))} repeats")
        self.chars = chars
        self.ids = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls("".join(sorted(set(text))))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    @property
    def name(self) -> str:
        return f"CharTokenizer ({self.vocab_size} characters)"

    def encode(self, text: str) -> list[int]:
        unknown = sorted(set(self._check_text(text)) - set(self.ids))
        if unknown:
            raise ValueError(f"CharTokenizer: characters not in the vocabulary: {''.join(unknown)!r}; "
                             f"it knows {self.vocab_size} characters")
        return [self.ids[c] for c in text]

    def decode(self, ids) -> str:
        return "".join(self.chars[i] for i in self._check_ids(ids))

    def save(self, path: Path) -> None:
        """vocab.json: {character: id}, as Hugging Face tokenizers keep their vocabulary (written atomically)."""
        write_text(Path(path), json.dumps(self.ids, ensure_ascii=False, indent=0))

    @classmethod
    def load(cls, path: Path) -> CharTokenizer:
        """Read a vocab.json that `save` wrote, checked: a JSON object (at most MAX_BYTES) whose keys are single
        characters and whose values are the ids 0 .. n-1, each once."""
        op, path = "CharTokenizer.load", Path(path)
        ids = read_json_object(inside(path.parent, path.name, op, "the path"), op, MAX_BYTES)
        for key, value in ids.items():
            if len(key) != 1:
                raise ValueError(f"{op}: {path} maps {key!r} to an id; expected one character per key (a vocabulary "
                                 f"of longer pieces is a BPE one, which needs its tokenizer.json: {BPE_HELP})")
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{op}: {path} maps {key!r} to {value!r}; expected an int id")
        if sorted(ids.values()) != list(range(len(ids))):
            repeated = [i for i, n in Counter(ids.values()).items() if n > 1]
            problem = f"id {repeated[0]} is given to several characters" if repeated else \
                f"id {max(ids.values(), default=-1)} is out of range"
            raise ValueError(f"{op}: {path} must number its {len(ids)} characters 0..{len(ids) - 1}, each id once; "
                             f"{problem}")
        return cls("".join(sorted(ids, key=ids.get)))


@contextmanager
def library_call(failed: str):
    """Around a call into the tokenizers library (Rust): whatever it raises becomes ValueError(failed + why). A
    hostile tokenizer.json can make the library panic (a regex that backtracks past Oniguruma's limit, say): Rust
    then prints the panic to the process's stderr and raises pyo3's PanicException, which derives from
    BaseException, not Exception, so it is caught as such (all but Ctrl-C, exits and a MemoryError). What the
    library prints meanwhile is held back (HeldStderr), and passed on only when the call succeeded."""
    failure = None
    with HeldStderr() as held:
        try:
            yield
        except (KeyboardInterrupt, SystemExit, GeneratorExit, MemoryError):
            raise
        except BaseException as e:             # Exception, and pyo3_runtime.PanicException, importable only this way
            failure = e
            held.drop()
    if failure is not None:
        kind = "panicked" if not isinstance(failure, Exception) else type(failure).__name__
        raise ValueError(f"{failed} ({kind}: {shown(str(failure), limit=300)})") from None


class HFTokenizer(Tokenizer):
    """A Hugging Face tokenizer.json run by the `tokenizers` library: its normalizer, pre-tokenizer, model (BPE,
    Unigram, WordPiece), post-processor (which adds BOS where the file says so) and decoder. transformers 5 does the
    same: it ignores tokenizer_config.json's add_bos_token / add_eos_token whenever a tokenizer.json exists."""

    def __init__(self, spec: dict, file: Path):
        self.file = file
        with library_call(f"load_tokenizer: {file} is not a tokenizer the tokenizers library can read; expected a "
                          "tokenizer.json as Hugging Face tokenizers write it"):
            self.hf_tokenizer = tokenizers.Tokenizer.from_str(json.dumps(spec))   # the tokenizers library's own
            self.hf_tokenizer.no_truncation()  # prompts are never cut short or padded, whatever the file says
            self.hf_tokenizer.no_padding()
            ids = self.hf_tokenizer.get_vocab(with_added_tokens=True).values()
        if not ids:
            raise ValueError(f"load_tokenizer: {file} has an empty vocabulary; expected at least one token")
        self.vocab_size = max(ids) + 1
        model = spec["model"]
        self.unk = self._unknown_token(model)            # None: every text can be spelled (byte-level, byte fallback)
        self.unk_id = self.hf_tokenizer.token_to_id(self.unk) if self.unk is not None else None
        if self.unk is not None and self.unk_id is None:
            raise ValueError(f"load_tokenizer: {file} names the unknown token {shown(self.unk, quote=True)}, which "
                             "its vocabulary lacks; expected one of the vocabulary's tokens")
        self.name = f"HFTokenizer ({shown(model.get('type', 'model'), limit=40)}, {self.vocab_size} tokens, {file})"

    def _unknown_token(self, model: dict) -> str | None:
        """The model's unknown token: BPE, WordPiece and WordLevel name it, Unigram gives its id."""
        if isinstance(model.get("unk_token"), str):
            return model["unk_token"]
        if isinstance(model.get("unk_id"), int) and not isinstance(model["unk_id"], bool):
            return self.hf_tokenizer.id_to_token(model["unk_id"])
        return None

    def encode(self, text: str) -> list[int]:
        """text -> ids, with the special tokens tokenizer.json's post-processor adds. Text that came out as the
        unknown token (a model without byte fallback) is refused, naming its characters."""
        text = self._check_text(text)
        with library_call(f"HFTokenizer.encode: the tokenizers library failed to encode this text by the rules in "
                          f"{self.file}; that file is broken or hostile"):
            encoding = self.hf_tokenizer.encode(text)
        spans = [text[a:b] for i, (a, b) in zip(encoding.ids, encoding.offsets) if i == self.unk_id]
        lost = sorted(set("".join(s for s in spans if s != self.unk)))   # "<unk>" typed out is the token itself
        if lost:
            raise ValueError(f"HFTokenizer: characters not in the vocabulary: {''.join(lost)!r} (they became the "
                             f"unknown token {shown(self.unk, quote=True)}, which means nothing to a model)")
        return encoding.ids

    def decode(self, ids) -> str:
        """ids -> text, special tokens skipped: transformers' decode(ids, skip_special_tokens=True)."""
        ids = self._check_ids(ids)
        with library_call(f"HFTokenizer.decode: the tokenizers library failed to decode these ids by the rules in "
                          f"{self.file}; that file is broken or hostile"):
            return self.hf_tokenizer.decode(ids, skip_special_tokens=True)


def load_tokenizer(folder) -> Tokenizer | None:
    """The tokenizer a checkpoint folder holds: tokenizer.json (an HFTokenizer), else our vocab.json (a
    CharTokenizer), else None. A vocab.json beside a merges.txt is GPT-2's BPE vocabulary, refused: tinygrad_block
    reads BPE only from a tokenizer.json."""
    op, folder = "load_tokenizer", Path(folder)
    file = inside(folder, "tokenizer.json", op, "the tokenizer")
    if readable(file, op):
        spec = read_json_object(file, op, MAX_BYTES)
        if not isinstance(spec.get("model"), dict):
            raise ValueError(f"{op}: {file} has no 'model' object; expected a tokenizer.json as Hugging Face "
                             "tokenizers write it (its model: BPE, Unigram, WordPiece or WordLevel)")
        return HFTokenizer(spec, file)
    vocab = inside(folder, "vocab.json", op, "the vocabulary")
    if not readable(vocab, op):
        return None
    if readable(inside(folder, "merges.txt", op, "the merges"), op):
        raise ValueError(f"{op}: {folder} holds vocab.json and merges.txt, a BPE vocabulary (GPT-2's layout), not "
                         f"the one-character vocab.json that `train` writes; a BPE tokenizer is read from a "
                         f"tokenizer.json only, and this folder has none: {BPE_HELP}")
    return CharTokenizer.load(vocab)


# ---------------------------------------------------------------- byte-pair encoding, by hand (lesson 04)
def pair_counts(words: dict[tuple[str, ...], int]) -> Counter:
    """How often each pair of neighbouring tokens occurs in `words` (each word, as a tuple of tokens, counted as
    often as the text holds it)."""
    counts = Counter()
    for word, n in words.items():
        for pair in zip(word, word[1:]):
            counts[pair] += n
    return counts


def merge_pair(word: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    """`word` with every occurrence of `pair`, read from the left, made one token."""
    out, i = [], 0
    while i < len(word):
        if word[i:i + 2] == pair:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def learn_bpe(text: str, n_merges: int) -> tuple[list[str], list[tuple[str, str]]]:
    """BPE's training on `text`: its words (split at whitespace) as characters; then, n_merges times, the most
    frequent pair of neighbouring tokens merged into one new token, a tie going to the pair whose tokens came first
    in the vocabulary (as the tokenizers library's BpeTrainer breaks it). Returns (the vocabulary: the characters,
    sorted, then each merge's token; the merges in the order learned); fewer merges when no pair is left."""
    if not isinstance(text, str) or not isinstance(n_merges, int) or isinstance(n_merges, bool) or n_merges < 0:
        raise ValueError(f"learn_bpe: needs a str text and an int n_merges >= 0, got {type(text).__name__} and "
                         f"{n_merges!r}")
    words = Counter(tuple(word) for word in text.split())
    vocab, merges = sorted({c for word in words for c in word}), []
    while len(merges) < n_merges and (counts := pair_counts(words)):
        rank = {token: i for i, token in enumerate(vocab)}
        pair = max(counts, key=lambda p: (counts[p], -rank[p[0]], -rank[p[1]]))
        merges.append(pair)
        vocab.append(pair[0] + pair[1])
        words = Counter({merge_pair(word, pair): n for word, n in words.items()})
    return vocab, merges


def bpe_encode(word: str, merges: list[tuple[str, str]]) -> list[str]:
    """One word's BPE tokens: its characters, then each merge applied in the order it was learned."""
    tokens = tuple(word)
    for pair in merges:
        tokens = merge_pair(tokens, pair)
    return list(tokens)
