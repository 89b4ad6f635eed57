"""Stage 0 (§4.2.1): documents → chunks at sentence boundaries, streamed.

Consecutive sentences are concatenated while the chunk stays within the domain's token
threshold (150 prose, 256 code and maths); a longer sentence stays one chunk. A document's
chunks concatenate to the document exactly (docs/concepts.md, "Chunking never changes the
text"); the one normalisation, ``drop_over``, is opt-in and recorded in the manifest. A
document that arrives chunked keeps its chunks (``rechunk`` redoes them). Tokens are counted
in the ``tokenizer.json`` you give, else in a byte-level BPE trained on the inputs and saved
as DIR/tokenizer.json so the chunk sizes can be reproduced.
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
from interpscale.concepts.text import DOMAINS, THRESHOLDS, domain_of_path, guess_domain, split_sentences
from interpscale.data.sources import check_inputs, expand_sources, iter_documents
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
    dropped_sentences: int = 0  # over ``drop_over`` tokens (opt-in)
    dropped_docs: int = 0  # nothing left after dropping

    def add(self, other: "ChunkStats") -> None:
        for k, v in asdict(other).items():
            setattr(self, k, getattr(self, k) + v)


def chunk_text(text: str, count, *, domain: str | None = None, threshold: int | None = None,
               drop_over: int | None = None) -> tuple[list[str], int, int]:
    """``(chunks, tokens, dropped)`` of one text; ``count(list[str]) -> list[int]`` gives
    the token count of each sentence. ``"".join(chunks) == text`` unless ``drop_over`` drops
    a sentence (``dropped`` counts them)."""
    domain = domain or guess_domain(text)
    limit = threshold or THRESHOLDS[domain]
    sents = split_sentences(text, domain)
    sizes = count(sents) if sents else []
    chunks, cur, cur_n, total, dropped = [], [], 0, 0, 0
    for s, n in zip(sents, sizes):
        if drop_over is not None and n > drop_over:  # §4.2.1: malformed or uninformative for local annotation
            dropped += 1
            continue
        if cur and cur_n + n > limit:
            chunks.append("".join(cur))
            cur, cur_n = [], 0
        cur.append(s)
        cur_n += n
        total += n
    if cur:
        chunks.append("".join(cur))
    return chunks, total, dropped


def project_tokenizer(inputs: Sequence[Path], out: Path, tokenizer: str | os.PathLike | None, fmt: str | None,
                      document_per_file: bool = False):
    """The tokenizer ``tokenizer`` names, else DIR/tokenizer.json (trained once on a sample)."""
    from interpscale.data.tokenizer import load_tokenizer, train_tokenizer

    if tokenizer is not None:
        return load_tokenizer(tokenizer)
    saved = out / "tokenizer.json"
    if saved.exists():
        return load_tokenizer(saved)

    def sample() -> Iterable[str]:
        budget = TOKENIZER_SAMPLE_BYTES // max(1, len(inputs))
        for path in inputs:
            used = 0
            for doc in iter_documents(path, fmt, document_per_file=document_per_file):
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
               rechunk: bool = False, document_per_file: bool = False, drop_over: int | None = None) -> ChunkStats:
    """One input file → DIR/chunks/NNNNN.jsonl (atomic), streamed document by document."""
    st = ChunkStats()
    domain = domain or domain_of_path(path)
    with atomic_path(dest) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for doc in iter_documents(path, fmt, document_per_file=document_per_file):
            st.docs += 1
            if doc.chunked and not rechunk:
                texts = [t for t, _ in doc.chunks if t]
                st.kept_docs += 1
                st.tokens += sum(count(texts)) if texts else 0
            else:
                texts = []
                for t, _ in doc.chunks:
                    got, n, dropped = chunk_text(t, count, domain=domain, drop_over=drop_over)
                    texts += got
                    st.tokens += n
                    st.dropped_sentences += dropped
            if not "".join(texts).strip():  # nothing but whitespace
                st.dropped_docs += 1
                continue
            st.chunks += len(texts)
            fh.write(json.dumps({"chunks": [{"text": t} for t in texts], "where": doc.where}, ensure_ascii=False) + "\n")
    return st


def chunk_corpus(inputs, out: str | os.PathLike, *, tokenizer: str | os.PathLike | None = None,
                 fmt: str | None = None, domain: str | None = None, rechunk: bool = False,
                 document_per_file: bool = False, drop_over: int | None = None) -> dict:
    """Stage 0 over every input (paths or glob patterns); writes DIR/chunks/ and returns the
    manifest. Every input is checked (format, UTF-8 text) before anything is written."""
    from interpscale.data.tokenizer import encode_texts

    if domain is not None and domain not in DOMAINS:
        raise UserError(f"unknown domain {domain!r}; expected one of {DOMAINS}")
    if drop_over is not None and drop_over < 1:
        raise UserError(f"drop_over must be a positive number of tokens, got {drop_over}")
    out = Path(out)
    paths = expand_sources(inputs)
    check_inputs(paths, fmt, document_per_file)
    (out / CHUNKS).mkdir(parents=True, exist_ok=True)
    tok = project_tokenizer(paths, out, tokenizer, fmt, document_per_file)
    count = lambda texts: [len(ids) for ids in encode_texts(tok, list(texts))]  # noqa: E731  (special tokens as text)
    files, total = [], ChunkStats()
    for i, path in enumerate(paths):
        st = chunk_file(path, out / CHUNKS / part_name(i), count, fmt=fmt, domain=domain, rechunk=rechunk,
                        document_per_file=document_per_file, drop_over=drop_over)
        total.add(st)
        files.append({"input": str(Path(path).resolve()), "output": part_name(i), **asdict(st)})
        log.info("chunked %s: %d documents -> %d chunks (%d sentences dropped)", path, st.docs, st.chunks,
                 st.dropped_sentences)
    if total.chunks == 0:
        raise UserError(f"no chunks in {', '.join(map(str, paths))} (every document empty or dropped)")
    man = {"inputs": [str(p) for p in paths], "files": files, "totals": asdict(total),
           "tokenizer": str(tokenizer) if tokenizer else str(out / "tokenizer.json"),
           "thresholds": THRESHOLDS, "document_per_file": document_per_file,
           # what chunking changed in the text: nothing, unless a normalisation was asked for
           "normalisation": {"drop_sentences_over_tokens": drop_over} if drop_over is not None else {}}
    write_json(out / CHUNKS / MANIFEST, man)
    return man
