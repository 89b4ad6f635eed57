"""Registered zoo families: protocol, analytic = built counts, checkpoints, reEtym model."""

import pytest
import torch

from interpscale.models import FAMILIES, build_model, flops_per_token, load_checkpoint, params_nonembedding, save_checkpoint
from interpscale.models.types import Batch, PhaseSchedule
from interpscale.models.zoo.reetym import ablate_signals, inject

SIMPLE = ["crate", "crate-gpt", "mxd", "reetym"]


def _embedding_numel(m):
    if hasattr(m, "etym"):
        return m.etym.recipe.numel() + m.etym.basis.numel()
    return m.wte.weight.numel() + m.wpe.weight.numel()


@pytest.mark.parametrize("family", SIMPLE)
def test_protocol_and_analytic_counts(family):
    torch.manual_seed(0)
    m = build_model(family, "nano")
    assert family in FAMILIES and not m.is_diffusion and m.config.family == family
    total = sum(p.numel() for p in m.parameters())
    assert m.params_nonembedding() == total - _embedding_numel(m) == params_nonembedding(family, "nano")
    assert m.flops_per_token(64) == flops_per_token(family, "nano", 64) > 6 * m.params_nonembedding()
    tokens = torch.randint(4, m.config.vocab_size, (2, 16))
    out = m(tokens)
    assert out.logits.shape == (2, 16, m.config.vocab_size)
    m.set_phase(PhaseSchedule("stable", 10))
    loss = m.loss(Batch(tokens), 0)
    loss.total.backward()
    assert loss.n_tokens == 2 * 15 and set(loss.parts) == {"lm"}
    assert m.generate(tokens[:, :4], 3).shape == (2, 7)


@pytest.mark.parametrize("family", SIMPLE)
def test_checkpoint_round_trip(family, tmp_path):
    torch.manual_seed(0)
    m = build_model(family, "nano", max_seq_len=32)
    path = save_checkpoint(m, tmp_path / "m.pt", extra={"step": 3})
    m2, extra = load_checkpoint(path)
    tokens = torch.randint(4, m.config.vocab_size, (1, 8))
    assert extra == {"step": 3} and type(m2) is type(m) and m2.config == m.config
    assert torch.allclose(m(tokens).logits, m2(tokens).logits)


def test_overrides_validated():
    with pytest.raises(ValueError, match="unknown override"):
        build_model("crate", "nano", no_such_knob=1)
    with pytest.raises(ValueError, match="unknown size"):
        params_nonembedding("reetym", "huge")


def test_reetym_small_built_count_and_tied_logits():
    # reEtyM-1-Small (Table 5): L=6, d=512, 8 heads, d_ff=1536, S=512, V=50,304 -> 46.47M
    m = build_model("reetym", "25M", n_layers=6, d_model=512, n_heads=8, n_kv_heads=8, mlp_ratio=3.0,
                    qk_norm=False, vocab_size=50304, max_seq_len=16)
    assert sum(p.numel() for p in m.parameters()) == 46_471_680
    tokens = torch.randint(4, 50304, (1, 5))
    out = m(tokens)
    ref = out.hidden @ (m.etym.recipe @ m.etym.basis).T  # h·(W_recipe·W_basis)ᵀ
    assert torch.allclose(out.logits, ref, atol=1e-4, rtol=1e-4)


def test_reetym_interventions_on_model():
    torch.manual_seed(0)
    m = build_model("reetym", "nano")
    tokens = torch.randint(4, m.config.vocab_size, (1, 8))
    base = m(tokens).logits
    with inject(m.backbone.blocks[0], m.etym.basis[3].detach(), alpha=50.0):
        assert not torch.allclose(m(tokens).logits, base)
    with ablate_signals(m.etym, [0, 1, 2]):
        s = m.signal_activations(tokens)
        assert s[..., :3].abs().max() == 0
    assert torch.allclose(m(tokens).logits, base)  # everything restored
    assert m.signal_activations(tokens, layers=True).shape == (m.config.n_layers + 1, 1, 8, m.config.d_model)


@pytest.mark.parametrize("family", ["reetym", "mxd"])
def test_trains_end_to_end(family, make_batches, trainer):
    torch.manual_seed(0)
    m = build_model(family, "nano", vocab_size=64, max_seq_len=32, **({"k": 8} if family == "mxd" else {}))
    losses = trainer(m, make_batches(10), 40, lr=1e-2)
    assert losses[-1] < losses[0] - 1.0
