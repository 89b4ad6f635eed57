"""Design a sweep before spending its compute (issue 44; docs/design.md): the chance that a planned
IsoFLOP grid answers its question, by simulation, and the cheapest grid that would.

A design is three things and one loop:

- a **noise model** (``NoiseModel``): per-run log-loss noise about each slice's curve and a shared
  shock per (family, slice), both with intervals, read off a pilot results table
  (``noise_from_pilot``) or stated;
- a **truth** to plant (``Truth``): the base family's joint law (Eq. 27, fitted to the pilot or
  stated) and, for the multiplier question, the variant made from it with a planted k(C) =
  k0 (C / pivot)^g as ``scaling.multiplier.simulate_pair`` does (constant k: g = 0; growing: g > 0);
- a **grid** (``Grid``): the runs ``plan`` would train for a preset (its sizes, slices, pricing,
  plugin and ``hf:`` families included) — the design never places a point ``plan`` would not;
- ``simulate``: tables of that grid drawn from the truth with that noise, each analysed by the
  same fit functions the sweep's own analysis runs (``fit_multiplier`` with its method choice,
  ``fit_isoflop``, ``fit_chinchilla``), tallied into verdict probabilities and interval widths.

``search`` walks candidate grids (number, spacing and range of slices, sizes per slice) in order of
compute and returns the cheapest that meets a target; ``write_preset`` writes it as a TOML preset
that ``plan`` and ``sweep launch`` accept unchanged. Simulations run in worker processes.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from interpscale._markdown import band_decades
from interpscale._toml import dumps as toml_dumps
from interpscale.errors import UserError
from interpscale.orchestration import plan as plan_sweep
from interpscale.orchestration.config import Preset, load_preset
from interpscale.scaling import Analysis, fit_chinchilla, fit_isoflop, quiet
from interpscale.scaling.multiplier import VERDICTS, fit_multiplier, planted_multiplier
from interpscale.scaling.tables import SLICE_TOLERANCE, fit_rows, slice_rows

log = logging.getLogger(__name__)

QUESTIONS = ("multiplier", "exponent", "forecast")
DESIGN_BOOT = 100  # bootstrap replicates inside each simulated analysis (docs/design.md: effect measured)
DEFAULT_SIMS = 200
WINDOW = 5  # sizes per slice parabola, as fit_isoflop's default window
DEFAULT_LAW = dict(A_P=22.0, alpha=0.3, A_D=323.0, beta=0.3, L_inf=0.0)  # scaling.multiplier.SIM_LAW's shape


# ---- the noise model ------------------------------------------------------------------------

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
            raise ValueError(f"noise: standard deviations must be finite and >= 0, got run {self.run_sd}, "
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
        raise ValueError(f"design: the grid has no runs of family {base!r}")
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
    ``wall_s`` the plan's runtime estimate, ``slices`` and ``sizes_per_slice`` what was asked."""

    slices: tuple[float, ...]
    sizes_per_slice: int
    points: pd.DataFrame = field(compare=False, repr=False)
    compute: float = math.nan
    wall_s: float = math.nan
    n_runs: int = 0
    label: str = ""

    def describe(self) -> str:
        return (f"{len(self.slices)} slices x <= {self.sizes_per_slice} sizes, {self.slices[0]:.3g}-"
                f"{self.slices[-1]:.3g} FLOPs, {self.n_runs} runs, {self.compute:.3g} FLOPs")


