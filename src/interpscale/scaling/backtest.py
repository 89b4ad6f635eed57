"""Backtests: how well does each forecast method forecast a budget it has not seen? The
``rollout`` and ``loo`` schemes over the IsoFLOP budgets, on ``forecast.fold_forecasts``, for every
forecast method and ``bounded`` (Eq. 29's metric fits) by default (docs/forecasting.md, "One backtest
machinery"). Each forecast carries the fit's bootstrap prediction interval and whether it covered the
observation; with ``target_compute``, ``forecast_shift()`` says how far leaving one budget out moves
each method's forecast there (a stability diagnostic).

    bt = backtest(results, options=FitOptions.for_purpose("backtest"))  # N_BOOT["backtest"] replicates per refit
    bt.summary(); bt.errors(); bt.to_frame()
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Sequence

import numpy as np
import pandas as pd

from ._base import DEFAULT_GRID, DEFAULT_LEVEL, check_level, from_options, jsonable, log, quiet
from .bootstrap import N_BOOT
from .bounded import METRICS, fit_bounded
from .forecast import METHODS as FORECAST_METHODS
from .forecast import ForecastOptions, fold_forecasts
from .tables import SLICE_TOLERANCE, fit_rows, flops_per_token_per_param
from interpscale.errors import UserError

BOUNDED = "bounded"  # the metric fits (Eq. 29): not a loss forecast method, backtested here alone
SCHEMES = ("rollout", "loo")
COLUMNS = ["family", "method", "quantity", "scheme", "held_out", "n_train_budgets", "compute", "params",
           "predicted", "lo", "hi", "observed", "error", "rel_error", "covered", "status"]
# Chinchilla's IsoFLOP budgets (Hoffmann et al. 2022, Fig. 3), for tables without slice labels
CHINCHILLA_BUDGETS = (6e18, 1e19, 3e19, 6e19, 1e20, 3e20, 6e20, 1e21, 3e21)


def nearest_budget(flops, budgets: Sequence[float] = CHINCHILLA_BUDGETS) -> np.ndarray:
    """The budget nearest to each compute value in log space (to label runs by IsoFLOP slice)."""
    lf = np.log(np.asarray(flops, float))[:, None]
    lb = np.log(np.asarray(budgets, float))[None, :]
    return np.asarray(budgets, float)[np.argmin(np.abs(lf - lb), axis=1)]


@dataclass(frozen=True)
class Backtest:
    """Forecasts of held-out budgets (``table``, one row per forecast) and their scores."""

    table: pd.DataFrame = field(compare=False)
    level: float = DEFAULT_LEVEL
    n_boot: int = 0
    target_compute: float | None = None
    shifts: pd.DataFrame | None = field(default=None, compare=False)
    warnings: tuple[str, ...] = ()

    def to_frame(self) -> pd.DataFrame:
        """Every forecast: predicted, prediction interval (lo, hi), observed, error, covered."""
        return self.table.copy()

    def errors(self) -> pd.DataFrame:
        """One row per (family, method, quantity, scheme): n forecasts scored, mean and max
        absolute relative error (%), mean signed error (bias, %), PI coverage and mean width (%)."""
        t = self.table[np.isfinite(self.table["error"].astype(float))]
        rel = t["rel_error"].astype(float)
        t = t.assign(rel=rel, ape=rel.abs(), covered=t["covered"].astype(float),
                     width=((t["hi"] - t["lo"]) / t["observed"].abs()).astype(float))
        e = t.groupby(["family", "method", "quantity", "scheme"], sort=False).agg(
            n=("ape", "size"), mape=("ape", "mean"), max_ape=("ape", "max"), bias=("rel", "mean"),
            coverage=("covered", "mean"), pi_width=("width", "mean")).reset_index()
        return e.assign(**{c: 100 * e[c] for c in ("mape", "max_ape", "bias", "pi_width")})

    def coverage(self) -> float:
        """Share of all scored forecasts whose prediction interval covered the observation."""
        t = self.table[np.isfinite(self.table["error"].astype(float))]
        return float(t["covered"].astype(float).mean()) if len(t) else math.nan

    def forecast_shift(self) -> pd.DataFrame | None:
        """Leave-one-budget-out forecasts at ``target_compute`` against the all-budget forecast."""
        return None if self.shifts is None else self.shifts.copy()

    def to_dict(self) -> dict:
        return jsonable({"level": self.level, "n_boot": self.n_boot, "target_compute": self.target_compute,
                         "errors": self.errors().to_dict("records"), "forecasts": self.table.to_dict("records"),
                         "forecast_shift": None if self.shifts is None else self.shifts.to_dict("records"),
                         "warnings": list(self.warnings)})

    def to_markdown(self, digits: int = 2) -> str:
        pct = round(100 * self.level)
        out = [f"### Backtest: held-out budgets ({pct}% prediction intervals)", "",
               "| Family | Method | Quantity | Scheme | n | MAPE % | max % | bias % | coverage | PI width % |",
               "|---|---|---|---|---|---|---|---|---|---|"]
        out += [f"| {r.family} | {r.method} | {r.quantity} | {r.scheme} | {r.n} | {r.mape:.{digits}f} | "
                f"{r.max_ape:.{digits}f} | {r.bias:+.{digits}f} | {r.coverage:.2f} | "
                f"{r.pi_width:.{digits}f} |" for r in self.errors().itertuples(index=False)]
        if self.shifts is not None and len(self.shifts):
            out += ["", f"Leave-one-budget-out forecast shift at C = {self.target_compute:.3g}:", "",
                    "| Family | Method | forecast (all budgets) | max shift % | worst budget left out |", "|---|---|---|---|---|"]
            out += [f"| {r.family} | {r.method} | {r.forecast:.4f} | {r.max_shift:.2f} | "
                    f"{r.worst_budget:.3g} |" for r in self.shifts.itertuples(index=False)]
        failed = self.table[self.table["status"] != "ok"]
        if len(failed):
            out += ["", "Forecasts not scored:", ""]
            for r in failed.drop_duplicates(["family", "method", "scheme", "held_out", "status"]).itertuples(index=False):
                out.append(f"- {r.family} {r.method} {r.scheme} C={r.held_out:.3g}: {r.status}")
        return "\n".join(out) + "\n"

    def summary(self) -> str:
        pct = round(100 * self.level)
        lines = [f"backtest: {len(self.table)} forecasts of held-out budgets, {pct}% prediction intervals, "
                 f"{self.n_boot} bootstrap replicates per fit; overall coverage {self.coverage():.2f}",
                 f"  {'family':<14}{'method':<9}{'quantity':<24}{'scheme':<9}{'n':>4}{'MAPE%':>8}{'max%':>8}"
                 f"{'bias%':>8}{'cover':>7}{'PI%':>7}"]
        lines += [f"  {str(r.family):<14}{r.method:<9}{r.quantity:<24}{r.scheme:<9}{r.n:>4}{r.mape:>8.2f}"
                  f"{r.max_ape:>8.2f}{r.bias:>+8.2f}{r.coverage:>7.2f}{r.pi_width:>7.2f}"
                  for r in self.errors().itertuples(index=False)]
        if self.shifts is not None:
            lines += [f"  {r.family} {r.method}: forecast at C={self.target_compute:.3g} {r.forecast:.4f}; "
                      f"leaving one budget out moves it by up to {r.max_shift:.2f}%"
                      for r in self.shifts.itertuples(index=False)]
        n_bad = int((self.table["status"] != "ok").sum())
        if n_bad:
            lines.append(f"  {n_bad} forecast(s) not scored (see to_frame()['status'])")
        return "\n".join(lines + [f"  warning: {w}" for w in self.warnings])


def _row(**kw) -> dict:
    r = dict.fromkeys(COLUMNS, math.nan) | {"status": "ok"}
    r.update({k: v for k, v in kw.items() if k in COLUMNS and v is not None})
    obs, pred = r["observed"], r["predicted"]
    if r["status"] == "ok" and np.isfinite(obs) and np.isfinite(pred):
        r["error"] = pred - obs
        r["rel_error"] = (pred - obs) / abs(obs) if obs != 0 else math.nan
        r["covered"] = bool(r["lo"] <= obs <= r["hi"])
    else:
        r["covered"] = False
    return r


def _folds(budgets: np.ndarray, schemes: Sequence[str], min_train: int):
    for scheme in schemes:
        if scheme == "rollout":
            for k in range(min_train, len(budgets)):
                yield scheme, budgets[:k], budgets[k : k + 1]
        elif scheme == "loo":
            for b in budgets:
                yield scheme, budgets[budgets != b], np.array([b])
        else:
            raise UserError(f"scheme must be one of {SCHEMES}, got {scheme!r}")


def _bounded_rows(train, test, metrics, o: ForecastOptions) -> list[dict]:
    """Each metric's bounded fit (Eq. 29) against compute on ``train``, forecasting ``test``'s rows."""
    out = []
    for m in metrics:
        tr, te = train.dropna(subset=[m, "flops"]), test.dropna(subset=[m, "flops"])
        if len(te) == 0:
            continue
        try:
            with quiet():
                fit = fit_bounded(tr["flops"], tr[m], name=m, **o.boot())
        except ValueError as exc:
            out.append(dict(quantity=m, status=f"fit failed: {exc}"))
            continue
        pred = fit.predict(te["flops"].to_numpy())
        lo, hi = fit.predict_interval(te["flops"].to_numpy(), o.level, seed=o.seed)
        out += [dict(quantity=m, predicted=float(p), lo=float(a), hi=float(b), observed=float(v),
                     status="ok" if fit.converged else "metric fit did not converge")
                for p, a, b, v in zip(pred, lo, hi, te[m].to_numpy())]
    return out


def _family_rows(sub, fam, budgets, methods, schemes, min_train, o, metrics, target_compute):
    """Every fold's forecast rows of one family, and each leave-one-out fit's forecast at the target."""
    names = [m for m in methods if m != BOUNDED]
    rows, at = [], []
    for scheme, fitted, held in _folds(budgets, schemes, min_train):
        base = dict(family=fam, scheme=scheme, held_out=float(held[0]), n_train_budgets=len(fitted),
                    compute=float(held[0]))
        t = fold_forecasts(sub, names, o, [(fitted, held)], kind="slices", runs=True,
                           at=target_compute if scheme == "loo" else None)
        at += [(float(held[0]), r["method"], r["predicted"]) for r in t[t["quantity"] == "target"].to_dict("records")]
        rows += [_row(**dict(r, **base)) for r in t[t["quantity"] != "target"].to_dict("records")]
        if BOUNDED in methods and metrics:
            train, test = sub[sub["slice_flops"].isin(fitted)], sub[sub["slice_flops"].isin(held)]
            rows += [_row(**base, method=BOUNDED, **r) for r in _bounded_rows(train, test, metrics, o)]
    return rows, at


def _shifts(sub, fam, names, o, budgets, at, target_compute, warnings) -> list[dict]:
    """How far leaving one budget out moves each forecast method's at the target compute."""
    full = fold_forecasts(sub, names, o, [(budgets, [])], kind="slices", at=target_compute)
    out = []
    for method in names:
        f = full[(full["method"] == method) & (full["quantity"] == "target")]
        loo = [(b, v) for b, m, v in at if m == method and np.isfinite(v)]
        if f.empty or not loo:
            if not full[(full["method"] == method) & full["status"].str.startswith("fit failed")].empty:
                warnings.append(f"{fam} {method}: all-budget fit failed")
            continue
        b, v = np.array(loo).T
        rel = 100 * np.abs(v / float(f["predicted"].iloc[0]) - 1)
        out.append(dict(family=fam, method=method, forecast=float(f["predicted"].iloc[0]), max_shift=float(rel.max()),
                        worst_budget=float(b[np.argmax(rel)])))
    return out


