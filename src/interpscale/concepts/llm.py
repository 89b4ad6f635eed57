"""The LLM path's calls besides tagging, through the judge client's settings and sqlite cache
(a rerun asks nothing already answered): tag embeddings from ``/embeddings`` and cluster names.

Embeddings go through the ``openai`` SDK's ``embeddings.create`` (its retry policy, the judge
client's ``max_retries``) in batches, each vector cached as it arrives. A batch that still
fails, or a reply of the wrong shape, leaves NaN rows: those tags are dropped and counted.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any, Optional, Sequence

import numpy as np

from interpscale.concepts.prompts import CARD, CARD_SCHEMA
from interpscale.judges import JudgeTask, build_judge
from interpscale.judges.cache import cache_key
from interpscale.judges.env import api_key  # the one place the key is read

log = logging.getLogger(__name__)

EMBED_BATCH = 64


class EndpointEmbedder:
    """``embedder(texts) -> array [n, d]`` (NaN rows for texts that could not be embedded)."""

    def __init__(self, judge: Any, model: Optional[str] = None, batch: int = EMBED_BATCH):
        self.judge, self.batch = judge, batch
        self.model = model or judge.model
        self.failed = 0  # texts of the last call left without a vector

    def _key(self, text: str) -> str:
        return cache_key(model=self.model, base_url=self.judge.base_url, messages=[{"role": "input", "content": text}],
                         sampling={"endpoint": "embeddings"}, template_version="embeddings-v1", output="embedding")

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        import openai

        keys = [self._key(t) for t in texts]
        got = {k: row["value"] for k, row in self.judge.cache.get_many(keys).items() if row["value"] is not None}
        todo = [(k, t) for k, t in zip(keys, texts) if k not in got]
        if todo:
            client = openai.OpenAI(base_url=self.judge.base_url, api_key=api_key(self.judge.api_key_env) or "unused",
                                   max_retries=self.judge.max_retries, timeout=self.judge.timeout)
            for i in range(0, len(todo), self.batch):
                got.update(self._one_batch(client, todo[i:i + self.batch]))
        dims = {len(v) for v in got.values()}
        dim = max(dims, key=lambda d: sum(len(v) == d for v in got.values())) if dims else 1
        out = np.full((len(texts), dim), np.nan)
        for i, k in enumerate(keys):
            if k in got and len(got[k]) == dim:
                out[i] = got[k]
        self.failed = int(np.isnan(out).any(1).sum())
        return out

    def _one_batch(self, client: Any, batch: list[tuple[str, str]]) -> dict[str, list[float]]:
        import openai

        try:
            resp = client.embeddings.create(model=self.model, input=[t for _, t in batch])
            vecs = [d.embedding for d in sorted(resp.data, key=lambda d: d.index)]
        except (openai.APIError, ValueError, TypeError, AttributeError) as exc:
            log.warning("embeddings request failed (%s): %d tag(s) dropped", type(exc).__name__, len(batch))
            return {}
        if len(vecs) != len(batch) or not all(_vector(v) for v in vecs):
            log.warning("embeddings reply malformed (%d vectors for %d inputs): %d tag(s) dropped",
                        len(vecs), len(batch), len(batch))
            return {}
        got = {k: [float(x) for x in v] for (k, _), v in zip(batch, vecs)}
        for k, v in got.items():
            self.judge.cache.put(k, raw="", value=v, status="ok", expected=None, meta={"embedding": self.model})
        return got


def _vector(v: Any) -> bool:
    return isinstance(v, list) and len(v) > 0 and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v)


def endpoint_embedder(endpoint: dict, cache_path: str | os.PathLike) -> EndpointEmbedder:
    """An embedder from recorded endpoint settings (``{"base_url", "model", "embed_model",
    "max_retries", "timeout"}``) caching in ``cache_path``: what a per-file task rebuilds."""
    client = build_judge(model=endpoint["model"], base_url=endpoint["base_url"], cache_path=cache_path,
                         **{k: endpoint[k] for k in ("max_retries", "timeout") if k in endpoint})
    return EndpointEmbedder(client, endpoint.get("embed_model"))


class CardNamer:
    """``namer(tag_lists) -> [{"name", "description"} | None]``: the LLM's semantic card of
    each cluster from its representative tags (§4.2.2); None (offline card) when the reply
    failed, refused or did not fit the schema, counted in ``status``."""

    def __init__(self, judge: Any):
        self.judge = judge
        self.status: dict[str, int] = {}

    def __call__(self, tag_lists: Sequence[Sequence[str]]) -> list[Optional[dict]]:
        tasks = [JudgeTask(CARD, {"tags": "\n".join(f"- {t}" for t in tags)}, parse_kwargs={"schema": CARD_SCHEMA})
                 for tags in tag_lists]
        out: list[Optional[dict]] = []
        for r in self.judge.run(tasks):
            self.status[r.status] = self.status.get(r.status, 0) + 1
            ok = r.status in ("ok", "reasked") and isinstance(r.value, dict)
            out.append({"name": r.value["name"][:80], "description": r.value["description"]} if ok else None)
        return out
