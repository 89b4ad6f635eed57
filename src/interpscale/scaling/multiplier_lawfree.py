"""The law-free reading of the compute multiplier inside a sweep (issue 42; docs/multiplier.md):
k(C) = C_variant(L*_base(C)) / C read off the two families' slice minima without a law of the
frontier. Each family's minima (ln C, ln L*) are made non-increasing in C (isotonic regression) and
joined by straight lines; the base's L* at C is read off its line and the variant's line is inverted
there. Valid only where both families have slices: C inside the base's slice range and the base's
L*(C) inside the variant's range of minima (nan elsewhere, never extrapolated).

Bands: the slice-paired residual bootstrap of ``multiplier`` (a shared slice's two residuals drawn
together), about a quadratic smoother of each family's minima in ln C; each replicate's deviation
from the smoother's reading is added to the reading of the minima themselves.

Model error (``model_error``, ``widen``): where a law's k and this reading disagree by more than the law's own
bootstrap allows, the law's band carries the excess in quadrature (docs/multiplier.md, "Model error")."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

__all__ = ["isotonic_decreasing", "lawfree_log_k", "model_error", "smoother", "widen"]


def isotonic_decreasing(y: np.ndarray) -> np.ndarray:
    """The least-squares non-increasing fit of each row of ``y`` (..., n) (pool adjacent violators)."""
    Y = np.atleast_2d(np.asarray(y, float))
    out = np.empty_like(Y)
    for r, row in enumerate(Y):
        vals, sizes = [], []
        for v in row:
            vals.append(v)
            sizes.append(1)
            while len(vals) > 1 and vals[-2] < vals[-1]:  # a rise: pool the two blocks
                w = sizes[-2] + sizes[-1]
                vals[-2:] = [(vals[-2] * sizes[-2] + vals[-1] * sizes[-1]) / w]
                sizes[-2:] = [w]
        out[r] = np.repeat(vals, sizes)
    return out.reshape(np.shape(y))


def lawfree_log_k(xb: np.ndarray, yb: np.ndarray, xv: np.ndarray, yv: np.ndarray, lc: np.ndarray) -> np.ndarray:
    """ln k (S, m) at ln C = ``lc`` from rows of minima ``yb`` (S, nb) at ``xb`` (nb,) and ``yv`` (S, nv)
    at ``xv`` (nv,) (ln C, ln L*, each x increasing); nan where the reading is outside either family's
    slices (module doc)."""
    Yb, Yv = isotonic_decreasing(np.atleast_2d(yb)), isotonic_decreasing(np.atleast_2d(yv))
    out = np.full((Yb.shape[0], lc.size), np.nan)
    inside = (lc >= xb[0] - 1e-9) & (lc <= xb[-1] + 1e-9)
    for s in range(Yb.shape[0]):
        target = np.interp(lc, xb, Yb[s])
        lo, hi = Yv[s, -1], Yv[s, 0]  # the variant's range of minima
        ok = inside & (target >= lo - 1e-12) & (target <= hi + 1e-12)
        # np.interp needs increasing abscissae: the variant's line read backwards, L* rising
        out[s, ok] = np.interp(target[ok], Yv[s, ::-1], xv[::-1]) - lc[ok]
    return out


def smoother(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fitted, leverage-corrected residuals) of a quadratic in x (a line with fewer than 5 points):
    the smooth curve the law-free bootstrap resamples about (residuals r / sqrt(1 - h), HC2)."""
    deg = 2 if x.size >= 5 else 1
    X = np.vander(x - x.mean(), deg + 1)
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    fitted = X @ coef
    h = np.einsum("ij,ji->i", X, np.linalg.pinv(X))
    return fitted, (y - fitted) / np.sqrt(np.clip(1.0 - h, 1e-12, None))


def model_error(point: np.ndarray, lo: np.ndarray, hi: np.ndarray, lawfree: np.ndarray, level: float) -> float:
    """A law's model error tau (ln k) against the data's own k: tau^2 = max(0, mean (ln k - ln k_lawfree)^2 -
    mean s^2) over the cells where both are read, s = (hi - lo) / 2z the law's bootstrap sd there (its ``level``
    band, z the normal quantile). The part of the disagreement the law's bootstrap does not explain; the
    law-free reading's own noise is not subtracted, because the two are read off the same slice minima (their
    errors are correlated, so var(d) is not the sum of the two bootstraps') and one sweep cannot tell that noise
    from the law's misfit: the band says what the law cannot rule out. 0 when no cell is read."""
    z = stats.norm.ppf(0.5 + level / 2.0)
    with np.errstate(invalid="ignore"):  # an infinite band side (k never reached) is left out
        d, s = point - lawfree, (hi - lo) / (2.0 * z)
    ok = np.isfinite(d) & np.isfinite(s)
    if not ok.any():
        return 0.0
    return math.sqrt(max(0.0, float(np.mean(d[ok] ** 2) - np.mean(s[ok] ** 2))))


def widen(point: np.ndarray, lo: np.ndarray, hi: np.ndarray, tau: float, level: float):
    """(lo, hi) with each side's half-width h made sqrt(h^2 + (z tau)^2): the band of ln k = law + model error,
    the two independent (``model_error``; an infinite side stays infinite)."""
    if not tau > 0:
        return lo, hi
    m = stats.norm.ppf(0.5 + level / 2.0) * tau
    with np.errstate(invalid="ignore"):
        return point - np.hypot(point - lo, m), point + np.hypot(hi - point, m)
