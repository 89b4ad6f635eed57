"""Every fit of each family of a results table (``fit_families``: IsoFLOP, joint, metric and
forecast fits), the paper's Table 6 (loss scaling) and Table 7 (metric scaling) layouts, the
extrapolation to a target run (joint form vs log-linear L*(C), §8.2.2, Figure 24) and Approach 2
(IsoFLOP minima) vs Approach 3 (joint surface) with their disagreement at the target.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Literal, Mapping, NamedTuple

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from interpscale import paper
from interpscale.paper import INTERP_METRICS
from interpscale.results_table import measured_rows

from ._base import (DEFAULT_GRID, DEFAULT_LEVEL, DEFAULT_N_BOOT, FitResult, about, emit, fit_status, fmt_ci, fmt_sub,
                    from_options, jsonable, keep_repeats)
from .bootstrap import percentile_ci
from .bounded import METRICS, fit_bounded
from .forecast import FamilyForecast, FitOptions, forecast_family, forecast_table
from .isoflop import IsoFlopFit, PowerLawFit, fit_isoflop
from .joint import ChinchillaFit, fit_chinchilla, optimal_allocation, optimal_loss
from .tables import (SLICE_TOLERANCE, fit_rows, flops_per_token_per_param, row_groups,
                     slice_rows)
from interpscale.errors import UserError

# ---- extrapolation to a target compute ----

@dataclass(frozen=True)
class Extrapolation(FitResult):
    """Joint-form and log-linear predictions at ``compute``: ``*_ci`` are confidence intervals
    of the curve, ``*_pi`` prediction intervals for an observed run (curve + residual noise)."""

    compute: float
    joint: float
    joint_ci: tuple[float, float]
    loglinear: float
    loglinear_ci: tuple[float, float]
    params: float
    tokens: float
    allocation: str  # "compute-optimal" or "given"
    observed: float | None = None
    joint_pi: tuple[float, float] = (math.nan, math.nan)
    loglinear_pi: tuple[float, float] = (math.nan, math.nan)
    level: float = DEFAULT_LEVEL
    converged: bool = True
    warnings: tuple[str, ...] = ()
    _derived = ("joint_error", "loglinear_error")

    joint_error = property(lambda self: None if self.observed is None else self.observed - self.joint,
                           doc="observed - joint prediction (None without an observation)")
    loglinear_error = property(lambda self: None if self.observed is None else self.observed - self.loglinear)
    ci = property(lambda self: {"joint": self.joint_ci, "loglinear": self.loglinear_ci})
    pi = property(lambda self: {"joint": self.joint_pi, "loglinear": self.loglinear_pi})

    def predict(self) -> dict:
        return {"joint": self.joint, "loglinear": self.loglinear}

    def _lines(self) -> list[str]:
        lines = [f"extrapolation to C = {self.compute:.3g} FLOPs ({self.allocation}: P = {self.params:.3g}, "
                 f"D = {self.tokens:.3g}; {round(100 * self.level)}% confidence | prediction intervals)",
                 f"  joint Chinchilla  {fmt_ci(self.joint, self.joint_ci)}  "
                 f"PI [{self.joint_pi[0]:.3f}, {self.joint_pi[1]:.3f}]",
                 f"  log-linear L*(C)  {fmt_ci(self.loglinear, self.loglinear_ci)}  "
                 f"PI [{self.loglinear_pi[0]:.3f}, {self.loglinear_pi[1]:.3f}]"]
        if self.observed is not None:
            lines.append(f"  observed {self.observed:.3f}: joint error {self.joint_error:+.3f}, "
                         f"log-linear error {self.loglinear_error:+.3f}")
        return lines


def extrapolate(joint: ChinchillaFit, loglinear: IsoFlopFit | PowerLawFit,
                compute: float = paper.STEERLING_8B_COMPUTE, *, observed: float | None = None,
                params: float | None = None, tokens: float | None = None, level: float | None = None,
                flops_per_token_per_param: float = 6.0) -> Extrapolation:
    """Predict the loss at ``compute`` with the joint form (at the given ``params``/``tokens``,
    else at the compute-optimal allocation) and with the log-linear L*(C) power law."""
    if not compute > 0:
        raise UserError(f"compute must be positive, got {compute}")
    if (params is None) != (tokens is None):
        raise ValueError("give both params and tokens, or neither (compute-optimal allocation)")
    level, k, C = level or joint.level, flops_per_token_per_param, np.array([compute])
    pl = loglinear.power_L if isinstance(loglinear, IsoFlopFit) else loglinear
    if params is None:
        P, D = (float(v) for v in joint.optimal_allocation(compute, k))
        j, allocation = float(joint.predict_optimal(compute, k)), "compute-optimal"
        (jlo, jhi), (jpl, jph) = joint.band_optimal(C, level, k), joint.predict_interval_optimal(C, level, k)
    else:
        P, D = float(params), float(tokens)
        j, allocation = float(joint.predict(P, D)), "given"
        (jlo, jhi), (jpl, jph) = joint.band(np.array([P]), np.array([D]), level), \
            joint.predict_interval(np.array([P]), np.array([D]), level)
    llo, lhi = pl.band(C, level)
    lpl, lph = loglinear.predict_interval(C, level)["L_star"] if isinstance(loglinear, IsoFlopFit) else \
        pl.predict_interval(C, level)
    warnings = list(joint.warnings) + list(pl.warnings)
    if math.isfinite(pl.x_range[1]) and compute > 100 * pl.x_range[1]:
        warnings.append(f"extrapolating {compute / pl.x_range[1]:.3g}x beyond the largest fitted compute")
    return Extrapolation(
        compute=float(compute), joint=j, joint_ci=(float(jlo[0]), float(jhi[0])),
        loglinear=float(pl.predict(compute)), loglinear_ci=(float(llo[0]), float(lhi[0])), params=P, tokens=D,
        allocation=allocation, observed=None if observed is None else float(observed),
        joint_pi=(float(jpl[0]), float(jph[0])), loglinear_pi=(float(lpl[0]), float(lph[0])), level=level,
        converged=bool(joint.converged and pl.converged), warnings=tuple(warnings))


# ---- Approach 2 vs Approach 3 ----

@dataclass(frozen=True)
class ApproachComparison:
    """``table``: one row per (compute, approach) with N_opt, D_opt, L_opt and their
    confidence intervals; ``disagreement``: one row per compute with log(N2/N3),
    log(D2/D3), L2 - L3, their intervals and ``disagree`` (interval excludes 0)."""

    table: pd.DataFrame = field(compare=False)
    disagreement: pd.DataFrame = field(compare=False)
    level: float = DEFAULT_LEVEL
    flops_per_token_per_param: float = 6.0

    def to_frame(self) -> pd.DataFrame:
        return self.table.merge(self.disagreement, on="compute", how="left")

    def to_dict(self) -> dict:
        return jsonable({"level": self.level, "flops_per_token_per_param": self.flops_per_token_per_param,
                         "table": self.table.to_dict("records"), "disagreement": self.disagreement.to_dict("records")})

    def summary(self) -> str:
        pct = round(100 * self.level)
        lines = [f"Approach 2 (IsoFLOP) vs Approach 3 (joint) compute-optimal predictions ({pct}% CI; "
                 f"C = {self.flops_per_token_per_param:g} N D)"]
        for C, g in self.table.groupby("compute", sort=True):
            lines.append(f"  C = {C:.3g}")
            lines += [f"    {r.approach:<10} N* {r.N_opt:.3g} [{r.N_lo:.3g}, {r.N_hi:.3g}]   "
                      f"D* {r.D_opt:.3g} [{r.D_lo:.3g}, {r.D_hi:.3g}]   "
                      f"L* {r.L_opt:.4f} [{r.L_lo:.4f}, {r.L_hi:.4f}]" for r in g.itertuples(index=False)]
            d = self.disagreement[self.disagreement.compute == C].iloc[0]
            flag = "  ** the approaches disagree **" if d["disagree"] else ""
            lines.append(f"    N*_2/N*_3 = {math.exp(d['log_N_ratio']):.3g} "
                         f"[{math.exp(d['log_N_ratio_lo']):.3g}, {math.exp(d['log_N_ratio_hi']):.3g}], "
                         f"L*_2 - L*_3 = {d['L_diff']:+.4f} [{d['L_diff_lo']:+.4f}, {d['L_diff_hi']:+.4f}]{flag}")
        return "\n".join(lines)


def compare_approaches(isoflop: IsoFlopFit, joint: ChinchillaFit, compute, *, level: float | None = None,
                       flops_per_token_per_param: float = 6.0) -> ApproachComparison:
    """N*(C), D*(C), L*(C) from each approach at each ``compute`` and their disagreement.

    ``flops_per_token_per_param`` is k in C = k N D for both approaches' token counts
    (6 in the paper's accounting; read it off the data when FLOPs include attention)."""
    C = np.atleast_1d(np.asarray(compute, float))
    if not (C > 0).all():
        raise UserError(f"compute must be positive, got {C.tolist()}")
    lv, k = level or joint.level, float(flops_per_token_per_param)
    # Approach 2: power laws of the slice minima (Eq. 26)
    N2, L2 = isoflop.power_P.predict(C), isoflop.power_L.predict(C)
    (N2lo, N2hi), (L2lo, L2hi) = isoflop.band_P(C, lv), isoflop.band_L(C, lv)
    # Approach 3: closed-form allocation of the joint surface (Hoffmann et al. App. D.2)
    N3, D3 = (np.atleast_1d(v) for v in joint.optimal_allocation(C, k))
    L3 = np.atleast_1d(joint.predict_optimal(C, k))
    L3lo, L3hi = (np.atleast_1d(v) for v in joint.band_optimal(C, lv, k))
    rows, dis = [], []
    bP, bL, bJ = isoflop.power_P.boot, isoflop.power_L.boot, joint.boot
    for i, c in enumerate(C):
        n2 = n3 = l2 = l3 = None
        if bP is not None and len(bP):
            n2, l2 = np.exp(bP[:, 0] + bP[:, 1] * math.log(c)), np.exp(bL[:, 0] + bL[:, 1] * math.log(c))
        if bJ is not None and len(bJ):
            n3 = optimal_allocation(bJ, np.array([c]), k)[0][:, 0]
            l3 = optimal_loss(bJ, np.array([c]), k)[:, 0]
        N3lo, N3hi = percentile_ci(n3, lv) if n3 is not None else (N3[i], N3[i])
        rows.append(dict(compute=c, approach="isoflop", N_opt=N2[i], N_lo=N2lo[i], N_hi=N2hi[i],
                         D_opt=c / (k * N2[i]), D_lo=c / (k * N2hi[i]), D_hi=c / (k * N2lo[i]),
                         L_opt=L2[i], L_lo=L2lo[i], L_hi=L2hi[i]))
        rows.append(dict(compute=c, approach="joint", N_opt=N3[i], N_lo=N3lo, N_hi=N3hi,
                         D_opt=D3[i], D_lo=c / (k * N3hi), D_hi=c / (k * N3lo),
                         L_opt=L3[i], L_lo=L3lo[i], L_hi=L3hi[i]))
        lr, ld = math.log(N2[i] / N3[i]), float(L2[i] - L3[i])
        lr_ci = ld_ci = (math.nan, math.nan)
        if n2 is not None and n3 is not None:  # independent fits: pair the draws as they come
            m = min(len(n2), len(n3))
            with np.errstate(invalid="ignore", divide="ignore"):
                lr_ci = percentile_ci(np.log(n2[:m] / n3[:m]), lv)
            ld_ci = percentile_ci(l2[:m] - l3[:m], lv)
        disagree = all(np.isfinite(lr_ci + ld_ci)) and not (lr_ci[0] <= 0 <= lr_ci[1] and ld_ci[0] <= 0 <= ld_ci[1])
        dis.append(dict(compute=c, log_N_ratio=lr, log_N_ratio_lo=lr_ci[0], log_N_ratio_hi=lr_ci[1],
                        log_D_ratio=-lr, L_diff=ld, L_diff_lo=ld_ci[0], L_diff_hi=ld_ci[1], disagree=disagree))
    return ApproachComparison(table=pd.DataFrame(rows), disagreement=pd.DataFrame(dis), level=lv,
                              flops_per_token_per_param=k)


# ---- FamilyFits: Tables 6 and 7 ----

METRIC_LABELS = {k: m.label for k, m in INTERP_METRICS.items()}
TABLE6 = ("alpha_P", "alpha_D", "alpha_L", "L_inf")  # alpha_P, alpha_L from IsoFLOP; alpha_D, L_inf joint
TABLE7 = ["metric", "family", "beta", "e", "e_lo", "e_hi", "e_at_bound", "r2", "prediction", "pred_lo",
          "pred_hi", "actual", "delta"]


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

    def fit_of(self, name: str):
        """The fit a Table 6 quantity comes from (None when it could not be made)."""
        return self.isoflop if name in ("alpha_P", "alpha_L") else self.chinchilla

    @property
    def converged(self) -> bool:
        fits = (self.isoflop, self.chinchilla, *self.bounded.values())
        return all(f.converged for f in fits if f is not None)

    @property
    def ci(self) -> dict:
        return {k: fit.ci.get(k) for k in ("alpha_P", "alpha_L", "alpha_D", "L_inf")
                if (fit := self.fit_of(k)) is not None}

    def predict(self, compute):
        """Dict of predictions at ``compute``: L_star (log-linear), L_opt (joint), each metric."""
        out = {}
        if self.isoflop is not None:
            out["L_star"] = self.isoflop.power_L.predict(compute)
        if self.chinchilla is not None:
            out["L_opt"] = self.chinchilla.predict_optimal(compute)
        return out | {m: f.predict(compute) for m, f in self.bounded.items()}

    def to_dict(self) -> dict:
        return jsonable({
            "family": self.family, "estimator": self.estimator, "n_rows": self.n_rows,
            "converged": self.converged, "warnings": list(self.warnings), "skipped": self.skipped,
            "isoflop": self.isoflop, "chinchilla": self.chinchilla, "bounded": self.bounded,
            "extrapolation": self.extrapolation, "forecast": self.forecast})

    def summary(self) -> str:
        parts = [f"== {self.family} ({self.n_rows} rows, estimator {self.estimator}) =="]
        fits = (self.isoflop, self.chinchilla, *self.bounded.values(), self.extrapolation, self.forecast)
        parts += [f.summary() for f in fits if f is not None]
        return "\n".join(parts + [f"warning: {w}" for w in self.warnings])


def _param_draws(f: FamilyFit, name: str):
    """(estimate, bootstrap draws or None) of a Table 6 quantity of one family."""
    fit = f.fit_of(name)
    if fit is None:
        return math.nan, None
    if name in ("alpha_P", "alpha_L"):
        pl = fit.power_P if name == "alpha_P" else fit.power_L
        return pl.alpha, None if pl.boot is None else pl.boot[:, 1]
    b = fit.boot
    if name == "alpha_D":
        return fit.alpha_D, None if b is None else b[:, 3] / (b[:, 3] + b[:, 4])
    return fit.L_inf, None if b is None else np.exp(b[:, 2])


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
            for k in TABLE6:
                fit = f.fit_of(k)
                lo, hi = (fit.ci.get(k) if fit is not None else None) or (math.nan, math.nan)
                r.update({k: math.nan if fit is None else getattr(fit, k), f"{k}_lo": lo, f"{k}_hi": hi})
            rows.append(r)
        cols = ["family"] + [f"{k}{s}" for k in TABLE6 for s in ("", "_lo", "_hi")]
        return pd.DataFrame(rows, columns=cols)

    def table7(self) -> pd.DataFrame:
        """One row per (metric, family): beta, e, e_lo, e_hi, e_at_bound, r2, prediction with its
        prediction interval (pred_lo, pred_hi), actual, delta."""
        rows, C = [], self.target_compute
        for metric in METRICS:
            for name, f in self.families.items():
                if (b := f.bounded.get(metric)) is None:
                    continue
                pred = float(b.predict(C)) if C else math.nan
                plo, phi = (float(v) for v in b.predict_interval(C, self.level)) if C else \
                    (math.nan, math.nan)
                actual = f.actual.get(metric, math.nan)
                delta = actual - pred if np.isfinite(actual) and np.isfinite(pred) else math.nan
                rows.append(dict(zip(TABLE7, (metric, name, b.beta, b.e, *b.ci.get("e", (math.nan, math.nan)),
                                              b.e_at_bound, b.r2, pred, plo, phi, actual, delta))))
        return pd.DataFrame(rows, columns=TABLE7)

    def compare(self, base: str, other: str) -> pd.DataFrame:
        """Within-pair shifts other - base (e.g. ``compare("ar", "ar+concept")``, §8.2.2) of
        alpha_P, alpha_D, alpha_L, L_inf with percentile intervals of the difference of the
        two families' independent bootstrap draws."""
        if unknown := [k for k in (base, other) if k not in self.families]:
            raise UserError(f"compare: unknown family {unknown[0]!r}; have {list(self.families)}")
        rows = []
        for name in TABLE6:
            (e0, d0), (e1, d1) = (_param_draws(self.families[k], name) for k in (base, other))
            lo = hi = math.nan
            if d0 is not None and d1 is not None:
                m = min(len(d0), len(d1))
                lo, hi = percentile_ci(d1[:m] - d0[:m], self.level) if m else (math.nan, math.nan)
            rows.append({"param": name, base: e0, other: e1, "shift": e1 - e0, "shift_lo": lo,
                         "shift_hi": hi})
        return pd.DataFrame(rows)

    def to_markdown(self, digits: int = 3) -> str:
        pct = round(100 * self.level)
        out = [f"### Compute-optimal scaling (Table 6 layout; subscripts: {pct}% bootstrap CI offsets)", "",
               "| Family | α_P | α_D | α_L | L_∞ |", "|---|---|---|---|---|"]
        notes = []
        for r in self.table6().itertuples(index=False):
            cells = [fmt_sub(getattr(r, k), (getattr(r, f"{k}_lo"), getattr(r, f"{k}_hi")), digits)
                     if np.isfinite(getattr(r, k)) else "—" for k in TABLE6]
            f = self.families[r.family]
            iso, joint = fit_status(f.isoflop), fit_status(f.chinchilla)
            if f.isoflop is not None and not iso.identified:  # flagged where the fit was made
                cells[0] += " †"
                cells[2] += " †"
                notes.append(f"† {r.family} IsoFLOP fit {iso}" + (
                    " (more than 10% of bootstrap replicates had a degenerate slice; kept, censored at the slice "
                    "edge)" if f.isoflop.flagged else ""))
            if f.chinchilla is not None and not joint.identified:  # no number for what the points do not fix
                cells[1] = cells[3] = "not identified ‡" if joint.state == "flagged" else "not converged ‡"
                notes.append(f"‡ {r.family} joint fit (Eq. 27) {joint}")
            out.append(f"| {r.family} | " + " | ".join(cells) + " |")
        if notes:
            out += [""] + notes
        return "\n".join(out + self._metric_lines(digits, pct) + self._forecast_lines(pct)) + "\n"

    def _metric_lines(self, digits: int, pct: int) -> list[str]:
        """Table 7 rows in markdown (none without metric fits)."""
        t7, out = self.table7(), []
        if len(t7):
            out += ["", f"### Interpretability scaling (Table 7 layout; e with {pct}% bootstrap CI offsets)", "",
                    f"| Metric | Family | β | e [CI] | R² | pred [{pct}% PI] | actual | Δ |", "|---|---|---|---|---|---|---|---|"]
        f = lambda v: f"{v:.{digits}f}" if np.isfinite(v) else "—"  # noqa: E731
        for r in t7.itertuples(index=False):
            e = fmt_sub(r.e, (r.e_lo, r.e_hi), digits) + (" (bound)" if r.e_at_bound else "")
            pred = f(r.prediction) + (f" [{f(r.pred_lo)}, {f(r.pred_hi)}]" if np.isfinite(r.pred_lo) else "")
            delta = ('%+.' + str(digits) + 'f') % r.delta if np.isfinite(r.delta) else '—'
            out.append(f"| {METRIC_LABELS[r.metric]} | {r.family} | {f(r.beta)} | {e} | {f(r.r2)} | "
                       f"{pred} | {f(r.actual)} | {delta} |")
        return out

    def _forecast_lines(self, pct: int) -> list[str]:
        """Extrapolation, forecast, approach and dropped-fit sections in markdown."""
        out = []
        ext = [(k, f.extrapolation) for k, f in self.families.items() if f.extrapolation is not None]
        if ext:
            out += ["", f"### Loss extrapolation ({pct}% CI of the curve; {pct}% PI of an observed run)", "",
                    "| Family | C | joint [CI] | joint PI | log-linear [CI] | log-linear PI | observed |",
                    "|---|---|---|---|---|---|---|"]
        for k, x in ext:
            obs = f"{x.observed:.3f}" if x.observed is not None else "—"
            joint = f"{x.joint:.3f} [{x.joint_ci[0]:.3f}, {x.joint_ci[1]:.3f}] | [{x.joint_pi[0]:.3f}, " \
                    f"{x.joint_pi[1]:.3f}]" if fit_status(self.families[k].chinchilla).identified else \
                    "not identified ‡ | —"
            out.append(f"| {k} | {x.compute:.3g} | {joint} | "
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
            t, d = c.table.set_index("approach"), c.disagreement.iloc[0]
            flag = "" if fit_status(self.families[fam].chinchilla).identified else " (joint not identified ‡)"
            out.append(f"| {fam}{flag} | {t.loc['isoflop', 'N_opt']:.3g} | {t.loc['joint', 'N_opt']:.3g} | "
                       f"{t.loc['isoflop', 'L_opt']:.3f} | {t.loc['joint', 'L_opt']:.3f} | "
                       f"{d['L_diff']:+.3f} [{d['L_diff_lo']:+.3f}, {d['L_diff_hi']:+.3f}] | "
                       f"{'yes' if d['disagree'] else 'no'} |")
        if self.dropped:
            out += ["", "### Fits that could not be made", ""]
            out += [f"- {fam} {fit}: {why}" for fam, d in self.dropped.items() for fit, why in d.items()]
        return out + (["", "Warnings:", ""] + [f"- {w}" for w in self.warnings] if self.warnings else [])

    def approaches(self, compute: float | None = None) -> dict:
        """family -> ``ApproachComparison`` at ``compute`` (default: ``target_compute``) for
        every family with both an IsoFLOP and a joint fit; {} without a compute."""
        C = compute or self.target_compute
        if not C:
            return {}
        out = {k: f.approaches(C, level=self.level) for k, f in self.families.items()}
        return {k: c for k, c in out.items() if c is not None}

    def to_dict(self) -> dict:
        return jsonable({
            "approaches": {k: c.to_dict() for k, c in self.approaches().items()},
            "estimator": self.estimator, "annealed": self.annealed, "level": self.level,
            "target_compute": self.target_compute, "warnings": list(self.warnings), "dropped": self.dropped,
            "table6": self.table6().to_dict("records"), "table7": self.table7().to_dict("records"),
            "forecasts": forecast_table({k: f.forecast for k, f in self.families.items()}).to_dict("records"),
            "families": {k: f.to_dict() for k, f in self.families.items()}})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def summary(self) -> str:
        return "\n\n".join(f.summary() for f in self.families.values())


# ---- fit_families ----

class _Target(NamedTuple):
    """What ``fit_families`` passes to every family beside its ``FitOptions``: the joint-fit
    options and the forecast target (compute and method)."""

    joint_options: Mapping
    target_compute: float | None
    method: str | None


def _fits(fam: str, lossy: pd.DataFrame, sub: pd.DataFrame, o: FitOptions, joint_options: Mapping,
          fw: list[str]):
    """(IsoFlopFit, ChinchillaFit, metric -> BoundedFit of Eq. 29 against ``flops``, skipped) of one
    family: a fit that fails is None (left out of the metrics) and its reason is in ``skipped``."""
    skipped: dict = {}

    def attempt(key: str, what: str, fit):
        try:
            return fit()
        except ValueError as exc:
            emit(fw, f"{fam}: {what} skipped: {exc}", code="skipped")
            skipped[key] = str(exc)
            return None

    iso_rows = slice_rows(lossy.dropna(subset=["slice_flops"]), o.tolerance)
    iso = attempt("isoflop", "IsoFLOP fit", lambda: fit_isoflop(
        iso_rows, loss=o.loss, window=o.window, minimum=o.minimum, **o.boot(row_groups(iso_rows))))
    ch = attempt("joint", "joint fit", lambda: fit_chinchilla(lossy["params"], lossy["tokens"], lossy[o.loss],
                                                              grid=o.grid, **o.boot(row_groups(lossy)),
                                                              **joint_options))
    bounded, ccol = {}, "flops" if "flops" in sub.columns else "slice_flops"
    for metric in METRICS:
        if metric in sub.columns and sub[metric].notna().sum() > 0:
            ms = sub.dropna(subset=[metric, ccol])
            bounded[metric] = attempt(metric, f"{metric} fit",
                                      lambda: fit_bounded(ms[ccol], ms[metric], name=metric, **o.boot()))
    return iso, ch, {m: b for m, b in bounded.items() if b is not None}, skipped


def _fit_family(fam: str, df: pd.DataFrame, estimator, o: FitOptions, t: _Target, actual: Mapping,
                warnings: list[str]):
    """Every fit of one family: IsoFLOP, joint, metrics, the extrapolation to the target."""
    fw: list[str] = []
    sub = df[df["family"] == fam]  # the estimator is chosen per family by ``fit_rows``
    est = str(sub["estimator"].iloc[0]) if "estimator" in sub.columns and len(sub) else estimator
    lossy, left_out = measured_rows(sub, ["params", "tokens", o.loss])  # the one rule for empty cells
    if left_out:
        emit(fw, f"{fam}: {left_out} (of the loss fits)")
    with about(fam):  # the fits' own warnings name the family
        iso, ch, bounded, skipped = _fits(fam, lossy, sub, o, t.joint_options, fw)
    obs = dict(actual.get(fam, {}))
    ext = fc = None
    k = flops_per_token_per_param(lossy, "flops")
    if t.target_compute is not None and iso is not None and ch is not None:
        ext = extrapolate(ch, iso, t.target_compute, observed=obs.get("loss"), level=o.level)
    if t.target_compute is not None and (iso is not None or ch is not None):
        fc = _forecast(fam, lossy, o, t, k, {"joint": ch, "isoflop-powerlaw": iso}, fw)
    warnings += fw
    return FamilyFit(family=fam, estimator=est, n_rows=len(sub), isoflop=iso, chinchilla=ch, bounded=bounded,
                     extrapolation=ext, actual={k: float(v) for k, v in obs.items()}, warnings=tuple(fw),
                     skipped=skipped, flops_per_token_per_param=k, forecast=fc)


def _forecast(fam: str, lossy: pd.DataFrame, o: FitOptions, t: _Target, k: float, fits: dict, fw: list[str]):
    """The family's forecast at the target (``forecast.forecast_family``), reusing its fits."""
    try:
        return forecast_family(lossy, t.target_compute, method=t.method, options=replace(o, k=k),
                               fits={m: f for m, f in fits.items() if f is not None})
    except ValueError as exc:
        emit(fw, f"{fam}: forecast skipped: {exc}", code="skipped")
        return None


def fit_families(results: pd.DataFrame, *, estimator: str | None = None, annealed: bool | None = None,
                 families: list[str] | None = None, n_boot: int = DEFAULT_N_BOOT, seed: int = 0,
                 level: float = DEFAULT_LEVEL, window: int | None = 5,
                 tolerance: float | None = SLICE_TOLERANCE, grid: Literal["epoch", "coarse"] = DEFAULT_GRID,
                 target_compute: float | None = None, actual: Mapping[str, Mapping[str, float]] | None = None,
                 loss: str = "loss", groups=None, joint_options: Mapping | None = None,
                 minimum: Literal["parabola", "akima"] = "parabola", method: str | None = None,
                 predicted: bool = False, options: FitOptions | None = None) -> FamilyFits:
    """Fit every family of a results table (the columns of docs/architecture.md; one row per checkpoint).

    Loss fits use ``slice_flops, params, tokens`` and the ``loss`` column (e.g. bits per byte, one
    scale across tokenizers): IsoFLOP parabolas on rows whose achieved ``flops`` lies within
    ``tolerance`` of their slice target (App. G: +/-15%), the joint fit on all rows. Each metric
    column present (``METRICS``) gets a bounded fit against ``flops``. With ``target_compute``,
    losses and metrics are extrapolated there, compared to ``actual[family][metric or "loss"]``,
    and each family gets a ``forecast`` (``forecast.forecast_family``: methods by name, the
    default chosen by backtest unless ``method`` names one; ``method`` alone is a ValueError).
    A mixed ``annealed``/``estimator`` column with no choice falls back to annealed rows / the
    paper's estimator, with a warning. Failed fits are listed in ``FamilyFits.dropped``.
    ``groups`` (one label per row, e.g. its run id) resamples whole runs in the IsoFLOP and joint
    bootstraps; ``joint_options`` go to ``fit_chinchilla``; ``minimum`` to ``fit_isoflop``.
    Rows whose ``predicted`` column is true (annealed losses predicted, not measured:
    ``scaling.anneal_rows``, docs/anneal.md) are fitted only with ``predicted=True``.
    ``options`` (a ``FitOptions``): the bootstrap, level, seed, grid, window, tolerance, loss and
    minimum of every fit, whole; the loose keywords of those are kept for one release (refused
    beside ``options``).
    """
    if method is not None and target_compute is None:
        raise UserError(f"fit_families: method={method!r} chooses the forecast method at target_compute; "
                        "give target_compute (CLI: --method needs --target-compute)")
    loose = dict(n_boot=n_boot, seed=seed, level=level, window=window, tolerance=tolerance, grid=grid, loss=loss,
                 minimum=minimum)
    from_options(options, loose, fit_families)  # the loose keywords beside options= are refused
    o = options if options is not None else FitOptions(**loose)
    warnings: list[str] = []
    df = fit_rows(results, family=families, estimator=estimator, annealed=annealed, groups=groups,
                  caller="fit_families", warnings=warnings, predicted=predicted,
                  need=["family", "slice_flops", "params", "tokens", o.loss])
    fams = families or sorted(df["family"].dropna().unique().tolist(), key=str)
    t = _Target(dict(joint_options or {}), target_compute, method)
    with keep_repeats():  # fit_rows merged the repeated rows: rows with equal values are distinct runs (seeds)
        out = {fam: _fit_family(fam, df, estimator, o, t, actual or {}, warnings)
               for fam in tqdm(fams, desc="fit families", unit="family", disable=None, leave=False)}
    if all(f.isoflop is None and f.chinchilla is None and not f.bounded for f in out.values()):
        raise UserError("fit_families: no family could be fitted: " + "; ".join(warnings))
    return FamilyFits(families=out, estimator=estimator, annealed=annealed, level=o.level,
                      target_compute=target_compute, warnings=tuple(warnings))
