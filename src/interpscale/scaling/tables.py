"""Reading a results table for the fitters, one copy of each rule the family fits, the backtest,
the forecast methods and the figures share: which rows (``select_rows``: one value of a column,
else the paper's preference with a warning; ``slice_rows``: achieved compute within the slice
tolerance of its target, App. G), which FLOPs accounting (``flops_per_token_per_param``), and
the cluster-bootstrap labels carried through every selection (``attach_groups``/``row_groups``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from interpscale.paper import SLICE_TOLERANCE
from interpscale.results_table import merge_repeats, repeats_message, with_slices

from ._base import emit
from interpscale.errors import UserError

ESTIMATOR_PREFERENCE = ("mdlm_elbo", "ar_ce", "fixed_rate", "fixed_grid", "per_block")  # paper §8.2.1

__all__ = ["ESTIMATOR_PREFERENCE", "GROUPS_COLUMN", "SLICE_TOLERANCE", "attach_groups", "fit_rows",
           "flops_per_token_per_param", "row_groups", "select_rows", "slice_rows"]

GROUPS_COLUMN = "__bootstrap_group__"  # carries the cluster labels through the row selections


def attach_groups(results: pd.DataFrame, groups, what: str) -> pd.DataFrame:
    """``results`` with its cluster labels (one per row, an array) in ``GROUPS_COLUMN``."""
    if groups is None:
        return results
    groups = np.asarray(groups)
    if len(groups) != len(results):
        raise ValueError(f"{what}: groups: {len(groups)} labels for {len(results)} rows")
    return results.assign(**{GROUPS_COLUMN: groups})


def row_groups(rows: pd.DataFrame):
    """The cluster labels of ``rows`` (None when the table was given no groups)."""
    return rows[GROUPS_COLUMN].to_numpy() if GROUPS_COLUMN in rows.columns else None


def _choice(what: str, want=None) -> str:
    """The CLI flag that chooses ``what`` (= ``want``): messages speak flags (docs/errors.md)."""
    if what == "annealed":
        return "--annealed / --no-annealed" if want is None else ("--annealed" if want else "--no-annealed")
    return f"--{what}" + ("" if want is None else f" {want}")


def select_rows(results: pd.DataFrame, col: str, want, prefer, what: str, warnings: list[str], *,
                caller: str = "fit_families", label: str = "") -> pd.DataFrame:
    """Rows with ``col == want``; with ``want`` None and several values in ``col``, the first
    of ``prefer`` present (else the smallest value), recorded in ``warnings``. ValueError when
    ``want`` is given but the column or the value is missing."""
    if col not in results.columns:
        if want is not None:
            raise UserError(f"{caller}: {_choice(what, want)} given but the table has no {col!r} column")
        return results
    if want is not None:
        out = results[results[col] == want]
        if out.empty:
            raise UserError(f"{caller}: {_choice(what, want)}: no rows with {col} = {want}; "
                            f"values: {sorted(results[col].dropna().unique().tolist())}")
        return out
    vals = results[col].dropna().unique().tolist()
    if len(vals) <= 1:
        return results
    pick = next((p for p in prefer if p in vals), sorted(vals, key=str)[0])
    emit(warnings, f"{label}{col} mixes {sorted(vals, key=str)}; using the rows with {col} = {pick} "
                   f"({_choice(what)} to choose)")
    return results[results[col] == pick]


def fit_rows(results: pd.DataFrame, *, family=None, estimator: str | None = None, annealed: bool | None = None,
             loss: str | None = None, groups=None, caller: str = "fit", warnings: list[str] | None = None,
             one_family: bool = False, predicted: bool = False, need=()) -> pd.DataFrame:
    """The rows a fit uses, one rule for fit, backtest, forecast, ledger, figures and report: a
    ValueError unless ``results`` is a table with the columns ``need``,
    ``groups`` attached (cluster labels), the ``annealed`` choice (else annealed rows when mixed),
    the families (``family``: a name, a list, or None for all; ``one_family``: None is allowed
    only when the table has one), each family's ``estimator`` (else the paper's preference when
    mixed), and with ``loss`` only rows with ``params``, ``tokens`` and ``loss``. Rows marked
    ``predicted`` (annealed losses predicted, not measured) are left out unless ``predicted``. A
    table without ``slice_flops`` gets each row's compute as its slice (``results_table.with_slices``);
    rows repeating another's run and step, or every column, are merged into one measurement
    (``results_table.merge_repeats``). Each fallback and merge is recorded in ``warnings``; a
    requested value that is missing is a ValueError naming it."""
    if not isinstance(results, pd.DataFrame):
        raise ValueError(f"{caller}: results must be a pandas DataFrame")
    results = with_slices(results)
    if missing := [c for c in need if c not in results.columns]:
        derive = " (slices come from a flops column, or from params and tokens)" if "slice_flops" in missing else ""
        raise UserError(f"{caller}: results table lacks column(s) {missing}{derive}; have {list(results.columns)}")
    warnings = [] if warnings is None else warnings
    if not predicted and "predicted" in results.columns:
        results = results[~results["predicted"].fillna(False).astype(bool)]
    results, pairs, averaged = merge_repeats(attach_groups(results, groups, caller), measured=[loss] if loss else [],
                                             ignore=[GROUPS_COLUMN])
    if pairs:
        emit(warnings, f"{caller}: {repeats_message(pairs, averaged)}")
    df = select_rows(results, "annealed", annealed, (True,), "annealed", warnings, caller=caller)
    if "family" in df.columns:
        fams = sorted(df["family"].dropna().unique().tolist(), key=str)
        want = [family] if isinstance(family, str) else list(family or [])
        if one_family and not want and len(fams) > 1:
            raise UserError(f"the table has several families {fams}; choose one (--only-family NAME)")
        if unknown := [f for f in want if f not in fams]:
            raise UserError(f"{caller}: family {unknown[0] if len(unknown) == 1 else unknown} not in the table; "
                            f"have {fams}")
        parts = [select_rows(df[df["family"] == f], "estimator", estimator, ESTIMATOR_PREFERENCE, "estimator",
                             warnings, caller=caller, label=f"{f}: ") for f in (want or fams)]
        df = pd.concat(parts) if parts else df.iloc[:0]
    else:
        df = select_rows(df, "estimator", estimator, ESTIMATOR_PREFERENCE, "estimator", warnings, caller=caller)
    return df if loss is None else df.dropna(subset=["params", "tokens", loss])


def slice_rows(rows: pd.DataFrame, tolerance: float | None = SLICE_TOLERANCE, *, compute: str = "flops",
               budget: str = "slice_flops") -> pd.DataFrame:
    """Rows whose achieved ``compute`` lies within ``tolerance`` of their slice target
    ``budget`` (all rows when ``tolerance`` is None or the table has no ``compute`` column;
    a row with an unknown achieved compute is left out)."""
    if tolerance is None or compute not in rows.columns or compute == budget:
        return rows
    dev = (rows[compute].astype(float) / rows[budget].astype(float) - 1.0).abs()
    return rows[dev <= tolerance]


def flops_per_token_per_param(rows: pd.DataFrame, compute: str = "flops") -> float:
    """k in C = k P D, read off the data (median over runs); 6 when there is no compute column."""
    if compute not in rows.columns or "tokens" not in rows.columns:
        return 6.0
    k = (rows[compute] / (rows["params"] * rows["tokens"])).to_numpy(float)
    k = k[np.isfinite(k) & (k > 0)]
    return float(np.median(k)) if k.size else 6.0

