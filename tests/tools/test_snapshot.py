"""tools/snapshot.py's pure parts, on small strings: the masks (what changes from run to run becomes a placeholder,
what a lesson computes stays), the numbers read from a line, and the comparisons of a lesson's numbers and of a
command's text; `compare` on two snapshot folders written here. No lesson or command runs."""
import json

import pytest

from tools import snapshot


@pytest.mark.parametrize("text, expected", [
    ("trained in 0.6 s, 20,885 tokens/s", "trained in <time>, <rate>"),
    ("prefill 11.7 ms, decode 13.1 tokens/s; 4.20 µs per call", "prefill <time>, decode <rate>; <time> per call"),
    ("(306 nodes, 349 edges, 1.4 MiB, 0.05 s)", "(306 nodes, 349 edges, 1.4 MiB, <time>)"),
    ('  "seconds": 0.924,', '  "seconds": <time>,'),
    ('  "decode_tokens_per_s": 13.07,', '  "decode_tokens_per_s": <time>,'),
    ("the step took 12.5 ms in 310 calls", "the step took <time> in 310 calls"),
    ("4096 x 4096 GEMM at 1.23 TFLOP/s, 3.35 TB/s", "4096 x 4096 GEMM at <rate>, <rate>"),
    ("train:  50%|█████     | 10/20 [00:00<00:00, 28.14step/s, loss=3.5951]", "<progress>"),
    ("wrote /tmp/tmpab_12c/x.png", "wrote <tmp>/x.png"),
    ("another training run (process 12345) left .state.json.4321.tmp", "another training run (process <pid>) left "
     ".state.json.<pid>.tmp"),
    ("saved 2026-11-27T22:01:29 at 0x7f12ab34cd", "saved <date> at <address>"),
    ("GPU: 79.1 GiB free of 80 GiB", "GPU: <free memory> of 80 GiB"),
    ("timed: 12 ms -> 0.02 TFLOP/s = 2.32% of the peak, 23.5% of the measured GEMM",
     "timed: <time> -> <rate> = <ratio>, <ratio>"),
    ("compiled  4.1 ms  0.20 x eager  0.38 x PyTorch", "compiled  <time>  <ratio> x eager  <ratio> x PyTorch"),
    ("measured: 3.2 GB/s; the device's balance point: 160 FLOPs per byte",
     "measured: <rate>; the device's balance point: <ratio> FLOPs per byte"),
    ("prefill runs 42 x as many FLOPs per second as decode", "prefill runs <rate> as decode"),
])
def test_mask_replaces_what_changes_from_run_to_run(text, expected):
    assert snapshot.mask(text) == expected


@pytest.mark.parametrize("text", [
    "20 steps, seed 0: 86,336 parameters (F32 86,336), 8.98% accuracy",
    "d_model 8,192, 80 layers, 64 heads (8 KV), 6 N T = 5.71e+23 FLOPs, 1.05 TiB",
    "3 samples, 5 sums and 2 splits per step",                  # a word after a number, not seconds
])
def test_mask_keeps_what_a_run_computes(text):
    assert snapshot.mask(text) == text


def test_mask_keeps_a_timed_tables_counted_columns_and_masks_the_measured_ones():
    table = ("size           matmul FLOPs  calls         ms    TFLOP/s   of peak\n"
             "tiny              9,093,120    280      8.161   0.001114    0.134%\n"
             "medium        9,311,354,880    280    481.815    0.01933    2.323%\n"
             "matmul FLOPs per call: tiny 32,475\n"
             "tiny              9,093,120    280      8.161   0.001114    0.134%")
    assert snapshot.mask(table).splitlines() == [
        "size           matmul FLOPs  calls         ms    TFLOP/s   of peak",
        "tiny              9,093,120    280 <timed>",
        "medium        9,311,354,880    280 <timed>",
        "matmul FLOPs per call: tiny 32,475",
        "tiny              9,093,120    280      8.161   0.001114    0.134%"]      # no header above it: kept


def test_mask_keeps_one_line_of_a_progress_bars_updates():
    assert snapshot.mask("[stderr]\n 10%|█ | 1/10 [00:01]\n 20%|██ | 2/10 [00:02]\ndone: 3 steps") == \
        "[stderr]\n<progress>\ndone: 3 steps"


def test_mask_replaces_the_runs_own_paths_in_order():
    paths = [("/work/x/.venv/bin/python", "<python>"), (".venv/bin/python", "<python>"), ("/work/x", "<root>")]
    text = "run `/work/x/.venv/bin/python -m tb check 03`, or .venv/bin/python lessons/01.py in /work/x/lessons"
    assert snapshot.mask(text, paths) == "run `<python> -m tb check 03`, or <python> lessons/01.py in <root>/lessons"


