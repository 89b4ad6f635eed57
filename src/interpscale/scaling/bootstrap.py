"""One bootstrap for every scaling fitter: a spec, its replicates and percentile intervals.

Every fitter takes ``n_boot=10_000, bootstrap="residual" | "pairs" | "cluster", level=0.90,
seed=0, groups=None`` and turns them into a :class:`Bootstrap`; all replicates of a fit are
refitted together (batched). Kinds (``KINDS``):

* ``residual`` -- the paper's (§8.2.1): responses ``fitted + e*``, ``e*`` drawn from the fit's
  residuals and inflated by sqrt(n / (n - p)) (least-squares residuals are shrunk);
  ``smooth=True`` adds a variance-preserving Gaussian kernel (Huber/LAD-like fits, whose plain
  residual bootstrap under-covers);
* ``pairs`` -- points drawn with replacement, as (S, n) multiplicity weights;
* ``cluster`` -- whole ``groups`` (one label per point, e.g. the run id) drawn with replacement.

``weights`` are always per-point (n,) arrays multiplying the resampling weights. The random
stream is fixed by ``seed`` and the order of the draws: same inputs, same intervals anywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Mapping

import numpy as np
from interpscale.errors import UserError

# The bootstrap replicates of each purpose, stated once (every default below reads this table):
N_BOOT = {
    "paper": 10_000,  # every fitter's default: paper §8.2.1 / §8.3.1, 10,000 bootstrap iterations
    "forecast": 1_000,  # a forecast's fits (forecast_family, the ledger, the report's fits)
    "backtest": 200,  # each refit of backtest()
    "figure": 200,  # figure bands
    "report_backtest": 100,  # each refit of the report's backtest section
    "refit": 50,  # each rolling-origin refit of a forecast (the spreads of the studentized calibration)
    "multiplier": 1_000,  # the compute multiplier's paired bootstrap (fit_multiplier)
    "calibration": 200,  # each forecast whose calibrated interval widens the multiplier's bands at the targets
}
DEFAULT_N_BOOT = N_BOOT["paper"]
DEFAULT_LEVEL = 0.90  # paper: 90% percentile intervals
KINDS = ("residual", "pairs", "cluster")
Kind = Literal["residual", "pairs", "cluster"]

PI_MIN_DRAWS = 200  # a prediction interval reads its tails off at least this many curve draws

__all__ = ["DEFAULT_LEVEL", "DEFAULT_N_BOOT", "N_BOOT", "KINDS", "Bootstrap", "band_from_draws", "check_level",
           "cluster_weights", "curve_rows", "dropped", "pairs_weights", "percentile_ci", "resample_noise"]


def check_level(level: float) -> float:
    if not 0.0 < level < 1.0:
        raise UserError(f"level must be in (0, 1), got {level}")
    return float(level)


@dataclass(frozen=True)
class Bootstrap:
    """What to resample and how many times: the one bootstrap spec of every fitter."""

    n_boot: int = DEFAULT_N_BOOT
    kind: Kind = "residual"
    level: float = DEFAULT_LEVEL
    seed: int = 0
    groups: Any = None  # one cluster label per point (kind "cluster")
    smooth: bool = False  # residual kind: smoothed residual bootstrap

    def checked(self, n: int, what: str, *, kinds: tuple[str, ...] = KINDS) -> "Bootstrap":
        """This spec after the checks every fitter needs (ValueError naming ``what``):
        a known kind, a level in (0, 1), a non-negative ``n_boot`` and, for ``cluster``,
        ``groups`` with one label per point."""
        if self.kind not in kinds:
            raise UserError(f"{what}: bootstrap must be one of {', '.join(map(repr, kinds))}, got {self.kind!r}")
        check_level(self.level)
        if int(self.n_boot) < 0:
            raise UserError(f"{what}: n_boot must be >= 0, got {self.n_boot}")
        if self.kind == "cluster":
            if self.groups is None:
                raise UserError(f"{what}: bootstrap='cluster' needs groups (one label per row, e.g. run_id)")
            if len(self.groups) != n:
                raise UserError(f"{what}: groups: {len(self.groups)} labels for {n} rows")
        return self

    def intervals(self, draws: Mapping[str, np.ndarray], *, missing: str = "drop") -> dict:
        """name -> percentile interval at ``level`` of each array of draws."""
        return {k: percentile_ci(v, self.level, missing=missing) for k, v in draws.items()}

    def weights(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """(n_boot, n) multiplicities of a pairs or cluster bootstrap."""
        return cluster_weights(rng, self.groups, self.n_boot) if self.kind == "cluster" else \
            pairs_weights(rng, n, self.n_boot)

    def replicates(self, observed: np.ndarray, fitted: np.ndarray, n_params: int, *,
                   weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """(Y, W) to refit, drawn from a generator seeded by ``seed``: ``residual`` gives Y (S, n) =
        fitted + resampled residuals (smoothed when ``smooth``) and the per-point ``weights``
        (or None); ``pairs``/``cluster`` the observed Y (n,) and W (S, n) = multiplicities x weights."""
        rng = np.random.default_rng(self.seed)
        observed, fitted = np.asarray(observed, float), np.asarray(fitted, float)
        if self.kind != "residual":
            W = self.weights(rng, observed.size)
            return observed, W if weights is None else W * np.asarray(weights, float)[None, :]
        E = resample_noise(rng, observed - fitted, (self.n_boot, observed.size), n_params)
        if self.smooth:  # variance-preserving Gaussian kernel (De Angelis, Hall & Young 1993)
            sd = float(E.std())
            if sd > 0:
                h = 1.06 * sd * observed.size ** (-0.2)
                E = (E + rng.normal(0.0, h, E.shape)) / math.sqrt(1.0 + (h / sd) ** 2)
        return fitted[None, :] + E, weights


def dropped(n_ok: int, n_boot: int) -> list[str]:
    """The warning when more than 1% of the replicates did not converge (those are dropped)."""
    return [f"bootstrap: {n_boot - n_ok} of {n_boot} replicates did not converge and were dropped"] \
        if n_ok < 0.99 * n_boot else []


def pairs_weights(rng: np.random.Generator, n: int, n_boot: int) -> np.ndarray:
    """(n_boot, n) multiplicity counts of a pairs (case) bootstrap."""
    idx = rng.integers(0, n, size=(n_boot, n)) + n * np.arange(n_boot)[:, None]  # bin: (replicate, point)
    return np.bincount(idx.ravel(), minlength=n_boot * n).reshape(n_boot, n).astype(float)


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
    return pairs_weights(rng, g, n_boot)[:, inv]  # each row gets its group's count of (n_boot, g)


def resample_noise(rng: np.random.Generator, resid: np.ndarray | None, shape: tuple, n_params: int):
    """Draws of ``shape`` from the finite residuals of a fit, inflated by sqrt(n/(n-p)) for the
    degrees of freedom the fit used (residuals of a least-squares fit are shrunk): the residual
    bootstrap's errors, and the observation noise of a prediction interval."""
    r = np.zeros(0) if resid is None else np.asarray(resid, float)
    r = r[np.isfinite(r)]
    if r.size == 0:
        return np.zeros(shape)
    scale = math.sqrt(r.size / (r.size - n_params)) if r.size > n_params else 1.0
    return r[rng.integers(0, r.size, size=shape)] * scale


