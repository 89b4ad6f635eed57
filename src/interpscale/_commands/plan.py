"""``interpscale plan``: print the dry-run table of an IsoFLOP sweep."""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="demo", help="preset name (configs/<name>.toml) or a .toml path")
    p.add_argument("--families", nargs="+", help="override the preset's families")
    p.add_argument("--sizes", nargs="+", help="override the preset's sizes (all planned, infeasible flagged)")
    p.add_argument("--slices", nargs="+", type=float, help="slice targets C shared by all families")
    p.add_argument("--seq-len", type=int)
    p.add_argument("--batch-tokens", type=int)
    p.add_argument("--tolerance", type=float)
    p.add_argument("--device", choices=["h100", "a100", "cpu"],
                   help="runtime table: dense bf16 peak x --mfu (cpu: a timed matmul); default h100 for GPU "
                        "presets, else cpu")
    p.add_argument("--mfu", type=float, help="model FLOPs utilisation assumed (default 0.40 on GPUs, 0.30 cpu)")
    p.add_argument("--flops-per-s", type=float, help="sustained FLOP/s for the runtime estimate (overrides --device)")
    p.add_argument("--all", action="store_true", help="also list skipped / infeasible points")
    p.add_argument("--csv", help="write the dry-run table to this CSV")


def run(args: argparse.Namespace) -> int:
    from interpscale.orchestration.planner import plan

    try:
        pl = plan(args.preset, families=args.families, sizes=args.sizes, slices=args.slices, seq_len=args.seq_len,
                  batch_tokens=args.batch_tokens, tolerance=args.tolerance, flops_per_s=args.flops_per_s,
                  device=args.device, mfu=args.mfu, strict=False)
    except ValueError as exc:
        sys.stderr.write(f"interpscale plan: {exc}\n")
        return 2
    if not args.all:
        pl.table = pl.table[pl.table.status == "ok"]
    sys.stdout.write(pl.summary() + "\n")
    if args.csv:
        pl.table.to_csv(args.csv, index=False)
    return 0
