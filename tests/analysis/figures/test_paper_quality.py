"""Figures fit for a paper (issue 14): resolution, legible text, axes that span the data,
complete legends off the data, readable colours, honest flat fits, LM-loss curves."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from PIL import Image  # noqa: E402

from interpscale.analysis import figures as F  # noqa: E402
from interpscale.analysis.example_data import example_results  # noqa: E402
from interpscale.analysis.figures._style import (  # noqa: E402
    COLUMN_WIDTH,
    DPI,
    FAMILY_COLORS,
    MIN_FONT_PT,
    contrast_ratio,
    slice_colors,
)


@pytest.fixture(scope="module")
def table():
    return example_results()


def _texts(fig):
    """Every visible text artist of a figure: titles, labels, tick labels, legend entries."""
    fig.canvas.draw()
    return [t for t in fig.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text().strip()]


def test_png_is_200_dpi_and_a_column_wide_figure_is_sharp(tmp_path, table):
    fig = F.extrapolation_figure(table, family="ar", n_boot=5)
    width = fig.get_figwidth()
    assert COLUMN_WIDTH <= width <= COLUMN_WIDTH + 0.3  # one column of a two-column paper
    png, pdf = F.save_figure(fig, tmp_path, "one_column")
    im = Image.open(png)
    assert im.info["dpi"][0] == pytest.approx(DPI, abs=0.5) and DPI >= 200
    assert im.size[0] >= 0.9 * width * DPI  # ~700 px for 3.5 in
    assert pdf.suffix == ".pdf" and pdf.stat().st_size > 1000


def test_no_text_smaller_than_the_minimum(table):
    for fig in (F.isoflop_figure(table, n_boot=5), F.power_law_figure(table, n_boot=5),
                F.interp_scaling_figure(table, n_boot=5)):
        sizes = {round(t.get_fontsize(), 1) for t in _texts(fig)}
        assert min(sizes) >= MIN_FONT_PT, sizes
        plt.close(fig)


def _edge_slice_table():
    """Three slices whose losses fall all the way to the largest size in one of them, so its
    parabola's vertex lies far beyond the measured sizes."""
    rows = []
    for C, shift in ((1e18, 0.0), (3e18, 0.0), (1e19, 3.0)):
        for P in np.geomspace(1e7, 1e8, 5):
            x = np.log(P / 3e7) - shift
            rows.append({"family": "ar", "slice_flops": C, "flops": C, "params": P, "tokens": C / (6 * P),
                         "loss": 3.0 - 0.1 * np.log10(C / 1e18) + 0.05 * x**2, "annealed": True})
    return pd.DataFrame(rows)


def test_isoflop_axes_span_the_data_and_the_legend_is_complete_and_off_the_data():
    df = _edge_slice_table()
    fig = F.isoflop_figure(df, n_boot=5)
    ax = fig.axes[0]
    lo, hi = ax.get_xlim()
    assert df["params"].min() / 1.5 <= lo < df["params"].min()
    assert df["params"].max() < hi <= df["params"].max() * 1.5  # no marker stretches the axis
    legend = ax.get_legend()
    labels = [t.get_text() for t in legend.get_texts()]
    assert {"C=1e18", "C=3e18", "C=1e19", "run", "minimum P*", "minimum beyond range"} <= set(labels)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    assert legend.get_window_extent(renderer).y1 <= ax.get_window_extent(renderer).y0 + 1  # below the panel
    plt.close(fig)


def test_power_law_legend_names_every_family_off_the_data(table):
    fig = F.power_law_figure(table, n_boot=5)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes[:2]:
        labels = " ".join(t.get_text() for t in ax.get_legend().get_texts())
        assert all(name in labels for name in ("AR", "AR+Concept", "CDLM", "CDLM+Concept"))
        assert ax.get_legend().get_window_extent(renderer).y1 <= ax.get_window_extent(renderer).y0 + 1
    plt.close(fig)


def test_colours_are_readable_on_white():
    from interpscale.analysis.figures._style import _EXTRA_COLORS, ESTIMATOR_COLORS
    from interpscale.analysis.figures.isoflop import STATE_COLORS

    for color in [*FAMILY_COLORS.values(), *slice_colors(6), *ESTIMATOR_COLORS.values(), *_EXTRA_COLORS,
                  *STATE_COLORS.values()]:
        assert contrast_ratio(color) >= 3.0, color  # WCAG minimum for graphics; yellow is ~1.3
    assert contrast_ratio("#F0E442") < 2  # the check can fail


def test_a_flat_metric_is_drawn_as_no_trend(table):
    df = table.copy()
    rng = np.random.default_rng(0)
    df["concept_loss"] = np.where(df["family"].str.endswith("+concept"), 0.5 + 0.01 * rng.standard_normal(len(df)),
                                  np.nan)
    fig = F.interp_scaling_figure(df, metrics=("concept_loss", "concept_contribution"), n_boot=5)
    labels = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert any(lab.startswith("no significant trend") for lab in labels)  # the data's word, not "no trend"
    assert not any("R²=-0.00" in lab or "R²=0.00" in lab for lab in labels)
    assert any(lab.startswith("Eq. 29: β=") for lab in labels)  # the metric that moves keeps its numbers
    plt.close(fig)


def test_loss_curves_show_the_lm_loss_and_each_part_in_its_own_row(tmp_path):
    run = tmp_path / "ar_concept-L1d16"
    run.mkdir()
    recs = []
    for s in range(1, 41):
        lm, concept, rec = 5.0 - 0.05 * s, 6.0 - 0.1 * s, 7.0 if s > 5 else 0.2
        recs.append({"step": s, "tokens": 512 * s, "segment": "stable", "lm": lm, "concept": concept, "rec": rec,
                     "indep": 1e-6, "loss": lm + concept + rec})
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    (run / "spec.json").write_text(json.dumps({"family": "ar+concept", "size": "L1d16", "params": 5000}))
    fig = F.loss_curves_figure([run])
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_ylabel() for ax in axes] == ["LM loss (nats)", "Concept loss", "Reconstruction loss",
                                                "Independence loss"]
    top = axes[0].get_lines()[0].get_ydata()
    assert np.allclose(top, [r["lm"] for r in recs])  # the LM loss, not the total
    lo, hi = axes[0].get_ylim()
    assert lo <= min(top) and hi < 6  # not stretched to the total (up to ~18)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["L1d16"]
    plt.close(fig)
