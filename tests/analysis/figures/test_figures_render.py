"""Issue 46.1: figures render what ``scaling.analyse`` computed. The fit calls still made inside
``analysis/figures`` are listed here (each to move into the Analysis); a new one fails the test."""

from __future__ import annotations

import ast
from pathlib import Path

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from interpscale.analysis.figures import extrapolation  # noqa: E402
from interpscale.scaling import fit_trend  # noqa: E402

FIGURES = Path(__file__).resolve().parents[3] / "src" / "interpscale" / "analysis" / "figures"
# calls that compute an analysis (fits, forecasts, calibration, multipliers), by their names
COMPUTING = {"forecast_family", "backtest", "family_fits", "cached_fits", "family_multipliers", "calibrated",
             "analyse", "forecast_from_results", "family_forecasts", "rolling_origin", "extrapolate",
             "compare_approaches", "fit_families"}
NOT_FITS = {"fit_rows", "fit_status"}  # row selection and reading a status: no computation
# (module, function, call) still computed in a figure when no Analysis holds it (issue 46: to move)
REMAINING = {
    ("extrapolation.py", "metric_fit", "fit_bounded"),  # Figs 25/26 without fits: Eq. 29 per metric
    ("extrapolation.py", "draw_trend", "fit_trend"),  # Figs 25/26 without an Analysis's trends
    ("extrapolation.py", "anneal_interp_figure", "fit_trend"),  # Fig 39: trends per anneal state
    ("extrapolation.py", "_family_forecast", "family_fits"),  # Fig 24 without fits
    ("extrapolation.py", "_family_forecast", "forecast_family"),  # Fig 24 at a target the fits did not forecast
    ("isoflop.py", "family_fits", "cached_fits"),  # the figures' shared fits without an Analysis
    ("isoflop.py", "isoflop_summary", "fit_isoflop"),  # Figs 34-38: per estimator, mask rate, anneal state
    ("multiplier.py", "multiplier_figure", "family_multipliers"),  # the multiplier figure without an Analysis
}


def _computing_calls() -> set[tuple[str, str, str]]:
    out = set()
    for path in sorted(FIGURES.glob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef):
                continue
            for call in ast.walk(fn):
                f = getattr(call, "func", None)
                name = getattr(f, "id", None) or getattr(f, "attr", None)
                if isinstance(call, ast.Call) and name and name not in NOT_FITS and (
                        name.startswith("fit_") or name in COMPUTING):
                    out.add((path.name, fn.name, name))
    return out


def test_figures_compute_no_fit_beyond_the_listed_ones():
    found = _computing_calls()
    assert not found - REMAINING, f"a figure computes a fit: take it from the Analysis ({found - REMAINING})"
    assert not REMAINING - found, f"moved into the Analysis: strike from REMAINING ({REMAINING - found})"


def test_a_trend_from_the_analysis_is_drawn_as_it_is(monkeypatch):
    c = np.array([1e18, 1e19, 1e20, 1e21])
    y = np.array([0.50, 0.55, 0.61, 0.64])
    t = fit_trend(c, y, name="concept_contribution")

    def refit(*_a, **_k):
        raise AssertionError("the figure refitted a trend the Analysis holds")

    monkeypatch.setattr(extrapolation, "fit_trend", refit)
    fig, (ax, none) = plt.subplots(1, 2)
    grid = np.geomspace(1e18, 1e21, 20)
    extrapolation.draw_trend(ax, c, y, grid, "concept_contribution", "k", trend=t)
    (line,) = ax.get_lines()
    assert line.get_label() == extrapolation.trend_label(t)
    assert np.allclose(line.get_ydata(), t.predict(line.get_xdata()))
    extrapolation.draw_trend(none, c, y, grid, "concept_contribution", "k", trend="no trend fitted (one compute)")
    assert not none.get_lines()  # the Analysis's reason: no line, and no refit
    plt.close(fig)


def test_figure_39_from_the_analysis_state_trends_is_the_figure_it_fitted(monkeypatch):
    """``scaling.analysis.state_trends`` (what ``analyse`` holds) on the same rows: the same lines,
    labels and slopes as the figure's own fits, with no fit made in the figure."""
    from interpscale.analysis.example_data import example_results
    from interpscale.scaling.analysis import state_trends

    table = example_results()
    own = extrapolation.anneal_interp_figure(table)
    trends = state_trends(table, ["cdlm+concept"])
    monkeypatch.setattr(extrapolation, "fit_trend", lambda *a, **k: pytest.fail("refitted in the figure"))
    given = extrapolation.anneal_interp_figure(table, trends=trends)
    for a, b in zip(own.axes, given.axes, strict=True):
        la, lb = a.get_lines(), b.get_lines()
        assert [ln.get_label() for ln in la] == [ln.get_label() for ln in lb] and len(la) == 2
        for x, y in zip(la, lb):
            assert np.array_equal(x.get_xydata(), y.get_xydata())
    plt.close(own)
    plt.close(given)
