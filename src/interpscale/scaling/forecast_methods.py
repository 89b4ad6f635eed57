"""Forecast methods by name (``METHODS``; ``register_method`` adds one, e.g. the laws of
``law_methods``): ``joint`` (Eq. 27), ``isoflop-powerlaw`` (Eq. 26) and ``isoflop-saturating``
(E + A C^-alpha on the slice minima, ``fit_bounded``: the power law has no irreducible term and
is pulled by the steep small-budget minima)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd

from interpscale._registry import Registry

from ._base import DEFAULT_LEVEL
from .bootstrap import N_BOOT
from .bounded import fit_bounded
from .chinchilla import fit_chinchilla
from .isoflop import fit_isoflop
from .tables import SLICE_TOLERANCE, row_groups, slice_rows

CALIBRATIONS = ("studentized", "distance", "studentized-signed")  # docs/forecasting.md; the first the default


@dataclass(frozen=True)
class FitOptions:
    """The one set of fit options (and their defaults) every reader passes to the fits: a
    forecast's methods, the backtest's refits, the ledger, the figures. ``calibration`` names the
    interval rule and ``backtest_boot`` the bootstrap replicates of each rolling-origin refit (the
    spread the ``studentized`` rule divides by); n_boot defaults come from ``bootstrap.N_BOOT``."""

    loss: str = "loss"
    n_boot: int = N_BOOT["forecast"]
    level: float = DEFAULT_LEVEL
    seed: int = 0
    grid: str = "coarse"
    window: int | None = 5
    tolerance: float | None = SLICE_TOLERANCE
    k: float = 6.0  # FLOPs per token per parameter of the data (C = k P D)
    minimum: str = "parabola"  # how slice minima are read (Eq. 25 parabola vertex or Akima)
    calibration: str = CALIBRATIONS[0]
    backtest_boot: int = N_BOOT["refit"]

    def __post_init__(self):
        if self.calibration not in CALIBRATIONS:
            raise ValueError(f"calibration must be one of {', '.join(CALIBRATIONS)}, got {self.calibration!r}")


ForecastOptions = FitOptions  # the name the forecast API has used


@dataclass(frozen=True)
class ForecastMethod:
    """``fit(rows, options)`` -> a fit; ``predict(fit, compute, options, params, tokens)`` ->
    (prediction, lo, hi), the bootstrap prediction interval at ``options.level``; optional
    ``band(...)`` -> (lo, hi), the curve's bootstrap confidence interval (what calibration widens).
    ``slices``: forecasts L*(C) from IsoFLOP slices only; ``min_budgets``: the fewest it fits on."""

    name: str
    equation: str
    fit: Callable[[pd.DataFrame, ForecastOptions], Any]
    predict: Callable[..., tuple[float, float, float]]
    slices: bool = False
    min_budgets: int = 3
    band: Callable[..., tuple[float, float]] | None = None

    def interval(self, fit, compute: float, options: ForecastOptions, params=None, tokens=None):
        """What calibration widens: the curve's confidence interval, else the prediction interval."""
        if self.band is not None:
            return self.band(fit, compute, options, params, tokens)
        return self.predict(fit, compute, options, params, tokens)[1:]


class MethodRegistry(Registry):
    """The forecast methods by name: a ``_registry.Registry`` that, like the dict it replaces,
    can also be edited in place (``del``, ``clear``, ``update``: tests and plugins restore it)."""

    def __setitem__(self, name: str, method) -> None:
        self.register(name, method, overwrite=True)

    def __delitem__(self, name: str) -> None:
        self.pop(name)

    def clear(self) -> None:
        for name in list(self):
            self.pop(name)

    def update(self, other) -> None:
        for name, method in dict(other).items():
            self[name] = method


METHODS: MethodRegistry = MethodRegistry("forecast method")


def register_method(method: ForecastMethod, *, replace_existing: bool = False) -> ForecastMethod:
    """Add ``method`` to ``METHODS`` under its name (ValueError when taken, unless replacing)."""
    return METHODS.register(method.name, method, overwrite=replace_existing)


