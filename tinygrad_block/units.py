"""Numbers in human units, formatted in one place: 6.74 B parameters, 1.23 GFLOPs, 25.00 GiB (the commands'
tables, the drawn graphs' boxes)."""
from __future__ import annotations


def human(n: float, units=("", " K", " M", " B", " T", " P", " E"), base: int = 1000) -> str:
    """6738415616 -> '6.74 B'; with binary units, 26843545600 -> '25.00 GiB'."""
    i = 0
    while abs(n) >= base and i < len(units) - 1:
        n, i = n / base, i + 1
    return f"{n:,.0f}{units[0]}" if i == 0 else f"{n:,.2f}{units[i]}"


def human_bytes(n: int) -> str:
    """26843545600 -> '25.00 GiB'."""
    return human(n, (" B", " KiB", " MiB", " GiB", " TiB", " PiB"), 1024)


def human_flops(n: int) -> str:
    """1 -> '1 FLOP', 532 -> '532 FLOPs', 1234567 -> '1.23 MFLOPs'."""
    return "1 FLOP" if n == 1 else human(n, (" FLOPs", " kFLOPs", " MFLOPs", " GFLOPs", " TFLOPs", " PFLOPs"))
