"""Stage 1 (§4.2.1): a seeded sample of chunks → structured tags, broad to narrow: one
schema-checked JSON call per chunk through the judges' client (a refused, unparseable or
failed reply fails that chunk only: ``tags: null`` and its status, counted), or offline (the
default, so the demo and CI run end to end) the chunk's ``n_tags`` most distinctive content
words by tf·idf against the sample, broad (frequent) to narrow (rare), as ``topic`` and ``detail``.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from interpscale._atomic import atomic_path
from interpscale._jsonl import iter_jsonl
from interpscale.concepts.prompts import TAG, tag_values
from interpscale.concepts.store import TAGS_FILE, ChunkRef, iter_sample, manifest, read_json, sample_ids, write_json
from interpscale.concepts.text import content_words, guess_domain, normalize_tag
from interpscale.judges import JudgeTask

log = logging.getLogger(__name__)

N_TAGS = 12  # §4.2.1: 10-15 tags per chunk on average
MAX_DF = 0.5  # a word in over half the sampled chunks is no tag
BATCH = 256  # chunks per client.run call (each reply is cached as it arrives)


def offline_tags(chunks: Sequence[str], n_tags: int = N_TAGS) -> list[dict[str, list[str]]]:
    """Structured tags of each chunk from tf·idf against the chunks' own document frequencies."""
    words = [content_words(t) for t in chunks]
    df = Counter(w for ws in words for w in set(ws))
    n = len(chunks)
    out = []
    for ws in words:
        tf = Counter(ws)
        scored = [(c * math.log((n + 1) / (df[w] + 1)), w) for w, c in tf.items() if df[w] <= MAX_DF * n]
        best = [w for _, w in sorted(scored, key=lambda x: (-x[0], x[1]))[:n_tags]]
        best.sort(key=lambda w: (-df[w], w))  # broad (common) to narrow (rare)
        half = (len(best) + 1) // 2
        out.append({"topic": best[:half], "detail": best[half:]})
    return out


def flat_tags(structured: dict[str, list[str]] | None) -> list[str]:
    """The normalised, de-duplicated tags of one chunk, in field order (§4.2.2 normalisation)."""
    tags = (normalize_tag(v) for vals in (structured or {}).values() for v in vals)
    return list(dict.fromkeys(t for t in tags if t))


def llm_tags(chunks: Sequence[str], judge: Any, *, domain: str | None = None) -> list[tuple[Any, str]]:
    """``(structured tags or None, status)`` per chunk from the judge endpoint."""
    out: list[tuple[Any, str]] = []
    for start in range(0, len(chunks), BATCH):
        tasks = []
        for t in chunks[start:start + BATCH]:
            values, kw = tag_values(t, domain or guess_domain(t))
            tasks.append(JudgeTask(TAG, values, parse_kwargs=kw))
        for r in judge.run(tasks):
            ok = r.status in ("ok", "reasked") and isinstance(r.value, dict)
            out.append((r.value if ok else None, r.status))
    return out


def tag_corpus(out: str | os.PathLike, *, judge: Any = None, n_sample: int = 2000, seed: int = 0,
               n_tags: int = N_TAGS, domain: str | None = None) -> dict:
    """Stage 1: DIR/tags.jsonl (one line per sampled chunk) and a summary of what happened."""
    out = Path(out)
    total = manifest(out)["totals"]["chunks"]
    refs: list[ChunkRef] = list(iter_sample(out, sample_ids(total, n_sample, seed)))
    texts = [r.text for r in refs]
    if judge is None:
        results = [(s, "offline") for s in offline_tags(texts, n_tags)]
        backend = "offline tf-idf tagger"
    else:
        results = llm_tags(texts, judge, domain=domain)
        backend = judge.label
    status = Counter(s for _, s in results)
    with atomic_path(out / TAGS_FILE) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for ref, (tags, st) in zip(refs, results):
            fh.write(json.dumps({**asdict(ref), "tags": tags, "status": st}, ensure_ascii=False) + "\n")
    n_tags_all = [len(flat_tags(t)) for t, _ in results if t is not None]
    summary = {"backend": backend, "n_sample": len(refs), "n_total_chunks": total, "seed": seed,
               "status": dict(status), "failed": sum(v for k, v in status.items() if k not in ("ok", "reasked", "offline")),
               "mean_tags_per_chunk": sum(n_tags_all) / len(n_tags_all) if n_tags_all else 0.0,
               "usage": judge.usage.to_dict() if judge is not None else {}}
    write_json(out / "tags.summary.json", summary)
    log.info("tagged %d chunks (%s): %s", len(refs), backend, dict(status))
    return summary


def read_tags(out: str | os.PathLike) -> list[dict]:
    """The chunks of DIR/tags.jsonl whose tagging succeeded, each with its ``flat_tags`` as ``"flat"``."""
    p = Path(out) / TAGS_FILE
    if not p.exists():
        read_json(p, "tag")  # raises the "run `concepts tag` first" error
    return [{**rec, "flat": flat_tags(rec["tags"])} for _, rec in iter_jsonl(p) if rec["tags"] is not None]
