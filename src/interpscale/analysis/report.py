"""``report.md`` + ``report.html`` from a results table: Table 6/7-style fits, warnings, figures.

The report renders one ``scaling.analyse`` result (docs/architecture.md, "The analysis boundary"):
every number in it (fits, trends, multipliers, backtest, predicted anneals) comes from the
``Analysis``; this module only lays it out."""

from __future__ import annotations

import html
import inspect
import logging
import math
import os
import warnings as _warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import pandas as pd

from interpscale import paper
from interpscale._atomic import atomic_write_text
from interpscale._markdown import MAX_DECADES, md_table  # MAX_DECADES: the decades the report states
from interpscale._markdown import banded_cell as k_cell  # the one rule (tables.md and the figure too)
from interpscale.analysis.figures import CORE_COLUMNS, figure_options, render_figures, require_columns
from interpscale.analysis.fit_status import fit_statuses, isoflop_fit_state, joint_fit_state, trend_status
from interpscale.results_table import read_results
from interpscale.scaling import N_BOOT, fmt_sub, log_once
from interpscale.scaling import backtest as backtest_budgets
from interpscale.scaling.analysis import (Analysis, AnalysisOptions, AnnealSummary, analyse, anneal_summary,
                                          anneal_tables, family_multipliers, metric_trends, shown_computes)
from interpscale.scaling.trend import FLAT, NOT_MEASURED, TrendFit
from interpscale.scaling.forecast import forecast_table
from interpscale.scaling.multiplier import MultiplierFit, backbone_pairs
from interpscale.errors import UserError

__all__ = ["anneal_summary", "build_markdown", "isoflop_fit_state", "joint_fit_state", "markdown_to_html",
           "metric_trends", "problem_fits", "report_options", "scaling_table", "status_table", "trend_status",
           "backtest_notes", "write_report"]

log = logging.getLogger("interpscale.analysis.report")

REPORT_BOOT = N_BOOT["forecast"]  # bootstrap replicates for the report's fits (n_boot=10_000: the paper's)
BACKTEST_BOOT = N_BOOT["report_backtest"]  # per refit in the backtest section (one per held-out budget and scheme)


def markdown_table(df: pd.DataFrame, *, floatfmt: str = ".4g") -> str:
    """A GitHub-style pipe table of ``df`` (index dropped; NaN shown as —)."""
    def cell(v: Any) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "—"
        return format(v, floatfmt) if isinstance(v, float) else str(v).replace("|", "\\|").replace("\n", " ")

    return md_table(df.columns, (map(cell, row) for row in df.itertuples(index=False))).rstrip("\n")


def _section(title: str, *blocks: str) -> list[str]:
    """The lines of one ``## title`` section: its ``INTROS`` paragraph and blocks, each then a blank line."""
    intro = [INTROS[title], ""] if title in INTROS else []
    return [f"## {title}", "", *intro, *(line for b in blocks for line in (b, ""))]


