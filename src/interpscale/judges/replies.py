"""Read one chat-completion reply body, whatever a server sent, into a checked ``Answer``.

Only the fields the judges use are read, and each must have the shape the OpenAI chat
API documents; anything else raises ``MalformedReply`` (the item becomes an
``api_error``, never a score, and is not cached). Absent optional fields are fine:
a reply without ``usage`` counts no tokens, one without ``logprobs`` has no expected
score, ``content: null`` is an empty answer, and content given as a list of typed parts
is read from its ``text`` parts. A refusal (``message.refusal`` or
``finish_reason: content_filter``) is an answer too: the judge declined to score.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Optional

MAX_BODY_BYTES = 8_000_000  # a judge reply is a few kB; anything this large is not one
MAX_TOKENS_FIELD = 10 ** 9  # a usage count above this is not a count
MAX_LOGPROB_TOKENS = 100_000
_SURROGATE = re.compile("[\ud800-\udfff]")
RAW_CAP = 4_000  # characters of a reply kept in the cache, in results and in a re-ask


class MalformedReply(ValueError):
    """The reply body does not have the documented shape."""


@dataclass(frozen=True)
class Answer:
    text: str
    logprobs: Optional[list[dict[str, Any]]]
    refusal: Optional[str]
    prompt_tokens: int
    completion_tokens: int
    usage_reported: bool


def cap(text: str, limit: int = RAW_CAP) -> str:
    """``text`` cut to ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f" …[{len(text) - limit} more characters]"


def clean_text(text: str) -> str:
    """``text`` as valid Unicode: lone surrogates (legal in JSON ``\\ud800`` escapes, not
    storable as UTF-8) become U+FFFD."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)


def decode_body(content: bytes) -> Any:
    """JSON from raw bytes; MalformedReply for anything that is not bounded, valid JSON."""
    if len(content) > MAX_BODY_BYTES:
        raise MalformedReply(f"reply body of {len(content)} bytes")
    try:
        return json.loads(content)
    except (ValueError, RecursionError) as exc:  # bad JSON, bad UTF-8, huge integers, deep nesting
        raise MalformedReply(f"reply body is not JSON ({type(exc).__name__})") from None


def _count(usage: dict, name: str) -> int:
    v = usage.get(name)
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_TOKENS_FIELD:
        raise MalformedReply(f"usage.{name} is not a token count")
    return v


def _logprobs(lp: Any) -> Optional[list[dict[str, Any]]]:
    if lp is None:
        return None
    if not isinstance(lp, dict):
        raise MalformedReply("choices[0].logprobs is not an object")
    content = lp.get("content")
    if content is None:
        return None
    if not isinstance(content, list) or len(content) > MAX_LOGPROB_TOKENS:
        raise MalformedReply("choices[0].logprobs.content is not a list")
    out = []
    for tok in content:
        if not isinstance(tok, dict) or not isinstance(tok.get("token"), str):
            raise MalformedReply("a logprobs token is not an object with a string token")
        top = tok.get("top_logprobs")
        if top is None:
            top = []
        if not isinstance(top, list):
            raise MalformedReply("top_logprobs is not a list")
        for alt in top:
            lpv = alt.get("logprob") if isinstance(alt, dict) else None
            if not isinstance(alt, dict) or not isinstance(alt.get("token"), str) or isinstance(lpv, bool) \
                    or not isinstance(lpv, (int, float)) or not math.isfinite(lpv):
                raise MalformedReply("a top_logprobs entry is not {token: str, logprob: number}")
        out.append({"token": tok["token"], "top_logprobs": top})
    return out


def _content(content: Any) -> str:
    """A string, null (empty), or a list of typed parts whose ``text`` parts are joined
    (some servers send reasoning and text parts; only the text is the answer)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                break
            if part["type"] == "text":
                if not isinstance(part.get("text"), str):
                    break
                texts.append(part["text"])
        else:
            return "".join(texts)
    raise MalformedReply("choices[0].message.content is neither a string nor a list of typed parts")


def read_completion(body: Any) -> Answer:
    """The checked answer of a chat completion body (already JSON-decoded)."""
    if not isinstance(body, dict):
        raise MalformedReply(f"reply body is a JSON {type(body).__name__}, not an object")
    usage = body.get("usage")
    if usage is not None and not isinstance(usage, dict):
        raise MalformedReply("usage is not an object")
    choices = body.get("choices")
    if not isinstance(choices, list):
        raise MalformedReply("choices is missing or not a list")
    if not choices:
        raise MalformedReply("choices is empty")
    choice = choices[0]
    if not isinstance(choice, dict):
        raise MalformedReply("choices[0] is not an object")
    message = choice.get("message")
    if not isinstance(message, dict):
        raise MalformedReply("choices[0].message is missing or not an object")
    text = _content(message.get("content"))
    refusal = message.get("refusal")
    if refusal is not None and not isinstance(refusal, str):
        raise MalformedReply("choices[0].message.refusal is not a string")
    finish = choice.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise MalformedReply("choices[0].finish_reason is not a string")
    if not refusal and finish == "content_filter":
        refusal = "finish_reason: content_filter"
    lp = _logprobs(choice.get("logprobs"))
    u = usage or {}
    return Answer(text=clean_text(text), logprobs=lp, refusal=clean_text(refusal) if refusal else None, prompt_tokens=_count(u, "prompt_tokens"),
                  completion_tokens=_count(u, "completion_tokens"), usage_reported=usage is not None)
