"""Run tables from outside the toolkit: any CSV/Parquet (also .csv.gz) with a column mapping.

One row per run, or per-step evaluation logs (one row per logged step of a run; a ``run``
column or one file per run), reduced the way ladder studies do it: the loss and metric are the
mean over each run's ``last`` K logged rows, the tokens those of its last row (Bhagia et al.
2024, ``moving_avg``). Tokens come from a column or from ``step x tokens_per_step`` (a number
or a column, e.g. the batch size in tokens) where the tokens cell is empty::

    runs = read_runs("ladder.csv", params="N", tokens="throughput/total_tokens", loss="eval/c4/CE",
                     run="run", step="_step", tokens_per_step="batch_size_in_tokens", last=5)
    runs.frame  # run, params, tokens, unique_tokens, loss, metric, rows (last=None: every logged row)

A mapping value may also be ``{column: weight}``: the weighted mean of several columns per row
(e.g. MMLU's four categories). Bad input raises :class:`interpscale.errors.UserError` naming the
file, the column, the line as counted in the file (header = line 1) and the value.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence, Union

import numpy as np
import pandas as pd

from interpscale.errors import UserError

Column = Union[str, Mapping[str, float], None]
FIELDS = ("params", "tokens", "unique_tokens", "loss", "metric")
POSITIVE = ("params", "tokens", "unique_tokens")


@dataclass(frozen=True)
class RunTable:
    """Mapped runs: ``frame`` with columns run, params, tokens, unique_tokens, loss, metric
    (absent fields are NaN) and ``rows`` (logged rows averaged); ``source`` the file(s)."""

    frame: pd.DataFrame
    source: tuple[str, ...]
    last: int | None

    def column(self, field: str) -> np.ndarray:
        """One mapped field as a float array; UserError when it was not mapped."""
        v = self.frame[field].to_numpy(float)
        if np.isnan(v).all():
            raise UserError(f"{', '.join(self.source)}: no column was mapped to {field!r} (pass --{field.replace('_', '-')})")
        return v


def _read(path: Path) -> tuple[pd.DataFrame, str]:
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    name = path.name.lower()
    try:
        if name.endswith(".parquet") or name.endswith(".pq"):
            return pd.read_parquet(path).astype(str).replace({"nan": "", "None": ""}), "row"
        if name.endswith((".csv", ".csv.gz", ".tsv", ".tsv.gz")):
            sep = "\t" if ".tsv" in name else ","
            return pd.read_csv(path, dtype=str, keep_default_na=False, sep=sep), "line"
    except (ValueError, OSError, pd.errors.ParserError) as exc:
        raise UserError(f"{path}: cannot be read as a table ({exc})") from exc
    raise UserError(f"{path}: unknown table format (expected .csv, .csv.gz, .tsv or .parquet)")


def _where(kind: str, i: int) -> str:
    """Line as in the file (header = line 1) for text tables, 0-based row for Parquet."""
    return f"line {i + 2}" if kind == "line" else f"row {i}"


def _numbers(df: pd.DataFrame, col: str, path: Path, kind: str, option: str, *, required: bool = True) -> np.ndarray:
    if col not in df.columns:
        cols = ", ".join(map(repr, list(df.columns)[:12])) + (" ..." if len(df.columns) > 12 else "")
        raise UserError(f"{path}: no column {col!r} ({option}); the columns are {cols}")
    raw = df[col].astype(str).str.strip()
    vals = pd.to_numeric(raw, errors="coerce").to_numpy(float)
    bad = np.isnan(vals) & (raw != "").to_numpy() & ~raw.str.lower().isin(["nan", "none"]).to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise UserError(f"{path}, {_where(kind, i)}: column {col!r} ({option}) has {raw.iloc[i]!r}, not a number")
    if required and np.isnan(vals).any():
        i = int(np.flatnonzero(np.isnan(vals))[0])
        raise UserError(f"{path}, {_where(kind, i)}: column {col!r} ({option}) is empty")
    return vals


def _field(df, spec: Column, path, kind, option, *, required=True) -> np.ndarray:
    if spec is None:
        return np.full(len(df), np.nan)
    if isinstance(spec, str):
        return _numbers(df, spec, path, kind, option, required=required)
    cols = list(spec.items())  # {column: weight}: weighted mean per row
    vals = np.column_stack([_numbers(df, c, path, kind, option, required=required) for c, _ in cols])
    w = np.array([float(x) for _, x in cols])
    return vals @ w / w.sum()


def _tokens(df, tokens, step, tokens_per_step, path, kind) -> np.ndarray:
    tok = _field(df, tokens, path, kind, "--tokens", required=step is None)
    if step is None:
        return tok
    st = _numbers(df, step, path, kind, "--step", required=False)
    if isinstance(tokens_per_step, str):
        per = _numbers(df, tokens_per_step, path, kind, "--tokens-per-step", required=False)
    else:
        per = np.full(len(df), np.nan if tokens_per_step is None else float(tokens_per_step))
    tok = np.where(np.isnan(tok), st * per, tok)
    if np.isnan(tok).any():
        i = int(np.flatnonzero(np.isnan(tok))[0])
        raise UserError(f"{path}, {_where(kind, i)}: no tokens (empty --tokens cell and no --tokens-per-step to "
                        f"convert step {st[i]:g})")
    return tok


def _map_file(path: Path, cols: dict, run, step, tokens_per_step) -> pd.DataFrame:
    df, kind = _read(path)
    if df.empty:
        raise UserError(f"{path}: the table has no rows")
    if run and run not in df.columns:
        raise UserError(f"{path}: no column {run!r} (--run)")
    stem = path.name.split(".")[0]
    if run:
        labels = df[run].astype(str)
    elif step:  # a per-step log without a run column: the file is one run
        labels = stem
    else:  # one row per run
        labels = [f"{stem}:{_where(kind, i)}" for i in range(len(df))]
    out = pd.DataFrame({"run": labels}, index=df.index)
    for f in FIELDS:
        req = f in ("params", "loss", "metric") and cols[f] is not None
        out[f] = _tokens(df, cols["tokens"], step, tokens_per_step, path, kind) if f == "tokens" else \
            _field(df, cols[f], path, kind, f"--{f.replace('_', '-')}", required=req)
    out["_line"] = [_where(kind, i) for i in range(len(df))]
    for f in POSITIVE:
        bad = out[f].to_numpy(float) <= 0
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise UserError(f"{path}, {out['_line'].iloc[i]}: {f} must be > 0, got {out[f].iloc[i]:g}")
    out["_file"] = str(path)
    if step:  # a log's rows in step order within each run (stable: equal steps keep the file's order)
        out["_step"] = _numbers(df, step, path, kind, "--step", required=False)
        out["_order"] = pd.factorize(out["run"])[0]  # runs stay in order of first appearance
        out = out.sort_values(["_order", "_step"], kind="stable").drop(columns=["_step", "_order"])
    return out


def _reduce(rows: pd.DataFrame, last: int) -> pd.DataFrame:
    """One row per run: loss/metric means over the last ``last`` rows, tokens of the last row."""
    recs = []
    for (_, run), g in rows.groupby(["_file", "run"], sort=False):
        tail = g.iloc[-last:]
        if tail["params"].nunique() > 1:
            raise UserError(f"{g['_file'].iloc[0]}, {tail['_line'].iloc[-1]}: run {run!r} has several params values "
                            f"({', '.join(map(str, tail['params'].unique()))}); map --run to a column that separates runs")
        recs.append({"run": run, "params": tail["params"].iloc[-1], "tokens": tail["tokens"].iloc[-1],
                     "unique_tokens": tail["unique_tokens"].iloc[-1], "loss": tail["loss"].mean(),
                     "metric": tail["metric"].mean(), "rows": len(tail)})
    return pd.DataFrame.from_records(recs)


def read_runs(paths: Union[str, Path, Sequence[Union[str, Path]]], *, params: Column, tokens: Column = None,
              unique_tokens: Column = None, loss: Column = None, metric: Column = None, run: str | None = None,
              step: str | None = None, tokens_per_step: Union[str, float, None] = None,
              last: int | None = 1) -> RunTable:
    """Read runs from one or more tables by column mapping (module doc). A run is the rows of one
    ``run`` value (without ``run``: the file when ``step`` is mapped, else each row); ``last=K``
    reduces it to one row, ``last=None`` keeps every logged row. Map ``loss`` and/or ``metric``."""
    files = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
    if not files:
        raise UserError("read_runs: no files given")
    if loss is None and metric is None:
        raise UserError("read_runs: map --loss or --metric (a column to fit)")
    if last is not None and int(last) < 1:
        raise UserError(f"--last must be >= 1, got {last}")
    cols = {"params": params, "tokens": tokens, "unique_tokens": unique_tokens, "loss": loss, "metric": metric}
    if tokens is None and step is None:
        raise UserError("read_runs: map --tokens, or --step with --tokens-per-step")
    rows = pd.concat([_map_file(p, cols, run, step, tokens_per_step) for p in files], ignore_index=True)
    frame = _reduce(rows, int(last)) if last is not None else rows.drop(columns=["_line", "_file"]).assign(rows=1)
    return RunTable(frame=frame.reset_index(drop=True), source=tuple(map(str, files)), last=last)
