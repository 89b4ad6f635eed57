"""The results table's columns and its one reader, :func:`read_results`: a bottom-level module
(pandas only); every problem is a ``UserError`` (bad input: a ValueError the CLI exits 2 on) naming the
file, column, row as the user sees it (CSV/TSV: the line number, header = line 1; parquet: the 1-based row) and value.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd

from interpscale.errors import UserError
from interpscale.paper import INTERP_METRICS, SLICE_TOLERANCE

log = logging.getLogger("interpscale.results_table")

# The columns of one row per evaluated checkpoint (docs/architecture.md); extra columns allowed.
# loss in nats per token; bpb the same loss in bits per UTF-8 byte (metrics.bpb).
RESULT_COLUMNS = ("run_id", "family", "size", "slice_flops", "flops", "params", "tokens", "seq_len", "step",
                  "annealed", "estimator", "loss", "loss_se", "bpb", *INTERP_METRICS)
NUMERIC_COLUMNS = ("slice_flops", "flops", "params", "tokens", "seq_len", "step", "loss", "loss_se",
                   *INTERP_METRICS, "bpb", "bytes", "loss_lo", "loss_hi")
BOOLEAN_COLUMNS = ("annealed", "predicted")  # predicted: an annealed loss predicted, not measured (docs/anneal.md)
POSITIVE_COLUMNS = ("slice_flops", "flops", "params", "tokens")  # > 0 where given (empty: unknown)
SUFFIXES = (".parquet", ".csv", ".tsv")
TRUE = frozenset({"true", "t", "yes", "y", "1", "1.0"})
FALSE = frozenset({"false", "f", "no", "n", "0", "0.0"})


def read_results(source: pd.DataFrame | str | os.PathLike, *, missing_ok: bool = False,
                 columns: Mapping[str, str] | None = None) -> pd.DataFrame:
    """The results table at ``source`` (``.parquet``, ``.csv``, ``.tsv`` or a DataFrame, rows numbered
    from 1), validated; a missing file raises unless ``missing_ok`` (then: the standard columns, no rows).
    ``annealed`` may read true/false, yes/no, t/f, y/n or 1/0 (any case), or be empty in every row
    ("not annealed"); numeric columns hold numbers or nothing. ``columns`` maps a results-table
    name to the table's own column (``{"params": "N", "loss": "eval/c4"}``, :func:`map_columns`).
    A table without ``slice_flops`` gets each row's slice from its compute (:func:`with_slices`)."""
    if isinstance(source, pd.DataFrame):
        return with_slices(validate_results(map_columns(source.copy(), columns, "results table")))
    path = Path(source)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise UserError(f"results table {path}: unsupported format {path.suffix or '(no suffix)'!r}; "
                        "use .parquet or .csv (or .tsv)")
    if not path.is_file():
        if missing_ok and not path.exists():
            return pd.DataFrame({c: pd.Series(dtype=object) for c in RESULT_COLUMNS})
        raise UserError(f"results table {path} does not exist" if not path.exists()
                        else f"results table {path} is not a file")
    parquet = suffix == ".parquet"
    try:
        df = pd.read_parquet(path) if parquet else pd.read_csv(path, sep="\t" if suffix == ".tsv" else ",")
    except Exception as exc:  # pyarrow / the C parser raise several types for a damaged file
        hint = "; its CSV twin may still be intact" if parquet else ""
        raise UserError(f"results table {path} is unreadable ({type(exc).__name__}: {exc}){hint}") from None
    # CSV/TSV: data row i (0-based) is line i + 2 of the file; parquet: row i + 1
    return with_slices(validate_results(map_columns(df, columns, str(path)), where=str(path),
                                        row_offset=1 if parquet else 2, unit="row" if parquet else "line"))


def map_columns(df: pd.DataFrame, columns: Mapping[str, str] | None, where: str) -> pd.DataFrame:
    """``df`` with each ``columns[name]`` renamed to ``name`` (a results-table column); a column of
    the table already called ``name`` gives way to the mapped one. A mapped column the table lacks
    is a UserError naming it and the table's columns."""
    columns = {k: v for k, v in (columns or {}).items() if v is not None and v != k}
    if not columns:
        return df
    missing = {k: v for k, v in columns.items() if v not in df.columns}
    if missing:
        name, col = next(iter(missing.items()))
        flag = "run" if name == "run_id" else name
        raise UserError(f"{where}: no column {col!r} (--{flag}); the columns are {list(map(str, df.columns))}")
    replaced = [k for k in columns if k in df.columns and k not in columns.values()]
    if replaced:
        log.info("%s: column(s) %s replaced by the mapped %s", where, replaced, [columns[k] for k in replaced])
    return df.drop(columns=replaced).rename(columns={v: k for k, v in columns.items()})


