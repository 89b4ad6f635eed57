"""The design's simulation (docs/design.md): the noise model, the planted truth, the grid ``plan``
makes of a preset, simulated sweeps of it analysed by the sweep's own fit functions, and their tally
for one grid (``assess``)."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from interpscale._markdown import band_decades
from interpscale.errors import UserError
from interpscale.orchestration import plan as plan_sweep
from interpscale.orchestration.config import Preset
from interpscale.scaling import fit_chinchilla, fit_isoflop, quiet
from interpscale.scaling.multiplier import VERDICTS, fit_multiplier, planted_multiplier
from interpscale.scaling.tables import SLICE_TOLERANCE, fit_rows, slice_rows

log = logging.getLogger(__name__)

QUESTIONS = ("multiplier", "exponent", "forecast")
DESIGN_BOOT = 100  # bootstrap replicates inside each simulated analysis (docs/design.md: effect measured)
DEFAULT_SIMS = 200
WINDOW = 5  # sizes per slice parabola, as fit_isoflop's default window
DEFAULT_LAW = dict(A_P=22.0, alpha=0.3, A_D=323.0, beta=0.3, L_inf=0.0)  # scaling.multiplier.SIM_LAW's shape


@dataclass(frozen=True)
class NoiseModel:
    """Log-scale noise: ``run_sd`` of one run's loss about its slice's curve, ``slice_sd`` of a shock
    shared by every run of one (family, slice); ``*_ci`` their intervals at ``level``, ``df_*`` the
    degrees of freedom they rest on; ``source``: "pilot" or "stated"."""

    run_sd: float
    slice_sd: float = 0.0
    run_ci: tuple[float, float] = (math.nan, math.nan)
    slice_ci: tuple[float, float] = (math.nan, math.nan)
    df_run: int = 0
    df_slice: int = 0
    level: float = 0.9
    source: str = "stated"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.run_sd) and self.run_sd >= 0 and math.isfinite(self.slice_sd)
                and self.slice_sd >= 0):
            raise UserError(f"noise: standard deviations must be finite and >= 0, got run {self.run_sd}, "
                            f"slice {self.slice_sd}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _sd_interval(ss: float, df: int, level: float) -> tuple[float, float]:
    if df < 1:
        return (math.nan, math.nan)
    a = (1 - level) / 2
    return (math.sqrt(ss / stats.chi2.ppf(1 - a, df)), math.sqrt(ss / stats.chi2.ppf(a, df)))


def _slice_parabola(lP: np.ndarray, lL: np.ndarray):
    """Least-squares parabola of ln L in ln P (Eq. 25 on the log scale): residual sum of squares,
    its degrees of freedom, the vertex value and that value's variance per unit noise variance."""
    X = np.column_stack([np.ones_like(lP), lP, lP**2])
    coef, *_ = np.linalg.lstsq(X, lL, rcond=None)
    resid = lL - X @ coef
    xv = lP[np.argmin(lL)] if coef[2] <= 0 else float(np.clip(-coef[1] / (2 * coef[2]), lP.min(), lP.max()))
    x0 = np.array([1.0, xv, xv**2])
    lev = float(x0 @ np.linalg.pinv(X.T @ X) @ x0)
    return float(resid @ resid), len(lP) - 3, float(x0 @ coef), lev


