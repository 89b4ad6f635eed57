"""Steering benchmark (§9.4.4, §10.3, App. M; protocol of AxBench, Wu et al. 2025).

Continuations of seeded concepts and prompts under the unsteered, prompting and steered
conditions, judged for concept and quality (optionally AxBench's instruction judge); with
several strengths each concept's is chosen on held-out prompts. Aggregation: Eq. 30, the
per-sample harmonic and the Table 9 / Table 17 layouts.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import random
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Protocol, Sequence

from interpscale._markdown import md_table
from interpscale.judges.build import build_judge
from interpscale.judges.client import JudgeTask
from interpscale.judges.scorers import ScoreSummary, fmt, sample_indices, to_record
from interpscale.judges.types import ConceptCard, Judge, JudgeRecord
from interpscale.errors import UserError

CONDITIONS = ("unsteered", "prompting", "steered")
# Neutral, concept-free prefixes (our own); the paper used one fixed prompt.
DEFAULT_PROMPTS = (
    "Here is a short piece of writing.",
    "Let me tell you about my week.",
    "The following passage was written for a general audience.",
    "I want to share something I learned recently.",
    "Write a few sentences about anything you like.",
    "This is the opening of a story.",
)
# How the prompting condition prepends the concept (label and description, §9.4.4).
PROMPTING_TEMPLATE = "Write about {label}: {description}\n\n{prompt}"


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
    c, q, i = (ScoreSummary.of([r for s in rows if (r := getattr(s, f"{axis}_score")) is not None])
               for axis in ("concept", "quality", "instruction"))
    hs = [h for s in rows if (h := s.sample_harmonic) is not None]
    return ConditionScores(
        condition=condition, concept=c.mean, quality=q.mean, harmonic=harmonic(c.mean, q.mean),
        sample_harmonic=sum(hs) / len(hs) if hs else None, instruction=i.mean,
        concept_expected=c.expected_mean, quality_expected=q.expected_mean, n_samples=len(rows), n_concept=c.n,
        n_quality=q.n, concept_parse_failures=c.n_parse_failures, quality_parse_failures=q.n_parse_failures,
        instruction_parse_failures=i.n_parse_failures, api_errors=c.n_api_errors + q.n_api_errors + i.n_api_errors,
        refused=c.n_refused + q.n_refused + i.n_refused)


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
        rows = [(_NAMES.get(name, name), fmt(c.concept), fmt(c.quality), fmt(c.harmonic))
                for name, c in self.conditions.items()]
        return md_table(("Method", "Concept ↑", "Quality ↑", "Harmonic ↑"), rows) + "\n" + self._footer()

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
        rows = [(_NAMES.get(name, name), fmt(c.concept), fmt(c.quality), fmt(c.harmonic),
                 fmt(c.sample_harmonic), c.n_samples, c.concept_parse_failures, c.quality_parse_failures)
                for name, c in self.conditions.items()]
        return md_table(("Method", "Concept", "Quality", "Harmonic", "Sample harmonic", "n",
                         "Concept failures", "Quality failures"), rows)

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
    rows = [(name, fmt(c.concept), fmt(c.quality), fmt(c.harmonic), fmt(c.sample_harmonic))
            for name, c in {name: r.conditions[condition] for name, r in results.items()}.items()]
    labels = sorted({r.label for r in results.values()})
    return (md_table(("Checkpoint", "Concept ↑", "Quality ↑", "Harmonic ↑", "Sample harmonic ↑"), rows) + "\n"
            + "".join(f"- judge: {lab}\n" for lab in labels))


class GenerateFn(Protocol):
    def __call__(self, prompt: str, *, card: Optional[ConceptCard], strength: Optional[float],
                 max_new_tokens: int, seed: int) -> str: ...


_Job = tuple[int, int, str, Optional[float], str]  # (concept index, prompt index, condition, strength, split)


def _seed(*parts: Any) -> int:
    return int.from_bytes(hashlib.sha256(json.dumps(parts).encode()).digest()[:4], "little")


class _Generations:
    """The benchmark's continuations, made by ``generate`` and appended to a JSONL file
    (``path``) as they are made, so a killed benchmark re-uses them instead of regenerating."""

    def __init__(self, generate: GenerateFn, cards: Sequence[ConceptCard], prompts: Sequence[str],
                 path: str | Path | None, *, seed: int, max_new_tokens: int, template: str, generator_id: str,
                 progress: bool):
        self.generate, self.cards, self.prompts, self.template = generate, cards, prompts, template
        self.seed, self.max_new_tokens, self.generator_id = seed, max_new_tokens, generator_id
        self.progress = progress
        self.path, self.done, self._f = Path(path) if path else None, {}, None
        for line in self.path.read_text().splitlines() if self.path and self.path.exists() else []:
            try:
                row = json.loads(line)
                self.done[row["key"]] = row["continuation"]
            except (json.JSONDecodeError, KeyError, TypeError):
                continue  # a line cut short by a kill

    def items(self, jobs: list[_Job]) -> list[dict[str, Any]]:
        """Each job as the item ``judge_continuations`` takes, with its continuation."""
        from tqdm.auto import tqdm

        out = []
        for ci, pi, cond, strength, split in tqdm(jobs, desc="generate", unit="continuation",
                                                   disable=not self.progress):
            card, prompt = self.cards[ci], self.prompts[pi]
            full = self.template.format(label=card.label, description=card.description, prompt=prompt) \
                if cond == "prompting" else prompt
            s = _seed(self.seed, card.label, pi, cond, strength)
            key = json.dumps([self.generator_id, card.label, full, cond, strength, s, self.max_new_tokens])
            if key not in self.done:
                steer = card if cond == "steered" else None
                self._keep(key, self.generate(full, card=steer, strength=strength,
                                              max_new_tokens=self.max_new_tokens, seed=s))
            out.append(dict(card=card, concept_index=ci, prompt_index=pi, prompt=prompt, condition=cond,
                            strength=strength, split=split, continuation=self.done[key]))
        return out

    def _keep(self, key: str, text: Any) -> None:
        if not isinstance(text, str):
            raise ValueError(f"generate returned {type(text).__name__}, expected str (key {key})")
        self.done[key] = text
        if self.path is not None:
            if self._f is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                torn = self.path.exists() and self.path.stat().st_size > 0 and not self.path.read_bytes().endswith(b"\n")
                self._f = open(self.path, "a")
                self._f.write("\n" if torn else "")  # a line cut short by a kill: start a fresh line
            self._f.write(json.dumps({"key": key, "continuation": text}) + "\n")
            self._f.flush()
            os.fsync(self._f.fileno())

    def close(self) -> None:
        if self._f is not None:
            self._f.close()


def _check_benchmark(cards, prompts, conditions, strengths, select_fraction, max_new_tokens) -> list[float]:
    """The benchmark's settings checked (ValueError naming the bad one); the strengths as floats."""
    strengths, steered = [float(s) for s in strengths], "steered" in conditions
    for ok, problem in (
            (conditions and not set(conditions) - set(CONDITIONS),
             f"conditions must be a non-empty subset of {CONDITIONS}, got {list(conditions)}"),
            (cards, "run_steering_benchmark needs at least one concept card"),
            (prompts, "run_steering_benchmark needs at least one prompt"),
            (strengths or not steered, "the steered condition needs at least one strength"),
            (len(set(strengths)) == len(strengths), f"strengths must be distinct, got {strengths}"),
            (0 < select_fraction < 1, f"select_fraction must be in (0, 1), got {select_fraction}"),
            (max_new_tokens >= 1, f"max_new_tokens must be >= 1, got {max_new_tokens}"),
            (not (steered and len(strengths) > 1 and len(prompts) < 2),
             "choosing among several strengths needs at least 2 prompts (held-out selection)")):
        if not ok:
            raise UserError(problem)
    return strengths


