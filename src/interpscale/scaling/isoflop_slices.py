"""One IsoFLOP slice (paper Eq. 25): its window, parabola or Akima minimum, and the optima of
its bootstrap replicates (``fit_isoflop`` runs these on every slice; module doc there)."""

from __future__ import annotations

import math

import numpy as np
from scipy.interpolate import Akima1DInterpolator
from scipy.optimize import least_squares

from ._base import as_array

_AKIMA_GRID = 801
AKIMA_MERGE = 0.02  # sizes closer than 2% in log P are one size to the interpolant


def _window(y: np.ndarray, k: int | None) -> slice:
    n = len(y)
    if k is None or k >= n:
        return slice(0, n)
    i = int(np.argmin(y))
    start = min(max(i - k // 2, 0), n - k)
    return slice(start, start + k)


def _vertex(c0, c1, c2, xm):
    """Vertex of c0 + c1 (x - xm) + c2 (x - xm)^2 -> (x*, L*)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        xs = xm - c1 / (2 * c2)
        Ls = c0 - c1 * c1 / (4 * c2)
    return xs, Ls


def _fit_slice(x: np.ndarray, y: np.ndarray):
    """LM fit of Eq. 25 on one window; returns (a, x*, L*, converged, fitted)."""
    xm = float(x.mean())
    X = np.column_stack([np.ones_like(x), x - xm, (x - xm) ** 2])
    c, *_ = np.linalg.lstsq(X, y, rcond=None)
    if not c[2] > 0:
        return float(c[2]), math.nan, math.nan, False, X @ c
    xs, Ls = _vertex(c[0], c[1], c[2], xm)
    res = least_squares(lambda p: p[0] * (x - p[1]) ** 2 + p[2] - y, [c[2], xs, Ls], method="lm", xtol=1e-14, ftol=1e-14)
    a, xs, Ls = res.x
    return float(a), float(xs), float(Ls), bool(res.success), a * (x - xs) ** 2 + Ls


def _size_groups(x: np.ndarray, tol: float = AKIMA_MERGE) -> np.ndarray:
    """Group ids of sorted log sizes: a size within ``tol`` of the previous one joins its group."""
    return np.concatenate([[0], np.cumsum(np.diff(x) > tol)]).astype(int)


def _merge_close(x: np.ndarray, Y: np.ndarray, tol: float = AKIMA_MERGE):
    """Average the columns of Y (S, k) whose sorted x lie within ``tol`` of the previous one:
    an interpolant through two nearly equal sizes with different losses has a near-vertical
    secant and overshoots wildly (seen on the Epoch data)."""
    grp = _size_groups(x, tol)
    if grp[-1] == len(x) - 1:
        return x, Y
    M = np.eye(grp[-1] + 1)[grp]  # (k, g)
    M = M / M.sum(axis=0, keepdims=True)
    return x @ M, Y @ M


def akima_minimum(x: np.ndarray, Y: np.ndarray, lo: float | None = None, hi: float | None = None):
    """Minimum of the Akima interpolant of each row of Y (S, k) over [lo, hi] (default: the
    range of x): returns (x*, L*, interior) arrays of shape (S,). A dense grid locates the
    minimum; a 3-point parabola through the grid minimum refines it. Sizes within 2% (in
    log P) are averaged first."""
    x, Y = _merge_close(np.asarray(x, float), np.atleast_2d(np.asarray(Y, float)))
    if len(x) < 2:  # every size merged into one: no shape to read a minimum from
        return np.full(len(Y), x[0]), Y[:, 0].copy(), np.zeros(len(Y), bool)
    lo = float(x.min()) if lo is None else lo
    hi = float(x.max()) if hi is None else hi
    g = np.linspace(lo, hi, _AKIMA_GRID)
    h = g[1] - g[0]
    xs, Ls, inner = np.empty(len(Y)), np.empty(len(Y)), np.empty(len(Y), bool)
    for i in range(0, len(Y), 2000):  # (grid, block) temporaries stay small
        V = Akima1DInterpolator(x, Y[i : i + 2000].T)(g)  # (G, s)
        k = np.argmin(V, axis=0)
        cols = np.arange(V.shape[1])
        edge = (k == 0) | (k == len(g) - 1)
        kk = np.clip(k, 1, len(g) - 2)
        f0, f1, f2 = V[kk - 1, cols], V[kk, cols], V[kk + 1, cols]
        den = f0 - 2 * f1 + f2
        with np.errstate(divide="ignore", invalid="ignore"):
            off = np.where(~edge & (den > 0), 0.5 * (f0 - f2) / den, 0.0)
        off = np.clip(off, -1.0, 1.0)
        xs[i : i + 2000] = np.where(edge, g[k], g[kk] + off * h)
        Ls[i : i + 2000] = np.where(edge, V[k, cols], f1 - 0.25 * (f0 - f2) * off)
        inner[i : i + 2000] = ~edge
    return xs, Ls, inner


def _censored_parabola_min(Cf: np.ndarray, xm: float, lo: float, hi: float, w_lo: float, w_hi: float):
    """Optimum of each replicate parabola (rows of Cf: c0, c1, c2 about xm): its vertex when
    convex and inside the slice's sizes (lo, hi), as for the point estimate; otherwise the
    lower end of the sizes [w_lo, w_hi] it was fitted on (censored: the parabola is not
    extrapolated past its data; w_lo, w_hi may be per-replicate arrays). Returns (x*, L*, censored)."""
    xs, Ls = _vertex(Cf[:, 0], Cf[:, 1], Cf[:, 2], xm)
    inside = (Cf[:, 2] > 0) & (xs > lo) & (xs < hi)
    q = lambda t: Cf[:, 0] + Cf[:, 1] * (t - xm) + Cf[:, 2] * (t - xm) ** 2  # noqa: E731
    with np.errstate(invalid="ignore"):  # a cluster replicate may draw no size of a slice: nan, missing
        f_lo, f_hi = q(w_lo), q(w_hi)
    x_e = np.where(f_lo <= f_hi, w_lo, w_hi)
    L_e = np.minimum(f_lo, f_hi)
    return np.where(inside, xs, x_e), np.where(inside, Ls, L_e), ~inside


def _discrete_min(x: np.ndarray, y: np.ndarray, Wt: np.ndarray):
    """Per replicate: the size with the lowest weighted-mean loss among the sizes drawn."""
    ux, inv = np.unique(x, return_inverse=True)
    onehot = np.eye(len(ux))[inv]  # (k, u)
    cnt = Wt @ onehot
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(cnt > 0, (Wt * y[None, :]) @ onehot / cnt, np.inf)
    j = np.argmin(mean, axis=1)
    return ux[j], mean[np.arange(len(j)), j]


def slice_optimum(x: np.ndarray, y: np.ndarray, window: int | None, minimum: str):
    """One slice (x: sorted log sizes, y: losses) as ``fit_isoflop`` reads it: the row fields
    (n_window, P_star, L_star, curvature, converged, convex, interior, reason), the window,
    and (a, x*, L*, fitted window losses) when a convex optimum exists, else None."""
    w = _window(y, window)
    row = dict(n_window=int(w.stop - w.start))
    if row["n_window"] < 3 or np.unique(x[w]).size < 3:
        row.update(P_star=math.nan, L_star=math.nan, curvature=math.nan, converged=False, convex=False,
                   interior=False, reason="fewer than 3 distinct sizes")
        return row, w, None
    a, xs, Ls, conv, fitted = _fit_slice(x[w], y[w])
    convex = a > 0
    interior = bool(convex and x.min() < xs < x.max())
    if minimum == "akima":  # the interpolant always has a minimum; it must be interior
        xa, La, inner = akima_minimum(x[w], y[w][None, :])
        xs, Ls, conv, convex = float(xa[0]), float(La[0]), True, True
        interior = bool(inner[0]) and x.min() < xs < x.max()
    flags = (("not converged", not conv), ("non-convex", not convex), ("minimum at edge", convex and not interior))
    row.update(P_star=math.exp(xs) if convex else math.nan, L_star=Ls, curvature=a, converged=conv, convex=convex,
               interior=interior, reason="; ".join(r for r, bad in flags if bad))
    return row, w, ((a, xs, Ls, fitted) if convex else None)


def slice_minimum(params, loss, *, window: int | None = 5, minimum: str = "parabola") -> dict:
    """The optimum of one IsoFLOP slice as ``fit_isoflop`` finds it: dict with P_star, L_star,
    interior, reason ("" when usable). Used to score held-out slices in backtests."""
    P = as_array(params, "params", positive=True)
    L = as_array(loss, "loss", positive=True)
    order = np.argsort(P)
    row, _, _ = slice_optimum(np.log(P[order]), L[order], window, minimum)
    return {k: row[k] for k in ("P_star", "L_star", "interior", "reason")}


def replicate_residual(f: dict, Yb: np.ndarray, minimum: str):
    """Optima of one slice's residual-bootstrap replicates Yb (S, k)."""
    x = f["x"]
    if minimum == "akima":
        xs, Ls, inner = akima_minimum(x, Yb)
        return xs, Ls, ~inner
    xm = x.mean()
    X = np.column_stack([np.ones_like(x), x - xm, (x - xm) ** 2])
    Cf = Yb @ np.linalg.pinv(X).T  # (S, 3)
    return _censored_parabola_min(Cf, xm, f["lo"], f["hi"], x.min(), x.max())


def replicate_weighted(f: dict, Wt: np.ndarray):
    """Optima of one slice under pairs/cluster multiplicities Wt (S, k): weighted least squares;
    a replicate with < 3 distinct sizes drawn (sizes within 2% in log P count as one: a parabola
    through two nearly equal sizes has an absurd curvature and vertex) takes the lowest mean
    loss among the sizes it drew."""
    x, y = f["x"], f["y"]
    xm = x.mean()
    X = np.column_stack([np.ones_like(x), x - xm, (x - xm) ** 2])
    inv = _size_groups(x)
    few = ((Wt @ np.eye(inv.max() + 1)[inv]) > 0).sum(axis=1) < 3
    XtWX = np.einsum("sk,ki,kj->sij", Wt, X, X)
    XtWX[few] = np.eye(3)
    Cf = np.linalg.solve(XtWX, np.einsum("sk,ki,k->si", Wt, X, y)[..., None])[..., 0]
    drawn = Wt > 0  # censor within the sizes this replicate actually drew
    w_lo = np.where(drawn, x[None, :], np.inf).min(axis=1)
    w_hi = np.where(drawn, x[None, :], -np.inf).max(axis=1)
    xs, Ls, deg = _censored_parabola_min(Cf, xm, f["lo"], f["hi"], w_lo, w_hi)
    if few.any():
        xd, Ld = _discrete_min(x, y, Wt[few])
        xs[few], Ls[few] = xd, Ld
    return xs, Ls, deg | few
