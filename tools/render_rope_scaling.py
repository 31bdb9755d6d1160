"""Draw Llama 3.1's RoPE frequencies before and after its 'llama3' scaling (factor 8, low_freq_factor 1,
high_freq_factor 4, original context 8,192, theta 500,000, d_head 128), as nn.rope_frequencies computes them:
pairs turning faster than once per 2,048 tokens keep their frequency, those slower than once per 8,192 are
slowed 8 times, the band between is blended. Saves docs/images/llama3_rope_scaling.png.

    python tools/render_rope_scaling.py
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from tinygrad_block import nn  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "docs" / "images" / "llama3_rope_scaling.png"
D_HEAD, THETA = 128, 500000.0
FACTOR, LOW, HIGH, CONTEXT = 8.0, 1.0, 4.0, 8192
SCALING = ("llama3", FACTOR, LOW, HIGH, CONTEXT)


def frequencies() -> tuple[list[float], list[float], list[float]]:
    """(wavelength in tokens before scaling, inv_freq before, inv_freq after) of each of the 64 pairs."""
    before = nn.rope_frequencies(D_HEAD, THETA).numpy().tolist()
    after = nn.rope_frequencies(D_HEAD, THETA, SCALING).numpy().tolist()
    return [2 * math.pi / f for f in before], before, after


def regions(wavelengths: list[float]) -> dict[str, int]:
    """Pairs kept (wavelength < CONTEXT / HIGH), blended (between) and divided (> CONTEXT / LOW)."""
    kept = sum(w < CONTEXT / HIGH for w in wavelengths)
    divided = sum(w > CONTEXT / LOW for w in wavelengths)
    return {"kept": kept, "interpolated": len(wavelengths) - kept - divided, "divided": divided}


def draw(path: Path = OUT) -> Path:
    """The two curves against the unscaled wavelength (both axes log), the thresholds, the three regions."""
    wavelength, before, after = frequencies()
    high_wl, low_wl = CONTEXT / HIGH, CONTEXT / LOW                          # 2,048 and 8,192 tokens
    fig, ax = plt.subplots(figsize=(9, 5.2))
    ax.axvspan(high_wl, low_wl, color="tab:orange", alpha=0.12, lw=0)
    ax.axvspan(low_wl, wavelength[-1] * 2, color="tab:red", alpha=0.07, lw=0)
    ax.plot(wavelength, before, "o-", ms=3, color="tab:blue", label="before: theta^(-2i/128)")
    ax.plot(wavelength, after, "s-", ms=3, color="tab:red", label="after 'llama3' scaling")
    thresholds = ((high_wl, 1e-6, -5, "right", "8192 / high_freq_factor\n= 2,048 tokens"),     # left of its line
                  (low_wl, 3e-8, 5, "left", "8192 / low_freq_factor\n= 8,192 tokens"))        # right of its line
    for x, y, dx, ha, text in thresholds:
        ax.axvline(x, color="0.3", ls="--", lw=1)
        ax.annotate(text, (x, y), xytext=(dx, 0), textcoords="offset points", ha=ha, fontsize=8, color="0.25")
    n = regions(wavelength)
    for x, text in ((math.sqrt(wavelength[0] * high_wl), f"kept\n({n['kept']} pairs)"),
                    (math.sqrt(high_wl * low_wl), f"interpolated\n({n['interpolated']})"),
                    (math.sqrt(low_wl * wavelength[-1]), f"divided by 8\n({n['divided']} pairs)")):
        ax.text(x, 2.2, text, ha="center", va="top", fontsize=10, weight="bold")
    ax.set(xscale="log", yscale="log", xlim=(wavelength[0] / 1.6, wavelength[-1] * 1.6), ylim=(1e-8, 4),
           xlabel="wavelength before scaling, 2 pi / inv_freq (tokens)", ylabel="inverse frequency (radians per token)",
           title="Llama 3.1 RoPE: d_head 128, theta 500,000, factor 8, original context 8,192")
    ax.legend(loc="lower left", fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path


if __name__ == "__main__":
    w, _, _ = frequencies()
    print("pairs per region:", regions(w))
    print("wrote", draw())
