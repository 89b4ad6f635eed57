import numpy as np
import pandas as pd
import pytest

from interpscale.scaling import fit_isoflop

# Table 6 (AR, CDLM, AR+Concept, CDLM+Concept) alpha_P / alpha_L
TABLE6 = [(0.528, -0.060), (0.632, -0.053), (0.621, -0.070), (0.503, -0.072)]


@pytest.mark.parametrize("alpha_P, alpha_L", TABLE6)
def test_recovers_table6_exponents(synth, alpha_P, alpha_L):
    df, truth = synth.isoflop_grid(alpha_P, alpha_L, seed=1, noise=0.002)
    fit = fit_isoflop(df, n_boot=300, seed=0)
    assert fit.converged and fit.slices["used"].all()
    assert fit.alpha_P == pytest.approx(alpha_P, abs=0.03)
    assert fit.alpha_L == pytest.approx(alpha_L, abs=0.002)
    assert fit.a_L == pytest.approx(truth["a_L"], rel=0.05)
    lo, hi = fit.ci["alpha_P"]
    assert lo < fit.alpha_P < hi
    # per-slice minima and curvature (Eq. 25) are recovered
    Ps = truth["a_P"] * fit.slices["compute"] ** alpha_P
    np.testing.assert_allclose(fit.slices["P_star"], Ps, rtol=0.15)
    np.testing.assert_allclose(fit.slices["curvature"], 0.06, rtol=0.3)


def test_noise_free_parabolas_are_exact(synth):
    df, truth = synth.isoflop_grid(0.55, -0.06, noise=0.0)
    fit = fit_isoflop(df, window=None, n_boot=0)
    assert fit.alpha_P == pytest.approx(0.55, abs=1e-8)
    assert fit.alpha_L == pytest.approx(-0.06, abs=1e-10)
    assert fit.power_P.r2 == pytest.approx(1.0)
    P, L = fit.predict(1e21)
    assert P == pytest.approx(truth["a_P"] * 1e21**0.55, rel=1e-6)
    # the slice parabola of Eq. 25 reproduces the noise-free data
    s = df[df.slice_flops == 1e19]
    np.testing.assert_allclose(fit.parabola(1e19, s.params), s.loss, atol=1e-10)


def test_ci_coverage_over_seeds(synth):
    n, hits_P, hits_L = 25, 0, 0
    for seed in range(n):
        df, _ = synth.isoflop_grid(0.528, -0.060, seed=100 + seed, noise=0.004)
        fit = fit_isoflop(df, n_boot=300, seed=seed)
        hits_P += fit.ci["alpha_P"][0] <= 0.528 <= fit.ci["alpha_P"][1]
        hits_L += fit.ci["alpha_L"][0] <= -0.060 <= fit.ci["alpha_L"][1]
    assert hits_P / n >= 0.8 and hits_L / n >= 0.8, (hits_P, hits_L)


def test_window_rule_uses_points_around_observed_minimum(synth):
    df, _ = synth.isoflop_grid(0.55, -0.06, sizes=9, noise=0.0)
    fit = fit_isoflop(df, window=5, n_boot=0)
    assert (fit.slices["n_points"] == 9).all() and (fit.slices["n_window"] == 5).all()
    few = df.groupby("slice_flops").head(4)
    fit4 = fit_isoflop(few, window=5, n_boot=0, exclude_flagged=False)
    assert (fit4.slices["n_window"] == 4).all()


def test_window_rule_reduces_bias_on_non_parabolic_slices():
    # A Chinchilla surface is not a parabola in log P far from the optimum; with one fixed
    # set of model sizes for every slice the whole-slice parabola is biased, the window is not.
    E, A, B, al, be = 1.8, 400.0, 2000.0, 0.34, 0.37
    rows = [
        dict(slice_flops=C, params=P, loss=E + A / P**al + B / (C / (6 * P)) ** be)
        for C in (1e18, 6e18, 3e19, 1e20, 6e20)
        for P in np.geomspace(3e6, 3e10, 13)
    ]
    df = pd.DataFrame(rows)
    truth = be / (al + be)
    whole = fit_isoflop(df, window=None, n_boot=0)
    win = fit_isoflop(df, window=5, n_boot=0)
    assert abs(whole.alpha_P - truth) > 0.005
    assert abs(win.alpha_P - truth) < 0.002


