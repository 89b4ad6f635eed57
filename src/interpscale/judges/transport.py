"""One run's connection to an OpenAI-compatible endpoint: the HTTP request with its
retries (``judges.retry``) and the concurrency slot each attempt holds while in flight.

A slot (``asyncio.Semaphore``) is held only while a request is on the wire; the backoff
between attempts happens outside it, so ``concurrency`` requests stay in flight while
others wait. The whole request is bounded by the timeout (``asyncio.wait_for``), so a
server trickling bytes cannot keep a slot, and the reply body is read as a stream and
refused beyond ``replies.MAX_BODY_BYTES``. A 401/403/404 before any request of the run was
answered means the settings are wrong: ``JudgeConfigError`` stops the run; after that it
is the item's own failure.
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
    """Requests to one endpoint and model with ``concurrency`` slots; counts what it sends
    into ``usage`` (a ``UsageStats``) and ``ledger`` (the cache's cost-ledger delta)."""

    def __init__(self, sdk: Any, *, model: str, base_url: str, api_key_env: str, concurrency: int,
                 max_retries: int, timeout: float, usage: Any, ledger: Any):
        self.sdk, self.model, self.base_url, self.api_key_env = sdk, model, base_url, api_key_env
        self.max_retries, self.timeout = max_retries, timeout
        self.usage, self.ledger = usage, ledger
        self.slots = asyncio.Semaphore(concurrency)
        self.answered = False  # whether a request of this run got a 2xx reply

    async def ask(self, messages: list[dict], sampling: dict) -> Answer:
        """One request with its retries; each attempt holds a slot only while in flight."""
        attempt = 0
        while True:
            async with self.slots:
                self._count(retry=attempt > 0)
                got = await self._attempt(messages, sampling)
            if not isinstance(got, BaseException):
                return self._answer(got)
            error = got
            wait = calculate_retry_timeout(error, attempt, self.max_retries)
            if wait is None:
                log.warning("judge call failed after %d retries: %s", attempt, describe(error))
                raise CallFailed(describe(error) + (f" after {attempt} retries" if attempt else ""))
            attempt += 1
            await asyncio.sleep(wait)  # outside the slot

    def _count(self, *, retry: bool) -> None:
        if retry:
            self.usage.retries += 1
            self.ledger.add(retries=1)
        self.usage.requests += 1
        self.ledger.add(requests=1)

    async def _attempt(self, messages: list[dict], sampling: dict) -> bytes | BaseException:
        """The reply body, or the error of this attempt (a refusal of our settings raises)."""
        import openai

        try:
            # the SDK's timeout bounds each connect/read; wait_for bounds the whole request
            return await asyncio.wait_for(self._post(messages, sampling), self.timeout + 1.0)
        except asyncio.TimeoutError:
            return TotalTimeout(f"no complete reply within {self.timeout + 1.0:g} s")
        except BodyReadError as exc:
            return exc
        except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError) as exc:
            if not self.answered:  # nothing got through yet: the settings are wrong, stop
                raise JudgeConfigError(f"judge endpoint {self.base_url} refused the request ({describe(exc)}); "
                                       f"check --base-url, --model and ${self.api_key_env}") from None
            return exc  # others got through: this item's own failure, not retried
        except openai.APIError as exc:
            return exc

    def _answer(self, content: bytes) -> Answer:
        self.answered = True
        ans = read_completion(decode_body(content))
        if ans.usage_reported:
            self.usage.add_tokens(self.model, ans.prompt_tokens, ans.completion_tokens)
            self.ledger.add(prompt_tokens=ans.prompt_tokens, completion_tokens=ans.completion_tokens)
        else:
            self.usage.replies_without_usage += 1
        return ans

    async def _post(self, messages: list[dict], sampling: dict) -> bytes:
        """The reply body, read as a stream and refused beyond MAX_BODY_BYTES."""
        async with self.sdk.chat.completions.with_streaming_response.create(
                model=self.model, messages=messages, timeout=self.timeout, **sampling) as resp:
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
async def open_transport(*, model: str, base_url: str, api_key_env: str, concurrency: int, max_retries: int,
                         timeout: float, usage: Any, ledger: Any) -> AsyncIterator[Transport]:
    """A ``Transport`` over a fresh ``AsyncOpenAI`` client for one run (closed after it)."""
    from openai import AsyncOpenAI  # imported lazily: `interpscale judge --help` stays fast

    # retries are ours (max_retries=0 here), so backoff sleeps never hold a slot
    async with AsyncOpenAI(base_url=base_url, api_key=env.api_key(api_key_env) or "unused", max_retries=0,
                           timeout=timeout) as sdk:
        yield Transport(sdk, model=model, base_url=base_url, api_key_env=api_key_env, concurrency=concurrency,
                        max_retries=max_retries, timeout=timeout, usage=usage, ledger=ledger)
