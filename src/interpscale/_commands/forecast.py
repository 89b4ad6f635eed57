"""`interpscale forecast record|check|list`: record a loss forecast before a large run, check it afterwards."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from interpscale._commands.fit import FAMILY_HELP, family_filter, read_metric, say_repeats
from interpscale._commands.options import deprecated, finite, fit_options, given, number, option, positive_float
from interpscale._commands.options import table_options
from interpscale.errors import UserError
from interpscale.scaling import FORECAST_METHODS, ForecastLedger, forecast_from_results, keep_repeats

DEFAULT_REGISTRY = "forecasts.jsonl"  # in the working directory


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    r = sub.add_parser("record", help="fit a results table and record its forecast for a run not yet made")
    table_options(r, forecast_from_results, "column forecast", {
        "params": "column with parameter counts (a number here is the deprecated spelling of "
                  "--target-params)",
        "tokens": "column with training tokens (a number here is the deprecated spelling of --target-tokens)",
        "family": FAMILY_HELP})
    r.add_argument("--target-compute", type=positive_float, help="compute (FLOPs) of the run forecast, e.g. 7.6e22 "
                   "(derived as k·P·D from --target-params and --target-tokens when those are given)")
    r.add_argument("--target-params", type=positive_float, metavar="N", help="the run's parameter count (with "
                   "--target-tokens; default: the compute-optimal allocation at --target-compute)")
    r.add_argument("--target-tokens", type=positive_float, metavar="N", help="the run's training tokens")
    r.add_argument("--only-family", metavar="NAME", help="the family to fit (needed when the table has several)")
    r.add_argument("--method", metavar="NAME",
                   help=f"forecast method: {' | '.join(FORECAST_METHODS)} (default: the one with the lowest "
                        "rolling-origin backtest error at the largest extrapolation ratio the table can test)")
    fit_options(r, forecast_from_results, "prediction-interval level")
    option(r, "--calibration", forecast_from_results, help="interval rule: studentized | distance | studentized-signed "
           "(docs/forecasting.md)")
    r.add_argument("--note", default="", help="free text stored with the forecast")
    r.add_argument("--force", action="store_true",
                   help="record even when the fit is flagged unidentified or unreliable (the flag is stored)")
    c = sub.add_parser("check", help="score a recorded forecast against the observed value")
    c.add_argument("id", metavar="ID", help="the forecast id (a unique prefix)")
    c.add_argument("--observed", type=finite, required=True, help="the observed value")
    ls = sub.add_parser("list", help="every recorded forecast: value, prediction interval, inputs hash")
    for q in (r, c, ls):
        q.add_argument("--registry", type=Path, default=Path(DEFAULT_REGISTRY),
                       help=f"the forecast registry, one JSON object per line (default: {DEFAULT_REGISTRY})")


def _targets(args) -> tuple[float | None, float | None]:
    """--target-params / --target-tokens, or the old spelling (--params/--tokens NUMBER), said once."""
    out = []
    for field in ("params", "tokens"):
        target, old = getattr(args, f"target_{field}"), number(getattr(args, field))
        if old is not None:  # a number where a column name goes: the spelling before issue 37
            deprecated("forecast record", f"--{field} NUMBER (now --{field} names a column)",
                       f"--target-{field} {getattr(args, field)}")
            if target is not None and target != old:
                raise UserError(f"--{field} {getattr(args, field)} and --target-{field} {target:g} disagree; "
                                f"give --target-{field} only")
            setattr(args, field, None)
            target = old
        out.append(target)
    return out[0], out[1]


def _record(args) -> int:
    params, tokens = _targets(args)
    if (params is None) != (tokens is None):
        raise UserError("give both --target-params and --target-tokens, or neither (compute-optimal allocation)")
    if args.target_compute is None and params is None:
        raise UserError("give --target-compute, or --target-params and --target-tokens (the compute is then k·P·D)")
    _, df, metric = read_metric(args, forecast_from_results)
    family, *more = family_filter(args, df, "forecast record") or [None]
    if more:
        raise UserError(f"forecast record fits one family; got {', '.join([family, *more])}")
    say_repeats("forecast record", df, ("family", "params", "tokens", metric))
    kw = forecast_from_results(df, target_compute=args.target_compute, family=family, params=params, tokens=tokens,
                               estimator=args.estimator, annealed=args.annealed, force=args.force, loss=metric,
                               **given(args, "method", "n_boot", "level", "seed", "grid", "calibration"))
    flag = kw.pop("note", "")
    fc = ForecastLedger(args.registry).record(note=" ".join(filter(None, (flag, args.note))), **kw)
    C = kw["target_compute"]
    derived = "" if args.target_compute is not None or params is None else \
        f"target compute {C:.4g} FLOPs = k·P·D, k = {C / (params * tokens):.4g} FLOPs per token per parameter " \
        "(the table's)\n"
    sys.stdout.write(derived + fc.summary() + f"\nrecorded in {args.registry}\n")
    if flag:
        sys.stderr.write(f"interpscale forecast record: recorded with --force: {flag}\n")
    return 0


def run(args) -> int:
    if args.verb == "record":
        with keep_repeats():  # repeated runs are data, named by file line (say_repeats)
            return _record(args)
    ledger = ForecastLedger(args.registry)
    items = [ledger.check(args.id, args.observed)] if args.verb == "check" else ledger.load()
    if not items:
        sys.stdout.write(f"no forecasts in {args.registry}\n")
    for fc in items:
        sys.stdout.write(fc.summary() + "\n")
    return 0
