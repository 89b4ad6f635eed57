"""Forecasts by named methods (docs/forecasting.md): the methods (``METHODS``, one registry;
``joint`` Eq. 27, ``isoflop-powerlaw`` Eq. 26, ``isoflop-saturating`` E + A C^-alpha on the slice
minima; ``FitOptions`` the one set of options), the rolling-origin backtest that chooses the
default, and intervals calibrated on its errors by split conformal (Vovk et al. 2005; Lei et
al. 2018): scores t_i = |u_i| / a_i of the backtest's log errors u_i = ln(observed / predicted),
a the log extrapolation distance d(r) = ln(max(r, 2)) (``distance``) or the fit's own bootstrap
log spread (``studentized``); the log half-width is m = q a_T, the interval the larger of it and
the curve's bootstrap confidence interval. The target's own error never enters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, NamedTuple

import numpy as np
import pandas as pd

from interpscale._registry import Registry

from ._base import DEFAULT_GRID, DEFAULT_LEVEL, FitFields, FitStatus, check_level, fit_status, jsonable, quiet
from .bootstrap import N_BOOT
from .bounded import fit_bounded
from .isoflop import fit_isoflop, slice_minimum
from .joint import fit_chinchilla
from .reach import conformal_quantile, rescale
from .tables import SLICE_TOLERANCE, flops_per_token_per_param, row_groups, slice_rows
from interpscale.errors import UserError

# ---- options and methods by name ----

CALIBRATIONS = ("studentized", "distance", "studentized-signed")  # docs/forecasting.md; the first the default


@dataclass(frozen=True)
class FitOptions:
    """The one set of fit options (and their defaults) every reader passes to the fits: a
    forecast's methods, the backtest's refits, the ledger, the figures. ``calibration`` names the
    interval rule and ``backtest_boot`` the bootstrap replicates of each rolling-origin refit (the
    spread the ``studentized`` rule divides by); n_boot defaults come from ``bootstrap.N_BOOT``."""

    loss: str = "loss"
    n_boot: int = N_BOOT["forecast"]
    level: float = DEFAULT_LEVEL
    seed: int = 0
    grid: str = DEFAULT_GRID
    window: int | None = 5
    tolerance: float | None = SLICE_TOLERANCE
    k: float = 6.0  # FLOPs per token per parameter of the data (C = k P D)
    minimum: str = "parabola"  # how slice minima are read (Eq. 25 parabola vertex or Akima)
    calibration: str = CALIBRATIONS[0]
    backtest_boot: int = N_BOOT["refit"]

    def __post_init__(self):
        if self.calibration not in CALIBRATIONS:
            raise UserError(f"calibration must be one of {', '.join(CALIBRATIONS)}, got {self.calibration!r}")

    @classmethod
    def for_purpose(cls, purpose: str, **fields) -> "FitOptions":
        """These options with ``bootstrap.N_BOOT[purpose]`` replicates (``"forecast"``, ``"backtest"``,
        ``"figure"``, ``"multiplier"``, ...): the replicate count of each use written once."""
        return cls(n_boot=N_BOOT[purpose], **fields)

    def boot(self, groups=None) -> dict:
        """Bootstrap keywords of one fit: a cluster bootstrap over ``groups`` when given."""
        kw = dict(n_boot=self.n_boot, level=self.level, seed=self.seed)
        return kw if groups is None else dict(kw, bootstrap="cluster", groups=groups)


ForecastOptions = FitOptions  # the name the forecast API has used


@dataclass(frozen=True)
class ForecastMethod:
    """``fit(rows, options)`` -> a fit; ``predict(fit, compute, options, params, tokens)`` ->
    (prediction, lo, hi), the bootstrap prediction interval at ``options.level``; optional
    ``band(...)`` -> (lo, hi), the curve's bootstrap confidence interval (what calibration widens).
    ``slices``: forecasts L*(C) from IsoFLOP slices only; ``min_budgets``: the fewest it fits on."""

    name: str
    equation: str
    fit: Callable[[pd.DataFrame, ForecastOptions], Any]
    predict: Callable[..., tuple[float, float, float]]
    slices: bool = False
    min_budgets: int = 3
    band: Callable[..., tuple[float, float]] | None = None

    def interval(self, fit, compute: float, options: ForecastOptions, params=None, tokens=None):
        """What calibration widens: the curve's confidence interval, else the prediction interval."""
        if self.band is not None:
            return self.band(fit, compute, options, params, tokens)
        return self.predict(fit, compute, options, params, tokens)[1:]


