"""``interpscale report RESULTS --out DIR``: report.md + report.html with fits, warnings and figures."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from interpscale._commands.figures import expand_run_dirs, load_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", help="results table (.parquet or .csv), or 'example' for the bundled example table")
    parser.add_argument("--out", required=True, type=Path, help="directory for report.md, report.html and figures/")
    parser.add_argument("--run-dirs", nargs="*", type=Path, default=(), help="run directories for the loss-curve figure")
    parser.add_argument("--n-boot", type=int, default=1000,
                        help="bootstrap replicates for the fitted CIs (default 1000; the paper used 10000)")
    parser.add_argument("--no-figures", action="store_true", help="tables and warnings only")


def run(args: argparse.Namespace) -> int:
    from interpscale.analysis.report import write_report

    try:
        df = load_table(args.results)
        path = write_report(df, args.out, run_dirs=expand_run_dirs(args.run_dirs), n_boot=args.n_boot,
                            figures=not args.no_figures,
                            source="bundled example table" if args.results == "example" else args.results)
    except ValueError as exc:
        sys.stderr.write(f"interpscale report: {exc}\n")
        return 2
    sys.stdout.write(f"{path}\n{path.with_suffix('.html')}\n")
    return 0