def test_flags_edge_and_nonconvex_slices(synth):
    df, _ = synth.isoflop_grid(0.55, -0.06, noise=0.0)
    # slice 1e20: keep only sizes below the optimum -> minimum at the edge
    edge = df[(df.slice_flops != 1e20) | (df.params < df[df.slice_flops == 1e20].params.median())]
    fit = fit_isoflop(edge, n_boot=0)
    row = fit.slices.set_index("compute").loc[1e20]
    assert not row["used"] and "edge" in row["reason"]
    assert any("1e+20" in w for w in fit.warnings)
    # slice 6e18: flip the losses -> concave parabola
    bad = df.copy()
    m = bad.slice_flops == 6e18
    bad.loc[m, "loss"] = 6.0 - bad.loc[m, "loss"]
    fit = fit_isoflop(bad, n_boot=0)
    row = fit.slices.set_index("compute").loc[6e18]
    assert not row["convex"] and not row["used"]
    assert len(fit.slices) == 4 and fit.slices["used"].sum() == 3
    kept = fit_isoflop(edge, n_boot=0, exclude_flagged=False)
    assert kept.slices["used"].all()


def test_bad_input(synth):
    df, _ = synth.isoflop_grid(0.55, -0.06)
    with pytest.raises(ValueError, match="single slice"):
        fit_isoflop(df[df.slice_flops == 1e19])
    d = df.copy()
    d.loc[3, "loss"] = np.nan
    with pytest.raises(ValueError, match="loss: non-finite value nan at row 3"):
        fit_isoflop(d)
    d = df.copy()
    d.loc[5, "params"] = -1
    with pytest.raises(ValueError, match="params: non-positive value -1.0 at row 5"):
        fit_isoflop(d)
    # a row repeating another's every column is one measurement (issue 42): merged, said, the fit unchanged
    twice = fit_isoflop(pd.concat([df, df.iloc[[2]]], ignore_index=True), n_boot=0)
    assert twice.power_P.alpha == fit_isoflop(df, n_boot=0).power_P.alpha
    assert "1 row(s) repeat another row's run and step, or every column (row 28 repeats row 2)" in twice.warnings[0]
    with pytest.raises(ValueError, match="missing column 'loss'"):
        fit_isoflop(df.drop(columns="loss"))
    with pytest.raises(ValueError, match="usable slice"):
        fit_isoflop(df.groupby("slice_flops").head(2))


def test_bands_and_serialisation(synth):
    df, _ = synth.isoflop_grid(0.55, -0.06, noise=0.003)
    fit = fit_isoflop(df, n_boot=200)
    C = np.array([1e19, 1e21])
    lo, hi = fit.band_L(C)
    _, L = fit.predict(C)
    assert np.all(lo <= L) and np.all(L <= hi) and np.all(hi - lo > 0)
    assert (hi - lo)[1] > (hi - lo)[0]  # wider when extrapolating
    s = fit.slices
    assert (s.P_star_lo < s.P_star).all() and (s.P_star < s.P_star_hi).all()
    d = fit.to_dict()
    assert d["alpha_P"] == pytest.approx(fit.alpha_P) and len(d["slices"]) == 4
    assert "alpha_P" in fit.summary()


def test_pairs_bootstrap_option(synth):
    df, _ = synth.isoflop_grid(0.528, -0.060, seed=5, noise=0.003)
    res = fit_isoflop(df, n_boot=400, seed=1)
    pairs = fit_isoflop(df, n_boot=400, seed=1, bootstrap="pairs")
    assert pairs.alpha_P == res.alpha_P  # same point estimate
    lo, hi = pairs.ci["alpha_P"]
    assert lo < pairs.alpha_P < hi
    w_res = res.ci["alpha_P"][1] - res.ci["alpha_P"][0]
    assert hi - lo > w_res  # resampling 5-point windows is far less stable than the residual bootstrap
    # with 5-point windows many per-slice resamples degenerate: kept (censored), counted, flagged
    assert pairs.n_boot_ok == 400 and 0.1 < pairs.degenerate_fraction < 0.9 and pairs.flagged
    assert any("degenerate" in w and "flagged" in w for w in pairs.warnings)
    assert "FLAGGED" in pairs.summary()
    assert res.degenerate_fraction == 0 and not res.flagged
    with pytest.raises(ValueError, match="bootstrap must be"):
        fit_isoflop(df, n_boot=10, bootstrap="wild")


def test_percentile_bound_contains_every_completion():
    from interpscale.scaling.bootstrap import percentile_ci

    rng = np.random.default_rng(0)
    s = rng.normal(size=400)
    s[rng.choice(400, 12, replace=False)] = np.nan  # 3% of replicates lost
    lo, hi = percentile_ci(s, 0.9, missing="bound")
    assert np.isfinite([lo, hi]).all()
    for fill in (-1e9, 1e9, 0.0):
        for _ in range(5):
            full = np.where(np.isnan(s), rng.normal(fill, 1.0, 400), s)
            a, b = percentile_ci(full, 0.9)
            assert lo <= a + 1e-12 and b <= hi + 1e-12
    s[:30] = np.nan  # > 5% lost: no finite upper/lower limit can be claimed
    assert percentile_ci(s, 0.9, missing="bound") == (-np.inf, np.inf)


