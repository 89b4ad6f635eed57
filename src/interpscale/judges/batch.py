"""OpenAI Batch API files: write the request JSONL, read the output JSONL.

Request line ``{"custom_id", "method", "url", "body"}``, output line ``{"custom_id",
"response": {"status_code", "body": <chat completion>}, "error"}``, joined on ``custom_id``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from interpscale._atomic import atomic_write_text
from interpscale._jsonl import iter_jsonl
from interpscale.judges.replies import Answer, MalformedReply, cap, read_completion
from interpscale.errors import UserError

ENDPOINT = "/v1/chat/completions"


def write_batch_requests(path: str | Path, bodies: Mapping[str, Mapping[str, Any]]) -> Path:
    """Atomically write one request line per ``custom_id -> body``."""
    for cid in bodies:
        if not isinstance(cid, str) or not cid or len(cid) > 64:
            raise ValueError(f"batch custom_id must be a string of 1-64 characters, got {cid!r}")
    return atomic_write_text(path, "".join(json.dumps({"custom_id": cid, "method": "POST", "url": ENDPOINT,
                                                       "body": dict(body)}, ensure_ascii=False) + "\n"
                                           for cid, body in bodies.items()))


def read_batch_results(path: str | Path) -> dict[str, Answer | str]:
    """``custom_id -> `` the checked ``Answer`` of a 200 response, else what went wrong."""
    out: dict[str, Answer | str] = {}
    for lineno, row in iter_jsonl(path):
        cid = row.get("custom_id") if isinstance(row, dict) else None
        if not isinstance(cid, str):
            raise UserError(f"{path}: line {lineno} has no custom_id")
        err, resp = row.get("error"), row.get("response")
        code = resp.get("status_code") if isinstance(resp, dict) else None
        msg = err.get("message") if isinstance(err, dict) else err
        try:
            out[cid] = cap(f"batch error: {msg or ''} (status {code})".strip(), 500) if err or code != 200 \
                else read_completion(resp.get("body"))
        except MalformedReply as exc:
            out[cid] = f"malformed reply: {exc}"
    return out


class BatchWritten(Exception):
    """Raised by BatchWriteJudge after writing a request file (the run stops there)."""

    def __init__(self, path: Path, n: int):
        super().__init__(f"wrote {n} Batch API requests to {path}")
        self.path, self.n = path, n


class _BatchJudge:
    """A JudgeClient wrapped to answer through Batch API files at ``path``."""

    option = ""  # the builder's keyword, recorded in config()

    def __init__(self, client: Any, path: str | Path):
        self.client, self.path = client, Path(path)
        self.templates, self.usage, self.backend, self.label = client.templates, client.usage, client.backend, client.label

    def config(self) -> dict[str, Any]:
        return {**self.client.config(), self.option: str(self.path)}


class BatchWriteJudge(_BatchJudge):
    """Cached tasks are answered from the cache; otherwise the uncached ones are written as
    a Batch API request file and BatchWritten is raised."""

    option = "batch_write"

    def run(self, tasks: Any) -> list:
        keys = [self.client.key(t) for t in tasks]
        if len(self.client.cache.get_many(keys)) == len(set(keys)):
            return self.client.run(tasks)  # everything cached: no network
        self.client.write_batch(tasks, self.path)
        raise BatchWritten(self.path, sum(1 for line in self.path.read_text().splitlines() if line.strip()))


class BatchReadJudge(_BatchJudge):
    """Answers from the cache and a Batch API output file."""

    option = "batch_read"

    def run(self, tasks: Any) -> list:
        return self.client.read_batch(tasks, self.path)
