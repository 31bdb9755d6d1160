"""Hugging Face checkpoints: a folder with config.json and model.safetensors (or shards listed in
model.safetensors.index.json), read into nn.LM, written back out, and counted from the file headers alone.

The folder is untrusted input: files.py checks every path and JSON file, safetensors_file.py every header,
hf_config.py every config field, and the model's size is known from its config (on the shape-only device) before
any array is made. Each architecture's record (families.py) says how its checkpoints name our parameters, which
they stack under one name (GPT-2's c_attn, Phi-3's qkv_proj and gate_up_proj: split on load, stacked again on save)
and which they store transposed (GPT-2's Conv1D, (in, out)). Tensors are read straight into the model's arrays,
never unpickled."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from ..dtypes import as_dtype, float32

from ..generator import Generator
from ..device import get_backend
from ..tensor import Tensor
from .attention import Attention
from .config import BlockConfig
from .families import FAMILIES
from .hf_config import ARCHITECTURES, config_from_hf, config_to_hf, hf_architecture
from ..files import inside, is_int, read_json_object, readable, shown, shown_list, sync_folder, write_text
from ..safetensors_file import FLOATS, TensorEntry, read_array, read_header, write_safetensors

__all__ = ["ARCHITECTURES", "config_from_hf", "config_to_hf", "hf_architecture", "load_pretrained",
           "save_pretrained", "checkpoint_files", "read_config", "read_headers", "hf_layout", "layout_shapes"]

# Constants some checkpoints store beside the weights (GPT-2's causal mask, old Llama's RoPE frequencies); every
# implementation rebuilds them from the config, so they are skipped, never loaded.
BUFFERS = re.compile(r"\.attn\.(masked_)?bias$|\.rotary_emb\.inv_freq$")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
SINGLE, INDEX = "model.safetensors", "model.safetensors.index.json"
SHARD = re.compile(r"^model-\d+-of-\d+\.safetensors$")
MAX_PARAMETERS = 10**13           # 10 T: far beyond any published model; a config past it is a mistake
MAX_LAYERS = 10_000


# ---------------------------------------------------------------- the folder
def checkpoint_folder(path) -> Path:
    """The folder a path names: a run that `train` wrote keeps its checkpoint in checkpoint/; any other folder is
    the checkpoint itself. A path that is no folder is a FileNotFoundError."""
    folder = Path(path)
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        raise FileNotFoundError(f"{folder} {what}; expected a Hugging Face checkpoint folder holding config.json and "
                                "model.safetensors (or model-0000x-of-0000y.safetensors shards), or a train run")
    run = folder / "checkpoint"
    return run if run.is_dir() and (run / "config.json").is_file() else folder


def checkpoint_files(path, op: str, weights: bool = True) -> tuple[Path, dict, list[Path], dict | None]:
    """(folder, config.json's object, the safetensors files, the index's weight_map or None) of a checkpoint
    folder; or one clear error: no folder, no config.json, both a single file and an index (ambiguous), a shard
    missing or outside the folder, or only a pickle checkpoint (refused, unread). weights=False: a folder of
    config.json alone is fine too (no files)."""
    folder, config = config_json(path, op)
    hf = read_json_object(config, op)
    single, index = readable(inside(folder, SINGLE, op, "the checkpoint"), op), \
        readable(inside(folder, INDEX, op, "the checkpoint"), op)
    if single and index:
        raise ValueError(f"{op}: {folder} holds both {SINGLE} and {INDEX}: two checkpoints, and which one is meant "
                         "is ambiguous; delete the one you do not want")
    if index:
        weight_map = read_weight_map(folder, op)
        return folder, hf, [inside(folder, s, op, INDEX) for s in sorted(set(weight_map.values()))], weight_map
    if single:
        return folder, hf, [folder / SINGLE], None
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise ValueError(f"{op}: {folder} holds only {shown(pickles[0])}, a pickle: unpickling runs whatever code "
                         "the file contains, so tinygrad_block never loads one. Convert it to safetensors where you "
                         "trust it (transformers: AutoModelForCausalLM.from_pretrained(folder).save_pretrained(out))")
    if not weights:
        return folder, hf, [], None
    raise FileNotFoundError(f"{op}: {folder} has no {SINGLE} and no {INDEX}")


def read_config(path, op: str) -> tuple[str, BlockConfig]:
    """(architecture, BlockConfig) of a checkpoint's config.json alone, no weights needed: `path` is the file
    itself (any name ending .json), a checkpoint folder holding config.json, or a train run."""
    file = Path(path)
    if not (file.suffix == ".json" and file.is_file()):
        _, file = config_json(path, op)
    return config_from_hf(read_json_object(file, op), op)


def config_json(path, op: str) -> tuple[Path, Path]:
    """(the checkpoint folder, its config.json) of a checkpoint folder or a train run; one clear error where there
    is no such folder, or it holds no config.json."""
    try:
        folder = checkpoint_folder(path)
    except FileNotFoundError as e:
        raise FileNotFoundError(f"{op}: {e}") from None
    config = inside(folder, "config.json", op, "the checkpoint")
    if not readable(config, op):
        raise FileNotFoundError(f"{op}: {folder} has no config.json (the architecture and its sizes)")
    return folder, config


def read_weight_map(folder: Path, op: str) -> dict[str, str]:
    """The index's {tensor name: shard file name}, each shard a plain file name in the folder that exists."""
    weight_map = read_json_object(folder / INDEX, op).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(f"{op}: {folder / INDEX} has no 'weight_map' object mapping each tensor to its shard")
    for name, shard in weight_map.items():
        path = inside(folder, shard, op, f"{INDEX}'s weight_map entry {shown(name, quote=True)}")
        if not readable(path, op):
            raise FileNotFoundError(f"{op}: {INDEX} names the shard {shard} (for {shown(name)}), which is not in "
                                    f"{folder}")
    return weight_map


