"""Interpretability and extrapolation figures: Figure 25, metrics vs compute with Eq. 29 fits and
90% bootstrap bands (§8.3), Figure 39, the metrics pre-anneal vs annealed (App. I), and Figures 24
and 26, small-scale fits extrapolated to a target run (Steerling-8B, §8.2.2, §8.3.2)."""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from interpscale import paper
from interpscale.analysis.figures._style import (METRIC_LABELS, PAGE_WIDTH, compute_axis, family_color, family_label,
                                                 legend_below, main_rows, new_figure, paper_style,
                                                 require_columns, slice_colors)
from interpscale.analysis.figures.isoflop import (DEFAULT_FIG_BOOT, STATE_COLORS, STATE_LABELS, STATE_MARKERS,
                                                  figure_analysis, isoflop_summary, state_rows)
from interpscale.analysis.fit_status import trend_status
from interpscale.scaling import FORECAST_METHODS, Analysis, ForecastOptions, fit_status
from interpscale.scaling.trend import FLAT, TrendFit
from interpscale.errors import UserError

log = logging.getLogger("interpscale.analysis.figures")

METRICS = tuple(paper.INTERP_METRICS)
CONCEPT_FAMILIES = tuple(f for f, c in paper.PAPER_FAMILIES.items() if c.concept)  # ar+concept, cdlm+concept


def metric_rows(results: pd.DataFrame, family: str, metric: str) -> pd.DataFrame:
    """The family's headline rows with a finite ``metric`` (4+ of them: ``metrics_with_data`` checked)."""
    rows = main_rows(results, family)
    return rows[np.isfinite(rows[metric].astype(float))]


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
        raise UserError(f"{figure}: no interpretability metric has {min_rows}+ finite values for "
                        f"{', '.join(map(str, families))} (columns {', '.join(metrics)} are empty)")
    return keep


def metric_fit(fits: Any, family: str, metric: str):
    """The family's Eq. 29 fit of ``metric`` from ``fits`` (an Analysis's: the one the report prints);
    a ValueError says why there is none (the fit's reason when it failed)."""
    ff = fits.families.get(family) if fits is not None else None
    if ff is None or metric not in ff.bounded:
        why = (ff.skipped.get(metric) if ff is not None else None) or "no fits of the family"
        raise UserError(f"no Eq. 29 fit of {metric} for {family} ({why})")
    return ff.bounded[metric]


def _fits_and_trends(results: pd.DataFrame, fits: Any, trends: Mapping | None, n_boot: int):
    """(fits, trends) a figure draws: those given, else its Analysis's (``figure_analysis``)."""
    if trends is None or fits is None or isinstance(fits, Analysis):
        a = figure_analysis(results, fits, n_boot=n_boot)
        return a.fits, a.trends if trends is None else trends
    return fits, trends


def draw_metric_panel(ax, rows: pd.DataFrame, metric: str, fit, *, x_max: float | None = None,
                      open_markers: bool = False, line_color: str = "k", trend: TrendFit | str | None = None) -> None:
    """Markers coloured by IsoFLOP slice, the fitted curve and its band out to ``x_max``; where the
    metric shows no Eq. 29 trend, its log-linear ``trend`` (the Analysis's)."""
    slices = np.sort(rows["slice_flops"].unique())
    colors = dict(zip(slices, slice_colors(len(slices))))
    for c in slices:
        sub = rows[rows["slice_flops"] == c]
        kw = {"facecolors": "none", "edgecolors": colors[c]} if open_markers else {"color": colors[c]}
        ax.scatter(sub["flops"], sub[metric], s=12, linewidths=0.8, zorder=3, **kw)
    x = rows["flops"].to_numpy(float)
    grid = np.geomspace(x.min() / 1.2, (x_max or x.max()) * 1.2, 200)
    if trend_status(fit)[0] == "trend":
        # the curve's bootstrap band
        ax.fill_between(grid, *fit.band(grid), color=line_color, alpha=0.15, lw=0)
        label = f"Eq. 29: β={fit.beta:.2f}, R²={fit.r2:.2f}"
        ax.plot(grid, fit.predict(grid), color=line_color, lw=1.1, label=label)
    else:  # Eq. 29 assumes the metric improves: where it is flat, draw what the data do instead
        draw_trend(ax, x, rows[metric].to_numpy(float), grid, metric, line_color, trend=trend)
    if x_max is not None:  # the panel reaches the target: ticks for that span, not the data's (they collided)
        ax.set_xlim(grid[0], grid[-1])
    compute_axis(ax)
    ax.set_title(METRIC_LABELS.get(metric, metric))


