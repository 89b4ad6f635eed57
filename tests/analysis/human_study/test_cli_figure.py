"""The `interpscale human-study` command end to end, and Figure 14."""

import json

import matplotlib
import pytest

from interpscale.analysis.figures.human_study import forest_figure
from interpscale.analysis.human_study import simulate_study, type_summary
from interpscale.cli import main


def test_cli_writes_tables_and_forest_plot(tmp_path, capsys):
    s = simulate_study(seed=5, n_rated_concepts=8, n_full_concepts=8, n_records=64)
    s.ratings.to_csv(tmp_path / "ratings.csv", index=False)
    s.phase1.to_csv(tmp_path / "phase1.csv", index=False)
    out = tmp_path / "out"
    rc = main(["human-study", str(tmp_path / "ratings.csv"), "--phase1", str(tmp_path / "phase1.csv"),
               "--out", str(out), "--draws", "150", "--tune", "150", "--chains", "2", "--n-boot", "200",
               "--random", "rater,concept", "--level", "0.9", "--mass-matrix", "diag", "--prior-sd-scale", "0.8"])
    assert rc == 0
    for name in ("human_study.md", "human_study.json", "table4.csv", "fig14_human_study_forest.png",
                 "fig14_human_study_forest.pdf"):
        assert (out / name).stat().st_size > 0, name
    data = json.loads((out / "human_study.json").read_text())
    assert data["bayes"]["n_obs"] == 320 and data["phase1"]["n_responses"] == 303
    assert any(r["analysis"] == "Bayesian cumulative-link model" for r in data["table21"])
    assert any(r["analysis"] == "Cumulative-link mixed model (Laplace)" and "90% CI" in r["result"]
               for r in data["table21"])
    assert set(data["ordinal_mixed"]["random_sd"]) == {"rater", "concept"}
    assert data["bayes"]["diagnostics"]["mass_matrix"] == "diag" and data["bayes"]["priors"]["sd_scale"] == 0.8
    assert data["bayes"]["level"] == 0.9
    md = (out / "human_study.md").read_text()
    assert "Table 4" in md and "App. D.2" in md and "Paired comparison" in md
    assert "Paired comparison probability" in capsys.readouterr().out


def test_cli_bad_input_exits_2(tmp_path, capsys):
    s = simulate_study(seed=5, n_rated_concepts=6, n_full_concepts=6, n_records=48)
    r = s.ratings.copy()
    r.loc[4, "rating"] = 9
    r.to_csv(tmp_path / "bad.csv", index=False)
    rc = main(["human-study", str(tmp_path / "bad.csv"), "--out", str(tmp_path / "o"), "--no-bayes"])
    assert rc == 2 and "row(s) 4 (9)" in capsys.readouterr().err
    s.ratings.to_csv(tmp_path / "ok.csv", index=False)
    rc = main(["human-study", str(tmp_path / "ok.csv"), "--out", str(tmp_path / "o"), "--no-bayes",
               "--random", "rater,taster"])
    assert rc == 2 and "taster" in capsys.readouterr().err
    rc = main(["human-study", str(tmp_path / "ok.csv"), "--out", str(tmp_path / "o"), "--no-bayes",
               "--prior-beta-sd", "-1"])
    assert rc == 2 and "--prior-beta-sd" in capsys.readouterr().err


def test_forest_figure(tmp_path, small_study):
    t = type_summary(small_study.ratings)
    fig = forest_figure(t)
    ax = fig.axes[0]
    assert isinstance(fig, matplotlib.figure.Figure)
    assert [tl.get_text().split(" (")[0] for tl in ax.get_yticklabels()][0] == "LLM label"
    assert any(line.get_linestyle() == ":" for line in ax.get_lines())  # neutral midpoint
    paths = forest_figure(t, out_dir=tmp_path)
    assert {p.suffix for p in paths} == {".png", ".pdf"}
    with pytest.raises(ValueError, match="ci_lo"):
        forest_figure(t.drop(columns="ci_lo"))
