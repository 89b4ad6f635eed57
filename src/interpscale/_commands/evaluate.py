"""``interpscale evaluate RUN_DIR``: every checkpoint of a run (or of each run under a directory)
into its results; a sweep directory is ``interpscale sweep evaluate SWEEP_DIR``'s."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from interpscale._commands.options import count, given, option
from interpscale.errors import UserError
from interpscale.orchestration import evaluate_run
from interpscale.orchestration.evaluate import evaluate_runs
from interpscale.orchestration.rundir import find_run_dirs


def add_evaluation_options(p: argparse.ArgumentParser) -> None:
    """The options ``evaluate`` and ``sweep evaluate`` share."""
    p.add_argument("--estimators", nargs="+", help="default: ar_ce (AR) or mdlm_elbo (diffusion)")
    p.add_argument("--eval-batches", type=count)
    p.add_argument("--eval-batch-tokens", type=count, help="tokens per evaluation forward (bounds memory)")
    p.add_argument("--device", help="cpu / cuda (default: cuda when available)")
    option(p, "--seed", evaluate_run, type=int)


def evaluation_options(args: argparse.Namespace) -> dict:
    return given(args, "estimators", "eval_batches", "eval_batch_tokens", "device", "seed")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (or a directory of run directories)")
    add_evaluation_options(p)


def run(args: argparse.Namespace) -> int:
    target = Path(args.run_dir)
    if not target.exists():
        raise UserError(f"{target} does not exist")
    one_run = (target / "spec.json").exists()
    if (target / "sweep.json").exists() and not one_run:
        raise UserError(f"{target} is a sweep directory; write `interpscale sweep evaluate {target}` "
                        f"(it evaluates every trained run, then collects)")
    kw = evaluation_options(args)
    df = evaluate_run(target, **kw) if one_run else evaluate_runs(find_run_dirs(target), **kw)
    cols = [c for c in ("run_id", "step", "annealed", "estimator", "loss", "loss_se", "concept_loss")
            if c in df.columns]
    if "run_id" in cols and df["run_id"].nunique() == 1:
        cols.remove("run_id")
    sys.stdout.write(df[cols].to_string(index=False) + "\n")
    return 0
