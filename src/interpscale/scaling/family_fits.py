"""Fit every family of a results table: Table 6 (loss scaling) and Table 7 (metric scaling)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Literal, Mapping

import numpy as np
import pandas as pd

from interpscale.paper import INTERP_METRICS
from tqdm.auto import tqdm

from ._base import DEFAULT_LEVEL, DEFAULT_N_BOOT, about, emit, fmt_sub, jsonable
from .bootstrap import percentile_ci
from .approaches import compare_approaches
from .bounded import METRICS, BoundedFit, fit_bounded
from .chinchilla import ChinchillaFit, fit_chinchilla
from .extrapolate import Extrapolation, extrapolate
from .forecasting import FamilyForecast, ForecastOptions, forecast_family, forecast_table
from .isoflop import IsoFlopFit, fit_isoflop
from .tables import (
    ESTIMATOR_PREFERENCE,
    SLICE_TOLERANCE,
    attach_groups,
    flops_per_token_per_param,
    row_groups,
    select_rows,
    slice_rows,
)

METRIC_LABELS = {k: m.label for k, m in INTERP_METRICS.items()}


@dataclass(frozen=True)
class FamilyFit:
    """All fits of one family: IsoFLOP (alpha_P, alpha_L), joint (alpha_D, L_inf), metric fits."""

    family: str
    estimator: str | None
    n_rows: int
    isoflop: IsoFlopFit | None
    chinchilla: ChinchillaFit | None
    bounded: dict = field(default_factory=dict)  # metric -> BoundedFit
    extrapolation: Extrapolation | None = None
    actual: dict = field(default_factory=dict)  # metric or "loss" -> observed value at the target
    warnings: tuple[str, ...] = ()
    skipped: dict = field(default_factory=dict)  # fit name -> why it could not be fitted
    flops_per_token_per_param: float = 6.0  # k in C = k P D, read off the rows (median)
    forecast: FamilyForecast | None = None  # methods by name at the target, chosen by backtest

    def approaches(self, compute, *, level: float | None = None, flops_per_token_per_param: float | None = None):
        """Approach 2 vs Approach 3 at ``compute`` (``compare_approaches``; C = k P D with the
        data's k unless given); None without both fits."""
        if self.isoflop is None or self.chinchilla is None:
            return None
        return compare_approaches(self.isoflop, self.chinchilla, compute, level=level,
                                  flops_per_token_per_param=flops_per_token_per_param or self.flops_per_token_per_param)

    @property
    def converged(self) -> bool:
        fits = [self.isoflop, self.chinchilla, *self.bounded.values()]
        return all(f.converged for f in fits if f is not None)

    @property
    def ci(self) -> dict:
        out = {}
        if self.isoflop is not None:
            out.update(alpha_P=self.isoflop.ci.get("alpha_P"), alpha_L=self.isoflop.ci.get("alpha_L"))
        if self.chinchilla is not None:
            out.update(alpha_D=self.chinchilla.ci.get("alpha_D"), L_inf=self.chinchilla.ci.get("L_inf"))
        return out

    def predict(self, compute):
        """Dict of predictions at ``compute``: L_star (log-linear), L_opt (joint), each metric."""
        out = {}
        if self.isoflop is not None:
            out["L_star"] = self.isoflop.power_L.predict(compute)
        if self.chinchilla is not None:
            out["L_opt"] = self.chinchilla.predict_optimal(compute)
        out.update({m: f.predict(compute) for m, f in self.bounded.items()})
        return out

    def to_dict(self) -> dict:
        return jsonable({
            "family": self.family, "estimator": self.estimator, "n_rows": self.n_rows,
            "converged": self.converged, "warnings": list(self.warnings), "skipped": self.skipped,
            "isoflop": self.isoflop, "chinchilla": self.chinchilla,
            "bounded": self.bounded, "extrapolation": self.extrapolation, "forecast": self.forecast,
        })

    def summary(self) -> str:
        parts = [f"== {self.family} ({self.n_rows} rows, estimator {self.estimator}) =="]
        for f in (self.isoflop, self.chinchilla, *self.bounded.values(), self.extrapolation, self.forecast):
            if f is not None:
                parts.append(f.summary())
        parts += [f"warning: {w}" for w in self.warnings]
        return "\n".join(parts)


@dataclass(frozen=True)
class FamilyFits:
    """Per-family fits plus the paper's Table 6 / Table 7 layouts."""

    families: dict  # family -> FamilyFit
    estimator: str | None
    annealed: bool | None
    level: float = DEFAULT_LEVEL
    target_compute: float | None = None
    warnings: tuple[str, ...] = ()

    def __getitem__(self, family: str) -> FamilyFit:
        return self.families[family]

    def __iter__(self):
        return iter(self.families)

    @property
    def converged(self) -> bool:
        return all(f.converged for f in self.families.values())

    @property
    def dropped(self) -> dict:
        """family -> {fit: reason} for every family with a loss or metric fit that could not be made."""
        return {k: dict(f.skipped) for k, f in self.families.items() if f.skipped}

    @property
    def ci(self) -> dict:
        return {k: f.ci for k, f in self.families.items()}

    def predict(self, compute):
        return {k: f.predict(compute) for k, f in self.families.items()}

    def table6(self) -> pd.DataFrame:
        """One row per family: alpha_P, alpha_D, alpha_L, L_inf with ``_lo``/``_hi`` CI columns."""
        rows = []
        for name, f in self.families.items():
            r = {"family": name}
            iso, ch = f.isoflop, f.chinchilla
            vals = {
                "alpha_P": (iso.alpha_P, iso.ci.get("alpha_P")) if iso else None,
                "alpha_D": (ch.alpha_D, ch.ci.get("alpha_D")) if ch else None,
                "alpha_L": (iso.alpha_L, iso.ci.get("alpha_L")) if iso else None,
                "L_inf": (ch.L_inf, ch.ci.get("L_inf")) if ch else None,
            }
            for k, v in vals.items():
                est, ci = v if v else (math.nan, None)
                lo, hi = ci if ci else (math.nan, math.nan)
                r.update({k: est, f"{k}_lo": lo, f"{k}_hi": hi})
            rows.append(r)
        cols = ["family"] + [f"{k}{s}" for k in ("alpha_P", "alpha_D", "alpha_L", "L_inf") for s in ("", "_lo", "_hi")]
        return pd.DataFrame(rows, columns=cols)

    def table7(self) -> pd.DataFrame:
        """One row per (metric, family): beta, e, e_lo, e_hi, e_at_bound, r2, prediction with its
        prediction interval (pred_lo, pred_hi), actual, delta."""
        rows = []
        for metric in METRICS:
            for name, f in self.families.items():
                b: BoundedFit | None = f.bounded.get(metric)
                if b is None:
                    continue
                lo, hi = b.ci.get("e", (math.nan, math.nan))
                pred = float(b.predict(self.target_compute)) if self.target_compute else math.nan
                plo, phi = (float(v) for v in b.predict_interval(self.target_compute, self.level)) \
                    if self.target_compute else (math.nan, math.nan)
                actual = f.actual.get(metric, math.nan)
                rows.append({
                    "metric": metric, "family": name, "beta": b.beta, "e": b.e, "e_lo": lo, "e_hi": hi,
                    "e_at_bound": b.e_at_bound, "r2": b.r2, "prediction": pred, "pred_lo": plo, "pred_hi": phi,
                    "actual": actual, "delta": actual - pred if np.isfinite(actual) and np.isfinite(pred) else math.nan,
                })
        cols = ["metric", "family", "beta", "e", "e_lo", "e_hi", "e_at_bound", "r2", "prediction", "pred_lo",
                "pred_hi", "actual", "delta"]
        return pd.DataFrame(rows, columns=cols)

    def compare(self, base: str, other: str) -> pd.DataFrame:
        """Within-pair shifts other - base (e.g. ``compare("ar", "ar+concept")``, §8.2.2) of
        alpha_P, alpha_D, alpha_L, L_inf with percentile intervals of the difference of the
        two families' independent bootstrap draws."""
        for k in (base, other):
            if k not in self.families:
                raise ValueError(f"compare: unknown family {k!r}; have {list(self.families)}")
        rows = []
        for name in ("alpha_P", "alpha_D", "alpha_L", "L_inf"):
            est, draws = [], []
            for k in (base, other):
                v, d = _param_draws(self.families[k], name)
                est.append(v)
                draws.append(d)
            diff = est[1] - est[0]
            lo = hi = math.nan
            if draws[0] is not None and draws[1] is not None:
                m = min(len(draws[0]), len(draws[1]))
                lo, hi = percentile_ci(draws[1][:m] - draws[0][:m], self.level) if m else (math.nan, math.nan)
            rows.append({"param": name, base: est[0], other: est[1], "shift": diff, "shift_lo": lo, "shift_hi": hi})
        return pd.DataFrame(rows)

    def to_markdown(self, digits: int = 3) -> str:
        pct = round(100 * self.level)
        out = [f"### Compute-optimal scaling (Table 6 layout; subscripts: {pct}% bootstrap CI offsets)", "",
               "| Family | α_P | α_D | α_L | L_∞ |", "|---|---|---|---|---|"]
        flagged = []
        for r in self.table6().itertuples(index=False):
            cells = [fmt_sub(getattr(r, k), (getattr(r, f"{k}_lo"), getattr(r, f"{k}_hi")), digits)
                     if np.isfinite(getattr(r, k)) else "—" for k in ("alpha_P", "alpha_D", "alpha_L", "L_inf")]
            iso = self.families[r.family].isoflop
            if iso is not None and iso.flagged:  # > 10% degenerate bootstrap replicates
                cells[0] += " †"
                cells[2] += " †"
                flagged.append(f"{r.family} ({100 * iso.degenerate_fraction:.0f}%)")
            out.append(f"| {r.family} | " + " | ".join(cells) + " |")
        if flagged:
            out += ["", "† IsoFLOP intervals flagged: more than 10% of bootstrap replicates had a degenerate slice "
                        "(kept, censored at the slice edge): " + ", ".join(flagged)]
        t7 = self.table7()
        if len(t7):
            out += ["", f"### Interpretability scaling (Table 7 layout; e with {pct}% bootstrap CI offsets)", "",
                    f"| Metric | Family | β | e [CI] | R² | pred [{pct}% PI] | actual | Δ |", "|---|---|---|---|---|---|---|---|"]
            for r in t7.itertuples(index=False):
                f = lambda v: f"{v:.{digits}f}" if np.isfinite(v) else "—"  # noqa: E731
                e = fmt_sub(r.e, (r.e_lo, r.e_hi), digits) + (" (bound)" if r.e_at_bound else "")
                pred = f(r.prediction) + (f" [{f(r.pred_lo)}, {f(r.pred_hi)}]" if np.isfinite(r.pred_lo) else "")
                out.append(f"| {METRIC_LABELS[r.metric]} | {r.family} | {f(r.beta)} | {e} | {f(r.r2)} | "
                           f"{pred} | {f(r.actual)} | {('%+.' + str(digits) + 'f') % r.delta if np.isfinite(r.delta) else '—'} |")
        ext = [(k, f.extrapolation) for k, f in self.families.items() if f.extrapolation is not None]
        if ext:
            out += ["", f"### Loss extrapolation ({pct}% CI of the curve; {pct}% PI of an observed run)", "",
                    "| Family | C | joint [CI] | joint PI | log-linear [CI] | log-linear PI | observed |",
                    "|---|---|---|---|---|---|---|"]
            for k, x in ext:
                obs = f"{x.observed:.3f}" if x.observed is not None else "—"
                out.append(f"| {k} | {x.compute:.3g} | {x.joint:.3f} [{x.joint_ci[0]:.3f}, {x.joint_ci[1]:.3f}] | "
                           f"[{x.joint_pi[0]:.3f}, {x.joint_pi[1]:.3f}] | "
                           f"{x.loglinear:.3f} [{x.loglinear_ci[0]:.3f}, {x.loglinear_ci[1]:.3f}] | "
                           f"[{x.loglinear_pi[0]:.3f}, {x.loglinear_pi[1]:.3f}] | {obs} |")
        fct = forecast_table({k: f.forecast for k, f in self.families.items()})
        if len(fct):
            out += ["", "### Forecast at the target compute (methods by name; the default chosen by backtest)", "",
                    "| " + " | ".join(fct.columns) + " |", "|" + "---|" * len(fct.columns)]
            out += ["| " + " | ".join(map(str, r)) + " |" for r in fct.itertuples(index=False)]
        cmp = self.approaches()
        if cmp:
            ks = ", ".join(f"{k} {c.flops_per_token_per_param:.3g}" for k, c in cmp.items())
            out += ["", f"### Approach 2 (IsoFLOP) vs Approach 3 (joint) at C = {self.target_compute:.3g} "
                        f"({pct}% CI)", "", f"Joint allocation with C = k N D, k read off the runs: {ks}.", "",
                    "| Family | N* IsoFLOP | N* joint | L* IsoFLOP | L* joint | L* difference | disagree |",
                    "|---|---|---|---|---|---|---|"]
            for fam, c in cmp.items():
                t = c.table.set_index("approach")
                d = c.disagreement.iloc[0]
                out.append(f"| {fam} | {t.loc['isoflop', 'N_opt']:.3g} | {t.loc['joint', 'N_opt']:.3g} | "
                           f"{t.loc['isoflop', 'L_opt']:.3f} | {t.loc['joint', 'L_opt']:.3f} | "
                           f"{d['L_diff']:+.3f} [{d['L_diff_lo']:+.3f}, {d['L_diff_hi']:+.3f}] | "
                           f"{'yes' if d['disagree'] else 'no'} |")
        if self.dropped:
            out += ["", "### Fits that could not be made", ""]
            out += [f"- {fam} {fit}: {why}" for fam, d in self.dropped.items() for fit, why in d.items()]
        if self.warnings:
            out += ["", "Warnings:", ""] + [f"- {w}" for w in self.warnings]
        return "\n".join(out) + "\n"

    def approaches(self, compute: float | None = None) -> dict:
        """family -> ``ApproachComparison`` at ``compute`` (default: ``target_compute``) for
        every family with both an IsoFLOP and a joint fit; {} without a compute."""
        C = compute or self.target_compute
        if not C:
            return {}
        out = {}
        for k, f in self.families.items():
            c = f.approaches(C, level=self.level)
            if c is not None:
                out[k] = c
        return out

    def to_dict(self) -> dict:
        return jsonable({
            "approaches": {k: c.to_dict() for k, c in self.approaches().items()},
            "estimator": self.estimator, "annealed": self.annealed, "level": self.level,
            "target_compute": self.target_compute, "warnings": list(self.warnings), "dropped": self.dropped,
            "table6": self.table6().to_dict("records"), "table7": self.table7().to_dict("records"),
            "forecasts": forecast_table({k: f.forecast for k, f in self.families.items()}).to_dict("records"),
            "families": {k: f.to_dict() for k, f in self.families.items()},
        })

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def summary(self) -> str:
        return "\n\n".join(f.summary() for f in self.families.values())


def _param_draws(f: FamilyFit, name: str):
    """(estimate, bootstrap draws or None) of a Table 6 quantity of one family."""
    iso, ch = f.isoflop, f.chinchilla
    if name in ("alpha_P", "alpha_L") and iso is not None:
        pl = iso.power_P if name == "alpha_P" else iso.power_L
        return pl.alpha, None if pl.boot is None else pl.boot[:, 1]
    if name in ("alpha_D", "L_inf") and ch is not None:
        b = ch.boot
        if name == "alpha_D":
            return ch.alpha_D, None if b is None else b[:, 3] / (b[:, 3] + b[:, 4])
        return ch.L_inf, None if b is None else np.exp(b[:, 2])
    return math.nan, None


@dataclass(frozen=True)
class _Options:
    """What ``fit_families`` passes to every family's fits (one bootstrap spec for all)."""

    n_boot: int
    seed: int
    level: float
    window: int | None
    tolerance: float | None
    grid: str
    loss: str
    minimum: str
    joint_options: Mapping
    target_compute: float | None
    method: str | None = None

    def boot(self, groups) -> dict:
        """Bootstrap keywords of one fit: a cluster bootstrap over ``groups`` when given."""
        kw = dict(n_boot=self.n_boot, level=self.level, seed=self.seed)
        return kw if groups is None else dict(kw, bootstrap="cluster", groups=groups)


def _check(results, families, groups, loss, annealed, warnings) -> tuple[pd.DataFrame, list]:
    """The rows to fit (annealed choice applied, groups attached) and the families to fit."""
    if not isinstance(results, pd.DataFrame):
        raise ValueError("fit_families: results must be a pandas DataFrame")
    need = ["family", "slice_flops", "params", "tokens", loss]
    missing = [c for c in need if c not in results.columns]
    if missing:
        raise ValueError(f"fit_families: results table lacks column(s) {missing}; have {list(results.columns)}")
    results = attach_groups(results, groups, "fit_families")
    df = select_rows(results, "annealed", annealed, (True,), "annealed", warnings)
    fams = families or sorted(df["family"].dropna().unique().tolist(), key=str)
    unknown = [f for f in fams if f not in set(df["family"])]
    if unknown:
        raise ValueError(f"fit_families: family {unknown} not in the table; have {sorted(set(df['family']))}")
    return df, fams


def _loss_fits(fam: str, lossy: pd.DataFrame, o: _Options, fw: list[str], skipped: dict):
    """(IsoFlopFit or None, ChinchillaFit or None) of one family's loss rows."""
    iso = ch = None
    iso_rows = slice_rows(lossy.dropna(subset=["slice_flops"]), o.tolerance)
    try:
        iso = fit_isoflop(iso_rows, loss=o.loss, window=o.window, minimum=o.minimum, **o.boot(row_groups(iso_rows)))
    except ValueError as exc:
        emit(fw, f"{fam}: IsoFLOP fit skipped: {exc}")
        skipped["isoflop"] = str(exc)
    try:
        ch = fit_chinchilla(lossy["params"], lossy["tokens"], lossy[o.loss], grid=o.grid,
                            **o.boot(row_groups(lossy)), **dict(o.joint_options))
    except ValueError as exc:
        emit(fw, f"{fam}: joint fit skipped: {exc}")
        skipped["joint"] = str(exc)
    return iso, ch


def _metric_fits(fam: str, sub: pd.DataFrame, o: _Options, fw: list[str], skipped: dict) -> dict:
    """metric -> BoundedFit (Eq. 29) of every metric column with values, against ``flops``."""
    bounded = {}
    ccol = "flops" if "flops" in sub.columns else "slice_flops"
    for metric in METRICS:
        if metric not in sub.columns or sub[metric].notna().sum() == 0:
            continue
        ms = sub.dropna(subset=[metric, ccol])
        try:
            bounded[metric] = fit_bounded(ms[ccol], ms[metric], name=metric, n_boot=o.n_boot, level=o.level,
                                          seed=o.seed)
        except ValueError as exc:
            emit(fw, f"{fam}: {metric} fit skipped: {exc}")
            skipped[metric] = str(exc)
    return bounded


def _fit_family(fam: str, df: pd.DataFrame, estimator, o: _Options, actual: Mapping, warnings: list[str]):
    """Every fit of one family: IsoFLOP, joint, metrics, the extrapolation to the target."""
    fw: list[str] = []
    sub = select_rows(df[df["family"] == fam], "estimator", estimator, ESTIMATOR_PREFERENCE, "estimator", fw)
    est = str(sub["estimator"].iloc[0]) if "estimator" in sub.columns and len(sub) else estimator
    lossy = sub.dropna(subset=["params", "tokens", o.loss])
    if len(lossy) < len(sub):
        emit(fw, f"{fam}: {len(sub) - len(lossy)} row(s) with missing params/tokens/{o.loss} left out of the loss fits")
    skipped: dict = {}
    with about(fam):  # the fits' own warnings name the family
        iso, ch = _loss_fits(fam, lossy, o, fw, skipped)
        bounded = _metric_fits(fam, sub, o, fw, skipped)
    obs = dict(actual.get(fam, {}))
    ext = fc = None
    k = flops_per_token_per_param(lossy, "flops")
    if o.target_compute is not None and iso is not None and ch is not None:
        ext = extrapolate(ch, iso, o.target_compute, observed=obs.get("loss"), level=o.level)
    if o.target_compute is not None and (iso is not None or ch is not None):
        fc = _forecast(fam, lossy, o, k, {"joint": ch, "isoflop-powerlaw": iso}, fw)
    warnings += fw
    return FamilyFit(family=fam, estimator=est, n_rows=len(sub), isoflop=iso, chinchilla=ch, bounded=bounded,
                     extrapolation=ext, actual={k: float(v) for k, v in obs.items()}, warnings=tuple(fw),
                     skipped=skipped, flops_per_token_per_param=k, forecast=fc)


def _forecast(fam: str, lossy: pd.DataFrame, o: _Options, k: float, fits: dict, fw: list[str]):
    """The family's forecast at the target (``forecasting.forecast_family``), reusing its fits."""
    opts = ForecastOptions(loss=o.loss, n_boot=o.n_boot, level=o.level, seed=o.seed, grid=o.grid, window=o.window,
                           tolerance=o.tolerance, k=k)
    try:
        return forecast_family(lossy, o.target_compute, method=o.method, options=opts,
                               fits={m: f for m, f in fits.items() if f is not None})
    except ValueError as exc:
        emit(fw, f"{fam}: forecast skipped: {exc}")
        return None


def fit_families(
    results: pd.DataFrame,
    *,
    estimator: str | None = None,
    annealed: bool | None = None,
    families: list[str] | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
    window: int | None = 5,
    tolerance: float | None = SLICE_TOLERANCE,
    grid: Literal["epoch", "coarse"] = "epoch",
    target_compute: float | None = None,
    actual: Mapping[str, Mapping[str, float]] | None = None,
    loss: str = "loss",
    groups=None,
    joint_options: Mapping | None = None,
    minimum: Literal["parabola", "akima"] = "parabola",
    method: str | None = None,
) -> FamilyFits:
    """Fit every family of a results table (the columns of docs/architecture.md; one row per checkpoint).

    Loss fits use ``slice_flops, params, tokens, loss``: IsoFLOP parabolas on rows whose
    achieved ``flops`` lies within ``tolerance`` of their slice target (App. G: +/-15%), the
    joint fit on all rows. Each metric column present (concept_loss, concept_independence,
    concept_contribution, known_concept_alignment) gets a bounded fit against ``flops``.
    With ``target_compute``, metrics and losses are extrapolated there and compared to
    ``actual[family][metric or "loss"]`` when given. A mixed ``annealed``/``estimator`` column
    with no choice given falls back to annealed rows / the paper's estimator, with a warning.
    ``loss`` names the column the loss fits use (e.g. a bits-per-byte column, so families
    with different tokenizers compare on one scale). Fits that fail are listed in
    ``FamilyFits.dropped``. ``groups`` (one label per row of ``results``, e.g. its ``run_id``
    column) resamples whole runs in the IsoFLOP and joint bootstraps; ``joint_options`` go to
    ``fit_chinchilla`` (e.g. ``{"bound_L_inf": True, "overestimate_penalty": 2.0}``);
    ``minimum="akima"`` reads slice minima off Akima interpolants instead of parabolas.
    With ``target_compute`` each family also gets a ``forecast`` (``forecasting.forecast_family``:
    every method by name, the default chosen by rolling-origin backtest unless ``method`` names
    one, calibrated and bootstrap prediction intervals); ``method`` without ``target_compute`` is
    a ValueError (there is nothing for it to choose).
    """
    if method is not None and target_compute is None:
        raise ValueError(f"fit_families: method={method!r} chooses the forecast method at target_compute; "
                         "give target_compute (CLI: --method needs --target-compute)")
    warnings: list[str] = []
    df, fams = _check(results, families, groups, loss, annealed, warnings)
    o = _Options(n_boot=n_boot, seed=seed, level=level, window=window, tolerance=tolerance, grid=grid, loss=loss,
                 minimum=minimum, joint_options=dict(joint_options or {}), target_compute=target_compute,
                 method=method)
    out = {fam: _fit_family(fam, df, estimator, o, actual or {}, warnings)
           for fam in tqdm(fams, desc="fit families", unit="family", disable=None, leave=False)}
    if all(f.isoflop is None and f.chinchilla is None and not f.bounded for f in out.values()):
        raise ValueError("fit_families: no family could be fitted: " + "; ".join(warnings))
    return FamilyFits(families=out, estimator=estimator, annealed=annealed, level=level,
                      target_compute=target_compute, warnings=tuple(warnings))
