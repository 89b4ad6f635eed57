"""Turn judge replies into values — or into an honest failure (None), never a zero.

Every parser returns ``Parsed(value, span)`` or None. ``span`` is the character span of
the score digit in the reply, used to read its ``top_logprobs`` for an expected score.

One strict rule for every judge: a reply is read only when it gives one answer (two
different scores, a "correction", duplicate or case-variant keys fail; a repeat is fine).
Numbers are bounded in length (no huge integers, no NaN/Infinity), replies longer than
``MAX_PARSE_CHARS`` are not read, and no parser raises on any input.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

MAX_PARSE_CHARS = 20_000  # a longer reply is a parse failure (templates ask for <= 512 tokens)
MAX_NUMBER_CHARS = 12  # digits (sign and decimals included) a score may have
MAX_JSON_STARTS = 256  # candidate JSON openings tried per reply
MAX_EXPLANATION_CHARS = 500


@dataclass(frozen=True)
class Parsed:
    value: Any
    span: Optional[tuple[int, int]] = None


_ALIGN = re.compile(r"ALIGNMENT\s*[:=]\s*\**\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)
_RATING = re.compile(r"Rating\s*:\s*\[\[\s*(-?\d+(?:\.\d+)?)\s*\]\]", re.IGNORECASE)
_BRACKETS = re.compile(r"\[\[\s*(-?\d+(?:\.\d+)?)\s*\]\]")
_EXPLAIN = re.compile(r"EXPLANATION\s*:\s*(.+)", re.IGNORECASE)
_INT_TEXT = re.compile(r"\s*-?\d{1,%d}\s*" % MAX_NUMBER_CHARS)


class _Reject(ValueError):
    """A reply that breaks the one-answer rule (raised inside JSON decoding)."""


def _number(text: str) -> Optional[float]:
    """A finite number from a short decimal string; None for anything longer or odd."""
    if len(text) > MAX_NUMBER_CHARS:
        return None
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _score(v: Any, lo: float, hi: float) -> Optional[int]:
    """An integer score in [lo, hi] from a JSON value (int, integral float or digit string)."""
    if isinstance(v, str):
        if not _INT_TEXT.fullmatch(v):
            return None
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, float) and not (math.isfinite(v) and v.is_integer()):
        return None
    return int(v) if lo <= v <= hi else None


def _single_int(matches: list[re.Match], lo: float, hi: float) -> Optional[Parsed]:
    """One integer in [lo, hi]; several matches must all agree (an echoed rubric such as
    'Rating: [[0]] or Rating: [[1]]' or a later correction is ambiguous: a failure)."""
    values = {_number(m.group(1)) for m in matches}
    if len(values) != 1:
        return None
    v = values.pop()
    if v is None or not v.is_integer() or not lo <= v <= hi:
        return None
    return Parsed(int(v), matches[-1].span(1))


def _bounded(parse: Callable[..., Optional[Parsed]]) -> Callable[..., Optional[Parsed]]:
    """``parse`` refusing (None) a reply that is not text or is longer than MAX_PARSE_CHARS."""
    @functools.wraps(parse)
    def bounded(text: Any, *args: Any, **kwargs: Any) -> Optional[Parsed]:
        readable = isinstance(text, str) and len(text) <= MAX_PARSE_CHARS
        return parse(text, *args, **kwargs) if readable else None
    return bounded


@_bounded
def parse_alignment(text: str, lo: float = 1, hi: float = 5) -> Optional[Parsed]:
    return _single_int(list(_ALIGN.finditer(text)), lo, hi)


@_bounded
def parse_rating(text: str, lo: float = 0, hi: float = 2) -> Optional[Parsed]:
    """``Rating: [[n]]``; every other ``[[m]]`` in the reply (a correction without the
    prefix) must agree with it."""
    parsed = _single_int(list(_RATING.finditer(text)), lo, hi)
    if parsed is None or any(_number(m.group(1)) != parsed.value for m in _BRACKETS.finditer(text)):
        return None
    return parsed


def _reject(why: str) -> Any:
    raise _Reject(why)


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k.strip().upper() for k, _ in pairs]
    if len(set(keys)) != len(keys):
        _reject("duplicate or case-variant keys")
    return dict(zip(keys, (v for _, v in pairs)))


_DECODER = json.JSONDecoder(
    object_pairs_hook=_pairs, parse_constant=lambda s: _reject(f"{s} is not a score"),
    parse_int=lambda s: int(s) if len(s) <= MAX_NUMBER_CHARS else _reject("integer too long"),
    parse_float=lambda s: _reject("number too long or not finite") if (v := _number(s)) is None else v)


def _json_values(text: str, opener: str) -> Optional[list[Any]]:
    """Every JSON value in ``text`` starting with ``opener`` (code fences and prose around
    them allowed), outermost only; None when one of them breaks the one-answer rule
    (duplicate keys, huge numbers, NaN) or there are too many candidates to try."""
    out: list[Any] = []
    i, tries = text.find(opener), 0
    while i != -1:
        tries += 1
        if tries > MAX_JSON_STARTS:
            return None
        try:
            obj, end = _DECODER.raw_decode(text, i)
        except _Reject:
            return None
        except (json.JSONDecodeError, RecursionError):
            i = text.find(opener, i + 1)
            continue
        except ValueError:  # anything else the decoder refuses
            return None
        out.append(obj)
        i = text.find(opener, end)
    return out


def _one_answer(text: str, opener: str, kind: type) -> Any:
    """The single JSON answer of type ``kind`` in ``text`` (repeats must be identical), else None."""
    values = _json_values(text, opener)
    if not values or not isinstance(values[0], kind) or any(v != values[0] for v in values[1:]):
        return None
    return values[0]


def _json_dict(text: str, names: Optional[dict[str, str]],
               convert: Callable[[str, Any], Any]) -> Optional[Parsed]:
    """The one JSON object whose keys are exactly ``names``' (upper-case; all of the object's
    when None), each value through ``convert(name, value)`` (None fails the reply); keys come
    back as ``names``' values."""
    obj = _one_answer(text, "{", dict)
    if not obj:
        return None
    names = names or {k: k for k in sorted(obj)}
    if set(obj) != set(names):
        return None
    out = {name: convert(name, obj[key]) for key, name in names.items()}
    return None if any(v is None for v in out.values()) else Parsed(out)


