"""Known concept alignment (App. E) and concept relevance (App. C) scorers, and the summary
every judge result reports (means over parsed items only, failures counted next to them)."""

from __future__ import annotations

import math
import random
import string
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Optional, Sequence

from interpscale.judges.build import build_judge
from interpscale.judges.client import JudgeTask
from interpscale.judges.types import ConceptCard, Judge, JudgeRecord


def to_record(reply: JudgeRecord, value: Any = None, **meta: Any) -> JudgeRecord:
    """A reply (or one value out of a multi-score reply) as a numeric JudgeRecord: a value
    that is not a number fails as ``parse_error``."""
    v = reply.value if value is None else value
    ok = reply.status in ("ok", "reasked", "lexical") and isinstance(v, (int, float)) and not isinstance(v, bool)
    failed = reply.status if reply.status in ("parse_error", "api_error", "refused") else "parse_error"
    return replace(reply, value=float(v) if ok else None, status=reply.status if ok else failed,
                   expected=reply.expected if ok else None, meta=meta)


def fmt(x: Optional[float]) -> str:
    """A score in a markdown table: three decimals, ``n/a`` when missing."""
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


@dataclass(frozen=True)
class ScoreSummary:
    """Mean over parsed records; failures are counted, never averaged in as zeros."""

    mean: Optional[float]
    n: int
    n_parse_failures: int
    n_api_errors: int
    n_cached: int
    expected_mean: Optional[float] = None
    n_refused: int = 0

    @classmethod
    def of(cls, records: Sequence[JudgeRecord]) -> "ScoreSummary":
        scores = [r.score for r in records if r.score is not None]
        exp = [r.expected for r in records if r.expected is not None]
        return cls(mean=sum(scores) / len(scores) if scores else None, n=len(scores),
                   n_parse_failures=sum(r.status == "parse_error" for r in records),
                   n_api_errors=sum(r.status == "api_error" for r in records),
                   n_cached=sum(r.cached for r in records),
                   expected_mean=sum(exp) / len(exp) if exp else None,
                   n_refused=sum(r.status == "refused" for r in records))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def refused_note(self) -> str:
        return f"\nThe judge refused {self.n_refused} item(s) (not scored, excluded from the mean).\n" \
            if self.n_refused else ""


def sample_indices(n: int, n_sample: int | None, seed: int) -> list[int]:
    """A seeded random subset of ``range(n)`` of ``n_sample`` indices, sorted (all when None or more)."""
    idx = list(range(n))
    return sorted(random.Random(seed).sample(idx, n_sample)) if n_sample is not None and n_sample < n else idx


@dataclass(frozen=True)
class _Scored:
    """A scorer's records and their summary, who judged (``label``) and what it sent."""

    records: tuple  # JudgeRecords; relevance: a tuple of them per chunk ([chunk][candidate])
    summary: ScoreSummary
    backend: str
    label: str
    usage: dict[str, Any] = field(default_factory=dict)

    def _dict(self, metric: str, records: list, **extra: Any) -> dict[str, Any]:
        return {"metric": metric, "scale": [1, 5], "backend": self.backend, "judge": self.label,
                "summary": self.summary.to_dict(), **extra, "usage": self.usage, "records": records}


@dataclass(frozen=True)
class AlignmentResult(_Scored):
    """Known concept alignment: per-concept records and their mean (§7)."""

    @property
    def mean(self) -> Optional[float]:
        return self.summary.mean

    def to_dict(self) -> dict[str, Any]:
        return self._dict("known_concept_alignment", [r.to_dict() for r in self.records])

    def to_markdown(self) -> str:
        s = self.summary
        return (f"Known concept alignment (1-5), judge: {self.label}\n\n"
                f"| Concepts scored | Mean | Parse failures | API errors |\n|---|---|---|---|\n"
                f"| {s.n} | {fmt(s.mean)} | {s.n_parse_failures} | {s.n_api_errors} |\n" + s.refused_note())