def parse_bool(value) -> bool | None:
    """True/False for a recognised boolean spelling, None for a missing value; raises otherwise."""
    if isinstance(value, bool):
        return value
    text = "" if value is None or value is pd.NA else str(value).strip().lower()  # a float NaN reads "nan"
    if text in ("", "nan"):
        return None
    if text in TRUE or text in FALSE:
        return text in TRUE
    raise ValueError(value)


def validate_results(df: pd.DataFrame, *, where: str = "results table", row_offset: int = 1,
                     unit: str = "row") -> pd.DataFrame:
    """Parse the boolean columns and check the numeric ones of ``df`` (modified and returned)."""
    df = df.reset_index(drop=True)
    dup = set(df.columns[df.columns.duplicated()])
    if dup:
        raise UserError(f"{where}: column(s) {sorted(map(str, dup))} appear more than once")
    for col in (c for c in BOOLEAN_COLUMNS if c in df.columns):
        parsed: list[bool | None] = []
        for i, v in enumerate(df[col].tolist()):
            try:
                parsed.append(parse_bool(v))
            except ValueError:
                raise UserError(f"{where}: column {col!r}, {unit} {i + row_offset}: {v!r} is not a boolean "
                                f"(write true/false, yes/no or 1/0)") from None
        missing = [i for i, v in enumerate(parsed) if v is None]
        if missing and len(missing) < len(parsed):
            raise UserError(f"{where}: column {col!r}, {unit} {missing[0] + row_offset}: empty, while other "
                            f"rows say true/false; fill it in ({len(missing)} empty cell(s))")
        df[col] = pd.Series([bool(v) for v in parsed], index=df.index, dtype=bool)
    for col in NUMERIC_COLUMNS:
        if col not in df.columns or pd.api.types.is_numeric_dtype(df[col]):
            continue
        raw = df[col]
        num = pd.to_numeric(raw.map(lambda v: (v.strip() or None) if isinstance(v, str) else v), errors="coerce")
        bad = num.isna() & raw.notna() & (raw.astype(str).str.strip() != "")
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            raise UserError(f"{where}: column {col!r}, {unit} {i + row_offset}: {raw.iloc[i]!r} is not a number")
        df[col] = num.astype(float)
    # every row (and every subset filtered from it) can name itself as in the file: row_label
    df.attrs["rows"] = {"where": where, "unit": unit, "first": row_offset}
    for col in POSITIVE_COLUMNS:
        if col in df.columns:  # numeric by now: POSITIVE_COLUMNS are NUMERIC_COLUMNS
            bad = df[col].notna() & ~(df[col] > 0)
            if bad.any():
                i = int(bad.to_numpy().nonzero()[0][0])
                raise UserError(f"{where}: column {col!r}, {row_label(df, i)}: {float(df[col].iloc[i]):g} is not "
                                f"positive (a run's compute, parameters and tokens are > 0; "
                                f"{int(bad.sum())} such row(s))")
    refuse_infinite(df)  # the one rule for non-finite values (below)
    return df


# ---- The one rule for non-finite values (issue 43, docs/errors.md): an empty or NaN cell is "not
# measured" -- the row is left out of what needs that column (:func:`measured_rows`), said once,
# naming file, column and lines; an infinite value is no measurement of anything: the table is refused.
FINITE_COLUMNS = ("slice_flops", "flops", "params", "tokens", "seq_len", "step", "loss", "loss_se", "bpb",
                  *INTERP_METRICS)


def refuse_infinite(df: pd.DataFrame) -> None:
    """UserError naming file, column and line of the first +-inf in a measured or compute column."""
    for col in (c for c in FINITE_COLUMNS if c in df.columns and pd.api.types.is_numeric_dtype(df[c])):
        bad = np.isinf(df[col].to_numpy(float))
        if bad.any():
            i = int(bad.nonzero()[0][0])
            where = df.attrs.get("rows", {}).get("where", "results table")
            raise UserError(f"{where}: column {col!r}, {row_label(df, i)}: {float(df[col].iloc[i]):g} is not a "
                            f"measurement (write the number, or leave the cell empty when it was not measured; "
                            f"{int(bad.sum())} such row(s))")


