"""Offline lexical backend, the default without a judge endpoint (demos and tests run end to
end): a word-overlap proxy with the concept card on the judges' scales, not a substitute for
an LLM judge; its results carry ``backend="lexical"`` and ``LEXICAL_LABEL``."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Mapping, Sequence

from interpscale.judges.client import JudgeTask, UsageStats
from interpscale.judges.templates import JUDGE_KINDS, TemplateSet
from interpscale.judges.types import ConceptCard, JudgeRecord

LEXICAL_LABEL = "offline lexical backend (word overlap with the concept card; not an LLM judge)"

_STOP = frozenset("""a an and are as at be by for from has have in into is it its of on or that the their this
to was were with about related relating concept concepts topic topics such other various including texts text
general things discussion discussions""".split())
_WORD = re.compile(r"[A-Za-z0-9]+")


def _stem(w: str) -> str:
    w = w.lower()
    for suf in ("ations", "ation", "ings", "ing", "ies", "ied", "es", "ed", "ly", "s"):
        if len(w) > len(suf) + 2 and w.endswith(suf):
            return w[: -len(suf)]
    return w


def normalize_token(tok: str) -> str:
    """A vocabulary item as a plain lower-case word (drops BPE markers such as Ġ / ▁ / ##)."""
    return "".join(_WORD.findall(tok.replace("Ġ", " ").replace("▁", " ").replace("##", ""))).lower()


def concept_vocabulary(card: ConceptCard) -> frozenset[str]:
    """Stems of the card's characteristic words and label (the description's content words
    only when the card lists no words)."""
    text = " ".join([*card.words, card.label, "" if card.words else card.description])
    return frozenset(_stem(w) for w in _WORD.findall(text) if w.lower() not in _STOP and len(w) > 1)


def _matches(word: str, vocab: frozenset[str]) -> bool:
    s = _stem(word)
    return len(s) >= 2 and (s in vocab or len(s) >= 4 and any(
        len(v) >= 4 and (s.startswith(v) or v.startswith(s)) for v in vocab))


def _hits(text: str, vocab: frozenset[str]) -> tuple[int, int]:
    """(distinct matching words, total matching occurrences) in ``text``."""
    found = [w.lower() for w in _WORD.findall(text) if _matches(w, vocab)]
    return len(set(found)), len(found)


# The offline score of one task's ``data`` for each judge kind (templates.JUDGE_KINDS names them).
def alignment_task(d: Mapping[str, Any]) -> int:
    """1–5 from the fraction of top tokens that are concept words (App. E scale)."""
    vocab = concept_vocabulary(d["card"])
    toks = [t for t in map(normalize_token, d["tokens"]) if t]
    if not toks:
        return 1
    frac = sum(_matches(t, vocab) for t in toks) / len(toks)
    return 5 if frac >= 0.6 else 4 if frac >= 0.4 else 3 if frac >= 0.2 else 2 if frac > 0 else 1


def steer_concept_task(d: Mapping[str, Any]) -> int:
    """0–2 concept presence (App. M scale): several concept words → 2, one → 1."""
    distinct, total = _hits(d["continuation"], concept_vocabulary(d["card"]))
    return 2 if distinct >= 2 or total >= 3 else 1 if total >= 1 else 0


def relevance_task(d: Mapping[str, Any]) -> dict[str, int]:
    """1–5 relevance (App. C scale) of each card from the number of distinct concept words."""
    out = {}
    for k, card in zip(d["letters"], d["cards"]):
        distinct, total = _hits(d["chunk"], concept_vocabulary(card))
        out[k] = (1 if total == 0 else 2 if distinct == 1 and total == 1 else 3 if distinct <= 2
                  else 4 if distinct <= 4 else 5)
    return out


def quality_task(d: Mapping[str, Any]) -> int:
    """0–2 fluency proxy: enough words, mostly alphabetic, little repetition."""
    words = _WORD.findall(d["continuation"].lower())
    if len(words) < 3:
        return 0
    bigrams = list(zip(words, words[1:]))
    distinct = len(set(bigrams)) / len(bigrams)
    top_share = Counter(words).most_common(1)[0][1] / len(words)
    alpha = sum(w.isalpha() for w in words) / len(words)
    if distinct < 0.5 or top_share > 0.4 or alpha < 0.5:
        return 0
    return 2 if distinct >= 0.85 and alpha >= 0.8 else 1


def instruction_task(d: Mapping[str, Any]) -> int:
    """0–2 overlap between the instruction's content words and the continuation."""
    vocab = frozenset(_stem(w) for w in _WORD.findall(d["prompt"]) if w.lower() not in _STOP and len(w) > 2)
    distinct, _ = _hits(d["continuation"], vocab) if vocab else (0, 0)
    return 2 if distinct >= 2 else 1 if distinct == 1 else 0


def explain_task(d: Mapping[str, Any], k: int = 5) -> str:
    """The ``k`` distinct tokens carrying the most activation in ``d["records"]`` (``(tokens,
    activations)`` pairs), as an explanation phrase."""
    mass: Counter[str] = Counter()
    for toks, acts in d["records"]:
        for t, a in zip(toks, acts):
            w = normalize_token(t)
            if w and a > 0:
                mass[w] += float(a)
    return "tokens: " + ", ".join(w for w, _ in mass.most_common(k))


def simulate_task(d: Mapping[str, Any]) -> list[float]:
    """10 on the tokens the explanation names, 0 elsewhere."""
    explanation = d["explanation"]
    body = explanation.split(":", 1)[1] if explanation.lower().startswith("tokens:") else explanation
    vocab = frozenset(_stem(w) for w in _WORD.findall(body) if w.lower() not in _STOP)
    return [10.0 if (w := normalize_token(t)) and _stem(w) in vocab else 0.0 for t in d["tokens"]]


class LexicalJudge:
    """Same ``run(tasks)`` interface as JudgeClient; scores from ``task.data``."""

    backend = "lexical"
    label = LEXICAL_LABEL

    def __init__(self, templates: TemplateSet | None = None):
        self.templates = templates or TemplateSet()
        self.usage = UsageStats()

    def __repr__(self) -> str:
        return "LexicalJudge()"

    def config(self) -> dict[str, Any]:
        return {"backend": self.backend, "label": self.label}

    def run(self, tasks: Sequence[JudgeTask]) -> list[JudgeRecord]:
        self.usage.tasks += len(tasks)
        out = []
        for task in tasks:
            if task.template.name not in JUDGE_KINDS:
                raise ValueError(f"the lexical backend cannot score template {task.template.name!r}")
            v = JUDGE_KINDS[task.template.name].score_offline(task.data)
            out.append(JudgeRecord(v, f"[lexical] {v}", "lexical", backend=self.backend))
        return out
