"""Figure 21: concept-module share of total parameters vs backbone size (§8.1)."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from interpscale import paper
from interpscale.analysis.figures._style import family_color, new_figure, paper_style
from interpscale.errors import UserError

STEERLING_BACKBONE = float(paper.STEERLING_8B["params"])  # §8.2.2: Steerling-8B


def paper_size_params() -> dict[str, tuple[float, float]]:
    """size -> (backbone P, +Concept total P) for Table 23's sizes: the printed backbone P plus
    the concept module's count (``paper.concept_module_params``, Eq. 24's heads). Numbers in,
    no models built: pass your own ``sizes`` to :func:`concept_overhead_figure` for other zoos."""
    return {s: (float(p), float(p + paper.concept_module_params(d))) for s, (_, d, p, _) in paper.TABLE23.items()}


def concept_overhead_figure(sizes: Mapping[str, tuple[float, float]] | None = None, *,
                            extrapolate_to: float = 1e12):
    """Concept-module fraction of the +Concept total per backbone preset; the dashed trend: the
    module is O(d) (§8.1) while P grows like d²L, so its size c is a power law in P fitted on
    the presets, overhead(P) = c(P) / (c(P) + P)."""
    sizes = dict(paper_size_params() if sizes is None else sizes)
    if len(sizes) < 2:
        raise UserError("Figure 21 (concept_overhead_figure) needs at least two sizes")
    names = sorted(sizes, key=lambda s: sizes[s][0])
    backbone, total = np.array([sizes[s] for s in names], dtype=float).T
    if (backbone <= 0).any() or (total < backbone).any():
        bad = names[int(np.flatnonzero((backbone <= 0) | (total < backbone))[0])]
        raise UserError(f"Figure 21: size {bad!r} needs 0 < backbone <= total params, got {sizes[bad]}")
    module = total - backbone
    frac = module / total
    q, log_k = np.polyfit(np.log(backbone), np.log(module), 1)  # c(P) = k P^q (q ≈ 1/3 when L grows with d)
    overhead = lambda p: 100 * (np.exp(log_k) * p**q) / (np.exp(log_k) * p**q + p)  # noqa: E731  (%)
    grid = np.logspace(np.log10(backbone.min()), np.log10(max(extrapolate_to, backbone.max())), 200)
    with paper_style():
        fig, axes = new_figure(1, 1, panel_height=2.2)
        ax = axes[0, 0]
        color = family_color("cdlm+concept")
        ax.plot(grid, overhead(grid), "--", color="0.45", lw=1.0, label="trend (module ∝ d)")
        ax.plot(backbone, 100 * frac, "o-", color=color, label="Table 23 backbones")
        for name, x, y in zip(names, backbone, frac):
            if name in (names[0], names[-1]):
                ax.annotate(f"{name}: {100 * y:.0f}%", (x, 100 * y), textcoords="offset points",
                            xytext=(6, 2) if name == names[0] else (-4, 9), fontsize=6.5,
                            ha="left" if name == names[0] else "right")
        share8 = overhead(STEERLING_BACKBONE)
        ax.plot([STEERLING_BACKBONE], [share8], "*", ms=9, color="k", label=f"Steerling-8B ({share8:.0f}%)")
        ax.set(xscale="log", ylim=(0, 100), xlabel="Backbone non-embedding parameters P",
               ylabel="Concept module share of params (%)", title="Concept-module parameter overhead")
        ax.legend(loc="upper right")
    return fig
