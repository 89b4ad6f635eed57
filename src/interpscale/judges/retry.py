"""The judge client's retry policy: its constants and the three decisions it makes.

They mirror the openai SDK (openai-python): ``INITIAL_RETRY_DELAY`` and ``MAX_RETRY_DELAY``
are its ``_constants.py`` values; :func:`should_retry`, :func:`parse_retry_after_header` and
:func:`calculate_retry_timeout` its ``_base_client.py`` ``_should_retry``,
``_parse_retry_after_header`` and ``_calculate_retry_timeout`` (backoff 0.5, 1, 2, 4, 8 s
less up to 25 % jitter).

Why not the SDK's own ``max_retries``: the SDK sleeps between attempts inside the request
call, so a request waiting out a backoff would keep its concurrency slot and a burst of 429s
would idle every slot. The client calls the SDK with ``max_retries=0`` and sleeps outside the
slot (``judges.transport``). On purpose unlike the SDK: 4 retries (its 2), a 120 s timeout
(its 600 s), and a server asking to wait over ``MAX_RETRY_AFTER`` is not retried (the item's
``api_error``) where the SDK falls back to its own backoff.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from typing import Any, Optional

from interpscale.errors import UserError

DEFAULT_TIMEOUT = 120.0  # seconds per request, start to end
DEFAULT_MAX_RETRIES = 4
DEFAULT_CONCURRENCY = 16  # requests in flight at once
INITIAL_RETRY_DELAY = 0.5  # as the SDK's _constants.py
MAX_RETRY_DELAY = 8.0  # as the SDK's _constants.py
MAX_RETRY_AFTER = 120.0  # a longer server-requested wait is not honoured: the call fails


class JudgeConfigError(UserError, RuntimeError):
    """An error no retry can fix (bad key, no access, unknown model or path): stops the run
    (bad settings: the CLI exits 2; a RuntimeError as it always was)."""


class TotalTimeout(Exception):
    """A request that took longer than the client's timeout from start to end."""


class BodyReadError(Exception):
    """The connection failed while the reply body was being read (retried as a connection error)."""


class CallFailed(Exception):
    """One task's request failed for good (after the retries it was allowed)."""


def describe(exc: BaseException) -> str:
    """A short description of a failed request: the error type and its HTTP status."""
    if isinstance(exc, (TotalTimeout, BodyReadError)):
        return f"{type(exc).__name__}: {exc}"
    code = getattr(exc, "status_code", None)
    return f"{type(exc).__name__}" + (f": HTTP {code}" if code else "")


def should_retry(exc: BaseException) -> bool:
    """Connection problems, timeouts, 408/409/429/5xx; a server's ``x-should-retry``
    header overrides the status code, as the SDK does."""
    import openai

    if isinstance(exc, (openai.APIConnectionError, TotalTimeout, BodyReadError)):  # includes APITimeoutError
        return True
    if not isinstance(exc, openai.APIStatusError):
        return False
    should = (exc.response.headers.get("x-should-retry") or "").strip().lower()
    if should in ("true", "false"):
        return should == "true"
    code = exc.status_code
    return code in (408, 409, 429) or code >= 500


def parse_retry_after_header(headers: Any) -> Optional[float]:
    """The wait a reply asks for (``retry-after-ms``, then ``retry-after`` in seconds or
    as an HTTP date); None when absent or unreadable; never negative or NaN."""
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0), ("retry-after", None)):
        value = headers.get(name) if headers is not None else None
        if value is None or len(value) > 64:
            continue
        try:
            if scale is None:  # an HTTP date
                v = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
            else:
                v = float(value) * scale
        except (TypeError, ValueError, IndexError, OverflowError, OSError, AttributeError):
            continue
        if not math.isnan(v):
            return max(v, 0.0)  # inf stays inf: longer than anything we honour
    return None


def calculate_retry_timeout(exc: BaseException, attempt: int, max_retries: int) -> Optional[float]:
    """Seconds to wait before retry ``attempt + 1`` of a request that failed with ``exc``,
    or None when it is not retried (not retryable, retries used up, or a server-requested
    wait beyond ``MAX_RETRY_AFTER``)."""
    if attempt >= max_retries or not should_retry(exc):
        return None
    asked = parse_retry_after_header(getattr(getattr(exc, "response", None), "headers", None))
    if asked is not None:
        return asked if asked <= MAX_RETRY_AFTER else None
    return min(INITIAL_RETRY_DELAY * 2.0 ** min(attempt, 16), MAX_RETRY_DELAY) * (1 - 0.25 * random.random())
