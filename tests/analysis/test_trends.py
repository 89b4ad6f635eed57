"""Trends either way (issue 37 item 5) and the report's empty-backtest explanation (item 6):
the log-linear slope of a metric on log10 C with its t-interval (scaling.trend, Table 30's form),
checked against statsmodels OLS and synthetic ground truth, and the report's words for it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interpscale.scaling.trend import FALLS, FLAT, RISES, fit_trend


def _decline(seed=0, n_per=6):
    """The issue's case: concept contribution 0.95-0.97 at C = 3e9 falling to ~0.8 at 9e9 (slope -0.3/decade)."""
    rng = np.random.default_rng(seed)
    C = np.repeat([3e9, 5e9, 9e9], n_per)
    return C, 0.96 - 0.3 * np.log10(C / 3e9) + 0.01 * rng.standard_normal(C.size)


def test_a_known_decline_gets_a_negative_slope_whose_interval_excludes_zero():
    C, m = _decline()
    t = fit_trend(C, m, name="concept_contribution")
    assert t.slope == pytest.approx(-0.3, abs=0.03)  # ground truth, within noise
    assert t.ci[1] < 0 and t.direction == FALLS
    assert t.sentence().startswith("concept_contribution falls with compute: -0.")
    assert "per decade of compute" in t.sentence()


def test_rises_and_no_significant_trend_follow_the_data():
    C, m = _decline()
    assert fit_trend(C, -m).direction == RISES
    rng = np.random.default_rng(1)
    flat = fit_trend(C, 0.5 + 0.01 * rng.standard_normal(C.size), name="concept_loss")
    assert flat.direction == FLAT and flat.ci[0] < 0 < flat.ci[1]
    assert "shows no significant trend" in flat.sentence()


@pytest.mark.parametrize("level", [0.90, 0.95])
def test_slope_interval_p_value_and_r2_match_statsmodels_ols(level):
    sm = pytest.importorskip("statsmodels.api")
    rng = np.random.default_rng(3)
    C = 10 ** rng.uniform(9, 12, 25)
    m = 0.4 + 0.05 * np.log10(C) + 0.05 * rng.standard_normal(25)
    t = fit_trend(C, m, level=level)
    ref = sm.OLS(m, sm.add_constant(np.log10(C))).fit()
    lo, hi = ref.conf_int(alpha=1 - level)[1]
    assert t.slope == pytest.approx(ref.params[1], rel=1e-10)
    assert t.intercept == pytest.approx(ref.params[0], rel=1e-10)
    assert t.se == pytest.approx(ref.bse[1], rel=1e-10)
    assert t.ci == pytest.approx((lo, hi), rel=1e-10)
    assert t.p_value == pytest.approx(ref.pvalues[1], rel=1e-8)
    assert t.r2 == pytest.approx(ref.rsquared, rel=1e-10)
    # the band of the mean: statsmodels' get_prediction at the same points
    x = np.array([1e9, 1e10, 1e12])
    pred = ref.get_prediction(sm.add_constant(np.log10(x))).conf_int(alpha=1 - level)
    assert np.column_stack(t.band(x)) == pytest.approx(pred, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(3, 40), seed=st.integers(0, 2**32 - 1), a=st.floats(-100, 100),
       b=st.floats(0.01, 100), sign=st.sampled_from([-1, 1]))
def test_the_slope_is_equivariant_under_affine_changes_of_the_metric(n, seed, a, b, sign):
    rng = np.random.default_rng(seed)
    C = 10 ** rng.uniform(8, 13, n)
    m = rng.normal(size=n)
    t, u = fit_trend(C, m), fit_trend(C, a + sign * b * m)
    assert u.slope == pytest.approx(sign * b * t.slope, rel=1e-6, abs=1e-9 * max(1.0, abs(a)))
    assert u.p_value == pytest.approx(t.p_value, rel=1e-5, abs=1e-9)
    assert u.direction == {RISES: RISES if sign > 0 else FALLS, FALLS: FALLS if sign > 0 else RISES,
                           FLAT: FLAT}[t.direction]
    lo, hi = t.ci
    assert lo <= t.slope <= hi  # the interval contains its estimate


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="concept_loss: a trend needs at least 3 points with a value, got 2"):
        fit_trend([1e9, 2e9, 3e9], [0.1, np.nan, 0.2], name="concept_loss")
    with pytest.raises(ValueError, match="same compute"):
        fit_trend([1e9] * 4, [0.1, 0.2, 0.3, 0.4])


