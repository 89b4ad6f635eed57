"""`interpscale fit families RESULTS`: scaling-law fits of a results table; `fit chinchilla FILE` on any table;
`fit law LAW FILE...`: a published law on any table or per-step logs (docs/laws.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from interpscale._atomic import atomic_write_text
from interpscale._commands.options import given, library_default, literal_choices, option
from interpscale.errors import UserError
from interpscale.results_table import read_results as read_table
from interpscale.results_table import require_values

VERBS = ("families", "chinchilla", "law")
DEFAULT_VERB = "families"  # `interpscale fit RESULTS` (deprecated spelling)


def _bootstrap_options(p: argparse.ArgumentParser, fitter) -> None:
    option(p, "--grid", fitter, choices=literal_choices(fitter, "grid"), help="initialisation grid of the joint fit")
    option(p, "--n-boot", fitter, type=int, help="bootstrap replicates (0: none)")
    option(p, "--level", fitter, type=float, help="confidence level of the percentile intervals")
    option(p, "--seed", fitter, type=int)
    p.add_argument("--bound-l-inf", action="store_true", help="joint fit: constrain L_inf <= the smallest loss")
    from interpscale.scaling import fit_chinchilla

    option(p, "--overestimate-penalty", fit_chinchilla, type=float, metavar="K",
           help="joint fit: weight K >= 1 on points whose loss the fit over-estimates")


def _add_families(sub) -> None:
    from interpscale.scaling import backtest, fit_families

    p = sub.add_parser("families", help="Table 6/7 fits of a results table: fits.json and tables.md in --out",
                       description="IsoFLOP (Eq. 25-26) and joint (Eq. 27) fits per family of a results table.")
    p.add_argument("results", metavar="RESULTS", help="results table (.parquet or .csv)")
    p.add_argument("--out", type=Path, required=True, help="output directory for fits.json and tables.md")
    p.add_argument("--family", action="append", help="fit only this family (repeatable)")
    p.add_argument("--estimator", help="use rows with this loss estimator (e.g. mdlm_elbo, ar_ce)")
    p.add_argument("--annealed", action=argparse.BooleanOptionalAction, default=None,
                   help="use (non-)annealed rows only")
    p.add_argument("--target-compute", type=float, help="extrapolate to this compute (FLOPs), e.g. 7.6e22, and "
                   "forecast the loss there with every method (the default chosen by backtest)")
    p.add_argument("--method", metavar="NAME", help="forecast method at --target-compute (joint | isoflop-powerlaw "
                   "| isoflop-saturating | a registered law; default: the lowest rolling-origin backtest error at "
                   "the largest extrapolation ratio the table can test)")
    option(p, "--metric", fit_families, "loss", metavar="COL",
           help="column the loss fits use; e.g. a bits-per-byte column to compare families with different "
                "tokenizers on one scale")
    p.add_argument("--backtest", action="store_true",
                   help="also forecast each held-out budget (rollout and leave-one-out) and score every "
                        "method: backtest.json and backtest.md in --out")
    option(p, "--backtest-boot", backtest, "n_boot", type=int, metavar="N", help="bootstrap replicates per backtest fit")
    p.add_argument("--cluster", metavar="COL", help="bootstrap whole groups named by this column (e.g. run_id, "
                   "when several checkpoints share a run)")
    option(p, "--minimum", fit_families, choices=literal_choices(fit_families, "minimum"),
           help="IsoFLOP slice minima: Eq. 25 parabola vertex or Akima interpolant (Porian et al.)")
    p.add_argument("--allow-partial", action="store_true",
                   help="exit 0 even when some family's fit could not be made (listed in tables.md)")
    _bootstrap_options(p, fit_families)


def _add_chinchilla(sub) -> None:
    from interpscale.scaling import fit_chinchilla

    p = sub.add_parser("chinchilla", help="the joint fit (Eq. 27) of any table of runs, by column names",
                       description="Fit L(P, D) = L_inf + A_P/P^alpha + A_D/D^beta to any CSV / Parquet table.")
    p.add_argument("table", metavar="FILE", help="a CSV or Parquet table of runs")
    p.add_argument("--params", required=True, help="column with parameter counts")
    tok = p.add_mutually_exclusive_group(required=True)
    tok.add_argument("--tokens", help="column with training tokens")
    tok.add_argument("--flops", help="column with training FLOPs (tokens = FLOPs / (6 params))")
    p.add_argument("--loss", required=True, help="column with losses")
    p.add_argument("--out", type=Path, help="chinchilla.json in this directory, or the .json file named")
    p.add_argument("--weights", metavar="COL", help="column of per-point weights")
    p.add_argument("--cluster", metavar="COL", help="bootstrap whole groups named by this column")
    p.add_argument("--drop-highest-loss", type=int, default=0, metavar="K", help="drop the K highest-loss rows first")
    option(p, "--delta", fit_chinchilla, type=float, help="Huber delta")
    option(p, "--bootstrap", fit_chinchilla, choices=literal_choices(fit_chinchilla, "bootstrap"),
           help="bootstrap kind (--cluster implies cluster)")
    _bootstrap_options(p, fit_chinchilla)


def _add_law(sub) -> None:
    from interpscale.scaling.law_table import LAWS, fit_law_table

    p = sub.add_parser("law", help="a published law (chinchilla, data-constrained, overtraining, ladder) on any "
                       "CSV/Parquet table or per-step evaluation logs, by column names (docs/laws.md)",
                       description="Fit a published scaling law to external runs; per-step logs are reduced to the "
                                   "mean of each run's last K logged rows.")
    p.add_argument("law", choices=LAWS, help="the law to fit")
    p.add_argument("tables", nargs="+", metavar="FILE", help="CSV (.csv, .csv.gz, .tsv) or Parquet; one per run "
                   "for per-step logs without a --run column")
    p.add_argument("--params", required=True, metavar="COL", help="parameter counts")
    p.add_argument("--tokens", metavar="COL", help="training tokens (of the logged step)")
    p.add_argument("--unique-tokens", metavar="COL", help="unique tokens (data-constrained)")
    p.add_argument("--loss", required=True, metavar="COL", help="the loss (ladder: the task loss)")
    p.add_argument("--metric", metavar="COL", help="downstream error (overtraining) or accuracy (ladder step 2)")
    p.add_argument("--run", metavar="COL", help="per-step logs: the column naming each row's run")
    p.add_argument("--step", metavar="COL", help="per-step logs: the step column (tokens = step x --tokens-per-step "
                   "where --tokens is empty)")
    p.add_argument("--tokens-per-step", metavar="COL|N", help="a column (e.g. the batch size in tokens) or a number")
    option(p, "--last", fit_law_table, type=int, metavar="K", help="average each run's last K logged rows")
    option(p, "--recipe", fit_law_table, choices=literal_choices(fit_law_table, "recipe"),
           help="the authors' recipe or Huber on log residuals from a start grid")
    option(p, "--task-min", fit_law_table, type=float, help="ladder: chance accuracy (step 2's start)")
    p.add_argument("--n-boot", type=int, help="bootstrap replicates (0: none; default: the law's)")
    p.add_argument("--level", type=float, help="interval level (default: the law's)")
    p.add_argument("--seed", type=int)
    p.add_argument("--out", type=Path, help="<law>.json in this directory, or the .json file named")


def _write(out: Path | None, name: str, text: str) -> None:
    """``text`` to ``out`` (a .json file) or to ``out/name`` (a directory), said on stderr."""
    if out is not None:
        dest = out if out.suffix.lower() == ".json" else out / name
        atomic_write_text(dest, text)
        sys.stderr.write(f"wrote {dest}\n")


def _write_all(out: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        atomic_write_text(out / name, text)
    sys.stdout.write(f"wrote {' and '.join(str(out / n) for n in files)}\n")


def _law(args) -> int:
    from interpscale.scaling.law_table import fit_law_table

    per_step = args.tokens_per_step
    if per_step is not None:
        try:
            per_step = float(per_step)
        except ValueError:
            pass  # a column name
    res = fit_law_table(args.law, args.tables, params=args.params, tokens=args.tokens,
                        unique_tokens=args.unique_tokens, loss=args.loss, metric=args.metric, run=args.run,
                        step=args.step, tokens_per_step=per_step,
                        **given(args, "last", "recipe", "task_min", "n_boot", "level", "seed"))
    sys.stdout.write(res.summary() + "\n")
    _write(args.out, f"{args.law}.json", json.dumps(res.to_dict(), indent=2) + "\n")
    return 0 if res.converged else 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    _add_families(sub)
    _add_chinchilla(sub)
    _add_law(sub)


def _joint_options(args) -> dict:
    return dict(bound_L_inf=args.bound_l_inf, **given(args, "overestimate_penalty"))


def _column(df, path: Path, flag: str, name: str | None):
    """Column ``name`` as an array (None when not asked for); a missing one names ``flag``."""
    if not name:
        return None
    if name not in df.columns:
        raise UserError(f"{path}: {flag} column {name!r} not found; have {list(df.columns)}")
    return df[name].to_numpy()


def _chinchilla(args, path: Path) -> int:
    from interpscale.scaling import fit_chinchilla

    df = read_table(path)
    missing = [c for c in (args.params, args.tokens, args.flops, args.loss) if c and c not in df.columns]
    if missing:
        raise UserError(f"{path}: missing column(s) {missing}; have {list(df.columns)}")
    require_values(df, args.loss)
    if args.drop_highest_loss > 0:  # Epoch's recipe drops the 5 highest-loss points
        df = df[df[args.loss] < df[args.loss].nlargest(args.drop_highest_loss).min()]
    P = df[args.params].to_numpy(float)
    D = df[args.tokens].to_numpy(float) if args.tokens else df[args.flops].to_numpy(float) / (6.0 * P)
    groups = _column(df, path, "--cluster", args.cluster)
    boot = {"bootstrap": "cluster", "groups": groups} if groups is not None else {}
    fit = fit_chinchilla(P, D, df[args.loss], weights=_column(df, path, "--weights", args.weights),
                         **boot, **_joint_options(args),
                         **given(args, "delta", "grid", "n_boot", "bootstrap", "level", "seed"))
    text = json.dumps(fit.to_dict(), indent=2) + "\n"
    sys.stdout.write(text)
    _write(args.out, "chinchilla.json", text)
    return 0 if fit.converged else 1


def _results(args, path: Path) -> int:
    from interpscale.scaling import fit_families

    if args.method and args.target_compute is None:
        raise UserError("--method NAME chooses the forecast method at --target-compute; give --target-compute "
                        "(without it nothing is forecast)")
    df = read_table(path)
    metric = args.metric or library_default(fit_families, "loss")
    if metric not in df.columns:
        raise UserError(f"{path}: --metric {metric!r} is not a column; have {list(df.columns)}")
    require_values(df, metric)
    groups = _column(df, path, "--cluster", args.cluster)
    fits = fit_families(df, estimator=args.estimator, annealed=args.annealed, families=args.family,
                        target_compute=args.target_compute, loss=metric, groups=groups,
                        joint_options=_joint_options(args), method=args.method,
                        **given(args, "n_boot", "seed", "level", "grid", "minimum"))
    _write_all(args.out, {"fits.json": fits.to_json() + "\n", "tables.md": fits.to_markdown()})
    for fam, f in fits.families.items():  # the forecast beside the backtest errors that chose its method
        if f.forecast is not None:
            sys.stdout.write(f"{fam}: {f.forecast.summary()}\n")
    if args.backtest:
        from interpscale.scaling import backtest

        bt = backtest(df, family=args.family, estimator=args.estimator, annealed=args.annealed, loss=metric,
                      methods=("isoflop-powerlaw", "joint", "bounded"), target_compute=args.target_compute,
                      groups=groups, **given(args, "level", "seed", "minimum", n_boot="backtest_boot"))
        sys.stdout.write(bt.summary() + "\n")
        _write_all(args.out, {"backtest.json": json.dumps(bt.to_dict(), indent=2, allow_nan=False) + "\n",
                              "backtest.md": bt.to_markdown()})
    for fam, why in fits.dropped.items():
        for name, reason in why.items():
            sys.stderr.write(f"interpscale fit: {fam}: {name} fit not made: {reason}\n")
    if fits.dropped and not args.allow_partial:
        sys.stderr.write("interpscale fit: error: some fits could not be made (outputs written; "
                         "--allow-partial to accept)\n")
        return 1
    return 0


def run(args) -> int:
    if args.verb == "law":
        return _law(args)
    if args.verb == "chinchilla":
        return _chinchilla(args, Path(args.table))
    return _results(args, Path(args.results))