def grid_from_plan(preset, *, slices: Sequence[float] | None = None, sizes_per_slice: int | None = None,
                   label: str = "") -> Grid:
    """The grid ``plan`` makes of ``preset`` (a name, path or loaded tree) with its ``[plan]`` slices
    (shared by every family) and ``max_sizes_per_slice`` replaced where given."""
    tree = Preset.load(preset)
    fams = list(tree.plan.families)
    tree = Preset.load(tree, slices=None if slices is None else {f: [float(c) for c in slices] for f in fams},
                       max_sizes_per_slice=None if sizes_per_slice is None else int(sizes_per_slice))
    with quiet():
        planned = plan_sweep(tree)
    pts = pd.DataFrame([dict(family=r.family, slice_flops=float(r.slice_flops), params=float(r.params),
                             tokens=float(r.tokens), flops=float(r.flops)) for r in planned.runs])
    got = tuple(sorted(pts["slice_flops"].unique()))
    return Grid(slices=got, sizes_per_slice=int(tree.plan.max_sizes_per_slice or pts.groupby(
        ["family", "slice_flops"]).size().max()), points=pts, compute=float(pts["flops"].sum()),
        wall_s=float(planned.estimate.get("wall_s", math.nan)), n_runs=len(pts), label=label)


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
            raise ValueError(f"design: the grid has no runs of family {fam!r}")
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
                              label=self.grid.label),
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
    if question not in QUESTIONS:
        raise ValueError(f"design: question must be one of {QUESTIONS}, got {question!r}")
    if question == "multiplier" and not variant:
        raise ValueError("design: the multiplier question needs a variant family")
    workers = workers or min(os.cpu_count() or 1, 4)
    truth = dataclasses.replace(truth, pivot=truth.pivot if math.isfinite(truth.pivot)
                                else float(np.sqrt(grid.slices[0] * grid.slices[-1])))
    scen = {"constant": truth.with_growth(0.0), "growing": truth.with_growth(growth)} if question == "multiplier" \
        else {"truth": truth}
    t0, out, done = time.monotonic(), {}, {}
    fams = (base, variant) if question == "multiplier" else (base,)
    if more_of is not None:
        starts = more_of.starts
    else:
        starts = joint_starts(grid, list(scen.values()), noise, fams, seed) if warm and question != "exponent" else None
    for i, (name, tr) in enumerate(scen.items()):
        job = SimJob(grid, tr, noise, question, base, variant if question == "multiplier" else None, float(target),
                   int(n_boot), float(level), starts)
        seeds = [int(seed) * 1_000_003 + i * 100_003 + s for s in range(n_sims)]
        have = more_of.analyses.get(name, {}) if more_of is not None else {}
        cb = (lambda d, n, name=name: progress(name, d, n)) if progress else None
        new = run_many(job, [s for s in seeds if s not in have], workers, cb)
        done[name] = {**have, **{r["seed"]: r for r in new}}
        out[name] = _tally([done[name][s] for s in seeds], question)
    return GridPower(grid=grid, question=question, n_sims=n_sims, scenarios=out, seconds=time.monotonic() - t0,
                     analyses=done, starts=starts)


def meets(gp: GridPower, *, power: float = 0.8, false_alarm: float = 0.10, halfwidth: float = 0.05) -> bool:
    """Whether a grid meets the target of its question."""
    if gp.question == "multiplier":
        return gp.power >= power and gp.false_alarm <= false_alarm
    return gp.alpha_P_halfwidth <= halfwidth


# ---- the search -----------------------------------------------------------------------------

def candidate_grids(preset, *, n_slices=(3, 4, 5, 7, 9), ranges=(4.0, 8.0, 16.0, 32.0, 64.0),
                    sizes=(4, 5, 6), budget: float | None = None) -> Iterator[Grid]:
    """Grids ``plan`` makes of ``preset``, cheapest first: geometric slices from the preset's smallest
    budget over ``ranges`` (last / first), ``sizes`` per slice, within ``budget`` FLOPs. Ordered by
    their nominal compute (sizes x the slices' sum) and planned only when reached."""
    tree = Preset.load(preset)
    first = min(min(v) for v in slices_of(tree).values())
    specs = {(tuple(float(f"{first * r ** (i / (n - 1)):.4g}") for i in range(n)), s, f"{n}x{s} over {r:g}x")
             for n in n_slices for r in ranges for s in sizes}
    for sl, s, label in sorted(specs, key=lambda t: (t[1] * sum(t[0]), t[2])):
        if budget is not None and s * sum(sl) * len(tree.plan.families) > budget * 1.5:
            continue  # nominally far over the budget: not worth planning
        try:
            g = grid_from_plan(tree, slices=sl, sizes_per_slice=s, label=label)
        except ValueError as exc:  # a slice no size fits
            log.info("design: grid %s skipped: %s", label, exc)
            continue
        if budget is None or g.compute <= budget:
            yield g