def data_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Rows, runs and compute range per (family, estimator, annealed) group."""
    keys = [k for k in ("family", "estimator", "annealed") if k in df.columns]
    rows = []
    for key, g in df.groupby(keys, sort=True, dropna=False):
        rec = dict(zip(keys, key), rows=len(g))  # a list of keys groups by tuples (pandas >= 2)
        if "slice_flops" in g:
            rec["slices"] = g["slice_flops"].nunique()
        if "flops" in g:
            rec["C range"] = f"{g['flops'].min():.2g} – {g['flops'].max():.2g}"
        if "mask_rate" in g and g["mask_rate"].notna().any():
            rec["mask rates"] = g["mask_rate"].nunique()
        rows.append(rec)
    return pd.DataFrame(rows)


def metric_notes(df: pd.DataFrame) -> list[str]:
    """Which interpretability metrics the table holds (rows with a value), which it does not,
    and the judge that scored known concept alignment. A metric with no value is *not measured*."""
    have = {m: int(pd.to_numeric(df[m], errors="coerce").notna().sum())
            for m in paper.INTERP_METRICS if m in df.columns}
    if not any(have.values()):
        why = (f"columns {', '.join(have)} are empty in every row" if have
               else "the table has no interpretability metric column")
        return [f"Interpretability metrics: not measured ({why}).", ""]
    line = ("Interpretability metrics: " + ", ".join(f"{m} ({n} rows)" for m, n in have.items() if n)
            + ("" if all(have.values()) else "; not measured in any row: "
               + ", ".join(m for m, n in have.items() if not n)) + ".")
    if "alignment_judge" in df.columns and df["alignment_judge"].notna().any():
        judges = sorted(map(str, df["alignment_judge"].dropna().unique()))
        note = (" (an offline word-overlap proxy on the 1-5 scale, not an LLM judge; rescore with "
                "`interpscale judge alignment --base-url ... --model ...`)" if judges == ["lexical"] else "")
        line += f" Known concept alignment scored by: {', '.join(judges)}{note}."
    return [line, ""]


def _trend_word(t: TrendFit | str | None) -> str:
    return t.direction if isinstance(t, TrendFit) else (t or "—")


def trend_markdown(fits: Any, trends: Mapping[tuple[str, str], TrendFit | str]) -> str:
    """The trend table (log-linear slope beside the bounded fit's status) and one sentence per
    (family, metric) that follows the data: rises, falls, no significant trend; a family with no
    metric measured (e.g. no concept head) is one "not measured" line, not a row per metric."""
    unmeasured = {fam for fam, _ in trends} - {fam for (fam, _), t in trends.items() if t != NOT_MEASURED}
    rows, lines = [], []
    for (fam, m), t in trends.items():
        if fam in unmeasured:
            continue
        bounded = trend_status(fits.families[fam].bounded.get(m))
        rows.append({"Family": fam, "Metric": m, "n": t.n if isinstance(t, TrendFit) else "—",
                     "slope per decade of C [CI]": (f"{t.slope:+.3g} [{t.ci[0]:+.3g}, {t.ci[1]:+.3g}]"
                                                    if isinstance(t, TrendFit) else "—"),
                     "log-linear trend": _trend_word(t),
                     "bounded fit (Eq. 29)": "flat" if bounded[0] == "no trend" else bounded[0]})
        if isinstance(t, TrendFit):
            flat = (f"; the bounded fit (Eq. 29), which assumes the metric improves with compute, "
                    f"cannot follow it ({bounded[1]})" if bounded[0] != "trend" and t.direction != FLAT else "")
            lines.append(f"- **{fam}**: {t.sentence().rstrip('.')}{flat}.")
        else:
            lines.append(f"- **{fam}**: {m}: {t}.")
    lines += [f"- **{fam}**: no interpretability metric measured." for fam in dict.fromkeys(f for f, _ in trends)
              if fam in unmeasured]
    return markdown_table(pd.DataFrame(rows)) + "\n\n" + "\n".join(lines)


def collect_warnings(obj: Any, path: str = "") -> list[str]:
    """Every ``warnings`` entry anywhere in a fit's ``to_dict()`` tree, prefixed by where it
    sits; a message already listed under another path is not repeated."""
    found: dict[str, str] = {}  # message -> where it was first seen

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "warnings" and isinstance(v, (list, tuple)):
                    for w in filter(None, v):
                        found.setdefault(str(w), where or "fits")
                else:
                    walk(v, f"{where}.{k}" if where else str(k))
        elif isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                walk(v, f"{where}[{i}]")

    walk(obj, path)
    return [f"{where}: {msg}" for msg, where in found.items()]


def _ci_cell(value: float, lo: float, hi: float, digits: int = 3) -> str:
    """``0.528 [-0.025, +0.023]``: ``scaling._base.fmt_sub``'s Table 6 cell in the report's spelling."""
    return fmt_sub(value, (lo, hi), digits, style="cell")


def _interval(lo: Any, hi: Any, digits: int = 3) -> str:
    """``[lo, hi]`` in absolute values (prediction intervals), or "—" when not computed."""
    if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
        return "—"
    return f"[{lo:.{digits}f}, {hi:.{digits}f}]"


def _ci(fit: Any, key: str) -> tuple[float, float]:
    return tuple((fit.ci or {}).get(key) or (math.nan, math.nan))  # type: ignore[return-value]


def scaling_table(fits: Any) -> pd.DataFrame:
    """Table 6 with each exponent's source in its column name: α_P and α_L from the IsoFLOP
    power laws (Eq. 26); α_D, the joint α_P = β/(α+β) and L∞ from the joint fit (Eq. 27),
    shown only where it is identified (else its status)."""
    rows = []
    for fam, f in fits.families.items():
        iso, ch = f.isoflop, f.chinchilla
        r = {"Family": fam}
        for name, key in (("α_P", "alpha_P"), ("α_L", "alpha_L")):
            cell = _ci_cell(getattr(iso, key), *_ci(iso, key)) if iso is not None else "—"
            r[f"{name} (IsoFLOP, Eq. 26)"] = cell
        status, _ = joint_fit_state(ch)
        lo_d, hi_d = _ci(ch, "alpha_D") if status == "identified" else (math.nan, math.nan)
        cells = (_ci_cell(ch.alpha_D, lo_d, hi_d), _ci_cell(ch.alpha_P, 1 - hi_d, 1 - lo_d),  # α_P = 1 - α_D
                 _ci_cell(ch.L_inf, *_ci(ch, "L_inf"))) if status == "identified" else (status,) * 3
        r.update(zip(("α_D (joint, Eq. 27)", "α_P (joint, Eq. 27)", "L∞ (joint, Eq. 27)"), cells))
        rows.append(r)
    return pd.DataFrame(rows)


def _metric_cell(status: str, trend: TrendFit | str | None) -> str:
    """A metric's status cell: the bounded fit's when it shows a trend, else what the data do."""
    if status == "trend" or trend is None:
        return status
    return _trend_word(trend) + ("" if trend == NOT_MEASURED else " (Eq. 29 flat)")


def status_table(fits: Any, trends: Mapping[tuple[str, str], TrendFit | str] | None = None) -> pd.DataFrame:
    """One row per family: the status of its IsoFLOP fit, joint fit and each metric fit (a metric
    whose bounded fit is flat reads as its log-linear trend: rises / falls / no significant trend)."""
    names = {"isoflop": "IsoFLOP (Eq. 25-26)", "joint": "joint (Eq. 27)"}
    trends = trends or {}
    return pd.DataFrame([{"Family": fam, "rows": fits[fam].n_rows,
                          **{names.get(k, k): st if k in names else _metric_cell(st, trends.get((fam, k)))
                             for k, (st, _) in statuses.items()}}
                         for fam, statuses in fit_statuses(fits).items()])


def problem_fits(fits: Any, trends: Mapping[tuple[str, str], TrendFit | str] | None = None) -> list[str]:
    """One line per fit that failed, was skipped or is not identified, and per metric whose bounded
    fit is flat (with what its log-linear trend says instead)."""
    names = {"isoflop": "IsoFLOP fit", "joint": "joint fit (Eq. 27)"}
    good = {"isoflop": "ok", "joint": "identified"}  # a metric fit: "trend"
    tail = {"joint": "; its α_D and L∞ are left out of the tables and the extrapolation"}
    lines = []
    for fam, statuses in fit_statuses(fits).items():
        for k, (st, why) in statuses.items():
            if st == good.get(k, "trend"):
                continue
            t = (trends or {}).get((fam, k))
            head = f"**{fam}** {names.get(k, k)}: " + (st if k in names else
                                                         f"bounded fit (Eq. 29) {'flat' if st == 'no trend' else st}")
            data = f"; log-linear: {t.direction} ({t.slope:+.3g} per decade)" if isinstance(t, TrendFit) else ""
            lines.append(head + (f" — {why}" if why else "") + tail.get(k, "") + data)
        lines += [f"**{fam}**: {w}" for w in fits[fam].warnings if "skipped" in str(w)]
    return lines


def table7_markdown(t7: pd.DataFrame) -> str:
    """Table 7 layout: per metric and family β, e [CI] (flagged on its bound), R², the prediction
    at the target compute with a new run's prediction interval, the observed value, the difference."""
    return markdown_table(pd.DataFrame([{
        "Metric": r["metric"], "Family": r["family"], "β": f"{r['beta']:.3f}",
        "e [CI]": _ci_cell(r["e"], r["e_lo"], r["e_hi"]) + (" (bound)" if r["e_at_bound"] else ""),
        "R²": f"{r['r2']:.3f}", "pred": r["prediction"],
        "pred PI": _interval(r.get("pred_lo"), r.get("pred_hi")), "actual": r["actual"], "Δ": r["delta"],
    } for r in t7.to_dict("records")]))


def trend_table7(fits: Any) -> pd.DataFrame | None:
    """Table 7 rows of the metric fits that show a trend (the others are listed as "no trend")."""
    try:
        t7 = fits.table7()
    except ValueError as exc:  # e.g. no +Concept family -> no Table 7
        log.info("report: table7 unavailable: %s", exc)
        return None
    keep = [trend_status(fits.families[r["family"]].bounded.get(r["metric"]))[0] == "trend"
            for r in t7.to_dict("records")]
    return t7[keep] if any(keep) else None


# The paragraph under each section's heading: what its numbers are and which equation.
INTROS = {
    "Fit status": "IsoFLOP: per-slice parabolas (Eq. 25) and their power laws (Eq. 26). Joint: "
    "L = L∞ + A/P^α + B/D^β (Eq. 27); *identified* when L∞ is pinned down by the points. Metrics: "
    "bounded fits m(C) = e ± A·C^-β (Eq. 29), which assume the direction a metric improves in; where one "
    "is flat the cell gives the log-linear trend instead (*rises*, *falls* or *no significant trend*), and "
    "*not measured* where the table has no value.",
    "Compute-optimal scaling (Table 6 layout)": "Each column names the fit it comes from: α_P and α_L from "
    "the IsoFLOP power laws P*(C) ∝ C^α_P and L*(C) (Eq. 26); α_D, the joint α_P = β/(α+β) and L∞ from the "
    "joint fit (Eq. 27), shown only where it is identified. The IsoFLOP α_P and the joint α_D come from "
    "different fits, so they need not sum to 1.",
    "Interpretability trends": "Each metric against compute either way: the least-squares slope of m on "
    "log10 C per decade of compute with its t-interval (Table 30's form), beside the status of the bounded fit "
    "(Eq. 29), which can only follow a metric that improves with compute. A metric *rises* or *falls* when the "
    "interval of its slope excludes 0.",
    "Interpretability scaling (Table 7 layout)": "Bounded fits m(C) = e ± A·C^-β (Eq. 29) of each metric on "
    "every checkpoint, for the metrics whose bounded fit shows a trend.",
    "Loss extrapolation to the target compute": "Joint form (Eq. 27, compute-optimal allocation) vs the "
    "log-linear L*(C) law: each with the bootstrap confidence interval of the curve (as offsets) and the "
    "prediction interval of one new run at that compute (curve uncertainty plus the residual noise of the "
    "fitted points; families with an identified joint fit only).",
    "Forecast at the target compute": "Each method by name (`joint` Eq. 27, `isoflop-powerlaw` Eq. 26, "
    "`isoflop-saturating` E + A·C^-α on the slice minima); the default is the method with the lowest "
    "rolling-origin backtest error at the largest extrapolation ratio the sweep can test. The calibrated "
    "interval is the larger of the curve's bootstrap interval and a split-conformal interval on the "
    "backtest's forecast errors, scaled to the log extrapolation distance (docs/forecasting.md).",
    "Backtest: forecasting held-out budgets": "Each law is refitted without the largest budget(s) (rolling "
    "origin) or one budget at a time (leave one out) and asked for the loss-optimal point of the budget it "
    "did not see: absolute percentage error, bias and how often the prediction interval covered the "
    "observed value. A law that cannot forecast its own sweep should not be trusted beyond it.",
    "Annealed losses from a subset of branches": "Each run anneals some of its reservoir checkpoints "
    "(`[train] anneal`); the annealed loss at the others is predicted from the stable curve and the trained "
    "branches by the predictor with the smallest leave-one-branch-out error in the family, with an interval "
    "from those errors (docs/anneal.md). IsoFLOP fits (alpha_P, L*, the compute multiplier's envelopes) use "
    "each run's main anneal, which is always trained, so they do not move; predicted rows enter a fit only "
    "with `fit families --predicted-anneals`.",
    "Compute multiplier": "k(C) = C_variant(L*_base(C)) / C: the compute a +Concept family needs to reach "
    "its backbone's compute-optimal loss at C (k > 1: a tax, k < 1: a gain). Inside the sweep it is read "
    "off the slice minima without a law (law-free); three laws of the frontier L*(C) — the power-law "
    "envelope (Eq. 26), a saturating envelope E + a·C^α and the joint fit (Eq. 27) — are scored by how "
    "well each predicts held-out slice minima and agrees with the law-free k, and the best answers the "
    "growth test (methods that score alike and disagree make the verdict undetermined). Bootstrap bands "
    "are paired by slice and extrapolated to 1e20 and Steerling-8B's 7.6e22 (widened to the forecasts' "
    "calibrated intervals where the backtest allows; docs/multiplier.md). A k whose band spans "
    f"more than {MAX_DECADES:g} decades, or that a flagged fit extrapolates, is shown as \"not determined "
    "(band …)\", not as a number.",
}


def interp_sections(fits: Any, trends: Mapping[tuple[str, str], TrendFit | str]) -> list[str]:
    """The trends section (every measured metric, either way) and Table 7 of the bounded fits
    that show a trend; "not measured" when no metric has a value."""
    if not trends or all(t == NOT_MEASURED for t in trends.values()):
        return _section("Interpretability trends", "_Not measured: no interpretability metric has a value in the "
                        "rows these fits use, so there is no trend to report (this is not \"no trend\")._")
    parts = _section("Interpretability trends", trend_markdown(fits, trends))
    t7 = trend_table7(fits)
    if t7 is not None:
        parts += _section("Interpretability scaling (Table 7 layout)", table7_markdown(t7))
    return parts


def fit_sections(fits: Any, backtest: Any = None, trends: Mapping | None = None, *,
                 no_backtest: str | None = None, not_backtested_note: str | None = None) -> list[str]:
    """The report's sections on the fits, in the order of their ``INTROS``, then the failed fits.
    ``no_backtest``: why there is no scored backtest; ``not_backtested_note``: the families a
    scored backtest left out (both written in the backtest section)."""
    trends = trends or {}
    parts = _section("Fit status", markdown_table(status_table(fits, trends)))
    parts += _section("Compute-optimal scaling (Table 6 layout)", markdown_table(scaling_table(fits)))
    parts += interp_sections(fits, trends)
    ext = [(k, f.extrapolation) for k, f in fits.families.items()
           if f.extrapolation is not None and joint_fit_state(f.chinchilla)[0] == "identified"]
    if ext:
        parts += _section("Loss extrapolation to the target compute", markdown_table(pd.DataFrame([{
            "Family": k, "C": f"{x.compute:.3g}", "joint": _ci_cell(x.joint, *x.joint_ci),
            "joint PI": _interval(*x.joint_pi), "log-linear": _ci_cell(x.loglinear, *x.loglinear_ci),
            "log-linear PI": _interval(*x.loglinear_pi),
            "observed": x.observed, "Δ joint": x.joint_error, "Δ log-linear": x.loglinear_error,
        } for k, x in ext])))
    forecasts = forecast_table({k: f.forecast for k, f in fits.families.items()})
    if not forecasts.empty:  # every forecast method at the target, the default chosen by backtest (issue 27)
        parts += _section("Forecast at the target compute", markdown_table(forecasts))
    if backtest is not None and len(backtest.errors()):
        parts += _section("Backtest: forecasting held-out budgets", backtest.to_markdown(),
                          *filter(None, [not_backtested_note]))
    elif no_backtest:
        parts += _section("Backtest: forecasting held-out budgets",
                          f"_No held-out budget could be scored: {no_backtest}._", *_unscored(backtest))
    problems = problem_fits(fits, trends)
    return parts + _section("Failed, unidentified or flat fits",
                            "\n".join(f"- {p}" for p in problems) or "None.")


def _unscored(backtest: Any) -> list[str]:
    """The forecasts a backtest could not score, one bullet each (with the reason)."""
    if backtest is None:
        return []
    t = backtest.to_frame()
    t = t[t["status"] != "ok"].drop_duplicates(["family", "method", "scheme", "held_out", "status"])
    return ["\n".join(f"- {r.family} {r.method} {r.scheme}, C = {r.held_out:.3g} held out: {r.status}"
                       for r in t.itertuples(index=False))] if len(t) else []


def backtest_notes(analysis: Analysis) -> tuple[str | None, str | None]:
    """(why the backtest scored nothing, the families a backtest that scored others left out), each
    None when it does not apply, in the table's terms: the IsoFLOP budgets (slices) each family's
    fits use against the budgets a rollout needs."""
    need = int(inspect.signature(backtest_budgets).parameters["min_train"].default) + 1
    counts, backtest = analysis.budgets, analysis.backtest
    budgets = {fam: f"{n} budget{'s' if n != 1 else ''}" for fam, n in counts.items()}
    if backtest is not None and len(backtest.errors()):
        scored = set(map(str, backtest.errors()["family"]))
        missing = ", ".join(f"{f} ({b})" for f, b in budgets.items() if str(f) not in scored)
        return None, (f"Not backtested: {missing}; a rollout needs at least {need} budgets per family."
                      if missing else None)
    have = ", ".join(f"{fam} has {b} (IsoFLOP slices)" for fam, b in budgets.items())
    why = (f"{have}; a rollout fits on {need - 1} budgets and forecasts the next, so it needs at least {need} "
           "budgets per family, and leave-one-out fits need 3" if any(n < need for n in counts.values())
           else f"{have}, but every held-out forecast failed (listed below)")
    error = analysis.backtest_error
    return why + (f" ({error})" if error else ""), None


def multiplier_markdown(m: MultiplierFit, results: pd.DataFrame) -> str:
    """One pair's table (k and band per method at the base's slices and the targets) and its tests;
    a value beyond ``MAX_DECADES`` of band, or from a flagged method, reads "not determined"."""
    t = shown_computes(m, results)  # the base's slices and the targets
    rows = [{"C": f"{c:.3g}", "extrapolated": "yes" if g["extrapolated"].any() else "no",
             **{f"k ({r.method})": k_cell(r.k, r.lo, r.hi, flagged=m.flagged(r.method, r.extrapolated))
                for r in g.itertuples()}}
            for c, g in t.groupby("compute", sort=True)]
    lines = [f"**{m.variant} vs {m.base}** (k > 1: {m.variant} needs k times {m.base}'s compute for "
             f"{m.base}'s compute-optimal loss; {m.level:.0%} bands)", "", markdown_table(pd.DataFrame(rows)),
             ""]
    for method, g in m.growth.items():
        st = m.statuses.get(method)
        flag = "" if st is None or st.identified else f" — fit {st}"
        lines.append(f"- Growth test ({method}{', the verdict' if method == m.primary else ''}): k ∝ "
                     f"C^{g.slope:+.3f} [{g.slope_lo:+.3f}, {g.slope_hi:+.3f}], p = {g.p_value:.2g}: "
                     f"**{g.verdict}**{flag}. Assumes: {g.assumes}.")
    lines.append(f"- Verdict: **{m.verdict}**. Why: {m.reason}.")  # which method answered, its score (issue 42)
    s = m.shared_exponent
    if s is not None and math.isfinite(s.statistic):
        lines.append(f"- Shared vs free envelope exponents (α_L {s.alpha_base:.4f} vs "
                     f"{s.alpha_variant:.4f}): F({s.df[0]}, {s.df[1]}) = {s.statistic:.3g}, "
                     f"p = {s.p_value:.2g}. Assumes: {s.assumes}.")
    return "\n".join(lines)


def multiplier_section(results: pd.DataFrame, fits=None, multipliers: Mapping | None = None) -> list[str]:
    """The "Compute multiplier" section: k(C) of each +Concept family against its backbone (issue 36,
    docs/multiplier.md), from ``multipliers`` (an ``Analysis``'s; default ``scaling.analysis
    .family_multipliers`` of the table); empty when the table has no backbone/+Concept pair."""
    pairs = backbone_pairs(results["family"].dropna().unique()) if "family" in results.columns else []
    if not pairs:
        return []
    ms = multipliers if multipliers is not None else family_multipliers(
        results, estimator=getattr(fits, "estimator", None), annealed=getattr(fits, "annealed", True))
    if not ms:
        return []
    return _section("Compute multiplier", *(multiplier_markdown(m, results) if isinstance(m, MultiplierFit)
                                            else f"**{variant} vs {base}**: not made: {m}"
                                            for (base, variant), m in ms.items()))


def anneal_section(anneals: AnnealSummary | pd.DataFrame | None) -> list[str]:
    """The "Annealed losses from a subset of branches" section (issue 36, docs/anneal.md): anneal
    steps trained and saved, the predictor chosen per family with its leave-one-branch-out error
    and interval, and what the fits see (``anneals``: an ``Analysis``'s, or a results table to make
    them from); empty when the table has nothing to predict."""
    if isinstance(anneals, pd.DataFrame):
        anneals = anneal_tables(anneals)
    if anneals is None:
        return []
    table = anneals.loo.rename(columns={"mean_abs_pct": "mean abs err %", "max_abs_pct": "max abs err %",
                                        "mean_pct": "mean err %"})
    return _section("Annealed losses from a subset of branches", markdown_table(anneals.summary, floatfmt=".2f"),
                    "Leave-one-branch-out error of each predictor (trained branches only):",
                    markdown_table(table, floatfmt=".2f"))


def answer_section(analysis: Analysis) -> list[str]:
    """"The answer", first in the report: per backbone / +Concept pair, k inside the sweep with its
    band, the verdict with the method that gave it and why (or the achieved power when the analysis
    has it), then the headline exponents and what is not determined."""
    lines: list[str] = []
    for (base, variant), m in (analysis.multipliers or {}).items():
        if not isinstance(m, MultiplierFit):
            lines.append(f"- **{variant} vs {base}**: no multiplier ({m}).")
            continue
        lo_c, hi_c = m.sweep_range
        mid = math.sqrt(lo_c * hi_c) if lo_c > 0 and hi_c > 0 else math.nan
        try:
            r = m.at(mid)
            inside = f"k = {k_cell(r['k'], r['lo'], r['hi'])} at {mid:.3g} FLOPs ({r['method']})"
        except (ValueError, KeyError):
            inside = "k not read inside the sweep"
        power = analysis.powers.get((base, variant))
        if power is not None:
            tail = f" Achieved power: {power.sentence()}."
        elif m.verdict == "undetermined":
            tail = (" The sweep cannot tell growth from none at its noise: `interpscale fit multiplier "
                    "--power-sims N` gives the power it had and the grid that would decide (docs/design.md).")
        else:
            tail = ""
        lines.append(f"- **{variant} vs {base}**: {inside}; {m.level:.0%} band. Verdict **{m.verdict}** "
                     f"({m.primary}) — {m.reason}.{tail}")
    fits = analysis.fits
    if fits is not None:
        for fam, f in fits.families.items():
            iso = f.isoflop
            if iso is not None:
                lines.append(f"- **{fam}**: α_P = {_ci_cell(iso.alpha_P, *_ci(iso, 'alpha_P'))}, "
                             f"α_L = {_ci_cell(iso.alpha_L, *_ci(iso, 'alpha_L'))} (IsoFLOP, Eq. 26; {iso.status})")
        undetermined = [fam for fam, st in fit_statuses(fits).items() if st.get("joint", ("identified",))[0]
                        != "identified"]  # the states problem_fits lists, read off the statuses, not its words
        if undetermined:
            lines.append(f"- Not determined: {len(undetermined)} joint fit(s) (Eq. 27: α_D, L∞; "
                         f"{', '.join(undetermined)}) — listed under Fits; extrapolations that rest on them are "
                         "shown as not determined.")
    if not lines:
        return []
    return ["## The answer", "", *lines, ""]


def build_markdown(analysis: Analysis, figure_set: Any, *, source: str, fig_dir: str) -> str:
    """The report's markdown text of one ``Analysis`` (figures referenced relative to the report):
    its fits, trends, multipliers, backtest (its own section; an empty one is explained when the
    analysis asked for one) and predicted anneals."""
    df, fits, o = analysis.table, analysis.fits, analysis.options
    ci_text = (f"Intervals are {fits.level:.0%} bootstrap percentile intervals"
               + (f" ({o.n_boot} replicates)" if o.n_boot else "") + ", written as offsets from the estimate."
               if fits is not None else "No fits, so no intervals.")
    families = ", ".join(map(str, sorted(df["family"].unique())))
    parts = ["# Scaling report", "", f"Results table: `{source}` — {len(df)} rows, families {families}. "
             f"{ci_text} Generated {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC by interpscale.", "",
             *answer_section(analysis), *_section("Data", markdown_table(data_summary(df))), *metric_notes(df)]
    if fits is None:
        parts += _section("Fits", "_No fits could be made from this table (see the log for the reason)._")
    else:
        why, missing = backtest_notes(analysis) if o.backtest else (None, None)
        parts += fit_sections(fits, analysis.backtest, analysis.trends, no_backtest=why,
                              not_backtested_note=missing)
        parts += multiplier_section(df, fits, analysis.multipliers)
    parts += anneal_section(analysis.anneals)  # runs that skipped anneal branches (docs/anneal.md)
    warnings = collect_warnings(fits.to_dict()) if fits is not None else []
    parts += _section("Fit warnings", "\n".join(f"- {w}" for w in warnings)
                      or "None: every fit converged without boundary or quality flags.") + ["## Figures", ""]
    if figure_set is not None:
        for title, paths in figure_set.drawn.items():
            png = next((p for p in paths if p.suffix == ".png"), None)
            if png is not None:
                parts += [f"### {title}", "", f"![{title}]({fig_dir}/{png.name})", ""]
        if figure_set.skipped:
            parts += ["### Figures not drawn", ""]
            parts += [f"- **{title}**: {why}" for title, why in figure_set.skipped.items()] + [""]
    return "\n".join(parts).rstrip() + "\n"


# A wide table scrolls inside its own box and long words (paths, run ids) wrap, so the page itself
# never gets wider than the window (the browser test in tests/analysis/test_report.py checks it).
_STYLE = ("body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222;"
          "overflow-wrap:anywhere}"
          "table{border-collapse:collapse;margin:1rem 0;font-size:.9rem;display:block;max-width:100%;overflow-x:auto}"
          "th,td{border:1px solid #ccc;padding:.25rem .5rem}th{background:#f3f3f3}img{max-width:100%}"
          "code{background:#f3f3f3;padding:0 .2rem}")


def markdown_to_html(md: str, *, title: str = "Scaling report") -> str:
    """A standalone HTML page of ``md`` (CommonMark with pipe tables, by markdown-it-py; raw HTML in
    the text is escaped, not passed through)."""
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(md)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body>\n" + body + "</body></html>\n")


def report_options(*, n_boot: int = N_BOOT["forecast"], target_compute: float | None = None,
                   actual: Mapping[str, Mapping[str, float]] | None = None, backtest: bool = True,
                   **options) -> AnalysisOptions:
    """The ``AnalysisOptions`` the report uses: ``n_boot`` replicates per fit (``REPORT_BOOT``), at
    most ``BACKTEST_BOOT`` per backtest refit, the backtest on, ``options`` (any other field) as given."""
    return AnalysisOptions(n_boot=n_boot, target_compute=target_compute, backtest=backtest,
                           actual={k: dict(v) for k, v in (actual or {}).items()},
                           backtest_boot=min(n_boot, BACKTEST_BOOT), **options)


def _figure_target(o: AnalysisOptions) -> dict | None:
    """Figures 24/26 extrapolate the +Concept family to the analysis's target compute (with its observed values)."""
    if o.target_compute is None:
        return None
    observed = o.actual.get("cdlm+concept") or o.actual.get("ar+concept") or {}
    return {"flops": float(o.target_compute), **observed}


@log_once()
def write_report(results: pd.DataFrame | str | os.PathLike, out_dir: str | os.PathLike, *, fits: Any = None,
                 run_dirs: Iterable[str | os.PathLike] | None = None, n_boot: int = REPORT_BOOT,
                 figures: bool = True, source: str | None = None, target_compute: float | None = None,
                 actual: Mapping[str, Mapping[str, float]] | None = None, backtest: bool = True,
                 options: AnalysisOptions | None = None, analysis: Analysis | None = None,
                 extend: Callable[[Analysis], Analysis] | None = None) -> Path:
    """Write ``out_dir/report.md`` (Table 6/7-style tables, fit warnings, figures in ``out_dir/figures``)
    and ``report.html``; returns the markdown path. The numbers are one ``scaling.analyse`` of the table:
    ``analysis`` when given, else made here from ``options`` (default: ``report_options`` of ``n_boot``,
    ``target_compute``, ``actual[family][metric or "loss"]`` and ``backtest``, which adds held-out-budget
    forecasts at most ``BACKTEST_BOOT`` replicates each), then ``extend(analysis)`` when given; ``fits``:
    a ``fit_families`` result to reuse."""
    if source is None:
        source = str(results) if not isinstance(results, pd.DataFrame) else "a DataFrame passed in by the caller"
    df = read_results(results)
    if not len(df):  # a header-only table would otherwise report "every fit converged"
        raise UserError(f"{source}: the results table has no rows; nothing to report")
    require_columns(df, CORE_COLUMNS, "write_report")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if analysis is None:
        options = options or report_options(n_boot=n_boot, target_compute=target_compute, actual=actual,
                                            backtest=backtest)
        if figures:  # what only the figures draw, in the same one analysis (no second one for them)
            options = figure_options(df, options, _figure_target(options))
        analysis = analyse(df, options, fits=fits)
        if extend is not None:  # a part made above scaling (e.g. design.with_powers: the achieved power)
            analysis = extend(analysis)
    o = analysis.options
    target = _figure_target(o)
    figure_set = (render_figures(analysis.table, out / "figures", analysis=analysis, run_dirs=run_dirs,
                                 n_boot=o.n_boot, target=target) if figures else None)
    md = build_markdown(analysis, figure_set, source=source, fig_dir="figures")
    md_path = atomic_write_text(out / "report.md", md)
    atomic_write_text(out / "report.html", markdown_to_html(md))
    log.info("report written to %s", md_path)
    return md_path


def __getattr__(name: str):
    if name == "load_results":  # the one reader is results_table.read_results
        _warnings.warn("interpscale.analysis.report.load_results is deprecated; use "
                       "interpscale.results_table.read_results", DeprecationWarning, stacklevel=2)
        return read_results
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
