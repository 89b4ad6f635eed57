"""The in-memory packing: the reference the memory-mapped shards are tested against.

Before the shards, data was packed in memory by these functions.  They are kept here,
outside the package, as an independent second implementation of the token stream (each
chunk's tokens then [EOC], each document closed by [EOS], rows of ``seq_len``, the tail
padded) and of the batches built from it.  Documents carry concept indices.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from interpscale.data.corpus import Document, corpus_config, generate_documents, read_concepts
from interpscale.data.loaders import RowSplit, local_chunks
from interpscale.data.prepare import is_validation
from interpscale.data.sources import iter_documents
from interpscale.models.types import EOC_ID, EOS_ID, PAD_ID, Batch


@dataclass
class Packed(RowSplit):
    """In-memory rows of ``seq_len`` tokens; ``chunk`` holds global chunk ids (-1 outside
    chunks), ``labels`` is dense [n_chunks, n_concepts]."""

    tokens: np.ndarray  # [R, T] int32
    chunk: np.ndarray  # [R, T] int32
    labels: np.ndarray  # [n_chunks, n_concepts] bool

    @property
    def n_rows(self) -> int:
        return int(self.tokens.shape[0])

    def rows_to_batch(self, rows: np.ndarray, concepts: bool = True) -> Batch:
        """Rows -> Batch with per-row local chunk ids and multi-hot chunk labels."""
        tok = torch.from_numpy(self.tokens[rows].astype(np.int64))
        n = self.labels.shape[1]
        if n == 0 or not concepts:
            return Batch(tokens=tok, valid=tok != PAD_ID)
        local, per_row = local_chunks(self.chunk[rows])
        c_max = max(1, max(len(p) for p in per_row))
        lab = np.zeros((len(rows), c_max, n), dtype=np.float32)
        for r, ids in enumerate(per_row):
            lab[r, : len(ids)] = self.labels[ids]
        return Batch(tok, torch.from_numpy(local), torch.from_numpy(lab), tok != PAD_ID)


def pack(docs: list[Document], tok, n_concepts: int, seq_len: int) -> Packed:
    """Tokenise chunk by chunk; each chunk ends in [EOC] (part of that chunk), each
    document in [EOS]; the stream is cut into rows of ``seq_len`` (the tail is padded)."""
    if seq_len < 2:
        raise ValueError(f"seq_len must be >= 2, got {seq_len}")
    texts = [text for doc in docs for text, _ in doc]
    encoded = tok.encode_batch(texts) if texts else []
    stream, chunk, labels = [], [], []
    k = 0
    for doc in docs:
        for text, labs in doc:
            ids = encoded[k].ids
            stream.extend(ids + [EOC_ID])
            chunk.extend([k] * (len(ids) + 1))
            row = np.zeros(n_concepts, dtype=bool)
            for c in labs:
                if not 0 <= c < n_concepts:
                    raise ValueError(f"chunk {k}: concept index {c} outside 0..{n_concepts - 1}")
                row[c] = True
            labels.append(row)
            k += 1
        stream.append(EOS_ID)
        chunk.append(-1)
    n_rows = max(1, -(-len(stream) // seq_len))
    tokens = np.full(n_rows * seq_len, PAD_ID, dtype=np.int32)
    gids = np.full(n_rows * seq_len, -1, dtype=np.int32)
    tokens[: len(stream)] = stream
    gids[: len(chunk)] = chunk
    lab = np.stack(labels) if labels else np.zeros((0, n_concepts), dtype=bool)
    return Packed(tokens.reshape(n_rows, seq_len), gids.reshape(n_rows, seq_len), lab)


def split_docs(docs: list[Document], val_fraction: float, seed: int) -> tuple[list[Document], list[Document]]:
    """Held-out validation split by whole documents, by the package's one rule (``is_validation``)."""
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    held = [is_validation([t for t, _ in d], val_fraction, seed) for d in docs]
    return [d for d, h in zip(docs, held) if not h], [d for d, h in zip(docs, held) if h]


def _index_labels(raw_docs, cards: list[dict] | None) -> tuple[list[dict], list[Document]]:
    if cards is None:
        names = sorted({lab for doc in raw_docs for _, labs in doc for lab in labs})
        cards = [{"label": n, "description": "", "words": []} for n in names]
    index = {c["label"]: i for i, c in enumerate(cards)}
    docs: list[Document] = []
    for d, doc in enumerate(raw_docs):
        out = []
        for j, (text, labs) in enumerate(doc):
            unknown = [lab for lab in labs if lab not in index]
            if unknown:
                raise ValueError(f"document {d}, chunk {j}: unknown concept label(s) {unknown}")
            out.append((text, tuple(sorted(index[lab] for lab in labs))))
        docs.append(out)
    return cards, docs


def load_source(source: dict) -> tuple[list[dict], list[Document]]:
    """Concept cards and documents (concept indices) of a data source, all in memory."""
    kind = source.get("kind", "synthetic")
    if kind == "synthetic":
        concepts, docs = generate_documents(corpus_config(source))
        return [c.card() for c in concepts], docs
    if kind not in ("jsonl", "parquet", "text"):
        raise ValueError(f"unknown data kind {kind!r}; expected synthetic, jsonl, parquet, text or prepared")
    path = source.get("path")
    if not path or not Path(path).exists():
        raise ValueError(f"{kind} data file not found: {path!r}")
    raw = [doc.chunks for doc in iter_documents(path, kind)]
    cards = read_concepts(source["concepts"]) if source.get("concepts") else None
    return _index_labels(raw, cards)
