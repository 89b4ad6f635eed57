"""On-disk sqlite cache of finished judge calls, committed as each result arrives.

The key hashes everything that determines a reply (model, base URL, messages, sampling
parameters, template version, reply format) and nothing secret: the API key is never
part of a key or a row.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY,
    raw TEXT NOT NULL,
    value TEXT,
    status TEXT NOT NULL,
    expected REAL,
    meta TEXT NOT NULL,
    created REAL NOT NULL
)
"""


def cache_key(*, model: str, base_url: str, messages: list[dict], sampling: Mapping[str, Any],
              template_version: str, output: str) -> str:
    payload = {"model": model, "base_url": base_url.rstrip("/"), "messages": messages,
               "sampling": dict(sorted(sampling.items())), "template": template_version, "output": output}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class JudgeCache:
    """``get_many(keys)`` / ``put(key, ...)`` over one sqlite file (WAL mode, so a killed
    run loses at most the call in flight and a reader never blocks the writer)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), timeout=30, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(_SCHEMA)
        self._db.commit()

    def get_many(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        keys = list(dict.fromkeys(keys))
        out: dict[str, dict[str, Any]] = {}
        for i in range(0, len(keys), 500):  # sqlite's bound-parameter limit
            chunk = keys[i: i + 500]
            q = f"SELECT key, raw, value, status, expected, meta FROM calls WHERE key IN ({','.join('?' * len(chunk))})"
            for key, raw, value, status, expected, meta in self._db.execute(q, chunk):
                out[key] = {"raw": raw, "value": None if value is None else json.loads(value),
                            "status": status, "expected": expected, "meta": json.loads(meta)}
        return out

    def put(self, key: str, *, raw: str, value: Any, status: str, expected: Optional[float],
            meta: Mapping[str, Any]) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO calls VALUES (?, ?, ?, ?, ?, ?, ?)",
            (key, raw, None if value is None else json.dumps(value), status, expected,
             json.dumps(dict(meta), sort_keys=True), time.time()),
        )
        self._db.commit()

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM calls").fetchone()[0])

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "JudgeCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
