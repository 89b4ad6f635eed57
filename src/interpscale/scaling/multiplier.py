"""Compute multiplier between two families (issue 36; docs/multiplier.md): k(C) = C_variant(L*_base(C)) / C,
the compute the variant needs to reach the base family's compute-optimal loss at C (k > 1: a tax,
k < 1: a gain), and a test of whether k grows with C.

Two methods, each on its own law of the loss-optimal frontier: ``isoflop``, the IsoFLOP envelopes
L*(C) = a_L C^alpha_L (Eq. 26) of both families, k a power law in C with growth slope
alpha_L,base / alpha_L,variant - 1, bands from a residual bootstrap of the two envelope lines
paired by slice (``_paired_draws``); ``joint``, the joint fits (Eq. 27) at their compute-optimal
allocations, the variant's frontier inverted numerically, bands from each fit's cluster bootstrap
over runs (paired when both families' runs carry the same labels). The growth test
(``GrowthTest``), the shared-exponent F test (``SharedExponentTest``) and the widening beyond the
sweep by the forecast machinery's calibrated intervals are described in docs/multiplier.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from interpscale._markdown import banded_cell  # the report's rule for a value and its band
from interpscale.errors import UserError

from ._base import DEFAULT_GRID, DEFAULT_LEVEL, FitFields, FitStatus, emit, from_options, jsonable, quiet
from .bootstrap import N_BOOT
from .joint import ChinchillaFit, fit_chinchilla, optimal_loss
from .engine import wls
from .isoflop import fit_isoflop, ols_lines
from .multiplier_lawfree import lawfree_log_k, model_error, smoother, widen
from .tables import SLICE_TOLERANCE, fit_rows, flops_per_token_per_param, slice_rows

__all__ = ["GrowthTest", "MultiplierFit", "backbone_pairs", "SharedExponentTest", "VERDICTS", "family_forecasts", "fit_multiplier",
           "planted_multiplier", "simulate_pair"]

MULTIPLIER_METHODS = ("isoflop", "saturating", "joint")  # (forecast.METHODS is the forecast registry)
VERDICTS = ("constant", "growing", "shrinking", "undetermined")
TARGETS = (1e20, 7.6e22)  # a round 1e20 and Steerling-8B's compute (paper §8)
DEFAULT_MARGIN = 0.1  # |slope| below which a multiplier is called constant: k changes < 26% per decade
MULTIPLIER_BOOT = N_BOOT["multiplier"]  # (the one table of replicate counts, scaling.bootstrap)
CSV_COLUMNS = ["compute", "k", "lo", "hi", "method", "extrapolated"]


class _Record:
    def to_dict(self) -> dict:
        return jsonable(dict(self.__dict__))


@dataclass(frozen=True)
class GrowthTest(_Record):
    """The slope of ln k against ln C (k proportional to C^slope) with its interval, a two-sided
    bootstrap p-value for slope = 0 and the verdict; ``assumes`` states the test's assumptions."""

    method: str
    slope: float
    slope_lo: float
    slope_hi: float
    p_value: float
    verdict: str
    level: float
    margin: float
    assumes: str


@dataclass(frozen=True)
class SharedExponentTest(_Record):
    """Both families' envelopes ln L* = ln a_f + alpha ln C fitted with one shared exponent against
    one exponent per family (F test = Gaussian likelihood ratio with the noise variance profiled)."""

    statistic: float
    df: tuple[int, int]
    p_value: float
    alpha_base: float
    alpha_variant: float
    alpha_shared: float
    assumes: str = ("slice optima independent with equal-variance Gaussian log-scale noise about power "
                    "laws in C (Eq. 26); ignores pairing by slice")


@dataclass(frozen=True)
class MultiplierFit(FitFields):
    """k(C) of ``variant`` against ``base``: ``table`` has one row per (method, compute) with the
    columns ``compute, k, lo, hi, method, extrapolated`` (method ``lawfree``: the law-free reading,
    inside the sweep only); ``growth`` one ``GrowthTest`` per method; ``primary`` the method that
    answers (the best ``scores``, docs/multiplier.md), ``equal`` the methods that fit about equally
    well (their spread is in the primary's band), ``decided`` the verdict and ``reason`` why; ``model_error``
    method -> tau (ln k), the disagreement with the law-free k beyond the method's bootstrap, in its band.
    ``level``, ``warnings`` and ``status`` (the primary's, decided by ``fit_multiplier``) are
    ``FitFields``'; ``ci`` defaults to each method's interval of the growth slope."""

    base: str
    variant: str
    table: pd.DataFrame = field(compare=False)
    growth: dict
    primary: str
    shared_exponent: SharedExponentTest | None = None
    paired: dict = field(default_factory=dict)  # method -> how its bootstrap pairs the families
    statuses: dict = field(default_factory=dict)  # method -> FitStatus (joint: flagged when a joint fit is)
    sweep_range: tuple[float, float] = (math.nan, math.nan)
    n_boot: int = 0
    scores: dict = field(default_factory=dict)  # method -> MethodScore
    equal: tuple[str, ...] = ()
    decided: str | None = None
    reason: str = ""
    model_error: dict = field(default_factory=dict)  # method -> tau (ln k), widening its band (model_error)

    def __post_init__(self):
        if not self.ci:  # the growth slope's interval per method, as the tests report it
            object.__setattr__(self, "ci", {m: (t.slope_lo, t.slope_hi) for m, t in self.growth.items()})

    @property
    def test(self) -> GrowthTest:
        """The primary method's growth test."""
        return self.growth[self.primary]

    @property
    def verdict(self) -> str:
        """The pair's verdict: the primary's, ``undetermined`` when equally good methods conflict."""
        return self.decided or self.test.verdict

    def at(self, compute: float, method: str | None = None) -> dict:
        """The row of ``table`` at ``compute`` (nearest in log) for ``method`` (default: primary)."""
        rows = self.table[self.table["method"] == (method or self.primary)]
        if rows.empty:
            raise ValueError(f"no multiplier for method {method!r}; have {sorted(set(self.table['method']))}")
        i = int(np.argmin(np.abs(np.log(rows["compute"].to_numpy(float) / compute))))
        return rows.iloc[i].to_dict()

    def to_frame(self) -> pd.DataFrame:
        return self.table[CSV_COLUMNS].copy()

    def growth_dict(self) -> dict:
        """``multiplier.json``: the primary test's fields with the pair's verdict and its reason,
        every method's test and score, and the F test."""
        d = self.test.to_dict()
        d.update(base=self.base, variant=self.variant, verdict=self.verdict, reason=self.reason,
                 primary=self.primary, scores=self.scores, equal=self.equal, tests=self.growth,
                 model_error=self.model_error, shared_exponent=self.shared_exponent, paired=self.paired,
                 statuses=self.statuses,
                 sweep_range=self.sweep_range, n_boot=self.n_boot, status=self.status, warnings=self.warnings)
        return jsonable(d)  # each test and status by its own to_dict

    def to_dict(self) -> dict:
        return jsonable(dict(self.growth_dict(), table=self.to_frame().to_dict("records")))

    def flagged(self, method: str, extrapolated: bool) -> bool:
        """Whether a k of ``method`` is shown as "not determined" whatever its band: extrapolated by a
        method whose fit is not identified (the one rule of the report, tables.md, multiplier.csv's
        ``determined`` and this summary)."""
        return bool(extrapolated) and not self.statuses.get(method, FitStatus()).identified

    def summary(self) -> str:
        pct = round(100 * self.level)
        lines = [f"compute multiplier k(C) of {self.variant} against {self.base} (k > 1: {self.variant} needs "
                 f"more compute for {self.base}'s compute-optimal loss; {pct}% bands)",
                 "  method      C           k [band]                                   extrapolated"]
        for r in self.table.itertuples():  # the report's rule: no number whose band spans > MAX_DECADES
            flagged = self.flagged(r.method, r.extrapolated)
            lines.append(f"  {r.method:<12}{r.compute:<12.3g}{banded_cell(r.k, r.lo, r.hi, flagged=flagged)}"
                         .ljust(75) + ("yes" if r.extrapolated else "no"))
        for m, t in self.growth.items():
            st = self.statuses.get(m, FitStatus())
            sc = self.scores.get(m)
            lines.append(f"  growth ({m}{', primary' if m == self.primary else ''}): k ~ C^{t.slope:+.3f} "
                         f"[{t.slope_lo:+.3f}, {t.slope_hi:+.3f}], p = {t.p_value:.3g}: {t.verdict}"
                         + (f"; score {sc.score:.3g}" if sc is not None else "")
                         + (f"; model error {self.model_error[m]:.3g} in ln k" if self.model_error.get(m) else "")
                         + ("" if st.identified else f"  ({st})"))
        lines.append(f"  verdict: {self.verdict} ({self.reason})")
        if self.shared_exponent is not None:
            s = self.shared_exponent
            lines.append(f"  shared vs free envelope exponents: F = {s.statistic:.3g}, p = {s.p_value:.3g} "
                         f"(alpha_L {s.alpha_base:.4f} vs {s.alpha_variant:.4f})")
        return "\n".join(lines)  # the warnings were logged when the fits were made


