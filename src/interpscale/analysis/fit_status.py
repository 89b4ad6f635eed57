"""The status of each fit in words a reader can act on. The status itself is decided once, where
the fit is made (``scaling.FitStatus``: identified / flagged / failed, with a reason); these
functions only name it in the report's terms for each kind of fit (joint Eq. 27, IsoFLOP Eqs.
25-26, bounded Eq. 29). The report, the figures and the demo all use them, so a number is never
shown for a fit that did not identify it.
"""

from __future__ import annotations

from typing import Any

from interpscale.scaling import FitStatus
from interpscale.scaling.bounded import bounded_status
from interpscale.scaling.joint import joint_status as _decide_joint
from interpscale.scaling.isoflop import isoflop_status as _decide_isoflop


def _status(fit: Any, decide) -> FitStatus:
    """The fit's own status; an object without one (e.g. read back from JSON) is decided the
    same way the fitter decides it."""
    st = getattr(fit, "status", None)
    return st if isinstance(st, FitStatus) else decide(fit)


def joint_fit_state(ch: Any) -> tuple[str, str]:
    """(status, reason) of a joint fit (Eq. 27): ``identified``, ``not identified``,
    ``not converged`` or ``not fitted``."""
    if ch is None:
        return "not fitted", "too few usable rows"
    st = _status(ch, _decide_joint)
    words = {"identified": "identified", "flagged": "not identified", "failed": "not converged"}
    return words[st.state], st.reason


def isoflop_fit_state(iso: Any) -> tuple[str, str]:
    """(status, reason) of an IsoFLOP fit (Eq. 25-26): ``ok``, ``uncertain`` (flagged: e.g. the
    interval of α_P includes 0, or too few slices), ``not converged`` or ``not fitted``."""
    if iso is None:
        return "not fitted", "fewer than two usable slices"
    sl, detail = iso.slices, ""  # IsoFlopFit.slices: one row per slice, with "used" and "interior"
    if len(sl):
        detail = f"{int(sl['used'].sum())} of {len(sl)} slices used"
        if edge := int((~sl["interior"].astype(bool)).sum()):
            detail += f"; {edge} slice(s) with the minimum at an edge size"
    st = _status(iso, _decide_isoflop)
    if st.state == "failed":
        return "not converged", detail
    if st.state == "flagged":
        return "uncertain", st.reason + (f"; {detail}" if detail else "")
    return "ok", detail


def trend_status(b: Any) -> tuple[str, str]:
    """(status, reason) of a bounded metric fit (Eq. 29): ``trend`` or ``no trend`` (the metric
    does not move with compute: flat fit, β at its lower bound, R² under 0.1, or an interval
    of A that reaches 0)."""
    if b is None:
        return "not fitted", ""
    st = _status(b, bounded_status)
    return ("trend", "") if st.identified else ("no trend", st.reason)


def fit_statuses(fits: Any) -> dict[str, dict[str, tuple[str, str]]]:
    """Per family of a ``fit_families`` result: (status, reason) of its IsoFLOP fit (``isoflop``),
    joint fit (``joint``) and each metric's bounded fit (by metric name)."""
    return {fam: {"isoflop": isoflop_fit_state(f.isoflop), "joint": joint_fit_state(f.chinchilla),
                  **{m: trend_status(b) for m, b in f.bounded.items()}} for fam, f in fits.families.items()}
