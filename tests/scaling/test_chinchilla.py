import math

import numpy as np
import pytest
from interpscale.scaling import ScalingFitWarning, epoch_grid, fit_chinchilla
from interpscale.scaling.joint import HuberLSE

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
        obj = HuberLSE(lP, lD, Y, w, 0.05)
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


def test_L_inf_bound_binds_below_the_smallest_loss(synth):
    df, _ = synth.chinchilla_grid(seed=3, noise=0.005)
    i = int(df.loss.idxmin())
    df.loc[i, "loss"] = 1.70  # one low outlier below the true E = 1.8
    free = fit_chinchilla(df.params, df.tokens, df.loss, grid="coarse", n_boot=0)
    assert free.L_inf > 1.70  # the Huber fit ignores the outlier: L_inf above the smallest loss
    bnd = fit_chinchilla(df.params, df.tokens, df.loss, grid="coarse", n_boot=50, bound_L_inf=True)
    assert bnd.L_inf <= 1.70 + 1e-9 and bnd.L_inf_bounded and "L_inf <= min(loss)" in bnd.summary()
    assert all(np.exp(bnd.boot[:, 2]) <= 1.70 + 1e-9)
    assert bnd.objective >= free.objective - 1e-12


def test_overestimate_penalty_and_weights(synth):
    df, _ = synth.chinchilla_grid(seed=4, noise=0.02)
    base = fit_chinchilla(df.params, df.tokens, df.loss, grid="coarse", n_boot=0)
    asym = fit_chinchilla(df.params, df.tokens, df.loss, grid="coarse", n_boot=0, overestimate_penalty=5.0)
    r_base = np.log(base.predict(df.params, df.tokens) / df.loss)
    r_asym = np.log(asym.predict(df.params, df.tokens) / df.loss)
    assert (r_asym > 0).mean() < (r_base > 0).mean()  # fewer over-estimates when they cost more
    # integer weights are the same as repeating points
    w = np.where(np.arange(len(df)) % 3 == 0, 2.0, 1.0)
    wf = fit_chinchilla(df.params, df.tokens, df.loss, grid="coarse", n_boot=0, weights=w)
    rep = df.loc[df.index.repeat(w.astype(int))]
    jitter = np.where(rep.index.duplicated(), 1 + 1e-12, 1.0)  # duplicates are refused; perturb them
    rf = fit_chinchilla(rep.params * jitter, rep.tokens, rep.loss, grid="coarse", n_boot=0)
    assert wf.alpha == pytest.approx(rf.alpha, rel=1e-4) and wf.L_inf == pytest.approx(rf.L_inf, rel=1e-4)
    assert wf.weighted and not base.weighted
    with pytest.raises(ValueError, match="overestimate_penalty"):
        fit_chinchilla(df.params, df.tokens, df.loss, grid="coarse", n_boot=0, overestimate_penalty=0.5)
    with pytest.raises(ValueError, match="weights"):
        fit_chinchilla(df.params, df.tokens, df.loss, grid="coarse", n_boot=0, weights=-w)


def test_cluster_bootstrap_and_prediction_interval(synth):
    df, truth = synth.chinchilla_grid(seed=5, noise=0.01)
    runs = np.arange(len(df)) // 2  # two checkpoints per run
    with pytest.raises(ValueError, match="needs groups"):
        fit_chinchilla(df.params, df.tokens, df.loss, grid="coarse", n_boot=10, bootstrap="cluster")
    f = fit_chinchilla(df.params, df.tokens, df.loss, grid="coarse", n_boot=200, bootstrap="cluster", groups=runs)
    assert f.bootstrap == "cluster" and f.n_boot_ok >= 190
    lo, hi = f.ci["alpha"]
    assert lo < f.alpha < hi
    P, D = np.array([1e9, 3e9]), np.array([2e10, 6e10])
    blo, bhi = f.band(P, D)
    plo, phi = f.predict_interval(P, D)
    assert np.all(plo < blo) and np.all(bhi < phi)  # a prediction interval adds the noise
    olo, ohi = f.predict_interval_optimal(1e21)
    cl, ch = f.band_optimal(1e21)
    assert olo < cl <= ch < ohi


def test_theta_of_an_underflowed_coefficient_is_minus_inf_not_an_error():
    """A joint fit whose A_P underflowed to 0 (a simulated design table) has theta a = -inf: the
    design's warm starts drop it; math.log had raised 'math domain error' and ended a whole design."""
    import dataclasses

    import numpy as np

    from interpscale.scaling.joint import ChinchillaFit

    fit = ChinchillaFit(L_inf=1.5, A_P=0.0, A_D=400.0, alpha=0.3, beta=0.3, objective=0.0, n=10)
    theta = fit.theta
    assert theta[0] == -np.inf and np.isfinite(theta[1:]).all()
    assert dataclasses.replace(fit, A_P=400.0).theta[0] == np.log(400.0)
