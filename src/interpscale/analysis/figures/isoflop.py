"""IsoFLOP figures (§8.2, App. H, I): Figures 22 and 23, the ELBO-estimator and mask-rate
Figures 34-37 and the pre-anneal vs annealed Figure 38, with the panel drawers they share; and
what every figure needs from ``interpscale.scaling`` (Eqs. 25-27), in one place: the figures
never fit anything themselves ("Fit once, render many" in ``docs/architecture.md``)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from interpscale.analysis.figures._style import (ESTIMATOR_COLORS, ESTIMATOR_LABELS, FAMILY_MARKERS, compact_log_ticks,
                                                 compute_axis, family_color, family_label, legend_below, main_rows,
                                                 new_figure, ordered_families, paper_style, plain_log_axis,
                                                 require_columns, slice_colors)
from interpscale.paper import SLICE_TOLERANCE
from interpscale.scaling import N_BOOT, FamilyFits
from interpscale.scaling.analysis import (ELBO_ESTIMATORS, Analysis, AnalysisOptions, IsoflopGroup, analyse,
                                          anneal_states, mask_rate_groups)
from interpscale.scaling.tables import slice_rows
from interpscale.errors import UserError

log = logging.getLogger("interpscale.analysis.figures")

ISOFLOP_COLUMNS = ("family", "slice_flops", "params", "loss")
STATE_LABELS = {False: "Pre-anneal", True: "Annealed"}
STATE_COLORS = {False: "#767676", True: "#D55E00"}  # grey and vermilion, both >= 3:1 on white
STATE_MARKERS = {False: "o", True: "s"}
DEFAULT_FIG_BOOT = N_BOOT["figure"]  # replicates for figure bands (scaling.N_BOOT; the paper's 10,000: reports)


def figure_analysis(results: pd.DataFrame, given: Any = None, *, n_boot: int = DEFAULT_FIG_BOOT,
                    forecasts: Sequence[tuple[str, float]] = (), multipliers: bool = False) -> Analysis:
    """The ``scaling.analyse`` result a figure renders: ``given`` when it is an Analysis holding the
    IsoFLOP groups (``AnalysisOptions.isoflop_groups``) and a forecast at each of ``forecasts``
    ((family, compute) pairs); else the one analysis of ``results`` with them (reusing ``given``'s
    fits: an Analysis's or a ``FamilyFits``), made once per process per table and options. The only
    place the figures ask for numbers: they never fit anything themselves."""
    forecasts = tuple((str(f), float(c)) for f, c in forecasts)
    if isinstance(given, Analysis):
        missing = tuple(t for t in forecasts if given.forecast(*t) is None)
        if not missing and given.options.isoflop_groups:
            return given
        # what the figures draw added to the same analysis (its fits reused; no backtest or anneals: not drawn)
        o = replace(given.options, forecast_targets=given.options.forecast_targets + missing, backtest=False,
                    anneals=False, isoflop_groups=True)
        return analyse(results, o, fits=given.fits)
    o = AnalysisOptions(n_boot=n_boot, multipliers=multipliers, anneals=False, forecast_targets=forecasts,
                        isoflop_groups=True)
    return analyse(results, o, fits=given if isinstance(given, FamilyFits) else None)


@dataclass
class SliceCurve:
    """One IsoFLOP slice as drawn: the points, the fitted parabola and its minimum."""

    compute: float
    params: np.ndarray
    loss: np.ndarray
    p_star: float
    l_star: float
    curve: Callable[[np.ndarray], np.ndarray] | None
    used: bool = True  # entered the Step 2 power laws


@dataclass
class IsoflopSummary:
    """Steps 1-2 of §8.2.1 for one group of rows (a family, estimator, mask rate or state)."""

    slices: list[SliceCurve]
    power_P: Any = None  # PowerLawFit of P*(C), or None when fewer than two usable slices
    power_L: Any = None  # PowerLawFit of L*(C)
    warnings: list[str] = field(default_factory=list)

    @property
    def minima(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        used = [s for s in self.slices if s.used and math.isfinite(s.p_star)]
        return (np.array([s.compute for s in used]), np.array([s.p_star for s in used]),
                np.array([s.l_star for s in used]))


def isoflop_summary(rows: pd.DataFrame | None = None, *, n_boot: int = DEFAULT_FIG_BOOT, seed: int = 0, fit: Any = None,
                    tolerance: float | None = SLICE_TOLERANCE, group: IsoflopGroup | None = None) -> IsoflopSummary:
    """Per-slice parabolas (Eq. 25) and the P*(C), L*(C) power laws (Eq. 26) of ``group`` (an
    Analysis's ``IsoflopGroup``), or of ``rows`` with ``fit`` (an ``IsoFlopFit`` of them, reused;
    ``tolerance``: ``slice_rows``' window, None keeps all rows). Without two usable slices there are no
    power laws (reason in ``warnings``), but every convex parabola is kept so the slices can be drawn.
    Rows alone (neither fit nor group, one family): the one analysis of them (``figure_analysis``)."""
    if group is None and fit is None:  # a bare summary of rows: the one analysis of them (figure_analysis)
        fams = rows["family"].dropna().unique() if "family" in rows.columns else []
        if len(fams) != 1:
            raise ValueError(f"isoflop_summary: rows of one family, or a fit or group, are needed; got families "
                             f"{sorted(map(str, fams))}")
        an = figure_analysis(rows, n_boot=n_boot)
        per = an.fits.families.get(fams[0]) if an.fits is not None else None
        fit = getattr(per, "isoflop", None)
        if fit is None:
            group = an.isoflop_groups[("family", fams[0], None)]
    if group is not None:
        rows, fit, error = group
        warnings = [error] if error else []
    else:
        rows, warnings = slice_rows(rows.dropna(subset=["slice_flops", "params", "loss"]), tolerance), []
    laws = None if warnings else fit  # power laws only from a fit that passed its own checks
    slices = []
    records = fit.slices.to_dict("records") if fit is not None else [
        {"compute": float(c)} for c in np.unique(rows["slice_flops"].to_numpy(float))]
    target = rows["slice_flops"].to_numpy(float)
    for rec in records:
        compute, p_star = float(rec["compute"]), float(rec.get("P_star", math.nan))
        sub = rows[np.isclose(target, compute, rtol=1e-9)]
        slices.append(SliceCurve(
            compute=compute, params=sub["params"].to_numpy(float), loss=sub["loss"].to_numpy(float),
            p_star=p_star, l_star=float(rec.get("L_star", math.nan)),
            curve=partial(fit.parabola, compute) if rec.get("convex") and math.isfinite(p_star) else None,
            used=bool(rec.get("used", False)) and not rec.get("reason"),
        ))
    if fit is not None:
        warnings += list(fit.warnings)
    return IsoflopSummary(slices=sorted(slices, key=lambda s: s.compute),
                          power_P=getattr(laws, "power_P", None), power_L=getattr(laws, "power_L", None),
                          warnings=list(dict.fromkeys(warnings)))


def require_power_laws(summaries: Mapping[Any, IsoflopSummary], what: str, key: Any = None) -> None:
    """ValueError when no summary has power laws, with the IsoFLOP fit's reason from
    ``summaries[key]`` (default: the first)."""
    if all(s.power_L is None for s in summaries.values()):
        why = (summaries[key] if key is not None else next(iter(summaries.values()))).warnings
        raise UserError(f"{what}: no compute-optimal power law ({'; '.join(why) or 'no usable slices'})")


def fmt_compute(c: float) -> str:
    """6e18 -> '6e18', 1.1e20 -> '1.1e20' (slice labels)."""
    mant, exp = f"{c:.2e}".split("e")
    mant = mant.rstrip("0").rstrip(".")
    return f"{mant}e{int(exp)}"


def draw_isoflop_panel(ax, summary: IsoflopSummary, *, colors: Sequence | None = None, label_prefix: str = "",
                       marker: str = "o", mark_minima: bool = True, legend: bool = True) -> int:
    """Points, parabola and × minimum for each slice of ``summary``; returns curves drawn. The
    axes span the measured points (a vertex outside them is a grey arrow at the edge)."""
    colors = list(colors) if colors is not None else slice_colors(len(summary.slices))
    n_curves = 0
    xs = np.concatenate([sl.params for sl in summary.slices if sl.params.size]) if summary.slices else np.array([])
    x_lo, x_hi = (xs.min() / 1.3, xs.max() * 1.3) if xs.size else (np.nan, np.nan)
    outside = False
    for sl, color in zip(summary.slices, colors):
        label = f"{label_prefix}C={fmt_compute(sl.compute)}"
        ax.scatter(sl.params, sl.loss, s=12, color=color, marker=marker, zorder=3, linewidths=0,
                   label=label if sl.curve is None else "_nolegend_")
        if sl.curve is not None and sl.params.size:
            grid = np.geomspace(sl.params.min() / 1.3, sl.params.max() * 1.3, 120)
            ax.plot(grid, sl.curve(grid), color=color, lw=1.0, label=label)
            n_curves += 1
        if mark_minima and np.isfinite(sl.p_star):
            if x_lo <= sl.p_star <= x_hi:
                ax.scatter([sl.p_star], [sl.l_star], marker="x", s=28, color="k" if sl.used else "0.5",
                           linewidths=1.1, zorder=4)
            else:  # the vertex lies beyond the measured sizes: an arrow at that edge, axis untouched
                outside = True
                edge, mk = (x_lo, "<") if sl.p_star < x_lo else (x_hi, ">")
                ax.scatter([edge], [np.nanmin(sl.loss)], marker=mk, s=22, color="0.5", zorder=4, clip_on=False)
    ax.set_xscale("log")
    if np.isfinite(x_lo):
        ax.set_xlim(x_lo, x_hi)
    compact_log_ticks(ax, "x", max_decades=1.6)  # 1-2-5 labels while a panel spans < 1.6 decades
    ax.margins(y=0.08)
    ax.set(xlabel="Parameters P", ylabel="Validation loss (nats)")
    if legend and summary.slices:
        extra = [Line2D([], [], ls="", marker=marker, color="0.35", markersize=3.5, label="run"),
                 Line2D([], [], ls="", marker="x", color="k", markersize=4, label="minimum P*")]
        if outside:
            extra.append(Line2D([], [], ls="", marker=">", color="0.5", markersize=3.5, label="minimum beyond range"))
        h, lab = ax.get_legend_handles_labels()
        # one column: a panel of a four-across figure is ~1.7 in wide, too narrow for two
        legend_below(ax, h + extra, lab + [e.get_label() for e in extra], ncol=1, handlelength=1.2)
    return n_curves


def draw_power_law_panels(ax_loss, ax_params, summaries: Mapping[str, IsoflopSummary], colors: Mapping[str, str],
                          *, bands: bool = True, markers: Mapping[str, str] | None = None, fig=None) -> int:
    """(a) L*(C) and (b) P*(C): per-slice minima as markers, Eq. 26 fits as lines with
    their bootstrap bands; one series per key of ``summaries``. With ``fig``, one legend
    for both panels goes to the figure's right (for many series). Returns series drawn."""
    n = 0
    handles, labels = [], []
    for key, summ in summaries.items():
        c, p, l = summ.minima
        if c.size == 0:
            continue
        color = colors[key]
        mk = (markers or {}).get(key, "o")
        grid = np.geomspace(c.min() / 1.5, c.max() * 1.5, 100)
        for ax, y, fit, sym in ((ax_loss, l, summ.power_L, "α_L"), (ax_params, p, summ.power_P, "α_P")):
            ax.scatter(c, y, color=color, marker=mk, s=16, zorder=3, linewidths=0)
            if fit is not None:
                (line,) = ax.plot(grid, fit.predict(grid), color=color, lw=1.1, label=f"{key} ({sym}={fit.alpha:.3f})")
                if bands:  # the fit's bootstrap band
                    ax.fill_between(grid, *fit.band(grid), color=color, alpha=0.12, lw=0)
                if ax is ax_loss and fig is not None and summ.power_P is not None:
                    handles.append(line)
                    labels.append(f"{key}: α_L={fit.alpha:.3f}, α_P={summ.power_P.alpha:.3f}")
        n += 1
    plain_log_axis(ax_loss, "y")
    ax_params.set_yscale("log")
    for ax in (ax_loss, ax_params):
        compute_axis(ax)
    compact_log_ticks(ax_params, "y", max_decades=2.5)  # vertical axis: room for 1-2-5 labels
    ax_loss.set(ylabel="L*(C) (nats)", title="(a) compute-optimal loss")
    ax_params.set(ylabel="P*(C)", title="(b) compute-optimal size")
    if fig is not None:
        fig.legend(handles, labels, loc="outside right upper")
    else:  # below each panel, off the data
        for ax in (ax_loss, ax_params):
            legend_below(ax)
    return n


def power_law_pair(summaries: Mapping[str, IsoflopSummary], colors: Mapping[str, str], figure: str, *,
                   panel_height: float = 2.3, legend_right: bool = False, **kwargs):
    """Figures 23, 35, 37: (a) L*(C) and (b) P*(C) of labelled summaries, side by side."""
    require_power_laws(summaries, figure)
    with paper_style():
        fig, axes = new_figure(1, 2, panel_height=panel_height)
        draw_power_law_panels(axes[0, 0], axes[0, 1], summaries, colors, fig=fig if legend_right else None,
                              **kwargs)
    return fig


def family_summaries(results: pd.DataFrame, families: Sequence[str] | None, *, fits: Any,
                     n_boot: int, figure: str) -> dict[str, IsoflopSummary]:
    """IsoFLOP summaries of each family's headline rows from ``fits[family]`` (an Analysis's fits, a
    ``FamilyFits`` or a dict of FamilyFit / IsoFlopFit; None: ``figure_analysis``'s); a family
    without a fit there (its fits failed) is summarised from its rows alone."""
    require_columns(results, ISOFLOP_COLUMNS, figure)
    fams = ordered_families(results["family"].unique() if families is None else families)
    an = None
    if fits is None or isinstance(fits, Analysis):
        an = figure_analysis(results, fits, n_boot=n_boot)
        fits = an.fits
    out = {}
    for fam in fams:
        rows = main_rows(results, fam)
        if rows.empty:
            raise UserError(f"{figure}: no rows for family {fam!r}")
        # a precomputed IsoFlopFit from a FamilyFits or a dict (of FamilyFit or IsoFlopFit)
        per = None if fits is None else (fits if isinstance(fits, Mapping) else fits.families).get(fam)
        fit = getattr(per, "isoflop", per if hasattr(per, "slices") else None)
        if fit is None:  # its fits failed: the analysis's group of its rows (flagged parabolas kept)
            an = an or figure_analysis(results, fits if isinstance(fits, FamilyFits) else None, n_boot=n_boot)
            group = an.isoflop_groups.get(("family", fam, None))
            out[fam] = isoflop_summary(group=group) if group is not None else isoflop_summary(rows, n_boot=n_boot)
        else:
            out[fam] = isoflop_summary(rows, n_boot=n_boot, fit=fit)
    return out


def isoflop_figure(results: pd.DataFrame, *, fits=None, families: Sequence[str] | None = None,
                   n_boot: int = DEFAULT_FIG_BOOT):
    """Figure 22: one panel per family; per-slice parabolas (Eq. 25) over the measured
    losses, × at each slice's minimum P*(C). Uses each family's annealed headline rows."""
    figure = "Figure 22 (isoflop_figure)"
    summaries = family_summaries(results, families, fits=fits, n_boot=n_boot, figure=figure)
    with paper_style():
        fig, axes = new_figure(1, len(summaries), panel_height=2.0)
        for ax, (fam, summ) in zip(axes[0], summaries.items()):
            draw_isoflop_panel(ax, summ)
            ax.set_title(family_label(fam), color=family_color(fam), pad=9 if summ.power_L is None else None)
            if summ.power_L is None:  # say why the × are grey / missing: under the name, not over the points
                ax.annotate("no power law: < 2 slices", (0.5, 1.0), xycoords="axes fraction", xytext=(0, 1.5),
                            textcoords="offset points", ha="center", va="bottom", fontsize=6.5, color="0.3")
        for ax in axes[0][1:]:
            ax.set_ylabel("")
    return fig


def power_law_figure(results: pd.DataFrame, *, fits=None, families: Sequence[str] | None = None,
                     n_boot: int = DEFAULT_FIG_BOOT):
    """Figure 23: (a) L*(C) and (b) P*(C) power laws (Eq. 26) per family, markers at the
    per-slice minima of Figure 22, shaded 90% bootstrap bands."""
    figure = "Figure 23 (power_law_figure)"
    summaries = family_summaries(results, families, fits=fits, n_boot=n_boot, figure=figure)
    return power_law_pair({family_label(f): s for f, s in summaries.items()},
                          {family_label(f): family_color(f) for f in summaries}, figure,
                          markers={family_label(f): FAMILY_MARKERS.get(f, "o") for f in summaries})


def estimator_summaries(results: pd.DataFrame, family: str, estimators: Sequence[str], *, n_boot: int,
                        figure: str, analysis: Analysis | None = None) -> dict[str, IsoflopSummary]:
    """One IsoFLOP summary per estimator present for ``family`` (fixed_rate at t = 0.5): the
    Analysis's ``isoflop_groups`` (``figure_analysis`` when none is given)."""
    require_columns(results, (*ISOFLOP_COLUMNS, "estimator"), figure)
    groups = figure_analysis(results, analysis, n_boot=n_boot).isoflop_groups
    out = {}
    for est in estimators:
        if ("estimator", family, est) not in groups:
            log.info("%s: no %s rows for %s; estimator left out", figure, est, family)
            continue
        out[est] = isoflop_summary(group=groups[("estimator", family, est)])
    if len(out) < 2:
        raise UserError(f"{figure}: needs rows under at least two estimators for family {family!r} "
                        f"(column 'estimator'); found {sorted(out) or 'none'}")
    return out


def estimator_isoflop_figure(results: pd.DataFrame, *, family: str = "cdlm",
                             estimators: Sequence[str] = ELBO_ESTIMATORS, n_boot: int = DEFAULT_FIG_BOOT,
                             analysis: Analysis | None = None):
    """Figure 34: top row, one panel per slice with every estimator's parabola overlaid;
    bottom row, one panel per estimator with all slices overlaid."""
    figure = "Figure 34 (estimator_isoflop_figure)"
    summaries = estimator_summaries(results, family, estimators, n_boot=n_boot, figure=figure, analysis=analysis)
    computes = sorted({s.compute for summ in summaries.values() for s in summ.slices})
    ncols = max(len(computes), len(summaries))
    with paper_style():
        fig, axes = new_figure(2, ncols, panel_height=1.7)
        for ax, c in zip(axes[0], computes):
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


def estimator_power_law_figure(results: pd.DataFrame, *, family: str = "cdlm",
                               estimators: Sequence[str] = ELBO_ESTIMATORS, n_boot: int = DEFAULT_FIG_BOOT,
                               analysis: Analysis | None = None):
    """Figure 35: (a) L*(C) and (b) P*(C) under each estimator."""
    figure = "Figure 35 (estimator_power_law_figure)"
    summaries = estimator_summaries(results, family, estimators, n_boot=n_boot, figure=figure, analysis=analysis)
    return power_law_pair({ESTIMATOR_LABELS.get(e, e): s for e, s in summaries.items()},
                          {ESTIMATOR_LABELS.get(e, e): ESTIMATOR_COLORS[e] for e in summaries}, figure)


def mask_rate_summaries(results: pd.DataFrame, family: str, *, n_boot: int, figure: str,
                        analysis: Analysis | None = None) -> dict[float, IsoflopSummary]:
    """One IsoFLOP summary per fixed mask rate t (rows with estimator fixed_rate and a mask_rate):
    the Analysis's ``isoflop_groups`` (``figure_analysis`` when none is given)."""
    require_columns(results, (*ISOFLOP_COLUMNS, "estimator", "mask_rate"), figure)
    rates = list(mask_rate_groups(results, family))
    if len(rates) < 2:
        raise UserError(f"{figure}: needs fixed_rate rows at two or more values of 'mask_rate' for "
                        f"family {family!r}; found {rates}")
    groups = figure_analysis(results, analysis, n_boot=n_boot).isoflop_groups
    return {t: isoflop_summary(group=groups[("mask_rate", family, t)]) for t in rates}


def mask_rate_isoflop_figure(results: pd.DataFrame, *, family: str = "cdlm", n_boot: int = DEFAULT_FIG_BOOT,
                             analysis: Analysis | None = None):
    """Figure 36: one panel per fixed mask rate t, IsoFLOP parabolas of every slice, × minima."""
    figure = "Figure 36 (mask_rate_isoflop_figure)"
    summaries = mask_rate_summaries(results, family, n_boot=n_boot, figure=figure, analysis=analysis)
    ncols = 3 if len(summaries) > 4 else len(summaries)
    nrows = math.ceil(len(summaries) / ncols)
    with paper_style():
        fig, axes = new_figure(nrows, ncols, panel_height=1.6, width=7.0 if ncols > 2 else None)
        for k, (ax, (t, summ)) in enumerate(zip(axes.ravel(), summaries.items())):
            draw_isoflop_panel(ax, summ, legend=(k == 0))
            ax.set_title(f"t = {t:g}")
            if k % ncols:
                ax.set_ylabel("")
        for ax in axes.ravel()[len(summaries):]:
            ax.set_visible(False)
    return fig


def mask_rate_power_law_figure(results: pd.DataFrame, *, family: str = "cdlm",
                               n_boot: int = DEFAULT_FIG_BOOT, analysis: Analysis | None = None):
    """Figure 37: (a) L*(C) and (b) P*(C) at each fixed mask rate (colour: t)."""
    figure = "Figure 37 (mask_rate_power_law_figure)"
    summaries = mask_rate_summaries(results, family, n_boot=n_boot, figure=figure, analysis=analysis)
    cmap, n = plt.get_cmap("plasma"), max(len(summaries) - 1, 1)
    return power_law_pair({f"t={t:g}": s for t, s in summaries.items()},
                          {f"t={t:g}": cmap(0.05 + 0.85 * i / n) for i, t in enumerate(summaries)}, figure,
                          panel_height=2.4, legend_right=True, bands=False)


def state_rows(results: pd.DataFrame, family: str, figure: str,
                extra: Sequence[str] = ()) -> dict[bool, pd.DataFrame]:
    require_columns(results, (*ISOFLOP_COLUMNS, "annealed", *extra), figure)
    out = anneal_states(results, family)  # the rows the Analysis's state trends use
    missing = [STATE_LABELS[s] for s, rows in out.items() if rows.empty]
    if missing:
        raise UserError(f"{figure}: family {family!r} has no {' or '.join(missing).lower()} rows "
                        "(column 'annealed' must hold both False and True)")
    return out


def anneal_loss_figure(results: pd.DataFrame, *, family: str = "cdlm+concept",
                       n_boot: int = DEFAULT_FIG_BOOT, analysis: Analysis | None = None):
    """Figure 38: top row, per-slice parabolas pre-anneal and annealed; bottom row, L*(C)
    and P*(C) power laws of both states."""
    figure = "Figure 38 (anneal_loss_figure)"
    rows = state_rows(results, family, figure)
    # the ±15% slice window on the annealed state only: pre-anneal checkpoints sit at ~80% of their
    # slice's compute (WSD stable phase; scaling.analysis.isoflop_groups)
    groups = figure_analysis(results, analysis, n_boot=n_boot).isoflop_groups
    summaries = {s: isoflop_summary(group=groups[("annealed", family, s)]) for s in rows}
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