def measured_rows(df: pd.DataFrame, columns: tuple[str, ...] | list[str]) -> tuple[pd.DataFrame, str]:
    """``(rows, line)``: the rows of ``df`` with a number in every one of ``columns``, and the line
    saying which were left out (file, column, lines; "" when none)."""
    cols = [c for c in columns if c in df.columns]
    if not cols:
        return df, ""
    empty = df[cols].apply(pd.to_numeric, errors="coerce").isna()
    out = empty.any(axis=1).to_numpy()
    if not out.any():
        return df, ""
    where = df.attrs.get("rows", {}).get("where", "results table")
    idx = out.nonzero()[0]
    shown = ", ".join(row_label(df, int(i)) for i in idx[:5]) + (", ..." if len(idx) > 5 else "")
    which = ", ".join(repr(c) for c in cols if empty[c].any())
    kept = df[~out]
    kept.attrs = dict(df.attrs)
    return kept, (f"{where}: {len(idx)} row(s) with an empty {which} (not measured) left out: {shown}")


def row_label(table: pd.DataFrame | pd.Series, i: int) -> str:
    """The ``i``-th row (0-based position) of ``table`` -- which may be a subset filtered from a
    table :func:`read_results` read -- as the user finds it in the file: ``"line 7"`` (CSV/TSV),
    ``"row 6"`` (parquet, 1-based); ``"row i"`` for a table that came from elsewhere."""
    rows = table.attrs.get("rows")
    if not rows or not pd.api.types.is_integer_dtype(table.index):
        return f"row {i}"
    return f"{rows['unit']} {int(table.index[i]) + rows['first']}"


def require_values(df: pd.DataFrame, column: str) -> None:
    """UserError naming the file and ``column`` when the table has no rows, lacks the column,
    or holds no number in it (every cell empty or NaN): nothing to fit or report."""
    where = df.attrs.get("rows", {}).get("where", "results table")
    if not len(df):
        raise UserError(f"{where}: the table has a header but no rows; nothing to fit or report")
    if column not in df.columns:
        raise UserError(f"{where}: no column {column!r}; have {list(df.columns)}")
    finite = pd.to_numeric(df[column], errors="coerce").map(math.isfinite)
    if not finite.any():
        raise UserError(f"{where}: column {column!r} holds no number (all {len(df)} rows are empty, NaN "
                        f"or infinite, {row_label(df, 0)} to {row_label(df, len(df) - 1)})")


def repeated_rows(df: pd.DataFrame, columns: tuple[str, ...] | list[str]) -> list[tuple[str, str]]:
    """``(first, repeat)`` pairs of rows identical in every one of ``columns`` (repeated runs, or one
    run listed twice), each named as in the file (:func:`row_label`), in file order."""
    cols = [c for c in columns if c in df.columns]
    if not cols:
        return []
    dup = df.duplicated(cols, keep="first").to_numpy()
    if not dup.any():  # the usual table: no grouping needed
        return []
    return _repeat_pairs(df, df, cols, dup)[1]


def _repeat_pairs(df: pd.DataFrame, key: pd.DataFrame, cols: list[str], dup: np.ndarray):
    """(group id of every row of ``key`` grouped by ``cols``, the ``(first, repeat)`` pairs of the
    rows ``dup`` marks, each named as in ``df``'s file)."""
    gid = key.reset_index(drop=True).groupby(cols, sort=False, dropna=False).ngroup().to_numpy()
    first_at = {g: i for i, g in reversed(list(enumerate(gid)))}
    return gid, [(row_label(df, first_at[gid[i]]), row_label(df, i)) for i in dup.nonzero()[0]]


# What a row measures (averaged when two rows of one checkpoint disagree); every other column names the row.
MEASURED_COLUMNS = ("loss", "loss_se", "bpb", "bytes", "loss_lo", "loss_hi", *INTERP_METRICS)


def merge_repeats(df: pd.DataFrame, *, measured: tuple[str, ...] | list[str] = (),
                  ignore: tuple[str, ...] | list[str] = (),
                  by_run: bool = True) -> tuple[pd.DataFrame, list[tuple[str, str]], int]:
    """One row per measurement (issue 42): a row that repeats another's ``run_id`` and ``step`` (and
    every other column naming the row: estimator, annealed, mask_rate, ...), or, without a run and
    step, another row's every column, is the same measurement listed twice. Returns ``(merged,
    pairs, averaged)``: the table without the repeats (file order and row labels kept; the first
    row of each group holds the mean of the group's measured columns -- ``MEASURED_COLUMNS`` and
    ``measured`` -- where they differ), the ``(first, repeat)`` pairs named as in the file, and the
    number of groups whose measured values differed. ``ignore``: columns that do not name a row
    (e.g. bootstrap labels); ``by_run=False``: only rows equal in every column are repeats. Distinct
    runs with equal values stay distinct rows."""
    cols = [c for c in df.columns if c not in ignore]
    if len(df) < 2 or not cols:
        return df, [], 0
    key = df[cols]
    values = [c for c in cols if c in (*MEASURED_COLUMNS, *measured) and pd.api.types.is_numeric_dtype(df[c])]
    if by_run and "run_id" in cols and "step" in cols and values:  # one checkpoint: its run and step name it
        named = (df["run_id"].notna() & df["step"].notna()).to_numpy()
        if named.any():
            key = key.copy()
            key.loc[named, values] = math.nan
    dup = key.duplicated(keep="first").to_numpy()
    if not dup.any():  # the usual table: no grouping needed
        return df, [], 0
    gid, pairs = _repeat_pairs(df, key, cols, dup)
    out = df[~dup].copy()
    averaged = 0
    if values:
        grouped = df[values].reset_index(drop=True).groupby(gid)
        lo, hi, mean = grouped.min(), grouped.max(), grouped.mean()
        differ = ~((lo == hi) | (lo.isna() & hi.isna()))  # exact repeats keep their value, bit for bit
        averaged = int(differ.any(axis=1).sum())
        kept = gid[~dup]
        for c in values:
            out[c] = mean[c].where(differ[c], grouped.first()[c]).loc[kept].to_numpy()
    out.attrs = dict(df.attrs)
    return out, pairs, averaged


