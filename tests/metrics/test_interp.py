"""Interpretability metrics (Steerling §7): Eq. 10, Eq. 14, Eq. 22 and alignment inputs."""

from __future__ import annotations

import math

import pytest
import torch

from interpscale.metrics import concept_contribution, concept_independence, concept_top_tokens, interp_metrics
from interpscale.metrics.interp import alignment_inputs, concept_loss_terms, known_concept_alignment
from interpscale.models.types import Batch


def test_concept_loss_matches_hand_computation():
    # one row, two chunks: tokens 0-1 in chunk 0, token 2 outside, tokens 3-4 in chunk 1
    k = torch.tensor([[[0.1, 0.5], [0.2, 0.5], [0.9, 0.9], [0.3, 0.0], [0.4, 0.2]]])
    ids = torch.tensor([[0, 0, -1, 1, 1]])
    y = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    total, n = concept_loss_terms(k, ids, y, torch.ones(1, 5, dtype=torch.bool))
    kc0 = [1 - 0.9 * 0.8, 1 - 0.5 * 0.5]  # Eq. 9
    kc1 = [1 - 0.7 * 0.6, 1 - 1.0 * 0.8]
    hand = -(math.log(kc0[0]) + math.log(1 - kc0[1])) - (math.log(1 - kc1[0]) + math.log(kc1[1]))
    assert n == 2
    assert total == pytest.approx(hand, rel=1e-9)


def test_concept_loss_agrees_with_the_training_loss_implementation():
    from interpscale.models.concept import concept_loss as train_concept_loss

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 24, 5, generator=g)
    ids = torch.arange(24).div(6, rounding_mode="floor").expand(3, 24).clone()
    ids[1, 20:] = -1
    y = (torch.rand(3, 4, 5, generator=g) < 0.3).float()
    total, n = concept_loss_terms(torch.sigmoid(logits), ids, y, torch.ones(3, 24, dtype=torch.bool))
    ref, n_ref = train_concept_loss(logits, ids, y)
    assert n == n_ref
    assert total / n == pytest.approx(float(ref), rel=1e-4)


def test_independence_is_at_null_floor_for_independent_and_grows_with_correlation():
    g = torch.Generator().manual_seed(0)
    B, d = 2000, 32
    k = torch.randn(B, d, generator=g)
    noise = torch.randn(B, d, generator=g)
    vals = [concept_independence(k, rho * k + math.sqrt(1 - rho**2) * noise) for rho in (0.0, 0.1, 0.3, 0.6, 0.9)]
    # independent unit-variance k, u: E||Psi^T Phi||^2 = (B-1) d^2 -> Eq. 14 = 1 (the null floor);
    # correlation rho on matching dims adds (B-1) rho^2 / d
    assert vals[0] == pytest.approx(1.0, abs=0.15)  # sd of the null statistic: sqrt(2) / d
    assert all(a < b for a, b in zip(vals, vals[1:]))
    assert vals[3] == pytest.approx(1 + (B - 1) * 0.36 / d, rel=0.15)
    # scale: independent small representations give ~0
    assert concept_independence(0.01 * k, 0.01 * noise) < 1e-7


def test_contribution_is_one_without_residual_and_falls_as_eps_grows(toy_concept, make_annotated):
    data = make_annotated(2, 4, 32, 50, 6)
    vals = [interp_metrics(toy_concept(eps_scale=e), data)["concept_contribution"] for e in (0.0, 0.1, 0.5, 1.0, 3.0)]
    assert vals[0] == pytest.approx(1.0, abs=1e-12)
    assert all(a > b for a, b in zip(vals, vals[1:]))
    assert vals[-1] < 0.7


def test_contribution_formula():
    k = torch.tensor([[1.0, 0.0]])
    u = torch.tensor([[0.0, 2.0]])
    e = torch.tensor([[-1.0, -1.0]])
    w = torch.tensor([[1.0, 1.0]])
    # |k.w| = 1, |u.w| = 2, |e.w| = 2 -> 3 / 5
    assert float(concept_contribution(k, u, e, w)) == pytest.approx(0.6)


def test_interp_metrics_on_a_real_concept_model(make_annotated):
    from interpscale.models import build_model

    for family in ("cdlm+concept", "ar+concept"):
        model = build_model(family, "nano", vocab_size=64, max_seq_len=64)
        n = model.config.n_concepts
        data = make_annotated(2, 2, 32, 64, n)
        m = interp_metrics(model, data, seed=1)
        assert set(m) == {"concept_loss", "concept_independence", "concept_contribution"}
        assert m["concept_loss"] > 0 and m["concept_independence"] >= 0
        assert 0 < m["concept_contribution"] <= 1
        assert interp_metrics(model, data, seed=1) == m  # seeded


def test_interp_metrics_bad_input(toy_concept, make_annotated):
    from interpscale.models import build_model

    data = make_annotated(1, 2, 32, 50, 6)
    with pytest.raises(ValueError, match="concept family"):
        interp_metrics(build_model("cdlm", "nano", vocab_size=64), make_annotated(1, 2, 32, 64, 6))
    with pytest.raises(ValueError, match="annotations"):
        interp_metrics(toy_concept(), [Batch(data[0].tokens)])
    with pytest.raises(ValueError, match="empty"):
        interp_metrics(toy_concept(), [])


def test_alignment_inputs_are_top_tokens_of_W_K(toy_concept):
    model = toy_concept()
    top = concept_top_tokens(model, k=5)
    scores = model.known_emb.detach() @ model.W.detach().T
    assert top.shape == (6, 5)
    assert torch.equal(top, scores.argsort(-1, descending=True)[:, :5])
    words = alignment_inputs(model, lambda i: f"tok{i}", k=3)
    assert words[2] == [f"tok{i}" for i in top[2, :3].tolist()]


def test_known_concept_alignment_through_the_lexical_judge(toy_concept):
    from interpscale.judges import LexicalJudge

    model = toy_concept()
    top = concept_top_tokens(model, k=4)
    # concept 0's card names exactly its top tokens; the others name unrelated words
    cards = [{"label": "c0", "description": "", "words": [f"tok{i}" for i in top[0].tolist()]}] + [
        {"label": f"c{j}", "description": "", "words": ["zebra", "violin"]} for j in range(1, 6)
    ]
    res = known_concept_alignment(model, cards, lambda i: f"tok{i}", judge=LexicalJudge(), k=4)
    scores = [r.score for r in res.records]
    assert res.mean is not None and len(scores) == 6
    assert scores[0] == max(scores) and scores[0] > min(scores)
    with pytest.raises(ValueError, match="cards"):
        known_concept_alignment(model, cards[:3], lambda i: str(i), judge=LexicalJudge())
