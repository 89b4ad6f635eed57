"""Slices from any table (issue 42 item 2): a table of only `run, family, params, tokens, loss` is
fitted by `fit families` and `fit multiplier`; without a slice column a row's slice is its compute
(the flops column, else 6·P·D) grouped within the slice tolerance; `--slice COL` / `--compute COL`
name the user's columns in every command that reads a results table."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from interpscale.cli import main
from interpscale.paper import SLICE_TOLERANCE
from interpscale.results_table import read_results, with_slices

from .conftest import PAIR_LAWS as LAWS, eq27_pair


def public_like(seed=0, slices=(1e18, 1e19, 1e20), sizes=5, noise=0.003) -> pd.DataFrame:
    """Two families of Eq. 27 on IsoFLOP slices priced C = 6·P·D, in a public table's layout:
    run, family, params, tokens, loss and a budget label (no slice_flops, no flops)."""
    t = eq27_pair(seed, slices, sizes, noise)
    return t.rename(columns={"run_id": "run", "slice_flops": "budget"})[
        ["run", "family", "params", "tokens", "loss", "budget"]]


def test_a_rows_slice_is_its_compute_grouped_within_the_slice_tolerance():
    C = np.array([1e18, 1.1e18, 0.92e18, 2e18, 2.2e18, 1e19, 1.12e19, 0.9e19, 1e20])
    got = with_slices(pd.DataFrame({"flops": C}))["slice_flops"].to_numpy()
    assert len(set(got)) == 4  # 1e18, 2e18, 1e19 and 1e20 (each within +-15% of one target)
    assert np.all(np.abs(C / got - 1) <= SLICE_TOLERANCE)
    assert got[0] == got[1] == got[2] and got[3] == got[4] and got[5] == got[6] == got[7]
    # without a flops column: C = 6·P·D; a table that has a slice column keeps it
    t = with_slices(pd.DataFrame({"params": [1e8, 2e8], "tokens": [2e9, 1e9]}))
    assert t["slice_flops"].tolist() == [1.2e18, 1.2e18]
    keep = pd.DataFrame({"slice_flops": [5.0], "params": [1.0], "tokens": [1.0]})
    assert with_slices(keep) is keep
    # a continuous range is cut at its widest gaps until every group spans at most (1 + tolerance)^2
    wide = np.geomspace(1e18, 1e19, 40)
    s = with_slices(pd.DataFrame({"flops": wide}))["slice_flops"].to_numpy()
    assert np.all(np.abs(wide / s - 1) <= SLICE_TOLERANCE) and len(set(s)) >= 9


def test_slice_and_compute_flags_name_the_users_columns(tmp_path):
    t = public_like()
    t.assign(C=6 * t.params * t.tokens * 1.05).to_csv(path := tmp_path / "t.csv", index=False)
    by_label = read_results(path, columns={"slice_flops": "budget"})  # --slice budget
    assert by_label["slice_flops"].tolist() == t["budget"].tolist()
    by_compute = read_results(path, columns={"flops": "C"})  # --compute C: its own budgets grouped
    assert np.allclose(by_compute["slice_flops"], 1.05 * t["budget"], rtol=1e-9)
    from interpscale.cli import build_parser

    t, o = str(path), str(tmp_path / "o")
    for argv in (["fit", "families", t, "--out", o], ["fit", "multiplier", t, "--base", "a", "--variant", "b",
                 "--out", o], ["forecast", "record", t, "--target-compute", "1e21"], ["figures", t, "--out", o],
                 ["report", t, "--out", o]):
        args = build_parser(argv[0]).parse_args([*argv, "--slice", "budget", "--compute", "C"])
        assert (args.slice, args.compute) == ("budget", "C"), argv


def test_fit_families_and_multiplier_run_on_a_table_of_run_family_params_tokens_loss(tmp_path, capsys):
    """Acceptance: only run, family, params, tokens, loss; the fits are those of the same rows with the
    slice and compute columns written out (C = 6·P·D)."""
    from interpscale.scaling import fit_families

    t = public_like()
    t.drop(columns="budget").to_csv(path := tmp_path / "public.csv", index=False)
    assert main(["fit", "families", str(path), "--run", "run", "--out", str(tmp_path / "f"), "--n-boot", "0",
                 "--grid", "coarse"]) == 0
    got = json.loads((tmp_path / "f" / "fits.json").read_text())
    full = t.rename(columns={"run": "run_id"}).assign(slice_flops=t["budget"], flops=t["budget"])
    ref = fit_families(full.drop(columns="budget"), n_boot=0, grid="coarse")
    for fam in LAWS:
        iso = ref[fam].isoflop
        assert iso.slices["compute"].tolist() == [1e18, 1e19, 1e20]
        assert got["families"][fam]["isoflop"]["alpha_P"] == pytest.approx(iso.power_P.alpha, rel=1e-9)
        assert got["families"][fam]["chinchilla"]["alpha"] == pytest.approx(ref[fam].chinchilla.alpha, rel=1e-6)
    capsys.readouterr()
    assert main(["fit", "multiplier", str(path), "--run", "run", "--base", "a", "--variant", "b", "--out",
                 str(tmp_path / "m"), "--n-boot", "10", "--grid", "coarse"]) == 0
    assert "lacks column" not in capsys.readouterr().err
    k = pd.read_csv(tmp_path / "m" / "multiplier.csv")
    assert len(k) and np.isfinite(k["k"]).any()
    from interpscale.scaling.multiplier import fit_multiplier  # the Python API reads the same table alike

    m = fit_multiplier(t.drop(columns="budget").rename(columns={"run": "run_id"}), "a", "b", n_boot=10, grid="coarse")
    assert np.allclose(m.to_frame()["k"], k["k"], rtol=1e-9, equal_nan=True)
