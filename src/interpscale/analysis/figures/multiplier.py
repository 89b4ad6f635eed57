"""The compute multiplier k(C) of each +Concept family against its backbone (issue 36,
docs/multiplier.md): the figure of ``scaling.analysis.family_multipliers``, the fits it shares
with ``fit families``' multiplier.csv and the report's section (made once per process and table).

What is drawn follows the report's rule (``_markdown.banded_cell``, issue 45): inside the sweep the
data's own k (the law-free reading) and each law's curve, the answering method's with its band;
beyond the sweep only an identified (not flagged) law, and only where its band spans at most
``MAX_DECADES`` decades; elsewhere a note says k is not determined there. The axes fit what is drawn."""

from __future__ import annotations

import logging
import math

import numpy as np
import pandas as pd
from matplotlib import ticker

from interpscale._markdown import MAX_DECADES, band_decades
from interpscale.analysis.figures._style import compute_axis, family_color, main_rows, paper_style
from interpscale.analysis.figures.isoflop import figure_analysis  # the one place a figure asks for numbers
from interpscale.scaling.multiplier import TARGETS, MultiplierFit, backbone_pairs
from interpscale.errors import UserError

log = logging.getLogger("interpscale.analysis.figures")


STYLES = {"isoflop": ("-", "Eq. 26"), "saturating": ("-.", "E + a C^alpha"), "joint": (":", "Eq. 27")}
PAD_SHARE, PAD_DECADES = 0.06, 0.02  # axis margin each side: this share of the drawn span plus these decades
PLAIN_DECADES = 3.0  # a k axis narrower than this (decades) is labelled with plain numbers
REFERENCE_REACH = 10.0  # k = 1 is drawn (and the axis stretched to it) when within this factor of the data


def multiplier_figure(results: pd.DataFrame, *, fits=None, n_boot: int | None = None, multipliers=None):
    """k(C) of each backbone/+Concept pair: the law-free k inside the sweep with its band, each
    frontier law's curve there (the method that answered in colour with its band), its extrapolation
    (dashed, with the targets' bands) only where ``extrapolation_rows`` allows, k = 1 for reference
    when near the data; the title names the verdict and the method that answered."""
    import matplotlib.pyplot as plt

    if multipliers is None:  # an Analysis's, else the one analysis of the table (figure_analysis)
        boot = {"n_boot": n_boot} if n_boot else {}
        multipliers = figure_analysis(results, fits, multipliers=True, **boot).multipliers
    ms = {p: m for p, m in multipliers.items() if isinstance(m, MultiplierFit)}
    if not ms:
        pairs = backbone_pairs(results["family"].unique()) if "family" in results else []
        raise UserError(f"no backbone/+Concept pair of families with a compute multiplier (pairs: {pairs})")
    with paper_style():
        fig, axes = plt.subplots(1, len(ms), figsize=(4.2 * len(ms), 3.6), squeeze=False)
        for ax, ((base, variant), m) in zip(axes[0], ms.items()):
            _panel(ax, results, base, variant, m)
        fig.tight_layout()
    return fig


def _panel(ax, results: pd.DataFrame | None, base: str, variant: str, m: MultiplierFit) -> None:
    """One pair's panel: its k (``_draw_pair``), or, where no k is determined anywhere, the lowest
    losses per slice that k would be read from (so the panel shows the data and says why not)."""
    xs, ys = _draw_pair(ax, m, variant)
    reference, ylabel = True, f"k(C): {variant} / {base}"
    if not ys and isinstance(results, pd.DataFrame):
        xs, ys = _draw_losses(ax, results, (base, variant))
        reference, ylabel = False, "lowest loss in each slice"
        ax.text(0.02, 0.03, f"k not determined in this sweep\n({_why_not(m, m.primary)}; no law-free reading)",
                transform=ax.transAxes, ha="left", va="bottom", fontsize=6.5, color="0.25")
    else:
        _note_undetermined(ax, m)
    if all(np.isfinite(m.sweep_range)):  # the sweep's range, where the data speak for themselves
        ax.axvspan(*m.sweep_range, color="0.9", lw=0, zorder=0, label="sweep (base's slices)")
        xs += list(m.sweep_range)
    _fit_axes(ax, xs, ys, reference=reference)
    ax.set_ylabel(ylabel)
    score = m.scores.get(m.primary)
    slope = f" (k ∝ C^{m.test.slope:+.3f})" if supports_extrapolation(m, m.primary) else ""
    scored = f", score {score.score:.2g}" if score is not None and math.isfinite(score.score) else ""
    ax.set_title(f"{variant} vs {base}: {m.verdict}{slope}\n{m.primary} answers{scored}", fontsize=8)
    ax.legend(fontsize=6, loc="best")