def backbone_pairs(families, suffix: str = "+concept") -> list[tuple[str, str]]:
    """(base, variant) for every family ``X+concept`` whose backbone ``X`` is among ``families``
    (the paper's comparisons: ar+concept vs ar, cdlm+concept vs cdlm)."""
    have = set(map(str, families))
    return [(f[: -len(suffix)], f) for f in sorted(have) if f.endswith(suffix) and f[: -len(suffix)] in have]


# ---- the data of each family -------------------------------------------------------------------

def _family_rows(results: pd.DataFrame, fam: str, *, loss: str, estimator, annealed, warnings) -> pd.DataFrame:
    """The rows of one family that the fits use (``tables.fit_rows``, as ``fit_families``)."""
    for col in ("family", "params", "tokens", loss):  # slices: fit_rows derives them where there is no column
        if col not in results.columns:
            raise UserError(f"fit_multiplier: results table lacks column {col!r}; have {list(results.columns)}")
    if fam not in set(results["family"]):
        raise UserError(f"fit_multiplier: family {fam!r} not in the table; have "
                        f"{sorted(set(results['family'].dropna().astype(str)))}")
    rows = fit_rows(results, family=fam, estimator=estimator, annealed=annealed, loss=loss, caller="fit_multiplier",
                    warnings=warnings)  # the one row rule (predicted anneals left out, as in every fit)
    return rows.dropna(subset=["slice_flops"])


@dataclass(frozen=True)
class _Envelope:
    """One family's used slice optima (ln C, ln L*) and its Eq. 26 line."""

    compute: np.ndarray
    x: np.ndarray
    y: np.ndarray
    log_a: float
    alpha: float


def _envelope(rows: pd.DataFrame, fam: str, loss: str, window, tolerance) -> _Envelope:
    with quiet():
        iso = fit_isoflop(slice_rows(rows, tolerance), loss=loss, window=window, n_boot=0)
    s = iso.slices[iso.slices["used"]].sort_values("compute")
    if len(s) < 3:
        raise UserError(f"fit_multiplier: {fam}: {len(s)} usable IsoFLOP slices; the envelope's band needs >= 3")
    C = s["compute"].to_numpy(float)
    return _Envelope(C, np.log(C), np.log(s["L_star"].to_numpy(float)), iso.power_L.log_a, iso.alpha_L)


def _slice_units(*computes: np.ndarray) -> list[np.ndarray]:
    """Index of each family's slices into the union of slices (equal targets share an index)."""
    union = np.unique(np.round(np.log(np.concatenate(computes)), 6))
    return [np.searchsorted(union, np.round(np.log(c), 6)) for c in computes]


def _leverage_residuals(e: _Envelope) -> np.ndarray:
    """Residuals of the envelope line divided by sqrt(1 - h_i) (h: the OLS leverages), each with
    the variance of the noise under a homoscedastic line (HC2; raw residuals are shrunk)."""
    xc = e.x - e.x.mean()
    h = 1.0 / e.x.size + xc**2 / float(xc @ xc)
    return (e.y - e.log_a - e.alpha * e.x) / np.sqrt(np.clip(1.0 - h, 1e-12, None))