def trend_label(t: TrendFit) -> str:
    """The legend of a log-linear trend: its direction and slope per decade of compute."""
    if t.direction == FLAT:
        return f"no significant trend ({t.slope:+.2g}/decade)"
    return f"{t.direction}: {t.slope:+.2g}/decade, R²={t.r2:.2f}"


def draw_trend(ax, compute: np.ndarray, metric: np.ndarray, grid: np.ndarray, name: str, color: str, *,
               trend: TrendFit | str | None = None) -> None:
    """The log-linear trend of ``metric`` on log10 C (Table 30's form) with its confidence band,
    solid when the slope's interval excludes 0, dotted when it does not. ``trend``: the Analysis's
    (``scaling.analysis.metric_trends``; a string says why there is none: no line then)."""
    if trend is None or isinstance(trend, str):
        log.info("%s: no trend line (%s)", name, trend or "the Analysis holds none")
        return
    t = trend
    g = grid[(grid >= compute.min()) & (grid <= compute.max())]
    ax.fill_between(g, *t.band(g), color=color, alpha=0.15, lw=0)
    flat = t.direction == FLAT
    ax.plot(g, t.predict(g), color=color, lw=0.9 if flat else 1.1, ls=":" if flat else "--",
            label=trend_label(t))


def interp_scaling_figure(results: pd.DataFrame, *, fits: Mapping | None = None,
                          families: Sequence[str] = CONCEPT_FAMILIES, metrics: Sequence[str] = METRICS,
                          n_boot: int = DEFAULT_FIG_BOOT, trends: Mapping | None = None):
    """Figure 25: rows = +Concept families, columns = metrics; markers coloured by slice,
    Eq. 29 fit (e ± A C^-β) with its shaded 90% bootstrap band. Metric columns that hold no
    values (e.g. an unscored judge metric) are left out of the grid. ``trends``: the Analysis's
    (family, metric) -> log-linear trend, drawn where a metric shows no Eq. 29 trend."""
    figure = "Figure 25 (interp_scaling_figure)"
    require_columns(results, ("family", "slice_flops", "flops", *metrics), figure)
    fams = [f for f in families if f in set(results["family"])]
    if not fams:
        raise UserError(f"{figure}: none of the families {list(families)} is in the results table")
    metrics = metrics_with_data(results, fams, metrics, figure)
    fits, trends = _fits_and_trends(results, fits, trends, n_boot)
    with paper_style():
        fig, axes = new_figure(len(fams), len(metrics), panel_height=1.75)
        for i, fam in enumerate(fams):
            for j, metric in enumerate(metrics):
                rows = metric_rows(results, fam, metric)
                fit = metric_fit(fits, fam, metric)  # the report's fit
                draw_metric_panel(axes[i, j], rows, metric, fit, line_color=family_color(fam),
                                  trend=(trends or {}).get((fam, metric)))
                legend_below(axes[i, j], handlelength=1.5)
                if j == 0:
                    axes[i, j].set_ylabel(family_label(fam))
                if i < len(fams) - 1:
                    axes[i, j].set_xlabel("")
    return fig