def _draw_losses(ax, results: pd.DataFrame, families) -> tuple[list[float], list[float]]:
    """Each family's lowest loss per slice (the fits' rows, ``main_rows``): what k would be read from."""
    xs: list[float] = []
    ys: list[float] = []
    for fam in families:
        rows = main_rows(results, fam)
        col = "slice_flops" if "slice_flops" in rows.columns else "flops"
        if rows.empty or "loss" not in rows.columns or col not in rows.columns:
            continue
        low = rows.groupby(col)["loss"].min().dropna()
        ax.plot(low.index, low.to_numpy(), "o-", color=family_color(fam), ms=3, lw=1.0,
                label=f"{fam}: lowest loss per slice")
        xs += list(low.index.astype(float))
        ys += list(low.to_numpy(float))
    return xs, ys


def _why_not(m: MultiplierFit, method: str) -> str:
    """Why ``method``'s k is not drawn beyond the sweep, in words."""
    st = m.statuses.get(method)
    return (f"{method}: its fit is flagged" if st is not None and not st.identified
            else f"{method}: band spans > {MAX_DECADES:g} decades")


def supports_extrapolation(m: MultiplierFit, method: str) -> bool:
    """Whether ``method``'s k may be drawn beyond the sweep: a frontier law (the law-free reading is
    never extrapolated) whose fit is identified (a flagged fit's k counts inside the sweep only)."""
    st = m.statuses.get(method)
    return method in STYLES and (st is None or st.identified)


def extrapolation_rows(m: MultiplierFit, method: str) -> pd.DataFrame:
    """The rows of ``method`` beyond the sweep that the figure draws: none for a method that does not
    ``supports_extrapolation``, else those whose band spans at most ``MAX_DECADES`` decades, up to
    the first that does not (a curve is not resumed past an undetermined stretch)."""
    t = m.table[(m.table["method"] == method) & m.table["extrapolated"].astype(bool)].sort_values("compute")
    if not supports_extrapolation(m, method) or t.empty:
        return t.iloc[:0]
    hi_sweep = m.sweep_range[1]
    ok = np.array([band_decades(lo, hi) <= MAX_DECADES for lo, hi in zip(t["lo"], t["hi"])])
    beyond = t["compute"].to_numpy(float) > hi_sweep
    # below the sweep (rare: k C outside the variant's slices) each row stands alone; above it the curve stops
    keep = ok & (~beyond | (np.cumsum(~ok & beyond) == 0))
    return t[keep]


def _draw_pair(ax, m: MultiplierFit, variant: str) -> tuple[list[float], list[float]]:
    """One pair's points, curves and bands on ``ax``; the x and y values drawn (for the limits)."""
    xs: list[float] = []
    ys: list[float] = []

    def keep(c, *y) -> None:
        for v in y:
            ok = np.isfinite(np.asarray(v, float)) & np.isfinite(np.asarray(c, float))
            xs.extend(np.asarray(c, float)[ok])
            ys.extend(np.asarray(v, float)[ok])

    lf = m.table[(m.table["method"] == "lawfree") & np.isfinite(m.table["k"])]
    if len(lf):  # the data's own k, inside the sweep
        ax.errorbar(lf["compute"], lf["k"], yerr=[lf["k"] - lf["lo"], lf["hi"] - lf["k"]], fmt="o", color="k",
                    ms=3, capsize=2, lw=0.8, label="law-free (slice minima)", zorder=3)
        keep(lf["compute"], lf["lo"], lf["k"], lf["hi"])
    for method, (style, law) in STYLES.items():
        t = m.table[m.table["method"] == method].sort_values("compute")
        if t.empty:
            continue
        primary = method == m.primary
        color = family_color(variant) if primary else "0.4"
        inside = t[~t["extrapolated"].astype(bool) & ~np.isin(t["compute"], TARGETS)]
        # a boolean row mask even when empty (an empty list would select no columns)
        banded = inside[np.array([band_decades(lo, hi) <= MAX_DECADES for lo, hi in zip(inside["lo"], inside["hi"])],
                                 dtype=bool)]
        band = banded if primary else banded.iloc[:0]  # only the answering method's band is drawn
        flag = "" if supports_extrapolation(m, method) else ", flagged"
        label = f"{method} ({law}){', answers' if primary else ''}{flag}"
        if len(inside) == 1:  # one budget inside the sweep: a point with its band (a one-point line draws nothing)
            ax.errorbar(inside["compute"], inside["k"],
                        yerr=[band["k"] - band["lo"], band["hi"] - band["k"]] if len(band) else None,
                        fmt="D", color=color, ms=4 if primary else 3, capsize=2, lw=1, label=label, zorder=3)
        elif len(inside):
            if len(band):
                ax.fill_between(band["compute"], band["lo"], band["hi"], color=color, lw=0, alpha=0.18)
            ax.plot(inside["compute"], inside["k"], style, color=color, lw=1.6 if primary else 1.0, label=label)
        keep(inside["compute"], inside["k"])
        keep(band["compute"], band["lo"], band["hi"])
        _draw_extrapolation(ax, m, method, style, color, keep)
    return xs, ys


