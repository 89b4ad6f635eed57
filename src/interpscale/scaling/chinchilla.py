"""Joint Chinchilla fit L(P, D) = L_inf + A_P/P^alpha + A_D/D^beta (paper Eq. 27-28).

Huber loss (delta = 1e-3) on log residuals, *summed* over points (Eq. 28; an averaged loss
makes L-BFGS-B stop early), in the log-sum-exp parameterisation of Hoffmann et al. / Epoch:
log L = LSE(a - alpha log P, b - beta log D, e) with A_P = e^a, A_D = e^b, L_inf = e^e.
All starts of the initialisation grid, and all bootstrap replicates, are minimised together
by the batched BFGS of ``_optim`` with analytic gradients.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ._base import (
    DEFAULT_LEVEL,
    DEFAULT_N_BOOT,
    as_array,
    check_duplicates,
    check_lengths,
    check_level,
    check_min_points,
    emit,
    fields_dict,
    fmt_ci,
    log,
)
from ._optim import STATUS, batched_bfgs
from .bootstrap import Bootstrap, band_from_draws, resample_noise


def epoch_grid() -> np.ndarray:
    """Hoffmann/Epoch initialisation grid as (a, b, e, alpha, beta) rows: 4,500 starts.

    alpha, beta in {0, 0.5, ..., 2}; e in {-1, -0.5, ..., 1}; a, b in {0, 5, ..., 25}.
    """
    ab = np.arange(0.0, 25.0 + 1e-9, 5.0)
    e = np.arange(-1.0, 1.0 + 1e-9, 0.5)
    al = np.arange(0.0, 2.0 + 1e-9, 0.5)
    rows = [(a, b, ee, x, y) for x, y, ee, a, b in itertools.product(al, al, e, ab, ab)]
    return np.array(rows, dtype=float)


def coarse_grid() -> np.ndarray:
    """A 243-start grid (three values per parameter) for quick fits."""
    vals = ([0.0, 10.0, 20.0], [0.0, 10.0, 20.0], [-1.0, 0.0, 1.0], [0.25, 0.75, 1.5], [0.25, 0.75, 1.5])
    return np.array(list(itertools.product(*vals)), dtype=float)


def log_pred(theta: np.ndarray, lP: np.ndarray, lD: np.ndarray) -> np.ndarray:
    """log L-hat for rows of theta = (a, b, e, alpha, beta): shape (S, n)."""
    a, b, e, al, be = (theta[:, i : i + 1] for i in range(5))
    u1 = a - al * lP[None, :]
    u2 = b - be * lD[None, :]
    u3 = np.broadcast_to(e, u1.shape)
    return np.logaddexp(np.logaddexp(u1, u2), u3)


class _HuberLSE:
    """Summed Huber objective (Eq. 28) and its analytic gradient, batched over rows.

    Internally the exponent terms are centred (a' = a - alpha*mean(log P), likewise b),
    a linear change of variables that leaves the minimisers unchanged but makes the
    Hessian far better conditioned for BFGS.
    """

    def __init__(self, lP, lD, Y, W, delta, *, overestimate=1.0, e_max=None):
        self.cP, self.cD = float(lP.mean()), float(lD.mean())
        self.xP, self.xD = lP - self.cP, lD - self.cD
        self.Y, self.W, self.delta = Y, W, delta
        self.over = float(overestimate)  # factor on terms where the fit over-estimates the loss
        # L_inf <= exp(e_max): e = e_max - softplus(-u) with u free (a smooth one-sided bound)
        self.e_max = None if e_max is None else float(e_max)

    def to_internal(self, theta):
        z = theta.copy()
        z[:, 0] = theta[:, 0] - theta[:, 3] * self.cP
        z[:, 1] = theta[:, 1] - theta[:, 4] * self.cD
        if self.e_max is not None:  # starts above the bound are moved just below it
            gap = np.maximum(self.e_max - theta[:, 2], 1e-3)
            z[:, 2] = -np.log(np.expm1(gap))
        return z

    def to_external(self, z):
        theta = z.copy()
        theta[:, 0] = z[:, 0] + z[:, 3] * self.cP
        theta[:, 1] = z[:, 1] + z[:, 4] * self.cD
        if self.e_max is not None:
            theta[:, 2] = self.e_max - np.logaddexp(0.0, -z[:, 2])
        return theta

    def __call__(self, Z, rows, chunk=64):
        # Work in row blocks so the (block, n) temporaries stay in cache.
        if Z.shape[0] <= chunk:
            return self._eval(Z, rows)
        f = np.empty(Z.shape[0])
        g = np.empty((Z.shape[0], 5))
        for i in range(0, Z.shape[0], chunk):
            f[i : i + chunk], g[i : i + chunk] = self._eval(Z[i : i + chunk], rows[i : i + chunk])
        return f, g

    def _eval(self, Z, rows):
        # log L-hat = e + log(1 + exp(v1) + exp(v2)), v1 = a' - alpha xP - e, v2 = b' - beta xD - e;
        # overflow gives inf, which the line search rejects.
        d = self.delta
        e = Z[:, 2:3]
        if self.e_max is not None:
            u = e
            e = self.e_max - np.logaddexp(0.0, -u)
        with np.errstate(over="ignore", invalid="ignore"):
            ev1 = np.multiply.outer(-Z[:, 3], self.xP)
            ev1 += Z[:, 0:1] - e
            np.exp(ev1, out=ev1)
            ev2 = np.multiply.outer(-Z[:, 4], self.xD)
            ev2 += Z[:, 1:2] - e
            np.exp(ev2, out=ev2)
            t = ev1 + ev2
            r = np.log1p(t)
            r += e
            r -= self.Y if self.Y.ndim == 1 else self.Y[rows]
            over = r > 0 if self.over != 1.0 else None  # r = log L-hat - log L > 0: over-estimate
            c = np.clip(r, -d, d)  # Huber'(r)
            r -= 0.5 * c
            r *= c  # Huber(r) = c (r - c/2), c = clip(r, -delta, delta)
            t += 1.0
            c /= t  # Huber'(r) * (1 / s): softmax weights share the 1/s factor
            if over is not None:  # asymmetric penalty: over-estimates cost `over` times more
                k = np.where(over, self.over, 1.0)
                r *= k
                c *= k
            if self.W is not None:
                w = self.W if self.W.ndim == 1 else self.W[rows]
                r *= w
                c *= w
            ev1 *= c
            ev2 *= c
            g = np.empty((Z.shape[0], 5))
            g[:, 0] = ev1.sum(axis=1)
            g[:, 1] = ev2.sum(axis=1)
            g[:, 2] = c.sum(axis=1)
            g[:, 3] = -(ev1 @ self.xP)
            g[:, 4] = -(ev2 @ self.xD)
            if self.e_max is not None:  # chain rule through e = e_max - softplus(-u)
                g[:, 2] *= np.exp(-np.logaddexp(0.0, u[:, 0]))
            return r.sum(axis=1), g


# Grid phase: scipy L-BFGS-B's default stopping rule (factr 1e7 -> ftol 2.2e-9 on
# max(|f|, 1); pgtol 1e-5). Polish phase: run the best starts to machine precision.
COARSE_TOL = dict(gtol=1e-5, ftol=2.2e-9, fscale=1.0)
FINE_TOL = dict(gtol=1e-11, ftol=1e-13, fscale=1e-300)
BOOT_TOL = dict(gtol=1e-8, ftol=1e-10, fscale=1e-300)  # replicates: warm-started, moderate


def minimize_huber_lse(lP, lD, Y, theta0, *, W=None, delta=1e-3, max_iter=1000, tol=None,
                       overestimate=1.0, e_max=None):
    """Batched minimisation from the rows of theta0 (a, b, e, alpha, beta); Y (n,) or (S, n);
    W per-point weights (n,) or per-row weights (S, n)."""
    obj = _HuberLSE(lP, lD, Y, W, delta, overestimate=overestimate, e_max=e_max)
    res = batched_bfgs(obj, obj.to_internal(np.asarray(theta0, float)), max_iter=max_iter, **(tol or FINE_TOL))
    res.x = obj.to_external(res.x)
    return res


@dataclass(frozen=True)
class ChinchillaFit:
    """Result of the joint fit (Eq. 27). ``A_P``/``A_D`` are Epoch's ``A``/``B``, ``L_inf`` is ``E``.

    ``ci`` maps every parameter (and ``alpha_D``, ``a``/``b``/``e``) to a percentile interval;
    ``boot`` holds the bootstrap draws of (a, b, e, alpha, beta) used by ``band``.
    """

    L_inf: float
    A_P: float
    A_D: float
    alpha: float
    beta: float
    objective: float
    converged: bool
    n: int
    huber_delta: float = 1e-3
    n_starts: int = 1
    n_converged_starts: int = 1
    best_start: tuple[float, ...] = ()
    best_start_index: int = 0
    status: str = ""
    ci: dict = field(default_factory=dict)
    level: float = DEFAULT_LEVEL
    bootstrap: str = "residual"
    n_boot_ok: int = 0
    warnings: tuple[str, ...] = ()
    overestimate_penalty: float = 1.0
    L_inf_bounded: bool = False
    weighted: bool = False
    identified: bool = True  # L_inf pinned down and both exponents positive (see ``_diagnose``)
    boot: np.ndarray | None = field(default=None, repr=False, compare=False)
    resid: np.ndarray | None = field(default=None, repr=False, compare=False)  # log L - log L-hat

    @property
    def alpha_D(self) -> float:
        """Compute-optimal token exponent alpha/(alpha+beta) (D_opt ~ C^alpha_D)."""
        return self.alpha / (self.alpha + self.beta)

    @property
    def alpha_P(self) -> float:
        """Compute-optimal parameter exponent beta/(alpha+beta) implied by the joint fit."""
        return self.beta / (self.alpha + self.beta)

    @property
    def theta(self) -> np.ndarray:
        """(a, b, e, alpha, beta) in the log-sum-exp parameterisation."""
        return np.array([math.log(self.A_P), math.log(self.A_D), math.log(self.L_inf), self.alpha, self.beta])

    def predict(self, params, tokens) -> np.ndarray:
        """L(P, D) of Eq. 27."""
        P, D = np.asarray(params, float), np.asarray(tokens, float)
        return self.L_inf + self.A_P / P**self.alpha + self.A_D / D**self.beta

    def optimal_allocation(self, compute, flops_per_token_per_param: float = 6.0):
        """(P_opt, D_opt) minimising Eq. 27 subject to C = M*D with M = k*P (k = 6 by default).

        Closed form (Hoffmann et al. 2022, App. D.2): P_opt = G (C/k)^(beta/(alpha+beta)),
        D_opt = (C/k) / P_opt, G = (alpha A_P / (beta A_D))^(1/(alpha+beta)).
        """
        return optimal_allocation(self.theta[None, :], np.asarray(compute, float), flops_per_token_per_param)

    def predict_optimal(self, compute, flops_per_token_per_param: float = 6.0) -> np.ndarray:
        """Compute-optimal loss L(P_opt(C), D_opt(C))."""
        P, D = self.optimal_allocation(compute, flops_per_token_per_param)
        return self.predict(P, D)

    def band(self, params, tokens, level: float | None = None):
        """Bootstrap percentile band (lo, hi) of L(P, D) at the given points."""
        P, D = np.broadcast_arrays(np.asarray(params, float), np.asarray(tokens, float))
        if self.boot is None or len(self.boot) == 0:
            y = self.predict(P, D)
            return y, y
        draws = np.exp(log_pred(self.boot, np.log(P.ravel()), np.log(D.ravel())))
        lo, hi = band_from_draws(draws, level or self.level)
        return lo.reshape(P.shape), hi.reshape(P.shape)

    def band_optimal(self, compute, level: float | None = None, flops_per_token_per_param: float = 6.0):
        """Bootstrap band of the compute-optimal loss curve (each replicate at its own optimum)."""
        C = np.atleast_1d(np.asarray(compute, float))
        if self.boot is None or len(self.boot) == 0:
            y = self.predict_optimal(C, flops_per_token_per_param)
            return y, y
        P, D = optimal_allocation(self.boot, C, flops_per_token_per_param)  # (S, m)
        a, b, e, al, be = (self.boot[:, i : i + 1] for i in range(5))
        draws = np.exp(e) + np.exp(a) / P**al + np.exp(b) / D**be
        lo, hi = band_from_draws(draws, level or self.level)
        return lo.reshape(np.shape(compute)), hi.reshape(np.shape(compute))

    def _noisy_draws(self, log_curve: np.ndarray, seed: int) -> np.ndarray:
        """Curve draws (S, m) on the log scale plus resampled log residuals, back in loss units."""
        rng = np.random.default_rng(seed)
        noise = resample_noise(rng, self.resid if self.resid is not None else np.zeros(0), log_curve.shape, 5)
        return np.exp(log_curve + noise)

    def predict_interval(self, params, tokens, level: float | None = None, *, seed: int = 0):
        """Prediction interval (lo, hi) for a *new observed* loss at (P, D): the bootstrap
        curve draws plus resampled residual noise (a confidence band, ``band``, covers the
        curve only and is narrower)."""
        P, D = np.broadcast_arrays(np.asarray(params, float), np.asarray(tokens, float))
        theta = self.boot if self.boot is not None and len(self.boot) else self.theta[None, :]
        if len(theta) < 200:  # too few curve draws to read tails off: repeat them under fresh noise
            theta = np.repeat(theta, -(-200 // len(theta)), axis=0)
        draws = self._noisy_draws(log_pred(theta, np.log(P.ravel()), np.log(D.ravel())), seed)
        lo, hi = band_from_draws(draws, level or self.level)
        return lo.reshape(P.shape), hi.reshape(P.shape)

    def predict_interval_optimal(self, compute, level: float | None = None, flops_per_token_per_param: float = 6.0,
                                 *, seed: int = 0):
        """Prediction interval of a new run's loss at the compute-optimal allocation of ``compute``."""
        C = np.atleast_1d(np.asarray(compute, float))
        theta = self.boot if self.boot is not None and len(self.boot) else self.theta[None, :]
        if len(theta) < 200:
            theta = np.repeat(theta, -(-200 // len(theta)), axis=0)
        P, D = optimal_allocation(theta, C, flops_per_token_per_param)
        P, D = np.atleast_2d(P), np.atleast_2d(D)
        a, b, e, al, be = (theta[:, i : i + 1] for i in range(5))
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            curve = np.log(np.exp(e) + np.exp(a) / P**al + np.exp(b) / D**be)
        lo, hi = band_from_draws(self._noisy_draws(curve, seed), level or self.level)
        return lo.reshape(np.shape(compute)), hi.reshape(np.shape(compute))

    def to_dict(self) -> dict:
        d = fields_dict(self)
        d["alpha_D"] = self.alpha_D
        d["alpha_P"] = self.alpha_P
        return d

    def summary(self) -> str:
        pct = round(100 * self.level)
        lines = [
            f"joint Chinchilla fit L = L_inf + A_P/P^alpha + A_D/D^beta   (n = {self.n}, "
            f"Huber delta = {self.huber_delta:g}, objective = {self.objective:.10f})",
            f"  converged: {self.converged} ({self.status}); best of {self.n_starts} starts "
            f"(#{self.best_start_index}, {self.n_converged_starts} converged); {pct}% CI, "
            f"{self.bootstrap} bootstrap ({self.n_boot_ok} replicates)",
        ]
        opts = [o for o, on in (("per-point weights", self.weighted), ("L_inf <= min(loss)", self.L_inf_bounded),
                                (f"over-estimate penalty x{self.overestimate_penalty:g}", self.overestimate_penalty != 1.0)) if on]
        if opts:
            lines.append("  options: " + ", ".join(opts))
        for name in ("L_inf", "alpha", "beta", "alpha_D"):
            lines.append(f"  {name:<8}{fmt_ci(getattr(self, name), self.ci.get(name), 4)}")
        for name in ("A_P", "A_D"):
            lo, hi = self.ci.get(name, (math.nan, math.nan))
            lines.append(f"  {name:<8}{getattr(self, name):.5g} [{lo:.5g}, {hi:.5g}]")
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def optimal_allocation(theta: np.ndarray, compute, k: float = 6.0):
    """(P_opt, D_opt) of Eq. 27 under C = k P D for rows of theta = (a, b, e, alpha, beta)
    (Hoffmann et al. 2022, App. D.2): P_opt = G (C/k)^(beta/(alpha+beta)), D_opt = (C/k) / P_opt,
    G = (alpha A_P / (beta A_D))^(1/(alpha+beta)). One row gives arrays shaped like ``compute``;
    S rows give (S, m) arrays."""
    theta = np.atleast_2d(np.asarray(theta, float))
    C = np.asarray(compute, float)
    a, b, _, al, be = (theta[:, i : i + 1] for i in range(5))
    CK = np.atleast_1d(C)[None, :] / k
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # non-positive exponents -> nan
        G = np.exp((np.log(al * np.exp(a - b) / be)) / (al + be))
        P = G * CK ** (be / (al + be))
    D = CK / P
    if theta.shape[0] == 1:
        return P[0].reshape(np.shape(C)), D[0].reshape(np.shape(C))
    return P, D


# L_inf below this fraction of the smallest observed loss is reported as not identified
L_INF_COLLAPSE = 0.01


@dataclass(frozen=True)
class _Inputs:
    """Checked inputs of one joint fit: logs of the points, weights, starts and options."""

    lP: np.ndarray
    lD: np.ndarray
    lL: np.ndarray
    w: np.ndarray | None
    starts: np.ndarray
    opts: dict

    @property
    def n(self) -> int:
        return self.lL.size


def _check(params, tokens, loss, *, delta, weights, overestimate_penalty, bound_L_inf, grid) -> _Inputs:
    """Validated logs, per-point weights and start grid (ValueError naming the bad input)."""
    P = as_array(params, "params", positive=True)
    D = as_array(tokens, "tokens", positive=True)
    L = as_array(loss, "loss", positive=True)
    n = check_lengths(params=P, tokens=D, loss=L)
    check_min_points(n, 6, "fit_chinchilla (5 free parameters)")
    check_duplicates({"params": P, "tokens": D, "loss": L}, "fit_chinchilla")
    if not delta > 0:
        raise ValueError(f"delta must be positive, got {delta}")
    if np.ptp(np.log(P)) == 0 or np.ptp(np.log(D)) == 0:
        raise ValueError("params/tokens: need at least two distinct values of each")
    w = None
    if weights is not None:
        w = as_array(weights, "weights")
        check_lengths(params=P, weights=w)
        if (w < 0).any() or not w.sum() > 0:
            i = int(np.flatnonzero(w < 0)[0]) if (w < 0).any() else 0
            raise ValueError(f"weights: must be non-negative with a positive sum (row {i}: {w[i]!r})")
    if not overestimate_penalty >= 1.0:
        raise ValueError(f"overestimate_penalty must be >= 1, got {overestimate_penalty}")
    e_max = float(np.log(L.min())) if bound_L_inf else None
    starts = {"epoch": epoch_grid, "coarse": coarse_grid}[grid]() if isinstance(grid, str) else np.asarray(grid, float)
    if starts.ndim != 2 or starts.shape[1] != 5:
        raise ValueError(f"grid: expected an (S, 5) array of (a, b, e, alpha, beta), got shape {starts.shape}")
    if e_max is not None:
        starts = starts.copy()
        starts[:, 2] = np.minimum(starts[:, 2], e_max - 1e-3)  # what the optimiser starts from
    return _Inputs(np.log(P), np.log(D), np.log(L), w, starts,
                   dict(delta=delta, overestimate=overestimate_penalty, e_max=e_max))


@dataclass(frozen=True)
class _Point:
    """The point estimate: best polished start, its objective and convergence."""

    theta: np.ndarray
    objective: float
    converged: bool
    best: int
    n_ok: int
    status: str
    failure: str  # STATUS text of the best start when it did not converge, else ""


def _point_fit(x: _Inputs, *, max_iter: int, n_polish: int) -> _Point:
    """Every start to scipy's default tolerance, then the best ``n_polish`` to machine precision."""
    res = minimize_huber_lse(x.lP, x.lD, x.lL, x.starts, W=x.w, max_iter=max_iter, tol=COARSE_TOL, **x.opts)
    ok = res.converged & np.isfinite(res.f)
    pool = np.flatnonzero(ok) if ok.any() else np.flatnonzero(np.isfinite(res.f))
    if pool.size == 0:
        raise ValueError("fit_chinchilla: the objective is non-finite from every start")
    # polish the best n_polish end points (distinct basins may differ by < the coarse ftol)
    top = pool[np.argsort(res.f[pool])[:n_polish]]
    pol = minimize_huber_lse(x.lP, x.lD, x.lL, res.x[top], W=x.w, max_iter=2 * max_iter, tol=FINE_TOL, **x.opts)
    j = int(np.argmin(np.where(np.isfinite(pol.f), pol.f, np.inf)))
    best = int(top[j])
    converged = bool(ok[best]) and bool(pol.converged[j])
    failure = "" if converged else (STATUS[int(res.status[best])] if not ok[best] else STATUS[int(pol.status[j])])
    log.info("fit_chinchilla: best of %d starts (#%d), objective %.10g, %d converged",
             len(x.starts), best, float(pol.f[j]), int(ok.sum()))
    return _Point(pol.x[j], float(pol.f[j]), converged, best, int(ok.sum()), STATUS[int(pol.status[j])], failure)


def _diagnose(x: _Inputs, pt: _Point, warnings: list[str]) -> tuple[bool, bool]:
    """(converged, identified) of the point fit, each problem recorded in ``warnings``.

    L_inf is *identified* unless its log ran off towards -inf (below ``L_INF_COLLAPSE`` x the
    smallest observed loss) or an exponent is non-positive (the law does not decrease)."""
    converged = pt.converged
    if not converged:
        emit(warnings, f"fit_chinchilla: no start converged; the best start ended with '{pt.failure}'", warn=True)
    if np.allclose(pt.theta, x.starts[pt.best], rtol=0, atol=1e-12):
        converged = False
        emit(warnings, "fit_chinchilla: the optimiser never left its starting point", warn=True)
    _, _, e, al, be = pt.theta
    identified = True
    if al <= 0 or be <= 0:
        identified = False
        emit(warnings, f"fit_chinchilla: non-positive exponent (alpha={al:.4g}, beta={be:.4g}); "
                       "the law is not decreasing")
    if math.exp(e) < L_INF_COLLAPSE * float(np.exp(x.lL.min())):
        identified = False
        emit(warnings, f"fit_chinchilla: L_inf collapsed to {math.exp(e):.3g} (< {L_INF_COLLAPSE:g} x the smallest "
                       "observed loss); the irreducible loss is not identified by these points")
    return converged, identified


def _replicates(x: _Inputs, theta: np.ndarray, spec: Bootstrap, *, max_iter: int,
                warnings: list[str]) -> tuple[np.ndarray | None, dict, int]:
    """(draws of theta, percentile intervals, replicates kept): every replicate refitted
    together, warm-started from the point estimate."""
    if spec.n_boot <= 0:
        return None, {}, 0
    fitted = log_pred(theta[None, :], x.lP, x.lD)[0]
    Y, W = spec.resampler().replicates(x.lL, fitted, 5, weights=x.w)
    br = minimize_huber_lse(x.lP, x.lD, Y, np.broadcast_to(theta, (spec.n_boot, 5)), W=W,
                            max_iter=max_iter, tol=BOOT_TOL, **x.opts)
    good = br.converged & np.isfinite(br.x).all(axis=1)
    n_ok = int(good.sum())
    if n_ok < 0.99 * spec.n_boot:
        emit(warnings, f"bootstrap: {spec.n_boot - n_ok} of {spec.n_boot} replicates did not converge and were dropped")
    boot = br.x[good]
    draws = {
        "a": boot[:, 0], "b": boot[:, 1], "e": boot[:, 2], "alpha": boot[:, 3], "beta": boot[:, 4],
        "L_inf": np.exp(boot[:, 2]), "A_P": np.exp(boot[:, 0]), "A_D": np.exp(boot[:, 1]),
        "alpha_D": boot[:, 3] / (boot[:, 3] + boot[:, 4]),
    }
    return boot, spec.intervals(draws), n_ok


def fit_chinchilla(
    params,
    tokens,
    loss,
    *,
    delta: float = 1e-3,
    grid: Literal["epoch", "coarse"] | np.ndarray = "epoch",
    n_boot: int = DEFAULT_N_BOOT,
    bootstrap: Literal["residual", "pairs", "cluster"] = "residual",
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
    max_iter: int = 1000,
    n_polish: int = 20,
    smooth: bool = True,
    weights=None,
    overestimate_penalty: float = 1.0,
    bound_L_inf: bool = False,
    groups=None,
) -> ChinchillaFit:
    """Fit Eq. 27 to (P_i, D_i, L_i) by minimising the summed Huber loss of Eq. 28.

    Every start of ``grid`` (default: the 4,500-start Hoffmann/Epoch grid; ``"coarse"``:
    243 starts; or an (S, 5) array of (a, b, e, alpha, beta)) is minimised; the lowest
    objective among converged starts wins. All starts run to scipy L-BFGS-B's default
    stopping rule; the best ``n_polish`` end points are then refined to machine precision.
    Bootstrap replicates (``n_boot``, ``bootstrap.Bootstrap``) are refitted together,
    warm-started from the point estimate, and give percentile intervals. ``"residual"``
    (default, the paper's) resamples log residuals; with ``smooth`` a small variance-preserving
    Gaussian kernel is added to each draw, because with delta far below the noise the Huber
    fit behaves like least absolute deviations, whose plain residual bootstrap under-covers
    (De Angelis, Hall & Young 1993). ``"pairs"`` resamples points (Epoch's choice);
    ``"cluster"`` resamples whole ``groups`` (e.g. ``run_id``: the checkpoints of one run are
    not independent).

    Options from the ladder literature: ``weights`` (n,) multiply each point's Huber term
    (e.g. inverse seed variance); ``overestimate_penalty`` k >= 1 multiplies the terms where
    the fit predicts a higher loss than observed; ``bound_L_inf`` constrains
    L_inf <= min(loss) (a smooth reparameterisation, so BFGS stays unconstrained).
    """
    x = _check(params, tokens, loss, delta=delta, weights=weights, overestimate_penalty=overestimate_penalty,
               bound_L_inf=bound_L_inf, grid=grid)
    spec = Bootstrap(n_boot=n_boot, kind=bootstrap, level=check_level(level), seed=seed, groups=groups,
                     smooth=smooth and bootstrap == "residual").checked(x.n, "fit_chinchilla")
    pt = _point_fit(x, max_iter=max_iter, n_polish=n_polish)
    warnings: list[str] = []
    converged, identified = _diagnose(x, pt, warnings)
    boot, ci, n_ok = _replicates(x, pt.theta, spec, max_iter=max_iter, warnings=warnings)
    a, b, e, al, be = pt.theta
    return ChinchillaFit(
        L_inf=float(np.exp(e)), A_P=float(np.exp(a)), A_D=float(np.exp(b)), alpha=float(al), beta=float(be),
        objective=pt.objective, converged=converged, n=x.n, huber_delta=float(delta), n_starts=int(len(x.starts)),
        n_converged_starts=pt.n_ok, best_start=tuple(float(v) for v in x.starts[pt.best]),
        best_start_index=pt.best, status=pt.status, ci=ci, level=spec.level, bootstrap=bootstrap, n_boot_ok=n_ok,
        warnings=tuple(warnings), overestimate_penalty=float(overestimate_penalty), L_inf_bounded=bool(bound_L_inf),
        weighted=x.w is not None, identified=identified, boot=boot,
        resid=x.lL - log_pred(pt.theta[None, :], x.lP, x.lD)[0],
    )
