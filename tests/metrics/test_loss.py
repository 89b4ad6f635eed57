"""Validation-loss estimators against analytic references (Steerling App. H)."""

from __future__ import annotations

import math

import pytest
import torch

from interpscale.metrics import ESTIMATORS, estimate_loss, estimate_losses, per_mask_rate_losses
from interpscale.models.types import Batch

DIFF = ("mdlm_elbo", "per_block", "fixed_rate", "fixed_grid")


@pytest.mark.parametrize("estimator", DIFF)
def test_context_free_model_estimators_equal_exact_nll(unigram, make_batches, estimator):
    model = unigram(40)
    data = make_batches(12, 4, 64, 40, pad_last=5)
    exact = model.exact_nll(data)
    est = estimate_loss(model, data, estimator, n_passes=2, seed=3)
    assert est.se > 0
    assert abs(est.value - exact) < 3 * est.se, (est, exact)
    # the estimate is a real Monte Carlo draw, not the exact value
    assert est.value != pytest.approx(exact, abs=1e-9)
    assert est.n_tokens == sum(b.n_tokens for b in data)


def test_ar_cross_entropy_matches_hand_computation(bigram, make_batches):
    model = bigram(30)
    data = make_batches(3, 2, 17, 30, pad_last=4)
    logp = torch.log_softmax(model.table.detach().double(), -1)
    tot, n = 0.0, 0
    for b in data:
        for row in range(b.tokens.shape[0]):
            for i in range(b.tokens.shape[1] - 1):
                if b.valid[row, i] and b.valid[row, i + 1]:
                    tot -= float(logp[b.tokens[row, i], b.tokens[row, i + 1]])
                    n += 1
    est = estimate_loss(model, data, "ar_ce")
    assert est.value == pytest.approx(tot / n, rel=1e-6)
    assert est.n_tokens == n == 3 * 2 * 12
    assert est.se == 0.0


def test_per_mask_rate_losses_are_flat_for_context_free_model(unigram, make_batches):
    model = unigram(40)
    data = make_batches(10, 4, 64, 40)
    exact = model.exact_nll(data)
    res = per_mask_rate_losses(model, data, n_passes=2, seed=1)
    assert sorted(res) == pytest.approx([k / 10 for k in range(1, 10)])
    z = [(r.value - exact) / r.se for r in res.values()]
    assert max(abs(x) for x in z) < 4
    # the grid estimate is the mean of the per-rate losses (Eq. 37)
    both = estimate_losses(model, data, ("fixed_grid",), per_rate=True, n_passes=2, seed=1)
    rates = [both[f"rate_{k / 10:g}"].value for k in range(1, 10)]
    assert both["fixed_grid"].value == pytest.approx(sum(rates) / 9, rel=1e-9)


def test_forward_pass_counts(unigram, make_batches):
    model = unigram(20)
    data = make_batches(3, 2, 32, 20)
    res = estimate_losses(model, data, DIFF, n_passes=2)
    assert res["fixed_grid"].n_forward == 3 * 2 * 9
    assert res["mdlm_elbo"].n_forward == res["per_block"].n_forward == res["fixed_rate"].n_forward == 6


def test_seeded_and_reproducible(unigram, make_batches):
    model = unigram(20)
    data = make_batches(4, 2, 32, 20)
    a = estimate_loss(model, data, "mdlm_elbo", seed=7)
    b = estimate_loss(model, data, "mdlm_elbo", seed=7)
    c = estimate_loss(model, data, "mdlm_elbo", seed=8)
    assert a == b
    assert a.value != c.value


def test_antithetic_scores_every_token_once_at_half_rate(unigram, make_batches):
    """At tau = 0.5 the antithetic twin masks exactly the complement, so the per-batch MC
    error collapses and the SE shrinks well below the independent-draw SE."""
    model = unigram(40)
    data = make_batches(1, 8, 64, 40)
    iid = estimate_loss(model, data, "fixed_rate", n_passes=16, seed=2)
    anti = estimate_loss(model, data, "fixed_rate", n_passes=16, seed=2, antithetic=True)
    exact = model.exact_nll(data)
    assert anti.se < 0.5 * iid.se
    assert abs(anti.value - exact) < 3 * anti.se + 1e-9


def test_stratified_mdlm_is_unbiased(unigram, make_batches):
    model = unigram(40)
    data = make_batches(8, 4, 64, 40)
    est = estimate_loss(model, data, "mdlm_elbo", n_passes=2, stratified=True, seed=5)
    assert abs(est.value - model.exact_nll(data)) < 3 * est.se


def test_bad_inputs(unigram, bigram, make_batches):
    diff, ar = unigram(20), bigram(20)
    data = make_batches(2, 2, 32, 20)
    with pytest.raises(ValueError, match="empty"):
        estimate_loss(diff, [], "mdlm_elbo")
    with pytest.raises(ValueError, match="empty"):
        estimate_loss(diff, [Batch(data[0].tokens, valid=torch.zeros(2, 32, dtype=torch.bool))])
    with pytest.raises(ValueError, match="autoregressive"):
        estimate_loss(diff, data, "ar_ce")
    with pytest.raises(ValueError, match="diffusion"):
        estimate_loss(ar, data, "mdlm_elbo")
    with pytest.raises(ValueError, match="block"):
        estimate_loss(unigram(20, block_size=64), data, "per_block")
    with pytest.raises(ValueError, match="unknown estimator"):
        estimate_loss(diff, data, "elbo")
    with pytest.raises(ValueError, match="even"):
        estimate_loss(diff, data, "mdlm_elbo", n_passes=3, antithetic=True)
    with pytest.raises(ValueError, match="MASK"):
        estimate_loss(diff, [Batch(torch.full((1, 32), 3))], "mdlm_elbo")
    assert set(ESTIMATORS) == {"ar_ce", *DIFF}
    assert not math.isnan(estimate_loss(diff, data, "per_block").value)
