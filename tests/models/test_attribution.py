"""Integrated Gradients from the [MASK] baseline (Eq. 16) and chunk contributions (Eq. 17)."""

import pytest
import torch

from interpscale.models.attribution import concept_contributions, integrated_gradients

STEERLING = ("ar", "cdlm", "ar+concept", "cdlm+concept")


@pytest.mark.parametrize("family", STEERLING)
def test_ig_completeness_within_5pct_at_64_steps(family, tiny):
    model = tiny(family, seed=1)
    tok = torch.randint(4, 512, (2, 32))
    tok[:, 20] = 3  # CDLM-style: predict a masked position
    for target in (10, 77):
        res = integrated_gradients(model, tok, 20, target, steps=64)
        assert res.scores.shape == (2, 32)
        assert (res.delta.abs() > 1e-3).all()  # a non-trivial difference to explain
        assert (res.completeness_error < 0.05).all(), res.completeness_error
        assert res.scores[:, 20].abs().max() == 0  # a [MASK] input equals the baseline there
    if not model.is_diffusion:  # AR: tokens after the target position get exactly zero
        assert res.scores[:, 21:].abs().max() == 0


def test_ig_positions_subset_and_errors(tiny):
    model = tiny("cdlm")
    tok = torch.randint(4, 512, (1, 16))
    sel = torch.zeros(16, dtype=torch.bool)
    sel[:4] = True
    res = integrated_gradients(model, tok, 8, 5, steps=32, positions=sel)
    assert res.scores[0, 4:].abs().max() == 0
    with pytest.raises(ValueError, match="position"):
        integrated_gradients(model, tok, 16, 5)


@pytest.mark.parametrize("family", ["ar+concept", "cdlm+concept"])
@pytest.mark.parametrize("anneal", [False, True])
def test_chunk_contributions_sum_to_logits(family, anneal, tiny, chunked):
    from interpscale.models.types import PhaseSchedule

    model = tiny(family, n_concepts=40, topk_known=4)
    if anneal:  # top-k on both heads
        model.set_phase(PhaseSchedule("anneal", 10, 2))
    tok = torch.randint(4, 512, (2, 32))
    cid, _ = chunked(2, 32, 40)
    cid[:, -3:] = -1  # tokens in no chunk are ignored
    cc = concept_contributions(model, tok, cid)
    assert cc.known.shape == (2, 4, 40) and cc.unknown.shape == (2, 4, 120)
    torch.testing.assert_close(cc.known.sum(-1) + cc.unknown.sum(-1) + cc.residual, cc.total, atol=1e-5, rtol=0)
    # top-k: at most k known concepts are active per token, so at most 8·k per chunk
    assert (cc.known != 0).sum(-1).max() <= 8 * (32 if anneal else 4)
