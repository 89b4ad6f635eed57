"""Shared pieces of the scaling fitters: input checks, percentile intervals, result helpers."""

from __future__ import annotations

import dataclasses
import logging
import math
import warnings as _warnings
from typing import Any, Iterable, Mapping

import numpy as np

log = logging.getLogger("interpscale.scaling")

DEFAULT_N_BOOT = 10_000  # paper §8.2.1 / §8.3.1: 10,000 bootstrap iterations
DEFAULT_LEVEL = 0.90  # paper: 90% percentile intervals


class ScalingFitWarning(UserWarning):
    """Raised (as a Python warning) when a fit did not converge or sits on a boundary."""


def as_array(values: Any, name: str, *, positive: bool = False, allow_nan: bool = False) -> np.ndarray:
    """1-D float array; ValueError naming ``name`` and the first bad row otherwise."""
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: values are not numeric ({exc})") from exc
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {arr.shape}")
    if not allow_nan:
        bad = ~np.isfinite(arr)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{name}: non-finite value {arr[i].item()!r} at row {i} ({int(bad.sum())} bad rows)")
    if positive:
        bad = ~(arr > 0)
        if allow_nan:
            bad &= ~np.isnan(arr)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{name}: non-positive value {arr[i].item()!r} at row {i}; a log-scale fit needs values > 0")
    return arr


def check_lengths(**arrays: np.ndarray) -> int:
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"mismatched lengths: {lengths}")
    return next(iter(lengths.values()))


def check_min_points(n: int, need: int, what: str) -> None:
    if n < need:
        raise ValueError(f"{what}: need at least {need} points, got {n}")


def check_duplicates(columns: Mapping[str, np.ndarray], what: str) -> None:
    """ValueError naming the first pair of rows identical in every column of ``columns``."""
    stacked = np.column_stack([np.asarray(v, dtype=float) for v in columns.values()])
    _, first, inverse = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
    inverse = np.asarray(inverse).reshape(-1)
    if len(first) < len(stacked):
        for i, grp in enumerate(inverse):
            j = int(first[grp])
            if j != i:
                raise ValueError(
                    f"{what}: duplicate rows {j} and {i} (identical {', '.join(columns)}); "
                    "drop or aggregate repeated measurements first"
                )


def check_level(level: float) -> float:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    return float(level)


def percentile_ci(samples: np.ndarray, level: float, *, missing: str = "drop") -> tuple[float, float]:
    """Percentile interval of ``samples``.

    ``missing="drop"`` uses the finite entries only (nan, nan when none). ``"bound"`` keeps
    every replicate: a non-finite entry counts as -inf for the lower limit and +inf for the
    upper one, so the interval contains the percentile interval of *any* completion of the
    missing replicates (never narrower than an interval that did not lose them); it is
    infinite on a side once more than (1 - level)/2 of the replicates are missing.
    """
    s = np.asarray(samples, dtype=float).ravel()
    fin = s[np.isfinite(s)]
    q = (1.0 - level) / 2.0
    if missing == "drop" or fin.size == s.size:
        if fin.size == 0:
            return (math.nan, math.nan)
        lo, hi = np.quantile(fin, [q, 1.0 - q])
        return (float(lo), float(hi))
    if missing != "bound":
        raise ValueError(f"missing must be 'drop' or 'bound', got {missing!r}")
    lo_s = np.concatenate([np.full(s.size - fin.size, -np.inf), np.sort(fin)])
    hi_s = np.concatenate([np.sort(fin), np.full(s.size - fin.size, np.inf)])
    return (float(_quantile_sorted(lo_s, q)), float(_quantile_sorted(hi_s, 1.0 - q)))


def _quantile_sorted(s: np.ndarray, q: float) -> float:
    """numpy's default (linear) quantile of a sorted array that may hold +-inf."""
    pos = q * (s.size - 1)
    i = int(math.floor(pos))
    j = min(i + 1, s.size - 1)
    if s[i] == s[j] or pos == i:
        return float(s[i])
    if not np.isfinite(s[i]):  # interpolating towards a missing (-inf) replicate: stay conservative
        return float(s[i])
    if not np.isfinite(s[j]):
        return float(s[j])
    return float(s[i] + (pos - i) * (s[j] - s[i]))