def get_method(name: str) -> ForecastMethod:
    if name not in METHODS:
        raise ValueError(f"unknown forecast method {name!r}; choose from {', '.join(METHODS)}")
    return METHODS[name]


def _fit_joint(rows: pd.DataFrame, o: ForecastOptions):
    r = rows.dropna(subset=["params", "tokens", o.loss])
    groups = row_groups(r)  # cluster labels attached to the table (tables.attach_groups): whole runs resampled
    kw = {} if groups is None else dict(bootstrap="cluster", groups=groups)
    return fit_chinchilla(r["params"], r["tokens"], r[o.loss], grid=o.grid, n_boot=o.n_boot, level=o.level,
                          seed=o.seed, **kw)


def _predict_joint(fit, compute: float, o: ForecastOptions, params=None, tokens=None):
    if params is not None and tokens is not None:
        lo, hi = fit.predict_interval(params, tokens, o.level, seed=o.seed)
        return float(fit.predict(params, tokens)), float(lo), float(hi)
    lo, hi = fit.predict_interval_optimal(compute, o.level, o.k, seed=o.seed)
    return float(fit.predict_optimal(compute, o.k)), float(lo), float(hi)


def _first(band) -> tuple[float, float]:
    return float(np.ravel(band[0])[0]), float(np.ravel(band[1])[0])


def _band_joint(fit, compute: float, o: ForecastOptions, params=None, tokens=None):
    if params is not None and tokens is not None:
        return _first(fit.band(params, tokens, o.level))
    return _first(fit.band_optimal(compute, o.level, o.k))


def _slice_fit(rows: pd.DataFrame, o: ForecastOptions, n_boot: int):
    """``fit_isoflop`` on the rows within tolerance of their slice (several runs of one size: their mean)."""
    r = slice_rows(rows.dropna(subset=["slice_flops", "params", o.loss]), o.tolerance)
    if r.duplicated(["slice_flops", "params"]).any():
        cols = [c for c in ("tokens", o.loss) if c in r.columns]
        r = r.groupby(["slice_flops", "params"], as_index=False)[cols].mean()
    return fit_isoflop(r, loss=o.loss, window=o.window, n_boot=n_boot, level=o.level, seed=o.seed,
                       minimum=o.minimum)


def _predict_powerlaw(fit, compute: float, o: ForecastOptions, params=None, tokens=None):
    lo, hi = fit.predict_interval(compute, o.level, seed=o.seed)["L_star"]
    return float(fit.power_L.predict(compute)), float(lo), float(hi)


def _band_powerlaw(fit, compute: float, o: ForecastOptions, params=None, tokens=None):
    return _first(fit.band_L(np.array([compute]), o.level))


def _fit_saturating(rows: pd.DataFrame, o: ForecastOptions):
    """E + A C^-alpha (Eq. 29's form, E >= 0) on the used slice minima, its own residual bootstrap."""
    iso = _slice_fit(rows, o, 0)
    used = iso.slices[iso.slices["used"]]
    return fit_bounded(used["compute"], used["L_star"], direction="lower", bound=0.0, name="L_star",
                       n_boot=o.n_boot, level=o.level, seed=o.seed)


def _predict_saturating(fit, compute: float, o: ForecastOptions, params=None, tokens=None):
    lo, hi = fit.predict_interval(compute, o.level, seed=o.seed)
    return float(fit.predict(compute)), float(lo), float(hi)


def _band_saturating(fit, compute: float, o: ForecastOptions, params=None, tokens=None):
    return _first(fit.band(np.array([compute]), o.level))


register_method(ForecastMethod("joint", "Eq. 27: L = L_inf + A/P^alpha + B/D^beta", _fit_joint, _predict_joint,
                               band=_band_joint))
register_method(ForecastMethod("isoflop-powerlaw", "Eq. 26: L*(C) = a C^alpha_L on the slice minima",
                               lambda rows, o: _slice_fit(rows, o, o.n_boot), _predict_powerlaw,
                               slices=True, band=_band_powerlaw))
register_method(ForecastMethod("isoflop-saturating", "L*(C) = E + A C^-alpha on the slice minima (fit_bounded)",
                               _fit_saturating, _predict_saturating, slices=True, min_budgets=4, band=_band_saturating))
