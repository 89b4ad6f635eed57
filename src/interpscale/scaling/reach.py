"""Intervals far beyond the sweep: how forecast log errors grow with the extrapolation distance,
and the widening it implies beyond the largest ratio a backtest can test (docs/reach.md states the
relation, its data and the measurements; issue 36). With d(r) = ln(max(r, 2)), the log errors u
and the fits' bootstrap log spreads s have one common slope each, one intercept per series g:

    ln |u| = a_g + gamma ln d + e        ln s = b_g + sigma ln d + e'

For a target beyond the largest tested ratio with delta > 0 (gamma - sigma for the studentized
rule, gamma - 1 for the distance rule) every calibration scale is multiplied by d^delta before the
conformal quantile: a_i -> a_i d(r_i)^delta, a_T -> a_T d(r_T)^delta. ``PUBLIC`` is the relation
fitted on all three public studies; ``using(relation)`` sets another one (``None``: no widening).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ._base import DEFAULT_LEVEL, check_level
from interpscale.errors import UserError

__all__ = ["ErrorGrowth", "PUBLIC", "active", "conformal_quantile", "distance", "fit_error_growth",
           "leave_one_study_out", "own_sigma", "rescale", "using"]

RULES = ("studentized", "distance")


def distance(ratio) -> np.ndarray:
    """d(r) = ln(max(r, 2)): the log extrapolation distance (a target inside the data counts as 2x)."""
    return np.log(np.maximum(np.asarray(ratio, float), 2.0))


@dataclass(frozen=True)
class ErrorGrowth:
    """The error-growth relation: common slopes of ln |u| (``gamma``) and ln s (``sigma``) on
    ln d(r), with cluster-robust standard errors (clusters: the series), fitted on ``n`` forecasts
    of ``series`` series from ``studies``; ``max_ratio``: the largest ratio in its data."""

    gamma: float
    gamma_se: float
    sigma: float
    sigma_se: float
    delta_se: float  # standard error of gamma - sigma (the studentized scores' slope)
    n: int
    series: int
    studies: tuple[str, ...]
    max_ratio: float
    own_spread: bool = False  # studentized: sigma from the backtest's own spreads (``own_sigma``), gamma from here

    def slope(self, rule: str = "studentized") -> float:
        """delta: how the rule's scores grow with ln d (studentized: gamma - sigma; distance: gamma - 1)."""
        if rule not in RULES:
            raise UserError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")
        return self.gamma - self.sigma if rule == "studentized" else self.gamma - 1.0

    def rescale(self, a, a_t: float, ratio: float, ratios, rule: str = "studentized"):
        """(a_i d(r_i)^delta, a_T d(r_T)^delta) for a target beyond the largest tested ratio with
        delta > 0; else (a, a_T) unchanged. ``ratios``: the r_i of the scales a_i."""
        a, r = np.asarray(a, float), np.asarray(ratios, float)
        delta = self.slope(rule)
        if rule == "studentized" and self.own_spread and math.isfinite(sigma := own_sigma(a, r)):
            delta = self.gamma - min(max(sigma, 0.0), self.gamma)  # 0 <= delta <= gamma
        ok = r[np.isfinite(r) & (r > 0)]
        if not (math.isfinite(delta) and delta > 0 and ok.size and math.isfinite(ratio) and ratio > ok.max()):
            return a, a_t
        return a * distance(r) ** delta, a_t * float(distance(ratio)) ** delta

    def widening(self, ratio: float, ratios, rule: str = "studentized", level: float = DEFAULT_LEVEL,
                 scores=None) -> float:
        """m(with the relation) / m(without) for a target at ``ratio``: the factor its log half-width
        grows by, for the given ``scores`` t_i (default: all equal) at ``ratios``."""
        t = np.ones(len(ratios)) if scores is None else np.asarray(scores, float)
        a, a_t = self.rescale(1.0 / t, 1.0, ratio, ratios, rule)  # |u_i| = 1, a_i = 1 / t_i, a_T = 1
        before, after = conformal_quantile(t, level), conformal_quantile(1.0 / a, level) * a_t
        return float(after / before)

    def to_dict(self) -> dict:
        return {"gamma": self.gamma, "gamma_se": self.gamma_se, "sigma": self.sigma, "sigma_se": self.sigma_se,
                "delta_studentized": self.slope("studentized"), "delta_se": self.delta_se,
                "delta_distance": self.slope("distance"), "n": self.n, "series": self.series,
                "studies": list(self.studies), "max_ratio": self.max_ratio}


def own_sigma(spreads, ratios) -> float:
    """The slope of ln s_i on ln d(r_i) over one backtest's forecasts (nan when they span one distance)."""
    s, r = np.asarray(spreads, float), np.asarray(ratios, float)
    ok = np.isfinite(s) & (s > 0) & np.isfinite(r) & (r > 0)
    x, y = np.log(distance(r[ok])), np.log(s[ok])
    if x.size < 3 or np.ptp(x) <= 0:
        return math.nan
    xt = x - x.mean()
    return float(xt @ (y - y.mean()) / (xt @ xt))


