"""`graph --out FILE` writes as a checkpoint is written (files.write_atomic): to a temporary beside FILE, renamed
into place, so a write that fails leaves the file that was there; a name the system refuses, and a FIFO, a device
or a folder where FILE would go, are refused by name in one line, status 2, never opened (a FIFO opened to write
waits for a reader forever)."""
from __future__ import annotations

import os
import resource
import signal
import stat
import subprocess
import sys

from conftest import ROOT, one_line_error

from tinygrad_block.files import TEMPORARY


def test_a_name_longer_than_the_system_allows_is_one_line(tmp_path, command_line):
    out = tmp_path / ("b" * 296 + ".dot")                            # 300 bytes; a name holds at most 255
    result = command_line.process("graph", "--preset", "tiny", "--out", out)
    one_line_error(result, "graph: error: --out", "File name too long")
    assert list(tmp_path.iterdir()) == []


def test_a_fifo_in_the_way_is_refused_by_name_without_waiting_for_a_reader(tmp_path, command_line):
    fifo = tmp_path / "block.dot"
    os.mkfifo(fifo)
    result = command_line.process("graph", "--preset", "tiny", "--out", fifo, timeout=120)
    one_line_error(result, "graph: error: --out", str(fifo), "is a FIFO (named pipe), not a regular file")
    result = command_line.process("graph", "--preset", "tiny", "--out", tmp_path / "block.svg", timeout=120)
    assert result.returncode == 0, result.stderr                      # svg: beside it, written
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["block.dot",
                                                                                                   "block.svg"]


def test_a_device_in_the_way_is_refused_too(tmp_path, command_line):
    (tmp_path / "block.dot").symlink_to("/dev/null")                 # a link is followed: what it names decides
    result = command_line.process("graph", "--preset", "tiny", "--out", tmp_path / "block.dot")
    one_line_error(result, "graph: error: --out", "is a device, not a regular file; not written over")
    assert (tmp_path / "block.dot").is_symlink()


def limit_file_size(limit: int):
    def limit_it():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)                  # EFBIG instead of a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    return limit_it


def test_a_write_that_fails_leaves_the_file_that_was_there_and_no_temporary(tmp_path):
    """RLIMIT_FSIZE of 2 kB: the DOT text of a tiny block (about 30 kB) cannot be written; the old file stays whole."""
    out = tmp_path / "block.dot"
    out.write_text("digraph old {}\n")
    result = subprocess.run([sys.executable, "-m", "tinygrad_block", "graph", "--preset", "tiny", "--out", str(out)],
                            capture_output=True, text=True, env=os.environ | {"PYTHONPATH": str(ROOT)},
                            preexec_fn=limit_file_size(2_000), timeout=300)
    one_line_error(result, "graph: error: --out", str(out), "File too large")
    assert out.read_text() == "digraph old {}\n"
    assert [p for p in tmp_path.iterdir() if TEMPORARY.fullmatch(p.name)] == []
