"""Strict JSONL reading shared by every loader (blank lines are skipped, a bad line is an
error naming the file and its line number, never silently dropped), and the one converter
of values to plain JSON (:func:`jsonable`)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any, Iterator

from interpscale.errors import UserError


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, object)`` for each non-blank line of ``path`` (1-based numbers)."""
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{path}: line {lineno} is not valid JSON ({exc.msg})") from None


def jsonable(value: Any) -> Any:
    """The one converter to plain JSON values, used by every result's ``to_dict`` and every
    JSON file the package writes (a non-finite float is ``None``: JSON has no NaN)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy / torch arrays and scalars
        return jsonable(value.tolist())
    if hasattr(value, "to_dict") and callable(value.to_dict):
        return jsonable(value.to_dict())
    return str(value)
