"""Figure 14: mean Phase 2 fit score per candidate type with 95% intervals (forest plot)."""

from __future__ import annotations

import os

import pandas as pd

from interpscale.analysis.figures._style import new_figure, paper_style, save_figure
from interpscale.errors import UserError

TYPE_LABELS = {"llm": "LLM label", "human": "human label", "embedding": "embedding distractor",
               "taxonomy": "taxonomy distractor", "filler": "filler (floor)"}


def forest_figure(summary: pd.DataFrame, *, ax=None, midpoint: float = 3.0, scale: tuple[float, float] = (1, 5),
                  out_dir: str | os.PathLike | None = None, name: str = "fig14_human_study_forest"):
    """Figure 14 from ``type_summary(...)`` (index = candidate type, top to bottom; ``mean, ci_lo,
    ci_hi``, ``n`` shown when present), dotted at the neutral ``midpoint``. With ``out_dir`` it is
    saved (PNG + PDF) and the paths returned; else the Figure is."""
    missing = [c for c in ("mean", "ci_lo", "ci_hi") if c not in summary.columns]
    if missing:
        raise UserError(f"Figure 14 needs column(s) {missing} (from type_summary); present: {list(summary.columns)}")
    if summary.empty:
        raise UserError("Figure 14: the summary table has no rows")
    with paper_style():
        if ax is None:
            ax = new_figure(1, 1, panel_height=0.32 * len(summary) + 0.6)[1][0, 0]
        fig = ax.figure
        y = list(range(len(summary)))[::-1]
        xerr = [summary["mean"] - summary["ci_lo"], summary["ci_hi"] - summary["mean"]]
        ax.errorbar(summary["mean"], y, xerr=xerr, fmt="o", color="#0072B2", capsize=2.5, lw=1.0)
        labels = [TYPE_LABELS.get(str(t), str(t)) for t in summary.index]
        if "n" in summary.columns:
            labels = [f"{lab} (n={int(n)})" for lab, n in zip(labels, summary["n"])]
        ax.set_yticks(y, labels)
        ax.axvline(midpoint, ls=":", color="0.4", lw=0.8)
        ax.set_xlim(scale[0] - 0.1, scale[1] + 0.1)
        ax.set_xlabel(f"mean fit score ({scale[0]}–{scale[1]}), 95% CI")
        ax.grid(axis="y", visible=False)
    return fig if out_dir is None else save_figure(fig, out_dir, name)
