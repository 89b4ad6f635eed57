"""One classifier for a judge's answer, used by the live client and the Batch API reader:
refused, parsed (with the expected score from ``top_logprobs`` for 1-5 / 0-2 scores) or a
parse error. The live client re-asks a parse error once; the Batch API path has no second
turn."""

from __future__ import annotations

import logging
from typing import Any, Mapping, Optional

from interpscale.judges.parsing import PARSERS, expected_score
from interpscale.judges.replies import cap
from interpscale.judges.templates import PromptTemplate
from interpscale.judges.types import JudgeRecord

log = logging.getLogger("interpscale.judges.client")

SCORE_OUTPUTS = ("alignment", "rating")  # outputs whose logprobs give an expected score


def classify(tpl: PromptTemplate, text: str, refusal: Optional[str], logprobs: Any, kwargs: Mapping[str, Any],
             *, reasked: bool = False) -> JudgeRecord:
    """The record of an answer (``reasked``: it answers the re-ask); its raw text is the
    answer, else the refusal, capped."""
    raw = cap(text or refusal or "")
    if refusal:
        return JudgeRecord(None, raw, "refused")
    try:
        parsed = PARSERS[tpl.output](text, tpl.lo, tpl.hi, **kwargs)
    except (ValueError, TypeError, OverflowError, RecursionError, KeyError) as exc:  # it should not raise
        log.warning("judge parser %s raised %s: counted as a parse failure", tpl.output, type(exc).__name__)
        parsed = None
    if parsed is None:
        return JudgeRecord(None, raw, "parse_error")
    exp = expected_score(logprobs, parsed.span, tpl.lo, tpl.hi) if tpl.output in SCORE_OUTPUTS else None
    return JudgeRecord(parsed.value, raw, "reasked" if reasked else "ok", expected=exp)
