"""One run's connection to an OpenAI-compatible endpoint: each attempt holds a concurrency
slot only while on the wire (``judges.retry``: the backoff outside it), is bounded by the
timeout as a whole and its body by ``replies.MAX_BODY_BYTES``. A 401/403/404 before any
answer of the run stops it (``JudgeConfigError``); after that it is the item's own failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, AsyncIterator

from interpscale.judges import env
from interpscale.judges.replies import MAX_BODY_BYTES, Answer, MalformedReply, decode_body, read_completion
from interpscale.judges.retry import (BodyReadError, CallFailed, JudgeConfigError, TotalTimeout,
                                      calculate_retry_timeout, describe)

log = logging.getLogger("interpscale.judges.client")


class Transport:
    """Requests to ``client``'s endpoint and model with ``client.concurrency`` slots; counts
    what it sends through ``client.tally`` (usage and the cost ledger)."""

    def __init__(self, sdk: Any, client: Any):
        self.sdk, self.client = sdk, client
        self.slots = asyncio.Semaphore(client.concurrency)
        self.answered = False  # whether a request of this run got a 2xx reply

    async def ask(self, messages: list[dict], sampling: dict) -> Answer:
        """One request with its retries; each attempt holds a slot only while in flight."""
        attempt = 0
        while True:
            async with self.slots:
                self.client.tally(requests=1, retries=int(attempt > 0))
                got = await self._attempt(messages, sampling)
            if not isinstance(got, BaseException):
                return self._answer(got)
            wait = calculate_retry_timeout(got, attempt, self.client.max_retries)
            if wait is None:
                log.warning("judge call failed after %d retries: %s", attempt, describe(got))
                raise CallFailed(describe(got) + (f" after {attempt} retries" if attempt else ""))
            attempt += 1
            await asyncio.sleep(wait)  # outside the slot

    async def _attempt(self, messages: list[dict], sampling: dict) -> bytes | BaseException:
        """The reply body, or the error of this attempt (a refusal of our settings raises)."""
        import openai

        timeout = self.client.timeout + 1.0
        try:
            # the SDK's timeout bounds each connect/read; wait_for bounds the whole request
            return await asyncio.wait_for(self._post(messages, sampling), timeout)
        except asyncio.TimeoutError:
            return TotalTimeout(f"no complete reply within {timeout:g} s")
        except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError) as exc:
            if not self.answered:  # nothing got through yet: the settings are wrong, stop
                raise JudgeConfigError(f"judge endpoint {self.client.base_url} refused the request "
                                       f"({describe(exc)}); check --base-url, --model and "
                                       f"${self.client.api_key_env}") from None
            return exc  # others got through: this item's own failure, not retried
        except (BodyReadError, openai.APIError) as exc:
            return exc

    def _answer(self, content: bytes) -> Answer:
        self.answered = True
        ans = read_completion(decode_body(content))
        if ans.usage_reported:
            self.client.tally(tokens=(ans.prompt_tokens, ans.completion_tokens))
        else:
            self.client.usage.replies_without_usage += 1
        return ans

    async def _post(self, messages: list[dict], sampling: dict) -> bytes:
        """The reply body, read as a stream and refused beyond MAX_BODY_BYTES."""
        async with self.sdk.chat.completions.with_streaming_response.create(
                model=self.client.model, messages=messages, timeout=self.client.timeout, **sampling) as resp:
            body = bytearray()
            try:
                async for chunk in resp.iter_bytes():
                    body += chunk
                    if len(body) > MAX_BODY_BYTES:
                        raise MalformedReply(f"reply body over {MAX_BODY_BYTES} bytes")
            except MalformedReply:
                raise
            except Exception as exc:  # noqa: BLE001 - the HTTP library's transport errors (connection cut mid-body, ...)
                raise BodyReadError(f"{type(exc).__name__} while reading the reply body") from None
            return bytes(body)


@contextlib.asynccontextmanager
async def open_transport(client: Any) -> AsyncIterator[Transport]:
    """A ``Transport`` for ``client`` (a JudgeClient) over a fresh ``AsyncOpenAI`` client for
    one run (closed after it)."""
    from openai import AsyncOpenAI  # imported lazily: `interpscale judge --help` stays fast

    # retries are ours (max_retries=0 here), so backoff sleeps never hold a slot
    async with AsyncOpenAI(base_url=client.base_url, api_key=env.api_key(client.api_key_env) or "unused",
                           max_retries=0, timeout=client.timeout) as sdk:
        yield Transport(sdk, client)