def cluster_weights(rng: np.random.Generator, groups, n_boot: int) -> np.ndarray:
    """(n_boot, n) row multiplicities of a cluster bootstrap: whole groups (e.g. the
    checkpoints of one run) are drawn with replacement and every row of a drawn group
    gets that group's count."""
    labels = np.asarray(groups)
    if labels.ndim != 1:
        raise ValueError(f"groups: expected a 1-D array of labels, got shape {labels.shape}")
    _, inv = np.unique(labels.astype(str), return_inverse=True)
    inv = np.asarray(inv).reshape(-1)
    g = int(inv.max()) + 1 if inv.size else 0
    if g < 2:
        raise ValueError(f"groups: a cluster bootstrap needs at least 2 groups, got {g}")
    counts = pairs_weights(rng, g, n_boot)  # (n_boot, g)
    return counts[:, inv]


def resample_noise(rng: np.random.Generator, resid: np.ndarray, shape: tuple, n_params: int) -> np.ndarray:
    """Draws of ``shape`` from the residuals of a fit (df-inflated as in ``resample_residuals``):
    the observation noise added to curve draws for a prediction interval."""
    r = np.asarray(resid, float)
    r = r[np.isfinite(r)]
    if r.size == 0:
        return np.zeros(shape)
    scale = math.sqrt(r.size / (r.size - n_params)) if r.size > n_params else 1.0
    return r[rng.integers(0, r.size, size=shape)] * scale


def band_from_draws(draws: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Pointwise percentile band over the bootstrap axis (axis 0) of ``draws``."""
    q = (1.0 - check_level(level)) / 2.0
    lo, hi = np.nanquantile(draws, [q, 1.0 - q], axis=0)
    return lo, hi


def resample_residuals(rng: np.random.Generator, resid: np.ndarray, n_boot: int, n_params: int) -> np.ndarray:
    """(n_boot, n) residual draws with replacement, inflated by sqrt(n/(n-p)) for the
    degrees of freedom the fit used (residuals of a least-squares fit are shrunk)."""
    n = resid.size
    scale = math.sqrt(n / (n - n_params)) if n > n_params else 1.0
    idx = rng.integers(0, n, size=(n_boot, n))
    return resid[idx] * scale


def pairs_weights(rng: np.random.Generator, n: int, n_boot: int) -> np.ndarray:
    """(n_boot, n) multiplicity counts of a pairs (case) bootstrap."""
    idx = rng.integers(0, n, size=(n_boot, n))
    w = np.zeros((n_boot, n))
    np.add.at(w, (np.repeat(np.arange(n_boot), n), idx.ravel()), 1.0)
    return w


def emit(messages: list[str], msg: str, *, warn: bool = False) -> None:
    """Record ``msg`` on the result and log it; ``warn`` also raises a ScalingFitWarning."""
    messages.append(msg)
    log.warning(msg)
    if warn:
        _warnings.warn(msg, ScalingFitWarning, stacklevel=3)


def jsonable(value: Any) -> Any:
    """Plain-JSON view of result fields (numpy scalars/arrays, tuples, nan -> None)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer, int)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        v = float(value)
        return v if math.isfinite(v) else None
    if hasattr(value, "to_dict") and callable(value.to_dict):
        return value.to_dict()
    return value


def fields_dict(obj: Any, skip: Iterable[str] = ()) -> dict:
    """JSON dict of a result dataclass's fields, skipping bootstrap draws and ``skip``."""
    out = {}
    for f in dataclasses.fields(obj):
        if f.name in skip or f.name.startswith("_") or not f.repr:
            continue
        out[f.name] = jsonable(getattr(obj, f.name))
    return out


def fmt_ci(value: float, ci: tuple[float, float] | None, digits: int = 3) -> str:
    """``0.528 [0.503, 0.551]`` style cell."""
    if ci is None or not all(np.isfinite(ci)):
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def fmt_sub(value: float, ci: tuple[float, float] | None, digits: int = 3) -> str:
    """Paper Table 6/7 style: ``0.528_[-0.025,+0.023]`` (CI as offsets from the estimate)."""
    if ci is None or not all(np.isfinite(ci)):
        return f"{value:.{digits}f}"
    lo, hi = ci[0] - value, ci[1] - value
    sl = "-" if lo <= 0 else "+"
    sh = "+" if hi >= 0 else "-"
    return f"{value:.{digits}f}_[{sl}{abs(lo):.{digits}f},{sh}{abs(hi):.{digits}f}]"
