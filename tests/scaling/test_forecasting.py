"""Forecast methods by name, the backtest-chosen default and calibrated intervals (issue 27)."""

import math

import numpy as np
import pandas as pd
import pytest

from interpscale.scaling import FORECAST_METHODS, ForecastLedger, ForecastMethod, ForecastOptions, register_method
from interpscale.scaling.forecast import (calibrate, choose_method, conformal_quantile, forecast_family,
                                             forecast_runs)


def test_methods_by_name_and_registration():
    assert {"joint", "isoflop-powerlaw", "isoflop-saturating"} <= set(FORECAST_METHODS)
    with pytest.raises(ValueError, match="already registered"):
        register_method(FORECAST_METHODS["joint"])
    m = ForecastMethod("test-const", "L = c", fit=lambda rows, o: float(rows[o.loss].mean()),
                       predict=lambda fit, C, o, P=None, D=None: (fit, 0.9 * fit, 1.1 * fit))
    register_method(m)
    try:
        assert FORECAST_METHODS["test-const"].interval(2.0, 1e20, ForecastOptions()) == (1.8, 2.2)
    finally:
        del FORECAST_METHODS["test-const"]


def test_calibration_grows_with_log_distance_beyond_the_tested_ratios():
    u = np.array([0.01, -0.02, 0.015, 0.012, -0.01])
    r = np.array([2.0, 3.0, 4.0, 6.0, 8.0])
    inside = calibrate(1.0, 1.0, 1.0, 4.0, u, r)[2]
    far = calibrate(1.0, 1.0, 1.0, 80.0, u, r)[2]
    # scores |u|/ln(max(r, 2)); the half-width is their conformal quantile times ln(ratio)
    q = np.max(np.abs(u) / np.log(np.maximum(r, 2)))  # n = 5 < 9: the small-n fallback, the largest score
    assert inside == pytest.approx(q * math.log(4)) and far == pytest.approx(q * math.log(80))
    lo, hi, m = calibrate(3.0, 2.99, 3.01, 80.0, u, r)
    assert m == pytest.approx(far) and lo < 2.99 and hi > 3.01
    assert hi == pytest.approx(3.0 * math.exp(m)) and lo == pytest.approx(3.0 * math.exp(-m))
    # the larger of the bootstrap and the conformal half-widths, not their quadrature sum
    wide = calibrate(3.0, 1.0, 9.0, 80.0, u, r)
    assert wide[:2] == pytest.approx((1.0, 9.0))
    assert calibrate(3.0, 2.9, 3.1, 10.0, [], []) == (2.9, 3.1, 0.0)  # no backtest: the bootstrap interval


def test_conformal_quantile_rank():
    s = np.arange(1.0, 20.0)  # n = 19: rank ceil(20 * 0.9) = 18
    assert conformal_quantile(s, 0.9) == 18.0
    assert conformal_quantile(s[:5], 0.9) == 5.0  # too few scores: the largest


def test_calibrated_interval_covers_about_level_of_synthetic_held_out_forecasts():
    """Exchangeable synthetic backtests: log errors sigma * d(r) * z (heavy-tailed z), the
    held-out target's error drawn alike at a larger ratio it never enters; the calibrated 90%
    intervals cover 90-95% of 3000 targets (conformal: >= level, <= level + 1/(n+1))."""
    rng = np.random.default_rng(0)
    covered = []
    for _ in range(3000):
        r = np.exp(rng.uniform(0.1, np.log(10.0), 30))
        u = 0.01 * np.log(np.maximum(r, 2)) * rng.standard_t(3, r.size)
        R = 100.0
        e = 0.01 * math.log(R) * rng.standard_t(3)
        lo, hi, _ = calibrate(1.0, 1.0, 1.0, R, u, r, 0.9)
        covered.append(lo <= math.exp(e) <= hi)
    assert 0.88 <= np.mean(covered) <= 0.95


