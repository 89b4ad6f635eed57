"""Figures 34-37: IsoFLOP fits under the four ELBO estimators and at fixed mask rates (App. H)."""

from __future__ import annotations

import logging
import math
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from interpscale.analysis.figures._fits import DEFAULT_FIG_BOOT, IsoflopSummary, isoflop_summary
from interpscale.analysis.figures._style import (
    ESTIMATOR_COLORS,
    ESTIMATOR_LABELS,
    annealed_if_any,
    new_figure,
    paper_style,
    require_columns,
    select,
)
from interpscale.analysis.figures.isoflop import (ISOFLOP_COLUMNS, draw_isoflop_panel, fmt_compute,
                                                  power_law_pair)

log = logging.getLogger("interpscale.analysis.figures")

ELBO_ESTIMATORS = ("fixed_rate", "fixed_grid", "mdlm_elbo", "per_block")


def estimator_summaries(results: pd.DataFrame, family: str, estimators: Sequence[str], *, n_boot: int,
                        figure: str) -> dict[str, IsoflopSummary]:
    """One IsoFLOP summary per estimator present for ``family`` (fixed_rate at t = 0.5)."""
    require_columns(results, (*ISOFLOP_COLUMNS, "estimator"), figure)
    out = {}
    for est in estimators:
        rows = select(results, family=family, estimator=est, annealed=annealed_if_any(results))
        if est == "fixed_rate" and "mask_rate" in rows.columns and rows["mask_rate"].notna().any():
            rows = rows[np.isclose(rows["mask_rate"].astype(float), 0.5)]  # App. H.1: tau = 0.5
        if rows.empty:
            log.info("%s: no %s rows for %s; estimator left out", figure, est, family)
            continue
        out[est] = isoflop_summary(rows, n_boot=n_boot)
    if len(out) < 2:
        raise ValueError(f"{figure}: needs rows under at least two estimators for family {family!r} "
                         f"(column 'estimator'); found {sorted(out) or 'none'}")
    return out


def estimator_isoflop_figure(results: pd.DataFrame, *, family: str = "cdlm", estimators: Sequence[str] = ELBO_ESTIMATORS,
                             n_boot: int = DEFAULT_FIG_BOOT):
    """Figure 34: top row, one panel per slice with every estimator's parabola overlaid;
    bottom row, one panel per estimator with all slices overlaid."""
    figure = "Figure 34 (estimator_isoflop_figure)"
    summaries = estimator_summaries(results, family, estimators, n_boot=n_boot, figure=figure)
    computes = sorted({s.compute for summ in summaries.values() for s in summ.slices})
    ncols = max(len(computes), len(summaries))
    with paper_style():
        fig, axes = new_figure(2, ncols, panel_height=1.7)
        for j, c in enumerate(computes):
            ax = axes[0, j]
            for est, summ in summaries.items():
                one = IsoflopSummary(slices=[s for s in summ.slices if s.compute == c])
                draw_isoflop_panel(ax, one, colors=[ESTIMATOR_COLORS[est]], legend=False)
                if ax.lines:
                    ax.lines[-1].set_label(ESTIMATOR_LABELS.get(est, est))
            ax.set_title(f"C = {fmt_compute(c)}")
        handles, labels = axes[0, 0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside upper center", ncol=len(labels))
        for j, (est, summ) in enumerate(summaries.items()):
            draw_isoflop_panel(axes[1, j], summ, legend=(j == 0))
            axes[1, j].set_title(ESTIMATOR_LABELS.get(est, est), color=ESTIMATOR_COLORS[est])
        for ax in list(axes[0, len(computes):]) + list(axes[1, len(summaries):]):
            ax.set_visible(False)
        for ax in axes[:, 1:].ravel():
            ax.set_ylabel("")
    return fig


def estimator_power_law_figure(results: pd.DataFrame, *, family: str = "cdlm", estimators: Sequence[str] = ELBO_ESTIMATORS,
                               n_boot: int = DEFAULT_FIG_BOOT):
    """Figure 35: (a) L*(C) and (b) P*(C) under each estimator."""
    figure = "Figure 35 (estimator_power_law_figure)"
    summaries = estimator_summaries(results, family, estimators, n_boot=n_boot, figure=figure)
    return power_law_pair({ESTIMATOR_LABELS.get(e, e): s for e, s in summaries.items()},
                          {ESTIMATOR_LABELS.get(e, e): ESTIMATOR_COLORS[e] for e in summaries}, figure)


def mask_rate_summaries(results: pd.DataFrame, family: str, *, n_boot: int, figure: str) -> dict[float, IsoflopSummary]:
    """One IsoFLOP summary per fixed mask rate t (rows with estimator fixed_rate and a mask_rate)."""
    require_columns(results, (*ISOFLOP_COLUMNS, "estimator", "mask_rate"), figure)
    rows = select(results, family=family, estimator="fixed_rate", annealed=annealed_if_any(results))
    rates = sorted(float(t) for t in rows["mask_rate"].dropna().unique())
    if len(rates) < 2:
        raise ValueError(f"{figure}: needs fixed_rate rows at two or more values of 'mask_rate' for "
                         f"family {family!r}; found {rates}")
    return {t: isoflop_summary(rows[np.isclose(rows["mask_rate"].astype(float), t)], n_boot=n_boot) for t in rates}


def _rate_colors(rates: Sequence[float]) -> dict[float, tuple]:
    cmap = plt.get_cmap("plasma")
    return {t: cmap(0.05 + 0.85 * i / max(len(rates) - 1, 1)) for i, t in enumerate(rates)}


def mask_rate_isoflop_figure(results: pd.DataFrame, *, family: str = "cdlm", n_boot: int = DEFAULT_FIG_BOOT):
    """Figure 36: one panel per fixed mask rate t, IsoFLOP parabolas of every slice, × minima."""
    figure = "Figure 36 (mask_rate_isoflop_figure)"
    summaries = mask_rate_summaries(results, family, n_boot=n_boot, figure=figure)
    ncols = 3 if len(summaries) > 4 else len(summaries)
    nrows = math.ceil(len(summaries) / ncols)
    with paper_style():
        fig, axes = new_figure(nrows, ncols, panel_height=1.6, width=7.0 if ncols > 2 else None)
        for k, (t, summ) in enumerate(summaries.items()):
            ax = axes.ravel()[k]
            draw_isoflop_panel(ax, summ, legend=(k == 0))
            ax.set_title(f"t = {t:g}")
            if k % ncols:
                ax.set_ylabel("")
        for ax in axes.ravel()[len(summaries):]:
            ax.set_visible(False)
    return fig


def mask_rate_power_law_figure(results: pd.DataFrame, *, family: str = "cdlm", n_boot: int = DEFAULT_FIG_BOOT):
    """Figure 37: (a) L*(C) and (b) P*(C) at each fixed mask rate (colour: t)."""
    figure = "Figure 37 (mask_rate_power_law_figure)"
    summaries = mask_rate_summaries(results, family, n_boot=n_boot, figure=figure)
    colors = _rate_colors(list(summaries))
    return power_law_pair({f"t={t:g}": s for t, s in summaries.items()},
                          {f"t={t:g}": c for t, c in colors.items()}, figure,
                          panel_height=2.4, legend_right=True, bands=False)

