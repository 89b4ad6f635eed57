import math

import numpy as np
import pytest
from interpscale.scaling import ScalingFitWarning, epoch_grid, fit_chinchilla
from interpscale.scaling.chinchilla import _HuberLSE

# Epoch AI replication (Besiroglu et al. 2024) of Hoffmann et al.'s Approach 3, data README
EPOCH = dict(objective=0.0010182740, L_inf=1.81724, A_P=477.84, A_D=2143.86, alpha=0.347313, beta=0.367183)
EPOCH_CI95 = dict(L_inf=(1.769, 1.871), alpha=(0.317, 0.373), beta=(0.331, 0.415))


def test_epoch_grid_is_the_published_grid():
    g = epoch_grid()
    assert g.shape == (4500, 5)
    assert sorted(set(g[:, 0])) == [0, 5, 10, 15, 20, 25]
    assert sorted(set(g[:, 2])) == [-1, -0.5, 0, 0.5, 1]
    assert sorted(set(g[:, 3])) == [0, 0.5, 1, 1.5, 2]


def test_epoch_replication(epoch_fit):
    f = epoch_fit
    assert f.converged and f.n == 240 and f.n_starts == 4500
    assert f.objective <= 0.0010182741
    for k in ("L_inf", "alpha", "beta"):
        assert abs(getattr(f, k) - EPOCH[k]) < 1e-3, k
    for k in ("A_P", "A_D"):
        assert abs(getattr(f, k) / EPOCH[k] - 1) < 0.03, k
    assert f.alpha_D == pytest.approx(f.alpha / (f.alpha + f.beta))
    assert len(f.best_start) == 5 and 0 <= f.best_start_index < 4500


def test_epoch_pairs_bootstrap_matches_published_widths(epoch_fit, epoch_arrays):
    N, D, L = epoch_arrays
    f = fit_chinchilla(N, D, L, grid=epoch_fit.theta[None, :], n_boot=400, bootstrap="pairs", level=0.95, seed=1)
    assert f.objective == pytest.approx(epoch_fit.objective, rel=1e-9)
    assert f.n_boot_ok >= 396
    for k, (lo, hi) in EPOCH_CI95.items():
        a, b = f.ci[k]
        assert a < getattr(f, k) < b
        width, pub = b - a, hi - lo
        assert 0.6 * pub < width < 1.6 * pub, (k, f.ci[k])


def test_epoch_residual_bootstrap_brackets_estimate(epoch_fit, epoch_arrays):
    N, D, L = epoch_arrays
    f = fit_chinchilla(N, D, L, grid=epoch_fit.theta[None, :], n_boot=300, seed=2)
    for k in ("L_inf", "A_P", "A_D", "alpha", "beta", "alpha_D"):
        lo, hi = f.ci[k]
        assert lo < getattr(f, k) < hi, k
    # band of the fitted surface brackets the fit and has positive width
    lo, hi = f.band([1e9, 1e10], [1e10, 1e11])
    mid = f.predict([1e9, 1e10], [1e10, 1e11])
    assert np.all(lo < mid) and np.all(mid < hi)


def test_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    n = 25
    lP, lD = rng.uniform(18, 24, n), rng.uniform(20, 26, n)
    Y = rng.normal(1.0, 0.1, n)
    W = rng.integers(0, 3, (3, n)).astype(float)
    for w in (None, W):
        obj = _HuberLSE(lP, lD, Y, w, 0.05)
        Z = np.column_stack([rng.normal(0, 1, (3, 3)), rng.uniform(0.1, 0.5, (3, 2))])
        rows = np.arange(3)
        _, g = obj(Z, rows)
        for j in range(5):
            E = np.zeros(5)
            E[j] = 1e-6
            num = (obj(Z + E, rows)[0] - obj(Z - E, rows)[0]) / 2e-6
            np.testing.assert_allclose(g[:, j], num, rtol=1e-5, atol=1e-8)


