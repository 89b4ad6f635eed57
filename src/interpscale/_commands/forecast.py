"""`interpscale forecast`: record a loss forecast before a large run, check it afterwards."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from interpscale._commands.fit import _read_table


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.usage = (
        "interpscale forecast record RESULTS --target-compute C [--family F] [--method joint|isoflop] "
        "[--params P --tokens D] [--metric COL] [--registry FILE]\n"
        "       interpscale forecast check ID --observed VALUE [--registry FILE]\n"
        "       interpscale forecast list [--registry FILE]"
    )
    p.add_argument("action", choices=("record", "check", "list"), help="record | check | list")
    p.add_argument("target", nargs="?", help="record: the results table; check: the forecast id (a unique prefix)")
    p.add_argument("--registry", type=Path, default=Path("forecasts.jsonl"),
                   help="the forecast registry, one JSON object per line (default: forecasts.jsonl)")
    p.add_argument("--target-compute", type=float, help="[record] compute (FLOPs) of the run forecast, e.g. 7.6e22")
    p.add_argument("--family", help="[record] the family to fit (needed when the table has several)")
    p.add_argument("--method", choices=("joint", "isoflop"), default="joint",
                   help="[record] joint Chinchilla surface (Approach 3) or IsoFLOP L*(C) (Approach 2)")
    p.add_argument("--params", type=float, help="[record] the run's parameter count (with --tokens; "
                   "default: the compute-optimal allocation)")
    p.add_argument("--tokens", type=float, help="[record] the run's training tokens")
    p.add_argument("--metric", default="loss", metavar="COL", help="[record] column forecast (default: loss)")
    p.add_argument("--estimator", help="[record] use rows with this loss estimator")
    p.add_argument("--annealed", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--n-boot", type=int, default=1000, help="[record] bootstrap replicates (default 1000)")
    p.add_argument("--level", type=float, default=0.9, help="[record] prediction-interval level (default 0.9)")
    p.add_argument("--grid", choices=("epoch", "coarse"), default="coarse", help="[record] joint-fit start grid")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--note", default="", help="[record] free text stored with the forecast")
    p.add_argument("--observed", type=float, help="[check] the observed value")


def _record(args) -> int:
    from interpscale.scaling import ForecastRegistry, forecast_from_results

    if not args.target:
        raise ValueError("forecast record needs the results table: forecast record RESULTS --target-compute C")
    if args.target_compute is None:
        raise ValueError("forecast record needs --target-compute")
    if (args.params is None) != (args.tokens is None):
        raise ValueError("give both --params and --tokens, or neither (compute-optimal allocation)")
    df = _read_table(Path(args.target))
    kw = forecast_from_results(df, target_compute=args.target_compute, family=args.family, method=args.method,
                               loss=args.metric, params=args.params, tokens=args.tokens, estimator=args.estimator,
                               annealed=args.annealed, n_boot=args.n_boot, level=args.level, seed=args.seed,
                               grid=args.grid)
    fc = ForecastRegistry(args.registry).record(note=args.note, **kw)
    sys.stdout.write(fc.summary() + f"\nrecorded in {args.registry}\n")
    return 0


def _check(args) -> int:
    from interpscale.scaling import ForecastRegistry

    if not args.target or args.observed is None:
        raise ValueError("usage: interpscale forecast check ID --observed VALUE")
    fc = ForecastRegistry(args.registry).check(args.target, args.observed)
    sys.stdout.write(fc.summary() + "\n")
    return 0


def _list(args) -> int:
    from interpscale.scaling import ForecastRegistry

    items = ForecastRegistry(args.registry).load()
    if not items:
        sys.stdout.write(f"no forecasts in {args.registry}\n")
    for fc in items:
        sys.stdout.write(fc.summary() + "\n")
    return 0


def run(args) -> int:
    try:
        return {"record": _record, "check": _check, "list": _list}[args.action](args)
    except (ValueError, OSError) as exc:  # bad input or an unwritable registry: a message, no traceback
        sys.stderr.write(f"interpscale forecast: error: {exc}\n")
        return 2
