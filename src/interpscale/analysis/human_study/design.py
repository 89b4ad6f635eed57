"""Design matrices shared by the Bayesian and frequentist ordinal fits (treatment coding)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ._validate import ordinal_codes, require_columns, require_no_missing


@dataclass(frozen=True)
class Design:
    """Everything a fitter needs, decoupled from column names.

    ``X`` holds one column per fixed-effect coefficient (treatment contrasts against the
    reference level of each factor, numeric covariates as given; no intercept, because the
    ordinal thresholds absorb it). ``groups`` maps each random-intercept factor to
    ``(codes, level_names)``.
    """

    y: np.ndarray  # (n,) ordinal codes 0..K-1
    levels: tuple
    X: np.ndarray  # (n, p)
    coef_names: tuple[str, ...]
    groups: dict[str, tuple[np.ndarray, tuple[str, ...]]]
    index: pd.Index

    @property
    def n(self) -> int:
        return len(self.y)


def coef_name(factor: str, level: str) -> str:
    return f"{factor}[{level}]"


def build_design(
    data: pd.DataFrame,
    *,
    response: str,
    fixed: Sequence[str],
    random: Sequence[str] = (),
    reference: Mapping[str, str] | None = None,
    levels: Sequence = (1, 2, 3, 4, 5),
) -> Design:
    """Treatment-code ``fixed`` factors and index ``random`` factors of ``data``.

    A factor listed in ``reference`` uses that level as baseline (it must occur); other
    non-numeric factors use their first sorted level; numeric columns enter as covariates.
    """
    reference = dict(reference or {})
    fixed, random = list(fixed), list(random)
    require_columns(data, [response, *fixed, *random], "data")
    require_no_missing(data, [response, *fixed, *random], "data")
    unknown = set(reference) - set(fixed)
    if unknown:
        raise ValueError(f"reference given for {sorted(unknown)}, which are not fixed effects {fixed}")
    y = ordinal_codes(data[response], levels, response, "data")
    cols, names = [], []
    for factor in fixed:
        col = data[factor]
        if pd.api.types.is_numeric_dtype(col) and factor not in reference:
            cols.append(col.to_numpy(float))
            names.append(factor)
            continue
        col = col.astype(str)
        present = sorted(col.unique())
        ref = str(reference.get(factor, present[0]))
        if ref not in present:
            raise ValueError(f"reference level {ref!r} not found in column {factor!r} (levels: {present})")
        for level in present:
            if level != ref:
                cols.append((col == level).to_numpy(float))
                names.append(coef_name(factor, level))
    X = np.column_stack(cols) if cols else np.zeros((len(data), 0))
    groups = {}
    for g in random:
        codes, uniques = pd.factorize(data[g].astype(str), sort=True)
        groups[g] = (codes.astype(np.int64), tuple(uniques))
    return Design(y=y, levels=tuple(levels), X=X, coef_names=tuple(names), groups=groups, index=data.index)
