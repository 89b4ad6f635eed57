"""``interpscale figures RESULTS --out DIR``: draw every paper figure the results table supports."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

from interpscale._commands.options import (TABLE_FIELDS, add_columns, column_map, given, option, out_dir, replicates,
                                           results_or_example)
from interpscale.analysis.example_data import example_results
from interpscale.analysis.figures import figure_options, render_figures
from interpscale.analysis.figures.isoflop import DEFAULT_FIG_BOOT
from interpscale.analysis.report import report_options
from interpscale.errors import FailedWork, UserError
from interpscale.results_table import read_results, require_values
from interpscale.scaling import analyse, keep_repeats


def add_arguments(parser: argparse.ArgumentParser, func: Callable = render_figures,
                  out: str = "directory for the PNG and PDF files",
                  run_dirs: str = "run directories whose metrics.jsonl loss curves to draw (a sweep "
                                  "directory works too)",
                  n_boot: str = "bootstrap replicates for the CI bands") -> None:
    """RESULTS and the options of ``figures``; ``report`` adds them too, with ``func`` and help of its own."""
    parser.add_argument("results", metavar="RESULTS", type=results_or_example,
                        help="results table (.parquet, .csv or .tsv), or 'example' for the bundled example table")
    parser.add_argument("--out", required=True, type=out_dir, help=out)
    parser.add_argument("--run-dirs", nargs="*", type=Path, default=(), help=run_dirs)
    option(parser, "--n-boot", func, type=replicates, help=n_boot)
    add_columns(parser, *TABLE_FIELDS)


def expand_run_dirs(paths) -> list[Path]:
    """Run directories given directly, or every run holding a metrics.jsonl under a sweep
    directory (``SWEEP/runs/*``, or its direct children). A path that does not exist, or
    holds no run, is an error naming it."""
    out = []
    for p in map(Path, paths):
        if (p / "metrics.jsonl").exists():
            out.append(p)
            continue
        if not p.is_dir():
            raise UserError(f"--run-dirs: {p} is not a directory")
        found = sorted(d for base in (p / "runs", p) if base.is_dir() for d in base.iterdir()
                       if (d / "metrics.jsonl").exists())
        if not found:
            raise UserError(f"--run-dirs: {p} holds no run directory with a metrics.jsonl "
                            f"(looked in {p} and {p / 'runs'})")
        out += found
    return out


def load_table(args: argparse.Namespace):
    """The bundled example table, or the results table ``args.results`` (its columns mapped by the
    column flags) with at least one loss."""
    columns = column_map(args, *TABLE_FIELDS)
    if args.results == "example":
        if columns:
            raise UserError("the bundled example table has the standard columns; column flags apply to a file")
        return example_results()
    df = read_results(args.results, columns=columns)
    require_values(df, "loss")
    return df


def run(args: argparse.Namespace) -> int:
    df = load_table(args)
    n_boot = given(args, "n_boot").get("n_boot", DEFAULT_FIG_BOOT)
    # the report's analysis for the same flags (no backtest: no figure draws it), with Figure 24's forecast
    options = figure_options(df, report_options(n_boot=n_boot, backtest=False))
    with keep_repeats():  # repeated runs are data
        analysis = analyse(df, options)
        result = render_figures(df, args.out, analysis=analysis, run_dirs=expand_run_dirs(args.run_dirs),
                                n_boot=n_boot)
    for title, paths in result.drawn.items():
        sys.stdout.write(f"{title}: {', '.join(str(p) for p in paths)}\n")
    for title, reason in result.skipped.items():
        sys.stdout.write(f"skipped {title}: {reason}\n")
    if not result.drawn:
        raise FailedWork("the results table supports none of the figures (reasons above)")
    return 0
