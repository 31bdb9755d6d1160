"""Where a clone of the repository keeps the course: its lessons/ folder, beside this package when the package is
installed from the clone (pip install -e .). A wheel installs the package alone, with no lessons/ beside it; what
reads this (the course commands of the command line, the explorer page's links to the lessons) says so or does
without. The one place the package names that folder, and the one way a file of it is loaded: by path."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

LESSONS = Path(__file__).resolve().parent.parent / "lessons"


def load_file(name: str, path: Path, package_folder: Path | None = None) -> ModuleType:
    """The Python file at `path` as module `name` in sys.modules (a package over `package_folder` when given), run
    once: a second call for the same name and file returns the module already there."""
    module = sys.modules.get(name)
    if module is not None and getattr(module, "__file__", None) == str(path):
        return module
    search = {"submodule_search_locations": [str(package_folder)]} if package_folder else {}
    spec = importlib.util.spec_from_file_location(name, path, **search)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