def read_headers(files: list[Path], op: str, weight_map: dict | None = None) -> dict[str, TensorEntry]:
    """{tensor name: where it lies} from the headers alone (no data is read), each header checked; a tensor in two
    files, or in another shard than the index says, is refused by name."""
    found = {}
    for file in files:
        for name, entry in read_header(file, op).items():
            if name in found:
                raise ValueError(f"{op}: tensor {shown(name)} is in both {found[name].file.name} and {file.name}")
            if weight_map is not None and weight_map.get(name) != file.name:
                listed = f"lists it in {weight_map[name]}" if name in weight_map else "does not list it"
                raise ValueError(f"{op}: tensor {shown(name)} is in {file.name}, but {INDEX} {listed}")
            found[name] = entry
    for name in sorted(set(weight_map or {}) - set(found)):
        raise ValueError(f"{op}: {INDEX} lists tensor {shown(name)} in {weight_map[name]}, which does not hold it")
    return found


# ---------------------------------------------------------------- size before memory
def available_bytes(device, root: Path = Path("/")) -> int | None:
    """Memory `device` can still give this process: the GPU's free memory; on the host the least of what Linux
    has available, what the process's own limits leave and what its cgroup (a container) leaves, each of which ends
    a load in a MemoryError when passed (host_rooms). None: the shape-only device, or unknown. `root`: where /proc
    and /sys are (tests point it at a folder of their own)."""
    be = get_backend(device)
    if be.name == "meta":
        return None
    if getattr(be, "active", None) is not None:                        # a GPU (CuPy)
        return be.active.mem_info[0]
    return min(host_rooms(root).values(), default=None)


