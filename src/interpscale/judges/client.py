"""JudgeClient: concurrent, cached, retrying judge calls to an OpenAI-compatible API.

Transport errors (429 honouring ``retry-after``, 5xx, timeouts, dropped connections) are
retried by the ``openai`` SDK itself (``max_retries``, exponential backoff); an
unparseable reply gets one re-ask; a reply still unparseable is recorded as a parse
failure with ``value=None``. Finished calls are committed to the sqlite cache as they
arrive, so a killed run resumes where it stopped. The API key is read from the
environment at call time and is never stored, logged or cached.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from interpscale.judges.cache import JudgeCache, cache_key
from interpscale.judges.parsing import PARSERS, expected_score
from interpscale.judges.templates import PromptTemplate, TemplateSet

log = logging.getLogger(__name__)

# Environment variables read when arguments are not given.
ENV_BASE_URL = "INTERPSCALE_JUDGE_BASE_URL"
ENV_MODEL = "INTERPSCALE_JUDGE_MODEL"
DEFAULT_KEY_ENV = "OPENAI_API_KEY"


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
    status: str  # ok | reasked | parse_error | api_error | lexical
    cached: bool = False
    expected: Optional[float] = None
    backend: str = "llm"


@dataclass
class UsageStats:
    """Counters for one client over its lifetime (``cost`` needs prices per 1M tokens)."""

    tasks: int = 0
    calls: int = 0
    cache_hits: int = 0
    retries: int = 0
    reasks: int = 0
    parse_failures: int = 0
    api_errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    price_in_per_mtok: Optional[float] = None
    price_out_per_mtok: Optional[float] = None

    @property
    def cost(self) -> Optional[float]:
        if self.price_in_per_mtok is None or self.price_out_per_mtok is None:
            return None
        return (self.prompt_tokens * self.price_in_per_mtok + self.completion_tokens * self.price_out_per_mtok) / 1e6

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cost": self.cost}


class _ConfigError(Exception):
    """Raised inside the run for errors no retry can fix (bad key, unknown model)."""


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
        if top_logprobs is not None and not 0 <= top_logprobs <= 20:
            raise ValueError(f"top_logprobs must be in 0..20, got {top_logprobs}")
        self.api_key_env = api_key_env
        self.concurrency, self.max_retries, self.timeout = concurrency, max_retries, timeout
        self.temperature, self.top_logprobs, self.seed = temperature, top_logprobs, seed
        self.templates = templates or TemplateSet()
        self.progress = progress
        self.cache = JudgeCache(cache_path if cache_path is not None else ":memory:")
        self.usage = UsageStats(price_in_per_mtok=price_in_per_mtok, price_out_per_mtok=price_out_per_mtok)

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
            results.update(await self._call_all(todo))
        return [results[k] for k in keys]

    async def _call_all(self, todo: dict[str, JudgeTask]) -> dict[str, Reply]:
        from openai import AsyncOpenAI  # imported lazily: `interpscale judge --help` stays fast

        sem = asyncio.Semaphore(self.concurrency)
        api_key = os.environ.get(self.api_key_env) or "unused"  # local servers need none
        out: dict[str, Reply] = {}
        bar = _progress(len(todo), self.progress)
        async with AsyncOpenAI(base_url=self.base_url, api_key=api_key, max_retries=self.max_retries,
                               timeout=self.timeout) as client:
            async def one(k: str, task: JudgeTask) -> None:
                async with sem:
                    out[k] = await self._judge_one(client, k, task)
                bar.update(1)

            jobs = [asyncio.ensure_future(one(k, t)) for k, t in todo.items()]
            try:
                await asyncio.gather(*jobs)
            except _ConfigError as exc:
                for j in jobs:
                    j.cancel()
                raise RuntimeError(str(exc)) from None
            finally:
                bar.close()
        return out

    async def _request(self, client: Any, messages: list[dict], sampling: dict) -> tuple[str, Optional[list[dict]]]:
        import openai

        try:
            resp = await client.chat.completions.with_raw_response.create(
                model=self.model, messages=messages, timeout=self.timeout, **sampling)
        except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError) as exc:
            raise _ConfigError(f"judge endpoint refused the request ({type(exc).__name__}, "
                               f"HTTP {exc.status_code}); check base_url, model and ${self.api_key_env}") from None
        self.usage.calls += 1
        self.usage.retries += int(getattr(resp, "retries_taken", 0) or 0)
        try:  # read the JSON directly: cheaper than building the pydantic model per call
            body = resp.http_response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise openai.APIResponseValidationError(resp.http_response, None, message="reply body is not a JSON object")
        usage = body.get("usage") or {}
        self.usage.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        self.usage.completion_tokens += int(usage.get("completion_tokens") or 0)
        choices = body.get("choices") or []
        if not choices or not isinstance(choices[0], dict):
            return "", None
        choice = choices[0]
        text = (choice.get("message") or {}).get("content") or ""
        if not isinstance(text, str):
            text = str(text)
        content = (choice.get("logprobs") or {}).get("content")
        lp = [{"token": t.get("token") or "", "top_logprobs": t.get("top_logprobs") or []} for t in content] \
            if content else None
        return text, lp

    async def _judge_one(self, client: Any, key: str, task: JudgeTask) -> Reply:
        import openai

        tpl = task.template
        parse = PARSERS[tpl.output]
        messages = task.messages()
        sampling = self._sampling(tpl)
        try:
            text, lp = await self._request(client, messages, sampling)
            parsed = parse(text, tpl.lo, tpl.hi, **task.parse_kwargs)
            status, first = "ok", None
            if parsed is None:  # one re-ask, showing the judge its own reply
                self.usage.reasks += 1
                first = text
                follow = messages + [{"role": "assistant", "content": text}, {"role": "user", "content": tpl.reask}]
                text, lp = await self._request(client, follow, sampling)
                parsed = parse(text, tpl.lo, tpl.hi, **task.parse_kwargs)
                status = "reasked" if parsed is not None else "parse_error"
        except _ConfigError:
            raise
        except openai.APIError as exc:  # after the SDK's own retries
            self.usage.api_errors += 1
            if _retryable(exc):  # the SDK spent its whole retry budget on this call
                self.usage.retries += self.max_retries
            code = getattr(exc, "status_code", None)
            log.warning("judge call failed after retries: %s%s", type(exc).__name__, f" (HTTP {code})" if code else "")
            return Reply(None, f"{type(exc).__name__}" + (f": HTTP {code}" if code else ""), "api_error",
                         False, None, self.backend)
        if parsed is None:
            self.usage.parse_failures += 1
            value, exp = None, None
        else:
            value = parsed.value
            exp = expected_score(lp, parsed.span, tpl.lo, tpl.hi) if tpl.output in ("alignment", "rating") else None
        meta = {"first_reply": first} if first is not None else {}
        self.cache.put(key, raw=text, value=value, status=status, expected=exp, meta=meta)
        return Reply(value, text, status, False, exp, self.backend)

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
            self.usage.prompt_tokens += res["prompt_tokens"]
            self.usage.completion_tokens += res["completion_tokens"]
            tpl = t.template
            parsed = PARSERS[tpl.output](res["text"], tpl.lo, tpl.hi, **t.parse_kwargs)
            if parsed is None:
                self.usage.parse_failures += 1
                value, exp, status = None, None, "parse_error"
            else:
                value, status = parsed.value, "ok"
                exp = expected_score(res["logprobs"], parsed.span, tpl.lo, tpl.hi) \
                    if tpl.output in ("alignment", "rating") else None
            self.cache.put(k, raw=res["text"], value=value, status=status, expected=exp, meta={"batch": True})
            out.append(Reply(value, res["text"], status, False, exp, self.backend))
        return out

    def close(self) -> None:
        self.cache.close()

    def __enter__(self) -> "JudgeClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _retryable(exc: Exception) -> bool:
    """Errors the SDK retries (connection problems, timeouts, 408/409/429/5xx)."""
    import openai

    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return True
    code = getattr(exc, "status_code", None)
    return isinstance(exc, openai.APIStatusError) and code is not None and (code in (408, 409, 429) or code >= 500)


class _NoBar:
    def update(self, n: int) -> None: ...

    def close(self) -> None: ...


def _progress(total: int, enabled: bool):
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="judge", unit="call")