class MethodRegistry(Registry):
    """The forecast methods by name: a ``_registry.Registry`` that, like the dict it replaces,
    can also be edited in place (``del``, ``clear``, ``update``: tests and plugins restore it)."""

    def __delitem__(self, name: str) -> None:
        self.pop(name)

    def clear(self) -> None:
        for name in list(self):
            self.pop(name)

    def update(self, other) -> None:
        for name, method in dict(other).items():
            self.register(name, method, overwrite=True)


METHODS: MethodRegistry = MethodRegistry("forecast method")


def register_method(method: ForecastMethod, *, replace_existing: bool = False) -> ForecastMethod:
    """Add ``method`` to ``METHODS`` under its name (ValueError when taken, unless replacing)."""
    return METHODS.register(method.name, method, overwrite=replace_existing)


def get_method(name: str) -> ForecastMethod:
    if name not in METHODS:
        raise UserError(f"unknown forecast method {name!r}; choose from {', '.join(METHODS)}")
    return METHODS[name]


def _fit_joint(rows: pd.DataFrame, o: ForecastOptions):
    r = rows.dropna(subset=["params", "tokens", o.loss])
    # cluster labels attached to the table (tables.attach_groups): whole runs resampled
    return fit_chinchilla(r["params"], r["tokens"], r[o.loss], grid=o.grid, **o.boot(row_groups(r)))


def _predict_joint(fit, compute: float, o: ForecastOptions, params=None, tokens=None):
    if params is not None and tokens is not None:
        lo, hi = fit.predict_interval(params, tokens, o.level, seed=o.seed)
        return float(fit.predict(params, tokens)), float(lo), float(hi)
    lo, hi = fit.predict_interval_optimal(compute, o.level, o.k, seed=o.seed)
    return float(fit.predict_optimal(compute, o.k)), float(lo), float(hi)


def _first(band) -> tuple[float, float]:
    return float(np.ravel(band[0])[0]), float(np.ravel(band[1])[0])


def _band_joint(fit, compute: float, o: ForecastOptions, params=None, tokens=None):
    if params is not None and tokens is not None:
        return _first(fit.band(params, tokens, o.level))
    return _first(fit.band_optimal(compute, o.level, o.k))


def _slice_fit(rows: pd.DataFrame, o: ForecastOptions, n_boot: int):
    """``fit_isoflop`` on the rows within tolerance of their slice (several runs of one size: their mean)."""
    r = slice_rows(rows.dropna(subset=["slice_flops", "params", o.loss]), o.tolerance)
    if r.duplicated(["slice_flops", "params"]).any():
        cols = [c for c in ("tokens", o.loss) if c in r.columns]
        r = r.groupby(["slice_flops", "params"], as_index=False)[cols].mean()
    return fit_isoflop(r, loss=o.loss, window=o.window, n_boot=n_boot, level=o.level, seed=o.seed,
                       minimum=o.minimum)


def _predict_powerlaw(fit, compute: float, o: ForecastOptions, params=None, tokens=None):
    lo, hi = fit.predict_interval(compute, o.level, seed=o.seed)["L_star"]
    return float(fit.power_L.predict(compute)), float(lo), float(hi)


def _fit_saturating(rows: pd.DataFrame, o: ForecastOptions):
    """E + A C^-alpha (Eq. 29's form, E >= 0) on the used slice minima, its own residual bootstrap."""
    iso = _slice_fit(rows, o, 0)
    used = iso.slices[iso.slices["used"]]
    return fit_bounded(used["compute"], used["L_star"], direction="lower", bound=0.0, name="L_star",
                       **o.boot())


def _predict_saturating(fit, compute: float, o: ForecastOptions, params=None, tokens=None):
    lo, hi = fit.predict_interval(compute, o.level, seed=o.seed)
    return float(fit.predict(compute)), float(lo), float(hi)


register_method(ForecastMethod("joint", "Eq. 27: L = L_inf + A/P^alpha + B/D^beta", _fit_joint, _predict_joint,
                               band=_band_joint))
register_method(ForecastMethod("isoflop-powerlaw", "Eq. 26: L*(C) = a C^alpha_L on the slice minima",
                               lambda rows, o: _slice_fit(rows, o, o.n_boot), _predict_powerlaw, slices=True,
                               band=lambda fit, C, o, *_: _first(fit.band_L(np.array([C]), o.level))))
register_method(ForecastMethod("isoflop-saturating", "L*(C) = E + A C^-alpha on the slice minima (fit_bounded)",
                               _fit_saturating, _predict_saturating, slices=True, min_budgets=4,
                               band=lambda fit, C, o, *_: _first(fit.band(np.array([C]), o.level))))


# ---- calibrated prediction intervals ----

SPREAD_LEVEL = 0.6827  # the bootstrap interval whose log half-width is the spread s (one sd for normal draws)


