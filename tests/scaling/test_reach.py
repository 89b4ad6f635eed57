"""Intervals far beyond the sweep (scaling.reach, docs/reach.md): the error-growth relation on
synthetic ground truth and on the public studies' forecasts, and the widening it gives the
calibrated interval beyond the largest ratio a backtest tested."""

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from interpscale.scaling import reach
from interpscale.scaling.forecast import calibrate

ERRORS = "scaling_public/reach_errors.csv"


def planted(rng, gamma, sigma, *, series=12, per=30, lo=1.2, hi=200.0, study="synthetic"):
    """Forecasts whose log errors are c_g d^gamma z and whose spreads are b_g d^sigma (lognormal
    jitter), d = ln(max(r, 2)), r log-uniform in [lo, hi]; c_g, b_g differ by series."""
    rows = []
    for g in range(series):
        r = np.exp(rng.uniform(math.log(lo), math.log(hi), per))
        d = reach.distance(r)
        c, b = math.exp(rng.normal(-4, 0.5)), math.exp(rng.normal(-4.5, 0.5))
        rows.append(pd.DataFrame({"study": f"{study}{g % 3}", "series": f"{study}{g}", "ratio": r,
                                  "log_error": c * d ** gamma * rng.standard_normal(per),
                                  "spread": b * d ** sigma * np.exp(0.1 * rng.standard_normal(per))}))
    return pd.concat(rows, ignore_index=True)


@pytest.mark.parametrize("gamma,sigma", [(1.0, 0.6), (0.5, 0.5), (1.5, 0.3)])
def test_planted_growth_is_recovered(gamma, sigma):
    rel = reach.fit_error_growth(planted(np.random.default_rng(0), gamma, sigma))
    assert abs(rel.gamma - gamma) < max(3 * rel.gamma_se, 0.05) and rel.gamma_se < 0.2
    assert abs(rel.sigma - sigma) < max(3 * rel.sigma_se, 0.02)
    assert abs(rel.slope("studentized") - (gamma - sigma)) < max(3 * rel.delta_se, 0.05)
    assert rel.slope("distance") == pytest.approx(rel.gamma - 1.0)
    assert (rel.n, rel.series) == (360, 12)


def test_the_slope_is_the_growth_within_a_series_not_across_series():
    """Series far out with larger errors but no growth inside any series: no slope (fixed effects)."""
    rng = np.random.default_rng(1)
    rows = []
    for g, (lo, hi) in enumerate([(1.2, 3.0), (5.0, 20.0), (50.0, 300.0)] * 4):
        r = np.exp(rng.uniform(math.log(lo), math.log(hi), 40))
        rows.append(pd.DataFrame({"study": "s", "series": g, "ratio": r, "spread": 0.01,
                                  "log_error": 0.01 * math.log(hi) ** 2 * rng.standard_normal(40)}))
    rel = reach.fit_error_growth(pd.concat(rows))
    assert abs(rel.gamma) < 3 * rel.gamma_se + 0.1


def test_bad_rows_are_refused_by_name():
    with pytest.raises(ValueError, match="missing \\['spread'\\]"):
        reach.fit_error_growth(pd.DataFrame({"ratio": [2.0], "log_error": [0.1], "series": [0], "study": ["a"]}))
    one = pd.DataFrame({"ratio": [5.0, 5.0], "log_error": [0.1, 0.2], "spread": [0.1, 0.1], "series": 0, "study": "a"})
    with pytest.raises(ValueError, match="spans two extrapolation distances"):
        reach.fit_error_growth(one)


def coverage(rng, relation, *, draws=3000, gamma=1.5, sigma=0.5, n=40, r_max=10.0, r_target=1000.0):
    """Share of targets at ``r_target`` inside the studentized calibrated 90% interval, each draw a
    backtest of ``n`` forecasts at ratios in [1.5, r_max] with errors and spreads planted as above."""
    hit = 0
    for _ in range(draws):
        r = np.exp(rng.uniform(math.log(1.5), math.log(r_max), n))
        d, d_t = reach.distance(r), float(reach.distance(r_target))
        u = 0.02 * d ** gamma * rng.standard_normal(n)
        u_t = 0.02 * d_t ** gamma * rng.standard_normal()
        with reach.using(relation):
            lo, hi, _ = calibrate(1.0, 1.0, 1.0, r_target, u, r, 0.9, spreads=0.01 * d ** sigma,
                                  spread=0.01 * d_t ** sigma)
        hit += lo <= math.exp(u_t) <= hi
    return hit / draws


