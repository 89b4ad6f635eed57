"""Steering benchmark (§9.4.4, §10.3, App. M; protocol of AxBench, Wu et al. 2025).

Continuations of seeded concepts and prompts under the unsteered, prompting and steered
conditions, judged for concept and quality (optionally AxBench's instruction judge); with
several strengths each concept's is chosen on held-out prompts. Tables: steering_tables.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import random
from pathlib import Path
from typing import Any, Mapping, Optional, Protocol, Sequence

from interpscale.judges.build import build_judge
from interpscale.judges.client import JudgeTask
from interpscale.judges.scorers import sample_indices, to_record
from interpscale.judges.steering_tables import SteeringResult, SteeringSample, aggregate, select_strengths
from interpscale.judges.types import ConceptCard, Judge

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
    if set(conditions) - set(CONDITIONS) or not conditions:
        raise ValueError(f"conditions must be a non-empty subset of {CONDITIONS}, got {list(conditions)}")
    if not cards:
        raise ValueError("run_steering_benchmark needs at least one concept card")
    if not prompts:
        raise ValueError("run_steering_benchmark needs at least one prompt")
    strengths = [float(s) for s in strengths]
    if "steered" in conditions and not strengths:
        raise ValueError("the steered condition needs at least one strength")
    if len(set(strengths)) != len(strengths):
        raise ValueError(f"strengths must be distinct, got {strengths}")
    if not 0 < select_fraction < 1:
        raise ValueError(f"select_fraction must be in (0, 1), got {select_fraction}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if "steered" in conditions and len(strengths) > 1 and len(prompts) < 2:
        raise ValueError("choosing among several strengths needs at least 2 prompts (held-out selection)")
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
            raise ValueError(f"steering row {i}: {why}")
        card = ConceptCard(str(row["label"]), str(row.get("description", "")), tuple(row.get("words", ()) or ()))
        items.append(dict(card=card, prompt=str(row["prompt"]), continuation=str(row["continuation"]),
                          condition=row["condition"], strength=row.get("strength"), prompt_index=i))
    samples = judge_continuations(items, judge=judge, instruction=instruction_judge, with_prefix=quality_with_prefix)
    conds = [c for c in CONDITIONS if any(s.condition == c for s in samples)]
    return SteeringResult(tuple(samples), {c: aggregate(samples, c) for c in conds}, {}, judge.backend,
                          judge.label, judge.usage.to_dict(), {"n_rows": len(rows), "judge": judge.config()})
