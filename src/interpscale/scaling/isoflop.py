"""IsoFLOP analysis: per-slice parabolas in log P (paper Eq. 25), then power laws in C (Eq. 26).

Window rule: each slice's parabola is fitted to the ``window`` points (default 5) centred on
the observed minimum-loss model (shifted to stay inside the slice; all points when the slice
has fewer). Whole-slice parabolas are biased when the slice spans sizes far from the optimum.
The parabola is L = a (ln P - ln P*)^2 + L*, fitted by Levenberg-Marquardt from the exact
least-squares quadratic (the two coincide at the optimum; LM certifies convergence).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from ._base import (
    DEFAULT_LEVEL,
    DEFAULT_N_BOOT,
    as_array,
    check_duplicates,
    check_level,
    emit,
    fields_dict,
    fmt_ci,
    jsonable,
    percentile_ci,
    pairs_weights,
    resample_residuals,
)
from .power_law import PowerLawFit, attach_draws, fit_power_law, ols_lines


@dataclass(frozen=True)
class IsoFlopFit:
    """Per-slice parabolas and the power laws P*(C) = a_P C^alpha_P, L*(C) = a_L C^alpha_L.

    ``slices`` has one row per slice: compute, n_points, n_window, P_star, L_star,
    curvature (a of Eq. 25, loss per (ln P)^2), converged, convex, interior, used, reason,
    and bootstrap intervals P_star_lo/hi, L_star_lo/hi. ``power_P``/``power_L`` are
    PowerLawFit objects whose bootstrap draws come from refitting the slice parabolas.
    """

    slices: pd.DataFrame = field(compare=False)
    power_P: PowerLawFit
    power_L: PowerLawFit
    window: int | None
    ci: dict = field(default_factory=dict)
    level: float = DEFAULT_LEVEL
    converged: bool = True
    warnings: tuple[str, ...] = ()
    n_boot_ok: int = 0
    _coef: dict = field(default_factory=dict, repr=False, compare=False)

    alpha_P = property(lambda self: self.power_P.alpha, doc="exponent of P*(C)")
    alpha_L = property(lambda self: self.power_L.alpha, doc="exponent of L*(C)")
    a_P = property(lambda self: self.power_P.a, doc="coefficient of P*(C)")
    a_L = property(lambda self: self.power_L.a, doc="coefficient of L*(C)")

    def predict(self, compute):
        """(P*(C), L*(C)) from the power laws."""
        return self.power_P.predict(compute), self.power_L.predict(compute)

    def band_P(self, compute, level: float | None = None):
        return self.power_P.band(compute, level)

    def band_L(self, compute, level: float | None = None):
        return self.power_L.band(compute, level)

    def parabola(self, slice_compute: float, params) -> np.ndarray:
        """The fitted Eq. 25 parabola of the slice with target ``slice_compute``, at ``params``."""
        key = min(self._coef, key=lambda c: abs(math.log(c / slice_compute)), default=None)
        if key is None or abs(math.log(key / slice_compute)) > 1e-6:
            raise ValueError(f"no fitted slice with compute {slice_compute:g}; slices: {sorted(self._coef)}")
        a, lp, Ls = self._coef[key]
        return a * (np.log(np.asarray(params, float)) - lp) ** 2 + Ls

    def to_dict(self) -> dict:
        d = fields_dict(self, skip=("slices", "power_P", "power_L"))
        d.update(alpha_P=self.alpha_P, alpha_L=self.alpha_L, a_P=self.a_P, a_L=self.a_L)
        d["power_P"], d["power_L"] = self.power_P.to_dict(), self.power_L.to_dict()
        d["slices"] = self.slices.to_dict("records")
        return jsonable(d)

    def summary(self) -> str:
        pct = round(100 * self.level)
        lines = [
            f"IsoFLOP fit: {int(self.slices['used'].sum())} of {len(self.slices)} slices used, "
            f"window = {self.window} ({pct}% CI)",
            f"  alpha_P  {fmt_ci(self.alpha_P, self.ci.get('alpha_P'), 4)}   R^2 {self.power_P.r2:.4f}",
            f"  alpha_L  {fmt_ci(self.alpha_L, self.ci.get('alpha_L'), 4)}   R^2 {self.power_L.r2:.4f}",
            "  slice C       n   P*          L*       curvature  flags",
        ]
        for r in self.slices.itertuples():
            flags = "ok" if r.used else r.reason
            lines.append(f"  {r.compute:<12.4g}{r.n_points:<4d}{r.P_star:<12.4g}{r.L_star:<9.4f}{r.curvature:<11.4g}{flags}")
        return "\n".join(lines + [f"  warning: {w}" for w in self.warnings])


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


def fit_isoflop(
    df: pd.DataFrame,
    *,
    compute: str = "slice_flops",
    params: str = "params",
    loss: str = "loss",
    window: int | None = 5,
    exclude_flagged: bool = True,
    weights: Literal["none", "n_points"] = "none",
    n_boot: int = DEFAULT_N_BOOT,
    bootstrap: Literal["residual", "pairs"] = "residual",
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
) -> IsoFlopFit:
    """Steps 1-2 of §8.2.1 on a table with one row per (model, slice).

    ``compute`` names the slice column (target C, shared by all rows of a slice); ``params``
    the non-embedding parameter count; ``loss`` the validation loss. Non-convex, non-converged
    or edge-minimum slices are flagged and, with ``exclude_flagged``, left out of the power
    laws. ``weights="n_points"`` weights slices by their window size in the OLS. CIs: a
    residual bootstrap that resamples the pooled parabola residuals, refits every slice and
    both power laws per replicate (``bootstrap="pairs"`` resamples each window's points;
    replicates with fewer than 3 distinct sizes in a slice are dropped).
    """
    for col in (compute, params, loss):
        if col not in df.columns:
            raise ValueError(f"fit_isoflop: missing column {col!r}; have {list(df.columns)}")
    if window is not None and window < 3:
        raise ValueError(f"window must be >= 3 (a parabola has 3 parameters), got {window}")
    level = check_level(level)
    Cs = as_array(df[compute], compute, positive=True)
    P = as_array(df[params], params, positive=True)
    L = as_array(df[loss], loss, positive=True)
    check_duplicates({compute: Cs, params: P, loss: L}, "fit_isoflop")
    keys = np.unique(Cs)
    if len(keys) < 2:
        raise ValueError(f"fit_isoflop: column {compute!r} has a single slice ({keys[0]:g}); power laws need >= 2 slices")
    warnings: list[str] = []
    rows, coef, fits = [], {}, []
    for c in keys:
        m = Cs == c
        order = np.argsort(P[m])
        x, y = np.log(P[m][order]), L[m][order]
        w = _window(y, window)
        row = dict(compute=float(c), n_points=int(m.sum()), n_window=int(w.stop - w.start))
        if row["n_window"] < 3 or np.unique(x[w]).size < 3:
            row.update(P_star=math.nan, L_star=math.nan, curvature=math.nan, converged=False, convex=False,
                       interior=False, reason="fewer than 3 distinct sizes")
            rows.append(row)
            continue
        a, xs, Ls, conv, fitted = _fit_slice(x[w], y[w])
        convex = a > 0
        interior = bool(convex and x.min() < xs < x.max())
        flags = (("not converged", not conv), ("non-convex", not convex), ("minimum at edge", convex and not interior))
        reason = "; ".join(r for r, bad in flags if bad)
        row.update(P_star=math.exp(xs) if convex else math.nan, L_star=Ls, curvature=a, converged=conv, convex=convex,
                   interior=interior, reason=reason)
        rows.append(row)
        if convex:
            coef[float(c)] = (a, xs, Ls)
            fits.append((float(c), x[w], y[w], fitted, not reason))
    slices = pd.DataFrame(rows)
    slices["used"] = [bool(r["reason"] == "" or (not exclude_flagged and r["convex"])) for r in rows]
    for r in rows:
        if r["reason"]:
            emit(warnings, f"slice C={r['compute']:g}: {r['reason']}" + ("; excluded" if exclude_flagged else ""))
    used = [f for f in fits if slices.loc[slices.compute == f[0], "used"].item()]
    if len(used) < 2:
        raise ValueError(
            f"fit_isoflop: only {len(used)} usable slice(s); flagged: "
            + "; ".join(f"C={r['compute']:g}: {r['reason']}" for r in rows if r["reason"])
        )
    Cu = np.array([f[0] for f in used])
    Pu = np.array([coef[f[0]][1] for f in used])
    Lu = np.array([coef[f[0]][2] for f in used])
    wts = np.array([len(f[1]) for f in used], float) if weights == "n_points" else None
    pP = fit_power_law(Cu, np.exp(Pu), weights=wts, n_boot=0, level=level)
    pL = fit_power_law(Cu, Lu, weights=wts, n_boot=0, level=level)
    ci: dict = {}
    n_ok = 0
    for col in ("P_star_lo", "P_star_hi", "L_star_lo", "L_star_hi"):
        slices[col] = math.nan
    if n_boot > 0:
        rng = np.random.default_rng(seed)
        if bootstrap == "residual":
            resid = np.concatenate([f[2] - f[3] for f in used])
            draws = resample_residuals(rng, resid, n_boot, 3 * len(used))  # (S, total window points)
        elif bootstrap != "pairs":
            raise ValueError(f"bootstrap must be 'residual' or 'pairs', got {bootstrap!r}")
        lps, lss, pos = [], [], 0
        for _, x, y, fitted, _ in used:
            k = len(x)
            xm = x.mean()
            X = np.column_stack([np.ones_like(x), x - xm, (x - xm) ** 2])
            if bootstrap == "residual":
                Cf = (fitted[None, :] + draws[:, pos : pos + k]) @ np.linalg.pinv(X).T  # (S, 3)
            else:  # pairs: resample the window's points, weighted least squares per replicate
                Wt = pairs_weights(rng, k, n_boot)
                _, inv = np.unique(x, return_inverse=True)
                deg = ((Wt @ np.eye(inv.max() + 1)[inv]) > 0).sum(axis=1) < 3  # < 3 distinct sizes
                XtWX = np.einsum("sk,ki,kj->sij", Wt, X, X)
                XtWX[deg] = np.eye(3)
                Cf = np.linalg.solve(XtWX, np.einsum("sk,ki,k->si", Wt, X, y)[..., None])[..., 0]
                Cf[deg] = np.nan
            pos += k
            xs, Ls = _vertex(Cf[:, 0], Cf[:, 1], Cf[:, 2], xm)
            bad = ~(Cf[:, 2] > 0)
            xs[bad], Ls[bad] = np.nan, np.nan
            lps.append(xs)
            lss.append(Ls)
        LP, LS = np.column_stack(lps), np.column_stack(lss)
        ok = np.isfinite(LP).all(axis=1) & (LS > 0).all(axis=1)
        n_ok = int(ok.sum())
        if n_ok < 0.99 * n_boot:
            emit(warnings, f"bootstrap: {n_boot - n_ok} of {n_boot} replicates had a degenerate or "
                           "non-convex slice and were dropped")
        lC = np.log(Cu)
        WB = None if wts is None else np.broadcast_to(wts, (n_ok, len(used)))
        iP, sP = ols_lines(lC, LP[ok], WB)
        iL, sL = ols_lines(lC, np.log(LS[ok]), WB)
        pP, pL = attach_draws(pP, iP, sP), attach_draws(pL, iL, sL)
        ci = {"alpha_P": pP.ci["alpha"], "alpha_L": pL.ci["alpha"], "a_P": pP.ci["a"], "a_L": pL.ci["a"]}
        for j, c in enumerate(Cu):
            i = slices.index[slices.compute == c][0]
            slices.loc[i, ["P_star_lo", "P_star_hi"]] = np.exp(percentile_ci(LP[ok, j], level))
            slices.loc[i, ["L_star_lo", "L_star_hi"]] = percentile_ci(LS[ok, j], level)
    if len(used) == 2:
        emit(warnings, "only 2 slices: the power laws pass exactly through them")
    converged = bool(all(slices.loc[slices.used, "converged"]))
    return IsoFlopFit(
        slices=slices,
        power_P=pP,
        power_L=pL,
        window=window,
        ci=ci,
        level=level,
        converged=converged,
        warnings=tuple(warnings),
        n_boot_ok=n_ok,
        _coef=coef,
    )
