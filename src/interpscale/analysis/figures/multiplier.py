"""The compute multiplier k(C) of each +Concept family against its backbone (issue 36,
docs/multiplier.md): the figure and the report's section, from one ``scaling.multiplier.fit_multiplier``
per pair made once per process and table."""

from __future__ import annotations

import logging
import math

import numpy as np
import pandas as pd

from interpscale.analysis.figures._style import family_color, paper_style
from interpscale.scaling import inputs_hash, quiet
from interpscale.scaling.multiplier import (MULTIPLIER_BOOT, TARGETS, MultiplierFit, backbone_pairs, family_forecasts,
                                           fit_multiplier)

log = logging.getLogger("interpscale.analysis.figures")

CURVE_POINTS = 24  # computes per decade-spanning curve of the figure
_MULTIPLIERS: dict = {}  # (table hash, options) -> {(base, variant): MultiplierFit | reason}



def family_multipliers(results: pd.DataFrame, *, estimator: str | None = None, annealed: bool | None = True,
                       level: float = 0.9, calibrate: bool = True) -> dict:
    """{(base, variant): MultiplierFit, or the reason it could not be made} for ``backbone_pairs``,
    on the base's slices, a curve out to the largest target and the ``TARGETS``; with ``calibrate``
    the bands at the targets are widened to the families' calibrated forecast intervals."""
    if "annealed" not in results.columns:
        annealed = None
    options = dict(estimator=estimator, annealed=annealed, level=level, calibrate=calibrate, n_boot=MULTIPLIER_BOOT)
    key = inputs_hash(results, options)
    if key in _MULTIPLIERS:
        return _MULTIPLIERS[key]
    out: dict = {}
    for base, variant in backbone_pairs(results["family"].dropna().unique()):
        rows = results[results["family"] == base]["slice_flops"].dropna()
        if rows.empty:
            out[(base, variant)] = f"{base} has no slice_flops"
            continue
        curve = np.unique(np.r_[rows.unique(), np.geomspace(rows.min(), max(TARGETS), CURVE_POINTS)])
        try:
            with quiet():
                fc = family_forecasts(results, base, variant, TARGETS, estimator=estimator, annealed=annealed,
                                      level=level) if calibrate else None
            out[(base, variant)] = fit_multiplier(results, base, variant, computes=curve, estimator=estimator,
                                                  annealed=annealed, level=level, forecasts=fc,
                                                  n_boot=MULTIPLIER_BOOT)
        except ValueError as exc:
            log.warning("compute multiplier %s vs %s not made: %s", variant, base, exc)
            out[(base, variant)] = str(exc)
    _MULTIPLIERS.clear()  # one table at a time
    _MULTIPLIERS[key] = out
    return out


def _shown(m: MultiplierFit, results: pd.DataFrame) -> pd.DataFrame:
    """The rows the report lists: the base's slices and the targets."""
    slices = results[results["family"] == m.base]["slice_flops"].dropna().unique()
    keep = np.isin(np.round(np.log(m.table["compute"]), 6), np.round(np.log(np.r_[slices, TARGETS]), 6))
    return m.table[keep]


def multiplier_markdown(m: MultiplierFit, results: pd.DataFrame) -> str:
    """One pair's table (k and band per method at the base's slices and the targets) and its tests."""
    t = _shown(m, results)
    rows = []
    for c, g in t.groupby("compute", sort=True):
        row = {"C": f"{c:.3g}", "extrapolated": "yes" if g["extrapolated"].any() else "no"}
        for r in g.itertuples():
            row[f"k ({r.method})"] = f"{r.k:.3g} [{r.lo:.3g}, {r.hi:.3g}]"
        rows.append(row)
    table = pd.DataFrame(rows)
    head = "| " + " | ".join(table.columns) + " |\n|" + "---|" * len(table.columns)
    body = "\n".join("| " + " | ".join(str(v) for v in r) + " |" for r in table.itertuples(index=False))
    lines = [f"**{m.variant} vs {m.base}** (k > 1: {m.variant} needs k times {m.base}'s compute for "
             f"{m.base}'s compute-optimal loss; {m.level:.0%} bands)", "", head, body, ""]
    for method, g in m.growth.items():
        st = m.statuses.get(method)
        flag = "" if st is None or st.identified else f" — fit {st}"
        lines.append(f"- Growth test ({method}{', the verdict' if method == m.primary else ''}): k ∝ "
                     f"C^{g.slope:+.3f} [{g.slope_lo:+.3f}, {g.slope_hi:+.3f}], p = {g.p_value:.2g}: "
                     f"**{g.verdict}**{flag}. Assumes: {g.assumes}.")
    s = m.shared_exponent
    if s is not None and math.isfinite(s.statistic):
        lines.append(f"- Shared vs free envelope exponents (α_L {s.alpha_base:.4f} vs {s.alpha_variant:.4f}): "
                     f"F({s.df[0]}, {s.df[1]}) = {s.statistic:.3g}, p = {s.p_value:.2g}. Assumes: {s.assumes}.")
    return "\n".join(lines)


