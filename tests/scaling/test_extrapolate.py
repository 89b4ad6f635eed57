import pytest

from interpscale.paper import STEERLING_8B_COMPUTE
from interpscale.scaling import extrapolate, fit_chinchilla, fit_isoflop


@pytest.fixture(scope="module")
def fits(synth):
    df, truth = synth.chinchilla_grid(seed=4, noise=0.003, sizes=9)
    joint = fit_chinchilla(df.params, df.tokens, df.loss, grid="coarse", n_boot=300, seed=0)
    iso = fit_isoflop(df, n_boot=300, seed=0)
    return joint, iso, truth


def _true_optimal_loss(t, C):
    G = (t["alpha"] * t["A_P"] / (t["beta"] * t["A_D"])) ** (1 / (t["alpha"] + t["beta"]))
    P = G * (C / 6) ** (t["beta"] / (t["alpha"] + t["beta"]))
    D = C / (6 * P)
    return t["L_inf"] + t["A_P"] / P ** t["alpha"] + t["A_D"] / D ** t["beta"]


def test_joint_form_beats_loglinear_far_out(fits):
    # the paper's point (§8.2.2): the log-linear L*(C) ignores the irreducible loss and
    # undershoots far beyond the data; the joint form does not
    joint, iso, t = fits
    truth = _true_optimal_loss(t, STEERLING_8B_COMPUTE)
    x = extrapolate(joint, iso, STEERLING_8B_COMPUTE, observed=truth)
    assert x.allocation == "compute-optimal"
    assert abs(x.joint_error) < 0.05
    assert x.loglinear < truth and abs(x.loglinear_error) > 3 * abs(x.joint_error)
    assert x.joint_ci[0] <= x.joint <= x.joint_ci[1]
    assert x.loglinear_ci[0] <= x.loglinear <= x.loglinear_ci[1]
    assert x.joint_error == pytest.approx(truth - x.joint)
    assert any("beyond" in w for w in x.warnings)
    d = x.to_dict()
    assert d["joint_error"] == pytest.approx(x.joint_error) and "observed" in x.summary()


def test_given_allocation(fits):
    joint, iso, t = fits
    P, D = 8e9, 1.35e12  # Steerling-8B
    x = extrapolate(joint, iso, 6 * P * D, params=P, tokens=D)
    assert x.allocation == "given" and x.joint == pytest.approx(float(joint.predict(P, D)))
    true = t["L_inf"] + t["A_P"] / P ** t["alpha"] + t["A_D"] / D ** t["beta"]
    assert x.joint == pytest.approx(true, abs=0.05)
    with pytest.raises(ValueError, match="both params and tokens"):
        extrapolate(joint, iso, 1e22, params=P)
    with pytest.raises(ValueError, match="compute must be positive"):
        extrapolate(joint, iso, -1.0)


def test_prediction_intervals_contain_confidence_intervals(fits):
    joint, iso, _ = fits
    x = extrapolate(joint, iso, STEERLING_8B_COMPUTE)
    for name in ("joint", "loglinear"):
        (clo, chi), (plo, phi) = x.ci[name], x.pi[name]
        assert plo < clo <= chi < phi, name  # PI = curve uncertainty + observation noise
    assert "PI [" in x.summary() and x.to_dict()["joint_pi"] == list(x.joint_pi)