def _paired_noise(computes: Sequence[np.ndarray], R: Sequence[np.ndarray], n_boot: int, level: float, seed: int,
                  n_par: int = 2) -> list[np.ndarray]:
    """Per family, (S, n) residual draws paired by slice, scaled by t_df / z (module doc of
    ``_paired_draws``): a shared slice's two residuals drawn together (one pair of the shared
    slices', in either order), a slice of one family alone from both families' residuals; df =
    shared slices - n_par when more than n_par are shared, else points - 2 n_par."""
    units = _slice_units(*computes)
    shared = np.intersect1d(units[0], units[1])
    idx = [np.searchsorted(u, shared) for u in units]  # each family's position of the shared slices
    pairs = np.column_stack([R[0][idx[0]], R[1][idx[1]]])
    pairs = np.vstack([pairs, pairs[:, ::-1]])  # either order: one pooled noise scale
    pooled = np.concatenate(R)
    rng = np.random.default_rng(seed)
    n_units = int(max(u.max() for u in units)) + 1
    pick = rng.integers(0, max(len(pairs), 1), size=(n_boot, n_units))
    q = 0.5 + level / 2
    df = shared.size - n_par if shared.size > n_par else max(pooled.size - 2 * n_par, 1)
    widen = stats.t.ppf(q, df) / stats.norm.ppf(q)
    out = []
    for f, u in enumerate(units):
        E = pooled[rng.integers(0, pooled.size, size=(n_boot, u.size))]
        if shared.size:
            on = np.isin(u, shared)
            E[:, on] = pairs[pick[:, u[on]], f]
        out.append(widen * E)
    return out


def _paired_draws(envs: Sequence[_Envelope], n_boot: int, level: float, seed: int) -> list[np.ndarray]:
    """Per family, (S, 2) draws of (ln a, alpha): a residual bootstrap of the two envelope lines
    paired by slice (``_paired_noise``). A shared slice's two residuals are drawn together, their
    correlation kept and the families' noise pooled (assumed equal); a slice of one family alone
    draws from both families' residuals. Deviations are scaled by t_df / z (the noise scale comes
    from few slices: df = shared slices - 2 when >= 3 are shared, else points - 4)."""
    noise = _paired_noise([e.compute for e in envs], [_leverage_residuals(e) for e in envs], n_boot, level, seed)
    out = []
    for e, E in zip(envs, noise):
        b0, b1 = ols_lines(e.x, (e.log_a + e.alpha * e.x)[None, :] + E)
        out.append(np.column_stack([b0, b1]))
    return out


def _log_k_isoflop(base: np.ndarray, variant: np.ndarray, lc: np.ndarray) -> np.ndarray:
    """ln k(C) (S, m) of Eq. 26 envelopes: ln L*_b(C) = b0 + b1 ln C, ln C_v(L) = (ln L - v0) / v1."""
    b0, b1, v0, v1 = base[:, :1], base[:, 1:2], variant[:, :1], variant[:, 1:2]
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (b0 + b1 * lc[None, :] - v0) / v1 - lc[None, :]
    return np.where(v1 < 0, out, np.nan)  # a non-decreasing variant envelope reaches no lower loss


# ---- the joint fits (Eq. 27) ------------------------------------------------------------------

def _invert_frontier(theta: np.ndarray, target: np.ndarray, lc: np.ndarray, k: float) -> np.ndarray:
    """ln C' (S, m) at which each row's compute-optimal Eq. 27 loss equals ``target`` (S, m),
    by bisection in ln C' within ln C +- 46 (a factor 1e20); +inf where the target is at or
    below L_inf (never reached), nan where the row's frontier does not decrease."""
    lo, hi = (np.broadcast_to(lc + d, target.shape) for d in (-46.0, 46.0))
    for _ in range(64):
        mid = 0.5 * (lo + hi)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            above = optimal_loss(theta, np.exp(mid), k) > target  # above the target: more compute
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
    out = 0.5 * (lo + hi)
    L_inf = np.exp(theta[:, 2:3])
    out = np.where(target <= L_inf, np.inf, out)
    bad = (theta[:, 3:4] <= 0) | (theta[:, 4:5] <= 0)
    return np.where(bad, np.nan, out)


def _run_labels(rows: pd.DataFrame) -> np.ndarray:
    """One label per row naming its run by (slice, size rank in the slice): shared by both
    families' runs at the same slice and rank, so equal label sets give the same cluster draws."""
    rank = rows.groupby("slice_flops")["params"].rank(method="dense").astype(int)
    return np.array([f"{c:.6g}|{r}" for c, r in zip(rows["slice_flops"], rank)])


def _joint_fits(rows_b, rows_v, o, names, warnings) -> tuple[ChinchillaFit, ChinchillaFit, str]:
    lab_b, lab_v = _run_labels(rows_b), _run_labels(rows_v)
    paired = set(lab_b) == set(lab_v)
    with quiet():
        fits = [fit_chinchilla(rows["params"], rows["tokens"], rows[o.loss], grid=o.grid, n_boot=o.n_boot,
                               level=o.level, seed=o.seed, bootstrap="cluster", groups=lab)
                for rows, lab in ((rows_b, lab_b), (rows_v, lab_v))]
    how = ("cluster bootstrap over runs, the same draws for both families (same slices and sizes per slice)"
           if paired else "cluster bootstrap over runs, independent per family (their slices or sizes differ)")
    for name, f in zip(names, fits):
        if not f.status.identified:  # decided by fit_chinchilla; read here
            emit(warnings, f"joint multiplier: {name}'s joint fit is {f.status}")
    return fits[0], fits[1], how


def _log_k_joint(fb: ChinchillaFit, fv: ChinchillaFit, kb: float, kv: float, lc: np.ndarray):
    """(point ln k (m,), draws (S, m)) of the joint fits at the computes exp(lc)."""
    out = []
    for tb, tv in ((fb.theta[None, :], fv.theta[None, :]), (fb.boot, fv.boot)):
        if tb is None or tv is None or not len(tb) or not len(tv):
            out.append(np.full((0, lc.size), np.nan))
            continue
        S = min(len(tb), len(tv))
        tb, tv = tb[:S], tv[:S]
        target = optimal_loss(tb, np.exp(lc), kb)
        out.append(_invert_frontier(tv, target, lc, kv) - lc[None, :])
    return out[0][0], out[1]


# ---- the saturating envelope L*(C) = E + a C^alpha -------------------------------------------

SATURATING_E_MAX = 0.98  # E at most this fraction of the family's smallest slice minimum
_E_GRID = 1.0 - np.geomspace(1.0, 1.0 - SATURATING_E_MAX, 60)  # E / min L*: 0 ... 0.98, dense near the top


def saturating_log(p: np.ndarray, x: np.ndarray) -> np.ndarray:
    """ln L* (S, n) of rows p = (E, b0, b1) at ln C = x: ln(E + exp(b0 + b1 x))."""
    p = np.atleast_2d(p)
    with np.errstate(over="ignore"):
        return np.log(p[:, :1] + np.exp(p[:, 1:2] + p[:, 2:3] * np.asarray(x, float)[None, :]))


