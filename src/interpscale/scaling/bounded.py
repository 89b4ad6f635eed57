"""Bounded metric fits m(C) = e +/- A C^(-beta) (paper Eq. 29) with e held to its natural bound.

For a fixed beta the model is linear in (e, A): each beta's best (e, A) with A >= 0 and e on
its bound's allowed side is a closed-form constrained least squares; beta comes from a log grid
and a golden-section refinement. All bootstrap replicates are solved together the same way.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from interpscale.paper import INTERP_METRICS

from ._base import (DEFAULT_LEVEL, DEFAULT_N_BOOT, FitFields, FitStatus, as_array, check_duplicates,
    check_lengths, emit, fmt_ci, from_options)
from .bootstrap import Bootstrap
from interpscale.errors import UserError

# metric -> (direction, natural bound); paper §8.3.1
METRICS: dict[str, tuple[str, float]] = {k: (m.direction, m.bound) for k, m in INTERP_METRICS.items()}

BETA_RANGE = (1e-3, 5.0)
_GRID = np.geomspace(*BETA_RANGE, 241)
_GOLD = (math.sqrt(5.0) - 1.0) / 2.0


@dataclass(frozen=True)
class BoundedFit(FitFields):
    """m(C) = e + s*A*C^(-beta), s = +1 for lower-is-better metrics, -1 for higher-is-better;
    ``e_at_bound`` flags an asymptote pinned to its natural bound (read it as a bound, not an
    estimate, as the paper does); ``boot``: draws (n_boot, 3) of (e, A, beta); ``resid``: m - fitted."""

    e: float
    A: float
    beta: float
    r2: float
    n: int
    direction: str
    bound: float | None
    e_at_bound: bool
    metric: str | None = None
    sse: float = math.nan
    bootstrap: str = "residual"
    compute_range: tuple[float, float] = (math.nan, math.nan)

    @property
    def sign(self) -> float:
        return 1.0 if self.direction == "lower" else -1.0

    def predict(self, compute) -> np.ndarray:
        return self.e + self.sign * self.A * np.asarray(compute, float) ** (-self.beta)

    def _curves(self, rows: np.ndarray, C: np.ndarray) -> np.ndarray:
        """(S, m) curves of the (e, A, beta) ``rows`` at compute ``C`` (m,)."""
        return rows[:, :1] + self.sign * rows[:, 1:2] * np.exp(-rows[:, 2:3] * np.log(C)[None, :])

    def band(self, compute, level: float | None = None):
        """Bootstrap percentile band (lo, hi) of the fitted curve at ``compute``."""
        C = np.atleast_1d(np.asarray(compute, float))
        return self._band(lambda rows: self._curves(rows, C), np.shape(compute), level,
                          lambda: self.predict(C).reshape(np.shape(compute)))

    def predict_interval(self, compute, level: float | None = None, *, seed: int = 0):
        """Prediction interval (lo, hi) of a new observation at ``compute``: bootstrap curve
        draws plus resampled residuals, kept on the allowed side of the natural bound."""
        C = np.atleast_1d(np.asarray(compute, float))
        clip = None if self.bound is None else (lambda y: np.maximum(y, self.bound) if self.direction == "lower"
                                                else np.minimum(y, self.bound))
        return self._interval(lambda rows: self._curves(rows, C), [self.e, self.A, self.beta], np.shape(compute),
                              level, seed=seed, n_params=3, clip=clip)

    def _lines(self) -> list[str]:
        s = "+" if self.direction == "lower" else "-"
        return [f"bounded fit m(C) = e {s} A C^-beta   ({self.metric or 'metric'}, n = {self.n}, "
                f"R^2 = {self.r2:.3f}, bound {self.bound}, {round(100 * self.level)}% CI)",
                f"  e     {fmt_ci(self.e, self.ci.get('e'), 4)}"
                + ("   (on its bound)" if self.e_at_bound else ""),
                f"  beta  {fmt_ci(self.beta, self.ci.get('beta'), 4)}", f"  A     {self.A:.4g}"]


FLAT_BETA = 1.01e-3  # beta at the lower end of BETA_RANGE: m(C) is a constant offset
MIN_TREND_R2 = 0.1  # below this the metric does not move with compute beyond its noise


def bounded_status(fit) -> FitStatus:
    """The status of a bounded fit (Eq. 29), from its fields: ``failed`` when the best fit is flat
    (A = 0) or did not converge; ``flagged`` (no trend: the metric's rate and asymptote are not
    identified) when beta sits at its lower bound, R^2 < ``MIN_TREND_R2`` or the interval of A
    reaches 0."""
    if not fit.A > 0:
        return FitStatus("failed", "the best fit is flat (A = 0)")
    flags = []
    if not fit.beta > FLAT_BETA:
        flags.append(f"β at its lower bound ({fit.beta:.3g}): a constant offset")
    elif not (np.isfinite(fit.r2) and fit.r2 >= MIN_TREND_R2):
        flags.append(f"R² = {fit.r2:.2f}: compute explains no more than the noise")
    else:
        lo = (fit.ci or {}).get("A", (math.nan, math.nan))[0]
        if np.isfinite(lo) and lo <= 0:
            flags.append(f"the {fit.level:.0%} interval of A includes 0")
    return FitStatus.decide(fit.converged, flags, "the best fit is flat (A = 0)")


def _solve_ea(sw, sm, smm, szm, sz, szz, side, bound):
    """Best (e, A, sse) of m = e + A*z (z = s*x^-beta, signed) with A >= 0, from the weighted sums
    sw = sum w, sm = sum w m, smm = sum w m^2, szm = sum w z m, sz = sum w z, szz = sum w z^2.
    ``side``: +1 e >= bound, -1 e <= bound, 0 free. A convex QP in (e, A): its optimum is the best
    feasible of the unconstrained solution and the best points on the edges e = bound and A = 0."""

    def sse(e, A):
        return smm - 2 * e * sm - 2 * A * szm + sw * e * e + 2 * e * A * sz + A * A * szz

    det = sw * szz - sz * sz
    with np.errstate(divide="ignore", invalid="ignore"):
        A_u = (sw * szm - sz * sm) / det
        e_u = (sm - A_u * sz) / sw
    # z carries the sign s; the constraint is A >= 0 in the signed parameterisation
    feas_u = np.isfinite(A_u) & (A_u >= 0)
    e_0 = sm / sw  # A = 0: flat line at the (clipped) mean
    on_bound = []
    if side != 0:  # e on its bound's allowed side; the edge e = bound with A >= 0
        feas_u &= side * (e_u - bound) >= 0
        with np.errstate(divide="ignore", invalid="ignore"):
            A_b = np.maximum((szm - bound * sz) / szz, 0.0)
        on_bound = [(np.full_like(A_b, bound), A_b)]
        e_0 = np.maximum(e_0, bound) if side > 0 else np.minimum(e_0, bound)
    cands = [(np.where(feas_u, e_u, np.nan), np.where(feas_u, A_u, np.nan)), *on_bound,
             (e_0 + 0 * szm, np.zeros_like(szm))]
    E, A = (np.stack(v) for v in zip(*cands))  # (candidates, ...)
    S = np.where(np.isfinite(E), sse(np.nan_to_num(E), np.nan_to_num(A)), np.inf)
    j = np.argmin(S, axis=0)[None]  # the first of equal candidates, as in the order above
    return tuple(np.take_along_axis(v, j, 0)[0] for v in (E, A, S))


def _profile(lx, M, W, sgn, side, bound, betas):
    """Profile sse over beta for each row of M: betas (S, G) or (G,) -> e, A, sse (S, G)."""
    betas, WM = np.atleast_1d(betas), W * M
    if betas.ndim == 1:  # shared grid: the sums are matrix products
        Z = sgn * np.exp(-betas[:, None] * lx[None, :])  # (G, n)
        szm = WM @ Z.T
        sz = W @ Z.T
        szz = W @ (Z * Z).T
    else:  # per-row betas (S, G)
        Z = sgn * np.exp(-betas[:, :, None] * lx[None, None, :])  # (S, G, n)
        szm = np.einsum("sn,sgn->sg", WM, Z)
        sz = np.einsum("sn,sgn->sg", W, Z)
        szz = np.einsum("sn,sgn->sg", W, Z * Z)
    sw = W.sum(axis=1, keepdims=True)
    sm = WM.sum(axis=1, keepdims=True)
    smm = (WM * M).sum(axis=1, keepdims=True)
    # signed z: A >= 0 in m = e + A*z with z = s*x^-beta
    return _solve_ea(sw, sm, smm, szm, sz, szz, side, bound)


def _fit_many(lx, M, W, sgn, side, bound, n_golden=60):
    """Fit every row of M (S, n); returns e, A (in scaled-x units), beta, sse (S,)."""
    G = _GRID
    _, _, sse = _profile(lx, M, W, sgn, side, bound, G)
    k = np.argmin(sse, axis=1)
    lg = np.log(G)
    lo = lg[np.maximum(k - 1, 0)]
    hi = lg[np.minimum(k + 1, len(G) - 1)]

    def f(lb):
        _, _, s = _profile(lx, M, W, sgn, side, bound, np.exp(lb)[:, None])
        return s[:, 0]

    c = hi - _GOLD * (hi - lo)
    d = lo + _GOLD * (hi - lo)
    fc, fd = f(c), f(d)
    for _ in range(n_golden):  # golden-section search on log beta, one evaluation per step
        left = fc < fd  # the minimum lies in [lo, d]
        hi = np.where(left, d, hi)
        lo = np.where(left, lo, c)
        x = np.where(left, hi - _GOLD * (hi - lo), lo + _GOLD * (hi - lo))
        fx = f(x)
        c, d = np.where(left, x, d), np.where(left, c, x)
        fc, fd = np.where(left, fx, fd), np.where(left, fc, fx)
    beta = np.exp(0.5 * (lo + hi))
    e, A, s = _profile(lx, M, W, sgn, side, bound, beta[:, None])
    return e[:, 0], A[:, 0], beta, s[:, 0], k


@dataclass(frozen=True)
class _Problem:
    """Checked inputs of one bounded fit, solved in x = C / c_ref; ``side`` +1: e >= ``bnd``,
    -1: e <= ``bnd``, 0: e free."""

    C: np.ndarray
    m: np.ndarray
    lx: np.ndarray
    c_ref: float
    direction: str
    bound: float | None  # None: e free
    label: str
    sgn: float
    side: int
    bnd: float

    def solve(self, M: np.ndarray, W: np.ndarray, n_golden: int = 60):
        return _fit_many(self.lx, M, W, self.sgn, self.side, self.bnd, n_golden=n_golden)


def _check(compute, metric, direction, bound, name) -> _Problem:
    """Direction and bound (from the metric's name unless given) and the checked points."""
    if name is not None and name in METRICS:
        d0, b0 = METRICS[name]
        direction = direction or d0
        bound = b0 if bound is None else bound
    if direction not in ("lower", "higher"):
        raise UserError(f"direction must be 'lower' or 'higher' (or pass a known metric name), got {direction!r}")
    label = name or "metric"
    C, m = as_array(compute, "compute", positive=True), as_array(metric, label)
    check_lengths({"compute": C, "metric": m}, 4, f"fit_bounded({label})")
    check_duplicates({"compute": C, label: m}, f"fit_bounded({label})")
    if np.ptp(C) == 0:
        raise UserError("compute: all values are equal; need at least two distinct compute values")
    sgn = 1.0 if direction == "lower" else -1.0
    side, bnd = (0, 0.0) if bound is None else (int(sgn), float(bound))
    if side and (side * (m - bnd) < 0).any():
        i = int(np.flatnonzero(side * (m - bnd) < 0)[0])
        raise UserError(f"{label}: value {m[i].item()!r} at row {i} lies beyond the bound {bnd} "
                        f"({direction} is better)")
    c_ref = float(np.exp(np.log(C).mean()))  # fit in x = C / c_ref for conditioning
    bound = None if bound is None else bnd
    return _Problem(C, m, np.log(C / c_ref), c_ref, direction, bound, label, sgn, side, bnd)


def _point_fit(pb: _Problem, warnings: list[str]):
    """(e, A in scaled units, beta, sse, fitted, converged, at_bound) of the least-squares fit."""
    e, A, beta, sse, k = pb.solve(pb.m[None, :], np.ones((1, pb.m.size)))
    e, A, beta, sse, k = float(e[0]), float(A[0]), float(beta[0]), float(sse[0]), int(k[0])
    fitted = e + pb.sgn * A * np.exp(-beta * pb.lx)
    converged = True
    scale = max(abs(e), float(np.abs(pb.m).max()), 1e-12)
    at_bound = pb.bound is not None and abs(e - pb.bnd) <= 1e-9 * scale
    if A <= 0:
        converged = False
        emit(warnings, f"fit_bounded({pb.label}): best fit is flat (A = 0); the metric does not improve with compute",
             warn=True)
    elif k in (0, len(_GRID) - 1):
        converged = False
        emit(warnings, f"fit_bounded({pb.label}): beta ran to the edge of its search range {BETA_RANGE}", warn=True)
    if at_bound:
        emit(warnings, f"{pb.label}: asymptote e sits on its natural bound {pb.bnd}; read it as a bound")
    return e, A, beta, sse, fitted, converged, at_bound


def _replicates(pb: _Problem, fitted: np.ndarray, spec: Bootstrap):
    """(draws (S, 3) of (e, A, beta) in raw-compute units, intervals), or (None, {})."""
    if spec.n_boot <= 0:
        return None, {}
    Y, W = spec.replicates(pb.m, fitted, 3)
    if spec.kind == "residual":  # resampled metrics cannot cross their natural bound
        M = Y if pb.side == 0 else np.maximum(Y, pb.bnd) if pb.side > 0 else np.minimum(Y, pb.bnd)
        W = np.ones_like(M)
    else:
        M = np.broadcast_to(pb.m, W.shape).copy()
    be_, bA, bb, _, _ = pb.solve(M, W, n_golden=40)
    bA = bA * np.exp(bb * math.log(pb.c_ref))  # back to raw-compute units
    return np.column_stack([be_, bA, bb]), spec.intervals({"e": be_, "A": bA, "beta": bb})


def fit_bounded(compute, metric, *, direction: Literal["lower", "higher"] | None = None,
                bound: float | None = None, name: str | None = None, n_boot: int = DEFAULT_N_BOOT,
                bootstrap: Literal["residual", "pairs", "cluster"] = "residual", level: float = DEFAULT_LEVEL,
                seed: int = 0, groups=None, options=None) -> BoundedFit:
    """Fit m(C) = e + A C^-beta (``direction="lower"``: lower is better, e >= bound) or
    m(C) = e - A C^-beta (``"higher"``: e <= bound) by least squares (Eq. 29), A >= 0, beta > 0.
    ``name`` (one of ``METRICS``) supplies the paper's direction and natural bound; explicit
    ``direction``/``bound`` override it; ``bound=None`` with no name leaves e free."""
    n_boot, level, seed = from_options(options, dict(n_boot=n_boot, level=level, seed=seed), fit_bounded).values()
    pb = _check(compute, metric, direction, bound, name)
    spec = Bootstrap(n_boot=n_boot, kind=bootstrap, level=level, seed=seed, groups=groups).checked(
        pb.m.size, f"fit_bounded({pb.label})")
    warnings: list[str] = []
    e, A, beta, sse, fitted, converged, at_bound = _point_fit(pb, warnings)
    sst = float(((pb.m - pb.m.mean()) ** 2).sum())
    boot, ci = _replicates(pb, fitted, spec)
    fit = BoundedFit(
        e=e, A=A * math.exp(beta * math.log(pb.c_ref)), beta=beta, r2=float(1.0 - sse / sst if sst > 0 else math.nan),
        n=pb.m.size, direction=pb.direction, bound=pb.bound, e_at_bound=bool(at_bound), converged=converged,
        metric=name, sse=sse, ci=ci, level=spec.level, bootstrap=bootstrap, warnings=tuple(warnings),
        compute_range=(float(pb.C.min()), float(pb.C.max())), boot=boot, resid=pb.m - fitted,
    )
    return dataclasses.replace(fit, status=bounded_status(fit))
