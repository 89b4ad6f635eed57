"""The published laws as forecast methods (``forecasting.METHODS``), registered on import.

Opt-in: ``import interpscale.scaling.law_methods`` (or :func:`register`) adds them to the
registry, after which ``forecast_family`` / ``rolling_origin`` score them beside the built-in
methods and ``method="overtraining"`` etc. select them. They are not registered by importing
``interpscale.scaling``: Figure 24 draws every registered method as an L*(C) curve, and these
laws forecast a run at its (P, D) or at their own compute-optimal allocation.

* ``overtraining`` -- Gadre et al. 2024: L = E + a/N^eta + B/D^eta (one exponent), robust recipe
  (Huber on log L from the authors' 128 starts, batched; many refits in a backtest);
* ``ladder`` -- Bhagia et al. 2024 step 1: L = A/N^alpha + B/D^beta + E from the authors' single
  start with bounds >= 0;
* ``data-constrained`` -- Muennighoff et al. 2023 Eq. 5 with every parameter free (a results
  table is not C4): needs a ``unique_tokens`` column; a target's unique tokens are
  min(D, the largest U of the fitted runs) -- the sweep's corpus, repeated as needed.

At a compute budget without (P, D), each law is evaluated at its own compute-optimal allocation
of C = k P D (closed forms below); intervals are the fit's bootstrap prediction intervals.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .data_constrained import fit_data_constrained
from .forecast_methods import ForecastMethod, ForecastOptions, register_method
from .ladder import fit_ladder
from .overtraining import fit_overtraining

__all__ = ["LAW_METHODS", "optimal_allocation", "register"]


def optimal_allocation(A: float, B: float, alpha: float, beta: float, compute, k: float = 6.0):
    """(N_opt, D_opt) minimising A/N^alpha + B/D^beta subject to C = k N D (Hoffmann et al.
    2022, App. D.2): N_opt = G (C/k)^(beta/(alpha+beta)), G = (alpha A / (beta B))^(1/(alpha+beta))."""
    G = (alpha * A / (beta * B)) ** (1.0 / (alpha + beta))
    N = G * (np.asarray(compute, float) / k) ** (beta / (alpha + beta))
    return N, np.asarray(compute, float) / (k * N)


def _rows(rows: pd.DataFrame, o: ForecastOptions, *extra: str) -> pd.DataFrame:
    missing = [c for c in ("params", "tokens", o.loss, *extra) if c not in rows.columns]
    if missing:
        raise ValueError(f"the table has no column {missing[0]!r}")
    return rows.dropna(subset=["params", "tokens", o.loss, *extra])


def _interval(fit, N, D, o: ForecastOptions, *extra):
    lo, hi = fit.predict_interval(N, D, *extra, level=o.level, seed=o.seed)
    return float(fit.predict(N, D, *extra)), float(lo), float(hi)


def _fit_overtraining(rows, o):
    r = _rows(rows, o)
    return fit_overtraining(r["params"], r["tokens"], r[o.loss], recipe="robust", n_boot=o.n_boot, level=o.level, seed=o.seed)


def _target(fit, compute, o, params, tokens, coef=("A", "B", "alpha", "beta")):
    """(params, tokens) of the target: as given, or the law's compute-optimal allocation."""
    if params is not None and tokens is not None:
        return params, tokens
    return optimal_allocation(*(fit.params[c] for c in coef), compute, o.k)


def _predict_overtraining(fit, compute, o, params=None, tokens=None):
    return _interval(fit, *_target(fit, compute, o, params, tokens, ("a", "B", "eta", "eta")), o)


def _fit_ladder(rows, o):
    r = _rows(rows, o)
    return fit_ladder(r["params"], r["tokens"], r[o.loss], n_boot=o.n_boot, level=o.level, seed=o.seed).step1


def _predict_ladder(fit, compute, o, params=None, tokens=None):
    return _interval(fit, *_target(fit, compute, o, params, tokens), o)


def _fit_data_constrained(rows, o):
    r = _rows(rows, o, "unique_tokens")
    return fit_data_constrained(r["params"], r["tokens"], r["unique_tokens"], r[o.loss], free="all", recipe="robust",
                                n_boot=o.n_boot, level=o.level, seed=o.seed)


def _predict_data_constrained(fit, compute, o, params=None, tokens=None):
    params, tokens = _target(fit, compute, o, params, tokens)
    return _interval(fit, params, tokens, o, np.minimum(tokens, fit.max_unique_tokens))


LAW_METHODS = (
    ForecastMethod("overtraining", "Gadre et al. 2024: L = E + a/N^eta + B/D^eta", _fit_overtraining, _predict_overtraining),
    ForecastMethod("ladder", "Bhagia et al. 2024 step 1: L = A/N^alpha + B/D^beta + E (authors' start, bounds >= 0)",
                   _fit_ladder, _predict_ladder),
    ForecastMethod("data-constrained", "Muennighoff et al. 2023 Eq. 5: repeated data (needs unique_tokens)",
                   _fit_data_constrained, _predict_data_constrained),
)


def register() -> None:
    """Add (or re-add) the three laws to ``forecasting.METHODS``."""
    for m in LAW_METHODS:
        register_method(m, replace_existing=True)


register()
