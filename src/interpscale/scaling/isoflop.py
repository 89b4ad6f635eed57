"""IsoFLOP analysis (paper Eqs. 25-26): power laws y = a x^alpha by (weighted) OLS on logs, each
slice's minimum, and the IsoFLOP fit with its bootstrap and status.

Each slice's parabola L = a (ln P - ln P*)^2 + L* is fitted (least squares: the vertex of the exact
quadratic, ``engine.wls``) to the ``window`` points (default 5) centred on its minimum-loss model,
as whole-slice parabolas are biased when sizes span far from the optimum; ``minimum="akima"``
reads the minimum off an Akima interpolant instead (Porian et al. 2024). Bootstrap replicates are
never dropped: a replicate whose slice degenerates (< 3 distinct sizes, non-convex, vertex
outside the sizes) takes its window's minimum (censored at an edge), so it lands in the tails
rather than vanishing from them; above 10% such replicates the intervals are flagged.
"""

from __future__ import annotations

import dataclasses
import math
import warnings as _warnings
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd
from scipy.interpolate import Akima1DInterpolator
from scipy.stats import norm, t as student_t

from interpscale.errors import UserError
from interpscale.results_table import merge_repeats, repeats_message

from ._base import (DEFAULT_LEVEL, DEFAULT_N_BOOT, FitFields, FitStatus, as_array, check_points, check_weights, emit,
                    fields_dict, fmt_ci, from_options, jsonable)
from .bootstrap import Bootstrap, pairs_weights, percentile_ci, resample_noise
from .engine import wls

# ---- power laws (Eq. 26) ----

@dataclass(frozen=True)
class PowerLawFit(FitFields):
    """y = a * x**alpha fitted on (log x, log y). ``ci``: ``a``/``alpha``/``log_a`` intervals at
    ``level``; ``boot``: the bootstrap draws (n_boot, 2) of (log_a, alpha) behind ``band``; ``resid``:
    log y - fitted; ``status`` flagged through exactly 2 points."""

    a: float
    alpha: float
    r2: float
    n: int
    x_range: tuple[float, float] = (float("nan"), float("nan"))

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
        q = 0.5 + (level or self.level) / 2
        return self._interval(lambda rows: rows[:, :1] + rows[:, 1:2] * lx[None, :], [self.log_a, self.alpha],
                              np.shape(x), level, seed=seed, n_params=2, back=np.exp, noise_sd=noise_sd,
                              widen=student_t.ppf(q, df) / norm.ppf(q) if df is not None and df > 0 else 1.0)

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


def ols_lines(x: np.ndarray, Y, W=None) -> np.ndarray:
    """(intercepts, slopes) of the weighted OLS lines of Y (..., n) on x (n,) (``engine.wls``)."""
    return np.moveaxis(wls(np.column_stack([np.ones_like(x), x]), Y, W)[0], -1, 0)


def fit_power_law(x, y, *, weights=None, n_boot: int = DEFAULT_N_BOOT,
                  bootstrap: Literal["residual", "pairs", "cluster"] = "residual",
                  level: float = DEFAULT_LEVEL, seed: int = 0, groups=None, options=None) -> PowerLawFit:
    """Fit y = a x^alpha (x, y > 0) by OLS of log y on log x (Eq. 26), optionally weighted;
    intervals from ``bootstrap.Bootstrap`` on the log-scale fit (``n_boot=0`` skips it)."""
    n_boot, level, seed = from_options(options, dict(n_boot=n_boot, level=level, seed=seed), fit_power_law).values()
    x, y = check_points({"x": x, "y": y}, 2, "fit_power_law")
    n = x.size
    spec = Bootstrap(n_boot=n_boot, kind=bootstrap, level=level, seed=seed, groups=groups).checked(
        n, "fit_power_law")
    w = check_weights(weights, n)
    lx, ly = np.log(x), np.log(y)
    if np.ptp(lx) == 0:
        raise UserError("x: all values are equal; a power law needs at least two distinct x")
    b0, b1 = ols_lines(lx, ly, w)
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
    Y, WB = spec.replicates(ly, fitted, 2, weights=w)  # pairs / cluster: the observed logs, (S, n) weights
    warnings = (exact,) if exact else ()
    return dataclasses.replace(attach_draws(fit, *ols_lines(lx, Y, WB)), warnings=warnings)


