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
    parser.add_argument("--no-bayes", action="store_true", help="skip the MCMC cumulative-link mixed model")
    parser.add_argument("--draws", type=int, default=1000, help="posterior draws per chain (default 1000)")
    parser.add_argument("--tune", type=int, default=1000, help="tuning steps per chain (default 1000)")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--n-boot", type=int, default=2000, help="cluster-bootstrap replicates (default 2000)")
    parser.add_argument("--min-rater-ratings", type=int, default=2,
                        help="reject raters with fewer ratings than this (default 2; 1 keeps everyone)")
    parser.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from interpscale.analysis.human_study import analyse_study

    try:
        ratings = pd.read_csv(args.ratings)
        phase1 = pd.read_csv(args.phase1) if args.phase1 else None
        report = analyse_study(ratings, phase1, contrast=args.contrast, reference=args.reference,
                               bayes=not args.no_bayes, draws=args.draws, tune=args.tune, chains=args.chains,
                               n_boot=args.n_boot, min_rater_ratings=args.min_rater_ratings, seed=args.seed)
    except (ValueError, FileNotFoundError) as exc:
        sys.stderr.write(f"interpscale human-study: {exc}\n")
        return 2
    paths = report.write(args.out)
    sys.stdout.write(report.table21().to_string(index=False) + "\n")
    sys.stdout.write("wrote " + ", ".join(str(p) for p in paths) + "\n")
    if report.bayes is not None and report.bayes.warnings:
        sys.stderr.write("MCMC diagnostics: " + "; ".join(report.bayes.warnings) + "\n")
    return 0
