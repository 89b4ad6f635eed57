"""Steering-benchmark aggregation: Eq. 30, per-sample harmonic, held-out strength
selection, and the Table 9 / Table 17 layouts. Pure Python (no torch, no I/O)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Optional, Sequence

from interpscale.judges.scorers import fmt
from interpscale.judges.types import JudgeRecord


def harmonic(*scores: Optional[float]) -> Optional[float]:
    """Eq. 30: 2 / (1/concept + 1/quality), generalised to n scores (AxBench's three-judge
    harmonic). None if any score is missing; 0 if any score is 0 (the limit)."""
    if not scores or any(s is None for s in scores):
        return None
    if any(s < 0 for s in scores):
        raise ValueError(f"harmonic mean needs non-negative scores, got {scores}")
    return 0.0 if any(s == 0 for s in scores) else len(scores) / sum(1.0 / s for s in scores)


@dataclass(frozen=True)
class SteeringSample:
    """One judged continuation."""

    concept: str
    concept_index: int
    prompt_index: int
    prompt: str
    condition: str
    strength: Optional[float]
    split: str  # "select" (held-out strength choice) or "eval"
    continuation: str
    concept_score: JudgeRecord
    quality_score: JudgeRecord
    instruction_score: Optional[JudgeRecord] = None

    @property
    def sample_harmonic(self) -> Optional[float]:
        return harmonic(self.concept_score.score, self.quality_score.score)

    @property
    def sample_harmonic3(self) -> Optional[float]:
        instruction = self.instruction_score.score if self.instruction_score is not None else None
        return harmonic(self.concept_score.score, self.quality_score.score, instruction)  # None without it

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in ("concept", "concept_index", "prompt_index", "prompt", "condition",
                                           "strength", "split", "continuation")}
        for axis in ("concept", "quality", "instruction"):
            r: Optional[JudgeRecord] = getattr(self, f"{axis}_score")
            d.update({f"{axis}_{k}": None if r is None else getattr(r, k)
                      for k in ("score", "status", "cached")})
        return {**d, "sample_harmonic": self.sample_harmonic}


def _mean(xs: Sequence[float]) -> Optional[float]:
    return sum(xs) / len(xs) if xs else None


@dataclass(frozen=True)
class ConditionScores:
    """Table 9 / 17 row. Means are over parsed scores only; the failure counts say how
    many were left out (never counted as zeros)."""

    condition: str
    concept: Optional[float]
    quality: Optional[float]
    harmonic: Optional[float]  # Eq. 30 of the two means
    sample_harmonic: Optional[float]  # per-sample Eq. 30, averaged
    instruction: Optional[float] = None
    concept_expected: Optional[float] = None  # mean logprob-expected scores, when the server gave them
    quality_expected: Optional[float] = None
    n_samples: int = 0
    n_concept: int = 0
    n_quality: int = 0
    concept_parse_failures: int = 0
    quality_parse_failures: int = 0
    instruction_parse_failures: int = 0
    api_errors: int = 0
    refused: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def aggregate(samples: Sequence[SteeringSample], condition: str, split: str = "eval") -> ConditionScores:
    rows = [s for s in samples if s.condition == condition and s.split == split]
    recs = {axis: [r for s in rows if (r := getattr(s, f"{axis}_score")) is not None]
            for axis in ("concept", "quality", "instruction")}
    scores = {axis: [r.score for r in rs if r.score is not None] for axis, rs in recs.items()}
    fails = {axis: sum(r.status == "parse_error" for r in rs) for axis, rs in recs.items()}
    flat = [r for rs in recs.values() for r in rs]
    mc, mq = _mean(scores["concept"]), _mean(scores["quality"])
    return ConditionScores(
        condition=condition, concept=mc, quality=mq, harmonic=harmonic(mc, mq),
        sample_harmonic=_mean([h for s in rows if (h := s.sample_harmonic) is not None]),
        instruction=_mean(scores["instruction"]),
        concept_expected=_mean([r.expected for r in recs["concept"] if r.expected is not None]),
        quality_expected=_mean([r.expected for r in recs["quality"] if r.expected is not None]),
        n_samples=len(rows), n_concept=len(scores["concept"]), n_quality=len(scores["quality"]),
        concept_parse_failures=fails["concept"], quality_parse_failures=fails["quality"],
        instruction_parse_failures=fails["instruction"],
        api_errors=sum(r.status == "api_error" for r in flat),
        refused=sum(r.status == "refused" for r in flat))


def select_strengths(samples: Sequence[SteeringSample], objective: str = "harmonic") -> dict[str, float]:
    """Per concept, the steering strength with the best mean per-sample harmonic on the
    held-out selection prompts (AxBench-style); ties go to the smaller strength."""
    by: dict[str, dict[float, list[float]]] = defaultdict(dict)
    for s in samples:
        if s.condition == "steered" and s.split == "select" and s.strength is not None:
            h = s.sample_harmonic3 if objective == "harmonic3" else s.sample_harmonic
            # every strength is registered, even one whose samples did not parse
            by[s.concept].setdefault(s.strength, []).extend([] if h is None else [h])
    out = {}
    for concept, per in by.items():
        scored = {st: sum(v) / len(v) for st, v in per.items() if v}
        # the best mean (ties: the smaller strength); nothing parsed: the gentlest strength
        out[concept] = min(scored, key=lambda st: (-scored[st], st)) if scored else min(per)
    return out


_NAMES = {"unsteered": "Unsteered", "prompting": "Prompting", "steered": "Steered"}


@dataclass(frozen=True)
class SteeringResult:
    samples: tuple[SteeringSample, ...]
    conditions: Mapping[str, ConditionScores]
    selected_strengths: Mapping[str, float]
    backend: str
    label: str
    usage: Mapping[str, Any] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)

    def table9(self) -> str:
        """Markdown in the layout of Table 9 (one row per condition), with the judge
        label and the parse-failure counts underneath."""
        lines = ["| Method | Concept ↑ | Quality ↑ | Harmonic ↑ |", "|---|---|---|---|"]
        for name, c in self.conditions.items():
            lines.append(f"| {_NAMES.get(name, name)} | {fmt(c.concept)} | {fmt(c.quality)} "
                         f"| {fmt(c.harmonic)} |")
        return "\n".join(lines) + "\n\n" + self._footer()

    def row17(self, checkpoint: str, condition: str = "steered") -> str:
        c = self.conditions[condition]
        return (f"| {checkpoint} | {fmt(c.concept)} | {fmt(c.quality)} | {fmt(c.harmonic)} "
                f"| {fmt(c.sample_harmonic)} |")

    def _footer(self) -> str:
        parts = [f"judge: {self.label}"]
        for name, c in self.conditions.items():
            parts.append(f"{name}: n={c.n_samples}, concept parse failures {c.concept_parse_failures}, "
                         f"quality parse failures {c.quality_parse_failures}, API errors {c.api_errors}"
                         + (f", refused {c.refused}" if c.refused else ""))
        if self.selected_strengths:
            parts.append("steering strength chosen per concept on held-out prompts")
        return "\n".join(f"- {p}" for p in parts) + "\n"

    def details(self) -> str:
        """Per condition: the Table 17 columns plus sample counts and failures."""
        lines = ["| Method | Concept | Quality | Harmonic | Sample harmonic | n | Concept failures | Quality failures |",
                 "|---|---|---|---|---|---|---|---|"]
        for name, c in self.conditions.items():
            lines.append(f"| {_NAMES.get(name, name)} | {fmt(c.concept)} | {fmt(c.quality)} "
                         f"| {fmt(c.harmonic)} | {fmt(c.sample_harmonic)} | {c.n_samples} "
                         f"| {c.concept_parse_failures} | {c.quality_parse_failures} |")
        return "\n".join(lines) + "\n"

    def to_markdown(self) -> str:
        return ("Steering benchmark (Table 9 layout)\n\n" + self.table9() + "\nDetails (Table 17 columns)\n\n"
                + self.details())

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "judge": self.label,
                "conditions": {k: v.to_dict() for k, v in self.conditions.items()},
                "selected_strengths": dict(self.selected_strengths), "usage": dict(self.usage),
                "config": dict(self.config), "samples": [s.to_dict() for s in self.samples]}


def table17(results: Mapping[str, SteeringResult], condition: str = "steered") -> str:
    """Markdown in the layout of Table 17: one row per checkpoint."""
    lines = ["| Checkpoint | Concept ↑ | Quality ↑ | Harmonic ↑ | Sample harmonic ↑ |", "|---|---|---|---|---|"]
    lines += [r.row17(name, condition) for name, r in results.items()]
    labels = sorted({r.label for r in results.values()})
    return "\n".join(lines) + "\n\n" + "\n".join(f"- judge: {lab}" for lab in labels) + "\n"
