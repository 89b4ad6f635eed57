"""reEtym: tied logits, init variance, Table 5 parameter counts, signal statistics."""

import pytest
import torch

from interpscale.models.zoo.reetym import (
    REETYM_TABLE5, EtymEmbedding, ablate_signals, analogy_topk, basis_edit, effective_rank, recipe_edit, reetym_params,
    signal_statistics, threshold_activation_rate,
)


def test_tied_logits_equal_product():
    torch.manual_seed(0)
    emb = EtymEmbedding(50, 16)
    h = torch.randn(2, 3, 16)
    ref = h @ (emb.recipe @ emb.basis).T
    assert torch.allclose(emb.logits(h), ref, atol=1e-6)
    assert torch.allclose(emb(torch.tensor([[5, 7]])), (emb.recipe @ emb.basis)[[5, 7]][None], atol=1e-6)


def test_init_gives_product_std_002():
    torch.manual_seed(0)
    emb = EtymEmbedding(4000, 256)
    assert emb.vocab_matrix().std().item() == pytest.approx(0.02, rel=0.03)  # App. A.1, Eq. 6


@pytest.mark.parametrize("name", list(REETYM_TABLE5))
def test_table5_parameter_counts(name):
    L, d, heads, kv, d_ff, S, published = REETYM_TABLE5[name]
    total = reetym_params(L, d, heads, kv, d_ff, S)["total"]
    assert round(total / 1e6, 2) == pytest.approx(published / 1e6, abs=1e-9)


def test_gpt2_new_baseline_and_basis_overhead():
    # §2.1: GPT-2-New is 514.01M; reEtyM-1-Big adds exactly W_basis (S·d = 1.05M)
    big = reetym_params(36, 1024, 16, 16, 2816, 1024)
    gpt2_new = big["total"] - 1024 * 1024
    assert round(gpt2_new / 1e6, 2) == 514.01


def test_interventions_restore_and_ablation_removes_signal():
    torch.manual_seed(0)
    emb = EtymEmbedding(30, 8)
    R0, B0 = emb.recipe.detach().clone(), emb.basis.detach().clone()
    with recipe_edit(emb, torch.ones(8), token_ids=[3]):
        assert torch.allclose(emb.recipe[3], R0[3] + 1) and torch.allclose(emb.recipe[4], R0[4])
    with basis_edit(emb, 2, torch.zeros(8)):
        assert emb.basis[2].abs().sum() == 0
    h = torch.randn(4, 8)
    with ablate_signals(emb, [0, 5]):
        s = emb.signals(h)
        assert s[:, [0, 5]].abs().sum() == 0
        assert torch.allclose(emb.logits(h), h @ (emb.recipe @ emb.basis).T, atol=1e-6)
    assert torch.equal(emb.recipe, R0) and torch.equal(emb.basis, B0)
    with pytest.raises(ValueError, match="out of range"):
        with ablate_signals(emb, [8]):
            pass


def test_statistics_against_known_matrices():
    # Gaussian control: P(|x| > E|x| + sd|x|) = 2(1 − Φ(1.4017)) ≈ 0.161
    g = torch.randn(3000, 64, generator=torch.Generator().manual_seed(0))
    assert threshold_activation_rate(g)[0] == pytest.approx(0.161, abs=0.01)
    assert effective_rank(torch.eye(10)) == pytest.approx(10.0)
    assert effective_rank(torch.diag(torch.tensor([1.0, 0, 0]))) == pytest.approx(1.0)
    # planted analogy: b − a + c = d exactly; operands excluded, so d must be found
    R = torch.randn(100, 16, generator=torch.Generator().manual_seed(1))
    R[3] = R[1] - R[0] + R[2]
    assert analogy_topk(R, [(0, 1, 2, 3)], k=1) == 1.0
    emb = EtymEmbedding(100, 16)
    with torch.no_grad():
        emb.recipe.copy_(R)
    stats = signal_statistics(emb, [(0, 1, 2, 3)], k=1, n_controls=4)
    assert stats["analogy_topk"].value == 1.0 and stats["analogy_topk"].control_mean < 0.5
    assert stats["effective_rank"].n_controls == 4 and stats["effective_rank"].control_sd > 0
