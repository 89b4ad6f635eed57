"""`interpscale fit families RESULTS`: scaling-law fits of a results table; `fit chinchilla FILE` on any table;
`fit law LAW FILE...`: a published law on any table or per-step logs (docs/laws.md).

Every verb is one function in :data:`VERBS` that adds its parser and sets ``handler``; every table
is read through one column vocabulary (``options.add_columns``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

from interpscale._atomic import atomic_write_text
from interpscale._commands.options import (
    TABLE_FIELDS,
    add_columns,
    column_map,
    count,
    deprecated,
    fit_options,
    given,
    library_default,
    literal_choices,
    level,
    log_table,
    non_negative_int,
    number,
    option,
    out_dir,
    out_json,
    positive_float,
    power_options,
    replicates,
    table_file,
    table_options,
)
from interpscale._commands.rows import law_rows, merge_repeats_said, one_law_rows, row_options
from interpscale.errors import UserError
from interpscale.results_table import read_results
from interpscale.results_table import measured_rows, repeated_rows, require_values

DEFAULT_VERB = "families"  # `interpscale fit RESULTS` (deprecated spelling)


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    for add in VERBS.values():
        add(sub)


def run(args) -> int:
    from interpscale.scaling import keep_repeats

    with keep_repeats():  # repeated runs are data; each verb names them as file lines (say_repeats)
        return args.handler(args)


def _bootstrap_options(p: argparse.ArgumentParser, fitter) -> None:
    fit_options(p, fitter, "confidence level of the percentile intervals",
                n_boot="bootstrap replicates (0: none)")
    p.add_argument("--bound-l-inf", action="store_true", help="joint fit: constrain L_inf <= the smallest loss")
    from interpscale.scaling import fit_chinchilla

    option(p, "--overestimate-penalty", fit_chinchilla, type=float, metavar="K",
           help="joint fit: weight K >= 1 on points whose loss the fit over-estimates")


def _write_json(out: Path, name: str, text: str) -> None:
    """``text`` to ``out`` (a .json file) or to ``out/name`` (a directory), said on stderr."""
    dest = atomic_write_text(out if out.suffix.lower() == ".json" else out / name, text)
    sys.stderr.write(f"wrote {dest}\n")


def _write_all(out: Path, files: dict[str, str | dict]) -> None:
    """Each file into directory ``out`` (a dict as strict JSON), said on stdout."""
    for name, text in files.items():
        if not isinstance(text, str):
            text = json.dumps(text, indent=2, allow_nan=False) + "\n"
        atomic_write_text(out / name, text)
    sys.stdout.write(f"wrote {' and '.join(str(out / n) for n in files)}\n")


def _joint_options(args) -> dict:
    return dict(bound_L_inf=args.bound_l_inf, **given(args, "overestimate_penalty"))


def _column(df, path: Path, flag: str, name: str | None):
    """Column ``name`` as an array (None when not asked for); a missing one names ``flag``."""
    if not name:
        return None
    if name not in df.columns:
        raise UserError(f"{path}: {flag} column {name!r} not found; have {list(df.columns)}")
    return df[name].to_numpy()


def say_repeats(command: str, df, columns: tuple[str, ...]) -> None:
    """One stderr line when distinct rows (repeats of one measurement are merged on reading,
    :func:`merge_repeats_said`) hold equal ``columns`` (named as file lines): distinct runs with
    equal values (seeds), kept, each one point of the fit and one unit the bootstrap resamples."""
    pairs = repeated_rows(df, columns)
    if pairs:
        where = df.attrs.get("rows", {}).get("where", "the table")
        shown = ", ".join(f"{b} repeats {a}" for a, b in pairs[:3]) + (", ..." if len(pairs) > 3 else "")
        sys.stderr.write(f"interpscale {command}: {where}: {len(pairs)} distinct row(s) repeat another row's "
                         f"({', '.join(columns)}) ({shown}); kept as repeated runs: each is one point of the fit "
                         "and one run the bootstrap resamples\n")


FAMILY_HELP = ("column with the model family of each row (a NAME that is not a column picks that family, the "
               "deprecated spelling of --only-family)")


def family_filter(args, df, command: str) -> list[str] | None:
    """The families to fit: ``--only-family`` values, or an old ``--family NAME`` (a value, not a
    column of the table: deprecated, said once)."""
    only = args.only_family
    chosen = [only] if isinstance(only, str) else list(only or [])
    if args.family is not None and not getattr(args, "family_is_column", False) and args.family != "family":
        values = set(map(str, df["family"].dropna().unique())) if "family" in df.columns else set()
        if args.family not in values:
            raise UserError(f"--family {args.family!r}: neither a column of the table nor one of its families "
                            f"({', '.join(sorted(values)) or 'none'}); --family COL names the family column, "
                            "--only-family NAME picks a family")
        deprecated(command, f"--family {args.family} (a family, not a column)", f"--only-family {args.family}")
        chosen.append(args.family)
    return chosen or None


def read_metric(args, fitter):
    """``args.results`` read by its column flags (``--family`` only when it names a column: an old
    ``--family NAME`` is a filter, :func:`family_filter`; without a slice column each row's compute
    is its slice, ``results_table.with_slices``) with repeated rows merged (:func:`merge_repeats_said`),
    and the loss column the fits use (``--metric``, default ``fitter``'s ``loss``), which must be a
    column holding numbers."""
    path = Path(args.results)
    mapping = column_map(args, *[f for f in TABLE_FIELDS if f != "family"])
    if args.family is not None and args.family in read_results(path).columns:  # a column, not a family value
        mapping["family"] = args.family
        args.family_is_column = True
    df = read_results(path, columns=mapping)
    metric = args.metric or library_default(fitter, "loss")
    if metric not in df.columns:
        raise UserError(f"{path}: --metric {metric!r} is not a column; have {list(df.columns)}")
    require_values(df, metric)
    return path, merge_repeats_said(f"{args.command} {args.verb}", df, (metric,)), metric


# ---------------------------------------------------------------- fit families

def _add_families(sub) -> None:
    from interpscale.scaling import backtest, fit_families

    p = sub.add_parser("families", help="Table 6/7 fits of a results table: fits.json and tables.md in --out",
                       description="IsoFLOP (Eq. 25-26) and joint (Eq. 27) fits per family of a results table.")
    table_options(p, fit_families, "column the loss fits use; e.g. a bits-per-byte column to compare "
                  "families with different tokenizers on one scale", {"family": FAMILY_HELP})
    p.add_argument("--out", type=out_dir, required=True, help="output directory for fits.json and tables.md")
    p.add_argument("--only-family", action="append", metavar="NAME", help="fit only this family (repeatable)")
    p.add_argument("--target-compute", type=positive_float, help="extrapolate to this compute (FLOPs), e.g. 7.6e22, and "
                   "forecast the loss there with every method (the default chosen by backtest)")
    p.add_argument("--method", metavar="NAME", help="forecast method at --target-compute (joint | isoflop-powerlaw "
                   "| isoflop-saturating | a registered law; default: the lowest rolling-origin backtest error at "
                   "the largest extrapolation ratio the table can test)")
    p.add_argument("--backtest", action="store_true",
                   help="also forecast each held-out budget (rollout and leave-one-out) and score every "
                        "method: backtest.json and backtest.md in --out")
    option(p, "--backtest-boot", backtest, "n_boot", type=replicates, metavar="N", help="bootstrap replicates per backtest fit")
    p.add_argument("--cluster", metavar="COL", help="bootstrap whole groups named by this column (e.g. run_id, "
                   "when several checkpoints share a run)")
    option(p, "--minimum", fit_families, choices=literal_choices(fit_families, "minimum"),
           help="IsoFLOP slice minima: Eq. 25 parabola vertex or Akima interpolant (Porian et al.)")
    p.add_argument("--allow-partial", action="store_true",
                   help="exit 0 even when some family's fit could not be made (listed in tables.md)")
    p.add_argument("--predicted-anneals", action="store_true",
                   help="add a predicted annealed row for each checkpoint that skipped its anneal branch "
                        "(scaling.anneal_rows, docs/anneal.md) and fit those rows too")
    p.add_argument("--no-calibrate", dest="calibrate", action="store_false",
                   help="multiplier.csv: bootstrap bands at the targets, not widened to the forecasts' calibrated "
                        "intervals (faster; the report's bands are calibrated)")
    power_options(p)
    _bootstrap_options(p, fit_families)
    p.set_defaults(handler=_families)


def _families(args) -> int:
    from interpscale.scaling import AnalysisOptions, analyse, fit_families

    if args.method and args.target_compute is None:
        raise UserError("--method NAME chooses the forecast method at --target-compute; give --target-compute "
                        "(without it nothing is forecast)")
    path, df, metric = read_metric(args, fit_families)
    families = family_filter(args, df, "fit families")
    say_repeats("fit families", df, ("family", "params", "tokens", metric))
    _column(df, path, "--cluster", args.cluster)  # a missing column names its flag
    options = AnalysisOptions(
        families=tuple(families) if families else None, estimator=args.estimator, annealed=args.annealed,
        loss=metric, cluster=args.cluster, predicted_anneals=args.predicted_anneals,
        target_compute=args.target_compute, method=args.method, joint_options=_joint_options(args),
        calibrate=args.calibrate, backtest=args.backtest, anneals=False,
        **given(args, "n_boot", "seed", "level", "grid", "minimum", backtest_boot="backtest_boot"))
    analysis = analyse(df, options)  # every number below, computed once (scaling.analysis)
    if args.power_sims:  # the power an undetermined multiplier verdict had (docs/design.md)
        from interpscale.design import with_powers

        analysis = with_powers(analysis, n_sims=args.power_sims, growth=args.growth, seed=args.seed or 0)
    if args.predicted_anneals:  # checkpoints without an anneal branch got a predicted annealed loss
        sys.stderr.write(f"interpscale fit families: {len(analysis.table) - len(df)} predicted annealed row(s) "
                         "added and fitted (--predicted-anneals; column predicted = true)\n")
    fits = analysis.require_fits()
    _write_all(args.out, {"fits.json": fits.to_json() + "\n",
                          "tables.md": fits.to_markdown() + trends_md(analysis) + multipliers_md(analysis)})
    family_multipliers(args, analysis)  # k(C) of each +Concept family vs its backbone (issue 36)
    for fam, f in fits.families.items():  # the forecast beside the backtest errors that chose its method
        if f.forecast is not None:
            sys.stdout.write(f"{fam}: {f.forecast.summary()}\n")
    if args.backtest:
        if analysis.backtest is None:
            raise ValueError(analysis.backtest_error)
        sys.stdout.write(analysis.backtest.summary() + "\n")
        _write_all(args.out, {"backtest.json": analysis.backtest.to_dict(), "backtest.md": analysis.backtest.to_markdown()})
    for fam, why in fits.dropped.items():
        for name, reason in why.items():
            sys.stderr.write(f"interpscale fit: {fam}: {name} fit not made: {reason}\n")
    if fits.dropped and not args.allow_partial:
        sys.stderr.write("interpscale fit: error: some fits could not be made (outputs written; "
                         "--allow-partial to accept)\n")
        return 1
    return 0


def trends_md(analysis) -> str:
    """The interpretability trends either way (the report's section: log-linear slope on log10 C
    beside the bounded fit), for tables.md; empty when no metric is measured."""
    from interpscale.analysis.report import trend_markdown
    from interpscale.scaling.trend import NOT_MEASURED

    if all(t == NOT_MEASURED for t in analysis.trends.values()):
        return ""
    return ("\n## Interpretability trends (log-linear, Table 30's form)\n\n"
            + trend_markdown(analysis.fits, analysis.trends) + "\n")


def multipliers_md(analysis) -> str:
    """The report's "Compute multiplier" section, for tables.md: k of each backbone / +Concept pair at
    the base's slices and the targets, where a band spans more than ``MAX_DECADES`` decades (or a
    flagged method extrapolates) "not determined (band ...)" instead of a number (issue 45); empty
    without a pair."""
    from interpscale.analysis.report import multiplier_section

    lines = multiplier_section(analysis.table, analysis.fits, analysis.multipliers or {})
    return "\n" + "\n".join(lines) if lines else ""


# ---------------------------------------------------------------- fit chinchilla

def _add_chinchilla(sub) -> None:
    from interpscale.scaling import fit_chinchilla

    p = sub.add_parser("chinchilla", help="the joint fit (Eq. 27) of one family's runs in any table, by column names",
                       description="Fit L(P, D) = L_inf + A_P/P^alpha + A_D/D^beta to one family's rows of any CSV / "
                                   "Parquet table (a table of several families needs --only-family; its annealed "
                                   "rows where it has both). A row repeating another's run and step, or every "
                                   "column, is one measurement: merged, said on stderr; distinct runs with equal "
                                   "values are repeated runs, each one point of the fit and one run the bootstrap "
                                   "resamples.")
    p.add_argument("table", metavar="FILE", type=table_file, help="a CSV or Parquet table of runs")
    add_columns(p, "params", "loss", required=("params", "loss"))
    tok = p.add_mutually_exclusive_group(required=True)
    add_columns(tok, "tokens", defaults=False)
    tok.add_argument("--flops", metavar="COL", help="column with training FLOPs (tokens = FLOPs / (6 params))")
    add_columns(p, "run", "step", defaults=False, help={"run": "column naming each row's run: the bootstrap "
                                                        "resamples whole runs (several checkpoints of one run)"})
    row_options(p)
    p.add_argument("--out", type=out_json, help="chinchilla.json in this directory, or the .json file named "
                   "(stdout then gets the summary; without --out the JSON goes to stdout)")
    p.add_argument("--weights", metavar="COL", help="column of per-point weights")
    p.add_argument("--cluster", metavar="COL", help="bootstrap whole groups named by this column")
    p.add_argument("--drop-highest-loss", type=non_negative_int, default=0, metavar="K", help="drop the K highest-loss rows first")
    option(p, "--delta", fit_chinchilla, type=positive_float, help="Huber delta")
    option(p, "--bootstrap", fit_chinchilla, choices=literal_choices(fit_chinchilla, "bootstrap"),
           help="bootstrap kind (--cluster implies cluster)")
    _bootstrap_options(p, fit_chinchilla)
    p.set_defaults(handler=_chinchilla)


def _chinchilla(args) -> int:
    from interpscale.scaling import fit_chinchilla

    path = Path(args.table)
    have = read_results(path).columns
    missing = [c for c in (args.params, args.tokens, args.flops, args.loss) if c and c not in have]
    if missing:
        raise UserError(f"{path}: missing column(s) {missing}; have {list(have)}")
    if args.run and args.cluster and args.run != args.cluster:
        raise UserError("--run and --cluster both name the bootstrap's groups; give one")
    mapping = {"params": args.params, "tokens": args.tokens, "flops": args.flops, "loss": args.loss,
               "run_id": args.run, "step": args.step, "family": args.family}
    df = read_results(path, columns=mapping)  # the results-table names from here on
    if not args.tokens:
        df["tokens"] = df["flops"] / (6.0 * df["params"])
    require_values(df, "loss")
    df = one_law_rows(merge_repeats_said("fit chinchilla", df, ("loss",)), args, "fit chinchilla", str(path))
    df, left_out = measured_rows(df, ("params", "tokens", "loss"))  # the one rule for empty cells (docs/errors.md)
    if left_out:
        sys.stderr.write(f"interpscale fit chinchilla: {left_out}\n")
    if args.drop_highest_loss > 0:  # Epoch's recipe drops the 5 highest-loss points
        df = df[df["loss"] < df["loss"].nlargest(args.drop_highest_loss).min()]
    say_repeats("fit chinchilla", df, ("params", "tokens", "loss"))
    named = {v: k for k, v in mapping.items() if v}  # a mapped column goes by its results-table name
    cluster = "run_id" if args.run else named.get(args.cluster, args.cluster)
    groups = _column(df, path, "--run" if args.run else "--cluster", cluster)
    boot = {"bootstrap": "cluster", "groups": groups} if groups is not None else {}
    weights = _column(df, path, "--weights", named.get(args.weights, args.weights))
    fit = fit_chinchilla(df["params"].to_numpy(float), df["tokens"].to_numpy(float), df["loss"], weights=weights,
                         **boot, **_joint_options(args),
                         **given(args, "delta", "grid", "n_boot", "bootstrap", "level", "seed"))
    text = json.dumps(fit.to_dict(), indent=2) + "\n"
    if args.out is None:
        sys.stdout.write(text)  # the JSON is the output (pipe it); with --out it goes to the file only
    else:
        which = f" (family {args.only_family})" if args.only_family else ""
        sys.stdout.write(f"joint fit (Eq. 27) of {len(df)} rows of {path}{which}\n{fit.summary()}\n")
        _write_json(args.out, "chinchilla.json", text)
    return 0 if fit.converged else 1


# ---------------------------------------------------------------- fit law

def _add_law(sub) -> None:
    from interpscale.scaling.laws import LAWS, fit_law_table

    p = sub.add_parser("law", help="a published law (chinchilla, data-constrained, overtraining, ladder) on any "
                       "CSV/Parquet table or per-step evaluation logs, by column names (docs/laws.md)",
                       description="Fit a published scaling law to external runs; per-step logs are reduced to the "
                                   "mean of each run's last K logged rows.")
    p.add_argument("law", choices=LAWS, help="the law to fit")
    p.add_argument("tables", nargs="+", metavar="FILE", type=log_table, help="CSV (.csv, .csv.gz, .tsv) or Parquet; one per run "
                   "for per-step logs without a --run column")
    add_columns(p, "params", "tokens", "loss", "run", "step", required=("params", "loss"), defaults=False,
                help={"tokens": "column with training tokens (of the logged step)",
                      "loss": "column with the loss (ladder: the task loss)",
                      "run": "per-step logs or checkpoints: the column naming each row's run",
                      "step": "per-step logs: the step column (tokens = step x --tokens-per-step where "
                              "--tokens is empty)"})
    row_options(p)
    p.add_argument("--unique-tokens", metavar="COL", help="unique tokens (data-constrained)")
    p.add_argument("--metric", metavar="COL", help="downstream error (overtraining) or accuracy (ladder step 2)")
    p.add_argument("--tokens-per-step", metavar="COL|N", help="a column (e.g. the batch size in tokens) or a number")
    option(p, "--last", fit_law_table, type=count, metavar="K", help="average each run's last K logged rows")
    option(p, "--recipe", fit_law_table, choices=literal_choices(fit_law_table, "recipe"),
           help="the authors' recipe or Huber on log residuals from a start grid")
    option(p, "--task-min", fit_law_table, type=float, help="ladder: chance accuracy (step 2's start)")
    p.add_argument("--n-boot", type=replicates, help="bootstrap replicates (0: none; default: the law's)")
    p.add_argument("--level", type=level, help="interval level (default: the law's)")
    p.add_argument("--seed", type=int)
    p.add_argument("--out", type=out_json, help="<law>.json in this directory, or the .json file named")
    p.set_defaults(handler=_law)


def _law(args) -> int:
    from interpscale.scaling.laws import fit_law_table

    per_step = number(args.tokens_per_step)
    keep = law_rows(args, args.tables, "fit law")  # one family, annealed or stable rows, repeats once
    res = fit_law_table(args.law, args.tables, params=args.params, tokens=args.tokens, keep=keep,
                        unique_tokens=args.unique_tokens, loss=args.loss, metric=args.metric, run=args.run,
                        step=args.step, tokens_per_step=args.tokens_per_step if per_step is None else per_step,
                        **given(args, "last", "recipe", "task_min", "n_boot", "level", "seed"))
    sys.stdout.write(res.summary() + "\n")
    if args.out is not None:
        _write_json(args.out, f"{args.law}.json", json.dumps(res.to_dict(), indent=2) + "\n")
    return 0 if res.converged else 1


# ---------------------------------------------------------------- fit curve (issue 36)

def _add_curve(sub) -> None:
    p = sub.add_parser("curve", help="annealed (cooldown) loss from a stable run and its branches in a per-step "
                       "log with an LR column (docs/anneal.md)",
                       description="Fit offset, LR-annealing (Tissue et al. 2024) and multi-power (Luo et al. "
                                   "2025) predictors on a log's stable run and its branches, choose one by "
                                   "leave-one-run-out error (with one branch: lr-annealing by default, its "
                                   "interval from a prior error measured on public logs), and predict the "
                                   "last-step loss of other schedules.")
    p.add_argument("log", metavar="LOG", type=table_file, help="per-step log (.csv, .tsv or .parquet), one row per logged step")
    add_columns(p, "run", "step", "loss", required=("run", "step", "loss"), defaults=False)
    p.add_argument("--lr", metavar="COL", required=True, help="column with the learning rate of each logged step")
    p.add_argument("--stable", metavar="RUN", help="the constant-LR run (default: the longest one the log has)")
    p.add_argument("--predict", type=table_file, metavar="SCHEDULES.csv",
                   help="schedules to predict: columns run, step, lr, at any granularity (steps before a "
                   "schedule's branch point follow the stable run)")
    p.add_argument("--level", type=level, default=0.9, help="interval level (default 0.9)")
    p.add_argument("--out", type=out_dir, required=True, help="directory for loo.csv and predictions.csv")
    p.set_defaults(handler=_curve)


def _curve_table(path: Path, cols: dict[str, str]):
    import pandas as pd

    try:
        df = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(
            path, sep="\t" if path.suffix == ".tsv" else ",")
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: cannot read: {exc}") from exc
    for flag, col in cols.items():
        _column(df, path, flag, col)  # a missing column names its flag
        if flag not in ("--run", "run"):
            bad = pd.to_numeric(df[col], errors="coerce").isna()
            if bad.any():
                i = int(bad.to_numpy().argmax())
                raise UserError(f"{path}: line {i + 2}: column {col!r} holds {df[col].iloc[i]!r}, not a number")
    return df


def _curve(args) -> int:
    import pandas as pd

    from interpscale.scaling.curve import curve_from_log, fit_predictor, schedule_curve, split_runs

    log_df = _curve_table(Path(args.log), {f"--{f}": getattr(args, f) for f in ("run", "step", "lr", "loss")})
    curves = [curve_from_log(str(r), g[args.step], g[args.lr], g[args.loss])
              for r, g in log_df.groupby(args.run, sort=False)]
    try:
        stable, branches, skipped = split_runs(curves, args.stable)
        pred = fit_predictor(stable, branches, level=args.level)
    except ValueError as exc:
        raise UserError(f"{args.log}: {exc}") from exc
    if skipped:
        sys.stderr.write(f"interpscale fit curve: runs not branching from {stable.name!r} left out: "
                         f"{', '.join(skipped)}\n")
    rows = []
    if args.predict is not None:
        sched = _curve_table(args.predict, {"run": "run", "step": "step", "lr": "lr"})
        for r, g in sched.groupby("run", sort=False):
            try:
                c = schedule_curve(str(r), g["step"], g["lr"], stable)
            except ValueError as exc:  # its branch point contradicts the log
                raise UserError(f"{args.predict}: {exc}") from exc
            p, lo, hi = pred.predict(c)
            rows.append({"run": r, "step": c.final_step, "predicted": p, "lo": lo, "hi": hi, "method": pred.method,
                         "chosen_by": pred.chosen_by})
    atomic_write_text(args.out / "loo.csv", pd.DataFrame(
        pred.loo, columns=["method", "branch", "step", "predicted", "actual", "rel_error"]).to_csv(index=False))
    atomic_write_text(args.out / "predictions.csv", pd.DataFrame(
        rows, columns=["run", "step", "predicted", "lo", "hi", "method", "chosen_by"]).to_csv(index=False))
    if pred.chosen_by == "default":
        chosen = (f"one branch, nothing to leave out: {pred.method} chosen by default, interval "
                  f"±{100 * pred.half_width:.2f}% ({pred.interval}, docs/anneal.md)")
    else:
        scores = ", ".join(f"{m} {100 * s:.2f}%" for m, s in pred.scores.items())
        chosen = (f"leave-one-run-out mean |error|: {scores}; chosen {pred.method}, interval "
                  f"±{100 * pred.half_width:.2f}% ({pred.interval})")
    sys.stdout.write(f"stable run {stable.name!r}, {len(branches)} branch(es); {chosen}; {len(rows)} schedule(s) "
                     f"predicted -> {args.out / 'predictions.csv'}\n")
    return 0


# ---------------------------------------------------------------- fit multiplier (issue 36)

def _add_multiplier(sub) -> None:
    from interpscale.scaling.multiplier import fit_multiplier

    p = sub.add_parser("multiplier", help="compute multiplier k(C) of one family against another, with bands "
                       "and a growth test: multiplier.csv and multiplier.json in --out",
                       description="k(C) = C_variant(L*_base(C)) / C: the compute the variant needs to reach the "
                       "base family's compute-optimal loss at C (k > 1: a tax, k < 1: a gain), from the IsoFLOP "
                       "envelopes (Eq. 26), saturating envelopes and the joint fits (Eq. 27), the one that best "
                       "predicts held-out slice minima answering; docs/multiplier.md.")
    table_options(p, fit_multiplier, "loss column (e.g. a bits-per-byte column)")
    p.add_argument("--base", required=True, metavar="FAMILY", help="the reference family (e.g. ar)")
    p.add_argument("--variant", required=True, metavar="FAMILY", help="the family compared with it (e.g. ar+concept)")
    p.add_argument("--out", type=out_dir, required=True, help="output directory for multiplier.csv and multiplier.json")
    p.add_argument("--target-compute", type=positive_float, nargs="+", metavar="C",
                   help="computes to extrapolate k to (default: 1e20 and Steerling-8B's 7.6e22)")
    p.add_argument("--methods", nargs="+", choices=("isoflop", "saturating", "joint"),
                   help="default: all three; the best-scoring one answers")
    p.add_argument("--calibrate", action="store_true", help="widen the bands at the targets to the forecast "
                   "machinery's calibrated intervals (runs each family's rolling-origin backtest; slower)")
    option(p, "--margin", fit_multiplier, type=float,
           help="the growth test calls k constant when the slope's interval lies within +-MARGIN")
    power_options(p)
    fit_options(p, fit_multiplier, "level of the bands and of the slope's interval",
                grids=("epoch", "coarse"))
    p.set_defaults(handler=_multiplier)


def _multiplier(args) -> int:
    from interpscale.scaling.multiplier import TARGETS, family_forecasts, fit_multiplier

    path, df, metric = read_metric(args, fit_multiplier)
    have = set(map(str, df["family"].dropna().unique())) if "family" in df.columns else set()
    for flag, fam in (("--base", args.base), ("--variant", args.variant)):
        if fam not in have:
            raise UserError(f"{path}: {flag} {fam!r} is not a family of the table; have {', '.join(sorted(have))}")
    targets = tuple(args.target_compute or TARGETS)
    rows = dict(loss=metric, estimator=args.estimator, annealed=args.annealed)
    kw = dict(rows, target_compute=targets, **given(args, "n_boot", "seed", "level", "grid", "margin"))
    if args.methods:
        kw["methods"] = tuple(args.methods)
    try:
        fc = family_forecasts(df, args.base, args.variant, targets, **rows) if args.calibrate else None
        m = fit_multiplier(df, args.base, args.variant, forecasts=fc, **kw)
    except ValueError as exc:
        raise UserError(f"{path}: {exc}") from exc
    growth = m.growth_dict()
    power_line = ""
    if m.verdict == "undetermined" and args.power_sims:
        from interpscale.design import achieved_power

        ap = achieved_power(df, args.base, args.variant, growth=args.growth, n_sims=args.power_sims,
                            loss=metric, seed=args.seed or 0)
        growth["achieved_power"], power_line = ap.to_dict(), f"  achieved power: {ap.sentence()}\n"
    elif m.verdict == "undetermined":
        power_line = ("  undetermined: --power-sims N gives the power this sweep had and the grid that would "
                      "decide (docs/design.md)\n")
    _write_all(args.out, {"multiplier.csv": m.to_frame().to_csv(index=False), "multiplier.json": growth})
    sys.stdout.write(m.summary() + "\n" + power_line)
    return 0


def family_multipliers(args, analysis) -> None:
    """``fit families``' multiplier.csv / multiplier.json: the analysis's k(C) of each backbone /
    +Concept pair (``scaling.analysis.family_multipliers``, the numbers of the report's section) at
    the base's slices and the targets, with its growth test; a pair that could not be compared was
    logged as a warning."""
    from interpscale._markdown import determined
    from interpscale.scaling.analysis import multiplier_rows
    from interpscale.scaling.multiplier import MultiplierFit

    tests = {}
    for (base, variant), m in analysis.multipliers.items():
        if isinstance(m, MultiplierFit):
            tests[f"{variant} vs {base}"] = m.growth_dict()
            sys.stdout.write(m.summary() + "\n")
            power = analysis.powers.get((base, variant))
            if power is not None:  # --power-sims: what the sweep could decide (design.with_powers)
                tests[f"{variant} vs {base}"]["achieved_power"] = power.to_dict()
                sys.stdout.write(f"  achieved power: {power.sentence()}\n")
    table = multiplier_rows(analysis)
    if table is not None:  # determined: the rule tables.md and the report print k by (issue 45)
        fits = analysis.multipliers
        table["determined"] = [determined(r.lo, r.hi, flagged=isinstance(fits.get((r.base, r.variant)), MultiplierFit)
                                          and fits[(r.base, r.variant)].flagged(r.method, r.extrapolated))
                               for r in table.itertuples()]
        _write_all(args.out, {"multiplier.csv": table.to_csv(index=False), "multiplier.json": tests})


# verb -> the function that adds its parser (and sets its handler), in the order `fit --help` lists them
VERBS: dict[str, Callable] = {"families": _add_families, "chinchilla": _add_chinchilla, "law": _add_law,
                              "curve": _add_curve, "multiplier": _add_multiplier}


def __getattr__(name: str):
    if name == "read_table":  # the one reader is results_table.read_results
        import warnings

        warnings.warn("interpscale._commands.fit.read_table is deprecated; use interpscale.results_table.read_results",
                      DeprecationWarning, stacklevel=2)
        from interpscale.results_table import read_results

        return read_results
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