def nested(grid: Grid, other: Grid) -> bool:
    """Whether ``grid`` asks no more than ``other``: no more slices, all within ``other``'s range, and no
    more sizes per slice. Such a grid has less information on every question the design asks, so when
    ``other`` falls short of a target the search does not simulate it."""
    return (len(grid.slices) <= len(other.slices) and grid.sizes_per_slice <= other.sizes_per_slice
            and grid.slices[0] >= other.slices[0] * (1 - 1e-9) and grid.slices[-1] <= other.slices[-1] * (1 + 1e-9))


def slices_of(tree) -> dict:
    s = tree.plan.slices
    return s if isinstance(s, dict) else {f: list(s) for f in tree.plan.families}


@dataclass(frozen=True)
class Design:
    """The planned grid's assessment, every grid the search tried, and the recommendation (None when
    no grid within the budget meets the target)."""

    question: str
    noise: NoiseModel
    truth: Truth
    planned: GridPower
    tried: tuple[GridPower, ...] = ()
    recommended: GridPower | None = None
    target: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(question=self.question, noise=self.noise.to_dict(), truth=self.truth.to_dict(),
                    target=self.target, planned=self.planned.to_dict(), tried=[t.to_dict() for t in self.tried],
                    recommended=self.recommended.to_dict() if self.recommended else None)


def search(preset, truth: Truth, noise: NoiseModel, *, question: str, base: str, variant: str | None = None,
           growth: float = 0.05, target: float = 1e20, power: float = 0.8, false_alarm: float = 0.10,
           halfwidth: float = 0.05, budget: float | None = None, n_sims: int = DEFAULT_SIMS,
           screen_sims: int = 40, max_grids: int = 12, n_boot: int = DESIGN_BOOT, seed: int = 0,
           workers: int | None = None, progress=None, grids: Sequence[Grid] | None = None,
           planned: Grid | None = None) -> Design:
    """Assess the preset's own grid, then walk candidate grids cheapest first: each screened with
    ``screen_sims`` simulations, a passing one confirmed with ``n_sims``; the first confirmed is the
    recommendation. At most ``max_grids`` candidates are tried; ``planned``: the preset's own grid
    when the caller has already planned it."""
    kw = dict(question=question, base=base, variant=variant, growth=growth, target=target, n_boot=n_boot,
              seed=seed, workers=workers)
    goal = dict(power=power, false_alarm=false_alarm, halfwidth=halfwidth)
    planned = assess(planned or grid_from_plan(preset, label="planned"), truth, noise, n_sims=n_sims,
                     progress=_stage(progress, "planned grid"), **kw)
    tried, best = [], None
    failed = [] if meets(planned, **goal) else [planned.grid]
    cands = iter(grids) if grids is not None else candidate_grids(preset, budget=budget)
    for g in cands:
        if len(tried) >= max_grids:
            break
        within = next((f for f in failed if nested(g, f)), None)
        if within is not None:  # a part of a grid that fell short cannot do better: not simulated
            log.info("design: grid %s skipped: nested in %s, which fell short", g.label, within.label)
            continue
        i = len(tried)
        gp = assess(g, truth, noise, n_sims=screen_sims, progress=_stage(progress, f"grid {i + 1}/{max_grids}"),
                    **kw)
        tried.append(gp)
        if not meets(gp, **goal):
            failed.append(g)
        else:
            gp = assess(g, truth, noise, n_sims=n_sims, progress=_stage(progress, f"confirm grid {i + 1}"), **kw)
            tried[-1] = gp
            if meets(gp, **goal):
                best = gp
                break
            failed.append(g)
    return Design(question=question, noise=noise, truth=truth, planned=planned, tried=tuple(tried),
                  recommended=best, target=dict(goal, growth=growth, target_compute=target, budget=budget))


