"""The log-linear trend of a metric against compute, either way (Table 30's form).

The bounded fit m(C) = e ± A·C^-β (Eq. 29) assumes the direction a metric improves in, so a
metric that gets worse with compute comes out flat there. Beside it, the trend is read off the
data with no assumed direction: ordinary least squares of m on log10 C,

    m = a + b · log10 C,   b with its t-interval (n - 2 degrees of freedom),

and the metric *rises*, *falls* or shows *no significant trend* as the interval of b lies above,
below or across 0. A metric with no value at all is *not measured*, never "no trend"::

    t = fit_trend(compute, metric, name="concept_contribution")
    t.slope, t.ci, t.direction, t.sentence()    # "falls with compute: -0.085 per decade [...]"
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from ._base import DEFAULT_LEVEL, FitFields, FitStatus
from interpscale.errors import UserError

RISES, FALLS, FLAT, NOT_MEASURED = "rises", "falls", "no significant trend", "not measured"
TREND_LEVEL = DEFAULT_LEVEL  # the paper's interval level (§8.2.1: 90% intervals)
MIN_POINTS = 3  # a slope and a residual variance need n - 2 >= 1


@dataclass(frozen=True, kw_only=True)
class TrendFit(FitFields):
    """OLS of ``metric`` on log10 ``compute``: ``slope`` (change per decade of compute) with its
    ``ci`` at ``level`` (here the slope's interval, a pair), ``se``, two-sided ``p_value`` of
    slope = 0, ``r2``, ``n`` points; ``resid``: m - fitted line. ``status`` (FitFields) is decided
    by ``fit_trend``: ``identified`` when the slope and its interval are finite (a trend, or its
    absence, is then read off ``direction``), else ``failed``."""

    slope: float
    intercept: float
    se: float
    ci: tuple[float, float]
    p_value: float
    r2: float
    n: int
    metric: str = "metric"
    compute_range: tuple[float, float] = (math.nan, math.nan)
    _x: tuple[float, float, float] = field(default=(math.nan, math.nan, math.nan), repr=False)  # mean, Sxx, s
    _derived = ("direction",)

    @property
    def direction(self) -> str:
        """``rises`` / ``falls`` when the interval of the slope excludes 0, else ``no significant trend``."""
        return RISES if self.ci[0] > 0 else FALLS if self.ci[1] < 0 else FLAT

    def predict(self, compute) -> np.ndarray:
        return self.intercept + self.slope * np.log10(np.asarray(compute, float))

    def band(self, compute, level: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Confidence band of the fitted line (the mean of m at ``compute``), t-based."""
        x = np.log10(np.asarray(compute, float))
        mean, sxx, s = self._x
        t = stats.t.ppf(0.5 + (level or self.level) / 2, self.n - 2)
        half = t * s * np.sqrt(1.0 / self.n + (x - mean) ** 2 / sxx)
        y = self.predict(compute)
        return y - half, y + half

    def sentence(self, what: str | None = None) -> str:
        """One sentence in the data's terms: rises / falls / no significant trend, with the slope."""
        name = what or self.metric
        lo, hi = self.ci
        nums = (f"{self.slope:+.3g} per decade of compute [{lo:+.3g}, {hi:+.3g}] ({self.level:.0%} CI, "
                f"n = {self.n}, R² = {self.r2:.2f})")
        if self.direction == FLAT:
            return f"{name} shows no significant trend with compute: {nums}."
        return f"{name} {self.direction} with compute: {nums}."

    def _lines(self) -> list[str]:
        return [self.sentence()]


def fit_trend(compute, metric, *, level: float = TREND_LEVEL, name: str = "metric", options=None) -> TrendFit:
    """The log-linear trend of ``metric`` against ``compute`` (module doc). Points where either is
    missing are left out; ValueError (naming ``name``) with fewer than ``MIN_POINTS`` points left,
    non-positive compute, or one distinct compute value. ``options`` (a ``FitOptions``): its
    ``level`` (the loose ``level`` is kept for one release)."""
    if options is not None:
        level = options.level
    if not 0 < level < 1:
        raise UserError(f"level must be in (0, 1), got {level}")
    c, m = np.asarray(compute, float).ravel(), np.asarray(metric, float).ravel()
    if c.shape != m.shape:
        raise UserError(f"{name}: {c.size} compute values for {m.size} metric values")
    keep = np.isfinite(c) & np.isfinite(m)
    c, m = c[keep], m[keep]
    if (c <= 0).any():
        raise UserError(f"{name}: compute must be > 0, got {float(c[c <= 0][0]):g}")
    if c.size < MIN_POINTS:
        raise UserError(f"{name}: a trend needs at least {MIN_POINTS} points with a value, got {c.size}")
    x = np.log10(c)
    xm = float(x.mean())
    sxx = float(((x - xm) ** 2).sum())
    if not sxx > 0:
        raise UserError(f"{name}: every point has the same compute ({c[0]:g}); a trend needs two or more")
    slope = float(((x - xm) * (m - m.mean())).sum() / sxx)
    intercept = float(m.mean() - slope * xm)
    resid = m - (intercept + slope * x)
    dof = c.size - 2
    sse, sst = float((resid ** 2).sum()), float(((m - m.mean()) ** 2).sum())
    s = math.sqrt(sse / dof) if dof > 0 else math.nan
    se = s / math.sqrt(sxx)
    t = stats.t.ppf(0.5 + level / 2, dof)
    # an exact line (se = 0): the slope is known (p = 0 unless it is flat)
    p = float(2 * stats.t.sf(abs(slope) / se, dof)) if se > 0 else (1.0 if slope == 0 else 0.0)
    ci = (slope - t * se, slope + t * se)
    ok = all(map(math.isfinite, (slope, *ci)))
    return TrendFit(slope=slope, intercept=intercept, se=se, ci=ci, level=level, p_value=p,
                    r2=1.0 - sse / sst if sst > 0 else math.nan, n=int(c.size), metric=name,
                    compute_range=(float(c.min()), float(c.max())), _x=(xm, sxx, s), resid=resid,
                    status=FitStatus() if ok else FitStatus("failed", "the slope or its interval is not finite"))
