"""JudgeClient: concurrent, cached, retrying judge calls to an OpenAI-compatible API.

Every task ends as one ``Reply`` whatever the server does: a parsed value, or ``None``
with a status (``parse_error``, ``api_error``, ``refused``). Nothing that happens to one
task reaches the others. Only an error no retry can fix (401/403/404: bad key, unknown
model or path) stops the run, as ``JudgeConfigError``, and only while no request of the
run has been answered; after that, such an error is the item's own ``api_error``.

- Transport errors (429 honouring ``retry-after``/``retry-after-ms``, 408/409/5xx,
  timeouts, dropped connections) are retried here, up to ``max_retries`` times with
  exponential backoff; the wait happens outside the concurrency slot, so ``concurrency``
  requests stay in flight while others back off. A server asking to wait longer than
  ``MAX_RETRY_AFTER_S`` is not retried.
- A reply body of the wrong shape (``judges.replies``) is an ``api_error`` and is not
  cached, so a rerun asks again.
- An unparseable answer gets one re-ask that shows the judge its own (truncated)
  reply; still unparseable, it is a ``parse_error`` (cached, as a deterministic answer).
- Finished calls are committed to the sqlite cache as they arrive (a killed run resumes
  where it stopped), raw replies capped (``judges.replies.RAW_CAP`` characters). ``usage`` counts what
  was sent (requests, retries, re-asks, tokens per model) and the cache keeps a cost
  ledger of every run. The API key is read from the environment at call time and is
  never stored, logged or cached.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import os
import random
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from interpscale.errors import UserError
from interpscale.judges.cache import JudgeCache, LedgerDelta, cache_key
from interpscale.judges.parsing import PARSERS, Parsed, expected_score
from interpscale.judges.replies import MAX_BODY_BYTES, Answer, MalformedReply, cap, decode_body, read_completion
from interpscale.judges.templates import PromptTemplate, TemplateSet

log = logging.getLogger(__name__)

# Environment variables read when arguments are not given.
ENV_BASE_URL = "INTERPSCALE_JUDGE_BASE_URL"
ENV_MODEL = "INTERPSCALE_JUDGE_MODEL"
DEFAULT_KEY_ENV = "OPENAI_API_KEY"

INITIAL_BACKOFF_S = 0.5  # exponential backoff: 0.5, 1, 2, 4, 8 s (less up to 25 % jitter)
MAX_BACKOFF_S = 8.0
MAX_RETRY_AFTER_S = 120.0  # a longer server-requested wait is not honoured: the call fails


@dataclass(frozen=True)
class JudgeTask:
    """One judge call: a template, the strings that fill it, parser options, and the
    structured inputs (``data``) the offline lexical backend scores from."""

    template: PromptTemplate
    values: Mapping[str, Any]
    parse_kwargs: Mapping[str, Any] = field(default_factory=dict)
    data: Mapping[str, Any] = field(default_factory=dict)

    def messages(self) -> list[dict[str, str]]:
        return self.template.render(self.values)


@dataclass(frozen=True)
class Reply:
    """What a backend returns per task. ``value`` is None unless the reply parsed."""

    value: Any
    raw: str
    status: str  # ok | reasked | parse_error | api_error | refused | lexical
    cached: bool = False
    expected: Optional[float] = None
    backend: str = "llm"


@dataclass
class UsageStats:
    """What one client did over its lifetime (``cost`` needs prices per 1M tokens).

    ``requests`` counts HTTP requests sent (first tries, retries and re-asks);
    ``retries`` the retries actually sent; ``reasks`` the re-asks sent; tokens are those
    the server reported, in total and per model (``tokens_by_model``).
    """

    tasks: int = 0
    requests: int = 0
    cache_hits: int = 0
    retries: int = 0
    reasks: int = 0
    parse_failures: int = 0
    api_errors: int = 0
    malformed_replies: int = 0
    refusals: int = 0
    replies_without_usage: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_by_model: dict[str, dict[str, int]] = field(default_factory=dict)
    price_in_per_mtok: Optional[float] = None
    price_out_per_mtok: Optional[float] = None

    @property
    def cost(self) -> Optional[float]:
        if self.price_in_per_mtok is None or self.price_out_per_mtok is None:
            return None
        return (self.prompt_tokens * self.price_in_per_mtok + self.completion_tokens * self.price_out_per_mtok) / 1e6

    def add_tokens(self, model: str, prompt: int, completion: int) -> None:
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        m = self.tokens_by_model.setdefault(model, {"prompt_tokens": 0, "completion_tokens": 0})
        m["prompt_tokens"] += prompt
        m["completion_tokens"] += completion

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cost": self.cost}


class JudgeConfigError(UserError):
    """An error no retry can fix (bad key, no access, unknown model or path): stops the run
    (bad settings: the CLI exits 2)."""


class _TotalTimeout(Exception):
    """A request that took longer than the client's timeout from start to end."""


