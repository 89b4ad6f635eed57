"""One analysis of a results table (issue 46): ``scaling.analyse`` computes every number once;
``fit families`` writes it and the report renders it, so both show the same numbers."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from interpscale.cli import main
from interpscale.scaling.multiplier import TARGETS, simulate_pair


@pytest.fixture(scope="module")
def bpb_table(tmp_path_factory):
    """A backbone / +Concept pair whose fits run on a bits-per-byte column (``--metric bpb``)."""
    df = simulate_pair(seed=3, names=("ar", "ar+concept"))
    df["bpb"] = df["loss"] / math.log(2) / 3.7  # nats per token -> bits per byte (3.7 bytes per token)
    path = tmp_path_factory.mktemp("table") / "results.csv"
    df.to_csv(path, index=False)
    return path


def _section_cells(md: str) -> dict[tuple[str, str], str]:
    """{(compute, method): "k [lo, hi]"} of the report's Compute multiplier table."""
    section = md.split("## Compute multiplier", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    out = {}
    for ln in lines[2:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        for name, cell in zip(head[2:], cells[2:]):
            out[(cells[0], re.match(r"k \((\w+)\)", name)[1])] = cell
    return out


def test_fit_families_multiplier_csv_and_the_report_show_the_same_numbers(bpb_table, tmp_path):
    from interpscale.analysis.report import report_options, write_report

    assert main(["fit", "families", str(bpb_table), "--out", str(tmp_path / "fit"), "--n-boot", "20",
                 "--grid", "coarse", "--metric", "bpb"]) == 0
    csv = pd.read_csv(tmp_path / "fit" / "multiplier.csv")
    assert set(zip(csv.base, csv.variant)) == {("ar", "ar+concept")} and set(TARGETS) <= set(csv.compute)
    md = write_report(bpb_table, tmp_path / "rep", figures=False,
                      options=report_options(n_boot=20, loss="bpb", backtest=False, grid="coarse")).read_text()
    cells = {k: v for k, v in _section_cells(md).items() if v != "—"}  # "—": a method without k there
    assert len(cells) == len(csv) > 0  # the same rows: the base's slices and the targets, per method
    for r in csv.itertuples():
        cell = cells[(f"{r.compute:.3g}", r.method)]
        if cell.startswith("not determined"):  # a band over MAX_DECADES (or a flagged extrapolation): its band in words
            assert f"(band {r.lo:.2g}–{r.hi:.2g}" in cell
        else:
            assert cell == f"{r.k:.3g} [{r.lo:.3g}, {r.hi:.3g}]"


def test_calibration_widens_the_bands_at_the_targets_only(bpb_table):
    from interpscale.results_table import read_results
    from interpscale.scaling import AnalysisOptions, analyse
    from interpscale.scaling.analysis import family_multipliers, shown_computes

    df = read_results(bpb_table)
    quick = AnalysisOptions(loss="bpb", n_boot=0, grid="coarse", trends=False, multipliers=False, anneals=False)
    assert analyse(df, quick) is analyse(df, AnalysisOptions(**quick.key()))  # cached by the inputs' hash
    kw = dict(annealed=None, loss="bpb", grid="coarse")  # the analysis of the test above: made once, reused
    cal, raw = (family_multipliers(df, calibrate=c, **kw)[("ar", "ar+concept")] for c in (True, False))
    t, raw = shown_computes(cal, df), shown_computes(raw, df)
    assert np.allclose(t["k"], raw["k"], equal_nan=True)
    at = t["compute"].isin(TARGETS).to_numpy()
    assert np.allclose(t.loc[~at, ["lo", "hi"]], raw.loc[~at, ["lo", "hi"]], equal_nan=True)  # the slices: bootstrap bands
    assert ((t.hi - t.lo)[at].to_numpy() >= (raw.hi - raw.lo)[at].to_numpy() - 1e-12).all()


def test_one_family_multipliers():
    """The CLI, the report and the figure read the one computation (no second copy)."""
    import ast

    from interpscale._commands import fit
    from interpscale.analysis.figures import multiplier as figure
    from interpscale.analysis.figures.isoflop import figure_analysis
    from interpscale.scaling import analysis

    assert figure.figure_analysis is figure_analysis and "family_multipliers" not in vars(figure)  # via analyse
    assert "family_multipliers" in vars(analysis)
    tree = ast.parse(Path(fit.__file__).read_text())
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in ("_families", "family_multipliers")):
        called = {c.func.id for c in ast.walk(fn) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
        assert not called & {"fit_multiplier", "fit_families", "backtest"}, fn.name


def test_isoflop_groups_only_when_asked_and_only_for_the_rows_a_table_has(bpb_table):
    """Figures 34-38's IsoFLOP fits per estimator / mask rate / anneal state: off by default (``fit
    families`` does not pay for them), and made only where the table has 2+ groups of rows."""
    from interpscale.analysis.example_data import example_results
    from interpscale.results_table import read_results
    from interpscale.scaling import AnalysisOptions, FitOptions, analyse
    from interpscale.scaling.analysis import isoflop_groups

    quick = dict(n_boot=0, grid="coarse", trends=False, multipliers=False, anneals=False)
    pair = read_results(bpb_table)  # one estimator, annealed rows only
    assert analyse(pair, AnalysisOptions(loss="bpb", **quick)).isoflop_groups == {}
    assert analyse(pair, AnalysisOptions(loss="bpb", isoflop_groups=True, **quick)).isoflop_groups == {}
    groups = isoflop_groups(example_results(), ["ar", "cdlm", "cdlm+concept"], options=FitOptions(n_boot=0))
    assert not [k for k in groups if k[1] == "ar"]  # one estimator, annealed rows only
    assert {k for k in groups if k[1] == "cdlm+concept"} == {("annealed", "cdlm+concept", s) for s in (False, True)}
    est = sorted(k[2] for k in groups if k[:2] == ("estimator", "cdlm"))
    assert est == sorted(["fixed_grid", "fixed_rate", "mdlm_elbo", "per_block"])
    assert len([k for k in groups if k[:2] == ("mask_rate", "cdlm")]) >= 2
    pre, post = groups[("annealed", "cdlm+concept", False)], groups[("annealed", "cdlm+concept", True)]
    assert pre.error is None and post.error is None and len(pre.fit.slices) and len(post.fit.slices)
