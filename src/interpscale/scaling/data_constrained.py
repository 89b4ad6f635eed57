"""Data-constrained scaling law (Muennighoff et al. 2023, Eq. 5): loss with repeated data.

With U unique tokens seen D/U times and N parameters, repetition and excess parameters
decay in value (paper §3.1, Eq. 5)::

    U_N = min(N_opt(C(U)), N),   R_D = max(D/U - 1, 0),   R_N = max(N/U_N - 1, 0)
    D'  = U   + U   R_D* (1 - exp(-R_D / R_D*))          (effective data)
    N'  = U_N + U_N R_N* (1 - exp(-R_N / R_N*))          (effective parameters)
    L   = E + A / N'^alpha + B / D'^beta

N_opt(C(U)): the Chinchilla compute-optimal size where U tokens are optimal, from fixed
coefficients (default: the authors' C4 fit). The authors' recipe fits R_D*, R_N* only, by the
summed Huber loss (delta = 1e-3) of log L-hat - log L from the grid {6.67, 13.33, 20}^2;
``free="all"`` also fits E, A, B, alpha, beta. The R* surface is flat with several local minima:
every distinct one the starts reach is in ``local_minima``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from ._base import check_points, check_weights, emit
from ._optim import STATUS
from .bootstrap import DEFAULT_LEVEL, DEFAULT_N_BOOT, Bootstrap
from .lawfit import HUBER_DELTA, LawFit, LawObjective, check_recipe, distinct_minima, law_result, minimize_law

# a, b, e, alpha, beta of the authors' C4 Chinchilla fit (alpha = beta tied); README "Parametric Fit"
C4_COEFFICIENTS = (6.255414, 7.3049974, 0.6254804, 0.3526596, 0.3526596)
PUBLISHED_R_STAR = (15.387756, 5.309743)  # R_D*, R_N* (notebook cell 29; paper: 15.4, 5.3)
REPETITION_AUTHORS_GRID = tuple(itertools.product(np.linspace(0, 20, 4)[1:], repeat=2))  # zeros give NaN: skipped
COEF_NAMES = ("a", "b", "e", "alpha", "beta")
PLATEAU = 1e6  # an R* this large means exp(-R/R*) ~ 1 on any run: the repetition term is switched off


def repetition_inputs(N, D, U, coefficients=C4_COEFFICIENTS):
    """(U_N, U, R_D, R_N) of Eq. 5 from the fixed Chinchilla coefficients (a, b, e, alpha, beta)."""
    a, b, _, al, be = coefficients
    G = (al * math.exp(a) / (be * math.exp(b))) ** (1.0 / (al + be))  # Hoffmann et al. App. D.2
    # U tokens are compute-optimal at C = 6 N D with D = U: N_opt(C(U)) = G (G U)^(beta/alpha)
    UN = np.minimum(G * (G * U) ** (be / al), N)
    return UN, U, np.maximum(D / U - 1.0, 0.0), np.maximum(N / UN - 1.0, 0.0)


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
    if (U > D * (1 + 1e-9)).any():
        i = int(np.flatnonzero(U > D * (1 + 1e-9))[0])
        raise ValueError(f"U (unique tokens): row {i} has U = {U[i]:g} > D = {D[i]:g}; unique tokens cannot exceed tokens seen")
    return N, D, U, L


def _starts(grid, free: bool, coefficients, recipe: str) -> np.ndarray:
    if grid is None:
        grid = REPETITION_AUTHORS_GRID if recipe == "authors" else tuple(itertools.product(np.geomspace(0.5, 1000.0, 8), repeat=2))
    R = np.log(np.asarray(grid, float).reshape(-1, 2))
    if not free:
        return R
    coef = np.array(coefficients, float)
    return np.column_stack([np.broadcast_to(coef, (len(R), 5)), R])


def fit_data_constrained(
    N, D, U, loss, *,
    free: Literal["R", "all"] = "R",
    coefficients=C4_COEFFICIENTS,
    recipe: Literal["authors", "robust"] = "authors",
    grid=None,
    delta: float = HUBER_DELTA,
    weights=None,
    n_boot: int = DEFAULT_N_BOOT,
    bootstrap: Literal["residual", "pairs", "cluster"] = "pairs",
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
    groups=None,
) -> DataConstrainedFit:
    """Fit Eq. 5 to runs (N params, D tokens, U unique tokens, final loss).

    ``recipe="authors"``: their objective from their start grid {6.67, 13.33, 20}^2 of (R_D*, R_N*);
    ``"robust"``: the same objective from a log-spaced grid (0.5 .. 1000)^2; ``grid``: explicit
    (R_D*, R_N*) starts. ``free="all"`` also fits the five Chinchilla coefficients from
    ``coefficients``; U_N always uses ``coefficients`` (as the authors' inputs do). The default
    bootstrap resamples runs (``"pairs"``): R_N* is informed by the few runs with N > U_N only,
    and a residual bootstrap, moving residuals between runs, shifts it (its 90% interval on the
    182 runs excludes the estimate).
    """
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
        emit(warnings, "fit_data_constrained: no start converged; reporting the lowest end point", warn=True)
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
        emit(warnings, f"fit_data_constrained: an R* ran above {PLATEAU:g}: repetition costs nothing on these runs (not identified)")

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
        raise ValueError(f"unique_tokens must be positive, got {unique_tokens}")
    U = np.minimum(D, float(unique_tokens))
    repeated, fresh = law.predict(P, D, U), law.predict(P, D, D)
    return pd.DataFrame({"epochs": D / U, "loss_unique": fresh, "loss_repeated": repeated,
                         "epoch_cost": repeated - fresh, "epoch_cost_pct": 100 * (repeated - fresh) / fresh})


def read_data_constrained(path) -> DataConstrainedFit:
    """The law saved by ``interpscale fit law data-constrained --out`` (or any JSON holding a
    ``DataConstrainedFit.to_dict()``, bare or under ``"fit"``), without its bootstrap draws."""
    import json
    from pathlib import Path

    from interpscale.errors import UserError

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
