"""IsoFLOP analysis: per-slice parabolas in log P (paper Eq. 25), then power laws in C (Eq. 26).

Each slice's parabola L = a (ln P - ln P*)^2 + L* is fitted (Levenberg-Marquardt from the exact
least-squares quadratic) to the ``window`` points (default 5) centred on its minimum-loss model,
as whole-slice parabolas are biased when sizes span far from the optimum; ``minimum="akima"``
reads the minimum off an Akima interpolant instead (Porian et al. 2024). Bootstrap replicates are
never dropped: a replicate whose slice degenerates (< 3 distinct sizes, non-convex, vertex
outside the sizes) takes its window's minimum (censored at an edge), so it lands in the tails
rather than vanishing from them; above 10% such replicates the intervals are flagged.
"""

from __future__ import annotations

import dataclasses
import math
import warnings as _warnings
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from ._base import DEFAULT_LEVEL, DEFAULT_N_BOOT, FitResult, FitStatus, as_array, check_duplicates, emit, fields_dict
from ._base import fmt_ci, jsonable
from .bootstrap import Bootstrap, pairs_weights, percentile_ci, resample_noise
from .isoflop_slices import replicate_residual, replicate_weighted, slice_minimum, slice_optimum  # noqa: F401
from .power_law import PowerLawFit, attach_draws, fit_power_law, ols_lines


