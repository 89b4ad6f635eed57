"""One rule for repeated rows (issue 42 item 4): a row repeating another's run and step, or every
column, is one measurement -- merged, said with how many -- in every path (Python and CLI); distinct
runs with the same values stay distinct. Acceptance: a doubled table gives the same fits as the
table in `fit families`, `fit multiplier`, `forecast record` and the Python API."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from interpscale.cli import main
from interpscale.results_table import merge_repeats, validate_results

from .conftest import PAIR_LAWS as LAWS, eq27_pair


def results(seed=0, slices=(1e18, 1e19, 1e20), sizes=5, noise=0.003) -> pd.DataFrame:
    """A results table of two families of Eq. 27 on IsoFLOP slices (C = 6·P·D), one row per run."""
    return eq27_pair(seed, slices, sizes, noise)


def _files(tmp_path) -> tuple[str, str]:
    t = results()
    t.to_csv(once := tmp_path / "once.csv", index=False)
    pd.concat([t, t]).to_csv(twice := tmp_path / "twice.csv", index=False)
    return str(once), str(twice)


def test_merge_repeats_one_measurement_per_run_and_step_distinct_runs_kept():
    df = validate_results(pd.DataFrame({
        "run_id": ["r1", "r1", "r1", "r2", "r1", "r1"], "step": [10, 10, 10, 10, 10, 20],
        "estimator": ["x", "x", "x", "x", "y", "x"], "mask_rate": [0.5, 0.5, 0.5, 0.5, 0.5, 0.5],
        "params": [1e8] * 6, "tokens": [1e9] * 6, "loss": [3.0, 3.0, 3.2, 3.0, 2.0, 2.9]}),
        where="t.csv", row_offset=2, unit="line")
    merged, pairs, averaged = merge_repeats(df)
    # lines 3 and 4 repeat line 2's run, step and estimator: one measurement, its loss the mean of 3, 3, 3.2;
    # r2 (another run, equal values), estimator y and step 20 are other measurements
    assert pairs == [("line 2", "line 3"), ("line 2", "line 4")] and averaged == 1
    assert merged["run_id"].tolist() == ["r1", "r2", "r1", "r1"]
    assert merged["loss"].tolist() == [pytest.approx(3.2 / 3 + 2.0), 3.0, 2.0, 2.9]
    # without a run and step: only a row equal in every column is a repeat (seeds of one size stay)
    plain = df.drop(columns=["run_id", "step"])
    merged, pairs, averaged = merge_repeats(plain)
    assert pairs == [("line 2", "line 3"), ("line 2", "line 5")] and averaged == 0
    assert merged["loss"].tolist() == [3.0, 3.2, 2.0, 2.9]
    assert merged.attrs["rows"]["where"] == "t.csv"


def test_python_api_doubled_table_gives_the_same_fits():
    from interpscale.scaling import fit_families, fit_isoflop

    t = results()
    twice = pd.concat([t, t], ignore_index=True)
    a, b = (fit_families(x, n_boot=30, grid="coarse") for x in (t, twice))
    for fam in LAWS:
        assert a[fam].isoflop.to_dict() == b[fam].isoflop.to_dict()
        assert a[fam].chinchilla.to_dict() == b[fam].chinchilla.to_dict()
    assert any("30 row(s) repeat another row's run and step" in w and "merged" in w for w in b.warnings)
    one = t[t.family == "a"]
    i, j = (fit_isoflop(x, n_boot=50) for x in (one, pd.concat([one, one], ignore_index=True)))
    assert i.to_dict() | {"warnings": ()} == j.to_dict() | {"warnings": ()}
    assert i.ci["alpha_P"][1] > i.ci["alpha_P"][0]  # no zero-width interval from the repeats
    assert "15 row(s) repeat another row's run and step" in j.warnings[0]


def test_fit_families_and_multiplier_of_a_doubled_table_are_the_tables(tmp_path, capsys):
    once, twice = _files(tmp_path)
    for name, path in (("once", once), ("twice", twice)):
        assert main(["fit", "families", path, "--out", str(tmp_path / name), "--n-boot", "20", "--grid",
                     "coarse"]) == 0
        assert main(["fit", "multiplier", path, "--base", "a", "--variant", "b", "--out",
                     str(tmp_path / f"m{name}"), "--n-boot", "10", "--grid", "coarse"]) == 0
    err = capsys.readouterr().err
    assert f"interpscale fit families: {twice}: 30 row(s) repeat another row's run and step" in err
    assert f"interpscale fit multiplier: {twice}: 30 row(s) repeat" in err
    assert (tmp_path / "once" / "fits.json").read_text() == (tmp_path / "twice" / "fits.json").read_text()
    assert (tmp_path / "monce" / "multiplier.csv").read_text() == (tmp_path / "mtwice" / "multiplier.csv").read_text()


def test_forecast_record_of_a_doubled_table_is_the_tables(tmp_path, capsys):
    once, twice = _files(tmp_path)
    for name, path in (("once", once), ("twice", twice)):  # one registry each: the same forecast has one id
        assert main(["forecast", "record", path, "--only-family", "a", "--target-compute", "1e21", "--method",
                     "joint", "--n-boot", "20", "--grid", "coarse", "--registry", str(tmp_path / f"{name}.jsonl")]) == 0
    assert "30 row(s) repeat another row's run and step" in capsys.readouterr().err
    a, b = (json.loads((tmp_path / f"{name}.jsonl").read_text()) for name in ("once", "twice"))
    # the merged table is the table: the same inputs hash (the id also hashes the creation time,
    # to the second, so two recordings may differ in it on a slow machine)
    assert a["inputs_hash"] == b["inputs_hash"]
    for key in ("predicted", "lo", "hi", "raw_lo", "raw_hi", "method"):
        assert a[key] == b[key], key
