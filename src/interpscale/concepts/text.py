"""Text helpers shared by the stages: sentence splitting, domain guess, content words.

The paper splits sentences with BlingFire (§4.2.1); it is not a dependency here, so a
rule-based splitter stands in: a sentence ends at ``. ! ?`` (optionally followed by a
closing quote or bracket) before whitespace, or at a blank line; code and maths split at
line ends, where their statements end.
"""

from __future__ import annotations

import re
from typing import Iterator

DOMAINS = ("prose", "code", "maths")
# §4.2.1: 150 tokens for web text and general documents, 256 for mathematics and code
THRESHOLDS = {"prose": 150, "code": 256, "maths": 256}
MAX_SENTENCE_TOKENS = 50_000  # §4.2.1: longer sentences are dropped as malformed

_SENT_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+|\n\s*\n")
_CODE_HINT = re.compile(r"[{};]\s*$|^\s*(def |class |import |#include|function |return\b|for\s*\(|if\s*\()", re.M)
_MATH_HINT = re.compile(r"\\(frac|sum|int|alpha|beta|mathbb|begin)|\$[^$]+\$|[=<>]\s*-?\d")
_WORD = re.compile(r"[^\W\d_][\w'-]*[^\W_]|[^\W\d_]", re.UNICODE)

# function words never worth a tag (English; a tag from another language just passes through)
STOPWORDS = frozenset("""a about above after again against all also am an and any are as at be because been
before being below between both but by can could did do does doing down during each few for from further had
has have having he her here hers herself him himself his how i if in into is it its itself just me more most
my myself no nor not now of off on once only or other our ours ourselves out over own same she should so some
such than that the their theirs them themselves then there these they this those through to too under until
up very was we were what when where which while who whom why will with would you your yours yourself
yourselves near again one two may might must shall upon via per yet ever every""".split())


def guess_domain(text: str) -> str:
    """``code`` when many lines look like statements, ``maths`` with LaTeX or equations,
    else ``prose``; a document's ``domain`` field overrides this."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) >= 3 and len(_CODE_HINT.findall(text)) >= 0.3 * len(lines):
        return "code"
    if len(_MATH_HINT.findall(text)) >= max(2, len(text) // 400):
        return "maths"
    return "prose"


def split_sentences(text: str, domain: str = "prose") -> Iterator[str]:
    """Sentences (prose) or lines (code, maths) of ``text``, whitespace-trimmed, non-empty."""
    parts = text.splitlines() if domain in ("code", "maths") else _SENT_END.split(text)
    for p in parts:
        if p and p.strip():
            yield p.strip() if domain == "prose" else p.rstrip()


def content_words(text: str) -> list[str]:
    """Lower-cased words of ``text`` without stopwords or one-letter words."""
    return [w for w in (m.lower() for m in _WORD.findall(text)) if len(w) > 1 and w not in STOPWORDS]


def normalize_tag(tag: str) -> str:
    """§4.2.2's normalisation before embedding: ``climate-change_adaptation`` → ``climate
    change adaptation`` (lower case, separators to spaces, collapsed whitespace)."""
    return " ".join(re.sub(r"[-_/|:;,.]+", " ", str(tag).lower()).split())
