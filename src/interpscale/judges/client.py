"""JudgeClient: concurrent, cached, retrying judge calls to an OpenAI-compatible API.

Every task ends as one ``JudgeRecord``, whatever happens to the others (only a settings error,
``judges.transport``, stops the run): a malformed reply body is an uncached ``api_error``;
one classifier (``classify``) reads live and Batch API answers alike; an unparseable live
answer gets one re-ask showing the judge its own (truncated) reply, then is a cached
``parse_error``. Finished calls are committed to the sqlite cache as they arrive (a killed
run resumes); the API key is never stored, logged or cached.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from interpscale.judges import env
from interpscale.judges.batch import read_batch_results, write_batch_requests
from interpscale.judges.cache import JudgeCache, LedgerDelta, cache_key, token_cost
from interpscale.judges.env import DEFAULT_KEY_ENV, ENV_BASE_URL, ENV_MODEL
from interpscale.judges.parsing import PARSERS, expected_score
from interpscale.judges.replies import Answer, MalformedReply, cap
from interpscale.judges.retry import (DEFAULT_CONCURRENCY, DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT, CallFailed,
                                      JudgeConfigError, describe)
from interpscale.judges.templates import PromptTemplate, TemplateSet
from interpscale.judges.transport import Transport, open_transport
from interpscale.judges.types import JudgeRecord
from interpscale.errors import UserError

log = logging.getLogger(__name__)

SCORE_OUTPUTS = ("alignment", "rating")  # outputs whose logprobs give an expected score


def classify(tpl: PromptTemplate, text: str, refusal: Optional[str], logprobs: Any, kwargs: Mapping[str, Any],
             *, reasked: bool = False) -> JudgeRecord:
    """The record of an answer (``reasked``: it answers the re-ask); its raw text is the
    answer, else the refusal, capped."""
    raw = cap(text or refusal or "")
    if refusal:
        return JudgeRecord(None, raw, "refused")
    try:
        parsed = PARSERS[tpl.output](text, tpl.lo, tpl.hi, **kwargs)
    except (ValueError, TypeError, OverflowError, RecursionError, KeyError) as exc:  # it should not raise
        log.warning("judge parser %s raised %s: counted as a parse failure", tpl.output, type(exc).__name__)
        parsed = None
    if parsed is None:
        return JudgeRecord(None, raw, "parse_error")
    exp = expected_score(logprobs, parsed.span, tpl.lo, tpl.hi) if tpl.output in SCORE_OUTPUTS else None
    return JudgeRecord(parsed.value, raw, "reasked" if reasked else "ok", expected=exp)


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
    """What one client did over its lifetime: HTTP ``requests`` sent (first tries, retries
    and re-asks), the ``retries`` and ``reasks`` among them, tokens the server reported (in
    total and per model); ``cost`` needs prices per 1M tokens."""

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
        return token_cost(self.prompt_tokens, self.completion_tokens, self.price_in_per_mtok,
                          self.price_out_per_mtok)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cost": self.cost}


class JudgeClient:
    """An LLM judge behind an OpenAI-compatible endpoint (``run(tasks)`` -> one JudgeRecord each)."""

    backend = "llm"

    def __init__(self, *, model: str | None = None, base_url: str | None = None,
                 api_key_env: str = DEFAULT_KEY_ENV, cache_path: str | Path | None = None,
                 concurrency: int = DEFAULT_CONCURRENCY, max_retries: int = DEFAULT_MAX_RETRIES,
                 timeout: float = DEFAULT_TIMEOUT, temperature: float = 0.0, top_logprobs: int | None = None,
                 seed: int | None = None, templates: TemplateSet | None = None, progress: bool = False,
                 price_in_per_mtok: float | None = None, price_out_per_mtok: float | None = None):
        base_url, self.model = env.endpoint(base_url, model)
        self.base_url = (base_url or "").rstrip("/")
        for ok, problem in ((self.model, f"JudgeClient needs a model name (argument or ${ENV_MODEL})"),
                            (self.base_url, f"JudgeClient needs a base_url (argument or ${ENV_BASE_URL})"),
                            (concurrency >= 1, f"concurrency must be >= 1, got {concurrency}"),
                            (max_retries >= 0, f"max_retries must be >= 0, got {max_retries}"),
                            (timeout > 0, f"timeout must be > 0 seconds, got {timeout}"),
                            (top_logprobs is None or 0 <= top_logprobs <= 20,
                             f"top_logprobs must be in 0..20, got {top_logprobs}")):
            if not ok:
                raise UserError(problem)
        self.api_key_env, self.progress = api_key_env, progress
        self.concurrency, self.max_retries, self.timeout = concurrency, max_retries, timeout
        self.temperature, self.top_logprobs, self.seed = temperature, top_logprobs, seed
        self.templates = templates or TemplateSet()
        self.cache = JudgeCache(cache_path if cache_path is not None else ":memory:")
        self.usage = UsageStats(price_in_per_mtok=price_in_per_mtok, price_out_per_mtok=price_out_per_mtok)
        self.run_id = uuid.uuid4().hex[:16]  # this client's row in the cache's cost ledger
        self.ledger = LedgerDelta(self.run_id, self.model, self.base_url, price_in_per_mtok,
                                  price_out_per_mtok)

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

    # ---- keys, sampling and counts -------------------------------------------------------
    def _sampling(self, template: PromptTemplate) -> dict[str, Any]:
        s: dict[str, Any] = {"temperature": self.temperature, "max_tokens": template.max_tokens}
        if self.top_logprobs is not None and template.output in SCORE_OUTPUTS:
            s.update(logprobs=True, top_logprobs=self.top_logprobs)
        if self.seed is not None:
            s["seed"] = self.seed
        return s

    def key(self, task: JudgeTask) -> str:
        return cache_key(model=self.model, base_url=self.base_url, messages=task.messages(),
                         sampling=self._sampling(task.template), template_version=task.template.version,
                         output=task.template.output)

    def tally(self, *, tokens: tuple[int, int] | None = None, **counts: int) -> None:
        """Add ``counts`` (requests, retries, reasks) and reported ``(prompt, completion)``
        tokens to ``usage`` and to the ledger's pending row."""
        if tokens is not None:
            new = {"prompt_tokens": tokens[0], "completion_tokens": tokens[1]}
            counts.update(new)
            m = self.usage.tokens_by_model.setdefault(self.model, dict.fromkeys(new, 0))
            m.update({k: m[k] + n for k, n in new.items()})
        for name, n in counts.items():
            setattr(self.usage, name, getattr(self.usage, name) + n)
        self.ledger.add(**counts)

    def _lookup(self, tasks: Sequence[JudgeTask]) -> tuple[list[str], dict[str, JudgeRecord]]:
        """The tasks' cache keys and the replies the cache holds for them (counted in ``usage``)."""
        keys = [self.key(t) for t in tasks]
        hits = {k: JudgeRecord(row["value"], row["raw"], row["status"], True, row["expected"])
                for k, row in self.cache.get_many(keys).items()}
        self.usage.tasks += len(tasks)
        self.usage.cache_hits += sum(k in hits for k in keys)
        return keys, hits

    def _settle(self, key: str, rec: JudgeRecord, meta: Mapping[str, Any]) -> JudgeRecord:
        """Count and cache a classified answer."""
        self.usage.refusals += rec.status == "refused"
        self.usage.parse_failures += rec.status == "parse_error"
        self.cache.put(key, raw=rec.raw, value=rec.value, status=rec.status, expected=rec.expected, meta=meta,
                       ledger=self.ledger)
        return rec

    # ---- running -------------------------------------------------------------------------
    def run(self, tasks: Sequence[JudgeTask]) -> list[JudgeRecord]:
        """Judge every task (cache first, then the endpoint); replies in task order."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.arun(tasks))
        # already inside an event loop (e.g. Jupyter): run in a thread of its own
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, self.arun(tasks)).result()

    async def arun(self, tasks: Sequence[JudgeTask]) -> list[JudgeRecord]:
        keys, results = self._lookup(tasks)
        todo = {k: t for k, t in zip(keys, tasks) if k not in results}  # identical tasks run once
        if todo:
            log.info("judge: %d tasks, %d cached, %d to call", len(tasks), len(tasks) - len(todo), len(todo))
            try:
                results.update(await self._call_all(todo))
            finally:
                self.cache.add_ledger(self.ledger)  # counts of calls that stored nothing
        return [results[k] for k in keys]

    async def _call_all(self, todo: dict[str, JudgeTask]) -> dict[str, JudgeRecord]:
        from tqdm.auto import tqdm

        out: dict[str, JudgeRecord] = {}
        with tqdm(total=len(todo), desc="judge", unit="call", disable=not self.progress) as bar:
            async with open_transport(self) as transport:
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
        return out

    # ---- one task ------------------------------------------------------------------------
    async def _judge_one(self, transport: Transport, key: str, task: JudgeTask) -> JudgeRecord:
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

    def _failed(self, why: str) -> JudgeRecord:
        self.usage.api_errors += 1
        return JudgeRecord(None, cap(why), "api_error")

    async def _judge(self, transport: Transport, key: str, task: JudgeTask) -> JudgeRecord:
        tpl, messages = task.template, task.messages()
        sampling = self._sampling(tpl)
        ans = await transport.ask(messages, sampling)
        rec, first = classify(tpl, ans.text, ans.refusal, ans.logprobs, task.parse_kwargs), None
        if rec.status == "parse_error":  # one re-ask, showing the judge its own reply
            first = ans.text
            self.tally(reasks=1)
            follow = messages + [{"role": "assistant", "content": cap(ans.text)}, {"role": "user", "content": tpl.reask}]
            ans = await transport.ask(follow, sampling)
            rec = classify(tpl, ans.text, ans.refusal, ans.logprobs, task.parse_kwargs, reasked=True)
        meta: dict[str, Any] = {}
        if first is not None and first != ans.text:
            meta["first_reply"] = cap(first)
        if ans.refusal and ans.text:  # otherwise the refusal is the raw reply itself
            meta["refusal"] = cap(ans.refusal)
        return self._settle(key, rec, meta)

    # ---- OpenAI Batch API files ------------------------------------------------------------
    def write_batch(self, tasks: Sequence[JudgeTask], path: str | Path) -> Path:
        """Write the Batch API request file (one ``/v1/chat/completions`` line per
        distinct uncached task; ``custom_id`` is the cache key)."""
        keys = [self.key(t) for t in tasks]
        cached = self.cache.get_many(keys)
        lines = {k: {"model": self.model, "messages": t.messages(), **self._sampling(t.template)}
                 for k, t in zip(keys, tasks) if k not in cached}
        return write_batch_requests(path, lines)

    def read_batch(self, tasks: Sequence[JudgeTask], path: str | Path) -> list[JudgeRecord]:
        """Join a Batch API output file to ``tasks`` on ``custom_id``; parsed results go to
        the cache (no re-ask offline: an unparseable line is a parse failure)."""
        results = read_batch_results(path)
        keys, cached = self._lookup(tasks)
        out = []
        for k, t in zip(keys, tasks):
            res = results.get(k)
            if k in cached:
                out.append(cached[k])
            elif not isinstance(res, Answer):
                out.append(self._failed(res or "missing from batch output"))
            else:
                self.tally(tokens=(res.prompt_tokens, res.completion_tokens))
                rec = classify(t.template, res.text, res.refusal, res.logprobs, t.parse_kwargs)
                out.append(self._settle(k, rec, {"batch": True}))
        return out

    def close(self) -> None:
        self.cache.close()

    def __enter__(self) -> "JudgeClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