def test_intervals_beyond_the_tested_range_widen_by_the_relation_and_cover():
    """Scores planted to grow as d^1 (gamma 1.5, spread sigma 0.5): a target 100x beyond the
    largest tested ratio is under-covered when the score is assumed constant, and covered at the
    nominal 90% with the relation fitted on other synthetic studies (the scores' growth taken out
    before the conformal quantile, put back at the target's distance)."""
    rng = np.random.default_rng(2)
    relation = reach.fit_error_growth(planted(rng, 1.5, 0.5, hi=2000.0))
    assert relation.slope("studentized") == pytest.approx(1.0, abs=0.15)
    exact = reach.ErrorGrowth(1.5, 0.0, 0.5, 0.0, 0.0, 0, 0, (), math.nan)
    before, after, true = coverage(rng, None), coverage(rng, relation), coverage(rng, exact)
    assert before < 0.8
    assert 0.875 <= true <= 0.925  # the planted relation: nominal (3000 draws: se 0.005)
    assert 0.88 <= after <= 0.96  # the fitted one (its delta is off by a standard error or so)
    own = coverage(rng, replace(relation, own_spread=True))  # sigma read off each backtest's spreads
    assert 0.88 <= own <= 0.96


def test_no_widening_inside_the_tested_range_and_never_narrowing():
    rel = reach.ErrorGrowth(gamma=0.2, gamma_se=0.1, sigma=0.5, sigma_se=0.1, delta_se=0.1, n=10, series=2,
                            studies=("a",), max_ratio=10.0)
    grow = reach.ErrorGrowth(1.5, 0.1, 0.5, 0.1, 0.1, 10, 2, ("a",), 10.0)
    r10 = [1.5, 3.0, 10.0]
    assert rel.widening(1e4, r10) == 1.0  # delta < 0: left as it was
    assert grow.widening(8.0, r10) == 1.0 and grow.widening(20.0, r10) > 1.0
    # equal scores: the half-width grows from the largest tested distance as d^delta
    assert grow.widening(100.0, [10.0] * 5) == pytest.approx((math.log(100) / math.log(10)) ** 1.0)
    u, r = np.array([0.01, -0.02, 0.03]), np.array([1.5, 3.0, 10.0])
    for rule in ("distance", "studentized"):
        kw = dict(spreads=[0.01] * 3, spread=0.01) if rule == "studentized" else {}
        with reach.using(grow):
            inside = calibrate(1.0, 0.99, 1.01, 5.0, u, r, **kw)
            far = calibrate(1.0, 0.99, 1.01, 100.0, u, r, **kw)
        with reach.using(None):
            inside0 = calibrate(1.0, 0.99, 1.01, 5.0, u, r, **kw)
            far0 = calibrate(1.0, 0.99, 1.01, 100.0, u, r, **kw)
        assert inside == inside0
        scores = np.abs(u) / (np.full(3, 0.01) if rule == "studentized" else reach.distance(r))
        assert far[2] == pytest.approx(far0[2] * grow.widening(100.0, r, rule, scores=scores))
        assert far[2] > far0[2] and far[0] < far0[0] and far[1] > far0[1]


# ---- the public studies (tests/data/scaling_public/reach_errors.csv, benchmarks/forecast_coverage.py --errors)
@pytest.fixture(scope="module")
def public(reference_data):
    return pd.read_csv(reference_data(ERRORS))


def test_the_public_relation_is_the_fit_of_its_documented_rows(public):
    """reach.PUBLIC (what calibrated intervals use by default) is refitted from its rows."""
    rel = reach.fit_error_growth(public)
    assert reach.active() is reach.PUBLIC and reach.PUBLIC.own_spread
    for name in ("gamma", "gamma_se", "sigma", "sigma_se", "delta_se", "max_ratio"):
        assert getattr(reach.PUBLIC, name) == pytest.approx(getattr(rel, name), rel=1e-3), name
    assert (reach.PUBLIC.n, reach.PUBLIC.series, reach.PUBLIC.studies) == (rel.n, rel.series, rel.studies)


