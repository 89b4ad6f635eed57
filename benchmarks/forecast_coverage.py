"""Coverage of forecast intervals on held-out targets of three public scaling studies (issue 27).

For every held-out target (OLMo ladder 7B-4T and 13B-5T: C4 loss and 8 task losses; over-training
1.4B and 6.9B runs: every corpus and evaluation split; datablations: the runs of the largest
budget decade) the chosen method is fitted on the smaller runs and asked for the target's loss at
its (P, D): the raw bootstrap prediction interval and the calibrated one by the rule
``--calibration`` names (``scaling.forecast``; default: the library's). Prints the coverage
table of docs/forecasting.md (markdown) and, with ``--csv``, every forecast.

Intervals far beyond the sweep (issue 36, docs/reach.md): each target is calibrated twice, without
the error-growth widening beyond the largest tested ratio (``before_*`` columns) and with the
relation of ``scaling.reach`` fitted on the *other* studies' forecasts (leave one study out; the
table's calibrated columns); the coverage by extrapolation-ratio bin (<= 3x, 3-30x, > 30x) and the
relation (all studies, each alone, each left out) are printed below the study table; ``--errors``
writes the relation's rows (every scored backtest forecast and held-out target: study, series,
kind, ratio, log error, bootstrap log spread), the file tests/data/scaling_public/reach_errors.csv.

    python benchmarks/forecast_coverage.py [--n-boot 200] [--level 0.9] [--csv out.csv] [--laws]
                                           [--calibration distance|studentized|studentized-signed]
                                           [--errors rows.csv] [--relation loso|public]

``--laws`` uses each study's own published law (``scaling.laws.register_law_methods``):
``ladder`` step 1 on the OLMo ladder, ``overtraining`` on the over-training runs and
``data-constrained`` on datablations, instead of the ``joint`` method for all.

Data: tests/data/scaling_public/ (each folder's PROVENANCE.md names the source and licence).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from interpscale.scaling import quiet, reach
from interpscale.scaling.forecast import CALIBRATIONS, ForecastOptions, calibrated, get_method, rolling_origin, spread

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
BINS = ((0.0, 3.0, "<= 3x"), (3.0, 30.0, "3-30x"), (30.0, math.inf, "> 30x"))


def cases():
    for group in (ladder_cases(), overtraining_cases(), datablations_cases()):
        yield from group


def _forecast_case(study, metric, train, test, method, o):
    """One fit and one rolling-origin backtest of ``method`` on ``train``: the backtest's scored
    forecasts and each held-out target's forecast as error-growth rows (``scaling.reach``), and
    what the calibration needs later."""
    m = get_method(method)
    errors = rolling_origin(train, [method], o)
    with quiet():
        fit = m.fit(train, o)
    c_max = float((o.k * train["params"] * train["tokens"]).max())
    series = f"{study}: {metric}"
    ok = errors[errors["status"] == "ok"].dropna(subset=["log_error"])
    rows = [ok.assign(study=study, series=series, kind="backtest")[["study", "series", "kind", "ratio", "log_error",
                                                                    "spread"]]]
    targets = []
    for t in test.to_dict("records"):
        P, D, C = float(t["params"]), float(t["tokens"]), o.k * float(t["params"]) * float(t["tokens"])
        pred = m.predict(fit, C, o, P, D)[0]
        u = math.log(float(t["loss"]) / pred) if pred > 0 else math.nan
        targets.append(dict(t, ratio=C / c_max, compute=C, log_error=u, spread=spread(m, fit, C, o, P, D)))
    tr = pd.DataFrame(targets)
    rows.append(tr.assign(study=study, series=series, kind="target")[["study", "series", "kind", "ratio", "log_error",
                                                                       "spread"]])
    return pd.concat(rows, ignore_index=True), (study, metric, method, m, fit, errors, targets, o)


def _calibrate_targets(case, relation) -> list[dict]:
    """Each held-out target's calibrated interval without the error-growth widening (``before``)
    and with ``relation`` (fitted without the target's study), as in ``forecast_runs``."""
    study, metric, method, m, fit, errors, targets, o = case
    ok = errors[(errors["status"] == "ok")].dropna(subset=["log_error"])
    out = []
    for t in targets:
        P, D, C, obs = float(t["params"]), float(t["tokens"]), t["compute"], float(t["loss"])
        rec = dict(study=study, metric=metric, method=method, calibration=o.calibration, ratio=t["ratio"],
                   max_tested_ratio=float(ok["ratio"].max()) if len(ok) else math.nan, n_backtest=len(ok),
                   observed=obs, spread=t["spread"])
        for tag, rel in (("before_", None), ("", relation)):
            with reach.using(rel):
                pred, lo, hi, clo, chi, msd = calibrated(m, fit, C, o, errors, t["ratio"], P, D)
            rec.update({f"{tag}lo": clo, f"{tag}hi": chi, f"{tag}model_sd": msd, f"{tag}covered": bool(clo <= obs <= chi),
                        f"{tag}width": (chi - clo) / obs, f"{tag}half_width": max(pred - clo, chi - pred) / obs})
        rec.update(predicted=pred, raw_lo=lo, raw_hi=hi, abs_rel_error=abs(pred / obs - 1), covered_raw=bool(lo <= obs <= hi),
                   raw_width=(hi - lo) / obs, raw_half_width=max(pred - lo, hi - pred) / obs)
        out.append(rec)
    return out


def run(n_boot: int, level: float, laws: bool = False, calibration: str = ForecastOptions.calibration,
        relation: str = "loso", own_spread: bool = False) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(per-target forecasts, error-growth rows, {study: relation fitted without it}); each target
    calibrated without the widening (``before_*`` columns) and with its leave-one-study-out relation
    (``relation="public"``: with ``reach.PUBLIC``, what the library uses by default)."""
    if laws:
        from interpscale.scaling.laws import register_law_methods

        register_law_methods()  # the published laws as forecast methods
    rows, done = [], []
    for study, metric, train, test in cases():
        o = ForecastOptions(n_boot=n_boot, level=level, k=6.0, calibration=calibration)
        r, case = _forecast_case(study, metric, train.reset_index(drop=True), test.reset_index(drop=True),
                                 LAWS[study] if laws else "joint", o)
        rows.append(r)
        done.append(case)
    rows = pd.concat(rows, ignore_index=True)
    loso = reach.leave_one_study_out(rows)
    if own_spread:  # sigma from each backtest's own spreads, gamma from the relation
        loso = {k: replace(v, own_spread=True) for k, v in loso.items()}
    public = replace(reach.PUBLIC, own_spread=own_spread)
    f = pd.DataFrame([rec for case in done for rec in _calibrate_targets(
        case, public if relation == "public" else loso[case[0]])])
    return f, rows, loso


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


def bin_table(f: pd.DataFrame) -> str:
    """Per extrapolation-ratio bin (target compute over the largest fitted compute) and pooled:
    coverage and median widths / MAE of the calibrated interval without (before) and with (after)
    the error-growth widening beyond the largest tested ratio."""
    lines = ["| ratio bin | targets | median ratio | beyond tested | median abs. error % | coverage before | "
             "coverage after | full / MAE before | after | half / MAE before | after |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    groups = [(name, f[(f["ratio"] > lo) & (f["ratio"] <= hi)]) for lo, hi, name in BINS] + [("all", f)]
    for name, g in groups:
        if g.empty:
            lines.append(f"| {name} | 0 | | | | | | | | | |")
            continue
        mae = float(g["abs_rel_error"].median())
        beyond = int((g["ratio"] > g["max_tested_ratio"]).sum())
        lines.append(f"| {name} | {len(g)} | {g['ratio'].median():.3g}x | {beyond} | {100 * mae:.2f} | "
                     f"{g['before_covered'].mean():.2f} | {g['covered'].mean():.2f} | "
                     f"{g['before_width'].median() / mae:.2f} | {g['width'].median() / mae:.2f} | "
                     f"{g['before_half_width'].median() / mae:.2f} | {g['half_width'].median() / mae:.2f} |")
    return "\n".join(lines)


def relation_table(rows: pd.DataFrame, loso: dict) -> str:
    """The error-growth relation fitted on all studies, on each study alone and without each."""
    fits = {"all studies": reach.fit_error_growth(rows)}
    for study in sorted(set(rows["study"])):
        try:
            fits[f"{study} only"] = reach.fit_error_growth(rows[rows["study"] == study])
        except ValueError:
            pass
        fits[f"without {study}"] = loso[study]
    lines = ["| fitted on | forecasts | series | gamma (ln abs u on ln d) | sigma (ln s on ln d) | "
             "delta = gamma - sigma | largest ratio |", "|---|---|---|---|---|---|---|"]
    for name, r in fits.items():
        lines.append(f"| {name} | {r.n} | {r.series} | {r.gamma:.3f} ± {r.gamma_se:.3f} | {r.sigma:.3f} ± "
                     f"{r.sigma_se:.3f} | {r.slope('studentized'):.3f} ± {r.delta_se:.3f} | {r.max_ratio:.3g}x |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--level", type=float, default=0.9)
    ap.add_argument("--csv", type=Path, help="every held-out forecast (before_* columns: without the widening)")
    ap.add_argument("--errors", type=Path, help="the error-growth rows (backtest forecasts and held-out targets)")
    ap.add_argument("--laws", action="store_true", help="each study's own published law instead of joint")
    ap.add_argument("--calibration", choices=CALIBRATIONS, default=ForecastOptions.calibration)
    ap.add_argument("--relation", choices=("loso", "public"), default="loso",
                    help="after: the relation fitted without the target's study (loso) or reach.PUBLIC")
    ap.add_argument("--own-spread", action="store_true",
                    help="after: sigma from each backtest's own spreads (reach.own_sigma), gamma from the relation")
    args = ap.parse_args()
    f, rows, loso = run(args.n_boot, args.level, args.laws, args.calibration, args.relation, args.own_spread)
    if args.csv:
        f.to_csv(args.csv, index=False)
    if args.errors:
        rows.to_csv(args.errors, index=False, float_format="%.6g")
    print(table(f, args.level))
    print("\nBy extrapolation ratio (calibrated interval; after = with " + (
        "reach.PUBLIC" if args.relation == "public" else "the error-growth relation fitted without the target's study")
        + "):\n")
    print(bin_table(f))
    print("\nError-growth relation (scaling.reach; slopes ± cluster-robust standard errors):\n")
    print(relation_table(rows, loso))
    how = "each study's own law (" + ", ".join(sorted(set(f["method"]))) + ")" if args.laws else "joint method (Eq. 27)"
    print(f"\n{len(f)} held-out targets; {how} fitted on the smaller runs of each study; "
          f"{args.n_boot} bootstrap replicates; {args.calibration} calibration; backtest forecasts per fit: "
          f"{int(f['n_backtest'].median()) if len(f) else math.nan} (median)")


if __name__ == "__main__":
    main()
