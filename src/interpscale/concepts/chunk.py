"""Stage 0 (§4.2.1): documents → chunks at sentence boundaries, streamed.

Consecutive sentences are concatenated while the chunk stays within the domain's token
threshold (150 prose, 256 code and maths); a longer sentence stays one chunk, one over
50,000 tokens is dropped and counted. A document that arrives chunked keeps its chunks
(``rechunk`` redoes them). Tokens are counted in a ``tokenizer.json`` you give (the one
``data prepare`` will use), else in a byte-level BPE trained on the inputs, saved as
DIR/tokenizer.json so the chunk sizes can be reproduced.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

from interpscale._atomic import atomic_path
from interpscale.concepts.store import CHUNKS, MANIFEST, part_name, write_json
from interpscale.concepts.text import DOMAINS, MAX_SENTENCE_TOKENS, THRESHOLDS, guess_domain, split_sentences
from interpscale.errors import UserError

log = logging.getLogger(__name__)

TOKENIZER_VOCAB = 4096  # the default tokenizer trained on a sample when none is given
TOKENIZER_SAMPLE_BYTES = 1 << 20


@dataclass
class ChunkStats:
    """Counts of one input file (or all of them)."""

    docs: int = 0
    chunks: int = 0
    tokens: int = 0
    kept_docs: int = 0  # documents that arrived already chunked
    dropped_sentences: int = 0  # over MAX_SENTENCE_TOKENS
    dropped_docs: int = 0  # nothing left after dropping

    def add(self, other: "ChunkStats") -> None:
        for k, v in asdict(other).items():
            setattr(self, k, getattr(self, k) + v)


def chunk_text(text: str, count, *, domain: str | None = None, threshold: int | None = None,
               max_tokens: int = MAX_SENTENCE_TOKENS) -> tuple[list[str], int, int]:
    """``(chunks, tokens, dropped)`` of one text; ``count(list[str]) -> list[int]`` gives
    the token count of each sentence."""
    domain = domain or guess_domain(text)
    limit = threshold or THRESHOLDS[domain]
    sents = list(split_sentences(text, domain))
    sizes = count(sents) if sents else []
    glue = " " if domain == "prose" else "\n"
    chunks, cur, cur_n, total, dropped = [], [], 0, 0, 0
    for s, n in zip(sents, sizes):
        if n > max_tokens:  # §4.2.1: malformed or uninformative for local annotation
            dropped += 1
            continue
        if cur and cur_n + n > limit:
            chunks.append(glue.join(cur))
            cur, cur_n = [], 0
        cur.append(s)
        cur_n += n
        total += n
    if cur:
        chunks.append(glue.join(cur))
    return chunks, total, dropped


def project_tokenizer(inputs: Sequence[Path], out: Path, tokenizer: str | os.PathLike | None, fmt: str | None):
    """The tokenizer ``tokenizer`` names, else DIR/tokenizer.json (trained once on a sample)."""
    from interpscale.data.tokenizer import load_tokenizer, train_tokenizer

    if tokenizer is not None:
        return load_tokenizer(tokenizer)
    saved = out / "tokenizer.json"
    if saved.exists():
        return load_tokenizer(saved)

    def sample() -> Iterable[str]:
        from interpscale.data.sources import iter_documents

        budget = TOKENIZER_SAMPLE_BYTES // max(1, len(inputs))
        for path in inputs:
            used = 0
            for doc in iter_documents(path, fmt):
                for t, _ in doc.chunks:
                    used += len(t)
                    yield t
                if used >= budget:
                    break

    tok = train_tokenizer(sample(), TOKENIZER_VOCAB, byte_level=True)
    with atomic_path(saved) as tmp:
        tok.save(str(tmp))
    log.info("chunk sizes counted in a %d-token byte-level BPE trained on the inputs (%s)", TOKENIZER_VOCAB, saved)
    return tok


def chunk_file(path: Path, dest: Path, count, *, fmt: str | None = None, domain: str | None = None,
               rechunk: bool = False) -> ChunkStats:
    """One input file → DIR/chunks/NNNNN.jsonl (atomic), streamed document by document."""
    from interpscale.data.sources import iter_documents

    st = ChunkStats()
    with atomic_path(dest) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for doc in iter_documents(path, fmt):
            st.docs += 1
            if doc.chunked and not rechunk:
                texts = [t for t, _ in doc.chunks if t.strip()]
                st.kept_docs += 1
                st.tokens += sum(count(texts)) if texts else 0
            else:
                texts = []
                for t, _ in doc.chunks:
                    got, n, dropped = chunk_text(t, count, domain=domain)
                    texts += got
                    st.tokens += n
                    st.dropped_sentences += dropped
            if not texts:
                st.dropped_docs += 1
                continue
            st.chunks += len(texts)
            fh.write(json.dumps({"chunks": [{"text": t} for t in texts], "where": doc.where}, ensure_ascii=False) + "\n")
    return st


def chunk_corpus(inputs, out: str | os.PathLike, *, tokenizer: str | os.PathLike | None = None,
                 fmt: str | None = None, domain: str | None = None, rechunk: bool = False) -> dict:
    """Stage 0 over every input (paths or glob patterns); writes DIR/chunks/ and returns the manifest."""
    from interpscale.data.sources import expand_sources
    from interpscale.data.tokenizer import encode_texts

    if domain is not None and domain not in DOMAINS:
        raise UserError(f"unknown domain {domain!r}; expected one of {DOMAINS}")
    out = Path(out)
    paths = expand_sources(inputs)
    (out / CHUNKS).mkdir(parents=True, exist_ok=True)
    tok = project_tokenizer(paths, out, tokenizer, fmt)
    count = lambda texts: [len(ids) for ids in encode_texts(tok, list(texts))]  # noqa: E731  (special tokens as text)
    files, total = [], ChunkStats()
    for i, path in enumerate(paths):
        st = chunk_file(path, out / CHUNKS / part_name(i), count, fmt=fmt, domain=domain, rechunk=rechunk)
        total.add(st)
        files.append({"input": str(Path(path).resolve()), "output": part_name(i), **asdict(st)})
        log.info("chunked %s: %d documents -> %d chunks (%d sentences dropped)", path, st.docs, st.chunks,
                 st.dropped_sentences)
    if total.chunks == 0:
        raise UserError(f"no chunks in {', '.join(map(str, paths))} (every document empty or dropped)")
    man = {"inputs": [str(p) for p in paths], "files": files, "totals": asdict(total),
           "tokenizer": str(tokenizer) if tokenizer else str(out / "tokenizer.json"),
           "thresholds": THRESHOLDS, "max_sentence_tokens": MAX_SENTENCE_TOKENS}
    write_json(out / CHUNKS / MANIFEST, man)
    return man
