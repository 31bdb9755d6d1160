"""The rules the docs tests compare by (tests/docs/doc_examples.py) let through what a page may leave out, and
nothing else: a changed count, a missing line or an unclaimed print fails."""
import pytest

from doc_examples import Block, blocks, claim_matches, commands, lines_match, run_and_check

GENERATE = ["generate: 7 prompt tokens + 60 new (static KV cache); prefill 15.2 ms, decode 592.7 tokens/s"]


def test_a_measured_number_matches_any_number_and_a_count_only_itself():
    shown = ["generate: 7 prompt tokens + 60 new (static KV cache); prefill 3.9 ms, decode 139.6 tokens/s"]
    assert lines_match(shown, GENERATE)
    assert not lines_match([shown[0].replace("60 new", "61 new")], GENERATE)
    assert not lines_match([shown[0].replace("static", "growing")], GENERATE)
    assert not lines_match([shown[0].replace("3.9 ms", "3.9 s")], GENERATE)


def test_three_dots_stand_for_lines_or_text_left_out_and_nothing_more():
    printed = ["title", "a 1", "b 2", "c 3", "summary"]
    assert lines_match(["title", "...", "summary"], printed)
    assert lines_match(["title", "a 1", "...", "c 3", "summary", "..."], printed)
    assert lines_match(["title", "a ...", "...", "summary"], printed)
    assert not lines_match(["title", "...", "b 2"], printed)            # the last line shown must be the last
    assert not lines_match(["title", "...", "d 4", "..."], printed)     # a line shown must be printed
    assert not lines_match(["title", "a 2", "..."], printed)


def test_a_print_shows_its_output_then_may_explain_it():
    assert claim_matches("(32, 64): 2 KV heads of d_head 16", "(32, 64)")
    assert not claim_matches("(32, 64): 2 KV heads of d_head 16", "(32, 32)")
    assert claim_matches("program: 236 kernels for 282 primitives (...", "program: 236 kernels for 282 primitives (\n0")
    assert not claim_matches("program: 236 kernels (...", "program: 235 kernels (24 fused chains)")
    assert claim_matches("The assert statement ...: the prompt, continued", "The assert statement‹gn")


def run(code: str) -> None:
    run_and_check(Block("python", code, 1), {}, "page.md")


def test_every_print_is_claimed_and_every_claim_printed():
    run("print(1 + 1)   # 2\nfor i in range(2):\n    print(i % 1)   # 0")
    with pytest.raises(AssertionError, match="printed '3', shown '2'"):
        run("print(1 + 2)   # 2")
    with pytest.raises(AssertionError, match="a print without a comment"):
        run("print(2)")
    with pytest.raises(AssertionError, match=r"lines \[3\] show an output that was never printed"):
        run("x = 2\nif x > 2:\n    print(x)   # 3")


def test_blocks_and_commands_are_read_with_their_lines(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n```python\nprint(1)   # 1\n```\n\n- item\n\n  ```\n  $ python -m tinygrad_block presets "
                    "# all\n  presets: ...\n  ...\n\n  $ python tools/x.py --n 2\n  ```\n\n```sh\n# a comment\n"
                    "python tools/y.py --fast\n```\n")
    assert [(b.lang, b.line) for b in blocks(page)] == [("python", 4), ("", 10), ("sh", 18)]
    found = [(c.argv, c.shown, c.line) for c in commands(page)]
    assert found == [(["python", "-m", "tinygrad_block", "presets"], ["presets: ...", "..."], 10),
                     (["python", "tools/x.py", "--n", "2"], [], 14),
                     (["python", "tools/y.py", "--fast"], None, 19)]
