"""``interpscale sweep [launch|status|collect|evaluate]``.

    interpscale sweep --preset demo --out runs/x [--executor local|slurm|debug]   (launch)
    interpscale sweep launch --preset paper --out runs/p --nodes 2 --gpus-per-node 8
    interpscale sweep status runs/x | interpscale sweep collect runs/x
"""

from __future__ import annotations

import argparse
import sys

ACTIONS = ("launch", "status", "collect", "evaluate")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", nargs="?", default="launch", choices=ACTIONS,
                   help="launch (default) | status | collect | evaluate")
    p.add_argument("sweep_dir", nargs="?", help="sweep directory (same as --out)")
    p.add_argument("--out", help="sweep directory")
    p.add_argument("--preset", default="demo", help="launch: preset name or .toml path")
    p.add_argument("--families", nargs="+")
    p.add_argument("--executor", choices=["local", "slurm", "debug"])
    p.add_argument("--max-parallel", type=int)
    p.add_argument("--runs-per-job", type=int)
    p.add_argument("--partition", help="slurm partition")
    p.add_argument("--timeout-min", type=int, help="slurm/local job time limit")
    p.add_argument("--nodes", type=int, help="nodes per run (multi-node data parallel)")
    p.add_argument("--gpus-per-node", type=int, help="GPUs per node = tasks per node (one rank per GPU)")
    p.add_argument("--micro-batch-tokens", type=int,
                   help="tokens per rank per micro-batch (gradient accumulation); the global batch is unchanged")
    p.add_argument("--parallel", choices=["ddp", "fsdp"], help="data parallelism: ddp (default) or fsdp (FSDP2)")
    p.add_argument("--no-compile", action="store_true", help="do not torch.compile the loss (CUDA default: on)")


def _launch(args: argparse.Namespace, out: str) -> int:
    from interpscale.orchestration import Sweep, plan

    pl = plan(args.preset, families=args.families)
    lc = pl.launch
    slurm = {k: v for k, v in lc.items() if k in ("timeout_min", "gpus_per_node", "cpus_per_task", "mem_gb",
                                                  "max_array_size")}
    if lc.get("partition") or lc.get("slurm_partition"):
        slurm["slurm_partition"] = lc.get("partition") or lc.get("slurm_partition")
    if args.partition:
        slurm["slurm_partition"] = args.partition
    if args.timeout_min:
        slurm["timeout_min"] = args.timeout_min
    tasks = args.gpus_per_node or lc.get("tasks_per_node") or lc.get("gpus_per_node") or 1
    executor = args.executor or lc.get("executor", "local")
    if args.gpus_per_node:
        slurm["gpus_per_node"] = args.gpus_per_node
    if executor != "slurm":
        slurm.pop("gpus_per_node", None)
    sw = Sweep(pl.runs, out, executor=executor,
               max_parallel=args.max_parallel or lc.get("max_parallel", 2),
               runs_per_job=args.runs_per_job or lc.get("runs_per_job", 1),
               threads_per_job=lc.get("threads_per_job", 1), slurm=slurm, tasks_per_node=int(tasks),
               nodes=args.nodes or lc.get("nodes", 1),
               micro_batch_tokens=args.micro_batch_tokens or lc.get("micro_batch_tokens"),
               parallel=args.parallel or lc.get("parallel", "ddp"),
               compile=False if args.no_compile else lc.get("compile"))
    sw.launch()
    sw.collect()
    sys.stdout.write(sw.status().to_string(index=False) + "\n")
    return 0


def run(args: argparse.Namespace) -> int:
    from interpscale.orchestration import Sweep

    out = args.sweep_dir or args.out
    try:
        if not out:
            raise ValueError("no sweep directory: pass it (interpscale sweep status runs/x) or --out DIR")
        if args.action == "launch":
            return _launch(args, out)
        sw = Sweep.from_dir(out, **({"executor": args.executor} if args.executor else {}))
        if args.action == "status":
            sys.stdout.write(sw.status().to_string(index=False) + "\n")
        elif args.action == "evaluate":
            if args.executor:
                sw.evaluate_runs()
            else:
                from interpscale.orchestration.evaluate import evaluate_runs

                evaluate_runs([sw.run_dir(r) for r in sw.runs])
            df = sw.collect()
            sys.stdout.write(f"{len(df)} rows -> {sw.out_dir}/results.parquet (+ .csv)\n")
        else:
            df = sw.collect()
            sys.stdout.write(f"{len(df)} rows -> {sw.out_dir}/results.parquet (+ .csv)\n")
        return 0
    except (ValueError, PermissionError, RuntimeError) as exc:
        sys.stderr.write(f"interpscale sweep {args.action}: {exc}\n")
        return 2
