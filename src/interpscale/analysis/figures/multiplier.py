"""The compute multiplier k(C) of each +Concept family against its backbone (issue 36,
docs/multiplier.md): the figure of ``scaling.analysis.family_multipliers``, the fits it shares
with ``fit families``' multiplier.csv and the report's section (made once per process and table)."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from interpscale.analysis.figures._style import family_color, paper_style
from interpscale.scaling.analysis import family_multipliers  # the one computation (with the CLI and the report)
from interpscale.scaling.multiplier import TARGETS, MultiplierFit, backbone_pairs

log = logging.getLogger("interpscale.analysis.figures")


STYLES = {"isoflop": ("-", "Eq. 26"), "saturating": ("-.", "E + a C^alpha"), "joint": (":", "Eq. 27")}


def multiplier_figure(results: pd.DataFrame, *, fits=None, n_boot: int | None = None, multipliers=None):
    """k(C) of each backbone/+Concept pair: each frontier law's curve out to 7.6e22 (the method that
    answered in colour with its band, dashed beyond the sweep), the law-free k inside the sweep with
    its band, k = 1 for reference; the title names the verdict and the method that answered."""
    import matplotlib.pyplot as plt

    if multipliers is None:  # an Analysis's, else the table's (scaling.analysis.family_multipliers)
        multipliers = family_multipliers(results, estimator=getattr(fits, "estimator", None),
                                         annealed=getattr(fits, "annealed", True))
    ms = {p: m for p, m in multipliers.items() if isinstance(m, MultiplierFit)}
    if not ms:
        pairs = backbone_pairs(results["family"].unique()) if "family" in results else []
        raise ValueError(f"no backbone/+Concept pair of families with a compute multiplier (pairs: {pairs})")
    with paper_style():
        fig, axes = plt.subplots(1, len(ms), figsize=(4.2 * len(ms), 3.6), squeeze=False)
        for ax, ((base, variant), m) in zip(axes[0], ms.items()):
            span = _draw_pair(ax, m, variant)
            lo, hi = (min(span), max(span)) if span and np.isfinite(span).all() and min(span) > 0 else (0.1, 10)
            ax.set_ylim(min(lo, 1.0) / 1.3, max(hi, 1.0) * 1.3)
            ax.axhline(1.0, color="0.5", lw=0.8)
            ax.axvline(7.6e22, color="0.6", lw=0.8, ls="--")
            ax.set(xscale="log", yscale="log", xlabel="compute C (FLOPs)", ylabel=f"k(C): {variant} / {base}")
            score = m.scores.get(m.primary)
            ax.set_title(f"{variant} vs {base}: {m.verdict} (k ∝ C^{m.test.slope:+.3f})\n{m.primary} answers"
                         + (f", score {score.score:.2g}" if score is not None else ""), fontsize=8)
            ax.legend(fontsize=6, loc="best")
        fig.tight_layout()
    return fig


def _draw_pair(ax, m: MultiplierFit, variant: str) -> list[float]:
    """One pair's curves, bands and points on ``ax``; the primary's band range (for the limits)."""
    span = []
    for method, (style, law) in STYLES.items():
        t = m.table[m.table["method"] == method].sort_values("compute")
        if t.empty:
            continue
        primary = method == m.primary
        color = family_color(variant) if primary else "0.4"
        at_target = np.isin(t["compute"], TARGETS)
        c, k, ext = t["compute"][~at_target], t["k"][~at_target], t["extrapolated"][~at_target].to_numpy(bool)
        if primary:
            ax.fill_between(c, t["lo"][~at_target], t["hi"][~at_target], color=color, lw=0, alpha=0.18)
            span += [t["lo"].min(), t["hi"].max()]
        ax.plot(c[~ext], k[~ext], style, color=color, lw=1.6 if primary else 1.0,
                label=f"{method} ({law}){', answers' if primary else ''}")
        ax.plot(c[ext], k[ext], "--" if primary else style, color=color, lw=1.0 if primary else 0.7)
        tg = t[at_target & np.isfinite(t["k"])]  # the targets, with their (calibrated) bands
        if primary and len(tg):
            ax.errorbar(tg["compute"], tg["k"], yerr=[tg["k"] - tg["lo"], tg["hi"] - tg["k"]], fmt="s",
                        color=color, ms=3, capsize=2, lw=1)
    lf = m.table[m.table["method"] == "lawfree"]
    if len(lf):
        ax.errorbar(lf["compute"], lf["k"], yerr=[lf["k"] - lf["lo"], lf["hi"] - lf["k"]], fmt="o", color="k",
                    ms=3, capsize=2, lw=0.8, label="law-free (slice minima)")
    return span
