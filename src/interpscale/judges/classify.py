"""One classifier for a judge's answer, used by the live client and the Batch API reader:
refused, parsed (with the expected score from ``top_logprobs`` for 1-5 / 0-2 scores) or a
parse error. The live client re-asks once when :func:`needs_reask`; the Batch API path has
no second turn."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from interpscale.judges.parsing import PARSERS, Parsed, expected_score
from interpscale.judges.templates import PromptTemplate

log = logging.getLogger("interpscale.judges.client")

SCORE_OUTPUTS = ("alignment", "rating")  # outputs whose logprobs give an expected score


@dataclass(frozen=True)
class Verdict:
    """What an answer amounts to: ``value`` (None unless parsed), ``status`` (ok | reasked |
    parse_error | refused) and the probability-weighted ``expected`` score."""

    value: Any
    status: str
    expected: Optional[float] = None


def parse_reply(tpl: PromptTemplate, text: str, kwargs: Mapping[str, Any]) -> Optional[Parsed]:
    """The template's parser; a parser that raises (it should not) counts as no parse."""
    try:
        return PARSERS[tpl.output](text, tpl.lo, tpl.hi, **kwargs)
    except (ValueError, TypeError, OverflowError, RecursionError, KeyError) as exc:
        log.warning("judge parser %s raised %s: counted as a parse failure", tpl.output, type(exc).__name__)
        return None


def needs_reask(tpl: PromptTemplate, text: str, refusal: Optional[str], kwargs: Mapping[str, Any]) -> bool:
    """Whether the first answer earns the one re-ask: not a refusal, and unparseable."""
    return not refusal and parse_reply(tpl, text, kwargs) is None


def classify(tpl: PromptTemplate, text: str, refusal: Optional[str], logprobs: Any, kwargs: Mapping[str, Any],
             *, reasked: bool = False) -> Verdict:
    """The verdict on an answer (``reasked``: it answers the re-ask)."""
    if refusal:
        return Verdict(None, "refused")
    parsed = parse_reply(tpl, text, kwargs)
    if parsed is None:
        return Verdict(None, "parse_error")
    exp = expected_score(logprobs, parsed.span, tpl.lo, tpl.hi) if tpl.output in SCORE_OUTPUTS else None
    return Verdict(parsed.value, "reasked" if reasked else "ok", exp)
