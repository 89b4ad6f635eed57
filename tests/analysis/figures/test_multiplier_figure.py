"""The multiplier figure draws what is determined and its axes fit what is drawn (issue 45): the
sweep with the data's own k, an extrapolation only from an identified law whose band spans at most
MAX_DECADES decades (else a note), and no axis decades wider than its data and bands."""

from __future__ import annotations

import math
from dataclasses import replace

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from interpscale._markdown import MAX_DECADES  # noqa: E402
from interpscale.analysis.figures.multiplier import PAD_DECADES, PAD_SHARE, REFERENCE_REACH, multiplier_figure  # noqa: E402
from interpscale.scaling import FitStatus  # noqa: E402
from interpscale.scaling.multiplier import TARGETS, fit_multiplier, simulate_pair  # noqa: E402


@pytest.fixture(scope="module")
def pair():
    """A growing pair (k ∝ C^0.05) whose power-law envelopes extrapolate with bands of under a decade."""
    df = simulate_pair(growth=0.05, seed=2, names=("ar", "ar+concept"))
    curve = np.unique(np.r_[df["slice_flops"].unique(), np.geomspace(df["slice_flops"].min(), max(TARGETS), 40)])
    m = fit_multiplier(df, "ar", "ar+concept", computes=curve, methods=("isoflop", "saturating"), n_boot=200,
                       grid="coarse")
    assert m.primary in ("isoflop", "saturating")
    return df, m


def _drawn(ax) -> tuple[np.ndarray, np.ndarray]:
    """The (x, y) data of every line, band and error bar on ``ax`` (axhline/axvline: their data coordinate)."""
    xs, ys = [], []
    for line in ax.get_lines():
        x, y = (np.asarray(v, float) for v in line.get_data())
        if not (len(x) == 2 and x[0] == 0 and x[1] == 1):  # axhline: x in axes coordinates
            xs += list(x)
        if not (len(y) == 2 and y[0] == 0 and y[1] == 1):  # axvline: y in axes coordinates
            ys += list(y)
    for coll in ax.collections:
        for path in coll.get_paths():
            v = path.vertices
            xs += list(v[:, 0])
            ys += list(v[:, 1])
        for seg in getattr(coll, "get_segments", lambda: [])():
            xs += list(np.asarray(seg)[:, 0])
            ys += list(np.asarray(seg)[:, 1])
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    return xs[np.isfinite(xs) & (xs > 0)], ys[np.isfinite(ys) & (ys > 0)]


def _assert_axes_fit(ax, m) -> None:
    """Everything drawn is in view, and each axis spans at most the drawn data's decades (the sweep's
    shaded range among them) plus the margins (and k = 1 when it is within REFERENCE_REACH of the data)."""
    xs, ys = _drawn(ax)
    xs = np.r_[xs, m.sweep_range]
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    assert len(ys) and y0 <= ys.min() * 1.0001 and ys.max() <= y1 * 1.0001, "a drawn value is out of view"
    assert x0 <= xs.min() * 1.0001 and xs.max() <= x1 * 1.0001
    need = lambda lo, hi: math.log10(hi / lo) * (1 + 2 * PAD_SHARE) + 2 * PAD_DECADES + 1e-9  # noqa: E731
    assert math.log10(y1 / y0) <= need(ys.min(), ys.max()), \
        f"y axis {y0:.3g}..{y1:.3g} wider than its data {ys.min():.3g}..{ys.max():.3g}"
    assert math.log10(x1 / x0) <= need(xs.min(), xs.max())
    assert math.log10(y1 / y0) <= need(1.0, 10 ** (2 * MAX_DECADES) * REFERENCE_REACH)


def _beyond(ax, m) -> np.ndarray:
    """x of what is drawn beyond the sweep (apart from the vertical line at the target)."""
    xs, _ = _drawn(ax)
    return xs[(xs > m.sweep_range[1] * 1.01) & ~np.isclose(xs, TARGETS[-1])]


def test_figure_draws_the_sweep_with_its_own_k_and_a_determined_extrapolation(pair):
    df, m = pair
    fig = multiplier_figure(df, multipliers={("ar", "ar+concept"): m})
    ax = fig.axes[0]
    _assert_axes_fit(ax, m)
    lawfree = m.table[(m.table["method"] == "lawfree") & np.isfinite(m.table["k"])]
    assert len(lawfree) >= 3  # the data's own k, with its band, inside the sweep
    xs, _ = _drawn(ax)
    inside = xs[(xs >= m.sweep_range[0] * 0.99) & (xs <= m.sweep_range[1] * 1.01)]
    assert len(np.unique(inside)) >= len(lawfree)
    rows = m.table[(m.table["method"] == m.primary) & np.isclose(m.table["compute"], TARGETS[-1])]
    assert (np.log10(rows["hi"] / rows["lo"]) <= MAX_DECADES).all()  # this pair's bands are narrow: drawn
    assert _beyond(ax, m).max() >= TARGETS[0]
    assert not [t for t in ax.texts if "not determined" in t.get_text()]