def host_rooms(root: Path = Path("/")) -> dict[str, int]:
    """{limit: bytes it leaves} for each limit on host memory that Linux says is set: MemAvailable (/proc/meminfo),
    ulimit -v (RLIMIT_AS, against the address space in use, VmSize) and ulimit -d (RLIMIT_DATA, against VmData),
    and the cgroup's limits (cgroup_room)."""
    rooms = {"MemAvailable": _fields(root / "proc/meminfo", 1024).get("MemAvailable")}
    status = _fields(root / "proc/self/status", 1024)
    try:
        import resource                                                # Unix only
        limits = {"ulimit -v": (resource.RLIMIT_AS, "VmSize"), "ulimit -d": (resource.RLIMIT_DATA, "VmData")}
        for name, (limit, used) in limits.items():
            soft = resource.getrlimit(limit)[0]
            if soft != resource.RLIM_INFINITY and used in status:
                rooms[name] = max(soft - status[used], 0)
    except ImportError:
        pass
    rooms["cgroup"] = cgroup_room(root)
    return {name: n for name, n in rooms.items() if n is not None}


def cgroup_room(root: Path = Path("/")) -> int | None:
    """What the process's memory cgroup (a container's limit) leaves it: cgroup v2's memory.max - memory.current,
    v1's memory.limit_in_bytes - memory.usage_in_bytes, not counting the file pages the kernel drops first
    (inactive_file in memory.stat); the least over its group and the groups above it. None: no limit found."""
    rooms = []
    for line in _lines(root / "proc/self/cgroup"):                     # 'id:controllers:/path'
        parts = line.split(":", 2)
        if len(parts) != 3 or (parts[1] and "memory" not in parts[1].split(",")):
            continue
        v2 = parts[1] == ""
        base = root / "sys/fs/cgroup" if v2 else root / "sys/fs/cgroup/memory"
        limit, usage, stat = (("memory.max", "memory.current", "inactive_file") if v2 else
                              ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"))
        groups = Path(parts[2]).relative_to("/").parts if parts[2].startswith("/") else ()
        groups = () if ".." in groups else groups                       # a group outside a cgroup namespace's view
        for folder in (base.joinpath(*groups[:i]) for i in range(len(groups) + 1)):
            cap, used = _integer(folder / limit), _integer(folder / usage)
            if cap is not None and used is not None:
                rooms.append(max(cap - used + _fields(folder / "memory.stat").get(stat, 0), 0))
    return min(rooms, default=None)


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return []


def _fields(path: Path, unit: int = 1) -> dict[str, int]:
    """A file of 'name value' lines ('MemAvailable:  123 kB', 'inactive_file 456') as {name: value * unit}."""
    pairs = (line.replace(":", " ").split()[:2] for line in _lines(path))
    return {p[0]: int(p[1]) * unit for p in pairs if len(p) == 2 and p[1].isdigit()}


def _integer(path: Path) -> int | None:
    """A file holding one integer (a cgroup's memory.max); None when it is missing, unreadable or 'max'."""
    text = "".join(_lines(path)).strip()
    return int(text) if text.isdigit() else None


def shape_model(model_class, cfg: BlockConfig, dtype, op: str):
    """The model on the shape-only device: every parameter's shape and dtype, no memory. A config of more layers
    than any model has (MAX_LAYERS) is refused first: building that many modules would take long by itself."""
    if cfg.n_layers > MAX_LAYERS:
        raise ValueError(f"{op}: config.json describes {cfg.n_layers:,} layers; no published model has more than a few "
                         f"hundred (at most {MAX_LAYERS:,} are read)")
    return model_class(cfg, generator=Generator(0), dtype=dtype, device="meta")


def check_size(model, dtype, device, op: str) -> int:
    """The bytes the model's weights (counted on the shape-only model: no array made) and its RoPE tables take in
    `dtype`, refused before any allocation when they exceed what the device has free. Returns them."""
    nbytes, free = model_bytes(model, dtype, op), available_bytes(device)
    if model.num_parameters() + rope_numbers(model.cfg) > MAX_PARAMETERS or (free is not None and nbytes > free):
        room = f"{free / 2**30:,.1f} GiB free on {device}" if free is not None else "no published model is as large"
        raise too_large(model, dtype, op, room)
    return nbytes


def model_bytes(model, dtype, op: str) -> int:
    """The bytes of the model's parameters and RoPE tables (cos and sin, shared by the layers) in `dtype`."""
    return (model.num_parameters() + rope_numbers(model.cfg)) * as_dtype(dtype, op).itemsize


def rope_numbers(cfg: BlockConfig) -> int:
    return 2 * cfg.max_seq_len * cfg.d_head if cfg.rope else 0


def too_large(model, dtype, op: str, room: str) -> ValueError:
    """The one refusal of a model that does not fit: its size from the config, in bytes of `dtype`, and `room`."""
    cfg, n, tables = model.cfg, model.num_parameters(), rope_numbers(model.cfg)
    return ValueError(f"{op}: config.json describes {n:,} parameters ({cfg.n_layers:,} layers, d_model "
                      f"{cfg.d_model:,}, vocabulary {cfg.vocab_size:,}) and RoPE tables of {tables:,} numbers "
                      f"({cfg.max_seq_len:,} positions): {model_bytes(model, dtype, op) / 2**30:,.1f} GiB in {dtype}, "
                      f"more than {room}")


# ---------------------------------------------------------------- parameter names and layouts
def hf_layout(model, arch: str) -> dict[str, tuple[bool, list[str]]]:
    """{HF tensor name: (transposed, [our parameter names])}, in our order, as the architecture's record says
    (families.py): its names; several of ours under one name are stacked along the output axis (a stacked
    tensor: GPT-2's c_attn = q, k, v; Phi-3's qkv_proj and gate_up_proj); transposed: a block weight stored
    (in, out) (GPT-2's Conv1D)."""
    fam, layout = FAMILIES[arch], {}
    for ours, p in model.named_parameters():
        hf = ours
        for pattern, new in fam.names:
            hf = re.sub(pattern, new, hf)
        transposed = fam.transposed and ours.startswith("layers.") and p.ndim == 2
        layout.setdefault(hf, (transposed, []))[1].append(ours)
    return layout


def layout_shapes(model_class, arch: str, cfg: BlockConfig, op: str) -> dict[str, tuple]:
    """{HF tensor name: shape} that a checkpoint of `cfg` in `arch`'s layout holds (a tied head not stored), from
    the shape-only `model_class` (nn.LM): no array is made."""
    model = shape_model(model_class, cfg, float32, op)
    shapes = {n: p.shape for n, p in model.named_parameters()}
    layout = hf_layout(model, arch)
    return {hf: hf_shape(transposed, [shapes[o] for o in ours]) for hf, (transposed, ours) in layout.items()}


def to_hf(transposed: bool, arrays: list[np.ndarray]) -> np.ndarray:
    """Our parameters -> one HF tensor: stacked along the output axis (axis 0 of (out, in) and of a bias)."""
    a = np.concatenate(arrays) if len(arrays) > 1 else arrays[0]
    return a.T if transposed and a.ndim == 2 else a


def from_hf(transposed: bool, a: np.ndarray, shapes: list[tuple]) -> list[np.ndarray]:
    """One HF tensor -> our parameters of `shapes`: the inverse of to_hf."""
    a = a.T if transposed and a.ndim == 2 else a
    return np.split(a, np.cumsum([s[0] for s in shapes])[:-1])


def hf_shape(transposed: bool, shapes: list[tuple]) -> tuple:
    """The shape to_hf gives for our `shapes`, found without any data."""
    shape = (sum(s[0] for s in shapes), *shapes[0][1:])
    return shape[::-1] if transposed else shape


def _canonical(name: str, arch: str) -> str:
    """A tensor's name with the prefix some checkpoints of the family leave out (GPT-2 as first published names
    its tensors without `transformer.`: wte.weight, h.0.ln_1.weight)."""
    prefix = FAMILIES[arch].prefix
    if prefix and not name.startswith((prefix, "lm_head.")):
        return prefix + name
    return name


def _by_canonical_name(headers: dict, arch: str, op: str) -> dict[str, TensorEntry]:
    """{canonical name: entry}. A file holding one tensor under both its names (GPT-2's wte.weight and
    transformer.wte.weight) loads when the two are the same bytes, and is refused, naming both, when they differ."""
    found = {}
    for name, entry in headers.items():
        other = found.setdefault(_canonical(name, arch), entry)
        if other is not entry and not _same_values(other, entry):
            raise ValueError(f"{op}: the checkpoint holds {shown(other.name)} ({other.dtype} {other.shape}) and "
                             f"{shown(entry.name)} ({entry.dtype} {entry.shape}), two names of one "
                             f"{FAMILIES[arch].label} tensor, with different values; which of the two is meant is "
                             "unknowable")
    return found


SIZE_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "head_dim", "max_position_embeddings", "n_embd",
               "n_inner", "n_positions")


