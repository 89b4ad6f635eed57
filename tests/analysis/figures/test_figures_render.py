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
             "forecast_from_results", "family_forecasts", "rolling_origin", "extrapolate", "compare_approaches",
             "fit_families", "isoflop_groups", "metric_trends", "state_trends"}
NOT_FITS = {"fit_rows", "fit_status"}  # row selection and reading a status: no computation
ENTRY = ("isoflop.py", "figure_analysis", "analyse")  # the one place a figure asks scaling.analyse for numbers
# (module, function, call) still computed in a figure when no Analysis holds it: none (issue 46)
REMAINING: set[tuple[str, str, str]] = set()


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
                        name.startswith("fit_") or name in COMPUTING or name == "analyse"):
                    out.add((path.name, fn.name, name))
    return out


def test_figures_compute_no_fit_beyond_the_listed_ones():
    found = _computing_calls() - {ENTRY}
    assert not found - REMAINING, f"a figure computes a fit: take it from the Analysis ({found - REMAINING})"
    assert not REMAINING - found, f"moved into the Analysis: strike from REMAINING ({REMAINING - found})"
    assert ENTRY in _computing_calls()  # figure_analysis: the figures' one call of scaling.analyse


def test_a_trend_from_the_analysis_is_drawn_as_it_is(monkeypatch):
    c = np.array([1e18, 1e19, 1e20, 1e21])
    y = np.array([0.50, 0.55, 0.61, 0.64])
    t = fit_trend(c, y, name="concept_contribution")

    fig, (ax, none) = plt.subplots(1, 2)
    grid = np.geomspace(1e18, 1e21, 20)
    extrapolation.draw_trend(ax, c, y, grid, "concept_contribution", "k", trend=t)
    (line,) = ax.get_lines()
    assert line.get_label() == extrapolation.trend_label(t)
    assert np.allclose(line.get_ydata(), t.predict(line.get_xdata()))
    extrapolation.draw_trend(none, c, y, grid, "concept_contribution", "k", trend="no trend fitted (one compute)")
    assert not none.get_lines()  # the Analysis's reason: no line, and no refit
    extrapolation.draw_trend(none, c, y, grid, "concept_contribution", "k", trend=None)
    assert not none.get_lines()  # no trend in the Analysis: none drawn (the figure fits none)
    plt.close(fig)


def test_figure_39_from_the_analysis_state_trends_is_the_figure_it_fitted(monkeypatch):
    """``scaling.analysis.state_trends`` given (what ``analyse`` holds) on the same rows: the same
    lines, labels and slopes as the figure drawn from its own Analysis, with nothing analysed again."""
    from interpscale.analysis.example_data import example_results
    from interpscale.scaling.analysis import state_trends

    table = example_results()
    own = extrapolation.anneal_interp_figure(table)  # figure_analysis's state trends
    trends = state_trends(table, ["cdlm+concept"])
    monkeypatch.setattr(extrapolation, "figure_analysis", lambda *a, **k: pytest.fail("analysed again"))
    given = extrapolation.anneal_interp_figure(table, trends=trends)
    for a, b in zip(own.axes, given.axes, strict=True):
        la, lb = a.get_lines(), b.get_lines()
        assert [ln.get_label() for ln in la] == [ln.get_label() for ln in lb] and len(la) == 2
        for x, y in zip(la, lb):
            assert np.array_equal(x.get_xydata(), y.get_xydata())
    plt.close(own)
    plt.close(given)


@pytest.fixture(scope="module")
def example():
    from interpscale.analysis.example_data import example_results

    return example_results()


def test_an_analysis_with_the_figures_options_draws_every_figure_without_analysing_again(example, tmp_path,
                                                                                         monkeypatch):
    """What ``interpscale figures`` does: one ``analyse`` with ``figure_options`` (Figure 24's forecast at
    its own target, 100x the largest slice here: not the analysis's ``target_compute``), then render."""
    from interpscale.analysis import figures as F
    from interpscale.analysis.figures import isoflop
    from interpscale.scaling import AnalysisOptions, analyse

    target = {"flops": 3e21}
    a = analyse(example, F.figure_options(example, AnalysisOptions(n_boot=20, anneals=False), target))
    (fam, c_t), = a.options.forecast_targets
    assert fam == "cdlm+concept" and c_t == 3e21 and a.forecast(fam, c_t) is a.forecasts[(fam, c_t)]
    assert {k[0] for k in a.isoflop_groups} == {"estimator", "mask_rate", "annealed"}
    monkeypatch.setattr(isoflop, "analyse", lambda *_a, **_k: pytest.fail("a figure analysed the table again"))
    out = F.render_figures(example, tmp_path, analysis=a, n_boot=20, target=target, formats=("png",))
    want = {"Figure 22", "Figure 23", "Figure 24", "Figure 25", "Figure 26", "Figure 34", "Figure 35",
            "Figure 36", "Figure 37", "Figure 38", "Figure 39"}
    assert want <= {t.split(":")[0] for t in out.drawn}, out.skipped


def test_figure_24_draws_the_analysis_forecast_at_its_target(example, monkeypatch):
    """The forecast line at the target is the Analysis's ``forecasts`` entry, made in ``analyse``."""
    from interpscale.scaling import AnalysisOptions, analyse

    from interpscale.analysis.figures import isoflop

    a = analyse(example, AnalysisOptions(n_boot=20, anneals=False, multipliers=False, isoflop_groups=True,
                                         forecast_targets=(("ar", 1e21),)))
    fc = a.forecasts[("ar", 1e21)]
    monkeypatch.setattr(isoflop, "analyse", lambda *_a, **_k: pytest.fail("a figure analysed the table again"))
    fig = extrapolation.extrapolation_figure(example, family="ar", target={"flops": 1e21}, fits=a, n_boot=20)
    ax = fig.axes[0]
    chosen = [ln for ln in ax.get_lines() if ln.get_label().endswith("(chosen)")]
    assert len(chosen) == 1 and chosen[0].get_label().startswith(f"{fc.chosen} → {fc.best.predicted:.2f}")
    plt.close(fig)


def test_a_family_whose_fits_failed_is_drawn_from_the_analysis():
    """Figure 22 of a family with one slice (no IsoFLOP fit): its slices come from the Analysis's
    ("family", name, None) group, made in analyse, not from a fit in the figure."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from interpscale.analysis.example_data import example_results
    from interpscale.analysis.figures.isoflop import figure_analysis, isoflop_figure

    df = example_results()
    ar = df[df["family"] == "ar"]
    one = ar[ar["slice_flops"] == ar["slice_flops"].min()]
    table = pd.concat([one, df[df["family"] == "ar+concept"]], ignore_index=True)
    an = figure_analysis(table, n_boot=10)
    assert an.fits is None or getattr(an.fits.families.get("ar"), "isoflop", None) is None
    group = an.isoflop_groups[("family", "ar", None)]
    assert len(group.rows) > 0 and set(group.rows["family"]) == {"ar"}
    fig = isoflop_figure(table, fits=an, n_boot=10)
    assert len(fig.axes) >= 2
    plt.close(fig)
