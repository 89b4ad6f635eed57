import numpy as np
import pytest

from interpscale.scaling import METRICS, ScalingFitWarning, fit_bounded

C = np.repeat(np.geomspace(1e19, 3e20, 6), 5) * np.tile(np.linspace(0.9, 1.1, 5), 6)


def _data(e, A, beta, sign, noise, seed):
    rng = np.random.default_rng(seed)
    return e + sign * A * C**-beta + rng.normal(0, noise, C.size)


def test_metric_registry_matches_paper():
    assert METRICS == {
        "concept_loss": ("lower", 0.0),
        "concept_independence": ("lower", 0.0),
        "concept_contribution": ("higher", 1.0),
        "known_concept_alignment": ("higher", 5.0),
    }


def test_noise_free_recovery_both_directions():
    m = 0.85 - 2e3 * C**-0.2
    fit = fit_bounded(C, m, name="concept_contribution", n_boot=0)
    assert fit.direction == "higher" and fit.bound == 1.0 and not fit.e_at_bound
    assert fit.e == pytest.approx(0.85, abs=1e-6)
    assert fit.beta == pytest.approx(0.2, rel=1e-4)
    assert fit.A == pytest.approx(2e3, rel=1e-3)
    assert fit.r2 == pytest.approx(1.0)
    m = 1.3 + 5e4 * C**-0.28
    fit = fit_bounded(C, m, name="concept_independence", n_boot=0)
    assert (fit.e, fit.beta) == (pytest.approx(1.3, abs=1e-6), pytest.approx(0.28, rel=1e-4))
    np.testing.assert_allclose(fit.predict(7.6e22), 1.3 + 5e4 * 7.6e22**-0.28, rtol=1e-5)


def test_ci_coverage_and_recovery():
    hits = {"e": 0, "beta": 0}
    n = 25
    for seed in range(n):
        m = _data(3.9, 3e5, 0.3, -1, 0.03, seed)
        fit = fit_bounded(C, m, name="known_concept_alignment", n_boot=300, seed=seed)
        assert fit.converged
        assert fit.e == pytest.approx(3.9, abs=0.3)
        hits["e"] += fit.ci["e"][0] <= 3.9 <= fit.ci["e"][1]
        hits["beta"] += fit.ci["beta"][0] <= 0.3 <= fit.ci["beta"][1]
    assert hits["e"] / n >= 0.8 and hits["beta"] / n >= 0.8, hits


def test_asymptote_pinned_to_bound_is_flagged():
    # linear-looking decline of a loss that would extrapolate below zero -> e pinned at 0
    m = np.clip(0.02 - 0.004 * np.log10(C / 1e19), 1e-4, None) + np.random.default_rng(0).normal(0, 1e-4, C.size)
    m = np.abs(m)
    fit = fit_bounded(C, m, name="concept_loss", n_boot=200)
    assert fit.e == 0.0 and fit.e_at_bound
    assert any("bound" in w for w in fit.warnings)
    assert fit.ci["e"][0] >= 0.0  # bootstrap respects the bound too
    assert fit.predict(1e30) >= 0.0
    free = fit_bounded(C, m, direction="lower", bound=None, n_boot=0)
    assert free.e < 0  # without the bound the asymptote goes negative


def test_flat_metric_is_not_converged():
    m = np.random.default_rng(0).normal(0.5, 0.01, C.size)
    m = m - 0.01 * np.log(C / C.min())  # worsening with compute for a higher-is-better metric
    with pytest.warns(ScalingFitWarning):
        fit = fit_bounded(C, m, name="concept_contribution", n_boot=0)
    assert not fit.converged and fit.warnings


def test_band_and_serialisation():
    fit = fit_bounded(C, _data(0.002, 50.0, 0.1, 1, 1e-4, 0), name="concept_loss", n_boot=300)
    lo, hi = fit.band(np.array([1e19, 7.6e22]))
    y = fit.predict(np.array([1e19, 7.6e22]))
    assert np.all(lo <= y + 1e-12) and np.all(y <= hi + 1e-12)
    d = fit.to_dict()
    assert set(d["ci"]) == {"e", "A", "beta"} and d["metric"] == "concept_loss"
    assert "beta" in fit.summary()


def test_bad_input():
    with pytest.raises(ValueError, match="direction"):
        fit_bounded(C, np.ones(C.size), direction="up")
    with pytest.raises(ValueError, match="beyond the bound 1.0"):
        fit_bounded(C, np.full(C.size, 1.2), name="concept_contribution")
    with pytest.raises(ValueError, match="non-finite value nan at row 0"):
        fit_bounded(C, np.r_[np.nan, np.ones(C.size - 1)], name="concept_loss")
    with pytest.raises(ValueError, match="at least 4 points"):
        fit_bounded(C[:3], [1, 2, 3], direction="lower")
    with pytest.raises(ValueError, match="duplicate rows 0 and 30"):
        fit_bounded(np.r_[C, C[0]], np.r_[np.linspace(1, 0.5, C.size), 1.0], direction="lower")


def test_prediction_interval_covers_new_observations():
    rng = np.random.default_rng(7)
    C = np.repeat(np.geomspace(1e18, 1e20, 6), 4)
    true = lambda c: 0.9 - 3e3 * c**-0.2  # noqa: E731  (higher is better, bound 1)
    hits = n = 0
    for seed in range(6):
        m = true(C) + rng.normal(0, 0.01, C.size)
        f = fit_bounded(C, m, name="concept_contribution", n_boot=200, seed=seed)
        new_C = np.array([2e20, 3e20])
        lo, hi = f.predict_interval(new_C)
        blo, bhi = f.band(new_C)
        assert np.all(lo < blo) and np.all(bhi < hi) and np.all(hi <= 1.0)
        obs = true(new_C)[None, :] + rng.normal(0, 0.01, (20, 2))
        hits += ((lo <= obs) & (obs <= hi)).sum()
        n += obs.size
    assert 0.8 <= hits / n <= 0.99, hits / n
