"""Known concept alignment (App. E), concept relevance (App. C) and auto-interpretability
scorers, and the summary every judge result reports (means over parsed items only,
failures counted next to them).

Auto-interpretability: the explain/simulate protocol of Bills et al. (2023), as used by the
CRATE paper (Algorithm 1, App. B.1). An explainer sees a unit's top excerpts (activations
scaled to 0–10) and explains it; a simulator predicts held-out tokens' activations from the
explanation alone; the score is Pearson r between simulated and true. ``top_and_random``:
5 held-out top + 5 random excerpts, ``random_only``: the 5 random (CRATE Table 5).
Undefined r (a constant series) is excluded, as in CRATE App. D.
"""

from __future__ import annotations

import math
import random
import string
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Optional, Sequence

import numpy as np

from interpscale._markdown import md_table
from interpscale.judges.build import build_judge
from interpscale.judges.client import JudgeTask
from interpscale.judges.types import ConceptCard, Judge, JudgeRecord
from interpscale.errors import UserError


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
                + md_table(("Concepts scored", "Mean", "Parse failures", "API errors"),
                           [(s.n, fmt(s.mean), s.n_parse_failures, s.n_api_errors)]) + s.refused_note())


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
            raise UserError(f"score_alignment: concept {cards[i].label!r} (index {i}) has no tokens")
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
                + md_table(("Scores", "Mean", "Success (>=2)", "Parse failures", "API errors"),
                           [(s.n, fmt(s.mean), fmt(self.success_rate), s.n_parse_failures, s.n_api_errors)])
                + s.refused_note())


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
            raise UserError(f"score_relevance: chunk {i} needs 1-26 candidate concepts, got {len(cards)}")
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


METHODS = ("top_and_random", "random_only")


def pearson(x: Sequence[float], y: Sequence[float]) -> Optional[float]:
    """Pearson correlation; None when either series is constant (undefined)."""
    a, b = np.asarray(x, float), np.asarray(y, float)
    if a.shape != b.shape or a.size < 2:
        raise ValueError(f"pearson needs two equal-length series of >= 2 values, got {a.shape} and {b.shape}")
    a, b = a - a.mean(), b - b.mean()
    den = float(np.sqrt((a * a).sum() * (b * b).sum()))
    return None if den == 0.0 else float((a * b).sum() / den)


def scale_0_10(acts: np.ndarray, ref_max: float) -> np.ndarray:
    """Activations as integers 0–10 relative to ``ref_max`` (negatives shown as 0)."""
    if ref_max <= 0:
        return np.zeros_like(acts, dtype=int)
    return np.clip(np.round(10 * np.asarray(acts, float) / ref_max), 0, 10).astype(int)


@dataclass(frozen=True)
class FeaturePlan:
    """Which excerpts each stage of one unit's evaluation uses (indices into the corpus)."""

    explain: tuple[int, ...]
    top: tuple[int, ...]
    random: tuple[int, ...]


def plan_feature(acts: np.ndarray, *, n_explain: int = 5, n_top: int = 5, n_random: int = 5,
                 rng: random.Random) -> FeaturePlan:
    """Top excerpts by max activation, alternately to the explainer and to the top
    simulation set (so they never overlap); random excerpts from the rest."""
    n = acts.shape[0]
    if n < n_explain + n_top + n_random:
        raise UserError(f"auto-interp needs >= {n_explain + n_top + n_random} excerpts, got {n}")
    order = sorted(range(n), key=lambda i: (-float(acts[i].max()), i))
    head = order[: n_explain + n_top]
    explain, top = head[0::2], head[1::2]
    while len(explain) > n_explain:
        top.append(explain.pop())
    while len(top) > n_top:
        explain.append(top.pop())
    rest = order[n_explain + n_top:]
    return FeaturePlan(tuple(explain), tuple(top), tuple(sorted(rng.sample(rest, n_random))))


@dataclass(frozen=True)
class AutoInterpResult:
    records: dict[str, tuple[JudgeRecord, ...]]  # method -> one record per unit
    explanations: tuple[Optional[str], ...]
    summaries: dict[str, ScoreSummary]
    n_undefined: dict[str, int]
    backend: str
    label: str
    usage: dict[str, Any] = field(default_factory=dict)

    def score(self, method: str = "top_and_random") -> Optional[float]:
        return self.summaries[method].mean

    def to_dict(self) -> dict[str, Any]:
        return {"metric": "autointerp_pearson", "backend": self.backend, "judge": self.label,
                "summaries": {k: v.to_dict() for k, v in self.summaries.items()}, "n_undefined": self.n_undefined,
                "explanations": list(self.explanations), "usage": self.usage,
                "records": {k: [r.to_dict() for r in v] for k, v in self.records.items()}}

    def to_markdown(self) -> str:
        return f"Auto-interpretability (explain/simulate, Pearson r), judge: {self.label}\n\n" + md_table(
            ("Method", "Units scored", "Mean r", "Undefined", "Parse failures", "API errors"),
            [(m, s.n, fmt(s.mean), self.n_undefined[m], s.n_parse_failures, s.n_api_errors)
             for m, s in self.summaries.items()])


