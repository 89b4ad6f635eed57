"""MxD layer: factorised = explicit mixture, parameter matching against the paper's N."""

import pytest
import torch

from interpscale.models.zoo.mxd import (
    MxD, TopKSAE, TopKTranscoder, mxd_expert_count, mxd_params, n_params, topk_relu, transcoder_params,
)


def explicit_mixture(layer: MxD, x: torch.Tensor) -> torch.Tensor:
    """Σ_n a_n W_nᵀ z + b_out computed expert by expert: the reference for the factorised layer."""
    z, a = layer.hidden(x), layer.coefficients(x)
    out = torch.zeros(*x.shape[:-1], layer.d_out, dtype=x.dtype)
    for n in torch.nonzero(a.reshape(-1, layer.n_experts).abs().sum(0)).flatten():
        W_n = layer.expert_weights(n.view(1))[0]  # [H, O]
        out = out + a[..., n, None] * (z @ W_n)
    return out + layer.b_out


@pytest.mark.parametrize("glu", [False, True])
def test_factorised_forward_equals_explicit_mixture(glu):
    torch.manual_seed(0)
    layer = MxD(12, 10, 16, n_experts=40, k=5, glu=glu)
    torch.nn.init.normal_(layer.D)  # D starts at zero; give it content
    torch.nn.init.normal_(layer.b_out)
    x = torch.randn(3, 7, 12)
    out = layer(x)
    assert torch.allclose(out.y_hat, explicit_mixture(layer, x), atol=1e-5)
    assert ((out.codes > 0).sum(-1) <= 5).all() and (out.codes >= 0).all()


def test_topk_relu_keeps_k_largest_nonnegative():
    pre = torch.tensor([[3.0, -1.0, 2.0, 0.5, -4.0]])
    assert topk_relu(pre, 2).tolist() == [[3.0, 0.0, 2.0, 0.0, 0.0]]
    assert topk_relu(-pre.abs(), 2).abs().sum() == 0  # ReLU zeroes negative winners


@pytest.mark.parametrize(
    "dims, expected",
    [
        ((768, 768, 3072), 21_490),  # GPT-2 small, the paper's N
        ((1024, 1024, 4096), 28_658),  # Pythia-410m
        ((2048, 2048, 8192), 57_330),  # Pythia-1.4b
    ],
)
def test_expert_count_matches_paper_dims(dims, expected):
    assert mxd_expert_count(*dims) == expected


def test_parameter_matching_is_exact_up_to_biases():
    I, H = 48, 192
    N = mxd_expert_count(I, I, H, tc_width=32 * I)
    tc = transcoder_params(I, I, 32 * I)
    mxd = mxd_params(I, I, H, N)
    # the paper's matching ignores the two encoders' biases (H_TC vs H) and rounds N
    assert abs(mxd - tc) <= (32 * I - H) + (I + I + 1)
    assert n_params(MxD(I, I, H, N, 4)) == mxd
    assert n_params(TopKTranscoder(I, I, 32 * I, 4)) == tc
    assert n_params(TopKTranscoder(I, I, 32 * I, 4, skip=True)) == transcoder_params(I, I, 32 * I, skip=True)


def test_normalised_rank_full_for_generic_weights_and_drops_with_zero_columns():
    torch.manual_seed(0)
    layer = MxD(8, 6, 10, n_experts=20, k=3)
    torch.nn.init.normal_(layer.D)
    assert layer.normalised_expert_rank() == pytest.approx(1.0)
    with torch.no_grad():
        layer.C[:, :3] = 0.0  # every expert loses 3 of its 6 output columns
    assert layer.normalised_expert_rank() == pytest.approx(0.5)


def test_sae_reconstructs_and_bad_k_rejected():
    sae = TopKSAE(8, 32, 4)
    out = sae(torch.randn(5, 8))
    assert out.y_hat.shape == (5, 8) and ((out.codes > 0).sum(-1) <= 4).all()
    with pytest.raises(ValueError, match="k=0"):
        MxD(4, 4, 4, 10, 0)
    with pytest.raises(ValueError, match="too small"):
        mxd_expert_count(8, 8, 64, tc_width=16)
