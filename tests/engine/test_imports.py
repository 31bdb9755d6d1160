"""The package's imports run one way: no module imports, directly or through others, a module that imports it.
Oracle: the import statements themselves, read with `ast` (lazy imports inside functions count too)."""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "tinygrad_block"


def imports_of(path: Path) -> set[str]:
    """Dotted names of the package's modules that `path` imports anywhere in its body."""
    here = path.relative_to(PACKAGE.parent).with_suffix("").parts
    package = here[:-1] if path.name != "__init__.py" else here[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - node.level + 1]
            target = ".".join(base + tuple(filter(None, (node.module or "").split("."))))
            found.add(target) if node.module else found.update(f"{target}.{a.name}" for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tinygrad_block"):
            found.add(node.module)
    return found


def module_graph() -> dict[str, set[str]]:
    modules = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): p
               for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in imports_of(path) if m in modules and m != name} for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle, each as the path that closes it (depth-first search; packages' __init__ excluded,
    since importing a submodule runs its package's __init__ by design)."""
    found, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if nxt.count(".") == 0 or nxt == "tinygrad_block.nn":   # package __init__ files
                continue
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_no_module_imports_one_that_imports_it():
    assert cycles(module_graph()) == []


def test_the_core_layers_build_upward():
    g = module_graph()
    core = lambda m: {x.removeprefix("tinygrad_block.") for x in g[f"tinygrad_block.{m}"]}  # noqa: E731
    assert core("trace") == set()
    assert core("function") == {"trace"}
    assert core("index") == {"dtypes", "function", "trace"}           # trace.derive: a replay redoes the index check
    assert core("dtypes") == core("generator") == set()             # numpy's dtypes and the seeded generator
    assert core("backend") == {"dtypes", "generator"}
    assert core("autograd") <= {"trace", "function"}
    assert "tensor" not in core("function") | core("autograd") | core("index") | core("backend")


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}}) == [["p.a", "p.b", "p.c", "p.a"]]


def test_the_architecture_picture_places_every_room_above_what_it_imports():
    """tools/draw_architecture.py (the picture in docs/architecture.md) puts each room one floor above the highest
    room it imports, and names a circle instead of drawing one."""
    from tools import draw_architecture as arch
    arrows, lines, _ = arch.house()
    floor = arch.floors(arrows)
    assert all(floor[room] > floor[target] for room, targets in arrows.items() for target in targets)
    assert floor["trace.py"] == 1 and floor["cli.py"] == max(floor.values()) - 1 and lines["nn/"] > 1000
    assert arrows["manual/"] >= {"device.py"} and "accounting.py" not in arrows["nn/"]     # nn never reaches up
    with pytest.raises(ValueError, match="import circle: a.py -> b.py -> a.py"):
        arch.floors({"a.py": {"b.py"}, "b.py": {"a.py"}})


# The engine, the devices' backends and nn are what a first example needs; the explorer page, the compiler and
# everything the commands measure load when first used.
FIRST_EXAMPLE = {"", "autograd", "backend", "cpu_kernels", "cuda", "cuda_kernels", "device", "dtypes", "function",
                 "files", "generator", "gradcheck", "index", "kernels", "optim", "strict", "tensor", "trace", "nn",
                 "nn.attention", "nn.block", "nn.cache", "nn.config", "nn.decode", "nn.layers", "nn.model",
                 "nn.module", "nn.moe", "nn.tiled"}


def loaded_after(code: str) -> set[str]:
    """The package's modules loaded in a fresh interpreter after `code`, named relative to the package."""
    import json
    import subprocess
    import sys
    probe = (f"import sys, json\n{code}\n"
             "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'tinygrad_block')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return {m.removeprefix("tinygrad_block").removeprefix(".") for m in json.loads(out)}


def test_import_tinygrad_block_loads_the_engine_and_nn_alone():
    assert loaded_after("import tinygrad_block") == FIRST_EXAMPLE


def test_the_explorer_and_the_compiler_load_when_first_used():
    assert {"compiled", "fuse"} <= loaded_after("import tinygrad_block as tb; tb.jit") - FIRST_EXAMPLE
    after = loaded_after("import tinygrad_block as tb; assert callable(tb.explore)")
    assert {"explorer_page", "graph", "compiled"} <= after and "measure" not in after
    with pytest.raises(Exception, match="no attribute 'explorer'"):
        import tinygrad_block
        _ = tinygrad_block.explorer


def test_the_architecture_page_lists_every_room_on_its_floor_and_every_file_it_names_exists():
    """docs/architecture.md's floor table names each room once, on the floor the picture computes; every path in
    its 'where does my change go' table is there."""
    import re
    from tools import draw_architecture as arch
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    floor = arch.floors(arch.house()[0])
    listed = {}
    for row in re.findall(r"^\| (\d+)(?:-\d+)? \| (.*?) \|", text, flags=re.M):
        for room in re.findall(r"`([\w/]+(?:\.py)?)`", row[1]):
            listed[room] = int(row[0])
    assert listed == {room: f for room, f in floor.items()} | {r: listed[r] for r in ("cli.py", "__main__.py")}
    where = text[text.index("## Where does my change go"):]
    named = {p.replace("NN_slug", "01_tensors_and_the_graph").replace("NN", "01")       # a pattern: lesson 01
             for p in re.findall(r"`((?:[\w]+/)*[\w]+\.py)`", where)}
    assert len(named) > 15
    missing = [p for p in named if not any((PACKAGE.parent / base / p).exists() for base in ("", "tinygrad_block"))]
    assert missing == [], missing
