"""``interpscale evaluate RUN_DIR|SWEEP_DIR``: evaluate every checkpoint into results.parquet.

A run directory gets every default estimator and metric of its family; a sweep directory
gets every trained run evaluated (in this process, or through ``--executor``) and its
results collected into SWEEP/results.parquet.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a run directory or a sweep directory")
    p.add_argument("--estimators", nargs="+", help="default: ar_ce (AR) or mdlm_elbo (diffusion)")
    p.add_argument("--eval-batches", type=int)
    p.add_argument("--eval-batch-tokens", type=int, help="tokens per evaluation forward (bounds memory)")
    p.add_argument("--device", help="cpu / cuda (default: cuda when available)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--executor", choices=["local", "slurm", "debug"],
                   help="sweep directory: evaluate through this submitit executor (default: in this process)")


def run(args: argparse.Namespace) -> int:
    from interpscale.orchestration import Sweep, evaluate_run
    from interpscale.orchestration.evaluate import evaluate_runs
    from interpscale.orchestration.rundir import find_run_dirs

    kw = dict(estimators=args.estimators, eval_batches=args.eval_batches, seed=args.seed, device=args.device,
              eval_batch_tokens=args.eval_batch_tokens)
    try:
        target = Path(args.run_dir)
        if not target.exists():
            raise FileNotFoundError(f"{target} does not exist")
        if (target / "spec.json").exists():
            df = evaluate_run(target, **kw)
        elif (target / "sweep.json").exists() and args.executor:
            sw = Sweep.from_dir(target, executor=args.executor)
            sw.evaluate_runs(eval_batch_tokens=args.eval_batch_tokens)
            df = sw.collect()
        else:
            dirs = find_run_dirs(target)
            df = evaluate_runs(dirs, **kw)
            if (target / "sweep.json").exists():
                df = Sweep.from_dir(target).collect()
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        sys.stderr.write(f"interpscale evaluate: {exc}\n")
        return 2
    cols = [c for c in ("run_id", "step", "annealed", "estimator", "loss", "loss_se", "concept_loss")
            if c in df.columns]
    if "run_id" in cols and df["run_id"].nunique() == 1:
        cols.remove("run_id")
    sys.stdout.write(df[cols].to_string(index=False) + "\n")
    return 0
