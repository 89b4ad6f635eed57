"""Every figure function on the bundled example table: non-blank, right panels and series, clear errors."""

from __future__ import annotations

import logging
import re

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from interpscale.analysis import figures as F  # noqa: E402
from interpscale.analysis.example_data import example_results, write_example_runs  # noqa: E402
from interpscale.paper import STEERLING_8B  # noqa: E402

BOOT = 20  # bands only need to exist here; the paper's 10,000 belong in reports


@pytest.fixture(scope="module")
def table():
    return example_results()


def pixels(fig) -> np.ndarray:
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(float)


def visible_axes(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


def assert_drawn(fig, n_panels: int, series: list[int]):
    """Non-blank image (pixel variance), ``n_panels`` visible panels, ``series[i]`` labelled
    lines on panel i (parabolas / fitted curves; markers are collections, not lines)."""
    img = pixels(fig)
    assert img.std() > 10.0, "image is blank or nearly uniform"
    assert (img.mean(axis=2) < 128).mean() > 0.002, "almost no dark (ink) pixels"
    axes = visible_axes(fig)
    assert len(axes) == n_panels
    got = [len([ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]) for ax in axes]
    assert got == series
    plt.close(fig)


def test_fig21_overhead_matches_section_8_1():
    sizes = F.overhead.paper_size_params()
    b10, t10 = sizes["10M"]
    b5, t5 = sizes["5B"]
    assert (t10 - b10) / t10 == pytest.approx(0.89, abs=0.01)  # §8.1: ~89% at 10M
    assert (t5 - b5) / t5 == pytest.approx(0.052, abs=0.005)  # Table 23: 6,007M vs 5,694M
    fig = F.concept_overhead_figure()
    assert_drawn(fig, 1, [3])  # trend, presets, Steerling-8B star


def test_fig22_isoflop(table):
    fig = F.isoflop_figure(table, n_boot=BOOT)
    assert [ax.get_title() for ax in fig.axes] == ["AR", "AR+Concept", "CDLM", "CDLM+Concept"]
    # × markers: one per slice per family, drawn as a scatter with marker "x"
    assert_drawn(fig, 4, [4, 4, 4, 4])


def test_fig22_reuses_given_fits(table):
    from interpscale.scaling import fit_families

    fits = fit_families(table, families=["ar", "cdlm"], n_boot=0, grid="coarse")
    fig = F.isoflop_figure(table, fits=fits, families=["ar", "cdlm"], n_boot=BOOT)
    assert_drawn(fig, 2, [4, 4])


def test_fig23_power_laws(table):
    fig = F.power_law_figure(table, n_boot=BOOT)
    assert_drawn(fig, 2, [4, 4])
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert labels[0].startswith("AR (α_P=")


def test_fig24_extrapolation_reproduces_paper_gap(table):
    fig = F.extrapolation_figure(table, n_boot=BOOT)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    joint = float(next(s for s in labels if s.startswith("joint")).split("→")[1].split()[0])
    loglin = float(next(s for s in labels if s.startswith("isoflop-powerlaw")).split("→")[1].split()[0])
    # §8.2.2: joint 2.61 and log-linear 2.25 against Steerling's 2.72
    assert joint == pytest.approx(2.61, abs=0.08)
    assert loglin == pytest.approx(2.25, abs=0.08)
    assert any(s.startswith(f"target {STEERLING_8B['loss']:.2f}") for s in labels)
    assert "90% calibrated PI" in labels and "90% bootstrap PI (faint)" in labels
    assert sum("(chosen)" in s for s in labels) == 1  # one method drawn solid, the others dashed
    styles = {line.get_label(): line.get_linestyle() for line in fig.axes[0].get_lines()}
    assert sorted(v for k, v in styles.items() if "→" in k) == ["-", "--", "--"]
    # the calibrated interval bars are wider than the raw bootstrap ones (faint)
    segs = sorted((np.ptp(seg[:, 1]) for c in fig.axes[0].collections if hasattr(c, "get_segments")
                   for seg in map(np.asarray, c.get_segments()) if len(seg) == 2 and seg[0, 0] == seg[1, 0]),
                  reverse=True)
    assert len(segs) >= 4 and segs[0] > segs[-1]
    assert_drawn(fig, 1, [4])  # three methods and L_inf


def test_fig25_interp_scaling(table):
    fig = F.interp_scaling_figure(table, n_boot=BOOT)
    assert_drawn(fig, 8, [1] * 8)


def test_fig26_interp_extrapolation(table):
    fig = F.interp_extrapolation_figure(table, n_boot=BOOT)
    for ax in fig.axes:  # the fitted curve reaches the target compute
        assert ax.get_lines()[0].get_xdata().max() >= STEERLING_8B["flops"]
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert "90% PI at target" in labels  # a new run's interval, drawn as a bar
    assert_drawn(fig, 4, [1] * 4)


def test_fig34_35_estimators(table):
    assert_drawn(F.estimator_isoflop_figure(table, n_boot=BOOT), 8, [4] * 8)
    assert_drawn(F.estimator_power_law_figure(table, n_boot=BOOT), 2, [4, 4])


def test_fig36_37_mask_rates(table):
    assert_drawn(F.mask_rate_isoflop_figure(table, n_boot=BOOT), 9, [4] * 9)
    fig = F.mask_rate_power_law_figure(table, n_boot=BOOT)
    assert len(fig.legends) == 1 and len(fig.legends[0].get_texts()) == 9
    assert_drawn(fig, 2, [9, 9])


def test_fig38_39_anneal(table):
    assert_drawn(F.anneal_loss_figure(table, n_boot=BOOT), 4, [4, 4, 2, 2])
    fig = F.anneal_interp_figure(table)
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    slopes = [float(re.search(r"([+-][0-9.e+-]+)/decade", s)[1]) for s in labels]
    # Table 30: independence falls with compute in both states, much faster pre-anneal
    assert slopes[0] < slopes[1] < 0 and labels[1].startswith("Annealed: falls:")  # pre-anneal: too noisy to say
    assert_drawn(fig, 4, [2] * 4)


def test_loss_curves(tmp_path):
    runs = write_example_runs(tmp_path)
    fig = F.loss_curves_figure(runs)
    per_family = [len([r for r in runs if r.name.startswith(f + "-")]) for f in ("ar", "ar+concept", "cdlm", "cdlm+concept")]
    assert_drawn(fig, 4, per_family)


def test_loss_curves_bad_jsonl(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 3.0}\nnot json\n')
    with pytest.raises(ValueError, match="line 2"):
        F.loss_curves_figure([tmp_path])


@pytest.mark.parametrize(
    ("func", "column", "figure"),
    [
        (F.isoflop_figure, "params", "Figure 22"),
        (F.power_law_figure, "slice_flops", "Figure 23"),
        (F.extrapolation_figure, "tokens", "Figure 24"),
        (F.interp_scaling_figure, "concept_contribution", "Figure 25"),
        (F.interp_extrapolation_figure, "flops", "Figure 26"),
        (F.estimator_isoflop_figure, "estimator", "Figure 34"),
        (F.estimator_power_law_figure, "loss", "Figure 35"),
        (F.mask_rate_isoflop_figure, "mask_rate", "Figure 36"),
        (F.mask_rate_power_law_figure, "mask_rate", "Figure 37"),
        (F.anneal_loss_figure, "annealed", "Figure 38"),
        (F.anneal_interp_figure, "known_concept_alignment", "Figure 39"),
    ],
)
def test_missing_column_names_column_and_figure(table, func, column, figure):
    with pytest.raises(ValueError, match=rf"{figure}.*'{column}'"):
        func(table.drop(columns=[column]))


def test_render_figures_skips_what_the_table_cannot_support(table, tmp_path, caplog):
    headline = table[table["annealed"] & table["estimator"].isin(["ar_ce", "mdlm_elbo"])]
    headline = headline[headline["family"].isin(["ar", "cdlm+concept"])]
    with caplog.at_level(logging.WARNING, logger="interpscale.analysis.figures"):
        paths = F.render_figures(headline, tmp_path, n_boot=BOOT).paths
    names = sorted({p.stem for p in paths})
    assert names == ["fig21_concept_overhead", "fig22_isoflop", "fig23_power_laws", "fig24_extrapolation",
                     "fig25_interp_scaling", "fig26_interp_extrapolation"]
    assert all(p.stat().st_size > 1000 for p in paths) and {p.suffix for p in paths} == {".png", ".pdf"}
    assert "skipped Figure 34" in caplog.text and "at least two estimators" in caplog.text
    assert "skipped Figure 38" in caplog.text and "pre-anneal" in caplog.text


def test_render_figures_missing_core_column(table, tmp_path):
    with pytest.raises(ValueError, match=r"render_figures.*'loss'"):
        F.render_figures(table.drop(columns=["loss"]), tmp_path)


def test_forest_figure_is_reexported_lazily():
    try:
        import interpscale.analysis.figures.human_study  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError):
            F.forest_figure  # noqa: B018
    else:
        from interpscale.analysis.human_study import simulate_study, type_summary

        fig = F.forest_figure(type_summary(simulate_study(seed=0).ratings, n_boot=50))
        assert pixels(fig).std() > 10.0 and len(visible_axes(fig)) == 1
        plt.close(fig)


