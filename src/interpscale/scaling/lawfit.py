"""Shared engine of the published-law fitters (data-constrained, over-training, ladder).

A *law* has ``names`` (its parameter vector theta) and ``model(theta, X) -> (yhat, J)``:
predictions (S, n) for S parameter rows at inputs X and their Jacobian (S, n, k). Many rows (the
starts of a grid, the replicates of a bootstrap) are minimised together by ``_optim.batched_bfgs``
under ``"huber_log"``, sum_i w_i Huber_delta(log yhat_i - log y_i) (Hoffmann et al. 2022; the
data-constrained and ladder authors' objective, and our robust recipe), or ``"ls"``,
sum_i w_i (yhat_i - y_i)^2 (scipy ``curve_fit``, the over-training authors'). The target is kept
on the objective's scale (log y or y), where the residual bootstrap resamples. Every law fit ends
in :func:`law_result`: replicates of the one bootstrap spec, intervals, a frozen :class:`LawFit`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import numpy as np

from ._base import FitResult, FitStatus, emit, fmt_ci
from ._optim import COARSE_TOL, batched_bfgs, chunked
from .bootstrap import Bootstrap, band_from_draws, curve_rows, dropped, resample_noise

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
        raise ValueError(f"recipe must be 'authors' or 'robust', got {recipe!r}")
    return recipe


def to_fit_scale(y: np.ndarray, loss: str) -> np.ndarray:
    return np.log(y) if loss == "huber_log" else np.asarray(y, float)


class LawObjective:
    """Batched objective and gradient of one law for ``batched_bfgs``: fun(Z, rows) -> (f, g)."""

    def __init__(self, law: Law, X: Any, T: np.ndarray, W: np.ndarray | None, loss: str, delta: float):
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
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
                 W: np.ndarray | None = None, tol: dict | None = None, max_iter: int = 2000):
    """Minimise the law's objective from every row of ``starts`` together (BatchResult). A law may
    bring its own batched objective, ``law.objective(X, T, W, loss, delta)`` with optional
    ``to_internal``/``to_external`` parameter maps (the joint Chinchilla law's fused Eq. 28)."""
    make = getattr(law, "objective", None)
    obj = make(X, T, W, loss, delta) if make is not None else LawObjective(law, X, T, W, loss, delta)
    x0 = np.asarray(starts, float)
    res = batched_bfgs(obj, obj.to_internal(x0) if hasattr(obj, "to_internal") else x0, max_iter=max_iter,
                       **(tol or FIT_TOL))
    if hasattr(obj, "to_external"):
        res.x = obj.to_external(res.x)
    return res


class Multistart(NamedTuple):
    """What :func:`multistart` found: the best polished end point ``theta`` and its ``objective``,
    whether its polish ``converged`` (and its ``code`` in ``_optim.STATUS``), the grid run
    (``grid``), the start it came from (``best``) and whether that start's own run converged."""

    theta: np.ndarray
    objective: float
    converged: bool
    code: int
    grid: Any
    best: int = 0
    start_converged: bool = True


def multistart(law: Law, X: Any, T: np.ndarray, starts: np.ndarray, *, loss: str, delta: float = HUBER_DELTA,
               W: np.ndarray | None = None, n_polish: int = 8, max_iter: int = 300, polish_iter: int = 2000,
               polish_tol: dict | None = None, pool: str = "finite", what: str | None = None) -> Multistart:
    """The one multistart of every law: every start to scipy L-BFGS-B's default rule
    (``COARSE_TOL``, <= ``max_iter`` iterations), the best ``n_polish`` end points (``pool``:
    of the ``"finite"`` ones, or of the ``"converged"`` ones when any) to ``polish_tol`` (machine
    precision), the lowest polished objective wins."""
    res = minimize_law(law, X, T, starts, loss=loss, delta=delta, W=W, tol=COARSE_TOL, max_iter=max_iter)
    ok = res.converged & np.isfinite(res.f)
    if pool == "converged":
        cand = np.flatnonzero(ok) if ok.any() else np.flatnonzero(np.isfinite(res.f))
        if cand.size == 0:
            raise ValueError(f"{what or type(law).__name__}: the objective is non-finite from every start")
        top = cand[np.argsort(res.f[cand])[:n_polish]]
    else:
        f = np.where(np.isfinite(res.f), res.f, np.inf)
        if not np.isfinite(f).any():
            raise ValueError(f"{what or type(law).__name__}: the objective is non-finite from every start")
        top = np.argsort(f)[:n_polish]
    pol = minimize_law(law, X, T, res.x[top], loss=loss, delta=delta, W=W, tol=polish_tol, max_iter=polish_iter)
    j = int(np.argmin(np.where(np.isfinite(pol.f), pol.f, np.inf)))
    best = int(top[j])
    return Multistart(pol.x[j], float(pol.f[j]), bool(pol.converged[j]), int(pol.status[j]), res, best,
                      bool(ok[best]))


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


def fit_scale(law: Law, theta: np.ndarray, X: Any, loss: str) -> np.ndarray:
    """The law's fitted values at ``theta`` on the objective's scale (log y or y); a law may give
    them itself (``law.fitted``: the joint law's log-sum-exp, exact on the log scale)."""
    own = getattr(law, "fitted", None)
    return own(theta, X) if own is not None else to_fit_scale(law.model(theta[None, :], X)[0][0], loss)


def bootstrap_law(law: Law, X: Any, T: np.ndarray, theta: np.ndarray, spec: Bootstrap, *, loss: str,
                  delta: float = HUBER_DELTA, weights: np.ndarray | None = None, max_iter: int = 1000,
                  bounds=None, keep=None, tol: dict | None = None):
    """The one bootstrap of every law: (draws (n_ok, k), n_ok, warnings), every replicate of
    ``spec`` refitted together warm-started from ``theta`` (to ``tol``, default ``BOOT_TOL``),
    those not converged or non-finite dropped; ``bounds``: (lower, upper) kept in every
    replicate (:class:`Bounded`); ``keep``: a mask of anchor points (the ladder's ideal point)
    left as observed in every replicate."""
    Y, W = spec.replicates(T, fit_scale(law, theta, X, loss), len(theta), weights=weights)
    if keep is not None:
        keep = np.asarray(keep, bool)
        if Y.ndim == 2:
            Y[:, keep] = T[keep]
        if W is not None and W.ndim == 2:
            W[:, keep] = 1.0 if weights is None else np.asarray(weights, float)[keep]
    inner = law if bounds is None else Bounded(law, *bounds)
    start = theta if bounds is None else inner.to_internal(theta)
    res = minimize_law(inner, X, Y, np.broadcast_to(start, (spec.n_boot, len(theta))), loss=loss, delta=delta,
                       W=W, tol=tol or BOOT_TOL, max_iter=max_iter)
    if bounds is not None:
        res.x = inner.to_external(res.x)
    good = res.converged & np.isfinite(res.x).all(axis=1) & np.isfinite(res.f)
    return res.x[good], int(good.sum()), dropped(int(good.sum()), spec.n_boot)


@dataclass(frozen=True)
class LawFit(FitResult):
    """Frozen result of a published-law fit. ``params``: the law's parameters by name; ``ci``: their
    (and derived quantities') intervals; ``recipe``: ``"authors"`` (the paper's objective, start and
    optimiser) or ``"robust"`` (Huber on log residuals from a grid); ``boot``: replicate draws of
    ``theta``; ``resid``: residuals on the fit's scale (log for ``huber_log``). A subclass names
    its law class ``_law`` and maps its inputs by ``_inputs(*args) -> (X, shape of the answer)``."""

    law: str
    params: dict
    objective: float
    n: int
    recipe: str
    loss: str
    converged: bool
    theta: tuple = ()
    ci: dict = field(default_factory=dict)
    level: float = 0.90
    bootstrap: str = "residual"
    n_boot_ok: int = 0
    warnings: tuple[str, ...] = ()
    optimizer: str = ""  # how the optimiser ended (``_optim.STATUS``, or the authors' routine)
    status: FitStatus = FitStatus()  # decided by ``law_status`` when the fit is made
    boot: np.ndarray | None = field(default=None, repr=False, compare=False)
    resid: np.ndarray | None = field(default=None, repr=False, compare=False)

    def __getitem__(self, name: str) -> float:
        return self.params[name]

    def _noisy(self, y: np.ndarray, seed: int) -> np.ndarray:
        """``y`` plus resampled residual noise on the fit's scale."""
        eps = resample_noise(np.random.default_rng(seed), self.resid, y.shape, len(self.theta))
        return np.exp(np.log(y) + eps) if self.loss == "huber_log" else y + eps

    def _draws(self, X: Any, *, noise: bool, seed: int = 0) -> np.ndarray:
        """(S, m) curve draws at X from the bootstrap rows (or the point estimate), plus
        resampled residual noise when ``noise``."""
        theta = self.boot if self.boot is not None and len(self.boot) else np.array([self.theta])
        if noise:
            theta = curve_rows(theta, None)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            y = self._law().model(theta, X)[0]
        return self._noisy(y, seed) if noise else y

    def _curve(self, args: tuple, level: float | None = None, *, noise: bool | None = None, seed: int = 0):
        """At the law's inputs ``args``: the point curve (``noise`` None), the bootstrap band (False)
        or the prediction interval of a new observation (True)."""
        X, shape = self._inputs(*args)
        point = lambda: self._law().model(np.array([self.theta]), X)[0][0].reshape(shape)  # noqa: E731
        if noise is None:
            return point()
        if not noise:
            return self._band(lambda th: self._law().model(th, X)[0], shape, level, point)
        log = self.loss == "huber_log"  # residuals live on the objective's scale
        return self._interval(lambda th: np.log(self._law().model(th, X)[0]) if log else self._law().model(th, X)[0],
                              self.theta, shape, level, seed=seed, n_params=len(self.theta),
                              back=np.exp if log else None)

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
    x = first._draws(X, noise=True, seed=seed)  # (S, m)
    th = second.boot if second.boot is not None and len(second.boot) else np.array([second.theta])
    with np.errstate(over="ignore", invalid="ignore"):
        y = second._law().model(th[np.arange(len(x)) % len(th)], x)[0]
    lo, hi = band_from_draws(second._noisy(y, seed + 1), level or second.level)
    return lo.reshape(shape), hi.reshape(shape)


_UNIDENTIFIED = ("not identified", "at its bound", "on their bound", "ran to", "does not fall")


def law_status(converged: bool, warnings, optimizer: str = "") -> FitStatus:
    """The status of a law fit: ``failed`` when not converged; ``flagged`` when a warning says a
    parameter is not identified or ran to a bound."""
    flags = [w for w in warnings if any(m in w for m in _UNIDENTIFIED)]
    return FitStatus.decide(converged, flags, optimizer)


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
            emit(warnings, m)
        ci = spec.intervals(derived(boot))
    fitted = law.model(theta[None, :], X)[0][0]
    if params is None:
        params = {k: float(v[0]) for k, v in derived(theta[None, :]).items()}
    return cls(law=name, params=params, objective=float(objective), n=len(T), recipe=recipe, loss=loss,
               converged=bool(converged), theta=tuple(float(v) for v in theta), ci=ci, level=spec.level,
               bootstrap=spec.kind, n_boot_ok=n_ok, warnings=tuple(warnings), optimizer=status,
               status=law_status(converged, warnings, status), boot=boot,
               resid=T - to_fit_scale(fitted, loss), **extra)