def repeats_message(pairs: list[tuple[str, str]], averaged: int) -> str:
    """The one line saying what :func:`merge_repeats` merged (empty when nothing)."""
    if not pairs:
        return ""
    shown = ", ".join(f"{b} repeats {a}" for a, b in pairs[:3]) + (", ..." if len(pairs) > 3 else "")
    diff = f"; {averaged} with differing values averaged" if averaged else ""
    return (f"{len(pairs)} row(s) repeat another row's run and step, or every column ({shown}): merged, each "
            f"one measurement{diff}")


def with_slices(df: pd.DataFrame, tolerance: float = SLICE_TOLERANCE) -> pd.DataFrame:
    """``df`` with a ``slice_flops`` column when it has none (issue 42): a row's slice is its compute
    budget -- ``flops`` where given, else C = 6·params·tokens -- grouped with the budgets within the
    slice tolerance of one target (the sorted budgets split at their widest gaps until no group spans
    more than a factor (1 + tolerance)²; its target is their geometric midpoint, so every row lies
    within ``tolerance`` of it: App. G's rule).
    A row whose compute is unknown gets no slice; a table with neither column is returned as it is."""
    if "slice_flops" in df.columns or not len(df):
        return df
    C = pd.Series(math.nan, index=df.index, dtype=float)
    if "params" in df.columns and "tokens" in df.columns:
        C = 6.0 * pd.to_numeric(df["params"], errors="coerce") * pd.to_numeric(df["tokens"], errors="coerce")
    if "flops" in df.columns:
        C = pd.to_numeric(df["flops"], errors="coerce").where(lambda f: f.notna(), C)
    ok = C.notna() & (C > 0) & C.map(math.isfinite)
    if not ok.any():
        return df
    budgets = np.sort(C[ok].unique())
    target = np.empty(budgets.size)
    for a, b in _budget_groups(np.log(budgets), 2 * math.log1p(tolerance)):
        target[a:b] = _slice_target(budgets[a], budgets[b - 1], tolerance)
    out = df.assign(slice_flops=pd.Series(math.nan, index=df.index, dtype=float))
    out.loc[ok, "slice_flops"] = target[np.searchsorted(budgets, C[ok].to_numpy())]
    out.attrs = dict(df.attrs)
    where = df.attrs.get("rows", {}).get("where", "results table")
    log.info("%s: no slice_flops column: each row's slice is its compute (%s), grouped within ±%g%%: %d slice(s)",
             where, "flops" if "flops" in df.columns else "6·params·tokens", 100 * tolerance, len(set(target)))
    return out


def _budget_groups(logc: np.ndarray, span: float) -> list[tuple[int, int]]:
    """``[a, b)`` ranges of the sorted ``logc``, each spanning at most ``span``: a range wider than that
    is split at its widest gap (natural breaks first), in order."""
    out, todo = [], [(0, logc.size)]
    while todo:
        a, b = todo.pop()
        if logc[b - 1] - logc[a] <= span:
            out.append((a, b))
            continue
        cut = a + 1 + int(np.argmax(np.diff(logc[a:b])))
        todo += [(cut, b), (a, cut)]
    return sorted(out)


def _slice_target(lo: float, hi: float, tolerance: float) -> float:
    """The target of budgets ``lo`` .. ``hi``: their geometric midpoint, to 3 significant digits
    when every budget stays within ``tolerance`` of the rounded value."""
    mid = math.sqrt(lo * hi)
    nice = float(f"{mid:.3g}")
    return nice if hi / nice - 1 <= tolerance and 1 - lo / nice <= tolerance else mid