def test_loss_curves_one_line_per_segment(tmp_path):
    import json

    run = tmp_path / "r1"
    run.mkdir()
    recs = [{"step": s, "loss": 5.0 - 0.01 * s, "segment": "stable", "tokens": 100 * s} for s in range(1, 50)]
    recs += [{"step": s, "loss": 4.4 - 0.02 * (s - 40), "segment": "anneal@40", "tokens": 100 * s} for s in range(41, 50)]
    recs.append({"step": 50, "val_loss": 4.0})  # a record without a training loss is skipped
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    (run / "spec.json").write_text(json.dumps({"family": "cdlm", "size": "tiny", "params": 1000}))
    m = F.read_metrics(run)
    assert m["loss"].size == 58 and set(m["segment"]) == {"stable", "anneal@40"}
    fig = F.loss_curves_figure([run])
    assert len(fig.axes[0].get_lines()) == 2 and fig.axes[0].get_title() == "CDLM"
    assert_drawn(fig, 1, [1])


def test_render_figures_on_a_sweep_shaped_table(table, tmp_path):
    """A table like `interpscale sweep collect` writes: several stable checkpoints per run at
    40% and 80% of the budget (annealed=False, off-slice compute) next to each annealed one."""
    import pandas as pd

    final = table[table["annealed"] & table["estimator"].isin(["ar_ce", "mdlm_elbo"])].copy()
    final["checkpoint"] = "final.pt"
    stable = []
    for frac, bump in ((0.4, 0.25), (0.8, 0.08)):
        s = final.copy()
        s["annealed"], s["checkpoint"] = False, f"step{frac}.pt"
        s[["flops", "tokens"]] *= frac
        s["step"] = (s["step"] * frac).astype(int)
        s["loss"] += bump
        stable.append(s)
    sweep = pd.concat([final, *stable], ignore_index=True)
    drawn = F.render_figures(sweep, tmp_path, n_boot=BOOT)
    titles = " ".join(drawn.drawn)
    for fig in ("Figure 22", "Figure 23", "Figure 24", "Figure 25", "Figure 38", "Figure 39"):
        assert fig in titles, drawn.skipped
    # the ±15% slice window keeps the 40%/80% checkpoints out of the annealed IsoFLOP fits
    summ = F.isoflop.isoflop_summary(sweep[sweep["family"] == "ar"], n_boot=0)
    assert all(len(s.params) == len(final[(final["family"] == "ar") & (final["slice_flops"] == s.compute)])
               for s in summ.slices)