def test_studentized_calibration_covers_about_level_of_synthetic_forecasts():
    """Known noise: a backtest refit's log error is u_i = s_i z_i with s_i its bootstrap spread
    (refits on fewer runs spread more), the held-out target's u = s_T z with the final fit's
    smaller s_T, its error never entering. Studentized 90% intervals cover 88-95% of 2000 targets
    and are narrower than the distance rule's, which is blind to s and over-covers; the signed
    variant follows a bias (observed above the forecast) to the upper side."""
    rng = np.random.default_rng(1)
    hits, m_stud, m_dist, signed = [], [], [], []
    for _ in range(2000):
        r = np.exp(rng.uniform(0.1, np.log(10.0), 30))
        s = 0.02 * rng.uniform(0.5, 2.0, r.size)
        z = rng.standard_normal(r.size + 1)
        e = 0.01 * z[-1]
        lo, hi, m = calibrate(1.0, 1.0, 1.0, 5.0, s * z[:-1], r, 0.9, spreads=s, spread=0.01)
        hits.append(lo <= math.exp(e) <= hi)
        m_stud.append(m)
        m_dist.append(calibrate(1.0, 1.0, 1.0, 5.0, s * z[:-1], r, 0.9)[2])
        lo, hi, _ = calibrate(1.0, 1.0, 1.0, 5.0, s * (z[:-1] + 1), r, 0.9, spreads=s, spread=0.01, signed=True)
        signed.append((lo <= math.exp(0.01 * (z[-1] + 1)) <= hi, math.log(hi), -math.log(lo)))
    assert 0.88 <= np.mean(hits) <= 0.95 and np.median(m_stud) < 0.5 * np.median(m_dist)
    cov, up, down = np.mean(signed, axis=0)
    assert 0.86 <= cov <= 0.95 and up > 2 * down
    # no positive spread at the target: the distance rule
    assert calibrate(1.0, 1.0, 1.0, 5.0, [0.01], [2.0], spreads=[0.01], spread=0.0)[2] == pytest.approx(
        0.01 / math.log(2) * math.log(5))


def test_studentized_interval_narrows_with_more_data():
    """The same 12 runs of Eq. 27 (1% log-normal noise) once and repeated 3 times with fresh
    noise: the final fit's bootstrap spread at a run 5.2x beyond them shrinks, and the studentized
    interval with it (the distance rule's width is set by the backtest's errors alone)."""
    rng = np.random.default_rng(0)
    width = []
    for reps in (1, 3):
        P = np.repeat(np.geomspace(1e7, 3e8, 12), reps)
        D = P * np.repeat(np.tile([5.0, 20.0, 80.0, 10.0], 3), reps)
        runs = pd.DataFrame(dict(params=P, tokens=D, loss=(1.8 + 400 / P**0.34 + 2000 / D**0.37)
                                 * np.exp(rng.normal(0, 0.01, P.size))))
        o = ForecastOptions(n_boot=40, k=6.0, calibration="studentized", backtest_boot=20)
        f = forecast_runs(runs, pd.DataFrame(dict(params=[1e9], tokens=[2e10])), method="joint", options=o)
        assert f["n_backtest"].iloc[0] > 0 and f["ratio"].iloc[0] == pytest.approx(5.16, rel=0.01)
        width.append(float(f["hi"].iloc[0] / f["lo"].iloc[0]))
    assert width[1] < width[0]