class _BodyReadError(Exception):
    """The connection failed while the reply body was being read (retried like a
    connection error)."""


class _CallFailed(Exception):
    """One task's request failed for good (after the retries it was allowed)."""


def _describe(exc: BaseException) -> str:
    if isinstance(exc, (_TotalTimeout, _BodyReadError)):
        return f"{type(exc).__name__.lstrip('_')}: {exc}"
    code = getattr(exc, "status_code", None)
    return f"{type(exc).__name__}" + (f": HTTP {code}" if code else "")


class JudgeClient:
    """An LLM judge behind an OpenAI-compatible endpoint.

    >>> judge = JudgeClient(model="mistral-small", base_url="http://localhost:8000/v1",
    ...                     cache_path="runs/judge_cache.sqlite")        # doctest: +SKIP
    >>> replies = judge.run(tasks)                                        # doctest: +SKIP
    """

    backend = "llm"

    def __init__(self, *, model: str | None = None, base_url: str | None = None,
                 api_key_env: str = DEFAULT_KEY_ENV, cache_path: str | Path | None = None,
                 concurrency: int = 16, max_retries: int = 4, timeout: float = 120.0,
                 temperature: float = 0.0, top_logprobs: int | None = None, seed: int | None = None,
                 price_in_per_mtok: float | None = None, price_out_per_mtok: float | None = None,
                 templates: TemplateSet | None = None, progress: bool = False):
        self.model = model or os.environ.get(ENV_MODEL)
        self.base_url = (base_url or os.environ.get(ENV_BASE_URL) or "").rstrip("/")
        if not self.model:
            raise ValueError(f"JudgeClient needs a model name (argument or ${ENV_MODEL})")
        if not self.base_url:
            raise ValueError(f"JudgeClient needs a base_url (argument or ${ENV_BASE_URL})")
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        if top_logprobs is not None and not 0 <= top_logprobs <= 20:
            raise ValueError(f"top_logprobs must be in 0..20, got {top_logprobs}")
        self.api_key_env = api_key_env
        self.concurrency, self.max_retries, self.timeout = concurrency, max_retries, timeout
        self.temperature, self.top_logprobs, self.seed = temperature, top_logprobs, seed
        self.templates = templates or TemplateSet()
        self.progress = progress
        self.cache = JudgeCache(cache_path if cache_path is not None else ":memory:")
        self.usage = UsageStats(price_in_per_mtok=price_in_per_mtok, price_out_per_mtok=price_out_per_mtok)
        self.run_id = uuid.uuid4().hex[:16]  # this client's row in the cache's cost ledger
        self._ledger = LedgerDelta(self.run_id, self.model, self.base_url, price_in_per_mtok, price_out_per_mtok)
        self._answered = False  # whether a request of the current run got a 2xx reply

    # ---- description (never includes the key) ------------------------------------------
    @property
    def label(self) -> str:
        return f"LLM judge {self.model} at {self.base_url}"

    def __repr__(self) -> str:
        return f"JudgeClient(model={self.model!r}, base_url={self.base_url!r}, concurrency={self.concurrency})"

    def config(self) -> dict[str, Any]:
        return {"backend": self.backend, "model": self.model, "base_url": self.base_url,
                "api_key_env": self.api_key_env, "temperature": self.temperature,
                "top_logprobs": self.top_logprobs, "max_retries": self.max_retries, "timeout": self.timeout}

    # ---- keys and sampling ---------------------------------------------------------------
    def _sampling(self, template: PromptTemplate) -> dict[str, Any]:
        s: dict[str, Any] = {"temperature": self.temperature, "max_tokens": template.max_tokens}
        if self.top_logprobs is not None and template.output in ("alignment", "rating"):
            s.update(logprobs=True, top_logprobs=self.top_logprobs)
        if self.seed is not None:
            s["seed"] = self.seed
        return s

    def key(self, task: JudgeTask) -> str:
        return cache_key(model=self.model, base_url=self.base_url, messages=task.messages(),
                         sampling=self._sampling(task.template), template_version=task.template.version,
                         output=task.template.output)

    # ---- running -------------------------------------------------------------------------
    def run(self, tasks: Sequence[JudgeTask]) -> list[Reply]:
        """Judge every task (cache first, then the endpoint); replies in task order."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.arun(tasks))
        box: dict[str, Any] = {}  # already inside an event loop (e.g. Jupyter): use a thread

        def target() -> None:
            try:
                box["out"] = asyncio.run(self.arun(tasks))
            except BaseException as exc:  # re-raised in the caller's thread
                box["err"] = exc

        t = threading.Thread(target=target)
        t.start()
        t.join()
        if "err" in box:
            raise box["err"]
        return box["out"]

    async def arun(self, tasks: Sequence[JudgeTask]) -> list[Reply]:
        keys = [self.key(t) for t in tasks]
        self.usage.tasks += len(tasks)
        hits = self.cache.get_many(keys)
        results: dict[str, Reply] = {}
        for k, row in hits.items():
            results[k] = Reply(row["value"], row["raw"], row["status"], True, row["expected"], self.backend)
        self.usage.cache_hits += sum(1 for k in keys if k in hits)
        todo = {k: t for k, t in zip(keys, tasks) if k not in results}  # identical tasks run once
        if todo:
            log.info("judge: %d tasks, %d cached, %d to call", len(tasks), len(tasks) - len(todo), len(todo))
            try:
                results.update(await self._call_all(todo))
            finally:
                self.cache.add_ledger(self._ledger)  # counts of calls that stored nothing
        return [results[k] for k in keys]

    async def _call_all(self, todo: dict[str, JudgeTask]) -> dict[str, Reply]:
        from openai import AsyncOpenAI  # imported lazily: `interpscale judge --help` stays fast

        slots = asyncio.Semaphore(self.concurrency)
        self._answered = False  # set by the first 2xx reply of this run
        api_key = os.environ.get(self.api_key_env) or "unused"  # local servers need none
        out: dict[str, Reply] = {}
        bar = _progress(len(todo), self.progress)
        # retries are ours (max_retries=0 here), so backoff sleeps never hold a slot
        async with AsyncOpenAI(base_url=self.base_url, api_key=api_key, max_retries=0,
                               timeout=self.timeout) as client:
            async def one(k: str, task: JudgeTask) -> None:
                out[k] = await self._judge_one(client, slots, k, task)
                bar.update(1)

            jobs = [asyncio.ensure_future(one(k, t)) for k, t in todo.items()]
            try:
                await asyncio.gather(*jobs)
            except BaseException:
                for j in jobs:
                    j.cancel()
                await asyncio.gather(*jobs, return_exceptions=True)
                raise
            finally:
                bar.close()
        return out

    # ---- one task ------------------------------------------------------------------------
    async def _judge_one(self, client: Any, slots: asyncio.Semaphore, key: str, task: JudgeTask) -> Reply:
        """One task, start to end; whatever goes wrong stays with this task."""
        try:
            return await self._judge(client, slots, key, task)
        except JudgeConfigError:
            raise
        except _CallFailed as exc:
            return self._failed(str(exc))
        except MalformedReply as exc:
            self.usage.malformed_replies += 1
            log.warning("judge reply malformed: %s", exc)
            return self._failed(f"malformed reply: {exc}")
        except Exception as exc:  # noqa: BLE001 - anything a reply can provoke ends as this task's api_error
            log.warning("judge task failed: %s", _describe(exc), exc_info=log.isEnabledFor(logging.DEBUG))
            return self._failed(f"error handling the reply: {_describe(exc)}")

    def _failed(self, why: str) -> Reply:
        self.usage.api_errors += 1
        return Reply(None, cap(why), "api_error", False, None, self.backend)

    async def _judge(self, client: Any, slots: asyncio.Semaphore, key: str, task: JudgeTask) -> Reply:
        tpl = task.template
        messages = task.messages()
        sampling = self._sampling(tpl)
        ans = await self._ask(client, slots, messages, sampling)
        first: Optional[str] = None
        status = "ok"
        parsed = None if ans.refusal else _parse(tpl, ans.text, task.parse_kwargs)
        if parsed is None and not ans.refusal:  # one re-ask, showing the judge its own (truncated) reply
            first = ans.text
            self.usage.reasks += 1
            self._ledger.add(reasks=1)
            follow = messages + [{"role": "assistant", "content": cap(ans.text)}, {"role": "user", "content": tpl.reask}]
            ans = await self._ask(client, slots, follow, sampling)
            parsed = None if ans.refusal else _parse(tpl, ans.text, task.parse_kwargs)
            status = "reasked"
        value, exp = None, None
        if ans.refusal:
            status = "refused"
            self.usage.refusals += 1
        elif parsed is None:
            status = "parse_error"
            self.usage.parse_failures += 1
        else:
            value = parsed.value
            if tpl.output in ("alignment", "rating"):
                exp = expected_score(ans.logprobs, parsed.span, tpl.lo, tpl.hi)
        raw = cap(ans.refusal if ans.refusal and not ans.text else ans.text)
        meta: dict[str, Any] = {}
        if first is not None and first != ans.text:
            meta["first_reply"] = cap(first)
        if ans.refusal and ans.text:  # otherwise the refusal is the raw reply itself
            meta["refusal"] = cap(ans.refusal)
        self.cache.put(key, raw=raw, value=value, status=status, expected=exp, meta=meta, ledger=self._ledger)
        return Reply(value, raw, status, False, exp, self.backend)

    async def _ask(self, client: Any, slots: asyncio.Semaphore, messages: list[dict], sampling: dict) -> Answer:
        """One request with its retries; each attempt holds a slot only while in flight."""
        import openai

        attempt = 0
        while True:
            async with slots:
                if attempt:
                    self.usage.retries += 1
                    self._ledger.add(retries=1)
                self.usage.requests += 1
                self._ledger.add(requests=1)
                try:
                    # the SDK's timeout bounds each connect/read; wait_for bounds the whole
                    # request, so a server trickling bytes cannot hold a slot forever
                    content = await asyncio.wait_for(self._post(client, messages, sampling), self.timeout + 1.0)
                    error: Optional[BaseException] = None
                except asyncio.TimeoutError:
                    error = _TotalTimeout(f"no complete reply within {self.timeout + 1.0:g} s")
                except _BodyReadError as exc:
                    error = exc
                except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError) as exc:
                    if not self._answered:  # nothing got through yet: the settings are wrong, stop
                        raise JudgeConfigError(
                            f"judge endpoint {self.base_url} refused the request ({_describe(exc)}); "
                            f"check --base-url, --model and ${self.api_key_env}") from None
                    error = exc  # others got through: this item's own failure, not retried
                except openai.APIError as exc:
                    error = exc
            if error is None:
                self._answered = True
                ans = read_completion(decode_body(content))
                if ans.usage_reported:
                    self.usage.add_tokens(self.model, ans.prompt_tokens, ans.completion_tokens)
                    self._ledger.add(prompt_tokens=ans.prompt_tokens, completion_tokens=ans.completion_tokens)
                else:
                    self.usage.replies_without_usage += 1
                return ans
            wait = self._retry_wait(error, attempt)
            if wait is None:
                log.warning("judge call failed after %d retries: %s", attempt, _describe(error))
                raise _CallFailed(_describe(error) + (f" after {attempt} retries" if attempt else ""))
            attempt += 1
            await asyncio.sleep(wait)  # outside the slot

    async def _post(self, client: Any, messages: list[dict], sampling: dict) -> bytes:
        """The reply body, read as a stream and refused beyond MAX_BODY_BYTES."""
        async with client.chat.completions.with_streaming_response.create(
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
                raise _BodyReadError(f"{type(exc).__name__} while reading the reply body") from None
            return bytes(body)

    def _retry_wait(self, exc: BaseException, attempt: int) -> Optional[float]:
        """Seconds to wait before retrying ``exc``, or None when it is not retried."""
        if attempt >= self.max_retries or not _retryable(exc):
            return None
        headers = getattr(getattr(exc, "response", None), "headers", None)
        asked = retry_after_seconds(headers)
        if asked is not None:
            return asked if asked <= MAX_RETRY_AFTER_S else None
        return min(INITIAL_BACKOFF_S * 2.0 ** min(attempt, 16), MAX_BACKOFF_S) * (1 - 0.25 * random.random())

    # ---- OpenAI Batch API files ------------------------------------------------------------
    def write_batch(self, tasks: Sequence[JudgeTask], path: str | Path) -> Path:
        """Write the Batch API request file (one ``/v1/chat/completions`` line per
        distinct uncached task; ``custom_id`` is the cache key)."""
        from interpscale.judges.batch import write_batch_requests

        keys = [self.key(t) for t in tasks]
        cached = self.cache.get_many(keys)
        lines = {}
        for k, t in zip(keys, tasks):
            if k not in cached and k not in lines:
                lines[k] = {"model": self.model, "messages": t.messages(), **self._sampling(t.template)}
        return write_batch_requests(path, lines)

    def read_batch(self, tasks: Sequence[JudgeTask], path: str | Path) -> list[Reply]:
        """Join a Batch API output file to ``tasks`` on ``custom_id``; parsed results go to
        the cache (no re-ask offline: an unparseable line is a parse failure)."""
        from interpscale.judges.batch import read_batch_results

        results = read_batch_results(path)
        keys = [self.key(t) for t in tasks]
        cached = self.cache.get_many(keys)
        out = []
        for k, t in zip(keys, tasks):
            self.usage.tasks += 1
            if k in cached:
                row = cached[k]
                self.usage.cache_hits += 1
                out.append(Reply(row["value"], row["raw"], row["status"], True, row["expected"], self.backend))
                continue
            res = results.get(k)
            if res is None or res["error"] is not None:
                self.usage.api_errors += 1
                out.append(Reply(None, res["error"] if res else "missing from batch output", "api_error",
                                 False, None, self.backend))
                continue
            self.usage.add_tokens(self.model, res["prompt_tokens"], res["completion_tokens"])
            self._ledger.add(prompt_tokens=res["prompt_tokens"], completion_tokens=res["completion_tokens"])
            tpl = t.template
            parsed = None if res["refusal"] else _parse(tpl, res["text"], t.parse_kwargs)
            exp = None
            if res["refusal"]:
                self.usage.refusals += 1
                value, status = None, "refused"
            elif parsed is None:
                self.usage.parse_failures += 1
                value, status = None, "parse_error"
            else:
                value, status = parsed.value, "ok"
                exp = expected_score(res["logprobs"], parsed.span, tpl.lo, tpl.hi) \
                    if tpl.output in ("alignment", "rating") else None
            raw = cap(res["text"] or res["refusal"] or "")
            self.cache.put(k, raw=raw, value=value, status=status, expected=exp, meta={"batch": True},
                           ledger=self._ledger)
            out.append(Reply(value, raw, status, False, exp, self.backend))
        return out

    def close(self) -> None:
        self.cache.close()

    def __enter__(self) -> "JudgeClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _parse(tpl: PromptTemplate, text: str, kwargs: Mapping[str, Any]) -> Optional[Parsed]:
    """The template's parser; a parser that raises (it should not) counts as no parse."""
    try:
        return PARSERS[tpl.output](text, tpl.lo, tpl.hi, **kwargs)
    except (ValueError, TypeError, OverflowError, RecursionError, KeyError) as exc:
        log.warning("judge parser %s raised %s: counted as a parse failure", tpl.output, type(exc).__name__)
        return None


