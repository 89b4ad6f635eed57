"""Issue 45's per-step cuts keep their values: the prefetcher hands batches over in blocks (same
batches, an error at its own step) and the vectorised batch builder gives the per-row one's ids."""

import numpy as np
import pytest
import torch

from interpscale.data.loaders import local_chunks
from interpscale.models.types import Batch
from interpscale.orchestration import parallel
from interpscale.orchestration.parallel import Prefetcher


def _make(bad: int | None = None, calls: list | None = None):
    def make(step: int) -> Batch:
        if calls is not None:
            calls.append(step)
        if step == bad:
            raise ValueError(f"bad batch {step}")
        return Batch(torch.full((2, 3), step))
    return make


def _drain(p: Prefetcher) -> list[int]:
    out = []
    try:
        while True:
            out.append(int(next(p).tokens[0, 0]))
    except StopIteration:
        return out
    finally:
        p.close()


def test_prefetcher_hands_over_blocks_with_every_step_in_order(monkeypatch):
    monkeypatch.setattr(parallel, "MAX_AHEAD", 4)
    calls: list[int] = []
    assert _drain(Prefetcher(_make(calls=calls), 3, 20)) == list(range(3, 20))
    assert calls == list(range(3, 20))  # each batch built once, none past the segment's end
    assert _drain(Prefetcher(_make(), 5, 5)) == []


def test_prefetcher_block_size_follows_the_byte_budget(monkeypatch):
    monkeypatch.setattr(parallel, "AHEAD_BYTES", 3 * 2 * 3 * 8)  # three of these int64 [2, 3] batches
    p = Prefetcher(_make(), 0, 50)
    next(p)
    assert p.ahead == 3
    p.close()


def test_a_bad_batch_fails_at_its_own_step_after_the_ones_before(monkeypatch):
    monkeypatch.setattr(parallel, "MAX_AHEAD", 8)
    p = Prefetcher(_make(bad=11), 0, 30)
    got = []
    with pytest.raises(ValueError, match="bad batch 11"):
        while True:
            got.append(int(next(p).tokens[0, 0]))
    p.close()
    assert got == list(range(11))


def _local_chunks_per_row(gid: np.ndarray):
    """The per-row reference (the builder before issue 45)."""
    local = np.full(gid.shape, -1, dtype=np.int64)
    per_row = []
    for r in range(gid.shape[0]):
        ids, inv = np.unique(gid[r], return_inverse=True)
        keep = ids >= 0
        local[r] = np.where(gid[r] >= 0, (np.cumsum(keep) - 1)[inv.reshape(-1)], -1)
        per_row.append(ids[keep])
    return local, per_row


@pytest.mark.parametrize("seed", range(5))
def test_local_chunks_match_the_per_row_reference(seed):
    rng = np.random.default_rng(seed)
    gid = np.sort(rng.integers(0, 40, size=(7, 16)), axis=1)  # nondecreasing ids with gaps
    gid[rng.random(gid.shape) < 0.3] = -1  # [EOS] / [PAD]
    gid[2] = -1  # a row without a chunk
    local, per_row = local_chunks(gid)
    ref_local, ref_rows = _local_chunks_per_row(gid)
    assert np.array_equal(local, ref_local) and local.dtype == ref_local.dtype
    assert len(per_row) == len(ref_rows) and all(np.array_equal(a, b) for a, b in zip(per_row, ref_rows))
    assert len(per_row[2]) == 0 and (local[2] == -1).all()