# ---- one slice: its window, minimum and replicate optima (Eq. 25) ----

_AKIMA_GRID = 801
AKIMA_MERGE = 0.02  # sizes closer than 2% in log P are one size to the interpolant


def _window(y: np.ndarray, k: int | None) -> slice:
    n = len(y)
    if k is None or k >= n:
        return slice(0, n)
    i = int(np.argmin(y))
    start = min(max(i - k // 2, 0), n - k)
    return slice(start, start + k)


def _vertex(c0, c1, c2, xm):
    """Vertex of c0 + c1 (x - xm) + c2 (x - xm)^2 -> (x*, L*)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        xs = xm - c1 / (2 * c2)
        Ls = c0 - c1 * c1 / (4 * c2)
    return xs, Ls


def _quadratic(x: np.ndarray):
    """The design (1, x - xm, (x - xm)^2) of a slice's parabola about its mean log size xm, and xm."""
    xm = float(x.mean())
    return np.column_stack([np.ones_like(x), x - xm, (x - xm) ** 2]), xm


def _size_groups(x: np.ndarray, tol: float = AKIMA_MERGE) -> np.ndarray:
    """Group ids of sorted log sizes: a size within ``tol`` of the previous one joins its group."""
    return np.concatenate([[0], np.cumsum(np.diff(x) > tol)]).astype(int)


def _merge_close(x: np.ndarray, Y: np.ndarray, tol: float = AKIMA_MERGE):
    """Average the columns of Y (S, k) whose sorted x lie within ``tol`` of the previous one:
    an interpolant through two nearly equal sizes with different losses has a near-vertical
    secant and overshoots wildly (seen on the Epoch data)."""
    grp = _size_groups(x, tol)
    if grp[-1] == len(x) - 1:
        return x, Y
    M = np.eye(grp[-1] + 1)[grp]  # (k, g)
    M = M / M.sum(axis=0, keepdims=True)
    return x @ M, Y @ M


def akima_minimum(x: np.ndarray, Y: np.ndarray):
    """Minimum (x*, L*, interior), each (S,), of the Akima interpolant of each row of Y (S, k) over
    the range of x: a dense grid, refined by a 3-point parabola; sizes within 2% (in log P) averaged
    first."""
    x, Y = _merge_close(np.asarray(x, float), np.atleast_2d(np.asarray(Y, float)))
    if len(x) < 2:  # every size merged into one: no shape to read a minimum from
        return np.full(len(Y), x[0]), Y[:, 0].copy(), np.zeros(len(Y), bool)
    g = np.linspace(float(x.min()), float(x.max()), _AKIMA_GRID)
    h = g[1] - g[0]
    xs, Ls, inner = np.empty(len(Y)), np.empty(len(Y)), np.empty(len(Y), bool)
    for i in range(0, len(Y), 2000):  # (grid, block) temporaries stay small
        V = Akima1DInterpolator(x, Y[i : i + 2000].T)(g)  # (G, s)
        k = np.argmin(V, axis=0)
        cols = np.arange(V.shape[1])
        edge = (k == 0) | (k == len(g) - 1)
        kk = np.clip(k, 1, len(g) - 2)
        f0, f1, f2 = V[kk - 1, cols], V[kk, cols], V[kk + 1, cols]
        den = f0 - 2 * f1 + f2
        with np.errstate(divide="ignore", invalid="ignore"):
            off = np.where(~edge & (den > 0), 0.5 * (f0 - f2) / den, 0.0)
        off = np.clip(off, -1.0, 1.0)
        xs[i : i + 2000] = np.where(edge, g[k], g[kk] + off * h)
        Ls[i : i + 2000] = np.where(edge, V[k, cols], f1 - 0.25 * (f0 - f2) * off)
        inner[i : i + 2000] = ~edge
    return xs, Ls, inner


def _censored_parabola_min(Cf: np.ndarray, xm: float, lo: float, hi: float, w_lo: float, w_hi: float):
    """(x*, L*, censored) of each replicate parabola (rows of Cf: c0, c1, c2 about xm): its vertex
    when convex and inside the slice's sizes (lo, hi); otherwise the lower end of the sizes
    [w_lo, w_hi] it was fitted on (censored: not extrapolated past its data)."""
    xs, Ls = _vertex(Cf[:, 0], Cf[:, 1], Cf[:, 2], xm)
    inside = (Cf[:, 2] > 0) & (xs > lo) & (xs < hi)
    q = lambda t: Cf[:, 0] + Cf[:, 1] * (t - xm) + Cf[:, 2] * (t - xm) ** 2  # noqa: E731
    with np.errstate(invalid="ignore"):  # a cluster replicate may draw no size of a slice: nan, missing
        f_lo, f_hi = q(w_lo), q(w_hi)
    x_e = np.where(f_lo <= f_hi, w_lo, w_hi)
    L_e = np.minimum(f_lo, f_hi)
    return np.where(inside, xs, x_e), np.where(inside, Ls, L_e), ~inside


def _discrete_min(x: np.ndarray, y: np.ndarray, Wt: np.ndarray):
    """Per replicate: the size with the lowest weighted-mean loss among the sizes drawn."""
    ux, inv = np.unique(x, return_inverse=True)
    onehot = np.eye(len(ux))[inv]  # (k, u)
    cnt = Wt @ onehot
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(cnt > 0, (Wt * y[None, :]) @ onehot / cnt, np.inf)
    j = np.argmin(mean, axis=1)
    return ux[j], mean[np.arange(len(j)), j]


def slice_optimum(x: np.ndarray, y: np.ndarray, window: int | None, minimum: str):
    """One slice (x: sorted log sizes, y: losses) as ``fit_isoflop`` reads it: the row fields, the
    window, and (a, x*, L*, fitted window losses) when a convex optimum exists, else None."""
    w = _window(y, window)
    row = dict(n_window=int(w.stop - w.start))
    if row["n_window"] < 3 or np.unique(x[w]).size < 3:
        row.update(P_star=math.nan, L_star=math.nan, curvature=math.nan, converged=False, convex=False,
                   interior=False, reason="fewer than 3 distinct sizes")
        return row, w, None
    X, xm = _quadratic(x[w])
    c = wls(X, y[w])[0]  # Eq. 25 is the vertex form of a quadratic: its least-squares fit is the quadratic's
    a, convex = float(c[2]), bool(c[2] > 0)  # a parabola that is not convex did not converge to a minimum
    xs, Ls = (float(v) for v in _vertex(*c, xm)) if convex else (math.nan, math.nan)
    interior = bool(convex and x.min() < xs < x.max())
    if minimum == "akima":  # the interpolant always has a minimum; it must be interior
        xa, La, inner = akima_minimum(x[w], y[w][None, :])
        xs, Ls, convex = float(xa[0]), float(La[0]), True
        interior = bool(inner[0]) and x.min() < xs < x.max()
    flags = (("not converged", not convex), ("non-convex", not convex),
             ("minimum at edge", convex and not interior))
    row.update(P_star=math.exp(xs) if convex else math.nan, L_star=Ls, curvature=a, converged=convex,
               convex=convex, interior=interior, reason="; ".join(r for r, bad in flags if bad))
    return row, w, ((a, xs, Ls, X @ c) if convex else None)


def slice_minimum(params, loss, *, window: int | None = 5, minimum: str = "parabola") -> dict:
    """The optimum of one IsoFLOP slice as ``fit_isoflop`` finds it: dict with P_star, L_star,
    interior, reason ("" when usable). Used to score held-out slices in backtests."""
    P = as_array(params, "params", positive=True)
    L = as_array(loss, "loss", positive=True)
    order = np.argsort(P)
    row, _, _ = slice_optimum(np.log(P[order]), L[order], window, minimum)
    return {k: row[k] for k in ("P_star", "L_star", "interior", "reason")}


def replicate_residual(f: dict, Yb: np.ndarray, minimum: str):
    """Optima of one slice's residual-bootstrap replicates Yb (S, k)."""
    x = f["x"]
    if minimum == "akima":
        xs, Ls, inner = akima_minimum(x, Yb)
        return xs, Ls, ~inner
    X, xm = _quadratic(x)
    return _censored_parabola_min(wls(X, Yb)[0], xm, f["lo"], f["hi"], x.min(), x.max())


def replicate_weighted(f: dict, Wt: np.ndarray):
    """Optima of one slice under pairs/cluster multiplicities Wt (S, k) by weighted least squares; a
    replicate with < 3 distinct sizes drawn (within 2% in log P they count as one: a parabola through
    two nearly equal sizes has an absurd vertex) takes the lowest mean loss among the sizes it drew."""
    x, y = f["x"], f["y"]
    X, xm = _quadratic(x)
    inv = _size_groups(x)
    few = ((Wt @ np.eye(inv.max() + 1)[inv]) > 0).sum(axis=1) < 3
    Cf = wls(X, y, np.where(few[:, None], 1.0, Wt))[0]  # the few rows are replaced below
    drawn = Wt > 0  # censor within the sizes this replicate actually drew
    w_lo = np.where(drawn, x[None, :], np.inf).min(axis=1)
    w_hi = np.where(drawn, x[None, :], -np.inf).max(axis=1)
    xs, Ls, deg = _censored_parabola_min(Cf, xm, f["lo"], f["hi"], w_lo, w_hi)
    if few.any():
        xd, Ld = _discrete_min(x, y, Wt[few])
        xs[few], Ls[few] = xd, Ld
    return xs, Ls, deg | few


# ---- the IsoFLOP fit ----

@dataclass(frozen=True)
class IsoFlopFit(FitFields):
    """Per-slice parabolas (``slices``: one row per slice, curvature = a of Eq. 25, flags and
    intervals) and the power laws P*(C) = a_P C^alpha_P, L*(C) = a_L C^alpha_L, whose bootstrap
    draws refit the slice parabolas."""

    slices: pd.DataFrame = field(compare=False)
    power_P: PowerLawFit
    power_L: PowerLawFit
    window: int | None
    n_boot_ok: int = 0
    minimum: str = "parabola"
    bootstrap: str = "residual"
    degenerate_fraction: float = 0.0  # share of replicates with at least one degenerate slice
    noise_sd: dict = field(default_factory=dict)  # log-scale sd of one slice's P*, L* estimate
    _coef: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def flagged(self) -> bool:
        """True when more than 10% of replicates had a degenerate slice (intervals less reliable)."""
        return self.degenerate_fraction > DEGENERATE_FLAG

    alpha_P = property(lambda self: self.power_P.alpha, doc="exponent of P*(C)")
    alpha_L = property(lambda self: self.power_L.alpha, doc="exponent of L*(C)")
    a_P = property(lambda self: self.power_P.a, doc="coefficient of P*(C)")
    a_L = property(lambda self: self.power_L.a, doc="coefficient of L*(C)")

    def predict(self, compute):
        """(P*(C), L*(C)) from the power laws."""
        return self.power_P.predict(compute), self.power_L.predict(compute)

    def band_P(self, compute, level: float | None = None):
        return self.power_P.band(compute, level)

    def band_L(self, compute, level: float | None = None):
        return self.power_L.band(compute, level)

    def predict_interval(self, compute, level: float | None = None, *, seed: int = 0) -> dict:
        """Prediction intervals of a *new slice's* observed optimum at ``compute``:
        {"P_star": (lo, hi), "L_star": (lo, hi)} -- power-law draws plus the noise of one
        slice's estimate (the larger of the slices' bootstrap spread and the power laws'
        residual scatter). ``band_P``/``band_L`` are the narrower confidence bands."""
        lv = level or self.level
        df = self.noise_sd.get("df")
        return {
            "P_star": self.power_P.predict_interval(compute, lv, noise_sd=self.noise_sd.get("P"), seed=seed, df=df),
            "L_star": self.power_L.predict_interval(compute, lv, noise_sd=self.noise_sd.get("L"), seed=seed, df=df),
        }

    def parabola(self, slice_compute: float, params) -> np.ndarray:
        """The fitted Eq. 25 parabola of the slice with target ``slice_compute``, at ``params``."""
        key = min(self._coef, key=lambda c: abs(math.log(c / slice_compute)), default=None)
        if key is None or abs(math.log(key / slice_compute)) > 1e-6:
            raise UserError(f"no fitted slice with compute {slice_compute:g}; slices: {sorted(self._coef)}")
        a, lp, Ls = self._coef[key]
        return a * (np.log(np.asarray(params, float)) - lp) ** 2 + Ls

    def to_dict(self) -> dict:
        d = fields_dict(self, skip=("slices", "power_P", "power_L"))  # status included
        d.update(alpha_P=self.alpha_P, alpha_L=self.alpha_L, a_P=self.a_P, a_L=self.a_L, flagged=self.flagged,
                 power_P=self.power_P.to_dict(), power_L=self.power_L.to_dict(),
                 slices=self.slices.to_dict("records"))
        return jsonable(d)

    def _lines(self) -> list[str]:
        pct = round(100 * self.level)
        lines = [
            f"IsoFLOP fit: {int(self.slices['used'].sum())} of {len(self.slices)} slices used, "
            f"window = {self.window}, {self.minimum} minima ({pct}% CI, {self.bootstrap} bootstrap)",
            f"  alpha_P  {fmt_ci(self.alpha_P, self.ci.get('alpha_P'), 4)}   R^2 {self.power_P.r2:.4f}",
            f"  alpha_L  {fmt_ci(self.alpha_L, self.ci.get('alpha_L'), 4)}   R^2 {self.power_L.r2:.4f}",
            "  slice C       n   P*          L*       curvature  flags",
        ]
        for r in self.slices.itertuples():
            flags = "ok" if r.used else r.reason
            lines.append(f"  {r.compute:<12.4g}{r.n_points:<4d}{r.P_star:<12.4g}{r.L_star:<9.4f}{r.curvature:<11.4g}{flags}")
        if self.n_boot_ok:
            flag = "  ** FLAGGED: intervals less reliable **" if self.flagged else ""
            lines.append(f"  degenerate bootstrap replicates: {100 * self.degenerate_fraction:.1f}% "
                         f"(kept, censored at the slice edge){flag}")
        return lines


DEGENERATE_FLAG = 0.10  # issue 17: intervals are flagged above 10% degenerate replicates
MIN_SLICES = 3  # fewer used slices: the power laws pass exactly through them (nothing left to test)


def isoflop_status(fit) -> FitStatus:
    """The status of an IsoFLOP fit (Eqs. 25-26), from its fields: ``failed`` when a used slice's
    parabola did not converge; ``flagged`` when fewer than ``MIN_SLICES`` slices are used, the
    interval of α_P includes 0 (the slices do not fix how the optimal size grows) or more than
    10% of the bootstrap replicates had a degenerate slice."""
    sl, flags = fit.slices, []
    used = int(sl["used"].sum()) if len(sl) else 0
    if used < MIN_SLICES:
        flags.append(f"only {used} usable slice(s): the power laws pass exactly through them")
    lo, hi = (fit.ci or {}).get("alpha_P") or (math.nan, math.nan)
    if np.isfinite(lo) and np.isfinite(hi) and lo <= 0 <= hi:
        flags.append(f"the {fit.level:.0%} interval of α_P [{lo:.2f}, {hi:.2f}] includes 0: these slices do not "
                     "fix how the optimal size grows")
    if getattr(fit, "degenerate_fraction", 0.0) > DEGENERATE_FLAG:
        flags.append(f"unreliable intervals ({100 * fit.degenerate_fraction:.0f}% of the bootstrap replicates had a "
                     f"degenerate slice, > {100 * DEGENERATE_FLAG:.0f}%)")
    return FitStatus.decide(fit.converged, flags, "a slice's parabola did not converge")


def _check(results: pd.DataFrame, compute: str, params: str, loss: str, *, window, minimum, spec: Bootstrap,
           degenerate) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(slice compute, params, loss) arrays after the checks (ValueError naming the bad input)."""
    for col in (compute, params, loss):
        if col not in results.columns:
            raise UserError(f"fit_isoflop: missing column {col!r}; have {list(results.columns)}")
    if window is not None and window < 3:
        raise UserError(f"window must be >= 3 (a parabola has 3 parameters), got {window}")
    if minimum not in ("parabola", "akima"):
        raise UserError(f"minimum must be 'parabola' or 'akima', got {minimum!r}")
    if degenerate not in ("censor", "drop"):
        raise UserError(f"degenerate must be 'censor' or 'drop', got {degenerate!r}")
    if minimum == "akima" and spec.kind != "residual" and spec.n_boot > 0:
        raise UserError("minimum='akima' supports the residual bootstrap only")
    Cs, P, L = (as_array(results[c], c, positive=True) for c in (compute, params, loss))
    if np.unique(Cs).size < 2:
        what = f"a single slice ({Cs[0]:g})" if Cs.size else "no rows"
        raise UserError(f"fit_isoflop: column {compute!r} has {what}; power laws need >= 2 slices")
    return Cs, P, L


def _fit_slices(Cs: np.ndarray, P: np.ndarray, L: np.ndarray, window, minimum) -> tuple[list, dict, list]:
    """Eq. 25 on each slice's window (the point fit of Step 1): the rows of ``slices``, the
    coefficients, and one dict per convex slice (c, x, y, fitted, ok, idx, lo, hi)."""
    rows, coef, fits = [], {}, []
    for c in np.unique(Cs):
        m = np.flatnonzero(Cs == c)
        order = np.argsort(P[m])
        x, y = np.log(P[m][order]), L[m][order]
        row, w, opt = slice_optimum(x, y, window, minimum)
        rows.append(dict(compute=float(c), n_points=int(m.size), **row))
        if opt is not None:
            a, xs, Ls, fitted = opt
            coef[float(c)] = (a, xs, Ls)
            fits.append(dict(c=float(c), x=x[w], y=y[w], fitted=fitted, ok=not row["reason"], idx=m[order][w],
                             lo=float(x.min()), hi=float(x.max())))
    return rows, coef, fits


def _replicate_optima(used: list, spec: Bootstrap, minimum: str, n_rows: int):
    """(log P*, L*, degenerate) of every replicate and used slice, each (S, slices)."""
    rng = np.random.default_rng(spec.seed)
    if spec.kind == "residual":
        resid = np.concatenate([f["y"] - f["fitted"] for f in used])
        draws = resample_noise(rng, resid, (spec.n_boot, resid.size), 3 * len(used))  # (S, window points)
    elif spec.kind == "cluster":
        Wall = spec.weights(rng, n_rows)  # (S, rows of the table)
    out, pos = [], 0
    for f in used:
        k = len(f["x"])
        if spec.kind == "residual":
            out.append(replicate_residual(f, f["fitted"][None, :] + draws[:, pos : pos + k], minimum))
            pos += k
        else:  # pairs within the window, or whole clusters
            Wt = pairs_weights(rng, k, spec.n_boot) if spec.kind == "pairs" else Wall[:, f["idx"]]
            out.append(replicate_weighted(f, Wt))
    return tuple(np.column_stack([o[i] for o in out]) for i in range(3))


def _noise_sd(LP, lLS, pP, pL, used) -> dict:
    """Log-scale noise of one slice's estimate: the bootstrap spread within slices or, when larger
    (misfit), the power laws' scatter, and its degrees of freedom (window points - 3 per slice)."""
    noise_sd: dict = {}
    for key, D, pl in (("P", LP, pP), ("L", lLS, pL)):
        fin = np.where(np.isfinite(D), D, np.nan)
        with np.errstate(invalid="ignore", divide="ignore"), _warnings.catch_warnings():
            _warnings.simplefilter("ignore", RuntimeWarning)  # all-nan columns -> nan noise
            within = float(np.nanmean(np.nanvar(fin, axis=0, ddof=1)))
        scatter = pl.resid_sd ** 2 if len(used) > 2 else 0.0
        noise_sd[key] = math.sqrt(max(within, scatter))
    noise_sd["df"] = float(max(sum(len(f["x"]) for f in used) - 3 * len(used), 1))
    return noise_sd


def _bootstrap(used, slices: pd.DataFrame, pP, pL, wts, spec: Bootstrap, *, minimum, degenerate, n_rows,
               warnings: list[str]) -> dict:
    """Step 1-2 replicates: every slice refitted per replicate, then both power laws (the
    bootstrap fields of ``IsoFlopFit``)."""
    if spec.n_boot <= 0:
        return dict(power_P=pP, power_L=pL)
    LP, LS, DG = _replicate_optima(used, spec, minimum, n_rows)
    deg_frac = float(DG.any(axis=1).mean())
    missing = "bound"
    if degenerate == "drop":
        keep = ~DG.any(axis=1)
        LP, LS, DG, missing = LP[keep], LS[keep], DG[keep], "drop"
        emit(warnings, f"bootstrap: {int((~keep).sum())} of {spec.n_boot} replicates had a degenerate slice and "
                       "were dropped (degenerate='drop': intervals biased narrow)")
    with np.errstate(invalid="ignore", divide="ignore"):
        lLS = np.log(np.where(LS > 0, LS, np.nan))
    n_ok = int((np.isfinite(LP).all(axis=1) & np.isfinite(lLS).all(axis=1)).sum())
    if deg_frac > 0 and degenerate == "censor":
        msg = (f"bootstrap: {100 * deg_frac:.1f}% of {spec.n_boot} replicates had a degenerate slice (kept, "
               "optimum censored at the slice edge)")
        if deg_frac > DEGENERATE_FLAG:
            msg += f"; above {100 * DEGENERATE_FLAG:.0f}%: the intervals are flagged as less reliable"
        emit(warnings, msg)
    Cu = np.array([f["c"] for f in used])
    with np.errstate(invalid="ignore", divide="ignore"):
        pP, pL = (attach_draws(p, *ols_lines(np.log(Cu), Y, wts), missing=missing)
                  for p, Y in ((pP, LP), (pL, lLS)))
    for j, c in enumerate(Cu):
        i = slices.index[slices.compute == c][0]
        slices.loc[i, ["P_star_lo", "P_star_hi"]] = np.exp(percentile_ci(LP[:, j], spec.level, missing=missing))
        slices.loc[i, ["L_star_lo", "L_star_hi"]] = percentile_ci(LS[:, j], spec.level, missing=missing)
        slices.loc[i, "degenerate_frac"] = float(DG[:, j].mean())
    ci = {"alpha_P": pP.ci["alpha"], "alpha_L": pL.ci["alpha"], "a_P": pP.ci["a"], "a_L": pL.ci["a"]}
    return dict(power_P=pP, power_L=pL, ci=ci, n_boot_ok=n_ok, degenerate_fraction=deg_frac,
                noise_sd=_noise_sd(LP, lLS, pP, pL, used))


def _used_slices(rows: list, fits: list, exclude_flagged: bool, warnings: list[str]):
    """The slices table and the slices that enter the power laws (ValueError when fewer than 2)."""
    slices = pd.DataFrame(rows)
    slices["used"] = [bool(r["reason"] == "" or (not exclude_flagged and r["convex"])) for r in rows]
    for r in rows:
        if r["reason"]:
            emit(warnings, f"slice C={r['compute']:g}: {r['reason']}" + ("; excluded" if exclude_flagged else ""))
    used = [f for f in fits if slices.loc[slices.compute == f["c"], "used"].item()]
    if len(used) < 2:
        raise UserError(f"fit_isoflop: only {len(used)} usable slice(s); flagged: "
                        + "; ".join(f"C={r['compute']:g}: {r['reason']}" for r in rows if r["reason"]))
    empty = dict.fromkeys(("P_star_lo", "P_star_hi", "L_star_lo", "L_star_hi", "degenerate_frac"), math.nan)
    return slices.assign(**empty), used


def _merged(results: pd.DataFrame, loss: str, groups, warnings: list[str]):
    """``results`` and ``groups`` with the rows repeating another's run and step (or every column)
    merged into one measurement (``results_table.merge_repeats``, the rule of every table path);
    rows left with equal values are distinct runs, each a point of its slice."""
    label = "__isoflop_group__"
    if groups is not None:
        groups = np.asarray(groups)
        if len(groups) != len(results):
            return results, groups  # Bootstrap.checked names the mismatch
        results = results.assign(**{label: groups})
    merged, pairs, averaged = merge_repeats(results, measured=[loss], ignore=[label])
    if pairs:
        emit(warnings, f"fit_isoflop: {repeats_message(pairs, averaged)}")
    if groups is None:
        return merged, None
    return merged.drop(columns=label), merged[label].to_numpy()


def fit_isoflop(results: pd.DataFrame, *, compute: str = "slice_flops", params: str = "params",
                loss: str = "loss", window: int | None = 5, exclude_flagged: bool = True,
                slice_weights: Literal["none", "n_points"] = "none", n_boot: int = DEFAULT_N_BOOT,
                bootstrap: Literal["residual", "pairs", "cluster"] = "residual", level: float = DEFAULT_LEVEL,
                seed: int = 0, minimum: Literal["parabola", "akima"] = "parabola", groups=None,
                degenerate: Literal["censor", "drop"] = "censor", options=None) -> IsoFlopFit:
    """Steps 1-2 of §8.2.1 on a table with one row per (model, slice) (docs/laws.md).

    ``compute`` names the slice column (target C), ``params`` the non-embedding parameter count.
    Flagged slices (non-convex, non-converged, minimum at an edge) are left out of the power laws with
    ``exclude_flagged``; ``slice_weights="n_points"`` weights slices by their window size; ``minimum``:
    the vertex of Eq. 25 or an Akima interpolant's minimum. ``bootstrap``: ``"residual"`` (pooled
    parabola residuals), ``"pairs"`` (each window's points) or ``"cluster"`` (whole ``groups``);
    degenerate replicates are kept (module doc), ``degenerate="drop"`` (biased narrow) is for comparison."""
    if not isinstance(results, pd.DataFrame):
        raise ValueError("fit_isoflop: results must be a pandas DataFrame")
    n_boot, level, seed = from_options(options, dict(n_boot=n_boot, level=level, seed=seed), fit_isoflop).values()
    warnings: list[str] = []
    results, groups = _merged(results, loss, groups, warnings)
    spec = Bootstrap(n_boot=n_boot, kind=bootstrap, level=level, seed=seed,
                     groups=None if groups is None else np.asarray(groups)).checked(len(results), "fit_isoflop")
    Cs, P, L = _check(results, compute, params, loss, window=window, minimum=minimum, spec=spec, degenerate=degenerate)
    if slice_weights not in ("none", "n_points"):
        raise UserError(f"slice_weights must be 'none' or 'n_points', got {slice_weights!r}")
    rows, coef, fits = _fit_slices(Cs, P, L, window, minimum)
    slices, used = _used_slices(rows, fits, exclude_flagged, warnings)
    Cu = np.array([f["c"] for f in used])
    wts = np.array([len(f["x"]) for f in used], float) if slice_weights == "n_points" else None
    pP = fit_power_law(Cu, np.exp([coef[c][1] for c in Cu]), weights=wts, n_boot=0, level=spec.level)
    pL = fit_power_law(Cu, np.array([coef[c][2] for c in Cu]), weights=wts, n_boot=0, level=spec.level)
    bt = _bootstrap(used, slices, pP, pL, wts, spec, minimum=minimum, degenerate=degenerate, n_rows=len(results),
                    warnings=warnings)
    if len(used) == 2:
        emit(warnings, "only 2 slices: the power laws pass exactly through them")
    converged = bool(all(slices.loc[slices.used, "converged"]))
    fit = IsoFlopFit(slices=slices, window=window, level=spec.level, converged=converged,
                     warnings=tuple(warnings), minimum=minimum, bootstrap=bootstrap, _coef=coef, **bt)
    return dataclasses.replace(fit, status=isoflop_status(fit))
