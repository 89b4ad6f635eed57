"""Shared fixtures: a learnable synthetic token stream and a briefly trained tiny model."""

import pytest
import torch

from interpscale.models.types import Batch


def markov_batches(n_batches: int, *, vocab: int = 64, batch: int = 8, seq_len: int = 32, seed: int = 0) -> list[Batch]:
    """Tokens from a sparse random Markov chain over ids [4, vocab) (ids 0-3 are special)."""
    gen = torch.Generator().manual_seed(seed)
    n = vocab - 4
    succ = torch.randint(0, n, (n, 3), generator=torch.Generator().manual_seed(1234))  # 3 successors per state
    out = []
    for _ in range(n_batches):
        t = torch.empty(batch, seq_len, dtype=torch.long)
        t[:, 0] = torch.randint(0, n, (batch,), generator=gen)
        for i in range(1, seq_len):
            t[:, i] = succ[t[:, i - 1], torch.randint(0, 3, (batch,), generator=gen)]
        out.append(Batch(t + 4))
    return out


def train_briefly(model, batches, steps: int, lr: float = 3e-3) -> list[float]:
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        out = model.loss(batches[step % len(batches)], step)
        opt.zero_grad()
        out.total.backward()
        opt.step()
        losses.append(out.parts["lm"])
    return losses


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)
    yield


@pytest.fixture(scope="session")
def make_batches():
    return markov_batches


@pytest.fixture(scope="session")
def trainer():
    return train_briefly
