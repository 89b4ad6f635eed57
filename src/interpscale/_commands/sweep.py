"""``interpscale sweep launch|status|collect|evaluate``.

    interpscale sweep launch --preset demo-quick --out runs/x [--executor local|slurm|debug]
    interpscale sweep launch --preset paper --out runs/p --nodes 2 --gpus-per-node 8
    interpscale sweep status runs/x | interpscale sweep collect runs/x | interpscale sweep evaluate runs/x

``sweep launch`` needs ``--preset`` (the embedded demo end to end is ``interpscale demo``).
The old spelling ``interpscale sweep --preset P --out DIR`` still launches, with a deprecation line.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

from interpscale._commands.evaluate import add_evaluation_options, evaluation_options
from interpscale._commands.options import count, given, option, positive_float
from interpscale._commands.plan import PRESET_HELP
from interpscale.errors import UserError
from interpscale.executors import EXECUTORS
from interpscale.orchestration import PlanOptions, Preset, Sweep, plan
from interpscale.orchestration.adaptive import adaptive_sweep
from interpscale.orchestration.config import LaunchConfig, TrainConfig, add_flags, flag_values
from interpscale.orchestration.evaluate import evaluate_runs
from interpscale.orchestration.outcome import SweepIncomplete, SweepOutcome
from interpscale.orchestration.rundir import check_writable, read_manifest
from interpscale.orchestration.runtime import estimate_line, retiming

VERBS = ("launch", "status", "collect", "evaluate")
DEFAULT_VERB = "launch"  # `interpscale sweep --preset P` (deprecated spelling)


def _sweep_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep_dir", nargs="?", metavar="SWEEP_DIR", help="sweep directory")
    p.add_argument("--out", help="the sweep directory (same as SWEEP_DIR)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    la = sub.add_parser("launch", help="plan a preset and train every run of it", description=__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    _sweep_dir(la)
    la.add_argument("--preset", required=True, help=PRESET_HELP)
    la.add_argument("--families", nargs="+", help="override the preset's families")
    add_flags(la, LaunchConfig)  # --executor, --max-parallel, ... (LaunchConfig's fields)
    add_flags(la, TrainConfig)  # --micro-batch-tokens, --parallel, --compile/--no-compile, ... (TrainConfig's)
    la.add_argument("--force", action="store_true", help="plan runs that would train for more than a year")
    la.add_argument("--retime", action="store_true",
                    help="time the training steps again for the runtime estimate (default: this machine's stored "
                         "timings, and the estimate the sweep directory keeps)")
    la.add_argument("--extend", action="store_true",
                    help="add the plan's new runs to an existing sweep directory (same data only)")
    la.add_argument("--adaptive", action="store_true",
                    help="train, fit each slice's parabola, add sizes beyond edge minima until every slice brackets "
                         "its optimum (docs/data.md, 'Sweeping a new corpus'); [plan] sizes become optional")
    option(la, "--max-added", adaptive_sweep, "max_added", type=count, metavar="N",
           help="adaptive: at most N sizes added per slice")
    option(la, "--budget", adaptive_sweep, "budget", type=positive_float, metavar="X",
           help="adaptive: all runs together at most X times the first grid's FLOPs (past --max-added only in a "
                "slice's trend direction)")
    option(la, "--max-seeds", adaptive_sweep, "max_seeds", type=count, metavar="N",
           help="adaptive: up to N seeds per size where a slice's curvature is not significant")
    option(la, "--tokens-per-param", adaptive_sweep, "tokens_per_param", type=positive_float, metavar="R",
           help="adaptive: the first grid centres on the size trained at R tokens per parameter at the smallest "
                "slice, scaled to the others by the family's alpha_P (Table 6)")
    for verb, text in (("status", "one line per run: state, steps trained of planned; then the counts and the ETA"),
                       ("collect", "merge every run's evaluations into SWEEP_DIR/results.parquet (+ .csv)"),
                       ("evaluate", "evaluate every trained run, then collect")):
        _sweep_dir(ev := sub.add_parser(verb, help=text))
    add_evaluation_options(ev)  # the last parser: evaluate
    ev.add_argument("--executor", choices=EXECUTORS,
                    help="evaluate through this submitit executor (default: in this process)")


def _launch(args: argparse.Namespace, out: str) -> int:
    from interpscale.orchestration.runtime import estimate_report

    check_writable(out)  # before planning: a path that cannot be written fails now, not after the plan
    # the launch and trainer flags as Sweep.from_plan overrides (None keeps the preset's)
    opts = {**flag_values(args, LaunchConfig), **flag_values(args, TrainConfig), "extend": args.extend or None}
    if args.adaptive:  # judged by the IsoFLOP fit's own slice parabola
        from interpscale.scaling.isoflop import slice_minimum

        result = adaptive_sweep(args.preset, out, slice_minimum=slice_minimum, families=args.families,
                                extend=bool(opts.pop("extend")),
                                **given(args, "max_added", "tokens_per_param", "budget", "max_seeds"), **opts)
        sys.stdout.write(result.sweep.status().to_string(index=False) + "\n" + result.summary() + "\n")
        result.check()  # FailedWork, exit 1, naming each slice not bracketed and what would bracket it
        return 0
    with retiming() if args.retime else contextlib.nullcontext():
        p = plan(Preset.load(args.preset, families=args.families), PlanOptions(force=args.force))
    kept = read_manifest(out)["estimate"] if Path(out, "sweep.json").is_file() else {}
    if kept and not args.retime and set(kept.get("runs", {})) >= {r.run_id for r in p.runs}:
        p.estimate = kept  # the estimate this sweep was first launched with, not a second one
    sw = Sweep.from_plan(p, out, **opts)
    sys.stderr.write(f"sweep {Path(out).name}: {estimate_line(sw.estimate)}\n")
    t0, since, incomplete = time.monotonic(), time.time(), None
    try:
        sw.launch()
    except SweepIncomplete as exc:  # the table and the estimate first, then the one line and exit 1
        incomplete = exc
    sw.collect()
    runs = [sw.run_dir(r) for r in sw.runs]
    sys.stdout.write(sw.status().to_string(index=False) + "\n")
    sys.stdout.write(estimate_report(sw.estimate, time.monotonic() - t0, runs, since=since) + "\n")
    if incomplete is not None:
        raise incomplete
    sys.stdout.write(SweepOutcome.read(sw.out_dir.name, runs).line() + "\n")
    return 0


def run(args: argparse.Namespace) -> int:
    out = args.sweep_dir or args.out
    if not out:
        raise UserError(f"no sweep directory: pass it (interpscale sweep {args.verb} runs/x) or --out DIR")
    if args.verb == "launch":
        return _launch(args, out)
    sw = Sweep.from_dir(out, **given(args, "executor"))
    if args.verb == "status":
        table = sw.status()
        sys.stdout.write(table.to_string(index=False) + f"\n{len(table)} runs: {sw.state().summary()}\n")
        return 0
    if args.verb == "evaluate" and args.executor:  # every trained run, then collect
        sw.evaluate_runs(eval_batch_tokens=args.eval_batch_tokens)
    elif args.verb == "evaluate":
        evaluate_runs([sw.run_dir(r) for r in sw.runs], **evaluation_options(args))
    df = sw.collect()
    sys.stdout.write(f"{len(df)} rows -> {out}/results.parquet (+ .csv)\n")
    return 0