def _slope(x: np.ndarray, y: np.ndarray, groups: np.ndarray) -> tuple[float, float]:
    """Common slope of y on x with an intercept per group, and its cluster-robust standard error."""
    # minus the series means (the fixed-effects transform: only growth within a series counts)
    xt, yt = (v - pd.Series(v).groupby(groups).transform("mean").to_numpy() for v in (x, y))
    sxx = float(xt @ xt)
    if sxx <= 0:
        return math.nan, math.nan
    b = float(xt @ yt) / sxx
    score = pd.Series(xt * (yt - b * xt)).groupby(groups).sum().to_numpy()
    g = len(score)
    adj = g / (g - 1) if g > 1 else math.nan  # small-cluster correction
    return b, math.sqrt(adj * float(score @ score)) / sxx


def fit_error_growth(rows: pd.DataFrame, *, series: str = "series", study: str = "study") -> ErrorGrowth:
    """The relation from forecasts ``rows`` (columns ``ratio``, ``log_error`` u, ``spread`` s, the
    ``series`` and ``study`` they belong to): rows with u != 0 and s > 0, finite; series of one
    distance only carry no slope. Raises ValueError when no series spans two distances."""
    need = {"ratio", "log_error", "spread", series, study}
    if missing := need - set(rows.columns):
        raise UserError(f"error-growth rows need columns {sorted(need)}; missing {sorted(missing)}")
    r = rows[np.isfinite(rows["log_error"]) & (rows["log_error"] != 0) & np.isfinite(rows["spread"])
             & (rows["spread"] > 0) & np.isfinite(rows["ratio"]) & (rows["ratio"] > 0)]
    x = np.log(distance(r["ratio"]))
    g = r[series].astype(str).to_numpy()
    spans = pd.Series(x).groupby(g).transform(lambda v: v.max() > v.min()).to_numpy(bool)
    if not spans.any():
        raise UserError("no forecast series spans two extrapolation distances: no growth to measure")
    x, g, r = x[spans], g[spans], r[spans]
    lu, ls = np.log(np.abs(r["log_error"].to_numpy(float))), np.log(r["spread"].to_numpy(float))
    gamma, gamma_se = _slope(x, lu, g)
    sigma, sigma_se = _slope(x, ls, g)
    _, delta_se = _slope(x, lu - ls, g)
    return ErrorGrowth(gamma, gamma_se, sigma, sigma_se, delta_se, int(len(r)), int(len(set(g))),
                       tuple(sorted(set(r[study].astype(str)))), float(r["ratio"].max()))


def leave_one_study_out(rows: pd.DataFrame, **kw) -> dict[str, ErrorGrowth]:
    """{study: the relation fitted on every other study's rows}."""
    study = rows[kw.get("study", "study")].astype(str)
    return {s: fit_error_growth(rows[study != s], **kw) for s in sorted(set(study))}


# The relation fitted on the three public studies of tests/data: the joint method's (Eq. 27) 1876
# scored backtest forecasts and held-out targets in 34 series (benchmarks/forecast_coverage.py
# --n-boot 200 --errors, the rows in tests/data/scaling_public/reach_errors.csv; docs/reach.md):
# delta = 0.087 for the studentized scores, gamma - 1 = -0.37 for the distance rule's (no widening).
# own_spread: the studentized rule takes sigma from the backtest's own spreads (the spread's growth
# is the method's: 0.54 for the joint fit, 0.29 for the published laws), gamma = 0.63 from here.
# tests/scaling/test_reach.py refits it from those rows.
PUBLIC = ErrorGrowth(gamma=0.6297, gamma_se=0.07941, sigma=0.5427, sigma_se=0.04706, delta_se=0.04882,
                     n=1876, series=34, studies=("OLMo ladder", "datablations", "over-training"), max_ratio=217.7,
                     own_spread=True)

_ACTIVE: ContextVar[ErrorGrowth | None] = ContextVar("error_growth", default=PUBLIC)


def active() -> ErrorGrowth | None:
    """The relation calibrated intervals use now (``PUBLIC`` unless ``using`` set another)."""
    return _ACTIVE.get()


@contextmanager
def using(relation: ErrorGrowth | None):
    """Calibrate with ``relation`` inside the block (``None``: no widening beyond the tested ratios)."""
    token = _ACTIVE.set(relation)
    try:
        yield relation
    finally:
        _ACTIVE.reset(token)


def rescale(a, a_t: float, ratio: float, ratios, rule: str):
    """The calibration hook: the scales (a_i, a_T) of a target at ``ratio`` whose backtest scored
    forecasts at ``ratios``, rescaled by the active relation (``ErrorGrowth.rescale``); unchanged
    when none is active."""
    rel = active()
    return (np.asarray(a, float), a_t) if rel is None else rel.rescale(a, a_t, ratio, ratios, rule)


def conformal_quantile(scores, level: float = DEFAULT_LEVEL) -> float:
    """The ceil((n + 1) level)-th smallest of the n ``scores`` (Lei et al. 2018, Sec. 2.2); with
    fewer than level / (1 - level) scores that rank exceeds n and the largest is returned (its
    guarantee is only n / (n + 1))."""
    s = np.sort(np.asarray(scores, float))
    k = math.ceil((s.size + 1) * check_level(level) - 1e-9)
    return float(s[min(k, s.size) - 1])
