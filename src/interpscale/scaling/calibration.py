"""Calibrated prediction intervals: split conformal on the backtest's errors (docs/forecasting.md,
"Calibrated prediction intervals"; Vovk et al. 2005; Lei et al. 2018).

Scores t_i = |u_i| / a_i of the backtest's log errors u_i = ln(observed / predicted), with a the
log extrapolation distance d(r) = ln(max(r, 2)) (``distance``) or the fit's own bootstrap log
spread s at the target (``studentized``: the backtest refit's s_i, the final fit's s_T). The
log half-width is m = q a_T, q the split-conformal quantile of the scores; the interval is the
larger of it and the curve's bootstrap confidence interval. The target's own error never enters.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ._base import DEFAULT_LEVEL, check_level
from .forecast_methods import ForecastMethod, ForecastOptions
from .reach import rescale

SPREAD_LEVEL = 0.6827  # the bootstrap interval whose log half-width is the spread s (one sd for normal draws)

__all__ = ["SPREAD_LEVEL", "calibrate", "conformal_quantile", "spread"]


def conformal_quantile(scores, level: float = DEFAULT_LEVEL) -> float:
    """The ceil((n + 1) level)-th smallest of the n ``scores`` (Lei et al. 2018, Sec. 2.2); with
    fewer than level / (1 - level) scores that rank exceeds n and the largest is returned (its
    guarantee is only n / (n + 1))."""
    s = np.sort(np.asarray(scores, float))
    k = math.ceil((s.size + 1) * check_level(level) - 1e-9)
    return float(s[min(k, s.size) - 1])


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