def test_isoflop_figure_draws_slices_even_without_power_law(table):
    """Slices whose minimum sits at the edge of the sampled sizes cannot enter Eq. 26; the
    parabolas are still drawn, Figure 23 then says why it cannot be drawn."""
    ar = table[(table["family"] == "ar") & table["annealed"]]
    small = ar.sort_values("params", ascending=False).groupby("slice_flops").head(3)  # 3 largest sizes
    fig = F.isoflop_figure(small, n_boot=BOOT)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert any("no power law" in t for t in texts)
    assert len(fig.axes[0].collections) >= small["slice_flops"].nunique()  # every slice's points
    plt.close(fig)
    with pytest.raises(ValueError, match=r"Figure 23.*no compute-optimal power law"):
        F.power_law_figure(small, n_boot=BOOT)


def test_log_axis_of_a_decade_and_a_bit_labels_only_powers_of_ten():
    # the demo-zoo CRATE panel spans ~1.3 decades: matplotlib labelled every minor tick there
    import matplotlib.pyplot as plt

    from interpscale.analysis.figures._style import compact_log_ticks

    fig, ax = plt.subplots()
    ax.set_xscale("log")
    ax.set_xlim(1.5e3, 3.2e4)
    compact_log_ticks(ax, "x")
    fig.canvas.draw()
    minor = [t.get_text() for t in ax.get_xticklabels(minor=True)]
    major = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    plt.close(fig)
    assert all(m == "" for m in minor) and major


def test_a_registered_figure_is_drawn_and_a_failing_one_skipped(table, tmp_path):
    """Issue 34.4: figures are entries of the one Registry; a user's figure is one register_figure."""
    import matplotlib.pyplot as plt

    def mine(results, fits, n_boot, target):
        fig, ax = plt.subplots()
        ax.plot(results["params"], results["loss"], ".")
        return fig

    def never(results, fits, n_boot, target):
        raise ValueError("needs a column this table lacks")

    F.register_figure(F.FigureSpec("my_loss_vs_params", "My figure", mine))
    F.register_figure(F.FigureSpec("my_never", "My impossible figure", never))
    try:
        drawn = F.render_figures(table, tmp_path, n_boot=BOOT, formats=("png",))
    finally:
        F.FIGURES.pop("my_loss_vs_params"), F.FIGURES.pop("my_never")
    assert (tmp_path / "my_loss_vs_params.png").exists() and "My figure" in drawn.drawn
    assert drawn.skipped["My impossible figure"] == "needs a column this table lacks"
    assert list(F.FIGURES)[0] == "fig21_concept_overhead"
