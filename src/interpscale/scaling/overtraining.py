"""Over-training law and chained downstream error (Gadre et al. 2024).

Paper Eq. 4 (the authors' ``powlaw_ours``; M = D/N tokens per parameter; Chinchilla's form with
alpha = beta): L(N, M) = E + a N^b + c 6^(b/2) (M N)^b, b = -eta < 0. Paper Eq. 5, downstream
top-1 error from loss: Err(L) = eps - k exp(-gamma L); chained: Err(L-hat(N, M)). The authors'
recipe: least squares on L by scipy ``curve_fit`` from every start of a0, c0 in {1e2, 3e2, 1e3,
3e3}, b0 in {-0.1, -0.3}, E0 in {0, 1, 2, 10}, keeping the lowest sqrt(SSR / (n - 2)); the error
law by ``curve_fit`` from its default start. ``recipe="robust"``: summed Huber (delta 1e-3) on
log L from the same grid.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.optimize import curve_fit

from ._base import check_points, check_weights, emit
from ._optim import STATUS
from .bootstrap import DEFAULT_LEVEL, DEFAULT_N_BOOT, Bootstrap
from .lawfit import HUBER_DELTA, CurveFit, NDLawFit, chained_interval, check_recipe, law_result, multistart
from .lawfit import to_fit_scale

OVERTRAINING_AUTHORS_GRID = tuple(itertools.product([1e2, 3e2, 1e3, 3e3], [1e2, 3e2, 1e3, 3e3], [-0.1, -0.3], [0.0, 1.0, 2.0, 10.0]))
LOG6_HALF = 0.5 * math.log(6.0)


class OvertrainingLaw:
    """L = E + a N^b + c 6^(b/2) D^b with theta = (a, c, b, E) and X = (N, D)."""

    names = ("a", "c", "b", "E")

    def model(self, theta, X):
        N, D = X
        a, c, b, E = (np.asarray(theta, float)[:, i : i + 1] for i in range(4))
        tN = np.exp(b * np.log(N)[None, :])
        tD = np.exp(b * (LOG6_HALF + np.log(D)[None, :]))
        y = E + a * tN + c * tD
        J = np.stack([tN + 0 * a, tD + 0 * c, a * tN * np.log(N) + c * tD * (LOG6_HALF + np.log(D)), np.ones_like(y)], -1)
        return y, J


class ErrorLaw:
    """Err(L) = eps - k exp(-gamma L) with theta = (k, gamma, eps) and X = L."""

    names = ("k", "gamma", "eps")

    def model(self, theta, X):
        k, g, eps = (np.asarray(theta, float)[:, i : i + 1] for i in range(3))
        L = np.asarray(X, float)
        L = L if L.ndim == 2 else L[None, :]  # one row of losses per parameter row, or shared
        ex = np.exp(-g * L)
        y = eps - k * ex
        return y, np.stack([-ex, k * L * ex, np.ones_like(y)], -1)


def _ls_curve_fit(f, x, y, starts):
    """Authors' optimiser: ``curve_fit`` from every start, lowest sqrt(SSR / (n - 2)) kept (None: none)."""
    best, best_p = np.inf, None
    for p0 in starts:
        try:
            p, _ = curve_fit(f, x, y, p0=list(p0), maxfev=10000)
        except RuntimeError:  # curve_fit: no convergence within maxfev from this start
            continue
        s = float(np.sqrt(np.sum((y - f(x, *p)) ** 2) / max(y.size - 2, 1)))
        if s < best:
            best, best_p = s, p
    return best_p


@dataclass(frozen=True)
class DownstreamErrorFit(CurveFit):
    """Err(L) = eps - k exp(-gamma L) (Gadre et al. 2024, Eq. 5)."""

    _law = ErrorLaw


@dataclass(frozen=True)
class OvertrainingFit(NDLawFit):
    """L(N, D) = E + a N^b + c 6^(b/2) D^b. ``params``: E, a, c, b, eta = -b, and ``B`` = c 6^(b/2)
    (so L = E + a/N^eta + B/D^eta)."""

    _law = OvertrainingLaw

    def predict_error(self, N, D, error_fit: DownstreamErrorFit) -> np.ndarray:
        """Chained downstream error Err(L-hat(N, D)) (the authors' chained prediction)."""
        return error_fit.predict(self.predict(N, D))

    def predict_error_interval(self, N, D, error_fit: DownstreamErrorFit, level: float | None = None, *, seed: int = 0):
        """Interval of a new run's downstream error (see ``lawfit.chained_interval``)."""
        return chained_interval(self, N, D, error_fit, level, seed=seed)


