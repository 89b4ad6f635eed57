"""`interpscale fit`: scaling-law fits of a results table, or `fit chinchilla` on any table."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from interpscale._atomic import atomic_write_text


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.usage = (
        "interpscale fit RESULTS.{parquet,csv} [--family F ...] --out DIR\n"
        "       interpscale fit chinchilla FILE --params COL (--tokens COL | --flops COL) --loss COL"
    )
    p.add_argument("inputs", nargs="+", metavar="RESULTS", help="results table, or `chinchilla FILE`")
    p.add_argument("--out", type=Path, help="output directory for fits.json and tables.md")
    p.add_argument("--family", action="append", help="fit only this family (repeatable)")
    p.add_argument("--estimator", help="use rows with this loss estimator (e.g. mdlm_elbo, ar_ce)")
    p.add_argument("--annealed", action=argparse.BooleanOptionalAction, default=None, help="use (non-)annealed rows only")
    p.add_argument("--target-compute", type=float, help="extrapolate to this compute (FLOPs), e.g. 7.6e22")
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
    fit = fit_chinchilla(P, D, df[args.loss], delta=args.delta, grid=args.grid, n_boot=args.n_boot,
                         bootstrap=args.bootstrap, level=args.level, seed=args.seed)
    sys.stdout.write(json.dumps(fit.to_dict(), indent=2) + "\n")
    return 0 if fit.converged else 1


def _results(args, path: Path) -> int:
    from interpscale.scaling import fit_families

    if args.out is None:
        raise ValueError("fit RESULTS needs --out DIR")
    df = _read_table(path)
    fits = fit_families(df, estimator=args.estimator, annealed=args.annealed, families=args.family,
                        n_boot=args.n_boot, seed=args.seed, level=args.level, grid=args.grid,
                        target_compute=args.target_compute)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "fits.json", fits.to_json() + "\n")
    atomic_write_text(args.out / "tables.md", fits.to_markdown())
    sys.stdout.write(f"wrote {args.out / 'fits.json'} and {args.out / 'tables.md'}\n")
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
