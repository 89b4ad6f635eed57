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
    mask_id: int = MASK_ID


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


# --- tiny trained models on the bundled "animal sounds" facts (cached per session) -------
import json  # noqa: E402
from pathlib import Path  # noqa: E402

SOUNDS = Path(__file__).resolve().parents[2] / "src/interpscale/metrics/tasks/data/sounds.jsonl"
TRAIN_STEPS = 400  # 300 left greedy sounds_gen at 0.71-0.79 depending on GEMM rounding; 400 gives 1.0
SEQ = 64


def sounds_sentences(seed: int, n: int) -> list[str]:
    rows = [json.loads(line) for line in SOUNDS.read_text().splitlines() if line.strip()]
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(len(rows), (n,), generator=g).tolist()
    return [f"{rows[i]['prompt']} {rows[i]['choices'][rows[i]['label']]}." for i in idx]


def build_tokenizer(texts: list[str]):
    """Byte-level BPE with the project's special ids 0..3 ([PAD] [EOS] [EOC] [MASK])."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from interpscale.models.types import SPECIAL_TOKENS

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3]
    return tok


def token_stream_batches(tok, seed: int, n_batches: int, B: int, T: int = SEQ) -> list[Batch]:
    need = n_batches * B * T
    ids = tok.encode(" ".join(sounds_sentences(seed, need // 4 + 50)), add_special_tokens=False).ids
    assert len(ids) >= need, (len(ids), need)
    x = torch.tensor(ids[:need]).reshape(n_batches, B, T)
    return [Batch(x[i]) for i in range(n_batches)]


def train_tiny(family: str, tok, steps: int = TRAIN_STEPS, seed: int = 0):
    from interpscale.models import build_model

    torch.manual_seed(seed)
    model = build_model(family, "nano", vocab_size=tok.get_vocab_size(), max_seq_len=128)
    data = token_stream_batches(tok, seed + 100, 64, 16)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    model.train()
    for s in range(steps):
        loss = model.loss(data[s % len(data)], s).total
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return model


@pytest.fixture(scope="session")
def sounds_tok():
    torch.set_num_threads(1)
    return build_tokenizer(sounds_sentences(0, 2000))


@pytest.fixture(scope="session")
def trained_cdlm(sounds_tok):
    return train_tiny("cdlm", sounds_tok)


@pytest.fixture(scope="session")
def trained_ar(sounds_tok):
    return train_tiny("ar", sounds_tok)


class ToyConceptLM(nn.Module):
    """Concept bottleneck with an explicit residual knob: h~ = k_hat + u_hat + eps_scale * eps,
    logits = W h~ (Eq. 5, Eq. 8).  ``eps_scale = 0`` forces eps to zero."""

    is_diffusion = False
    is_concept = True

    def __init__(self, vocab: int = 50, d: int = 16, n: int = 6, m: int = 12, eps_scale: float = 1.0, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(vocab, d)
        self.f, self.g = nn.Linear(d, n), nn.Linear(d, m)
        self.known_emb, self.U = nn.Parameter(torch.randn(n, d) * 0.3), nn.Parameter(torch.randn(m, d) * 0.3)
        self.W = nn.Parameter(torch.randn(vocab, d))
        self.eps_scale = eps_scale
        self.config = ToyConfig("ar+concept", vocab, n_concepts=n)

    @property
    def lm_head(self):
        return self.W

    def forward(self, tokens, *, chunk_ids=None, chunk_labels=None):
        h = self.embed(tokens)
        k, u = torch.sigmoid(self.f(h)), torch.sigmoid(self.g(h))
        known, unknown = k @ self.known_emb, u @ self.U
        residual = self.eps_scale * (h - known - unknown)
        logits = (known + unknown + residual) @ self.W.T
        return ModelOutput(logits=logits, hidden=h, known=known, unknown=unknown, residual=residual,
                           known_act=k, unknown_act=u)


def annotated_batches(n_batches: int, B: int, T: int, vocab: int, n_concepts: int, chunk: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_batches):
        tok = torch.randint(4, vocab, (B, T), generator=g)
        C = T // chunk
        ids = torch.arange(T).div(chunk, rounding_mode="floor").expand(B, T).clone()
        ids[:, :2] = -1  # a few tokens in no chunk
        labels = (torch.rand(B, C, n_concepts, generator=g) < 0.2).float()
        out.append(Batch(tok, chunk_ids=ids, chunk_labels=labels))
    return out


@pytest.fixture
def toy_concept():
    return ToyConceptLM


@pytest.fixture
def make_annotated():
    return annotated_batches


@pytest.fixture(scope="session")
def sounds_val(sounds_tok):
    """Held-out validation batches (8 x [8, 64]) from a different seed than training."""
    return token_stream_batches(sounds_tok, 999, 8, 8)
