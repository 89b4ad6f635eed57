"""`interpscale fit`: scaling-law fits of a results table, or `fit chinchilla` on any table."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from interpscale._atomic import atomic_write_text


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.usage = (
        "interpscale fit RESULTS.{parquet,csv} [--family F ...] [--metric COL] [--backtest] --out DIR\n"
        "       interpscale fit chinchilla FILE --params COL (--tokens COL | --flops COL) --loss COL [--out DIR]"
    )
    p.add_argument("inputs", nargs="+", metavar="RESULTS", help="results table, or `chinchilla FILE`")
    p.add_argument("--out", type=Path, help="output directory for fits.json and tables.md "
                   "(chinchilla: chinchilla.json, or the .json file named)")
    p.add_argument("--family", action="append", help="fit only this family (repeatable)")
    p.add_argument("--estimator", help="use rows with this loss estimator (e.g. mdlm_elbo, ar_ce)")
    p.add_argument("--annealed", action=argparse.BooleanOptionalAction, default=None, help="use (non-)annealed rows only")
    p.add_argument("--target-compute", type=float, help="extrapolate to this compute (FLOPs), e.g. 7.6e22")
    p.add_argument("--metric", default="loss", metavar="COL",
                   help="column the loss fits use (default: loss); e.g. a bits-per-byte column to compare "
                        "families with different tokenizers on one scale")
    p.add_argument("--backtest", action="store_true",
                   help="also forecast each held-out budget (rollout and leave-one-out) and score every "
                        "method: backtest.json and backtest.md in --out")
    p.add_argument("--backtest-boot", type=int, default=200, metavar="N",
                   help="bootstrap replicates per backtest fit (default 200)")
    p.add_argument("--cluster", metavar="COL", help="bootstrap whole groups named by this column (e.g. run_id, "
                   "when several checkpoints share a run)")
    p.add_argument("--minimum", choices=("parabola", "akima"), default="parabola",
                   help="IsoFLOP slice minima: Eq. 25 parabola vertex or Akima interpolant (Porian et al.)")
    p.add_argument("--bound-l-inf", action="store_true", help="joint fit: constrain L_inf <= the smallest loss")
    p.add_argument("--overestimate-penalty", type=float, default=1.0, metavar="K",
                   help="joint fit: weight K >= 1 on points whose loss the fit over-estimates")
    p.add_argument("--weights", metavar="COL", help="[chinchilla] column of per-point weights")
    p.add_argument("--allow-partial", action="store_true",
                   help="exit 0 even when some family's fit could not be made (listed in tables.md)")
    p.add_argument("--params", help="[chinchilla] column with parameter counts")
    p.add_argument("--tokens", help="[chinchilla] column with training tokens")
    p.add_argument("--flops", help="[chinchilla] column with training FLOPs (tokens = FLOPs / (6 params) when --tokens is absent)")
    p.add_argument("--loss", help="[chinchilla] column with losses")
    p.add_argument("--drop-highest-loss", type=int, default=0, metavar="K", help="[chinchilla] drop the K highest-loss rows first")
    p.add_argument("--grid", choices=("epoch", "coarse"), default="epoch", help="initialisation grid of the joint fit")
    p.add_argument("--delta", type=float, default=1e-3, help="Huber delta of the joint fit")
    p.add_argument("--n-boot", type=int, default=10_000, help="bootstrap replicates (0: none)")
    p.add_argument("--bootstrap", choices=("residual", "pairs"), default="residual")
    p.add_argument("--level", type=float, default=0.9, help="confidence level of the percentile intervals")
    p.add_argument("--seed", type=int, default=0)


def _read_table(path: Path):
    from interpscale.results_table import read_results

    return read_results(path)


def _chinchilla(args, path: Path) -> int:
    from interpscale.scaling import fit_chinchilla

    df = _read_table(path)
    if not args.params or not args.loss or not (args.tokens or args.flops):
        raise ValueError("fit chinchilla needs --params, --loss and one of --tokens / --flops")
    cols = [c for c in (args.params, args.tokens, args.flops, args.loss) if c]
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; have {list(df.columns)}")
    if args.drop_highest_loss > 0:  # Epoch's recipe drops the 5 highest-loss points
        thr = df[args.loss].nlargest(args.drop_highest_loss).min()
        df = df[df[args.loss] < thr]
    P = df[args.params].to_numpy(float)
    D = df[args.tokens].to_numpy(float) if args.tokens else df[args.flops].to_numpy(float) / (6.0 * P)
    if args.weights and args.weights not in df.columns:
        raise ValueError(f"{path}: --weights column {args.weights!r} not found; have {list(df.columns)}")
    if args.cluster and args.cluster not in df.columns:
        raise ValueError(f"{path}: --cluster column {args.cluster!r} not found; have {list(df.columns)}")
    fit = fit_chinchilla(P, D, df[args.loss], delta=args.delta, grid=args.grid, n_boot=args.n_boot,
                         bootstrap="cluster" if args.cluster else args.bootstrap, level=args.level, seed=args.seed,
                         groups=df[args.cluster].to_numpy() if args.cluster else None,
                         weights=df[args.weights] if args.weights else None, bound_L_inf=args.bound_l_inf,
                         overestimate_penalty=args.overestimate_penalty)
    text = json.dumps(fit.to_dict(), indent=2) + "\n"
    sys.stdout.write(text)
    if args.out is not None:
        dest = args.out if args.out.suffix.lower() == ".json" else args.out / "chinchilla.json"
        atomic_write_text(dest, text)
        sys.stderr.write(f"wrote {dest}\n")
    return 0 if fit.converged else 1


def _results(args, path: Path) -> int:
    from interpscale.scaling import fit_families

    if args.out is None:
        raise ValueError("fit RESULTS needs --out DIR")
    df = _read_table(path)
    if args.metric not in df.columns:
        raise ValueError(f"{path}: --metric {args.metric!r} is not a column; have {list(df.columns)}")
    fits = fit_families(df, estimator=args.estimator, annealed=args.annealed, families=args.family,
                        n_boot=args.n_boot, seed=args.seed, level=args.level, grid=args.grid,
                        target_compute=args.target_compute, loss=args.metric, cluster=args.cluster,
                        joint_options=dict(bound_L_inf=args.bound_l_inf, overestimate_penalty=args.overestimate_penalty),
                        minimum=args.minimum)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "fits.json", fits.to_json() + "\n")
    atomic_write_text(args.out / "tables.md", fits.to_markdown())
    sys.stdout.write(f"wrote {args.out / 'fits.json'} and {args.out / 'tables.md'}\n")
    if args.backtest:
        from interpscale.scaling import backtest

        bt = backtest(df, family=args.family, estimator=args.estimator, annealed=args.annealed, loss=args.metric,
                      methods=("isoflop", "joint", "bounded"), n_boot=args.backtest_boot, level=args.level,
                      seed=args.seed, target_compute=args.target_compute, cluster=args.cluster,
                      minimum=args.minimum)
        atomic_write_text(args.out / "backtest.json", json.dumps(bt.to_dict(), indent=2, allow_nan=False) + "\n")
        atomic_write_text(args.out / "backtest.md", bt.to_markdown())
        sys.stdout.write(bt.summary() + "\n")
        sys.stdout.write(f"wrote {args.out / 'backtest.json'} and {args.out / 'backtest.md'}\n")
    dropped = fits.dropped
    if dropped:
        for fam, why in dropped.items():
            for name, reason in why.items():
                sys.stderr.write(f"interpscale fit: {fam}: {name} fit not made: {reason}\n")
        if not args.allow_partial:
            sys.stderr.write("interpscale fit: error: some fits could not be made (outputs written; "
                             "--allow-partial to accept)\n")
            return 1
    return 0


def run(args) -> int:
    try:
        if args.inputs[0] == "chinchilla":
            if len(args.inputs) != 2:
                raise ValueError("usage: interpscale fit chinchilla FILE --params COL --tokens COL --loss COL")
            return _chinchilla(args, Path(args.inputs[1]))
        if len(args.inputs) != 1:
            raise ValueError(f"expected one results table, got {args.inputs}")
        return _results(args, Path(args.inputs[0]))
    except ValueError as exc:
        sys.stderr.write(f"interpscale fit: error: {exc}\n")
        return 2
