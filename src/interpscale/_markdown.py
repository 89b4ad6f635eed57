"""The one markdown (GitHub pipe) table writer, for the judges' results and the reports, and the one
rule for when a banded value is printed as a number at all (``banded_cell``, issue 45)."""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence


def md_table(header: Sequence[Any], rows: Iterable[Sequence[Any]]) -> str:
    """A markdown table: the header, its ``|---|`` line and one line per row (newline-terminated);
    cells written with ``str`` (a caller formats and escapes its own values)."""
    line = lambda cells: "| " + " | ".join(map(str, cells)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "---|" * len(header), *map(line, rows)]) + "\n"


# Issue 45: beyond the sweep a band can span tens of decades; such a value is not a number a reader can use.
MAX_DECADES = 2.0  # a positive value whose band spans more decades than this is "not determined", not a number


def band_decades(lo: float, hi: float) -> float:
    """Decades spanned by a positive quantity's band [lo, hi], log10(hi / lo); inf when the band is
    unbounded (lo <= 0, hi infinite) and nan when it was not computed."""
    if lo != lo or hi != hi:  # nan: no band
        return float("nan")
    if not (lo > 0 and hi > 0 and hi != float("inf")):
        return float("inf")
    return math.log10(hi / lo)


def determined(lo: float, hi: float, *, flagged: bool = False) -> bool:
    """Whether a positive value with band [lo, hi] may be printed as a number: its band spans at most
    ``MAX_DECADES`` decades and the method that made it is not flagged."""
    return not flagged and band_decades(lo, hi) <= MAX_DECADES


def banded_cell(value: float, lo: float, hi: float, *, flagged: bool = False) -> str:
    """A positive value's cell: ``value [lo, hi]``, or "not determined (band lo–hi)" when the band spans
    more than ``MAX_DECADES`` decades, is unbounded, or the method that made it is flagged."""
    if not determined(lo, hi, flagged=flagged):
        return f"not determined (band {lo:.2g}–{hi:.2g}{', method flagged' if flagged else ''})"
    return f"{value:.3g} [{lo:.3g}, {hi:.3g}]"
