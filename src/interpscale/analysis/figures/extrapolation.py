"""Figures 24 and 26: extrapolating small-scale fits to a target run (Steerling-8B, §8.2.2, §8.3.2)."""

from __future__ import annotations

import logging
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from interpscale.scaling import extrapolate
from interpscale.analysis.figures._fits import (
    DEFAULT_FIG_BOOT,
    bounded_fit,
    chinchilla_fit,
    curve_band,
    isoflop_summary,
    require_power_laws,
)
from interpscale.analysis.figures._style import (
    family_color,
    legend_below,
    family_label,
    main_rows,
    new_figure,
    paper_style,
    require_columns,
)
from interpscale.analysis.figures.interp import METRICS, draw_metric_panel, metric_rows, metrics_with_data

log = logging.getLogger("interpscale.analysis.figures")


def default_target(results: pd.DataFrame, family: str) -> dict:
    """Steerling-8B (C = 7.6e22 FLOPs, L* = 2.72, Table 7's measured metrics) for a paper-scale
    CDLM+Concept sweep (largest compute >= 1e18); otherwise 100x the family's largest compute,
    with no observed values."""
    from interpscale.analysis.example_data import STEERLING_8B

    c_max = float(results.loc[results["family"] == family, "slice_flops"].max())
    if family == STEERLING_8B["family"] and c_max >= 1e18:
        return dict(STEERLING_8B)
    return {"flops": 100.0 * c_max}


def extrapolation_figure(results: pd.DataFrame, *, family: str = "cdlm+concept", target: Mapping | None = None,
                         n_boot: int = DEFAULT_FIG_BOOT):
    """Figure 24: the joint Chinchilla fit (Eq. 27, solid, L_inf dashed) and the log-linear
    L*(C) fit (Eq. 26, dashed) on one family's small-scale runs, both extended to the
    target compute; the target's measured loss is a filled star, with each fit's error.
    At the target each forecast carries its confidence interval (the curve) and, fainter
    and wider, its prediction interval (a new run: curve plus residual noise).

    ``target`` needs ``flops`` and may carry ``loss`` (default: see ``default_target``)."""
    figure = "Figure 24 (extrapolation_figure)"
    require_columns(results, ("family", "slice_flops", "params", "tokens", "loss"), figure)
    rows = main_rows(results, family)
    if rows.empty:
        raise ValueError(f"{figure}: no rows for family {family!r}")
    target = dict(default_target(results, family) if target is None else target)
    if not float(target.get("flops") or 0) > 0:
        raise ValueError(f"{figure}: target needs a positive 'flops', got {target.get('flops')!r}")
    summ = isoflop_summary(rows, n_boot=n_boot)
    require_power_laws(summ, figure)
    joint = chinchilla_fit(rows, n_boot=n_boot)
    c_t = float(target["flops"])
    observed = target.get("loss")
    ext = extrapolate(joint, summ.fit, c_t, observed=None if observed is None else float(observed))
    c, _, l_star = summ.minima
    grid = np.geomspace(min(c.min(), c_t) / 2, max(c.max(), c_t) * 2, 200)
    color = family_color(family)
    with paper_style():
        fig, axes = new_figure(1, 1, panel_height=2.5, width=3.6)
        ax = axes[0, 0]
        ax.scatter(c, l_star, color=color, s=18, zorder=3, label="slice minima L*(C)")
        from interpscale.analysis.fit_status import joint_status

        identified = joint_status(joint)[0] == "identified"
        if identified:
            ax.plot(grid, joint.predict_optimal(grid), color=color, lw=1.3, label=f"joint fit → {ext.joint:.2f}")
            ax.fill_between(grid, *joint.band_optimal(grid), color=color, alpha=0.15, lw=0)
            ax.axhline(joint.L_inf, color=color, ls=":", lw=0.9, label=f"L∞ = {joint.L_inf:.2f}")
        else:  # no L∞ line or number for a fit that does not pin L∞ down
            ax.plot(grid, joint.predict_optimal(grid), color=color, lw=0.9, ls="-.",
                    label="joint fit (L∞ not identified)")
        ax.plot(grid, summ.power_L.predict(grid), "--", color="0.3", lw=1.1, label=f"log-linear → {ext.loglinear:.2f}")
        band = curve_band(summ.power_L, grid)
        if band is not None:
            ax.fill_between(grid, *band, color="0.3", alpha=0.10, lw=0)
        shown = ((ext.joint, ext.joint_ci, ext.joint_pi, color),) if identified else ()
        pct = round(100 * ext.level)
        for i, (pred, ci, pi, mk) in enumerate((*shown, (ext.loglinear, ext.loglinear_ci, ext.loglinear_pi, "0.3"))):
            # a percentile interval of few replicates need not contain the point estimate: clip at 0
            yerr = [[max(pred - ci[0], 0.0)], [max(ci[1] - pred, 0.0)]]
            ax.errorbar([c_t], [pred], yerr=yerr, fmt="o", ms=3, color=mk, capsize=2, lw=0.9)
            if np.all(np.isfinite(pi)):  # a new run's value: curve + residual noise (wider, faint)
                ax.errorbar([c_t], [pred], yerr=[[max(pred - pi[0], 0.0)], [max(pi[1] - pred, 0.0)]],
                            fmt="none", color=mk, alpha=0.45, capsize=4, lw=0.6,
                            label=f"{pct}% CI (bar) and PI (faint) at target" if i == 0 else None)
        if ext.observed is not None:
            ax.scatter([c_t], [ext.observed], marker="*", s=110, color="k", zorder=5,
                       label=f"target {ext.observed:.2f} (" + (f"Δ joint {ext.joint_error:+.2f}, " if identified else "")
                             + f"log-lin {ext.loglinear_error:+.2f})")
        ax.set_xscale("log")
        ax.set_xlabel("Compute C (FLOPs)")
        ax.set_ylabel("Validation loss (nats)")
        ax.set_title(f"Extrapolating {family_label(family)}")
        legend_below(ax)
    return fig


