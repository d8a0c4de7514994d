"""The tightness figure (MATH.md section 5): bounds against N on a log axis with a log N - log log N reference."""

from __future__ import annotations

import math
import os

from ._tightness import TightnessRow

STYLES = {"paper": ("tab:red", "--"), "factorised": ("tab:green", "-."), "castin": ("tab:red", "--")}


def plot_tightness(rows: list[TightnessRow], stem: str) -> list[str]:
    """Write ``stem``.png and ``stem``.svg (one panel per norm); returns the paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    norms = sorted({r.norm for r in rows}, key=lambda n: n != "inf")
    fig, axes = plt.subplots(1, len(norms), figsize=(5.2 * len(norms), 4.0), squeeze=False)
    by_radius = rows[0].radius is not None
    for ax, norm in zip(axes[0], norms):
        part = [r for r in rows if r.norm == norm]
        x = [r.radius if by_radius else r.N for r in part]
        ax.plot(x, [r.lower for r in part], "o-", color="tab:blue", label="lower bound (adversarial)")
        if any(r.naive is not None for r in part):
            ax.plot(x, [r.naive for r in part], "s:", color="tab:gray", label="naive search, same time")
        for name in sorted({n for r in part for n in r.uppers}):
            color, style = STYLES.get(name, ("black", ":"))
            ax.plot(x, [r.uppers.get(name, math.nan) for r in part], style, color=color, marker=".",
                    label=f"{name} (certified upper)")
        if not by_radius and len(part) >= 2:
            reference = [math.log(n) - math.log(math.log(n)) for n in x]
            scale = part[-1].lower / reference[-1]
            ax.plot(x, [scale * v for v in reference], ":", color="black", alpha=0.6,
                    label=f"{scale:.2f} (log N - log log N)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("ball radius R (every token ||x_i|| <= R)" if by_radius else "sequence length N")
        ax.set_ylabel(f"Lipschitz constant, {norm}-norm")
        config = part[0].config
        suffix = f", N = {part[0].N}" if by_radius else ""
        ax.set_title(f"{config}{suffix}: {norm}-norm")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(stem)), exist_ok=True)
    paths = [f"{stem}.png", f"{stem}.svg"]
    for path in paths:
        fig.savefig(path, dpi=110)
    plt.close(fig)
    return paths