def _retryable(exc: BaseException) -> bool:
    """Connection problems, timeouts, 408/409/429/5xx; a server's ``x-should-retry``
    header overrides the status code, as the SDK does."""
    import openai

    if isinstance(exc, (openai.APIConnectionError, _TotalTimeout, _BodyReadError)):  # includes APITimeoutError
        return True
    if not isinstance(exc, openai.APIStatusError):
        return False
    should = (exc.response.headers.get("x-should-retry") or "").strip().lower()
    if should in ("true", "false"):
        return should == "true"
    code = exc.status_code
    return code in (408, 409, 429) or code >= 500


def retry_after_seconds(headers: Any) -> Optional[float]:
    """The wait a reply asks for (``retry-after-ms``, then ``retry-after`` in seconds or
    as an HTTP date); None when absent or unreadable; never negative or NaN."""
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None or len(value) > 64:
            continue
        try:
            v = float(value) * scale
        except ValueError:
            continue
        if math.isnan(v):
            continue
        return max(v, 0.0)  # inf stays inf: longer than anything we honour
    value = headers.get("retry-after")
    if value is None or len(value) > 64:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:
        return None
    try:
        return max(when.timestamp() - time.time(), 0.0)
    except (OverflowError, OSError, ValueError):
        return None


class _NoBar:
    def update(self, n: int) -> None: ...

    def close(self) -> None: ...


def _progress(total: int, enabled: bool):
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="judge", unit="call")
