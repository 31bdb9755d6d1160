"""On a GPU, `train` and `generate` run their steps eagerly unless told, until compiled replays have been checked
against eager there (cuda.REPLAY_CHECKED), and say why in one line; --compiled and --eager choose. No GPU is needed:
the device check is replaced by one that takes 'cuda', and the run by one that records what it was asked."""
import json
from pathlib import Path

import pytest

import tinygrad_block as tb
from tinygrad_block import cli, cuda, nn, report
from tools import gpu_check

WHY = "compiled replays have not yet been checked against eager on a GPU (tools/gpu_check.py, docs/gpu.md)"


@pytest.fixture
def asked(monkeypatch) -> list[dict]:
    """Any device passes the device check; report.train_data and report.generate_data record the settings they get
    (jit, device) and return them."""
    monkeypatch.setattr(cli, "device_arg", lambda name: name)
    calls = []

    def record(command):
        def data(*args, **settings):
            calls.append(settings)
            return {"command": command, "jit": settings["jit"], "device": settings["device"]}
        return data
    monkeypatch.setattr(report, "train_data", record("train"))
    monkeypatch.setattr(report, "generate_data", record("generate"))
    return calls


def argv(command: str, tmp_path) -> list[str]:
    if command == "train":
        return ["train", "induction", "--out", str(tmp_path / "run"), "--no-plots", "--json"]
    return ["generate", str(tmp_path), "--ids", "1 2", "--json"]


@pytest.mark.parametrize("command", ["train", "generate"])
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_on_a_gpu_the_default_is_eager_and_one_line_says_why(asked, command_line, tmp_path, monkeypatch, command,
                                                            device):
    """Until a GPU's record has matched replays (REPLAY_CHECKED False, as before the first record)."""
    monkeypatch.setattr(cuda, "REPLAY_CHECKED", False)
    status, out, err = command_line.status(*argv(command, tmp_path), "--device", device)
    assert status == 0 and json.loads(out)["jit"] is False and asked[0]["device"] == device
    assert err.splitlines() == [f"python -m tinygrad_block {command}: on {device} the steps run eagerly: {WHY}; "
                                "--compiled runs them compiled"]


@pytest.mark.parametrize("command", ["train", "generate"])
@pytest.mark.parametrize("device, flags, compiled", [
    ("cuda", ["--compiled"], True),                          # asked for: compiled, and nothing to explain
    ("cuda", ["--eager"], False),
    ("cpu", [], True),                                       # the CPU's replays are checked by the tests
    ("cpu", ["--eager"], False),
    ("cpu", ["--compiled"], True),
])
def test_compiled_or_eager_as_asked_and_silent(asked, command_line, tmp_path, command, device, flags, compiled):
    status, out, err = command_line.status(*argv(command, tmp_path), "--device", device, *flags)
    assert (status, json.loads(out)["jit"], err) == (0, compiled, "")


@pytest.mark.parametrize("command", ["train", "generate"])
def test_once_a_gpu_has_matched_replays_the_default_there_is_compiled(asked, command_line, tmp_path, monkeypatch,
                                                                      command):
    monkeypatch.setattr(cuda, "REPLAY_CHECKED", True)
    status, out, err = command_line.status(*argv(command, tmp_path), "--device", "cuda")
    assert (status, json.loads(out)["jit"], err) == (0, True, "")


@pytest.mark.parametrize("command", ["train", "generate"])
def test_eager_and_compiled_together_are_one_line(asked, command_line, tmp_path, command):
    err = command_line.mistake(*argv(command, tmp_path), "--eager", "--compiled")
    assert len(err.strip().splitlines()) == 1 and "--compiled: not allowed with argument --eager" in err
    assert asked == []


def test_the_resume_command_keeps_compiled(monkeypatch):
    monkeypatch.setattr(cli, "device_arg", lambda name: name)
    args = cli.parser().parse_args(["train", "induction", "--device", "cuda", "--compiled"])
    assert cli.resume_command(args, Path("out/x")).endswith("train induction --out out/x --seed 0 --compiled --resume")


@pytest.mark.parametrize("device, replay_checked, compiled", [
    ("cuda", False, False), ("cuda:0", False, False), ("cuda:3", False, False), ("cuda", True, True),
    ("cpu", False, True), ("strict", False, True), ("cpu", True, True),
])
def test_jit_by_default(monkeypatch, device, replay_checked, compiled):
    monkeypatch.setattr(cuda, "REPLAY_CHECKED", replay_checked)
    assert cuda.jit_by_default(device) is compiled


def test_replays_count_as_checked_exactly_when_the_gpu_record_says_they_matched():
    """REPLAY_CHECKED is set True by hand, in the commit that brings docs/gpu.md a record of matched replays
    (tools/gpu_check.py writes the line MATCHED names)."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "gpu.md").read_text()
    record = page[page.index(gpu_check.BEGIN):page.index(gpu_check.END)]
    assert cuda.REPLAY_CHECKED is (gpu_check.MATCHED.format("yes") in record)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    nn.LM(nn.preset("tiny"), generator=tb.Generator(0)).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("by_default", [True, False])
def test_generate_data_without_jit_takes_the_devices_default(checkpoint, monkeypatch, by_default):
    seen = []
    monkeypatch.setattr(report, "jit_by_default", lambda device: seen.append(device) or by_default)
    data = report.generate_data(checkpoint, ids=[1, 2], max_new_tokens=4, temperature=0.0, device="cpu")
    assert seen == ["cpu"] and data["compiled"] is by_default and data["new_tokens"] == 4
    asked = report.generate_data(checkpoint, ids=[1, 2], max_new_tokens=4, temperature=0.0, jit=not by_default)
    assert seen == ["cpu"] and asked["compiled"] is not by_default and asked["ids"] == data["ids"]
