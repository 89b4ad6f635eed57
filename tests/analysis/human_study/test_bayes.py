"""Bayesian cumulative-link mixed model: R clmm on wine, coverage on simulated studies."""

import numpy as np
import pandas as pd
import pytest

from interpscale.analysis.human_study import OrdinalMixedResult, Priors, fit_ordinal_mixed
from interpscale.analysis.human_study.bayes import OrdinalMixedModel
from interpscale.analysis.human_study.simulate import resimulate

# R: clmm(rating ~ temp + contact + (1|judge), data = wine)  (Laplace)
R_CLMM = {"temp[warm]": 3.0630, "contact[yes]": 1.8349}
R_JUDGE_SD = 1.131


@pytest.fixture(scope="module")
def wine_model(wine) -> OrdinalMixedModel:
    return OrdinalMixedModel(wine, fixed=["temp", "contact"], random=["judge"],
                             reference={"temp": "cold", "contact": "no"}, priors=Priors.wide())


@pytest.fixture(scope="module")
def wine_fit(wine_model) -> OrdinalMixedResult:
    return wine_model.fit(draws=600, tune=600, chains=2, seed=1)


@pytest.mark.slow  # the wine fixture samples the full model
def test_wine_posterior_medians_within_one_sd_of_r_clmm(wine_fit):
    for k, v in R_CLMM.items():
        assert abs(wine_fit.coef[k] - v) < wine_fit.coef_sd[k], (k, wine_fit.coef[k])
    assert abs(wine_fit.random_sd["judge"] - R_JUDGE_SD) < wine_fit.random_sd_sd["judge"]
    # thresholds on the tau scale, ordered, near clmm's (-1.62, 1.51, 4.23, 6.09)
    assert np.all(np.diff(wine_fit.thresholds) > 0)
    np.testing.assert_allclose(wine_fit.thresholds, (-1.6237, 1.5134, 4.2285, 6.0888), atol=1.0)


def test_wine_result_object(wine_fit):
    k = "temp[warm]"
    assert wine_fit.odds_ratio[k] == pytest.approx(np.exp(wine_fit.coef[k]))
    lo, hi = wine_fit.odds_ratio_ci[k]
    assert lo < wine_fit.odds_ratio[k] < hi
    assert wine_fit.prob_positive[k] > 0.99
    d = wine_fit.to_dict()
    assert d["diagnostics"]["divergences"] == wine_fit.diagnostics.divergences
    assert "idata" not in d and "judge" in wine_fit.summary()
    assert wine_fit.draws("temp[warm]").shape == (1200,)
    p = wine_fit.predict(wine_fit_rows())
    assert p.shape == (2, 5) and np.allclose(p.sum(1), 1)
    assert p[1, 4] > p[0, 4]  # warm + contact rates higher than cold, no contact


def test_wine_level_loglik_timing_and_predictions(wine_fit, wine_model):
    d = wine_fit.diagnostics
    assert d.mass_matrix == "low-rank" and d.compile_seconds > 0 and d.sampling_seconds > 0
    ll = wine_fit.idata.log_likelihood["y"].values
    assert ll.shape == (2, 600, 72) and np.all(ll < 0)
    # pointwise log-likelihood by hand at one draw: log(F(tau_y - eta) - F(tau_{y-1} - eta))
    from scipy.special import expit

    post = wine_fit.idata.posterior.isel(chain=0, draw=5)
    X, y = wine_model.design.X, wine_model.design.y
    codes = wine_model.design.groups["judge"][0]
    eta = X @ post["beta"].values + float(post["sd_judge"]) * post["z_judge"].values[codes]
    tau = np.concatenate([[-np.inf], post["tau"].values, [np.inf]])
    np.testing.assert_allclose(ll[0, 5], np.log(expit(tau[y + 1] - eta) - expit(tau[y] - eta)), rtol=1e-9)
    assert np.isfinite(wine_fit.loo().elpd_loo) and np.isfinite(wine_fit.waic().elpd_waic)
    rows = pd.DataFrame({"temp": ["cold", "warm"], "contact": ["no", "yes"], "judge": ["1", "7"]})
    marg, cond = wine_fit.predict(rows, kind="marginal"), wine_fit.predict(rows, kind="conditional")
    assert np.allclose(marg.sum(1), 1) and np.allclose(cond.sum(1), 1)
    assert cond[1, 4] < wine_fit.predict(rows)[1, 4]  # judge 7 rates low
    refit = wine_model.fit(draws=60, tune=60, chains=2, seed=2, level=0.8, ess_min=0, mass_matrix="diag")
    assert refit.diagnostics.compile_seconds < 1 and refit.diagnostics.mass_matrix == "diag"
    b = refit.draws("temp[warm]")
    np.testing.assert_allclose(refit.ci["temp[warm]"], np.quantile(b, [0.1, 0.9]))
    assert "80% CrI" in refit.summary()
    with pytest.raises(ValueError, match="mass_matrix"):
        wine_model.fit(draws=10, tune=10, chains=1, mass_matrix="dense")


