import json
from pathlib import Path

import pandas as pd
import pytest

from interpscale.cli import main
from interpscale.scaling import (
    ForecastLedger, compare_approaches, fit_chinchilla, fit_isoflop, forecast_from_results, inputs_hash,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "src" / "interpscale" / "analysis" / "data" / "example_results.csv"


def test_registry_round_trip(tmp_path):
    reg = ForecastLedger(tmp_path / "sub" / "forecasts.jsonl")
    assert reg.load() == []
    df = pd.DataFrame({"params": [1e8, 2e8], "loss": [3.0, 2.9]})
    h = inputs_hash(df, {"method": "joint"})
    assert h == inputs_hash(df.iloc[::-1], {"method": "joint"})  # row order does not matter
    assert h != inputs_hash(df, {"method": "isoflop"}) and h != inputs_hash(df.assign(loss=[3.0, 2.8]), {"method": "joint"})
    # the paper's Figure 24: joint-law forecast 2.61 for Steerling-8B, observed 2.72
    fc = reg.record(target_compute=7.6e22, predicted=2.61, lo=2.55, hi=2.68, level=0.9, method="joint",
                    inputs_hash=h, family="cdlm+concept", params=8e9, tokens=1.35e12, note="Fig. 24",
                    created="2026-01-01T00:00:00+00:00")
    other = reg.record(target_compute=1e21, predicted=3.0, lo=2.9, hi=3.1, method="isoflop-powerlaw", inputs_hash=h)
    assert [f.id for f in reg.load()] == [fc.id, other.id]
    assert reg.load()[0] == fc and fc.observed is None and fc.covered is None
    done = reg.check(fc.id[:5], 2.72, checked="2026-06-01T00:00:00+00:00")
    assert done.error == pytest.approx(0.11) and done.covered is False
    assert done.rel_error == pytest.approx(0.11 / 2.61)
    again = ForecastLedger(reg.path).get(fc.id)
    assert again == done and again.inputs_hash == h and again.created.startswith("2026-01-01")
    assert "OUTSIDE" in again.summary() and "+0.1100" in again.summary()
    assert ForecastLedger(reg.path).get(other.id).observed is None
    lines = reg.path.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(x)["inputs_hash"] == h for x in lines)
    assert not [p for p in reg.path.parent.iterdir() if p.name.startswith(".")]  # no temp files left
    with pytest.raises(ValueError, match="already recorded"):
        reg.record(target_compute=7.6e22, predicted=2.61, lo=2.55, hi=2.68, level=0.9, method="joint",
                   inputs_hash=h, family="cdlm+concept", params=8e9, tokens=1.35e12, note="Fig. 24",
                   created="2026-01-01T00:00:00+00:00")
    with pytest.raises(ValueError, match="does not contain"):
        reg.record(target_compute=1e21, predicted=3.5, lo=2.9, hi=3.1, method="joint", inputs_hash=h)
    with pytest.raises(ValueError, match="no forecast with id"):
        reg.check("zzz", 1.0)
    reg.path.write_text(reg.path.read_text() + "{not json\n")
    with pytest.raises(ValueError, match="line 3"):
        reg.load()


def test_forecast_cli_record_check_list(tmp_path, capsys):
    reg = tmp_path / "f.jsonl"
    rc = main(["forecast", "record", str(EXAMPLE), "--family", "ar", "--target-compute", "7.6e22",
               "--n-boot", "50", "--registry", str(reg)])
    assert rc == 0, capsys.readouterr().err
    (rec,) = [json.loads(x) for x in reg.read_text().splitlines()]
    assert rec["lo"] < rec["predicted"] < rec["hi"] and len(rec["inputs_hash"]) == 64 and rec["created"]
    assert main(["forecast", "check", rec["id"][:6], "--observed", str(rec["predicted"]), "--registry", str(reg)]) == 0
    assert "inside the interval" in capsys.readouterr().out
    assert main(["forecast", "list", "--registry", str(reg)]) == 0
    assert rec["id"] in capsys.readouterr().out
    # the same inputs hash again; another family changes it
    kw = forecast_from_results(pd.read_csv(EXAMPLE), target_compute=7.6e22, family="ar", n_boot=50)
    assert kw["inputs_hash"] == rec["inputs_hash"]
    assert forecast_from_results(pd.read_csv(EXAMPLE), target_compute=7.6e22, family="cdlm", n_boot=0,
                                 method="isoflop-powerlaw")["inputs_hash"] != rec["inputs_hash"]
    err = capsys.readouterr()
    assert main(["forecast", "record", str(EXAMPLE), "--target-compute", "1e22", "--registry", str(reg)]) == 2
    assert "several families" in capsys.readouterr().err
    assert main(["forecast", "check", "nope", "--observed", "1", "--registry", str(reg)]) == 2
    assert "Traceback" not in err.err


def test_approach_2_vs_3_side_by_side(synth):
    # a Chinchilla surface: the IsoFLOP L*(C) power law misses the irreducible loss, the joint fit does not
    df, truth = synth.chinchilla_grid(seed=0, noise=0.005)
    iso = fit_isoflop(df, n_boot=200)
    ch = fit_chinchilla(df.params, df.tokens, df.loss, grid="coarse", n_boot=200)
    cmp = compare_approaches(iso, ch, [1e20, 7.6e22])
    t = cmp.table.set_index(["compute", "approach"])
    G = (truth["alpha"] * truth["A_P"] / (truth["beta"] * truth["A_D"])) ** (1 / (truth["alpha"] + truth["beta"]))
    a = truth["beta"] / (truth["alpha"] + truth["beta"])
    for C in (1e20, 7.6e22):
        N_true = G * (C / 6) ** a
        assert t.loc[(C, "joint"), "N_opt"] == pytest.approx(N_true, rel=0.15)
        assert t.loc[(C, "isoflop"), "N_opt"] == pytest.approx(N_true, rel=0.3)
        for ap in ("isoflop", "joint"):
            r = t.loc[(C, ap)]
            assert r.N_lo <= r.N_opt <= r.N_hi and r.L_lo <= r.L_opt <= r.L_hi
            assert r.D_opt == pytest.approx(C / (6 * r.N_opt))
    d = cmp.disagreement.set_index("compute")
    # within the data the approaches agree on L*; far beyond it they disagree and are flagged
    assert abs(d.loc[1e20, "L_diff"]) < abs(d.loc[7.6e22, "L_diff"])
    assert d.loc[7.6e22, "disagree"] and d.loc[7.6e22, "L_diff"] < 0  # log-linear under-predicts the loss
    assert "disagree" in cmp.summary() and len(cmp.to_frame()) == 4
    assert cmp.to_dict()["disagreement"][0]["compute"] == 1e20
