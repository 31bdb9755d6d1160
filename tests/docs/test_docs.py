"""Every example of docs/*.md runs and shows what it prints (the conventions: tests/docs/doc_examples.py).

A page's python blocks run in order in one namespace, in a fresh folder (the files they write land there); a block
marked `# needs a GPU` runs alone, where there is one. Each `$ python -m tinygrad_block ...` line with the output
shown under it runs in this process, and the output is compared line by line. Training runs and the tools (benchmarks,
profiles, a checkpoint trained for 1,000 steps) take seconds to minutes and print measurements: their command lines
are checked to parse (a tool's `--help` runs and names every option the page gives it), not run."""
import contextlib
import functools
import io
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import needs_gpu
from doc_examples import Block, Command, blocks, commands, lines_match, needs_gpu as block_needs_gpu, \
    python_blocks, run_and_check, trimmed

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PYTHONS = ("python", "python3", ".venv/bin/python")
LONG = {"train": "a training run takes seconds to minutes, and its lines are timed (tests/train runs the demos)"}


@pytest.fixture(scope="session")
def llama_demo(tmp_path_factory) -> Path:
    """tools/make_llama_folder.py's folder, untrained (the page's is trained for 1,000 steps: minutes): the same
    config, tokenizer and shapes, so all the page shows but the sampled text is the same."""
    from tools.make_llama_folder import write_llama_folder
    with contextlib.redirect_stderr(io.StringIO()):        # its progress bars: not the output of the test that asks
        return write_llama_folder(tmp_path_factory.mktemp("docs") / "llama-demo", steps=0)


FOLDERS = {"/tmp/llama-demo": "llama_demo"}        # a folder a page names -> the fixture that makes one like it


def made_folders(doc: Path, request) -> dict[str, str]:
    """{a folder the page names: the one the tests made in its place}."""
    text = doc.read_text()
    return {path: str(request.getfixturevalue(fixture)) for path, fixture in FOLDERS.items() if path in text}


def moved(text: str, folders: dict[str, str]) -> str:
    for path, made in folders.items():
        text = text.replace(path, made)
    return text


def cli_args(argv: list[str]) -> list[str] | None:
    """The arguments of a `python -m tinygrad_block ...` (or `tinygrad-block ...`) command; None for another."""
    if argv[:1] == ["tinygrad-block"]:
        return argv[1:]
    return argv[3:] if argv[:1] and argv[0] in PYTHONS and argv[1:3] == ["-m", "tinygrad_block"] else None


def tool(argv: list[str]) -> str | None:
    """The script of a `python tools/NAME.py ...` command; None for another."""
    return argv[1] if len(argv) > 1 and argv[0] in PYTHONS and argv[1].startswith("tools/") else None


def kind_of(command: Command) -> str | None:
    """'run' (a command of ours shown with its output: run, and the output compared), 'parse' (one shown without
    it, or a long one: its arguments are checked), 'tool' (`python tools/...`), or None (another program's)."""
    args = cli_args(command.argv)
    if args is not None:
        return "run" if command.shown and args and args[0] not in LONG else "parse"
    return "tool" if tool(command.argv) else None


def examples(kind: str) -> list:
    """pytest params (page, command) of the commands of one kind, named page:line."""
    return [pytest.param(doc, command, id=f"{doc.name}:{command.line}")
            for doc in DOCS for command in commands(doc) if kind_of(command) == kind]


# ---------------------------------------------------------------- python blocks
PAGES = [pytest.param(doc, id=doc.name) for doc in DOCS if python_blocks(doc)]
GPU_PAGES = [pytest.param(doc, id=doc.name) for doc in DOCS if any(map(block_needs_gpu, python_blocks(doc)))]


@pytest.mark.parametrize("doc", PAGES)
def test_python_examples_run_in_order_and_print_what_they_show(doc, tmp_path, monkeypatch, request):
    monkeypatch.chdir(tmp_path)
    folders, namespace = made_folders(doc, request), {}
    for block in python_blocks(doc):
        if not block_needs_gpu(block):
            run_and_check(Block(block.lang, moved(block.text, folders), block.line), namespace, str(doc))


