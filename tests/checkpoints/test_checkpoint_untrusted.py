"""A checkpoint folder is untrusted input (files.py, safetensors_file.py, nn/hf_config.py, nn/pretrained.py):
every hostile or careless folder below, written by the test itself, is one clear error naming the file and what was
expected; nothing outside the folder is opened; the size is known before any array is made; a save replaces the
folder's checkpoint whole, and a process killed in the middle of a save leaves the previous checkpoint loadable."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, msg
from safetensors.numpy import load_file, save_file

import tinygrad_block as tb
from tinygrad_block import accounting, nn
from tinygrad_block import safetensors_file, tokenizer
from tinygrad_block.nn import pretrained

TINY = nn.preset("tiny").with_(n_layers=1, vocab_size=40, name="tiny1")
LOAD = "from_pretrained"


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("good")
    nn.LM(TINY, generator=tb.Generator(0)).save_pretrained(folder)
    return folder


@pytest.fixture
def ckpt(good, tmp_path) -> Path:
    """A fresh copy of a good single-file checkpoint, to break."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for f in good.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    return folder


def shard(folder: Path, n: int = 2) -> list[str]:
    """Split model.safetensors into n shards with an index, as transformers lays them out; returns the shard names."""
    tensors = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    names, weight_map = sorted(tensors), {}
    files = [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
    for i, file in enumerate(files):
        part = {k: tensors[k] for k in names[i::n]}
        save_file(part, folder / file, metadata={"format": "pt"})
        weight_map |= dict.fromkeys(part, file)
    write_index(folder, weight_map)
    return files


def write_index(folder: Path, weight_map) -> None:
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def edit_config(folder: Path, **changes) -> None:
    hf = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(hf | changes))


def header_and_data(file: Path) -> tuple[dict, bytes]:
    raw = file.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_raw(file: Path, header: dict | bytes, data: bytes) -> None:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    file.write_bytes(len(text).to_bytes(8, "little") + text + data)


def refused(folder, *fragments, error=ValueError):
    with pytest.raises(error, match=msg(*fragments)):
        nn.LM.from_pretrained(folder)


# ---------------------------------------------------------------- nothing outside the folder
@pytest.mark.parametrize("entry", ["../outside.safetensors", "/tmp/outside.safetensors", "sub/x.safetensors", "..",
                                   ""])
def test_index_entries_outside_the_folder_are_refused(ckpt, entry):
    files = shard(ckpt)
    (ckpt.parent / "outside.safetensors").write_bytes((ckpt / files[0]).read_bytes())   # would load, if followed
    weight_map = json.loads((ckpt / "model.safetensors.index.json").read_text())["weight_map"]
    name = sorted(weight_map)[0]
    write_index(ckpt, weight_map | {name: entry})
    refused(ckpt, LOAD, f"weight_map entry {name!r}", f"names {entry!r}", "the plain name of a file")


@pytest.mark.parametrize("which", ["model.safetensors", "config.json", "shard"])
def test_symlinks_leading_out_of_the_folder_are_refused(ckpt, tmp_path, which):
    if which == "shard":
        which = shard(ckpt)[1]
    outside = tmp_path / f"elsewhere-{which}"
    outside.write_bytes((ckpt / which).read_bytes())
    (ckpt / which).unlink()
    (ckpt / which).symlink_to(outside)
    refused(ckpt, LOAD, str(ckpt / which), "is a link to", str(outside), "outside the folder")


def test_a_symlink_inside_the_folder_is_followed(ckpt):
    (ckpt / "weights.bin.safetensors").write_bytes((ckpt / "model.safetensors").read_bytes())
    (ckpt / "model.safetensors").unlink()
    (ckpt / "model.safetensors").symlink_to("weights.bin.safetensors")
    assert nn.LM.from_pretrained(ckpt).num_parameters() == accounting.total_params(TINY)


# ---------------------------------------------------------------- safetensors files
def test_a_truncated_file_is_named(ckpt):
    raw = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(raw[:-100])
    refused(ckpt, LOAD, "model.safetensors ends before the data its header describes",
            f"need {len(raw):,} bytes, the file has {len(raw) - 100:,}", "(truncated)")
    (ckpt / "model.safetensors").write_bytes(raw[:5])
    refused(ckpt, LOAD, "is not a safetensors file")


