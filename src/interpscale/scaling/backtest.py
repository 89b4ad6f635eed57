"""Backtests: how well does each fitted law forecast a budget it has not seen?

Two schemes over the compute budgets (IsoFLOP slices) of a results table:

* ``rollout`` -- fit on the smallest k budgets, forecast budget k+1 (k = min_train, ...), the
  expanding-window test of how a law extrapolates to the next, larger budget;
* ``loo`` -- leave one budget out, fit on the rest, forecast it.

Methods: ``isoflop`` (Approach 2: slice minima and the power laws P*(C), L*(C), Eq. 25-26),
``joint`` (Approach 3: the Chinchilla surface, Eq. 27-28, scored on every held-out run and on
the held-out slice's minimum through its compute-optimal L*(C)) and ``bounded`` (metric
fits, Eq. 29). Each forecast carries a prediction interval (curve uncertainty + observation
noise); the table records whether it covered the observation. With ``target_compute`` the
leave-one-out fits also forecast that compute, and ``forecast_shift()`` reports how far
dropping one budget moves each method's forecast (a stability diagnostic).

    bt = backtest(results, n_boot=200)
    bt.summary()            # text: error and coverage of each method
    bt.errors()             # one row per (family, method, quantity, scheme)
    bt.to_frame()           # one row per forecast
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Literal, Sequence

import numpy as np
import pandas as pd

from ._base import DEFAULT_LEVEL, check_level, jsonable, log, quiet
from .bounded import METRICS, fit_bounded
from .chinchilla import fit_chinchilla
from .tables import (
    ESTIMATOR_PREFERENCE,
    SLICE_TOLERANCE,
    attach_groups,
    flops_per_token_per_param,
    row_groups,
    select_rows,
    slice_rows,
)
from .isoflop import fit_isoflop, slice_minimum

METHODS = ("isoflop", "joint", "bounded")
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
        rows = []
        for key, g in t.groupby(["family", "method", "quantity", "scheme"], sort=False):
            rel = g["rel_error"].astype(float)
            width = ((g["hi"] - g["lo"]) / g["observed"].abs()).astype(float)
            rows.append(dict(zip(("family", "method", "quantity", "scheme"), key), n=len(g),
                             mape=100 * float(rel.abs().mean()), max_ape=100 * float(rel.abs().max()),
                             bias=100 * float(rel.mean()), coverage=float(g["covered"].astype(float).mean()),
                             pi_width=100 * float(width.mean())))
        cols = ["family", "method", "quantity", "scheme", "n", "mape", "max_ape", "bias", "coverage", "pi_width"]
        return pd.DataFrame(rows, columns=cols)

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
        for r in self.errors().itertuples(index=False):
            out.append(f"| {r.family} | {r.method} | {r.quantity} | {r.scheme} | {r.n} | {r.mape:.{digits}f} | "
                       f"{r.max_ape:.{digits}f} | {r.bias:+.{digits}f} | {r.coverage:.2f} | {r.pi_width:.{digits}f} |")
        if self.shifts is not None and len(self.shifts):
            out += ["", f"Leave-one-budget-out forecast shift at C = {self.target_compute:.3g}:", "",
                    "| Family | Method | forecast (all budgets) | max shift % | worst budget left out |", "|---|---|---|---|---|"]
            for r in self.shifts.itertuples(index=False):
                out.append(f"| {r.family} | {r.method} | {r.forecast:.4f} | {r.max_shift:.2f} | {r.worst_budget:.3g} |")
        failed = self.table[self.table["status"] != "ok"]
        if len(failed):
            out += ["", "Forecasts not scored:", ""]
            for r in failed.drop_duplicates(["family", "method", "scheme", "held_out", "status"]).itertuples(index=False):
                out.append(f"- {r.family} {r.method} {r.scheme} C={r.held_out:.3g}: {r.status}")
        return "\n".join(out) + "\n"

    def summary(self) -> str:
        pct = round(100 * self.level)
        e = self.errors()
        lines = [f"backtest: {len(self.table)} forecasts of held-out budgets, {pct}% prediction intervals, "
                 f"{self.n_boot} bootstrap replicates per fit; overall coverage {self.coverage():.2f}",
                 f"  {'family':<14}{'method':<9}{'quantity':<24}{'scheme':<9}{'n':>4}{'MAPE%':>8}{'max%':>8}"
                 f"{'bias%':>8}{'cover':>7}{'PI%':>7}"]
        for r in e.itertuples(index=False):
            lines.append(f"  {str(r.family):<14}{r.method:<9}{r.quantity:<24}{r.scheme:<9}{r.n:>4}{r.mape:>8.2f}"
                         f"{r.max_ape:>8.2f}{r.bias:>+8.2f}{r.coverage:>7.2f}{r.pi_width:>7.2f}")
        if self.shifts is not None:
            for r in self.shifts.itertuples(index=False):
                lines.append(f"  {r.family} {r.method}: forecast at C={self.target_compute:.3g} {r.forecast:.4f}; "
                             f"leaving one budget out moves it by up to {r.max_shift:.2f}%")
        n_bad = int((self.table["status"] != "ok").sum())
        if n_bad:
            lines.append(f"  {n_bad} forecast(s) not scored (see to_frame()['status'])")
        return "\n".join(lines + [f"  warning: {w}" for w in self.warnings])


def _row(**kw) -> dict:
    r = dict.fromkeys(COLUMNS, math.nan)
    r.update(status="ok", params=math.nan)
    r.update(kw)
    obs, pred = r["observed"], r["predicted"]
    if r["status"] == "ok" and np.isfinite(obs) and np.isfinite(pred):
        r["error"] = pred - obs
        r["rel_error"] = (pred - obs) / abs(obs) if obs != 0 else math.nan
        r["covered"] = bool(r["lo"] <= obs <= r["hi"])
    else:
        r["covered"] = False
    return r


def _folds(budgets: np.ndarray, schemes: Iterable[str], min_train: int):
    for scheme in schemes:
        if scheme == "rollout":
            for k in range(min_train, len(budgets)):
                yield scheme, budgets[:k], budgets[k]
        elif scheme == "loo":
            for b in budgets:
                yield scheme, budgets[budgets != b], b
        else:
            raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")


class _Fitter:
    """Fits one method on the rows of some budgets and forecasts another budget's rows."""

    def __init__(self, *, budget, compute, loss, tolerance, window, grid, n_boot, level, seed, metrics,
                 target=None, k=6.0, minimum="parabola"):
        self.budget, self.compute, self.loss, self._target = budget, compute, loss, target
        self.minimum = minimum
        self.k = k  # FLOPs per token per parameter of the data (C = k P D)
        self.tolerance, self.window, self.grid = tolerance, window, grid
        self.n_boot, self.level, self.seed, self.metrics = n_boot, level, seed, metrics

    def iso_rows(self, d: pd.DataFrame) -> pd.DataFrame:
        """Rows for slice fits: within ``tolerance`` of their budget; repeated sizes of one
        slice (several runs of one size, e.g. different token counts) averaged."""
        d = slice_rows(d.dropna(subset=["params", self.loss]), self.tolerance, compute=self.compute, budget=self.budget)
        if d.duplicated([self.budget, "params"]).any():
            cols = [c for c in ("tokens", self.loss) if c in d.columns]
            d = d.groupby([self.budget, "params"], as_index=False)[cols].mean()
        return d

    def isoflop(self, train, test, C):
        fit = fit_isoflop(self.iso_rows(train), compute=self.budget, loss=self.loss, window=self.window,
                          n_boot=self.n_boot, level=self.level, seed=self.seed, minimum=self.minimum)
        held = self.iso_rows(test)
        obs = slice_minimum(held["params"].to_numpy(), held[self.loss].to_numpy(), window=self.window,
                            minimum=self.minimum) if len(held) \
            else dict(P_star=math.nan, L_star=math.nan, reason="no rows within tolerance")
        pi = fit.predict_interval(np.array([C]), self.level, seed=self.seed)
        P, Lp = (float(v[0]) for v in fit.predict(np.array([C])))
        status = "ok" if not obs["reason"] else f"held-out slice not scored: {obs['reason']}"
        return [dict(quantity="L_star", predicted=Lp, lo=pi["L_star"][0][0], hi=pi["L_star"][1][0],
                     observed=obs["L_star"], status=status),
                dict(quantity="P_star", predicted=P, lo=pi["P_star"][0][0], hi=pi["P_star"][1][0],
                     observed=obs["P_star"], status=status)], fit.power_L.predict(self._target) if self._target else None

    def joint(self, train, test, C):
        tr = train.dropna(subset=["params", "tokens", self.loss])
        groups = row_groups(tr)
        kw = {} if groups is None else dict(bootstrap="cluster", groups=groups)
        fit = fit_chinchilla(tr["params"], tr["tokens"], tr[self.loss], grid=self.grid, n_boot=self.n_boot,
                             level=self.level, seed=self.seed, **kw)
        te = test.dropna(subset=["params", "tokens", self.loss])
        out = []
        if len(te):
            pred = fit.predict(te["params"].to_numpy(), te["tokens"].to_numpy())
            lo, hi = fit.predict_interval(te["params"].to_numpy(), te["tokens"].to_numpy(), self.level, seed=self.seed)
            for j, (p, o) in enumerate(zip(te["params"].to_numpy(), te[self.loss].to_numpy())):
                out.append(dict(quantity="loss", params=float(p), predicted=float(pred[j]), lo=float(lo[j]),
                                hi=float(hi[j]), observed=float(o)))
        iso = self.iso_rows(test).dropna(subset=["tokens"])
        obs = slice_minimum(iso["params"].to_numpy(), iso[self.loss].to_numpy(), window=self.window) \
            if len(iso) >= 2 else dict(L_star=math.nan, reason="fewer than 2 rows within tolerance")
        if len(iso) >= 2 and iso["params"].nunique() >= 2:
            # the surface's minimum along the held-out slice, traced as the data trace it
            # (log D linear in log P through the slice's runs: exact for C = k P D, any k)
            lP, lD = np.log(iso["params"].to_numpy(float)), np.log(iso["tokens"].to_numpy(float))
            c1, c0 = np.polyfit(lP, lD, 1)
            g = np.linspace(lP.min(), lP.max(), 401)
            Pg, Dg = np.exp(g), np.exp(c0 + c1 * g)
            j = int(np.argmin(fit.predict(Pg, Dg)))
            lo, hi = fit.predict_interval(Pg[j : j + 1], Dg[j : j + 1], self.level, seed=self.seed)
            out.append(dict(quantity="L_star", params=float(Pg[j]), predicted=float(fit.predict(Pg[j], Dg[j])),
                            lo=float(lo[0]), hi=float(hi[0]), observed=obs["L_star"],
                            status="ok" if not obs["reason"] else f"held-out slice not scored: {obs['reason']}"))
        status = "ok" if fit.converged else "joint fit did not converge"
        for r in out:
            if status != "ok":
                r["status"] = status
        target = float(fit.predict_optimal(self._target, self.k)) if self._target else None
        return out, target

    def bounded(self, train, test, C):
        out = []
        for m in self.metrics:
            tr = train.dropna(subset=[m, self.compute])
            te = test.dropna(subset=[m, self.compute])
            if len(te) == 0:
                continue
            try:
                fit = fit_bounded(tr[self.compute], tr[m], name=m, n_boot=self.n_boot, level=self.level, seed=self.seed)
            except ValueError as exc:
                out += [dict(quantity=m, status=f"fit failed: {exc}")]
                continue
            pred = fit.predict(te[self.compute].to_numpy())
            lo, hi = fit.predict_interval(te[self.compute].to_numpy(), self.level, seed=self.seed)
            for j, o in enumerate(te[m].to_numpy()):
                out.append(dict(quantity=m, predicted=float(pred[j]), lo=float(lo[j]), hi=float(hi[j]),
                                observed=float(o), status="ok" if fit.converged else "metric fit did not converge"))
        return out, None



