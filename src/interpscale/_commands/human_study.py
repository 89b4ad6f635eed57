"""``interpscale human-study RATINGS.csv [--phase1 FILE] --out DIR``: App. D tables + Figure 14."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ratings", type=Path, help="Phase 2 CSV: rater, concept, candidate_type, label, context, rating")
    parser.add_argument("--phase1", type=Path, help="Phase 1 CSV: concept, annotator, name, coherence")
    parser.add_argument("--out", type=Path, required=True, help="output directory (created)")
    parser.add_argument("--reference", default="human", help="reference candidate type (default: human)")
    parser.add_argument("--contrast", default="llm", help="candidate type compared with the reference (default: llm)")
    parser.add_argument("--random", default="rater,concept,context,label",
                        help="random-effect terms, comma-separated: a grouping column for an intercept "
                             "('rater'), or 'candidate_type|rater' for random slopes in the Bayesian model "
                             "(default: rater,concept,context,label)")
    parser.add_argument("--level", type=float, default=0.95, help="level of every interval (default 0.95)")
    parser.add_argument("--no-bayes", action="store_true", help="skip the MCMC cumulative-link mixed model")
    parser.add_argument("--no-clmm", action="store_true",
                        help="skip the maximum-likelihood (Laplace) cumulative-link mixed model")
    sampling = parser.add_argument_group("Bayesian sampler")
    sampling.add_argument("--draws", type=int, default=1000, help="posterior draws per chain (default 1000)")
    sampling.add_argument("--tune", type=int, default=1000, help="tuning steps per chain (default 1000)")
    sampling.add_argument("--chains", type=int, default=4)
    sampling.add_argument("--sampler", choices=("auto", "nutpie", "pymc"), default="auto",
                          help="NUTS implementation (default auto: nutpie when installed)")
    sampling.add_argument("--mass-matrix", choices=("low-rank", "diag"), default="low-rank",
                          help="nutpie mass-matrix adaptation (default low-rank)")
    sampling.add_argument("--target-accept", type=float, default=0.95)
    priors = parser.add_argument_group("Bayesian priors (logit scale)")
    priors.add_argument("--prior-beta-sd", type=float, default=2.5, help="Normal SD of the fixed effects (2.5)")
    priors.add_argument("--prior-threshold-sd", type=float, default=5.0, help="Normal SD of the thresholds (5)")
    priors.add_argument("--prior-sd-scale", type=float, default=1.0, help="HalfNormal scale of random-effect SDs (1)")
    priors.add_argument("--prior-lkj-eta", type=float, default=2.0, help="LKJ shape for random-slope correlations (2)")
    parser.add_argument("--n-boot", type=int, default=2000, help="cluster-bootstrap replicates (default 2000)")
    parser.add_argument("--min-rater-ratings", type=int, default=2,
                        help="reject raters with fewer ratings than this (default 2; 1 keeps everyone)")
    parser.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from interpscale.analysis.human_study import Priors, analyse_study

    try:
        priors = Priors(beta_sd=args.prior_beta_sd, threshold_sd=args.prior_threshold_sd,
                        sd_scale=args.prior_sd_scale, lkj_eta=args.prior_lkj_eta)
        ratings = pd.read_csv(args.ratings)
        phase1 = pd.read_csv(args.phase1) if args.phase1 else None
        report = analyse_study(ratings, phase1, contrast=args.contrast, reference=args.reference,
                               bayes=not args.no_bayes, clmm=not args.no_clmm, random=args.random,
                               level=args.level, draws=args.draws, tune=args.tune, chains=args.chains,
                               sampler=args.sampler, mass_matrix=args.mass_matrix,
                               target_accept=args.target_accept, priors=priors, n_boot=args.n_boot,
                               min_rater_ratings=args.min_rater_ratings, seed=args.seed)
    except (ValueError, FileNotFoundError) as exc:
        sys.stderr.write(f"interpscale human-study: {exc}\n")
        return 2
    paths = report.write(args.out)
    sys.stdout.write(report.table21().to_string(index=False) + "\n")
    sys.stdout.write("wrote " + ", ".join(str(p) for p in paths) + "\n")
    if report.bayes is not None:
        d = report.bayes.diagnostics
        comp = "" if d.compile_seconds != d.compile_seconds else f"compile {d.compile_seconds:.1f} s, "
        sys.stdout.write(f"MCMC: {comp}sampling {d.sampling_seconds:.1f} s; max R-hat {d.max_rhat:.3f}, "
                         f"min bulk ESS {d.min_ess_bulk:.0f}\n")
        if report.bayes.warnings:
            sys.stderr.write("MCMC diagnostics: " + "; ".join(report.bayes.warnings) + "\n")
    if report.ordinal_mixed is not None and report.ordinal_mixed.warnings:
        sys.stderr.write("clmm: " + "; ".join(report.ordinal_mixed.warnings) + "\n")
    return 0