def _stage(progress, name):
    return None if progress is None else (lambda scen, d, n: progress(f"{name}, {scen}", d, n))


# ---- outputs --------------------------------------------------------------------------------

def write_preset(preset, grid: Grid, path: str | os.PathLike) -> Path:
    """``preset``'s TOML with its ``[plan]`` slices (every family) and ``max_sizes_per_slice``
    replaced by ``grid``'s, so ``plan`` and ``sweep launch --preset`` run it as written."""
    import tomllib

    from interpscale._atomic import atomic_write_text

    src = preset.to_table() if isinstance(preset, Preset) else dict(preset) if isinstance(preset, Mapping) \
        else load_preset(preset)
    src = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in src.items()}
    plan_sec = src.setdefault("plan", {})
    fams = plan_sec.get("families") or sorted(set(grid.points["family"]))
    plan_sec["slices"] = {f: list(grid.slices) for f in fams}
    plan_sec["max_sizes_per_slice"] = int(grid.sizes_per_slice)
    text = f"# written by `interpscale design`: {grid.describe()}\n" + toml_dumps(src)
    tomllib.loads(text)  # what we write must read back
    return atomic_write_text(Path(path), text)


def _row(gp: GridPower, mark: str = "") -> dict:
    g = gp.grid
    row = {"grid": f"{g.label}{mark}", "slices": len(g.slices), "range": f"{g.slices[0]:.3g}-{g.slices[-1]:.3g}",
           "sizes/slice": g.sizes_per_slice, "runs": g.n_runs, "FLOPs": f"{g.compute:.3g}",
           "est. wall": _minutes(g.wall_s), "sims": gp.n_sims}
    if gp.question == "multiplier":
        c, gr = gp.scenarios["constant"], gp.scenarios["growing"]
        row.update({"power": f"{gp.power:.2f}", "false alarm": f"{gp.false_alarm:.2f}",
                    "undetermined (const / grow)": f"{c['p_verdict']['undetermined']:.2f} / "
                                                   f"{gr['p_verdict']['undetermined']:.2f}",
                    "k band at middle (x)": f"{10 ** c['k_decades_mid']:.3g}"
                    if math.isfinite(c["k_decades_mid"]) else "unbounded",
                    "k covered at middle": f"{c['k_cover_mid']:.2f}",
                    "brackets": f"{c['bracketed_slices']:.2f}"})
    else:
        t = gp.scenarios["truth"]
        row.update({"alpha_P half-width": f"{t['alpha_P_halfwidth']:.3g}", "identified": f"{t['p_identified']:.2f}",
                    "brackets": f"{t['bracketed_slices']:.2f}"})
        if "forecast_abs_error" in t:
            row["forecast |error|"] = f"{100 * t['forecast_abs_error']:.2f}%"
    return row


