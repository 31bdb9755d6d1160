"""The README's graph images are current: regenerating their DOT gives the committed text, and each SVG draws
every node of its DOT."""
import importlib.util
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("render_readme_graphs", ROOT / "tools" / "render_readme_graphs.py")
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)


@pytest.fixture(scope="module")
def sources() -> dict:
    """The DOT text the script makes of each view (recorded once, by the worker that runs these tests)."""
    return script.dot_sources()


@pytest.mark.parametrize("name", list(script.VIEWS))
def test_committed_dot_is_what_the_script_makes(name, sources):
    committed = (script.IMAGES / f"{name}.dot").read_text()
    assert committed == sources[name], "regenerate with: python tools/render_readme_graphs.py"


@pytest.mark.parametrize("name", list(script.VIEWS))
def test_committed_svg_draws_every_node_of_the_dot(name, sources):
    svg = ET.parse(script.IMAGES / f"{name}.svg").getroot()
    titles = {el.text for el in svg.iter("{http://www.w3.org/2000/svg}title")}
    names = set(re.findall(r"^  (\w+) \[label=", sources[name], re.M))
    assert names and names <= titles
    assert f"docs/images/{name}.svg" in (ROOT / "README.md").read_text()
