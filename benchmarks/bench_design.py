"""The design's speed (issue 44; docs/design.md, "Speed"): simulated sweeps of the demo's grid
(configs/demo.toml, ar vs ar+concept), each analysed by ``fit_multiplier`` as the report runs it.

Prints the time of one simulated analysis three ways, serially in this process on the same seeds:
the report's settings (N_BOOT["multiplier"] replicates, the 243-start joint grid: the baseline), the
design before issue 44's speed work (100 replicates, 243 starts) and the design's (100 replicates,
``joint_starts``), with their ratios to the baseline; then the wall time of ``--sims`` sweeps through
``assess`` (half with constant, half with growing k; ``joint_starts`` included) on ``--workers``.
``--calibration N``: predicted verdict probabilities (``assess`` with its seeds) against the
frequencies over N fresh simulations (other seeds) for three grids x constant and growing k.
``--rules N``: rules of thumb (Hoffmann et al.'s nine budgets, five sizes per slice) against the
design's recommended grid on the same planted world, N sweeps per grid and truth.
``--effect N``: N sweeps per truth analysed both ways (report's settings vs the design's, the same
tables), the verdict probabilities of each and their paired difference with its Monte-Carlo SE.

    .venv/bin/python benchmarks/bench_design.py [--sims 200] [--workers 2] [--effect 200] [--calibration 200] [--rules 120]
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import resource
import time
from pathlib import Path

import numpy as np
import pandas as pd

from interpscale import design as d
from interpscale.scaling import N_BOOT

DEMO = Path(__file__).resolve().parents[1] / "configs" / "demo.toml"
BASE, VARIANT = "ar", "ar+concept"


def setup(noise: float):
    grid = d.grid_from_plan(DEMO, label="demo")
    truth = d.truth_for_grid(grid, BASE)
    truth = dataclasses.replace(truth, pivot=float(np.sqrt(grid.slices[0] * grid.slices[-1])))
    return grid, truth, d.NoiseModel(run_sd=noise)


def per_sim(job: d.SimJob, seeds) -> tuple[float, float]:
    """(wall, CPU) seconds of one simulated analysis, mean over ``seeds``, in this process."""
    t0, c0 = time.perf_counter(), time.process_time()
    for s in seeds:
        d.analyse_once(job, s)
    return (time.perf_counter() - t0) / len(seeds), (time.process_time() - c0) / len(seeds)


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timing(args) -> None:
    grid, truth, noise = setup(args.noise)
    scen = [truth.with_growth(0.0), truth.with_growth(0.05)]
    t0 = time.perf_counter()
    starts = d.joint_starts(grid, scen, noise, (BASE, VARIANT))
    t_starts = time.perf_counter() - t0
    seeds = range(args.baseline_sims)
    kw = dict(grid=grid, truth=scen[1], noise=noise, question="multiplier", base=BASE, variant=VARIANT,
              target=1e12, level=0.9)
    base = per_sim(d.SimJob(**kw, n_boot=N_BOOT["multiplier"]), seeds)
    before = per_sim(d.SimJob(**kw, n_boot=d.DESIGN_BOOT), seeds)
    now = per_sim(d.SimJob(**kw, n_boot=d.DESIGN_BOOT, starts=starts), seeds)
    print(f"{grid.describe()}; noise {args.noise:g}; {len(starts)} joint starts in {t_starts:.1f} s")
    print(f"one simulated analysis, serial, mean of {args.baseline_sims} (wall / CPU seconds):")
    print(f"  report's settings ({N_BOOT['multiplier']} replicates, 243 starts): {base[0]:.2f} / {base[1]:.2f} s "
          "(baseline)")
    for name, (w, c), n in (("design before", before, 243), ("design now   ", now, len(starts))):
        print(f"  {name}     ({d.DESIGN_BOOT} replicates, {n} starts): {w:.2f} / {c:.2f} s = x{base[0] / w:.1f} "
              f"faster (wall), x{base[1] / c:.1f} (CPU)")
    t0, c0, k0 = time.perf_counter(), time.process_time(), children_cpu()
    gp = d.assess(grid, truth, noise, base=BASE, variant=VARIANT, n_sims=args.sims // 2, target=1e12,
                  workers=args.workers)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0 + children_cpu() - k0
    print(f"{args.sims} simulated sweeps through assess on {args.workers} workers: {wall:.1f} s wall, {cpu:.1f} CPU "
          f"s (= {cpu / args.workers:.1f} s on {args.workers} idle cores; the baseline's CPU: "
          f"{base[1] * args.sims / args.workers:.0f} s); power {gp.power:.2f}, false alarms {gp.false_alarm:.2f}")


def effect(args) -> None:
    """The same simulated tables analysed with the report's settings and with the design's."""
    grid, truth, noise = setup(args.noise)
    scen = {"constant": truth.with_growth(0.0), "growing": truth.with_growth(0.05)}
    starts = d.joint_starts(grid, list(scen.values()), noise, (BASE, VARIANT))
    rows = []
    for i, (name, tr) in enumerate(scen.items()):
        seeds = [i * 100_003 + s for s in range(args.effect)]
        kw = dict(grid=grid, truth=tr, noise=noise, question="multiplier", base=BASE, variant=VARIANT, target=1e12,
                  level=0.9)
        full = d.run_many(d.SimJob(**kw, n_boot=N_BOOT["multiplier"]), seeds, args.workers)
        fast = d.run_many(d.SimJob(**kw, n_boot=d.DESIGN_BOOT, starts=starts), seeds, args.workers)
        a, b = pd.Series([r["verdict"] for r in full]), pd.Series([r["verdict"] for r in fast])
        for v in ("growing", "constant", "shrinking", "undetermined"):
            x, y = (a == v).astype(float), (b == v).astype(float)
            diff = y - x  # paired: the same table each time
            rows.append({"truth": name, "verdict": v, "sims": len(a), "P full": x.mean(), "P design": y.mean(),
                         "difference": diff.mean(), "MC SE": diff.std(ddof=1) / math.sqrt(len(diff)),
                         "same verdict": float((a == b).mean())})
    print(f"{grid.describe()}; noise {args.noise:g}; report's settings: {N_BOOT['multiplier']} replicates, 243 "
          f"starts; design: {d.DESIGN_BOOT} replicates, {len(starts)} starts")
    print(pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3f"))


CALIBRATION_GRIDS = (  # (label, slices, sizes per slice): the demo's and two of the search's candidates
    ("3x4 over 4x", (6.4e9, 1.28e10, 2.56e10), 4),
    ("demo 5x5 over 16x", None, None),
    ("4x5 over 8x", (6.4e9, 1.28e10, 2.56e10, 5.12e10), 5),
)


def calibration(args) -> None:
    """Predicted verdict probabilities (``assess``, seed 0) against the frequencies over fresh
    simulations (seed 1: other tables), three grids x constant and growing k."""
    rows = []
    for label, slices, sizes in CALIBRATION_GRIDS:
        grid = d.grid_from_plan(DEMO, slices=slices, sizes_per_slice=sizes, label=label)
        truth = d.truth_for_grid(d.grid_from_plan(DEMO), BASE)  # one planted world for every grid
        truth = dataclasses.replace(truth, pivot=3.2e10)
        noise = d.NoiseModel(run_sd=args.noise)
        kw = dict(base=BASE, variant=VARIANT, n_sims=args.calibration, target=1e12, workers=args.workers)
        pred, fresh = d.assess(grid, truth, noise, seed=0, **kw), d.assess(grid, truth, noise, seed=1, **kw)
        for scen in ("constant", "growing"):
            for v in ("growing", "constant", "shrinking", "undetermined"):
                p, f = pred.scenarios[scen]["p_verdict"][v], fresh.scenarios[scen]["p_verdict"][v]
                se = math.sqrt(max(p * (1 - p) + f * (1 - f), 1e-12) / args.calibration)
                rows.append({"grid": f"{label} ({grid.n_runs} runs, {grid.compute:.2g} FLOPs)", "truth": scen,
                             "verdict": v, "predicted": p, "fresh": f, "difference": f - p, "MC SE": se})
        print(f"noise {args.noise:g}; {args.calibration} simulated sweeps per grid and truth, each side", flush=True)
        print(pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3f"), flush=True)  # grid by grid


def rules(args) -> None:
    """Rules of thumb against the design's recommendation on one planted world (the demo's, growth
    0.05 vs none): Hoffmann et al.'s nine IsoFLOP budgets (their ratios 6e18 ... 3e21, scaled to
    start at the demo's smallest budget), five sizes per slice on the demo's five slices, and the
    cheapest grid ``search`` finds for power >= 0.8 with <= 10% false alarms."""
    from interpscale.scaling.backtest import CHINCHILLA_BUDGETS

    planned = d.grid_from_plan(DEMO, label="five sizes per slice (the demo's 5 slices)")
    truth = dataclasses.replace(d.truth_for_grid(planned, BASE), pivot=3.2e10)
    noise = d.NoiseModel(run_sd=args.noise)
    first = min(planned.slices)
    hoffmann = d.grid_from_plan(DEMO, slices=[first * c / CHINCHILLA_BUDGETS[0] for c in CHINCHILLA_BUDGETS],
                                sizes_per_slice=5, label="Hoffmann et al.'s nine budgets x 5 sizes")
    kw = dict(base=BASE, variant=VARIANT, target=1e12, workers=args.workers)
    cands = d.candidate_grids(DEMO, n_slices=(5, 7, 9), ranges=(16.0, 32.0, 64.0), sizes=(4, 5))  # wide grids only
    design = d.search(DEMO, truth, noise, question="multiplier", n_sims=args.rules, screen_sims=args.rules // 3,
                      max_grids=args.max_grids, planned=planned, grids=list(cands), **kw)
    rows = [design.planned, d.assess(hoffmann, truth, noise, n_sims=args.rules, **kw)]
    rows += [design.recommended] if design.recommended is not None else []
    print(f"noise {args.noise:g}; k0 1.3, growth 0.05 vs none; {args.rules} sweeps per grid and truth; "
          f"{len(design.tried)} candidate grids tried")
    table = [{"grid": gp.grid.label + (" (design's recommendation)" if gp is design.recommended else ""),
              "slices": len(gp.grid.slices), "runs": gp.grid.n_runs, "FLOPs": f"{gp.grid.compute:.3g}",
              "est. wall (h)": f"{gp.grid.wall_s / 3600:.2f}", "power": f"{gp.power:.2f}",
              "false alarm": f"{gp.false_alarm:.2f}",
              "undetermined (growing k)": f"{gp.scenarios['growing']['p_verdict']['undetermined']:.2f}"} for gp in rows]
    print(pd.DataFrame(table).to_markdown(index=False, disable_numparse=True))
    for gp in design.tried:
        print(f"tried {gp.grid.label}: {gp.grid.compute:.3g} FLOPs, {gp.n_sims} sims, power {gp.power:.2f}, "
              f"false alarms {gp.false_alarm:.2f}")
    if design.recommended is None:
        print("no candidate met the target")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=200, help="simulated sweeps timed through assess")
    ap.add_argument("--baseline-sims", type=int, default=6, help="sweeps per serial timing")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--noise", type=float, default=0.008, help="per-run log-loss noise")
    ap.add_argument("--effect", type=int, default=0, help="sweeps per truth for the full-vs-design comparison")
    ap.add_argument("--calibration", type=int, default=0, help="sweeps per grid and truth for the calibration table")
    ap.add_argument("--rules", type=int, default=0, help="sweeps per grid and truth for the rules-of-thumb table")
    ap.add_argument("--max-grids", type=int, default=16, help="candidate grids the search may try (--rules)")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    if args.rules:
        rules(args)
    elif args.calibration:
        calibration(args)
    elif args.effect:
        effect(args)
    else:
        timing(args)


if __name__ == "__main__":
    main()
