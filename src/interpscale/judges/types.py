"""Records the judges exchange with the rest of the package (no torch, no I/O), and how a
judged result went (``outcome``: how many scores there are, how many failed and why)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Protocol, Sequence, get_args, runtime_checkable
from interpscale.errors import UserError

# How a judge reply was (or was not) turned into a score.
#   ok          parsed on the first answer
#   reasked     unparseable first answer, the one re-ask parsed
#   parse_error still unparseable after the re-ask (score is None, excluded from means)
#   api_error   the call failed after its retries, or the reply body was malformed
#               (score is None, excluded; never cached, so a rerun asks again)
#   refused     the judge declined to answer (message.refusal or a content filter)
#   lexical     scored by the offline lexical backend, not an LLM
#   undefined   replies parsed but the score is undefined (e.g. a correlation with a
#               constant series in the auto-interp scorer); excluded like a failure
ParseStatus = Literal["ok", "reasked", "parse_error", "api_error", "refused", "lexical", "undefined"]
PARSE_STATUSES: tuple[str, ...] = get_args(ParseStatus)
FAILED_STATUSES: tuple[str, ...] = ("parse_error", "api_error", "refused", "undefined")


@dataclass(frozen=True)
class ConceptCard:
    """The paper's semantic card for a concept: label, one-sentence description and
    characteristic words (Steerling §4.5 / App. C)."""

    label: str
    description: str
    words: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not self.label.strip():
            raise UserError(f"ConceptCard.label must be a non-empty string, got {self.label!r}")
        if not isinstance(self.description, str):
            raise UserError(f"ConceptCard.description must be a string, got {self.description!r}")
        object.__setattr__(self, "words", tuple(self.words))
        if bad := [w for w in self.words if not isinstance(w, str) or not w.strip()]:
            raise UserError(f"ConceptCard {self.label!r}: words must be non-empty strings, got {bad!r}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ConceptCard":
        """Build from ``{label, description, words}`` (the concepts.json row format)."""
        if not isinstance(d, dict) or "label" not in d:
            raise UserError(f"concept card needs a 'label' key, got {d!r}")
        return cls(str(d["label"]), str(d.get("description", "")), tuple(d.get("words", ()) or ()))

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "description": self.description, "words": list(self.words)}


@dataclass(frozen=True)
class JudgeRecord:
    """One judged item, what every backend returns and every scorer reports: ``value`` the
    parsed reply (a 1-5 / 0-2 score, or a dict, list or text), None when it failed (never a
    zero); ``expected`` the probability-weighted score from ``top_logprobs`` when given."""

    value: Any
    raw: str
    status: ParseStatus
    cached: bool = False
    expected: Optional[float] = None
    backend: str = "llm"
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in PARSE_STATUSES:
            raise ValueError(f"JudgeRecord.status must be one of {PARSE_STATUSES}, got {self.status!r}")
        if self.value is None and self.status in ("ok", "reasked"):
            raise ValueError(f"JudgeRecord with status {self.status!r} needs a value")

    @property
    def score(self) -> Optional[float]:
        v = self.value
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def to_dict(self) -> dict[str, Any]:
        d = {"score": self.score, "raw": self.raw, "status": self.status, "cached": self.cached,
             "expected": self.expected, "backend": self.backend, "meta": dict(self.meta)}
        if self.value is not None and self.score is None:  # a structured reply
            d["value"] = self.value
        return d


@runtime_checkable
class Judge(Protocol):
    """What the scorers need of a judge; the four backends implement it: ``JudgeClient``
    (an OpenAI-compatible endpoint), ``LexicalJudge`` (offline), ``BatchWriteJudge`` and
    ``BatchReadJudge`` (OpenAI Batch API files). Build one with ``judges.build_judge``."""

    backend: str  # "llm" or "lexical"
    label: str  # who judged, as every output states it
    templates: Any  # the TemplateSet its prompts come from
    usage: Any  # a UsageStats: what it sent and what came back

    def run(self, tasks: Sequence[Any]) -> list[JudgeRecord]:
        """One record per task (a ``JudgeTask``), in task order."""

    def config(self) -> dict[str, Any]:
        """Its settings, for the outputs (never the API key)."""


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
        top = "; ".join(f"{r} x{c}" for r, c in list(self.reasons.items())[:3])
        why = f" ({top})" if self.reasons else ""
        parts = [f"{k} {status}{why if status == 'api_error' else ''}" for status, k in self.failures.items()]
        return f"{self.n_failed} of {self.n} judge scores failed: " + ", ".join(parts)


def outcome(result: Any) -> Outcome:
    """How ``result`` (any judged result) went; the CLI prints its failures and exits 1 when
    nothing at all was scored."""
    recs = result_records(result)
    failures = Counter(r.status for r in recs if r.score is None and r.status in FAILED_STATUSES)
    reasons = Counter(r.raw.splitlines()[0][:120] if r.raw else "no detail" for r in recs if r.status == "api_error")
    return Outcome(len(recs), sum(r.score is not None for r in recs), dict(failures.most_common()),
                   dict(reasons.most_common()))