def _powlaw(x, a, c, b, E):  # the authors' powlaw_ours, x = (N, M)
    N, M = x
    return a * np.power(N, b) + c * np.power(6, b / 2) * np.power(M * N, b) + E


def fit_overtraining(
    N, D, loss, *,
    recipe: Literal["authors", "robust"] = "authors",
    grid=None,
    delta: float = HUBER_DELTA,
    weights=None,
    n_boot: int = DEFAULT_N_BOOT,
    bootstrap: Literal["residual", "pairs", "cluster"] = "residual",
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
    groups=None,
) -> OvertrainingFit:
    """Fit L(N, D) = E + a N^b + c 6^(b/2) D^b to runs by the ``recipe`` (module doc) from ``grid``
    (default the authors' 128 starts of (a, c, b, E)); replicates refit the recipe's objective."""
    N, D, L = check_points({"N (params)": N, "D (tokens)": D, "loss": loss}, 5,
                           "fit_overtraining (4 free parameters)")
    loss_kind = "ls" if check_recipe(recipe) == "authors" else "huber_log"
    spec = Bootstrap(n_boot=n_boot, kind=bootstrap, level=level, seed=seed, groups=groups,
                     smooth=loss_kind == "huber_log").checked(len(L), "fit_overtraining")
    w = check_weights(weights, len(L))
    starts = np.asarray(OVERTRAINING_AUTHORS_GRID if grid is None else grid, float).reshape(-1, 4)
    law, X, T = OvertrainingLaw(), (N, D), to_fit_scale(L, loss_kind)
    warnings: list[str] = []
    if recipe == "authors":
        p = _ls_curve_fit(_powlaw, np.array([N, D / N]), L, starts)
        if p is None:
            raise ValueError("fit_overtraining: curve_fit failed from every start")
        theta, st, ok = np.asarray(p, float), "curve_fit", True
        obj = float(np.sum((L - law.model(theta[None, :], X)[0][0]) ** 2))
    else:
        theta, obj, ok, code, *_ = multistart(law, X, T, starts, loss="huber_log", delta=delta, W=w)
        st = STATUS[code]
        if not ok:
            emit(warnings, "fit_overtraining: no start converged; reporting the lowest end point", warn=True)
    if theta[2] >= 0:
        emit(warnings, f"fit_overtraining: exponent b = {theta[2]:.4g} >= 0; the loss does not fall with scale")

    def derived(th):
        return {"E": th[:, 3], "a": th[:, 0], "c": th[:, 1], "b": th[:, 2], "eta": -th[:, 2],
                "B": th[:, 1] * np.exp(th[:, 2] * LOG6_HALF)}

    return law_result(OvertrainingFit, law, X, T, theta, spec, name="overtraining", objective=obj,
                      converged=ok, status=st, recipe=recipe, loss=loss_kind, warnings=warnings,
                      derived=derived, delta=delta, weights=w)


def fit_downstream_error(
    loss, error, *,
    p0=(1.0, 1.0, 1.0),
    n_boot: int = DEFAULT_N_BOOT,
    bootstrap: Literal["residual", "pairs", "cluster"] = "residual",
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
    groups=None,
) -> DownstreamErrorFit:
    """Fit Err(L) = eps - k exp(-gamma L) by least squares (``curve_fit`` from ``p0`` =
    (k, gamma, eps), default all ones as the authors)."""
    L, Err = check_points({"loss": loss, "error": error}, 4, "fit_downstream_error (3 free parameters)",
                          positive=False)
    spec = Bootstrap(n_boot=n_boot, kind=bootstrap, level=level, seed=seed, groups=groups).checked(
        len(L), "fit_downstream_error")
    try:
        p, _ = curve_fit(lambda t, k, g, eps: eps - k * np.exp(-g * t), L, Err, p0=list(p0), maxfev=10000)
    except RuntimeError as exc:
        raise ValueError(f"fit_downstream_error: curve_fit did not converge ({exc})") from exc
    law = ErrorLaw()
    sse = float(np.sum((Err - law.model(p[None, :], L)[0][0]) ** 2))
    return law_result(DownstreamErrorFit, law, L, Err, p, spec, name="downstream-error", objective=sse,
                      converged=True, status="curve_fit", recipe="authors", loss="ls", warnings=[],
                      derived=lambda th: dict(zip(law.names, th.T)))
