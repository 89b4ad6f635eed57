"""Maximum-likelihood cumulative-link mixed model: R clmm on wine, exact checks of the
Laplace / quadrature engine, and coverage on simulated crossed designs with known truth."""

import numpy as np
import pandas as pd
import pytest
from scipy import integrate
from scipy.special import expit

from interpscale.analysis.human_study import compare, fit_ordinal, simulate_study
from interpscale.analysis.human_study.clmm import _Problem
from interpscale.analysis.human_study.design import build_design, parse_random

WINE_KW = dict(fixed=["temp", "contact"], reference={"temp": "cold", "contact": "no"})
# R: clmm(rating ~ temp + contact + (1|judge), data = wine)  (tests/data/wine/README.md)
R_CLMM = {"temp[warm]": 3.0630, "contact[yes]": 1.8349}
R_CLMM_SE = {"temp[warm]": 0.5954, "contact[yes]": 0.5125}
R_CLMM_TAU = (-1.6237, 1.5134, 4.2285, 6.0888)


@pytest.fixture(scope="module")
def wine_clm(wine):
    return fit_ordinal(wine, **WINE_KW)


@pytest.fixture(scope="module")
def wine_clmm(wine):
    return fit_ordinal(wine, random=("judge",), **WINE_KW)


def test_laplace_reproduces_r_clmm_on_wine(wine_clmm):
    fit = wine_clmm
    for k, v in R_CLMM.items():
        assert fit.coef[k] == pytest.approx(v, abs=1e-3)
        assert fit.se[k] == pytest.approx(R_CLMM_SE[k], abs=1e-3)
    np.testing.assert_allclose(fit.thresholds, R_CLMM_TAU, atol=1e-3)
    assert fit.random_variance["judge"] == pytest.approx(1.279, abs=1e-3)
    assert fit.random_sd["judge"] == pytest.approx(1.131, abs=1e-3)
    assert fit.loglik == pytest.approx(-81.57, abs=5e-3)
    assert fit.aic == pytest.approx(-2 * fit.loglik + 2 * 7)  # 4 thresholds, 2 betas, 1 SD
    assert fit.converged and fit.method == "Laplace" and not fit.warnings
    assert fit.formula == "rating ~ temp + contact + (1|judge)"
    text = fit.summary()
    assert "judge" in text and "Laplace" in text and "1.2795" in text
    # conditional modes (R ranef): nine judges, shrunk, centred near zero
    modes = fit.random_effects["judge"]
    assert len(modes) == 9 and abs(np.mean(list(modes.values()))) < 0.2
    assert all(0 < s < fit.random_sd["judge"] for s in fit.random_effects_sd["judge"].values())


def test_likelihood_ratio_test_judge_effect(wine_clm, wine_clmm):
    # R anova(clm, clmm): LR = 2 (-81.57 + 86.49) = 9.84 on 1 df
    t = wine_clmm.lr_test(wine_clm)
    assert t["statistic"] == pytest.approx(9.84, abs=0.03) and t["df"] == 1
    assert t["p_value"] == pytest.approx(0.0017, abs=2e-4)
    assert t["p_value_boundary"] == pytest.approx(t["p_value"] / 2)
    table = compare(wine_clmm, wine_clm)  # either order: sorted by size
    assert list(table["n_params"]) == [6, 7]
    assert np.isnan(table["LR_stat"][0]) and table["LR_stat"][1] == pytest.approx(t["statistic"])
    with pytest.raises(ValueError, match="not nested"):
        wine_clmm.lr_test(wine_clmm)