def _check(results, methods, min_train, need, what="backtest") -> None:
    if not isinstance(results, pd.DataFrame):
        raise ValueError(f"{what}: results must be a pandas DataFrame")
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise ValueError(f"{what}: unknown method(s) {bad}; choose from {METHODS}")
    missing = [c for c in need if c not in results.columns]
    if missing:
        raise ValueError(f"{what}: results table lacks column(s) {missing}; have {list(results.columns)}")
    if min_train < 2:
        raise ValueError(f"min_train must be >= 2 (a power law needs two budgets), got {min_train}")


def _fold_rows(fitter: _Fitter, sub, budgets, methods, schemes, min_train, fam, ms):
    """Every fold's forecast rows, and the leave-one-out fits' forecasts at the target."""
    rows, loo_target = [], {m: [] for m in methods}
    for scheme, train_b, test_b in _folds(budgets, schemes, min_train):
        train, test = sub[sub[fitter.budget].isin(train_b)], sub[sub[fitter.budget] == test_b]
        for method in methods:
            if method == "bounded" and not ms:
                continue
            base = dict(family=fam, method=method, scheme=scheme, held_out=float(test_b),
                        n_train_budgets=len(train_b), compute=float(test_b))
            try:
                with quiet():  # a refit's trouble is recorded in its rows' status
                    out, tgt = getattr(fitter, method)(train, test, float(test_b))
            except ValueError as exc:
                out, tgt = [dict(quantity="-", status=f"fit failed: {exc}")], None
            rows += [_row(**base, **r) for r in out]
            if scheme == "loo" and tgt is not None:
                loo_target[method].append((float(test_b), float(tgt)))
    return rows, loo_target