@_bounded
def parse_json_scores(text: str, lo: float = 1, hi: float = 5, keys: Sequence[str] = ()) -> Optional[Parsed]:
    """A JSON object ``{"A": 3, ...}``: exactly the expected keys, integer values in range."""
    names = {str(k).strip().upper(): str(k).strip().upper() for k in keys}
    return _json_dict(text, names or None, lambda _, v: _score(v, lo, hi))


@_bounded
def parse_explanation(text: str, lo: float = 0, hi: float = 0) -> Optional[Parsed]:
    phrases = {m.group(1).strip().strip('"').strip() for m in _EXPLAIN.finditer(text)}
    if len(phrases) != 1:
        return None
    phrase = phrases.pop()
    return Parsed(phrase) if phrase and len(phrase) <= MAX_EXPLANATION_CHARS else None


@_bounded
def parse_activations(text: str, lo: float = 0, hi: float = 10, n: int | None = None) -> Optional[Parsed]:
    """A JSON list of ``n`` numbers in [lo, hi] (one simulated activation per token)."""
    obj = _one_answer(text, "[", list)
    if not obj or (n is not None and len(obj) != n):
        return None
    if not all(not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and lo <= v <= hi
               for v in obj):
        return None
    return Parsed([float(v) for v in obj])


MAX_ITEM_CHARS = 200  # a string in a json_object reply (a tag, a name, a description)


def _strings(v: Any, kind: str, most: int) -> Any:
    """``v`` as a stripped string (``kind == "str"``) or a non-empty list of at most
    ``most`` non-empty strings (``"list"``); None when it is neither."""
    if kind == "str":
        return v.strip() if isinstance(v, str) and 0 < len(v.strip()) <= MAX_ITEM_CHARS * 2 else None
    if not isinstance(v, list) or not 0 < len(v) <= most:
        return None
    if not all(isinstance(x, str) and 0 < len(x.strip()) <= MAX_ITEM_CHARS for x in v):
        return None
    return [x.strip() for x in v]


@_bounded
def parse_json_object(text: str, lo: float = 0, hi: float = 0,
                      schema: Optional[dict[str, str]] = None) -> Optional[Parsed]:
    """A JSON object with exactly the ``schema`` keys (case-insensitive), each value a
    string (``"str"``) or a non-empty list of strings (``"list"``, at most ``hi`` items
    when ``hi > 0``); keys come back spelled as in ``schema``."""
    if not schema:
        return None
    most = int(hi) if hi > 0 else 64
    return _json_dict(text, {k.strip().upper(): k for k in schema}, lambda k, v: _strings(v, schema[k], most))


# reply format -> its parser (the formats a template can ask for)
PARSERS: dict[str, Callable[..., Optional[Parsed]]] = {
    "alignment": parse_alignment, "rating": parse_rating, "json_scores": parse_json_scores,
    "explanation": parse_explanation, "activations": parse_activations, "json_object": parse_json_object,
}


def expected_score(logprobs: Optional[list[dict]], span: Optional[tuple[int, int]], lo: float, hi: float) -> Optional[float]:
    """Probability-weighted score at the token of the parsed digit in ``logprobs`` (the chat
    ``choices[0].logprobs.content``): its alternatives that are integers in [lo, hi],
    renormalised; None when the digit is not a token of its own or none is in range."""
    if not logprobs or span is None:
        return None
    pos = 0
    for tok in logprobs:
        text = tok.get("token") if isinstance(tok, dict) else None
        if not isinstance(text, str):
            return None
        start, pos = pos, pos + len(text)
        if not start <= span[0] < pos:
            continue
        if text.strip() != text[span[0] - start: span[1] - start]:
            return None
        num = den = 0.0
        alts = tok.get("top_logprobs") or []
        for alt in alts if isinstance(alts, list) else []:
            t, lp = (alt.get("token"), alt.get("logprob")) if isinstance(alt, dict) else (None, None)
            if not isinstance(t, str) or not _INT_TEXT.fullmatch(t):
                continue
            if isinstance(lp, bool) or not isinstance(lp, (int, float)) or not -1e4 < lp <= 1e-6:
                continue  # log-probabilities are <= 0 (a hair above 0 is rounding)
            if lo <= int(t) <= hi:
                num += math.exp(lp) * int(t)
                den += math.exp(lp)
        return num / den if den > 0 else None
    return None
