"""Two-step task prediction of model ladders (Bhagia et al. 2024).

Step 1 (paper Eq. 2): task loss L(N, D) = A / N^alpha + B / D^beta + E (A = e^a, B = e^b) on one
point per ladder run, by the summed Huber loss (delta = 1e-3) of log L-hat - log L from the
authors' start (a, b, alpha, beta, E) = (3, 6, 0.1, 0.2, 1), every parameter >= 0 (scipy
L-BFGS-B, ftol = 0, gtol = 1e-10). Step 2 (paper Eq. 3): accuracy Acc(L) = a / (1 + exp(-k (L -
L0))) + b on the intermediate checkpoints, by least squares (``curve_fit``, trf) from (task_min
- 1, 0.9, 3, task_max) within a in [-1, 0], L0, k >= 0, b in [0, 1], with the ideal point
(0, task_max) added. Chained: Acc(L-hat(N, D)). ``recipe="robust"``: both steps by summed Huber
on log residuals from a start grid.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.optimize import curve_fit, minimize

from ._base import check_points, check_weights, emit
from ._optim import STATUS
from .bootstrap import DEFAULT_LEVEL, DEFAULT_N_BOOT, Bootstrap
from .lawfit import HUBER_DELTA, CurveFit, NDLawFit, chained_interval, check_recipe, huber, law_result
from .lawfit import multistart, to_fit_scale

AUTHORS_START = (3.0, 6.0, 0.1, 0.2, 1.0)  # (a, b, alpha, beta, E), src/scripts/step1.py
STEP2_BOUNDS = ([-1.0, 0.0, 0.0, 0.0], [0.0, np.inf, np.inf, 1.0])  # (a, x0, k, b), src/scripts/step2.py
ROBUST_GRID = tuple(itertools.product([0.0, 2.5, 5.0, 10.0], [0.0, 2.5, 5.0, 10.0], [0.1, 0.3, 0.6],
                                      [0.1, 0.3, 0.6], [0.0, 0.5, 1.0, 2.0]))


class TaskLossLaw:
    """L = exp(a - alpha log N) + exp(b - beta log D) + E; theta = (a, b, alpha, beta, E), X = (N, D)."""

    names = ("a", "b", "alpha", "beta", "E")

    def model(self, theta, X):
        lN, lD = np.log(X[0])[None, :], np.log(X[1])[None, :]
        a, b, al, be, E = (np.asarray(theta, float)[:, i : i + 1] for i in range(5))
        tN, tD = np.exp(a - al * lN), np.exp(b - be * lD)
        y = tN + tD + E
        return y, np.stack([tN, tD, -tN * lN, -tD * lD, np.ones_like(y)], -1)


class SigmoidLaw:
    """Acc = a / (1 + exp(-k (x - x0))) + b; theta = (a, x0, k, b), X = task loss x."""

    names = ("a", "x0", "k", "b")

    def model(self, theta, X):
        a, x0, k, b = (np.asarray(theta, float)[:, i : i + 1] for i in range(4))
        x = np.asarray(X, float)
        x = x if x.ndim == 2 else x[None, :]  # one row of losses per parameter row, or shared
        s = 1.0 / (1.0 + np.exp(-k * (x - x0)))
        ds = s * (1.0 - s)
        y = a * s + b
        return y, np.stack([s, -a * k * ds, a * (x - x0) * ds, np.ones_like(y)], -1)


def _sigmoid(x, a, x0, k, b):
    return a / (1 + np.exp(-k * (x - x0))) + b


def checkpoint_points(runs, x, y, *, skip_frac: float = 0.1, window: int = 5):
    """Step 2's points the authors' way (``utils.get_step2_data_by_name``): per run (rows in
    logged order), drop the first ceil(skip_frac * n) evaluations, then a trailing moving
    average of ``window`` on x and y (partial windows at the start). Returns (x, y, runs)."""
    runs = np.asarray(runs)
    x, y = np.asarray(x, float), np.asarray(y, float)
    xs, ys, rs = [], [], []
    for r in dict.fromkeys(runs.tolist()):
        idx = np.flatnonzero(runs == r)
        idx = idx[int(math.ceil(skip_frac * len(idx))):] if skip_frac < 1 else idx[-1:]
        for arr, out in ((x[idx], xs), (y[idx], ys)):
            c = np.cumsum(arr)
            c[window:] = c[window:] - c[:-window]
            out.append(c / np.minimum(np.arange(1, len(arr) + 1), window))
        rs.append(np.full(len(idx), r, dtype=object))
    return np.concatenate(xs), np.concatenate(ys), np.concatenate(rs)


@dataclass(frozen=True)
class TaskLossFit(NDLawFit):
    """Step 1: L(N, D) = A/N^alpha + B/D^beta + E (``params``: A, B, alpha, beta, E, a, b)."""

    _law = TaskLossLaw


@dataclass(frozen=True)
class SigmoidFit(CurveFit):
    """Step 2: Acc(L) = a / (1 + exp(-k (L - x0))) + b."""

    _law = SigmoidLaw


@dataclass(frozen=True)
class LadderFit:
    """Both steps and the chained prediction. ``step2`` is None when no checkpoints were given."""

    step1: TaskLossFit
    step2: SigmoidFit | None = None

    converged = property(lambda self: self.step1.converged and (self.step2 is None or self.step2.converged))
    warnings = property(lambda self: self.step1.warnings + (self.step2.warnings if self.step2 else ()))

    @property
    def ci(self) -> dict:
        step2 = self.step2.ci if self.step2 else {}
        return dict(self.step1.ci) | {f"step2_{k}": v for k, v in step2.items()}

    def predict(self, N, D) -> np.ndarray:
        """Step 1: predicted task loss."""
        return self.step1.predict(N, D)

    def predict_interval(self, N, D, level: float | None = None, *, seed: int = 0):
        return self.step1.predict_interval(N, D, level, seed=seed)

    def _need_step2(self) -> SigmoidFit:
        if self.step2 is None:
            raise ValueError("fit_ladder: no step 2 (pass checkpoint task losses and accuracies to predict accuracy)")
        return self.step2

    def predict_accuracy(self, N, D) -> np.ndarray:
        """Chained prediction Acc(L-hat(N, D))."""
        return self._need_step2().predict(self.step1.predict(N, D))

    def predict_accuracy_interval(self, N, D, level: float | None = None, *, seed: int = 0):
        """Interval of a new run's accuracy: step-1 task-loss draws (curve + noise) through step-2
        curves, plus step-2 noise (``lawfit.chained_interval``)."""
        return chained_interval(self.step1, N, D, self._need_step2(), level, seed=seed)

    def to_dict(self) -> dict:
        return {"step1": self.step1.to_dict(), "step2": None if self.step2 is None else self.step2.to_dict()}

    def summary(self) -> str:
        return "\n".join(f.summary() for f in (self.step1, self.step2) if f is not None)


def _step1_authors(N, D, L, delta, w):
    """The authors' step 1: L-BFGS-B from AUTHORS_START, all parameters >= 0."""
    law, X, T = TaskLossLaw(), (N, D), np.log(L)
    ww = np.ones_like(L) if w is None else w

    def obj(p):
        y, J = law.model(p[None, :], X)
        rho, d = huber(np.log(y[0]) - T, delta)
        return float((ww * rho).sum()), (ww * d / y[0]) @ J[0]

    r = minimize(obj, np.array(AUTHORS_START), jac=True, method="L-BFGS-B", bounds=[(0, None)] * 5, tol=0.0,
                 options={"ftol": 0.0, "gtol": 1e-10, "maxiter": 1_000_000})
    # with ftol = 0 L-BFGS-B ends when its line search can no longer lower f at machine precision
    # (ABNORMAL_TERMINATION_IN_LNSRCH): that is the authors' stopping point, not a failure
    return r.x, float(r.fun), bool(r.success) or "ABNORMAL" in str(r.message), str(r.message)


