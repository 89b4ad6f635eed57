"""The one markdown (GitHub pipe) table writer, for the judges' results and the reports."""

from __future__ import annotations

from typing import Any, Iterable, Sequence


def md_table(header: Sequence[Any], rows: Iterable[Sequence[Any]]) -> str:
    """A markdown table: the header, its ``|---|`` line and one line per row (newline-terminated);
    cells written with ``str`` (a caller formats and escapes its own values)."""
    line = lambda cells: "| " + " | ".join(map(str, cells)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "---|" * len(header), *map(line, rows)]) + "\n"