def _draw_extrapolation(ax, m: MultiplierFit, method: str, style: str, color, keep) -> None:
    """``method``'s curve beyond the sweep (dashed; the primary's with its band) and its targets."""
    primary = method == m.primary
    t = extrapolation_rows(m, method)
    curve = t[~np.isin(t["compute"], TARGETS)]
    if len(curve):
        if primary:
            ax.fill_between(curve["compute"], curve["lo"], curve["hi"], color=color, lw=0, alpha=0.10)
            keep(curve["compute"], curve["lo"], curve["hi"])
        ax.plot(curve["compute"], curve["k"], "--" if primary else style, color=color, lw=1.0 if primary else 0.7)
        keep(curve["compute"], curve["k"])
    tg = t[np.isin(t["compute"], TARGETS) & np.isfinite(t["k"])]  # the targets, with their (calibrated) bands
    if primary and len(tg):
        ax.errorbar(tg["compute"], tg["k"], yerr=[tg["k"] - tg["lo"], tg["hi"] - tg["k"]], fmt="s",
                    color=color, ms=3, capsize=2, lw=1, label="targets (1e20, 7.6e22)")
        keep(tg["compute"], tg["lo"], tg["k"], tg["hi"])


def _note_undetermined(ax, m: MultiplierFit) -> None:
    """Say where the answering method's k is not determined beyond the sweep (not drawn there)."""
    t = m.table[(m.table["method"] == m.primary) & (m.table["compute"] > m.sweep_range[1] * 1.0001)]
    if t.empty:
        return
    drawn = extrapolation_rows(m, m.primary)
    reach = drawn["compute"].max() if len(drawn) else m.sweep_range[1]
    if reach >= t["compute"].max():
        return
    ax.text(0.98, 0.03, f"k not determined beyond C = {reach:.2g}\n({_why_not(m, m.primary)})", transform=ax.transAxes,
            ha="right", va="bottom", fontsize=6.5, color="0.25")


def _fit_axes(ax, xs, ys, *, reference: bool = True) -> None:
    """Log limits that fit what is drawn (``_padded``); k = 1 is drawn and kept in view only
    when it lies within ``REFERENCE_REACH`` of the data, so a reference never stretches an axis by decades."""
    ys = [y for y in ys if y > 0]
    xs = [x for x in xs if x > 0]
    ax.set_yscale("log")
    if not ys or not xs:
        compute_axis(ax, "compute C (FLOPs)")
        ax.text(0.5, 0.5, "no k could be read (and no losses to show)", transform=ax.transAxes, ha="center")
        return
    lo, hi = min(ys), max(ys)
    if reference and lo / REFERENCE_REACH <= 1.0 <= hi * REFERENCE_REACH:
        ax.axhline(1.0, color="0.5", lw=0.8)
        lo, hi = min(lo, 1.0), max(hi, 1.0)
    ax.set_ylim(*_padded(lo, hi))
    if math.log10(hi / lo) < PLAIN_DECADES:  # 0.5, 1, 2, 3, 5: matplotlib would label every minor tick 6×10^-1
        dense = math.log10(hi / lo) < 0.5  # a narrow axis needs more than 1, 2, 3, 5 to show two labels
        subs = (1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0) if dense else (1.0, 2.0, 3.0, 5.0)
        ax.yaxis.set_major_locator(ticker.LogLocator(subs=subs, numticks=40))
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_xscale("log")
    ax.set_xlim(*_padded(min(xs), max(xs)))
    compute_axis(ax, "compute C (FLOPs)")
    if min(xs) <= TARGETS[-1] <= max(xs):
        ax.axvline(TARGETS[-1], color="0.6", lw=0.8, ls="--")  # Steerling-8B's compute, when drawn to



def _padded(lo: float, hi: float) -> tuple[float, float]:
    """Log limits around [lo, hi]: ``PAD_SHARE`` of its decades plus ``PAD_DECADES`` each side."""
    pad = 10 ** (PAD_SHARE * math.log10(hi / lo) + PAD_DECADES)
    return lo / pad, hi * pad