def noise_from_pilot(results: pd.DataFrame, *, loss: str = "loss", level: float = 0.9,
                     tolerance: float | None = SLICE_TOLERANCE) -> NoiseModel:
    """The noise model of a pilot table: run noise pooled over every slice's parabola residuals
    (slices with >= 4 sizes; the 5 about each minimum, where Eq. 25 holds), the slice shock from each family's slice minima about their
    envelope line (Eq. 26, ln L* on ln C) less what run noise puts into a fitted minimum. Rows as
    the fits select them (``fit_rows``: one estimator, stable or annealed)."""
    ss_run = ss_env = lev_sum = 0.0
    df_run = df_env = n_lev = 0
    for fam in sorted(results["family"].astype(str).unique()):
        with quiet():
            rows = slice_rows(fit_rows(results, family=fam, loss=loss), tolerance)
        minima = []
        for c, g in rows.groupby("slice_flops"):
            g = g.groupby("params", as_index=False)[loss].mean()
            if len(g) < 4:
                continue
            i = int(np.argmin(g[loss].to_numpy()))  # the window fit_isoflop fits (5 sizes about the minimum):
            lo = min(max(i - WINDOW // 2, 0), max(len(g) - WINDOW, 0))  # far sizes leave the parabola
            g = g.iloc[lo:lo + WINDOW]
            ss, df, vertex, lev = _slice_parabola(np.log(g["params"].to_numpy(float)),
                                                 np.log(g[loss].to_numpy(float)))
            ss_run, df_run = ss_run + ss, df_run + df
            minima.append((math.log(float(c)), vertex))
            lev_sum, n_lev = lev_sum + lev, n_lev + 1
        if len(minima) >= 3:
            x, y = np.array(minima).T
            resid = y - np.polyval(np.polyfit(x, y, 1), x)
            ss_env, df_env = ss_env + float(resid @ resid), df_env + len(x) - 2
    if df_run < 1:
        raise UserError("pilot: no slice has 4 or more sizes, so run noise cannot be measured; "
                        "state it with --noise")
    run_var = ss_run / df_run
    mean_lev = lev_sum / max(n_lev, 1)
    slice_var = max(ss_env / df_env - mean_lev * run_var, 0.0) if df_env else 0.0
    s_lo, s_hi = _sd_interval(ss_env, df_env, level) if df_env else (math.nan, math.nan)
    slice_ci = tuple(math.sqrt(max(v * v - mean_lev * run_var, 0.0)) if math.isfinite(v) else v for v in (s_lo, s_hi))
    return NoiseModel(run_sd=math.sqrt(run_var), slice_sd=math.sqrt(slice_var),
                      run_ci=_sd_interval(ss_run, df_run, level), slice_ci=slice_ci, df_run=df_run,
                      df_slice=df_env, level=level, source="pilot")


# ---- the truth ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Truth:
    """The planted world: the base family's law and the variant's multiplier k0 (C / pivot)^growth,
    applied as in ``simulate_pair`` (the variant at (P, D) on slice C is the base at (P, D) / sqrt(m),
    compute C / m). ``kind`` "joint": Eq. 27 (``law``: A_P, alpha, A_D, beta, L_inf); "isoflop": the
    IsoFLOP world of Eqs. 25-26 (``law``: a_P, alpha_P, a_L, alpha_L, curvature), L(P, C) = a_L
    C^alpha_L + curvature (ln P - ln(a_P C^alpha_P))^2."""

    law: Mapping[str, float]
    multiplier: float = 1.3
    growth: float = 0.0
    pivot: float = math.nan
    kind: str = "joint"
    source: str = "stated"
    note: str = ""

    def with_growth(self, growth: float) -> "Truth":
        return dataclasses.replace(self, growth=float(growth))

    def pivoted(self, slices: Sequence[float]) -> "Truth":
        """k0 planted at the geometric middle of ``slices`` unless a pivot was given."""
        return self if math.isfinite(self.pivot) else dataclasses.replace(
            self, pivot=float(np.sqrt(slices[0] * slices[-1])))

    def loss(self, P: np.ndarray, D: np.ndarray, C: np.ndarray, variant: bool) -> np.ndarray:
        """Noise-free loss of the base (or the variant) at (P, D) on slice C."""
        lw = self.law
        m = self.multiplier * (C / self.pivot) ** self.growth if variant else np.ones_like(C)
        Pb, Db, Cb = P / np.sqrt(m), D / np.sqrt(m), C / m
        if self.kind == "isoflop":
            p_star = lw["a_P"] * Cb ** lw["alpha_P"]
            return lw["a_L"] * Cb ** lw["alpha_L"] + lw["curvature"] * np.log(Pb / p_star) ** 2
        return lw["L_inf"] + lw["A_P"] / Pb ** lw["alpha"] + lw["A_D"] / Db ** lw["beta"]

    def k(self, compute) -> np.ndarray:
        return planted_multiplier(compute, self.multiplier, self.growth, self.pivot)

    def optimal_loss(self, compute: float) -> float:
        lw, C = self.law, float(compute)
        if self.kind == "isoflop":
            return float(lw["a_L"] * C ** lw["alpha_L"])
        a, b = lw["alpha"], lw["beta"]
        G = (a * lw["A_P"] / (b * lw["A_D"])) ** (1 / (a + b))
        P = G * (C / 6) ** (b / (a + b))
        return float(self.loss(np.array([P]), np.array([C / (6 * P)]), np.array([C]), False)[0])

    def to_dict(self) -> dict:
        return dict(kind=self.kind, law=dict(self.law), multiplier=self.multiplier, growth=self.growth,
                    pivot=self.pivot, source=self.source, note=self.note)


def truth_from_pilot(results: pd.DataFrame, base: str, variant: str | None = None, *, loss: str = "loss",
                     multiplier: float | None = None) -> Truth:
    """The planted world measured on a pilot: the base family's joint fit (Eq. 27) when it is
    identified, else its IsoFLOP world (Eqs. 25-26: the envelopes and the slices' mean curvature),
    which a pilot of a few slices pins down where Eq. 27 does not. k0, unless given: the pilot's
    multiplier at its middle budget read off the two families' envelopes (inside the pilot's range)."""
    with quiet():
        rows = fit_rows(results, family=base, loss=loss)
        joint = fit_chinchilla(rows["params"], rows["tokens"], rows[loss], n_boot=0, grid="coarse")
        try:
            iso = fit_isoflop(rows, loss=loss, n_boot=0)
        except ValueError as exc:  # fewer than 2 usable slices: Eq. 27 is all the pilot gives
            iso, why = None, str(exc)
    if joint.status.identified or iso is None:
        kind, note = "joint", f"{base}'s joint fit (Eq. 27) on the pilot ({joint.status})"
        if iso is None:
            note += f"; its IsoFLOP envelopes could not be fitted ({why})"
        law = dict(A_P=joint.A_P, alpha=joint.alpha, A_D=joint.A_D, beta=joint.beta, L_inf=joint.L_inf)
    else:
        used = iso.slices[iso.slices["used"]]
        kind = "isoflop"
        law = dict(a_P=iso.a_P, alpha_P=iso.alpha_P, a_L=iso.a_L, alpha_L=iso.alpha_L,
                   curvature=float(used["curvature"].mean()))
        note = f"{base}'s IsoFLOP envelopes on the pilot (its joint fit is {joint.status})"
    if multiplier is None and variant is not None and iso is not None:
        try:
            with quiet():
                iso_v = fit_isoflop(fit_rows(results, family=variant, loss=loss), loss=loss, n_boot=0)
            cs = iso.slices.loc[iso.slices["used"], "compute"].to_numpy(float)
            mid = float(np.sqrt(cs.min() * cs.max()))
            multiplier = float((iso.a_L * mid ** iso.alpha_L / iso_v.a_L) ** (1 / iso_v.alpha_L) / mid)
            note += f"; k0 = {multiplier:.3g}: {variant} against {base} at {mid:.3g} FLOPs on the pilot"
        except (ValueError, ZeroDivisionError) as exc:
            note += f"; k0 not measurable on the pilot ({exc})"
    ok = multiplier is not None and math.isfinite(multiplier) and multiplier > 0
    if not ok and variant is not None:
        note += "; k0 = 1.3 (stated default: the pilot cannot measure it)"
    return Truth(law=law, multiplier=float(multiplier) if ok else 1.3, kind=kind, source="pilot", note=note)


DEMO_WORLD = dict(alpha_L=-0.2, L_mid=3.0, curvature=0.05)  # the demo's scale: alpha_L ~ -0.2 (docs/multiplier.md)


def truth_for_grid(grid: "Grid", base: str, *, multiplier: float = 1.3, world: Mapping | None = None) -> Truth:
    """A stated IsoFLOP world centred on ``grid``: P*(C) through the geometric middle of the sizes
    ``plan`` chose for ``base`` on each slice (the optimum the grid was built to bracket), L*(C) with
    exponent ``alpha_L`` through ``L_mid`` at the middle budget, slice ``curvature`` (``DEMO_WORLD``)."""
    w = dict(DEMO_WORLD, **(world or {}))
    pts = grid.points[grid.points["family"] == base]
    if pts.empty:
        raise UserError(f"design: the grid has no runs of family {base!r}")
    mid_P = pts.groupby("slice_flops")["params"].apply(lambda p: float(np.exp(np.log(p).mean())))
    x, y = np.log(mid_P.index.to_numpy(float)), np.log(mid_P.to_numpy(float))
    alpha_P, log_a = np.polyfit(x, y, 1) if len(x) > 1 else (0.5, y[0] - 0.5 * x[0])
    mid = float(np.sqrt(grid.slices[0] * grid.slices[-1]))
    law = dict(a_P=float(np.exp(log_a)), alpha_P=float(alpha_P), a_L=w["L_mid"] / mid ** w["alpha_L"],
               alpha_L=w["alpha_L"], curvature=w["curvature"])
    return Truth(law=law, multiplier=multiplier, kind="isoflop", source="stated",
                 note=f"IsoFLOP world centred on the planned sizes (alpha_L {w['alpha_L']:g}, L* {w['L_mid']:g} "
                      f"at {mid:.3g} FLOPs, curvature {w['curvature']:g})")


# ---- the grid -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Grid:
    """A grid as ``plan`` would run it: ``points`` (family, slice_flops, params, tokens, flops) of
    the ``families`` simulated, ``compute`` the whole sweep's FLOPs (every family of the preset),
    ``wall_s`` the plan's runtime estimate, ``slices`` and ``sizes_per_slice`` what was asked,
    ``sizes`` the size ladder ``plan`` chose from (the preset's, unless the grid was planned with more)."""

    slices: tuple[float, ...]
    sizes_per_slice: int
    points: pd.DataFrame = field(compare=False, repr=False)
    compute: float = math.nan
    wall_s: float = math.nan
    n_runs: int = 0
    label: str = ""
    sizes: tuple[str, ...] = ()

    def describe(self) -> str:
        return (f"{len(self.slices)} slices x <= {self.sizes_per_slice} sizes, {self.slices[0]:.3g}-"
                f"{self.slices[-1]:.3g} FLOPs, {self.n_runs} runs, {self.compute:.3g} FLOPs")


def nested(grid: Grid, other: Grid) -> bool:
    """Whether ``grid`` asks no more than ``other``: no more slices, all within ``other``'s range, and no
    more sizes per slice. Such a grid has less information on every question the design asks, so when
    ``other`` falls short of a target the search does not simulate it."""
    return (len(grid.slices) <= len(other.slices) and grid.sizes_per_slice <= other.sizes_per_slice
            and grid.slices[0] >= other.slices[0] * (1 - 1e-9) and grid.slices[-1] <= other.slices[-1] * (1 + 1e-9))


def grid_from_plan(preset, *, slices: Sequence[float] | None = None, sizes_per_slice: int | None = None,
                   label: str = "", sizes: Sequence[str] | None = None) -> Grid:
    """The grid ``plan`` makes of ``preset`` (a name, path or loaded tree) with its ``[plan]`` slices
    (shared by every family), ``max_sizes_per_slice`` and size ladder ``sizes`` replaced where given;
    the grid's ``sizes`` keep of an extended ladder the preset's own and the sizes the plan used."""
    tree = Preset.load(preset)
    fams, own = list(tree.plan.families), list(tree.plan.sizes)
    tree = Preset.load(tree, slices=None if slices is None else {f: [float(c) for c in slices] for f in fams},
                       max_sizes_per_slice=None if sizes_per_slice is None else int(sizes_per_slice),
                       sizes=None if sizes is None else list(sizes))
    with quiet():
        planned = plan_sweep(tree)
    used = {r.size for r in planned.runs}
    pts = pd.DataFrame([dict(family=r.family, slice_flops=float(r.slice_flops), params=float(r.params),
                             tokens=float(r.tokens), flops=float(r.flops)) for r in planned.runs])
    got = tuple(sorted(pts["slice_flops"].unique()))
    return Grid(slices=got, sizes_per_slice=int(tree.plan.max_sizes_per_slice or pts.groupby(
        ["family", "slice_flops"]).size().max()), points=pts, compute=float(pts["flops"].sum()),
        wall_s=float(planned.estimate.get("wall_s", math.nan)), n_runs=len(pts), label=label,
        sizes=tuple(z for z in tree.plan.sizes if z in own or z in used))


# ---- one simulated sweep and its analysis ---------------------------------------------------

def simulate(grid: Grid, truth: Truth, noise: NoiseModel, base: str, variant: str | None, seed: int) -> pd.DataFrame:
    """One results table of ``grid``'s ``base`` (and ``variant``) runs drawn from ``truth`` with
    ``noise``: log-normal run noise and one log-normal shock per (family, slice)."""
    rng = np.random.default_rng(seed)
    frames = []
    for fam, is_variant in ((base, False), (variant, True)):
        if fam is None:
            continue
        pts = grid.points[grid.points["family"] == fam]
        if pts.empty:
            raise UserError(f"design: the grid has no runs of family {fam!r}")
        C = pts["slice_flops"].to_numpy(float)
        L = truth.loss(pts["params"].to_numpy(float), pts["tokens"].to_numpy(float), C, is_variant)
        _, inv = np.unique(C, return_inverse=True)
        shock = rng.standard_normal(inv.max() + 1) * noise.slice_sd
        L = L * np.exp(noise.run_sd * rng.standard_normal(len(L)) + shock[inv])
        frames.append(pts.assign(loss=L, run_id=[f"{fam}-{i}" for i in range(len(pts))], annealed=True))
    return pd.concat(frames, ignore_index=True)


@dataclass(frozen=True)
class SimJob:
    """One simulated analysis' inputs: the grid, the planted truth and noise, what to analyse."""

    grid: Grid
    truth: Truth
    noise: NoiseModel
    question: str
    base: str
    variant: str | None
    target: float
    n_boot: int
    level: float
    starts: np.ndarray | None = field(default=None, compare=False)  # joint-fit starts (``joint_starts``)


def joint_starts(grid: Grid, truths: Sequence[Truth], noise: NoiseModel, families: Sequence[str],
                 seed: int = 0) -> np.ndarray | None:
    """Starts for every simulated joint fit (Eq. 27) of one assessment: the end points of the full
    multistart (the report's ``grid="coarse"``, 243 starts) on a noise-free and one noisy table of each
    truth and family. The multistart over 243 starts was 70% of a simulated analysis; from these few
    starts the fits land in the same minima (docs/design.md, "Speed": the verdict probabilities
    with and without, measured). None when no fit converged (the simulations then use the grid)."""
    thetas = []
    for i, truth in enumerate(truths):
        for j, nm in enumerate((NoiseModel(run_sd=0.0), noise)):
            df = simulate(grid, truth, nm, families[0], families[1] if len(families) > 1 else None,
                          seed=987_654_321 + 7 * int(seed) + 2 * i + j)  # draws apart from the simulations'
            for fam in families:
                rows = df[df["family"] == fam]
                try:
                    with quiet():
                        fit = fit_chinchilla(rows["params"], rows["tokens"], rows["loss"], n_boot=0, grid="coarse")
                except ValueError:
                    continue
                if np.isfinite(fit.theta).all():
                    thetas.append(fit.theta)
    return np.unique(np.round(np.array(thetas), 9), axis=0) if thetas else None


def _band_decades(lo: float, hi: float) -> float:
    """Decades a positive band spans: the report's one rule (``_markdown.band_decades``, inf when the
    band is unbounded or collapsed to 0 at either end; a simulated band of [0, 0] had stopped a whole
    design with a math domain error), except that a band not computed (NaN) counts here as unbounded
    too: a simulated sweep without one has told nothing about k."""
    width = band_decades(lo, hi)
    return math.inf if math.isnan(width) else width


def analyse_once(job: SimJob, seed: int) -> dict:
    """The sweep's own analysis of one simulated table, reduced to what the design tallies."""
    df = simulate(job.grid, job.truth, job.noise, job.base, job.variant, seed)
    mid = float(np.sqrt(job.grid.slices[0] * job.grid.slices[-1]))
    # the bracketing share first: a failed analysis still has its grid's (all-failed tallies had no column)
    out: dict = dict(seed=seed, bracketed_slices=_bracketed(df, job.base))
    with quiet():
        if job.question == "multiplier":
            try:  # a table the analysis cannot read is a failed sweep, counted as such
                mf = fit_multiplier(df, job.base, job.variant, n_boot=job.n_boot, level=job.level, seed=seed,
                                    computes=[mid], target_compute=(job.target,), grid=_starts(job))
                r_mid, r_t = mf.at(mid), mf.at(job.target)
            except (ValueError, ArithmeticError) as exc:
                return dict(out, verdict="failed", error=str(exc))
            k_mid = float(job.truth.k(mid))
            out.update(verdict=mf.verdict, method=mf.primary, k_mid=r_mid["k"],
                       k_decades_mid=_band_decades(r_mid["lo"], r_mid["hi"]),
                       k_cover_mid=bool(r_mid["lo"] <= k_mid <= r_mid["hi"]),
                       k_decades_target=_band_decades(r_t["lo"], r_t["hi"]))
        else:
            rows = df[df["family"] == job.base]
            try:  # as above: a sweep whose IsoFLOP fit cannot be made has no interval (an unbounded one)
                iso = fit_isoflop(rows, n_boot=job.n_boot, level=job.level, seed=seed)
            except (ValueError, ArithmeticError) as exc:
                return dict(out, status="failed", alpha_P_halfwidth=math.inf, error=str(exc))
            lo, hi = iso.ci.get("alpha_P", (math.nan, math.nan))
            if int(iso.slices["used"].sum()) < 3 or not hi - lo > 1e-9:  # a line through two slice optima
                lo, hi = -math.inf, math.inf  # (or optima pinned to the same sizes) has no residual: a bootstrap
                # interval of zero width is not a measured one
            out.update(alpha_P=iso.alpha_P, alpha_P_halfwidth=(hi - lo) / 2, status=iso.status.state,
                       bracketed=float(iso.slices["used"].mean()))
            if job.question == "forecast":
                ch = fit_chinchilla(rows["params"], rows["tokens"], rows["loss"], n_boot=0, grid=_starts(job))
                pred = float(np.asarray(ch.predict_optimal(job.target)).ravel()[0])
                out.update(forecast_error=pred / job.truth.optimal_loss(job.target) - 1)
    return out


def _starts(job: SimJob):
    return "coarse" if job.starts is None else job.starts  # "coarse": fit_multiplier's DEFAULT_GRID


def _bracketed(df: pd.DataFrame, family: str) -> float:
    """Share of ``family``'s slices whose lowest loss is not at its smallest or largest size."""
    ok = []
    for _, g in df[df["family"] == family].groupby("slice_flops"):
        i = int(np.argmin(g["loss"].to_numpy()))
        ok.append(0 < i < len(g) - 1 if len(g) >= 3 else False)
    return float(np.mean(ok)) if ok else math.nan


def run_many(job: SimJob, seeds: Sequence[int], workers: int,
             progress: Callable[[int, int], None] | None = None) -> list[dict]:
    """``analyse_once`` of ``job`` at each seed, in ``workers`` processes (in order)."""
    out: list[dict] = []
    if not seeds:
        return out
    if workers <= 1:
        for s in seeds:
            out.append(analyse_once(job, s))
            if progress:
                progress(len(out), len(seeds))
        return out
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for r in pool.map(analyse_once, [job] * len(seeds), seeds, chunksize=max(1, len(seeds) // (4 * workers))):
            out.append(r)
            if progress:
                progress(len(out), len(seeds))
    return out


# ---- the design's answer for one grid -------------------------------------------------------

@dataclass(frozen=True)
class GridPower:
    """What ``n_sims`` simulated sweeps of one grid gave: per scenario ("constant", "growing" for
    the multiplier question; "truth" otherwise) the probability of each verdict and the mean
    interval widths; ``power`` / ``false_alarm`` for the multiplier question."""

    grid: Grid
    question: str
    n_sims: int
    scenarios: dict
    seconds: float = 0.0
    # each scenario's analyses by seed, and the joint-fit starts: a confirmation with more simulations
    # adds to a screen's instead of repeating them (``assess(..., more_of=...)``)
    analyses: dict = field(default_factory=dict, compare=False, repr=False)
    starts: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def power(self) -> float:
        s = self.scenarios.get("growing")
        return s["p_verdict"].get("growing", 0.0) if s else math.nan

    @property
    def false_alarm(self) -> float:
        s = self.scenarios.get("constant")
        return (s["p_verdict"].get("growing", 0.0) + s["p_verdict"].get("shrinking", 0.0)) if s else math.nan

    @property
    def alpha_P_halfwidth(self) -> float:
        s = self.scenarios.get("truth", {})
        return s.get("alpha_P_halfwidth", math.nan)

    def to_dict(self) -> dict:
        return dict(grid=dict(slices=list(self.grid.slices), sizes_per_slice=self.grid.sizes_per_slice,
                              n_runs=self.grid.n_runs, compute=self.grid.compute, wall_s=self.grid.wall_s,
                              label=self.grid.label, sizes=list(self.grid.sizes)),
                    question=self.question, n_sims=self.n_sims, scenarios=self.scenarios, power=self.power,
                    false_alarm=self.false_alarm, alpha_P_halfwidth=self.alpha_P_halfwidth, seconds=self.seconds)


def _tally(rows: list[dict], question: str) -> dict:
    df = pd.DataFrame(rows)
    out: dict = dict(n=len(df), bracketed_slices=float(df["bracketed_slices"].mean()))
    if question == "multiplier":
        # a failed analysis has a verdict and no band: columns no row had (every one failed) are empty
        needed = ("method", "k_decades_mid", "k_cover_mid", "k_decades_target")
        df = df.reindex(columns=list(dict.fromkeys([*df, *needed])))
        counts = df["verdict"].value_counts(normalize=True)
        out["p_verdict"] = {v: float(counts.get(v, 0.0)) for v in (*VERDICTS, "failed")}
        out["methods"] = {str(k): float(v) for k, v in df["method"].dropna().value_counts(normalize=True).items()}
        fin = df["k_decades_mid"].replace(np.inf, np.nan)
        out.update(k_decades_mid=float(fin.median()), k_cover_mid=float(df["k_cover_mid"].mean()),
                   k_decades_target=float(df["k_decades_target"].replace(np.inf, np.nan).median()),
                   k_unbounded_target=float(np.isinf(df["k_decades_target"]).mean()))
    else:
        out.update(alpha_P_halfwidth=float(df["alpha_P_halfwidth"].median()),
                   p_identified=float((df["status"] == "identified").mean()))
        if "forecast_error" in df:
            out["forecast_abs_error"] = float(df["forecast_error"].abs().median())
    return out


def assess(grid: Grid, truth: Truth, noise: NoiseModel, *, question: str = "multiplier", base: str,
           variant: str | None = None, growth: float = 0.05, target: float = 1e20, n_sims: int = DEFAULT_SIMS,
           n_boot: int = DESIGN_BOOT, level: float = 0.9, seed: int = 0, workers: int | None = None,
           progress: Callable[[str, int, int], None] | None = None, warm: bool = True,
           more_of: GridPower | None = None) -> GridPower:
    """Simulate ``n_sims`` sweeps of ``grid`` per scenario and tally the analysis' answers; ``warm``:
    the joint fits start from ``joint_starts`` (else from the full 243-start grid, the report's).
    ``more_of``: an earlier assessment of the same grid, truth, noise and seed with fewer simulations
    (a screen); its analyses are the first of these (the same seeds) and are not repeated."""
    workers = workers or min(os.cpu_count() or 1, 4)
    jobs = scenario_jobs(grid, truth, noise, question=question, base=base, variant=variant, growth=growth,
                         target=target, n_boot=n_boot, level=level, seed=seed, warm=warm and more_of is None,
                         starts=more_of.starts if more_of is not None else None)
    t0, out, done = time.monotonic(), {}, {}
    for i, (name, job) in enumerate(jobs.items()):
        seeds = scenario_seeds(seed, i, n_sims)
        have = more_of.analyses.get(name, {}) if more_of is not None else {}
        cb = (lambda d, n, name=name: progress(name, d, n)) if progress else None
        new = run_many(job, [s for s in seeds if s not in have], workers, cb)
        done[name] = {**have, **{r["seed"]: r for r in new}}
        out[name] = _tally([done[name][s] for s in seeds], question)
    starts = next(iter(jobs.values())).starts
    return GridPower(grid=grid, question=question, n_sims=n_sims, scenarios=out, seconds=time.monotonic() - t0,
                     analyses=done, starts=starts)


def scenario_jobs(grid: Grid, truth: Truth, noise: NoiseModel, *, question: str = "multiplier", base: str,
                  variant: str | None = None, growth: float = 0.05, target: float = 1e20, n_boot: int = DESIGN_BOOT,
                  level: float = 0.9, seed: int = 0, warm: bool = True,
                  starts: np.ndarray | None = None) -> dict[str, SimJob]:
    """Per scenario of ``question`` ("constant" and "growing" k for the multiplier, else "truth") the
    job whose simulations ``assess`` tallies; scenario i's seeds are ``scenario_seeds(seed, i, n)``.
    ``warm``: the joint fits start from ``joint_starts`` of every scenario (else from ``starts``,
    else from the full 243-start grid, the report's)."""
    if question not in QUESTIONS:
        raise UserError(f"design: question must be one of {QUESTIONS}, got {question!r}")
    if question == "multiplier" and not variant:
        raise UserError("design: the multiplier question needs a variant family")
    truth = truth.pivoted(grid.slices)
    scen = {"constant": truth.with_growth(0.0), "growing": truth.with_growth(growth)} if question == "multiplier" \
        else {"truth": truth}
    fams = (base, variant) if question == "multiplier" else (base,)
    if warm and question != "exponent":
        starts = joint_starts(grid, list(scen.values()), noise, fams, seed)
    return {name: SimJob(grid, tr, noise, question, base, variant if question == "multiplier" else None,
                         float(target), int(n_boot), float(level), starts) for name, tr in scen.items()}


def scenario_seeds(seed: int, i: int, n: int) -> list[int]:
    """The first ``n`` simulation seeds of scenario ``i``: a screen's are the first of its confirmation's."""
    return [int(seed) * 1_000_003 + i * 100_003 + s for s in range(n)]


def meets(gp: GridPower, *, power: float = 0.8, false_alarm: float = 0.10, halfwidth: float = 0.05) -> bool:
    """Whether a grid meets the target of its question."""
    if gp.question == "multiplier":
        return gp.power >= power and gp.false_alarm <= false_alarm
    return gp.alpha_P_halfwidth <= halfwidth