@dataclass(frozen=True)
class IsoFlopFit(FitResult):
    """Per-slice parabolas and the power laws P*(C) = a_P C^alpha_P, L*(C) = a_L C^alpha_L.

    ``slices``: one row per slice (compute, n_points, n_window, P_star, L_star, curvature = a of
    Eq. 25, converged, convex, interior, used, reason, intervals P_star_lo/hi, L_star_lo/hi);
    ``power_P``/``power_L``: power laws whose bootstrap draws refit the slice parabolas.
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
    minimum: str = "parabola"
    bootstrap: str = "residual"
    degenerate_fraction: float = 0.0  # share of replicates with at least one degenerate slice
    noise_sd: dict = field(default_factory=dict)  # log-scale sd of one slice's P*, L* estimate
    status: FitStatus = FitStatus()  # decided by ``isoflop_status`` when the fit is made
    _coef: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def flagged(self) -> bool:
        """True when more than 10% of replicates had a degenerate slice (intervals less reliable)."""
        return self.degenerate_fraction > DEGENERATE_FLAG

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

    def predict_interval(self, compute, level: float | None = None, *, seed: int = 0) -> dict:
        """Prediction intervals of a *new slice's* observed optimum at ``compute``:
        {"P_star": (lo, hi), "L_star": (lo, hi)} -- power-law draws plus the noise of one
        slice's estimate (the larger of the slices' bootstrap spread and the power laws'
        residual scatter). ``band_P``/``band_L`` are the narrower confidence bands."""
        lv = level or self.level
        df = self.noise_sd.get("df")
        return {
            "P_star": self.power_P.predict_interval(compute, lv, noise_sd=self.noise_sd.get("P"), seed=seed, df=df),
            "L_star": self.power_L.predict_interval(compute, lv, noise_sd=self.noise_sd.get("L"), seed=seed, df=df),
        }

    def parabola(self, slice_compute: float, params) -> np.ndarray:
        """The fitted Eq. 25 parabola of the slice with target ``slice_compute``, at ``params``."""
        key = min(self._coef, key=lambda c: abs(math.log(c / slice_compute)), default=None)
        if key is None or abs(math.log(key / slice_compute)) > 1e-6:
            raise ValueError(f"no fitted slice with compute {slice_compute:g}; slices: {sorted(self._coef)}")
        a, lp, Ls = self._coef[key]
        return a * (np.log(np.asarray(params, float)) - lp) ** 2 + Ls

    def to_dict(self) -> dict:
        d = fields_dict(self, skip=("slices", "power_P", "power_L"))  # status included
        d.update(alpha_P=self.alpha_P, alpha_L=self.alpha_L, a_P=self.a_P, a_L=self.a_L, flagged=self.flagged,
                 power_P=self.power_P.to_dict(), power_L=self.power_L.to_dict(),
                 slices=self.slices.to_dict("records"))
        return jsonable(d)

    def _lines(self) -> list[str]:
        pct = round(100 * self.level)
        lines = [
            f"IsoFLOP fit: {int(self.slices['used'].sum())} of {len(self.slices)} slices used, "
            f"window = {self.window}, {self.minimum} minima ({pct}% CI, {self.bootstrap} bootstrap)",
            f"  alpha_P  {fmt_ci(self.alpha_P, self.ci.get('alpha_P'), 4)}   R^2 {self.power_P.r2:.4f}",
            f"  alpha_L  {fmt_ci(self.alpha_L, self.ci.get('alpha_L'), 4)}   R^2 {self.power_L.r2:.4f}",
            "  slice C       n   P*          L*       curvature  flags",
        ]
        for r in self.slices.itertuples():
            flags = "ok" if r.used else r.reason
            lines.append(f"  {r.compute:<12.4g}{r.n_points:<4d}{r.P_star:<12.4g}{r.L_star:<9.4f}{r.curvature:<11.4g}{flags}")
        if self.n_boot_ok:
            flag = "  ** FLAGGED: intervals less reliable **" if self.flagged else ""
            lines.append(f"  degenerate bootstrap replicates: {100 * self.degenerate_fraction:.1f}% "
                         f"(kept, censored at the slice edge){flag}")
        return lines


DEGENERATE_FLAG = 0.10  # issue 17: intervals are flagged above 10% degenerate replicates
MIN_SLICES = 3  # fewer used slices: the power laws pass exactly through them (nothing left to test)


def isoflop_status(fit) -> FitStatus:
    """The status of an IsoFLOP fit (Eqs. 25-26), from its fields: ``failed`` when a used slice's
    parabola did not converge; ``flagged`` when fewer than ``MIN_SLICES`` slices are used, the
    interval of α_P includes 0 (the slices do not fix how the optimal size grows) or more than
    10% of the bootstrap replicates had a degenerate slice."""
    sl, flags = fit.slices, []
    used = int(sl["used"].sum()) if len(sl) else 0
    if used < MIN_SLICES:
        flags.append(f"only {used} usable slice(s): the power laws pass exactly through them")
    lo, hi = (fit.ci or {}).get("alpha_P") or (math.nan, math.nan)
    if np.isfinite(lo) and np.isfinite(hi) and lo <= 0 <= hi:
        flags.append(f"the {fit.level:.0%} interval of α_P [{lo:.2f}, {hi:.2f}] includes 0: these slices do not "
                     "fix how the optimal size grows")
    if getattr(fit, "degenerate_fraction", 0.0) > DEGENERATE_FLAG:
        flags.append(f"unreliable intervals ({100 * fit.degenerate_fraction:.0f}% of the bootstrap replicates had a "
                     f"degenerate slice, > {100 * DEGENERATE_FLAG:.0f}%)")
    return FitStatus.decide(fit.converged, flags, "a slice's parabola did not converge")


def _check(results: pd.DataFrame, compute: str, params: str, loss: str, *, window, minimum, spec: Bootstrap,
           degenerate) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(slice compute, params, loss) arrays after the checks (ValueError naming the bad input)."""
    for col in (compute, params, loss):
        if col not in results.columns:
            raise ValueError(f"fit_isoflop: missing column {col!r}; have {list(results.columns)}")
    if window is not None and window < 3:
        raise ValueError(f"window must be >= 3 (a parabola has 3 parameters), got {window}")
    if minimum not in ("parabola", "akima"):
        raise ValueError(f"minimum must be 'parabola' or 'akima', got {minimum!r}")
    if degenerate not in ("censor", "drop"):
        raise ValueError(f"degenerate must be 'censor' or 'drop', got {degenerate!r}")
    if minimum == "akima" and spec.kind != "residual" and spec.n_boot > 0:
        raise ValueError("minimum='akima' supports the residual bootstrap only")
    Cs, P, L = (as_array(results[c], c, positive=True) for c in (compute, params, loss))
    check_duplicates({compute: Cs, params: P, loss: L}, "fit_isoflop")
    if np.unique(Cs).size < 2:
        what = f"a single slice ({Cs[0]:g})" if Cs.size else "no rows"
        raise ValueError(f"fit_isoflop: column {compute!r} has {what}; power laws need >= 2 slices")
    return Cs, P, L


def _fit_slices(Cs: np.ndarray, P: np.ndarray, L: np.ndarray, window, minimum) -> tuple[list, dict, list]:
    """Eq. 25 on each slice's window (the point fit of Step 1): the rows of ``slices``, the
    coefficients, and one dict per convex slice (c, x, y, fitted, ok, idx, lo, hi)."""
    rows, coef, fits = [], {}, []
    for c in np.unique(Cs):
        m = np.flatnonzero(Cs == c)
        order = np.argsort(P[m])
        x, y = np.log(P[m][order]), L[m][order]
        row, w, opt = slice_optimum(x, y, window, minimum)
        rows.append(dict(compute=float(c), n_points=int(m.size), **row))
        if opt is not None:
            a, xs, Ls, fitted = opt
            coef[float(c)] = (a, xs, Ls)
            fits.append(dict(c=float(c), x=x[w], y=y[w], fitted=fitted, ok=not row["reason"], idx=m[order][w],
                             lo=float(x.min()), hi=float(x.max())))
    return rows, coef, fits


