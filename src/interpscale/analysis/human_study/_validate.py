"""Input validation for human-study tables: errors name the offending rows and values."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

RATING_COLUMNS = ("rater", "concept", "candidate_type", "label", "context", "rating")
PHASE1_COLUMNS = ("concept", "annotator", "name", "coherence")
SCALE = (1, 2, 3, 4, 5)
_SHOW = 8  # offending rows quoted in an error message


def _rows(index: Sequence, values: Sequence | None = None) -> str:
    items = list(index)
    if values is None:
        text = ", ".join(str(i) for i in items[:_SHOW])
    else:
        text = ", ".join(f"{i} ({v!r})" for i, v in list(zip(items, values))[:_SHOW])
    more = f" and {len(items) - _SHOW} more" if len(items) > _SHOW else ""
    return f"row(s) {text}{more}"


def require_columns(df: pd.DataFrame, columns: Sequence[str], what: str = "table") -> None:
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"{what} must be a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what} is missing column(s) {missing}; it has {list(df.columns)}")


def require_no_missing(df: pd.DataFrame, columns: Sequence[str], what: str = "table") -> None:
    """NaN / None anywhere in ``columns`` is an error: nothing is silently dropped."""
    for col in columns:
        bad = df.index[df[col].isna()]
        if len(bad):
            raise ValueError(
                f"{what}: column {col!r} has {len(bad)} missing value(s) at {_rows(bad)}; "
                "drop or impute them explicitly before fitting"
            )


def ordinal_codes(values: pd.Series, levels: Sequence, column: str, what: str = "table") -> np.ndarray:
    """Map an ordinal column onto 0..K-1; values outside ``levels`` raise, naming rows."""
    levels = list(levels)
    numeric = pd.api.types.is_numeric_dtype(values)
    keys = [float(v) for v in levels] if numeric else [str(v) for v in levels]
    as_key = values.astype(float) if numeric else values.astype(str)
    lookup = {k: i for i, k in enumerate(keys)}
    codes = as_key.map(lookup)
    bad = values.index[codes.isna()]
    if len(bad):
        raise ValueError(
            f"{what}: column {column!r} must take values in {levels}; "
            f"found {_rows(bad, values.loc[bad].tolist())}"
        )
    return codes.to_numpy(dtype=np.int64)


def validate_ratings(
    ratings: pd.DataFrame,
    *,
    reference: str = "human",
    min_rater_ratings: int = 2,
    scale: Sequence[int] = SCALE,
) -> pd.DataFrame:
    """Check a long-format Phase 2 table and return a clean copy (string ids, int ratings).

    Raises ``ValueError`` for a missing column, a missing value (NaN) in any required
    column, a rating outside ``scale`` or not a whole number, a ``reference`` level absent
    from ``candidate_type``, and a rater with fewer than ``min_rater_ratings`` ratings
    (such a rater's random intercept is identified by the prior alone; pass
    ``min_rater_ratings=1`` to keep them deliberately).
    """
    what = "ratings"
    require_columns(ratings, RATING_COLUMNS, what)
    require_no_missing(ratings, RATING_COLUMNS, what)
    df = ratings.copy()
    codes = ordinal_codes(df["rating"], scale, "rating", what)
    df["rating"] = np.asarray(scale)[codes]
    for col in ("rater", "concept", "candidate_type", "label", "context"):
        df[col] = df[col].astype(str)
    types = sorted(df["candidate_type"].unique())
    if reference not in types:
        raise ValueError(
            f"{what}: reference level {reference!r} not found in column 'candidate_type' "
            f"(levels: {types})"
        )
    if len(types) < 2:
        raise ValueError(f"{what}: need at least two candidate types, found {types}")
    counts = df.groupby("rater").size()
    thin = counts[counts < min_rater_ratings]
    if len(thin):
        rows = df.index[df["rater"].isin(thin.index)]
        raise ValueError(
            f"{what}: rater(s) {sorted(thin.index)} have fewer than {min_rater_ratings} "
            f"ratings ({_rows(rows)}); their random intercept would rest on the prior alone. "
            "Remove them or pass min_rater_ratings=1 to keep them."
        )
    return df


def validate_phase1(phase1: pd.DataFrame, *, scale: Sequence[int] = SCALE) -> pd.DataFrame:
    """Check a Phase 1 table (concept, annotator, name, coherence); ``name`` may be empty."""
    what = "phase1"
    require_columns(phase1, PHASE1_COLUMNS, what)
    require_no_missing(phase1, ("concept", "annotator", "coherence"), what)
    df = phase1.copy()
    codes = ordinal_codes(df["coherence"], scale, "coherence", what)
    df["coherence"] = np.asarray(scale)[codes]
    df["concept"] = df["concept"].astype(str)
    df["annotator"] = df["annotator"].astype(str)
    dup = df.index[df.duplicated(["concept", "annotator"], keep=False)]
    if len(dup):
        raise ValueError(f"{what}: an annotator rated the same concept twice at {_rows(dup)}")
    return df
