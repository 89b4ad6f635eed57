"""The layout of a concepts directory and streaming access to it.

```
DIR/tokenizer.json           the tokenizer chunk sizes were counted in
DIR/chunks/NNNNN.jsonl       stage 0: one file per input, documents of chunks {"chunks": [{"text"}]}
DIR/chunks/manifest.json     inputs, counts, dropped sentences
DIR/tags.jsonl               stage 1: the seeded sample of chunks and their structured tags
DIR/library/library.json     stage 2: the tag clusters behind each concept, and the dropped ones
DIR/concepts.json            stage 2: the concept library, the cards `data prepare --concepts` reads
DIR/annotator/               stage 3: the trained annotator (model.npz, meta.json)
DIR/labelled/NNNNN.jsonl     stage 3: every chunk with its concepts {"chunks": [{"text", "concepts"}]}
DIR/validation/              relevance-judge validation of every stage (report.md, validation.json, *.png)
```
A chunk's global id is its position in reading order (file, then document, then chunk).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from interpscale._atomic import atomic_write_text
from interpscale._jsonl import iter_jsonl
from interpscale.errors import UserError
from interpscale.judges.build import CACHE_NAME  # the LLM path's cache: tags, names, embeddings, judge

CHUNKS, LABELLED, LIBRARY, ANNOTATOR, VALIDATION = "chunks", "labelled", "library", "annotator", "validation"
TAGS_FILE, CONCEPTS_FILE, MANIFEST = "tags.jsonl", "concepts.json", "manifest.json"


@dataclass(frozen=True)
class ChunkRef:
    """One chunk in reading order: its global id, where it lives, and its text."""

    id: int
    file: int
    doc: int
    chunk: int
    text: str


def part_name(i: int) -> str:
    return f"{i:05d}.jsonl"


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=1, sort_keys=False) + "\n")


def read_json(path: str | os.PathLike, what: str) -> Any:
    p = Path(path)
    if not p.exists():
        raise UserError(f"{p}: missing; run `interpscale concepts {what}` first")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UserError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def manifest(out: str | os.PathLike) -> dict:
    return read_json(Path(out) / CHUNKS / MANIFEST, "chunk")


def part_files(out: str | os.PathLike) -> list[str]:
    """The names of the chunk files (and of their labelled twins), in reading order."""
    return [f["output"] for f in manifest(out)["files"]]


def iter_doc_chunks(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(document index, chunk texts) of one chunk or labelled file, streamed."""
    for d, (lineno, rec) in enumerate(iter_jsonl(path)):
        chunks = rec.get("chunks") if isinstance(rec, dict) else None
        if not isinstance(chunks, list) or not all(isinstance(c, dict) and isinstance(c.get("text"), str)
                                                   for c in chunks):
            raise UserError(f"{path}: line {lineno}: expected {{\"chunks\": [{{\"text\": ...}}, ...]}}")
        yield d, [c["text"] for c in chunks]


def iter_chunks(out: str | os.PathLike) -> Iterator[ChunkRef]:
    """Every chunk of DIR/chunks in reading order."""
    gid = 0
    for f, name in enumerate(part_files(out)):
        for d, texts in iter_doc_chunks(Path(out) / CHUNKS / name):
            for j, t in enumerate(texts):
                yield ChunkRef(gid, f, d, j, t)
                gid += 1


def sample_ids(n_total: int, n_sample: int, seed: int) -> np.ndarray:
    """A seeded, sorted sample of ``n_sample`` chunk ids out of ``n_total`` (all when fewer)."""
    if n_sample >= n_total:
        return np.arange(n_total)
    return np.sort(np.random.default_rng([seed, 28]).choice(n_total, size=n_sample, replace=False))


def iter_sample(out: str | os.PathLike, ids: np.ndarray) -> Iterator[ChunkRef]:
    """The chunks whose ids are in the sorted array ``ids``, streamed in one pass."""
    k = 0
    for ref in iter_chunks(out):
        if k >= len(ids):
            return
        if ref.id == ids[k]:
            k += 1
            yield ref

