"""MMLU soft score (Steerling App. J): log P(correct) - log sum_{A..D} P(choice), on any
multiple-choice JSONL of ``{"question", "choices": [..], "answer"}`` (an index or a letter).
The choice probabilities are those of the answer letters after an MMLU-style prompt (exact
for AR models, an MC ELBO with masks shared across a question's letters for diffusion ones).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Sequence, Union

import torch
from torch import nn

from interpscale._jsonl import iter_jsonl
from interpscale.metrics.likelihood import encode_pair, loglikelihood

LETTERS = "ABCDEFGHIJ"


def soft_score(choice_logliks: Sequence[float], correct: int) -> float:
    """log P(correct) - log sum_c P(c); bounded above by 0 (App. J)."""
    ll = torch.tensor([float(x) for x in choice_logliks], dtype=torch.float64)
    if not 0 <= correct < len(ll):
        raise ValueError(f"correct index {correct} outside the {len(ll)} choices")
    return float(ll[correct] - torch.logsumexp(ll, 0))


def mc_prompt(question: str, choices: Sequence[str]) -> str:
    lines = [question.strip()] + [f"{LETTERS[i]}. {c}" for i, c in enumerate(choices)]
    return "\n".join(lines) + "\nAnswer:"


@dataclass(frozen=True)
class SoftScoreResult:
    """Mean soft score with its standard error over questions, and hard accuracy."""

    soft_score: float
    se: float
    accuracy: float
    n: int
    per_item: tuple[float, ...] = field(default=(), repr=False)

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "per_item"}


def load_mc_jsonl(path: Union[str, Path]) -> list[dict]:
    """Rows of a multiple-choice JSONL, validated; ``answer`` normalised to an int index."""
    rows = [_normalise(r, f"{path}:{ln}") for ln, r in iter_jsonl(path)]
    if not rows:
        raise ValueError(f"{path}: no questions")
    return rows


def _normalise(r: dict, where: str) -> dict:
    for key in ("question", "choices", "answer"):
        if key not in r:
            raise ValueError(f"{where}: missing field {key!r}")
    choices = list(r["choices"])
    if not 2 <= len(choices) <= len(LETTERS):
        raise ValueError(f"{where}: need 2..{len(LETTERS)} choices, got {len(choices)}")
    ans = r["answer"]
    idx = LETTERS.index(ans.strip().upper()) if isinstance(ans, str) and ans.strip().upper() in LETTERS else ans
    if not isinstance(idx, int) or not 0 <= idx < len(choices):
        raise ValueError(f"{where}: answer {ans!r} is not a valid choice index or letter")
    return {"question": str(r["question"]), "choices": choices, "answer": idx}


def mmlu_soft_score(model: nn.Module, tokenizer, questions: Union[str, Path, Iterable[dict]], *,
                    n_samples: int = 32, seed: int = 0, batch_size: int = 32) -> SoftScoreResult:
    """Soft score of ``model`` on multiple-choice ``questions`` (JSONL path or rows); ``tokenizer``
    has ``encode(text, add_special_tokens=False).ids``; ``n_samples``: diffusion MC samples."""
    rows = (load_mc_jsonl(questions) if isinstance(questions, (str, Path))
            else [_normalise(r, f"row {i}") for i, r in enumerate(questions)])
    if not rows:
        raise ValueError("no questions given")
    reqs, spans = [], []
    for r in rows:
        prompt = mc_prompt(r["question"], r["choices"])
        start = len(reqs)
        reqs += [encode_pair(tokenizer, prompt, f" {LETTERS[j]}") for j in range(len(r["choices"]))]
        spans.append((start, len(reqs)))
    ll = [x for x, _ in loglikelihood(model, reqs, n_samples=n_samples, seed=seed, batch_size=batch_size)]
    scores = [soft_score(ll[a:b], r["answer"]) for r, (a, b) in zip(rows, spans)]
    hits = [float(max(range(b - a), key=lambda j: ll[a + j]) == r["answer"]) for r, (a, b) in zip(rows, spans)]
    n = len(scores)
    mean = sum(scores) / n
    se = math.sqrt(sum((s - mean) ** 2 for s in scores) / (n - 1) / n) if n > 1 else float("nan")
    return SoftScoreResult(mean, se, sum(hits) / n, n, tuple(scores))
