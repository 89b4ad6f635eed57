"""The report's "Annealed losses from a subset of branches" section (issue 36, docs/anneal.md):
anneal steps trained and saved, the predictor chosen per family with its leave-one-branch-out
error and interval, and what the fits see."""

from __future__ import annotations

import pandas as pd

from interpscale.scaling.anneal_rows import loo_errors, loo_table, with_predicted_anneals

INTRO = ("Each run anneals some of its reservoir checkpoints (`[train] anneal`); the annealed loss at the "
         "others is predicted from the stable curve and the trained branches by the predictor with the "
         "smallest leave-one-branch-out error in the family, with an interval from those errors "
         "(docs/anneal.md). IsoFLOP fits (alpha_P, L*, the compute multiplier's envelopes) use each run's "
         "main anneal, which is always trained, so they do not move; predicted rows enter a fit only with "
         "`fit families --predicted-anneals`.")


def _md(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    rows = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in df.itertuples(index=False):
        rows.append("| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in r) + " |")
    return "\n".join(rows)


def anneal_summary(results: pd.DataFrame) -> pd.DataFrame:
    """Per family: branches trained and predicted, anneal steps trained and saved, the predictor and
    its mean interval half-width (%). Empty when no run has a checkpoint left to predict."""
    if "anneal_from" not in results.columns or "annealed" not in results.columns:
        return pd.DataFrame()
    full = with_predicted_anneals(results)
    pred = full[full["predicted"].astype(bool)]
    if not len(pred):
        return pd.DataFrame()
    meas = full[~full["predicted"].astype(bool) & full["annealed"].astype(bool) & full["anneal_from"].notna()]
    # one estimator per branch: steps are counted once per (run, branch)
    meas = meas.drop_duplicates(["run_id", "anneal_from"])
    pred = pred.assign(half_width=(pred["loss_hi"] / pred["loss"] - 1) * 100)
    out = []
    for fam, p in pred.groupby("family", sort=True):
        m = meas[meas["family"] == fam]
        p1 = p.drop_duplicates(["run_id", "anneal_from"])
        out.append({"family": fam, "branches trained": len(m), "branches predicted": len(p1),
                    "anneal steps trained": int((m["step"] - m["anneal_from"]).sum()),
                    "anneal steps saved": int((p1["step"] - p1["anneal_from"]).sum()),
                    "predictor": ", ".join(sorted(p["anneal_method"].unique())),
                    "interval ± %": float(p["half_width"].mean())})
    return pd.DataFrame(out)


def anneal_section(results: pd.DataFrame) -> list[str]:
    """Markdown lines of the section (empty when the table has nothing to predict)."""
    summary = anneal_summary(results)
    if not len(summary):
        return []
    table = loo_table(loo_errors(results))
    table = table.rename(columns={"mean_abs_pct": "mean abs err %", "max_abs_pct": "max abs err %",
                                  "mean_pct": "mean err %"})
    return ["## Annealed losses from a subset of branches", "", INTRO, "", _md(summary), "",
            "Leave-one-branch-out error of each predictor (trained branches only):", "", _md(table), ""]
