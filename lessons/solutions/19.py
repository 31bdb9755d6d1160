"""Lesson 19 exercises: reference solutions."""


def differentiating_ops(data: dict, forward_id: str) -> list:
    """Every backward op names the forward op it came from (`source`); the sums name whose gradient they gather,
    so they are left out. Sorted by `order`, the order the stepper reaches them."""
    mine = [n for n in data["nodes"] if n["phase"] == "backward" and n.get("source") == forward_id
            and n["origin"] != "accumulate"]
    return [n["id"] for n in sorted(mine, key=lambda n: n["order"])]


def heaviest_module(data: dict, phase: str, depth: int) -> tuple:
    """The modules at `depth` in the tree; each one's total counts everything it holds (a fold: every layer)."""
    modules = data["modules"]
    paths = [p for p, m in modules.items() if m["depth"] == depth]
    best = max(paths, key=lambda p: modules[p]["total"]["flops"][phase])
    return best, modules[best]["total"]["flops"][phase]
