"""``interpscale report RESULTS --out DIR``: report.md + report.html with fits, warnings and figures."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from interpscale import paper
from interpscale._commands.figures import TABLE_FIELDS, expand_run_dirs, load_table
from interpscale._commands.options import add_columns, column_map, given, option
from interpscale.analysis.example_data import steerling_actual
from interpscale.analysis.report import write_report
from interpscale.scaling import keep_repeats


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", help="results table (.parquet or .csv), or 'example' for the bundled example table")
    parser.add_argument("--out", required=True, type=Path, help="directory for report.md, report.html and figures/")
    parser.add_argument("--run-dirs", nargs="*", type=Path, default=(), help="run directories for the loss-curve figure")
    option(parser, "--n-boot", write_report, type=int,
           help="bootstrap replicates for the fitted CIs (the paper used 10000)")
    parser.add_argument("--no-figures", action="store_true", help="tables and warnings only")
    parser.add_argument("--target-compute", type=float, default=None,
                        help="extrapolate the fits to this compute (FLOPs); 'example' defaults to Steerling-8B's 7.6e22")
    add_columns(parser, *TABLE_FIELDS)


def run(args: argparse.Namespace) -> int:
    example = args.results == "example"
    target = args.target_compute if args.target_compute is not None else (paper.STEERLING_8B["flops"] if example else None)
    df = load_table(args.results, column_map(args, *TABLE_FIELDS))
    with keep_repeats():  # repeated runs are data
        path = write_report(df, args.out, run_dirs=expand_run_dirs(args.run_dirs), **given(args, "n_boot"),
                            figures=not args.no_figures, source="bundled example table" if example else args.results,
                            target_compute=target, actual=steerling_actual() if example else None)
    sys.stdout.write(f"{path}\n{path.with_suffix('.html')}\n")
    return 0
