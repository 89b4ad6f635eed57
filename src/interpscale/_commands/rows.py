"""The rows a one-law command fits (issue 42): `fit chinchilla` and `fit law` fit one law to one
family's rows -- annealed or stable rows and one estimator, chosen by the rule of every other table
command (``scaling.tables.fit_rows``), with the same flags -- and take a row that repeats another's
run and step, or every column, once (``results_table.merge_repeats``), said on stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from interpscale._commands.options import add_columns
from interpscale.errors import UserError
from interpscale.results_table import merge_repeats, repeats_message, validate_results

ROW_COLUMNS = ("annealed", "estimator", "predicted")  # besides the family, the columns that choose a row


def row_options(p: argparse.ArgumentParser) -> None:
    """``--family COL``, ``--only-family NAME``, ``--estimator``, ``--annealed/--no-annealed``."""
    add_columns(p, "family", defaults=False,
                help={"family": "column with the model family of each row (default: family, when the table has one)"})
    p.add_argument("--only-family", metavar="NAME", help="fit this family; needed when the table has several (one "
                   "law across families is a law of neither; `fit families` fits each)")
    p.add_argument("--estimator", help="use rows with this loss estimator (default: the paper's preference when the "
                   "table mixes several)")
    p.add_argument("--annealed", action=argparse.BooleanOptionalAction, default=None,
                   help="use (non-)annealed rows only (default: the annealed rows when the table has both)")


def merge_repeats_said(command: str, df: pd.DataFrame, measured: tuple[str, ...] = (), *,
                       by_run: bool = True) -> pd.DataFrame:
    """``df`` with the rows that repeat another's run and step, or every column, merged into one
    measurement (``results_table.merge_repeats``, the rule of every table path), said in one
    stderr line naming how many and their file lines."""
    df, pairs, averaged = merge_repeats(df, measured=measured, by_run=by_run)
    if pairs:
        where = df.attrs.get("rows", {}).get("where", "the table")
        sys.stderr.write(f"interpscale {command}: {where}: {repeats_message(pairs, averaged)}\n")
    return df


def one_law_rows(df: pd.DataFrame, args, command: str, where: str) -> pd.DataFrame:
    """The rows of ``df`` (``family``, ``annealed``, ``estimator`` under those names, where present)
    that one law is fitted to: one family (a table of several needs ``--only-family``), annealed
    rows where both kinds are present (unless ``--[no-]annealed``), one estimator; each choice made
    for the user is said on stderr."""
    from interpscale.scaling import quiet
    from interpscale.scaling.tables import fit_rows

    if "family" in df.columns:
        fams = sorted(map(str, df["family"].dropna().unique()))
        if len(fams) > 1 and args.only_family is None:
            raise UserError(f"{where}: {len(fams)} families in column {args.family or 'family'!r} ({', '.join(fams)}): "
                            "one law across families is a law of neither; fit one with --only-family NAME "
                            "(`interpscale fit families` fits each)")
    elif args.only_family is not None:
        raise UserError(f"{where}: --only-family {args.only_family}: the table has no family column "
                        "(--family COL names it)")
    warnings: list[str] = []
    with quiet():  # the choices are said below, once, on stderr
        try:
            rows = fit_rows(df, family=args.only_family, estimator=args.estimator, annealed=args.annealed,
                            caller=command, warnings=warnings)
        except ValueError as exc:
            raise UserError(f"{where}: {str(exc).removeprefix(f'{command}: ')}") from None
    for w in warnings:
        sys.stderr.write(f"interpscale {command}: {where}: {w}\n")
    return rows


def _raw(path: Path) -> pd.DataFrame | None:
    """The file as ``scaling.external`` reads it (every cell a string), None when it cannot be read
    (``fit law`` then names the problem)."""
    name = path.name.lower()
    try:
        if name.endswith((".parquet", ".pq")):
            return pd.read_parquet(path).astype(str).replace({"nan": "", "None": ""})
        return pd.read_csv(path, dtype=str, keep_default_na=False, sep="\t" if ".tsv" in name else ",")
    except Exception:  # noqa: BLE001 -- any unreadable file: read_runs reports it in its words
        return None


def law_rows(args, paths, command: str):
    """``keep(path, table)`` for ``scaling.external.read_runs``: each file's rows that one law is
    fitted to (:func:`one_law_rows` over every file together), a row repeating another's every
    column taken once (said); None when every row is kept."""
    files = [Path(p) for p in paths]
    raws = {str(p): _raw(p) for p in files}
    if any(r is None for r in raws.values()):
        return None
    fam = args.family or "family"
    parts = []
    for i, (p, raw) in enumerate(raws.items()):
        if args.family and fam not in raw.columns:
            raise UserError(f"{p}: no column {fam!r} (--family); the columns are {list(raw.columns)}")
        kind = (1, "row") if p.lower().endswith((".parquet", ".pq")) else (2, "line")
        raw.attrs["rows"] = {"where": p, "unit": kind[1], "first": kind[0]}
        cols = {"family" if c == fam else c: raw[c].mask(raw[c] == "") for c in (fam, *ROW_COLUMNS) if c in raw.columns}
        part = validate_results(pd.DataFrame(cols, index=raw.index), where=p, row_offset=kind[0], unit=kind[1])
        parts.append(part.assign(__file__=i, __row__=np.arange(len(raw)), __once__=raw.index.isin(
            merge_repeats_said(command, raw, by_run=False).index)))
    table = pd.concat(parts, ignore_index=True)
    chosen = one_law_rows(table[table["__once__"]], args, command, ", ".join(raws))
    masks = {p: np.isin(np.arange(len(raws[p])), chosen.loc[chosen["__file__"] == i, "__row__"])
             for i, p in enumerate(raws)}
    if all(m.all() for m in masks.values()):
        return None
    return lambda path, df: masks[str(path)] if len(df) == len(masks.get(str(path), ())) else np.ones(len(df), bool)