def _fit_step1(N, D, L, recipe, delta, w, spec) -> TaskLossFit:
    law, X, T = TaskLossLaw(), (N, D), np.log(L)
    warnings: list[str] = []
    if recipe == "authors":
        theta, obj, ok, st = _step1_authors(N, D, L, delta, w)
    else:
        theta, obj, ok, code, *_ = multistart(law, X, T, np.array(ROBUST_GRID), loss="huber_log", delta=delta, W=w)
        st = STATUS[code]
    if not ok:
        emit(warnings, f"fit_ladder step 1: the optimiser did not converge ({st})", warn=True)
    if recipe == "authors" and (theta <= 0).any():
        emit(warnings, "fit_ladder step 1: parameters on their bound 0: " + ", ".join(
            n for n, v in zip(law.names, theta) if v <= 0))

    def derived(th):
        return {"A": np.exp(th[:, 0]), "B": np.exp(th[:, 1]), "alpha": th[:, 2], "beta": th[:, 3], "E": th[:, 4],
                "a": th[:, 0], "b": th[:, 1]}

    # the authors' bounds (every parameter >= 0) hold in the replicates too
    bounds = ([0.0] * 5, [np.inf] * 5) if recipe == "authors" else None
    return law_result(TaskLossFit, law, X, T, theta, spec, name="ladder-step1", objective=obj, converged=ok,
                      status=st, recipe=recipe, loss="huber_log", warnings=warnings, derived=derived,
                      delta=delta, weights=w, bounds=bounds)