def _shifts(fitter: _Fitter, sub, budgets, methods, loo_target, fam, warnings) -> list[dict]:
    """How far leaving one budget out moves each method's forecast at the target compute."""
    out = []
    for method in ("isoflop", "joint"):
        if method not in methods or not loo_target[method]:
            continue
        try:
            with quiet():
                _, full = getattr(fitter, method)(sub, sub.iloc[:0], float(budgets[-1]))
        except ValueError as exc:
            warnings.append(f"{fam} {method}: all-budget fit failed: {exc}")
            continue
        b, v = np.array(loo_target[method]).T
        rel = 100 * np.abs(v / full - 1)
        out.append(dict(family=fam, method=method, forecast=float(full), max_shift=float(rel.max()),
                        worst_budget=float(b[np.argmax(rel)])))
    return out


def backtest(
    results: pd.DataFrame,
    *,
    family: str | Sequence[str] | None = None,
    methods: Sequence[str] = ("isoflop", "joint"),
    schemes: Sequence[str] = SCHEMES,
    min_train: int = 3,
    budget: str = "slice_flops",
    compute: str = "flops",
    loss: str = "loss",
    estimator: str | None = None,
    annealed: bool | None = None,
    tolerance: float | None = SLICE_TOLERANCE,
    window: int | None = 5,
    grid: Literal["epoch", "coarse"] = "coarse",
    n_boot: int = 200,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
    groups=None,
    metrics: Sequence[str] | None = None,
    target_compute: float | None = None,
    minimum: Literal["parabola", "akima"] = "parabola",
) -> Backtest:
    """Backtest each method on each family of ``results`` (one row per checkpoint; the
    columns of ``fit_families`` plus ``budget``). ``min_train`` is the smallest number of
    budgets a rollout fits on. ``groups`` (one label per row of ``results``, e.g. its
    ``run_id`` column) switches the joint fit to a cluster bootstrap. ``metrics``: metric
    columns for the ``bounded`` method (default: every METRICS column present). ``loss`` may
    name another column (e.g. bits per byte). ``minimum``: how slice minima are read, for the
    fits and the held-out observations alike. Fits that fail are recorded with their reason in
    ``status``, never dropped silently."""
    level = check_level(level)
    _check(results, methods, min_train, [budget, "params", loss] + (["tokens"] if "joint" in methods else []))
    warnings: list[str] = []
    with quiet():  # the row choice is the fits' own, logged once there; here it goes into ``warnings``
        df = select_rows(attach_groups(results, groups, "backtest"), "annealed", annealed, (True,), "annealed",
                         warnings, caller="backtest")
    if "family" not in df.columns:
        df = df.assign(family="all")
    fams = [family] if isinstance(family, str) else list(family or sorted(df["family"].dropna().unique(), key=str))
    unknown = [f for f in fams if f not in set(df["family"])]
    if unknown:
        raise ValueError(f"backtest: family {unknown} not in the table; have {sorted(set(df['family']), key=str)}")
    rows, shifts = [], []
    for fam in fams:
        with quiet():
            sub = select_rows(df[df["family"] == fam], "estimator", estimator, ESTIMATOR_PREFERENCE, "estimator",
                              warnings, caller="backtest")
        ms = [m for m in (metrics or METRICS) if m in sub.columns and sub[m].notna().any()]
        fitter = _Fitter(budget=budget, compute=compute if compute in sub.columns else budget, loss=loss,
                         tolerance=tolerance, window=window, grid=grid, n_boot=n_boot, level=level, seed=seed,
                         metrics=ms, target=target_compute, k=flops_per_token_per_param(sub, compute), minimum=minimum)
        budgets = np.sort(sub[budget].dropna().unique())
        if len(budgets) <= min_train and "rollout" in schemes:
            warnings.append(f"{fam}: {len(budgets)} budget(s); a rollout needs more than min_train = {min_train}")
        fam_rows, loo_target = _fold_rows(fitter, sub, budgets, methods, schemes, min_train, fam, ms)
        rows += fam_rows
        if target_compute is not None and "loo" in schemes:
            shifts += _shifts(fitter, sub, budgets, methods, loo_target, fam, warnings)
        log.info("backtest %s: %d forecasts", fam, len(fam_rows))
    table = pd.DataFrame(rows, columns=COLUMNS)
    sh = pd.DataFrame(shifts, columns=["family", "method", "forecast", "max_shift", "worst_budget"]) \
        if target_compute is not None else None
    return Backtest(table=table, level=level, n_boot=n_boot, target_compute=target_compute, shifts=sh,
                    warnings=tuple(warnings))
