"""Benchmark the scaling fitters against straightforward scipy loops, in the same process.

1. Joint Chinchilla fit from the full 4,500-start Epoch grid on the Epoch data (n = 240):
   batched BFGS with analytic gradients vs one ``scipy.optimize.minimize(method="L-BFGS-B")``
   per start with numeric (finite-difference) gradients. By default the baseline runs every
   15th start (300 starts) and its time is extrapolated x15; ``--full-baseline`` runs all.
2. 10,000-replicate residual bootstrap of the joint fit (warm-started, batched) vs a loop
   of L-BFGS-B calls, one per replicate (a 200-replicate subset, extrapolated x50).
3. Bounded-fit (Eq. 29) and IsoFLOP bootstraps with 10,000 replicates (absolute times).

Usage: .venv/bin/python benchmarks/bench_scaling.py [--full-baseline]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from interpscale.scaling import epoch_grid, fit_bounded, fit_chinchilla, fit_isoflop

from pathlib import Path

# reference data inside the repository (provenance and licence: tests/data/epoch/README.md)
EPOCH_CSV = Path(__file__).resolve().parents[1] / "tests" / "data" / "epoch" / "epoch_chinchilla_svg_extracted_data.csv"


def epoch_data():
    d = pd.read_csv(EPOCH_CSV)
    d = d[d["loss"] < np.sort(d["loss"].to_numpy())[-5]]  # Epoch: drop the 5 highest losses
    N = d["Model Size"].to_numpy()
    return N, d["Training FLOP"].to_numpy() / (6 * N), d["loss"].to_numpy()


def huber_objective(theta, lN, lD, lL, delta=1e-3):
    """The straightforward scalar objective a notebook would write (Epoch's formulation)."""
    a, b, e, al, be = theta
    pred = np.log(np.exp(a - al * lN) + np.exp(b - be * lD) + np.exp(e))
    r = lL - pred
    ar = np.abs(r)
    return np.sum(np.where(ar <= delta, 0.5 * r * r, delta * (ar - 0.5 * delta)))


def baseline_grid(N, D, L, starts):
    lN, lD, lL = np.log(N), np.log(D), np.log(L)
    best = (np.inf, None)
    for x0 in starts:
        r = minimize(huber_objective, x0, args=(lN, lD, lL), method="L-BFGS-B")
        if r.success and r.fun < best[0]:
            best = (r.fun, r.x)
    return best


class Timer:
    """Wall and process-CPU seconds (the CPU figure is robust to other users of a shared box)."""

    def __enter__(self):
        self.w, self.c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.w, time.process_time() - self.c


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full-baseline", action="store_true", help="run the baseline on all 4,500 starts")
    ap.add_argument("--n-boot", type=int, default=10_000)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", RuntimeWarning)  # overflow in the baseline's wild starts
    N, D, L = epoch_data()
    grid = epoch_grid()

    with Timer() as t_ours:
        fit = fit_chinchilla(N, D, L, n_boot=0)
    step = 1 if args.full_baseline else 30
    sub = grid[::step]
    with Timer() as t_sub:
        b_obj, _ = baseline_grid(N, D, L, sub)
    k = len(grid) / len(sub)
    print(f"[grid] 4,500-start joint fit: batched BFGS {t_ours.wall:.2f} s wall / {t_ours.cpu:.2f} s CPU, "
          f"objective {fit.objective:.10f}")
    print(f"[grid] scipy L-BFGS-B + numeric gradients: {len(sub)} starts in {t_sub.wall:.1f} s wall / {t_sub.cpu:.1f} s CPU "
          f"-> {k * t_sub.wall:.0f} s / {k * t_sub.cpu:.0f} s for 4,500{' (extrapolated)' if step > 1 else ''}; "
          f"best objective {b_obj:.10f}")
    print(f"[grid] speed-up x{k * t_sub.wall / t_ours.wall:.1f} wall, x{k * t_sub.cpu / t_ours.cpu:.1f} CPU")

    with Timer() as t_boot:
        boot = fit_chinchilla(N, D, L, grid=fit.theta[None, :], n_boot=args.n_boot, seed=0)
    print(f"[bootstrap] {args.n_boot} residual replicates of the joint fit: {t_boot.wall:.2f} s wall / {t_boot.cpu:.2f} s CPU "
          f"({boot.n_boot_ok} converged); 90% CI alpha {boot.ci['alpha'][0]:.4f}..{boot.ci['alpha'][1]:.4f}, "
          f"L_inf {boot.ci['L_inf'][0]:.4f}..{boot.ci['L_inf'][1]:.4f}")
    rng = np.random.default_rng(0)
    lN, lD, lL = np.log(N), np.log(D), np.log(L)
    fitted = np.log(fit.predict(N, D))
    resid = lL - fitted
    n_sub = 200
    with Timer() as t_loop:
        for _ in range(n_sub):
            y = fitted + resid[rng.integers(0, len(resid), len(resid))]
            minimize(huber_objective, fit.theta, args=(lN, lD, y), method="L-BFGS-B")
    k = args.n_boot / n_sub
    print(f"[bootstrap] scipy loop (warm-started, numeric gradients): {n_sub} replicates -> "
          f"{k * t_loop.wall:.0f} s wall / {k * t_loop.cpu:.0f} s CPU for {args.n_boot} (extrapolated); "
          f"speed-up x{k * t_loop.wall / t_boot.wall:.1f} wall, x{k * t_loop.cpu / t_boot.cpu:.1f} CPU")

    C = np.repeat(np.geomspace(1e19, 3e20, 6), 5)
    m = 0.9 - 2e3 * C**-0.2 + np.random.default_rng(1).normal(0, 0.01, C.size)
    t0 = time.perf_counter()
    fit_bounded(C, m, name="concept_contribution", n_boot=args.n_boot)
    print(f"[bounded] {args.n_boot}-replicate bootstrap of Eq. 29 (n = {C.size}): {time.perf_counter() - t0:.2f} s")
    rows = [dict(slice_flops=c, params=p, loss=1.8 + 400 / p**0.34 + 2000 / (c / (6 * p)) ** 0.37)
            for c in (6e18, 1e19, 3e19, 1e20) for p in np.geomspace(2e7, 2e9, 7)]
    t0 = time.perf_counter()
    fit_isoflop(pd.DataFrame(rows), n_boot=args.n_boot)
    print(f"[isoflop] {args.n_boot}-replicate bootstrap of slice parabolas + power laws: {time.perf_counter() - t0:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
