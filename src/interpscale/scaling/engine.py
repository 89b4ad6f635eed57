"""One multistart + bootstrap engine for every law on it (the joint law of Eqs. 27-28, the
published laws of docs/laws.md).

A *law* has ``names`` (its parameter vector theta) and ``model(theta, X) -> (yhat, J)``:
predictions (S, n) for S parameter rows at inputs X and their Jacobian (S, n, k); a law may bring
its own fused objective (``law.objective``, the joint law's Eq. 28). ``batched_bfgs`` advances S
independent minimisations together in numpy (one vectorised objective+gradient call per
iteration over the still-active rows): the starts of a grid (``multistart``) or the replicates of
a bootstrap (``bootstrap_law``, warm-started from the estimate), under ``"huber_log"``,
sum_i w_i Huber_delta(log yhat_i - log y_i) (Hoffmann et al. 2022), or ``"ls"``,
sum_i w_i (yhat_i - y_i)^2. A law fit ends in :func:`law_result`: replicates, intervals, a
frozen :class:`LawFit` with its ``status``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Protocol

import numpy as np

from ._base import FitFields, FitStatus, emit, flags_of, fmt_ci
from .bootstrap import Bootstrap, band_from_draws, curve_rows, dropped, resample_noise
from interpscale.errors import UserError

# ---- batched BFGS: many small minimisations advanced together ----

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


def batched_bfgs(fun: Objective, x0: np.ndarray, *, gtol: float = 1e-10, ftol: float = 1e-13,
                 fscale: float = 1e-300, max_iter: int = 1000, max_ls: int = 40,
                 c1: float = 1e-4) -> BatchResult:
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


# ---- least squares: weighted, batched, non-negative ----

def wls(X: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Weighted least squares of y on the columns of X, batched over broadcast leading axes (X (..., n, k),
    y (..., n), w (..., n) or None) -> (coefficients (..., k), weighted residual sum of squares (...)), by
    normal equations on unit-norm columns: an all-zero column gets 0, other rank-deficient fits nan."""
    X, y = np.asarray(X, float), np.asarray(y, float)
    k = X.shape[-1]
    if X.ndim == 2:  # one design for every row: the normal equations as matrix products
        W = np.ones(X.shape[0]) if w is None else np.asarray(w, float)
        A = (W @ (X[:, :, None] * X[:, None, :]).reshape(-1, k * k)).reshape(*W.shape[:-1], k, k)
        b = (W * y) @ X
    else:
        Xw = X if w is None else X * np.asarray(w, float)[..., None]
        A, b = np.swapaxes(Xw, -1, -2) @ X, (np.swapaxes(Xw, -1, -2) @ y[..., None])[..., 0]
    d = np.diagonal(A, axis1=-2, axis2=-1)
    s = np.where(d > 0, 1.0 / np.sqrt(np.where(d > 0, d, 1.0)), 0.0)
    As = A * s[..., :, None] * s[..., None, :] + np.eye(k) * (d <= 0)[..., None, :]
    bad = np.abs(np.linalg.det(As)) <= 1e-12
    As[bad] = np.eye(k)
    bs = (b * s)[..., None]
    coef = (np.linalg.inv(As) @ bs if As.ndim == 2 else np.linalg.solve(As, bs))[..., 0] * s
    coef[bad] = np.nan
    r = (coef @ X.T if X.ndim == 2 else (X @ coef[..., None])[..., 0]) - y
    return coef, (r * r if w is None else w * r * r).sum(axis=-1)


