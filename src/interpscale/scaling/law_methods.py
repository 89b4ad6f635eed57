"""The published laws as forecast methods, registered by ``register_law_methods()`` (opt-in: each
registered method adds its refits to the backtest of every default forecast). ``overtraining`` (Gadre et al. 2024,
robust recipe), ``ladder`` (Bhagia et al. 2024 step 1, the authors' start, bounds >= 0) and
``data-constrained`` (Muennighoff et al. 2023 Eq. 5, every parameter free; needs
``unique_tokens``; a target's unique tokens are min(D, the largest U fitted)). Without (P, D)
each law forecasts L*(C) at its own compute-optimal allocation of C = k P D; intervals are the
fit's bootstrap prediction intervals.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .chinchilla import optimal_allocation
from .data_constrained import fit_data_constrained
from .forecast_methods import ForecastMethod, ForecastOptions, register_method
from .ladder import fit_ladder
from .overtraining import fit_overtraining

__all__ = ["LAW_METHODS", "register_law_methods"]


def _rows(rows: pd.DataFrame, o: ForecastOptions, *extra: str) -> pd.DataFrame:
    missing = [c for c in ("params", "tokens", o.loss, *extra) if c not in rows.columns]
    if missing:
        raise ValueError(f"the table has no column {missing[0]!r}")
    return rows.dropna(subset=["params", "tokens", o.loss, *extra])


def _predictor(coef=("A", "B", "alpha", "beta"), unique: bool = False):
    """predict(fit, compute, o, params, tokens): at (params, tokens), or the law's compute-optimal
    allocation of ``compute`` (``coef`` names its A, B, alpha, beta); ``unique``: min(D, max U)."""
    def predict(fit, compute, o, params=None, tokens=None):
        if params is None or tokens is None:
            A, B, alpha, beta = (fit.params[c] for c in coef)  # Eq. 27's allocation (Hoffmann et al. App. D.2)
            params, tokens = optimal_allocation(np.array([np.log(A), np.log(B), 0.0, alpha, beta]), compute, o.k)
        extra = (np.minimum(tokens, fit.max_unique_tokens),) if unique else ()
        lo, hi = fit.predict_interval(params, tokens, *extra, level=o.level, seed=o.seed)
        return float(fit.predict(params, tokens, *extra)), float(lo), float(hi)
    return predict


def _fit_overtraining(rows, o):
    r = _rows(rows, o)
    return fit_overtraining(r["params"], r["tokens"], r[o.loss], recipe="robust", n_boot=o.n_boot, level=o.level,
                            seed=o.seed)


def _fit_ladder(rows, o):
    r = _rows(rows, o)
    return fit_ladder(r["params"], r["tokens"], r[o.loss], n_boot=o.n_boot, level=o.level, seed=o.seed).step1


def _fit_data_constrained(rows, o):
    r = _rows(rows, o, "unique_tokens")
    return fit_data_constrained(r["params"], r["tokens"], r["unique_tokens"], r[o.loss], free="all", recipe="robust",
                                n_boot=o.n_boot, level=o.level, seed=o.seed)


LAW_METHODS = (
    ForecastMethod("overtraining", "Gadre et al. 2024: L = E + a/N^eta + B/D^eta", _fit_overtraining,
                   _predictor(("a", "B", "eta", "eta"))),
    ForecastMethod("ladder", "Bhagia et al. 2024 step 1: L = A/N^alpha + B/D^beta + E (authors' start, bounds >= 0)",
                   _fit_ladder, _predictor()),
    ForecastMethod("data-constrained", "Muennighoff et al. 2023 Eq. 5: repeated data (needs unique_tokens)",
                   _fit_data_constrained, _predictor(unique=True)),
)


def register_law_methods() -> None:
    """Add (or re-add) the three laws to ``forecasting.METHODS`` (opt-in: each registered method
    adds its refits to the backtest of every default forecast)."""
    for m in LAW_METHODS:
        register_method(m, replace_existing=True)
