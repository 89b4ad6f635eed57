"""Run tables from outside the toolkit by column mapping (docs/laws.md, "External run tables"); per-step
logs reduced to one row per run as ladder studies do it (Bhagia et al. 2024, ``moving_avg``)::

    runs = read_runs("ladder.csv", params="N", tokens="throughput/total_tokens", loss="eval/c4/CE",
                     run="run", step="_step", tokens_per_step="batch_size_in_tokens", last=5)
    runs.frame  # run, params, tokens, unique_tokens, loss, metric, rows, logged, step, line, file
                # (last=None: every logged row)

Bad input raises :class:`interpscale.errors.UserError` naming the file, column, line and value.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence, Union

import numpy as np
import pandas as pd

from interpscale.errors import UserError

log = logging.getLogger("interpscale.scaling.external")

Column = Union[str, Mapping[str, float], None]
FIELDS = ("params", "tokens", "unique_tokens", "loss", "metric")
POSITIVE = ("params", "tokens", "unique_tokens")


@dataclass(frozen=True)
class RunTable:
    """Mapped runs: ``frame`` with columns run, params, tokens, unique_tokens, loss, metric, step
    (absent fields are NaN), ``rows`` (logged rows averaged), ``logged`` (rows the run logged),
    ``line`` / ``file`` (where its last row is, as in the file); ``source`` the file(s)."""

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
    cols = list(({spec: 1.0} if isinstance(spec, str) else spec).items())  # {column: weight}: weighted mean
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


def _map_file(path: Path, cols: dict, run, step, tokens_per_step, keep=None) -> pd.DataFrame:
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
    out["step"] = _numbers(df, step, path, kind, "--step", required=False) if step else np.nan
    if keep is not None:  # the rows a one-law command fits (one family, ...: _commands.rows)
        out = out[np.asarray(keep(path, df), bool)]
    if step:  # a log's rows in step order within each run (stable: equal steps keep the file's order)
        out["_order"] = pd.factorize(out["run"])[0]  # runs stay in order of first appearance
        out = out.sort_values(["_order", "step"], kind="stable").drop(columns=["_order"])
    elif not run:
        _say_run_column(df, path)
    return out


RUN_LIKE = ("run_id", "run", "run_name", "name", "model")  # columns that often name a row's run


def _say_run_column(df: pd.DataFrame, path: Path) -> None:
    """Each row is taken as one run (no --run/--step): warn once when a column looks like it names
    fewer runs than there are rows (checkpoints of one run are not separate runs)."""
    for col in RUN_LIKE:
        if col in df.columns and 1 < df[col].nunique() < len(df):
            log.warning("%s: each of the %d rows is taken as one run, but column %r names %d runs; map --run %s "
                        "when rows are checkpoints of fewer runs", path, len(df), col, df[col].nunique(), col)
            return


def _say_repeats(rows: pd.DataFrame) -> None:
    """One log line when runs repeat another run's (params, tokens, loss): they are kept as data."""
    cols = [c for c in ("params", "tokens", "unique_tokens", "loss") if rows[c].notna().any()]
    dup = rows.duplicated(cols, keep="first").to_numpy()
    if dup.any():
        first = rows.groupby(cols, sort=False, dropna=False).ngroup().to_numpy()
        at = {g: i for i, g in reversed(list(enumerate(first)))}
        pairs = [f"{rows['line'].iloc[i]} repeats {rows['line'].iloc[at[first[i]]]}" for i in dup.nonzero()[0]]
        log.warning("%s: %d run(s) repeat another run's (%s) (%s); kept as repeated runs: each is one point of "
                    "the fit and one run the bootstrap resamples", ", ".join(dict.fromkeys(rows["file"])),
                    len(pairs), ", ".join(cols), ", ".join(pairs[:3]) + (", ..." if len(pairs) > 3 else ""))


def count_runs(runs: pd.DataFrame, last: int | None, per_run: str | None) -> str:
    """How many runs a fit used, in words: runs with their logged rows when a --run/--step column
    grouped them, else rows each taken as one run (``fit law``'s summary head)."""
    n = len(runs)
    if not per_run:
        return f"{n} rows (each taken as one run: no --run or --step column mapped)"
    if last is None:
        return f"{n} logged rows of {runs['run'].nunique()} runs (every logged row)"
    logged = int(runs["logged"].sum()) if "logged" in runs else n
    each = "the last logged row of each" if last == 1 else f"the mean of each run's last {last} logged rows"
    return f"{n} runs ({logged} logged rows; {each})"


def same_end_reason(paths, mapping: dict, last: int) -> str | None:
    """Why a fit of per-step logs has one distinct tokens (or params) value, when that is what
    ``--last`` left: every run ends at the same step. None when that is not the cause."""
    if not (mapping.get("run") or mapping.get("step")):
        return None
    runs = read_runs(paths, last=last, **mapping).frame
    for field in ("tokens", "params"):
        if runs[field].nunique() == 1 and len(runs) > 1:
            at = f"step {runs['step'].iloc[0]:g} " if runs["step"].nunique() == 1 and runs["step"].notna().all() else ""
            return (f"all {len(runs)} runs end at {at}with {field} {runs[field].iloc[0]:g}: --last {last} keeps each "
                    f"run's last {'row' if last == 1 else f'{last} rows'}, which leaves one distinct {field} value, "
                    "and the law needs at least two; fit runs of different lengths and sizes (or map --tokens / "
                    "--step to columns that differ between runs)")
    return None


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
                     "metric": tail["metric"].mean(), "rows": len(tail), "logged": len(g),
                     "step": tail["step"].iloc[-1], "line": tail["_line"].iloc[-1], "file": tail["_file"].iloc[-1]})
    return pd.DataFrame.from_records(recs)


def read_runs(paths: Union[str, Path, Sequence[Union[str, Path]]], *, params: Column, tokens: Column = None,
              unique_tokens: Column = None, loss: Column = None, metric: Column = None, run: str | None = None,
              step: str | None = None, tokens_per_step: Union[str, float, None] = None,
              last: int | None = 1, keep=None) -> RunTable:
    """Read runs from one or more tables by column mapping (module doc). A run is the rows of one
    ``run`` value (without ``run``: the file when ``step`` is mapped, else each row); ``last=K``
    reduces it to one row, ``last=None`` keeps every logged row. Map ``loss`` and/or ``metric``.
    ``keep(path, table)``: a boolean mask of the file's rows to read (default: all)."""
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
    rows = pd.concat([_map_file(p, cols, run, step, tokens_per_step, keep) for p in files], ignore_index=True)
    frame = (_reduce(rows, int(last)) if last is not None else
             rows.rename(columns={"_line": "line", "_file": "file"}).assign(rows=1, logged=1))
    if last is not None:
        _say_repeats(frame)
    return RunTable(frame=frame.reset_index(drop=True), source=tuple(map(str, files)), last=last)
