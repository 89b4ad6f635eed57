"""Shared pieces of the scaling fitters: input checks, warnings, result helpers (the bootstrap is
``bootstrap.py``)."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import inspect
from dataclasses import dataclass, field
import logging
import warnings as _warnings
from typing import Any, Iterable, Mapping

import numpy as np

from interpscale._jsonl import jsonable  # noqa: F401  (the one converter; re-exported for the fitters)
from interpscale.errors import UserError

from .bootstrap import DEFAULT_LEVEL, DEFAULT_N_BOOT, check_level  # noqa: F401  (re-exported for the fitters)
from .bootstrap import band_from_draws, curve_rows, resample_noise

log = logging.getLogger("interpscale.scaling")

# the joint fit's start grid when a fit of many (families, forecasts, backtests, the ledger) names none:
# the 243-start grid ("epoch": the 4,500 starts of Hoffmann et al. / Epoch, fit_chinchilla's own default)
DEFAULT_GRID = "coarse"


class ScalingFitWarning(UserWarning):
    """Raised (as a Python warning) when a fit did not converge or sits on a boundary."""


def _row(values: Any, i: int) -> str:
    """Row ``i`` of ``values`` as the user finds it in the results file (a column of a table
    ``read_results`` read keeps its file lines through filtering), else ``row i``."""
    from interpscale.results_table import row_label

    return row_label(values, i) if hasattr(values, "attrs") and hasattr(values, "index") else f"row {i}"


def as_array(values: Any, name: str, *, positive: bool = False, allow_nan: bool = False) -> np.ndarray:
    """1-D float array; ValueError naming ``name`` and the first bad row otherwise."""
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise UserError(f"{name}: values are not numeric ({exc})") from exc
    if arr.ndim != 1:
        raise UserError(f"{name}: expected a 1-D array, got shape {arr.shape}")
    bad = np.zeros(arr.shape, bool) if allow_nan else ~np.isfinite(arr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise UserError(f"{name}: non-finite value {arr[i].item()!r} at {_row(values, i)} "
                        f"({int(bad.sum())} bad rows)")
    bad = ~(arr > 0) & ~np.isnan(arr) if positive else bad
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise UserError(f"{name}: non-positive value {arr[i].item()!r} at {_row(values, i)}; "
                        "a log-scale fit needs values > 0")
    return arr


def check_weights(weights: Any, n: int) -> np.ndarray | None:
    """Per-point weights (n,), non-negative with a positive sum (None stays None)."""
    if weights is None:
        return None
    w = as_array(weights, "weights")
    if w.size != n:
        raise UserError(f"weights: {w.size} values for {n} points")
    if (w < 0).any() or not w.sum() > 0:
        i = int(np.flatnonzero(w < 0)[0]) if (w < 0).any() else 0
        raise UserError(f"weights: must be non-negative with a positive sum (row {i}: {w[i]!r})")
    return w


def check_lengths(arrays: Mapping[str, np.ndarray], need: int, what: str) -> int:
    """The one length of the named ``arrays``, at least ``need`` (ValueError naming ``what`` otherwise)."""
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise UserError(f"mismatched lengths: {lengths}")
    n = next(iter(lengths.values()))
    if n < need:
        raise UserError(f"{what}: need at least {need} points, got {n}")
    return n


def check_points(arrays: Mapping[str, Any], need: int, what: str, *, positive: bool = True) -> list:
    """The named columns as checked 1-D arrays (``as_array``) of one length, at least ``need``."""
    out = {k: as_array(v, k, positive=positive) for k, v in arrays.items()}
    check_lengths(out, need, what)
    return list(out.values())


_KEEP_REPEATS: contextvars.ContextVar[bool] = contextvars.ContextVar("interpscale_keep_repeats", default=False)
_ABOUT: contextvars.ContextVar[str] = contextvars.ContextVar("interpscale_fit_about", default="")
_LOGGED: contextvars.ContextVar[set | None] = contextvars.ContextVar("interpscale_logged", default=None)


@contextlib.contextmanager
def _setting(var: contextvars.ContextVar, value):
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


def keep_repeats():
    """Fits inside take rows identical in every fitted column as repeated runs (data: each one point
    of the fit and one unit the bootstrap resamples) instead of refusing them (issue 37.8); the
    caller names them to the user (``interpscale fit`` / ``forecast`` say which file lines)."""
    return _setting(_KEEP_REPEATS, True)


def check_duplicates(columns: Mapping[str, np.ndarray], what: str) -> None:
    """ValueError naming the first pair of rows identical in every column of ``columns`` (unless
    inside :func:`keep_repeats`)."""
    if _KEEP_REPEATS.get():
        return
    stacked = np.column_stack([np.asarray(v, dtype=float) for v in columns.values()])
    _, first, inverse = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
    inverse = np.asarray(inverse).reshape(-1)
    if len(first) < len(stacked):
        i = next(i for i, grp in enumerate(inverse) if first[grp] != i)
        raise UserError(f"{what}: duplicate rows {int(first[inverse[i]])} and {i} (identical "
                        f"{', '.join(columns)}); drop or aggregate repeated measurements first")


@contextlib.contextmanager
def log_once():
    """Inside (a ``with`` block or a decorated call), a fit's warning text is logged the first time
    only, though every result still records it: one report reads the same rows for each table and
    figure and would otherwise repeat the same note."""
    if _LOGGED.get() is not None:  # an outer block already counts
        yield
        return
    with _setting(_LOGGED, set()):
        yield


def about(label: str):
    """Name what the fits inside are about (e.g. the family): their logged warnings start with it."""
    return _setting(_ABOUT, label)


# what a fit's warning says about the fit; a status reads these codes, never the text
WARNING_CODES = {
    "note": "information: the fit stands as made",
    "not_converged": "an optimiser (the fit's or its bootstrap's) did not converge",
    "not_identified": "a quantity is not pinned down by the points",
    "at_bound": "a parameter ran to a bound of its search range",
    "skipped": "a part of the analysis was not made",
}
FLAGGING = frozenset({"not_identified", "at_bound"})  # codes that make a converged fit ``flagged``


class FitWarning(str):
    """A fit's warning: the text the user reads (a ``str``, unchanged) with its ``code``
    (one of :data:`WARNING_CODES`), which statuses and readers decide from."""

    code: str

    def __new__(cls, text: str, code: str = "note"):
        if code not in WARNING_CODES:
            raise ValueError(f"FitWarning code must be one of {sorted(WARNING_CODES)}, got {code!r}")
        obj = super().__new__(cls, text)
        obj.code = code
        return obj


def warning_code(w: Any) -> str:
    """The code of warning ``w`` (a plain string is a ``note``)."""
    return getattr(w, "code", "note")


def flags_of(warnings: Iterable[Any]) -> list[str]:
    """The warnings whose code flags a fit (:data:`FLAGGING`), as text."""
    return [str(w) for w in warnings if warning_code(w) in FLAGGING]


def emit(messages: list[str], msg: str, *, warn: bool = False, code: str = "note") -> None:
    """Record ``msg`` on the result as a :class:`FitWarning` of ``code`` and log it (prefixed by
    :func:`about`'s label); ``warn`` also raises a ScalingFitWarning."""
    msg = FitWarning(msg, code)
    messages.append(msg)
    label = _ABOUT.get()
    prefix = f"{label}: " if label and not msg.startswith(f"{label}:") else ""
    seen = _LOGGED.get()
    if seen is None or prefix + msg not in seen:
        log.warning("%s%s", prefix, msg)
        if seen is not None:
            seen.add(prefix + msg)
    if warn:
        _warnings.warn(str(msg), ScalingFitWarning, stacklevel=3)


@contextlib.contextmanager
def quiet():
    """Refits made to judge a fit (backtests, forecast-method choice) neither warn nor log: the
    user's own fit of the same rows has logged its flags once; a refit's trouble goes into its rows."""
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with _warnings.catch_warnings():
            _warnings.simplefilter("ignore", ScalingFitWarning)
            yield
    finally:
        log.setLevel(level)


def fields_dict(obj: Any, skip: Iterable[str] = ()) -> dict:
    """JSON dict of a result dataclass's fields, skipping bootstrap draws and ``skip``."""
    fields = sorted(dataclasses.fields(obj), key=lambda f: f.kw_only)  # the fit's own, then FitFields'
    return {f.name: jsonable(getattr(obj, f.name)) for f in fields
            if f.name not in skip and not f.name.startswith("_") and f.repr}


STATES = ("identified", "flagged", "failed")


@dataclass(frozen=True)
class FitStatus:
    """Whether a fit can be used, decided once where the fit is made and read by every reader
    (tables, report, figures, forecasts, the ledger): ``identified`` (use it), ``flagged`` (made,
    but a quantity is not pinned down by the points: ``reason`` says which) or ``failed``
    (the optimiser did not converge, or no fit)."""

    state: str = "identified"
    reason: str = ""

    def __post_init__(self):
        if self.state not in STATES:
            raise ValueError(f"FitStatus.state must be one of {STATES}, got {self.state!r}")

    @property
    def identified(self) -> bool:
        return self.state == "identified"

    def __str__(self) -> str:
        return self.state + (f": {self.reason}" if self.reason else "")

    def to_dict(self) -> dict:
        return {"state": self.state, "reason": self.reason}

    @classmethod
    def decide(cls, converged: bool, flags: Iterable[str] = (), failure: str = "") -> "FitStatus":
        """``failed`` (``failure``, else "did not converge") unless ``converged``; else ``flagged``
        with the ``flags`` joined by "; ", else ``identified``."""
        if not converged:
            return cls("failed", failure or "the optimiser did not converge")
        flags = [f for f in flags if f]
        return cls("flagged", "; ".join(flags)) if flags else cls()


def fit_status(fit: Any) -> FitStatus:
    """The status of ``fit`` (a result's own ``status``; None -> failed, "not fitted")."""
    if fit is None:
        return FitStatus("failed", "not fitted")
    st = getattr(fit, "status", None)
    return st if isinstance(st, FitStatus) else FitStatus.decide(bool(getattr(fit, "converged", True)))


def from_options(options: Any, loose: Mapping[str, Any], func: Any) -> dict:
    """The fit options ``loose`` (keyword -> value) of ``func``, read off ``options`` (a ``FitOptions``)
    when one is given; the loose keywords are kept for one release and then must stay at their
    defaults (a ValueError names the ones given beside ``options``)."""
    if options is None:
        return dict(loose)
    params = inspect.signature(func).parameters
    if clash := [k for k, v in loose.items() if v != params[k].default]:
        raise ValueError(f"{func.__name__}: give {', '.join(clash)} through options=, not beside it")
    return {k: getattr(options, k) for k in loose}


def combined_status(parts: Mapping[str, Any]) -> FitStatus:
    """The status of a result made of several fits (``{name: fit}``; None entries left out): the
    worst state among them (failed > flagged > identified), each reason named by its part."""
    sts = {name: fit_status(f) for name, f in parts.items() if f is not None}
    worst = max((st.state for st in sts.values()), key=STATES.index, default="identified")
    reasons = [f"{name}: {st.reason}" for name, st in sts.items() if st.state == worst and st.reason]
    return FitStatus(worst, "; ".join(reasons))


class FitResult:
    """What the frozen fit results share: ``status`` (a :class:`FitStatus` field), ``to_dict``
    (the fields without bootstrap draws, plus the properties named in ``_derived``) and
    ``summary`` (``_lines()``, the status when not identified, then the warnings)."""

    _derived: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return fields_dict(self) | {k: jsonable(getattr(self, k)) for k in self._derived}

    def _band(self, curves, shape, level: float | None = None, point=None):
        """The one bootstrap band: pointwise percentiles (at ``level``, default the fit's) of
        ``curves(rows)`` (S, m) over the bootstrap rows ``boot``; ``point()`` twice without any."""
        if self.boot is None or len(self.boot) == 0:
            y = point()
            return y, y
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            draws = curves(self.boot)
        lo, hi = band_from_draws(draws, level or self.level)
        return lo.reshape(shape), hi.reshape(shape)

    def _interval(self, curves, point_row, shape, level: float | None = None, *, seed: int = 0, n_params: int,
                  back=None, clip=None, noise_sd: float | None = None, widen: float = 1.0):
        """The one prediction interval of a new observation: ``curves(rows)`` (S, m) of the bootstrap
        rows (else the point ``point_row``, repeated; ``bootstrap.curve_rows``) on the scale the fit
        resamples its residuals on, plus resampled residuals ``resid`` (or Gaussian noise of sd
        ``noise_sd``), their deviation from the point curve scaled by ``widen``; ``back`` maps the sum
        to the observation's scale (e.g. ``np.exp`` for a log-scale fit), ``clip(y)`` keeps it in range."""
        rng = np.random.default_rng(seed)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            y = curves(curve_rows(self.boot, point_row))
            y = y + (resample_noise(rng, self.resid, y.shape, n_params) if noise_sd is None
                     else rng.normal(0.0, float(noise_sd), y.shape))
            if widen != 1.0:
                p = curves(np.atleast_2d(np.asarray(point_row, float)))
                y = p + widen * (y - p)
            y = y if back is None else back(y)
        lo, hi = band_from_draws(y if clip is None else clip(y), level or self.level)
        return lo.reshape(shape), hi.reshape(shape)

    def summary(self) -> str:
        st = fit_status(self)
        head = [] if st.identified else [f"  status: {st}"]
        return "\n".join(self._lines() + head + [f"  warning: {w}" for w in self.warnings])


@dataclass(frozen=True, kw_only=True)
class FitFields(FitResult):
    """The fields every fitter's result has (keyword-only): whether the optimiser ``converged``,
    intervals ``ci`` at ``level``, ``warnings``, the ``status`` decided when the fit is made (each
    fitter's ``*_status``), and the bootstrap draws ``boot`` and residuals ``resid`` (on the fit's
    scale) behind bands and intervals."""

    converged: bool = True
    ci: dict = field(default_factory=dict)
    level: float = DEFAULT_LEVEL
    warnings: tuple[str, ...] = ()
    status: FitStatus = FitStatus()
    boot: np.ndarray | None = field(default=None, repr=False, compare=False)
    resid: np.ndarray | None = field(default=None, repr=False, compare=False)


def fmt_ci(value: float, ci: tuple[float, float] | None, digits: int = 3) -> str:
    """``0.528 [0.503, 0.551]`` style cell."""
    if ci is None or not all(np.isfinite(ci)):
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def fmt_sub(value: float, ci: tuple[float, float] | None, digits: int = 3, *, style: str = "sub") -> str:
    """Paper Table 6/7 style: ``0.528_[-0.025,+0.023]`` (CI as offsets from the estimate); offsets
    that round to zero get more digits (up to 4 more), so an interval never reads ``[-0.000,+0.000]``.
    ``style="cell"``: the report's spelling ``0.528 [-0.025, +0.023]`` (digits grown up to 8; a value
    below 10^-digits, or offsets that still agree, as ``g``-formatted bounds; "—" for no value,
    "(no interval)" for no interval, a zero-width interval said in words)."""
    if style == "cell":
        return _fmt_cell(value, ci, digits)
    if ci is None or not all(np.isfinite(ci)):
        return f"{value:.{digits}f}"
    lo, hi = ci[0] - value, ci[1] - value
    d = _offset_digits(lo, hi, digits, digits + 4)
    if round(abs(lo), d) == 0 and round(abs(hi), d) == 0:
        return f"{value:.{digits}f} (zero-width interval)"
    sl = "-" if lo <= 0 else "+"
    sh = "+" if hi >= 0 else "-"
    return f"{value:.{d}f}_[{sl}{abs(lo):.{d}f},{sh}{abs(hi):.{d}f}]"


def _offset_digits(lo: float, hi: float, digits: int, most: int) -> int:
    """The fewest decimals (from ``digits``, at most ``most``) at which an offset shows."""
    d = digits
    while d < most and round(abs(lo), d) == 0 and round(abs(hi), d) == 0:
        d += 1
    return d


def _fmt_cell(value, ci, digits: int) -> str:
    if value is None or not np.isfinite(value):
        return "—"
    lo, hi = ci if ci is not None else (None, None)
    small = value != 0 and abs(value) < 10 ** -digits
    est = f"{value:.{digits}g}" if small else f"{value:.{digits}f}"
    if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
        return f"{est} (no interval)"
    if not hi - lo > 0 or hi - lo < 1e-12 * max(abs(value), 1e-300):
        return f"{est} (zero-width interval: every bootstrap replicate agrees)"
    d = _offset_digits(lo - value, hi - value, digits, 8)
    if small or round(lo - value, d) == round(hi - value, d):
        return f"{value:.{digits}g} [{lo:.{digits}g}, {hi:.{digits}g}]"
    return f"{value:.{d}f} [{lo - value:+.{d}f}, {hi - value:+.{d}f}]"