def _fit_step2(x, y, recipe, task_min, task_max, ideal_point, spec, delta) -> SigmoidFit:
    law = SigmoidLaw()
    if ideal_point:  # the authors add the ideal point (loss 0, accuracy task_max); not resampled
        x, y = np.append(x, 0.0), np.append(y, task_max)
    loss_kind = "ls" if recipe == "authors" else "huber_log"
    p0 = np.array([task_min - 1.0, 0.9, 3.0, task_max])
    if recipe == "authors":
        theta, _ = curve_fit(_sigmoid, x, y, p0=p0, bounds=STEP2_BOUNDS, maxfev=500000)
        ok, st = True, "curve_fit (trf)"
        obj = float(np.sum((y - _sigmoid(x, *theta)) ** 2))
    else:
        grid = np.array([p0 * [1, s, t, 1] for s in (0.5, 1.0, 2.0) for t in (1.0, 3.0, 10.0)])
        theta, obj, ok, code, *_ = multistart(law, x, np.log(y), grid, loss="huber_log", delta=delta)
        st = STATUS[code]
    sp = spec if spec.kind != "cluster" or not ideal_point else Bootstrap(
        n_boot=spec.n_boot, kind="cluster", level=spec.level, seed=spec.seed, groups=np.append(spec.groups, "__ideal__"))
    keep = np.zeros(len(x), bool)
    keep[-1] = ideal_point  # the ideal point is an anchor: in every replicate, as given
    return law_result(SigmoidFit, law, x, to_fit_scale(y, loss_kind), theta, sp, name="ladder-step2",
                      objective=obj, converged=ok, status=st, recipe=recipe, loss=loss_kind, warnings=[],
                      derived=lambda th: dict(zip(law.names, th.T)), delta=delta, keep=keep,
                      bounds=STEP2_BOUNDS if recipe == "authors" else None)


def fit_ladder(
    N, D, task_loss, *,
    checkpoint_loss=None,
    checkpoint_accuracy=None,
    checkpoint_groups=None,
    task_min: float = 0.25,
    task_max: float = 1.0,
    ideal_point: bool = True,
    recipe: Literal["authors", "robust"] = "authors",
    delta: float = HUBER_DELTA,
    weights=None,
    n_boot: int = DEFAULT_N_BOOT,
    bootstrap: Literal["residual", "pairs", "cluster"] = "residual",
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
    groups=None,
) -> LadderFit:
    """Fit step 1 on (N, D, task_loss) (one point per ladder run) and, given checkpoint task
    losses and accuracies (e.g. from :func:`checkpoint_points`), step 2; ``task_min`` is the
    chance accuracy that sets step 2's start (0.25 for 4-way multiple choice). For
    ``bootstrap="cluster"``, ``groups`` labels step-1 rows and ``checkpoint_groups`` the
    checkpoints (their run)."""
    N, D, L = check_points({"N (params)": N, "D (tokens)": D, "task_loss": task_loss}, 6,
                           "fit_ladder step 1 (5 free parameters)")
    check_recipe(recipe)
    spec1 = Bootstrap(n_boot=n_boot, kind=bootstrap, level=level, seed=seed, groups=groups,
                      smooth=True).checked(len(L), "fit_ladder step 1")
    step1 = _fit_step1(N, D, L, recipe, delta, check_weights(weights, len(L)), spec1)
    if checkpoint_loss is None and checkpoint_accuracy is None:
        return LadderFit(step1)
    x, y = check_points({"checkpoint_loss": checkpoint_loss, "checkpoint_accuracy": checkpoint_accuracy}, 5,
                        "fit_ladder step 2 (4 free parameters)")
    spec2 = Bootstrap(n_boot=n_boot, kind=bootstrap, level=level, seed=seed + 1,
                      groups=checkpoint_groups).checked(len(x), "fit_ladder step 2")
    return LadderFit(step1, _fit_step2(x, y, recipe, task_min, task_max, ideal_point, spec2, delta))
