"""``interpscale sweep launch|status|collect|evaluate``.

    interpscale sweep launch --preset demo-quick --out runs/x [--executor local|slurm|debug]
    interpscale sweep launch --preset paper --out runs/p --nodes 2 --gpus-per-node 8
    interpscale sweep status runs/x | interpscale sweep collect runs/x | interpscale sweep evaluate runs/x

``sweep launch`` needs ``--preset`` (the embedded demo end to end is ``interpscale demo``).
The old spelling ``interpscale sweep --preset P --out DIR`` still launches, with a deprecation line.
"""

from __future__ import annotations

import argparse
import sys

from interpscale._commands.evaluate import add_evaluation_options, evaluation_options
from interpscale._commands.plan import PRESET_HELP

VERBS = ("launch", "status", "collect", "evaluate")
DEFAULT_VERB = "launch"  # `interpscale sweep --preset P` (deprecated spelling)


def _sweep_dir(p: argparse.ArgumentParser, required_help: str = "sweep directory") -> None:
    p.add_argument("sweep_dir", nargs="?", metavar="SWEEP_DIR", help=required_help)
    p.add_argument("--out", help="the sweep directory (same as SWEEP_DIR)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from interpscale.orchestration.launch import EXECUTORS
    from interpscale.orchestration.parallel import PARALLEL

    sub = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    la = sub.add_parser("launch", help="plan a preset and train every run of it", description=__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    _sweep_dir(la)
    la.add_argument("--preset", required=True, help=PRESET_HELP)
    la.add_argument("--families", nargs="+", help="override the preset's families")
    la.add_argument("--executor", choices=EXECUTORS, help="default: the preset's [launch] executor, else local")
    la.add_argument("--max-parallel", type=int)
    la.add_argument("--runs-per-job", type=int)
    la.add_argument("--partition", help="slurm partition")
    la.add_argument("--timeout-min", type=int, help="slurm/local job time limit")
    la.add_argument("--nodes", type=int, help="nodes per run (multi-node data parallel)")
    la.add_argument("--gpus-per-node", type=int, help="GPUs per node = tasks per node (one rank per GPU)")
    la.add_argument("--micro-batch-tokens", type=int,
                    help="tokens per rank per micro-batch (gradient accumulation); the global batch is unchanged")
    la.add_argument("--parallel", choices=PARALLEL, help="data parallelism (default: the preset's, else ddp)")
    la.add_argument("--no-compile", action="store_true", help="do not torch.compile the loss (CUDA default: on)")
    la.add_argument("--extend", action="store_true",
                    help="add the plan's new runs to an existing sweep directory (same data only)")
    st = sub.add_parser("status", help="one line per run: state, step, loss")
    _sweep_dir(st)
    co = sub.add_parser("collect", help="merge every run's evaluations into SWEEP_DIR/results.parquet (+ .csv)")
    _sweep_dir(co)
    ev = sub.add_parser("evaluate", help="evaluate every trained run, then collect")
    _sweep_dir(ev)
    add_evaluation_options(ev)
    ev.add_argument("--executor", choices=EXECUTORS,
                    help="evaluate through this submitit executor (default: in this process)")


def _launch(args: argparse.Namespace, out: str) -> int:
    from interpscale.orchestration import Sweep, plan

    sw = Sweep.from_plan(plan(args.preset, families=args.families), out, executor=args.executor,
                         max_parallel=args.max_parallel, runs_per_job=args.runs_per_job, partition=args.partition,
                         timeout_min=args.timeout_min, gpus_per_node=args.gpus_per_node, nodes=args.nodes,
                         micro_batch_tokens=args.micro_batch_tokens, parallel=args.parallel,
                         compile=False if args.no_compile else None, extend=args.extend or None)
    sw.launch()
    sw.collect()
    sys.stdout.write(sw.status().to_string(index=False) + "\n")
    return 0


def evaluate_sweep(out: str, args: argparse.Namespace):
    """``sweep evaluate``: every trained run of the sweep at ``out``; returns its collected table."""
    from interpscale.orchestration import Sweep

    sw = Sweep.from_dir(out, **({"executor": args.executor} if args.executor else {}))
    if args.executor:
        sw.evaluate_runs(eval_batch_tokens=args.eval_batch_tokens)
    else:
        from interpscale.orchestration.evaluate import evaluate_runs

        evaluate_runs([sw.run_dir(r) for r in sw.runs], **evaluation_options(args))
    return sw.collect()


def run(args: argparse.Namespace) -> int:
    from interpscale.errors import UserError
    from interpscale.orchestration import Sweep

    out = args.sweep_dir or args.out
    if not out:
        raise UserError(f"no sweep directory: pass it (interpscale sweep {args.verb} runs/x) or --out DIR")
    if args.verb == "launch":
        return _launch(args, out)
    if args.verb == "status":
        sys.stdout.write(Sweep.from_dir(out).status().to_string(index=False) + "\n")
        return 0
    df = evaluate_sweep(out, args) if args.verb == "evaluate" else Sweep.from_dir(out).collect()
    sys.stdout.write(f"{len(df)} rows -> {out}/results.parquet (+ .csv)\n")
    return 0
