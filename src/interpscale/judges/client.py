"""JudgeClient: concurrent, cached, retrying judge calls to an OpenAI-compatible API.

Every task ends as one ``Reply`` whatever the server does: a parsed value, or ``None``
with a status (``parse_error``, ``api_error``, ``refused``). Nothing that happens to one
task reaches the others. Only an error no retry can fix (401/403/404: bad key, unknown
model or path) stops the run, as ``JudgeConfigError``, and only while no request of the
run has been answered; after that, such an error is the item's own ``api_error``.

- Transport errors (429 honouring ``retry-after``/``retry-after-ms``, 408/409/5xx,
  timeouts, dropped connections) are retried by ``judges.transport`` under the policy of
  ``judges.retry`` (the openai SDK's, with the backoff outside the concurrency slot).
- A reply body of the wrong shape (``judges.replies``) is an ``api_error`` and is not
  cached, so a rerun asks again.
- An unparseable answer gets one re-ask that shows the judge its own (truncated)
  reply; still unparseable, it is a ``parse_error`` (cached, as a deterministic answer).
  Live and Batch API answers go through the one classifier, ``judges.classify``.
- Finished calls are committed to the sqlite cache as they arrive (a killed run resumes
  where it stopped), raw replies capped (``judges.replies.RAW_CAP`` characters). ``usage`` counts what
  was sent (requests, retries, re-asks, tokens per model) and the cache keeps a cost
  ledger of every run. The API key is read from the environment at call time and is
  never stored, logged or cached.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from interpscale.judges import env
from interpscale.judges.cache import JudgeCache, LedgerDelta, cache_key
from interpscale.judges.classify import classify, needs_reask
from interpscale.judges.env import DEFAULT_KEY_ENV, ENV_BASE_URL, ENV_MODEL  # noqa: F401  (re-exported)
from interpscale.judges.replies import Answer, MalformedReply, cap
from interpscale.judges.retry import (DEFAULT_CONCURRENCY, DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT, CallFailed,
                                      JudgeConfigError, describe)
from interpscale.judges.retry import parse_retry_after_header as retry_after_seconds  # noqa: F401  (old name)
from interpscale.judges.templates import PromptTemplate, TemplateSet
from interpscale.judges.transport import Transport, open_transport
from interpscale.judges.types import JudgeRecord

log = logging.getLogger(__name__)

Reply = JudgeRecord  # what a backend returns per task: the one record type of a judged item


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

    def count(self, status: str) -> None:
        """Count a classified reply's failure (refused, unparseable)."""
        if status == "refused":
            self.refusals += 1
        elif status == "parse_error":
            self.parse_failures += 1

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cost": self.cost}


class JudgeClient:
    """An LLM judge behind an OpenAI-compatible endpoint.

    >>> judge = JudgeClient(model="mistral-small", base_url="http://localhost:8000/v1",
    ...                     cache_path="runs/judge_cache.sqlite")        # doctest: +SKIP
    >>> replies = judge.run(tasks)                                        # doctest: +SKIP
    """

    backend = "llm"

    def __init__(self, *, model: str | None = None, base_url: str | None = None,
                 api_key_env: str = DEFAULT_KEY_ENV, cache_path: str | Path | None = None,
                 concurrency: int = DEFAULT_CONCURRENCY, max_retries: int = DEFAULT_MAX_RETRIES,
                 timeout: float = DEFAULT_TIMEOUT,
                 temperature: float = 0.0, top_logprobs: int | None = None, seed: int | None = None,
                 price_in_per_mtok: float | None = None, price_out_per_mtok: float | None = None,
                 templates: TemplateSet | None = None, progress: bool = False):
        base_url, self.model = env.endpoint(base_url, model)
        self.base_url = (base_url or "").rstrip("/")
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
        out: dict[str, Reply] = {}
        bar = _progress(len(todo), self.progress)
        async with open_transport(model=self.model, base_url=self.base_url, api_key_env=self.api_key_env,
                                  concurrency=self.concurrency, max_retries=self.max_retries, timeout=self.timeout,
                                  usage=self.usage, ledger=self._ledger) as transport:
            async def one(k: str, task: JudgeTask) -> None:
                out[k] = await self._judge_one(transport, k, task)
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
    async def _judge_one(self, transport: Transport, key: str, task: JudgeTask) -> Reply:
        """One task, start to end; whatever goes wrong stays with this task."""
        try:
            return await self._judge(transport, key, task)
        except JudgeConfigError:
            raise
        except CallFailed as exc:
            return self._failed(str(exc))
        except MalformedReply as exc:
            self.usage.malformed_replies += 1
            log.warning("judge reply malformed: %s", exc)
            return self._failed(f"malformed reply: {exc}")
        except Exception as exc:  # noqa: BLE001 - anything a reply can provoke ends as this task's api_error
            log.warning("judge task failed: %s", describe(exc), exc_info=log.isEnabledFor(logging.DEBUG))
            return self._failed(f"error handling the reply: {describe(exc)}")

    def _failed(self, why: str) -> Reply:
        self.usage.api_errors += 1
        return Reply(None, cap(why), "api_error", False, None, self.backend)

    async def _judge(self, transport: Transport, key: str, task: JudgeTask) -> Reply:
        tpl, messages = task.template, task.messages()
        sampling = self._sampling(tpl)
        ans: Answer = await transport.ask(messages, sampling)
        first: Optional[str] = None
        if needs_reask(tpl, ans.text, ans.refusal, task.parse_kwargs):  # one re-ask, showing its own reply
            first = ans.text
            self.usage.reasks += 1
            self._ledger.add(reasks=1)
            follow = messages + [{"role": "assistant", "content": cap(ans.text)}, {"role": "user", "content": tpl.reask}]
            ans = await transport.ask(follow, sampling)
        v = classify(tpl, ans.text, ans.refusal, ans.logprobs, task.parse_kwargs, reasked=first is not None)
        self.usage.count(v.status)
        raw = cap(ans.refusal if ans.refusal and not ans.text else ans.text)
        meta: dict[str, Any] = {}
        if first is not None and first != ans.text:
            meta["first_reply"] = cap(first)
        if ans.refusal and ans.text:  # otherwise the refusal is the raw reply itself
            meta["refusal"] = cap(ans.refusal)
        self.cache.put(key, raw=raw, value=v.value, status=v.status, expected=v.expected, meta=meta,
                       ledger=self._ledger)
        return Reply(v.value, raw, v.status, False, v.expected, self.backend)

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
            v = classify(t.template, res["text"], res["refusal"], res["logprobs"], t.parse_kwargs)
            self.usage.count(v.status)
            raw = cap(res["text"] or res["refusal"] or "")
            self.cache.put(k, raw=raw, value=v.value, status=v.status, expected=v.expected, meta={"batch": True},
                           ledger=self._ledger)
            out.append(Reply(v.value, raw, v.status, False, v.expected, self.backend))
        return out

    def close(self) -> None:
        self.cache.close()

    def __enter__(self) -> "JudgeClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _NoBar:
    def update(self, n: int) -> None: ...

    def close(self) -> None: ...


def _progress(total: int, enabled: bool):
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="judge", unit="call")
