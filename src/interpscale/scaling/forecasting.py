"""Forecasts by the named methods (``forecast_methods``): the rolling-origin backtest, the
default method it chooses and intervals calibrated on its errors (``calibration``).

Rolling origin: at each origin (a number of budgets: IsoFLOP slices, or the runs' computes, from
half of the runs for a run table; at most 6) each method is fitted on the budgets up to it and
forecasts every larger one (a slice's loss-optimal L*, or a run's loss at its (P, D)). The default
is the method with the lowest mean absolute error at the far end on the folds every method
forecast (``choose_method``); docs/forecasting.md states the rules and their coverage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from ._base import FitStatus, fit_status, jsonable, quiet
from .calibration import calibrate, conformal_quantile, spread
from .forecast_methods import CALIBRATIONS, METHODS, FitOptions, ForecastMethod, ForecastOptions, get_method, register_method
from .isoflop import slice_minimum
from .tables import flops_per_token_per_param, slice_rows

__all__ = ["CALIBRATIONS", "METHODS", "FitOptions", "ForecastMethod", "ForecastOptions", "MethodForecast", "FamilyForecast",
           "calibrate", "calibrated", "choose_method", "conformal_quantile", "fold_forecasts", "forecast_family",
           "forecast_runs", "forecast_table", "get_method", "register_method", "rolling_origin"]


# ---- rolling origin: the one fold machinery (scaling.backtest runs its schemes on it) ----
ERROR_COLUMNS = ["method", "quantity", "origin", "held_out", "compute", "ratio", "params", "tokens", "predicted",
                 "lo", "hi", "observed", "log_error", "spread", "status"]


def _budgets(rows: pd.DataFrame, o: ForecastOptions) -> tuple[str, np.ndarray]:
    """("slices", slice targets) for an IsoFLOP sweep of >= 3 slices, else ("runs", run computes)."""
    if "slice_flops" in rows.columns and rows["slice_flops"].nunique() >= 3:
        return "slices", np.sort(rows["slice_flops"].dropna().unique())
    return "runs", np.sort(_run_compute(rows, o).unique())


def _run_compute(rows: pd.DataFrame, o: ForecastOptions) -> pd.Series:
    if "flops" in rows.columns and rows["flops"].notna().all():
        return rows["flops"].astype(float)
    return o.k * rows["params"].astype(float) * rows["tokens"].astype(float)


def _slice_target(rows: pd.DataFrame, c: float, o: ForecastOptions) -> dict:
    """The held-out slice's loss-optimal L* and P* (its Eq. 25 minimum), or why it is not scored."""
    s = slice_rows(rows[rows["slice_flops"] == c].dropna(subset=["params", o.loss]), o.tolerance)
    t = dict(quantity="L_star", held_out=float(c), compute=float(c), params=None, tokens=None)
    if len(s) < 3:
        return dict(t, observed=math.nan, observed_P=math.nan, status="held-out slice not scored: fewer than 3 "
                    "rows within tolerance")
    if s.duplicated("params").any():
        s = s.groupby("params", as_index=False)[o.loss].mean()
    m = slice_minimum(s["params"], s[o.loss], window=o.window, minimum=o.minimum)
    return dict(t, observed=float(m["L_star"]), observed_P=float(m["P_star"]),
                status=f"held-out slice not scored: {m['reason']}" if m["reason"] else "ok")


def _targets(kind: str, rows: pd.DataFrame, held, o: ForecastOptions, runs: bool = False) -> list[dict]:
    """The held-out budgets' targets: each slice's minimum (unscored ones with their reason) and,
    with ``runs`` or for a table of runs, every held-out run's loss at its (P, D)."""
    out = [_slice_target(rows, float(c), o) for c in held] if kind == "slices" else []
    if kind == "slices" and not runs:
        return out
    C = _run_compute(rows, o)
    where = rows["slice_flops"] if kind == "slices" else C
    r = rows[where.isin(held)].dropna(subset=["params", "tokens", o.loss])
    return out + [dict(quantity="loss", held_out=float(h), compute=float(c), params=float(p), tokens=float(t),
                       observed=float(v), status="ok")
                  for h, c, p, t, v in zip(where[r.index], C[r.index], r["params"], r["tokens"], r[o.loss])]


