"""``interpscale sweep launch|status|collect``."""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["launch", "status", "collect"])
    p.add_argument("--out", required=True, help="sweep directory")
    p.add_argument("--preset", default="demo", help="launch: preset name or .toml path")
    p.add_argument("--families", nargs="+")
    p.add_argument("--executor", choices=["local", "slurm", "debug"])
    p.add_argument("--max-parallel", type=int)
    p.add_argument("--runs-per-job", type=int)
    p.add_argument("--partition", help="slurm partition")
    p.add_argument("--timeout-min", type=int, help="slurm/local job time limit")


def run(args: argparse.Namespace) -> int:
    from interpscale.orchestration import Sweep, plan

    try:
        if args.action == "launch":
            pl = plan(args.preset, families=args.families)
            lc = pl.launch
            slurm = {k: v for k, v in lc.items() if k in ("timeout_min", "gpus_per_node", "cpus_per_task",
                                                         "mem_gb", "max_array_size")}
            if args.partition:
                slurm["slurm_partition"] = args.partition
            if args.timeout_min:
                slurm["timeout_min"] = args.timeout_min
            sw = Sweep(pl.runs, args.out, executor=args.executor or lc.get("executor", "local"),
                       max_parallel=args.max_parallel or lc.get("max_parallel", 2),
                       runs_per_job=args.runs_per_job or lc.get("runs_per_job", 1),
                       threads_per_job=lc.get("threads_per_job", 1), slurm=slurm)
            sw.launch()
            sw.collect()
            sys.stdout.write(sw.status().to_string(index=False) + "\n")
            return 0
        sw = Sweep.from_dir(args.out)
        if args.action == "status":
            sys.stdout.write(sw.status().to_string(index=False) + "\n")
        else:
            df = sw.collect()
            sys.stdout.write(f"{len(df)} rows -> {sw.out_dir}/results.parquet (+ .csv)\n")
        return 0
    except (ValueError, PermissionError, RuntimeError) as exc:
        sys.stderr.write(f"interpscale sweep {args.action}: {exc}\n")
        return 2
