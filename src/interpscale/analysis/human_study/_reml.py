"""REML for a linear model with crossed random intercepts (fast engine of fit_gaussian_mixed).

lme4-style profiled criterion: with relative variances gamma_g = s2_g / s2_e and
L = diag(sqrt(gamma)) over all levels, the scaled mixed-model matrix
C = [[X'X, X'Z L], [L Z'X, L Z'Z L + I]] gives
-2 l_R = log|C| + (n - p) (1 + log(2 pi pRSS / (n - p))), pRSS = y'y - b'C^{-1}b,
with b = [X'y, L Z'y]. Each evaluation is one Cholesky of a (p + levels) square matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import linalg, optimize


@dataclass(frozen=True)
class RemlFit:
    beta: np.ndarray
    cov_beta: np.ndarray
    variances: np.ndarray  # one per random factor
    residual: float
    converged: bool
    neg2_reml: float


def fit_reml(y: np.ndarray, X: np.ndarray, group_codes: list[np.ndarray]) -> RemlFit:
    # hundreds of small Cholesky factorisations: threaded BLAS only adds contention (10x here)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - optional
        from contextlib import nullcontext as threadpool_limits
    with threadpool_limits(1):
        return _fit_reml(y, X, group_codes)


def _fit_reml(y: np.ndarray, X: np.ndarray, group_codes: list[np.ndarray]) -> RemlFit:
    n, p = X.shape
    sizes = [int(c.max()) + 1 for c in group_codes]
    Z = np.zeros((n, sum(sizes)))
    offset = 0
    for c, k in zip(group_codes, sizes):
        Z[np.arange(n), offset + c] = 1.0
        offset += k
    which = np.repeat(np.arange(len(sizes)), sizes)  # factor of each level
    XtX, XtZ, ZtZ = X.T @ X, X.T @ Z, Z.T @ Z
    Xty, Zty, yty = X.T @ y, Z.T @ y, float(y @ y)

    def solve(log_gamma):
        lam = np.sqrt(np.exp(log_gamma))[which]
        C = np.block([[XtX, XtZ * lam], [(XtZ * lam).T, ZtZ * np.outer(lam, lam) + np.eye(len(lam))]])
        b = np.concatenate([Xty, lam * Zty])
        cf = linalg.cho_factor(C, lower=True, check_finite=False)
        sol = linalg.cho_solve(cf, b, check_finite=False)
        prss = max(yty - b @ sol, 1e-300)
        val = 2 * np.log(np.diag(cf[0])).sum() + (n - p) * (1 + np.log(2 * np.pi * prss / (n - p)))
        return val, sol, cf, prss

    def objective(log_gamma):
        try:
            return solve(log_gamma)[0]
        except (linalg.LinAlgError, ValueError):
            return np.inf

    bounds = [(np.log(1e-8), np.log(1e3))] * len(sizes)
    best = None
    for start in (-2.0, 0.0, -5.0):  # a few starts: crossed factors can have several optima
        res = optimize.minimize(objective, np.full(len(sizes), start), method="L-BFGS-B", bounds=bounds)
        if best is None or res.fun < best.fun - 1e-9:
            best = res
    val, sol, cf, prss = solve(best.x)
    s2 = prss / (n - p)
    cov = s2 * linalg.cho_solve(cf, np.eye(len(sol)), check_finite=False)[:p, :p]
    gamma = np.exp(best.x)
    return RemlFit(beta=sol[:p], cov_beta=cov, variances=gamma * s2, residual=float(s2),
                   converged=bool(best.success), neg2_reml=float(val))