def _origins(kind: str, budgets: np.ndarray, names, max_origins: int) -> list[int]:
    """Numbers of budgets fitted at each origin (the largest leaves at least one out)."""
    need = min(get_method(m).min_budgets for m in names)
    if kind == "runs":  # fits that saw at least half of the runs (and 8): errors of fits like the final one
        need = max(need, 8, len(budgets) // 2)
    ks = list(range(need, len(budgets)))
    if len(ks) > max_origins:
        ks = sorted({ks[int(round(i))] for i in np.linspace(0, len(ks) - 1, max_origins)})
    return ks


def _scored(name: str, m: ForecastMethod, fit, t: dict, origin: float, o: ForecastOptions) -> list[dict]:
    """The rows of one method's forecast of one target: predicted with its bootstrap PI, the log
    error, the fit's bootstrap log spread there (``calibration.spread``; studentized rules only);
    for an IsoFLOP power-law fit also the compute-optimal size P* (Eq. 26)."""
    base = dict(method=name, origin=origin, ratio=t["compute"] / origin, **{k: t[k] for k in (
        "quantity", "held_out", "compute", "params", "tokens", "observed")})
    pred, lo, hi = m.predict(fit, t["compute"], o, t["params"], t["tokens"])
    ok = bool(np.isfinite(pred) and pred > 0)
    status = t["status"] if t["status"] != "ok" else ("ok" if ok else "no finite prediction")
    err = math.log(t["observed"] / pred) if ok and status == "ok" else math.nan
    s = math.nan if o.calibration == "distance" or not ok else spread(m, fit, t["compute"], o, t["params"],
                                                                      t["tokens"])
    out = [dict(base, predicted=pred, lo=lo, hi=hi, log_error=err, spread=s, status=status)]
    if hasattr(fit, "power_P") and t["quantity"] == "L_star":
        P = float(fit.power_P.predict(t["compute"]))
        pi = fit.predict_interval(np.array([t["compute"]]), o.level, seed=o.seed)["P_star"] if o.n_boot else None
        lo, hi = (math.nan, math.nan) if pi is None else (float(np.ravel(pi[0])[0]), float(np.ravel(pi[1])[0]))
        obs = t["observed_P"]
        out.append(dict(base, quantity="P_star", observed=obs, predicted=P, lo=lo, hi=hi, status=status,
                        log_error=math.log(obs / P) if status == "ok" and P > 0 else math.nan))
    return out


def fold_forecasts(rows: pd.DataFrame, names, options: ForecastOptions, folds, *, kind: str,
                   runs: bool = False, at: float | None = None) -> pd.DataFrame:
    """The one backtest machinery: for each fold ``(fitted budgets, held-out budgets)`` each
    method in ``names`` is fitted on the rows of the fitted budgets (``options``: with or
    without bootstrap) and forecasts the held-out targets (``_targets``); one row per
    (method, fold, target) with ``ERROR_COLUMNS``. A fit that fails is one row with its reason
    in ``status``; a held-out slice that cannot be scored keeps its reason too. ``at``: each
    fit also forecasts the compute-optimal loss there (``quantity`` "target", not scored)."""
    C = _run_compute(rows, options) if kind == "runs" else rows["slice_flops"]
    out = []
    for fitted, held in folds:
        train, origin = rows[C.isin(fitted)], float(np.max(fitted))
        targets = _targets(kind, rows, held, options, runs) + ([] if at is None else [dict(
            quantity="target", held_out=math.nan, compute=float(at), params=None, tokens=None, observed=math.nan,
            status="forecast at the target compute")])
        for name in names:
            m = get_method(name)
            if len(fitted) < m.min_budgets:
                continue
            try:  # a refit's wild bootstrap replicates overflow exp() in its parameter CIs: not the user's concern
                with quiet(), np.errstate(over="ignore", invalid="ignore"):
                    fit = m.fit(train, options)
            except ValueError as exc:
                out += [dict(method=name, origin=origin, held_out=float(h), status=f"fit failed: {exc}") for h in held]
                continue
            for j, t in enumerate(targets):  # each target its own noise draws (seed + j), as one batched call
                if not (m.slices and t["params"] is not None):
                    out += _scored(name, m, fit, t, origin, replace(options, seed=options.seed + j))
    return pd.DataFrame(out, columns=ERROR_COLUMNS)


def rolling_origin(rows: pd.DataFrame, names, options: ForecastOptions, *, max_origins: int = 6) -> pd.DataFrame:
    """Forecasts of held-out budgets from the smaller ones, for each method in ``names``: at each
    origin every larger budget is forecast (``fold_forecasts``; the joint fit from the coarse start
    grid; point fits, or ``backtest_boot`` replicates for the spreads of a studentized calibration).
    Only the L* / run-loss rows (``quantity``) are kept."""
    kind, budgets = _budgets(rows, options)
    names = [m for m in names if kind == "slices" or not get_method(m).slices]
    boot = 0 if options.calibration == "distance" else options.backtest_boot
    o = replace(options, n_boot=boot, grid="coarse")  # from the 243-start grid: many refits
    folds = [(budgets[:k], budgets[k:]) for k in _origins(kind, budgets, names, max_origins)]
    e = fold_forecasts(rows, names, o, folds, kind=kind)
    return e[e["quantity"] != "P_star"].reset_index(drop=True)


def choose_method(errors: pd.DataFrame, names) -> tuple[str | None, dict]:
    """(method with the lowest far-end error, {method: mean |relative error| % at the far end}).

    Far end: the forecasts whose log ratio is at least half the log of the largest ratio the
    backtest tested, on the (origin, target) folds every method with a scored forecast forecast
    (a method that needs more budgets than the sweep has is left out of the choice)."""
    ok = errors[errors["status"] == "ok"].dropna(subset=["log_error"])
    names = [m for m in names if m in set(ok["method"])]
    if not names or ok.empty:
        return None, {}
    key = ["origin", "compute", "params", "tokens"]
    ok = ok.assign(params=ok["params"].fillna(-1.0), tokens=ok["tokens"].fillna(-1.0))
    common = ok[ok["method"].isin(names)].groupby(key)["method"].nunique()
    folds = common[common == len(names)].reset_index()[key]
    far = ok.merge(folds, on=key)
    if far.empty:
        return None, {}
    far = far[np.log(far["ratio"]) >= 0.5 * np.log(far["ratio"].max())]
    score = {m: 100 * float(np.mean(np.abs(np.expm1(-far.loc[far["method"] == m, "log_error"]))))
             for m in names}
    return min(score, key=score.get), score


def calibrated(m: ForecastMethod, fit, compute: float, o: ForecastOptions, errors: pd.DataFrame, ratio: float,
               params=None, tokens=None) -> tuple[float, float, float, float, float, float]:
    """(prediction, bootstrap PI lo, hi, calibrated lo, hi, m) of ``fit`` at the target: ``calibrate``
    by ``o.calibration`` on the backtest forecasts of ``m`` in ``errors`` (``rolling_origin``);
    without a scored one, the bootstrap prediction interval stands."""
    pred, lo, hi = m.predict(fit, compute, o, params, tokens)
    e = errors[(errors["method"] == m.name) & (errors["status"] == "ok")].dropna(subset=["log_error"])
    if e.empty:
        return pred, lo, hi, lo, hi, 0.0
    stud = o.calibration != "distance"
    cal = calibrate(pred, *m.interval(fit, compute, o, params, tokens), ratio, e["log_error"], e["ratio"], o.level,
                    spreads=e["spread"] if stud else None, signed=o.calibration == "studentized-signed",
                    spread=spread(m, fit, compute, o, params, tokens) if stud else None)
    return (pred, lo, hi, *cal)


# ---- one family's forecast --------------------------------------------------------------
@dataclass(frozen=True)
class MethodForecast:
    """One method's forecast at the target: prediction, raw bootstrap and calibrated intervals."""

    method: str
    predicted: float
    raw_lo: float
    raw_hi: float
    lo: float
    hi: float
    backtest_error: float | None = None  # mean |relative error| % at the far end of the backtest
    model_sd: float = 0.0  # the calibration's model-error half-width (log scale)
    fit: Any = field(default=None, repr=False, compare=False)

    @property
    def status(self) -> FitStatus:
        """The status of the fit behind this forecast (decided where the fit was made)."""
        return fit_status(self.fit)


@dataclass(frozen=True)
class FamilyForecast:
    """Every applicable method's forecast at ``target_compute`` and the chosen one."""

    target_compute: float
    chosen: str
    chosen_by: str  # "backtest", "user" or "fallback (no backtest)"
    methods: dict  # name -> MethodForecast
    level: float
    ratio: float  # target compute over the largest fitted compute
    max_tested_ratio: float  # the largest extrapolation ratio the backtest scored
    params: float | None = None
    tokens: float | None = None
    errors: pd.DataFrame | None = field(default=None, repr=False, compare=False)
    warnings: tuple[str, ...] = ()
    options: ForecastOptions = field(default_factory=ForecastOptions, repr=False, compare=False)

    @property
    def best(self) -> MethodForecast:
        return self.methods[self.chosen]

    def to_dict(self) -> dict:
        return jsonable({
            "target_compute": self.target_compute, "chosen": self.chosen, "chosen_by": self.chosen_by,
            "level": self.level, "ratio": self.ratio, "max_tested_ratio": self.max_tested_ratio,
            "params": self.params, "tokens": self.tokens, "warnings": list(self.warnings),
            "calibration": self.options.calibration,
            "methods": {k: {f: getattr(v, f) for f in ("predicted", "raw_lo", "raw_hi", "lo", "hi",
                                                         "backtest_error", "model_sd", "status")}
                        for k, v in self.methods.items()},
        })

    def summary(self) -> str:
        table = forecast_table({"": self}).drop(columns=["Family", "C", "ratio"])
        return "\n".join([f"forecast at C = {self.target_compute:.3g} ({self.ratio:.3g}x the largest fitted compute; "
                          f"the backtest tested up to {self.max_tested_ratio:.3g}x), {self.options.calibration} "
                          "calibration:", table.to_string(index=False)] + [f"  warning: {w}" for w in self.warnings])


def forecast_table(forecasts: dict, digits: int = 4) -> pd.DataFrame:
    """One row per (family, method) of ``{family: FamilyForecast}``: the chosen method first and
    marked, its forecast, calibrated and bootstrap prediction intervals and backtest error (the
    table ``tables.md`` and the report both print)."""
    rows = []
    for fam, fc in forecasts.items():
        if fc is None:
            continue
        pct = round(100 * fc.level)
        for name in [fc.chosen] + [m for m in fc.methods if m != fc.chosen]:
            v = fc.methods[name]
            rows.append({
                "Family": fam, "method": name + (f" (chosen by {fc.chosen_by})" if name == fc.chosen else ""),
                "C": f"{fc.target_compute:.3g}", "ratio": f"{fc.ratio:.3g}x (tested {fc.max_tested_ratio:.3g}x)",
                "forecast": f"{v.predicted:.{digits}f}",
                f"{pct}% PI (calibrated)": f"[{v.lo:.{digits}f}, {v.hi:.{digits}f}]",
                f"{pct}% PI (bootstrap)": f"[{v.raw_lo:.{digits}f}, {v.raw_hi:.{digits}f}]",
                "backtest error %": "—" if v.backtest_error is None else f"{v.backtest_error:.2f}",
                "fit status": str(v.status),
            })
    return pd.DataFrame(rows)


def forecast_family(rows: pd.DataFrame, target_compute: float, *, method: str | None = None,
                    options: ForecastOptions | None = None, params: float | None = None,
                    tokens: float | None = None, methods=None, fits: dict | None = None) -> FamilyForecast:
    """Forecast one family's loss at ``target_compute`` (compute-optimal, or at ``params``/
    ``tokens``) with every applicable method; the default is chosen by ``rolling_origin`` +
    ``choose_method`` unless ``method`` names one; each interval is ``calibrated``.
    ``fits``: already made fits by method name (e.g. the family's own), reused as they are."""
    o = options or ForecastOptions(k=flops_per_token_per_param(rows))
    target = _positive(target_compute)
    if method is not None:
        get_method(method)
    kind, budgets = _budgets(rows, o)
    run_target = params is not None and tokens is not None
    names = [m for m in (methods or METHODS) if not (get_method(m).slices and (run_target or kind != "slices"))]
    if method is not None and method not in names:
        raise ValueError(f"method {method!r} cannot forecast this target (it needs IsoFLOP slices and forecasts "
                         f"the loss-optimal L*(C) only); applicable: {', '.join(names)}")
    errors = rolling_origin(rows, names, o)
    chosen, score = choose_method(errors, names)
    ratio = target / (float(budgets.max()) if kind == "slices" else float(_run_compute(rows, o).max()))
    warnings: list[str] = []
    out = {}
    for name in names:
        m, fit = get_method(name), (fits or {}).get(name)  # a fit made with the same options elsewhere
        try:
            if fit is None:
                with quiet():
                    fit = m.fit(rows, o)
            pred, lo, hi, clo, chi, msd = calibrated(m, fit, target, o, errors, ratio, params, tokens)
        except ValueError as exc:
            warnings.append(f"{name}: no forecast ({exc})")
            continue
        out[name] = MethodForecast(name, pred, lo, hi, clo, chi, score.get(name), msd, fit)
    if not out:
        raise ValueError("no forecast method could fit these rows: " + "; ".join(warnings))
    how = "user" if method else ("backtest" if chosen in out else "fallback (no backtest)")
    ok = errors[errors["status"] == "ok"]
    return FamilyForecast(target_compute=target, chosen=method or (chosen if chosen in out else next(iter(out))),
                          chosen_by=how, methods=out, level=o.level, ratio=ratio,
                          max_tested_ratio=float(ok["ratio"].max()) if len(ok) else math.nan, params=params,
                          tokens=tokens, errors=errors, warnings=tuple(warnings), options=o)


def _positive(target_compute) -> float:
    if not (math.isfinite(float(target_compute)) and float(target_compute) > 0):
        raise ValueError(f"target_compute must be a positive number of FLOPs, got {target_compute}")
    return float(target_compute)


def forecast_runs(rows: pd.DataFrame, targets: pd.DataFrame, *, method: str = "joint",
                  options: ForecastOptions | None = None) -> pd.DataFrame:
    """Forecasts of new runs at their (``params``, ``tokens``) from ``rows`` (one fit, one
    rolling-origin backtest): per target the prediction, both intervals, the ratio and, when
    ``targets`` carries the ``options.loss`` column, the observation, whether each interval covered
    it and its widths relative to it (``width`` = hi - lo; ``half_width`` = the larger of pred - lo
    and hi - pred; ``raw_``: the bootstrap interval). The intervals never see the observation."""
    o = options or ForecastOptions(k=flops_per_token_per_param(rows))
    m = get_method(method)
    if m.slices:
        raise ValueError(f"method {method!r} forecasts the loss-optimal L*(C), not runs at given (P, D)")
    errors = rolling_origin(rows, [method], o)
    with quiet():
        fit = m.fit(rows, o)
    status = fit_status(fit)  # every row says whether the fit behind it is identified
    c_max = float(_run_compute(rows, o).max())
    out = []
    for t in targets.to_dict("records"):
        P, D = float(t["params"]), float(t["tokens"])
        C = float(t["flops"]) if "flops" in t and np.isfinite(t["flops"]) else o.k * P * D
        pred, lo, hi, clo, chi, msd = calibrated(m, fit, C, o, errors, C / c_max, P, D)
        rec = dict(t, method=method, calibration=o.calibration, ratio=C / c_max, predicted=pred, raw_lo=lo,
                   raw_hi=hi, lo=clo, hi=chi, model_sd=msd, n_backtest=int((errors["status"] == "ok").sum()),
                   fit_status=status.state, fit_reason=status.reason)
        if o.loss in t and np.isfinite(t[o.loss]):
            obs = float(t[o.loss])
            rec.update(observed=obs, abs_rel_error=abs(pred / obs - 1), covered_raw=bool(lo <= obs <= hi),
                       covered=bool(clo <= obs <= chi), raw_width=(hi - lo) / obs, width=(chi - clo) / obs,
                       raw_half_width=max(pred - lo, hi - pred) / obs, half_width=max(pred - clo, chi - pred) / obs)
        out.append(rec)
    return pd.DataFrame(out)