def saturating_fit(x: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """(S, 3) rows (E, b0, b1) of L*(C) = E + exp(b0 + b1 ln C) fitted to each row of ln L* ``Y``
    (S, n) at ln C = ``x``: E profiled over fractions 0 ... SATURATING_E_MAX of the row's smallest
    L*, the line of ln(L* - E) on ln C by OLS, and the E whose curve has the least squared error in ln L*."""
    Y = np.atleast_2d(Y)
    L = np.exp(Y)
    L_min = L.min(axis=1, keepdims=True)
    best, out = np.full(Y.shape[0], np.inf), np.zeros((Y.shape[0], 3))
    for f in _E_GRID:
        p = np.column_stack([f * L_min[:, 0], *ols_lines(x, np.log(L - f * L_min))])
        sse = ((Y - saturating_log(p, x)) ** 2).sum(axis=1)
        better = sse < best
        best, out[better] = np.where(better, sse, best), p[better]
    return out


def loso_saturating(e: _Envelope) -> np.ndarray:
    """Held-out errors of each slice minimum under the saturating envelope fitted to the others."""
    keep = ~np.eye(e.x.size, dtype=bool)
    return np.array([e.y[i] - saturating_log(saturating_fit(e.x[k], e.y[None, k]), e.x[i:i + 1])[0, 0]
                     for i, k in enumerate(keep)])


def _log_k_saturating(base: np.ndarray, variant: np.ndarray, lc: np.ndarray) -> np.ndarray:
    """ln k (S, m) of saturating envelopes: the base's L*(C), the variant's curve inverted there;
    +inf where the target is at or below the variant's E (never reached), nan where it does not fall."""
    target = np.exp(saturating_log(base, lc))
    E, v0, v1 = (np.atleast_2d(variant)[:, i : i + 1] for i in range(3))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (np.log(target - E) - v0) / v1 - lc[None, :]
    out = np.where(target <= E, np.inf, out)
    return np.where(v1 < 0, out, np.nan)


# ---- bands, growth tests, calibration ---------------------------------------------------------

def _quantiles(draws: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Percentile band over axis 0 with non-finite draws kept as the infinite side (a replicate
    whose variant never reaches the loss is k = +inf; an invalid one, nan, counts as both)."""
    q = (1.0 - level) / 2.0
    lo_d = np.where(np.isnan(draws), -np.inf, draws)
    hi_d = np.where(np.isnan(draws), np.inf, draws)
    return (np.quantile(lo_d, q, axis=0, method="lower"), np.quantile(hi_d, 1 - q, axis=0, method="higher"))


def growth_test(method: str, slope: float, draws: np.ndarray, level: float, margin: float,
                assumes: str) -> GrowthTest:
    """Verdict from the point slope and its bootstrap draws: the percentile interval, the two-sided
    bootstrap p-value 2 min(P*(slope <= 0), P*(slope >= 0)) (the interval excludes 0 exactly when
    p < 1 - level), then growing / shrinking / constant (inside +-margin) / undetermined."""
    d = np.asarray(draws, float)
    d = d[np.isfinite(d)]
    if d.size < 20 or not math.isfinite(slope):
        return GrowthTest(method, float(slope), math.nan, math.nan, math.nan, "undetermined", level, margin, assumes)
    q = (1.0 - level) / 2.0
    lo, hi = (float(v) for v in np.quantile(d, [q, 1 - q]))
    p = float(min(1.0, 2.0 * min(np.mean(d <= 0), np.mean(d >= 0))))
    return GrowthTest(method, float(slope), lo, hi, p, _verdict(lo, hi, margin), level, margin, assumes)


def _verdict(lo: float, hi: float, margin: float) -> str:
    return ("growing" if lo > 0 else "shrinking" if hi < 0
            else "constant" if -margin <= lo and hi <= margin else "undetermined")


def _with_spread(test: GrowthTest, slopes) -> GrowthTest:
    """The test with its slope interval widened to the other slopes (the methods that fit about
    equally well) where they fall outside it, and the verdict read off the widened interval."""
    s = [v for v in slopes if math.isfinite(v)]
    if not s or not math.isfinite(test.slope_lo):
        return test
    lo, hi = min(test.slope_lo, *s), max(test.slope_hi, *s)
    return replace(test, slope_lo=lo, slope_hi=hi, verdict=_verdict(lo, hi, test.margin))


def shared_exponent_test(base: _Envelope, variant: _Envelope) -> SharedExponentTest:
    """F test of one shared Eq. 26 exponent (per-family offsets) against free exponents."""
    x = np.concatenate([base.x, variant.x])
    y = np.concatenate([base.y, variant.y])
    g = np.r_[np.zeros(base.x.size), np.ones(variant.x.size)]
    X0 = np.column_stack([1 - g, g, x])
    X1 = np.column_stack([1 - g, g, x * (1 - g), x * g])
    (c0, rss0), (_, rss1) = wls(X0, y), wls(X1, y)
    rss, shared = [float(rss0), float(rss1)], float(c0[2])
    df2 = x.size - 4
    if df2 < 1:
        return SharedExponentTest(math.nan, (1, df2), math.nan, base.alpha, variant.alpha, shared)
    F = (rss[0] - rss[1]) / (rss[1] / df2) if rss[1] > 0 else math.inf
    return SharedExponentTest(float(F), (1, df2), float(stats.f.sf(F, 1, df2)), base.alpha, variant.alpha, shared)


def _calibrated_halfwidth(forecasts: Mapping | None, method: str, alpha_v: float) -> float:
    """The calibrated log half-width of ln k at a target: the two families' calibration
    half-widths m of ln L* (``FamilyForecast.methods[...].model_sd``) in quadrature, divided by
    |alpha_L| of the variant (d ln C / d ln L along its frontier); 0 when not available."""
    if not forecasts or not (alpha_v < 0):
        return 0.0
    name = {"isoflop": "isoflop-powerlaw", "saturating": "isoflop-saturating", "joint": "joint"}[method]
    ms = [getattr(None if fc is None else fc.methods.get(name), "model_sd", math.nan) for fc in forecasts]
    return math.sqrt(sum(m * m for m in ms)) / abs(alpha_v) if all(map(math.isfinite, ms)) else 0.0


ASSUMES = {
    "isoflop": ("L*(C) of each family is a power law in C over the sweep and beyond (Eq. 26); slice optima "
                "independent across slices with one noise scale for both families, a shared slice's two residuals "
                "resampled together (paired by slice); k ~ C^slope exactly under these laws"),
    "saturating": ("L*(C) of each family is E + a C^alpha (E >= 0) over the sweep and beyond; slice optima "
                   "resampled as for isoflop about the fitted curves; the slope is the average d ln k / d ln C over "
                   "the sweep's range"),
    "joint": ("each family follows Eq. 27 at its compute-optimal allocation; runs resampled as clusters; the slope "
              "is the average d ln k / d ln C over the sweep's range"),
}


# ---- the fit ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Options:
    loss: str
    n_boot: int
    level: float
    seed: int
    window: int | None
    tolerance: float | None
    grid: str
    margin: float


@dataclass(frozen=True)
class _Reading:
    """One method's k: point ln k and its draws at the computes, the growth test, how its bootstrap
    pairs the families, its status, d ln L*/d ln C of the variant (at the sweep's end when not a
    power law), the variant's slice range, the F test (isoflop) and the held-out slice errors."""

    point: np.ndarray
    draws: np.ndarray
    test: GrowthTest
    how: str
    status: FitStatus
    alpha_v: float
    vrange: tuple
    f_test: SharedExponentTest | None
    loso: np.ndarray


def _grid_slope(method: str, log_k, sweep, o: _Options) -> GrowthTest:
    """The OLS slope of ln k on ln C over 8 computes spanning the sweep, for the point and each draw."""
    grid = np.linspace(math.log(sweep[0]), math.log(sweep[1]), 8)
    p_grid, d_grid = log_k(grid)
    xc = grid - grid.mean()
    slope = float(p_grid @ xc / (xc @ xc)) if np.isfinite(p_grid).all() else math.nan
    with np.errstate(invalid="ignore"):
        draws = np.where(np.isfinite(d_grid).all(axis=1), np.nan_to_num(d_grid, posinf=0.0) @ xc / (xc @ xc), np.nan)
    return growth_test(method, slope, draws, o.level, o.margin, ASSUMES[method])


def _loso_line(e: _Envelope) -> np.ndarray:
    keep = ~np.eye(e.x.size, dtype=bool)
    return np.array([e.y[i] - np.polyval(np.polyfit(e.x[k], e.y[k], 1), e.x[i]) for i, k in enumerate(keep)])


def _method_isoflop(envs, rows, lc, sweep, o: _Options, names, warnings) -> _Reading:
    eb, ev = envs
    db, dv = _paired_draws((eb, ev), o.n_boot, o.level, o.seed)
    point = _log_k_isoflop(np.array([[eb.log_a, eb.alpha]]), np.array([[ev.log_a, ev.alpha]]), lc)[0]
    draws = _log_k_isoflop(db, dv, lc)
    with np.errstate(divide="ignore", invalid="ignore"):
        slope_draws = np.where(dv[:, 1] < 0, db[:, 1] / dv[:, 1] - 1.0, np.nan)
    slope = eb.alpha / ev.alpha - 1.0 if ev.alpha < 0 else math.nan
    if not ev.alpha < 0:
        emit(warnings, f"isoflop: {names[1]}'s envelope does not decrease (alpha_L = {ev.alpha:.4g}); k undefined")
    test = growth_test("isoflop", slope, slope_draws, o.level, o.margin, ASSUMES["isoflop"])
    how = "residual bootstrap of the envelope lines, a shared slice's two residuals drawn together"
    return _Reading(point, draws, test, how, FitStatus(), ev.alpha, (ev.compute.min(), ev.compute.max()),
                    shared_exponent_test(eb, ev), np.r_[_loso_line(eb), _loso_line(ev)])


def _method_saturating(envs, rows, lc, sweep, o: _Options, names, warnings) -> _Reading:
    eb, ev = envs
    points = [saturating_fit(e.x, e.y[None, :]) for e in envs]
    R = [(e.y - saturating_log(p, e.x)[0]) * math.sqrt(e.x.size / max(e.x.size - 3, 1)) for e, p in zip(envs, points)]
    noise = _paired_noise([e.compute for e in envs], R, o.n_boot, o.level, o.seed, n_par=3)
    boot = [saturating_fit(e.x, saturating_log(p, e.x) + E) for e, p, E in zip(envs, points, noise)]
    point, draws = (_log_k_saturating(b, v, lc)[0] if i == 0 else _log_k_saturating(b, v, lc)
                    for i, (b, v) in enumerate(((points[0], points[1]), (boot[0], boot[1]))))
    test = _grid_slope("saturating", lambda g: (_log_k_saturating(*points, g)[0], _log_k_saturating(*boot, g)),
                       sweep, o)
    E_v, b0, b1 = points[1][0]
    c_end = math.log(ev.compute.max())
    power = math.exp(b0 + b1 * c_end)
    at_bound = [n for n, p, e in zip(names, points, envs) if p[0, 0] >= SATURATING_E_MAX * np.exp(e.y).min() * 0.999]
    status = FitStatus("flagged", f"E at its upper bound ({', '.join(at_bound)})") if at_bound else FitStatus()
    how = "residual bootstrap of the saturating envelopes (refitted), a shared slice's two residuals drawn together"
    return _Reading(point, draws, test, how, status, b1 * power / (E_v + power),
                    (ev.compute.min(), ev.compute.max()), None, np.r_[loso_saturating(eb), loso_saturating(ev)])


def _method_joint(envs, rows, lc, sweep, o: _Options, names, warnings) -> _Reading:
    rows_b, rows_v = rows
    fb, fv, how = _joint_fits(rows_b, rows_v, o, names, warnings)
    kb, kv = flops_per_token_per_param(rows_b), flops_per_token_per_param(rows_v)
    point, draws = _log_k_joint(fb, fv, kb, kv, lc)
    test = _grid_slope("joint", lambda g: _log_k_joint(fb, fv, kb, kv, g), sweep, o)
    grid = np.log(sweep[1]) + np.array([-0.1, 0.0])
    Lv = fv.predict_optimal(np.exp(grid), kv)
    alpha_v = float(np.diff(np.log(Lv))[0] / 0.1)
    bad = [f"{n}: {f.status.reason}" for n, f in zip(names, (fb, fv)) if not f.status.identified]
    status = FitStatus("flagged", "joint fit " + "; ".join(bad)) if bad else FitStatus()
    vrange = tuple(np.unique(rows_v["slice_flops"].to_numpy(float))[[0, -1]])
    loso = np.r_[[] if isinstance(envs, str) else np.concatenate([
        _loso_joint(r, f, k, e, o) for r, f, k, e in zip(rows, (fb, fv), (kb, kv), envs)])]
    return _Reading(point, draws, test, how, status, alpha_v, vrange, None, loso)


def _loso_joint(rows: pd.DataFrame, fit: ChinchillaFit, k: float, env: _Envelope, o: _Options) -> np.ndarray:
    """Held-out errors ln L*_i - ln L*_joint(C_i) of each used slice minimum, the joint fit refitted
    without that slice's runs (started from the full fit: one start, the same optimum's basin)."""
    out = []
    start = fit.theta  # a coefficient that underflowed to 0 (theta -inf) cannot start a refit: the grid does
    grid = start[None, :] if np.isfinite(start).all() else DEFAULT_GRID
    for c, y in zip(env.compute, env.y):
        keep = np.abs(np.log(rows["slice_flops"].to_numpy(float) / c)) > 1e-6
        try:
            with quiet():
                f = fit_chinchilla(rows["params"][keep], rows["tokens"][keep], rows[o.loss][keep],
                                   grid=grid, n_boot=0)
            out.append(y - math.log(float(f.predict_optimal(np.array([c]), k)[0])))
        except ValueError:
            out.append(math.nan)
    return np.array(out)


METHOD_FITS = {"isoflop": _method_isoflop, "saturating": _method_saturating, "joint": _method_joint}


# ---- the law-free reading and the choice of method ----------------------------------------------

EQUAL_FIT = 1.5  # methods scoring within this factor of the best "fit about equally well"
LAWFREE_MIN_FINITE = 0.8  # a law-free cell is kept when this share of its replicates could be read


@dataclass(frozen=True)
class MethodScore(_Record):
    """How well a method's frontier law fits (docs/multiplier.md): ``loso`` the RMS of its held-out
    errors of both families' slice minima (ln L*, each slice predicted by the law fitted without it);
    ``agreement`` |alpha_L,variant| x the RMS of ln k - ln k_lawfree over the in-sweep base slices
    (ln L* units: how far the variant's L* would move); ``score`` sqrt(loso^2 + agreement^2).
    ``eligible``: the method may answer (its fit identified, a finite score)."""

    method: str
    loso: float
    agreement: float
    score: float
    cells: int
    eligible: bool


def _lawfree(envs, lc: np.ndarray, o: _Options) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(point ln k, band lo, band hi) of the law-free reading at ``lc`` (nan where not valid)."""
    eb, ev = envs
    smooth = [smoother(e.x, e.y) for e in envs]
    n_par = 3 if min(eb.x.size, ev.x.size) >= 5 else 2
    noise = _paired_noise([e.compute for e in envs], [r for _, r in smooth], o.n_boot, o.level, o.seed + 1, n_par)
    point = lawfree_log_k(eb.x, eb.y, ev.x, ev.y, lc)[0]
    center = lawfree_log_k(eb.x, smooth[0][0], ev.x, smooth[1][0], lc)[0]
    draws = point + lawfree_log_k(eb.x, smooth[0][0] + noise[0], ev.x, smooth[1][0] + noise[1], lc) - center
    ok = np.isfinite(point) & (np.isfinite(draws).mean(axis=0) >= LAWFREE_MIN_FINITE)
    q = (1.0 - o.level) / 2.0
    with np.errstate(invalid="ignore"):
        lo, hi = np.nanquantile(np.where(ok, draws, 0.0), [q, 1 - q], axis=0)
    return np.where(ok, point, np.nan), np.where(ok, lo, np.nan), np.where(ok, hi, np.nan)


def _scores(readings: Mapping, lawfree_point: np.ndarray, cells: slice, alpha_v: float) -> dict:
    """method -> ``MethodScore`` (nan where a part cannot be measured: no usable slice minima, no law-free cell)."""
    out = {}
    for m, r in readings.items():
        e = r.loso[np.isfinite(r.loso)]
        loso = float(np.sqrt(np.mean(e**2))) if e.size else math.nan
        d = r.point[cells] - lawfree_point
        d = d[np.isfinite(d)]
        agree = abs(alpha_v) * float(np.sqrt(np.mean(d**2))) if d.size and math.isfinite(alpha_v) else math.nan
        score = math.hypot(loso, agree) if math.isfinite(agree) else loso
        out[m] = MethodScore(m, loso, agree, score, int(d.size), bool(r.status.identified and math.isfinite(score)))
    if not any(math.isfinite(v.score) for v in out.values()):  # no slice minima to score: an identified fit may answer
        out = {m: replace(v, eligible=readings[m].status.identified) for m, v in out.items()}
    return out


def _choose(readings: Mapping, scores: Mapping) -> tuple[str, tuple[str, ...], GrowthTest, str, str]:
    """(primary, the methods that fit about equally well, the primary's test with its slope interval
    widened to their slopes, the verdict, the reason). The eligible method with the best score
    answers; the methods within EQUAL_FIT of it fit about equally well (a flagged one too: its slope
    inside the sweep counts, its verdict does not); ``undetermined`` when two of them that may give a
    verdict reach different ones on their own intervals (growing, shrinking, constant: an undetermined
    one cannot tell); else the verdict of the primary's interval widened to their slopes."""
    ok = [m for m in readings if scores[m].eligible]
    pool = ok or [m for m in readings if math.isfinite(scores[m].score)] or list(readings)
    primary = min(pool, key=lambda m: scores[m].score if math.isfinite(scores[m].score) else math.inf)
    s = scores[primary]
    equal = tuple(m for m in readings if m == primary or scores[m].score <= EQUAL_FIT * s.score)
    others = ", ".join(f"{m} {scores[m].score:.3g}" for m in readings if m != primary)
    why = (f"{primary} answers: score {s.score:.3g} (held-out slice minima {s.loso:.3g}, law-free agreement "
           f"{s.agreement:.3g} over {s.cells} slices; lower is better" + (f"; {others}" if others else "") + ")"
           if math.isfinite(s.score) else f"{primary} answers: not scored (too few usable slice minima to hold out)")
    t = _with_spread(readings[primary].test, [readings[m].test.slope for m in equal if m != primary])
    if primary not in ok:
        return primary, equal, t, "undetermined", why + f"; no method's fit is identified ({readings[primary].status})"
    said = {m: readings[m].test.verdict for m in equal if m in ok}
    if len(set(said.values()) - {"undetermined"}) > 1:
        return primary, equal, t, "undetermined", (f"{why}; methods that fit about equally well disagree: "
                                                   + ", ".join(f"{m} {v}" for m, v in said.items()))
    spread = f" (spanning the slopes of {', '.join(m for m in equal if m != primary)})" if len(equal) > 1 else ""
    return primary, equal, t, t.verdict, (f"{why}; slope {t.slope:+.3g} [{t.slope_lo:+.3g}, {t.slope_hi:+.3g}]"
                                          f"{spread}: {t.verdict}")


def _outside(C: np.ndarray, bounds, tol: float) -> np.ndarray:
    """Computes outside [lo, hi] widened by the relative tolerance ``tol`` (nan: outside)."""
    with np.errstate(invalid="ignore"):
        return ~((C >= bounds[0] * (1 - tol)) & (C <= bounds[1] * (1 + tol)))


def _rows(method, C, point, lo, hi, extrapolated) -> list[dict]:
    return [dict(compute=float(c), k=float(np.exp(p)), lo=float(np.exp(a)), hi=float(np.exp(b)), method=method,
                 extrapolated=bool(e)) for c, p, a, b, e in zip(C, point, lo, hi, extrapolated)]


def _computes(rows_b: pd.DataFrame, computes, target_compute) -> tuple[np.ndarray, tuple[float, float]]:
    """The table's computes (the base's slices, or ``computes``, then the targets) and the sweep range."""
    slices = np.unique(rows_b["slice_flops"].to_numpy(float))
    sweep = (float(slices.min()), float(slices.max()))
    C = np.asarray(slices if computes is None else computes, float)
    targets = np.atleast_1d(np.asarray([] if target_compute is None else target_compute, float))
    C = np.unique(np.concatenate([C, targets]))
    if not (C > 0).all():
        raise UserError(f"fit_multiplier: computes must be positive, got {C[~(C > 0)][0]!r}")
    return C, sweep


def _band(r: "_Reading", cells: slice, level: float) -> tuple[np.ndarray, np.ndarray]:
    """A method's bootstrap band (ln k) at ``cells`` of its computes (the point where it has no draws)."""
    return _quantiles(r.draws[:, cells], level) if len(r.draws) else (r.point[cells], r.point[cells])


def _method_rows(method, readings, C, n, sweep, forecasts, tau, equal, level) -> list[dict]:
    """One method's rows at the table's computes C: its bootstrap band, at an extrapolated target widened to the
    calibrated forecast half-width where that is wider; then its model error against the law-free k in
    quadrature (``multiplier_lawfree.model_error``: the band covers what the law's own bootstrap does not explain
    of its disagreement with the data, at every compute); the primary's then spans the k of the methods that fit
    about equally well (``equal``; a flagged fit's inside the sweep only)."""
    r = readings[method]
    extrap = _outside(C, sweep, 1e-9) | _outside(np.exp(r.point[:n]) * C, r.vrange, SLICE_TOLERANCE)
    half = np.array([_calibrated_halfwidth((forecasts or {}).get(float(c)), method, r.alpha_v) if e else 0.0
                     for c, e in zip(C, extrap)])
    lo, hi = _band(r, slice(None, n), level)
    lo, hi = widen(r.point[:n], np.minimum(lo, r.point[:n] - half), np.maximum(hi, r.point[:n] + half), tau, level)
    for m in equal:  # the spread between methods that fit about equally well
        flagged = not readings[m].status.identified  # a flagged fit's k counts inside the sweep only
        other = np.where(extrap & flagged | ~np.isfinite(readings[m].point[:n]), np.nan, readings[m].point[:n])
        lo, hi = np.fmin(lo, other), np.fmax(hi, other)
    return _rows(method, C, r.point[:n], lo, hi, extrap)


def _readings(rows, envs, lc, sweep, o: _Options, methods, names, warnings) -> dict:
    """method -> ``_Reading`` for each method that could be fitted (the others skipped with a warning);
    ``envs``: both families' envelopes, or why they could not be made."""
    out = {}
    for method in methods:
        try:
            if isinstance(envs, str) and method != "joint":
                raise ValueError(envs)
            out[method] = METHOD_FITS[method](envs, rows, lc, sweep, o, names, warnings)
        except ValueError as exc:
            emit(warnings, f"{names[1]} vs {names[0]}: {method} multiplier skipped: {exc}")
    return out


def fit_multiplier(results: pd.DataFrame, base: str, variant: str, *, computes=None, target_compute=TARGETS,
                   methods: Sequence[str] = MULTIPLIER_METHODS, n_boot: int = MULTIPLIER_BOOT,
                   level: float = DEFAULT_LEVEL, seed: int = 0, loss: str = "loss",
                   estimator: str | None = None, annealed: bool | None = None, window: int | None = 5,
                   tolerance: float | None = SLICE_TOLERANCE, grid: str = DEFAULT_GRID,
                   margin: float = DEFAULT_MARGIN,
                   forecasts: Mapping[float, tuple] | None = None, options=None) -> MultiplierFit:
    """k(C) = C_variant(L*_base(C)) / C of two families of a results table (module doc).

    ``computes``: where k is evaluated (default: the base's slice targets); ``target_compute``: where
    it is extrapolated to; ``margin``: k is called constant when the slope's interval lies within
    +-margin; ``forecasts``: target compute -> (base, variant) ``FamilyForecast`` whose calibrated
    half-widths widen the band there (``family_forecasts``). Rows as in ``fit_families``. A method that
    cannot be fitted is left out with a warning; ValueError when none can."""
    n_boot, level, seed, grid, loss, window, tolerance = from_options(options, dict(
        n_boot=n_boot, level=level, seed=seed, grid=grid, loss=loss, window=window, tolerance=tolerance),
        fit_multiplier).values()
    unknown = [m for m in methods if m not in MULTIPLIER_METHODS]
    if unknown or not methods:
        raise UserError(f"fit_multiplier: methods must be among {MULTIPLIER_METHODS}, got {list(methods)}")
    if base == variant:
        raise UserError(f"fit_multiplier: base and variant are the same family ({base!r})")
    o = _Options(loss, int(n_boot), float(level), int(seed), window, tolerance, grid, float(margin))
    warnings: list[str] = []
    rows = tuple(_family_rows(results, f, loss=loss, estimator=estimator, annealed=annealed, warnings=warnings)
                 for f in (base, variant))
    C, sweep = _computes(rows[0], computes, target_compute)
    try:
        envs = tuple(_envelope(r, n, loss, window, tolerance) for r, n in zip(rows, (base, variant)))
    except ValueError as exc:
        envs = str(exc)
    n = C.size  # the table's computes, then the base's used slices (where the methods are scored)
    lc = np.log(C) if isinstance(envs, str) else np.r_[np.log(C), envs[0].x]
    readings = _readings(rows, envs, lc, sweep, o, methods, (base, variant), warnings)
    envs = None if isinstance(envs, str) else envs
    if not readings:
        raise UserError(f"fit_multiplier: no method could compare {variant!r} with {base!r}: " + "; ".join(warnings))
    lawfree = _lawfree(envs, lc, o) if envs is not None else (np.full(lc.size, np.nan),) * 3
    scores = _scores(readings, lawfree[0][n:], slice(n, None), envs[1].alpha if envs is not None else math.nan)
    primary, equal, primary_test, verdict, reason = _choose(readings, scores)
    tau = {m: model_error(r.point[n:], *_band(r, slice(n, None), level), lawfree[0][n:], level)
           for m, r in readings.items()}
    table = []
    for method, r in readings.items():
        table += _method_rows(method, readings, C, n, sweep, forecasts, tau[method],
                              equal if method == primary else (), level)
    keep = np.isfinite(lawfree[0][:n])
    table += _rows("lawfree", C[keep], *(v[:n][keep] for v in lawfree), np.zeros(keep.sum(), bool))
    growth = {m: r.test if r.status.identified or r.test.verdict == "undetermined"  # no verdict from a flagged fit
              else replace(r.test, verdict="undetermined") for m, r in readings.items()}
    if readings[primary].status.identified:
        growth[primary] = primary_test
    status = readings[primary].status
    if status.identified and verdict == "undetermined":
        status = FitStatus("flagged", f"verdict undetermined: {reason.split('; ', 1)[-1]}")
    return MultiplierFit(base=base, variant=variant, level=level, table=pd.DataFrame(table, columns=CSV_COLUMNS),
                         growth=growth, primary=primary, shared_exponent=next(
                             (r.f_test for r in readings.values() if r.f_test is not None), None),
                         paired={m: r.how for m, r in readings.items()},
                         statuses={m: r.status for m, r in readings.items()}, sweep_range=sweep, n_boot=o.n_boot,
                         warnings=tuple(warnings), status=status, scores=scores, equal=equal, decided=verdict,
                         reason=reason, model_error=tau)


def family_forecasts(results: pd.DataFrame, base: str, variant: str, targets, *, loss: str = "loss",
                     estimator: str | None = None, annealed: bool | None = None,
                     n_boot: int = N_BOOT["calibration"], seed: int = 0,
                     level: float = DEFAULT_LEVEL, options=None) -> dict:
    """target compute -> (base, variant) ``FamilyForecast`` (``forecast.forecast_family``; None where
    it cannot be made): the ``forecasts`` argument of ``fit_multiplier``."""
    n_boot, level, seed, loss = from_options(options, dict(n_boot=n_boot, level=level, seed=seed, loss=loss),
                                             family_forecasts).values()
    from .forecast import ForecastOptions, forecast_family

    warnings: list[str] = []
    rows = [_family_rows(results, f, loss=loss, estimator=estimator, annealed=annealed, warnings=warnings)
            for f in (base, variant)]
    out = {}
    for t in np.atleast_1d(np.asarray(targets, float)):
        pair = []
        for r in rows:
            o = ForecastOptions(loss=loss, n_boot=n_boot, level=level, seed=seed, k=flops_per_token_per_param(r))
            try:
                with quiet():
                    pair.append(forecast_family(r, float(t), options=o))
            except ValueError:
                pair.append(None)
        out[float(t)] = tuple(pair)
    return out


# ---- synthetic ground truth -----------------------------------------------------------------

DEMO_SLICES = (6.4e9, 1.28e10, 2.56e10, 5.12e10, 1.024e11)  # a sweep shaped like configs/demo.toml's (docs/multiplier.md)
SIM_LAW = dict(A_P=22.0, alpha=0.3, A_D=323.0, beta=0.3, L_inf=0.0)  # Eq. 27; D*/P* ~ 87, L* ~ 3 at 3e10


def planted_multiplier(compute, multiplier: float = 1.3, growth: float = 0.0, pivot: float | None = None):
    """The multiplier k(C) of ``simulate_pair``'s variant as defined here (C_variant(L*_base(C)) / C).

    The variant's loss at compute C is the base's at C / m(C), m(C) = multiplier (C / pivot)^growth,
    so it reaches L*_base(C) at C' with C' / m(C') = C: k(C) = m(C') solves
    ln k = (ln multiplier + growth ln(C / pivot)) / (1 - growth)."""
    C = np.asarray(compute, float)
    piv = float(np.sqrt(DEMO_SLICES[0] * DEMO_SLICES[-1])) if pivot is None else float(pivot)
    return np.exp((math.log(multiplier) + growth * np.log(C / piv)) / (1.0 - growth))


def simulate_pair(multiplier: float = 1.3, growth: float = 0.0, *, slices: Sequence[float] = DEMO_SLICES,
                  sizes_per_slice: int = 4, noise: float = 0.003, seed: int = 0, law: Mapping | None = None,
                  pivot: float | None = None, names: tuple[str, str] = ("base", "variant")) -> pd.DataFrame:
    """A results table of two families on an IsoFLOP sweep with a planted multiplier: the base follows
    Eq. 27 (``law``, default ``SIM_LAW``), the variant's loss at (P, D) is the base's at
    (P, D) / sqrt(m(C)), C = 6 P D, m(C) = multiplier (C / pivot)^growth (pivot: the sweep's geometric
    middle); ``sizes_per_slice`` sizes a factor 2 apart around each family's optimum (offset by a random
    half step), log-normal noise ``noise`` on every loss."""
    law = dict(SIM_LAW, **(law or {}))
    rng = np.random.default_rng(seed)
    piv = float(np.sqrt(slices[0] * slices[-1])) if pivot is None else float(pivot)
    a, b = law["alpha"], law["beta"]
    G = (a * law["A_P"] / (b * law["A_D"])) ** (1.0 / (a + b))
    rows = []
    for fam in names:
        for C in slices:
            m = 1.0 if fam == names[0] else multiplier * (C / piv) ** growth
            P_opt = math.sqrt(m) * G * (C / m / 6.0) ** (b / (a + b))
            u = rng.uniform(-0.5, 0.5)
            for j in range(sizes_per_slice):
                P = P_opt * 2.0 ** (j - (sizes_per_slice - 1) / 2 + u)
                D = C / (6.0 * P)
                Pb, Db = P / math.sqrt(m), D / math.sqrt(m)  # the variant's loss: the base's (Eq. 27) there
                L = law["L_inf"] + law["A_P"] / Pb**a + law["A_D"] / Db**b
                L *= math.exp(noise * rng.standard_normal())
                rows.append(dict(run_id=f"{fam}-{C:.3g}-{j}", family=fam, slice_flops=C, flops=C, params=P,
                                 tokens=D, loss=L, annealed=True))
    return pd.DataFrame(rows)