def _misshaped(name: str, shape: tuple, expected: tuple, hf: dict) -> str:
    """'NAME is (173, 64), expected (1000000000000, 64) from config.json's vocab_size=1,000,000,000,000': the
    config's size fields that give the dimensions where the file and the config disagree."""
    dims = {e for s, e in zip(shape, expected) if s != e} if len(shape) == len(expected) else set(expected)
    fields = [f"{k}={hf[k]:,}" for k in SIZE_FIELDS if is_int(hf.get(k)) and hf[k] in dims]
    return f"{shown(name)} is {shape}, expected {expected}" + (f" from config.json's {', '.join(fields)}"
                                                               if fields else "")


def _check_tensors(layout: dict, shapes: dict, headers: dict, hf_config: dict, op: str) -> None:
    """Every tensor the model needs is present with its shape; nothing else is (bar BUFFERS), each named (the first
    ten of each kind, and how many more)."""
    expected = {hf: hf_shape(transposed, [shapes[o] for o in ours]) for hf, (transposed, ours) in layout.items()}
    missing = sorted(set(expected) - set(headers))
    unexpected = sorted(n for n in set(headers) - set(expected) if not BUFFERS.search(n))
    misshaped = [_misshaped(n, headers[n].shape, expected[n], hf_config) for n in sorted(set(expected) & set(headers))
                 if headers[n].shape != expected[n]]
    lists = {"missing": shown_list(missing), "unexpected": shown_list(unexpected),
             "misshaped": shown_list(misshaped, show=str)}
    wrong = [f"{kind} {names}" for kind, names in lists.items() if names != "[]"]
    if wrong:
        raise ValueError(f"{op}: the checkpoint's tensors do not fit the model its config.json describes: "
                         f"{', '.join(wrong)}")
    for e in (headers[n] for n in sorted(expected)):
        if e.dtype not in FLOATS:
            raise ValueError(f"{op}: tensor {shown(e.name)} in {e.file.name} is {e.dtype}; expected F64, F32, F16 or "
                             "BF16")