def spread(method: ForecastMethod, fit, compute: float, o: ForecastOptions, params=None, tokens=None) -> float:
    """s: half the log width of the fit's bootstrap interval (``method.interval``) at SPREAD_LEVEL,
    a central interval rather than the sd so that a few wild replicates do not set it; nan when
    the fit has no bootstrap spread there."""
    lo, hi = method.interval(fit, compute, replace(o, level=SPREAD_LEVEL), params, tokens)
    return 0.5 * math.log(hi / lo) if lo > 0 and hi > lo else math.nan


def _scores(log_errors, ratios, ratio, spreads, target_spread):
    """(u_i, a_i, a_T) of the rule that applies: studentized when the target and some backtest
    forecast have a positive spread, else the log extrapolation distance d(r) = ln(max(r, 2))."""
    u = np.asarray(log_errors, float)
    if spreads is not None and target_spread is not None and target_spread > 0:
        s = np.asarray(spreads, float)
        ok = np.isfinite(u) & np.isfinite(s) & (s > 0)
        if ok.any():
            # beyond the largest tested ratio the scales grow by the error-growth relation (scaling.reach)
            return (u[ok], *rescale(s[ok], float(target_spread), ratio, np.asarray(ratios, float)[ok], "studentized"))
    r = np.asarray(ratios, float)
    ok = np.isfinite(u) & np.isfinite(r) & (r > 0)
    return (u[ok], *rescale(np.log(np.maximum(r[ok], 2.0)), math.log(max(float(ratio), 2.0)), ratio, r[ok], "distance"))


def calibrate(predicted: float, lo: float, hi: float, ratio: float, log_errors, ratios,
              level: float = DEFAULT_LEVEL, *, spreads=None, spread: float | None = None,
              signed: bool = False) -> tuple[float, float, float]:
    """(calibrated lo, calibrated hi, m = the larger log half-width) from the bootstrap confidence
    interval (lo, hi) at the target of extrapolation ratio ``ratio`` and the backtest's log errors
    at ``ratios``: pred exp(-max(b_lo, m_lo)) .. pred exp(max(b_hi, m_hi)), b = the log half-widths
    of (lo, hi). The distance rule, or with ``spreads`` (s_i) and ``spread`` (s_T) the studentized
    one; ``signed``: one quantile per side of the signed scores, each at 1 - (1 - level) / 2.
    Without a scored backtest forecast, (lo, hi) comes back unchanged with m = 0."""
    u, a, a_t = _scores(log_errors, ratios, ratio, spreads, spread)
    if u.size == 0 or not (predicted > 0 and lo > 0 and hi > 0):
        return float(lo), float(hi), 0.0
    if signed:
        tail = 1.0 - (1.0 - check_level(level)) / 2.0
        m_lo, m_hi = (max(0.0, conformal_quantile(sign * u / a, tail)) * a_t for sign in (-1.0, 1.0))
    else:
        m_lo = m_hi = conformal_quantile(np.abs(u) / a, level) * a_t
    b_lo = math.log(predicted / lo) if lo < predicted else 0.0
    b_hi = math.log(hi / predicted) if hi > predicted else 0.0
    return predicted * math.exp(-max(b_lo, m_lo)), predicted * math.exp(max(b_hi, m_hi)), max(m_lo, m_hi)


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
    error, the fit's bootstrap log spread there (``forecast.spread``; studentized rules only);
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
        lo, hi = _first(fit.predict_interval(np.array([t["compute"]]), o.level, seed=o.seed)["P_star"]) \
            if o.n_boot else (math.nan, math.nan)
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


class Calibrated(NamedTuple):
    """A forecast at one compute: the prediction, the bootstrap prediction interval (``raw_lo``,
    ``raw_hi``), the calibrated one (``lo``, ``hi``) and the calibration's model-error half-width
    ``model_sd`` (log scale); the fields of ``MethodForecast``."""

    predicted: float
    raw_lo: float
    raw_hi: float
    lo: float
    hi: float
    model_sd: float