def score_autointerp(excerpts: Sequence[Sequence[str]], activations: Any, *, judge: Judge | None = None,
                     methods: Sequence[str] = METHODS, n_explain: int = 5, n_top: int = 5, n_random: int = 5,
                     seed: int = 0) -> AutoInterpResult:
    """Score units with the explain/simulate protocol: ``excerpts`` B token-string lists of
    length T, ``activations`` [units, B, T] (e.g. CRATE's ISTA codes or an MLP's neurons)."""
    if set(methods) - set(METHODS) or not methods:
        raise ValueError(f"methods must be a non-empty subset of {METHODS}, got {list(methods)}")
    acts = np.asarray(activations, dtype=float)
    if acts.ndim != 3 or acts.shape[1] != len(excerpts):
        raise ValueError(f"activations must be [units, {len(excerpts)} excerpts, T], got shape {acts.shape}")
    lens = {len(e) for e in excerpts}
    if lens != {acts.shape[2]}:
        raise ValueError(f"every excerpt must have T={acts.shape[2]} tokens, got lengths {sorted(lens)}")
    if not np.isfinite(acts).all():
        raise ValueError("activations contain NaN or inf")
    judge = build_judge(judge)
    plans = [plan_feature(acts[u], n_explain=n_explain, n_top=n_top, n_random=n_random,
                          rng=random.Random(seed * 1_000_003 + u)) for u in range(acts.shape[0])]
    # stage 1: explanations
    t_exp = judge.templates["explain"]
    tasks = []
    for u, plan in enumerate(plans):
        ref = float(max(acts[u, i].max() for i in plan.explain))
        recs = [(list(excerpts[i]), scale_0_10(acts[u, i], ref)) for i in plan.explain]
        text = "\n---\n".join("\n".join(f"{t}\t{int(a)}" for t, a in zip(toks, shown))
                                for toks, shown in recs)
        tasks.append(JudgeTask(t_exp, {"excerpts": text}, data={"records": recs}))
    exp_replies = judge.run(tasks)
    explanations = [r.value if isinstance(r.value, str) else None for r in exp_replies]
    # stage 2: simulate every excerpt a method needs (the random set is shared)
    t_sim = judge.templates["simulate"]
    need = [(u, i) for u, plan in enumerate(plans) if explanations[u] is not None
            for i in sorted(set(plan.random) | (set(plan.top) if "top_and_random" in methods else set()))]
    sim_tasks = [JudgeTask(t_sim, {"explanation": explanations[u], "n_tokens": len(excerpts[i]),
                                   "tokens": "\n".join(f"{k + 1}\t{t}" for k, t in enumerate(excerpts[i]))},
                           parse_kwargs={"n": len(excerpts[i])},
                           data={"explanation": explanations[u], "tokens": list(excerpts[i])})
                 for u, i in need]
    sim = dict(zip(need, judge.run(sim_tasks)))
    records: dict[str, list[JudgeRecord]] = {m: [] for m in methods}
    for u, plan in enumerate(plans):
        for m in methods:
            ids = (plan.top + plan.random) if m == "top_and_random" else plan.random
            meta = {"unit": u, "method": m, "explanation": explanations[u], "excerpts": list(ids)}
            sims = [sim.get((u, i)) for i in ids]
            records[m].append(_unit_record(exp_replies[u], sims, acts[u, list(ids)], meta))
    return AutoInterpResult({m: tuple(v) for m, v in records.items()}, tuple(explanations),
                            {m: ScoreSummary.of(v) for m, v in records.items()},
                            {m: sum(r.status == "undefined" for r in v) for m, v in records.items()},
                            judge.backend, judge.label, judge.usage.to_dict())


def _unit_record(exp_reply: Any, sims: list[Any], true: np.ndarray, meta: dict) -> JudgeRecord:
    cached = bool(exp_reply.cached) and all(s is not None and s.cached for s in sims)
    if failed := [r for r in [exp_reply, *sims] if r is None or r.value is None]:
        seen = {r.status for r in failed if r is not None}
        status = next((st for st in ("api_error", "refused") if st in seen), "parse_error")
        raw = "; ".join(r.raw for r in failed if r is not None)[:2000]
        return JudgeRecord(None, raw, status, cached, None, exp_reply.backend, meta)
    rho = pearson(true.ravel(), np.concatenate([np.asarray(s.value, float) for s in sims]))
    if rho is None:
        return JudgeRecord(None, "correlation undefined (constant series)", "undefined", cached, None,
                           exp_reply.backend, meta)
    status = "lexical" if exp_reply.status == "lexical" else "ok"
    return JudgeRecord(rho, exp_reply.raw, status, cached, None, exp_reply.backend,
                       {**meta, "simulated": [s.value for s in sims]})
