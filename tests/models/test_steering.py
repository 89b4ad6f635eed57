"""Steering (Eqs. 18-21) and steering training (Eqs. 31-33)."""

import pytest
import torch

from interpscale.models.steering import (
    Steering, alignment, calibrate_gamma, concept_direction, steer_state, steering_training_loss,
)


def _steered(model, tok, steer, positions):
    st = steer_state(model, steer)
    out = model.run(tok, steer_vec=st.vec, steer_mask=positions, steer_layer=st.layer)
    logits = out.logits
    if st.logit_penalty is not None:
        logits = logits - st.logit_penalty * positions.unsqueeze(-1)
    return out, logits, st


@pytest.mark.parametrize("family", ["ar+concept", "cdlm+concept"])
def test_gamma_calibration_gives_peak_shift_tau_at_final_layer(family, tiny):
    model = tiny(family).eval()
    tok = torch.randint(4, 512, (2, 16))
    pos = torch.ones(2, 16, dtype=torch.bool)
    base = model.run(tok).logits
    _, logits, st = _steered(model, tok, Steering((3,), tau=2.5, layer=model.config.n_layers), pos)
    # injected into h^(L) only: the logit shift is exactly γ·W e_c, whose max is τ (Eq. 19)
    shift = logits - base
    assert shift.max(-1).values.sub(2.5).abs().max() < 1e-4
    e = concept_direction(model, [3])
    assert st.gamma == pytest.approx(calibrate_gamma(model, e, 2.5))
    assert float(e.norm()) == pytest.approx(1.0)


@pytest.mark.parametrize("family", ["ar+concept", "cdlm+concept"])
@pytest.mark.parametrize("layer", [0, 1, 2])
def test_amplification_raises_target_activation_and_aligned_logits(family, layer, tiny):
    model = tiny(family, seed=2).eval()
    tok = torch.randint(4, 512, (2, 16))
    pos = torch.zeros(2, 16, dtype=torch.bool)
    pos[:, 8:] = True  # "masked" positions
    base = model.run(tok)
    for c in (0, 5):
        out, logits, _ = _steered(model, tok, Steering((c,), tau=3.0, layer=layer), pos)
        a = alignment(model, concept_direction(model, [c]))
        top = a.topk(5).indices
        assert (out.known_act[..., c][pos] > base.known_act[..., c][pos]).all()
        assert (logits[pos][:, top] > base.logits[pos][:, top]).float().mean() > 0.9
        assert torch.equal(out.known_act[~pos], base.known_act[~pos]) or model.is_diffusion


@pytest.mark.parametrize("inject", [False, True])
def test_suppression_never_raises_anti_aligned_logits(inject, tiny):
    model = tiny("cdlm+concept", seed=3).eval()
    tok = torch.randint(4, 512, (2, 16))
    pos = torch.ones(2, 16, dtype=torch.bool)
    base = model.run(tok).logits
    steer = Steering((1, 4), suppress=True, strength=5.0, suppress_inject=inject, layer=model.config.n_layers)
    _, logits, st = _steered(model, tok, steer, pos)
    a = alignment(model, concept_direction(model, [1, 4]))
    anti, aligned = a <= 0, a > 0
    assert (logits[..., aligned] < base[..., aligned]).all()  # aligned tokens suppressed
    if not inject:  # Eq. 21 alone: anti-aligned logits exactly unchanged
        assert torch.equal(logits[..., anti], base[..., anti])
    assert (logits[..., anti] <= base[..., anti] + 1e-6).all() or inject
    # naive subtraction (no ReLU gate) would have raised them
    naive = base - 5.0 * a
    assert (naive[..., anti] > base[..., anti]).any()


def test_steering_errors(tiny):
    with pytest.raises(ValueError, match="no concept module"):
        steer_state(tiny("ar"), Steering((0,)))
    model = tiny("ar+concept")
    with pytest.raises(ValueError, match="out of range"):
        steer_state(model, Steering((99,)))
    with pytest.raises(ValueError, match="layer"):
        steer_state(model, Steering((0,), layer=9))
    with pytest.raises(ValueError, match="at least one"):
        Steering(())


def test_steering_training_losses_decrease(tiny):
    model = tiny("cdlm+concept", seed=4)
    tok = torch.randint(4, 512, (4, 32))
    attributed = torch.zeros_like(tok, dtype=torch.bool)
    attributed[:, 4:20] = True
    lifted = torch.tensor([10, 11, 12])
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    hist = []
    for step in range(30):
        torch.manual_seed(step)
        total, parts = steering_training_loss(model, tok, 2, attributed, lifted, gamma=1.0)
        opt.zero_grad()
        total.backward()
        opt.step()
        hist.append(parts)
    assert hist[-1]["respond"] < 0.5 * hist[0]["respond"]
    assert hist[-1]["express"] < 0.8 * hist[0]["express"]
