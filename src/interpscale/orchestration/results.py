"""The results table: one row per evaluated checkpoint, parquet + CSV twin, written atomically."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterable

import pandas as pd

from interpscale._atomic import atomic_path
from interpscale.results_table import RESULT_COLUMNS, read_results  # noqa: F401  (the one reader, re-exported)

log = logging.getLogger(__name__)
# extra columns allowed, e.g. checkpoint, anneal_from, estimator-specific
KEY = ("run_id", "checkpoint", "estimator")


def _ordered(df: pd.DataFrame) -> pd.DataFrame:
    """The table's columns first (missing ones all NA), extra columns after."""
    extra = [c for c in df.columns if c not in RESULT_COLUMNS]
    return df.reindex(columns=[*RESULT_COLUMNS, *extra], fill_value=pd.NA)


def write_results(df: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write ``path`` (.parquet) and its ``.csv`` twin, each atomically."""
    path = Path(path)
    if path.suffix != ".parquet":
        raise ValueError(f"results path must end in .parquet, got {path}")
    df = _ordered(df)
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False)
    with atomic_path(path.with_suffix(".csv")) as tmp:
        df.to_csv(tmp, index=False)
    return path


def merge_results(tables: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate tables; for duplicate (run_id, checkpoint, estimator) keep the last."""
    frames = [t for t in tables if len(t)]
    if not frames:
        return _ordered(pd.DataFrame())
    df = pd.concat(frames, ignore_index=True)
    key = [k for k in KEY if k in df.columns]
    df = df.drop_duplicates(subset=key, keep="last")
    return _ordered(df.sort_values(["family", "slice_flops", "params", "step", "annealed"], kind="stable")
                    .reset_index(drop=True))


def _with_fingerprint(df: pd.DataFrame, run_dir: Path) -> pd.DataFrame:
    """A run's rows with the ``data_fingerprint`` column (corpus and tokenizer hashes of its
    data), so rows trained on different corpora are never mistaken for replicates."""
    if not len(df) or not (run_dir / "data.json").exists():
        return df
    from interpscale.orchestration.rundir import data_fingerprint, fingerprint_label

    try:
        label = fingerprint_label(data_fingerprint(run_dir))
    except (ValueError, OSError, KeyError):  # the data moved or predates fingerprints
        return df
    return df.assign(data_fingerprint=label)


def collect(run_dirs: Iterable[str | os.PathLike], out: str | os.PathLike | None = None) -> pd.DataFrame:
    """Merge every RUN_DIR/results.parquet (each row labelled with its ``data_fingerprint``);
    write to ``out`` (parquet + CSV) when given.  Rows of several corpora are logged."""
    df = merge_results(_with_fingerprint(read_results(Path(d) / "results.parquet", missing_ok=True), Path(d))
                       for d in run_dirs)
    if "data_fingerprint" in df.columns and df["data_fingerprint"].nunique() > 1:
        log.warning("the collected results come from %d different data sets (column data_fingerprint: %s)",
                    df["data_fingerprint"].nunique(), sorted(df["data_fingerprint"].dropna().unique()))
    if out is not None:
        write_results(df, out)
    return df