def test_agq_matches_brute_force_integral(wine):
    """nAGQ: one node is the Laplace fit; 15 nodes reproduce the exact marginal likelihood
    (per-judge numerical integration) at the estimates."""
    lap = fit_ordinal(wine, random="judge", **WINE_KW)
    one = fit_ordinal(wine, random="judge", nagq=1, **WINE_KW)
    assert one.loglik == lap.loglik
    agq = fit_ordinal(wine, random="judge", nagq=15, **WINE_KW)
    assert agq.method == "AGQ(15)" and agq.converged
    assert abs(agq.coef["temp[warm]"] - lap.coef["temp[warm]"]) < 0.01  # Laplace is accurate here
    beta = np.array(list(agq.coef.values()))
    tau = np.concatenate([[-np.inf], agq.thresholds, [np.inf]])
    sd = agq.random_sd["judge"]
    d = build_design(wine, response="rating", random=["judge"], **WINE_KW)
    eta = d.X @ beta
    codes = d.groups["judge"][0]
    exact = 0.0
    for j in np.unique(codes):
        rows = codes == j

        def integrand(u, rows=rows):
            e = eta[rows] + sd * u
            p = expit(tau[d.y[rows] + 1] - e) - expit(tau[d.y[rows]] - e)
            return np.prod(p) * np.exp(-u * u / 2) / np.sqrt(2 * np.pi)

        exact += np.log(integrate.quad(integrand, -12, 12, epsabs=1e-14, epsrel=1e-12)[0])
    assert agq.loglik == pytest.approx(exact, abs=1e-6)
    with pytest.raises(ValueError, match="exactly one grouping factor"):
        fit_ordinal(wine, random="judge,bottle", nagq=5, **WINE_KW)


def test_laplace_gradient_is_exact():
    """The implicit-function gradient of the crossed Laplace objective vs central differences."""
    import torch

    study = simulate_study(seed=3, n_rated_concepts=6, n_full_concepts=6, n_records=48)
    d = build_design(study.ratings, response="rating", fixed=["candidate_type"], random=["rater", "concept"],
                     reference={"candidate_type": "human"})
    for link in ("logit", "probit"):
        prob = _Problem(d.y, d.X, [c for c, _ in d.groups.values()], 5, link, 1)
        theta = [torch.tensor(v, dtype=torch.float64) for v in
                 ([-2.0, -1.0, 0.0, 1.5], [-1.0, -2.5, 0.7, -2.0], [0.6, 0.9])]
        _, grads = prob.nll(*theta, grad=True)
        for block, g in zip(range(3), grads):
            for j in range(len(g)):
                hi = [t.clone() for t in theta]
                lo = [t.clone() for t in theta]
                hi[block][j] += 1e-5
                lo[block][j] -= 1e-5
                fd = (prob.nll(*hi, grad=False)[0] - prob.nll(*lo, grad=False)[0]) / 2e-5
                assert g[j] == pytest.approx(fd, rel=1e-5, abs=1e-5), (link, block, j)


def test_crossed_laplace_covers_synthetic_truth():
    """24 simulated crossed designs (8 raters x 12 concepts, rater and concept intercepts):
    the 95% Wald interval of the LLM effect covers the truth in >= 20, estimates unbiased."""
    sd = {"rater": 0.6, "concept": 0.8, "context": 0.0, "label": 0.0}
    base = simulate_study(seed=7, n_rated_concepts=12, n_full_concepts=12, n_records=96, sd=sd, coherence_link=0.0)
    truth = base.truth.effects["llm"]
    from interpscale.analysis.human_study import resimulate

    est, covered, sds = [], [], []
    for seed in range(24):
        data = resimulate(base.ratings, base.truth, seed=seed)
        data = data[data["candidate_type"] != "filler"]  # 4 filler ratings: separation, not the point here
        fit = fit_ordinal(data, random="rater,concept")
        lo, hi = fit.ci["candidate_type[llm]"]
        covered.append(lo <= truth <= hi)
        est.append(fit.coef["candidate_type[llm]"])
        sds.append([fit.random_sd["rater"], fit.random_sd["concept"]])
    assert sum(covered) >= 20, covered
    assert abs(np.mean(est) - truth) < 0.15
    mean_sd = np.mean(sds, axis=0)
    assert 0.3 < mean_sd[0] < 0.9 and 0.55 < mean_sd[1] < 1.05  # truth 0.6 / 0.8 (8 / 12 levels)