def _minutes(s: float) -> str:
    return "-" if not math.isfinite(s) else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def render(design: Design) -> str:
    """The design as markdown: what it assumed, the planned grid's chances, every grid tried and
    the recommendation (or why there is none)."""
    from interpscale._markdown import md_table

    n, t, goal = design.noise, design.truth, design.target
    lines = [f"# Sweep design: the {design.question} question", "",
             f"- noise ({n.source}): run sd {n.run_sd:.4g} [{n.run_ci[0]:.3g}, {n.run_ci[1]:.3g}], slice shock sd "
             f"{n.slice_sd:.4g} [{n.slice_ci[0]:.3g}, {n.slice_ci[1]:.3g}] (log loss, {round(100 * n.level)}% "
             f"intervals, df {n.df_run} / {n.df_slice})",
             f"- truth ({t.source}): {'Eq. 27' if t.kind == 'joint' else 'IsoFLOP envelopes (Eqs. 25-26)'} with " + ", ".join(f"{k} {v:.4g}" for k, v in t.law.items())
             + (f"; k0 {t.multiplier:.3g}, planted growth {goal['growth']:g} vs none" if design.question ==
                "multiplier" else "") + (f" ({t.note})" if t.note else ""),
             (f"- target: power >= {goal['power']:g} for growth {goal['growth']:g} with <= {goal['false_alarm']:g} "
              "false alarms" if design.question == "multiplier" else
              f"- target: alpha_P's 90% half-width <= {goal['halfwidth']:g}")
             + (f", within {goal['budget']:.3g} FLOPs" if goal.get("budget") else ""), ""]
    rows = [_row(design.planned)] + [_row(g) for g in design.tried]
    header = list(dict.fromkeys(k for r in rows for k in r))
    lines += [md_table(header, [[r.get(k, "") for k in header] for r in rows]), ""]
    r = design.recommended
    if r is not None:
        lines.append(f"**Recommended**: {r.grid.describe()}, estimated {_minutes(r.grid.wall_s)} wall "
                     f"({_answer(r)}); written as recommended.toml.")
    else:
        lines.append(f"**No grid tried meets the target** ({len(design.tried)} tried, cheapest first"
                     + (f", within {goal['budget']:.3g} FLOPs" if goal.get("budget") else "")
                     + "); raise --budget or --max-grids, or lower the target.")
    lines.append(f"Planned grid: {design.planned.grid.describe()} — {_answer(design.planned)}.")
    return "\n".join(lines)


def _answer(gp: GridPower) -> str:
    if gp.question == "multiplier":
        return f"power {gp.power:.2f}, false alarms {gp.false_alarm:.2f} over {gp.n_sims} simulated sweeps"
    return f"alpha_P half-width {gp.alpha_P_halfwidth:.3g} over {gp.n_sims} simulated sweeps"


def write_outputs(design: Design, preset, out: str | os.PathLike) -> list[Path]:
    """DIR/design.json, design.md, design.png and (when a grid was recommended) recommended.toml."""
    import json

    import matplotlib.pyplot as plt

    from interpscale._atomic import atomic_write_text
    from interpscale.analysis.figures.design import design_figure

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = [atomic_write_text(out / "design.json", json.dumps(design.to_dict(), indent=2, default=str) + "\n"),
               atomic_write_text(out / "design.md", render(design) + "\n")]
    multiplier = design.question == "multiplier"
    value = (lambda gp: gp.power) if multiplier else (lambda gp: gp.alpha_P_halfwidth)
    tried = list(design.tried)
    fig = design_figure([g.grid.compute for g in tried], [value(g) for g in tried],
                        labels=[g.grid.label for g in tried],
                        ylabel="power (growing k detected)" if multiplier else "alpha_P 90% half-width",
                        target=design.target["power"] if multiplier else design.target["halfwidth"],
                        planned=(design.planned.grid.compute, value(design.planned)),
                        recommended=None if design.recommended is None else (design.recommended.grid.compute,
                                                                           value(design.recommended)),
                        higher_is_better=multiplier)
    fig.savefig(out / "design.png", dpi=150)
    plt.close(fig)
    written.append(out / "design.png")
    if design.recommended is not None:
        written.append(write_preset(preset, design.recommended.grid, out / "recommended.toml"))
    return written


# ---- a finished sweep's achieved power --------------------------------------------------------

def grid_from_results(results: pd.DataFrame, families: Sequence[str], *, loss: str = "loss") -> Grid:
    """The grid a finished sweep ran, read off its results table (the rows its fits use)."""
    frames = []
    for fam in families:
        with quiet():
            rows = fit_rows(results, family=fam, loss=loss)
        rows = rows.assign(flops=rows["flops"] if "flops" in rows else 6.0 * rows["params"] * rows["tokens"])
        frames.append(rows[["family", "slice_flops", "params", "tokens", "flops"]])
    pts = pd.concat(frames, ignore_index=True).drop_duplicates()
    per = pts.groupby(["family", "slice_flops"]).size()
    return Grid(slices=tuple(sorted(pts["slice_flops"].unique())), sizes_per_slice=int(per.max()), points=pts,
                compute=float(pts["flops"].sum()), n_runs=len(pts), label="this sweep")


