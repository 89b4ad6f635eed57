"""Benchmark the scaling fitters against straightforward scipy loops, in the same process.

1. Joint Chinchilla fit from the full 4,500-start Epoch grid on the Epoch data (n = 240):
   batched BFGS with analytic gradients vs one ``scipy.optimize.minimize(method="L-BFGS-B")``
   per start with numeric (finite-difference) gradients. By default the baseline runs every
   15th start (300 starts) and its time is extrapolated x15; ``--full-baseline`` runs all.
2. 10,000-replicate residual bootstrap of the joint fit (warm-started, batched) vs a loop
   of L-BFGS-B calls, one per replicate (a 200-replicate subset, extrapolated x50).
3. Bounded-fit (Eq. 29) and IsoFLOP bootstraps with 10,000 replicates (absolute times), and
   the IsoFLOP pairs bootstrap keeping degenerate replicates vs the old drop (interval widths).
4. Backtests (issue 17): held-out error and prediction-interval coverage of each method on
   the Epoch data (runs labelled by the nearest Chinchilla IsoFLOP budget) and on the bundled
   example table; time of a backtest as a multiple of one fit of each method (same process);
   coverage of 90% prediction intervals on synthetic laws over ``--coverage-seeds`` seeds.
5. The published laws (``bench_laws.py``; ``--skip-laws`` skips): data-constrained, over-training
   and ladder fits, their robust start grids and 1,000 bootstrap replicates vs scipy loops.

Usage: .venv/bin/python benchmarks/bench_scaling.py [--full-baseline] [--skip-grid] [--coverage-seeds N]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import warnings

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from interpscale.scaling import backtest, epoch_grid, fit_bounded, fit_chinchilla, fit_isoflop, nearest_budget

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
    ap.add_argument("--skip-grid", action="store_true", help="only the resampling and backtest sections")
    ap.add_argument("--coverage-seeds", type=int, default=30)
    ap.add_argument("--skip-laws", action="store_true", help="skip the published-law section (bench_laws.py)")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", RuntimeWarning)  # overflow in the baseline's wild starts
    logging.getLogger("interpscale.scaling").setLevel(logging.ERROR)  # fit warnings are in the results
    N, D, L = epoch_data()
    if not args.skip_grid:
        grid_and_bootstrap(N, D, L, args)
    resampling(args)
    backtests(N, D, L, args)
    if not args.skip_laws:  # data-constrained, over-training, ladder: fits and 1,000 replicates vs scipy loops
        from bench_laws import laws

        laws(argparse.Namespace(n_boot=1000, loop_reps=100))
    return 0


def resampling(args) -> None:
    """IsoFLOP pairs bootstrap: degenerate replicates kept (censored) vs dropped."""
    rows = [dict(slice_flops=c, params=p, loss=1.8 + 400 / p**0.34 + 2000 / (c / (6 * p)) ** 0.37
                 + np.random.default_rng(int(p) % 997).normal(0, 0.004))
            for c in (6e18, 1e19, 3e19, 1e20) for p in np.geomspace(2e7, 2e9, 7)]
    df = pd.DataFrame(rows)
    for mode in ("censor", "drop"):
        t0 = time.perf_counter()
        f = fit_isoflop(df, n_boot=args.n_boot, bootstrap="pairs", degenerate=mode)
        lo, hi = f.ci["alpha_P"]
        print(f"[resampling] IsoFLOP pairs bootstrap, {args.n_boot} replicates, degenerate={mode}: "
              f"{time.perf_counter() - t0:.2f} s; {100 * f.degenerate_fraction:.1f}% degenerate; "
              f"alpha_P {f.alpha_P:.4f} 90% CI [{lo:.4f}, {hi:.4f}] (width {hi - lo:.4f}); replicates used {f.n_boot_ok}")


def _bt_print(name: str, bt) -> None:
    for r in bt.errors().itertuples(index=False):
        print(f"[backtest] {name} {r.family} {r.method} {r.quantity} {r.scheme}: n={r.n} MAPE {r.mape:.2f}% "
              f"max {r.max_ape:.2f}% bias {r.bias:+.2f}% coverage {r.coverage:.2f} PI width {r.pi_width:.2f}%")
    if bt.shifts is not None:
        for r in bt.shifts.itertuples(index=False):
            print(f"[backtest] {name} {r.family} {r.method}: forecast at C={bt.target_compute:.3g} {r.forecast:.4f}, "
                  f"max leave-one-budget-out shift {r.max_shift:.2f}%")


def backtests(N, D, L, args) -> None:
    from pathlib import Path as _P

    C = 6 * N * D
    epoch = pd.DataFrame(dict(params=N, tokens=D, loss=L, flops=C, slice_flops=nearest_budget(C)))
    with Timer() as t_one:
        fit_chinchilla(N, D, L, grid="coarse", n_boot=200)
        fit_isoflop(epoch[(epoch.flops / epoch.slice_flops - 1).abs() <= 0.15]
                    .groupby(["slice_flops", "params"], as_index=False)["loss"].mean(), n_boot=200)
    with Timer() as t_bt:
        bt = backtest(epoch, n_boot=200, target_compute=5.76e23, methods=("isoflop-powerlaw", "joint"))  # Chinchilla's budget
    print(f"[backtest] Epoch data: {len(bt.table)} forecasts in {t_bt.wall:.1f} s wall = "
          f"x{t_bt.wall / t_one.wall:.1f} one joint + one IsoFLOP fit ({t_one.wall:.2f} s)")
    _bt_print("epoch", bt)
    example = pd.read_csv(_P(__file__).resolve().parents[1] / "src" / "interpscale" / "analysis" / "data"
                          / "example_results.csv")
    with Timer() as t_ex:
        bt = backtest(example, n_boot=200, target_compute=7.6e22, methods=("isoflop-powerlaw", "joint", "bounded"))
    print(f"[backtest] example table: {len(bt.table)} forecasts in {t_ex.wall:.1f} s")
    _bt_print("example", bt)
    from interpscale.scaling import ForecastOptions, forecast_family  # noqa: PLC0415

    rows = example[(example.family == "cdlm+concept") & example.annealed]
    with Timer() as t_fc:  # every method by name, the rolling-origin choice and calibrated intervals
        fc = forecast_family(rows, 7.6e22, options=ForecastOptions(n_boot=200))
    print(f"[forecast] cdlm+concept at 7.6e22: {fc.chosen} (chosen by {fc.chosen_by}) {fc.best.predicted:.4f} "
          f"calibrated [{fc.best.lo:.4f}, {fc.best.hi:.4f}], bootstrap [{fc.best.raw_lo:.4f}, {fc.best.raw_hi:.4f}]; "
          f"{t_fc.wall:.1f} s wall = x{t_fc.wall / t_one.wall:.1f} one joint + one IsoFLOP fit")
    sys.path.insert(0, str(_P(__file__).resolve().parents[1] / "tests" / "scaling"))
    from conftest import chinchilla_grid, isoflop_grid  # noqa: PLC0415 (the tests' synthetic laws)

    frames = []
    for s in range(args.coverage_seeds):
        df, _ = isoflop_grid(0.528, -0.060, seed=300 + s, noise=0.004, slices=(3e18, 6e18, 1e19, 3e19, 1e20))
        frames.append(backtest(df, methods=("isoflop-powerlaw",), n_boot=200, seed=s).to_frame())
        df, _ = chinchilla_grid(seed=300 + s, noise=0.01)
        frames.append(backtest(df, methods=("joint",), n_boot=200, seed=s).to_frame())
    t = pd.concat(frames)
    t = t[t.status == "ok"]
    for (m, q, sc), g in t.groupby(["method", "quantity", "scheme"]):
        print(f"[coverage] synthetic law, {args.coverage_seeds} seeds, {m} {q} {sc}: 90% PI covered "
              f"{g.covered.mean():.3f} of {len(g)} held-out forecasts")


def grid_and_bootstrap(N, D, L, args) -> None:
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


if __name__ == "__main__":
    sys.exit(main())
