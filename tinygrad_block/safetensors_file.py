"""The safetensors format: 8 bytes giving the header's length, a JSON header {name: {dtype, shape, data_offsets}},
then the tensors' bytes. A header is checked entry by entry against the format and the file's size before any
tensor is read; an array is read straight into a fresh numpy array; a file is written atomically (files.py)."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .files import is_int, parse_json, shown, write_atomic

MAX_HEADER_BYTES = 100 * 2**20       # the safetensors format's own limit on a header
CHUNK_BYTES = 16 * 2**20             # a converted tensor is read in pieces of this size: no second full copy
# safetensors' dtypes and their little-endian layout; BF16 is read as its raw 16 bits (numpy has no bfloat16)
DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
          "I8": "i1", "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?", "F8_E4M3": "u1",
          "F8_E5M2": "u1"}
FLOATS = ("F64", "F32", "F16", "BF16")                      # what a model's weights may be stored as
CODES = {np.dtype(np.float64): "F64", np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}


# ---------------------------------------------------------------- reading
@dataclass(frozen=True)
class TensorEntry:
    """Where one tensor lies: its file, its name there, dtype code ('BF16'), shape, and absolute byte range."""
    file: Path
    name: str
    dtype: str
    shape: tuple
    begin: int
    end: int


def read_header(path: Path, op: str) -> dict[str, TensorEntry]:
    """A safetensors file's tensors, from its header alone: 8 bytes giving the header's length n, n bytes of JSON
    {name: {dtype, shape, data_offsets: [begin, end]}}, then the data. Every entry is checked against the format
    and the file's size: the data must be exactly covered, each tensor's bytes = its shape x its dtype's size."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            prefix = f.read(8)
            n = int.from_bytes(prefix, "little")
            if len(prefix) < 8 or n > MAX_HEADER_BYTES or 8 + n > size:
                raise ValueError(f"{op}: {path} is not a safetensors file: its first 8 bytes give a header of "
                                 f"{n:,} bytes, but the file holds {size:,} bytes (at most "
                                 f"{MAX_HEADER_BYTES:,} of header); truncated, or another format")
            header = parse_json(f.read(n), f"the header of {path}", op)
    except (PermissionError, IsADirectoryError) as e:
        raise OSError(f"{op}: cannot read {path}: {e.strerror}") from None
    if not isinstance(header, dict):
        raise ValueError(f"{op}: the header of {path} is a JSON {type(header).__name__}; expected an object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ValueError(f"{op}: {path}: __metadata__ must map names to strings, got {shown(metadata, limit=80)}")
    entries = {name: _entry(path, name, spec, 8 + n, op) for name, spec in header.items()}
    _check_coverage(path, entries, 8 + n, size, op)
    return entries


def _entry(path: Path, name: str, spec, start: int, op: str) -> TensorEntry:
    """One header entry, checked: a known dtype, a shape of ints >= 0, offsets that fit the shape."""
    where = f"{path}: tensor {shown(name)}"
    if not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "data_offsets"}:
        raise ValueError(f"{op}: {where}: expected {{dtype, shape, data_offsets}}, got {shown(spec, limit=100)}")
    dtype, shape, offsets = spec["dtype"], spec["shape"], spec["data_offsets"]
    if dtype not in DTYPES:
        raise ValueError(f"{op}: {where} has the unknown dtype {shown(dtype, quote=True, limit=40)}; safetensors has "
                         f"{', '.join(DTYPES)}")
    if not isinstance(shape, list) or not all(is_int(d) and d >= 0 for d in shape):
        raise ValueError(f"{op}: {where} has the shape {shown(shape, limit=80)}; expected a list of integers >= 0")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(is_int(o) for o in offsets)
            and 0 <= offsets[0] <= offsets[1]):
        raise ValueError(f"{op}: {where} has data_offsets {shown(offsets, limit=80)}; expected [begin, end], "
                         "0 <= begin <= end")
    nbytes = math.prod(shape) * np.dtype(DTYPES[dtype]).itemsize
    if offsets[1] - offsets[0] != nbytes:
        raise ValueError(f"{op}: {where} is {dtype} {tuple(shape)}, {nbytes:,} bytes, but its data_offsets "
                         f"{offsets} span {offsets[1] - offsets[0]:,}")
    return TensorEntry(path, name, dtype, tuple(shape), start + offsets[0], start + offsets[1])


def _check_coverage(path: Path, entries: dict, start: int, size: int, op: str) -> None:
    """The tensors' byte ranges tile the data exactly: no overlap, no gap, nothing past the end of the file."""
    position = start
    for e in sorted(entries.values(), key=lambda e: (e.begin, e.end)):
        if e.begin < position:
            raise ValueError(f"{op}: {path}: tensor {shown(e.name)}'s bytes {e.begin - start:,}..{e.end - start:,} "
                             "overlap another tensor's")
        if e.begin > position:
            raise ValueError(f"{op}: {path}: bytes {position - start:,}..{e.begin - start:,} of the data belong to "
                             "no tensor; the safetensors format has no gaps")
        position = e.end
    if position != size:
        what = "ends before" if position > size else "has bytes after"
        raise ValueError(f"{op}: {path} {what} the data its header describes: the header and its tensors need "
                         f"{position:,} bytes, the file has {size:,}" + (" (truncated)" if position > size else ""))


def read_array(entry: TensorEntry, dtype, op: str) -> np.ndarray:
    """One tensor's values as a fresh numpy array of `dtype`, read straight into it: a tensor stored in another
    dtype is converted CHUNK_BYTES at a time. A bfloat16 is the top 16 bits of a float32, so its bits shifted up 16
    are the exact float32."""
    if entry.dtype not in FLOATS:
        raise ValueError(f"{op}: tensor {shown(entry.name)} in {shown(entry.file.name)} is {entry.dtype}; expected "
                         "F64, F32, F16 "
                         "or BF16")
    out = np.empty(entry.shape, dtype)
    flat, stored = out.reshape(-1), np.dtype(DTYPES[entry.dtype])
    with open(entry.file, "rb") as f:
        f.seek(entry.begin)
        if stored == out.dtype and entry.dtype != "BF16":
            _fill(f, memoryview(flat).cast("B"), entry)
            return out
        step = max(CHUNK_BYTES // stored.itemsize, 1)
        for i in range(0, flat.size, step):
            bits = np.empty(min(step, flat.size - i), stored)
            _fill(f, memoryview(bits).cast("B"), entry)
            flat[i:i + bits.size] = (bits.astype(np.uint32) << 16).view(np.float32) if entry.dtype == "BF16" else bits
    return out


def _fill(f, buffer: memoryview, entry: TensorEntry) -> None:
    if f.readinto(buffer) != len(buffer):
        raise OSError(f"cannot read tensor {shown(entry.name)} of {entry.file}: the file ended early (changed "
                      "while read?)")


# ---------------------------------------------------------------- writing
def write_safetensors(path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> None:
    """A safetensors file (8-byte header length, JSON header padded to 8 bytes, the tensors' bytes in order),
    written straight from the arrays (no copy of all of them at once), atomically."""
    header, offset = {"__metadata__": metadata}, 0
    for name, a in tensors.items():
        if a.dtype not in CODES:
            raise ValueError(f"save_pretrained: {name} is {a.dtype}; expected float64, float32 or float16")
        header[name] = {"dtype": CODES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)

    def write(f):
        f.write(len(text).to_bytes(8, "little") + text)
        for a in tensors.values():
            f.write(memoryview(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False)).cast("B"))
    write_atomic(path, write)
