"""Figures 22 and 23 (§8.2), with the panel drawers Figures 34-38 share."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from interpscale.analysis.figures._fits import (
    DEFAULT_FIG_BOOT,
    IsoflopSummary,
    isoflop_summary,
    require_power_laws,
)
from interpscale.analysis.figures._style import (
    FAMILY_MARKERS,
    family_color,
    family_label,
    compact_log_ticks,
    compute_axis,
    legend_below,
    main_rows,
    new_figure,
    ordered_families,
    paper_style,
    plain_log_axis,
    require_columns,
    slice_colors,
)

ISOFLOP_COLUMNS = ("family", "slice_flops", "params", "loss")


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
    ax.set_xlabel("Parameters P")
    ax.set_ylabel("Validation loss (nats)")
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
    ax_loss.set_ylabel("L*(C) (nats)")
    ax_params.set_ylabel("P*(C)")
    ax_loss.set_title("(a) compute-optimal loss")
    ax_params.set_title("(b) compute-optimal size")
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


def family_summaries(results: pd.DataFrame, families: Sequence[str] | None, *, fits: Mapping | None,
                     n_boot: int, figure: str) -> dict[str, IsoflopSummary]:
    """IsoFLOP summaries of each family's headline rows (reusing ``fits[family]`` if given)."""
    require_columns(results, ISOFLOP_COLUMNS, figure)
    fams = ordered_families(results["family"].unique() if families is None else families)
    out = {}
    for fam in fams:
        rows = main_rows(results, fam)
        if rows.empty:
            raise ValueError(f"{figure}: no rows for family {fam!r}")
        out[fam] = isoflop_summary(rows, n_boot=n_boot, fit=_isoflop_from_fits(fits, fam))
    return out


def _isoflop_from_fits(fits, family: str):
    """A precomputed IsoFlopFit for ``family`` from a FamilyFits or a dict (of FamilyFit or IsoFlopFit)."""
    per = None if fits is None else (fits if isinstance(fits, Mapping) else fits.families).get(family)
    return getattr(per, "isoflop", per if hasattr(per, "slices") else None)


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
            ax.set_title(family_label(fam), color=family_color(fam))
            if summ.power_L is None:  # say why the × are grey / missing
                ax.text(0.02, 0.02, "no power law: < 2 usable slices", transform=ax.transAxes, fontsize=7,
                        color="0.3")
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
