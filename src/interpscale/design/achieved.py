"""A finished sweep's achieved power (docs/design.md): the power its own grid had at its measured
noise and fitted truth, and the smallest larger grid that would have decided."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from interpscale.design.simulation import (Grid, Truth, assess, nested, noise_from_pilot, run_many,
                                           scenario_jobs, scenario_seeds, truth_from_pilot)
from interpscale.scaling import Analysis, quiet
from interpscale.scaling.tables import fit_rows

log = logging.getLogger(__name__)


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
    kw = dict(base=base, variant=variant, growth=growth, n_boot=n_boot, seed=seed)
    gp = assess(grid, truth, noise, n_sims=n_sims, workers=workers, **kw)
    out = AchievedPower(power=gp.power, false_alarm=gp.false_alarm, growth=growth, n_sims=n_sims, target=power,
                        sweep=f"{len(grid.slices)} slices x <= {grid.sizes_per_slice} sizes, {grid.compute:.3g} FLOPs")
    if gp.power >= power:
        return out
    found = larger_grid(grid, truth, noise, (base, variant), power=power, n_sims=n_sims, workers=workers,
                        extensions=extensions, starts=gp.starts, **kw)
    if found is None:
        return out
    return dataclasses.replace(out, needed=f"{len(found.slices)} slices x {found.sizes_per_slice} sizes",
                               needed_compute=found.compute)


def larger_grid(grid: Grid, truth: Truth, noise, families: Sequence[str], *, power: float, n_sims: int,
                workers: int | None = None, extensions: Sequence[tuple[int, int]] | None = None,
                starts: np.ndarray | None = None, **kw: Any) -> Grid | None:
    """The cheapest of ``grid``'s extensions (:func:`extended_grid`: more slices at its spacing, more
    sizes about the planted optimum) whose power for ``kw['growth']`` reaches ``power``, or None:
    each a :class:`PowerTest` (its growing-k scenario, curtailed), the widest screened first."""
    n = len(grid.slices)
    grow = sorted(extensions or {(n + 2, 5), (n + 4, 5), (2 * n, 5), (2 * n, 7), (3 * n, 5), (4 * n, 5)},
                  key=lambda t: t[0] * t[1] * 2.0 ** t[0])  # cheapest first
    grids = {t: extended_grid(grid, truth, families, *t) for t in grow}
    tests: dict = {}

    def test(t) -> PowerTest:
        if t not in tests:
            tests[t] = PowerTest(grids[t], truth, noise, power=power, n_screen=max(5, n_sims // 4), n_sims=n_sims,
                                 workers=workers, starts=starts, **kw)  # the same truth's joint-fit optima
        return tests[t]

    # the widest grids first: one whose screen falls short rules out every grid nested in it (no more
    # slices, sizes or range: less to go on), so a sweep far from its target screens 2 grids, not 6
    widest = [t for t in grow if not any(u != t and nested(grids[t], grids[u]) for u in grow)]
    short = [grids[t] for t in reversed(widest) if not test(t).screen()]
    for t in grow:
        if any(nested(grids[t], f) for f in short) or not test(t).screen():
            continue  # not confirmed: its power cannot reach the target
        if test(t).confirm():  # the screen's simulations are the confirmation's first
            return grids[t]
    return None


class PowerTest:
    """Whether a larger grid's power for ``growth`` reaches ``power``, from its growing-k scenario
    alone (whether a grid would decide needs no false-alarm rate), simulated ``workers`` at a time and
    only until the answer is settled -- curtailed sampling: the same answers, from the same seeds, as
    ``assess`` of all ``n_screen`` (the screen: ``reaches``) and all ``n_sims`` (the confirmation:
    power >= ``power``). A grid far short is settled after 3 of its screen's 5 simulations (4 when run in
    pairs), where both scenarios' 10 were simulated before."""

    def __init__(self, grid: Grid, truth: Truth, noise, *, power: float, n_screen: int, n_sims: int,
                 workers: int | None = None, starts: np.ndarray | None = None, **kw: Any):
        # the joint fits start from ``starts`` when given (a finished sweep's own assessment: the end points of
        # full multistarts on the same truth), else from both scenarios' ``joint_starts`` on this grid, as assess's
        self.job = scenario_jobs(grid, truth, noise, warm=starts is None, starts=starts, **kw)["growing"]
        self.seeds = scenario_seeds(kw.get("seed", 0), 1, max(n_screen, n_sims))  # each answer reads its first
        self.power, self.n_screen, self.n_sims = power, n_screen, n_sims
        self.workers = workers or min(os.cpu_count() or 1, 4)
        self.hits: list[bool] = []  # per simulation in seed order: its verdict was "growing"

    def _until(self, n: int, settled) -> None:
        while len(self.hits) < n and not settled():
            batch = self.seeds[len(self.hits):min(n, len(self.hits) + self.workers)]
            self.hits += [r.get("verdict") == "growing" for r in run_many(self.job, batch, self.workers)]

    def _answer(self, n: int, reached) -> bool:
        """``reached(x, n)`` of the first ``n`` simulations' x growing verdicts, simulating only until
        the x still possible all give the same answer (``reached`` grows with x)."""
        x = lambda: sum(self.hits[:n])  # noqa: E731
        self._until(n, lambda: reached(x(), n) or not reached(x() + n - min(n, len(self.hits)), n))
        return reached(x(), n)

    def screen(self) -> bool:
        return self._answer(self.n_screen, lambda x, n: reaches(x, n, self.power))

    def confirm(self) -> bool:
        return self._answer(self.n_sims, lambda x, n: x >= math.ceil(self.power * n - 1e-9))  # power >= target


def reaches(x: int, n: int, power: float, level: float = 0.9) -> bool:
    """Whether ``x`` growing verdicts of ``n`` simulations leave ``power`` within reach: the one-sided
    ``level`` upper Clopper-Pearson bound is at least ``power``. Five simulations with none growing
    bound the power below 0.37, so a grid far short is not simulated further (searching 6 larger grids
    at full count had taken ~3 minutes of the demo)."""
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
