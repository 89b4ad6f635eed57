"""The joint Chinchilla law L(P, D) = L_inf + A_P/P^alpha + A_D/D^beta (paper Eqs. 27-28): its
objective, a law on the one engine (``engine``), the fit (check -> multistart -> bootstrap ->
result) and its status.

The objective: Huber loss (delta = 1e-3) on log residuals, *summed* over points (an averaged loss
makes L-BFGS-B stop early), in the log-sum-exp parameterisation of Hoffmann et al. / Epoch:
log L = LSE(a - alpha log P, b - beta log D, e) with A_P = e^a, A_D = e^b, L_inf = e^e, with
analytic gradients (:class:`HuberLSE`, brought by :class:`ChinchillaLaw`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ._base import (DEFAULT_LEVEL, DEFAULT_N_BOOT, FitFields, FitStatus, check_duplicates, check_points,
    check_weights, emit, fmt_ci, from_options, log)
from .bootstrap import Bootstrap
from .engine import STATUS, bootstrap_law, chunked, multistart
from interpscale.errors import UserError

# ---- the objective (Eq. 28) and the law ----

def epoch_grid() -> np.ndarray:
    """Hoffmann/Epoch initialisation grid, 4,500 (a, b, e, alpha, beta) rows: alpha, beta in
    {0, 0.5, ..., 2}; e in {-1, -0.5, ..., 1}; a, b in {0, 5, ..., 25}."""
    ab, e, al = np.linspace(0.0, 25.0, 6), np.linspace(-1.0, 1.0, 5), np.linspace(0.0, 2.0, 5)
    return np.array(list(itertools.product(al, al, e, ab, ab)))[:, [3, 4, 2, 0, 1]]  # alpha-major rows


def coarse_grid() -> np.ndarray:
    """A 243-start grid (three values per parameter) for quick fits."""
    vals = ([0.0, 10.0, 20.0], [0.0, 10.0, 20.0], [-1.0, 0.0, 1.0], [0.25, 0.75, 1.5], [0.25, 0.75, 1.5])
    return np.array(list(itertools.product(*vals)), dtype=float)


def log_pred(theta: np.ndarray, lP: np.ndarray, lD: np.ndarray) -> np.ndarray:
    """log L-hat for rows of theta = (a, b, e, alpha, beta): shape (S, n)."""
    a, b, e, al, be = (theta[:, i : i + 1] for i in range(5))
    return np.logaddexp(np.logaddexp(a - al * lP[None, :], b - be * lD[None, :]), e)


class HuberLSE:
    """Summed Huber objective (Eq. 28) and its analytic gradient, batched over rows. The exponent
    terms are centred internally (a' = a - alpha*mean(log P), likewise b): the minimisers stay,
    the Hessian is far better conditioned for BFGS."""

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

    def __call__(self, Z, rows):
        return chunked(self._eval, Z, rows)

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


class ChinchillaLaw:
    """The joint law (Eq. 27) as a law of the one engine (``engine``): theta = (a, b, e, alpha,
    beta), inputs X = (log P, log D). It brings its own fused objective (:class:`HuberLSE`, Eq. 28)
    and its log-scale fitted values, and the engine's multistart and bootstrap do the rest."""

    names = ("a", "b", "e", "alpha", "beta")
    fit_tol = dict(gtol=1e-11, ftol=1e-13, fscale=1e-300)  # polish: machine precision
    boot_tol = dict(gtol=1e-8, ftol=1e-10, fscale=1e-300)  # replicates: warm-started, moderate

    def __init__(self, *, overestimate: float = 1.0, e_max: float | None = None):
        self.overestimate, self.e_max = overestimate, e_max

    def model(self, theta, X):
        """L-hat (S, n) and its Jacobian (S, n, 5) for rows of theta."""
        lP, lD = X
        a, b, e, al, be = (theta[:, i : i + 1] for i in range(5))
        t1, t2 = np.exp(a - al * lP[None, :]), np.exp(b - be * lD[None, :])
        t3 = np.broadcast_to(np.exp(e), t1.shape)
        J = np.stack([t1, t2, t3, -lP[None, :] * t1, -lD[None, :] * t2], axis=-1)
        return t1 + t2 + t3, J

    def fitted(self, theta, X):
        """log L-hat at one theta (the objective's scale), by log-sum-exp."""
        return log_pred(np.asarray(theta, float)[None, :], *X)[0]

    def objective(self, X, T, W, loss, delta):
        if loss != "huber_log":
            raise ValueError(f"the joint law is fitted with the huber_log objective (Eq. 28), got {loss!r}")
        return HuberLSE(X[0], X[1], T, W, delta, overestimate=self.overestimate, e_max=self.e_max)


# ---- the fit (Eq. 27) and its result ----

@dataclass(frozen=True)
class ChinchillaFit(FitFields):
    """Result of the joint fit (Eq. 27); ``A_P``/``A_D`` are Epoch's ``A``/``B``, ``L_inf`` is ``E``;
    ``boot``: the bootstrap draws of (a, b, e, alpha, beta); ``resid``: log L - log L-hat."""

    L_inf: float
    A_P: float
    A_D: float
    alpha: float
    beta: float
    objective: float
    n: int
    huber_delta: float = 1e-3
    n_starts: int = 1
    n_converged_starts: int = 1
    best_start: tuple[float, ...] = ()
    best_start_index: int = 0
    optimizer: str = ""  # how the optimiser ended (``engine.STATUS``)
    bootstrap: str = "residual"
    n_boot_ok: int = 0
    overestimate_penalty: float = 1.0
    L_inf_bounded: bool = False
    weighted: bool = False
    min_loss: float = math.nan  # the smallest observed loss (what a collapsed L_inf is measured against)
    _derived = ("alpha_D", "alpha_P")

    @property
    def identified(self) -> bool:
        """L_inf pinned down, both exponents positive and the optimiser converged (``status``)."""
        return self.status.identified

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
        """(a, b, e, alpha, beta) in the log-sum-exp parameterisation; a coefficient that underflowed to 0
        gives -inf (not an error: a design's warm starts keep only finite thetas)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            logs = np.log(np.array([self.A_P, self.A_D, self.L_inf], dtype=float))
        return np.array([*logs, self.alpha, self.beta])

    def predict(self, params, tokens) -> np.ndarray:
        """L(P, D) of Eq. 27."""
        P, D = np.asarray(params, float), np.asarray(tokens, float)
        return self.L_inf + self.A_P / P**self.alpha + self.A_D / D**self.beta

    def optimal_allocation(self, compute, flops_per_token_per_param: float = 6.0):
        """(P_opt, D_opt) minimising Eq. 27 under C = k P D (k = 6 by default; ``optimal_allocation``)."""
        return optimal_allocation(self.theta[None, :], np.asarray(compute, float), flops_per_token_per_param)

    def predict_optimal(self, compute, flops_per_token_per_param: float = 6.0) -> np.ndarray:
        """Compute-optimal loss L(P_opt(C), D_opt(C))."""
        P, D = self.optimal_allocation(compute, flops_per_token_per_param)
        return self.predict(P, D)

    def band(self, params, tokens, level: float | None = None):
        """Bootstrap percentile band (lo, hi) of L(P, D) at the given points."""
        P, D = np.broadcast_arrays(np.asarray(params, float), np.asarray(tokens, float))
        lP, lD = np.log(P.ravel()), np.log(D.ravel())
        return self._band(lambda th: np.exp(log_pred(th, lP, lD)), P.shape, level, lambda: self.predict(P, D))

    def band_optimal(self, compute, level: float | None = None, flops_per_token_per_param: float = 6.0):
        """Bootstrap band of the compute-optimal loss curve (each replicate at its own optimum)."""
        C = np.atleast_1d(np.asarray(compute, float))
        return self._band(lambda th: optimal_loss(th, C, flops_per_token_per_param), np.shape(compute), level,
                          lambda: self.predict_optimal(C, flops_per_token_per_param))

    def predict_interval(self, params, tokens, level: float | None = None, *, seed: int = 0):
        """Prediction interval (lo, hi) for a *new observed* loss at (P, D): bootstrap curves plus
        resampled residual noise (``band`` covers the curve only and is narrower)."""
        P, D = np.broadcast_arrays(np.asarray(params, float), np.asarray(tokens, float))
        lP, lD = np.log(P.ravel()), np.log(D.ravel())
        return self._interval(lambda th: log_pred(th, lP, lD), self.theta, P.shape, level, seed=seed, n_params=5,
                              back=np.exp)

    def predict_interval_optimal(self, compute, level: float | None = None, flops_per_token_per_param: float = 6.0,
                                 *, seed: int = 0):
        """Prediction interval of a new run's loss at the compute-optimal allocation of ``compute``."""
        C, k = np.atleast_1d(np.asarray(compute, float)), flops_per_token_per_param
        return self._interval(lambda th: np.log(optimal_loss(th, C, k)), self.theta, np.shape(compute), level,
                              seed=seed, n_params=5, back=np.exp)

    def _lines(self) -> list[str]:
        lines = [
            f"joint Chinchilla fit L = L_inf + A_P/P^alpha + A_D/D^beta   (n = {self.n}, "
            f"Huber delta = {self.huber_delta:g}, objective = {self.objective:.10f})",
            f"  converged: {self.converged} ({self.optimizer}); best of {self.n_starts} starts "
            f"(#{self.best_start_index}, {self.n_converged_starts} converged); {round(100 * self.level)}% "
            f"CI, {self.bootstrap} bootstrap ({self.n_boot_ok} replicates)",
        ]
        opts = [o for o, on in (("per-point weights", self.weighted), ("L_inf <= min(loss)", self.L_inf_bounded),
                                (f"over-estimate penalty x{self.overestimate_penalty:g}", self.overestimate_penalty != 1.0)) if on]
        if opts:
            lines.append("  options: " + ", ".join(opts))
        lines += [f"  {k:<8}{fmt_ci(getattr(self, k), self.ci.get(k), 4)}"
                  for k in ("L_inf", "alpha", "beta", "alpha_D")]
        for name in ("A_P", "A_D"):
            lo, hi = self.ci.get(name, (math.nan, math.nan))
            lines.append(f"  {name:<8}{getattr(self, name):.5g} [{lo:.5g}, {hi:.5g}]")
        return lines


def optimal_allocation(theta: np.ndarray, compute, k: float = 6.0):
    """(P_opt, D_opt) of Eq. 27 under C = k P D for rows of theta = (a, b, e, alpha, beta)
    (Hoffmann et al. 2022, App. D.2): P_opt = G (C/k)^(beta/(alpha+beta)), D_opt = (C/k) / P_opt,
    G = (alpha A_P / (beta A_D))^(1/(alpha+beta)). One row gives arrays shaped like ``compute``;
    S rows give (S, m) arrays (``compute`` (m,), or (S, m): one set of computes per row)."""
    theta = np.atleast_2d(np.asarray(theta, float))
    C = np.asarray(compute, float)
    a, b, _, al, be = (theta[:, i : i + 1] for i in range(5))
    CK = (C if C.ndim == 2 else np.atleast_1d(C)[None, :]) / k
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # non-positive exponents -> nan
        G = np.exp((np.log(al * np.exp(a - b) / be)) / (al + be))
        P = G * CK ** (be / (al + be))
    D = CK / P
    if theta.shape[0] == 1:
        return P[0].reshape(np.shape(C)), D[0].reshape(np.shape(C))
    return P, D


def optimal_loss(theta: np.ndarray, compute: np.ndarray, k: float = 6.0) -> np.ndarray:
    """(S, m) Eq. 27 losses of the rows of theta at their own compute-optimal allocation of ``compute``."""
    P, D = (np.atleast_2d(v) for v in optimal_allocation(theta, compute, k))
    a, b, e, al, be = (theta[:, i : i + 1] for i in range(5))
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return np.exp(e) + np.exp(a) / P**al + np.exp(b) / D**be


# L_inf below this fraction of the smallest observed loss is reported as not identified
L_INF_COLLAPSE = 0.01


@dataclass(frozen=True)
class _Inputs:
    """Checked inputs of one joint fit: logs of the points, weights, starts, the law and its Huber delta."""

    lP: np.ndarray
    lD: np.ndarray
    lL: np.ndarray
    w: np.ndarray | None
    starts: np.ndarray
    law: ChinchillaLaw
    delta: float


def _check(params, tokens, loss, *, delta, weights, overestimate_penalty, bound_L_inf, grid) -> _Inputs:
    """Validated logs, per-point weights and start grid (ValueError naming the bad input)."""
    P, D, L = check_points({"params": params, "tokens": tokens, "loss": loss}, 6,
                           "fit_chinchilla (5 free parameters)")
    check_duplicates({"params": P, "tokens": D, "loss": L}, "fit_chinchilla")
    if not delta > 0:
        raise UserError(f"delta must be positive, got {delta}")
    if np.ptp(np.log(P)) == 0 or np.ptp(np.log(D)) == 0:
        raise UserError("params/tokens: need at least two distinct values of each")
    w = check_weights(weights, L.size)
    if not overestimate_penalty >= 1.0:
        raise UserError(f"overestimate_penalty must be >= 1, got {overestimate_penalty}")
    e_max = float(np.log(L.min())) if bound_L_inf else None
    starts = {"epoch": epoch_grid, "coarse": coarse_grid}[grid]() if isinstance(grid, str) else np.asarray(grid, float)
    if starts.ndim != 2 or starts.shape[1] != 5:
        raise UserError(f"grid: expected an (S, 5) array of (a, b, e, alpha, beta), got shape {starts.shape}")
    if e_max is not None:
        starts = starts.copy()
        starts[:, 2] = np.minimum(starts[:, 2], e_max - 1e-3)  # what the optimiser starts from
    law = ChinchillaLaw(overestimate=overestimate_penalty, e_max=e_max)
    return _Inputs(np.log(P), np.log(D), np.log(L), w, starts, law, delta)


def _point_fit(x: _Inputs, warnings: list[str], *, max_iter: int, n_polish: int):
    """(theta, objective, converged, best start, starts converged, status) of the engine's multistart;
    failures in ``warnings``."""
    ms = multistart(x.law, (x.lP, x.lD), x.lL, x.starts, loss="huber_log", delta=x.delta, W=x.w,
                    n_polish=n_polish, max_iter=max_iter, polish_iter=2 * max_iter, polish_tol=x.law.fit_tol,
                    pool="converged", what="fit_chinchilla")
    ok = ms.grid.converged & np.isfinite(ms.grid.f)
    best, converged = ms.best, bool(ok[ms.best]) and ms.converged  # the start's own run and its polish
    log.info("fit_chinchilla: best of %d starts (#%d), objective %.10g, %d converged",
             len(x.starts), best, ms.objective, int(ok.sum()))
    if not converged:
        failure = STATUS[int(ms.grid.status[best])] if not ok[best] else STATUS[ms.code]
        emit(warnings, f"fit_chinchilla: no start converged; the best start ended with '{failure}'",
             warn=True)
    if np.allclose(ms.theta, x.starts[best], rtol=0, atol=1e-12):
        converged = False
        emit(warnings, "fit_chinchilla: the optimiser never left its starting point", warn=True)
    return ms.theta, ms.objective, converged, best, int(ok.sum()), STATUS[ms.code]


def _point_flags(alpha: float, beta: float, L_inf: float, min_loss: float) -> list[str]:
    """Why the point estimate does not identify Eq. 27: an exponent is non-positive (the law does not
    decrease) or L_inf collapsed (below ``L_INF_COLLAPSE`` x the smallest observed loss, ``min_loss``)."""
    flags = []
    if not (alpha > 0 and beta > 0):
        flags.append(f"not identified: non-positive exponent (α={alpha:.3g}, β={beta:.3g}): the law is not "
                     "decreasing")
    if L_inf < L_INF_COLLAPSE * min_loss:
        flags.append(f"not identified: L∞ collapsed to its bound 0 ({L_inf:.3g} < {L_INF_COLLAPSE:g} × the "
                     "smallest observed loss); the points do not pin down the irreducible loss")
    return flags


def joint_status(fit) -> FitStatus:
    """The status of a joint fit (Eq. 27), from its fields: ``failed`` when the optimiser did not
    converge; ``flagged`` by :func:`_point_flags` or when the lower end of the interval of L_inf
    reaches below ``L_INF_COLLAPSE`` x the estimate (not identified)."""
    min_loss = getattr(fit, "min_loss", math.nan)
    flags = _point_flags(fit.alpha, fit.beta, fit.L_inf, min_loss)
    lo = (fit.ci or {}).get("L_inf", (math.nan, math.nan))[0]
    if not fit.L_inf < L_INF_COLLAPSE * min_loss and np.isfinite(lo) and lo < L_INF_COLLAPSE * fit.L_inf:
        flags.append(f"not identified: the {fit.level:.0%} interval of L∞ reaches down to {lo:.3g} "
                     f"(< {L_INF_COLLAPSE:g} × the estimate {fit.L_inf:.3g})")
    return FitStatus.decide(fit.converged, flags, getattr(fit, "optimizer", ""))


def _replicates(x: _Inputs, theta: np.ndarray, spec: Bootstrap, *, max_iter: int,
                warnings: list[str]) -> tuple[np.ndarray | None, dict, int]:
    """(draws of theta, percentile intervals, replicates kept): the engine's bootstrap, every
    replicate refitted together, warm-started from the point estimate."""
    if spec.n_boot <= 0:
        return None, {}, 0
    boot, n_ok, msgs = bootstrap_law(x.law, (x.lP, x.lD), x.lL, theta, spec, loss="huber_log", delta=x.delta,
                                     weights=x.w, max_iter=max_iter, tol=x.law.boot_tol)
    for msg in msgs:
        emit(warnings, msg)
    a, b, e, al, be = boot.T
    draws = dict(a=a, b=b, e=e, alpha=al, beta=be, L_inf=np.exp(e), A_P=np.exp(a), A_D=np.exp(b),
                 alpha_D=al / (al + be))
    return boot, spec.intervals(draws), n_ok


def fit_chinchilla(params, tokens, loss, *, delta: float = 1e-3,
                   grid: Literal["epoch", "coarse"] | np.ndarray = "epoch", n_boot: int = DEFAULT_N_BOOT,
                   bootstrap: Literal["residual", "pairs", "cluster"] = "residual",
                   level: float = DEFAULT_LEVEL, seed: int = 0, max_iter: int = 1000, n_polish: int = 20,
                   smooth: bool = True, weights=None, overestimate_penalty: float = 1.0,
                   bound_L_inf: bool = False, groups=None, options=None) -> ChinchillaFit:
    """Fit Eq. 27 to (P_i, D_i, L_i) by minimising the summed Huber loss of Eq. 28 (docs/laws.md).

    Every start of ``grid`` (the 4,500-start Hoffmann/Epoch grid; ``"coarse"``: 243 starts; or an
    (S, 5) array of (a, b, e, alpha, beta)) runs to scipy L-BFGS-B's default stopping rule, the best
    ``n_polish`` end points to machine precision. ``"residual"`` bootstrap (the paper's) with
    ``smooth``: a small Gaussian kernel (with delta far below the noise the Huber fit acts like least
    absolute deviations, whose plain residual bootstrap under-covers; De Angelis, Hall & Young 1993);
    ``"pairs"``: Epoch's choice; ``"cluster"``: whole ``groups`` (e.g. the checkpoints of one run).
    Ladder-literature options: ``weights`` multiply each point's Huber term; ``overestimate_penalty``
    k >= 1 the terms where the fit over-predicts; ``bound_L_inf`` keeps L_inf <= min(loss) (smoothly)."""
    n_boot, level, seed, grid = from_options(options, dict(n_boot=n_boot, level=level, seed=seed, grid=grid),
                                             fit_chinchilla).values()
    x = _check(params, tokens, loss, delta=delta, weights=weights, overestimate_penalty=overestimate_penalty,
               bound_L_inf=bound_L_inf, grid=grid)
    spec = Bootstrap(n_boot=n_boot, kind=bootstrap, level=level, seed=seed, groups=groups,
                     smooth=smooth and bootstrap == "residual").checked(x.lL.size, "fit_chinchilla")
    warnings: list[str] = []
    theta, objective, converged, best, n_ok_starts, status = _point_fit(x, warnings, max_iter=max_iter,
                                                                        n_polish=n_polish)
    a, b, e, al, be = theta
    min_loss = float(np.exp(x.lL.min()))
    for flag in _point_flags(al, be, math.exp(e), min_loss):  # logged; the status says it again
        emit(warnings, f"fit_chinchilla: {flag}")
    boot, ci, n_ok = _replicates(x, theta, spec, max_iter=max_iter, warnings=warnings)
    fit = ChinchillaFit(
        L_inf=float(np.exp(e)), A_P=float(np.exp(a)), A_D=float(np.exp(b)), alpha=float(al), beta=float(be),
        objective=objective, converged=converged, n=x.lL.size, huber_delta=float(delta),
        n_starts=len(x.starts), n_converged_starts=n_ok_starts, best_start=tuple(map(float, x.starts[best])),
        best_start_index=best, optimizer=status, ci=ci, level=spec.level, bootstrap=bootstrap, n_boot_ok=n_ok,
        warnings=tuple(warnings), overestimate_penalty=float(overestimate_penalty),
        L_inf_bounded=bool(bound_L_inf), weighted=x.w is not None, boot=boot, min_loss=min_loss,
        resid=x.lL - log_pred(theta[None, :], x.lP, x.lD)[0],
    )
    return dataclasses.replace(fit, status=joint_status(fit))
