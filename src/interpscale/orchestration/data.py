"""Rows and batches: the batching every split shares, and the original in-memory packing.

Batches are a pure function of (seed, step): the data position of a resumed run is its
step, which is what makes resume bit-exact.  Prepared data on disk (memory-mapped
shards) is ``orchestration.shards``; this module's ``pack`` is the in-memory reference.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from interpscale.models.types import EOC_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, Batch
from interpscale.orchestration.corpus import Document
from interpscale.orchestration.tokenizer import load_tokenizer as _load_any
from interpscale.orchestration.tokenizer import train_tokenizer  # noqa: F401  (re-exported)

log = logging.getLogger(__name__)


def load_tokenizer(path: str | os.PathLike):
    """A tokenizer.json with [PAD] [EOS] [EOC] [MASK] at ids 0..3 (the legacy in-memory
    packing's contract; prepared data reads any tokenizer, see ``tokenizer.load_tokenizer``)."""
    tok = _load_any(path)
    for i, s in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(s) != i:
            raise ValueError(f"{path}: special token {s} has id {tok.token_to_id(s)}, expected {i}")
    return tok


class RowSplit:
    """Rows of ``seq_len`` tokens served as batches; subclasses give ``n_rows`` and
    ``rows_to_batch``.  ``batch(step)`` is a pure function of (seed, step) and each rank
    builds only its own rows."""

    n_rows: int

    def rows_to_batch(self, rows: np.ndarray, concepts: bool = True) -> Batch:  # pragma: no cover
        raise NotImplementedError

    def step_rows(self, step: int, batch_size: int, *, seed: int, rank: int = 0, world: int = 1) -> np.ndarray:
        """Row indices of ``rank``'s share of training ``step``: a seeded per-epoch permutation."""
        idx = np.arange(step * batch_size, (step + 1) * batch_size)[rank::world]
        epochs, pos = np.divmod(idx, self.n_rows)
        return np.array([_perm(seed, int(e), self.n_rows)[p] for e, p in zip(epochs, pos)], dtype=np.int64)

    def batch(self, step: int, batch_size: int, *, seed: int, rank: int = 0, world: int = 1,
              concepts: bool = True) -> Batch:
        """The batch of training ``step`` (this rank's rows of it)."""
        return self.rows_to_batch(self.step_rows(step, batch_size, seed=seed, rank=rank, world=world), concepts)

    def eval_batches(self, batch_size: int, max_batches: int | None = None, concepts: bool = True) -> list[Batch]:
        """Deterministic, in-order validation batches (a re-iterable list)."""
        out = []
        for start in range(0, self.n_rows, batch_size):
            if max_batches is not None and len(out) >= max_batches:
                break
            out.append(self.rows_to_batch(np.arange(start, min(start + batch_size, self.n_rows)), concepts))
        return out


def local_chunks(gid: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Per-row local chunk ids (-1 stays -1) and each row's global chunk ids in local order."""
    local = np.full(gid.shape, -1, dtype=np.int64)
    per_row = []
    for r in range(gid.shape[0]):
        ids, inv = np.unique(gid[r], return_inverse=True)
        keep = ids >= 0
        remap = np.cumsum(keep) - 1
        local[r] = np.where(gid[r] >= 0, remap[inv.reshape(-1)], -1)
        per_row.append(ids[keep])
    return local, per_row


@dataclass
class Packed(RowSplit):
    """In-memory rows of ``seq_len`` tokens; ``chunk`` holds global chunk ids (-1 outside
    chunks), ``labels`` is dense.  The original packing, kept to read run directories
    prepared before the memory-mapped shards and as the reference the shards are tested
    against; new data is prepared by ``orchestration.prepare``."""

    tokens: np.ndarray  # [R, T] int32
    chunk: np.ndarray  # [R, T] int32
    labels: np.ndarray  # [n_chunks, n_concepts] bool

    @property
    def n_rows(self) -> int:
        return int(self.tokens.shape[0])

    def save(self, path: Path) -> None:
        from interpscale.orchestration.rundir import atomic_path

        with atomic_path(path) as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, tokens=self.tokens, chunk=self.chunk, labels=self.labels)

    @classmethod
    def load(cls, path: Path) -> "Packed":
        with np.load(path, allow_pickle=False) as z:
            return cls(z["tokens"], z["chunk"], z["labels"])

    def rows_to_batch(self, rows: np.ndarray, concepts: bool = True) -> Batch:
        """Rows -> Batch with per-row local chunk ids and multi-hot chunk labels
        (``concepts=False``: tokens only, for families without a concept module)."""
        tok = torch.from_numpy(self.tokens[rows].astype(np.int64))
        gid = self.chunk[rows]
        n = self.labels.shape[1]
        if n == 0 or not concepts:
            return Batch(tokens=tok, valid=tok != PAD_ID)
        local, per_row = local_chunks(gid)
        c_max = max(1, max(len(p) for p in per_row))
        lab = np.zeros((len(rows), c_max, n), dtype=np.float32)
        for r, ids in enumerate(per_row):
            lab[r, : len(ids)] = self.labels[ids]
        return Batch(tok, torch.from_numpy(local), torch.from_numpy(lab), tok != PAD_ID)


_PERM_CACHE: dict[tuple[int, int, int], np.ndarray] = {}


def _perm(seed: int, epoch: int, n: int) -> np.ndarray:
    key = (seed, epoch, n)
    if key not in _PERM_CACHE:
        _PERM_CACHE.clear() if len(_PERM_CACHE) > 8 else None
        _PERM_CACHE[key] = np.random.default_rng([seed, epoch, 7]).permutation(n)
    return _PERM_CACHE[key]


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
    """Held-out validation split by whole documents (seeded)."""
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    if len(docs) < 2:
        raise ValueError(f"need at least 2 documents to hold one out, got {len(docs)}")
    order = np.random.default_rng([seed, 3]).permutation(len(docs))
    n_val = min(len(docs) - 1, max(1, int(round(val_fraction * len(docs)))))
    val = set(order[:n_val].tolist())
    return [d for i, d in enumerate(docs) if i not in val], [d for i, d in enumerate(docs) if i in val]


def data_key(source: dict) -> str:
    """Content key of a data-preparation request (for the shared on-disk cache)."""
    blob = json.dumps(source, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