def test_probit_link_recovers_truth_and_level():
    rng = np.random.default_rng(0)
    n_g, per = 40, 20
    g = np.repeat(np.arange(n_g), per)
    x = rng.integers(0, 2, n_g * per)
    u = 0.7 * rng.standard_normal(n_g)
    latent = 1.0 * x + u[g] + rng.standard_normal(n_g * per)  # probit: N(0, 1) error
    y = np.searchsorted([-1.0, 0.0, 1.0, 2.0], latent) + 1
    data = pd.DataFrame({"rating": y, "x": np.where(x, "b", "a"), "grp": g})
    fit = fit_ordinal(data, fixed=["x"], reference={"x": "a"}, random="grp", link="probit")
    assert abs(fit.coef["x[b]"] - 1.0) < 3 * fit.se["x[b]"]
    np.testing.assert_allclose(fit.thresholds, [-1.0, 0.0, 1.0, 2.0], atol=0.35)
    assert 0.45 < fit.random_sd["grp"] < 1.0 and fit.odds_ratio == {}
    narrow = fit_ordinal(data, fixed=["x"], reference={"x": "a"}, random="grp", link="probit", level=0.9)
    half = lambda f: (f.ci["x[b]"][1] - f.ci["x[b]"][0]) / 2  # noqa: E731
    assert half(narrow) / half(fit) == pytest.approx(1.6449 / 1.9600, rel=1e-3)
    assert "90% Wald" in narrow.summary() and "5.0%" in narrow.summary()


def test_predictions_zero_conditional_marginal(wine_clmm, wine):
    rows = pd.DataFrame({"temp": ["cold", "warm"], "contact": ["no", "yes"], "judge": ["1", "7"]})
    zero = wine_clmm.predict(rows)
    cond = wine_clmm.predict(rows, kind="conditional")
    marg = wine_clmm.predict(rows, kind="marginal")
    for p in (zero, cond, marg):
        assert p.shape == (2, 5) and np.allclose(p.sum(1), 1)
    # judge 1 rates above average, judge 7 below: conditional shifts mass accordingly
    assert cond[0, 4] + cond[0, 3] > zero[0, 4] + zero[0, 3] and cond[1, 4] < zero[1, 4]
    # population average = Monte Carlo average over u ~ N(0, sd^2)
    u = wine_clmm.random_sd["judge"] * np.random.default_rng(1).standard_normal(40_000)
    beta = np.array(list(wine_clmm.coef.values()))
    from interpscale.analysis.human_study.design import category_probs

    eta = np.array([[0.0, 0.0], [1.0, 1.0]]) @ beta
    mc = category_probs(eta[None, :] + u[:, None], np.asarray(wine_clmm.thresholds)).mean(0)
    np.testing.assert_allclose(marg, mc, atol=4e-3)
    assert marg[0, 0] < zero[0, 0] or marg[0, 4] > zero[0, 4]  # averaging flattens the extremes
    with pytest.raises(ValueError, match="kind"):
        wine_clmm.predict(rows, kind="typical")


def test_random_term_parsing_and_errors(wine):
    assert parse_random("rater, concept") == {"rater": (), "concept": ()}
    assert parse_random(["(1|rater)", "candidate_type|concept"]) == {"rater": (), "concept": ("candidate_type",)}
    with pytest.raises(ValueError, match="appears twice"):
        parse_random("rater,1|rater")
    with pytest.raises(ValueError, match="only in the Bayesian model"):
        fit_ordinal(wine, random="temp|judge", **WINE_KW)
    with pytest.raises(ValueError, match="cluster"):
        fit_ordinal(wine, random="judge", cluster="judge", **WINE_KW)
    with pytest.raises(ValueError, match="link"):
        fit_ordinal(wine, random="judge", link="cauchit", **WINE_KW)
    with pytest.raises(ValueError, match="level"):
        fit_ordinal(wine, level=95, **WINE_KW)
    with pytest.raises(ValueError, match="missing column"):
        fit_ordinal(wine, random="taster", **WINE_KW)


def test_crossed_wine_judge_and_bottle(wine, wine_clmm):
    """Two crossed factors on wine (bottle nested in temp x contact): fits, and the LR test
    of the bottle term is tiny (its variance is near zero given the fixed effects)."""
    fit = fit_ordinal(wine, random="judge,bottle", **WINE_KW)
    assert set(fit.random_sd) == {"judge", "bottle"} and fit.n_params == 8
    assert fit.loglik >= wine_clmm.loglik - 1e-6  # a superset model cannot fit worse
    assert fit.random_sd["judge"] == pytest.approx(wine_clmm.random_sd["judge"], abs=0.1)
    assert fit.lr_test(wine_clmm)["p_value"] > 0.2
