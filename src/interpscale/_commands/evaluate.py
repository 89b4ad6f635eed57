"""``interpscale evaluate RUN_DIR``: evaluate every checkpoint into RUN_DIR/results.parquet."""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir")
    p.add_argument("--estimators", nargs="+", help="default: ar_ce (AR) or mdlm_elbo (diffusion)")
    p.add_argument("--eval-batches", type=int)
    p.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    from interpscale.orchestration import evaluate_run

    try:
        df = evaluate_run(args.run_dir, estimators=args.estimators, eval_batches=args.eval_batches, seed=args.seed)
    except (ValueError, FileNotFoundError) as exc:
        sys.stderr.write(f"interpscale evaluate: {exc}\n")
        return 2
    cols = [c for c in ("step", "annealed", "estimator", "loss", "loss_se", "concept_loss") if c in df.columns]
    sys.stdout.write(df[cols].to_string(index=False) + "\n")
    return 0