@needs_gpu
@pytest.mark.parametrize("doc", GPU_PAGES)
def test_gpu_python_examples_each_run_alone_and_print_what_they_show(doc, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for block in filter(block_needs_gpu, python_blocks(doc)):
        run_and_check(block, {}, str(doc))


# ---------------------------------------------------------------- commands
@pytest.mark.parametrize("doc, command", examples("run"))
def test_command_prints_what_the_page_shows(doc, command: Command, command_line, tmp_path, monkeypatch, request):
    monkeypatch.chdir(tmp_path)
    folders = made_folders(doc, request)
    shown = [moved(line, folders) for line in command.shown]
    status, out, err = command_line.status(*(moved(a, folders) for a in cli_args(command.argv)))
    printed = trimmed(out.splitlines() + err.splitlines())
    assert status == (2 if any(": error: " in line for line in shown) else 0), (str(command), status, err)
    assert lines_match(shown, printed), f"{doc.name} {command}\nshown:\n" + "\n".join(shown) + \
        "\nprinted:\n" + "\n".join(printed)


@pytest.mark.parametrize("doc, command", examples("parse"))
def test_long_command_parses(doc, command: Command, capsys):
    from tinygrad_block import cli
    try:
        cli.parser().parse_args(cli_args(command.argv))
    except SystemExit as e:
        pytest.fail(f"{doc.name} {command}: {capsys.readouterr().err.strip()} (status {e.code})")


@functools.cache
def tool_helps() -> dict[str, subprocess.Popen]:
    """`python tools/NAME.py --help` of every tool the pages name, all started at once (one that imports torch takes
    seconds to start)."""
    scripts = sorted({tool(c.argv) for doc in DOCS for c in commands(doc)} - {None})
    return {s: subprocess.Popen([sys.executable, s, "--help"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for s in scripts if (ROOT / s).is_file()}


@functools.cache
def tool_help(script: str) -> str:
    out, err = tool_helps()[script].communicate(timeout=300)
    assert tool_helps()[script].returncode == 0, (script, err)
    return out


@pytest.mark.parametrize("doc, command", examples("tool"))
def test_tool_command_starts_and_takes_the_options_the_page_gives_it(doc, command: Command):
    script, words = tool(command.argv), command.argv[2:]
    assert (ROOT / script).is_file(), f"{doc.name} {command}: no {script}"
    helped = tool_help(script)
    named = [w.split("=")[0] for w in words if w.startswith("--")] + [w for w in words[:1] if not w.startswith("-")]
    missing = [w for w in named if w not in helped]
    assert not missing, f"{doc.name} {command}: {script} --help does not name {missing}"


def looks_like_a_command(line: str) -> bool:
    """`python -m tinygrad_block CMD ...` or `python tools/...` (not an output line: `... generate: error: ...`)."""
    words = line.split()
    return bool(words) and (cli_args(words) is not None and not (words[3:4] and words[3].endswith(":"))
                            or tool(words) is not None)


@pytest.mark.parametrize("doc", [pytest.param(doc, id=doc.name) for doc in DOCS])
def test_every_command_in_an_output_block_is_marked_with_a_dollar(doc):
    """A command line in a plain block without its `$` would be read as output and never checked."""
    unmarked = [f"{doc.name}:{block.line + i}: {line}" for block in blocks(doc) if block.lang in ("", "console", "text")
                for i, line in enumerate(block.text.splitlines()) if looks_like_a_command(line)]
    assert not unmarked, "\n".join(unmarked)


def test_the_docs_examples_are_found():
    """The pages hold the examples these tests run: a parser that found none would pass them all."""
    assert len(DOCS) >= 10 and len(PAGES) >= 7
    assert sum(len(python_blocks(doc)) for doc in DOCS) >= 12
    assert len(examples("run")) >= 6 and len(examples("parse")) >= 4 and len(examples("tool")) >= 8
