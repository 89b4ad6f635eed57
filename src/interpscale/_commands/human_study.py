"""``interpscale human-study RATINGS.csv [--phase1 FILE] --out DIR``: App. D tables + Figure 14."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from interpscale._commands.options import count, existing_file, given, level, option, out_dir, positive_float, replicates
from interpscale.analysis.human_study import Priors, analyse_study
from interpscale.analysis.human_study.bayes import MASS_MATRICES, SAMPLERS

_STUDY = ("contrast", "reference", "random", "level", "draws", "tune", "chains", "sampler", "mass_matrix",
          "target_accept", "n_boot", "min_rater_ratings", "seed")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ratings", metavar="RATINGS", type=existing_file, help="Phase 2 CSV: rater, concept, candidate_type, label, context, rating")
    parser.add_argument("--phase1", type=existing_file, help="Phase 1 CSV: concept, annotator, name, coherence")
    parser.add_argument("--out", type=out_dir, required=True, help="output directory (created)")
    option(parser, "--reference", analyse_study, help="reference candidate type")
    option(parser, "--contrast", analyse_study, help="candidate type compared with the reference")
    option(parser, "--random", analyse_study,
           help="random-effect terms, comma-separated: a grouping column for an intercept ('rater'), or "
                "'candidate_type|rater' for random slopes in the Bayesian model")
    option(parser, "--level", analyse_study, type=level, help="level of every interval")
    parser.add_argument("--no-bayes", action="store_true", help="skip the MCMC cumulative-link mixed model")
    parser.add_argument("--no-clmm", action="store_true",
                        help="skip the maximum-likelihood (Laplace) cumulative-link mixed model")
    sampling = parser.add_argument_group("Bayesian sampler")
    option(sampling, "--draws", analyse_study, type=count, help="posterior draws per chain")
    option(sampling, "--tune", analyse_study, type=count, help="tuning steps per chain")
    option(sampling, "--chains", analyse_study, type=count)
    option(sampling, "--sampler", analyse_study, choices=SAMPLERS,
           help="NUTS implementation (auto: nutpie when installed)")
    option(sampling, "--mass-matrix", analyse_study, choices=MASS_MATRICES, help="nutpie mass-matrix adaptation")
    option(sampling, "--target-accept", analyse_study, type=float)
    priors = parser.add_argument_group("Bayesian priors (logit scale)")
    option(priors, "--prior-beta-sd", Priors, "beta_sd", type=positive_float, help="Normal SD of the fixed effects")
    option(priors, "--prior-threshold-sd", Priors, "threshold_sd", type=positive_float,
           help="Normal SD of the thresholds")
    option(priors, "--prior-sd-scale", Priors, "sd_scale", type=positive_float,
           help="HalfNormal scale of random-effect SDs")
    option(priors, "--prior-lkj-eta", Priors, "lkj_eta", type=positive_float,
           help="LKJ shape for random-slope correlations")
    option(parser, "--n-boot", analyse_study, type=replicates, help="cluster-bootstrap replicates")
    option(parser, "--min-rater-ratings", analyse_study, type=count,
           help="reject raters with fewer ratings than this (1 keeps everyone)")
    option(parser, "--seed", analyse_study, type=int)


def run(args: argparse.Namespace) -> int:
    priors = Priors(**given(args, beta_sd="prior_beta_sd", threshold_sd="prior_threshold_sd",
                            sd_scale="prior_sd_scale", lkj_eta="prior_lkj_eta"))
    ratings = pd.read_csv(args.ratings)
    phase1 = pd.read_csv(args.phase1) if args.phase1 else None
    report = analyse_study(ratings, phase1, bayes=not args.no_bayes, clmm=not args.no_clmm, priors=priors,
                           **given(args, *_STUDY))
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
