"""Figure 25: interpretability metrics vs compute with Eq. 29 fits and 90% bootstrap bands (§8.3)."""

from __future__ import annotations

import logging
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from interpscale import paper
from interpscale.analysis.fit_status import trend_status
from interpscale.scaling.trend import FLAT, TrendFit, fit_trend
from interpscale.analysis.figures._fits import DEFAULT_FIG_BOOT, metric_fit
from interpscale.analysis.figures._style import (
    METRIC_LABELS,
    compute_axis,
    family_color,
    legend_below,
    family_label,
    main_rows,
    new_figure,
    paper_style,
    require_columns,
    slice_colors,
)

log = logging.getLogger("interpscale.analysis.figures")

METRICS = tuple(paper.INTERP_METRICS)
CONCEPT_FAMILIES = tuple(f for f, c in paper.PAPER_FAMILIES.items() if c.concept)  # ar+concept, cdlm+concept


def metric_rows(results: pd.DataFrame, family: str, metric: str, figure: str) -> pd.DataFrame:
    """The family's headline rows with a finite ``metric`` (ValueError when none)."""
    rows = main_rows(results, family)
    rows = rows[np.isfinite(rows[metric].astype(float))]
    if len(rows) < 4:
        raise ValueError(f"{figure}: family {family!r} has {len(rows)} rows with a finite {metric!r}; "
                         "Eq. 29 needs at least 4")
    return rows


def metrics_with_data(results: pd.DataFrame, families: Sequence[str], metrics: Sequence[str], figure: str,
                      *, min_rows: int = 4, rows_of=None) -> list[str]:
    """The metrics every family in ``families`` has at least ``min_rows`` finite values of
    (e.g. known concept alignment needs a judge and may not have been scored); the others
    are left out with a log line, and a ValueError is raised when none is left."""
    rows_of = rows_of or (lambda fam: main_rows(results, fam))
    keep, dropped = [], []
    for metric in metrics:
        counts = {fam: int(np.isfinite(rows_of(fam)[metric].astype(float)).sum()) for fam in families}
        (keep if min(counts.values()) >= min_rows else dropped).append(metric)
        if metric in dropped:
            log.info("%s: %s left out (finite values per family: %s)", figure, metric, counts)
    if not keep:
        raise ValueError(f"{figure}: no interpretability metric has {min_rows}+ finite values for "
                         f"{', '.join(map(str, families))} (columns {', '.join(metrics)} are empty)")
    return keep


def draw_metric_panel(ax, rows: pd.DataFrame, metric: str, fit, *, x_max: float | None = None,
                      open_markers: bool = False, line_color: str = "k") -> None:
    """Markers coloured by IsoFLOP slice, the fitted curve and its band out to ``x_max``."""
    slices = np.sort(rows["slice_flops"].unique())
    colors = dict(zip(slices, slice_colors(len(slices))))
    for c in slices:
        sub = rows[rows["slice_flops"] == c]
        kw = {"facecolors": "none", "edgecolors": colors[c]} if open_markers else {"color": colors[c]}
        ax.scatter(sub["flops"], sub[metric], s=12, linewidths=0.8, zorder=3, **kw)
    x = rows["flops"].to_numpy(float)
    grid = np.geomspace(x.min() / 1.2, (x_max or x.max()) * 1.2, 200)
    if trend_status(fit)[0] == "trend":
        ax.fill_between(grid, *fit.band(grid), color=line_color, alpha=0.15, lw=0)  # the curve's bootstrap band
        label = f"Eq. 29: β={fit.beta:.2f}, R²={fit.r2:.2f}"
        ax.plot(grid, fit.predict(grid), color=line_color, lw=1.1, label=label)
    else:  # Eq. 29 assumes the metric improves: where it is flat, draw what the data do instead
        draw_trend(ax, x, rows[metric].to_numpy(float), grid, metric, line_color)
    compute_axis(ax)
    ax.set_title(METRIC_LABELS.get(metric, metric))


def trend_label(t: TrendFit) -> str:
    """The legend of a log-linear trend: its direction and slope per decade of compute."""
    if t.direction == FLAT:
        return f"no significant trend ({t.slope:+.2g}/decade)"
    return f"{t.direction}: {t.slope:+.2g}/decade, R²={t.r2:.2f}"


def draw_trend(ax, compute: np.ndarray, metric: np.ndarray, grid: np.ndarray, name: str, color: str) -> None:
    """The log-linear trend of ``metric`` on log10 C (Table 30's form) with its confidence band,
    solid when the slope's interval excludes 0, dotted when it does not."""
    try:
        t = fit_trend(compute, metric, name=name)
    except ValueError as exc:  # e.g. one compute value: nothing to draw a line through
        log.info("%s: no trend line (%s)", name, exc)
        return
    g = grid[(grid >= compute.min()) & (grid <= compute.max())]
    ax.fill_between(g, *t.band(g), color=color, alpha=0.15, lw=0)
    flat = t.direction == FLAT
    ax.plot(g, t.predict(g), color=color, lw=0.9 if flat else 1.1, ls=":" if flat else "--", label=trend_label(t))


def interp_scaling_figure(results: pd.DataFrame, *, fits: Mapping | None = None,
                          families: Sequence[str] = CONCEPT_FAMILIES, metrics: Sequence[str] = METRICS,
                          n_boot: int = DEFAULT_FIG_BOOT):
    """Figure 25: rows = +Concept families, columns = metrics; markers coloured by slice,
    Eq. 29 fit (e ± A C^-β) with its shaded 90% bootstrap band. Metric columns that hold no
    values (e.g. an unscored judge metric) are left out of the grid."""
    figure = "Figure 25 (interp_scaling_figure)"
    require_columns(results, ("family", "slice_flops", "flops", *metrics), figure)
    fams = [f for f in families if f in set(results["family"])]
    if not fams:
        raise ValueError(f"{figure}: none of the families {list(families)} is in the results table")
    metrics = metrics_with_data(results, fams, metrics, figure)
    with paper_style():
        fig, axes = new_figure(len(fams), len(metrics), panel_height=1.75)
        for i, fam in enumerate(fams):
            for j, metric in enumerate(metrics):
                rows = metric_rows(results, fam, metric, figure)
                fit = metric_fit(fits, fam, metric, rows, n_boot=n_boot)  # the report's fit when given
                draw_metric_panel(axes[i, j], rows, metric, fit, line_color=family_color(fam))
                legend_below(axes[i, j], handlelength=1.5)
                if j == 0:
                    axes[i, j].set_ylabel(family_label(fam))
                if i < len(fams) - 1:
                    axes[i, j].set_xlabel("")
    return fig
