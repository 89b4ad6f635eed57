"""Rows and batches of prepared data: ``RowSplit``, the row order every split shares, and
``Split``, one split opened through memory maps, read a batch's rows and chunks at a time (rows,
chunks and the binary search in ``chunk_end``: ``docs/data.md``).  Batches are a pure function of
(seed, step): a resumed run's data position is its step, so resume is bit-exact.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
import torch

from interpscale.models.types import Batch


class RowSplit:
    """Rows served as batches; subclasses give ``n_rows`` and ``rows_to_batch``."""

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
        return self.rows_to_batch(self.step_rows(step, batch_size, seed=seed, rank=rank, world=world), concepts)

    def eval_batches(self, batch_size: int, max_batches: int | None = None, concepts: bool = True) -> list[Batch]:
        """Deterministic, in-order validation batches (a re-iterable list)."""
        starts = range(0, self.n_rows, batch_size)[:max_batches]
        return [self.rows_to_batch(np.arange(s, min(s + batch_size, self.n_rows)), concepts) for s in starts]


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


@functools.lru_cache(maxsize=8)
def _perm(seed: int, epoch: int, n: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch, 7]).permutation(n)


class Split(RowSplit):
    """One split of prepared data read through memory maps, cut into rows of ``seq_len``."""

    def __init__(self, path: str | os.PathLike, name: str, meta: dict, seq_len: int | None):
        path = Path(path)
        self.name, self.seq_len = name, seq_len
        info = meta["splits"][name]
        self.n_tokens, self.n_chunks = int(info["tokens"]), int(info["chunks"])
        self.n_concepts = int(meta["n_concepts"])
        ids = meta["special_ids"]
        self.pad_id, self.eos_id, self.eoc_id = ids["pad"], ids["eos"], ids["eoc"]
        dtype = np.dtype(meta["token_dtype"])
        # np.memmap cannot map an empty file; an empty split is an empty array
        self.tokens = (np.memmap(path / f"{name}.tokens.bin", dtype=dtype, mode="r", shape=(self.n_tokens,))
                       if self.n_tokens else np.zeros(0, dtype=dtype))
        self.chunk_end, self.label_offsets, self.label_ids = (
            np.load(path / f"{name}.{f}.npy", mmap_mode="r", allow_pickle=False)
            for f in ("chunk_end", "label_offsets", "label_ids"))

    @property
    def n_rows(self) -> int:
        if not self.seq_len:
            raise ValueError("this data was opened without a sequence length: open_data(DIR, seq_len=T)")
        return max(1, -(-self.n_tokens // self.seq_len))

    def row_tokens(self, rows: np.ndarray) -> np.ndarray:
        """[len(rows), T] int64 tokens of ``rows`` (positions past the end are [PAD])."""
        T = self.seq_len
        pos = np.asarray(rows, dtype=np.int64)[:, None] * T + np.arange(T)
        inside = pos < self.n_tokens
        out = np.full(pos.shape, self.pad_id, dtype=np.int64)
        if self.n_tokens:
            out[inside] = self.tokens[pos[inside]]
        return out

    def chunk_ids(self, rows: np.ndarray, tok: np.ndarray) -> np.ndarray:
        """Global chunk id of every token of ``rows`` (-1 on [EOS] / [PAD])."""
        first = np.searchsorted(self.chunk_end, np.asarray(rows, dtype=np.int64) * self.seq_len, side="left")
        is_eoc = tok == self.eoc_id
        gid = first[:, None] + np.cumsum(is_eoc, axis=1) - is_eoc
        gid[(tok == self.eos_id) | (tok == self.pad_id)] = -1
        return gid

    def chunk_labels(self, chunks: np.ndarray) -> list[np.ndarray]:
        """Concept ids of each global chunk in ``chunks`` (reads only those labels)."""
        chunks = np.asarray(chunks, dtype=np.int64)
        lo, hi = self.label_offsets[chunks], self.label_offsets[chunks + 1]
        flat = self.label_ids[np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)])] if len(chunks) else []
        return np.split(np.asarray(flat, dtype=np.int64), np.cumsum(hi - lo)[:-1])

    def rows_to_batch(self, rows: np.ndarray, concepts: bool = True) -> Batch:
        """Rows -> Batch: tokens, plus local chunk ids and multi-hot labels [B, C, n] if concepts."""
        rows = np.asarray(rows, dtype=np.int64)
        tok = torch.from_numpy(tok_np := self.row_tokens(rows))
        valid = tok != self.pad_id
        if self.n_concepts == 0 or not concepts:
            return Batch(tokens=tok, valid=valid)
        local, per_row = local_chunks(self.chunk_ids(rows, tok_np))
        c_max = max(1, max(len(p) for p in per_row))
        lab = np.zeros((len(rows), c_max, self.n_concepts), dtype=np.float32)
        labels = iter(self.chunk_labels(np.concatenate(per_row)) if sum(map(len, per_row)) else [])
        for r, ids in enumerate(per_row):
            for j in range(len(ids)):
                lab[r, j, next(labels)] = 1.0
        return Batch(tok, torch.from_numpy(local), torch.from_numpy(lab), valid)

