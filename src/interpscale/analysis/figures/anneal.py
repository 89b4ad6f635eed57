"""Figures 38 and 39: one family evaluated before and after its per-checkpoint anneal (App. I)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from interpscale.analysis.figures._fits import (
    DEFAULT_FIG_BOOT,
    SLICE_TOLERANCE,
    IsoflopSummary,
    isoflop_summary,
    require_power_laws,
)
from interpscale.analysis.figures._style import (
    METRIC_LABELS,
    compute_axis,
    family_label,
    legend_below,
    headline_estimator,
    new_figure,
    paper_style,
    require_columns,
    select,
)
from interpscale.analysis.figures.interp import METRICS, metrics_with_data, trend_label
from interpscale.scaling.trend import FLAT, fit_trend
from interpscale.analysis.figures.isoflop import ISOFLOP_COLUMNS, draw_isoflop_panel, draw_power_law_panels

STATE_LABELS = {False: "Pre-anneal", True: "Annealed"}
STATE_COLORS = {False: "#767676", True: "#D55E00"}  # grey and vermilion, both >= 3:1 on white
STATE_MARKERS = {False: "o", True: "s"}


def _state_rows(results: pd.DataFrame, family: str, figure: str, extra: Sequence[str] = ()) -> dict[bool, pd.DataFrame]:
    require_columns(results, (*ISOFLOP_COLUMNS, "annealed", *extra), figure)
    est = headline_estimator(results, family)
    out = {state: select(results, family=family, estimator=est, annealed=state) for state in (False, True)}
    pre = out[False]
    if {"run_id", "step"} <= set(pre.columns) and pre["run_id"].duplicated().any():
        # several stable checkpoints per run: the pre-anneal state is each run's last one (the
        # checkpoint its final anneal starts from, App. I)
        keys = ["run_id", "estimator"] if "estimator" in pre.columns else ["run_id"]
        out[False] = pre.sort_values("step").groupby(keys, dropna=False).tail(1)
    missing = [STATE_LABELS[s] for s, rows in out.items() if rows.empty]
    if missing:
        raise ValueError(f"{figure}: family {family!r} has no {' or '.join(missing).lower()} rows "
                         "(column 'annealed' must hold both False and True)")
    return out


def anneal_loss_figure(results: pd.DataFrame, *, family: str = "cdlm+concept", n_boot: int = DEFAULT_FIG_BOOT):
    """Figure 38: top row, per-slice parabolas pre-anneal and annealed; bottom row, L*(C)
    and P*(C) power laws of both states."""
    figure = "Figure 38 (anneal_loss_figure)"
    rows = _state_rows(results, family, figure)
    # pre-anneal checkpoints sit at ~80% of their slice's compute (WSD stable phase), so the
    # ±15% slice window applies to the annealed state only
    summaries: dict[bool, IsoflopSummary] = {
        s: isoflop_summary(r, n_boot=n_boot, tolerance=SLICE_TOLERANCE if s else None) for s, r in rows.items()}
    require_power_laws(summaries, figure, key=True)
    with paper_style():
        fig, axes = new_figure(2, 2, panel_height=1.9)
        for j, state in enumerate((False, True)):
            draw_isoflop_panel(axes[0, j], summaries[state], legend=(j == 0))
            axes[0, j].set_title(f"{family_label(family)}: {STATE_LABELS[state].lower()}")
        draw_power_law_panels(axes[1, 0], axes[1, 1], {STATE_LABELS[s]: summaries[s] for s in (False, True)},
                              {STATE_LABELS[s]: STATE_COLORS[s] for s in (False, True)},
                              markers={STATE_LABELS[s]: STATE_MARKERS[s] for s in (False, True)})
    return fig


def anneal_interp_figure(results: pd.DataFrame, *, family: str = "cdlm+concept", metrics: Sequence[str] = METRICS):
    """Figure 39: each metric vs compute in both states with its log-linear trend (Table 30's β =
    slope against log10 C; the legend says whether it rises, falls or shows no significant trend)."""
    figure = "Figure 39 (anneal_interp_figure)"
    rows = _state_rows(results, family, figure, extra=("flops", *metrics))
    metrics = metrics_with_data(results, [False, True], metrics, figure, min_rows=3, rows_of=rows.get)
    with paper_style():
        fig, axes = new_figure(1, len(metrics), panel_height=1.9)
        for ax, metric in zip(axes[0], metrics):
            for state, sub in rows.items():
                sub = sub[np.isfinite(sub[metric].astype(float))]
                if len(sub) < 3:
                    raise ValueError(f"{figure}: {STATE_LABELS[state].lower()} rows of {family!r} have "
                                     f"{len(sub)} finite {metric!r} values; need at least 3")
                c, y = sub["flops"].to_numpy(float), sub[metric].to_numpy(float)
                t = fit_trend(c, y, name=metric)  # Table 30's trend: least squares of m on log10 C, either way
                ax.scatter(c, y, s=10, color=STATE_COLORS[state], marker=STATE_MARKERS[state], linewidths=0)
                grid = np.geomspace(c.min(), c.max(), 50)
                flat = t.direction == FLAT
                ax.plot(grid, t.predict(grid), color=STATE_COLORS[state], lw=0.9 if flat else 1.1,
                        ls=":" if flat else "-", label=f"{STATE_LABELS[state]}: {trend_label(t)}")
            compute_axis(ax)
            ax.set_title(METRIC_LABELS.get(metric, metric))
            legend_below(ax, handlelength=1.5)
    return fig
