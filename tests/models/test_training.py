"""Overfitting a small batch, and each concept loss decreasing when trained alone."""

import pytest
import torch

from interpscale.models import FAMILIES
from interpscale.models.types import Batch, PhaseSchedule

STEERLING = ("ar", "cdlm", "ar+concept", "cdlm+concept")


def _eval_lm(model, batch, key="lm"):
    """LM loss on fixed masks (seeded), so start and end are measured the same way."""
    model.eval()
    with torch.no_grad():
        vals = []
        for s in range(4):
            torch.manual_seed(100 + s)
            vals.append(model.loss(batch, 0).parts[key])
    model.train()
    return sum(vals) / len(vals)


@pytest.mark.parametrize("family", STEERLING)
def test_tiny_model_overfits_a_small_batch(family, tiny, chunked):
    if family.startswith("cdlm"):
        # a masked position must locate itself through attention alone (no absolute
        # positions), which a 2-layer model learns slowly; short blocks, a larger init and
        # mask rates capped at 0.5 keep this under ~10 s
        over, T, steps = dict(block_size=4, init_std=0.1, t_max=0.5), 16, 300
    else:
        over, T, steps = {}, 32, 120
    if FAMILIES[family].is_concept:  # λ = 0.01 so the (irreducible at R < d) rec term and the
        over.update(lambda_concept=0.01, lambda_rec=0.01, lambda_indep=0.01)  # concept term don't swamp LM
    model = tiny(family, d_model=64, p_eps=0.0, p_cfg=0.0, **over)
    model.set_phase(PhaseSchedule("stable", max_steps=steps))
    tok = torch.randint(4, 512, (1, T))
    cid, lab = chunked(1, T, 8)
    batch = Batch(tok, cid, lab) if model.is_concept else Batch(tok)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3 if model.is_diffusion else 1e-2)
    first = _eval_lm(model, batch)
    for step in range(steps):
        out = model.loss(batch, step)
        opt.zero_grad()
        out.total.backward()
        opt.step()
    last = _eval_lm(model, batch)
    assert last < 0.1 * first, (first, last)


@pytest.mark.parametrize("family", ["ar+concept", "cdlm+concept"])
@pytest.mark.parametrize("term", ["concept", "rec", "indep"])
def test_each_concept_loss_decreases_alone(family, term, tiny, chunked):
    # only this term is optimised: the others have λ = 0 and the LM part is left out
    weights = {"lambda_concept": 0.0, "lambda_rec": 0.0, "lambda_indep": 0.0, f"lambda_{term}": 1.0}
    model = tiny(family, **weights)
    with torch.no_grad():  # embeddings at a trained-like scale, so the k̂–û covariance is not ~1e-13
        for p in (model.concept.known_emb, model.concept.unk_a, model.concept.unk_b):
            p.mul_(10.0)
    tok = torch.randint(4, 512, (4, 32))
    cid, lab = chunked(4, 32, 8)
    positions = torch.ones_like(tok, dtype=torch.bool)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    vals = []
    for step in range(40):
        out = model.run(tok, chunk_ids=cid, chunk_labels=lab, step=step)
        parts = {}
        loss = model._concept_losses(out.parts, cid, lab, positions, None, parts)
        opt.zero_grad()
        loss.backward()
        opt.step()
        vals.append(parts[term])
    assert vals[-1] < 0.7 * vals[0], vals[::8]


def test_two_term_independence_variant(tiny, chunked):
    model = tiny("cdlm+concept", indep_terms=2)
    cid, lab = chunked(2, 32, 8)
    out = model.loss(Batch(torch.randint(4, 512, (2, 32)), cid, lab), 0)
    assert out.parts["indep"] > 0 and torch.isfinite(out.total)
