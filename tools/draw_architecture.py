"""Draw the package's rooms on their floors, from the code's own imports: docs/images/architecture.png.

A room is a file of tinygrad_block/ (the folders nn/ and manual/ are one room each); an arrow A -> B means A
imports B (lazy imports inside functions included; an arrow that a longer way down implies is left out of the
picture, graphviz's `tred`). A room's floor is one above the highest room it imports, so
floor 1 imports nothing of ours, and every arrow runs down. An import circle has no floors: it is refused, naming it.

    python tools/draw_architecture.py                  # writes docs/images/architecture.png, prints the floors
    python tools/draw_architecture.py --out arch.svg   # any format graphviz's `dot` writes
"""
from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tinygrad_block"
FOLDERS = ("nn", "manual")                   # drawn as one room each


def room_of(path: Path) -> str:
    """'tensor.py', 'nn/' or 'manual/' for a file of the package."""
    parts = path.relative_to(PACKAGE).parts
    return f"{parts[0]}/" if parts[0] in FOLDERS else parts[0]


def module_of(path: Path) -> list[str]:
    """The dotted package path of a file's own package: tinygrad_block/nn/block.py -> ['tinygrad_block', 'nn']."""
    return list(path.relative_to(ROOT).with_suffix("").parts[:-1])


def imported_rooms(path: Path) -> set[str]:
    """The rooms a file imports: relative imports resolved against its package, absolute ones of tinygrad_block."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.ImportFrom):
            base = module_of(path)[:len(module_of(path)) - node.level + 1] if node.level else []
            dotted = base + (node.module.split(".") if node.module else [])
            targets = [dotted + [alias.name] for alias in node.names] if not node.module else [dotted]
        elif isinstance(node, ast.Import):
            targets = [alias.name.split(".") for alias in node.names]
        for dotted in targets:
            if dotted[:1] != ["tinygrad_block"] or len(dotted) < 2:
                continue
            candidate = PACKAGE.joinpath(*dotted[1:2])
            for file in (candidate.with_suffix(".py"), candidate / "__init__.py"):
                if file.exists():
                    found.add(room_of(file))
    return found


def house() -> tuple[dict[str, set[str]], dict[str, int], dict[str, str]]:
    """(arrows room -> rooms it imports, lines per room, first docstring line per room)."""
    arrows, lines, says = {}, {}, {}
    for path in sorted(PACKAGE.rglob("*.py")):
        room = room_of(path)
        if path.name == "__init__.py" and room not in {f"{f}/" for f in FOLDERS}:
            continue                                   # the package's face hands names on; it is not a room
        arrows.setdefault(room, set()).update(imported_rooms(path) - {room})
        lines[room] = lines.get(room, 0) + len(path.read_text().splitlines())
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        says.setdefault(room, doc.split("\n")[0])        # a folder: its __init__.py comes first, and speaks
    return arrows, lines, says


def floors(arrows: dict[str, set[str]]) -> dict[str, int]:
    """Each room's floor: 1 + the highest floor it imports. Raises ValueError on an import circle."""
    floor, visiting = {}, []

    def place(room: str) -> int:
        if room in floor:
            return floor[room]
        if room in visiting:
            circle = visiting[visiting.index(room):] + [room]
            raise ValueError("import circle: " + " -> ".join(circle))
        visiting.append(room)
        floor[room] = 1 + max((place(r) for r in arrows.get(room, ())), default=0)
        visiting.pop()
        return floor[room]

    for room in arrows:
        place(room)
    return floor


def dot_text(arrows, lines, says, floor) -> str:
    """The picture as DOT: one row per floor, the top floor first; a box's label says what the room does."""
    out = ["digraph rooms {", '  rankdir=TB; nodesep=0.25; ranksep=0.45; newrank=true;',
           '  node [shape=box, style="rounded,filled", fillcolor="#f3e6ea", color="#8a6d78", fontname="Helvetica",'
           ' fontsize=11];', '  edge [color="#7d8896", arrowsize=0.6];']
    for level in sorted(set(floor.values()), reverse=True):
        rooms = sorted(r for r in floor if floor[r] == level)
        out.append(f'  subgraph floor{level} {{ rank=same; "floor {level}" '
                   f'[shape=plaintext, style="", fontcolor="#777777"]; ' + " ".join(f'"{r}";' for r in rooms) + " }")
    levels = sorted(set(floor.values()), reverse=True)
    out += [f'  "floor {a}" -> "floor {b}" [style=invis];' for a, b in zip(levels, levels[1:])]
    for room in sorted(floor):
        summary = textwrap.shorten(says.get(room, ""), 60, placeholder=" ...")
        label = "\\n".join([f"{room}  ({lines[room]:,} lines)", *textwrap.wrap(summary, 30)]).replace('"', "'")
        out.append(f'  "{room}" [label="{label}"];')
    for room in sorted(arrows):
        out += [f'  "{room}" -> "{target}";' for target in sorted(arrows[room])]
    return "\n".join(out + ["}"]) + "\n"


def main(argv=None) -> int:
    args = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    args.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "architecture.png")
    out = args.parse_args(argv).out
    arrows, lines, says = house()
    try:
        floor = floors(arrows)
    except ValueError as err:
        print(f"draw_architecture: {err}", file=sys.stderr)
        return 1
    for level in sorted(set(floor.values())):
        print(f"floor {level}: " + ", ".join(sorted(r for r in floor if floor[r] == level)))
    fmt = out.suffix.lstrip(".") or "png"
    reduced = subprocess.run(["tred"], input=dot_text(arrows, lines, says, floor), text=True, capture_output=True,
                             check=True).stdout          # an arrow that a longer way down implies is not drawn
    subprocess.run(["dot", f"-T{fmt}", "-Gdpi=110", "-o", str(out)], input=reduced, text=True, check=True)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
