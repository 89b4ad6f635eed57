"""The status of each fit, in words a reader can act on: one function per kind of fit (joint
Eq. 27, IsoFLOP Eqs. 25-26, bounded Eq. 29). The report, the figures and the demo all use
these, so a number is never shown for a fit that did not identify it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

# β of the bounded fit at the lower end of its search range means m(C) is a constant offset
_FLAT_BETA = 1.01e-3
_MIN_TREND_R2 = 0.1  # below this the metric does not move with compute beyond its noise
_L_INF_FLOOR = 0.01  # an L∞ (or the lower end of its interval) under 1% of the estimate has collapsed


def joint_status(ch: Any) -> tuple[str, str]:
    """(status, reason) of a joint fit (Eq. 27): ``identified``, ``not identified``,
    ``not converged`` or ``not fitted``."""
    if ch is None:
        return "not fitted", "too few usable rows"
    if not ch.identified:  # typed field set by fit_chinchilla (L∞ collapsed or an exponent <= 0)
        if not (ch.alpha > 0 and ch.beta > 0):
            return "not identified", f"non-positive exponent (α={ch.alpha:.3g}, β={ch.beta:.3g})"
        return "not identified", f"L∞ collapsed to {ch.L_inf:.3g}: the points do not pin down the irreducible loss"
    if not ch.converged:
        return "not converged", ch.status or "the optimiser did not converge"
    lo = (ch.ci or {}).get("L_inf", (math.nan, math.nan))[0]
    if np.isfinite(lo) and lo < _L_INF_FLOOR * ch.L_inf:
        return "not identified", (f"the {ch.level:.0%} interval of L∞ reaches down to {lo:.3g} "
                                  f"(< {_L_INF_FLOOR:g} × the estimate {ch.L_inf:.3g})")
    return "identified", ""


def isoflop_status(iso: Any) -> tuple[str, str]:
    """(status, reason) of an IsoFLOP fit (Eq. 25-26): ``ok``, ``uncertain`` (the interval of
    α_P includes 0), ``not converged`` or ``not fitted``."""
    if iso is None:
        return "not fitted", "fewer than two usable slices"
    sl, detail = iso.slices, ""  # IsoFlopFit.slices: one row per slice, with "used" and "interior"
    if len(sl):
        detail = f"{int(sl['used'].sum())} of {len(sl)} slices used"
        if edge := int((~sl["interior"].astype(bool)).sum()):
            detail += f"; {edge} slice(s) with the minimum at an edge size"
    if not iso.converged:
        return "not converged", detail
    lo, hi = iso.ci.get("alpha_P") or (math.nan, math.nan)
    if np.isfinite(lo) and np.isfinite(hi) and lo <= 0 <= hi:
        return "uncertain", (f"the {iso.level:.0%} interval of α_P [{lo:.2f}, {hi:.2f}] includes 0: "
                             "these slices do not fix how the optimal size grows" + (f"; {detail}" if detail else ""))
    return "ok", detail


def trend_status(b: Any) -> tuple[str, str]:
    """(status, reason) of a bounded metric fit (Eq. 29): ``trend`` or ``no trend`` (the metric
    does not move with compute: flat fit, β at its lower bound, R² under 0.1, or an interval
    of A that reaches 0)."""
    if b is None:
        return "not fitted", ""
    if not b.A > 0 or not b.converged:
        return "no trend", "the best fit is flat (A = 0)"
    if not b.beta > _FLAT_BETA:
        return "no trend", f"β at its lower bound ({b.beta:.3g}): a constant offset"
    if not (np.isfinite(b.r2) and b.r2 >= _MIN_TREND_R2):
        return "no trend", f"R² = {b.r2:.2f}: compute explains no more than the noise"
    lo = (b.ci or {}).get("A", (math.nan, math.nan))[0]
    if np.isfinite(lo) and lo <= 0:
        return "no trend", f"the {b.level:.0%} interval of A includes 0"
    return "trend", ""


def fit_statuses(fits: Any) -> dict[str, dict[str, tuple[str, str]]]:
    """Per family of a ``fit_families`` result: (status, reason) of its IsoFLOP fit (``isoflop``),
    joint fit (``joint``) and each metric's bounded fit (by metric name)."""
    return {fam: {"isoflop": isoflop_status(f.isoflop), "joint": joint_status(f.chinchilla),
                  **{m: trend_status(b) for m, b in f.bounded.items()}} for fam, f in fits.families.items()}