def _same_values(a: TensorEntry, b: TensorEntry) -> bool:
    """Whether two stored tensors are the same dtype, shape and bytes (compared 16 MiB at a time)."""
    same = a.dtype == b.dtype and a.shape == b.shape
    with open(a.file, "rb") as fa, open(b.file, "rb") as fb:
        fa.seek(a.begin)
        fb.seek(b.begin)
        for start in range(a.begin, a.end if same else a.begin, 2**24):
            n = min(2**24, a.end - start)
            same = same and fa.read(n) == fb.read(n)
    return same


def _check_tied_copy(copy: TensorEntry, embedding: TensorEntry, op: str) -> None:
    """A tied model's file may also store lm_head.weight: loaded only when it is the embedding, byte for byte."""
    if not _same_values(copy, embedding):
        raise ValueError(f"{op}: tie_word_embeddings is true, but lm_head.weight differs from the embedding "
                         f"({copy.dtype} {copy.shape} vs {embedding.dtype} {embedding.shape}); a tied model has one "
                         "matrix, and which of the two is meant is unknowable")


# ---------------------------------------------------------------- load and save
def load_pretrained(model_class, path, dtype=float32, device="cpu"):
    """A checkpoint folder (or a train run) as a `model_class` (nn.LM) of `dtype` on `device`, with the folder's
    tokenizer (or None) as model.tokenizer; LM.from_pretrained calls this. Everything is checked before any array
    is made: config, headers, names and shapes (so a config that disagrees with its file says so, whatever its
    size), then the size. The model is built on the shape-only device, then each parameter is read straight from
    the file into its array on `device`: one copy of the weights, never two. Memory that runs out all the same
    (a limit no check saw) is the same refusal as the size check's."""
    from ..tokenizer import load_tokenizer
    op = "from_pretrained"
    folder, hf_config, files, weight_map = checkpoint_files(path, op)
    arch, cfg = config_from_hf(hf_config, op)
    model = shape_model(model_class, cfg, dtype, op)                 # shapes only: no memory
    layout, shapes = hf_layout(model, arch), {n: p.shape for n, p in model.named_parameters()}
    found = _by_canonical_name(read_headers(files, op, weight_map), arch, op)
    tied_copy = found.pop("lm_head.weight", None) if cfg.tie_embeddings else None
    _check_tensors(layout, shapes, found, hf_config, op)
    check_size(model, dtype, device, op)
    if tied_copy is not None:
        _check_tied_copy(tied_copy, found[next(hf for hf, (_, o) in layout.items() if o == ["embed.weight"])], op)
    try:
        model.tokenizer = load_tokenizer(folder)
        if get_backend(device).name != "meta":                         # on meta the shapes are all there is
            _read_weights(model, layout, found, dtype, device, op)
    except MemoryError:
        raise too_large(model, dtype, op, f"{device} could give: the memory ran out while loading the "
                                          "checkpoint") from None
    return model