def _replicate_optima(used: list, spec: Bootstrap, minimum: str, n_rows: int):
    """(log P*, L*, degenerate) of every replicate and used slice, each (S, slices)."""
    rng = np.random.default_rng(spec.seed)
    if spec.kind == "residual":
        resid = np.concatenate([f["y"] - f["fitted"] for f in used])
        draws = resample_noise(rng, resid, (spec.n_boot, resid.size), 3 * len(used))  # (S, window points)
    elif spec.kind == "cluster":
        Wall = spec.weights(rng, n_rows)  # (S, rows of the table)
    out, pos = [], 0
    for f in used:
        k = len(f["x"])
        if spec.kind == "residual":
            out.append(replicate_residual(f, f["fitted"][None, :] + draws[:, pos : pos + k], minimum))
            pos += k
        else:  # pairs within the window, or whole clusters
            Wt = pairs_weights(rng, k, spec.n_boot) if spec.kind == "pairs" else Wall[:, f["idx"]]
            out.append(replicate_weighted(f, Wt))
    return tuple(np.column_stack([o[i] for o in out]) for i in range(3))


def _noise_sd(LP, lLS, pP, pL, used) -> dict:
    """Noise of one slice's estimate (for prediction intervals): the bootstrap spread within
    slices, or the power laws' scatter about the line when that is larger (misfit), and the
    residual degrees of freedom behind them (pooled window points - 3 per slice)."""
    noise_sd: dict = {}
    for key, D, pl in (("P", LP, pP), ("L", lLS, pL)):
        fin = np.where(np.isfinite(D), D, np.nan)
        with np.errstate(invalid="ignore", divide="ignore"), _warnings.catch_warnings():
            _warnings.simplefilter("ignore", RuntimeWarning)  # all-nan columns -> nan noise
            within = float(np.nanmean(np.nanvar(fin, axis=0, ddof=1)))
        scatter = pl.resid_sd ** 2 if len(used) > 2 else 0.0
        noise_sd[key] = math.sqrt(max(within, scatter))
    noise_sd["df"] = float(max(sum(len(f["x"]) for f in used) - 3 * len(used), 1))
    return noise_sd


