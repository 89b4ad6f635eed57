"""On-disk sqlite cache of finished judge calls, committed as each result arrives, and
the cost ledger of every run that used it.

The key hashes everything that determines a reply and nothing secret (the API key is never
part of a key or a row). Several processes may share one cache file: opening retries while
another holds the lock (``_open``), and every write waits under a busy timeout.
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from interpscale.errors import UserError

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
_LEDGER_COUNTS = ("requests", "retries", "reasks", "prompt_tokens", "completion_tokens")
# One row per (run, model): what the run sent and was billed for (prices per 1M tokens).
_LEDGER = f"""
CREATE TABLE IF NOT EXISTS ledger (
    run TEXT NOT NULL,
    model TEXT NOT NULL,
    base_url TEXT NOT NULL,
    started REAL NOT NULL,
    updated REAL NOT NULL,
    {", ".join(f"{c} INTEGER NOT NULL DEFAULT 0" for c in _LEDGER_COUNTS)},
    price_in_per_mtok REAL,
    price_out_per_mtok REAL,
    PRIMARY KEY (run, model)
)
"""
BUSY_TIMEOUT_S = 60.0


def token_cost(prompt_tokens: int, completion_tokens: int, price_in: Optional[float],
               price_out: Optional[float]) -> Optional[float]:
    """The cost of the tokens at prices per 1M tokens (None unless both prices are known)."""
    if price_in is None or price_out is None:
        return None
    return (prompt_tokens * price_in + completion_tokens * price_out) / 1e6


def cache_key(*, model: str, base_url: str, messages: list[dict], sampling: Mapping[str, Any],
              template_version: str, output: str) -> str:
    payload = {"model": model, "base_url": base_url.rstrip("/"), "messages": messages,
               "sampling": dict(sorted(sampling.items())), "template": template_version, "output": output}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class JudgeCacheError(UserError):
    """The cache file cannot be opened as a judge cache (bad input: the CLI exits 2)."""


class JudgeCache:
    """``get_many(keys)`` / ``put(key, ...)`` over one sqlite file (WAL mode, so a killed
    run loses at most the call in flight and a reader never blocks the writer)."""

    def __init__(self, path: str | Path, *, busy_timeout: float = BUSY_TIMEOUT_S):
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = _open(str(path), busy_timeout)
        except sqlite3.Error as exc:  # a directory, another kind of file, no permission, ...
            raise JudgeCacheError(f"judge cache {path}: cannot use it as an sqlite database ({exc})") from None

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
            meta: Mapping[str, Any], ledger: Optional["LedgerDelta"] = None) -> None:
        """Store one finished call (and, in the same transaction, the ledger counts so far)."""
        with self._db:
            self._db.execute("INSERT OR REPLACE INTO calls VALUES (?, ?, ?, ?, ?, ?, ?)",
                             (key, raw, None if value is None else json.dumps(value), status, expected,
                              json.dumps(dict(meta), sort_keys=True), time.time()))
            if ledger is not None:
                self._add_ledger(ledger)

    # ---- cost ledger -------------------------------------------------------------------
    def add_ledger(self, delta: "LedgerDelta") -> None:
        """Add a run's counts since its last write (no-op when nothing happened)."""
        with self._db:
            self._add_ledger(delta)

    def _add_ledger(self, delta: "LedgerDelta") -> None:
        counts = delta.take()
        if counts is None:
            return
        now = time.time()
        try:
            self._db.execute(
                "INSERT INTO ledger (run, model, base_url, started, updated, price_in_per_mtok, price_out_per_mtok) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(run, model) DO NOTHING",
                (delta.run, delta.model, delta.base_url, now, now, delta.price_in, delta.price_out))
            sets = ", ".join(f"{c} = {c} + ?" for c in _LEDGER_COUNTS)
            self._db.execute(f"UPDATE ledger SET {sets}, updated = ? WHERE run = ? AND model = ?",
                             (*(counts[c] for c in _LEDGER_COUNTS), now, delta.run, delta.model))
        except BaseException:
            delta.add(**counts)  # not written: counted again with the next write
            raise

    def ledger(self) -> list[dict[str, Any]]:
        """Every run's row (oldest first), with its cost where both prices are known."""
        cur = self._db.execute("SELECT * FROM ledger ORDER BY started, run, model")
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r)) for r in cur.fetchall()]
        return [{**r, "cost": token_cost(r["prompt_tokens"], r["completion_tokens"], r["price_in_per_mtok"],
                                         r["price_out_per_mtok"])} for r in rows]

    def ledger_totals(self) -> dict[str, Any]:
        """Totals over every run recorded in this cache, per model and overall; ``cost`` is
        None when some run had no prices (its tokens are still counted)."""
        per: dict[str, dict[str, Any]] = {}
        for r in self.ledger():
            m = per.setdefault(r["model"], {**dict.fromkeys(_LEDGER_COUNTS, 0), "runs": 0, "cost": 0.0})
            m.update({c: m[c] + r[c] for c in _LEDGER_COUNTS}, runs=m["runs"] + 1)
            m["cost"] = None if m["cost"] is None or r["cost"] is None else m["cost"] + r["cost"]
        total = {c: sum(m[c] for m in per.values()) for c in _LEDGER_COUNTS}
        costs = [m["cost"] for m in per.values()]
        total["cost"] = None if not costs or None in costs else sum(costs)
        return {"models": per, "total": total}

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM calls").fetchone()[0])

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "JudgeCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _open(path: str, busy_timeout: float) -> sqlite3.Connection:
    """Connect, switch to WAL and create the tables, retrying while another process holds
    the lock (``PRAGMA journal_mode=WAL`` on a fresh file can fail at once with
    "database is locked" instead of waiting on the busy handler)."""
    deadline = time.monotonic() + busy_timeout
    delay = 0.01
    while True:
        db = sqlite3.connect(path, timeout=busy_timeout, check_same_thread=False)
        try:
            db.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            with db:
                db.execute(_SCHEMA)
                db.execute(_LEDGER)
            return db
        except sqlite3.OperationalError as exc:
            db.close()
            msg = str(exc).lower()
            if ("locked" not in msg and "busy" not in msg) or time.monotonic() > deadline:
                raise
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 0.5)


class LedgerDelta:
    """A run's counts not yet written to the ledger (one per client and model)."""

    def __init__(self, run: str, model: str, base_url: str, price_in: Optional[float], price_out: Optional[float]):
        self.run, self.model, self.base_url = run, model, base_url
        self.price_in, self.price_out = price_in, price_out
        self.counts = {c: 0 for c in _LEDGER_COUNTS}

    def add(self, **counts: int) -> None:
        for k, v in counts.items():
            self.counts[k] += v

    def take(self) -> Optional[dict[str, int]]:
        if not any(self.counts.values()):
            return None
        out, self.counts = self.counts, {c: 0 for c in _LEDGER_COUNTS}
        return out