def test_default_chosen_by_backtest_and_user_override(synth):
    # a Chinchilla surface with an irreducible loss: the L*(C) power law (no E) misses, the
    # saturating envelope and the joint surface do not
    df, truth = synth.chinchilla_grid(seed=1, noise=0.003, slices=(1e18, 3e18, 1e19, 3e19, 1e20, 3e20))
    fc = forecast_family(df, 1e22, options=ForecastOptions(n_boot=40, k=6.0))
    assert set(fc.methods) == {"joint", "isoflop-powerlaw", "isoflop-saturating"}
    assert fc.chosen_by == "backtest" and fc.chosen != "isoflop-powerlaw"
    scored = {k: v.backtest_error for k, v in fc.methods.items() if v.backtest_error is not None}
    assert fc.chosen == min(scored, key=scored.get) and len(scored) >= 2
    assert fc.ratio == pytest.approx(1e22 / 3e20) and fc.max_tested_ratio > 1
    for v in fc.methods.values():  # calibration never narrows the curve's interval
        assert v.lo <= v.predicted <= v.hi and v.raw_lo <= v.predicted <= v.raw_hi
    assert "chosen by backtest" in fc.summary() and fc.to_dict()["chosen"] == fc.chosen
    user = forecast_family(df, 1e22, method="isoflop-powerlaw", options=ForecastOptions(n_boot=0, k=6.0))
    assert user.chosen == "isoflop-powerlaw" and user.chosen_by == "user"
    with pytest.raises(ValueError, match="unknown forecast method"):
        forecast_family(df, 1e22, method="nope")
    with pytest.raises(ValueError, match="needs IsoFLOP slices"):
        forecast_family(df, 1e22, method="isoflop-saturating", params=1e9, tokens=2e10)


def test_run_forecasts_and_ledger_keep_both_intervals(synth, tmp_path):
    df, truth = synth.chinchilla_grid(seed=2, noise=0.005)
    big = df[df["slice_flops"] == df["slice_flops"].max()]
    small = df.drop(big.index)
    f = forecast_runs(small, big, method="joint", options=ForecastOptions(n_boot=40, k=6.0))
    assert len(f) == len(big) and (f["ratio"] > 1).all() and (f["n_backtest"] > 0).all()
    assert ((f["lo"] <= f["predicted"]) & (f["predicted"] <= f["hi"])).all()
    assert f["abs_rel_error"].median() < 0.05
    assert (f["half_width"] <= f["width"]).all() and (f["raw_half_width"] <= f["raw_width"]).all()
    # the held-out observation is only scored: without it the intervals are the same
    blind = forecast_runs(small, big.drop(columns="loss"), method="joint", options=ForecastOptions(n_boot=40, k=6.0))
    np.testing.assert_allclose(blind[["lo", "hi", "raw_lo", "raw_hi"]], f[["lo", "hi", "raw_lo", "raw_hi"]])
    with pytest.raises(ValueError, match="loss-optimal"):
        forecast_runs(small, big, method="isoflop-powerlaw")
    ledger = ForecastLedger(tmp_path / "f.jsonl")
    r = f.iloc[0]
    fc = ledger.record(target_compute=6 * r.params * r.tokens, predicted=r.predicted, lo=r.lo, hi=r.hi,
                       raw_lo=r.raw_lo, raw_hi=r.raw_hi, method="joint", chosen_by="user", inputs_hash="x",
                       backtest={"joint": 1.2}, ratio=r.ratio)
    done = ledger.check(fc.id, r.observed)
    assert done.raw_lo == pytest.approx(r.raw_lo) and done.covered_raw == bool(r.covered_raw)
    assert "bootstrap" in done.summary() and "joint 1.20%" in done.summary()


def test_choose_method_compares_common_far_folds():
    rows = []
    for method, err in (("a", 0.01), ("b", 0.03)):
        for origin, ratio in ((1.0, 2.0), (1.0, 10.0), (2.0, 5.0)):
            rows.append(dict(method=method, origin=origin, compute=origin * ratio, ratio=ratio, params=None,
                             tokens=None, predicted=1.0, observed=1.0, log_error=err * np.log(ratio), status="ok"))
    name, score = choose_method(pd.DataFrame(rows), ["a", "b"])
    assert name == "a" and score["a"] < score["b"]


def test_method_without_target_compute_is_an_error(synth):
    from interpscale.scaling import fit_families

    df, _ = synth.chinchilla_grid(seed=3, noise=0.005)
    with pytest.raises(ValueError, match="method='joint' chooses the forecast method at target_compute"):
        fit_families(df.assign(family="ar"), method="joint")
    from interpscale.cli import main

    assert main(["fit", "families", "results.csv", "--out", "unused", "--method", "joint"]) == 2  # before any read
