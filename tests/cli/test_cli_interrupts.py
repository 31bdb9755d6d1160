"""Ctrl-C on the command line (cli.py, report.generate_data): `generate` stopped prints the tokens chosen so far
(the text, or --json's dict) and one line, "stopped after N of M tokens", status 130, as `train` does; any other
command stopped by Ctrl-C says so in one line, status 130, never a traceback. The oracle for the partial text is
the model generating exactly N tokens with the same seed: sampling draws the same numbers token after token."""
from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time

import pytest
from conftest import ROOT

import tinygrad_block as tb
from tinygrad_block import nn, report

LONG = nn.BlockConfig(d_model=32, n_heads=2, n_kv_heads=2, d_ff=64, n_layers=1, vocab_size=16, max_seq_len=4096)
PROMPT = [1, 2, 3]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("long")
    nn.LM(LONG, generator=tb.Generator(0)).save_pretrained(folder)
    return folder


def first_tokens(folder, n: int, seed: int, use_cache: bool) -> list[int]:
    """The prompt and the first n tokens the checkpoint generates at temperature 0.8 with this seed."""
    model = nn.LM.from_pretrained(folder)
    ids = tb.tensor([PROMPT], dtype=tb.int64)
    return model.generate(ids, n, 0.8, None, tb.Generator(seed), use_cache=use_cache).numpy()[0].tolist()


def last_line(err: str) -> str:
    return [line for line in err.replace("\r", "\n").splitlines() if line.strip()][-1]


@pytest.mark.parametrize("engine", [[], ["--no-cache", "--eager"]])
def test_ctrl_c_during_generate_prints_the_tokens_so_far_and_one_line(checkpoint, monkeypatch, command_line, engine):
    """A real SIGINT, sent to this process as the 5th new token arrives."""
    expected = first_tokens(checkpoint, 5, 7, use_cache=not engine)
    real = nn.LM.generate

    def interrupted(self, *args, on_token=None, **kwargs):
        def arrived(i, new):
            on_token(i, new)
            if i == 4:
                os.kill(os.getpid(), signal.SIGINT)
        return real(self, *args, on_token=arrived, **kwargs)
    monkeypatch.setattr(nn.LM, "generate", interrupted)
    argv = ("generate", checkpoint, "--ids", "1 2 3", "--max-new-tokens", "50", "--temperature", "0.8", "--seed", "7",
            *engine)
    status, out, err = command_line.status(*argv)
    assert status == 130 and "Traceback" not in err
    assert err == "python -m tinygrad_block generate: stopped after 5 of 50 tokens\n"
    assert out == " ".join(map(str, expected)) + "\n"                # no tokenizer: the ids
    status, out, err = command_line.status(*argv, "--json")
    data = json.loads(out)
    assert status == 130 and data["ids"] == expected and data["stopped"] is True
    assert (data["new_tokens"], data["asked"], data["prompt_tokens"]) == (5, 50, 3)


def test_generate_run_through_says_it_was_not_stopped(checkpoint, command_line):
    data = command_line.json("generate", checkpoint, "--ids", "1 2 3", "--max-new-tokens", "6", "--temperature", "0.8",
                             "--seed", "7")
    assert data["ids"] == first_tokens(checkpoint, 6, 7, use_cache=True)
    assert data["stopped"] is False and data["new_tokens"] == data["asked"] == 6


@pytest.mark.slow
def test_ctrl_c_to_a_generate_process_in_a_terminal(checkpoint):
    """`generate` in a terminal (a pty of 100 columns: its progress bar shows), SIGINT once the bar has counted a
    few tokens: the text so far on stdout, the one line last on the terminal, status 130."""
    main, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))   # 100 columns: the bar shows
    child = subprocess.Popen([sys.executable, "-m", "tinygrad_block", "generate", str(checkpoint), "--ids", "1 2 3",
                              "--max-new-tokens", "4000", "--no-cache", "--eager", "--temperature", "0.8", "--seed",
                              "7"],
                             stdout=subprocess.PIPE, stderr=terminal, text=True,
                             env=os.environ | {"PYTHONPATH": str(ROOT)})
    os.close(terminal)
    shown, deadline = b"", time.time() + 120
    while time.time() < deadline and max(map(int, re.findall(rb"(\d+)/4000", shown)), default=0) < 3:
        if select.select([main], [], [], 1)[0]:
            shown += os.read(main, 4096)
    child.send_signal(signal.SIGINT)
    while True:                                                    # the rest of the terminal's output, to its end
        try:
            more = os.read(main, 4096)
        except OSError:                                            # EIO: the child has closed the terminal
            break
        if not more:
            break
        shown += more
    os.close(main)
    out = child.stdout.read()
    assert child.wait(timeout=60) == 130
    said = shown.decode(errors="replace")
    line = last_line(said)
    assert "Traceback" not in said and re.fullmatch(r"python -m tinygrad_block generate: stopped after \d+ of 4000 "
                                                    r"tokens", line), said[-500:]
    n = int(line.split("after ")[1].split()[0])
    assert 3 <= n < 4000
    assert out == " ".join(map(str, first_tokens(checkpoint, n, 7, use_cache=False))) + "\n"


def test_ctrl_c_in_any_other_command_is_one_line_and_status_130(monkeypatch, command_line):
    def stopped():
        raise KeyboardInterrupt
    monkeypatch.setattr(report, "presets_data", stopped)
    status, out, err = command_line.status("presets")
    assert (status, out, err) == (130, "", "python -m tinygrad_block presets: stopped (Ctrl-C)\n")
