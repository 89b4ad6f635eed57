"""report.md / report.html from a results table, and the `interpscale figures|report` commands."""

from __future__ import annotations

import math
import re

import pytest

from interpscale.analysis.example_data import example_results, steerling_actual
from interpscale.paper import STEERLING_8B
from interpscale.analysis.report import markdown_to_html, write_report
from interpscale.results_table import read_results as load_results  # the one reader
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


def test_report_prints_prediction_intervals_apart_from_confidence_intervals(report_dir):
    """Extrapolations carry a prediction interval (a new run) wider than the curve's CI (issue 17)."""
    md = (report_dir / "report.md").read_text()
    section = md.split("## Loss extrapolation to the target compute", 1)[1].split("\n## ", 1)[0]
    header = next(line for line in section.splitlines() if line.startswith("| Family"))
    assert "joint PI" in header and "log-linear PI" in header
    row = next(line for line in section.splitlines() if line.startswith("| cdlm+concept |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    col = dict(zip([c.strip() for c in header.strip("|").split("|")], cells))
    est, lo_off, hi_off = (float(v) for v in re.match(r"([\d.]+) \[([-+][\d.]+), ([-+][\d.]+)\]", col["joint"]).groups())
    pi_lo, pi_hi = (float(v) for v in re.match(r"\[([\d.]+), ([\d.]+)\]", col["joint PI"]).groups())
    assert pi_lo <= est + lo_off + 1e-3 and pi_hi >= est + hi_off - 1e-3 and pi_hi - pi_lo > hi_off - lo_off
    t7 = md.split("## Interpretability scaling (Table 7 layout)", 1)[1].split("\n## ", 1)[0]
    assert "pred PI" in t7 and re.search(r"\| \[\d\.\d{3}, \d\.\d{3}\] \|", t7)

def test_report_backtests_held_out_budgets(report_dir):
    md = (report_dir / "report.md").read_text()
    section = md.split("## Backtest: forecasting held-out budgets", 1)[1].split("\n## ", 1)[0]
    # every family, both methods, both schemes, scored against the budgets held out
    for fam in ("ar", "cdlm+concept"):
        for method in ("isoflop-powerlaw", "joint"):
            for scheme in ("rollout", "loo"):
                assert re.search(rf"\| {re.escape(fam)} \| {method} \| L_star \| {scheme} \| [1-9]\d* \| \d+\.\d\d \|", section)
    assert "Leave-one-budget-out forecast shift at C = 7.6e+22" in section


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
    with pytest.raises(ValueError, match=r"write_report.*'params'"):  # (slice_flops can come from flops)
        write_report(small_table.drop(columns=["params"]), tmp_path, figures=False)


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


# ------------------------------------------------------------------ honest statuses (issue 14)
def _synthetic_table(seed: int = 0):
    """Two families on three IsoFLOP slices: ``ar`` with an irreducible loss of 1.7 (L∞ is
    identified), ``ar+concept`` with none (L∞ collapses) and a concept loss that does not move."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows = []
    for fam, E in (("ar", 1.7), ("ar+concept", 0.0)):
        for C in (1e17, 1e18, 1e19):
            p_opt = 0.1 * np.sqrt(C / 6) * 10
            for P in p_opt * np.geomspace(0.1, 10, 7):
                D = C / (6 * P)
                loss = E + 400 / P**0.34 + 410 / D**0.28
                rows.append({"family": fam, "slice_flops": C, "flops": C, "params": P, "tokens": D,
                             "loss": loss * (1 + 0.002 * rng.standard_normal()), "annealed": True,
                             "concept_loss": 0.5 + 0.01 * rng.standard_normal() if fam != "ar" else np.nan})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def synthetic_fits():
    from interpscale.scaling import fit_families

    df = _synthetic_table()
    return df, fit_families(df, n_boot=20, seed=0, grid="coarse")


def test_collapsed_joint_fit_is_not_identified_and_kept_out_of_the_table(synthetic_fits, tmp_path):
    from interpscale.analysis.report import joint_fit_state, scaling_table

    df, fits = synthetic_fits
    assert joint_fit_state(fits["ar"].chinchilla)[0] == "identified"
    status, why = joint_fit_state(fits["ar+concept"].chinchilla)
    assert status == "not identified" and "L∞" in why
    t = scaling_table(fits).set_index("Family")
    assert t.loc["ar+concept", "L∞ (joint, Eq. 27)"] == "not identified"
    assert re.match(r"1\.\d+ \[-0\.\d+, \+0\.\d+\]", t.loc["ar", "L∞ (joint, Eq. 27)"])
    # every exponent names the fit it comes from
    assert all("IsoFLOP" in c or "joint" in c for c in t.columns if c.startswith("α"))
    md = (write_report(df, tmp_path, fits=fits, figures=False, n_boot=20, source="synthetic.csv")).read_text()
    assert "## Failed, unidentified or flat fits" in md
    assert "**ar+concept** joint fit (Eq. 27): not identified" in md
    assert "**ar+concept** concept_loss: bounded fit (Eq. 29) flat" in md
    assert "concept_loss shows no significant trend with compute" in md  # the log-linear slope agrees
    assert "[-0.000, +0.000]" not in md and "+0.000]" not in md.split("## Fit warnings")[0].replace("(bound)", "")
    assert "90% bootstrap percentile intervals (20 replicates)" in md
    assert "Results table: `synthetic.csv`" in md
    assert "| ar+concept |" in md.split("## Fit status")[1].split("##")[0]


def test_ci_cell_never_prints_a_zero_width_interval():
    from interpscale.analysis.report import _ci_cell

    assert _ci_cell(0.5, 0.5, 0.5).startswith("0.500 (zero-width")
    assert _ci_cell(1e-12, 1e-13, 1e-11) == "1e-12 [1e-13, 1e-11]"
    assert _ci_cell(0.5281, 0.5032, 0.5511) == "0.528 [-0.025, +0.023]"
    assert _ci_cell(2.0, 1.99999, 2.00002) == "2.00000 [-0.00001, +0.00002]"
    assert _ci_cell(float("nan"), 0, 1) == "—"


def test_trend_status_flags_flat_metrics():
    from types import SimpleNamespace

    from interpscale.analysis.report import trend_status

    fit = dict(A=1.0, beta=0.3, r2=0.8, converged=True, ci={"A": (0.5, 1.5)}, level=0.9)
    assert trend_status(SimpleNamespace(**fit))[0] == "trend"
    assert trend_status(SimpleNamespace(**{**fit, "A": 0.0}))[0] == "no trend"
    assert trend_status(SimpleNamespace(**{**fit, "beta": 0.001}))[0] == "no trend"
    assert trend_status(SimpleNamespace(**{**fit, "r2": -0.0}))[0] == "no trend"
    assert trend_status(SimpleNamespace(**{**fit, "ci": {"A": (0.0, 1.5)}}))[0] == "no trend"


def test_isoflop_status_flags_an_alpha_p_interval_through_zero():
    from types import SimpleNamespace

    import pandas as pd

    from interpscale.analysis.report import isoflop_fit_state

    sl = pd.DataFrame({"used": [True, True, True], "interior": [True, False, True]})
    fit = dict(slices=sl, converged=True, level=0.9)
    status, why = isoflop_fit_state(SimpleNamespace(**fit, ci={"alpha_P": (0.3, 0.7)}))
    assert status == "ok" and "1 slice(s) with the minimum at an edge size" in why
    status, why = isoflop_fit_state(SimpleNamespace(**fit, ci={"alpha_P": (-0.35, 0.73)}))
    assert status == "uncertain" and "[-0.35, 0.73] includes 0" in why
    assert isoflop_fit_state(None)[0] == "not fitted"


def test_fits_json_and_report_show_the_same_numbers(tmp_path):
    """Fit once, render many (issue 30.4): `interpscale fit` and `interpscale report` on one tiny
    table fit with the same options, so fits.json and report.md print the same estimates and
    intervals; a report given the fits does not refit."""
    import json

    df = _synthetic_table()
    df = df[df["family"] == "ar"]
    path = tmp_path / "results.csv"
    df.to_csv(path, index=False)
    assert main(["fit", "families", str(path), "--out", str(tmp_path / "fit"), "--n-boot", "20"]) == 0
    assert main(["report", str(path), "--out", str(tmp_path / "rep"), "--n-boot", "20", "--no-figures"]) == 0
    t6 = json.loads((tmp_path / "fit" / "fits.json").read_text())["table6"][0]
    md = (tmp_path / "rep" / "report.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| ar |") and "[" in line)
    cells = dict(zip(("alpha_P", "alpha_L", "alpha_D", "alpha_P_joint", "L_inf"), row.split("|")[2:7]))
    for key in ("alpha_P", "alpha_L", "alpha_D", "L_inf"):
        est, lo, hi = (float(v) for v in re.findall(r"[-+]?\d+\.\d+", cells[key])[:3])
        assert est == pytest.approx(t6[key], abs=1e-3)
        assert est + lo == pytest.approx(t6[f"{key}_lo"], abs=2e-3) and est + hi == pytest.approx(t6[f"{key}_hi"], abs=2e-3)


def test_the_answer_comes_first(report_dir):
    md = (report_dir / "report.md").read_text()
    assert md.index("## The answer") < md.index("## Data") < md.index("## Compute-optimal scaling")
    answer = md.split("## The answer", 1)[1].split("\n## ", 1)[0]
    assert "**ar**: α_P = 0.5" in answer and "(IsoFLOP, Eq. 26;" in answer


def test_k_cell_shows_no_number_whose_band_spans_more_than_the_stated_decades():
    from interpscale.analysis.report import MAX_DECADES, k_cell

    assert k_cell(1.3, 1.1, 1.6) == "1.3 [1.1, 1.6]"
    assert k_cell(8.76e-4, 3.65e-6, 1.11).startswith("not determined (band 3.7e-06–1.1")
    assert k_cell(1.0, 0.0, 5.0).startswith("not determined")
    assert k_cell(1.3, 1.1, 1.6, flagged=True).endswith("method flagged)")
    lo = 1.0
    assert k_cell(2.0, lo, lo * 10 ** MAX_DECADES * 0.999)[0].isdigit()


def test_multiplier_section_beyond_the_sweep_says_not_determined(tmp_path):
    """Every k printed in the report has a band within MAX_DECADES decades; wider ones are words."""
    from interpscale.analysis.report import MAX_DECADES
    from interpscale.scaling.multiplier import simulate_pair

    df = simulate_pair(1.3, 0.0, seed=1, sizes_per_slice=5, noise=0.03, names=("ar", "ar+concept"))
    md = write_report(df, tmp_path, figures=False, n_boot=20, target_compute=7.6e22, source="pair.csv",
                      backtest=False).read_text()  # the multiplier section is what is read
    assert "## The answer" in md and "**ar+concept vs ar**" in md.split("## Data")[0]
    cells = re.findall(r"(?<![\w.])(\d[\d.e+-]*) \[(\d[\d.e+-]*), (\d[\d.e+-]*)\]", md.split("## Compute multiplier")[1])
    assert cells
    for _, lo, hi in cells:
        assert math.log10(float(hi) / float(lo)) <= MAX_DECADES


# ------------------------------------------------------------------ report.html in a real browser (issue 45)
_BROWSER = ("/usr/bin/chromium", "/usr/bin/chromedriver")
_LAYOUT = """
const answer = [...document.querySelectorAll('h2')].find(h => h.textContent === 'The answer');
const first = answer && answer.nextElementSibling && answer.nextElementSibling.querySelector('li');
return {width: window.innerWidth, height: window.innerHeight, page: document.documentElement.scrollWidth,
        images: [...document.images].map(i => [i.getAttribute('src'), i.complete && i.naturalWidth > 0,
                                                i.getBoundingClientRect().right]),
        answer: answer ? answer.getBoundingClientRect().top : null,
        first_item: first ? first.getBoundingClientRect().bottom : null,
        first_h2: document.querySelector('h2').textContent};
"""


def _browser(width: int, height: int):
    """Headless Debian Chromium through its ChromeDriver (installed by scripts/ci-system-deps.sh);
    skipped where either is missing, unless INTERPSCALE_REQUIRE_BROWSER is set (CI sets it)."""
    import os

    missing = [p for p in _BROWSER if not os.path.exists(p)]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("selenium")
    if missing:
        if os.environ.get("INTERPSCALE_REQUIRE_BROWSER"):
            pytest.fail(f"browser test: missing {missing}")
        pytest.skip(f"browser test: missing {missing} (scripts/ci-system-deps.sh installs them)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = _BROWSER[0]
    # no network here: background services would only fail to connect (docs of the machine)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--window-size={width},{height}"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(_BROWSER[1]), options=opts)


@pytest.mark.parametrize("width,height", [(1280, 800), (700, 900)])
def test_report_html_in_a_real_browser(report_dir, width, height):
    """report.html opened in headless Chromium: every figure loads, nothing is wider than the window
    (a laptop's and a narrow one), and the answer — its heading and first line — is on the first screen."""
    driver = _browser(width, height)
    try:
        driver.get((report_dir / "report.html").resolve().as_uri())
        got = driver.execute_script(_LAYOUT)
    finally:
        driver.quit()
    assert len(got["images"]) >= 5, got["images"]
    assert [src for src, ok, _ in got["images"] if not ok] == []
    assert got["page"] <= got["width"], f"the page is {got['page']} px wide in a {got['width']} px window"
    assert max(right for *_, right in got["images"]) <= got["width"]
    assert got["first_h2"] == "The answer"
    assert got["answer"] is not None and got["first_item"] is not None
    assert got["first_item"] <= got["height"], got