def _split_prompts(n: int, seed: int, select_fraction: float) -> tuple[list[int], list[int]]:
    """(selection, evaluation) prompt indices: a seeded held-out split, each side non-empty."""
    order = list(range(n))
    random.Random(seed + 1).shuffle(order)
    n_sel = min(max(1, math.ceil(select_fraction * n)), n - 1)
    return sorted(order[:n_sel]), sorted(order[n_sel:])


def run_steering_benchmark(generate: GenerateFn, cards: Sequence[ConceptCard],
                           prompts: Sequence[str] = DEFAULT_PROMPTS, *, judge: Judge | None = None,
                           n_concepts: int | None = 72, strengths: Sequence[float] = (1.0,),
                           conditions: Sequence[str] = CONDITIONS, seed: int = 0, max_new_tokens: int = 128,
                           select_fraction: float = 0.5, instruction_judge: bool = False,
                           quality_with_prefix: bool = False, prompting_template: str = PROMPTING_TEMPLATE,
                           generations_path: str | Path | None = None, generator_id: str = "",
                           progress: bool = False) -> SteeringResult:
    """Generate, judge and aggregate the steering benchmark. ``generate`` gets ``card=None``
    except in the steered condition (the concept and a strength, the target τ of Eq. 19);
    only its continuation is judged. ``n_concepts`` are sampled with ``seed`` (all when None).
    ``generations_path``: a JSONL store re-used on a rerun, keyed with ``generator_id`` (e.g.
    the checkpoint and sampling settings) so a different model never re-uses another's text."""
    strengths = _check_benchmark(cards, prompts, conditions, strengths, select_fraction, max_new_tokens)
    judge = build_judge(judge)
    cidx = sample_indices(len(cards), n_concepts, seed)
    selecting = "steered" in conditions and len(strengths) > 1
    sel, ev = _split_prompts(len(prompts), seed, select_fraction) if selecting else ([], list(range(len(prompts))))
    gens = _Generations(generate, cards, prompts, generations_path, seed=seed, max_new_tokens=max_new_tokens,
                        template=prompting_template, generator_id=generator_id, progress=progress)
    judged = functools.partial(judge_continuations, judge=judge, instruction=instruction_judge,
                               with_prefix=quality_with_prefix)
    try:
        samples: list[SteeringSample] = []
        chosen: dict[str, float] = {}
        if selecting:  # phase 1: every strength on the selection prompts
            jobs: list[_Job] = [(c, p, "steered", s, "select") for c in cidx for p in sel for s in strengths]
            samples += judged(gens.items(jobs))
            chosen = select_strengths(samples, objective="harmonic3" if instruction_judge else "harmonic")
        jobs = [(c, p, cond, chosen.get(cards[c].label, strengths[0]) if cond == "steered" else None, "eval")
                for c in cidx for p in ev for cond in conditions]
        samples += judged(gens.items(jobs))
    finally:
        gens.close()
    per_cond = {cond: aggregate(samples, cond) for cond in conditions}
    config = {"n_concepts": len(cidx), "n_prompts": len(prompts), "strengths": strengths, "seed": seed,
              "max_new_tokens": max_new_tokens, "selection_prompts": sel, "eval_prompts": ev,
              "instruction_judge": instruction_judge, "quality_with_prefix": quality_with_prefix,
              "judge": judge.config()}
    return SteeringResult(tuple(samples), per_cond, chosen, judge.backend, judge.label,
                          judge.usage.to_dict(), config)