def curve_rows(boot: np.ndarray | None, point) -> np.ndarray:
    """Curve parameter rows of a prediction interval: the bootstrap draws (else the point
    estimate), repeated to ``PI_MIN_DRAWS`` rows when fewer, to read tails under fresh noise."""
    rows = boot if boot is not None and len(boot) else np.atleast_2d(np.asarray(point, float))
    return np.repeat(rows, -(-PI_MIN_DRAWS // len(rows)), axis=0) if len(rows) < PI_MIN_DRAWS else rows


def percentile_ci(samples: np.ndarray, level: float, *, missing: str = "drop") -> tuple[float, float]:
    """Percentile interval of ``samples``: ``missing="drop"`` uses the finite entries (nan, nan
    when none); ``"bound"`` counts a non-finite entry as -inf for the lower limit and +inf for the
    upper, so the interval contains that of *any* completion of the missing replicates (infinite
    on a side once more than (1 - level)/2 of them are missing)."""
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
    if s[i] == s[j] or pos == i or not np.isfinite(s[i]):  # towards a missing (-inf) replicate: conservative
        return float(s[i])
    if not np.isfinite(s[j]):
        return float(s[j])
    return float(s[i] + (pos - i) * (s[j] - s[i]))


def band_from_draws(draws: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Pointwise percentile band over the bootstrap axis (axis 0) of ``draws``."""
    q = (1.0 - check_level(level)) / 2.0
    lo, hi = np.nanquantile(draws, [q, 1.0 - q], axis=0)
    return lo, hi
