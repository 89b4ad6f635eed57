"""Read one chat-completion reply body, whatever a server sent, into a checked ``Answer``.

Only the fields the judges use are read, each in the shape the OpenAI chat API documents;
anything else raises ``MalformedReply`` (an uncached ``api_error``, never a score). Absent
optional fields are fine (no ``usage``: no tokens counted; ``content: null``: an empty
answer). A refusal (``message.refusal``, ``finish_reason: content_filter``) is an answer.
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
    return _SURROGATE.sub("\ufffd", text)


def _need(ok: bool, what: str) -> None:
    """MalformedReply(``what``) unless the reply has the documented shape (``ok``)."""
    if not ok:
        raise MalformedReply(what)


def decode_body(content: bytes) -> Any:
    """JSON from raw bytes; MalformedReply for anything that is not bounded, valid JSON."""
    _need(len(content) <= MAX_BODY_BYTES, f"reply body of {len(content)} bytes")
    try:
        return json.loads(content)
    except (ValueError, RecursionError) as exc:  # bad JSON, bad UTF-8, huge integers, deep nesting
        raise MalformedReply(f"reply body is not JSON ({type(exc).__name__})") from None


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _count(usage: dict, name: str) -> int:
    v = usage.get(name, 0)
    _need(v is None or (_is_number(v) and isinstance(v, int) and 0 <= v <= MAX_TOKENS_FIELD),
          f"usage.{name} is not a token count")
    return v or 0


def _logprobs(lp: Any) -> Optional[list[dict[str, Any]]]:
    if lp is None:
        return None
    _need(isinstance(lp, dict), "choices[0].logprobs is not an object")
    content = lp.get("content")
    if content is None:
        return None
    _need(isinstance(content, list) and len(content) <= MAX_LOGPROB_TOKENS,
          "choices[0].logprobs.content is not a list")
    out = []
    for tok in content:
        _need(isinstance(tok, dict) and isinstance(tok.get("token"), str),
              "a logprobs token is not an object with a string token")
        top = [] if tok.get("top_logprobs") is None else tok["top_logprobs"]
        _need(isinstance(top, list), "top_logprobs is not a list")
        _need(all(isinstance(alt, dict) and isinstance(alt.get("token"), str)
                  and _is_number(alt.get("logprob")) and math.isfinite(alt["logprob"]) for alt in top),
              "a top_logprobs entry is not {token: str, logprob: number}")
        out.append({"token": tok["token"], "top_logprobs": top})
    return out


def _content(content: Any) -> str:
    """A string, null (empty), or a list of typed parts whose ``text`` parts are joined
    (some servers send reasoning and text parts; only the text is the answer)."""
    if content is None or isinstance(content, str):
        return content or ""
    parts = content if isinstance(content, list) else [None]
    _need(all(isinstance(p, dict) and isinstance(p.get("type"), str)
              and (p["type"] != "text" or isinstance(p.get("text"), str)) for p in parts),
          "choices[0].message.content is neither a string nor a list of typed parts")
    return "".join(p["text"] for p in parts if p["type"] == "text")


def read_completion(body: Any) -> Answer:
    """The checked answer of a chat completion body (already JSON-decoded)."""
    _need(isinstance(body, dict), f"reply body is a JSON {type(body).__name__}, not an object")
    usage, choices = body.get("usage"), body.get("choices")
    _need(usage is None or isinstance(usage, dict), "usage is not an object")
    _need(isinstance(choices, list), "choices is missing or not a list")
    _need(bool(choices), "choices is empty")
    choice = choices[0]
    _need(isinstance(choice, dict), "choices[0] is not an object")
    message = choice.get("message")
    _need(isinstance(message, dict), "choices[0].message is missing or not an object")
    text = _content(message.get("content"))
    refusal, finish = message.get("refusal"), choice.get("finish_reason")
    _need(refusal is None or isinstance(refusal, str), "choices[0].message.refusal is not a string")
    _need(finish is None or isinstance(finish, str), "choices[0].finish_reason is not a string")
    if not refusal and finish == "content_filter":
        refusal = "finish_reason: content_filter"
    lp = _logprobs(choice.get("logprobs"))
    u = usage or {}
    return Answer(text=clean_text(text), logprobs=lp, refusal=clean_text(refusal) if refusal else None,
                  prompt_tokens=_count(u, "prompt_tokens"), completion_tokens=_count(u, "completion_tokens"),
                  usage_reported=usage is not None)
