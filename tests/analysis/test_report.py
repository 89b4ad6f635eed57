"""report.md / report.html from a results table, and the `interpscale figures|report` commands."""

from __future__ import annotations

import re

import pytest

from interpscale.analysis.example_data import STEERLING_8B, example_results, steerling_actual
from interpscale.analysis.report import load_results, markdown_to_html, write_report
from interpscale.cli import main


@pytest.fixture(scope="module")
def small_table():
    df = example_results()
    return df[df["family"].isin(["ar", "cdlm+concept"])].reset_index(drop=True)


@pytest.fixture(scope="module")
def report_dir(small_table, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    write_report(small_table, out, n_boot=20, target_compute=STEERLING_8B["flops"], actual=steerling_actual())
    return out


def test_report_markdown_has_tables_warnings_and_figures(report_dir):
    md = (report_dir / "report.md").read_text()
    assert "## Compute-optimal scaling (Table 6 layout)" in md
    assert re.search(r"\| ar \| 0\.5\d\d \[-0\.\d+, \+0\.\d+\] \|", md), "Table 6 row for AR with CI offsets"
    assert "## Interpretability scaling (Table 7 layout)" in md and "known_concept_alignment" in md
    assert "(bound)" in md  # e pinned to its natural bound is flagged (§8.3.2)
    assert "## Fit warnings" in md and "natural bound" in md
    assert "| cdlm+concept | 7.6e+22 |" in md and "2.72" in md  # extrapolation against Steerling's loss
    images = re.findall(r"!\[[^\]]*\]\((figures/[^)]+\.png)\)", md)
    assert "figures/fig22_isoflop.png" in images and "figures/fig24_extrapolation.png" in images
    for rel in images:
        assert (report_dir / rel).stat().st_size > 1000
    assert "### Figures not drawn" in md and "Figure 34" in md  # no estimator comparison in this table


def test_report_html_renders_the_same_content(report_dir):
    html = (report_dir / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>")
    assert html.count("<table>") >= 3
    assert '<img src="figures/fig22_isoflop.png"' in html
    assert "<h2>Fit warnings</h2>" in html


def test_markdown_to_html_escapes_and_handles_blocks():
    html = markdown_to_html("# T <x>\n\n| a | b |\n|---|---|\n| 1 | `c<d` |\n\n- **x** item\n\npara _it_\n")
    assert "<h1>T &lt;x&gt;</h1>" in html
    assert "<td><code>c&lt;d</code></td>" in html
    assert "<li><strong>x</strong> item</li>" in html
    assert "<p>para <em>it</em></p>" in html


def test_report_missing_column_is_named(small_table, tmp_path):
    with pytest.raises(ValueError, match=r"write_report.*'slice_flops'"):
        write_report(small_table.drop(columns=["slice_flops"]), tmp_path, figures=False)


def test_load_results_csv_and_parquet(small_table, tmp_path):
    small_table.to_parquet(tmp_path / "r.parquet")
    small_table.to_csv(tmp_path / "r.csv", index=False)
    for name in ("r.parquet", "r.csv"):
        df = load_results(tmp_path / name)
        assert len(df) == len(small_table) and df["annealed"].dtype == bool
    with pytest.raises(ValueError, match="does not exist"):
        load_results(tmp_path / "nope.csv")
    (tmp_path / "r.txt").write_text("x")
    with pytest.raises(ValueError, match="parquet or .csv"):
        load_results(tmp_path / "r.txt")


def test_cli_report_and_figures(small_table, tmp_path, capsys):
    path = tmp_path / "results.csv"
    small_table[small_table["family"] == "ar"].to_csv(path, index=False)
    assert main(["report", str(path), "--out", str(tmp_path / "rep"), "--n-boot", "10", "--no-figures"]) == 0
    assert (tmp_path / "rep" / "report.md").exists() and (tmp_path / "rep" / "report.html").exists()
    assert main(["figures", str(path), "--out", str(tmp_path / "figs"), "--n-boot", "10"]) == 0
    out = capsys.readouterr().out
    assert "Figure 22" in out and "skipped Figure 25" in out
    assert (tmp_path / "figs" / "fig22_isoflop.pdf").exists()
    bad = tmp_path / "bad.csv"
    small_table.drop(columns=["params"]).to_csv(bad, index=False)
    assert main(["figures", str(bad), "--out", str(tmp_path / "x")]) == 2
    assert "'params'" in capsys.readouterr().err
