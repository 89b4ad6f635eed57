"""Extrapolating loss to a target compute: joint Chinchilla form vs naive log-linear L*(C).

The paper (§8.2.2, Figure 24) refits both forms on small-scale checkpoints and predicts
Steerling-8B at ``paper.STEERLING_8B_COMPUTE`` FLOPs: the joint and log-linear forecasts are
``paper.STEERLING_8B_FORECAST``, the observed loss ``paper.STEERLING_8B["loss"]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from interpscale import paper

from ._base import DEFAULT_LEVEL, FitResult, fmt_ci
from .chinchilla import ChinchillaFit
from .isoflop import IsoFlopFit
from .power_law import PowerLawFit


@dataclass(frozen=True)
class Extrapolation(FitResult):
    """Joint-form and log-linear predictions at ``compute``: ``*_ci`` are confidence intervals
    of the curve, ``*_pi`` prediction intervals for an observed run (curve + residual noise)."""

    compute: float
    joint: float
    joint_ci: tuple[float, float]
    loglinear: float
    loglinear_ci: tuple[float, float]
    params: float
    tokens: float
    allocation: str  # "compute-optimal" or "given"
    observed: float | None = None
    joint_pi: tuple[float, float] = (math.nan, math.nan)
    loglinear_pi: tuple[float, float] = (math.nan, math.nan)
    level: float = DEFAULT_LEVEL
    converged: bool = True
    warnings: tuple[str, ...] = ()
    _derived = ("joint_error", "loglinear_error")

    joint_error = property(lambda self: None if self.observed is None else self.observed - self.joint,
                           doc="observed - joint prediction (None without an observation)")
    loglinear_error = property(lambda self: None if self.observed is None else self.observed - self.loglinear)
    ci = property(lambda self: {"joint": self.joint_ci, "loglinear": self.loglinear_ci})
    pi = property(lambda self: {"joint": self.joint_pi, "loglinear": self.loglinear_pi})

    def predict(self) -> dict:
        return {"joint": self.joint, "loglinear": self.loglinear}

    def _lines(self) -> list[str]:
        lines = [f"extrapolation to C = {self.compute:.3g} FLOPs ({self.allocation}: P = {self.params:.3g}, "
                 f"D = {self.tokens:.3g}; {round(100 * self.level)}% confidence | prediction intervals)",
                 f"  joint Chinchilla  {fmt_ci(self.joint, self.joint_ci)}  "
                 f"PI [{self.joint_pi[0]:.3f}, {self.joint_pi[1]:.3f}]",
                 f"  log-linear L*(C)  {fmt_ci(self.loglinear, self.loglinear_ci)}  "
                 f"PI [{self.loglinear_pi[0]:.3f}, {self.loglinear_pi[1]:.3f}]"]
        if self.observed is not None:
            lines.append(f"  observed {self.observed:.3f}: joint error {self.joint_error:+.3f}, "
                         f"log-linear error {self.loglinear_error:+.3f}")
        return lines


def extrapolate(
    joint: ChinchillaFit,
    loglinear: IsoFlopFit | PowerLawFit,
    compute: float = paper.STEERLING_8B_COMPUTE,
    *,
    observed: float | None = None,
    params: float | None = None,
    tokens: float | None = None,
    level: float | None = None,
    flops_per_token_per_param: float = 6.0,
) -> Extrapolation:
    """Predict the loss at ``compute`` with the joint form (at the given ``params``/``tokens``,
    else at the compute-optimal allocation) and with the log-linear L*(C) power law."""
    if not compute > 0:
        raise ValueError(f"compute must be positive, got {compute}")
    if (params is None) != (tokens is None):
        raise ValueError("give both params and tokens, or neither (compute-optimal allocation)")
    level, k, C = level or joint.level, flops_per_token_per_param, np.array([compute])
    pl = loglinear.power_L if isinstance(loglinear, IsoFlopFit) else loglinear
    if params is None:
        P, D = (float(v) for v in joint.optimal_allocation(compute, k))
        j, allocation = float(joint.predict_optimal(compute, k)), "compute-optimal"
        (jlo, jhi), (jpl, jph) = joint.band_optimal(C, level, k), joint.predict_interval_optimal(C, level, k)
    else:
        P, D = float(params), float(tokens)
        j, allocation = float(joint.predict(P, D)), "given"
        (jlo, jhi), (jpl, jph) = joint.band(np.array([P]), np.array([D]), level), \
            joint.predict_interval(np.array([P]), np.array([D]), level)
    llo, lhi = pl.band(C, level)
    lpl, lph = loglinear.predict_interval(C, level)["L_star"] if isinstance(loglinear, IsoFlopFit) else \
        pl.predict_interval(C, level)
    warnings = list(joint.warnings) + list(pl.warnings)
    if math.isfinite(pl.x_range[1]) and compute > 100 * pl.x_range[1]:
        warnings.append(f"extrapolating {compute / pl.x_range[1]:.3g}x beyond the largest fitted compute")
    return Extrapolation(
        compute=float(compute), joint=j, joint_ci=(float(jlo[0]), float(jhi[0])),
        loglinear=float(pl.predict(compute)), loglinear_ci=(float(llo[0]), float(lhi[0])), params=P, tokens=D,
        allocation=allocation, observed=None if observed is None else float(observed),
        joint_pi=(float(jpl[0]), float(jph[0])), loglinear_pi=(float(lpl[0]), float(lph[0])), level=level,
        converged=bool(joint.converged and pl.converged), warnings=tuple(warnings))
