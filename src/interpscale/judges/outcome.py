"""How a judged result went: how many scores there are, how many failed and why.

``outcome(result)`` works on every result type of the judges package; the CLI uses it to
print the failures and to exit non-zero when nothing at all was scored.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable

from interpscale.judges.types import FAILED_STATUSES, JudgeRecord


def result_records(result: Any) -> list[JudgeRecord]:
    """Every JudgeRecord in an alignment, relevance, steering or auto-interp result."""
    if hasattr(result, "samples"):  # SteeringResult
        return [r for s in result.samples for r in (s.concept_score, s.quality_score, s.instruction_score)
                if r is not None]
    recs = result.records
    if isinstance(recs, dict):  # AutoInterpResult: method -> records
        return [r for rs in recs.values() for r in rs]
    return [r for item in recs for r in (item if isinstance(item, tuple) else (item,))]


@dataclass(frozen=True)
class Outcome:
    n: int  # judged items (records)
    n_scored: int
    failures: dict[str, int]  # status -> count, failures only
    reasons: dict[str, int]  # api_error descriptions -> count (most common first)

    @property
    def n_failed(self) -> int:
        return sum(self.failures.values())

    @property
    def all_failed(self) -> bool:
        return self.n > 0 and self.n_scored == 0

    def summary(self) -> str:
        """One line: '3 of 10 judge scores failed: 2 api_error (APIConnectionError x2), 1 parse_error'."""
        if not self.n_failed:
            return f"all {self.n} judge scores parsed"
        parts = []
        for status, k in self.failures.items():
            why = ""
            if status == "api_error" and self.reasons:
                why = " (" + "; ".join(f"{r} x{c}" for r, c in list(self.reasons.items())[:3]) + ")"
            parts.append(f"{k} {status}{why}")
        return f"{self.n_failed} of {self.n} judge scores failed: " + ", ".join(parts)


def outcome(result: Any) -> Outcome:
    return outcome_of(result_records(result))


def outcome_of(records: Iterable[JudgeRecord]) -> Outcome:
    recs = list(records)
    failures = Counter(r.status for r in recs if r.score is None and r.status in FAILED_STATUSES)
    reasons = Counter(r.raw.splitlines()[0][:120] if r.raw else "no detail" for r in recs if r.status == "api_error")
    return Outcome(len(recs), sum(r.score is not None for r in recs), dict(failures.most_common()),
                   dict(reasons.most_common()))
