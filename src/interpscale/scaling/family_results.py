"""What ``fit_families`` returns: every fit of each family, and the paper's Table 6 (loss scaling)
and Table 7 (metric scaling) layouts, the within-pair shifts and the markdown report tables."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from interpscale.paper import INTERP_METRICS

from ._base import DEFAULT_LEVEL, fit_status, fmt_sub, jsonable
from .approaches import compare_approaches
from .bootstrap import percentile_ci
from .bounded import METRICS
from .chinchilla import ChinchillaFit
from .extrapolate import Extrapolation
from .forecasting import FamilyForecast, forecast_table
from .isoflop import IsoFlopFit

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
        fits = {k: self.fit_of(k) for k in ("alpha_P", "alpha_L", "alpha_D", "L_inf")}
        return {k: fit.ci.get(k) for k, fit in fits.items() if fit is not None}

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
            "isoflop": self.isoflop, "chinchilla": self.chinchilla,
            "bounded": self.bounded, "extrapolation": self.extrapolation, "forecast": self.forecast,
        })

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
                b = f.bounded.get(metric)
                if b is None:
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
        for k in (base, other):
            if k not in self.families:
                raise ValueError(f"compare: unknown family {k!r}; have {list(self.families)}")
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
            "families": {k: f.to_dict() for k, f in self.families.items()},
        })

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def summary(self) -> str:
        return "\n\n".join(f.summary() for f in self.families.values())
