"""``interpscale demo [--quick] [--out DIR]``: the embedded sweep end to end (what `make demo` runs)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from interpscale._commands.options import count, out_dir
from interpscale.errors import FailedWork


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="the small CI version (about a minute on 2 idle cores)")
    p.add_argument("--out", default=None, type=out_dir, help="output directory (default runs/demo or runs/demo-quick)")
    p.add_argument("--max-parallel", type=count, help="jobs at once (default: the preset's, 2)")
    p.add_argument("--preset", default=None,
                   help="run another preset (name or TOML path) through the same pipeline, e.g. demo-zoo")
    p.add_argument("--n-boot", type=count, default=None, help="bootstrap replicates for the fits (default: the preset's)")


def run(args: argparse.Namespace) -> int:
    from interpscale.pipeline import run_demo

    # stage lines at INFO, so a terminal shows what runs next; -v still raises to DEBUG
    logging.getLogger("interpscale.pipeline").setLevel(min(logging.getLogger().level, logging.INFO))
    name = Path(args.preset).stem if args.preset else ("demo-quick" if args.quick else "demo")
    out = args.out or f"runs/{name}"
    summary = run_demo(out, quick=args.quick, max_parallel=args.max_parallel, preset=args.preset, n_boot=args.n_boot)
    sys.stdout.write(json.dumps(summary, indent=1) + "\n")
    if summary.get("problems"):
        sys.stderr.write("interpscale demo: finished with problems:\n" + "".join(f"  - {p}\n" for p in summary["problems"]))
    if not summary.get("sweep_complete", True):  # the sweep's one summary line; exit 1
        raise FailedWork(summary["sweep"])
    sys.stdout.write(summary.get("sweep", "") + "\n")
    return 0