def test_a_band_over_the_stated_decades_is_not_drawn_and_the_axis_stays_tight(pair):
    """The issue's quick demo: a right panel whose band spans 1e-19 … 1e19 beyond the sweep."""
    df, m = pair
    t = m.table.copy()
    far = (t["compute"] > 1e15) & (t["method"] != "lawfree")
    t.loc[far, "lo"], t.loc[far, "hi"] = 1e-19, 1e19
    fig = multiplier_figure(df, multipliers={("ar", "ar+concept"): replace(m, table=t)})
    ax = fig.axes[0]
    _assert_axes_fit(ax, m)
    assert ax.get_ylim()[1] < 1e3 and ax.get_ylim()[0] > 1e-3
    assert _beyond(ax, m).max() <= 1e15
    note = " ".join(t.get_text() for t in ax.texts)
    assert "not determined beyond C = " in note and f"> {MAX_DECADES:g} decades" in note


def test_a_flagged_method_is_not_extrapolated(pair):
    df, m = pair
    flagged = {meth: FitStatus("flagged", "L∞ not pinned down") for meth in m.statuses}
    fig = multiplier_figure(df, multipliers={("ar", "ar+concept"): replace(m, statuses=flagged)})
    ax = fig.axes[0]
    _assert_axes_fit(ax, m)
    assert len(_beyond(ax, m)) == 0  # nothing beyond the sweep: no law that may extrapolate
    assert ax.get_xlim()[1] < 1e13  # and the x axis ends with what is drawn (the sweep)
    assert any("fit is flagged" in t.get_text() for t in ax.texts)


def test_no_k_anywhere_shows_the_losses_it_would_be_read_from(pair):
    """The issue's quick demo: no law-free reading and only a flagged joint fit. The panel is not left
    empty: each family's lowest loss per slice, and why k is not determined."""
    df, m = pair
    t = m.table[m.table["method"] != "lawfree"].assign(extrapolated=True)
    flagged = {meth: FitStatus("flagged", "L∞ not pinned down") for meth in m.statuses}
    fig = multiplier_figure(df, multipliers={("ar", "ar+concept"): replace(m, table=t, statuses=flagged)})
    ax = fig.axes[0]
    _assert_axes_fit(ax, m)
    labels = [line.get_label() for line in ax.get_lines()]
    assert {"ar: lowest loss per slice", "ar+concept: lowest loss per slice"} <= set(labels)
    assert all(len(line.get_xdata()) == df["slice_flops"].nunique() for line in ax.get_lines()
               if line.get_label().endswith("lowest loss per slice"))
    assert any("k not determined in this sweep" in t.get_text() for t in ax.texts)
    assert ax.get_ylabel() == "lowest loss in each slice" and ax.get_ylim()[1] / ax.get_ylim()[0] < 10


def test_a_flagged_answer_read_at_one_budget_is_drawn_as_a_point_with_its_band(pair):
    """The demo's cdlm pair: the joint fit answers, flagged, with k at one budget inside the sweep and no
    law-free reading. A line of one point draws nothing, so the panel was empty: now a point and its band."""
    df, m = pair
    t = m.table[(m.table["method"] == m.primary)]
    inside = t[~t["extrapolated"].astype(bool) & ~np.isin(t["compute"], TARGETS)]
    one = inside.iloc[[len(inside) // 2]]
    t = t[t["extrapolated"].astype(bool) | t.index.isin(one.index)]
    flagged = {meth: FitStatus("flagged", "L∞ not pinned down") for meth in m.statuses}
    fig = multiplier_figure(df, multipliers={("ar", "ar+concept"): replace(m, table=t, statuses=flagged)})
    ax = fig.axes[0]
    _assert_axes_fit(ax, m)
    c, k, lo, hi = (float(one[col].iloc[0]) for col in ("compute", "k", "lo", "hi"))
    points = [line for line in ax.get_lines() if line.get_marker() == "D"]
    assert len(points) == 1 and points[0].get_xdata()[0] == c and points[0].get_ydata()[0] == k
    assert any("answers, flagged" in label for label in ax.get_legend_handles_labels()[1])
    _, ys = _drawn(ax)
    assert np.isclose(ys, lo).any() and np.isclose(ys, hi).any()  # its band, as an error bar
