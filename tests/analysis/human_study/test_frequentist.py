"""OrderedModel vs R clm on wine; crossed REML vs statsmodels MixedLM; Table 21 style contrasts."""

import numpy as np
import pytest

from interpscale.analysis.human_study import fit_gaussian_mixed, fit_ordinal, simulate_study

# R: clm(rating ~ temp + contact, data = wine)  (tests/data/wine/README.md)
R_CLM = {"temp[warm]": 2.5031, "contact[yes]": 1.5278}
R_CLM_SE = {"temp[warm]": 0.5287, "contact[yes]": 0.4766}
R_TAU = (-1.3444, 1.2508, 3.4669, 5.0064)


def test_ordinal_reproduces_r_clm_on_wine(wine):
    fit = fit_ordinal(wine, fixed=["temp", "contact"], reference={"temp": "cold", "contact": "no"})
    for k, v in R_CLM.items():
        assert fit.coef[k] == pytest.approx(v, abs=1e-3)
        assert fit.se[k] == pytest.approx(R_CLM_SE[k], abs=1e-3)
    np.testing.assert_allclose(fit.thresholds, R_TAU, atol=1e-3)  # tau scale, not log-increments
    assert fit.loglik == pytest.approx(-86.49, abs=5e-3)
    assert fit.converged and "temp[warm]" in fit.summary()
    probs = fit.predict(wine)
    assert probs.shape == (72, 5) and np.allclose(probs.sum(axis=1), 1)


def test_ordinal_recovers_simulated_contrast_and_direction():
    study = simulate_study(seed=4)
    fit = fit_ordinal(study.ratings, cluster="concept")
    # marginal (population-averaged) effects are attenuated vs the conditional truth, same sign
    assert 0.3 < fit.coef["candidate_type[llm]"] < study.truth.effects["llm"] + 0.3
    assert fit.coef["candidate_type[taxonomy]"] < fit.coef["candidate_type[embedding]"] < 0
    assert fit.cov_type == "cluster"


def test_ordinal_rejects_empty_level(wine):
    with pytest.raises(ValueError, match="no observations at level"):
        fit_ordinal(wine, fixed=["temp"], reference={"temp": "cold"}, levels=(1, 2, 3, 4, 5, 6))


def test_crossed_reml_matches_statsmodels_mixedlm():
    study = simulate_study(seed=2, n_rated_concepts=8, n_full_concepts=8, n_records=64)
    ours = fit_gaussian_mixed(study.ratings, random=("rater", "concept"))
    sm = fit_gaussian_mixed(study.ratings, random=("rater", "concept"), engine="statsmodels")
    for k in sm.coef:
        assert ours.coef[k] == pytest.approx(sm.coef[k], abs=2e-3)
        assert ours.se[k] == pytest.approx(sm.se[k], rel=2e-2)
    for g in ("rater", "concept"):
        assert ours.variance_components[g] == pytest.approx(sm.variance_components[g], rel=0.05, abs=2e-3)
    assert ours.residual_variance == pytest.approx(sm.residual_variance, rel=1e-2)


def test_gaussian_mixed_four_crossed_effects(small_study):
    fit = fit_gaussian_mixed(small_study.ratings)
    lo, hi = fit.ci["candidate_type[llm]"]
    assert lo < fit.coef["candidate_type[llm]"] < hi
    assert set(fit.variance_components) == {"rater", "concept", "context", "label"}
    assert fit.coef["candidate_type[taxonomy]"] < -0.8  # a distractor far below human labels
    assert fit.predict(small_study.ratings.head(3)).shape == (3,)
