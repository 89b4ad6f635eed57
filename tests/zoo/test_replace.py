"""MxD vs parameter-matched TopK transcoder replacing a trained zoo model's MLP."""

import pytest
import torch

from interpscale.models import build_model
from interpscale.models.zoo.replace import capture_io, find_mlp, override_output
from interpscale.orchestration.replacement import train_replacement


@pytest.fixture(scope="module")
def trained_gpt(make_batches, trainer):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model("crate-gpt", "micro", vocab_size=512, max_seq_len=32)
    train = make_batches(30, vocab=512)
    losses = trainer(model, train, 150)
    assert losses[-1] < losses[0] - 2.0
    return model, train, make_batches(4, vocab=512, seed=1)


def test_mxd_beats_parameter_matched_transcoder(trained_gpt):
    model, train, val = trained_gpt
    kw = dict(k=4, tc_width=1024, steps=300, batch_size=256, lr=3e-3, seed=0)
    mxd, r_mxd = train_replacement(model, 1, "mxd", train, val, **kw)
    tc, r_tc = train_replacement(model, 1, "transcoder", train, val, **kw)
    # parameter-matched within the biases the paper's formula ignores (N = 762 experts)
    assert r_mxd.n_units == 762 and abs(r_mxd.n_params - r_tc.n_params) / r_tc.n_params < 0.01
    assert r_mxd.nmse < r_tc.nmse  # measured: 0.064 vs 0.094
    for r in (r_mxd, r_tc):
        assert r.l0 == pytest.approx(4.0)
        assert r.ce_base < r.ce_zero_ablation and r.ce_swapped < r.ce_zero_ablation
        assert 0.0 <= r.dead_fraction < 1.0
    assert r_mxd.expert_rank == pytest.approx(1.0, abs=0.01) and r_tc.expert_rank is None


def test_swapped_ce_uses_the_sparse_layer(trained_gpt):
    model, train, val = trained_gpt
    mlp = find_mlp(model, 0)
    x, y = capture_io(model, mlp, val[:1])
    assert x.shape == (8 * 32, 64) and y.shape == (8 * 32, 64)
    base = model(val[0].tokens).logits
    with override_output(mlp, lambda inp, out: out):
        assert torch.allclose(model(val[0].tokens).logits, base)
    with override_output(mlp, lambda inp, out: torch.zeros_like(out)):
        assert not torch.allclose(model(val[0].tokens).logits, base)
    assert torch.allclose(model(val[0].tokens).logits, base)  # hook removed


@pytest.mark.parametrize("kind", ["skip_transcoder", "sae"])
def test_baselines_run_through_the_tool(trained_gpt, kind):
    model, train, val = trained_gpt
    layer, r = train_replacement(model, 0, kind, train, val, k=4, tc_width=256, steps=30, lr=3e-3)
    assert r.kind == kind and r.nmse < 1.0 and r.l0 <= 4.0


def test_bad_layer_rejected(trained_gpt):
    model, *_ = trained_gpt
    with pytest.raises(ValueError, match="out of range"):
        find_mlp(model, 7)


def test_swiglu_base_gets_the_glu_variant(make_batches, trainer):
    torch.manual_seed(0)
    ar = build_model("ar", "nano", vocab_size=64, max_seq_len=32)
    train, val = make_batches(8), make_batches(2, seed=1)
    trainer(ar, train, 40, lr=1e-2)
    layer, r = train_replacement(ar, 0, "mxd", train, val, k=4, tc_width=512, steps=100, lr=1e-3)
    assert layer.glu and layer.d_hidden == ar.config.mlp_hidden
    assert r.nmse < 0.5 and r.l0 == pytest.approx(4.0) and r.expert_rank is not None
