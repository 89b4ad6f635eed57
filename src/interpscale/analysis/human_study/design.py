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


def parse_random(spec: str | Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Random-effect terms -> ``{group: slope factors}`` (empty tuple: intercept only).

    Each term is ``"rater"`` (or R's ``"1|rater"`` / ``"(1|rater)"``): a random intercept,
    or ``"candidate_type|rater"``: intercept plus random slopes of the fixed factor
    ``candidate_type`` by rater (``(candidate_type | rater)`` in R). A string is split on
    commas, as on the command line (``--random rater,concept``).
    """
    terms = [t for t in spec.split(",")] if isinstance(spec, str) else list(spec)
    out: dict[str, tuple[str, ...]] = {}
    for raw in terms:
        term = str(raw).strip().strip("()").replace(" ", "")
        if not term:
            continue
        lhs, _, group = term.rpartition("|")
        slopes = tuple(s for s in lhs.split("+") if s and s not in ("1", "0"))
        if not group or "|" in lhs:
            raise ValueError(f"random-effect term {raw!r} not understood; use 'group', '1|group' or 'factor|group'")
        if group in out:
            raise ValueError(f"grouping factor {group!r} appears twice in the random effects {list(terms)}")
        out[group] = slopes
    return out


def random_formula(response: str, fixed: Sequence[str], random: Mapping[str, Sequence[str]]) -> str:
    """The R formula of a model, e.g. ``rating ~ temp + contact + (1|judge)``."""
    terms = [*fixed] or ["1"]
    terms += [f"({' + '.join(s) if s else '1'}|{g})" for g, s in random.items()]
    return f"{response} ~ " + " + ".join(terms)


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