def anneal_interp_figure(results: pd.DataFrame, *, family: str = "cdlm+concept",
                         metrics: Sequence[str] = METRICS, trends: Mapping | None = None,
                         analysis: Analysis | None = None):
    """Figure 39: each metric vs compute in both states with its log-linear trend (Table 30's β =
    slope against log10 C; the legend says whether it rises, falls or shows no significant trend).
    ``trends``: the Analysis's (family, metric, annealed) -> trend (``scaling.analysis.state_trends``;
    default: ``analysis``'s, else ``figure_analysis``'s)."""
    figure = "Figure 39 (anneal_interp_figure)"
    rows = state_rows(results, family, figure, extra=("flops", *metrics))
    metrics = metrics_with_data(results, [False, True], metrics, figure, min_rows=3, rows_of=rows.get)
    if trends is None:
        trends = figure_analysis(results, analysis).state_trends
    with paper_style():
        ncols = min(2, len(metrics))  # two across: each panel's two-line trend legend fits under it
        fig, axes = new_figure(-(-len(metrics) // ncols), ncols, width=PAGE_WIDTH, panel_height=1.9)
        for ax in axes.flat[len(metrics):]:
            ax.remove()
        for ax, metric in zip(axes.flat, metrics):
            for state, sub in rows.items():  # metrics_with_data: each state has 3+ finite values
                sub = sub[np.isfinite(sub[metric].astype(float))]
                c, y = sub["flops"].to_numpy(float), sub[metric].to_numpy(float)
                # Table 30's trend: least squares of m on log10 C, either way (the Analysis's)
                t = trends.get((family, metric, state), "the Analysis holds no trend")
                if isinstance(t, str):  # the Analysis could not fit it: the figure cannot draw it
                    raise UserError(f"{figure}: {metric} ({STATE_LABELS[state].lower()}): {t}")
                ax.scatter(c, y, s=10, color=STATE_COLORS[state], marker=STATE_MARKERS[state], linewidths=0)
                grid = np.geomspace(c.min(), c.max(), 50)
                flat = t.direction == FLAT
                ax.plot(grid, t.predict(grid), color=STATE_COLORS[state], lw=0.9 if flat else 1.1,
                        ls=":" if flat else "-", label=f"{STATE_LABELS[state]}: {trend_label(t)}")
            compute_axis(ax)
            ax.set_title(METRIC_LABELS.get(metric, metric))
            legend_below(ax, handlelength=1.5)
    return fig


def default_target(results: pd.DataFrame, family: str, target: Mapping | None = None,
                   figure: str = "Figure 24") -> dict:
    """``target``, checked for a positive ``flops`` (ValueError naming ``figure``); when None,
    Steerling-8B (C = 7.6e22 FLOPs, L* = 2.72, Table 7's measured metrics) for a paper-scale
    CDLM+Concept sweep (largest compute >= 1e18), else 100x the family's largest compute."""
    if target is None:
        c_max = float(results.loc[results["family"] == family, "slice_flops"].max())
        big = family == paper.STEERLING_8B["family"] and c_max >= 1e18
        target = paper.STEERLING_8B if big else {"flops": 100.0 * c_max}
    if not float(target.get("flops") or 0) > 0:
        raise UserError(f"{figure}: target needs a positive 'flops', got {target.get('flops')!r}")
    return dict(target)


def _family_forecast(a: Analysis, family: str, c_t: float):
    """(FamilyFit, FamilyForecast at ``c_t``) of the Analysis: its fits' own forecast, or the one
    ``figure_analysis`` asked for at the figure's target (``AnalysisOptions.forecast_targets``)."""
    if a.fits is None or family not in a.fits.families:
        raise UserError(f"Figure 24 (extrapolation_figure): no fits for family {family!r}"
                        + (f" ({a.fit_error})" if a.fit_error else ""))
    fc = a.forecast(family, c_t)
    if fc is None:
        why = next((v for (f, c), v in a.forecasts.items() if f == family and math.isclose(c, c_t, rel_tol=1e-9)),
                   "none made")
        raise UserError(f"Figure 24 (extrapolation_figure): no forecast of {family} at C = {c_t:.3g} ({why})")
    return a.fits[family], fc


def _method_curve(name: str, fit: Any, grid: np.ndarray, k: float) -> np.ndarray:
    """A forecast method's L*(C) curve on ``grid`` (Eq. 27 compute-optimal, Eq. 26, E + A C^-alpha,
    or a registered law's own compute-optimal forecast)."""
    if name == "joint":
        return fit.predict_optimal(grid, k)
    if name == "isoflop-powerlaw":
        return fit.power_L.predict(grid)
    if name == "isoflop-saturating":
        return fit.predict(grid)
    opts = ForecastOptions(k=k)  # a registered law: its own L*(C)
    return np.array([FORECAST_METHODS[name].predict(fit, float(c), opts)[0] for c in grid])


def _calibrated_band(fc, name: str, c_max: float, c_t: float, k: float):
    """(compute, lo, hi) of the chosen method's calibrated prediction band from the largest
    fitted compute to the target (``FamilyForecast.calibrated_band``, the forecast's rule)."""
    grid = np.geomspace(c_max, c_t, 25)
    return (grid, *fc.calibrated_band(name, grid, c_max, k))


def extrapolation_figure(results: pd.DataFrame, *, family: str = "cdlm+concept", target: Mapping | None = None,
                         n_boot: int = DEFAULT_FIG_BOOT, fits: Any = None):
    """Figure 24: every forecast method on one family's runs extended to the target compute, the
    one chosen by backtest solid with its calibrated band; at the target each method's forecast
    (diamonds) with its calibrated and (fainter) bootstrap interval, the measured loss a star; L∞
    only when identified. A method whose fit is not identified (``scaling.FitStatus``) is not drawn,
    only named in the legend; the subtitle states how far the target lies past the largest slice."""
    figure = "Figure 24 (extrapolation_figure)"
    require_columns(results, ("family", "slice_flops", "params", "tokens", "loss"), figure)
    if main_rows(results, family).empty:
        raise UserError(f"{figure}: no rows for family {family!r}")
    target = default_target(results, family, target, figure)
    c_t = float(target["flops"])
    a = figure_analysis(results, fits, n_boot=n_boot, forecasts=[(family, c_t)])  # fits ∪ forecast at c_t
    ff, fc = _family_forecast(a, family, c_t)
    summ = isoflop_summary(main_rows(results, family), fit=ff.isoflop, n_boot=n_boot)
    c, _, l_star = summ.minima
    c_max = float(c.max()) if len(c) else c_t / fc.ratio
    grid = np.geomspace(min(c.min() if len(c) else c_max, c_t) / 2, max(c_max, c_t) * 2, 200)
    color, k = family_color(family), ff.flops_per_token_per_param
    with paper_style():
        fig, axes = new_figure(1, 1, panel_height=2.5, width=3.6)
        ax = axes[0, 0]
        ax.scatter(c, l_star, color=color, s=18, zorder=3, label="slice minima L*(C)")
        _draw_methods(ax, fc, grid, k, color, c_max, c_t, ff)
        observed = target.get("loss")
        if observed is not None:
            best = fc.best.predicted
            ax.scatter([c_t], [float(observed)], marker="*", s=110, color="k", zorder=5,
                       label=f"target {float(observed):.2f} (Δ {fc.chosen} {float(observed) - best:+.2f})")
        if not any(fit_status(mf.fit).identified for mf in fc.methods.values()):  # else a panel of bare points
            ax.text(0.5, 0.5, "no forecast drawn:\nno method's fit is identified", transform=ax.transAxes,
                    ha="center", va="center", fontsize=7, color="0.3")
        compute_axis(ax)
        ax.set_ylabel("Validation loss (nats)")
        ax.set_title(f"Extrapolating {family_label(family)}\n{extrapolation_note(fc)}", fontsize=7)
        legend_below(ax)
    return fig


def extrapolation_note(fc) -> str:
    """How far the forecast extrapolates: the target over the largest fitted compute, and the
    largest ratio the backtest could test (the interval beyond it rests on an assumption)."""
    tested = fc.max_tested_ratio
    note = f"target C = {fc.target_compute:.2g}: {fc.ratio:.3g}× the largest slice"
    if np.isfinite(tested):
        note += f" (backtest tested up to {tested:.3g}×)"
    return note


def _draw_methods(ax, fc, grid, k, color, c_max, c_t, ff) -> None:
    """Each identified method's curve (chosen solid, others dashed) and its forecast at the target
    with both intervals; a method whose fit is flagged or failed is named, not drawn."""
    pct = round(100 * fc.level)
    shades = ("0.25", "0.5", "0.65", "0.75")
    for i, (name, mf) in enumerate(fc.methods.items()):
        chosen = name == fc.chosen
        mk = color if chosen else shades[i % len(shades)]
        st = fit_status(mf.fit)
        if not st.identified:  # not drawn as if it were fitted
            ax.plot([], [], " ", label=f"{name}: not drawn ({st.state}{', chosen' if chosen else ''})")
            continue
        ax.plot(grid, _method_curve(name, mf.fit, grid, k), "-" if chosen else "--", color=mk,
                lw=1.3 if chosen else 0.9, label=f"{name} → {mf.predicted:.2f}" + (" (chosen)" if chosen else ""))
        if chosen:
            g, lo, hi = _calibrated_band(fc, name, c_max, c_t, k)
            ax.fill_between(g, lo, hi, color=color, alpha=0.18, lw=0, label=f"{pct}% calibrated PI")
        ax.errorbar([c_t], [mf.predicted], yerr=[[max(mf.predicted - mf.lo, 0.0)], [max(mf.hi - mf.predicted, 0.0)]],
                    fmt="D", ms=3, color=mk, capsize=2, lw=0.9,
                    label=f"forecast at target ({pct}% calibrated PI)" if chosen else None)
        ax.errorbar([c_t], [mf.predicted], yerr=[[max(mf.predicted - mf.raw_lo, 0.0)],
                                                  [max(mf.raw_hi - mf.predicted, 0.0)]],
                    fmt="none", color=mk, alpha=0.4, capsize=4, lw=0.6,
                    label=f"{pct}% bootstrap PI (faint)" if chosen else None)
    ch = ff.chinchilla
    if ch is not None and fit_status(ch).identified:
        ax.axhline(ch.L_inf, color=color, ls=":", lw=0.9, label=f"L∞ = {ch.L_inf:.2f}")


def interp_extrapolation_figure(results: pd.DataFrame, *, family: str = "cdlm+concept", target: Mapping | None = None,
                                metrics: Sequence[str] = METRICS, n_boot: int = DEFAULT_FIG_BOOT, fits: Any = None,
                                trends: Mapping | None = None):
    """Figure 26: Eq. 29 fits of each metric on one family's runs (90% band of the curve) extended
    to the target compute, a new run's prediction interval there as a bar, stars at the target's
    values (``target``: see ``default_target``); ``fits``' metric fits and ``trends``' log-linear
    trends (the Analysis's) are drawn as they are."""
    figure = "Figure 26 (interp_extrapolation_figure)"
    require_columns(results, ("family", "slice_flops", "flops", *metrics), figure)
    if family not in set(results["family"]):
        raise UserError(f"{figure}: no rows for family {family!r}")
    target = default_target(results, family, target, figure)
    c_t = float(target["flops"])
    metrics = metrics_with_data(results, [family], metrics, figure)
    fits, trends = _fits_and_trends(results, fits, trends, n_boot)
    with paper_style():
        fig, axes = new_figure(1, len(metrics), panel_height=1.9)
        for ax, metric in zip(axes[0], metrics):
            rows = metric_rows(results, family, metric)
            fit = metric_fit(fits, family, metric)
            draw_metric_panel(ax, rows, metric, fit, x_max=c_t, open_markers=True, line_color=family_color(family),
                              trend=(trends or {}).get((family, metric)))
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
