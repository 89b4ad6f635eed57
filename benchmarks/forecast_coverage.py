"""Coverage of forecast intervals on held-out targets of three public scaling studies (issue 27).

For every held-out target (OLMo ladder 7B-4T and 13B-5T: C4 loss and 8 task losses; over-training
1.4B and 6.9B runs: every corpus and evaluation split; datablations: the runs of the largest
budget decade) the chosen method is fitted on the smaller runs and asked for the target's loss at
its (P, D): the raw bootstrap prediction interval and the calibrated one by the rule
``--calibration`` names (``scaling.calibration``; default: the library's). Prints the coverage
table of docs/forecasting.md (markdown) and, with ``--csv``, every forecast.

    python benchmarks/forecast_coverage.py [--n-boot 200] [--level 0.9] [--csv out.csv] [--laws]
                                           [--calibration distance|studentized|studentized-signed]

``--laws`` uses each study's own published law (``scaling.law_methods.register_law_methods``):
``ladder`` step 1 on the OLMo ladder, ``overtraining`` on the over-training runs and
``data-constrained`` on datablations, instead of the ``joint`` method for all.

Data: tests/data/scaling_public/ (each folder's PROVENANCE.md names the source and licence).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

from interpscale.scaling.forecasting import CALIBRATIONS, ForecastOptions, forecast_runs

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "scaling_public"
MMLU = {"stem": 0.215, "humanities": 0.335, "social_sciences": 0.219, "other": 0.231}  # authors' weights
TASKS = ("hellaswag_val", "arc_challenge_test", "arc_easy_test", "piqa_val", "csqa_val", "socialiqa_val",
         "openbookqa_test")


def _ladder_points(log: pd.DataFrame) -> pd.DataFrame:
    """Per run: the mean of each metric over its last 5 logged rows, D at the last row (the
    authors' step-1 points); MMLU the weighted mean of its four categories."""
    log = log.copy()
    tok = log["throughput/total_tokens"].astype(float)
    log["tokens"] = tok.where(tok.notna(), log["_step"].astype(float) * log["batch_size_in_tokens"].astype(float))
    bpb = {t: f"eval/downstream_bpb/{t}_rc_5shot_bpb" for t in TASKS}
    log["mmlu"] = sum(w * log[f"eval/downstream_bpb/mmlu_{c}_test_rc_5shot_bpb"] for c, w in MMLU.items())
    metrics = {"c4": "eval/c4_en-validation/CrossEntropyLoss", "mmlu": "mmlu", **bpb}
    rows = []
    for run, g in log.groupby("run", sort=False):
        last = g.tail(5)
        rows.append({"run": run, "params": float(g["params"].iloc[0]), "tokens": float(g["tokens"].iloc[-1]),
                     **{m: float(last[c].astype(float).mean()) for m, c in metrics.items()}})
    return pd.DataFrame(rows)


def ladder_cases():
    pts = _ladder_points(pd.read_csv(DATA / "olmo_ladder_bhagia2024" / "ladder_runs.csv.gz"))
    held = pts["run"].str.startswith("peteish")
    for metric in [c for c in pts.columns if c not in ("run", "params", "tokens")]:
        train = pts[~held].rename(columns={metric: "loss"})[["params", "tokens", "loss"]]
        test = pts[held].rename(columns={metric: "loss"})[["run", "params", "tokens", "loss"]]
        yield "OLMo ladder", metric, train, test


def overtraining_cases():
    d = pd.read_csv(DATA / "overtraining_gadre2024" / "gadre_runs.csv")
    for ds, g in d.groupby("dataset"):
        held = g["N"] > 1e9  # the 1.4B and 6.9B runs
        for col in [c for c in g.columns if c.startswith("loss_")]:
            sub = g.rename(columns={"N": "params", "D": "tokens", col: "loss"})
            yield "over-training", f"{ds} {col[5:]}", sub[~held][["params", "tokens", "loss"]], \
                sub[held][["name", "params", "tokens", "loss"]]


def datablations_cases():
    d = pd.read_csv(DATA / "datablations_muennighoff2023" / "datablations_fit182.csv")
    d = d.rename(columns={"N": "params", "D": "tokens"})
    lc = np.log10(6 * d["params"] * d["tokens"])
    held = lc >= lc.max() - 1.0  # the largest budget decade
    d = d.rename(columns={"U": "unique_tokens"})
    cols = ["params", "tokens", "unique_tokens", "loss"]
    yield "datablations", "c4 (182 runs)", d[~held][cols], d[held][cols]


LAWS = {"OLMo ladder": "ladder", "over-training": "overtraining", "datablations": "data-constrained"}


def run(n_boot: int, level: float, laws: bool = False,
        calibration: str = ForecastOptions.calibration) -> pd.DataFrame:
    if laws:
        from interpscale.scaling.law_methods import register_law_methods

        register_law_methods()  # the published laws as forecast methods
    frames = []
    for cases in (ladder_cases(), overtraining_cases(), datablations_cases()):
        for study, metric, train, test in cases:
            o = ForecastOptions(n_boot=n_boot, level=level, k=6.0, calibration=calibration)
            method = LAWS[study] if laws else "joint"
            f = forecast_runs(train.reset_index(drop=True), test.reset_index(drop=True), method=method, options=o)
            frames.append(f.assign(study=study, metric=metric, method=method))
    return pd.concat(frames, ignore_index=True)


def table(f: pd.DataFrame, level: float) -> str:
    """Per study and overall: coverage and median width / median absolute error of the raw
    bootstrap and the calibrated intervals, widths both as full width (hi - lo) and as
    half-width (the larger of pred - lo, hi - pred), all relative to the observation; and
    q80/q50 of the absolute errors (an interval covering 80% of the targets with one relative
    half-width needs a full width of at least 2 q80/q50 median absolute errors)."""
    pct = round(100 * level)
    lines = [f"| study | targets | median ratio | median abs. error % | abs. error q80/q50 | "
             f"{pct}% bootstrap PI: coverage | full width / MAE | half-width / MAE | "
             f"{pct}% calibrated PI: coverage | full width / MAE | half-width / MAE |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for study, g in list(f.groupby("study", sort=False)) + [("all", f)]:
        mae = float(g["abs_rel_error"].median())
        q80 = float(g["abs_rel_error"].quantile(0.8))
        lines.append(f"| {study} | {len(g)} | {g['ratio'].median():.3g}x | {100 * mae:.2f} | {q80 / mae:.2f} | "
                     f"{g['covered_raw'].mean():.2f} | {g['raw_width'].median() / mae:.2f} | "
                     f"{g['raw_half_width'].median() / mae:.2f} | {g['covered'].mean():.2f} | "
                     f"{g['width'].median() / mae:.2f} | {g['half_width'].median() / mae:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--level", type=float, default=0.9)
    ap.add_argument("--csv", type=Path)
    ap.add_argument("--laws", action="store_true", help="each study's own published law instead of joint")
    ap.add_argument("--calibration", choices=CALIBRATIONS, default=ForecastOptions.calibration)
    args = ap.parse_args()
    f = run(args.n_boot, args.level, args.laws, args.calibration)
    if args.csv:
        f.to_csv(args.csv, index=False)
    print(table(f, args.level))
    how = "each study's own law (" + ", ".join(sorted(set(f["method"]))) + ")" if args.laws else "joint method (Eq. 27)"
    print(f"\n{len(f)} held-out targets; {how} fitted on the smaller runs of each study; "
          f"{args.n_boot} bootstrap replicates; {args.calibration} calibration; backtest forecasts per fit: "
          f"{int(f['n_backtest'].median()) if len(f) else math.nan} (median)")


if __name__ == "__main__":
    main()
