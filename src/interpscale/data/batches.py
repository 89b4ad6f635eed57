"""Rows and batches, the row order every split (``shards.Split``) shares.  Batches are a pure
function of (seed, step): a resumed run's data position is its step, so resume is bit-exact.
"""

from __future__ import annotations

import functools

import numpy as np

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

