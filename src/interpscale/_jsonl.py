"""Strict JSONL reading shared by every loader: blank lines are skipped, a bad line is an
error naming the file and its line number (never silently dropped)."""

from __future__ import annotations

import json
import os
from typing import Any, Iterator


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, object)`` for each non-blank line of ``path`` (1-based numbers)."""
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: line {lineno} is not valid JSON ({exc.msg})") from None