def backtest(results: pd.DataFrame, *, family: str | Sequence[str] | None = None,
             methods: Sequence[str] | None = None, schemes: Sequence[str] = SCHEMES, min_train: int = 3,
             budget: str = "slice_flops", compute: str = "flops", loss: str = "loss",
             estimator: str | None = None, annealed: bool | None = None,
             tolerance: float | None = SLICE_TOLERANCE, window: int | None = 5,
             grid: Literal["epoch", "coarse"] = DEFAULT_GRID, n_boot: int = N_BOOT["backtest"],
             level: float = DEFAULT_LEVEL, seed: int = 0, groups=None, metrics: Sequence[str] | None = None,
             target_compute: float | None = None,
             minimum: Literal["parabola", "akima"] = "parabola", options: ForecastOptions | None = None) -> Backtest:
    """Backtest each method (by name, or ``"bounded"``; default: every registered forecast method,
    ``forecast.METHODS``, and ``bounded`` for the metric columns present) on each family of ``results``
    (the columns of ``fit_families`` plus ``budget``). ``min_train``: the fewest budgets a rollout fits
    on; ``groups`` (one label per row, e.g. ``run_id``): a cluster bootstrap for the joint fit;
    ``metrics``: the ``bounded`` columns (default: every METRICS column present); ``minimum``: how
    slice minima are read, for fits and observations alike. A fit that fails is recorded with its
    reason in ``status``, never dropped. ``options`` (a ``FitOptions``, e.g. ``FitOptions.for_purpose(
    "backtest")``) gives ``loss, n_boot, level, seed, grid, window, tolerance, minimum`` at once; the loose
    keywords are kept for one release and may not be combined with it."""
    loss, n_boot, level, seed, grid, window, tolerance, minimum = from_options(options, dict(
        loss=loss, n_boot=n_boot, level=level, seed=seed, grid=grid, window=window, tolerance=tolerance,
        minimum=minimum), backtest).values()
    level, known = check_level(level), [*FORECAST_METHODS, BOUNDED]
    methods = known if methods is None else list(methods)
    if not isinstance(results, pd.DataFrame):
        raise ValueError("backtest: results must be a pandas DataFrame")
    if bad := [m for m in methods if m not in known]:
        raise UserError(f"backtest: unknown method(s) {bad}; choose from {known}")
    if min_train < 2:
        raise UserError(f"min_train must be >= 2 (a power law needs two budgets), got {min_train}")
    warnings: list[str] = []
    if "family" not in results.columns:
        results = results.assign(family="all")
    with quiet():  # the row choice is the fits' own, logged once there; here it goes into ``warnings``
        df = fit_rows(results, family=family, estimator=estimator, annealed=annealed, groups=groups,
                      caller="backtest", warnings=warnings,
                      need=[budget, "params", loss] + (["tokens"] if "joint" in methods else []))
    fams = [family] if isinstance(family, str) else list(family or sorted(df["family"].dropna().unique(), key=str))
    rows, shifts = [], []
    for fam in fams:
        sub = df[df["family"] == fam]
        ms = [m for m in (metrics or METRICS) if m in sub.columns and sub[m].notna().any()]
        has_c = compute in sub.columns
        sub = sub.drop(columns=[c for c in ("slice_flops", "flops") if c not in (budget, compute) and c in sub]) \
            .rename(columns={budget: "slice_flops", **({compute: "flops"} if has_c else {})})
        if not has_c:
            sub = sub.assign(flops=sub["slice_flops"])
        o = ForecastOptions(loss=loss, n_boot=n_boot, level=level, seed=seed, grid=grid, window=window,
                            tolerance=tolerance, k=flops_per_token_per_param(sub, "flops"), minimum=minimum,
                            calibration="distance")  # raw intervals are scored here: no spreads needed
        budgets = np.sort(sub["slice_flops"].dropna().unique())
        if len(budgets) <= min_train and "rollout" in schemes:
            warnings.append(f"{fam}: {len(budgets)} budget(s); a rollout needs more than min_train = {min_train}")
        fam_rows, at = _family_rows(sub, fam, budgets, methods, schemes, min_train, o, ms, target_compute)
        rows += fam_rows
        if target_compute is not None and "loo" in schemes:
            shifts += _shifts(sub, fam, [m for m in methods if m != BOUNDED], o, budgets, at, target_compute,
                              warnings)
        log.info("backtest %s: %d forecasts", fam, len(fam_rows))
    sh = pd.DataFrame(shifts, columns=["family", "method", "forecast", "max_shift", "worst_budget"]) \
        if target_compute is not None else None
    return Backtest(table=pd.DataFrame(rows, columns=COLUMNS), level=level, n_boot=n_boot,
                    target_compute=target_compute, shifts=sh, warnings=tuple(warnings))
