"""The explorer page's own files (tinygrad_block/explorer/: template, script, style, Viz.js) where an install lacks
one: named as the package's file, with the install said to be incomplete; never blamed on the page's --out path."""
import importlib
import shutil

import pytest

import tinygrad_block as tb
from tinygrad_block import nn

explore = importlib.import_module("tinygrad_block.explorer_page")

ASSETS = ("template.html", "explorer.js", "explorer.css", "viz-global.js")


@pytest.fixture
def lacking(tmp_path, monkeypatch):
    """lacking(name): the package's explorer folder, as an install without `name` would have it."""
    def _lacking(name: str):
        folder = tmp_path / "explorer"
        shutil.copytree(explore.ASSETS, folder)
        (folder / name).unlink()
        monkeypatch.setattr(explore, "ASSETS", folder)
    return _lacking


def test_the_package_holds_every_file_the_page_reads():
    assert sorted(p.name for p in explore.ASSETS.iterdir() if p.suffix in (".html", ".js", ".css")) == sorted(ASSETS)


@pytest.mark.parametrize("name", ASSETS)
def test_explore_names_the_missing_package_file(lacking, tmp_path, name):
    lacking(name)
    block = nn.Linear(4, 3, generator=tb.Generator(0))
    with pytest.raises(explore.MissingAsset) as caught:
        tb.explore(block, tb.ones(2, 4))
    said = str(caught.value)
    assert f"package file tinygrad_block/explorer/{name} cannot be read (No such file or directory" in said
    assert "install of tinygrad_block is incomplete" in said
    assert not any(other in said for other in ASSETS if other != name)


def test_graph_html_names_the_missing_file_not_the_out_path(lacking, tmp_path, command_line):
    lacking("template.html")
    err = command_line.mistake("graph", "--preset", "tiny", "--out", tmp_path / "x.html")
    assert len(err.strip().splitlines()) == 1
    assert "explorer/template.html cannot be read" in err and "incomplete" in err
    assert "--out" not in err and "cannot write" not in err and not (tmp_path / "x.html").exists()


def test_the_tour_names_the_missing_file_in_one_line(lacking, tmp_path, command_line):
    lacking("viz-global.js")
    err = command_line.mistake("tour", "--out-dir", tmp_path / "tour")
    assert err.count("\n") == 1 and "explorer/viz-global.js cannot be read" in err and "incomplete" in err
