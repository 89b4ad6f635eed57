"""Benchmark the published-law fitters (data-constrained, over-training, ladder) against plain
scipy loops, in the same process (a section of ``bench_scaling.py``; also runs alone).

For each law, on the public data in tests/data/scaling_public/:
1. one fit with the authors' recipe (our fitter, no bootstrap);
2. the robust recipe's start grid (Huber on log L): our batched BFGS over all starts vs a plain
   ``scipy.optimize.minimize(method="L-BFGS-B")`` per start with numeric gradients;
3. 1,000 bootstrap replicates: our batched refit (warm-started, analytic gradients) vs a loop of
   L-BFGS-B calls, one per replicate (``--loop-reps`` of them, extrapolated to 1,000).

Usage: .venv/bin/python benchmarks/bench_laws.py [--n-boot 1000] [--loop-reps 100]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from interpscale.scaling import checkpoint_points, fit_data_constrained, fit_ladder, fit_overtraining, read_runs
from interpscale.scaling.bootstrap import Bootstrap
from interpscale.scaling.laws import DataConstrainedLaw, repetition_inputs
from interpscale.scaling.engine import HUBER_DELTA, bootstrap_law, huber, multistart, to_fit_scale
from interpscale.scaling.laws import ROBUST_GRID, SigmoidLaw, TaskLossLaw
from interpscale.scaling.laws import OVERTRAINING_AUTHORS_GRID as OT_GRID, OvertrainingLaw

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "scaling_public"


def scalar_objective(law, X, T, loss):
    """The objective a notebook would write: one parameter vector at a time, numpy only."""

    def f(theta):
        with np.errstate(all="ignore"):
            y = law.model(np.asarray(theta, float)[None, :], X)[0][0]
            if loss == "huber_log":
                return float(huber(np.log(y) - T, HUBER_DELTA)[0].sum()) if (y > 0).all() else 1e10
            return float(((y - T) ** 2).sum())
    return f


def scipy_loop(law, X, T, starts, loss):
    best = np.inf
    for x0 in starts:
        r = minimize(scalar_objective(law, X, T, loss), x0, method="L-BFGS-B")
        best = min(best, r.fun) if np.isfinite(r.fun) else best
    return best


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def bench_law(name, law, X, y, theta, starts, loss, fit_authors, args):
    T = to_fit_scale(y, loss)
    _, t_auth = timed(fit_authors)
    Th = to_fit_scale(y, "huber_log")  # the robust recipe's objective, whatever the authors' loss
    (th, f_ours, *_), t_grid = timed(lambda: multistart(law, X, Th, np.asarray(starts, float), loss="huber_log"))
    f_loop, t_loop = timed(lambda: scipy_loop(law, X, Th, starts, "huber_log"))
    print(f"[{name}] n = {len(y)}: authors' recipe fit {t_auth:.3f} s; robust grid of {len(starts)} starts: "
          f"batched {t_grid:.3f} s (objective {f_ours:.8g}) vs scipy loop {t_loop:.2f} s (best {f_loop:.8g}), "
          f"x{t_loop / t_grid:.1f}")
    spec = Bootstrap(n_boot=args.n_boot, kind="pairs", seed=0)
    (_, n_ok, _), t_boot = timed(lambda: bootstrap_law(law, X, T, theta, spec, loss=loss))
    W = Bootstrap(n_boot=args.loop_reps, kind="pairs", seed=0).weights(np.random.default_rng(0), len(y))

    def loop():
        for w in W:
            keep = np.repeat(np.arange(len(y)), w.astype(int))
            Xs = tuple(x[keep] for x in X) if isinstance(X, tuple) else X[keep]
            minimize(scalar_objective(law, Xs, T[keep], loss), theta, method="L-BFGS-B")
    _, t_bl = timed(loop)
    k = 1000 / args.loop_reps
    t_b1k = t_boot * 1000 / args.n_boot
    print(f"[{name}] 1,000 pairs-bootstrap replicates: batched {t_b1k:.2f} s ({n_ok}/{args.n_boot} converged) vs "
          f"scipy loop {k * t_bl:.1f} s ({args.loop_reps} run, x{k:g}), x{k * t_bl / t_b1k:.1f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--loop-reps", type=int, default=100)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    logging.getLogger("interpscale.scaling").setLevel(logging.ERROR)
    laws(args)
    return 0


def laws(args) -> None:
    d = pd.read_csv(DATA / "datablations_muennighoff2023" / "datablations_fit182.csv")
    N, D, U, L = (d[c].to_numpy(float) for c in ("N", "D", "U", "loss"))
    dc = fit_data_constrained(N, D, U, L, n_boot=0)
    grid = np.log(np.array([(a, b) for a in np.geomspace(0.5, 1000, 8) for b in np.geomspace(0.5, 1000, 8)]))
    bench_law("data-constrained", DataConstrainedLaw(), repetition_inputs(N, D, U), L, np.array(dc.theta), grid,
              "huber_log", lambda: fit_data_constrained(N, D, U, L, n_boot=0), args)

    g = pd.read_csv(DATA / "overtraining_gadre2024" / "gadre_runs.csv")
    g = g[(g.dataset == "rpj") & ~g.model.str.startswith("open_lm")]
    N, D, L = (g[c].to_numpy(float) for c in ("N", "D", "loss_c4_val"))
    ot = fit_overtraining(N, D, L, n_boot=0)
    bench_law("overtraining", OvertrainingLaw(), (N, D), L, np.array(ot.theta), np.array(OT_GRID), "ls",
              lambda: fit_overtraining(N, D, L, n_boot=0), args)

    path = DATA / "olmo_ladder_bhagia2024" / "ladder_runs.csv.gz"
    kw = dict(params="params", tokens="throughput/total_tokens", run="run", step="_step",
              tokens_per_step="batch_size_in_tokens", loss="eval/downstream_bpb/hellaswag_val_rc_5shot_bpb",
              metric="eval/downstream/hellaswag_val_rc_5shot_len_norm")
    runs, steps = read_runs(path, last=5, **kw).frame, read_runs(path, last=None, **kw).frame
    runs, steps = runs[~runs.run.str.startswith("peteish")], steps[~steps.run.str.startswith("peteish")]
    N, D, L = (runs[c].to_numpy(float) for c in ("params", "tokens", "loss"))
    ld = fit_ladder(N, D, L, n_boot=0)
    bench_law("ladder step 1", TaskLossLaw(), (N, D), L, np.array(ld.step1.theta), np.array(ROBUST_GRID), "huber_log",
              lambda: fit_ladder(N, D, L, n_boot=0), args)
    x, y, _ = checkpoint_points(steps.run, steps.loss, steps.metric)
    s2 = fit_ladder(N, D, L, checkpoint_loss=x, checkpoint_accuracy=y, n_boot=0).step2
    p0 = np.array(s2.theta)
    starts = np.array([p0 * [1, s, t, 1] for s in (0.5, 1.0, 2.0) for t in (1.0, 3.0, 10.0)])
    xx, yy = np.append(x, 0.0), np.append(y, 1.0)
    bench_law("ladder step 2", SigmoidLaw(), xx, yy, p0, starts, "ls",
              lambda: fit_ladder(N, D, L, checkpoint_loss=x, checkpoint_accuracy=y, n_boot=0), args)


if __name__ == "__main__":
    sys.exit(main())
