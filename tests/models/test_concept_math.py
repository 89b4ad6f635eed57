"""The concept module's pieces against their straightforward definitions (values and gradients):
top-k composition (Eq. 7), the chunk BCE (Eqs. 9-10), the independence loss (Eqs. 13-14)."""

import pytest
import torch

from interpscale.models.concept import compose, concept_loss, independence_loss
from interpscale.models.types import PhaseSchedule


@pytest.mark.parametrize("k", [None, 1, 7, 40])
def test_compose_equals_dense_definition(k):
    g = torch.Generator().manual_seed(0 if k is None else k)
    logits = torch.randn(3, 10, 40, generator=g, dtype=torch.float64, requires_grad=True)
    emb = torch.randn(40, 6, generator=g, dtype=torch.float64, requires_grad=True)
    out, sel = compose(logits, emb, k)
    # definition: σ of every logit, zero outside the k largest, times E
    act = torch.sigmoid(logits)
    if k is not None and k < 40:
        kth = logits.topk(k, -1).values[..., -1:]
        act = act * (logits >= kth)
        assert sel[1].shape == (3, 10, k)
    ref = act @ emb
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    w = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad(out, (logits, emb), w), torch.autograd.grad(ref, (logits, emb), w)):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def _concept_loss_reference(logits, cid, labels, valid):
    """Eqs. 9-10 chunk by chunk: k^chunk = 1 − Π_t (1 − σ(f_t)), BCE summed over concepts."""
    losses = []
    for b in range(logits.size(0)):
        for c in range(labels.size(1)):
            at = (cid[b] == c) & valid[b]
            if not at.any():
                continue
            k_chunk = 1 - (1 - torch.sigmoid(logits[b, at])).prod(0)
            y = labels[b, c]
            losses.append(-(y * k_chunk.log() + (1 - y) * (1 - k_chunk).log()).sum())
    return torch.stack(losses).mean(), len(losses)


def test_concept_loss_matches_per_chunk_definition():
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(2, 30, 12, generator=g, dtype=torch.float64, requires_grad=True)
    cid = torch.randint(-1, 6, (2, 30), generator=g)
    cid[1, cid[1] == 5] = 4  # chunk 5 of row 1 holds no token: not counted
    labels = (torch.rand(2, 6, 12, generator=g) < 0.3).double()
    valid = torch.rand(2, 30, generator=g) < 0.8
    got, n = concept_loss(logits, cid, labels, valid)
    ref, n_ref = _concept_loss_reference(logits, cid, labels, valid)
    assert int(n) == n_ref
    torch.testing.assert_close(got, ref, rtol=1e-6, atol=0)
    torch.testing.assert_close(torch.autograd.grad(got, logits)[0], torch.autograd.grad(ref, logits)[0],
                               rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("all_positions", [True, False])
def test_independence_loss_weighted_rows_and_coordinates(all_positions):
    g = torch.Generator().manual_seed(3)
    z = torch.randn(3, 20, 6, generator=g, dtype=torch.float64, requires_grad=True)
    basis = torch.randn(6, 10, generator=g, dtype=torch.float64, requires_grad=True)
    k_hat = torch.randn(3, 20, 10, generator=g, dtype=torch.float64)
    pos = torch.ones(3, 20, dtype=torch.bool) if all_positions else torch.rand(3, 20, generator=g) < 0.5
    # Eqs. 13-14 on the selected rows, written out
    psi, phi = (z @ basis)[pos], k_hat[pos]
    psi, phi = psi - psi.mean(0), phi - phi.mean(0)
    ref = (psi.T @ phi).pow(2).sum() / (100 * (psi.size(0) - 1))
    for got in (independence_loss(z, k_hat, pos, basis=basis), independence_loss(z @ basis, k_hat, pos)):
        torch.testing.assert_close(got, ref, rtol=1e-10, atol=0)
        for a, b in zip(torch.autograd.grad(got, (z, basis)), torch.autograd.grad(ref, (z, basis), retain_graph=True)):
            torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-12)
    one = torch.zeros(3, 20, dtype=torch.bool)
    one[0, 0] = True
    assert float(independence_loss(z, k_hat, one, basis=basis).detach()) == 0.0  # fewer than two rows


@pytest.mark.parametrize("phase", ["stable", "anneal"])
def test_sparse_acts_reproduce_the_composition(phase, tiny):
    """The zero-filled activations of the selection, times K (or U), give k̂ (or û) exactly."""
    model = tiny("ar+concept", n_concepts=16, topk_known=3).eval()
    model.set_phase(PhaseSchedule(phase, 100, 50))
    out = model(torch.randint(4, 512, (2, 16)))
    k, u = out.parts.sparse_acts()
    assert int((k != 0).sum(-1).max()) == (32 if phase == "anneal" else 3) or phase == "anneal"
    cm = model.concept
    torch.testing.assert_close(k @ cm.known_emb, out.parts.known_pred, atol=1e-6, rtol=0)
    torch.testing.assert_close(u @ cm.unknown_matrix(), out.parts.unknown_pred, atol=1e-6, rtol=0)
    if phase == "anneal":
        assert int((u != 0).sum(-1).max()) == 128 or model.config.n_unknown <= 128