def judge_continuations(items: Sequence[dict], *, judge: Judge, instruction: bool = False,
                        with_prefix: bool = False) -> list[SteeringSample]:
    """Concept, quality (and optionally instruction) judgements of given continuations.
    Each item has ``card, prompt, continuation, condition`` and optionally ``strength,
    split, concept_index, prompt_index``. All calls go to the judge in one concurrent run."""
    names = ["steer_concept", "steer_quality_prefix" if with_prefix else "steer_quality"]
    tpls = [judge.templates[n] for n in names + (["steer_instruction"] if instruction else [])]
    tasks = []
    for it in items:
        card, d = it["card"], {k: it[k] for k in ("card", "prompt", "continuation")}
        values = {"label": card.label, "description": card.description, "prompt": it["prompt"],
                  "continuation": it["continuation"]}  # each template uses the placeholders it names
        tasks += [JudgeTask(t, values, data=d) for t in tpls]
    replies = judge.run(tasks)
    k = len(tpls)
    out = []
    for n, it in enumerate(items):
        r = replies[n * k: (n + 1) * k]
        out.append(SteeringSample(
            concept=it["card"].label, concept_index=int(it.get("concept_index", -1)),
            prompt_index=int(it.get("prompt_index", -1)), prompt=it["prompt"], condition=it["condition"],
            strength=it.get("strength"), split=it.get("split", "eval"), continuation=it["continuation"],
            concept_score=to_record(r[0], axis="concept"), quality_score=to_record(r[1], axis="quality"),
            instruction_score=to_record(r[2], axis="instruction") if instruction else None))
    return out


def row_problem(row: Mapping[str, Any]) -> Optional[str]:
    """What is wrong with a steering row (a missing key, an unknown condition), or None."""
    if missing := [k for k in ("label", "prompt", "continuation", "condition") if k not in row]:
        return f"lacks {', '.join(missing)}"
    if row["condition"] not in CONDITIONS:
        return f"'condition' must be one of {', '.join(CONDITIONS)}, got {row['condition']!r:.40}"
    return None


def score_steering_continuations(rows: Sequence[dict], *, judge: Judge | None = None, instruction_judge: bool = False,
                                 quality_with_prefix: bool = False) -> SteeringResult:
    """Judge and aggregate continuations generated elsewhere. Each row:
    ``{label, description, prompt, continuation, condition[, strength, words]}``."""
    judge = build_judge(judge)
    items = []
    for i, row in enumerate(rows):
        if why := row_problem(row):
            raise UserError(f"steering row {i}: {why}")
        items.append(dict(card=ConceptCard.from_dict(row), prompt=str(row["prompt"]), continuation=str(row["continuation"]),
                          condition=row["condition"], strength=row.get("strength"), prompt_index=i))
    samples = judge_continuations(items, judge=judge, instruction=instruction_judge, with_prefix=quality_with_prefix)
    conds = [c for c in CONDITIONS if any(s.condition == c for s in samples)]
    return SteeringResult(tuple(samples), {c: aggregate(samples, c) for c in conds}, {}, judge.backend,
                          judge.label, judge.usage.to_dict(), {"n_rows": len(rows), "judge": judge.config()})