def interp_extrapolation_figure(results: pd.DataFrame, *, family: str = "cdlm+concept", target: Mapping | None = None,
                                metrics: Sequence[str] = METRICS, n_boot: int = DEFAULT_FIG_BOOT):
    """Figure 26: Eq. 29 fits of each metric on one family's runs (open markers coloured by
    slice, 90% band of the curve) extended to the target compute, where the prediction
    interval of a new run is drawn as a bar; filled stars at the target's values
    (``target``: ``flops`` plus any metric values; default: see ``default_target``)."""
    figure = "Figure 26 (interp_extrapolation_figure)"
    require_columns(results, ("family", "slice_flops", "flops", *metrics), figure)
    if family not in set(results["family"]):
        raise ValueError(f"{figure}: no rows for family {family!r}")
    target = dict(default_target(results, family) if target is None else target)
    if not float(target.get("flops") or 0) > 0:
        raise ValueError(f"{figure}: target needs a positive 'flops', got {target.get('flops')!r}")
    c_t = float(target["flops"])
    metrics = metrics_with_data(results, [family], metrics, figure)
    with paper_style():
        fig, axes = new_figure(1, len(metrics), panel_height=1.9)
        for ax, metric in zip(axes[0], metrics):
            rows = metric_rows(results, family, metric, figure)
            fit = bounded_fit(rows["flops"].to_numpy(float), rows[metric].to_numpy(float), metric, n_boot=n_boot)
            draw_metric_panel(ax, rows, metric, fit, x_max=c_t, open_markers=True, line_color=family_color(family))
            pred = float(fit.predict(c_t))
            lo, hi = (float(v) for v in fit.predict_interval(c_t))  # a new run's value, not the curve's CI
            ax.errorbar([c_t], [pred], yerr=[[max(pred - lo, 0.0)], [max(hi - pred, 0.0)]], fmt="o", ms=3,
                        color=family_color(family), capsize=3, lw=0.8,
                        label=f"{round(100 * fit.level)}% PI at target")
            if target.get(metric) is not None:
                ax.scatter([c_t], [float(target[metric])], marker="*", s=90, color="k", zorder=5,
                           label=f"target {float(target[metric]):.3g} (pred {pred:.3g})")
            legend_below(ax)
        axes[0, 0].set_ylabel(family_label(family))
    return fig
