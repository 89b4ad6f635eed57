"""Batched BFGS: many small independent minimisations advanced together in numpy.

One call minimises S problems of dimension k at once (the 4,500 starts of the Epoch grid,
or 10,000 bootstrap replicates warm-started from the point estimate). Each iteration makes
one vectorised objective+gradient call over the still-active rows, so the per-problem cost
is a few array operations rather than a Python-level scipy call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

# fun(X, rows) -> (f, g): X is (m, k) points for problems ``rows`` (m,), f (m,), g (m, k)
Objective = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]

STATUS = {0: "converged (gradient)", 1: "converged (no further decrease)", 2: "max iterations", 3: "line search failed", 4: "non-finite"}
# scipy L-BFGS-B's default stopping rule (factr 1e7 -> ftol 2.2e-9 on max(|f|, 1); pgtol 1e-5): start grids
COARSE_TOL = dict(gtol=1e-5, ftol=2.2e-9, fscale=1.0)


def chunked(evaluate: Objective, Z: np.ndarray, rows: np.ndarray, chunk: int = 64):
    """``evaluate(Z, rows) -> (f, g)`` in row blocks of ``chunk`` (the temporaries stay in cache)."""
    if len(Z) <= chunk:
        return evaluate(Z, rows)
    parts = [evaluate(Z[i : i + chunk], rows[i : i + chunk]) for i in range(0, len(Z), chunk)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


@dataclass
class BatchResult:
    x: np.ndarray  # (S, k)
    f: np.ndarray  # (S,)
    g: np.ndarray  # (S, k)
    n_iter: np.ndarray  # (S,)
    status: np.ndarray  # (S,) codes of STATUS

    @property
    def converged(self) -> np.ndarray:
        return self.status <= 1


def _direction(H, g, first, act, eye):
    """Quasi-Newton directions -H g of the active rows, reset to steepest descent (and a step
    capped at 1 in x on a fresh start) where -H g is not a descent direction."""
    ga = g[act]
    p = -np.einsum("sij,sj->si", H[act], ga)
    gp = (ga * p).sum(axis=1)
    reset = ~(gp < 0)
    if reset.any():  # not a descent direction: restart from steepest descent
        H[act[reset]] = eye
        first[act[reset]] = True
        p[reset] = -ga[reset]
        gp[reset] = -(ga[reset] ** 2).sum(axis=1)
    t = np.ones(act.size)
    fst = first[act]
    if fst.any():  # first step of steepest descent: cap the step length at 1 in x
        t[fst] = np.minimum(1.0, 1.0 / np.maximum(np.abs(p[fst]).max(axis=1), 1e-300))
    return p, gp, t


def _line_search(fun, x, f, act, p, gp, t, *, max_ls, c1):
    """Backtracking Armijo search on every active row: (f_new, g_new, t, failed)."""
    f_new = np.full(act.size, np.nan)
    g_new = np.zeros_like(p)
    pend = np.arange(act.size)
    for _ls in range(max_ls):
        xt = x[act[pend]] + t[pend, None] * p[pend]
        ft, gt = fun(xt, act[pend])
        ok = np.isfinite(ft) & (ft <= f[act[pend]] + c1 * t[pend] * gp[pend]) & np.isfinite(gt).all(axis=1)
        f_new[pend[ok]] = ft[ok]
        g_new[pend[ok]] = gt[ok]
        pend = pend[~ok]
        if pend.size == 0:
            break
        t[pend] *= 0.5
    failed = np.zeros(act.size, bool)
    failed[pend] = True
    return f_new, g_new, t, failed


def _bfgs_update(H, first, iu, su, yu, sy, eye):
    """Inverse-Hessian BFGS update of rows ``iu`` (Nocedal & Wright eq. 6.17), with the
    initial matrix scaled by (6.20) on a row's first update."""
    rho = 1.0 / sy
    fu = first[iu]
    if fu.any():  # Nocedal & Wright (6.20): scale the initial inverse Hessian
        scale = sy[fu] / (yu[fu] ** 2).sum(axis=1)
        H[iu[fu]] = eye[None] * scale[:, None, None]
        first[iu[fu]] = False
    V = eye[None] - rho[:, None, None] * su[:, :, None] * yu[:, None, :]
    H[iu] = V @ H[iu] @ V.transpose(0, 2, 1) + rho[:, None, None] * su[:, :, None] * su[:, None, :]


def _finish(status, f, g, gtol):
    """Rows still running hit max_iter (2). A failed line search at a point whose gradient is
    already negligible is convergence at machine precision, not a failure (3 -> 0)."""
    status[status < 0] = 2
    stuck = status == 3
    if stuck.any():
        gmax = np.abs(g[stuck]).max(axis=1)
        scale = np.maximum(np.abs(f[stuck]), 1e-300)
        status[np.flatnonzero(stuck)[gmax <= np.sqrt(gtol) * np.maximum(scale, 1.0)]] = 0
    return status


def batched_bfgs(
    fun: Objective,
    x0: np.ndarray,
    *,
    gtol: float = 1e-10,
    ftol: float = 1e-13,
    fscale: float = 1e-300,
    max_iter: int = 1000,
    max_ls: int = 40,
    c1: float = 1e-4,
) -> BatchResult:
    """Minimise S independent smooth objectives with BFGS + backtracking Armijo search.

    A row stops when its largest gradient entry is below ``gtol`` (status 0), when two
    successive accepted steps each lower f by less than ``ftol * max(|f|, fscale)``
    (status 1), after ``max_iter`` iterations (2), when the line search finds no decrease
    (3; at a point of machine-precision stationarity this is how BFGS ends, so rows whose
    gradient is already tiny there count as converged by gradient), or on non-finite values (4).
    """
    x = np.array(x0, dtype=float, copy=True)
    S, k = x.shape
    f, g = fun(x, np.arange(S))
    g = np.array(g)
    H = np.broadcast_to(np.eye(k), (S, k, k)).copy()
    first = np.ones(S, bool)
    slow, n_iter, status = np.zeros(S, int), np.zeros(S, int), np.full(S, -1)
    status[~np.isfinite(f) | ~np.isfinite(g).all(axis=1)] = 4
    status[(status < 0) & (np.abs(g).max(axis=1) <= gtol)] = 0
    eye = np.eye(k)
    for _ in range(max_iter):
        act = np.flatnonzero(status < 0)
        if act.size == 0:
            break
        n_iter[act] += 1
        p, gp, t = _direction(H, g, first, act, eye)
        f_new, g_new, t, failed = _line_search(fun, x, f, act, p, gp, t, max_ls=max_ls, c1=c1)
        status[act[failed]] = 3
        good = ~failed
        ag = act[good]
        s = t[good, None] * p[good]
        yv = g_new[good] - g[ag]
        df = f[ag] - f_new[good]
        x[ag] += s
        f[ag] = f_new[good]
        g[ag] = g_new[good]
        sy = (s * yv).sum(axis=1)
        upd = sy > 1e-300 + 1e-12 * np.sqrt((s * s).sum(axis=1) * (yv * yv).sum(axis=1))
        if upd.any():
            _bfgs_update(H, first, ag[upd], s[upd], yv[upd], sy[upd], eye)
        tiny = df <= ftol * np.maximum(np.abs(f[ag]), fscale)
        slow[ag] = np.where(tiny, slow[ag] + 1, 0)
        status[ag[slow[ag] >= 2]] = 1
        status[ag[np.abs(g[ag]).max(axis=1) <= gtol]] = 0
    return BatchResult(x=x, f=f, g=g, n_iter=n_iter, status=_finish(status, f, g, gtol))