def test_random_slope_model_structure(wine):
    from interpscale.analysis.human_study import Priors as P

    m = OrdinalMixedModel(wine, fixed=["temp", "contact"], random="contact|judge,bottle",
                          reference={"temp": "cold", "contact": "no"})
    names = {v.name for v in m.model.free_RVs} | {v.name for v in m.model.deterministics}
    assert {"chol_judge", "u_judge", "sd_judge", "z_judge", "sd_bottle", "z_bottle"} <= names
    assert list(m.model.coords["judge_term"]) == ["(Intercept)", "contact[yes]"]
    with pytest.raises(ValueError, match="among the fixed effects"):
        OrdinalMixedModel(wine, fixed=["temp"], random="contact|judge", reference={"temp": "cold"})
    with pytest.raises(ValueError, match="positive"):
        P(sd_scale=-1.0)


def wine_fit_rows():
    import pandas as pd

    return pd.DataFrame({"temp": ["cold", "warm"], "contact": ["no", "yes"]})


def test_failed_diagnostics_are_warned(wine_model):
    # 2 chains x 20 draws cannot reach ESS 400: the result says so instead of passing silently
    fit = wine_model.fit(draws=20, tune=50, chains=2, seed=0)
    assert not fit.converged
    assert any("ESS" in w for w in fit.warnings)


@pytest.mark.slow  # 10 simulated studies, each sampled by NUTS
def test_credible_interval_covers_true_llm_effect(small_study):
    """Ten simulated studies on one design (refits reuse the compiled model): the 95% CrI
    for the LLM-vs-human log-odds ratio covers the truth in >= 90% of them."""
    model = OrdinalMixedModel(small_study.ratings)
    truth = small_study.truth.effects["llm"]
    covered, widths = [], []
    for seed in range(10):
        y = resimulate(small_study.ratings, small_study.truth, seed=100 + seed)["rating"]
        fit = model.fit(y, draws=400, tune=400, chains=2, seed=seed, ess_min=0)
        lo, hi = fit.ci["candidate_type[llm]"]
        covered.append(lo <= truth <= hi)
        widths.append(hi - lo)
        assert fit.diagnostics.divergences <= 2
    assert np.mean(covered) >= 0.9, covered
    assert np.median(widths) < 2.5  # informative, not a prior-width interval


def test_fit_ordinal_mixed_function_and_refit_validation(small_study):
    fit = fit_ordinal_mixed(small_study.ratings, random=("concept",), draws=150, tune=150, chains=2, seed=3)
    assert fit.coef["candidate_type[taxonomy]"] < 0 < fit.coef["candidate_type[llm]"]
    model = OrdinalMixedModel(small_study.ratings, random=("concept",))
    bad = small_study.ratings["rating"].to_numpy().copy()
    bad[3] = 7
    with pytest.raises(ValueError, match="rating"):
        model.fit(bad, draws=10, tune=10, chains=1)


def test_random_slopes_sample_and_predict(wine):
    """(contact | judge): correlated judge intercepts and contact slopes (LKJ), sampled."""
    m = OrdinalMixedModel(wine, fixed=["temp", "contact"], random="contact|judge",
                          reference={"temp": "cold", "contact": "no"})
    fit = m.fit(draws=150, tune=150, chains=2, seed=0, ess_min=0)
    assert set(fit.random_sd) == {"judge", "judge:contact[yes]"} and "sd_judge:contact[yes]" in fit.ci
    assert fit.idata.posterior["u_judge"].shape[2:] == (9, 2)
    for k, v in {"temp[warm]": 3.0630, "contact[yes]": 1.8349}.items():  # R clmm, intercepts only
        assert abs(fit.coef[k] - v) < 1.0
    assert fit.idata.log_likelihood["y"].shape == (2, 150, 72) and np.isfinite(fit.loo().elpd_loo)
    rows = pd.DataFrame({"temp": ["cold", "warm"], "contact": ["no", "yes"], "judge": ["1", "7"]})
    for kind in ("zero", "conditional", "marginal"):
        p = fit.predict(rows, kind=kind)
        assert p.shape == (2, 5) and np.allclose(p.sum(1), 1)
    assert "judge:contact[yes]" in fit.summary()
