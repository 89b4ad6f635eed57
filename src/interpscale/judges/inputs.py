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
from interpscale.errors import UserError


def _rows(path: str | Path) -> list[tuple[str, dict]]:
    """``("<path>: line <n>", row)`` for every row, each row a JSON object."""
    if not Path(path).is_file():
        raise UserError(f"{path}: no such file")
    try:
        rows = list(iter_jsonl(path))
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    _need(rows, str(path), "no rows (the file is empty)")
    for lineno, row in rows:
        if not isinstance(row, dict):
            raise UserError(f"{path}: line {lineno} is a JSON {type(row).__name__}, expected an object")
    return [(f"{path}: line {lineno}", row) for lineno, row in rows]


def _need(ok: Any, where: str, what: str) -> None:
    if not ok:
        raise UserError(f"{where}: {what}")


def _card(where: str, d: Any) -> ConceptCard:
    _need(isinstance(d, dict), where, f"a concept must be an object with a 'label', got {d!r:.60}")
    label, desc, words = d.get("label"), d.get("description", ""), d.get("words") or []
    _need(isinstance(label, str) and label.strip(), where, "'label' must be a non-empty string")
    _need(isinstance(desc, str), where, "'description' must be a string")
    _need(isinstance(words, list) and all(isinstance(w, str) and w.strip() for w in words), where,
          "'words' must be a list of non-empty strings")
    return ConceptCard(label, desc, tuple(words))


def _text(where: str, row: dict) -> str:
    _need(isinstance(row.get("text"), str), where, "needs a 'text' string")
    return row["text"]


def read_alignment_input(path: str | Path) -> tuple[list[ConceptCard], list[list[str]]]:
    """Concept cards and each concept's top tokens."""
    rows, cards = _rows(path), []
    for where, row in rows:
        toks = row.get("tokens")
        _need(isinstance(toks, list) and toks and all(isinstance(t, str) for t in toks), where,
              "'tokens' must be a non-empty list of strings")
        cards.append(_card(where, row))
    return cards, [row["tokens"] for _, row in rows]


def read_texts(path: str | Path) -> list[str]:
    """The ``text`` of every row."""
    return [_text(where, row) for where, row in _rows(path)]


def read_relevance_input(path: str | Path) -> tuple[list[str], list[list[ConceptCard]]]:
    """Texts and each text's candidate concepts (1-26 per text)."""
    texts, cands = [], []
    for where, row in _rows(path):
        texts.append(_text(where, row))
        c = row.get("candidates")
        _need(isinstance(c, list) and 1 <= len(c) <= 26, where,
              "'candidates' must be a list of 1-26 concepts")
        cands.append([_card(f"{where}, candidate {k + 1}", d) for k, d in enumerate(c)])
    return texts, cands


def read_steering_input(path: str | Path) -> list[dict[str, Any]]:
    """Checked steering rows, in the form ``score_steering_continuations`` takes."""
    out = []
    for where, row in _rows(path):
        _need(not (why := row_problem(row)), where, str(why))
        for k in ("prompt", "continuation"):
            _need(isinstance(row[k], str), where, f"'{k}' must be a string")
        s = row.get("strength")
        finite = not isinstance(s, bool) and isinstance(s, (int, float)) and math.isfinite(s)
        _need(s is None or finite, where, "'strength' must be a finite number")
        card = _card(where, row)
        out.append({**row, "label": card.label, "description": card.description, "words": list(card.words)})
    return out
