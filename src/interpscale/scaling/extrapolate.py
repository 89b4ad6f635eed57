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

from ._base import DEFAULT_LEVEL, fields_dict, fmt_ci
from .chinchilla import ChinchillaFit
from .isoflop import IsoFlopFit
from .power_law import PowerLawFit



@dataclass(frozen=True)
class Extrapolation:
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

    @property
    def joint_error(self) -> float | None:
        """observed - joint prediction (None without an observation)."""
        return None if self.observed is None else self.observed - self.joint

    @property
    def loglinear_error(self) -> float | None:
        return None if self.observed is None else self.observed - self.loglinear

    @property
    def ci(self) -> dict:
        return {"joint": self.joint_ci, "loglinear": self.loglinear_ci}

    @property
    def pi(self) -> dict:
        return {"joint": self.joint_pi, "loglinear": self.loglinear_pi}

    def predict(self) -> dict:
        return {"joint": self.joint, "loglinear": self.loglinear}

    def to_dict(self) -> dict:
        d = fields_dict(self)
        d.update(joint_error=self.joint_error, loglinear_error=self.loglinear_error)
        return d

    def summary(self) -> str:
        pct = round(100 * self.level)
        lines = [
            f"extrapolation to C = {self.compute:.3g} FLOPs ({self.allocation}: P = {self.params:.3g}, "
            f"D = {self.tokens:.3g}; {pct}% confidence | prediction intervals)",
            f"  joint Chinchilla  {fmt_ci(self.joint, self.joint_ci)}  PI [{self.joint_pi[0]:.3f}, {self.joint_pi[1]:.3f}]",
            f"  log-linear L*(C)  {fmt_ci(self.loglinear, self.loglinear_ci)}  "
            f"PI [{self.loglinear_pi[0]:.3f}, {self.loglinear_pi[1]:.3f}]",
        ]
        if self.observed is not None:
            lines.append(
                f"  observed {self.observed:.3f}: joint error {self.joint_error:+.3f}, "
                f"log-linear error {self.loglinear_error:+.3f}"
            )
        return "\n".join(lines + [f"  warning: {w}" for w in self.warnings])


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
    level = level or joint.level
    pl = loglinear.power_L if isinstance(loglinear, IsoFlopFit) else loglinear
    if (params is None) != (tokens is None):
        raise ValueError("give both params and tokens, or neither (compute-optimal allocation)")
    if params is None:
        P, D = (float(v) for v in joint.optimal_allocation(compute, flops_per_token_per_param))
        j = float(joint.predict_optimal(compute, flops_per_token_per_param))
        jlo, jhi = joint.band_optimal(np.array([compute]), level, flops_per_token_per_param)
        jpl, jph = joint.predict_interval_optimal(np.array([compute]), level, flops_per_token_per_param)
        allocation = "compute-optimal"
    else:
        P, D = float(params), float(tokens)
        j = float(joint.predict(P, D))
        jlo, jhi = joint.band(np.array([P]), np.array([D]), level)
        jpl, jph = joint.predict_interval(np.array([P]), np.array([D]), level)
        allocation = "given"
    llo, lhi = pl.band(np.array([compute]), level)
    if isinstance(loglinear, IsoFlopFit):
        lpl, lph = loglinear.predict_interval(np.array([compute]), level)["L_star"]
    else:
        lpl, lph = pl.predict_interval(np.array([compute]), level)
    warnings = list(joint.warnings) + list(pl.warnings)
    lo_c = pl.x_range[1]
    if math.isfinite(lo_c) and compute > 100 * lo_c:
        warnings.append(f"extrapolating {compute / lo_c:.3g}x beyond the largest fitted compute")
    return Extrapolation(
        compute=float(compute),
        joint=j,
        joint_ci=(float(jlo[0]), float(jhi[0])),
        loglinear=float(pl.predict(compute)),
        loglinear_ci=(float(llo[0]), float(lhi[0])),
        params=P,
        tokens=D,
        allocation=allocation,
        observed=None if observed is None else float(observed),
        joint_pi=(float(jpl[0]), float(jph[0])),
        loglinear_pi=(float(lpl[0]), float(lph[0])),
        level=level,
        converged=bool(joint.converged and pl.converged),
        warnings=tuple(warnings),
    )