def score_alignment(cards: Sequence[ConceptCard], top_tokens: Sequence[Sequence[str]], *,
                    judge: Judge | None = None, n_sample: int | None = None, seed: int = 0) -> AlignmentResult:
    """Rate how well each concept's top-K promoted tokens T_k(c) = TopK(W K_c) express its
    label and description, 1–5 (App. E); the metric is the mean over a seeded random
    subset of ``n_sample`` concepts (all when None)."""
    if len(cards) != len(top_tokens):
        raise ValueError(f"score_alignment: {len(cards)} cards but {len(top_tokens)} token lists")
    judge = build_judge(judge)
    idx, tasks = sample_indices(len(cards), n_sample, seed), []
    for i in idx:
        toks = [str(t) for t in top_tokens[i]]
        if not toks:
            raise ValueError(f"score_alignment: concept {cards[i].label!r} (index {i}) has no tokens")
        shown = "\n".join(t.strip() or repr(t) for t in toks)
        tasks.append(JudgeTask(judge.templates["alignment"], {"label": cards[i].label, "tokens": shown,
                                                              "description": cards[i].description},
                               data={"card": cards[i], "tokens": toks}))
    records = tuple(to_record(r, concept=cards[i].label, index=i) for i, r in zip(idx, judge.run(tasks)))
    return AlignmentResult(records, ScoreSummary.of(records), judge.backend, judge.label, judge.usage.to_dict())


@dataclass(frozen=True)
class RelevanceResult(_Scored):
    """Concept relevance per (chunk, candidate), 1–5 (App. C). ``success_rate`` is the
    share of parsed scores ≥ 2, the paper's 'at least minimally present' threshold."""

    @property
    def success_rate(self) -> Optional[float]:
        s = [r.score for row in self.records for r in row if r.score is not None]
        return sum(x >= 2 for x in s) / len(s) if s else None

    def to_dict(self) -> dict[str, Any]:
        return self._dict("concept_relevance", [[r.to_dict() for r in row] for row in self.records],
                          success_rate=self.success_rate)

    def to_markdown(self) -> str:
        s = self.summary
        return (f"Concept relevance (1-5), judge: {self.label}\n\n"
                f"| Scores | Mean | Success (>=2) | Parse failures | API errors |\n|---|---|---|---|---|\n"
                f"| {s.n} | {fmt(s.mean)} | {fmt(self.success_rate)} | {s.n_parse_failures} "
                f"| {s.n_api_errors} |\n" + s.refused_note())


def score_relevance(chunks: Sequence[str], candidates: Sequence[Sequence[ConceptCard]], *,
                    judge: Judge | None = None) -> RelevanceResult:
    """Score each chunk against its candidate concepts in one call (letters A, B, ...),
    reading back a JSON object of 1–5 scores (App. C)."""
    if len(chunks) != len(candidates):
        raise ValueError(f"score_relevance: {len(chunks)} chunks but {len(candidates)} candidate lists")
    judge = build_judge(judge)
    tasks = []
    for i, (chunk, cards) in enumerate(zip(chunks, candidates)):
        if not cards or len(cards) > 26:
            raise ValueError(f"score_relevance: chunk {i} needs 1-26 candidate concepts, got {len(cards)}")
        letters = list(string.ascii_uppercase[: len(cards)])
        listing = "\n".join(f"{k}. {c.label}: {c.description}" for k, c in zip(letters, cards))
        tasks.append(JudgeTask(judge.templates["relevance"], {"chunk": chunk, "concepts": listing},
                               parse_kwargs={"keys": letters},
                               data={"chunk": chunk, "cards": list(cards), "letters": letters}))
    rows = tuple(tuple(to_record(reply, (reply.value or {}).get(k), chunk=i, concept=c.label)
                       for k, c in zip(string.ascii_uppercase, cards))
                 for i, (reply, cards) in enumerate(zip(judge.run(tasks), candidates)))
    flat = [r for row in rows for r in row]
    return RelevanceResult(rows, ScoreSummary.of(flat), judge.backend, judge.label, judge.usage.to_dict())