def nonneg_ls(A: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least squares with every coefficient >= 0 for each row of A (S, n, m) (m small): the best
    non-negative fit over every support of the columns, solved together (exact: the optimum is the
    unconstrained fit on its own support) -> (coefficients (S, m), residual sum of squares (S,))."""
    supports = np.array(list(itertools.product((0.0, 1.0), repeat=A.shape[-1])))
    c, r = wls(A[None] * supports[:, None, None, :], y)  # (supports, S, m), (supports, S)
    j = np.argmin(np.where((c >= 0).all(axis=-1), r, np.inf), axis=0)
    rows = np.arange(A.shape[0])
    return c[j, rows], r[j, rows]


class Projected:
    """A law y = sum_j c_j col_j(theta, X), c >= 0 solved inside the model (variable projection): a
    subclass gives ``columns(theta, X) -> (cols (S, n, m), dcols (S, n, m, k))``; inputs ``(X, y)``. The
    Jacobian leaves out dc/dtheta: at the non-negative optimum the residual is orthogonal to the free
    columns and the others stay at 0, so the summed-squares gradient (``loss="ls"``) is exact."""

    def coef(self, theta: np.ndarray, Xy) -> np.ndarray:
        return nonneg_ls(self.columns(np.atleast_2d(theta), Xy[0])[0], Xy[1])[0]

    def model(self, theta, Xy):
        cols, dcols = self.columns(theta, Xy[0])
        c = nonneg_ls(cols, Xy[1])[0]
        return np.einsum("snm,sm->sn", cols, c), np.einsum("snmk,sm->snk", dcols, c)


# ---- laws on the engine: objective, multistart, bootstrap, results ----

HUBER_DELTA = 1e-3  # Hoffmann et al. 2022 / Muennighoff et al. 2023 / Bhagia et al. 2024
LOSSES = ("huber_log", "ls")
RECIPES = ("authors", "robust")
FIT_TOL = dict(gtol=1e-11, ftol=1e-14, fscale=1e-300)
BOOT_TOL = dict(gtol=1e-9, ftol=1e-11, fscale=1e-300)


class Law(Protocol):
    names: tuple[str, ...]

    def model(self, theta: np.ndarray, X: Any) -> tuple[np.ndarray, np.ndarray]: ...


def huber(r: np.ndarray, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """Huber loss and its derivative: c (r - c/2) and c, with c = clip(r, -delta, delta)."""
    c = np.clip(r, -delta, delta)
    return c * (r - 0.5 * c), c


def check_recipe(recipe: str) -> str:
    if recipe not in RECIPES:
        raise UserError(f"recipe must be 'authors' or 'robust', got {recipe!r}")
    return recipe


def to_fit_scale(y: np.ndarray, loss: str) -> np.ndarray:
    return np.log(y) if loss == "huber_log" else np.asarray(y, float)


class LawObjective:
    """Batched objective and gradient of one law for ``batched_bfgs``: fun(Z, rows) -> (f, g)."""

    def __init__(self, law: Law, X: Any, T: np.ndarray, W: np.ndarray | None, loss: str, delta: float):
        if loss not in LOSSES:
            raise UserError(f"loss must be one of {LOSSES}, got {loss!r}")
        self.law, self.X, self.T, self.W, self.loss, self.delta = law, X, T, W, loss, delta

    def __call__(self, Z: np.ndarray, rows: np.ndarray):
        return chunked(self._eval, Z, rows)  # row blocks keep the (block, n, k) Jacobians in cache

    def _eval(self, Z: np.ndarray, rows: np.ndarray):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            yhat, J = self.law.model(Z, self.X)
            T = self.T if self.T.ndim == 1 else self.T[rows]
            if self.loss == "huber_log":
                r = np.log(yhat) - T
                rho, drho = huber(r, self.delta)
                drho = drho / yhat  # d log yhat = dyhat / yhat
            else:
                r = yhat - T
                rho, drho = r * r, 2.0 * r
            if self.W is not None:
                w = self.W if self.W.ndim == 1 else self.W[rows]
                rho, drho = rho * w, drho * w
            f = rho.sum(axis=1)
            g = np.einsum("sn,snk->sk", drho, J)
        bad = ~np.isfinite(f) | ~np.isfinite(g).all(axis=1)
        f[bad] = np.inf
        return f, g


def minimize_law(law: Law, X: Any, T: np.ndarray, starts: np.ndarray, *, loss: str, delta: float = HUBER_DELTA,
                 W: np.ndarray | None = None, tol: dict | None = None, max_iter: int = 2000, bounds=None):
    """Minimise the law's objective from every row of ``starts`` together (BatchResult, in the law's
    parameters). A law may bring its own batched objective, ``law.objective(X, T, W, loss, delta)``
    (the joint law's fused Eq. 28); the objective or the law (:class:`Bounded`, from ``bounds``) may
    map the parameters to those the optimiser sees (``to_internal``/``to_external``)."""
    law = law if bounds is None else Bounded(law, *bounds)
    make = getattr(law, "objective", None)
    obj = make(X, T, W, loss, delta) if make is not None else LawObjective(law, X, T, W, loss, delta)
    maps = obj if hasattr(obj, "to_internal") else law if hasattr(law, "to_internal") else None
    x0 = np.asarray(starts, float)
    res = batched_bfgs(obj, x0 if maps is None else maps.to_internal(x0), max_iter=max_iter,
                       **(tol or FIT_TOL))
    if maps is not None:
        res.x = maps.to_external(res.x)
    return res


class Multistart(NamedTuple):
    """What :func:`multistart` found: the best polished end point ``theta`` and its ``objective``,
    whether its polish ``converged`` (and its ``code`` in ``engine.STATUS``), the grid run
    (``grid``) and the start it came from (``best``)."""

    theta: np.ndarray
    objective: float
    converged: bool
    code: int
    grid: Any
    best: int = 0


def multistart(law: Law, X: Any, T: np.ndarray, starts: np.ndarray, *, loss: str, delta: float = HUBER_DELTA,
               W: np.ndarray | None = None, n_polish: int = 8, max_iter: int = 300, polish_iter: int = 2000,
               polish_tol: dict | None = None, pool: str = "finite", what: str | None = None,
               bounds=None, screen: int | None = None) -> Multistart:
    """The one multistart of every law: every start (or the ``screen`` starts of lowest objective) to
    scipy L-BFGS-B's default rule (``COARSE_TOL``), the best ``n_polish`` end points (of the finite
    ones, or with ``pool="converged"`` of the converged ones when any) to ``polish_tol``; the lowest
    polished objective wins. ``bounds``: (lower, upper) kept by :class:`Bounded`."""
    kw = dict(loss=loss, delta=delta, W=W, bounds=bounds)
    if screen is not None:
        f0 = minimize_law(law, X, T, starts, **kw, max_iter=0).f
        starts = starts[np.argsort(f0, kind="stable")[:screen]]
    res = minimize_law(law, X, T, starts, **kw, tol=COARSE_TOL, max_iter=max_iter)
    ok = res.converged & np.isfinite(res.f)
    cand = np.flatnonzero(ok if pool == "converged" and ok.any() else np.isfinite(res.f))
    if cand.size == 0:
        raise ValueError(f"{what or type(law).__name__}: the objective is non-finite from every start")
    top = cand[np.argsort(res.f[cand])[:n_polish]]
    pol = minimize_law(law, X, T, res.x[top], **kw, tol=polish_tol, max_iter=polish_iter)
    j = int(np.argmin(np.where(np.isfinite(pol.f), pol.f, np.inf)))
    return Multistart(pol.x[j], float(pol.f[j]), bool(pol.converged[j]), int(pol.status[j]), res, int(top[j]))


def distinct_minima(x: np.ndarray, f: np.ndarray, ok: np.ndarray, *, rtol: float = 1e-3) -> list[tuple[np.ndarray, float]]:
    """The distinct converged (``ok``) end points of a multi-start run, lowest objective first;
    two are the same minimum when every coordinate agrees to ``rtol``."""
    out: list[tuple[np.ndarray, float]] = []
    for i in np.argsort(np.where(ok & np.isfinite(f), f, np.inf)):
        if not (ok[i] and np.isfinite(f[i])):
            break
        if not any(np.allclose(x[i], m, rtol=rtol, atol=1e-9) for m, _ in out):
            out.append((x[i].copy(), float(f[i])))
    return out


class Bounded:
    """``law`` with box bounds lower <= p <= upper kept by a change of variables, so an
    unconstrained optimiser respects an author's bounds: p = l + u^2 (one-sided) or
    p = l + (h - l)(1 + sin u)/2 (two-sided). A parameter on its bound stays there."""

    def __init__(self, law: Law, lower, upper):
        self.law = law
        self.names = law.names
        self.lo, self.hi = np.asarray(lower, float), np.asarray(upper, float)
        self.one = np.isfinite(self.lo) & ~np.isfinite(self.hi)
        self.two = np.isfinite(self.lo) & np.isfinite(self.hi)
        self.span = np.where(self.two, self.hi - self.lo, 1.0)
        self.base = np.where(np.isfinite(self.lo), self.lo, 0.0)

    def to_internal(self, theta):
        q = np.clip((theta - self.base) / self.span, 0.0, None)
        return np.where(self.one, np.sqrt(q), np.where(self.two, np.arcsin(np.clip(2 * q - 1, -1, 1)), theta))

    def to_external(self, u):
        return np.where(self.one, self.base + u * u, np.where(self.two, self.base + self.span * (1 + np.sin(u)) / 2, u))

    def model(self, u, X):
        y, J = self.law.model(self.to_external(u), X)
        d = np.where(self.one, 2.0 * u, np.where(self.two, self.span * np.cos(u) / 2, 1.0))
        return y, J * d[:, None, :]


def bootstrap_law(law: Law, X: Any, T: np.ndarray, theta: np.ndarray, spec: Bootstrap, *, loss: str,
                  delta: float = HUBER_DELTA, weights: np.ndarray | None = None, max_iter: int = 1000,
                  bounds=None, keep=None, tol: dict | None = None):
    """The one bootstrap of every law: (draws (n_ok, k), n_ok, warnings), every replicate refitted
    together warm-started from ``theta``, non-converged ones dropped; ``bounds`` kept (:class:`Bounded`);
    ``keep``: anchor points (the ladder's ideal point) left as observed in every replicate."""
    # fitted values on the objective's scale (log y or y); a law may give them itself (``law.fitted``:
    # the joint law's log-sum-exp, exact on the log scale)
    own = getattr(law, "fitted", None)
    fitted = own(theta, X) if own is not None else to_fit_scale(law.model(theta[None, :], X)[0][0], loss)
    Y, W = spec.replicates(T, fitted, len(theta), weights=weights)
    if keep is not None:
        keep = np.asarray(keep, bool)
        if Y.ndim == 2:
            Y[:, keep] = T[keep]
        if W is not None and W.ndim == 2:
            W[:, keep] = 1.0 if weights is None else np.asarray(weights, float)[keep]
    res = minimize_law(law, X, Y, np.broadcast_to(theta, (spec.n_boot, len(theta))), loss=loss, delta=delta,
                       W=W, tol=tol or BOOT_TOL, max_iter=max_iter, bounds=bounds)
    good = res.converged & np.isfinite(res.x).all(axis=1) & np.isfinite(res.f)
    return res.x[good], int(good.sum()), dropped(int(good.sum()), spec.n_boot)


@dataclass(frozen=True)
class LawFit(FitFields):
    """Frozen result of a published-law fit (``recipe``: ``"authors"``, the paper's objective, start and
    optimiser, or ``"robust"``, Huber on log residuals from a grid); ``resid`` on the fit's scale (log
    for ``huber_log``). A subclass names its law class ``_law`` and maps its inputs by
    ``_inputs(*args) -> (X, shape of the answer)``."""

    law: str
    params: dict
    objective: float
    n: int
    recipe: str
    loss: str
    theta: tuple = ()
    bootstrap: str = "residual"
    n_boot_ok: int = 0
    optimizer: str = ""  # how the optimiser ended (``engine.STATUS``, or the authors' routine)

    def __getitem__(self, name: str) -> float:
        return self.params[name]

    def _noisy(self, y: np.ndarray, seed: int) -> np.ndarray:
        """``y`` plus resampled residual noise on the fit's scale."""
        eps = resample_noise(np.random.default_rng(seed), self.resid, y.shape, len(self.theta))
        return np.exp(np.log(y) + eps) if self.loss == "huber_log" else y + eps

    def _curve(self, args: tuple, level: float | None = None, *, noise: bool | None = None, seed: int = 0):
        """At the law's inputs ``args``: the point curve (``noise`` None), the bootstrap band (False)
        or the prediction interval of a new observation (True)."""
        X, shape = self._inputs(*args)
        curves = lambda th: self._law().model(th, X)[0]  # noqa: E731
        point = lambda: curves(np.array([self.theta]))[0].reshape(shape)  # noqa: E731
        if noise is None:
            return point()
        if not noise:
            return self._band(curves, shape, level, point)
        log = self.loss == "huber_log"  # residuals live on the objective's scale
        return self._interval((lambda th: np.log(curves(th))) if log else curves, self.theta, shape, level,
                              seed=seed, n_params=len(self.theta), back=np.exp if log else None)

    def _lines(self, title: str | None = None) -> list[str]:
        return [f"{title or self.law}   (n = {self.n}, recipe = {self.recipe}, {self.loss} objective = "
                f"{self.objective:.10g})", f"  converged: {self.converged} ({self.optimizer}); "
                f"{round(100 * self.level)}% CI, {self.bootstrap} bootstrap ({self.n_boot_ok} "
                "replicates)"] + \
            [f"  {name:<10}{fmt_ci(value, self.ci.get(name), 5)}" for name, value in self.params.items()]


@dataclass(frozen=True)
class NDLawFit(LawFit):
    """A law of parameters N and tokens D: predictions, bands and intervals at (N, D)."""

    def _inputs(self, N, D):
        N, D = np.broadcast_arrays(np.asarray(N, float), np.asarray(D, float))
        return (N.reshape(-1), D.reshape(-1)), N.shape

    def predict(self, N, D) -> np.ndarray:
        return self._curve((N, D))

    def band(self, N, D, level: float | None = None):
        """Bootstrap percentile band (lo, hi) of the fitted curve at (N, D)."""
        return self._curve((N, D), level, noise=False)

    def predict_interval(self, N, D, level: float | None = None, *, seed: int = 0):
        """Interval for a new observation at (N, D): bootstrap curves plus resampled residuals."""
        return self._curve((N, D), level, noise=True, seed=seed)


@dataclass(frozen=True)
class CurveFit(LawFit):
    """A law of one input x (a loss): y = f(x)."""

    def _inputs(self, x):
        x = np.asarray(x, float)
        return x.reshape(-1), x.shape

    def predict(self, x) -> np.ndarray:
        return self._curve((x,))

    def predict_interval(self, x, level: float | None = None, *, seed: int = 0):
        return self._curve((x,), level, noise=True, seed=seed)


def chained_interval(first: NDLawFit, N, D, second: CurveFit, level: float | None = None, *, seed: int = 0):
    """Interval of a chained prediction second(first(N, D)): draws of the first law's new
    observation (curve + noise) pushed through the second law's bootstrap curves (paired by
    replicate), plus the second law's residual noise."""
    X, shape = first._inputs(N, D)
    th = second.boot if second.boot is not None and len(second.boot) else np.array([second.theta])
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        x = first._noisy(first._law().model(curve_rows(first.boot, first.theta), X)[0], seed)  # (S, m)
        y = second._law().model(th[np.arange(len(x)) % len(th)], x)[0]
    lo, hi = band_from_draws(second._noisy(y, seed + 1), level or second.level)
    return lo.reshape(shape), hi.reshape(shape)


def law_status(converged: bool, warnings, optimizer: str = "") -> FitStatus:
    """The status of a law fit: ``failed`` when not converged; ``flagged`` when a warning's code
    says a parameter is not identified or ran to a bound (``_base.FLAGGING``)."""
    return FitStatus.decide(converged, flags_of(warnings), optimizer)


def law_result(cls, law: Law, X: Any, T: np.ndarray, theta, spec: Bootstrap, *, name: str, objective: float,
               converged: bool, status: str, recipe: str, loss: str, warnings: list[str], derived,
               delta: float = HUBER_DELTA, weights=None, bounds=None, keep=None, params: dict | None = None,
               **extra):
    """The frozen ``cls`` result of a law fit at ``theta``: every replicate of ``spec`` refitted
    (:func:`bootstrap_law`), intervals of ``derived(draws)`` (the reported parameters, named
    arrays from (S, k) theta rows; also ``params`` unless given) and residuals on the fit's scale."""
    theta = np.asarray(theta, float)
    ci, boot, n_ok = {}, None, 0
    if spec.n_boot:
        boot, n_ok, msgs = bootstrap_law(law, X, T, theta, spec, loss=loss, delta=delta, weights=weights,
                                         bounds=bounds, keep=keep)
        for m in msgs:
            emit(warnings, m, code="not_converged")
        ci = spec.intervals(derived(boot))
    fitted = law.model(theta[None, :], X)[0][0]
    if params is None:
        params = {k: float(v[0]) for k, v in derived(theta[None, :]).items()}
    return cls(law=name, params=params, objective=float(objective), n=len(T), recipe=recipe, loss=loss,
               converged=bool(converged), theta=tuple(float(v) for v in theta), ci=ci, level=spec.level,
               bootstrap=spec.kind, n_boot_ok=n_ok, warnings=tuple(warnings), optimizer=status,
               status=law_status(converged, warnings, status), boot=boot,
               resid=T - to_fit_scale(fitted, loss), **extra)