def calibrated(m: ForecastMethod, fit, compute: float, o: ForecastOptions, errors: pd.DataFrame, ratio: float,
               params=None, tokens=None) -> Calibrated:
    """(prediction, bootstrap PI lo, hi, calibrated lo, hi, m) of ``fit`` at the target: ``calibrate``
    by ``o.calibration`` on the backtest forecasts of ``m`` in ``errors`` (``rolling_origin``);
    without a scored one, the bootstrap prediction interval stands."""
    pred, lo, hi = m.predict(fit, compute, o, params, tokens)
    e = errors[(errors["method"] == m.name) & (errors["status"] == "ok")].dropna(subset=["log_error"])
    if e.empty:
        return Calibrated(pred, lo, hi, lo, hi, 0.0)
    stud = o.calibration != "distance"
    cal = calibrate(pred, *m.interval(fit, compute, o, params, tokens), ratio, e["log_error"], e["ratio"], o.level,
                    spreads=e["spread"] if stud else None, signed=o.calibration == "studentized-signed",
                    spread=spread(m, fit, compute, o, params, tokens) if stud else None)
    return Calibrated(pred, lo, hi, *cal)


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
class FamilyForecast(FitFields):
    """Every applicable method's forecast at ``target_compute`` and the chosen one; ``ci``: each
    method's calibrated prediction interval at ``level``; ``converged`` and ``status``: those of the
    chosen method's fit (decided where that fit was made, read off by ``forecast_family``)."""

    target_compute: float
    chosen: str
    chosen_by: str  # "backtest", "user" or "fallback (no backtest)"
    methods: dict  # name -> MethodForecast
    ratio: float  # target compute over the largest fitted compute
    max_tested_ratio: float  # the largest extrapolation ratio the backtest scored
    params: float | None = None
    tokens: float | None = None
    errors: pd.DataFrame | None = field(default=None, repr=False, compare=False)
    options: ForecastOptions = field(default_factory=ForecastOptions, repr=False, compare=False)

    @property
    def best(self) -> MethodForecast:
        return self.methods[self.chosen]

    def calibrated_band(self, method: str, compute, largest: float, k: float | None = None):
        """(lo, hi) of ``method``'s calibrated prediction interval at each ``compute`` by the forecast's
        own rule (``calibrated``: its backtest errors and calibration, the extrapolation ratio compute
        over the ``largest`` fitted compute; ``k``: FLOPs per token per parameter, default the options')."""
        m, fit = get_method(method), self.methods[method].fit
        o = replace(self.options, level=self.level, **({} if k is None else {"k": k}))
        cs = np.atleast_1d(np.asarray(compute, float))
        at = [calibrated(m, fit, float(c), o, self.errors, c / largest) for c in cs]
        return np.array([a.lo for a in at]), np.array([a.hi for a in at])

    def to_dict(self) -> dict:
        cols = ("predicted", "raw_lo", "raw_hi", "lo", "hi", "backtest_error", "model_sd", "status")
        return jsonable({
            "target_compute": self.target_compute, "chosen": self.chosen, "chosen_by": self.chosen_by,
            "level": self.level, "ratio": self.ratio, "max_tested_ratio": self.max_tested_ratio,
            "params": self.params, "tokens": self.tokens, "warnings": list(self.warnings),
            "calibration": self.options.calibration, "status": self.status,
            "methods": {k: {f: getattr(v, f) for f in cols} for k, v in self.methods.items()}})

    def _lines(self) -> list[str]:
        table = forecast_table({"": self}).drop(columns=["Family", "C", "ratio"])
        return [f"forecast at C = {self.target_compute:.3g} ({self.ratio:.3g}x the largest fitted compute; "
                f"the backtest tested up to {self.max_tested_ratio:.3g}x), {self.options.calibration} "
                "calibration:", table.to_string(index=False)]

    def summary(self) -> str:
        # the table's "fit status" column gives each method's status: no status line (FitResult.summary)
        return "\n".join(self._lines() + [f"  warning: {w}" for w in self.warnings])


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
    target = positive_compute(target_compute)
    if method is not None:
        get_method(method)
    kind, budgets = _budgets(rows, o)
    run_target = params is not None and tokens is not None
    names = [m for m in (methods or METHODS) if not (get_method(m).slices and (run_target or kind != "slices"))]
    if method is not None and method not in names:
        raise UserError(f"method {method!r} cannot forecast this target (it needs IsoFLOP slices and forecasts "
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
        raise UserError("no forecast method could fit these rows: " + "; ".join(warnings))
    how = "user" if method else ("backtest" if chosen in out else "fallback (no backtest)")
    ok = errors[errors["status"] == "ok"]
    best = out[method or (chosen if chosen in out else next(iter(out)))]
    return FamilyForecast(target_compute=target, chosen=best.method, chosen_by=how, methods=out, level=o.level,
                          ratio=ratio, max_tested_ratio=float(ok["ratio"].max()) if len(ok) else math.nan,
                          params=params, tokens=tokens, errors=errors, warnings=tuple(warnings), options=o,
                          ci={k: (v.lo, v.hi) for k, v in out.items()}, status=best.status,
                          converged=bool(getattr(best.fit, "converged", True)))


def positive_compute(target_compute) -> float:
    if not (math.isfinite(float(target_compute)) and float(target_compute) > 0):
        raise UserError(f"target_compute must be a positive number of FLOPs, got {target_compute}")
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
        raise UserError(f"method {method!r} forecasts the loss-optimal L*(C), not runs at given (P, D)")
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
