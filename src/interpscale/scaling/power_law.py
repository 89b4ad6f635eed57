"""Power laws y = a * x**alpha by (weighted) OLS on logs (paper Eq. 26), with bootstrap CIs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.stats import norm
from scipy.stats import t as student_t

from ._base import DEFAULT_LEVEL, DEFAULT_N_BOOT, FitResult, FitStatus, check_points, check_weights, fmt_ci
from .bootstrap import Bootstrap, band_from_draws, curve_rows, percentile_ci, resample_noise


@dataclass(frozen=True)
class PowerLawFit(FitResult):
    """y = a * x**alpha fitted on (log x, log y). ``ci``: ``a``/``alpha``/``log_a`` intervals at
    ``level``; ``boot``: the bootstrap draws (n_boot, 2) of (log_a, alpha) behind ``band``."""

    a: float
    alpha: float
    r2: float
    n: int
    ci: dict = field(default_factory=dict)
    level: float = DEFAULT_LEVEL
    converged: bool = True
    warnings: tuple[str, ...] = ()
    x_range: tuple[float, float] = (float("nan"), float("nan"))
    status: FitStatus = FitStatus()  # flagged through exactly 2 points
    boot: np.ndarray | None = field(default=None, repr=False, compare=False)
    resid: np.ndarray | None = field(default=None, repr=False, compare=False)  # log y - fitted

    @property
    def log_a(self) -> float:
        return float(np.log(self.a))

    def predict(self, x) -> np.ndarray:
        return self.a * np.asarray(x, dtype=float) ** self.alpha

    def band(self, x, level: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Pointwise bootstrap percentile band (lo, hi) of the fitted curve at ``x``."""
        lx = np.atleast_1d(np.log(np.asarray(x, dtype=float)))
        return self._band(lambda rows: np.exp(rows[:, :1] + rows[:, 1:2] * lx[None, :]), np.shape(x), level,
                          lambda: self.predict(x))

    def predict_interval(self, x, level: float | None = None, *, noise_sd: float | None = None, seed: int = 0,
                         df: float | None = None):
        """Prediction interval (lo, hi) of a new observation at ``x``: bootstrap lines plus log-scale
        noise, Gaussian with ``noise_sd`` or the fit's resampled residuals. ``df``: degrees of
        freedom behind the noise estimate; the spread is widened by t_df / z at the level (the
        bootstrap alone ignores that the noise scale is itself estimated)."""
        lx = np.atleast_1d(np.log(np.asarray(x, dtype=float)))
        boot = curve_rows(self.boot, [self.log_a, self.alpha])
        curve = boot[:, :1] + boot[:, 1:2] * lx[None, :]
        rng = np.random.default_rng(seed)
        if noise_sd is not None:
            noise = rng.normal(0.0, float(noise_sd), curve.shape)
        else:
            noise = resample_noise(rng, self.resid, curve.shape, 2)
        dev = curve + noise - (self.log_a + self.alpha * lx)[None, :]
        lv = level or self.level
        if df is not None and df > 0:
            q = 0.5 + lv / 2
            dev = dev * (student_t.ppf(q, df) / norm.ppf(q))
        lo, hi = band_from_draws(np.exp((self.log_a + self.alpha * lx)[None, :] + dev), lv)
        return lo.reshape(np.shape(x)), hi.reshape(np.shape(x))

    @property
    def resid_sd(self) -> float:
        """Residual standard deviation on the log scale, sqrt(SSR / (n - 2)) (nan for n <= 2)."""
        if self.resid is None or self.n <= 2:
            return float("nan")
        return float(np.sqrt((self.resid**2).sum() / (self.n - 2)))

    def _lines(self) -> list[str]:
        lo, hi = self.ci.get("a", (np.nan, np.nan))
        pct = round(100 * self.level)
        return [f"power law y = a * x^alpha   (n = {self.n}, R^2 = {self.r2:.4f}, {pct}% CI)",
                f"  alpha  {fmt_ci(self.alpha, self.ci.get('alpha'), 4)}",
                f"  a      {self.a:.4g}  [{lo:.4g}, {hi:.4g}]"]


def attach_draws(fit: PowerLawFit, log_a: np.ndarray, alpha: np.ndarray, *, missing: str = "drop") -> PowerLawFit:
    """``fit`` with bootstrap draws of (log a, alpha) and their percentile intervals
    (``missing``: how non-finite draws count, see ``percentile_ci``)."""
    lo_hi = percentile_ci(log_a, fit.level, missing=missing)
    ci = {"alpha": percentile_ci(alpha, fit.level, missing=missing), "log_a": lo_hi,
          "a": tuple(float(np.exp(v)) for v in lo_hi)}
    return dataclasses.replace(fit, boot=np.column_stack([log_a, alpha]), ci=ci)


def ols_lines(x: np.ndarray, Y: np.ndarray, W: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Batched weighted OLS of each row of Y (S, n) on x (n,): returns (intercepts, slopes)."""
    if W is None:
        W = np.ones_like(Y)
    sw = W.sum(axis=1)
    mx = (W * x).sum(axis=1) / sw
    my = (W * Y).sum(axis=1) / sw
    dx = x[None, :] - mx[:, None]
    sxx = (W * dx * dx).sum(axis=1)
    sxy = (W * dx * (Y - my[:, None])).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        slope = sxy / sxx
    return my - slope * mx, slope


def fit_power_law(
    x,
    y,
    *,
    weights=None,
    n_boot: int = DEFAULT_N_BOOT,
    bootstrap: Literal["residual", "pairs", "cluster"] = "residual",
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
    groups=None,
) -> PowerLawFit:
    """Fit y = a x^alpha (x, y > 0) by OLS of log y on log x (Eq. 26), optionally weighted;
    intervals from ``bootstrap.Bootstrap`` on the log-scale fit (``n_boot=0`` skips it)."""
    x, y = check_points({"x": x, "y": y}, 2, "fit_power_law")
    n = x.size
    spec = Bootstrap(n_boot=n_boot, kind=bootstrap, level=level, seed=seed, groups=groups).checked(
        n, "fit_power_law")
    w = check_weights(weights, n)
    lx, ly = np.log(x), np.log(y)
    if np.ptp(lx) == 0:
        raise ValueError("x: all values are equal; a power law needs at least two distinct x")
    (b0,), (b1,) = ols_lines(lx, ly[None, :], None if w is None else w[None, :])
    fitted = b0 + b1 * lx
    resid = ly - fitted
    ww = np.ones(n) if w is None else w
    sst = float((ww * (ly - np.average(ly, weights=ww)) ** 2).sum())
    r2 = 1.0 - float((ww * resid**2).sum()) / sst if sst > 0 else 1.0
    exact = "only 2 points: the fit is exact and bootstrap intervals have zero width" if n <= 2 else ""
    fit = PowerLawFit(a=float(np.exp(b0)), alpha=float(b1), r2=float(r2), n=n, level=spec.level,
                      x_range=(float(x.min()), float(x.max())), resid=resid, status=FitStatus.decide(True, [exact]))
    if spec.n_boot <= 0:
        return fit
    Y, WB = spec.replicates(ly, fitted, 2, weights=w)
    if Y.ndim == 1:  # pairs / cluster: the observed logs under (S, n) multiplicities
        Y = np.broadcast_to(Y, WB.shape)
    elif WB is not None:
        WB = np.broadcast_to(WB, Y.shape)
    warnings = (exact,) if exact else ()
    return dataclasses.replace(attach_draws(fit, *ols_lines(lx, Y, WB)), warnings=warnings)