def _table(metric=None, slices=(1e17, 1e18, 1e19), seed=0):
    """One family, ``slices`` IsoFLOP budgets, an identified joint fit; ``metric(C)``: a concept
    metric column (absent when None)."""
    rng = np.random.default_rng(seed)
    rows = []
    for C in slices:
        p_opt = np.sqrt(C / 6)
        for P in p_opt * np.geomspace(0.1, 10, 7):
            D = C / (6 * P)
            row = {"family": "ar+concept", "slice_flops": C, "flops": C, "params": P, "tokens": D, "annealed": True,
                   "loss": (1.7 + 400 / P**0.34 + 410 / D**0.28) * (1 + 0.002 * rng.standard_normal())}
            if metric is not None:
                row["concept_contribution"] = metric(C) + 0.01 * rng.standard_normal()
            rows.append(row)
    return pd.DataFrame(rows)


def test_report_says_a_falling_metric_falls_where_the_bounded_fit_is_flat(tmp_path):
    from interpscale.analysis.report import write_report

    df = _table(lambda C: 0.96 - 0.05 * np.log10(C / 1e17))  # higher is better, and it falls
    md = write_report(df, tmp_path, figures=False, n_boot=20, backtest=False, source="t.csv").read_text()
    trends = md.split("## Interpretability trends", 1)[1].split("\n## ", 1)[0]
    assert "concept_contribution falls with compute: -0.0" in trends
    assert "the bounded fit (Eq. 29), which assumes the metric improves with compute, cannot follow it" in trends
    assert "| falls (Eq. 29 flat) |" in md.split("## Fit status", 1)[1].split("\n## ", 1)[0]
    assert "no trend" not in trends and "shows a trend" not in md


def test_report_without_metrics_says_not_measured_and_explains_the_empty_backtest(tmp_path):
    from interpscale.analysis.report import write_report

    df = _table(slices=(1e17, 1e18))
    df["concept_contribution"] = np.nan  # the column is there, no row has a value
    md = write_report(df, tmp_path, figures=False, n_boot=20, source="t.csv").read_text()
    assert "Interpretability metrics: not measured (columns" in md
    assert "Interpretability metrics: ;" not in md and "No interpretability metric shows a trend" not in md
    assert "_Not measured: no interpretability metric has a value" in md
    assert ("_No held-out budget could be scored: ar+concept has 2 budgets (IsoFLOP slices); a rollout fits on 3 "
            "budgets and forecasts the next, so it needs at least 4 budgets per family") in md
    md2 = write_report(_table(slices=(1e17, 1e18)), tmp_path / "b", figures=False, n_boot=20,
                       backtest=False).read_text()
    assert "Interpretability metrics: not measured (the table has no interpretability metric column)." in md2
    assert "## Backtest" not in md2  # not asked for: nothing to explain


def test_report_names_a_family_the_backtest_left_out(tmp_path):
    from interpscale.analysis.report import write_report

    df = pd.concat([_table(slices=(1e17, 1e18, 1e19, 1e20)).assign(family="ar"), _table(slices=(1e17, 1e18))],
                   ignore_index=True)
    md = write_report(df, tmp_path, figures=False, n_boot=10, source="t.csv").read_text()
    section = md.split("## Backtest: forecasting held-out budgets", 1)[1].split("\n## ", 1)[0]
    assert "| ar |" in section
    assert "Not backtested: ar+concept (2 budgets); a rollout needs at least 4 budgets per family." in section