def _bootstrap(used, slices: pd.DataFrame, pP, pL, wts, spec: Bootstrap, *, minimum, degenerate, n_rows,
               warnings: list[str]) -> dict:
    """Step 1-2 replicates: every slice refitted per replicate, then both power laws (the
    bootstrap fields of ``IsoFlopFit``)."""
    if spec.n_boot <= 0:
        return dict(power_P=pP, power_L=pL)
    LP, LS, DG = _replicate_optima(used, spec, minimum, n_rows)
    deg_frac = float(DG.any(axis=1).mean())
    missing = "bound"
    if degenerate == "drop":
        keep = ~DG.any(axis=1)
        LP, LS, DG, missing = LP[keep], LS[keep], DG[keep], "drop"
        emit(warnings, f"bootstrap: {int((~keep).sum())} of {spec.n_boot} replicates had a degenerate slice and "
                       "were dropped (degenerate='drop': intervals biased narrow)")
    with np.errstate(invalid="ignore", divide="ignore"):
        lLS = np.log(np.where(LS > 0, LS, np.nan))
    n_ok = int((np.isfinite(LP).all(axis=1) & np.isfinite(lLS).all(axis=1)).sum())
    if deg_frac > 0 and degenerate == "censor":
        msg = (f"bootstrap: {100 * deg_frac:.1f}% of {spec.n_boot} replicates had a degenerate slice (kept, "
               "optimum censored at the slice edge)")
        if deg_frac > DEGENERATE_FLAG:
            msg += f"; above {100 * DEGENERATE_FLAG:.0f}%: the intervals are flagged as less reliable"
        emit(warnings, msg)
    Cu = np.array([f["c"] for f in used])
    WB = None if wts is None else np.broadcast_to(wts, LP.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        pP, pL = (attach_draws(p, *ols_lines(np.log(Cu), Y, WB), missing=missing)
                  for p, Y in ((pP, LP), (pL, lLS)))
    for j, c in enumerate(Cu):
        i = slices.index[slices.compute == c][0]
        slices.loc[i, ["P_star_lo", "P_star_hi"]] = np.exp(percentile_ci(LP[:, j], spec.level, missing=missing))
        slices.loc[i, ["L_star_lo", "L_star_hi"]] = percentile_ci(LS[:, j], spec.level, missing=missing)
        slices.loc[i, "degenerate_frac"] = float(DG[:, j].mean())
    ci = {"alpha_P": pP.ci["alpha"], "alpha_L": pL.ci["alpha"], "a_P": pP.ci["a"], "a_L": pL.ci["a"]}
    return dict(power_P=pP, power_L=pL, ci=ci, n_boot_ok=n_ok, degenerate_fraction=deg_frac,
                noise_sd=_noise_sd(LP, lLS, pP, pL, used))


def _used_slices(rows: list, fits: list, exclude_flagged: bool, warnings: list[str]):
    """The slices table and the slices that enter the power laws (ValueError when fewer than 2)."""
    slices = pd.DataFrame(rows)
    slices["used"] = [bool(r["reason"] == "" or (not exclude_flagged and r["convex"])) for r in rows]
    for r in rows:
        if r["reason"]:
            emit(warnings, f"slice C={r['compute']:g}: {r['reason']}" + ("; excluded" if exclude_flagged else ""))
    used = [f for f in fits if slices.loc[slices.compute == f["c"], "used"].item()]
    if len(used) < 2:
        raise ValueError(f"fit_isoflop: only {len(used)} usable slice(s); flagged: "
                         + "; ".join(f"C={r['compute']:g}: {r['reason']}" for r in rows if r["reason"]))
    empty = dict.fromkeys(("P_star_lo", "P_star_hi", "L_star_lo", "L_star_hi", "degenerate_frac"), math.nan)
    return slices.assign(**empty), used


def fit_isoflop(
    results: pd.DataFrame,
    *,
    compute: str = "slice_flops",
    params: str = "params",
    loss: str = "loss",
    window: int | None = 5,
    exclude_flagged: bool = True,
    slice_weights: Literal["none", "n_points"] = "none",
    n_boot: int = DEFAULT_N_BOOT,
    bootstrap: Literal["residual", "pairs", "cluster"] = "residual",
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
    minimum: Literal["parabola", "akima"] = "parabola",
    groups=None,
    degenerate: Literal["censor", "drop"] = "censor",
) -> IsoFlopFit:
    """Steps 1-2 of §8.2.1 on a table with one row per (model, slice).

    ``compute`` names the slice column (target C, shared by a slice's rows); ``params`` the
    non-embedding parameter count; ``loss`` the validation loss. Non-convex, non-converged or
    edge-minimum slices are flagged and, with ``exclude_flagged``, left out of the power laws.
    ``slice_weights="n_points"`` weights slices by their window size in the OLS. ``minimum``:
    the vertex of Eq. 25 or the minimum of an Akima interpolant.

    CIs: ``"residual"`` resamples the pooled parabola residuals, refitting every slice and both
    power laws per replicate; ``"pairs"`` each window's points; ``"cluster"`` whole ``groups`` (one
    label per row). Degenerate replicates are kept (``degenerate_fraction``; module doc);
    ``degenerate="drop"`` drops them (biased narrow), for comparison only.
    """
    if not isinstance(results, pd.DataFrame):
        raise ValueError("fit_isoflop: results must be a pandas DataFrame")
    spec = Bootstrap(n_boot=n_boot, kind=bootstrap, level=level, seed=seed,
                     groups=None if groups is None else np.asarray(groups)).checked(len(results), "fit_isoflop")
    Cs, P, L = _check(results, compute, params, loss, window=window, minimum=minimum, spec=spec, degenerate=degenerate)
    if slice_weights not in ("none", "n_points"):
        raise ValueError(f"slice_weights must be 'none' or 'n_points', got {slice_weights!r}")
    warnings: list[str] = []
    rows, coef, fits = _fit_slices(Cs, P, L, window, minimum)
    slices, used = _used_slices(rows, fits, exclude_flagged, warnings)
    Cu = np.array([f["c"] for f in used])
    wts = np.array([len(f["x"]) for f in used], float) if slice_weights == "n_points" else None
    pP = fit_power_law(Cu, np.exp([coef[c][1] for c in Cu]), weights=wts, n_boot=0, level=spec.level)
    pL = fit_power_law(Cu, np.array([coef[c][2] for c in Cu]), weights=wts, n_boot=0, level=spec.level)
    bt = _bootstrap(used, slices, pP, pL, wts, spec, minimum=minimum, degenerate=degenerate, n_rows=len(results),
                    warnings=warnings)
    if len(used) == 2:
        emit(warnings, "only 2 slices: the power laws pass exactly through them")
    converged = bool(all(slices.loc[slices.used, "converged"]))
    fit = IsoFlopFit(slices=slices, window=window, level=spec.level, converged=converged,
                     warnings=tuple(warnings), minimum=minimum, bootstrap=bootstrap, _coef=coef, **bt)
    return dataclasses.replace(fit, status=isoflop_status(fit))
