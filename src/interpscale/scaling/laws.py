"""The published laws on the one engine (docs/laws.md states each law, its authors' recipe and
our robust one): data-constrained (Muennighoff et al. 2023, Eq. 5: repeated data), over-training
with the chained downstream error (Gadre et al. 2024, Eqs. 4-5), the two-step model ladder
(Bhagia et al. 2024, Eqs. 2-3). ``LAWS``: one registry entry per law, by its CLI name, the
source of ``fit law`` on a run table and of the law's forecast method (``register_law_methods``, opt-in).
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Literal, NamedTuple

import numpy as np
import pandas as pd
from scipy.optimize import curve_fit, minimize

from interpscale._registry import Registry
from interpscale.errors import UserError

from ._base import FitFields, check_points, check_weights, combined_status, emit, from_options
from .bootstrap import Bootstrap, DEFAULT_LEVEL, DEFAULT_N_BOOT
from .engine import (CurveFit, HUBER_DELTA, LawFit, LawObjective, NDLawFit, STATUS, chained_interval, check_recipe,
    distinct_minima, huber, law_result, minimize_law, multistart, to_fit_scale)
from .external import RunTable, count_runs, read_runs, same_end_reason
from .forecast import ForecastMethod, ForecastOptions, register_method
from .joint import fit_chinchilla, optimal_allocation

# ---- data-constrained law (Muennighoff et al. 2023) ----

# a, b, e, alpha, beta of the authors' C4 Chinchilla fit (alpha = beta tied); README "Parametric Fit"
C4_COEFFICIENTS = (6.255414, 7.3049974, 0.6254804, 0.3526596, 0.3526596)
PUBLISHED_R_STAR = (15.387756, 5.309743)  # R_D*, R_N* (notebook cell 29; paper: 15.4, 5.3)
REPETITION_AUTHORS_GRID = tuple(itertools.product(np.linspace(0, 20, 4)[1:], repeat=2))  # zeros give NaN: skipped
COEF_NAMES = ("a", "b", "e", "alpha", "beta")
PLATEAU = 1e6  # an R* this large means exp(-R/R*) ~ 1 on any run: the repetition term is switched off


class RepetitionInputs(NamedTuple):
    """Eq. 5's inputs per run: unique parameters ``U_N``, unique tokens ``U_D``, and the repetitions
    ``R_D`` = D / U_D - 1 and ``R_N`` = N / U_N - 1 (each >= 0)."""

    U_N: np.ndarray
    U_D: np.ndarray
    R_D: np.ndarray
    R_N: np.ndarray


def repetition_inputs(N, D, U, coefficients=C4_COEFFICIENTS) -> RepetitionInputs:
    """(U_N, U, R_D, R_N) of Eq. 5 from the fixed Chinchilla coefficients (a, b, e, alpha, beta)."""
    a, b, _, al, be = coefficients
    G = (al * math.exp(a) / (be * math.exp(b))) ** (1.0 / (al + be))  # Hoffmann et al. App. D.2
    # U tokens are compute-optimal at C = 6 N D with D = U: N_opt(C(U)) = G (G U)^(beta/alpha)
    UN = np.minimum(G * (G * U) ** (be / al), N)
    return RepetitionInputs(UN, U, np.maximum(D / U - 1.0, 0.0), np.maximum(N / UN - 1.0, 0.0))


def _decay(R, r):
    """R* (1 - exp(-R/R*)) and its derivative in log R* (for R >= 0, R* > 0)."""
    x = R / r
    ex = np.exp(-x)
    return r * (1.0 - ex), r * (1.0 - ex) - R * ex


class DataConstrainedLaw:
    """Eq. 5 on the log scale; theta = (log R_D*, log R_N*) with fixed coefficients, or
    (a, b, e, alpha, beta, log R_D*, log R_N*) when ``free``."""

    def __init__(self, coefficients=C4_COEFFICIENTS, free: bool = False):
        self.coef = tuple(float(c) for c in coefficients)
        self.free = free
        self.names = (COEF_NAMES if free else ()) + ("log_R_D_star", "log_R_N_star")

    def model(self, theta, X):
        UN, U, RD, RN = X
        th = np.asarray(theta, float)
        co = [th[:, i : i + 1] for i in range(5)] if self.free else [np.full((len(th), 1), c) for c in self.coef]
        a, b, e, al, be = co
        rd, rn = np.exp(th[:, -2:-1]), np.exp(th[:, -1:])
        kD, dkD = _decay(RD[None, :], rd)
        kN, dkN = _decay(RN[None, :], rn)
        lD, lN = np.log(U[None, :] * (1.0 + kD)), np.log(UN[None, :] * (1.0 + kN))
        t = np.stack([a - al * lN, b - be * lD, np.broadcast_to(e, lN.shape)])  # (3, S, n)
        m = t.max(axis=0)
        s = np.exp(t - m)
        logy = m + np.log(s.sum(axis=0))
        s /= s.sum(axis=0)  # softmax weights: d logy / d t_i
        cols = [s[0], s[1], s[2], -s[0] * lN, -s[1] * lD] if self.free else []
        cols += [-be * s[1] * dkD / (1.0 + kD), -al * s[0] * dkN / (1.0 + kN)]
        y = np.exp(logy)
        return y, np.stack(cols, axis=-1) * y[:, :, None]


@dataclass(frozen=True)
class DataConstrainedFit(LawFit):
    """Eq. 5 fit. ``params``: R_D_star, R_N_star, E, A, B, alpha, beta; ``local_minima``: every
    distinct minimum the starts reached, (R_D*, R_N*, objective), lowest first."""

    coefficients: tuple = C4_COEFFICIENTS
    free: bool = False
    local_minima: tuple = ()
    max_unique_tokens: float = math.nan  # the largest U of the fitted runs (the corpus they drew from)

    def _law(self):
        return DataConstrainedLaw(self.coefficients, self.free)

    def _inputs(self, N, D, U):
        N, D, U = np.broadcast_arrays(*(np.asarray(v, float) for v in (N, D, U)))
        return repetition_inputs(N.reshape(-1), D.reshape(-1), U.reshape(-1), self.coefficients), N.shape

    def predict(self, N, D, U) -> np.ndarray:
        """L(N, D, U) of Eq. 5."""
        return self._curve((N, D, U))

    def band(self, N, D, U, level: float | None = None):
        return self._curve((N, D, U), level, noise=False)

    def predict_interval(self, N, D, U, level: float | None = None, *, seed: int = 0):
        """Interval for a new observed loss: bootstrap curves plus resampled log residuals."""
        return self._curve((N, D, U), level, noise=True, seed=seed)

    def epoch_cost(self, N, D, U) -> np.ndarray:
        """Loss cost of repetition: L(N, D, U) - L(N, D, D), what training on D tokens of which
        only U are unique adds over D unique tokens (0 for a single epoch)."""
        return self.predict(N, D, U) - self.predict(N, D, D)

    def _lines(self) -> list[str]:
        lines = super()._lines("data-constrained law L = E + A/N'^alpha + B/D'^beta "
                               "(Muennighoff et al. 2023, Eq. 5)")
        if len(self.local_minima) > 1:
            lines.append("  local minima reached (R_D*, R_N*, objective):")
            lines += [f"    {m['R_D_star']:.4f}  {m['R_N_star']:.4f}  {m['objective']:.9f}" for m in self.local_minima]
        return lines


def _check(N, D, U, loss, need: int = 1, what: str = "data_constrained_objective"):
    N, D, U, L = check_points({"N (params)": N, "D (tokens)": D, "U (unique tokens)": U, "loss": loss}, need,
                              what)
    if (over := U > D * (1 + 1e-9)).any():
        i = int(np.flatnonzero(over)[0])
        raise UserError(f"U (unique tokens): row {i} has U = {U[i]:g} > D = {D[i]:g}; unique tokens cannot exceed tokens seen")
    return N, D, U, L


def _starts(grid, free: bool, coefficients, recipe: str) -> np.ndarray:
    if grid is None:
        grid = REPETITION_AUTHORS_GRID if recipe == "authors" else tuple(itertools.product(np.geomspace(0.5, 1000.0, 8), repeat=2))
    R = np.log(np.asarray(grid, float).reshape(-1, 2))
    if not free:
        return R
    coef = np.array(coefficients, float)
    return np.column_stack([np.broadcast_to(coef, (len(R), 5)), R])


def fit_data_constrained(N, D, U, loss, *, free: Literal["R", "all"] = "R", coefficients=C4_COEFFICIENTS,
                         recipe: Literal["authors", "robust"] = "authors", grid=None,
                         delta: float = HUBER_DELTA, weights=None, n_boot: int = DEFAULT_N_BOOT,
                         bootstrap: Literal["residual", "pairs", "cluster"] = "pairs",
                         level: float = DEFAULT_LEVEL, seed: int = 0, groups=None, options=None) -> DataConstrainedFit:
    """Fit Eq. 5 to runs (N params, D tokens, U unique tokens, final loss).

    ``recipe="authors"``: their objective from their start grid {6.67, 13.33, 20}^2 of (R_D*, R_N*);
    ``"robust"``: the same objective from a log-spaced grid (0.5 .. 1000)^2; ``grid``: explicit
    (R_D*, R_N*) starts. ``free="all"`` also fits the five Chinchilla coefficients from
    ``coefficients``; U_N always uses ``coefficients`` (as the authors' inputs do). The default
    bootstrap resamples runs (``"pairs"``): R_N* is informed by the few runs with N > U_N only,
    and a residual bootstrap, moving residuals between runs, shifts it (its 90% interval on the
    182 runs excludes the estimate).
    """
    n_boot, level, seed = from_options(options, dict(n_boot=n_boot, level=level, seed=seed),
                                       fit_data_constrained).values()  # the loose keywords: one release
    if free not in ("R", "all"):
        raise ValueError(f"free must be 'R' or 'all', got {free!r}")
    is_free = free == "all"
    N, D, U, L = _check(N, D, U, loss, 8 if is_free else 3, f"fit_data_constrained(free={free!r})")
    check_recipe(recipe)
    # smoothed residual bootstrap: a Huber fit with delta far below the noise behaves like LAD (as fit_chinchilla)
    spec = Bootstrap(n_boot=n_boot, kind=bootstrap, level=level, seed=seed, groups=groups,
                     smooth=True).checked(len(L), "fit_data_constrained")
    w = check_weights(weights, len(L))
    law, X, T = DataConstrainedLaw(coefficients, is_free), repetition_inputs(N, D, U, coefficients), np.log(L)
    starts = _starts(grid, is_free, coefficients, recipe)
    res = minimize_law(law, X, T, starts, loss="huber_log", delta=delta, W=w)
    ok = res.converged & np.isfinite(res.f)
    warnings: list[str] = []
    if not ok.any():
        emit(warnings, "fit_data_constrained: no start converged; reporting the lowest end point", warn=True,
             code="not_converged")
    j = int(np.argmin(np.where(ok, res.f, np.inf))) if ok.any() else int(np.nanargmin(res.f))
    theta = res.x[j]
    # end points with an R* beyond PLATEAU sit on the flat R* -> infinity plateau, not in a minimum
    finite = ok & (res.x[:, -2:].max(axis=1) < math.log(PLATEAU))
    minima = tuple({"R_D_star": float(math.exp(x[-2])), "R_N_star": float(math.exp(x[-1])), "objective": f}
                   for x, f in distinct_minima(res.x, res.f, finite))
    if len(minima) > 1:
        emit(warnings, f"fit_data_constrained: {len(minima)} distinct local minima in (R_D*, R_N*); the lowest is "
                       f"reported, all are in local_minima (the surface is flat)")
    if max(theta[-2:]) > math.log(PLATEAU):
        emit(warnings, f"fit_data_constrained: an R* ran above {PLATEAU:g}: repetition costs nothing on these runs (not identified)",
             code="not_identified")

    def derived(th):
        d = {"R_D_star": np.exp(th[:, -2]), "R_N_star": np.exp(th[:, -1])}
        if is_free:
            d.update(E=np.exp(th[:, 2]), A=np.exp(th[:, 0]), B=np.exp(th[:, 1]), alpha=th[:, 3], beta=th[:, 4])
        return d

    a, b, e, al, be = theta[:5] if is_free else coefficients
    params = {"R_D_star": math.exp(theta[-2]), "R_N_star": math.exp(theta[-1]), "E": math.exp(e), "A": math.exp(a),
              "B": math.exp(b), "alpha": float(al), "beta": float(be)}
    return law_result(DataConstrainedFit, law, X, T, theta, spec, name="data-constrained", objective=res.f[j],
                      converged=ok[j], status=STATUS[int(res.status[j])], recipe=recipe, loss="huber_log",
                      warnings=warnings, derived=derived, delta=delta, weights=w, params=params,
                      coefficients=tuple(float(c) for c in coefficients), free=is_free, local_minima=minima,
                      max_unique_tokens=float(U.max()))


def data_constrained_objective(N, D, U, loss, R_D_star: float, R_N_star: float, *,
                               coefficients=C4_COEFFICIENTS, delta: float = HUBER_DELTA) -> float:
    """The authors' objective (summed Huber of log L-hat - log L) at given R_D*, R_N*."""
    N, D, U, L = _check(N, D, U, loss)
    X = repetition_inputs(N, D, U, coefficients)
    obj = LawObjective(DataConstrainedLaw(coefficients), X, np.log(L), None, "huber_log", delta)
    return float(obj(np.array([[math.log(R_D_star), math.log(R_N_star)]]), np.arange(1))[0][0])


def data_constrained_law(R_D_star: float = PUBLISHED_R_STAR[0], R_N_star: float = PUBLISHED_R_STAR[1], *,
                         coefficients=C4_COEFFICIENTS) -> DataConstrainedFit:
    """A DataConstrainedFit from given parameters (no data, no bootstrap); by default the
    authors' published law (C4 coefficients, R* = 15.387756, 5.309743), or read back from the
    ``params``/``coefficients`` of a saved ``DataConstrainedFit.to_dict()``."""
    if not (R_D_star > 0 and R_N_star > 0):
        raise ValueError(f"R_D_star and R_N_star must be positive, got {R_D_star}, {R_N_star}")
    a, b, e, al, be = (float(c) for c in coefficients)
    params = {"R_D_star": float(R_D_star), "R_N_star": float(R_N_star), "E": math.exp(e), "A": math.exp(a),
              "B": math.exp(b), "alpha": al, "beta": be}
    return _given(params, (math.log(R_D_star), math.log(R_N_star)), (a, b, e, al, be))


def _given(params: dict, theta, coefficients, free: bool = False) -> DataConstrainedFit:
    return DataConstrainedFit(law="data-constrained", params=params, objective=math.nan, n=0, recipe="given",
                              loss="huber_log", converged=True, theta=tuple(theta),
                              coefficients=tuple(coefficients), free=free, optimizer="given")


def epoch_costs(params, tokens, unique_tokens: float, fit: DataConstrainedFit | None = None) -> pd.DataFrame:
    """The loss cost of the repetition a grid implies under a unique-token budget (Eq. 5): per
    (params, tokens), epochs = tokens / U (U = ``unique_tokens``, at most the tokens), the loss with
    U unique tokens repeated, with all tokens unique, and ``epoch_cost`` (absolute and in %).
    ``fit``: a fitted law; default the authors' C4 law, whose absolute losses are C4 nats."""
    law = fit or data_constrained_law()
    P, D = check_points({"params": params, "tokens": tokens}, 1, "epoch_costs")
    if not unique_tokens > 0:
        raise UserError(f"unique_tokens must be positive, got {unique_tokens}")
    U = np.minimum(D, float(unique_tokens))
    repeated, fresh = law.predict(P, D, U), law.predict(P, D, D)
    return pd.DataFrame({"epochs": D / U, "loss_unique": fresh, "loss_repeated": repeated,
                         "epoch_cost": repeated - fresh, "epoch_cost_pct": 100 * (repeated - fresh) / fresh})


def read_data_constrained(path) -> DataConstrainedFit:
    """The law saved by ``interpscale fit law data-constrained --out`` (or any JSON holding a
    ``DataConstrainedFit.to_dict()``, bare or under ``"fit"``), without its bootstrap draws."""
    p = Path(path)
    try:
        d = json.loads(p.read_text())
        d = d.get("fit", d)
        if d.get("free"):  # all seven fitted: theta = (a, b, e, alpha, beta, log R_D*, log R_N*)
            return _given(dict(d["params"]), map(float, d["theta"]), d["coefficients"], free=True)
        return data_constrained_law(d["params"]["R_D_star"], d["params"]["R_N_star"], coefficients=d["coefficients"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{p}: not a saved data-constrained fit ({type(exc).__name__}: {exc})") from exc


def plan_epoch_costs(table: pd.DataFrame, unique_tokens: float, fit: DataConstrainedFit | None = None,
                     *, params: str = "P", tokens: str = "D") -> tuple[pd.DataFrame, str]:
    """The planner's table with ``epochs``, ``loss_unique``, ``loss_repeated``, ``epoch_cost`` and
    ``epoch_cost_pct`` (:func:`epoch_costs`) added, and a few lines saying what the repetition costs."""
    costs = epoch_costs(table[params], table[tokens], unique_tokens, fit)
    out = pd.concat([table.reset_index(drop=True), costs], axis=1)
    law = "the authors' C4 law" if fit is None else f"the given law (R_D* = {fit.params['R_D_star']:.4g})"
    worst = costs.loc[costs["epoch_cost_pct"].idxmax()] if len(costs) else None
    lines = [f"repeated data: {unique_tokens:.3g} unique tokens; loss cost of the epochs by {law} "
             "(Muennighoff et al. 2023, Eq. 5)"]
    if worst is None or worst["epochs"] <= 1:
        lines.append("  no planned point repeats data")
    else:
        lines.append(f"  {int((costs['epochs'] > 1).sum())} of {len(costs)} points repeat data; at most "
                     f"{worst['epochs']:.3g} epochs, costing {worst['epoch_cost']:.4f} nats "
                     f"({worst['epoch_cost_pct']:.2f}% of the unique-data loss)")
    return out, "\n".join(lines)


# ---- over-training law and downstream error (Gadre et al. 2024) ----

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
        L = np.atleast_2d(np.asarray(X, float))  # one row of losses per parameter row, or shared
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
        """Interval of a new run's downstream error (see ``engine.chained_interval``)."""
        return chained_interval(self, N, D, error_fit, level, seed=seed)


def _powlaw(x, a, c, b, E):  # the authors' powlaw_ours, x = (N, M)
    N, M = x
    return a * np.power(N, b) + c * np.power(6, b / 2) * np.power(M * N, b) + E


def fit_overtraining(N, D, loss, *, recipe: Literal["authors", "robust"] = "authors", grid=None,
                     delta: float = HUBER_DELTA, weights=None, n_boot: int = DEFAULT_N_BOOT,
                     bootstrap: Literal["residual", "pairs", "cluster"] = "residual",
                     level: float = DEFAULT_LEVEL, seed: int = 0, groups=None, options=None) -> OvertrainingFit:
    """Fit L(N, D) = E + a N^b + c 6^(b/2) D^b to runs by the ``recipe`` (module doc) from ``grid``
    (default the authors' 128 starts of (a, c, b, E)); replicates refit the recipe's objective."""
    n_boot, level, seed = from_options(options, dict(n_boot=n_boot, level=level, seed=seed),
                                       fit_overtraining).values()  # the loose keywords: one release
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
            emit(warnings, "fit_overtraining: no start converged; reporting the lowest end point", warn=True,
                 code="not_converged")
    if theta[2] >= 0:
        emit(warnings, f"fit_overtraining: exponent b = {theta[2]:.4g} >= 0; the loss does not fall with scale",
             code="not_identified")

    def derived(th):
        return {"E": th[:, 3], "a": th[:, 0], "c": th[:, 1], "b": th[:, 2], "eta": -th[:, 2],
                "B": th[:, 1] * np.exp(th[:, 2] * LOG6_HALF)}

    return law_result(OvertrainingFit, law, X, T, theta, spec, name="overtraining", objective=obj,
                      converged=ok, status=st, recipe=recipe, loss=loss_kind, warnings=warnings,
                      derived=derived, delta=delta, weights=w)


def fit_downstream_error(loss, error, *, p0=(1.0, 1.0, 1.0), n_boot: int = DEFAULT_N_BOOT,
                         bootstrap: Literal["residual", "pairs", "cluster"] = "residual",
                         level: float = DEFAULT_LEVEL, seed: int = 0, groups=None, options=None) -> DownstreamErrorFit:
    """Fit Err(L) = eps - k exp(-gamma L) by least squares (``curve_fit`` from ``p0`` =
    (k, gamma, eps), default all ones as the authors)."""
    n_boot, level, seed = from_options(options, dict(n_boot=n_boot, level=level, seed=seed),
                                       fit_downstream_error).values()  # the loose keywords: one release
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


# ---- model ladder (Bhagia et al. 2024) ----

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
        x = np.atleast_2d(np.asarray(X, float))  # one row of losses per parameter row, or shared
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


def _composite(parts: dict, prefixes: dict | None = None) -> dict:
    """The ``FitFields`` of a result made of several fits ``{name: fit}`` (None entries left out),
    decided where it is made: converged when every part is, each part's intervals (keys prefixed
    by ``prefixes[name]``), the first part's level, every warning, and ``combined_status``."""
    fits = {k: f for k, f in parts.items() if f is not None}
    pre = prefixes or {}
    return dict(converged=all(bool(f.converged) for f in fits.values()),
                ci={pre.get(k, "") + n: v for k, f in fits.items() for n, v in f.ci.items()},
                level=next(iter(fits.values())).level, warnings=tuple(w for f in fits.values() for w in f.warnings),
                status=combined_status(fits))


@dataclass(frozen=True)
class LadderFit(FitFields):
    """Both steps and the chained prediction. ``step2`` is None when no checkpoints were given;
    ``converged``, ``ci`` (step 2's prefixed ``step2_``), ``warnings`` and ``status`` (the worse of
    the two steps') are both steps' (``LadderFit.of``)."""

    step1: TaskLossFit
    step2: SigmoidFit | None = None

    @classmethod
    def of(cls, step1: TaskLossFit, step2: SigmoidFit | None = None) -> "LadderFit":
        return cls(step1, step2, **_composite({"step 1": step1, "step 2": step2}, {"step 2": "step2_"}))

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
        curves, plus step-2 noise (``engine.chained_interval``)."""
        return chained_interval(self.step1, N, D, self._need_step2(), level, seed=seed)

    def to_dict(self) -> dict:
        return {"step1": self.step1.to_dict(), "step2": None if self.step2 is None else self.step2.to_dict(),
                "status": self.status.to_dict()}

    def summary(self) -> str:
        return "\n".join(f.summary() for f in (self.step1, self.step2) if f is not None)


def _fit_step1(N, D, L, recipe, delta, w, spec) -> TaskLossFit:
    law, X, T = TaskLossLaw(), (N, D), np.log(L)
    warnings: list[str] = []
    if recipe == "authors":  # the authors' step 1: L-BFGS-B from AUTHORS_START, all parameters >= 0
        ww = np.ones_like(L) if w is None else w

        def huber_log(p):
            y, J = law.model(p[None, :], X)
            rho, d = huber(np.log(y[0]) - T, delta)
            return float((ww * rho).sum()), (ww * d / y[0]) @ J[0]

        r = minimize(huber_log, np.array(AUTHORS_START), jac=True, method="L-BFGS-B", bounds=[(0, None)] * 5,
                     tol=0.0, options={"ftol": 0.0, "gtol": 1e-10, "maxiter": 1_000_000})
        # with ftol = 0 L-BFGS-B ends when its line search can no longer lower f at machine precision
        # (ABNORMAL_TERMINATION_IN_LNSRCH): that is the authors' stopping point, not a failure
        theta, obj, st = r.x, float(r.fun), str(r.message)
        ok = bool(r.success) or "ABNORMAL" in st
    else:
        theta, obj, ok, code, *_ = multistart(law, X, T, np.array(ROBUST_GRID), loss="huber_log", delta=delta, W=w)
        st = STATUS[code]
    if not ok:
        emit(warnings, f"fit_ladder step 1: the optimiser did not converge ({st})", warn=True, code="not_converged")
    if recipe == "authors" and (theta <= 0).any():
        emit(warnings, "fit_ladder step 1: parameters on their bound 0: " + ", ".join(
            n for n, v in zip(law.names, theta) if v <= 0), code="at_bound")

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
    if spec.kind == "cluster" and ideal_point:  # the ideal point is a cluster of its own
        spec = replace(spec, groups=np.append(spec.groups, "__ideal__"))
    keep = np.zeros(len(x), bool)
    keep[-1] = ideal_point  # the ideal point is an anchor: in every replicate, as given
    return law_result(SigmoidFit, law, x, to_fit_scale(y, loss_kind), theta, spec, name="ladder-step2",
                      objective=obj, converged=ok, status=st, recipe=recipe, loss=loss_kind, warnings=[],
                      derived=lambda th: dict(zip(law.names, th.T)), delta=delta, keep=keep,
                      bounds=STEP2_BOUNDS if recipe == "authors" else None)


def fit_ladder(N, D, task_loss, *, checkpoint_loss=None, checkpoint_accuracy=None, checkpoint_groups=None,
               task_min: float = 0.25, task_max: float = 1.0, ideal_point: bool = True,
               recipe: Literal["authors", "robust"] = "authors", delta: float = HUBER_DELTA, weights=None,
               n_boot: int = DEFAULT_N_BOOT, bootstrap: Literal["residual", "pairs", "cluster"] = "residual",
               level: float = DEFAULT_LEVEL, seed: int = 0, groups=None, options=None) -> LadderFit:
    """Fit step 1 on (N, D, task_loss) (one point per ladder run) and, given checkpoint task
    losses and accuracies (e.g. from :func:`checkpoint_points`), step 2; ``task_min`` is the
    chance accuracy that sets step 2's start (0.25 for 4-way multiple choice). For
    ``bootstrap="cluster"``, ``groups`` labels step-1 rows and ``checkpoint_groups`` the
    checkpoints (their run)."""
    n_boot, level, seed = from_options(options, dict(n_boot=n_boot, level=level, seed=seed),
                                       fit_ladder).values()  # the loose keywords: one release
    N, D, L = check_points({"N (params)": N, "D (tokens)": D, "task_loss": task_loss}, 6,
                           "fit_ladder step 1 (5 free parameters)")
    check_recipe(recipe)
    spec1 = Bootstrap(n_boot=n_boot, kind=bootstrap, level=level, seed=seed, groups=groups,
                      smooth=True).checked(len(L), "fit_ladder step 1")
    step1 = _fit_step1(N, D, L, recipe, delta, check_weights(weights, len(L)), spec1)
    if checkpoint_loss is None and checkpoint_accuracy is None:
        return LadderFit.of(step1)
    x, y = check_points({"checkpoint_loss": checkpoint_loss, "checkpoint_accuracy": checkpoint_accuracy}, 5,
                        "fit_ladder step 2 (4 free parameters)")
    spec2 = Bootstrap(n_boot=n_boot, kind=bootstrap, level=level, seed=seed + 1,
                      groups=checkpoint_groups).checked(len(x), "fit_ladder step 2")
    return LadderFit.of(step1, _fit_step2(x, y, recipe, task_min, task_max, ideal_point, spec2, delta))


# ---- the laws by CLI name: ``fit law`` on a run table and the laws as forecast methods ----

@dataclass(frozen=True)
class LawTableFit(FitFields):
    """``fit``: the law's result; ``extra``: the chained law (over-training error law) or None;
    ``runs``: the reduced table the fit used; ``per_run``: the --run/--step column that grouped it;
    ``converged``, ``ci`` (the error law's prefixed ``error_law_``), ``warnings`` and ``status`` (the
    worse of the two) are both fits' (``LawTableFit.of``)."""

    law: str
    fit: Any
    runs: pd.DataFrame = field(compare=False)
    source: tuple[str, ...]
    last: int | None
    extra: Any = None
    per_run: str | None = None

    @classmethod
    def of(cls, law: str, fit: Any, extra: Any = None, **fields) -> "LawTableFit":
        """The result of ``fit`` (and the chained ``extra``) with its status decided from both."""
        return cls(law=law, fit=fit, extra=extra, **fields,
                   **_composite({law: fit, "error law": extra}, {"error law": "error_law_"}))

    def to_dict(self) -> dict:
        extra = {} if self.extra is None else {"error_law": self.extra.to_dict()}
        return {"law": self.law, "source": list(self.source), "last": self.last, "n_runs": len(self.runs),
                "fit": self.fit.to_dict(), "status": self.status.to_dict()} | extra

    def summary(self) -> str:
        """``fit law``'s output: runs counted as runs, not as logged rows or checkpoints, then each fit."""
        runs = count_runs(self.runs, self.last, self.per_run)
        head = f"{self.law} fit of {runs} from {', '.join(self.source)}"
        return "\n".join([head] + [f.summary() for f in (self.fit, self.extra) if f is not None])


def fit_law_table(law: str, paths, *, params: str, tokens: str | None = None, unique_tokens: str | None = None,
                  loss: str | None = None, metric: str | None = None, run: str | None = None, step: str | None = None,
                  tokens_per_step=None, last: int = 1, recipe: Literal["authors", "robust"] = "authors",
                  task_min: float = 0.25,
                  n_boot: int | None = None, level: float | None = None, seed: int | None = None,
                  keep=None, options=None) -> LawTableFit:
    """Read ``paths`` by column mapping and fit ``law`` (one of ``LAWS``); see the module doc.
    ``keep(path, table)``: the rows of each file to read (``external.read_runs``). ``options`` (a
    ``FitOptions``): the bootstrap replicates, level and seed of the fit (the loose ``n_boot``,
    ``level``, ``seed``, each the law's default when None, are kept for one release)."""
    if law not in LAWS:
        raise UserError(f"unknown law {law!r}; choose from {', '.join(LAWS)}")
    if loss is None:
        raise UserError(f"fit law {law}: map --loss (the column to fit)")
    if law == "data-constrained" and unique_tokens is None:
        raise UserError("fit law data-constrained: map --unique-tokens (unique tokens of each run)")
    mapping = dict(params=params, tokens=tokens, unique_tokens=unique_tokens, loss=loss, metric=metric, run=run,
                   step=step, tokens_per_step=tokens_per_step, keep=keep)
    table: RunTable = read_runs(paths, last=last, **mapping)
    given = from_options(options, dict(n_boot=n_boot, level=level, seed=seed), fit_law_table)
    boot = {k: v for k, v in given.items() if v is not None}
    try:
        fit, extra = LAWS[law].table(table, paths, mapping, boot=boot, recipe=recipe, task_min=task_min,
                                     last=last, metric=metric)
    except ValueError as exc:  # identical tokens on per-step logs: say that every run ends at one step
        raise UserError("distinct" in str(exc) and same_end_reason(paths, mapping, last) or str(exc)) from exc
    return LawTableFit.of(law, fit, extra, runs=table.frame, source=table.source, last=last, per_run=run or step)


def _pdl(table: RunTable):
    return table.column("params"), table.column("tokens"), table.column("loss")


def chinchilla_table(table, paths, mapping, *, boot, **_):
    """Eq. 27 on the runs."""
    return fit_chinchilla(*_pdl(table), **boot), None


def data_constrained_table(table, paths, mapping, *, boot, recipe, **_):
    """Muennighoff et al. Eq. 5 on the runs (needs unique tokens)."""
    P, D, L = _pdl(table)
    return fit_data_constrained(P, D, table.column("unique_tokens"), L, recipe=recipe, **boot), None


def overtraining_table(table, paths, mapping, *, boot, recipe, metric, **_):
    """Gadre et al. on the runs, with the error law Err(L) when a metric is mapped."""
    P, D, L = _pdl(table)
    extra = fit_downstream_error(L, table.column("metric"), **boot) if metric is not None else None
    return fit_overtraining(P, D, L, recipe=recipe, **boot), extra


def ladder_table(table, paths, mapping, *, boot, recipe, task_min, last, metric, **_):
    """Bhagia et al. step 1 on the runs; step 2 on every logged checkpoint when a metric is mapped."""
    ck = {}
    if metric is not None:
        if mapping["step"] is None and mapping["run"] is None:
            raise UserError("fit law ladder: step 2 (--metric) needs per-step logs: map --run and/or --step")
        steps = read_runs(paths, last=None, **mapping).frame
        x, y, g = checkpoint_points(steps["run"], steps["loss"], steps["metric"], window=max(int(last), 1))
        ck = dict(checkpoint_loss=x, checkpoint_accuracy=y, checkpoint_groups=g)
    return fit_ladder(*_pdl(table), recipe=recipe, task_min=task_min, **ck, **boot), None


@dataclass(frozen=True)
class PublishedLaw:
    """A law's one registry entry, by its CLI name: ``table(run table, paths, mapping, *, boot,
    recipe, task_min, last, metric)`` fits it for ``fit law`` -> (fit, chained fit or None). A law
    with an ``equation`` is also the forecast method of that name (``method()``, opt-in:
    ``register_law_methods``): ``fit(params, tokens, loss[, unique tokens], n_boot=, level=, seed=)``
    on a family's rows, predicted at (params, tokens) or at the compute-optimal allocation of C by
    its ``coef`` (A, B, alpha, beta); ``unique``: the rows need ``unique_tokens``, predicted at
    min(D, the largest fitted U)."""

    name: str
    table: Callable
    equation: str = ""
    fit: Callable | None = None
    coef: tuple = ("A", "B", "alpha", "beta")
    unique: bool = False

    def _fit_rows(self, rows: pd.DataFrame, o: ForecastOptions):
        need = ["params", "tokens", o.loss] + (["unique_tokens"] if self.unique else [])
        if missing := [c for c in need if c not in rows.columns]:
            raise UserError(f"the table has no column {missing[0]!r}")
        r = rows.dropna(subset=need)
        return self.fit(*(r[c] for c in need), **o.boot())

    def _predict(self, fit, compute, o: ForecastOptions, params=None, tokens=None):
        if params is None or tokens is None:
            # Eq. 27's allocation (Hoffmann et al. App. D.2)
            A, B, alpha, beta = (fit.params[c] for c in self.coef)
            params, tokens = optimal_allocation(np.array([np.log(A), np.log(B), 0.0, alpha, beta]), compute, o.k)
        extra = (np.minimum(tokens, fit.max_unique_tokens),) if self.unique else ()
        lo, hi = fit.predict_interval(params, tokens, *extra, level=o.level, seed=o.seed)
        return float(fit.predict(params, tokens, *extra)), float(lo), float(hi)

    def method(self) -> ForecastMethod:
        return ForecastMethod(self.name, self.equation, self._fit_rows, self._predict)


LAWS: Registry = Registry("law")
for _law in (
    PublishedLaw("chinchilla", chinchilla_table),
    PublishedLaw("data-constrained", data_constrained_table,
                 "Muennighoff et al. 2023 Eq. 5: repeated data (needs unique_tokens)",
                 lambda P, D, L, U, **b: fit_data_constrained(P, D, U, L, free="all", recipe="robust", **b),
                 unique=True),
    PublishedLaw("overtraining", overtraining_table, "Gadre et al. 2024: L = E + a/N^eta + B/D^eta",
                 lambda P, D, L, **b: fit_overtraining(P, D, L, recipe="robust", **b),
                 coef=("a", "B", "eta", "eta")),
    PublishedLaw("ladder", ladder_table,
                 "Bhagia et al. 2024 step 1: L = A/N^alpha + B/D^beta + E (authors' start, bounds >= 0)",
                 lambda P, D, L, **b: fit_ladder(P, D, L, **b).step1),
):
    LAWS.register(_law.name, _law)


def register_law_methods() -> None:
    """Add (or re-add) the laws with an equation to ``forecast.METHODS`` (opt-in: each registered
    method adds its refits to the backtest of every default forecast)."""
    for law in LAWS.values():
        if law.equation:
            register_method(law.method(), replace_existing=True)
