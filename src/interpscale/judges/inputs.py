"""Reading the JSONL inputs of the judges: every problem names the file and the line.

- alignment: ``{label, description?, words?, tokens: [str, ...]}``
- relevance: ``{text, candidates: [{label, description?, words?}, ...]}`` (or only
  ``{text}`` when the candidates come from a checkpoint)
- steering: ``{label, description?, words?, prompt, continuation, condition[, strength]}``
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from interpscale._jsonl import iter_jsonl
from interpscale.judges.steering import row_problem
from interpscale.judges.types import ConceptCard


def _rows(path: str | Path) -> list[tuple[int, Any]]:
    if not Path(path).is_file():
        raise ValueError(f"{path}: no such file")
    try:
        rows = list(iter_jsonl(path))
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not rows:
        raise ValueError(f"{path}: no rows (the file is empty)")
    for lineno, row in rows:
        if not isinstance(row, dict):
            raise ValueError(f"{path}: line {lineno} is a JSON {type(row).__name__}, expected an object")
    return rows


def _card(path: str | Path, lineno: int, d: Any, where: str = "") -> ConceptCard:
    if not isinstance(d, dict):
        raise ValueError(f"{path}: line {lineno}{where}: a concept must be an object with a 'label', got {d!r:.60}")
    label, desc, words = d.get("label"), d.get("description", ""), d.get("words") or []
    if not isinstance(label, str) or not label.strip():
        raise ValueError(f"{path}: line {lineno}{where}: 'label' must be a non-empty string")
    if not isinstance(desc, str):
        raise ValueError(f"{path}: line {lineno}{where}: 'description' must be a string")
    if not isinstance(words, list) or not all(isinstance(w, str) and w.strip() for w in words):
        raise ValueError(f"{path}: line {lineno}{where}: 'words' must be a list of non-empty strings")
    return ConceptCard(label, desc, tuple(words))


def read_alignment_input(path: str | Path) -> tuple[list[ConceptCard], list[list[str]]]:
    """Concept cards and each concept's top tokens."""
    cards, tokens = [], []
    for lineno, row in _rows(path):
        toks = row.get("tokens")
        if not isinstance(toks, list) or not toks or not all(isinstance(t, str) for t in toks):
            raise ValueError(f"{path}: line {lineno}: 'tokens' must be a non-empty list of strings")
        cards.append(_card(path, lineno, row))
        tokens.append(toks)
    return cards, tokens


def read_texts(path: str | Path) -> list[str]:
    """The ``text`` of every row."""
    out = []
    for lineno, row in _rows(path):
        if not isinstance(row.get("text"), str):
            raise ValueError(f"{path}: line {lineno}: needs a 'text' string")
        out.append(row["text"])
    return out


def read_relevance_input(path: str | Path) -> tuple[list[str], list[list[ConceptCard]]]:
    """Texts and each text's candidate concepts (1-26 per text)."""
    texts, cands = [], []
    for lineno, row in _rows(path):
        if not isinstance(row.get("text"), str):
            raise ValueError(f"{path}: line {lineno}: needs a 'text' string")
        c = row.get("candidates")
        if not isinstance(c, list) or not 1 <= len(c) <= 26:
            raise ValueError(f"{path}: line {lineno}: 'candidates' must be a list of 1-26 concepts")
        texts.append(row["text"])
        cands.append([_card(path, lineno, d, f", candidate {k + 1}") for k, d in enumerate(c)])
    return texts, cands


def read_steering_input(path: str | Path) -> list[dict[str, Any]]:
    """Checked steering rows, in the form ``score_steering_continuations`` takes."""
    out = []
    for lineno, row in _rows(path):
        if why := row_problem(row):
            raise ValueError(f"{path}: line {lineno}: {why}")
        for k in ("prompt", "continuation"):
            if not isinstance(row[k], str):
                raise ValueError(f"{path}: line {lineno}: '{k}' must be a string")
        s = row.get("strength")
        if s is not None and (isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s)):
            raise ValueError(f"{path}: line {lineno}: 'strength' must be a finite number")
        card = _card(path, lineno, row)
        out.append({**row, "label": card.label, "description": card.description, "words": list(card.words)})
    return out
