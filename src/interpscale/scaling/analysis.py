"""One analysis of a results table: every number ``interpscale fit families``, the report and the
figures show, computed once (docs/architecture.md, "The analysis boundary").

    analysis = analyse(results_df, AnalysisOptions(n_boot=N_BOOT["forecast"], target_compute=7.6e22))
    analysis.fits            # FamilyFits: IsoFLOP, joint, bounded metric fits, forecasts (Table 6/7)
    analysis.trends          # (family, metric) -> TrendFit, or why there is none
    analysis.state_trends    # (family, metric, annealed) -> TrendFit per anneal state (Figure 39), or why not
    analysis.multipliers     # (base, variant) -> MultiplierFit, or why it could not be made
    analysis.backtest        # Backtest of held-out budgets (options.backtest), or backtest_error
    analysis.anneals         # AnnealSummary: predicted anneals and their leave-one-branch-out errors
    analysis.isoflop_groups  # (kind, family, value) -> IsoflopGroup: per estimator / mask rate / anneal state
    analysis.forecasts       # (family, compute) -> FamilyForecast at options.forecast_targets, or why not

Options in, ``Analysis`` out: the CLI writes it, the report and the figures render it; none of them
fits anything. ``analyse`` is cached in-process by the inputs' hash (table and options), so a report
that draws figures after ``fit families`` ran in the same process fits nothing twice.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping, NamedTuple

import numpy as np
import pandas as pd

from interpscale import paper

from ._base import DEFAULT_LEVEL, from_options, log_once, quiet
from .anneal_rows import loo_errors, loo_table, with_predicted_anneals
from .backtest import Backtest, backtest
from .bootstrap import N_BOOT
from .families import FamilyFits, fit_families
from .forecast import FamilyForecast, FitOptions, forecast_family
from .isoflop import fit_isoflop
from .ledger import inputs_hash
from .multiplier import TARGETS, MultiplierFit, backbone_pairs, family_forecasts, fit_multiplier
from .tables import ESTIMATOR_PREFERENCE, fit_rows, slice_rows
from .trend import NOT_MEASURED, TrendFit, fit_trend

__all__ = ["ELBO_ESTIMATORS", "Analysis", "AnalysisOptions", "AnnealSummary", "IsoflopGroup", "analyse", "anneal_states",
           "anneal_summary", "anneal_tables", "cached_fits", "estimator_groups", "family_multipliers",
           "fit_isoflop_group", "isoflop_groups", "unfitted_groups", "mask_rate_groups", "metric_trends", "multiplier_rows",
           "shown_computes", "state_trends"]

log = logging.getLogger("interpscale.scaling.analysis")

ELBO_ESTIMATORS = ("fixed_rate", "fixed_grid", "mdlm_elbo", "per_block")  # App. H.1's four, in its order
CURVE_POINTS = 24  # computes of the multiplier's curve between the base's smallest slice and the largest target
_CACHE: dict[str, Any] = {}  # "what" + inputs hash -> its result; one table at a time (memory stays flat)


def _cached(what: str, results: pd.DataFrame, options: Mapping, make):
    """``make()``, once per process for this table (content hash) and ``options``."""
    key = what + inputs_hash(results, options)
    if key not in _CACHE:
        for k in [k for k in _CACHE if k.startswith(what)]:
            del _CACHE[k]
        _CACHE[key] = make()
    return _CACHE[key]


@dataclass(frozen=True)
class AnalysisOptions:
    """Everything an analysis of a results table depends on (and nothing else: its hash keys the cache).

    Rows: ``families`` (None: all), ``estimator``, ``annealed``, ``loss`` (the loss column, e.g. bits per
    byte), ``cluster`` (a column whose groups the bootstraps resample whole), ``predicted_anneals`` (add
    and fit predicted annealed rows). Fits: ``n_boot`` (``N_BOOT["paper"]``; the report passes
    ``N_BOOT["forecast"]``), ``seed``, ``level``, ``grid`` (None: each fit's own start grid),
    ``minimum``, ``joint_options``, ``target_compute``, ``method``, ``actual``. Sections: ``trends``,
    ``multipliers`` (``calibrate``: bands at the targets widened to the calibrated forecast intervals),
    ``backtest`` (``backtest_boot`` replicates per refit, default ``N_BOOT["backtest"]``), ``anneals``,
    ``isoflop_groups`` (IsoFLOP fits per estimator, fixed mask rate and anneal state, made only for the
    rows a table has: App. H, I's Figures 34-38; the figures ask for them), ``forecast_targets`` ((family, compute) pairs to
    forecast at besides ``target_compute``: e.g. Figure 24's target)."""

    families: tuple[str, ...] | None = None
    estimator: str | None = None
    annealed: bool | None = None
    loss: str = "loss"
    cluster: str | None = None
    predicted_anneals: bool = False
    n_boot: int = N_BOOT["paper"]
    seed: int = 0
    level: float = DEFAULT_LEVEL
    grid: str | None = None
    minimum: str = "parabola"
    joint_options: Mapping = field(default_factory=dict)
    target_compute: float | None = None
    method: str | None = None
    actual: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    trends: bool = True
    multipliers: bool = True
    calibrate: bool = True
    backtest: bool = False
    backtest_boot: int | None = None
    anneals: bool = True
    isoflop_groups: bool = False
    forecast_targets: tuple[tuple[str, float], ...] = ()

    def key(self) -> dict:
        """The options as plain values (what the cache hashes)."""
        d = asdict(self)
        d["actual"] = {k: dict(v) for k, v in self.actual.items()}
        d["joint_options"] = dict(self.joint_options)
        d["forecast_targets"] = [[str(f), float(c)] for f, c in self.forecast_targets]
        return d


class AnnealSummary(NamedTuple):
    """Per family: anneal branches trained and predicted, steps saved, predictor and interval
    (``summary``); each predictor's leave-one-branch-out error (``loo``)."""

    summary: pd.DataFrame
    loo: pd.DataFrame


@dataclass(frozen=True)
class Analysis:
    """Every number of one analysis (module doc); ``*_error``: why a part could not be made."""

    options: AnalysisOptions
    table: pd.DataFrame  # the rows analysed (with the predicted annealed rows when asked)
    fits: FamilyFits | None = None
    fit_error: str | None = None
    trends: dict = field(default_factory=dict)
    state_trends: dict = field(default_factory=dict)
    multipliers: dict = field(default_factory=dict)
    backtest: Backtest | None = None
    backtest_error: str | None = None
    budgets: dict = field(default_factory=dict)  # family -> IsoFLOP budgets (slices) its fits use
    anneals: AnnealSummary | None = None
    # (base, variant) -> the power the sweep had for an undetermined multiplier verdict (an object
    # with ``sentence()``, e.g. design.AchievedPower): simulated above this layer, by the command or
    # pipeline that asks for it (``--power-sims``), and rendered by the report
    powers: dict = field(default_factory=dict)
    isoflop_groups: dict = field(default_factory=dict)  # (kind, family, value) -> IsoflopGroup
    forecasts: dict = field(default_factory=dict)  # (family, compute) -> FamilyForecast, or why there is none

    def forecast(self, family: str, compute: float) -> FamilyForecast | None:
        """The family's forecast at ``compute``: its fits' own (at ``target_compute``) or a
        ``forecast_targets`` one; None when the analysis made none there."""
        ff = self.fits.families.get(family) if self.fits is not None else None
        fc = getattr(ff, "forecast", None)
        if fc is not None and np.isclose(fc.target_compute, compute, rtol=1e-9):
            return fc
        hits = [v for (f, c), v in self.forecasts.items() if f == family and np.isclose(c, compute, rtol=1e-9)]
        return hits[0] if hits and isinstance(hits[0], FamilyForecast) else None

    def require_fits(self) -> FamilyFits:
        """The fits, or the ValueError that kept them from being made."""
        if self.fits is None:
            raise ValueError(self.fit_error or "no fits were made")
        return self.fits

    def summary(self) -> str:
        parts = [self.fits.summary() if self.fits is not None else f"no fits: {self.fit_error}"]
        parts += [m.summary() for m in self.multipliers.values() if isinstance(m, MultiplierFit)]
        if self.backtest is not None:
            parts.append(self.backtest.summary())
        return "\n\n".join(parts)


def cached_fits(results: pd.DataFrame, **options) -> FamilyFits:
    """``fit_families(results, **options)``, made once per process for each table and options
    (what the figures that draw a family's fits share with the report)."""
    bound = inspect.signature(fit_families).bind(results, **options)
    bound.apply_defaults()  # one key for one set of fits, however the caller spelled its defaults
    key = {k: v for k, v in bound.arguments.items() if k != "results"}
    return _cached("fits", results, key, lambda: fit_families(results, **options))


def _fit_options(o: AnalysisOptions, table: pd.DataFrame) -> dict:
    kw = dict(families=list(o.families) if o.families else None, estimator=o.estimator, annealed=o.annealed,
              loss=o.loss, n_boot=o.n_boot, seed=o.seed, level=o.level, minimum=o.minimum,
              target_compute=o.target_compute, actual={k: dict(v) for k, v in o.actual.items()})
    kw = {k: v for k, v in kw.items() if v is not None or k in ("estimator", "annealed")}
    if o.grid is not None:
        kw["grid"] = o.grid
    if o.method is not None:
        kw["method"] = o.method
    if o.joint_options:
        kw["joint_options"] = dict(o.joint_options)
    if o.predicted_anneals:
        kw["predicted"] = True
    if o.cluster is None:
        return cached_fits(table, **kw)
    return fit_families(table, groups=table[o.cluster].to_numpy(), **kw)  # groups: an array, not hashed


def metric_trends(df: pd.DataFrame, fits: Any) -> dict[tuple[str, str], TrendFit | str]:
    """Per (family, metric): the log-linear trend against log10 C (``scaling.trend``, Table 30's
    form) on the rows the family's fits use, or why there is none (``NOT_MEASURED`` when the
    metric has no value in the family's rows)."""
    out: dict[tuple[str, str], TrendFit | str] = {}
    metrics = [m for m in paper.INTERP_METRICS if m in df.columns]
    for fam in fits.families if metrics else ():
        try:
            rows = fit_rows(df, family=fam, estimator=fits.estimator, annealed=fits.annealed, caller="report")
        except ValueError as exc:
            log.info("analysis: no trend rows for %s: %s", fam, exc)
            continue
        ccol = "flops" if "flops" in rows.columns and rows["flops"].notna().any() else "slice_flops"
        for m in metrics:
            vals = pd.to_numeric(rows[m], errors="coerce")
            if not vals.notna().any():
                out[(fam, m)] = NOT_MEASURED
                continue
            try:
                out[(fam, m)] = fit_trend(rows[ccol], vals, level=fits.level, name=m)
            except ValueError as exc:
                out[(fam, m)] = f"no trend fitted ({exc})"
    return out


def anneal_states(results: pd.DataFrame, family: str) -> dict[bool, pd.DataFrame]:
    """The family's rows under its headline estimator (``tables.ESTIMATOR_PREFERENCE``) in each
    anneal state (False: pre-anneal, True: annealed; either may be empty); the pre-anneal state is
    each run's last stable checkpoint, the one its final anneal starts from (App. I)."""
    keep = (results["family"] == family).to_numpy()
    if "estimator" in results.columns:
        present = set(results.loc[keep, "estimator"].dropna())
        est = next((e for e in ESTIMATOR_PREFERENCE if e in present), min(present, default=None))
        if est is not None:
            keep = keep & results["estimator"].isin([est]).to_numpy()
    state = results["annealed"].astype(bool).to_numpy()
    out = {s: results[keep & (state == s)] for s in (False, True)}
    pre = out[False]
    if {"run_id", "step"} <= set(pre.columns) and pre["run_id"].duplicated().any():
        keys = ["run_id", "estimator"] if "estimator" in pre.columns else ["run_id"]
        out[False] = pre.sort_values("step").groupby(keys, dropna=False).tail(1)
    return out


def state_trends(df: pd.DataFrame, families, options: FitOptions | None = None) -> dict:
    """(family, metric, annealed) -> the log-linear trend (``scaling.trend``, Table 30's form) of each
    interpretability metric against ``flops`` in each anneal state (``anneal_states``; Figure 39),
    or why there is none; ``options``: its level (``FitOptions``)."""
    out: dict = {}
    if not {"family", "annealed", "flops"} <= set(df.columns):
        return out
    metrics = [m for m in paper.INTERP_METRICS if m in df.columns]
    for fam in families if metrics else ():
        for state, rows in anneal_states(df, fam).items():
            for m in metrics:
                try:
                    sub = rows[np.isfinite(rows[m].astype(float))]
                    out[(fam, m, state)] = fit_trend(sub["flops"].to_numpy(float), sub[m].to_numpy(float),
                                                     options=options or FitOptions(), name=m)
                except (ValueError, TypeError) as exc:
                    out[(fam, m, state)] = f"no trend fitted ({exc})"
    return out


class IsoflopGroup(NamedTuple):
    """One group of a family's rows (an estimator, a fixed mask rate, an anneal state) after the slice
    window, with its IsoFLOP fit (Eqs. 25-26); ``error``: why the fit failed its own checks (``fit`` is
    then the one refitted with flagged slices kept and no bootstrap, only to draw the parabolas, or None)."""

    rows: pd.DataFrame
    fit: Any
    error: str | None = None


def fit_isoflop_group(rows: pd.DataFrame, *, options: FitOptions,
                      tolerance: float | None = paper.SLICE_TOLERANCE) -> IsoflopGroup:
    """``fit_isoflop`` of ``rows`` within ``slice_rows``' window (None: all rows), quietly: its flags
    are on the result (the report lists the families' fits' flags, not these)."""
    rows = slice_rows(rows.dropna(subset=["slice_flops", "params", "loss"]), tolerance)
    with quiet():
        try:
            return IsoflopGroup(rows, fit_isoflop(rows, n_boot=options.n_boot, seed=options.seed))
        except ValueError as exc:
            try:  # keep flagged-but-convex slices, only to draw their parabolas
                fit = fit_isoflop(rows, n_boot=0, seed=options.seed, exclude_flagged=False)
            except ValueError:
                fit = None
            return IsoflopGroup(rows, fit, str(exc))


def _select(df: pd.DataFrame, family: str, estimator: str | None = None) -> pd.DataFrame:
    """The family's rows (under ``estimator``), annealed only when the table has annealed rows."""
    keep = (df["family"] == family).to_numpy()
    if estimator is not None and "estimator" in df.columns:
        keep = keep & df["estimator"].isin([estimator]).to_numpy()
    if "annealed" in df.columns and df["annealed"].astype(bool).any():
        keep = keep & df["annealed"].astype(bool).to_numpy()
    return df[keep]


def estimator_groups(results: pd.DataFrame, family: str, estimators=ELBO_ESTIMATORS) -> dict[str, pd.DataFrame]:
    """Per estimator of ``estimators`` the family has rows under: its rows (fixed_rate at t = 0.5, App. H.1)."""
    out = {}
    for est in estimators if "estimator" in results.columns else ():
        rows = _select(results, family, est)
        if est == "fixed_rate" and "mask_rate" in rows.columns and rows["mask_rate"].notna().any():
            rows = rows[np.isclose(rows["mask_rate"].astype(float), 0.5)]
        if not rows.empty:
            out[est] = rows
    return out


def mask_rate_groups(results: pd.DataFrame, family: str) -> dict[float, pd.DataFrame]:
    """Per fixed mask rate t of the family's fixed_rate rows: those rows (App. H.2)."""
    if not {"estimator", "mask_rate"} <= set(results.columns):
        return {}
    rows = _select(results, family, "fixed_rate")
    rate = rows["mask_rate"].astype(float)
    return {t: rows[np.isclose(rate, t)] for t in sorted(float(t) for t in rows["mask_rate"].dropna().unique())}


def isoflop_groups(results: pd.DataFrame, families, *, options: FitOptions) -> dict:
    """(kind, family, value) -> ``IsoflopGroup`` for the groups a table has rows for: ``estimator``
    (2+ estimators), ``mask_rate`` (fixed_rate rows at 2+ rates), ``annealed`` (both states; the slice
    window on the annealed state only: pre-anneal checkpoints sit at ~80% of their slice, App. I)."""
    out: dict = {}
    for fam in families:
        groups = {("estimator", fam, k): (r, paper.SLICE_TOLERANCE) for k, r in estimator_groups(results, fam).items()}
        rates = {("mask_rate", fam, k): (r, paper.SLICE_TOLERANCE) for k, r in mask_rate_groups(results, fam).items()}
        states = ({("annealed", fam, s): (r, paper.SLICE_TOLERANCE if s else None)
                   for s, r in anneal_states(results, fam).items()} if "annealed" in results.columns else {})
        for part in (groups, rates, states):
            if len(part) >= 2 and all(len(r) for r, _ in part.values()):
                out.update({k: fit_isoflop_group(r, options=options, tolerance=tol)
                            for k, (r, tol) in part.items()})
    return out


def unfitted_groups(table: pd.DataFrame, fits: FamilyFits | None, families, *, options: FitOptions) -> dict:
    """("family", family, None) -> ``IsoflopGroup`` of the family's headline rows (``fit_rows``) for each
    family without an IsoFLOP fit in ``fits`` (it failed), so Figures 22/23 still draw its slices (the
    flagged-but-convex parabolas kept) from the analysis instead of fitting them in the figure."""
    out: dict = {}
    for fam in families:
        per = None if fits is None else fits.families.get(fam)
        if getattr(per, "isoflop", None) is not None:
            continue
        try:
            rows = fit_rows(table, family=fam, caller="figure")
        except ValueError:  # no usable rows: nothing to draw
            continue
        if len(rows):
            out[("family", fam, None)] = fit_isoflop_group(rows, options=options)
    return out


def _forecasts(table: pd.DataFrame, fits: FamilyFits, targets, n_boot: int) -> dict:
    """(family, compute) -> the family's ``forecast_family`` at ``compute`` from its own fits (joint,
    IsoFLOP power law: reused as they are), or why there is none."""
    out: dict = {}
    for fam, c in targets:
        ff = fits.families.get(fam)
        if ff is None:
            out[(fam, float(c))] = f"no fits for family {fam!r}"
            continue
        if ff.forecast is not None and np.isclose(ff.forecast.target_compute, c, rtol=1e-9):
            continue  # the fits' own forecast: Analysis.forecast reads it there
        try:
            rows = fit_rows(table, family=fam, estimator=fits.estimator, annealed=fits.annealed, caller="figure")
            rows = rows.dropna(subset=["params", "tokens", "loss"])
            opts = FitOptions(n_boot=n_boot, level=fits.level, k=ff.flops_per_token_per_param)
            given = {m: f for m, f in (("joint", ff.chinchilla), ("isoflop-powerlaw", ff.isoflop)) if f is not None}
            out[(fam, float(c))] = forecast_family(rows, float(c), options=opts, fits=given)
        except ValueError as exc:
            log.info("analysis: no forecast of %s at %.3g (%s)", fam, c, exc)
            out[(fam, float(c))] = str(exc)
    return out


def family_multipliers(results: pd.DataFrame, *, estimator: str | None = None, annealed: bool | None = True,
                       level: float = DEFAULT_LEVEL, calibrate: bool = True, loss: str = "loss", seed: int = 0,
                       grid: str | None = None, families=None, options=None) -> dict:
    """{(base, variant): MultiplierFit, or the reason it could not be made} for each ``backbone_pairs``
    pair of ``families`` (default: the table's), evaluated on the base's slices, a curve out to the
    largest target and the ``TARGETS``; with ``calibrate`` the bands at the targets are widened to the
    families' calibrated forecast intervals. The one computation behind ``fit families``'
    multiplier.csv, the report's section and the figure; once per process per table and options."""
    level, seed, loss = from_options(options, dict(level=level, seed=seed, loss=loss), family_multipliers).values()
    if options is not None and grid is None:
        grid = options.grid
    if "annealed" not in results.columns:
        annealed = None
    options = dict(estimator=estimator, annealed=annealed, level=level, calibrate=calibrate,
                   n_boot=N_BOOT["multiplier"], loss=loss, seed=seed, grid=grid,
                   families=sorted(map(str, families)) if families is not None else None)
    return _cached("multipliers", results, options, lambda: _multipliers(results, **options))


def _multipliers(results: pd.DataFrame, *, estimator, annealed, level, calibrate, n_boot, loss, seed, grid,
                 families) -> dict:
    out: dict = {}
    have = results["family"].dropna().unique() if families is None else families
    kw = dict(estimator=estimator, annealed=annealed, level=level, loss=loss, seed=seed)
    for base, variant in backbone_pairs(have):
        rows = results[results["family"] == base]["slice_flops"].dropna()
        if rows.empty:
            out[(base, variant)] = f"{base} has no slice_flops"
            continue
        curve = np.unique(np.r_[rows.unique(), np.geomspace(rows.min(), max(TARGETS), CURVE_POINTS)])
        try:
            with quiet():
                fc = family_forecasts(results, base, variant, TARGETS, n_boot=N_BOOT["calibration"],
                                      **kw) if calibrate else None
            out[(base, variant)] = fit_multiplier(results, base, variant, computes=curve, forecasts=fc,
                                                  n_boot=n_boot, **kw, **({"grid": grid} if grid else {}))
        except ValueError as exc:
            log.warning("compute multiplier %s vs %s not made: %s", variant, base, exc)
            out[(base, variant)] = str(exc)
    return out


def shown_computes(m: MultiplierFit, results: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``m.table`` a reader is shown (multiplier.csv, the report's section): the base
    family's slices and the targets (the curve between them is the figure's)."""
    slices = results[results["family"] == m.base]["slice_flops"].dropna().unique()
    shown = np.round(np.log(np.r_[slices, TARGETS]), 6)
    return m.table[np.isin(np.round(np.log(m.table["compute"]), 6), shown)]


def multiplier_rows(analysis: Analysis) -> pd.DataFrame | None:
    """multiplier.csv of an analysis: ``shown_computes`` of every pair, with ``base, variant``."""
    tables = [m.to_frame().loc[shown_computes(m, analysis.table).index].assign(base=base, variant=variant)
              for (base, variant), m in analysis.multipliers.items() if isinstance(m, MultiplierFit)]
    return pd.concat(tables, ignore_index=True) if tables else None


def _budgets(table: pd.DataFrame, fits: FamilyFits) -> dict[str, int]:
    """Per family: how many IsoFLOP budgets (slices) its fits use (what a backtest needs)."""
    out = {}
    for fam in fits.families:
        try:
            rows = fit_rows(table, family=fam, estimator=fits.estimator, annealed=fits.annealed, caller="report")
            out[fam] = int(rows["slice_flops"].nunique()) if "slice_flops" in rows.columns else 0
        except ValueError:
            out[fam] = 0
    return out


def _backtest(table: pd.DataFrame, fits: FamilyFits, o: AnalysisOptions) -> tuple[Backtest | None, str | None]:
    try:  # forecasts of each held-out compute budget from the smaller ones
        opts = FitOptions.for_purpose("backtest", loss=o.loss, level=fits.level, seed=o.seed, minimum=o.minimum)
        if o.backtest_boot is not None:
            opts = replace(opts, n_boot=o.backtest_boot)
        return backtest(table, family=list(o.families) if o.families else list(fits.families),
                        estimator=fits.estimator, annealed=fits.annealed, target_compute=fits.target_compute,
                        groups=table[o.cluster].to_numpy() if o.cluster else None, options=opts), None
    except ValueError as exc:  # too few budgets to hold one out: the report says why
        log.info("analysis: no backtest (%s)", exc)
        return None, str(exc)


def anneal_summary(results: pd.DataFrame, loss: str = "loss") -> pd.DataFrame:
    """Per family: branches trained and predicted, anneal steps trained and saved, the predictor and
    its mean interval half-width (%). Empty when no run has a checkpoint left to predict."""
    if "anneal_from" not in results.columns or "annealed" not in results.columns:
        return pd.DataFrame()
    full = with_predicted_anneals(results, loss=loss)
    pred = full[full["predicted"].astype(bool)]
    if not len(pred):
        return pd.DataFrame()
    meas = full[~full["predicted"].astype(bool) & full["annealed"].astype(bool) & full["anneal_from"].notna()]
    meas = meas.drop_duplicates(["run_id", "anneal_from"])  # one estimator per branch: steps counted once
    pred = pred.assign(half_width=(pred["loss_hi"] / pred[loss] - 1) * 100)  # the interval's columns: loss_lo, loss_hi
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


def anneal_tables(results: pd.DataFrame, loss: str = "loss") -> AnnealSummary | None:
    """``anneal_summary`` and the predictors' leave-one-branch-out errors; None when nothing is predicted."""
    summary = anneal_summary(results, loss)
    return AnnealSummary(summary, loo_table(loo_errors(results, loss=loss))) if len(summary) else None


@log_once()
def analyse(results: pd.DataFrame, options: AnalysisOptions | None = None, *, fits: FamilyFits | None = None
            ) -> Analysis:
    """The one analysis of ``results`` under ``options`` (module doc), cached by the inputs' hash.
    ``fits``: a ``fit_families`` result of this table to reuse (its estimator, rows and level then
    rule; not cached). A part that cannot be made records why (``fit_error``, ``backtest_error``,
    a multiplier's reason) rather than raising."""
    o = options or AnalysisOptions()
    if fits is not None:
        o = replace(o, estimator=fits.estimator, annealed=fits.annealed, level=fits.level,
                    target_compute=fits.target_compute)
        return _analyse(results, o, fits)
    return _cached("analysis", results, o.key(), lambda: _analyse(results, o, None))


def _analyse(results: pd.DataFrame, o: AnalysisOptions, fits: FamilyFits | None) -> Analysis:
    table = with_predicted_anneals(results, loss=o.loss) if o.predicted_anneals else results
    fit_error = None
    if fits is None:
        try:
            fits = _fit_options(o, table)
        except ValueError as exc:
            log.warning("analysis: family fits failed: %s", exc)
            fit_error = str(exc)
    anneals = anneal_tables(results, o.loss) if o.anneals else None
    iso_columns = {"family", "slice_flops", "params", "loss"} <= set(table.columns)
    groups = _isoflop_groups(table, o) if o.isoflop_groups and iso_columns else {}
    fams = fits.families if fits is not None else (sorted(map(str, table["family"].dropna().unique()))
                                                   if "family" in table.columns else [])
    if o.isoflop_groups and iso_columns:  # what Figures 22/23 draw of a family whose fits failed
        every = list(o.families) if o.families else sorted(map(str, table["family"].dropna().unique()))
        groups = {**groups, **unfitted_groups(table, fits, every, options=FitOptions(n_boot=o.n_boot, seed=o.seed))}
    by_state = state_trends(table, fams, FitOptions(level=fits.level if fits is not None else o.level)) \
        if o.trends else {}
    if fits is None:
        return Analysis(options=o, table=table, fit_error=fit_error, anneals=anneals, isoflop_groups=groups,
                        state_trends=by_state)
    trends = metric_trends(table, fits) if o.trends else {}
    mult = family_multipliers(table, estimator=fits.estimator, annealed=fits.annealed, level=fits.level,
                              calibrate=o.calibrate, loss=o.loss, seed=o.seed, grid=o.grid,
                              families=o.families) if o.multipliers and "family" in table.columns else {}
    bt, bt_error = _backtest(table, fits, o) if o.backtest else (None, None)
    return Analysis(options=o, table=table, fits=fits, trends=trends, state_trends=by_state, multipliers=mult,
                    backtest=bt, backtest_error=bt_error, budgets=_budgets(table, fits) if o.backtest else {},
                    anneals=anneals, isoflop_groups=groups,
                    forecasts=_forecasts(table, fits, o.forecast_targets, o.n_boot))


def _isoflop_groups(table: pd.DataFrame, o: AnalysisOptions) -> dict:
    """``isoflop_groups`` of the analysed families, once per process per table and options (a figure
    drawn without an Analysis asks again with its own forecast targets)."""
    fams = list(o.families) if o.families else sorted(map(str, table["family"].dropna().unique()))
    key = dict(families=fams, n_boot=o.n_boot, seed=o.seed)
    return _cached("groups", table, key,
                   lambda: isoflop_groups(table, fams, options=FitOptions(n_boot=o.n_boot, seed=o.seed)))
