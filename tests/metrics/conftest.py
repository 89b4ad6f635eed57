"""Shared fixtures for the metrics tests: context-free toy models with known likelihoods."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import nn

from interpscale.models.types import MASK_ID, Batch, ModelOutput


@dataclass
class ToyConfig:
    family: str
    vocab_size: int
    size: str = "toy"
    n_concepts: int = 0
    block_size: int = 16
    mask_token_id: int = MASK_ID


class UnigramLM(nn.Module):
    """Predicts one fixed distribution at every position, whatever the context: its masked
    cross-entropy is the same at every mask rate, so every diffusion estimator must equal
    the exact per-token NLL in expectation."""

    def __init__(self, vocab: int, *, diffusion: bool = True, seed: int = 0, block_size: int = 16):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.table = nn.Parameter(torch.randn(vocab, generator=g))
        self.is_diffusion = diffusion
        self.config = ToyConfig("cdlm" if diffusion else "ar", vocab, block_size=block_size)

    def forward(self, tokens, *, chunk_ids=None, chunk_labels=None):
        B, T = tokens.shape
        return ModelOutput(logits=self.table.expand(B, T, -1))

    def exact_nll(self, batches) -> float:
        logp = torch.log_softmax(self.table.detach(), -1)
        tot, n = 0.0, 0
        for b in batches:
            v = torch.ones_like(b.tokens, dtype=torch.bool) if b.valid is None else b.valid
            tot += float(-logp[b.tokens[v]].sum())
            n += int(v.sum())
        return tot / n


class BigramLM(nn.Module):
    """AR model whose logits at position i are a fixed row chosen by token i."""

    is_diffusion = False

    def __init__(self, vocab: int, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.table = nn.Parameter(torch.randn(vocab, vocab, generator=g))
        self.config = ToyConfig("ar", vocab)

    def forward(self, tokens, *, chunk_ids=None, chunk_labels=None):
        return ModelOutput(logits=self.table[tokens])


def sample_batches(n_batches: int, B: int, T: int, vocab: int, seed: int = 1, pad_last: int = 0):
    """Tokens from a skewed distribution over the non-special ids (4..vocab-1)."""
    g = torch.Generator().manual_seed(seed)
    probs = torch.rand(vocab - 4, generator=g) ** 3 + 0.01
    out = []
    for _ in range(n_batches):
        tok = 4 + torch.multinomial(probs, B * T, replacement=True, generator=g).reshape(B, T)
        valid = torch.ones(B, T, dtype=torch.bool)
        if pad_last:
            valid[:, T - pad_last:] = False
            tok[:, T - pad_last:] = 0
        out.append(Batch(tok, valid=valid if pad_last else None))
    return out


@pytest.fixture
def unigram():
    return UnigramLM


@pytest.fixture
def bigram():
    return BigramLM


@pytest.fixture
def make_batches():
    return sample_batches