@pytest.mark.parametrize("length", [2**40, 2**64 - 1, 10**6])
def test_a_header_length_past_the_end_of_the_file(ckpt, length):
    raw = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(length.to_bytes(8, "little") + raw[8:])
    refused(ckpt, LOAD, f"its first 8 bytes give a header of {length:,} bytes", f"the file holds {len(raw):,} bytes")


@pytest.mark.parametrize("header, fragments", [
    (b"not json at all", ["the header of", "is not valid JSON"]),
    (b"[1, 2, 3]", ["the header of", "is a JSON list; expected an object"]),
    (b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a": {"dtype": "F32", "shape": [1], '
     b'"data_offsets": [4, 8]}}', ["the key 'a' appears twice"]),
    (b"[" * 100_000 + b"]" * 100_000, ["nests lists or objects"]),
])
def test_a_header_that_is_not_a_json_object(ckpt, header, fragments):
    write_raw(ckpt / "model.safetensors", header, b"\0" * 8)
    refused(ckpt, LOAD, *fragments)


def broken_entry(ckpt, change) -> str:
    """Apply change(header) to the header of model.safetensors (the data kept); returns the first tensor's name."""
    header, data = header_and_data(ckpt / "model.safetensors")
    first = min((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
    change(header, first)
    write_raw(ckpt / "model.safetensors", header, data)
    return first


def test_an_unknown_dtype_is_named(ckpt):
    name = broken_entry(ckpt, lambda h, first: h[first].update(dtype="F7"))
    refused(ckpt, LOAD, f"tensor {name} has the unknown dtype 'F7'", "safetensors has F64, F32")


def test_offsets_out_of_range_are_named(ckpt):
    good = (ckpt / "model.safetensors").read_bytes()
    name = broken_entry(ckpt, lambda h, first: h[first].update(data_offsets=[-4, 0]))
    refused(ckpt, LOAD, f"tensor {name} has data_offsets [-4, 0]", "0 <= begin <= end")
    (ckpt / "model.safetensors").write_bytes(good)
    header, data = header_and_data(ckpt / "model.safetensors")
    last = max((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
    begin, end = header[last]["data_offsets"]
    header[last]["data_offsets"] = [begin + 8, end + 8]
    write_raw(ckpt / "model.safetensors", header, data)
    refused(ckpt, LOAD, "belong to no tensor")


def test_overlapping_tensors_are_named(ckpt):
    def overlap(header, first):
        second = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])[1]
        header[second]["data_offsets"] = list(header[first]["data_offsets"])
        header[second]["shape"], header[second]["dtype"] = header[first]["shape"], header[first]["dtype"]
    broken_entry(ckpt, overlap)
    refused(ckpt, LOAD, "overlap another tensor's")


def test_offsets_that_do_not_fit_the_shape_are_named(ckpt):
    def wrong(header, first):
        header[first]["shape"] = [header[first]["shape"][0] * 2, *header[first]["shape"][1:]]
    name = broken_entry(ckpt, wrong)
    refused(ckpt, LOAD, f"tensor {name} is F32", "but its data_offsets", "span")


@pytest.mark.parametrize("spec", [[1, 2], {"dtype": "F32", "shape": [2]}, {"dtype": "F32", "shape": [-1],
                                                                             "data_offsets": [0, 4]},
                                  {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]},
                                  {"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]}])
def test_malformed_entries_are_named(ckpt, spec):
    write_raw(ckpt / "model.safetensors", {"x": spec}, b"\0" * 4)
    refused(ckpt, LOAD, "tensor x")


# ---------------------------------------------------------------- config.json and the index
@pytest.mark.parametrize("text, fragments", [
    ("[1, 2]", ["config.json holds a JSON list; expected an object"]),
    ("64", ["config.json holds a JSON int; expected an object"]),
    ('{"hidden_size": NaN}', ["is not valid JSON", "NaN is not a JSON number"]),
    ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", ["config.json nests lists or objects far deeper"]),
    ('{"a": ' + "[" * 40 + "]" * 40 + "}", ["config.json nests lists or objects 40 deep"]),
])
def test_config_that_is_not_a_json_object(ckpt, text, fragments):
    (ckpt / "config.json").write_text(text)
    refused(ckpt, LOAD, *fragments)


@pytest.mark.parametrize("change, fragments", [
    (dict(hidden_size="64"), ["config.json's 'hidden_size' is '64' (str); expected an integer >= 1"]),
    (dict(hidden_size=True), ["'hidden_size' is True (bool)"]),
    (dict(hidden_size=64.0), ["'hidden_size' is 64.0 (float)"]),
    (dict(num_hidden_layers=0), ["'num_hidden_layers' is 0 (int); expected an integer >= 1"]),
    (dict(num_attention_heads=-4), ["'num_attention_heads' is -4"]),
    (dict(vocab_size=[40]), ["'vocab_size' is [40] (list)"]),
    (dict(architectures="LlamaForCausalLM"), ["'architectures' is 'LlamaForCausalLM'", "a list of class names"]),
    (dict(architectures=[["LlamaForCausalLM"]]), ["'architectures'", "a list of class names"]),
    (dict(hidden_size=66, head_dim=None), ["hidden_size=66 is not divisible by num_attention_heads=4"]),
    (dict(hidden_size=60, head_dim=None), ["d_head = 60 / 4 = 15 (config.json's hidden_size / num_attention_heads) "
                                           "is odd"]),
    (dict(head_dim=15), ["head_dim=15 is odd", "RoPE rotates pairs"]),
    (dict(head_dim=0), ["'head_dim' is 0 (int); expected an integer >= 1"]),
    (dict(num_key_value_heads=3), ["num_attention_heads=4 is not divisible by num_key_value_heads=3"]),
    (dict(rms_norm_eps="1e-5"), ["'rms_norm_eps' is '1e-5' (str); expected a finite number > 0"]),
    (dict(rms_norm_eps=1e308), ["'rms_norm_eps' is 1e+308 (float); expected a finite number > 0 and < 1"]),
    (dict(rms_norm_eps=1), ["'rms_norm_eps' is 1 (int); expected a finite number > 0 and < 1"]),
    (dict(model_type="gpt2"), ["config.json's architectures ['LlamaForCausalLM'] and model_type 'gpt2' name "
                               "different models (LlamaForCausalLM's model_type is 'llama')", "ambiguous"]),
    (dict(model_type="mixtral"), ["and model_type 'mixtral' name different models"]),
    (dict(model_type=7), ["'model_type' is 7 (int); expected a string"]),
    (dict(tie_word_embeddings="no"), ["'tie_word_embeddings' is 'no' (str); expected true or false"]),
    (dict(rope_scaling=[1]), ["'rope_scaling' is [1]"]),
    (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), ["RoPE scaling 'yarn'"]),
    (dict(rope_scaling={"rope_type": "linear", "factor": 2.0, "beta": 3}), ["RoPE settings ['beta']"]),
    (dict(rope_scaling={"rope_type": "llama3", "factor": 8.0}), ["RoPE scaling 'llama3' needs", "low_freq_factor"]),
    (dict(quantization_config={"quant_method": "gptq"}), ["quantization_config", "quantized weights"]),
    (dict(final_logit_softcapping=30.0), ["final_logit_softcapping=30.0", "capped logits"]),
])
def test_config_fields_of_the_wrong_type_or_range_are_named(ckpt, change, fragments):
    edit_config(ckpt, **change)
    refused(ckpt, LOAD, *fragments)


def test_a_weight_map_that_is_not_a_map_of_names(ckpt):
    files = shard(ckpt)
    index = ckpt / "model.safetensors.index.json"
    weight_map = json.loads(index.read_text())["weight_map"]
    name = sorted(weight_map)[0]
    write_index(ckpt, weight_map | {name: 123})
    refused(ckpt, LOAD, f"weight_map entry {name!r} names 123")
    index.write_text(json.dumps({"weight_map": list(weight_map)}))
    refused(ckpt, LOAD, "has no 'weight_map' object")
    index.write_text("[]")
    refused(ckpt, LOAD, "model.safetensors.index.json holds a JSON list")
    write_index(ckpt, weight_map | {name: files[1] if weight_map[name] == files[0] else files[0]})
    refused(ckpt, LOAD, f"tensor {name} is in {weight_map[name]}, but model.safetensors.index.json lists it in")
    write_index(ckpt, weight_map | {"model.extra.weight": files[0]})
    refused(ckpt, LOAD, f"lists tensor model.extra.weight in {files[0]}, which does not hold it")


def test_a_tensor_named_twice_is_refused(ckpt):
    files = shard(ckpt)
    a, b = (load_file(ckpt / f) for f in files)
    name = sorted(a)[0]
    save_file(b | {name: a[name]}, ckpt / files[1], metadata={"format": "pt"})
    refused(ckpt, LOAD, f"tensor {name} is in both {files[0]} and {files[1]}")


def test_a_file_that_cannot_be_read_is_not_called_missing(ckpt):
    (ckpt / "model.safetensors").unlink()
    (ckpt / "model.safetensors").mkdir()
    refused(ckpt, LOAD, "cannot read", "model.safetensors", "it is a folder", error=OSError)
    (ckpt / "model.safetensors").rmdir()
    (ckpt / "config.json").unlink()
    (ckpt / "config.json").mkdir()
    refused(ckpt, LOAD, "cannot read", "config.json", error=OSError)


def test_an_ambiguous_folder_is_refused_naming_both(ckpt):
    single = (ckpt / "model.safetensors").read_bytes()
    shard(ckpt)
    (ckpt / "model.safetensors").write_bytes(single)
    refused(ckpt, LOAD, "holds both model.safetensors and model.safetensors.index.json", "ambiguous")


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt", "weights.pth"])
def test_pickles_are_refused_unread(tmp_path, name):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (tmp_path / name).write_bytes(b"\x80\x04never opened")
    refused(tmp_path, LOAD, name, "a pickle", "runs whatever code", "Convert it to safetensors")


# ---------------------------------------------------------------- size before memory
def sparse_checkpoint(folder: Path, cfg) -> None:
    """A checkpoint of `cfg` whose config.json and headers agree and whose data is a hole in a sparse file (no disk,
    no time): a model too large to load, laid out as save_pretrained lays it out."""
    model, arch = pretrained.shape_model(nn.LM, cfg, tb.float32, "test"), pretrained.hf_architecture(cfg)
    shapes, header, offset = {n: p.shape for n, p in model.named_parameters()}, {}, 0
    for name, (conv1d, ours) in pretrained.hf_layout(model, arch).items():
        shape = pretrained.hf_shape(conv1d, [shapes[o] for o in ours])
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + 4 * math.prod(shape)]}
        offset = header[name]["data_offsets"][1]
    folder.mkdir(exist_ok=True)
    text = json.dumps(header).encode()
    with open(folder / "model.safetensors", "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        f.truncate(8 + len(text) + offset)
    (folder / "config.json").write_text(json.dumps(pretrained.config_to_hf(cfg, arch, "float32")))


def test_a_config_too_large_to_fit_fails_before_any_allocation(tmp_path, monkeypatch):
    def no_reading(*args):
        raise AssertionError("an array was read for a model that cannot fit")
    monkeypatch.setattr(pretrained, "read_array", no_reading)
    free = pretrained.available_bytes("cpu")
    cfg = TINY.with_(vocab_size=free // (4 * TINY.d_model) + 1)            # the embedding alone is more than free
    sparse_checkpoint(tmp_path / "huge", cfg)
    gib = accounting.total_params(cfg) * 4 / 2**30
    start = time.perf_counter()
    refused(tmp_path / "huge", LOAD, f"{accounting.total_params(cfg):,} parameters", f"{gib:,.1f} GiB in float32",
            "more than", "GiB free on cpu")
    assert time.perf_counter() - start < 5          # the bound is a second; generous for a busy CI machine
    assert 0 < free < accounting.total_params(cfg) * 4


def test_a_config_that_disagrees_with_its_file_is_named_before_sizing(ckpt, monkeypatch):
    """vocab_size 10^12 over a 40-row embedding: the field and the tensor's shape, not 'more than the free memory'
    (which check_size, here unreachable, would say)."""
    monkeypatch.setattr(pretrained, "check_size", lambda *a: pytest.fail("sized before the shapes were checked"))
    edit_config(ckpt, vocab_size=10**12)
    refused(ckpt, LOAD, "do not fit the model its config.json describes",
            f"model.embed_tokens.weight is (40, {TINY.d_model}), expected (1000000000000, {TINY.d_model}) from "
            "config.json's vocab_size=1,000,000,000,000")
    edit_config(ckpt, vocab_size=40, intermediate_size=TINY.d_ff + 1)
    refused(ckpt, LOAD, f"model.layers.0.mlp.up_proj.weight is ({TINY.d_ff}, {TINY.d_model}), expected "
                        f"({TINY.d_ff + 1}, {TINY.d_model}) from config.json's intermediate_size={TINY.d_ff + 1}")


def test_a_memory_error_while_reading_is_the_size_refusal(ckpt, monkeypatch, command_line):
    """A limit no check saw (memory taken by another process meanwhile, say): the same one-line refusal."""
    def out_of_memory(*args):
        raise MemoryError
    monkeypatch.setattr(pretrained, "read_array", out_of_memory)
    n = accounting.total_params(TINY)
    ran_out = "more than cpu could give: the memory ran out while loading the checkpoint"
    refused(ckpt, LOAD, f"{n:,} parameters", ran_out)
    err = command_line.mistake("generate", ckpt, "--ids", "1 2")
    assert err.count("\n") == 1 and ran_out in err, err
    monkeypatch.undo()
    monkeypatch.setattr(tokenizer, "load_tokenizer", out_of_memory)       # a tokenizer.json too large for the room
    refused(ckpt, LOAD, f"{n:,} parameters", ran_out)


def write_limits(root: Path, files: dict[str, str]) -> Path:
    """Files under `root` as Linux shows them under / (proc/meminfo, sys/fs/cgroup/...): a fake machine's limits."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_cgroup_v2_room_is_the_least_over_the_group_and_those_above(tmp_path):
    root = write_limits(tmp_path, {
        "proc/self/cgroup": "0::/box/job\n",
        "sys/fs/cgroup/memory.max": "max\n", "sys/fs/cgroup/memory.current": "900000000\n",    # the root: no limit
        "sys/fs/cgroup/box/memory.max": "1000000000\n", "sys/fs/cgroup/box/memory.current": "700000000\n",
        "sys/fs/cgroup/box/memory.stat": "anon 500000000\ninactive_file 100000000\nactive_file 5\n",
        "sys/fs/cgroup/box/job/memory.max": "2000000000\n", "sys/fs/cgroup/box/job/memory.current": "300000000\n"})
    assert pretrained.cgroup_room(root) == 1_000_000_000 - 700_000_000 + 100_000_000   # box binds; file pages drop
    (root / "sys/fs/cgroup/box/memory.max").write_text("max\n")
    assert pretrained.cgroup_room(root) == 2_000_000_000 - 300_000_000
    (root / "sys/fs/cgroup/box/job/memory.max").write_text("max\n")
    assert pretrained.cgroup_room(root) is None


def test_cgroup_v1_room_reads_the_memory_controller(tmp_path):
    root = write_limits(tmp_path, {
        "proc/self/cgroup": "9:pids:/x\n4:memory:/docker/abc\n1:cpu,cpuacct:/x\n0::/\n",
        "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",         # v1's 'unlimited'
        "sys/fs/cgroup/memory/memory.usage_in_bytes": "5000000000\n",
        "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "536870912\n",
        "sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes": "436870912\n",
        "sys/fs/cgroup/memory/docker/abc/memory.stat": "cache 7\ntotal_inactive_file 1000\n"})
    assert pretrained.cgroup_room(root) == 100_000_000 + 1000
    (root / "proc/self/cgroup").write_text("4:memory:/\n")                 # a cgroup namespace: the group is the root
    assert pretrained.cgroup_room(root) == 9223372036854771712 - 5000000000
    write_limits(root, {"sys/fs/docker/abc/memory.limit_in_bytes": "1\n",                 # where '..' would lead
                        "sys/fs/docker/abc/memory.usage_in_bytes": "0\n"})
    (root / "proc/self/cgroup").write_text("4:memory:/../../docker/abc\n")    # outside the namespace: its root only
    assert pretrained.cgroup_room(root) == 9223372036854771712 - 5000000000


def test_available_bytes_is_the_least_of_the_limits(tmp_path):
    root = write_limits(tmp_path, {"proc/meminfo": "MemTotal: 8000 kB\nMemAvailable:   5000 kB\n",
                                   "proc/self/status": "VmSize:\t  100 kB\nVmData:\t 50 kB\n",
                                   "proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "4096000\n",
                                   "sys/fs/cgroup/memory.current": "4000\n"})
    rooms = pretrained.host_rooms(root)
    assert rooms["MemAvailable"] == 5000 * 1024 and rooms["cgroup"] == 4096000 - 4000
    assert pretrained.available_bytes("cpu", root) == min(rooms.values()) == 4092000
    (root / "sys/fs/cgroup/memory.max").write_text("max\n")                    # no limit: the free memory binds
    rooms = pretrained.host_rooms(root)
    assert "cgroup" not in rooms and pretrained.available_bytes("cpu", root) == min(rooms.values()) == 5000 * 1024
    assert pretrained.available_bytes("meta", root) is None
    assert pretrained.available_bytes("cpu", tmp_path / "nothing") is None                       # nothing known


GIB = 2**30
LIMITED = f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({GIB}, {GIB}))"     # ulimit -v 1048576


def test_ulimit_v_is_read_as_the_room_it_leaves():
    child = subprocess.run([sys.executable, "-c", LIMITED + """
from tinygrad_block.nn import pretrained
def vm(): return next(int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('VmSize'))
before = vm()
room = pretrained.host_rooms()['ulimit -v']
print(before, room, vm())"""], capture_output=True, text=True, cwd=ROOT, timeout=60)
    before, room, after = map(int, child.stdout.split())
    assert GIB - after <= room <= GIB - before, (before, room, after)


def test_a_checkpoint_larger_than_ulimit_v_is_one_line_from_the_command_line(tmp_path, command_line):
    """The process may use 1 GiB of address space (ulimit -v); the host has far more free. The checkpoint's weights
    are 3 GiB: generate refuses them in one line, naming the room the limit leaves, instead of a MemoryError
    traceback from the first large array; inspect, which reads headers only, counts them."""
    cfg = TINY.with_(vocab_size=3 * GIB // (2 * 4 * TINY.d_model))        # embedding and head: 3 GiB in float32
    sparse_checkpoint(tmp_path / "big", cfg)
    result = command_line.process("generate", tmp_path / "big", "--ids", "1 2", prelude=LIMITED, timeout=120)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"{accounting.total_params(cfg):,} parameters" in lines[0] and "GiB free on cpu" in lines[0], lines[0]
    free = float(lines[0].split("more than ")[1].split(" GiB")[0])
    assert free < 1, lines[0]                                         # what ulimit -v leaves, not the host's memory
    result = command_line.process("inspect", tmp_path / "big", prelude=LIMITED, timeout=120)
    assert result.returncode == 0 and f"{accounting.total_params(cfg):,} parameters" in result.stdout, result.stderr


def test_a_context_too_long_to_tabulate_fails_before_any_allocation(ckpt, monkeypatch):
    monkeypatch.setattr(pretrained, "read_array", lambda *a: pytest.fail("an array was read"))
    edit_config(ckpt, max_position_embeddings=10**11)
    refused(ckpt, LOAD, f"RoPE tables of {2 * 10**11 * TINY.d_head:,} numbers ({10**11:,} positions)", "more than")


def test_a_weight_dtype_is_checked_before_any_tensor_is_read(ckpt, monkeypatch):
    monkeypatch.setattr(pretrained, "read_array", lambda *a: pytest.fail("an array was read"))
    name = broken_entry(ckpt, lambda h, first: h[first].update(dtype="I32"))       # F32 and I32: 4 bytes each
    refused(ckpt, LOAD, f"tensor {name} in model.safetensors is I32", "expected F64, F32, F16 or BF16")


def test_a_model_that_would_not_fit_in_the_free_memory_is_refused(ckpt, monkeypatch):
    monkeypatch.setattr(pretrained, "available_bytes", lambda device: None if device == "meta" else 1000)
    n = accounting.total_params(TINY)
    refused(ckpt, LOAD, f"{n:,} parameters", "more than 0.0 GiB free on cpu")
    assert nn.LM.from_pretrained(ckpt, device="meta").num_parameters() == n      # meta holds no values


def test_loading_reads_each_tensor_once_into_its_final_array(good, monkeypatch):
    """One copy of the weights: each stored tensor is read once, straight into an array of the model's dtype, and
    that array (or a part of it, for GPT-2's stacked q/k/v) becomes the parameter without another copy."""
    reads = []
    real = pretrained.read_array

    def spy(entry, dtype, op):
        reads.append(real(entry, dtype, op))
        return reads[-1]
    monkeypatch.setattr(pretrained, "read_array", spy)
    model = nn.LM.from_pretrained(good)
    params = model.parameters()
    assert len(reads) == len(params)
    assert all(np.shares_memory(p.data, a) for p, a in zip(params, reads))
    built = nn.LM(TINY, generator=tb.Generator(0)).layers[0].attn             # RoPE tables as a model makes them
    assert np.array_equal(model.layers[0].attn.rope_cos.numpy(), built.rope_cos.numpy())
    assert np.array_equal(model.layers[0].attn.rope_sin.numpy(), built.rope_sin.numpy())


def test_bf16_and_f16_are_converted_in_chunks_exactly(tmp_path, monkeypatch):
    monkeypatch.setattr(safetensors_file, "CHUNK_BYTES", 64)          # many chunks, one partial at the end
    bits = np.random.default_rng(0).integers(0, 2**16, 1001, dtype=np.uint16)
    bits[(bits & 0x7F80) == 0x7F80] = 0x3F80                         # no inf or nan: compare values
    halves = np.random.default_rng(1).standard_normal(999).astype(np.float16)
    header = {"b": {"dtype": "BF16", "shape": [7, 143], "data_offsets": [0, 2002]},
              "h": {"dtype": "F16", "shape": [999], "data_offsets": [2002, 4000]}}
    write_raw(tmp_path / "x.safetensors", header, bits.tobytes() + halves.tobytes())
    entries = safetensors_file.read_header(tmp_path / "x.safetensors", "test")
    as_float32 = (bits.astype(np.uint32) << 16).view(np.float32).reshape(7, 143)
    assert np.array_equal(safetensors_file.read_array(entries["b"], np.dtype(np.float32), "test"), as_float32)
    assert np.array_equal(safetensors_file.read_array(entries["b"], np.dtype(np.float64), "test"), as_float32)
    assert np.array_equal(safetensors_file.read_array(entries["h"], np.dtype(np.float64), "test"), halves)


# ---------------------------------------------------------------- saving
def test_saving_over_a_sharded_checkpoint_leaves_exactly_the_new_one(ckpt):
    shard(ckpt, 3)
    (ckpt / "tokenizer.json").write_text("{}")                        # not the checkpoint's: kept
    model = nn.LM(TINY, generator=tb.Generator(5))
    model.save_pretrained(ckpt)
    assert sorted(p.name for p in ckpt.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    (ckpt / "tokenizer.json").unlink()
    back = nn.LM.from_pretrained(ckpt)
    for (n, p), (_, q) in zip(model.named_parameters(), back.named_parameters()):
        assert np.array_equal(p.numpy(), q.numpy()), n


def test_our_safetensors_writer_is_read_by_the_safetensors_library(tmp_path):
    tensors = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(0, np.float64),
               "c": np.float16(1.5) * np.ones((1, 1, 3), np.float16), "d": np.asfortranarray(np.eye(3))}
    safetensors_file.write_safetensors(tmp_path / "t.safetensors", tensors, {"format": "pt"})
    back = load_file(tmp_path / "t.safetensors")
    assert set(back) == set(tensors) and all(np.array_equal(back[k], v) and back[k].dtype == v.dtype
                                             for k, v in tensors.items())
    assert [p.name for p in tmp_path.iterdir()] == ["t.safetensors"]       # no temporary file left behind


def test_a_failed_save_leaves_the_previous_checkpoint_and_no_temporary_file(ckpt, monkeypatch):
    before = (ckpt / "model.safetensors").read_bytes()

    def broken_write(f):
        f.write(b"half a checkpoint")
        raise OSError("disk full")
    monkeypatch.setattr(safetensors_file, "write_atomic", lambda path, write, real=safetensors_file.write_atomic:
                        real(path, broken_write))
    with pytest.raises(OSError, match="disk full"):
        nn.LM(TINY, generator=tb.Generator(9)).save_pretrained(ckpt)
    assert (ckpt / "model.safetensors").read_bytes() == before
    assert sorted(p.name for p in ckpt.iterdir()) == ["config.json", "model.safetensors"]


SAVER = """
import sys
import tinygrad_block as tb
from tinygrad_block import nn
cfg = nn.preset("tiny").with_(n_layers=4, d_ff=1024, vocab_size=4000)
models = [nn.LM(cfg, generator=tb.Generator(s)) for s in (1, 2)]
print("ready", flush=True)
i = 0
while True:
    models[i % 2].save_pretrained(sys.argv[1])
    i += 1
"""


@pytest.mark.slow
def test_a_save_killed_at_any_moment_leaves_a_loadable_checkpoint(tmp_path):
    """A child process saves two models in turn, over and over, into one folder; it is killed (SIGKILL) at five
    moments. After each kill the folder loads, and holds exactly one of the two models."""
    cfg = nn.preset("tiny").with_(n_layers=4, d_ff=1024, vocab_size=4000)
    wanted = [dict((n, p.numpy()) for n, p in nn.LM(cfg, generator=tb.Generator(s)).named_parameters())
              for s in (1, 2)]
    folder = tmp_path / "ckpt"
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    rng, loaded = np.random.default_rng(0), 0
    for delay in rng.uniform(0.05, 0.6, 5):
        child = subprocess.Popen([sys.executable, "-c", SAVER, str(folder)], stdout=subprocess.PIPE, env=env)
        assert child.stdout.readline().strip() == b"ready"
        time.sleep(0.4 if not folder.exists() else delay)
        child.send_signal(signal.SIGKILL)
        child.wait()
        if not (folder / "config.json").exists():
            continue                                                   # killed before the first save finished
        got = {n: p.numpy() for n, p in nn.LM.from_pretrained(folder).named_parameters()}
        assert any(all(np.array_equal(got[n], w[n]) for n in w) for w in wanted)
        loaded += 1
    assert loaded >= 4


# ---------------------------------------------------------------- the command line: one line, status 2
@pytest.mark.parametrize("break_it", ["truncate", "escape", "config_list", "string_size"])
def test_the_command_line_says_one_line_for_a_hostile_folder(ckpt, break_it, command_line):
    if break_it == "truncate":
        (ckpt / "model.safetensors").write_bytes((ckpt / "model.safetensors").read_bytes()[:-7])
    elif break_it == "escape":
        files = shard(ckpt)
        weight_map = json.loads((ckpt / "model.safetensors.index.json").read_text())["weight_map"]
        write_index(ckpt, {k: "../" + v if v == files[0] else v for k, v in weight_map.items()})
    elif break_it == "config_list":
        (ckpt / "config.json").write_text("[]")
    else:
        edit_config(ckpt, hidden_size="64")
    commands = [["generate", str(ckpt), "--ids", "1 2"], ["inspect", str(ckpt)]]
    if break_it == "string_size":                       # inspect still counts the headers, and says what is wrong
        assert "no closed form: inspect: config.json's 'hidden_size' is '64' (str)" in command_line.out(*commands.pop())
    for command in commands:
        err = command_line.mistake(*command)
        assert err.count("\n") == 1 and "Traceback" not in err and "error:" in err, err
