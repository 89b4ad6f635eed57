"""LLM judges (OpenAI-compatible client, cache, prompts, alignment / steering /
relevance / auto-interp scorers) and the offline lexical backend. Imports nothing
else from interpscale and never imports torch."""

from interpscale.judges.types import PARSE_STATUSES, ConceptCard, JudgeRecord, ParseStatus

__all__ = ["ConceptCard", "JudgeRecord", "ParseStatus", "PARSE_STATUSES"]
