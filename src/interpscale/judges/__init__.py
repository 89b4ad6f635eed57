"""LLM judges (OpenAI-compatible client, cache, prompts, alignment / steering / relevance /
auto-interp scorers) and the offline lexical backend; imports nothing else from interpscale
but its bottom modules, and never torch.

>>> judge = build_judge(model="mistral-small-3.1-24b-instruct", base_url="http://localhost:8000/v1",
...                     cache_path="runs/judge_cache.sqlite")                       # doctest: +SKIP
>>> score_alignment(cards, top_tokens, judge=judge).mean                            # doctest: +SKIP
>>> run_steering_benchmark(generate, cards, judge=judge).table9()                   # doctest: +SKIP

The modules and their split: docs/architecture.md. A failed item is None with its status, never a zero.
"""

from interpscale.judges.build import build_judge, default_cache_path
from interpscale.judges.client import JudgeClient, JudgeTask, UsageStats
from interpscale.judges.retry import JudgeConfigError
from interpscale.judges.lexical import LEXICAL_LABEL, LexicalJudge
from interpscale.judges.scorers import (AlignmentResult, AutoInterpResult, RelevanceResult, ScoreSummary, pearson,
                                       score_alignment, score_autointerp, score_relevance)
from interpscale.judges.steering import (CONDITIONS, DEFAULT_PROMPTS, ConditionScores, SteeringResult, SteeringSample,
                                        aggregate, harmonic, judge_continuations, run_steering_benchmark,
                                        score_steering_continuations, select_strengths, table17)
from interpscale.judges.templates import (DEFAULT_TEMPLATES, JUDGE_KINDS, JudgeKind, PromptTemplate, TemplateSet, load_templates,
                                         register_judge_kind)
from interpscale.judges.types import (FAILED_STATUSES, PARSE_STATUSES, ConceptCard, Judge, JudgeRecord,
                                     Outcome, ParseStatus, outcome)

__all__ = [
    "ConceptCard", "Judge", "JudgeRecord", "ParseStatus", "PARSE_STATUSES", "FAILED_STATUSES",
    "JudgeClient", "JudgeConfigError", "JudgeTask", "UsageStats", "LexicalJudge", "LEXICAL_LABEL",
    "build_judge", "default_cache_path", "outcome", "Outcome",
    "PromptTemplate", "TemplateSet", "DEFAULT_TEMPLATES", "load_templates", "JUDGE_KINDS", "JudgeKind", "register_judge_kind",
    "score_alignment", "AlignmentResult", "score_relevance", "RelevanceResult", "ScoreSummary",
    "score_autointerp", "AutoInterpResult", "pearson",
    "run_steering_benchmark", "judge_continuations", "score_steering_continuations", "SteeringResult",
    "SteeringSample", "ConditionScores", "aggregate", "harmonic", "select_strengths", "table17", "CONDITIONS",
    "DEFAULT_PROMPTS",
]
