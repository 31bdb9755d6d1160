"""The one way the package and the lessons make a matplotlib picture: a Figure object, no window and no pyplot
state, so drawing works the same in a script, a notebook and a headless test."""
from __future__ import annotations


def figure(width: float = 6.4, height: float = 4.0):
    """A matplotlib Figure of width x height inches, laid out to fit; without matplotlib, a ModuleNotFoundError
    (name 'matplotlib') that says how to install it."""
    try:
        from matplotlib.figure import Figure
    except ModuleNotFoundError:
        raise ModuleNotFoundError("pictures need matplotlib: install the 'viz' extra, pip install -e '.[viz]' from "
                                  "the repository's root", name="matplotlib") from None
    return Figure(figsize=(width, height), layout="constrained")