def test_degenerate_replicates_do_not_narrow_the_interval(synth):
    """Issue 17 acceptance: slices degenerate in some replicates (pairs resamples of 5-point
    windows); the interval kept honest is no narrower than a reference that drops nothing --
    the spread of the estimator over fresh data sets from the known law -- nor than the old
    interval that dropped the degenerate replicates."""
    ref = []
    for s in range(40):
        d, _ = synth.isoflop_grid(0.528, -0.060, seed=1000 + s, noise=0.004)
        ref.append(fit_isoflop(d, n_boot=0).alpha_P)
    ref_width = float(np.subtract(*np.quantile(ref, [0.95, 0.05])))
    for s in range(3):
        df, _ = synth.isoflop_grid(0.528, -0.060, seed=2000 + s, noise=0.004)
        kept = fit_isoflop(df, n_boot=300, seed=s, bootstrap="pairs")
        dropped = fit_isoflop(df, n_boot=300, seed=s, bootstrap="pairs", degenerate="drop")
        assert 0.05 < kept.degenerate_fraction < 0.95
        w_kept = kept.ci["alpha_P"][1] - kept.ci["alpha_P"][0]
        w_drop = dropped.ci["alpha_P"][1] - dropped.ci["alpha_P"][0]
        assert w_kept >= ref_width and w_kept >= w_drop
        assert dropped.n_boot_ok < 300 <= kept.n_boot_ok
        assert (kept.slices["degenerate_frac"] > 0).any()


def test_cluster_bootstrap_resamples_whole_runs(synth):
    df, _ = synth.isoflop_grid(0.528, -0.060, seed=5, noise=0.003, sizes=9)
    # each "run" contributes the same size to every slice (one row per slice): 9 runs
    df = df.assign(run_id=df.groupby("slice_flops").cumcount())
    fit = fit_isoflop(df, n_boot=300, seed=0, bootstrap="cluster", groups=df["run_id"])
    assert fit.bootstrap == "cluster" and fit.alpha_P == fit_isoflop(df, n_boot=0).alpha_P
    lo, hi = fit.ci["alpha_P"]
    assert lo <= fit.alpha_P <= hi and hi > lo
    with pytest.raises(ValueError, match="needs groups"):
        fit_isoflop(df, n_boot=10, bootstrap="cluster")


def test_akima_minima_recover_the_law(synth):
    df, truth = synth.isoflop_grid(0.528, -0.060, seed=1, noise=0.001, sizes=9)
    fit = fit_isoflop(df, n_boot=200, minimum="akima")
    par = fit_isoflop(df, n_boot=0)
    assert fit.minimum == "akima" and fit.slices["used"].all()
    assert fit.alpha_P == pytest.approx(0.528, abs=0.05) and fit.alpha_L == pytest.approx(-0.060, abs=0.003)
    assert fit.alpha_P != par.alpha_P  # a different estimator of the slice minima
    lo, hi = fit.ci["alpha_L"]
    assert lo < fit.alpha_L < hi
    # Akima interpolates: on noise-free data its minimum is within a grid step of the truth
    d0, _ = synth.isoflop_grid(0.528, -0.060, noise=0.0, sizes=21, span=3.0)
    f0 = fit_isoflop(d0, n_boot=0, minimum="akima", window=None)
    np.testing.assert_allclose(f0.slices["L_star"], truth["a_L"] * f0.slices["compute"] ** -0.060, rtol=2e-4)


def test_prediction_interval_wider_than_confidence_band(synth):
    df, _ = synth.isoflop_grid(0.528, -0.060, seed=2, noise=0.003)
    fit = fit_isoflop(df, n_boot=300)
    C = np.array([3e20])
    blo, bhi = fit.band_L(C)
    pi = fit.predict_interval(C)
    plo, phi = pi["L_star"]
    assert plo[0] < blo[0] and bhi[0] < phi[0]
    assert fit.noise_sd["L"] > 0 and fit.noise_sd["P"] > 0


def test_akima_merges_nearly_equal_sizes():
    from interpscale.scaling.isoflop import akima_minimum

    x = np.log([1e8, 2e8, 2.01e8, 4e8, 8e8])  # two sizes 0.5% apart with different losses
    y = 0.05 * (x - np.log(3e8)) ** 2 + 2.5
    y[2] += 0.02
    xs, Ls, inner = akima_minimum(x, y[None, :])
    assert inner[0] and abs(Ls[0] - 2.5) < 0.02 and abs(xs[0] - np.log(3e8)) < 0.3
    xs1, Ls1, inner1 = akima_minimum(np.log([1e8, 1.001e8]), np.array([[3.0, 2.9]]))
    assert not inner1[0] and Ls1[0] == pytest.approx(2.95)  # one size left: no minimum to read