def test_recovers_known_law_and_ci_coverage(synth):
    hits = {k: 0 for k in ("L_inf", "alpha", "beta")}
    n_seeds = 20
    for seed in range(n_seeds):
        df, truth = synth.chinchilla_grid(seed=seed, noise=0.01)
        f = fit_chinchilla(df.params, df.tokens, df.loss, grid="coarse", n_boot=200, seed=seed)
        assert f.converged
        assert abs(f.alpha - truth["alpha"]) < 0.06 and abs(f.beta - truth["beta"]) < 0.06
        assert abs(f.L_inf - truth["L_inf"]) < 0.15
        for k in hits:
            lo, hi = f.ci[k]
            hits[k] += lo <= truth[k] <= hi
    for k, h in hits.items():
        assert h / n_seeds >= 0.8, (k, h)


def test_compute_optimal_allocation_minimises_loss(epoch_fit):
    f = epoch_fit
    C = 5.76e23  # Chinchilla's budget
    P, D = f.optimal_allocation(C)
    assert 6 * P * D == pytest.approx(C)
    Ps = P * np.geomspace(0.5, 2, 41)
    Ls = f.predict(Ps, C / (6 * Ps))
    assert np.argmin(Ls) == 20
    assert f.predict_optimal(C) == pytest.approx(Ls[20])


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(params=[1e8, np.nan] + [1e9] * 6), "params: non-finite value nan at row 1"),
        (dict(loss=[3.0, -1.0] + [2.5] * 6), "loss: non-positive value -1.0 at row 1"),
        (dict(tokens=[1e9, np.inf] + [1e10] * 6), "tokens: non-finite"),
        (dict(params=[1e8] * 3), "mismatched lengths"),
    ],
)
def test_bad_input_names_the_problem(kw, match):
    base = dict(params=np.geomspace(1e8, 1e10, 8), tokens=np.geomspace(1e11, 1e9, 8), loss=np.linspace(3, 2.5, 8))
    base.update(kw)
    with pytest.raises(ValueError, match=match):
        fit_chinchilla(base["params"], base["tokens"], base["loss"], grid="coarse", n_boot=0)


def test_too_few_points_and_duplicates():
    with pytest.raises(ValueError, match="at least 6 points"):
        fit_chinchilla([1e8, 1e9, 1e10], [1e9, 1e10, 1e11], [3, 2.8, 2.6], n_boot=0)
    P = np.geomspace(1e8, 1e10, 7)
    D = np.geomspace(1e11, 1e9, 7)
    L = np.linspace(3, 2.5, 7)
    with pytest.raises(ValueError, match="duplicate rows 2 and 7"):
        fit_chinchilla(np.r_[P, P[2]], np.r_[D, D[2]], np.r_[L, L[2]], grid="coarse", n_boot=0)


def test_non_moving_fit_is_flagged(synth):
    df, _ = synth.chinchilla_grid(seed=0)
    start = np.array([[6.0, 7.0, 0.5, 0.3, 0.3]])
    with pytest.warns(ScalingFitWarning) as rec:
        f = fit_chinchilla(df.params, df.tokens, df.loss, grid=start, n_boot=0, max_iter=0)
    assert any("never left its starting point" in str(w.message) for w in rec)
    assert not f.converged
    assert np.allclose([f.alpha, f.beta], [0.3, 0.3])


def test_unconverged_fit_is_flagged(synth):
    df, _ = synth.chinchilla_grid(seed=0)
    with pytest.warns(ScalingFitWarning, match="no start converged"):
        f = fit_chinchilla(df.params, df.tokens, df.loss, grid="coarse", n_boot=0, max_iter=3)
    assert not f.converged and f.warnings
    assert math.isfinite(f.objective)


def test_to_dict_and_summary(epoch_fit):
    d = epoch_fit.to_dict()
    assert d["alpha_D"] == pytest.approx(epoch_fit.alpha_D)
    assert "boot" not in d
    s = epoch_fit.summary()
    assert "L_inf" in s and "alpha" in s and "objective" in s


def test_collapsed_asymptote_is_flagged(synth, epoch_fit):
    # losses with no irreducible term (E = 0): L_inf is not identified and must be said so
    df, _ = synth.chinchilla_grid(E=0.0, seed=1, noise=0.002)
    f = fit_chinchilla(df.params, df.tokens, df.loss, grid="coarse", n_boot=0)
    assert f.L_inf < 0.01 * df.loss.min()
    assert any("not identified" in w for w in f.warnings)
    assert not any("not identified" in w for w in epoch_fit.warnings)
