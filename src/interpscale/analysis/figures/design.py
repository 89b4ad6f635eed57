"""The design figure (``interpscale design``, docs/design.md): what each grid tried would answer
against its total compute, the planned and the recommended grid marked. Numbers in, no fits."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from interpscale.analysis.figures._style import new_figure, paper_style


def design_figure(compute: Sequence[float], value: Sequence[float], *, labels: Sequence[str], ylabel: str,
                  target: float | None = None, planned: tuple[float, float] | None = None,
                  recommended: tuple[float, float] | None = None, higher_is_better: bool = True):
    """Power (or interval half-width) of each grid tried against its total FLOPs; ``target`` a
    horizontal line, ``planned`` / ``recommended`` (compute, value) marked."""
    C, y = np.asarray(compute, float), np.asarray(value, float)
    if C.size != y.size or C.size != len(labels):
        raise ValueError("design figure: compute, value and labels must have one entry per grid")
    with paper_style():
        fig, axes = new_figure(1, 1, panel_height=2.4)
        ax = axes[0, 0]
        ok = np.isfinite(C) & np.isfinite(y)
        ax.plot(C[ok], y[ok], "o", color="0.35", ms=4, label="grids tried")
        for c, v, lab in zip(C[ok], y[ok], np.asarray(labels, object)[ok]):
            ax.annotate(lab, (c, v), textcoords="offset points", xytext=(3, 3), fontsize=5.5, color="0.3")
        if target is not None:
            ax.axhline(target, ls="--", color="0.5", lw=0.8, label=f"target {target:g}")
        for point, marker, color, name in ((planned, "s", "tab:blue", "planned"),
                                           (recommended, "*", "tab:red", "recommended")):
            if point is not None and all(np.isfinite(point)):
                ax.plot(*point, marker, color=color, ms=9 if marker == "*" else 6, label=name, zorder=3)
        drawn = ok.any() or any(p is not None and all(np.isfinite(p)) for p in (planned, recommended))
        if not drawn and np.isfinite(C).any():  # every value unbounded (no interval): say so, keep the axes
            ax.set_xlim(np.nanmin(C[np.isfinite(C)]) / 2, np.nanmax(C[np.isfinite(C)]) * 2)
            ax.text(0.5, 0.5, "no grid tried has a finite value", transform=ax.transAxes, ha="center",
                    fontsize=7, color="0.3")
        ax.set(xscale="log", xlabel="total compute of the sweep (FLOPs)", ylabel=ylabel)
        if higher_is_better:
            ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=6, loc="best")
    return fig