def extended_grid(grid: Grid, truth: Truth, families: Sequence[str], n_slices: int, sizes: int) -> Grid:
    """``grid`` grown to ``n_slices`` slices at its own spacing (upward from its smallest) with
    ``sizes`` sizes per slice a factor 2 apart about each family's planted optimum: the grid the
    sweep would have needed, priced as C x runs (no plan: the preset is not known here)."""
    s = np.asarray(grid.slices, float)
    ratio = float(np.exp(np.diff(np.log(s)).mean())) if len(s) > 1 else 2.0
    slices = s[0] * ratio ** np.arange(n_slices)
    rows = []
    for fam, is_variant in zip(families, (False, True)):
        for C in slices:
            m = truth.multiplier * (C / truth.pivot) ** truth.growth if is_variant else 1.0
            p_opt = math.sqrt(m) * _optimum_params(truth, C / m)
            for j in range(sizes):
                P = p_opt * 2.0 ** (j - (sizes - 1) / 2)
                rows.append(dict(family=fam, slice_flops=C, params=P, tokens=C / (6 * P), flops=C))
    pts = pd.DataFrame(rows)
    return Grid(slices=tuple(slices), sizes_per_slice=sizes, points=pts, compute=float(pts["flops"].sum()),
                n_runs=len(pts), label=f"{n_slices}x{sizes}")


def _optimum_params(truth: Truth, C: float) -> float:
    lw = truth.law
    if truth.kind == "isoflop":
        return float(lw["a_P"] * C ** lw["alpha_P"])
    a, b = lw["alpha"], lw["beta"]
    return float((a * lw["A_P"] / (b * lw["A_D"])) ** (1 / (a + b)) * (C / 6) ** (b / (a + b)))


@dataclass(frozen=True)
class AchievedPower:
    """What a finished sweep could decide: its power for ``growth`` at its own measured noise and
    fitted truth, its false-alarm rate, and (when short of ``target``) the smallest grid tried that
    would have reached it."""

    power: float
    false_alarm: float
    growth: float
    n_sims: int
    target: float
    sweep: str
    needed: str | None = None
    needed_compute: float = math.nan

    def sentence(self) -> str:
        s = (f"this sweep ({self.sweep}) had power {self.power:.2f} to detect a growth of {self.growth:g} "
             f"(false alarms {self.false_alarm:.2f}; {self.n_sims} simulated sweeps at its measured noise)")
        if self.power >= self.target:
            return s
        if self.needed is None:
            return s + f"; no grid of up to 4x its slices reached power {self.target:g}"
        return s + (f"; a grid of {self.needed_compute:.3g} FLOPs, {self.needed}, would decide a growth of "
                    f"{self.growth:g} with {self.target:.0%} power")

    def to_dict(self) -> dict:
        return dict(dataclasses.asdict(self), sentence=self.sentence())


