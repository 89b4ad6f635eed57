"""What the figures need from ``interpscale.scaling`` (Eqs. 25-27, 29), in one place: the figures
never fit anything themselves ("Fit once, render many" in ``docs/architecture.md``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from interpscale.paper import SLICE_TOLERANCE
from interpscale.scaling import N_BOOT, fit_bounded, fit_families, fit_isoflop, inputs_hash, quiet
from interpscale.scaling.tables import slice_rows

DEFAULT_FIG_BOOT = N_BOOT["figure"]  # replicates for figure bands (scaling.N_BOOT; the paper's 10,000: reports)
_FAMILY_FITS: dict = {}  # (table hash, options) -> FamilyFits, this process's fits of each table


def family_fits(results: pd.DataFrame, *, n_boot: int, target_compute: float | None = None,
                actual: Mapping | None = None, seed: int = 0):
    """``scaling.fit_families(results, ...)`` with ``interpscale fit``'s defaults, made once per
    process for each table (keyed by its content hash) and set of options."""
    options = dict(n_boot=n_boot, seed=seed, target_compute=target_compute,
                   actual={k: dict(v) for k, v in (actual or {}).items()})
    key = inputs_hash(results, options)
    if key not in _FAMILY_FITS:
        _FAMILY_FITS.clear()  # one table at a time: keep memory flat in long sessions
        _FAMILY_FITS[key] = fit_families(results, **options)
    return _FAMILY_FITS[key]


@dataclass
class SliceCurve:
    """One IsoFLOP slice as drawn: the points, the fitted parabola and its minimum."""

    compute: float
    params: np.ndarray
    loss: np.ndarray
    p_star: float
    l_star: float
    curve: Callable[[np.ndarray], np.ndarray] | None
    used: bool = True  # entered the Step 2 power laws


@dataclass
class IsoflopSummary:
    """Steps 1-2 of §8.2.1 for one group of rows (a family, estimator, mask rate or state)."""

    slices: list[SliceCurve]
    power_P: Any = None  # PowerLawFit of P*(C), or None when fewer than two usable slices
    power_L: Any = None  # PowerLawFit of L*(C)
    fit: Any = None  # the scaling package's IsoFlopFit
    warnings: list[str] = field(default_factory=list)

    @property
    def minima(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        used = [s for s in self.slices if s.used and math.isfinite(s.p_star)]
        return (np.array([s.compute for s in used]), np.array([s.p_star for s in used]),
                np.array([s.l_star for s in used]))


def isoflop_summary(rows: pd.DataFrame, *, n_boot: int = DEFAULT_FIG_BOOT, seed: int = 0, fit: Any = None,
                    tolerance: float | None = SLICE_TOLERANCE) -> IsoflopSummary:
    """Per-slice parabolas (Eq. 25) and the P*(C), L*(C) power laws (Eq. 26) for ``rows`` (``fit``:
    an ``IsoFlopFit`` of them, reused; ``tolerance``: ``slice_rows``' window, None keeps all rows).
    Without two usable slices there are no power laws (reason in ``warnings``), but every convex
    parabola is kept so the slices can be drawn."""
    rows = slice_rows(rows.dropna(subset=["slice_flops", "params", "loss"]), tolerance)
    warnings: list[str] = []
    strict = True
    if fit is None:  # a figure's own fit: its flags go into ``warnings``, not the log (the report lists fits')
        with quiet():
            try:
                fit = fit_isoflop(rows, n_boot=n_boot, seed=seed)
            except ValueError as exc:
                warnings.append(str(exc))
                strict = False
                try:  # keep flagged-but-convex slices, only to draw their parabolas
                    fit = fit_isoflop(rows, n_boot=0, seed=seed, exclude_flagged=False)
                except ValueError:
                    fit = None
    slices = []
    records = fit.slices.to_dict("records") if fit is not None else [
        {"compute": float(c)} for c in np.unique(rows["slice_flops"].to_numpy(float))]
    target = rows["slice_flops"].to_numpy(float)
    for rec in records:
        compute = float(rec["compute"])
        sub = rows[np.isclose(target, compute, rtol=1e-9)]
        curve = None
        if rec.get("convex") and math.isfinite(rec.get("P_star", math.nan)):
            curve = (lambda c: (lambda p: fit.parabola(c, p)))(compute)
        slices.append(SliceCurve(
            compute=compute, params=sub["params"].to_numpy(float), loss=sub["loss"].to_numpy(float),
            p_star=float(rec.get("P_star", math.nan)), l_star=float(rec.get("L_star", math.nan)),
            curve=curve, used=bool(rec.get("used", False)) and not rec.get("reason"),
        ))
    if fit is not None:
        warnings += list(fit.warnings)
    return IsoflopSummary(slices=sorted(slices, key=lambda s: s.compute),
                          power_P=fit.power_P if strict else None, power_L=fit.power_L if strict else None,
                          fit=fit if strict else None, warnings=list(dict.fromkeys(warnings)))


def require_power_laws(summaries: Mapping[Any, IsoflopSummary], what: str, key: Any = None) -> None:
    """ValueError when no summary has power laws, with the IsoFLOP fit's reason from
    ``summaries[key]`` (default: the first)."""
    if all(s.power_L is None for s in summaries.values()):
        why = (summaries[key] if key is not None else next(iter(summaries.values()))).warnings
        raise ValueError(f"{what}: no compute-optimal power law ({'; '.join(why) or 'no usable slices'})")


def metric_fit(fits: Any, family: str, metric: str, rows: pd.DataFrame, *, n_boot: int = DEFAULT_FIG_BOOT):
    """The family's Eq. 29 fit of ``metric`` from ``fits`` (the one the report prints) when it has
    one, else fitted here on ``rows`` (flops, metric), quietly: its flags are on the result."""
    given = getattr(fits, "families", {}).get(family) if fits is not None else None
    if given is not None and metric in given.bounded:
        return given.bounded[metric]
    with quiet():  # the scaling package knows each paper metric's direction and bound by name
        return fit_bounded(rows["flops"].to_numpy(float), rows[metric].to_numpy(float), name=metric,
                           n_boot=n_boot, seed=0)
