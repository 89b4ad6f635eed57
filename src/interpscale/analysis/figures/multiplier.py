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


def multiplier_figure(results: pd.DataFrame, *, fits=None, n_boot: int | None = None):
    """k(C) of each backbone/+Concept pair: the IsoFLOP-envelope curve and band from the sweep to
    7.6e22 (dashed beyond the sweep), the joint fits' k at the same computes, k = 1 for reference."""
    import matplotlib.pyplot as plt

    ms = {p: m for p, m in family_multipliers(results, estimator=getattr(fits, "estimator", None),
                                               annealed=getattr(fits, "annealed", True)).items()
          if isinstance(m, MultiplierFit)}
    if not ms:
        pairs = backbone_pairs(results["family"].unique()) if "family" in results else []
        raise ValueError(f"no backbone/+Concept pair of families with a compute multiplier (pairs: {pairs})")
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
            ax.set(xscale="log", yscale="log", xlabel="compute C (FLOPs)", ylabel=f"k(C): {variant} / {base}")
            ax.set_title(f"{variant} vs {base}: {m.verdict} (k ∝ C^{m.test.slope:+.3f})", fontsize=9)
            ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
    return fig
