import numpy as np
import pytest

from interpscale.scaling import fit_power_law


def test_exact_power_law():
    x = np.geomspace(1e18, 1e21, 6)
    fit = fit_power_law(x, 3e-4 * x**0.5, n_boot=100)
    assert fit.alpha == pytest.approx(0.5, abs=1e-12)
    assert fit.a == pytest.approx(3e-4, rel=1e-9)
    assert fit.r2 == pytest.approx(1.0)
    assert fit.predict(1e22) == pytest.approx(3e-4 * 1e11)
    assert fit.ci["alpha"][1] - fit.ci["alpha"][0] < 1e-10


def test_matches_numpy_polyfit_and_weights():
    rng = np.random.default_rng(0)
    x = np.geomspace(1, 1e4, 20)
    y = 2 * x**-0.3 * np.exp(rng.normal(0, 0.05, 20))
    slope, icpt = np.polyfit(np.log(x), np.log(y), 1)
    fit = fit_power_law(x, y, n_boot=0)
    assert fit.alpha == pytest.approx(slope) and fit.a == pytest.approx(np.exp(icpt))
    w = rng.uniform(0.5, 2, 20)
    slope_w, _ = np.polyfit(np.log(x), np.log(y), 1, w=np.sqrt(w))
    assert fit_power_law(x, y, weights=w, n_boot=0).alpha == pytest.approx(slope_w)


@pytest.mark.parametrize("bootstrap", ["residual", "pairs"])
def test_ci_coverage(bootstrap):
    x = np.geomspace(1e18, 1e21, 12)
    hits = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        y = 5.0 * x**-0.06 * np.exp(rng.normal(0, 0.01, x.size))
        fit = fit_power_law(x, y, n_boot=300, seed=seed, bootstrap=bootstrap)
        hits += fit.ci["alpha"][0] <= -0.06 <= fit.ci["alpha"][1]
    assert hits / 40 >= 0.8


def test_band_brackets_curve():
    rng = np.random.default_rng(1)
    x = np.geomspace(1, 100, 10)
    fit = fit_power_law(x, x**0.7 * np.exp(rng.normal(0, 0.1, 10)), n_boot=300)
    lo, hi = fit.band([1.0, 10.0, 1000.0])
    y = fit.predict([1.0, 10.0, 1000.0])
    assert np.all(lo < y) and np.all(y < hi)
    assert "alpha" in fit.summary() and fit.to_dict()["alpha"] == pytest.approx(fit.alpha)


@pytest.mark.parametrize(
    "x, y, match",
    [
        ([1, 2, 3], [1, 2], "mismatched lengths"),
        ([1, 0, 3], [1, 2, 3], "x: non-positive value 0.0 at row 1"),
        ([1, 2, 3], [1, np.inf, 3], "y: non-finite value inf at row 1"),
        ([1], [1], "at least 2 points"),
        ([2, 2, 2], [1, 2, 3], "all values are equal"),
    ],
)
def test_bad_input(x, y, match):
    with pytest.raises(ValueError, match=match):
        fit_power_law(x, y)
