"""Text helpers shared by the stages: sentence spans, domain guess, content words.

Sentence splitting never changes a character: :func:`split_sentences` returns pieces that
concatenate to the text exactly (a piece keeps the whitespace after its sentence; the first
keeps any leading whitespace). Prose goes through pysbd paragraph by paragraph (the paper
used BlingFire, §4.2.1), with a fallback rule; code and maths split after each line (the
rules and why: docs/concepts.md, "Chunking never changes the text").
"""

from __future__ import annotations

import itertools
import logging
import re
from functools import lru_cache
from pathlib import PurePath

from interpscale.data.sources import CODE_EXTENSIONS, MATHS_EXTENSIONS

log = logging.getLogger(__name__)

DOMAINS = ("prose", "code", "maths")
# §4.2.1: 150 tokens for web text and general documents, 256 for mathematics and code
THRESHOLDS = {"prose": 150, "code": 256, "maths": 256}

_PARAGRAPH_END = re.compile(r"\n[^\S\n]*\n\s*")  # a run of blank lines ends a paragraph
_SENT_END = re.compile(r"[.!?…]+[\"'”’»)\]}]*\s+")  # the fallback rule: end mark, closers, whitespace
_CODE_HINT = re.compile(r"[{};:]\s*$|^\s*(def |class |import |from \S+ import |@\w|#include|function |return\b|"
                        r"for\s*\(|if\s*\(|elif |except\b|self\.)", re.M)
_MATH_HINT = re.compile(r"\\(frac|sum|int|alpha|beta|mathbb|begin)|\$[^$]+\$|[=<>]\s*-?\d")
_LINE_CUT = re.compile(r"\n(?=[^\n]*\S)")  # a line break a non-blank line follows (blank lines stay above)
_WORD = re.compile(r"[^\W\d_][\w'-]*[^\W_]|[^\W\d_]", re.UNICODE)

# function words never worth a tag (English; a tag from another language just passes through)
STOPWORDS = frozenset("""a about above after again against all also am an and any are as at be because been
before being below between both but by can could did do does doing down during each few for from further had
has have having he her here hers herself him himself his how i if in into is it its itself just me more most
my myself no nor not now of off on once only or other our ours ourselves out over own same she should so some
such than that the their theirs them themselves then there these they this those through to too under until
up very was we were what when where which while who whom why will with would you your yours yourself
yourselves near again one two may might must shall upon via per yet ever every""".split())


def domain_of_path(path) -> str | None:
    """The domain a file's extension names (``code`` for source files, ``maths`` for TeX),
    else None (the text decides)."""
    p = PurePath(str(path))
    ext = (PurePath(p.stem).suffix if p.suffix.lower() == ".gz" else p.suffix).lower()
    return "code" if ext in CODE_EXTENSIONS else "maths" if ext in MATHS_EXTENSIONS else None


def guess_domain(text: str) -> str:
    """``code`` when many lines look like statements, ``maths`` with LaTeX or equations,
    else ``prose`` (a file's extension, :func:`domain_of_path`, or ``--domain`` overrides this)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) >= 3 and len(_CODE_HINT.findall(text)) >= 0.3 * len(lines):
        return "code"
    if len(_MATH_HINT.findall(text)) >= max(2, len(text) // 400):
        return "maths"
    return "prose"


def _cuts_to_pieces(text: str, cuts, skip_space: bool) -> list[str]:
    """``text`` cut at ``cuts`` (with ``skip_space`` each moved past the whitespace it points
    into, so a piece keeps the whitespace after it); no piece is empty and the pieces
    concatenate to ``text``."""
    out, start, n = [], 0, len(text)
    for c in sorted(cuts):
        while skip_space and c < n and text[c].isspace():
            c += 1
        if start < c < n:
            out.append(text[start:c])
            start = c
    if start < n:
        out.append(text[start:])
    return out


@lru_cache(maxsize=1)
def _segmenter():
    """pysbd's English segmenter (None when pysbd is not installed: the fallback rule splits)."""
    try:
        import pysbd
    except ImportError:
        log.warning("pysbd is not installed: prose is split by the fallback rule (`pip install pysbd`)")
        return None
    return pysbd.Segmenter(language="en", clean=False)


def _paragraph_cuts(para: str, offset: int) -> list[int]:
    """Sentence starts in one paragraph: pysbd on the paragraph with its line breaks read as
    spaces (same length, so its pieces map back by length), else the fallback rule."""
    seg = _segmenter()
    flat = para.replace("\r", " ").replace("\n", " ")
    pieces = seg.segment(flat) if seg is not None and flat.strip() else None
    if not pieces or "".join(pieces) != flat:  # pysbd promises its input back; never trust a piece that is not
        if pieces:
            log.debug("pysbd did not return the paragraph at offset %d unchanged; the fallback rule splits it", offset)
        return [offset + m.end() for m in _SENT_END.finditer(para)]
    return [offset + n for n in itertools.accumulate(map(len, pieces[:-1]))]


def _prose_cuts(text: str) -> list[int]:
    cuts, start = [], 0
    for m in _PARAGRAPH_END.finditer(text):
        cuts += _paragraph_cuts(text[start:m.end()], start) + [m.end()]
        start = m.end()
    return cuts + _paragraph_cuts(text[start:], start)


def split_sentences(text: str, domain: str = "prose") -> list[str]:
    """Sentences (prose) or lines (code, maths) of ``text``, each with the whitespace after it:
    ``"".join(split_sentences(text, d)) == text`` for every text and domain."""
    if domain in ("code", "maths"):
        return _cuts_to_pieces(text, [m.end() for m in _LINE_CUT.finditer(text)], skip_space=False)
    return _cuts_to_pieces(text, _prose_cuts(text), skip_space=True)


def content_words(text: str) -> list[str]:
    """Lower-cased words of ``text`` without stopwords or one-letter words."""
    return [w for w in (m.lower() for m in _WORD.findall(text)) if len(w) > 1 and w not in STOPWORDS]


def normalize_tag(tag: str) -> str:
    """§4.2.2's normalisation before embedding: ``climate-change_adaptation`` → ``climate
    change adaptation`` (lower case, separators to spaces, collapsed whitespace)."""
    return " ".join(re.sub(r"[-_/|:;,.]+", " ", str(tag).lower()).split())