def achieved_power(results: pd.DataFrame, base: str, variant: str, *, growth: float = 0.05, power: float = 0.8,
                   n_sims: int = 40, n_boot: int = 50, loss: str = "loss", seed: int = 0,
                   workers: int | None = None, extensions: Sequence[tuple[int, int]] | None = None) -> AchievedPower:
    """The power a finished sweep had (``docs/design.md``): its own grid, noise and fitted truth
    simulated with constant and with growing k; when short of ``power``, its grid grown (more
    slices at its spacing, then more sizes) until a grid reaches it."""
    noise = noise_from_pilot(results, loss=loss)
    truth = truth_from_pilot(results, base, variant, loss=loss)
    grid = grid_from_results(results, (base, variant), loss=loss)
    truth = dataclasses.replace(truth, pivot=float(np.sqrt(grid.slices[0] * grid.slices[-1])))
    kw = dict(base=base, variant=variant, growth=growth, n_sims=n_sims, n_boot=n_boot, seed=seed, workers=workers)
    gp = assess(grid, truth, noise, **kw)
    out = AchievedPower(power=gp.power, false_alarm=gp.false_alarm, growth=growth, n_sims=n_sims, target=power,
                        sweep=f"{len(grid.slices)} slices x <= {grid.sizes_per_slice} sizes, {grid.compute:.3g} FLOPs")
    if gp.power >= power:
        return out
    n = len(grid.slices)
    grow = sorted(extensions or {(n + 2, 5), (n + 4, 5), (2 * n, 5), (2 * n, 7), (3 * n, 5), (4 * n, 5)},
                  key=lambda t: t[0] * t[1] * 2.0 ** t[0])  # cheapest first
    grids = {t: extended_grid(grid, truth, (base, variant), *t) for t in grow}
    screen = dict(kw, n_sims=max(5, n_sims // 4))
    screened: dict = {}

    def reachable(t) -> bool:  # a screen's 90% upper bound on the power reaches the target (once per grid)
        if t not in screened:
            screened[t] = assess(grids[t], truth, noise, **screen)
        return could_reach(screened[t], power)

    # the widest grids first: one whose screen falls short rules out every grid nested in it (no more
    # slices, sizes or range: less to go on), so a sweep far from its target screens 2 grids, not 6
    widest = [t for t in grow if not any(u != t and nested(grids[t], grids[u]) for u in grow)]
    short = [grids[t] for t in reversed(widest) if not reachable(t)]
    for t in grow:
        if any(nested(grids[t], f) for f in short) or not reachable(t):
            continue  # not confirmed: its power cannot reach the target
        if assess(grids[t], truth, noise, **kw, more_of=screened[t]).power >= power:  # the screen's sims reused
            return dataclasses.replace(out, needed=f"{t[0]} slices x {t[1]} sizes", needed_compute=grids[t].compute)
    return out


def could_reach(gp: GridPower, power: float, level: float = 0.9) -> bool:
    """Whether a screened grid's power could still reach ``power``: the one-sided ``level`` upper
    Clopper-Pearson bound of its growing verdicts (x of n simulations) is at least ``power``. Five
    simulations with none growing bound the power below 0.37, so a grid far short is not simulated
    further (the finished sweep's achieved power searched 6 larger grids at full count: ~3 of the
    demo's 8 minutes)."""
    n = gp.n_sims
    x = round(gp.power * n)
    return x >= n or float(stats.beta.ppf(level, x + 1, n - x)) >= power


def with_powers(analysis: Analysis, *, n_sims: int = 40, growth: float = 0.05, power: float = 0.8, seed: int = 0,
                **options: Any) -> Analysis:
    """``analysis`` with ``powers`` filled for each undetermined multiplier verdict: the power its sweep
    had for ``growth`` and the grid that would have decided (:func:`achieved_power` on the analysed
    table, ``options`` passed on: ``n_boot``, ``workers``, ``extensions``); the report says them in its
    answer. A pair whose power cannot be simulated is logged."""
    powers = dict(analysis.powers)
    for (base, variant), m in analysis.multipliers.items():
        if getattr(m, "verdict", None) != "undetermined" or (base, variant) in powers:
            continue
        log.info("achieved power of %s vs %s: %d simulated sweeps per truth on its grid, then larger grids "
                 "until one reaches %.0f%% (docs/design.md)", variant, base, n_sims, 100 * power)
        try:
            powers[(base, variant)] = achieved_power(analysis.table, base, variant, growth=growth, power=power,
                                                     n_sims=n_sims, loss=analysis.options.loss, seed=seed,
                                                     **options)
        except ValueError as exc:
            log.warning("achieved power of %s vs %s not simulated: %s", variant, base, exc)
    return dataclasses.replace(analysis, powers=powers)