def test_numbers_reads_each_number_as_printed():
    line = "llama2-70b: d^2 = 1,234 and 6.48, 1e-8, -0.5, (2, 8, 64) W2 5.71e+23 8.98%"
    assert snapshot.numbers(line) == ["2", "70", "2", "1,234", "6.48", "1e-8", "-0.5", "2", "8", "64", "2",
                                      "5.71e+23", "8.98"]
    assert snapshot.skeleton("loss 3.25 at step 10") == "loss # at step #"


BEFORE = "x: shape (2, 3)\nloss 3.3185 after 20 steps\nmax |grad| 8.2860\n"


def test_compare_lesson_counts_new_and_reworded_lines_without_a_difference():
    after = "x: shape (2, 3)\na new section: 7 heads\nthe loss, 3.3185, after 20 steps\nmax |grad| 8.2860\n"
    diff = snapshot.compare_lesson(BEFORE, after)
    assert (diff.vanished, diff.changed, diff.new, diff.reworded, diff.differs) == ([], [], 1, 1, False)


def test_compare_lesson_lists_a_vanished_number_with_its_line_and_the_changed_line():
    after = "x: shape (2, 3)\nloss 3.3186 after 20 steps\nmax |grad| 8.2860\n"
    diff = snapshot.compare_lesson(BEFORE, after)
    assert diff.vanished == [("3.3185", "loss 3.3185 after 20 steps")]
    assert diff.changed == [("loss 3.3185 after 20 steps", "loss 3.3186 after 20 steps")]
    assert diff.differs


def test_compare_lesson_counts_each_printing_of_a_number():
    after = "x: shape (2, 3)\nloss 3.3185 after 20 steps\nmax |grad| 8.2860\n"
    diff = snapshot.compare_lesson(BEFORE + "again 3.3185\n", after)
    assert diff.vanished == [("3.3185", "again 3.3185")] and diff.changed == []


def test_compare_lesson_takes_a_moved_line_as_the_same_numbers():
    after = "max |grad| 8.2860\nx: shape (2, 3)\nloss 3.3185 after 20 steps\n"
    assert not snapshot.compare_lesson(BEFORE, after).differs


def test_compare_command_is_empty_when_only_timings_differ_and_a_diff_otherwise():
    before = snapshot.mask("$ flops --preset tiny\ncounted in 0.69 s\nmodel 1,234\n[status 0]\n")
    assert snapshot.compare_command(before, snapshot.mask(before.replace("0.69 s", "1.20 s"))) == []
    patch = snapshot.compare_command(before, before.replace("1,234", "1,235"))
    assert [line for line in patch if line[:1] in "+-" and line[:3] not in ("---", "+++")] == \
        ["-model 1,234", "+model 1,235"]


def write_snapshot(folder, root, texts, statuses):
    folder.mkdir()
    (folder / "meta.json").write_text(json.dumps({"root": root, "python": f"{root}/.venv/bin/python",
                                                  "scratch": f"{root}/scratch"}))
    (folder / "index.json").write_text(json.dumps({name: {"command": [name], "status": statuses[name],
                                                          "seconds": 1.0} for name in texts}))
    for name, text in texts.items():
        (folder / f"{name}.txt").write_text(text)


def test_compare_masks_each_snapshots_own_paths_and_reports_what_differs(tmp_path, capsys):
    before = {"lesson_01": "n = 3 in 0.2 s\n", "walk": "$ walk\nwrote /srv/a/scratch/walk/x\n[status 0]\n"}
    write_snapshot(tmp_path / "a", "/srv/a", before, {"lesson_01": 0, "walk": 0})
    same = {"lesson_01": "n = 3 in 0.9 s\nnew: 4\n", "walk": "$ walk\nwrote /srv/b/scratch/walk/x\n[status 0]\n"}
    write_snapshot(tmp_path / "b", "/srv/b", same, {"lesson_01": 0, "walk": 0})
    assert snapshot.compare(tmp_path / "a", tmp_path / "b") == 0
    assert "compared 2 (1 lessons, 1 commands): nothing differs" in capsys.readouterr().out
    broken = {"lesson_01": "n = 4\n", "walk": "$ walk\n[status 2]\n"}
    write_snapshot(tmp_path / "c", "/srv/c", broken, {"lesson_01": 1, "walk": 2})
    assert snapshot.compare(tmp_path / "a", tmp_path / "c") == 1
    out = capsys.readouterr().out
    assert "lesson_01: status 0 before, 1 after" in out and "vanished 3\n             before: n = 3 in <time>" in out
    assert "-wrote <tmp>/walk/x" in out and "2 differ: lesson_01, walk" in out
    assert snapshot.compare(tmp_path / "a", tmp_path / "c", ["lesson_*"]) == 1
    assert capsys.readouterr().out.endswith("compared 1 (1 lessons, 0 commands): 1 differ: lesson_01\n")