def _read_weights(model, layout: dict, found: dict, dtype, device, op: str) -> None:
    """Point each parameter of the meta-built model at its values, read from the file on `device`; then make the
    RoPE tables there, once, shared by every layer."""
    params = dict(model.named_parameters())
    for hf, (transposed, ours) in layout.items():
        parts = from_hf(transposed, read_array(found[hf], np.dtype(dtype), op), [params[o].shape for o in ours])
        for name, a in zip(ours, parts):
            t = Tensor(np.ascontiguousarray(a), dtype=dtype, device=device)
            params[name].data, params[name].backend = t.data, t.backend
    attention = [m for _, m in model.named_modules() if isinstance(m, Attention) and m.cfg.rope]
    if attention:
        attention[0].make_rope_tables(dtype, device)
        for module in attention[1:]:
            module.rope_cos, module.rope_sin = attention[0].rope_cos, attention[0].rope_sin


def save_pretrained(model, path) -> Path:
    """Write config.json and model.safetensors (the model's dtype) in the layout of the Hugging Face class the
    config matches (hf_architecture), so transformers' from_pretrained rebuilds the same model. Each file goes to a
    temporary name first and is renamed into place, so a kill leaves the previous checkpoint; a sharded checkpoint
    the folder held before (its index and shards) is removed after, so the folder holds exactly the new one.
    Returns the folder."""
    arch, folder = hf_architecture(model.cfg), Path(path)
    if folder.exists() and not folder.is_dir():
        raise FileExistsError(f"save_pretrained: {folder} is a file; expected a folder to write into")
    params = {n: p.numpy() for n, p in model.named_parameters()}
    layout = hf_layout(model, arch)
    tensors = {hf: to_hf(transposed, [params[o] for o in ours]) for hf, (transposed, ours) in layout.items()}
    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors(folder / SINGLE, tensors, metadata={"format": "pt"})     # 'pt': what transformers expects
    write_text(folder / "config.json", json.dumps(config_to_hf(model.cfg, arch, model.parameters()[0].dtype),
                                                  indent=2) + "\n")
    stale = [folder / INDEX] + [p for p in folder.iterdir() if SHARD.match(p.name)]
    for file in stale:
        file.unlink(missing_ok=True)
    sync_folder(folder)
    return folder