def test_left_out_studies_grow_alike(public):
    """Fitted without each study in turn: the log errors grow with ln d (gamma > 0) but slower
    than d itself (gamma < 1: the distance rule's linear growth is conservative there), by two
    standard errors each; the studentized scores grow (delta > 0); and each study with two or more
    series has its own slope within two combined standard errors of the relation fitted without it."""
    for study, rel in reach.leave_one_study_out(public).items():
        assert rel.gamma - 2 * rel.gamma_se > 0 and rel.gamma + 2 * rel.gamma_se < 1, study
        assert rel.slope("studentized") > 0, study
        own = public[public["study"] == study]
        if own["series"].nunique() >= 2:
            alone = reach.fit_error_growth(own)
            gap = alone.slope("studentized") - rel.slope("studentized")
            assert abs(gap) < 2 * math.hypot(alone.delta_se, rel.delta_se), study


def test_left_out_relation_covers_the_far_targets(public):
    """The studentized 90% half-width of each held-out target from its series' backtest scores
    (without the bootstrap band, which only widens it), with and without the relation fitted on
    the other studies: inside the tested ratios nothing changes; beyond them (the OLMo ladder's
    7B and 13B targets, 3.5x and 8.5x past the largest tested ratio) every half-width grows, by at
    most (d_T / ln 2)^delta, and at least 85% of those targets are covered."""
    loso = reach.leave_one_study_out(public)
    inside, far = [], []
    for (study, _), g in public.groupby(["study", "series"]):
        bt, targets = g[g["kind"] == "backtest"], g[g["kind"] == "target"]
        for t in targets.itertuples():
            m = []
            for rel in (None, loso[study]):
                with reach.using(rel):
                    m.append(calibrate(1.0, 1.0, 1.0, t.ratio, bt["log_error"], bt["ratio"], 0.9,
                                       spreads=bt["spread"], spread=t.spread)[2])
            bound = (reach.distance(t.ratio) / math.log(2)) ** loso[study].slope()
            (far if t.ratio > bt["ratio"].max() else inside).append((abs(t.log_error), *m, bound))
    inside, far = np.array(inside), np.array(far)
    assert len(inside) > 50 and np.all(inside[:, 1] == inside[:, 2])
    assert len(far) >= 10 and np.all(far[:, 2] > far[:, 1]) and np.all(far[:, 2] <= far[:, 1] * far[:, 3] * (1 + 1e-9))
    before, after = np.mean(far[:, 0] <= far[:, 1]), np.mean(far[:, 0] <= far[:, 2])
    assert 0.85 <= after and before <= after


def test_own_spread_takes_sigma_from_the_backtest_itself():
    """own_spread: delta = gamma (of the relation) - sigma of this backtest's own spreads, clipped
    to [0, gamma]; a spread growing as d^0.3 in the backtest gives delta = gamma - 0.3."""
    r = np.geomspace(1.5, 20.0, 25)
    s = 0.01 * reach.distance(r) ** 0.3
    assert reach.own_sigma(s, r) == pytest.approx(0.3)
    assert math.isnan(reach.own_sigma(s[:2], r[:2])) and math.isnan(reach.own_sigma([0.1] * 3, [1.2, 1.5, 1.9]))
    rel = reach.ErrorGrowth(0.8, 0.1, 0.6, 0.1, 0.1, 10, 2, ("a",), 10.0, own_spread=True)
    a, a_t = rel.rescale(s, 0.02, 200.0, r, "studentized")
    assert a == pytest.approx(s * reach.distance(r) ** 0.5) and a_t == pytest.approx(0.02 * math.log(200) ** 0.5)
    flat = rel.rescale(s * reach.distance(r) ** 0.7, 0.02, 200.0, r, "studentized")  # sigma 1.0 > gamma: delta 0
    assert flat[1] == 0.02
