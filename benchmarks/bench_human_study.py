"""Benchmark: the App. D.3 Bayesian cumulative-link mixed model on a paper-sized study.

1. Full model (1,025 ratings; rater, concept, context, label intercepts), nutpie with its
   default diagonal mass matrix vs its low-rank adaptation (baseline, same process, same
   compiled model): wall time, CPU time, max R-hat, divergences, min bulk ESS per second.
2. Coverage: the 95% CrI of the LLM-vs-human log-odds ratio over N resimulated studies.
3. Gaussian crossed mixed model: our REML engine vs statsmodels MixedLM (baseline).
4. Maximum-likelihood cumulative-link mixed model (R clmm equivalent, Laplace) at the paper's
   size: wall time vs the cumulative-link model without random effects (baseline, statsmodels
   OrderedModel), same process. ``--only-laplace`` runs just this line.

    .venv/bin/python benchmarks/bench_human_study.py [--seeds 20] [--quick]
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20, help="coverage replications")
    ap.add_argument("--quick", action="store_true", help="fewer draws / seeds (smoke run)")
    ap.add_argument("--no-mixedlm", action="store_true", help="skip the (slow) statsmodels MixedLM baseline")
    ap.add_argument("--only-laplace", action="store_true", help="only the Laplace clmm timing (section 4)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    from interpscale.analysis.human_study import simulate_study

    if args.only_laplace:
        laplace(simulate_study(seed=0))
        return
    from interpscale.analysis.human_study.bayes import OrdinalMixedModel

    draws, tune, seeds = (500, 500, 4) if args.quick else (2000, 1000, args.seeds)
    study = simulate_study(seed=0)
    print(f"study: {len(study.ratings)} ratings, {study.ratings['context'].nunique()} contexts, "
          f"{study.ratings['label'].nunique()} labels, {study.ratings['concept'].nunique()} concepts, 8 raters")

    model, w_build, c_build = timed(lambda: OrdinalMixedModel(study.ratings))
    _, w_comp, c_comp = timed(lambda: model.fit(draws=5, tune=5, chains=1, seed=0, ess_min=0))  # numba compile
    rows = []
    for name, low_rank in (("nutpie diagonal (default)", False), ("nutpie low-rank (baseline)", True)):
        fit, wall, cpu = timed(lambda: model.fit(draws=draws, tune=tune, chains=4, seed=1, target_accept=0.95,
                                                 sampler_kwargs={"low_rank_modified_mass_matrix": low_rank}))
        d = fit.diagnostics
        rows.append((name, wall, cpu, d.max_rhat, d.divergences, d.min_ess_bulk, d.min_ess_bulk / wall))
        if not low_rank:
            print(fit.summary())
    print(f"\nmodel build {w_build:.1f} s; numba compile + 10-step fit {w_comp:.1f} s wall, {c_comp:.1f} s cpu "
          "(paid once per design)")
    print(f"{'sampler':28s} {'wall s':>7s} {'cpu s':>7s} {'R-hat':>6s} {'div':>4s} {'ESS':>6s} {'ESS/s':>6s}")
    for r in rows:
        print(f"{r[0]:28s} {r[1]:7.1f} {r[2]:7.1f} {r[3]:6.3f} {r[4]:4d} {r[5]:6.0f} {r[6]:6.1f}")
    print(f"ESS/s ratio default / baseline: {rows[0][6] / rows[1][6]:.2f}x; end-to-end (build + compile + "
          f"sample) default {w_build + w_comp + rows[0][1]:.1f} s wall")

    if seeds > 0:
        coverage(model, study, seeds)
    if not args.no_mixedlm:
        mixed(study)


def coverage(model, study, seeds: int) -> None:
    from interpscale.analysis.human_study.simulate import resimulate

    truth = study.truth.effects["llm"]
    hits, widths = [], []
    t0 = time.perf_counter()
    for s in range(seeds):
        y = resimulate(study.ratings, study.truth, seed=1000 + s)["rating"]
        f = model.fit(y, draws=500, tune=500, chains=2, seed=s, ess_min=0)
        lo, hi = f.ci["candidate_type[llm]"]
        hits.append(lo <= truth <= hi)
        widths.append(hi - lo)
    print(f"\ncoverage of the true LLM log-OR {truth:.3f} by the 95% CrI: {np.mean(hits):.2f} "
          f"({sum(hits)}/{seeds}); median width {np.median(widths):.2f}; "
          f"{(time.perf_counter() - t0) / seeds:.1f} s per refit")


def mixed(study) -> None:
    from interpscale.analysis.human_study import fit_gaussian_mixed

    g, w_ours, _ = timed(lambda: fit_gaussian_mixed(study.ratings))
    sm, w_sm, _ = timed(lambda: fit_gaussian_mixed(study.ratings, engine="statsmodels"))
    k = "candidate_type[llm]"
    print(f"\nGaussian mixed model, 4 crossed effects: REML engine {w_ours:.1f} s vs statsmodels MixedLM "
          f"{w_sm:.1f} s ({w_sm / w_ours:.1f}x); LLM contrast {g.coef[k]:+.3f} vs {sm.coef[k]:+.3f}")


def laplace(study) -> None:
    from interpscale.analysis.human_study import fit_ordinal

    fit_ordinal(study.ratings.head(200), random="rater")  # imports and warm-up outside the timing
    clm, w_clm, _ = timed(lambda: fit_ordinal(study.ratings))
    k = "candidate_type[llm]"
    print(f"\nLaplace clmm, {len(study.ratings)} ratings; baseline clm (no random effects) {w_clm:.2f} s, "
          f"LLM log-OR {clm.coef[k]:.3f}")
    for random in ("rater,concept", "rater,concept,context,label"):
        f, w, c = timed(lambda: fit_ordinal(study.ratings, random=random))
        sds = ", ".join(f"{g} {v:.3f}" for g, v in f.random_sd.items())
        print(f"  ({random}): {w:.2f} s wall, {c:.2f} s cpu ({w / w_clm:.1f}x clm); LLM log-OR {f.coef[k]:.3f} "
              f"(SE {f.se[k]:.3f}); SDs {sds}; logLik {f.loglik:.2f}; converged {f.converged}")


if __name__ == "__main__":
    main()