INTRO = ("k(C) = C_variant(L*_base(C)) / C: the compute a +Concept family needs to reach its backbone's "
         "compute-optimal loss at C (k > 1: a tax, k < 1: a gain), from the IsoFLOP envelopes (Eq. 26) and the "
         "joint fits (Eq. 27), with bootstrap bands paired by slice, extrapolated to 1e20 and Steerling-8B's "
         "7.6e22 (bands there widened to the forecasts' calibrated intervals where the backtest allows). The "
         "growth test asks whether k changes with C (docs/multiplier.md).")


def multiplier_section(results: pd.DataFrame, fits=None) -> list[str]:
    """The report's "Compute multiplier" section (empty when the table has no backbone/+Concept pair)."""
    pairs = backbone_pairs(results["family"].dropna().unique()) if "family" in results.columns else []
    if not pairs:
        return []
    ms = family_multipliers(results, estimator=getattr(fits, "estimator", None),
                            annealed=getattr(fits, "annealed", True))
    blocks = [INTRO, ""]
    for (base, variant), m in ms.items():
        blocks += [multiplier_markdown(m, results) if isinstance(m, MultiplierFit)
                   else f"**{variant} vs {base}**: not made: {m}", ""]
    return ["## Compute multiplier", "", *blocks]


def multiplier_figure(results: pd.DataFrame, *, fits=None, n_boot: int | None = None):
    """k(C) of each backbone/+Concept pair: the IsoFLOP-envelope curve and band from the sweep to
    7.6e22 (dashed beyond the sweep), the joint fits' k at the same computes, k = 1 for reference."""
    import matplotlib.pyplot as plt

    ms = {p: m for p, m in family_multipliers(results, estimator=getattr(fits, "estimator", None),
                                               annealed=getattr(fits, "annealed", True)).items()
          if isinstance(m, MultiplierFit)}
    if not ms:
        raise ValueError("no backbone/+Concept pair of families with a compute multiplier "
                         f"(pairs: {backbone_pairs(results['family'].unique()) if 'family' in results else []})")
    with paper_style():
        fig, axes = plt.subplots(1, len(ms), figsize=(4.2 * len(ms), 3.4), squeeze=False)
        for ax, ((base, variant), m) in zip(axes[0], ms.items()):
            span = []
            for method, style in (("isoflop", "-"), ("joint", ":")):
                t = m.table[m.table["method"] == method].sort_values("compute")
                if t.empty:
                    continue
                color = family_color(variant) if method == "isoflop" else "0.35"
                at_target = np.isin(t["compute"], TARGETS)
                c, k = t["compute"][~at_target], t["k"][~at_target]
                ax.fill_between(c, t["lo"][~at_target], t["hi"][~at_target], color=color, lw=0,
                                alpha=0.18 if method == "isoflop" else 0.08)
                ax.plot(c, k, style, color=color, lw=1.6, label=f"{method} (Eq. {26 if method == 'isoflop' else 27})")
                ax.plot(c[~t["extrapolated"][~at_target]], k[~t["extrapolated"][~at_target]], "o", color=color, ms=3)
                tg = t[at_target & np.isfinite(t["k"])]  # the targets, with their (calibrated) bands
                ax.errorbar(tg["compute"], tg["k"], yerr=[tg["k"] - tg["lo"], tg["hi"] - tg["k"]], fmt="s",
                            color=color, ms=3, capsize=2, lw=1)
                if method == m.primary:
                    span += [t["lo"].min(), t["hi"].max()]
            lo, hi = (min(span), max(span)) if span and np.isfinite(span).all() and min(span) > 0 else (0.1, 10)
            ax.set_ylim(min(lo, 1.0) / 1.3, max(hi, 1.0) * 1.3)
            ax.axhline(1.0, color="0.5", lw=0.8)
            ax.axvline(7.6e22, color="0.6", lw=0.8, ls="--")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("compute C (FLOPs)")
            ax.set_ylabel(f"k(C): {variant} / {base}")
            ax.set_title(f"{variant} vs {base}: {m.verdict} (k ∝ C^{m.test.slope:+.3f})", fontsize=9)
            ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
    return fig
